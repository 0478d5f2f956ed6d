//go:build e2e

package e2e

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
	ns := newNamespace(t)
	applyPool(t, ns, "py", 1, 1, 3)
	waitPoolFull(t, ns, "py", 1, 0, 3*time.Minute)
	mustSandboxCmd(t, ns, "create", "web", "--pool", "py")
	waitSandboxRunning(t, ns, time.Minute, "web")

	// -u: the banner reaches the log at once, not when a buffer fills.
	id := strings.TrimSpace(mustSandboxCmd(t, ns, "exec", "web", "--detach", "--", "python3", "-u", "-m", "http.server", "8000"))
	if !processID.MatchString(id) {
		t.Fatalf("exec --detach printed %q, want a process ID", id)
	}
	get := `import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8000/").status)`
	waitFor(t, "the detached server to answer", 30*time.Second, func() (bool, string) {
		r := sandboxCmd(t, ns, "exec", "web", "--", "python3", "-c", get)
		return r.code == 0 && strings.TrimSpace(r.stdout) == "200", r.stdout + r.stderr
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
