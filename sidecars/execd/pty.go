package execd

import (
	"fmt"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair. The controlling side is returned as a
// pollable, non-blocking *os.File: pty.Open hands it over in blocking mode
// (creack/pty calls Fd, which switches files to blocking), and a blocking
// Read cannot be interrupted by Close, which a session needs when a
// background process keeps the terminal open after the command exited.
func openPTY() (ptmx, tty *os.File, err error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Dup(int(master.Fd()))
	_ = master.Close()
	if err != nil {
		_ = tty.Close()
		return nil, nil, fmt.Errorf("duplicating pty: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		_ = tty.Close()
		return nil, nil, fmt.Errorf("making pty non-blocking: %w", err)
	}
	// NewFile registers a non-blocking descriptor with the runtime poller.
	return os.NewFile(uintptr(fd), "/dev/ptmx"), tty, nil
}

// setWinsize resizes the terminal. It goes through SyscallConn because
// pty.Setsize would call Fd and put ptmx back into blocking mode.
func setWinsize(ptmx *os.File, size *pty.Winsize) error {
	return control(ptmx, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	})
}

// sendEOF tells the program reading the terminal that input ended, the way
// typing ^D does. A terminal has no half-close, so this is the only way to
// pass on the client closing stdin. In raw mode (an editor, a shell's line
// editor) the EOF character is just a key press, so nothing is sent then.
func sendEOF(ptmx *os.File) error {
	var eof byte
	err := control(ptmx, func(fd int) error {
		// On Linux the terminal settings read through the controlling side
		// are those of the terminal side.
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return err
		}
		if t.Lflag&unix.ICANON != 0 {
			eof = t.Cc[unix.VEOF]
		}
		return nil
	})
	if err != nil || eof == 0 {
		return err
	}
	_, err = ptmx.Write([]byte{eof})
	return err
}

func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var fnErr error
	if err := rc.Control(func(fd uintptr) { fnErr = fn(int(fd)) }); err != nil {
		return err
	}
	return fnErr
}
