//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// processObject is what the tests read of a SandboxProcess.
type processObject struct {
	Metadata struct{ Name string }
	Spec     struct {
		Replica int32
		Command []string
	}
	Status struct {
		Phase    string
		Pod      string
		PID      int32
		ExitCode *int32
		Signal   string
		Reason   string
	}
}

// processID is how the sandbox names a process: a DNS label ("p-" and base32).
var processID = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func getProcess(t *testing.T, ns, sandbox, id string) processObject {
	t.Helper()
	var list struct{ Items []processObject }
	if err := json.Unmarshal([]byte(mustSandboxCmd(t, ns, "ps", sandbox, "-o", "json")), &list); err != nil {
		t.Fatalf("ps -o json: %v", err)
	}
	for _, p := range list.Items {
		if p.Metadata.Name == id {
			return p
		}
	}
	t.Fatalf("ps %s lists no process %s: %+v", sandbox, id, list.Items)
	return processObject{}
}

// TestProcesses: a web server started with exec --detach in a pooled sandbox outlives exec and
// serves; ps lists it, logs --process shows what it printed (from an offset too), kill stops it
// with TERM, after which ps shows it Exited by SIGTERM, its log stays, and attach is refused.
func TestProcesses(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			testProcesses(t, rt.class)
		})
	}
}

func testProcesses(t *testing.T, runtimeClass string) {
	ns := newNamespace(t)
	applyPoolIn(t, ns, "py", runtimeClass, 1, 1, 3)
	waitPoolFull(t, ns, "py", 1, 0, 3*time.Minute)
	mustSandboxCmd(t, ns, "create", "web", "--pool", "py")
	waitSandboxRunning(t, ns, time.Minute, "web")

	// -u: the banner reaches the log at once, not when a buffer fills.
	id := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "web", "--detach", "--", "python3", "-u", "-m", "http.server", "8000"))
	if !processID.MatchString(id) {
		t.Fatalf("exec --detach printed %q, want a process ID", id)
	}
	// The exec that started it is gone; the server answers through the proxy subresource.
	proxy := "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/" + ns + "/sandboxes/web/proxy/8000/"
	waitFor(t, "the detached server to answer through the proxy", 30*time.Second, func() (bool, string) {
		r := kubectl(t, "get", "--raw", proxy)
		return r.code == 0 && strings.Contains(r.stdout, "Directory listing for /"), r.stdout + r.stderr
	})

	out := mustSandboxCmd(t, ns, "ps", "web")
	if h := strings.Fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(h, " ") != "ID REPLICA PHASE EXIT PID DURATION COMMAND TTY" {
		t.Errorf("ps columns %v:\n%s", h, out)
	}
	if c := tableCells(t, out, id); c["PHASE"] != "Running" || c["REPLICA"] != "0" || c["EXIT"] != "<none>" ||
		c["COMMAND"] != "python3 -u -m http.server 8000" || c["TTY"] != "false" {
		t.Errorf("ps, want %s Running in replica 0 with its command:\n%s", id, out)
	}
	if c := tableCells(t, mustSandboxCmd(t, ns, "ps", "web", "--replica", "0", "-o", "wide"), id); c["POD"] == "" || c["POD"] == "<none>" {
		t.Errorf("ps -o wide shows no pod: %v", c)
	}
	p := getProcess(t, ns, "web", id)
	if p.Status.PID <= 0 || p.Status.Pod == "" || strings.Join(p.Spec.Command, " ") != "python3 -u -m http.server 8000" {
		t.Errorf("ps -o json: %+v", p)
	}

	// http.server logs each request to stderr, which the log interleaves with stdout.
	var log string
	waitFor(t, "the server's log to show the request", 30*time.Second, func() (bool, string) {
		log = mustSandboxCmd(t, ns, "logs", "web", "--process", id)
		return strings.Contains(log, "Serving HTTP on") && strings.Contains(log, `"GET / HTTP/1.1" 200`), log
	})
	banner := strings.SplitAfterN(log, "\n", 2)[0]
	if rest := mustSandboxCmd(t, ns, "logs", "web", "--process", id, "--offset-bytes", strconv.Itoa(len(banner))); !strings.HasPrefix(log, banner+rest) || strings.Contains(rest, "Serving HTTP on") {
		t.Errorf("logs --offset-bytes %d: %q; want the log after its first line:\n%s", len(banner), rest, log)
	}
	if last := mustSandboxCmd(t, ns, "logs", "web", "--process", id, "--tail", "1"); !strings.Contains(last, `"GET / HTTP/1.1" 200`) {
		t.Errorf("logs --tail 1: %q, want the request's line", last)
	}

	if out := mustSandboxCmd(t, ns, "kill", "web", id); !strings.Contains(out, "signalled (TERM)") {
		t.Errorf("kill: %q", out)
	}
	waitFor(t, "the server to exit", 30*time.Second, func() (bool, string) {
		p = getProcess(t, ns, "web", id)
		return p.Status.Phase == "Exited", p.Status.Phase
	})
	if p.Status.Signal != "TERM" || p.Status.ExitCode != nil {
		t.Errorf("after kill: %+v, want killed by TERM", p.Status)
	}
	if c := tableCells(t, mustSandboxCmd(t, ns, "ps", "web"), id); c["PHASE"] != "Exited" || c["EXIT"] != "SIGTERM" {
		t.Errorf("ps after kill: %v, want Exited SIGTERM", c)
	}
	if after := mustSandboxCmd(t, ns, "logs", "web", "--process", id); !strings.HasPrefix(after, log) {
		t.Errorf("the log after the exit %q does not keep %q", after, log)
	}
	if r := sandboxCmd(t, ns, "attach", "web", id); r.code == 0 || !strings.Contains(r.stderr, "has ended") {
		t.Errorf("attach to an ended process: exit %d: %s", r.code, r.stderr)
	}
	if r := sandboxCmd(t, ns, "logs", "web", "--process", "p-nosuchprocess"); r.code == 0 {
		t.Errorf("logs of a process that does not exist: exit 0: %s", r.stdout)
	}
}

// TestProcessesRBAC: the view role reads processes and their output; only edit starts, signals
// and attaches to them; nobody else does anything. Users are impersonated, as in TestRBACMatrix.
func TestProcessesRBAC(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createRunningSandbox(t, ns, "target")
	mustKubectl(t, "-n", ns, "create", "rolebinding", "editor", "--clusterrole=edit", "--user=ed")
	mustKubectl(t, "-n", ns, "create", "rolebinding", "viewer", "--clusterrole=view", "--user=vic")
	// The aggregation controller fills edit and view with our rules shortly after install.
	waitFor(t, "edit to include sandboxes/processes", 30*time.Second, func() (bool, string) {
		r := kubectl(t, "auth", "can-i", "-n", ns, "--as=ed", "create", "sandboxes.sandbox.kube-sandbox.io", "--subresource=processes")
		return strings.TrimSpace(r.stdout) == "yes", r.stdout
	})
	id := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "target", "--detach", "--", "sleep", "600"))
	// Attaching is tried on a process that has ended, which the server refuses (410) only
	// after it authorized the request: an attach that connected would last as long as the
	// process.
	ended := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "target", "--detach", "--", "true"))
	waitFor(t, "process "+ended+" to exit", 30*time.Second, func() (bool, string) {
		p := getProcess(t, ns, "target", ended)
		return p.Status.Phase == "Exited", p.Status.Phase
	})

	// --as goes after the plugin name: kubectl finds plugins only before any flag.
	actions := []struct {
		name string
		args []string
		// gone: allowed, it is refused as Gone.
		gone bool
	}{
		{"ps", []string{"ps", "target"}, false},
		{"logs", []string{"logs", "target", "--process", id}, false},
		{"start", []string{"exec", "target", "--detach", "--", "sleep", "600"}, false},
		{"attach", []string{"attach", "target", ended}, true},
		{"kill", []string{"kill", "target", id, "--signal", "CONT"}, false},
	}
	allowed := map[string]map[string]bool{
		"ed":  {"ps": true, "logs": true, "start": true, "attach": true, "kill": true},
		"vic": {"ps": true, "logs": true},
		"nob": {},
	}
	for _, user := range []string{"ed", "vic", "nob"} {
		for _, a := range actions {
			t.Run(user+"/"+a.name, func(t *testing.T) {
				argv := append([]string{"sandbox", "-n", ns, "--as=" + user}, a.args...)
				r := run(t, nil, "kubectl", argv...)
				forbidden := strings.Contains(strings.ToLower(r.stderr), "forbidden")
				if allowed[user][a.name] && a.gone && (r.code == 0 || forbidden || !strings.Contains(r.stderr, "has ended")) {
					t.Errorf("%v: want allowed and refused as ended, got exit %d: %s", argv, r.code, r.stderr)
				}
				if allowed[user][a.name] && !a.gone && (r.code != 0 || forbidden) {
					t.Errorf("%v: want allowed, got exit %d: %s", argv, r.code, r.stderr)
				}
				if !allowed[user][a.name] && (r.code == 0 || !forbidden) {
					t.Errorf("%v: want forbidden, got exit %d: %s", argv, r.code, r.stderr)
				}
			})
		}
	}
}

// awaitWriter collects what a command writes and closes seen once it contains want.
type awaitWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func newAwaitWriter(want string) *awaitWriter {
	return &awaitWriter{want: want, seen: make(chan struct{})}
}

func (w *awaitWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.want != "" && strings.Contains(w.buf.String(), w.want) {
		w.want = ""
		close(w.seen)
	}
	return len(p), nil
}

func (w *awaitWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// await waits until w has seen its want, or fails the test.
func (w *awaitWriter) await(t *testing.T, what string, timeout time.Duration) {
	t.Helper()
	select {
	case <-w.seen:
	case <-time.After(timeout):
		t.Fatalf("no %s after %s; seen: %q", what, timeout, w.String())
	}
}

// startSandboxCmd starts `kubectl sandbox -n NS ARGS...` with its output to stdout, and kills
// it when the test ends; the caller may kill it before, as a client that drops.
func startSandboxCmd(t *testing.T, ns string, stdout io.Writer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"sandbox", "-n", ns}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = stdout, stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// dropClient kills a client as a dropped connection would end it: no detach, no goodbye.
func dropClient(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// TestProcessesAttachAndTerminal: two clients attach to one process at once, both see its
// output, and it outlives them both. A bash on a terminal outlives its client: a second attach
// replays its screen before anything is typed, and types into the same shell.
func TestProcessesAttachAndTerminal(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			testProcessesAttachAndTerminal(t, rt.class)
		})
	}
}

func testProcessesAttachAndTerminal(t *testing.T, runtimeClass string) {
	ns := newNamespace(t)
	createRunningSandboxIn(t, ns, "term", runtimeClass)

	ticker := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "term", "--detach", "--",
		"sh", "-c", "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done"))
	first, second := newAwaitWriter("tick-"), newAwaitWriter("tick-")
	c1 := startSandboxCmd(t, ns, first, "attach", "term", ticker)
	c2 := startSandboxCmd(t, ns, second, "attach", "term", ticker)
	first.await(t, "output in the first attach", time.Minute)
	second.await(t, "output in the second attach", time.Minute)
	dropClient(t, c1)
	dropClient(t, c2)
	if p := getProcess(t, ns, "term", ticker); p.Status.Phase != "Running" {
		t.Errorf("the process after both clients dropped: %+v, want Running", p.Status)
	}
	mustSandboxCmd(t, ns, "kill", "term", ticker, "--signal", "KILL")

	shell := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "term", "--detach", "-it", "--", "bash"))
	if p := getProcess(t, ns, "term", shell); p.Status.Phase != "Running" {
		t.Fatalf("bash on a terminal: %+v", p.Status)
	}
	attachTTY := func(want string) (*exec.Cmd, *os.File, *awaitWriter) {
		cmd := exec.Command("kubectl", "sandbox", "-n", ns, "attach", "-it", "term", shell)
		cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"), "TERM=xterm")
		tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
		if err != nil {
			t.Fatal(err)
		}
		screen := newAwaitWriter(want)
		go func() { _, _ = io.Copy(screen, tty) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = tty.Close() })
		return cmd, tty, screen
	}
	// The first client types; the answer's text is not what it typed ($((6*7)) is 42 only
	// once bash ran it). Input typed before the attach is in waits in the client's terminal.
	c, tty, screen := attachTTY("marker-42")
	if _, err := tty.WriteString("export MARK=kept; echo marker-$((6*7))\r"); err != nil {
		t.Fatal(err)
	}
	screen.await(t, "the shell's answer", time.Minute)
	dropClient(t, c)

	// The second sees the screen before it types anything, then the same shell answers.
	c, tty, screen = attachTTY("marker-42")
	screen.await(t, "the replayed screen", time.Minute)
	if _, err := tty.WriteString("echo again-$MARK\r"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the shell to answer the second client", time.Minute, func() (bool, string) {
		s := screen.String()
		return strings.Contains(s, "again-kept"), s
	})
	dropClient(t, c)
	if p := getProcess(t, ns, "term", shell); p.Status.Phase != "Running" {
		t.Errorf("bash after its second client dropped: %+v, want Running", p.Status)
	}
}

// TestProcessesLimit: 64 processes run in a replica at once; the 65th is refused with 429
// and changes nothing, and once one ends another starts.
func TestProcessesLimit(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	createRunningSandbox(t, ns, "full")
	var ids []string
	for range 64 {
		ids = append(ids, strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "full", "--detach", "--", "sleep", "600")))
	}
	r := sandboxCmd(t, ns, "exec", "full", "--detach", "--", "sleep", "600")
	if r.code == 0 || !strings.Contains(r.stderr, "TooManyRequests") || !strings.Contains(r.stderr, "64 processes") {
		t.Fatalf("the 65th process: exit %d, stdout %q, stderr %q; want 429", r.code, r.stdout, r.stderr)
	}
	var list struct{ Items []processObject }
	if err := json.Unmarshal([]byte(mustSandboxCmd(t, ns, "ps", "full", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range list.Items {
		if p.Status.Phase == "Running" {
			running++
		}
	}
	if running != 64 {
		t.Errorf("%d processes run after the refused one, want 64", running)
	}
	mustSandboxCmd(t, ns, "kill", "full", ids[0], "--signal", "KILL")
	waitFor(t, "a 65th start once one ended", 30*time.Second, func() (bool, string) {
		r := sandboxCmd(t, ns, "exec", "full", "--detach", "--", "true")
		return r.code == 0, r.stderr
	})
}

// TestFilesWatch: a watch of a directory sees a file that another exec writes, and names it
// relative to the directory.
func TestFilesWatch(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			testFilesWatch(t, rt.class)
		})
	}
}

func testFilesWatch(t *testing.T, runtimeClass string) {
	ns := newNamespace(t)
	createRunningSandboxIn(t, ns, "watched", runtimeClass)
	mustSandboxCmd(t, ns, "exec", "watched", "--", "mkdir", "-p", "/tmp/w/sub")
	out := newAwaitWriter("")
	startSandboxCmd(t, ns, out, "ls", "watched", "/tmp/w", "--watch", "--recursive")
	// The watch is in once it reports a write: until then each try writes a new file.
	n := 0
	waitFor(t, "the watch to see a file another exec writes", time.Minute, func() (bool, string) {
		n++
		mustSandboxCmd(t, ns, "exec", "watched", "--", "sh", "-c", fmt.Sprintf("echo hi > /tmp/w/sub/f%d.txt", n))
		return strings.Contains(out.String(), "sub/f"), out.String()
	})
	if !regexp.MustCompile(`(?m)^Created\s+sub/f\d+\.txt$`).MatchString(out.String()) {
		t.Errorf("the watch's lines: %q, want Created sub/fN.txt", out.String())
	}
}
