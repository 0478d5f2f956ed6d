//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestKubectlLikeABuiltin: with the real kubectl, a sandbox behaves as a built-in resource:
// server-side apply creates and tracks managers, conflicts are reported, diff is right, wait
// works on its conditions, and its Events show where users look.
func TestKubectlLikeABuiltin(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	manifest := func(replicas int, allow string) []byte {
		return []byte(fmt.Sprintf(`apiVersion: sandbox.kube-sandbox.io/v1alpha1
kind: Sandbox
metadata: {name: applied}
spec:
  replicas: %d
  template:
    spec:
      containers:
      - name: sandbox
        image: %s
        imagePullPolicy: Never
  networkPolicy:
    defaultAction: Deny
    egress: [{action: Allow, to: %s}]
`, replicas, pythonImage, allow))
	}
	apply := func(m []byte, args ...string) result {
		return run(t, m, "kubectl", append([]string{"-n", ns, "apply", "--server-side", "-f", "-"}, args...)...)
	}

	for i := range 2 {
		if r := apply(manifest(1, "pypi.org")); r.code != 0 || !strings.Contains(r.stdout, "serverside-applied") {
			t.Fatalf("apply --server-side #%d: exit %d: %s%s", i+1, r.code, r.stdout, r.stderr)
		}
	}
	out := mustKubectl(t, "-n", ns, "get", "sandbox", "applied", "-o", "yaml", "--show-managed-fields")
	if !strings.Contains(out, "manager: kubectl") || !strings.Contains(out, "operation: Apply") {
		t.Errorf("managedFields as kubectl shows them lack kubectl's Apply:\n%s", out)
	}

	r := apply(manifest(2, "pypi.org"), "--field-manager=other")
	if r.code == 0 || !strings.Contains(r.stderr, "conflict") || !strings.Contains(r.stderr, ".spec.replicas") {
		t.Fatalf("apply by another manager: exit %d: %s%s; want a conflict naming .spec.replicas", r.code, r.stdout, r.stderr)
	}

	// kubectl diff reads the live object and then asks for a dry-run apply: two reads. While the
	// sandbox starts, its status moves between them, and diff rightly shows that. Diff a settled one.
	if r := kubectl(t, "-n", ns, "wait", "--for=condition=Ready", "sandbox/applied", "--timeout=120s"); r.code != 0 {
		t.Fatalf("kubectl wait --for=condition=Ready before diff: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	for _, mode := range [][]string{{"--server-side"}, nil} {
		name := "diff " + strings.Join(mode, " ")
		args := append([]string{"-n", ns, "diff", "-f", "-"}, mode...)
		if r := run(t, manifest(1, "pypi.org"), "kubectl", args...); r.code != 0 {
			t.Errorf("%s of the applied manifest: exit %d: %s%s; want no difference", name, r.code, r.stdout, r.stderr)
		}
		r := run(t, manifest(1, "files.pythonhosted.org"), "kubectl", args...)
		if r.code != 1 || !strings.Contains(r.stdout, "+    - action: Allow") && !strings.Contains(r.stdout, "files.pythonhosted.org") {
			t.Errorf("%s of a changed policy: exit %d: %s%s; want the difference", name, r.code, r.stdout, r.stderr)
		}
	}
	if g := mustKubectl(t, "-n", ns, "get", "sandbox", "applied", "-o", "jsonpath={.spec.networkPolicy.egress[0].to}"); g != "pypi.org" {
		t.Errorf("diff changed the sandbox: %s", g)
	}
	if r := apply(manifest(2, "pypi.org"), "--field-manager=other", "--force-conflicts"); r.code != 0 {
		t.Fatalf("apply --force-conflicts: exit %d: %s", r.code, r.stderr)
	}

	if r := kubectl(t, "-n", ns, "wait", "--for=condition=Ready", "sandbox/applied", "--timeout=120s"); r.code != 0 {
		t.Fatalf("kubectl wait --for=condition=Ready: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	waitFor(t, "the sandbox's Events", 30*time.Second, func() (bool, string) {
		out := kubectl(t, "-n", ns, "describe", "sandbox", "applied").stdout
		i := strings.Index(out, "Events:")
		return i >= 0 && strings.Contains(out[i:], "PodsReady"), out
	})
	if out := mustKubectl(t, "-n", ns, "events", "--for", "sandbox/applied"); !strings.Contains(out, "PodsReady") {
		t.Errorf("kubectl events --for sandbox/applied:\n%s", out)
	}
}
