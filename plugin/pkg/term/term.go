// Package term puts the user's terminal in raw mode for an interactive exec and reports its size
// as it changes. It does for kubectl-sandbox what k8s.io/kubectl/pkg/util/term does for kubectl,
// on golang.org/x/term.
package term

import (
	"context"
	"fmt"
	"io"

	xterm "golang.org/x/term"

	"k8s.io/client-go/tools/remotecommand"
)

// fder is what *os.File offers and a terminal needs.
type fder interface {
	Fd() uintptr
}

// IsTerminal reports whether v (a reader or writer) is a terminal, such as os.Stdin of an
// interactive shell.
func IsTerminal(v any) bool {
	_, ok := terminalFd(v)
	return ok
}

func terminalFd(v any) (int, bool) {
	f, ok := v.(fder)
	if !ok {
		return 0, false
	}
	fd := int(f.Fd())
	return fd, xterm.IsTerminal(fd)
}

// TTY is the user's side of an interactive session.
type TTY struct {
	// In is put in raw mode, so that keys (Ctrl-C included) go to the remote command as typed.
	In io.Reader
	// Out is where the terminal size is read from (In if Out is not a terminal).
	Out io.Writer
}

// Safe runs fn with In in raw mode and restores the terminal when fn returns or panics. If In
// is not a terminal it only runs fn.
func (t TTY) Safe(fn func() error) error {
	fd, ok := terminalFd(t.In)
	if !ok {
		return fn()
	}
	state, err := xterm.MakeRaw(fd)
	if err != nil {
		return fmt.Errorf("put terminal in raw mode: %w", err)
	}
	defer func() { _ = xterm.Restore(fd, state) }()
	return fn()
}

// GetSize is the current size of the terminal, or nil if there is none.
func (t TTY) GetSize() *remotecommand.TerminalSize {
	fd, ok := t.sizeFd()
	if !ok {
		return nil
	}
	return getSize(fd)
}

func (t TTY) sizeFd() (int, bool) {
	if fd, ok := terminalFd(t.Out); ok {
		return fd, true
	}
	return terminalFd(t.In)
}

func getSize(fd int) *remotecommand.TerminalSize {
	width, height, err := xterm.GetSize(fd)
	if err != nil || width <= 0 || height <= 0 {
		return nil
	}
	return &remotecommand.TerminalSize{Width: uint16(width), Height: uint16(height)}
}

// MonitorSize returns a queue that yields the terminal's current size, then its new size after
// each resize (SIGWINCH), until ctx ends. It returns nil if there is no terminal. The goroutine
// it starts ends with ctx.
func (t TTY) MonitorSize(ctx context.Context) remotecommand.TerminalSizeQueue {
	fd, ok := t.sizeFd()
	if !ok {
		return nil
	}
	// One slot: a consumer only ever needs the latest size.
	q := &sizeQueue{sizes: make(chan remotecommand.TerminalSize, 1), done: ctx.Done()}
	if size := getSize(fd); size != nil {
		q.sizes <- *size
	}
	resized := notifyResize(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-resized:
				if size := getSize(fd); size != nil {
					q.replace(*size)
				}
			}
		}
	}()
	return q
}

// sizeQueue implements remotecommand.TerminalSizeQueue.
type sizeQueue struct {
	sizes chan remotecommand.TerminalSize
	done  <-chan struct{}
}

var _ remotecommand.TerminalSizeQueue = &sizeQueue{}

// replace queues size in place of a size not yet taken. Only the monitoring goroutine sends, so
// after the drain the send cannot block.
func (q *sizeQueue) replace(size remotecommand.TerminalSize) {
	select {
	case <-q.sizes:
	default:
	}
	q.sizes <- size
}

// Next implements remotecommand.TerminalSizeQueue: it blocks until the size changes and returns
// nil once monitoring has stopped.
func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case size := <-q.sizes:
		return &size
	case <-q.done:
		return nil
	}
}

// Run runs a streaming session in raw mode with the terminal's size sent as it changes: run
// gets the queue of sizes, which ends with ctx or when run returns. It is how both exec -t and
// attach -t drive a remote terminal.
func (t TTY) Run(ctx context.Context, run func(remotecommand.TerminalSizeQueue) error) error {
	sizeCtx, stopSizes := context.WithCancel(ctx)
	defer stopSizes()
	sizeQueue := t.MonitorSize(sizeCtx)
	return t.Safe(func() error { return run(sizeQueue) })
}

// Wanted reports whether a session gets a terminal, as kubectl exec and attach decide: only
// with both -i and -t, and with a terminal as in. Asked for one without a terminal as in, it
// says why on errOut unless quiet.
func Wanted(tty, stdin bool, in io.Reader, errOut io.Writer, quiet bool) bool {
	if !tty || !stdin {
		return false
	}
	if !IsTerminal(in) {
		if !quiet {
			fmt.Fprintln(errOut, "Unable to use a TTY - input is not a terminal or the right kind of file")
		}
		return false
	}
	return true
}
