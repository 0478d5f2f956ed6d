package exec

import (
	"context"
	"io"
	"net/url"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
)

// ttyExecutor checks, while the command "runs", what an interactive session needs.
type ttyExecutor struct {
	t        *testing.T
	fd       int
	url      *url.URL
	tty      bool
	stderr   io.Writer
	raw      bool
	sizeSeen *remotecommand.TerminalSize
}

func (e *ttyExecutor) ExecuteWithContext(_ context.Context, u *url.URL, _ *rest.Config, _ io.Reader, _, stderr io.Writer, tty bool, sizes remotecommand.TerminalSizeQueue) error {
	e.url, e.tty, e.stderr = u, tty, stderr
	termios, err := unix.IoctlGetTermios(e.fd, unix.TCGETS)
	if err != nil {
		e.t.Fatal(err)
	}
	e.raw = termios.Lflag&(unix.ICANON|unix.ECHO) == 0
	if sizes != nil {
		e.sizeSeen = sizes.Next()
	}
	return nil
}

func TestExecTTY(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 100, Rows: 30}); err != nil {
		t.Fatal(err)
	}

	f := cmdtesting.NewTestFactory(sandbox("sb", 1, sandboxv1alpha1.PhaseRunning, 0))
	_, _, _, errOut := genericiooptions.NewTestIOStreams()
	streams := genericiooptions.IOStreams{In: tty, Out: tty, ErrOut: errOut}
	executor := &ttyExecutor{t: t, fd: int(tty.Fd())}
	cmd := NewCmdExec(f, streams, executor)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetArgs([]string{"sb", "-it", "--", "bash", "-il"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}

	q := executor.url.Query()
	if q.Get("tty") != "true" || q.Get("stdin") != "true" || q.Get("stderr") != "" {
		t.Errorf("query %v, want tty and stdin without stderr", q)
	}
	if !executor.tty || executor.stderr != nil {
		t.Errorf("executor got tty=%v stderr=%v, want a terminal and no separate stderr", executor.tty, executor.stderr)
	}
	if !executor.raw {
		t.Error("terminal not in raw mode during the session")
	}
	if want := (remotecommand.TerminalSize{Width: 100, Height: 30}); executor.sizeSeen == nil || *executor.sizeSeen != want {
		t.Errorf("first terminal size %v, want %v", executor.sizeSeen, want)
	}
	termios, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if termios.Lflag&unix.ICANON == 0 {
		t.Error("terminal left in raw mode")
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr %q, want nothing", errOut)
	}
}
