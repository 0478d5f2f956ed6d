package sandboxpod

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// TestInjectEgress: with egress, the first init container (before the template's own, which
// are the sandbox's code too) waits for the node agent to have the pod's filter in force, at
// the starting revision; no container of the pod holds a network privilege for it; and the
// pod is labelled for the node agent.
func TestInjectEgress(t *testing.T) {
	cfg := egressapi.Config{DefaultAction: egressapi.ActionDeny, Rules: []egressapi.Rule{{Action: egressapi.ActionAllow, To: "pypi.org"}}}
	cfg.Revision = cfg.Hash()
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "user-init", Image: "busybox"}},
		Containers: []corev1.Container{{Name: "sandbox", Image: "python", SecurityContext: &corev1.SecurityContext{
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}}},
	}
	e := &Egress{Config: cfg}
	Inject(spec, Options{ExecdImage: "kube-sandbox:v1", ClientCA: []byte("CA"), Egress: e, ReadinessPeriodSeconds: 10})

	var names []string
	for _, c := range spec.InitContainers {
		names = append(names, c.Name)
	}
	if want := []string{execdapi.InitContainerName, "user-init"}; !slices.Equal(names, want) {
		t.Fatalf("init containers %v, want %v: the wait comes before anything else runs", names, want)
	}
	w := spec.InitContainers[0]
	if want := []string{ExecdInstallPath, "install", "--to", execdapi.BinaryPath, "--wait-egress", "--egress-revision", cfg.Revision}; !slices.Equal(w.Command, want) {
		t.Errorf("command %q, want %q", w.Command, want)
	}
	env := map[string]corev1.EnvVar{}
	for _, v := range w.Env {
		env[v.Name] = v
	}
	for name, path := range map[string]string{execdapi.EnvPodUID: "metadata.uid", execdapi.EnvHostIP: "status.hostIP"} {
		if v := env[name]; v.ValueFrom == nil || v.ValueFrom.FieldRef == nil || v.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("%s = %+v, want the downward API's %s", name, v, path)
		}
	}
	if env[execdapi.EnvClientCA].Value != "CA" {
		t.Error("no CA to verify the node agent with")
	}
	if sc := w.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("the wait runs with %+v, want the restricted level", sc)
	}
	for _, c := range append(spec.Containers, spec.InitContainers...) {
		if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil && (slices.Contains(sc.Capabilities.Add, "NET_ADMIN") || slices.Contains(sc.Capabilities.Add, "NET_RAW")) {
			t.Errorf("container %s has %v", c.Name, sc.Capabilities.Add)
		}
	}
	labels := map[string]string{egressapi.PodLabel: "false"}
	LabelEgress(labels, e)
	if labels[egressapi.PodLabel] != "true" {
		t.Errorf("labels %v: a template's own value must not take the pod out of the node agent's view", labels)
	}

	plain := &corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}
	Inject(plain, Options{ExecdImage: "kube-sandbox:v1"})
	if len(plain.InitContainers) != 1 || plain.InitContainers[0].Name != execdapi.InitContainerName || slices.Contains(plain.InitContainers[0].Command, "--wait-egress") {
		t.Errorf("without Egress: init containers %v", plain.InitContainers)
	}
	unlabelled := map[string]string{}
	LabelEgress(unlabelled, nil)
	if len(unlabelled) != 0 {
		t.Errorf("without Egress: labels %v", unlabelled)
	}
}

func TestSlim(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{
			NodeName:       "node",
			InitContainers: []corev1.Container{{Name: "install-execd", Image: "i"}},
			Containers:     []corev1.Container{{Name: "sandbox", Image: "python", Env: []corev1.EnvVar{{Name: "CA", Value: "pem"}}}, {Name: "sandbox-egress"}},
			Volumes:        []corev1.Volume{{Name: "v"}},
		},
		Status: corev1.PodStatus{PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox", ContainerID: "containerd://abc"}}},
	}
	obj, err := Slim(pod)
	if err != nil {
		t.Fatal(err)
	}
	slim := obj.(*corev1.Pod)
	if slim.ManagedFields != nil || len(slim.Spec.Volumes) != 0 || slim.Spec.Containers[0].Image != "" || len(slim.Spec.Containers[0].Env) != 0 {
		t.Errorf("kept what nothing reads: %+v", slim)
	}
	// What the controllers read is as before.
	if !Ready(slim) || RuntimeID(slim) != RuntimeID(pod) || RuntimeID(slim) == "" || slim.Spec.NodeName != "node" ||
		len(slim.Spec.Containers) != 2 || slim.Spec.Containers[1].Name != "sandbox-egress" || slim.Spec.InitContainers[0].Name != "install-execd" ||
		slim.Labels["a"] != "b" || slim.Status.PodIP != "10.0.0.1" {
		t.Errorf("lost what the controllers read: %+v", slim)
	}
	if len(pod.Spec.Containers[0].Env) != 1 || pod.ManagedFields == nil {
		t.Error("the original pod was changed")
	}
	if ns, _ := Slim(&corev1.Namespace{}); ns == nil {
		t.Error("an object that is not a pod was dropped")
	}
}

func TestDefaultRuntimeClass(t *testing.T) {
	for _, tt := range []struct {
		name     string
		template *string
		platform string
		want     *string
	}{
		{"no default leaves the node's runtime", nil, "", nil},
		{"the default for a template naming none", nil, "gvisor", ptr.To("gvisor")},
		{"an empty name is none", ptr.To(""), "gvisor", ptr.To("gvisor")},
		{"a template's own class stays", ptr.To("runc"), "gvisor", ptr.To("runc")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := &corev1.PodSpec{RuntimeClassName: tt.template, Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}
			Inject(spec, Options{ExecdImage: "kube-sandbox:v1", RuntimeClass: tt.platform})
			if diff := cmp.Diff(tt.want, spec.RuntimeClassName); diff != "" {
				t.Errorf("runtimeClassName (-want +got):\n%s", diff)
			}
		})
	}
}
