//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCodeContexts: run-code in a pooled sandbox of the Python image, under runc and gVisor: a
// variable survives between runs, a plot returns a PNG, an exception returns its traceback and
// exit code 1, an interrupt (Ctrl-C of run-code) keeps the context, contexts are separate and
// listed, and deleting one ends it.
func TestCodeContexts(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			ns := newNamespace(t)
			applyPoolIn(t, ns, "py", rt.class, 1, 1, 3)
			waitPoolFull(t, ns, "py", 1, 0, 3*time.Minute)
			mustSandboxCmd(t, ns, "create", "nb", "--pool", "py")
			waitSandboxRunning(t, ns, time.Minute, "nb")

			if out := mustSandboxCmd(t, ns, "run-code", "nb", "--", "x = 41; print('set')"); out != "set\n" {
				t.Errorf("first run printed %q", out)
			}
			if out := mustSandboxCmd(t, ns, "run-code", "nb", "--", "x + 1"); out != "42\n" {
				t.Errorf("x + 1 printed %q, want the kept x", out)
			}

			// A plot, saved as a PNG file.
			dir := t.TempDir()
			mustSandboxCmd(t, ns, "run-code", "nb", "--output-dir", dir, "--",
				"import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()")
			png, err := os.ReadFile(filepath.Join(dir, "output-1.png"))
			if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
				t.Errorf("no PNG from the plot (%v, %d bytes)", err, len(png))
			}

			// An exception: its traceback on stderr, exit code 1; -o json has it structured.
			r := sandboxCmd(t, ns, "run-code", "nb", "--", "def f():\n    return 1/0\nf()")
			if r.code != 1 || !strings.Contains(r.stderr, "ZeroDivisionError") || !strings.Contains(r.stderr, "return 1/0") {
				t.Errorf("an exception: exit %d, stderr %q", r.code, r.stderr)
			}
			r = sandboxCmd(t, ns, "run-code", "nb", "-o", "json", "--", "{}['k']")
			var sawError bool
			for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				var ev struct {
					Type  string
					Error *struct{ Name, Value string }
				}
				if err := json.Unmarshal([]byte(line), &ev); err != nil {
					t.Fatalf("-o json line %q: %v", line, err)
				}
				sawError = sawError || (ev.Type == "error" && ev.Error != nil && ev.Error.Name == "KeyError")
			}
			if !sawError {
				t.Errorf("-o json shows no KeyError event:\n%s", r.stdout)
			}

			// Ctrl-C interrupts the run; the context keeps x.
			stdout := newAwaitWriter("sleeping\n")
			cmd := startSandboxCmd(t, ns, stdout, "run-code", "nb", "--", "print('sleeping', flush=True)\nimport time\ntime.sleep(600)")
			stdout.await(t, "the long run's first line", time.Minute)
			_ = cmd.Process.Signal(syscall.SIGINT)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				t.Fatal("run-code did not end after Ctrl-C")
			}
			waitFor(t, "the interrupted context to be idle", 30*time.Second, func() (bool, string) {
				r := sandboxCmd(t, ns, "run-code", "nb", "--", "x")
				return r.code == 0 && r.stdout == "41\n", r.stdout + r.stderr
			})

			// Another context does not see x; both are listed; a deleted one is gone.
			if out := mustSandboxCmd(t, ns, "run-code", "nb", "--context", "default", "--", "'x' in globals()"); out != "True\n" {
				t.Errorf("default context: %q", out)
			}
			mustSandboxCmd(t, ns, "contexts", "nb", "--create", "other")
			if out := mustSandboxCmd(t, ns, "run-code", "nb", "--context", "other", "--", "'x' in globals()"); out != "False\n" {
				t.Errorf("other context sees x: %q", out)
			}
			out := mustSandboxCmd(t, ns, "contexts", "nb")
			if c := tableCells(t, out, "default"); c["PHASE"] != "Idle" || !strings.HasPrefix(c["LANGUAGE"], "python 3") {
				t.Errorf("contexts:\n%s", out)
			}
			tableCells(t, out, "other")
			mustSandboxCmd(t, ns, "contexts", "nb", "--delete", "other")
			if r := sandboxCmd(t, ns, "run-code", "nb", "--context", "other", "--", "1"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
				t.Errorf("run in a deleted context: exit %d, %s", r.code, r.stderr)
			}
		})
	}
}

// TestCodeContextsRBAC: view lists contexts; only edit runs code, makes and deletes them.
func TestCodeContextsRBAC(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	applyPool(t, ns, "py", 1, 1, 3)
	waitPoolFull(t, ns, "py", 1, 0, 3*time.Minute)
	mustSandboxCmd(t, ns, "create", "target", "--pool", "py")
	waitSandboxRunning(t, ns, time.Minute, "target")
	mustKubectl(t, "-n", ns, "create", "rolebinding", "editor", "--clusterrole=edit", "--user=ed")
	mustKubectl(t, "-n", ns, "create", "rolebinding", "viewer", "--clusterrole=view", "--user=vic")
	waitFor(t, "edit to include sandboxes/contexts", 30*time.Second, func() (bool, string) {
		r := kubectl(t, "auth", "can-i", "-n", ns, "--as=ed", "delete", "sandboxes.sandbox.kube-sandbox.io", "--subresource=contexts")
		return strings.TrimSpace(r.stdout) == "yes", r.stdout
	})
	mustSandboxCmd(t, ns, "run-code", "target", "--", "1")
	actions := []struct {
		name string
		args []string
	}{
		{"list", []string{"contexts", "target"}},
		{"run", []string{"run-code", "target", "--", "1"}},
		{"create", []string{"contexts", "target", "--create", "c1"}},
		{"delete", []string{"contexts", "target", "--delete", "default"}},
	}
	allowed := map[string]map[string]bool{
		"ed":  {"list": true, "run": true, "create": true, "delete": true},
		"vic": {"list": true},
		"nob": {},
	}
	// Users in an order that lets ed delete last.
	for _, user := range []string{"nob", "vic", "ed"} {
		for _, a := range actions {
			argv := append([]string{"sandbox", "-n", ns, "--as=" + user}, a.args...)
			r := run(t, nil, "kubectl", argv...)
			forbidden := strings.Contains(strings.ToLower(r.stderr), "forbidden")
			if allowed[user][a.name] && (r.code != 0 || forbidden) {
				t.Errorf("%v: want allowed, got exit %d: %s", argv, r.code, r.stderr)
			}
			if !allowed[user][a.name] && (r.code == 0 || !forbidden) {
				t.Errorf("%v: want forbidden, got exit %d: %s", argv, r.code, r.stderr)
			}
		}
	}
}
