package pool

import (
	"errors"
	"sync/atomic"
	"testing"
)

func TestSlowStartBatch(t *testing.T) {
	var calls atomic.Int32
	ok := func() error { calls.Add(1); return nil }
	if done, err := slowStartBatch(100, ok); done != 100 || err != nil || calls.Load() != 100 {
		t.Errorf("all succeed: %d done, %v, %d calls; want 100, nil, 100", done, err, calls.Load())
	}

	// Every create refused: one request, not a hundred.
	calls.Store(0)
	refused := errors.New("refused")
	if done, err := slowStartBatch(100, func() error { calls.Add(1); return refused }); done != 0 || !errors.Is(err, refused) || calls.Load() != 1 {
		t.Errorf("all refused: %d done, %v, %d calls; want 0, refused, 1", done, err, calls.Load())
	}

	// A quota that admits 5: batches of 1, 2, 4 (where it runs out) and no more.
	calls.Store(0)
	var admitted atomic.Int32
	quota := func() error {
		calls.Add(1)
		if admitted.Add(1) > 5 {
			return refused
		}
		return nil
	}
	if done, err := slowStartBatch(100, quota); done != 5 || !errors.Is(err, refused) || calls.Load() != 7 {
		t.Errorf("quota of 5: %d done, %v, %d calls; want 5, refused, 7", done, err, calls.Load())
	}

	if done, err := slowStartBatch(0, ok); done != 0 || err != nil {
		t.Errorf("none: %d, %v", done, err)
	}
}
