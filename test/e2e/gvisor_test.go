//go:build e2e

package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// TestGVisor: sandboxes in gVisor (RuntimeClass gvisor, the runsc runtime of the local
// containerd), direct and pooled, created by a sandbox-only user: the code runs on gVisor's
// kernel, and exec (exit codes, stderr, stdin, timeouts) works as with runc. Files, proxy and
// port-forward in gVisor are in TestFilesProxyAndPortForward/gvisor.
func TestGVisor(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	bindUsers(t, ns)
	as := "--as=" + sandboxOnlyUser
	if r := sandboxCmd(t, ns, as, "create", "direct", "--image", pythonImage, "--runtime-class", "gvisor", "--timeout", "10m"); r.code != 0 {
		t.Fatalf("create: exit %d: %s", r.code, r.stderr)
	}
	manifest := `apiVersion: control.kube-sandbox.io/v1alpha1
kind: Pool
metadata: {name: gvisor}
spec:
  capacitySpec: {bufferMin: 1, bufferMax: 1, poolMin: 0, poolMax: 3}
  template:
    spec:
      runtimeClassName: gvisor
      containers:
      - name: sandbox
        image: ` + pythonImage + `
        imagePullPolicy: Never
`
	if r := run(t, []byte(manifest), "kubectl", "-n", ns, as, "apply", "-f", "-"); r.code != 0 {
		t.Fatalf("apply pool: %s", r.stderr)
	}
	waitPoolFull(t, ns, "gvisor", 1, 0, 90*time.Second)
	mustSandboxCmd(t, ns, as, "create", "pooled", "--pool", "gvisor", "--timeout", "10m")
	waitSandboxRunning(t, ns, 90*time.Second, "direct", "pooled")

	for _, name := range []string{"direct", "pooled"} {
		t.Run(name, func(t *testing.T) {
			// gVisor's kernel says so in its log; the host's never would.
			if out := mustSandboxCmd(t, ns, as, "exec", name, "--", "dmesg"); !strings.Contains(out, "Starting gVisor") {
				t.Errorf("dmesg in the sandbox: %q, want gVisor's", out)
			}
			r := sandboxCmd(t, ns, as, "exec", name, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
			if r.stdout != "out\n" || !strings.HasPrefix(r.stderr, "err\n") || r.code != 7 {
				t.Errorf("exec: stdout %q stderr %q exit %d", r.stdout, r.stderr, r.code)
			}
			data := make([]byte, 10<<20)
			_, _ = rand.Read(data)
			sum := sha256.Sum256(data)
			r = run(t, data, "kubectl", "sandbox", "-n", ns, as, "exec", "-i", name, "--", "sha256sum")
			if f := strings.Fields(r.stdout); r.code != 0 || len(f) == 0 || f[0] != hex.EncodeToString(sum[:]) {
				t.Errorf("10 MiB through stdin: %q (exit %d, %s)", r.stdout, r.code, r.stderr)
			}
			start := time.Now()
			r = sandboxCmd(t, ns, as, "exec", name, "--timeout", "2s", "--", "sleep", "60")
			if r.code == 0 || time.Since(start) > 30*time.Second {
				t.Errorf("exec --timeout 2s of sleep 60: exit %d after %s: %s", r.code, time.Since(start), r.stderr)
			}
			if out := mustSandboxCmd(t, ns, as, "exec", name, "--", "python3", "-c", "print(6*7)"); out != "42\n" {
				t.Errorf("python3: %q", out)
			}
		})
	}
}
