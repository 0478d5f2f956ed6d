package pool

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

func TestBuildPod(t *testing.T) {
	pool := testPool(1, 1, 0, 1)
	pool.UID = "pool-uid"
	pool.Spec.Template = corev1.PodTemplateSpec{
		// A template must not make an idle pod look allocated.
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "py", controlv1alpha1.LabelBatchSandbox: "someone", controlv1alpha1.LabelReplica: "0",
			controlv1alpha1.LabelPodSecurity: "Platform"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python", Command: []string{"sleep", "infinity"}}}},
	}
	pod := buildPod(pool, "rev1", "kube-sandbox:v1", []byte("the CA"), nil, "")

	if pod.GenerateName != "py-" || pod.Name != "" || pod.Namespace != "ns" {
		t.Errorf("name %q generateName %q namespace %q", pod.Name, pod.GenerateName, pod.Namespace)
	}
	wantLabels := map[string]string{
		"app":                             "py",
		controlv1alpha1.LabelPool:         "py",
		controlv1alpha1.LabelPoolRevision: "rev1",
		controlv1alpha1.LabelManagedBy:    controlv1alpha1.ManagedByController,
	}
	if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if !metav1.IsControlledBy(pod, pool) {
		t.Errorf("owner references %+v, want the pool as controller", pod.OwnerReferences)
	}
	// Without blockOwnerDeletion, so that taking the reference away (the allocation) costs
	// no GET of the pool by the garbage collector.
	if b := pod.OwnerReferences[0].BlockOwnerDeletion; b != nil && *b {
		t.Errorf("the pool's reference blocks its deletion: %+v", pod.OwnerReferences[0])
	}
	// A pod of the namespace's level says so, whatever the pool says later.
	pool.Spec.PodSecurity = controlv1alpha1.PodSecurityNamespace
	if got := buildPod(pool, "rev1", "kube-sandbox:v1", nil, nil, "").Labels[controlv1alpha1.LabelPodSecurity]; got != "Namespace" {
		t.Errorf("a pod of a podSecurity: Namespace pool is labelled %q, want Namespace", got)
	}
	c := pod.Spec.Containers[0]
	if diff := cmp.Diff([]string{execdapi.BinaryPath, "serve", "--", "sleep", "infinity"}, c.Command); diff != "" {
		t.Errorf("command (-want +got):\n%s", diff)
	}
	// A pool pod trusts the CA, and belongs to no sandbox until a claim: no sandbox identity,
	// and no secret of any kind.
	wantEnv := []corev1.EnvVar{{Name: execdapi.EnvClientCA, Value: "the CA"}}
	if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			t.Errorf("volume %s mounts Secret %s", v.Name, v.Secret.SecretName)
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.PeriodSeconds != poolReadinessPeriodSeconds {
		t.Errorf("readiness probe = %+v, want period %d", c.ReadinessProbe, poolReadinessPeriodSeconds)
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Image != "kube-sandbox:v1" {
		t.Errorf("init containers = %+v, want the execd installer", pod.Spec.InitContainers)
	}
	if pool.Spec.Template.Labels[controlv1alpha1.LabelBatchSandbox] != "someone" {
		t.Error("buildPod changed the pool's template")
	}
}
