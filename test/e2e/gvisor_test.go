//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestGVisor: a sandbox in gVisor (RuntimeClass gvisor, handler runsc) cannot have its egress
// policy enforced, since gVisor's user-space network stack sends the pod's packets past the
// netfilter hooks of the pod's network namespace. So it is refused with an error that says
// why: a direct sandbox with 422 naming spec.template.spec.runtimeClassName, for everyone; a
// Pool with Ready=False TemplateRefused, and no pods.
func TestGVisor(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	bindUsers(t, ns)
	for _, as := range []string{"--as=" + sandboxOnlyUser, "--as=" + podCreator} {
		r := sandboxCmd(t, ns, as, "create", "direct", "--image", pythonImage, "--runtime-class", "gvisor", "--timeout", "10m")
		if r.code == 0 || !strings.Contains(r.stderr, "spec.template.spec.runtimeClassName") || !strings.Contains(r.stderr, "egress policy") {
			t.Fatalf("%s: create in gVisor: exit %d: %s%s; want a refusal naming spec.template.spec.runtimeClassName", as, r.code, r.stdout, r.stderr)
		}
	}
	if g := kubectl(t, "-n", ns, "get", "batchsandbox", "direct"); g.code == 0 {
		t.Errorf("a refused sandbox was stored: %s", g.stdout)
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
	if r := run(t, []byte(manifest), "kubectl", "-n", ns, "apply", "-f", "-"); r.code != 0 {
		t.Fatalf("apply pool: %s", r.stderr)
	}
	p := waitPool(t, ns, "gvisor", "Ready=False, TemplateRefused", 60*time.Second, func(p poolObject) bool {
		return findCondition(p.Status.Conditions, "Ready").Reason == "TemplateRefused"
	})
	if c := findCondition(p.Status.Conditions, "Ready"); !strings.Contains(c.Message, "runtimeClassName") || !strings.Contains(c.Message, "runsc") {
		t.Errorf("the condition does not say why: %+v", c)
	}
	if idle, allocated := poolPods(t, ns, "gvisor"); len(idle)+len(allocated) != 0 {
		t.Errorf("a refused pool made pods: %v %v", podNames(idle), podNames(allocated))
	}
}
