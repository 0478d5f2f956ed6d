package execd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// runMainEnv makes the test binary behave as the sandbox-execd binary, so
// tests can run the real command in a fresh PID namespace.
const runMainEnv = "EXECD_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		// The same wiring as cmd/sandbox-execd.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		code := Execute(ctx, NewCommand())
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestServeAsPID1 runs serve as PID 1 of a new PID namespace, as in a
// container: exec sessions that leave orphans behind must still report their
// exit codes (the reaper must not steal them), and the orphans must not stay
// zombies.
func TestServeAsPID1(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare not available")
	}
	if out, err := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot create a PID namespace: %v %s", err, out)
	}

	dir := t.TempDir()
	stopFile := filepath.Join(dir, "stop")
	addr, health := freeAddr(t), freeAddr(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The entrypoint also leaves an orphan behind.
	entrypoint := fmt.Sprintf(`sleep 0.1 & while [ ! -e %s ]; do sleep 0.05; done; exit 9`, stopFile)
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--kill-child",
		self, "serve", "--listen", addr, "--health-listen", health, "--state-dir", "", "--", "sh", "-c", entrypoint)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", execdapi.EnvClientCA+"="+string(testCA().pem),
		execdapi.EnvSandboxUID+"="+testSandbox.UID, execdapi.EnvSandboxNamespace+"="+testSandbox.Namespace,
		execdapi.EnvSandboxName+"="+testSandbox.Name)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	waitHealthy(t, health)
	base := "https://" + addr

	res := execVia(testContext(t), base, execRequest{cmd: []string{"sh", "-c", "echo $PPID"}})
	if strings.TrimSpace(res.stdout) != "1" {
		t.Fatalf("exec'd command's parent is %q (err %v), want execd as PID 1", res.stdout, res.err)
	}

	tests := []struct {
		name     string
		script   string
		wantCode int
	}{
		{name: "exits at once", script: "exit 3", wantCode: 3},
		{name: "leaves an orphan", script: "sleep 0.1 & exit 4", wantCode: 4},
		{name: "orphan outlives a slow exit", script: "sleep 0.05 & sleep 0.1; exit 5", wantCode: 5},
		{name: "success with orphans", script: "sleep 0.05 & sleep 0.05 & exit 0", wantCode: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 5 {
				res := execVia(testContext(t), base, execRequest{cmd: []string{"sh", "-c", tt.script}})
				if got := exitCode(res.err); got != tt.wantCode {
					t.Fatalf("run %d: exit code %d (err %v), want %d", i, got, res.err, tt.wantCode)
				}
			}
		})
	}

	t.Run("orphans are reaped", func(t *testing.T) {
		// Every process in the namespace, from inside it.
		list := []string{"sh", "-c", `for f in /proc/[0-9]*/stat; do cat "$f" 2>/dev/null; echo; done`}
		var zombies []string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			res := execVia(testContext(t), base, execRequest{cmd: list})
			if res.err != nil {
				t.Fatalf("listing processes: %v", res.err)
			}
			zombies = zombies[:0]
			for line := range strings.Lines(res.stdout) {
				fields := strings.Fields(line[strings.LastIndexByte(line, ')')+1:])
				if len(fields) > 0 && fields[0] == "Z" {
					zombies = append(zombies, strings.TrimSpace(line))
				}
			}
			if len(zombies) == 0 {
				return
			}
		}
		t.Fatalf("zombies remain: %q", zombies)
	})

	if err := os.WriteFile(stopFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if got := cmd.ProcessState.ExitCode(); got != 9 {
			t.Errorf("execd exited %d (%v), want the entrypoint's 9; output:\n%s", got, err, output.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("execd did not exit; output:\n%s", output.String())
	}
}

// TestServeEntrypointOnTerminal runs serve on a terminal, as in a pod with
// tty: true: the entrypoint, in its own process group, must be the
// terminal's foreground group, or reading the terminal stops it (SIGTTIN)
// and ^C does not reach it.
func TestServeEntrypointOnTerminal(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ptmx, tty, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer func() { _ = ptmx.Close() }()

	script := `read line; echo "got $line"; trap 'echo interrupted; exit 5' INT; echo ready; while :; do sleep 0.05; done`
	cmd := exec.Command(self, "serve", "--listen", freeAddr(t), "--health-listen", "", "--state-dir", "", "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", execdapi.EnvClientCA+"="+string(testCA().pem))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// A session with the terminal as controlling terminal, as a container
	// runtime sets up for tty: true.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = tty.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	var output lockedBuffer
	go func() { _, _ = io.Copy(&output, ptmx) }() // ends when ptmx is closed
	waitOutput := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if strings.Contains(output.String(), want) {
				return
			}
		}
		t.Fatalf("terminal output %q does not contain %q", output.String(), want)
	}

	if _, err := ptmx.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitOutput("got hello")
	waitOutput("ready")
	if _, err := ptmx.Write([]byte{0x03}); err != nil { // ^C
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if got := cmd.ProcessState.ExitCode(); got != 5 {
			t.Errorf("execd exited %d (%v), want the entrypoint's 5; output %q", got, err, output.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("execd did not exit after ^C; output %q", output.String())
	}
	// The entrypoint's last line may still be on its way from the terminal when execd has
	// exited: wait for it, then count.
	waitOutput("interrupted")
	if n := strings.Count(output.String(), "interrupted"); n != 1 {
		t.Errorf("entrypoint saw %d interrupts, want 1; output %q", n, output.String())
	}
}
