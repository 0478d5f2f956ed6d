package execd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/internal/reaper"
)

const (
	// defaultOutputDrainTimeout bounds how long a session keeps copying
	// output after its command exited. Output normally ends the moment the
	// command exits, but a background process started by the command ("srv &")
	// inherits stdout and may hold it open forever; the session must still
	// end, as it does with kubelet.
	defaultOutputDrainTimeout = 2 * time.Second

	// defaultInitialSizeWait bounds how long a tty session waits for the
	// client's first terminal size before starting the command. Clients that
	// have a terminal send it right after the streams are set up; starting
	// with the real size means programs like "stty size" or a shell's first
	// prompt see it, instead of a 0x0 terminal resized a moment later.
	defaultInitialSizeWait = 500 * time.Millisecond
)

// Command-not-found and not-executable exit codes, as a POSIX shell reports
// them, so "kubectl exec sandbox -- nosuchcmd" behaves like typing it.
const (
	exitCodeNotFound      = 127
	exitCodeNotExecutable = 126
)

// Executor runs exec sessions as children of execd, in execd's environment
// and working directory. It implements remotecommand.Executor.
type Executor struct {
	// reaper, when execd is PID 1, must know every child execd waits for.
	reaper *reaper.Reaper

	outputDrainTimeout time.Duration
	initialSizeWait    time.Duration

	// stdinCopies tracks stdin copiers that may outlive ExecInContainer:
	// they block reading the client's stdin stream, which only the
	// connection owner (ServeExec) can close, right after we return.
	stdinCopies sync.WaitGroup
}

var _ remotecommand.Executor = (*Executor)(nil)

// NewExecutor returns an Executor. r may be nil when execd is not PID 1.
func NewExecutor(r *reaper.Reaper) *Executor {
	return &Executor{
		reaper:             r,
		outputDrainTimeout: defaultOutputDrainTimeout,
		initialSizeWait:    defaultInitialSizeWait,
	}
}

// Wait blocks until the stdin copiers of finished sessions have returned.
// Call it after the HTTP handlers have returned (their connections are closed
// then, which ends the copiers).
func (e *Executor) Wait() {
	e.stdinCopies.Wait()
}

// ExecInContainer runs cmd and streams its stdio until it exits. The pod,
// uid and container names are meaningless here: execd serves exactly one
// container, its own. When ctx is cancelled (the client went away) or timeout
// elapses, the command's whole process group is killed.
//
// A non-zero exit is returned as utilexec.CodeExitError, which ServeExec
// reports as exit code to the client.
func (e *Executor) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	if len(cmd) == 0 {
		return errors.New("no command given")
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// The streams are closed once all output is copied, so the client sees
	// EOF promptly rather than when the connection closes.
	defer closeIfSet(out)
	defer closeIfSet(errw)
	if tty {
		return e.execTTY(ctx, cmd, in, out, resize)
	}
	return e.execPipes(ctx, cmd, in, out, errw)
}

func (e *Executor) execPipes(ctx context.Context, argv []string, in io.Reader, out, errw io.WriteCloser) error {
	c := exec.Command(argv[0], argv[1:]...)
	sessionOptionsFrom(ctx).apply(c)
	// A process group of its own lets us kill everything the command
	// started, not just its first process.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	// Pipes are set up by hand rather than by giving os/exec the streams:
	// os/exec's Wait would then also wait for its stdin copier, which blocks
	// until the client closes stdin, even after the command exited.
	var childEnds, allEnds []*os.File
	closeAll := func(files []*os.File) {
		for _, f := range files {
			_ = f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			allEnds = append(allEnds, r, w) // some get closed twice: harmless
		}
		return r, w, err
	}
	var stdinW *os.File
	var outputs []outputCopy
	if in != nil {
		r, w, err := pipe()
		if err != nil {
			closeAll(allEnds)
			return err
		}
		c.Stdin, stdinW = r, w
		childEnds = append(childEnds, r)
	}
	for _, dst := range []struct {
		w      io.Writer
		target *io.Writer
	}{{out, &c.Stdout}, {errw, &c.Stderr}} {
		if dst.w == nil {
			continue // os/exec connects an unset stream to /dev/null
		}
		r, w, err := pipe()
		if err != nil {
			closeAll(allEnds)
			return err
		}
		*dst.target = w
		childEnds = append(childEnds, w)
		outputs = append(outputs, outputCopy{src: r, dst: dst.w})
	}

	pid, err := e.reaper.Start(func() (int, error) {
		if err := c.Start(); err != nil {
			return 0, err
		}
		return c.Process.Pid, nil
	})
	// Our copies of the child's ends must go, or we never see EOF on its
	// output and it never sees EOF on its input.
	closeAll(childEnds)
	if err != nil {
		closeAll(allEnds)
		return startError(argv[0], err, firstSet(errw, out), "\n")
	}
	klog.V(4).InfoS("Exec session started", "command", argv[0], "pid", pid, "tty", false)

	if stdinW != nil {
		e.copyStdin(stdinW, in, func() error { return stdinW.Close() })
	}
	waitErr := e.supervise(ctx, c, pid, outputs, func() {
		if stdinW != nil {
			// Unblocks a stdin copier stuck writing to a command that
			// exited without reading its input.
			_ = stdinW.Close()
		}
	})
	return exitError(waitErr)
}

func (e *Executor) execTTY(ctx context.Context, argv []string, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	// Start with the client's terminal size if it sends one soon.
	var size *pty.Winsize
	if resize != nil {
		timer := time.NewTimer(e.initialSizeWait)
		select {
		case s, ok := <-resize:
			if ok {
				size = &pty.Winsize{Rows: s.Height, Cols: s.Width}
			} else {
				resize = nil
			}
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		timer.Stop()
	}

	ptmx, tty, err := openPTY()
	if err != nil {
		return fmt.Errorf("allocating a terminal: %w", err)
	}
	defer func() { _ = ptmx.Close() }()
	if size != nil {
		if err := setWinsize(ptmx, size); err != nil {
			_ = tty.Close()
			return fmt.Errorf("setting terminal size: %w", err)
		}
	}

	c := exec.Command(argv[0], argv[1:]...)
	sessionOptionsFrom(ctx).apply(c)
	c.Stdin, c.Stdout, c.Stderr = tty, tty, tty
	// A new session whose controlling terminal is the pty, as a login shell
	// has: job control and ^C work, and the session id doubles as process
	// group id for killing everything the command started.
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	pid, err := e.reaper.Start(func() (int, error) {
		if err := c.Start(); err != nil {
			return 0, err
		}
		return c.Process.Pid, nil
	})
	// Only the child may hold the terminal side, or reading the pty never
	// reports the end of output.
	_ = tty.Close()
	if err != nil {
		// The client's terminal is raw: a line feed alone does not return
		// the cursor.
		return startError(argv[0], err, out, "\r\n")
	}
	klog.V(4).InfoS("Exec session started", "command", argv[0], "pid", pid, "tty", true)

	resizeDone := make(chan struct{})
	stopResize := make(chan struct{})
	go func() {
		defer close(resizeDone)
		for {
			select {
			case <-stopResize:
				return
			case s, ok := <-resize: // a nil channel blocks: no resizes
				if !ok {
					return
				}
				if err := setWinsize(ptmx, &pty.Winsize{Rows: s.Height, Cols: s.Width}); err != nil {
					klog.V(4).InfoS("Resizing terminal failed", "pid", pid, "err", err)
				}
			}
		}
	}()
	if in != nil {
		e.copyStdin(ptmx, in, func() error { return sendEOF(ptmx) })
	}
	// Without an output stream the pty is still drained (into io.Discard),
	// or the command would block writing to it.
	waitErr := e.supervise(ctx, c, pid, []outputCopy{{src: ptmx, dst: out}}, func() {})
	close(stopResize)
	<-resizeDone
	return exitError(waitErr)
}

// copyStdin copies the client's stdin to w in the background and calls
// atEOF when the client closes it, so the command sees end of input.
func (e *Executor) copyStdin(w io.Writer, in io.Reader, atEOF func() error) {
	e.stdinCopies.Add(1)
	go func() {
		defer e.stdinCopies.Done()
		// Copy errors mean the command exited (its input closed) or the
		// client went away; both are handled by the session, not here.
		if _, err := io.Copy(w, in); err == nil {
			_ = atEOF()
		}
	}()
}

type outputCopy struct {
	src *os.File
	dst io.Writer // nil: discard
}

// supervise waits for the command, kills its process group if ctx ends
// first, then waits for the output copies (bounded by outputDrainTimeout) and
// returns the command's Wait error. afterExit runs once the command exited.
func (e *Executor) supervise(ctx context.Context, c *exec.Cmd, pid int, outputs []outputCopy, afterExit func()) error {
	var copies sync.WaitGroup
	for _, o := range outputs {
		copies.Add(1)
		go func() {
			defer copies.Done()
			dst := o.dst
			if dst == nil {
				dst = io.Discard
			}
			// A pty reports EIO once the terminal side is closed everywhere:
			// that is its end of output, not an error worth reporting.
			_, _ = io.Copy(dst, o.src)
		}()
	}
	copiesDone := make(chan struct{})
	go func() { copies.Wait(); close(copiesDone) }()

	waitDone := make(chan error, 1)
	go func() { waitDone <- c.Wait() }()

	var waitErr error
	select {
	case waitErr = <-waitDone:
	case <-ctx.Done():
		klog.V(4).InfoS("Exec session cancelled, killing its process group", "pid", pid, "reason", context.Cause(ctx))
		killGroup(pid)
		waitErr = <-waitDone
	}
	// Release only after Wait collected the status, see reaper.Start.
	e.reaper.Release(pid)
	afterExit()

	drain := time.NewTimer(e.outputDrainTimeout)
	defer drain.Stop()
	select {
	case <-copiesDone:
	case <-ctx.Done():
		killGroup(pid) // background processes the command left behind
	case <-drain.C:
		klog.V(4).InfoS("Exec session output still open after the command exited, closing it", "pid", pid)
	}
	// Closing the read ends unblocks copies still waiting for output. The
	// files are pollable, so Close interrupts a pending Read.
	for _, o := range outputs {
		_ = o.src.Close()
	}
	<-copiesDone
	klog.V(4).InfoS("Exec session finished", "pid", pid, "err", waitErr)
	return waitErr
}

// killGroup kills the process group led by pid, so commands the session
// started in the background die with it.
func killGroup(pid int) {
	if err := unix.Kill(-pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		klog.ErrorS(err, "Killing exec session process group failed", "pgid", pid)
	}
}

// exitError turns a Wait error into what ServeExec understands as an exit
// code. A command killed by a signal reports 128+signal, as a shell does.
func exitError(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return utilexec.CodeExitError{Err: err, Code: code}
}

// startFailureCode maps a failure to start a command to the exit code a
// POSIX shell reports for it, if it is one a shell reports that way.
func startFailureCode(err error) (int, bool) {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return exitCodeNotFound, true
	case errors.Is(err, fs.ErrPermission), errors.Is(err, unix.ENOEXEC):
		return exitCodeNotExecutable, true
	}
	return 0, false
}

// startError reports a command that could not be started. Like a shell, a
// missing or non-executable command is an exit code with a message on
// stderr rather than a server error, so clients can tell it from a broken
// execd.
func startError(name string, err error, stderr io.Writer, newline string) error {
	code, ok := startFailureCode(err)
	if !ok {
		return fmt.Errorf("starting %q: %w", name, err)
	}
	if stderr != nil {
		_, _ = fmt.Fprintf(stderr, "sandbox-execd: %s: %v%s", name, err, newline)
	}
	klog.V(4).InfoS("Exec session command could not start", "command", name, "exitCode", code, "err", err)
	return utilexec.CodeExitError{Err: err, Code: code}
}

func closeIfSet(c io.Closer) {
	if c != nil {
		_ = c.Close()
	}
}

func firstSet(ws ...io.WriteCloser) io.Writer {
	for _, w := range ws {
		if w != nil {
			return w
		}
	}
	return nil
}
