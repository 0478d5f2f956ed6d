package index

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

const ns = "team-a"

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := controlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func pool(name string, uid types.UID) *controlv1alpha1.Pool {
	return &controlv1alpha1.Pool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid}}
}

// pod is a pod of the pool's, labelled with it and controlled by it; mutate makes it differ.
func pod(name string, owner *controlv1alpha1.Pool, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name + "-uid"),
			Labels:          map[string]string{controlv1alpha1.LabelPool: owner.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, controlv1alpha1.SchemeGroupVersion.WithKind("Pool"))},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func allocatedTo(sandbox string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Labels[controlv1alpha1.LabelBatchSandbox] = sandbox
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: controlv1alpha1.SchemeGroupVersion.String(), Kind: "BatchSandbox",
			Name: sandbox, UID: types.UID(sandbox + "-uid"), Controller: ptr.To(true)}}
	}
}

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }

// deleting: a finalizer holds the pod, which the fake client wants of an object being deleted.
func deleting(p *corev1.Pod) {
	p.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now()))
	p.Finalizers = []string{"example.com/hold"}
}

func extract(t *testing.T, name string, obj client.Object) []string {
	t.Helper()
	for _, f := range Fields() {
		if f.Name == name {
			return f.Extract(obj)
		}
	}
	t.Fatalf("no field index %s", name)
	return nil
}

func TestIdlePodsIndex(t *testing.T) {
	py := pool("py", "py-uid")
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{name: "idle and ready", pod: pod("a", py), want: []string{"py"}},
		{name: "allocated", pod: pod("a", py, allocatedTo("demo"))},
		{name: "labelled allocated only", pod: pod("a", py, func(p *corev1.Pod) { p.Labels[controlv1alpha1.LabelBatchSandbox] = "demo" })},
		{name: "not ready", pod: pod("a", py, notReady)},
		{name: "being deleted", pod: pod("a", py, deleting)},
		{name: "another pool's", pod: pod("a", pool("go", "go-uid")), want: []string{"go"}},
		{name: "pool label but no controller", pod: pod("a", py, func(p *corev1.Pod) { p.OwnerReferences = nil })},
		{name: "controlled by something else", pod: pod("a", py, func(p *corev1.Pod) {
			p.OwnerReferences[0].Kind, p.OwnerReferences[0].APIVersion = "ReplicaSet", "apps/v1"
		})},
		{name: "a Pool of another group", pod: pod("a", py, func(p *corev1.Pod) { p.OwnerReferences[0].APIVersion = "example.com/v1" })},
		{name: "a Pool of another version of the group", pod: pod("a", py, func(p *corev1.Pod) {
			p.OwnerReferences[0].APIVersion = schema.GroupVersion{Group: controlv1alpha1.SchemeGroupVersion.Group, Version: "v1"}.String()
		}), want: []string{"py"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, extract(t, IdlePods, tc.pod)); diff != "" {
				t.Errorf("IdlePods key (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSandboxIndexes(t *testing.T) {
	exhausted := []metav1.Condition{{Type: controlv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: controlv1alpha1.ReasonPoolExhausted}}
	sandbox := func(replicas *int32, have int32, conds []metav1.Condition, mutate ...func(*controlv1alpha1.BatchSandbox)) *controlv1alpha1.BatchSandbox {
		bs := &controlv1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns},
			Spec:   controlv1alpha1.BatchSandboxSpec{Replicas: replicas, PoolRef: &controlv1alpha1.PoolReference{Name: "py"}},
			Status: controlv1alpha1.BatchSandboxStatus{Replicas: have, Conditions: conds}}
		for _, m := range mutate {
			m(bs)
		}
		return bs
	}
	gone := func(bs *controlv1alpha1.BatchSandbox) { bs.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now())) }
	direct := func(bs *controlv1alpha1.BatchSandbox) { bs.Spec.PoolRef = nil }
	tests := []struct {
		name                             string
		bs                               *controlv1alpha1.BatchSandbox
		wantPool, wantLacking, wantExhau []string
	}{
		{name: "new", bs: sandbox(nil, 0, nil), wantPool: []string{"py"}, wantLacking: []string{"py"}},
		{name: "served", bs: sandbox(ptr.To[int32](2), 2, nil), wantPool: []string{"py"}},
		{name: "exhausted", bs: sandbox(ptr.To[int32](3), 1, exhausted), wantPool: []string{"py"}, wantLacking: []string{"py"}, wantExhau: []string{"py"}},
		{name: "exhausted, being deleted", bs: sandbox(ptr.To[int32](3), 1, exhausted, gone), wantPool: []string{"py"}},
		{name: "direct mode", bs: sandbox(nil, 0, nil, direct)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				index string
				want  []string
			}{{PoolRef, tc.wantPool}, {LackingPods, tc.wantLacking}, {PoolExhausted, tc.wantExhau}} {
				if diff := cmp.Diff(c.want, extract(t, c.index, tc.bs)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", c.index, diff)
				}
			}
		})
	}
}

// TestPods: both ways of Pods, the pod informer's own index and the field indexes through a
// client, give the same pods; the informer's are its own objects, not copies.
func TestPods(t *testing.T) {
	py, goPool := pool("py", "py-uid"), pool("go", "go-uid")
	pods := []*corev1.Pod{
		pod("idle-1", py), pod("idle-2", py),
		pod("starting", py, notReady),
		pod("allocated", py, allocatedTo("demo")),
		pod("terminating", py, deleting),
		pod("other-pool", goPool),
	}
	otherNamespace := pod("idle-elsewhere", py)
	otherNamespace.Namespace = "team-b"
	pods = append(pods, otherNamespace)

	// The informer cache's pod informer is client-go's SharedIndexInformer; the test fills
	// its store as the informer's watch would.
	s := testScheme(t)
	informer := toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &corev1.Pod{}, 0,
		toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	informers := &informertest.FakeInformers{Scheme: s, InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{
		corev1.SchemeGroupVersion.WithKind("Pod"): informer}}
	direct, err := Setup(t.Context(), informers)
	if err != nil {
		t.Fatal(err)
	}
	if direct.indexer == nil {
		t.Fatal("Setup did not take the informer's indexer")
	}
	for _, p := range pods {
		if err := informer.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}

	// A cache whose informers are not client-go's: the field indexes, through a client.
	fallback, err := Setup(t.Context(), &informertest.FakeInformers{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	if fallback.indexer != nil {
		t.Fatal("Setup took the indexer of a fake informer, which drops indexes")
	}
	b := fake.NewClientBuilder().WithScheme(s)
	for _, p := range pods {
		b = b.WithObjects(p.DeepCopy())
	}
	for _, f := range Fields() {
		b = b.WithIndex(f.Object, f.Name, f.Extract)
	}
	c := b.Build()

	names := func(pods []*corev1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	for name, p := range map[string]*Pods{"informer": direct, "client": fallback, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			idle, err := p.Idle(t.Context(), c, ns, "py")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"idle-1", "idle-2"}, names(idle)); diff != "" {
				t.Errorf("Idle (-want +got):\n%s", diff)
			}
			all, err := p.OfPool(t.Context(), c, ns, "py")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"allocated", "idle-1", "idle-2", "starting", "terminating"}, names(all)); diff != "" {
				t.Errorf("OfPool (-want +got):\n%s", diff)
			}
			if p == direct {
				for _, got := range idle {
					if !slices.Contains(pods, got) {
						t.Errorf("Idle returned a copy of %s, want the informer's own object", got.Name)
					}
				}
			}
		})
	}
}
