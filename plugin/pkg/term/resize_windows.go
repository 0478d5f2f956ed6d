package term

import (
	"context"
	"os"
)

// notifyResize never fires on Windows, which has no SIGWINCH: the remote terminal keeps the
// size it had at the start.
func notifyResize(context.Context) <-chan os.Signal {
	return nil
}
