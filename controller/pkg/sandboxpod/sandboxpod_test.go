package sandboxpod

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

func TestInjectEgress(t *testing.T) {
	cfg := egressapi.Config{DefaultAction: egressapi.ActionDeny, Rules: []egressapi.Rule{{Action: egressapi.ActionAllow, To: "pypi.org"}}}
	cfg.Revision = cfg.Hash()
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "user-init", Image: "busybox"}},
		Containers: []corev1.Container{{Name: "sandbox", Image: "python", SecurityContext: &corev1.SecurityContext{
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}}},
	}
	Inject(spec, Options{ExecdImage: "kube-sandbox:v1", ClientCA: []byte("CA"), Egress: &Egress{Image: "kube-sandbox:v1", Config: cfg}, ReadinessPeriodSeconds: 10})

	var names []string
	for _, c := range spec.InitContainers {
		names = append(names, c.Name)
	}
	if want := []string{egressapi.ContainerName, execdapi.InitContainerName, "user-init"}; !slices.Equal(names, want) {
		t.Fatalf("init containers %v, want %v: the filter comes before anything else runs", names, want)
	}
	e := spec.InitContainers[0]
	if e.RestartPolicy == nil || *e.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("sandbox-egress is not a native sidecar")
	}
	if e.Lifecycle == nil || e.Lifecycle.PostStart == nil || e.Lifecycle.PostStart.Exec == nil || e.ReadinessProbe == nil || e.ReadinessProbe.PeriodSeconds != 10 || e.ReadinessProbe.FailureThreshold != 3 {
		t.Errorf("postStart %+v, readiness %+v: the other containers must wait for the filter", e.Lifecycle, e.ReadinessProbe)
	}
	if caps := e.SecurityContext.Capabilities; !slices.Equal(caps.Add, []corev1.Capability{"NET_ADMIN"}) || !slices.Equal(caps.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("sandbox-egress capabilities %+v, want NET_ADMIN only", caps)
	}
	for _, c := range append(spec.Containers, spec.InitContainers[1:]...) {
		if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "NET_ADMIN") {
			t.Errorf("container %s has NET_ADMIN", c.Name)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, v := range e.Env {
		env[v.Name] = v
	}
	if v := env[egressapi.EnvPodUID]; v.ValueFrom == nil || v.ValueFrom.FieldRef == nil || v.ValueFrom.FieldRef.FieldPath != "metadata.uid" {
		t.Errorf("%s = %+v, want the downward API's metadata.uid", egressapi.EnvPodUID, v)
	}
	var got egressapi.Config
	if err := json.Unmarshal([]byte(env[egressapi.EnvConfig].Value), &got); err != nil || got.Revision != cfg.Revision {
		t.Errorf("starting config %+v (%v)", got, err)
	}
	if env[egressapi.EnvClientCA].Value != "CA" {
		t.Error("no client CA")
	}
	mounted := false
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.Name == egressapi.StateVolume || m.Name == egressapi.IdentityVolume {
			t.Errorf("the sandbox container mounts sandbox-egress's %s", m.Name)
		}
	}
	for _, m := range e.VolumeMounts {
		mounted = mounted || m.Name == egressapi.StateVolume
	}
	if !mounted {
		t.Error("sandbox-egress has no state volume")
	}

	plain := &corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}
	Inject(plain, Options{ExecdImage: "kube-sandbox:v1"})
	if len(plain.InitContainers) != 1 || plain.InitContainers[0].Name != execdapi.InitContainerName {
		t.Errorf("without Egress: init containers %v", plain.InitContainers)
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
