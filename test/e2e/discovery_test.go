//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"
)

// agentSandboxCRD is the shape of agent-sandbox's CRD that matters here: a namespaced
// resource named sandboxes, in its own group.
const agentSandboxCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: sandboxes.agents.x-k8s.io}
spec:
  group: agents.x-k8s.io
  names: {kind: Sandbox, listKind: SandboxList, plural: sandboxes, singular: sandbox}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// TestNamesNextToAgentSandbox: with agent-sandbox's CRD installed, `kubectl get sandboxes`
// still means ours; `sbx` and the category kube-sandbox find them too, and the CRD stays
// reachable by its full name.
func TestNamesNextToAgentSandbox(t *testing.T) {
	ns := newNamespace(t)
	if r := run(t, []byte(agentSandboxCRD), "kubectl", "apply", "-f", "-"); r.code != 0 {
		t.Fatalf("create the CRD: %s", r.stderr)
	}
	t.Cleanup(func() { kubectl(t, "delete", "crd", "sandboxes.agents.x-k8s.io", "--wait=false") })
	mustKubectl(t, "wait", "--for=condition=Established", "crd/sandboxes.agents.x-k8s.io", "--timeout=60s")
	manifest := `{"apiVersion":"sandbox.kube-sandbox.io/v1alpha1","kind":"Sandbox","metadata":{"name":"ours"},"spec":{"replicas":0,"template":{"spec":{"containers":[{"name":"sandbox","image":"` + pythonImage + `"}]}}}}`
	if r := run(t, []byte(manifest), "kubectl", "-n", ns, "create", "-f", "-"); r.code != 0 {
		t.Fatalf("create a sandbox: %s", r.stderr)
	}
	// A fresh discovery cache, as a user who installed agent-sandbox a moment ago has.
	cache := t.TempDir()
	var got string
	waitFor(t, "kubectl get sandboxes to name ours", 30*time.Second, func() (bool, string) {
		r := kubectl(t, "--cache-dir", cache, "-n", ns, "get", "sandboxes", "ours", "-o", "jsonpath={.apiVersion}")
		got = r.stdout + r.stderr
		return r.stdout == "sandbox.kube-sandbox.io/v1alpha1", got
	})
	if out := mustKubectl(t, "--cache-dir", cache, "-n", ns, "get", "sbx", "-o", "name"); strings.TrimSpace(out) != "sandbox.sandbox.kube-sandbox.io/ours" {
		t.Errorf("kubectl get sbx: %q", out)
	}
	if out := mustKubectl(t, "--cache-dir", cache, "-n", ns, "get", "kube-sandbox", "-o", "name"); !strings.Contains(out, "sandbox.sandbox.kube-sandbox.io/ours") {
		t.Errorf("kubectl get kube-sandbox: %q", out)
	}
	if r := kubectl(t, "--cache-dir", cache, "-n", ns, "get", "sandboxes.agents.x-k8s.io"); r.code != 0 {
		t.Errorf("agent-sandbox's sandboxes by their full name: %s", r.stderr)
	}
}
