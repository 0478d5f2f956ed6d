//go:build e2e

// Package e2e tests kube-sandbox on the real local cluster (hack/e2e.sh brings it up): real
// kubelet, containerd and pods, driven the way a user drives it, with kubectl and the
// kubectl-sandbox plugin.
package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	binDir      = os.Getenv("KUBE_SANDBOX_BIN")
	pythonImage = envOr("SANDBOX_IMAGE_PYTHON", "kube-sandbox.local/sandbox-python:3.11")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs a command with the plugin directory first on PATH, so that `kubectl sandbox` finds
// kubectl-sandbox as kubectl would for a user.
func run(t *testing.T, stdin []byte, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		r.code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return r
}

func kubectl(t *testing.T, args ...string) result { t.Helper(); return run(t, nil, "kubectl", args...) }

func mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	r := kubectl(t, args...)
	if r.code != 0 {
		t.Fatalf("kubectl %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
}

func newNamespace(t *testing.T) string {
	t.Helper()
	buf := make([]byte, 3)
	_, _ = rand.Read(buf)
	ns := "e2e-" + hex.EncodeToString(buf)
	mustKubectl(t, "create", "namespace", ns)
	t.Cleanup(func() { kubectl(t, "delete", "namespace", ns, "--wait=false") })
	// Pods need the namespace's default ServiceAccount, which the controller-manager makes.
	waitFor(t, "default serviceaccount", 30*time.Second, func() (bool, string) {
		r := kubectl(t, "-n", ns, "get", "serviceaccount", "default")
		return r.code == 0, r.stderr
	})
	return ns
}

func createRunningSandbox(t *testing.T, ns, name string) {
	t.Helper()
	createRunningSandboxIn(t, ns, name, "")
}

// createRunningSandboxIn creates a sandbox of the Python image in runtimeClass ("": the
// node's default runtime) and waits until it runs.
func createRunningSandboxIn(t *testing.T, ns, name, runtimeClass string) {
	t.Helper()
	args := []string{"sandbox", "-n", ns, "create", name, "--image", pythonImage}
	if runtimeClass != "" {
		args = append(args, "--runtime-class", runtimeClass)
	}
	r := run(t, nil, "kubectl", args...)
	if r.code != 0 {
		t.Fatalf("kubectl sandbox create: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	start := time.Now()
	waitFor(t, "sandbox "+name+" Running", 90*time.Second, func() (bool, string) {
		out := kubectl(t, "-n", ns, "get", "sandbox", name, "-o", "jsonpath={.status.phase} {.status.conditions}")
		return strings.HasPrefix(out.stdout, "Running"), out.stdout + out.stderr
	})
	t.Logf("sandbox %s Running %.2fs after create", name, time.Since(start).Seconds())
}

func TestSandboxLifecycle(t *testing.T) {
	ns := newNamespace(t)
	createRunningSandbox(t, ns, "demo")

	t.Run("exec prints and returns the exit code", func(t *testing.T) {
		r := run(t, nil, "kubectl", "sandbox", "-n", ns, "exec", "demo", "--", "python3", "-c", "import sys; print(6*7); sys.exit(3)")
		if r.stdout != "42\n" || r.code != 3 {
			t.Errorf("stdout %q exit %d (stderr %q), want \"42\\n\" and 3", r.stdout, r.code, r.stderr)
		}
	})

	t.Run("stderr and success", func(t *testing.T) {
		r := run(t, nil, "kubectl", "sandbox", "-n", ns, "exec", "demo", "--", "sh", "-c", "echo to-err >&2; echo to-out")
		if r.code != 0 || r.stderr != "to-err\n" || r.stdout != "to-out\n" {
			t.Errorf("exit %d stdout %q stderr %q; want 0, to-out on stdout and to-err on stderr", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("10 MB through stdin", func(t *testing.T) {
		data := make([]byte, 10<<20)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		r := run(t, data, "kubectl", "sandbox", "-n", ns, "exec", "-i", "demo", "--", "sha256sum")
		got := strings.Fields(r.stdout)
		if r.code != 0 || len(got) == 0 || got[0] != hex.EncodeToString(sum[:]) {
			t.Errorf("sha256sum in the sandbox: %q (exit %d, stderr %q), want %x", r.stdout, r.code, r.stderr, sum)
		}
	})

	t.Run("kubectl get sandboxes shows it Running", func(t *testing.T) {
		out := mustKubectl(t, "-n", ns, "get", "sandboxes")
		var row string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "demo ") {
				row = l
			}
		}
		if f := strings.Fields(row); len(f) < 3 || f[1] != "Running" || f[2] != "1/1" {
			t.Errorf("kubectl get sandboxes:\n%s", out)
		}
	})

	t.Run("exec without RBAC on sandboxes/exec is forbidden", func(t *testing.T) {
		// eve may read sandboxes but not exec into them.
		mustKubectl(t, "-n", ns, "create", "role", "sandbox-reader", "--verb=get,list,watch", "--resource=sandboxes.sandbox.kube-sandbox.io")
		mustKubectl(t, "-n", ns, "create", "rolebinding", "eve-reads", "--role=sandbox-reader", "--user=eve")
		waitFor(t, "eve can get sandboxes", 10*time.Second, func() (bool, string) {
			r := kubectl(t, "-n", ns, "--as=eve", "get", "sandbox", "demo")
			return r.code == 0, r.stderr
		})
		for _, as := range []string{"eve", "mallory"} {
			r := run(t, nil, "kubectl", "sandbox", "-n", ns, "--as="+as, "exec", "demo", "--", "touch", "/tmp/"+as)
			if r.code == 0 || !strings.Contains(r.stderr, "forbidden") {
				t.Errorf("exec as %s: exit %d stderr %q, want forbidden", as, r.code, r.stderr)
			}
		}
		r := run(t, nil, "kubectl", "sandbox", "-n", ns, "exec", "demo", "--", "sh", "-c", "ls /tmp/eve /tmp/mallory 2>/dev/null | wc -l")
		if strings.TrimSpace(r.stdout) != "0" {
			t.Errorf("a forbidden exec ran: %q", r.stdout)
		}
	})

	t.Run("delete removes the BatchSandbox and the pod", func(t *testing.T) {
		pod := strings.TrimSpace(mustKubectl(t, "-n", ns, "get", "sandbox", "demo", "-o", "jsonpath={.status.pods[0].name}"))
		if pod == "" {
			t.Fatal("sandbox status names no pod")
		}
		mustKubectl(t, "-n", ns, "delete", "sandbox", "demo")
		waitFor(t, "BatchSandbox and pod gone", 60*time.Second, func() (bool, string) {
			bs := kubectl(t, "-n", ns, "get", "batchsandbox", "demo")
			p := kubectl(t, "-n", ns, "get", "pod", pod)
			return bs.code != 0 && p.code != 0, fmt.Sprintf("batchsandbox: %s pod: %s", bs.stdout, p.stdout)
		})
	})
}

func TestExecErrors(t *testing.T) {
	ns := newNamespace(t)
	r := run(t, nil, "kubectl", "sandbox", "-n", ns, "exec", "nope", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("exec on a missing sandbox: exit %d stderr %q", r.code, r.stderr)
	}
	// An image that is not on the node never becomes ready: the status says why, and exec
	// says the sandbox is not ready.
	r = run(t, nil, "kubectl", "sandbox", "-n", ns, "create", "noimage", "--image", "kube-sandbox.local/does-not-exist:1")
	if r.code != 0 {
		t.Fatalf("create: %s", r.stderr)
	}
	waitFor(t, "ImagePullFailed", 60*time.Second, func() (bool, string) {
		out := kubectl(t, "-n", ns, "get", "sandbox", "noimage", "-o", `jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].reason}`)
		return out.stdout == "Failed ImagePullFailed", out.stdout
	})
	r = run(t, nil, "kubectl", "sandbox", "-n", ns, "exec", "noimage", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "ImagePullFailed") {
		t.Errorf("exec on a sandbox whose image is missing: exit %d stderr %q, want the reason", r.code, r.stderr)
	}
	// Bad input: a typed 422 with the field path, and nothing created.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(`apiVersion: sandbox.kube-sandbox.io/v1alpha1
kind: Sandbox
metadata: {name: bad}
spec:
  template: {spec: {containers: [{name: sandbox}]}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = kubectl(t, "-n", ns, "create", "-f", bad)
	if r.code == 0 || !strings.Contains(r.stderr, "spec.template.spec.containers[0].image") {
		t.Errorf("invalid sandbox: exit %d stderr %q, want the field path", r.code, r.stderr)
	}
	if r := kubectl(t, "-n", ns, "get", "batchsandbox", "bad"); r.code == 0 {
		t.Error("an invalid sandbox left a BatchSandbox behind")
	}
}
