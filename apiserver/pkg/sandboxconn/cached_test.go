package sandboxconn

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// countingReader counts the reads that reach it.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

func readyObjects(podIP string) []runtime.Object {
	bs := &controlv1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "bs-uid"},
		Spec:   controlv1alpha1.BatchSandboxSpec{Replicas: ptr.To[int32](1)},
		Status: controlv1alpha1.BatchSandboxStatus{Pods: []controlv1alpha1.SandboxPodStatus{{Replica: 0, Name: "s-0", Ready: true}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s-0", UID: "pod-uid",
		Labels:          map[string]string{controlv1alpha1.LabelBatchSandbox: "s"},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(bs, controlv1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))}},
		Status: corev1.PodStatus{PodIP: podIP, Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	return []runtime.Object{bs, pod}
}

func reader(t *testing.T, objs ...runtime.Object) *countingReader {
	t.Helper()
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	_ = controlv1alpha1.AddToScheme(s)
	return &countingReader{Reader: fake.NewClientBuilder().WithScheme(s).WithRuntimeObjects(objs...).Build()}
}

func TestCachedResolver(t *testing.T) {
	ctx := t.Context()
	// The cache has it: the kube-apiserver is not asked.
	cache, direct := reader(t, readyObjects("10.0.0.1")...), reader(t, readyObjects("10.0.0.1")...)
	ep, err := (&CachedResolver{Cache: cache, Direct: direct}).Resolve(ctx, "ns", "s", 0)
	if err != nil || ep.Target.PodIP != "10.0.0.1" || ep.Target.PodUID != "pod-uid" {
		t.Fatalf("Resolve() = %+v, %v", ep, err)
	}
	if direct.gets != 0 || cache.gets != 2 {
		t.Errorf("reads: cache %d, kube-apiserver %d; want 2 and 0", cache.gets, direct.gets)
	}
	// A sandbox the cache has not seen yet: one consistent read of each.
	cache, direct = reader(t), reader(t, readyObjects("10.0.0.2")...)
	ep, err = (&CachedResolver{Cache: cache, Direct: direct}).Resolve(ctx, "ns", "s", 0)
	if err != nil || ep.Target.PodIP != "10.0.0.2" {
		t.Fatalf("Resolve() on a cache miss = %+v, %v", ep, err)
	}
	if direct.gets != 2 {
		t.Errorf("reads of the kube-apiserver on a miss: %d, want 2", direct.gets)
	}
	// Missing everywhere: the kube-apiserver's answer, a 404.
	_, err = (&CachedResolver{Cache: reader(t), Direct: reader(t)}).Resolve(ctx, "ns", "s", 0)
	if !apierrors.IsNotFound(err) {
		t.Errorf("Resolve() of a missing sandbox = %v, want 404", err)
	}
}

// TestSlimPod: a pod as the cache keeps it (sandboxpod.Slim: no spec but its container names,
// no managedFields) resolves as the whole pod does, from the cache alone.
func TestSlimPod(t *testing.T) {
	objs := readyObjects("10.0.0.3")
	pod := objs[1].(*corev1.Pod)
	pod.Spec.Containers = []corev1.Container{{Name: "sandbox", Image: "python:3.11", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	slimmed, err := sandboxpod.Slim(pod)
	if err != nil {
		t.Fatal(err)
	}
	slim := slimmed.(*corev1.Pod)
	if slim.Spec.Containers[0].Image != "" || slim.ManagedFields != nil || len(pod.Spec.Containers) != 1 {
		t.Errorf("slim pod keeps spec %+v, managedFields %v (and the original lost its spec: %v)", slim.Spec, slim.ManagedFields, len(pod.Spec.Containers) == 0)
	}
	cache := reader(t, objs[0], slim)
	ep, err := (&CachedResolver{Cache: cache, Direct: reader(t)}).Resolve(t.Context(), "ns", "s", 0)
	if err != nil || ep.Target.PodIP != "10.0.0.3" || ep.Target.PodUID != "pod-uid" || ep.Pod != "s-0" {
		t.Fatalf("Resolve() from slim pods = %+v, %v", ep, err)
	}
}
