package batchsandbox

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/index"
)

// informerPods is an index.Pods over a client-go informer, as the manager's cache has it, whose
// store holds the client's pods as the informer's watch would put them there. It does not
// follow later writes: a test reads it once.
func informerPods(t *testing.T, c client.Client) *index.Pods {
	t.Helper()
	list := &corev1.PodList{}
	if err := c.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	informer := toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &corev1.Pod{}, 0,
		toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	p, err := index.Setup(t.Context(), &informertest.FakeInformers{Scheme: c.Scheme(),
		InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{corev1.SchemeGroupVersion.WithKind("Pod"): informer}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if err := informer.GetIndexer().Add(&list.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestIdlePods: the candidates of an allocation are the pool's idle, ready pods, of the current
// revision first, then created first, then by name; whether read from the informer's own index
// or through the client's field index.
func TestIdlePods(t *testing.T) {
	allocated := idlePod("allocated", true, true, 5*time.Hour)
	allocated.Labels[controlv1alpha1.LabelBatchSandbox] = "other"
	allocated.OwnerReferences = []metav1.OwnerReference{{APIVersion: controlv1alpha1.SchemeGroupVersion.String(), Kind: "BatchSandbox",
		Name: "other", UID: "other-uid", Controller: ptr.To(true)}}
	otherPool := idlePod("other-pool", true, true, 5*time.Hour)
	otherPool.Labels[controlv1alpha1.LabelPool] = "go"
	otherPool.OwnerReferences[0].Name, otherPool.OwnerReferences[0].UID = "go", "go-uid"
	earlierPool := idlePod("earlier-pool", true, true, 5*time.Hour)
	earlierPool.OwnerReferences[0].UID = "deleted-pool-uid"
	elevated := idlePod("elevated", true, true, 5*time.Hour)
	elevated.Labels[controlv1alpha1.LabelPodSecurity] = string(controlv1alpha1.PodSecurityNamespace)
	elsewhere := idlePod("elsewhere", true, true, 5*time.Hour)
	elsewhere.Namespace = "team-b"
	pods := []*corev1.Pod{
		idlePod("cur-young", true, true, time.Minute),
		idlePod("cur-tie-b", true, true, time.Hour),
		idlePod("old-oldest", false, true, 6*time.Hour),
		idlePod("cur-tie-a", true, true, time.Hour),
		idlePod("cur-old", true, true, 2*time.Hour),
		idlePod("starting", true, false, 5*time.Hour),
		allocated, otherPool, earlierPool, elevated, elsewhere,
	}
	want := []string{"cur-old", "cur-tie-a", "cur-tie-b", "cur-young", "old-oldest"}

	for _, reader := range []string{"field index", "informer index"} {
		t.Run(reader, func(t *testing.T) {
			objs := []client.Object{pooledBatchSandbox(1), testPool()}
			for _, p := range pods {
				objs = append(objs, p.DeepCopy())
			}
			h := newHarness(t, nil, objs...)
			if reader == "informer index" {
				h.r.Pods = informerPods(t, h.client)
			}
			candidates, err := h.r.idlePods(h.ctx(), pooledBatchSandbox(1), testPool())
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for p := candidates.next(); p != nil; p = candidates.next() {
				got = append(got, p.Name)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("candidates in order (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIdlePodsPassesOverTaken: a pod another reconcile of this process is allocating goes to
// nobody else, through the informer's index as through the client.
func TestIdlePodsPassesOverTaken(t *testing.T) {
	a, b := idlePod("a", true, true, 2*time.Hour), idlePod("b", true, true, time.Hour)
	h, _ := newPooledHarness(t, nil, pooledBatchSandbox(1), testPool(), a, b)
	h.r.Pods = informerPods(t, h.client)
	if !h.r.allocations.reserve(a.UID, types.NamespacedName{Namespace: testNamespace, Name: "another"}) {
		t.Fatal("reserve")
	}
	h.mustReconcile()
	if diff := cmp.Diff(map[string]string{"0": "b"}, h.allocatedPods()); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
}

// TestListPodsByIndex: a sandbox's pods are read by the index of pods by sandbox, not by a label
// selector (which scans the namespace), and only those the sandbox controls count.
func TestListPodsByIndex(t *testing.T) {
	bs := newBatchSandbox(ptr.To[int32](2))
	pod := func(name, sandbox string, controller types.UID) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace,
			Labels: map[string]string{controlv1alpha1.LabelBatchSandbox: sandbox, controlv1alpha1.LabelReplica: "0"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: controlv1alpha1.SchemeGroupVersion.String(), Kind: "BatchSandbox",
				Name: sandbox, UID: controller, Controller: ptr.To(true)}}}}
	}
	mine := pod("mine", testName, bs.UID)
	// Of an earlier BatchSandbox of the same name, still terminating.
	predecessor := pod("predecessor", testName, "earlier-demo-uid")
	other := pod("other", "other", "other-uid")
	var lists []*client.ListOptions
	funcs := &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*corev1.PodList); ok {
			o := &client.ListOptions{}
			o.ApplyOptions(opts)
			lists = append(lists, o)
		}
		return c.List(ctx, list, opts...)
	}}
	h := newHarness(t, funcs, bs, mine, predecessor, other)
	pods, err := h.r.listPods(h.ctx(), bs)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"mine"}, names); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if len(lists) != 1 {
		t.Fatalf("%d pod lists, want 1", len(lists))
	}
	o := lists[0]
	if o.Namespace != testNamespace || o.LabelSelector != nil || o.FieldSelector == nil ||
		o.FieldSelector.String() != index.SandboxPods+"="+testName || o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy {
		t.Errorf("list options = namespace %q, labels %v, fields %v, no deep copy %v; want the sandbox's index in its namespace, without copies",
			o.Namespace, o.LabelSelector, o.FieldSelector, o.UnsafeDisableDeepCopy)
	}
}
