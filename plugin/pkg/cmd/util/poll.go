package util

import (
	"context"
	"time"
)

// The backoff of Poll: a sandbox usually gets ready, or goes away, within a second or two, so
// the first checks come quickly; after that one GET a second is plenty for a human waiting.
const (
	pollInitialDelay = 100 * time.Millisecond
	pollMaxDelay     = time.Second
)

// Poll calls condition at once and then with a growing delay until it reports done, returns an
// error, or ctx ends (then it returns ctx.Err()). Callers bound it with a context deadline.
//
// It only needs GET, which every server serves, where a watch would depend on the server's watch
// support for a virtual resource.
func Poll(ctx context.Context, condition func(context.Context) (bool, error)) error {
	delay := pollInitialDelay
	for {
		done, err := condition(ctx)
		if err != nil || done {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, pollMaxDelay)
	}
}
