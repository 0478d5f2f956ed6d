package term

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"k8s.io/client-go/tools/remotecommand"
)

// openPTY returns both ends of a new pseudo-terminal of the given size.
func openPTY(t *testing.T, cols, rows uint16) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: cols, Rows: rows}); err != nil {
		t.Fatal(err)
	}
	return ptmx, tty
}

func isRaw(t *testing.T, f *os.File) bool {
	t.Helper()
	termios, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return termios.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) == 0
}

func TestSafeRestoresTerminal(t *testing.T) {
	_, tty := openPTY(t, 80, 24)
	if !IsTerminal(tty) {
		t.Fatal("IsTerminal(pty) = false")
	}
	if isRaw(t, tty) {
		t.Fatal("a new pty is already raw")
	}
	var rawInside bool
	err := TTY{In: tty, Out: tty}.Safe(func() error {
		rawInside = isRaw(t, tty)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rawInside {
		t.Error("terminal not raw while fn ran")
	}
	if isRaw(t, tty) {
		t.Error("terminal still raw after Safe")
	}

	func() {
		defer func() { _ = recover() }()
		_ = TTY{In: tty}.Safe(func() error { panic("boom") })
	}()
	if isRaw(t, tty) {
		t.Error("terminal still raw after fn panicked")
	}
}

func TestMonitorSize(t *testing.T) {
	ptmx, tty := openPTY(t, 80, 24)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := TTY{In: tty, Out: tty}.MonitorSize(ctx)
	if q == nil {
		t.Fatal("MonitorSize on a pty = nil")
	}
	next := func() *remotecommand.TerminalSize {
		ch := make(chan *remotecommand.TerminalSize, 1)
		go func() { ch <- q.Next() }()
		select {
		case s := <-ch:
			return s
		case <-time.After(5 * time.Second):
			t.Fatal("Next did not return")
			return nil
		}
	}

	if got, want := next(), (remotecommand.TerminalSize{Width: 80, Height: 24}); got == nil || *got != want {
		t.Errorf("initial size %v, want %v", got, want)
	}

	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 132, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	// The kernel signals the terminal's foreground process group, which the test is not; send
	// the signal ourselves.
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	if got, want := next(), (remotecommand.TerminalSize{Width: 132, Height: 40}); got == nil || *got != want {
		t.Errorf("size after resize %v, want %v", got, want)
	}

	cancel()
	if got := next(); got != nil {
		t.Errorf("Next after stop = %v, want nil", got)
	}
}
