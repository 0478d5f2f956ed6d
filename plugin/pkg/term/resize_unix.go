//go:build !windows

package term

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// notifyResize delivers SIGWINCH, which the kernel sends when the terminal is resized, until ctx
// ends.
func notifyResize(ctx context.Context) <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	context.AfterFunc(ctx, func() { signal.Stop(ch) })
	return ch
}
