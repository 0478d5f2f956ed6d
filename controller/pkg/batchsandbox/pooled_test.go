package batchsandbox

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/identity"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

const testPoolName = "py"

// fakeClaimer records claims and answers with err, or with a rejection for pods in reject.
type fakeClaimer struct {
	mu     sync.Mutex
	claims map[string]execdapi.ClaimRequest // by pod name
	reject map[string]int                   // status code, by pod name
	err    error
}

func (f *fakeClaimer) Claim(_ context.Context, pod *corev1.Pod, req *execdapi.ClaimRequest) (*execdapi.ClaimResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if code, ok := f.reject[pod.Name]; ok {
		return nil, &ClaimRejected{Pod: pod.Name, StatusCode: code, Message: "refused"}
	}
	if f.claims == nil {
		f.claims = map[string]execdapi.ClaimRequest{}
	}
	f.claims[pod.Name] = *req
	return &execdapi.ClaimResponse{SandboxUID: req.SandboxUID}, nil
}

func (f *fakeClaimer) claimedPods() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for name := range f.claims {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func testPool() *controlv1alpha1.Pool {
	return &controlv1alpha1.Pool{
		ObjectMeta: metav1.ObjectMeta{Name: testPoolName, Namespace: testNamespace, UID: "pool-uid"},
		Spec: controlv1alpha1.PoolSpec{
			Template:     corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "python"}}}},
			CapacitySpec: controlv1alpha1.CapacitySpec{BufferMin: 2, BufferMax: 4, PoolMax: 10},
		},
	}
}

// idlePod is a ready idle pod of the test pool; current says whether it is of the pool's
// current revision. age orders pods (older first among equals).
func idlePod(name string, current, ready bool, age time.Duration) *corev1.Pod {
	pool := testPool()
	rev := sandboxpod.PoolRevision(pool, "")
	if !current {
		rev = "old"
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNamespace, UID: types.UID(name + "-uid"),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-age)),
			Labels: map[string]string{controlv1alpha1.LabelPool: testPoolName, controlv1alpha1.LabelPoolRevision: rev,
				controlv1alpha1.LabelManagedBy: controlv1alpha1.ManagedByController},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool, controlv1alpha1.SchemeGroupVersion.WithKind("Pool"))},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "python"}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://" + name}},
		},
	}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return p
}

func pooledBatchSandbox(replicas int32) *controlv1alpha1.BatchSandbox {
	bs := newBatchSandbox(ptr.To(replicas))
	bs.Spec.Template = nil
	bs.Spec.PoolRef = &controlv1alpha1.PoolReference{Name: testPoolName}
	bs.Spec.Entrypoint = []string{"python3", "-m", "http.server"}
	bs.Spec.Env = []corev1.EnvVar{{Name: "GREETING", Value: "hi"}}
	return bs
}

func newPooledHarness(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) (*harness, *fakeClaimer) {
	h := newHarness(t, funcs, objs...)
	claimer := &fakeClaimer{}
	h.r.Claimer = claimer
	return h, claimer
}

// allocatedPods maps replica index to pod name, from the pods' labels.
func (h *harness) allocatedPods() map[string]string {
	out := map[string]string{}
	for _, p := range h.pods() {
		if p.Labels[controlv1alpha1.LabelBatchSandbox] == testName {
			out[p.Labels[controlv1alpha1.LabelReplica]] = p.Name
		}
	}
	return out
}

func TestPooledAllocation(t *testing.T) {
	h, claimer := newPooledHarness(t, nil, pooledBatchSandbox(2), testPool(),
		idlePod("old-ready", false, true, 3*time.Hour),
		idlePod("cur-young", true, true, time.Minute),
		idlePod("cur-old", true, true, time.Hour),
		idlePod("cur-starting", true, false, 2*time.Hour))
	h.mustReconcile()

	// The current revision first, ready longest first; never a pod that is not ready.
	if diff := cmp.Diff(map[string]string{"0": "cur-old", "1": "cur-young"}, h.allocatedPods()); diff != "" {
		t.Fatalf("allocation (-want +got):\n%s", diff)
	}
	p := h.pod("cur-old")
	if !metav1.IsControlledBy(p, h.batchSandbox()) || len(p.OwnerReferences) != 1 {
		t.Errorf("owner references of an allocated pod = %+v, want the BatchSandbox as the only controller", p.OwnerReferences)
	}
	if p.Labels[controlv1alpha1.LabelPool] != testPoolName {
		t.Errorf("the pool label must stay, so the pool counts the pod as allocated: %v", p.Labels)
	}
	if _, err := time.Parse(time.RFC3339Nano, p.Annotations[controlv1alpha1.AnnotationAllocatedAt]); err != nil {
		t.Errorf("allocated-at annotation: %v", err)
	}

	if diff := cmp.Diff([]string{"cur-old", "cur-young"}, claimer.claimedPods()); diff != "" {
		t.Fatalf("claimed pods (-want +got):\n%s", diff)
	}
	bs := h.batchSandbox()
	want := execdapi.ClaimRequest{SandboxUID: "demo-uid", Namespace: testNamespace, Name: testName,
		Entrypoint: []string{"python3", "-m", "http.server"}, Env: []execdapi.EnvVar{{Name: "GREETING", Value: "hi"}}}
	if diff := cmp.Diff(want, claimer.claims["cur-old"]); diff != "" {
		t.Errorf("claim (-want +got):\n%s", diff)
	}
	// Every claimed pod was certified first: nothing of the sandbox goes to an unverified pod.
	if diff := cmp.Diff([]string{"cur-old", "cur-young"}, sorted(h.certifier.ensured)); diff != "" {
		t.Errorf("certified pods (-want +got):\n%s", diff)
	}
	if len(h.secrets()) != 0 {
		t.Errorf("secrets = %v, want none", h.secrets())
	}

	if bs.Status.Phase != controlv1alpha1.PhaseRunning || bs.Status.Ready != 2 {
		t.Errorf("status = %s %d/2 ready, want Running 2/2", bs.Status.Phase, bs.Status.Ready)
	}
	if got := bs.Status.Pods[0].RuntimeID; got != "containerd://cur-old" {
		t.Errorf("runtimeID = %q, want the container that accepted the claim", got)
	}
	// Ready on its first allocation: the happy path records no Event (every write counts).
	checkEvents(t, h.events(), nil)

	// Nothing changes on a second pass: no new claims, no writes.
	claimer.claims = nil
	h.mustReconcile()
	if got := claimer.claimedPods(); len(got) != 0 {
		t.Errorf("second reconcile claimed %v again", got)
	}
	checkEvents(t, h.events(), nil)
}

func TestPooledPoolMissingAndExhausted(t *testing.T) {
	t.Run("pool missing", func(t *testing.T) {
		h, _ := newPooledHarness(t, nil, pooledBatchSandbox(1))
		h.mustReconcile()
		bs := h.batchSandbox()
		c := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionReady)
		if bs.Status.Phase != controlv1alpha1.PhasePending || c == nil || c.Reason != controlv1alpha1.ReasonPoolNotFound {
			t.Errorf("status = %s %+v, want Pending with PoolNotFound", bs.Status.Phase, c)
		}
		checkEvents(t, h.events(), []string{"Warning PoolNotFound"})
		h.mustReconcile()
		checkEvents(t, h.events(), nil) // told once
	})
	t.Run("pool exhausted", func(t *testing.T) {
		h, _ := newPooledHarness(t, nil, pooledBatchSandbox(3), testPool(),
			idlePod("a", true, true, time.Hour), idlePod("b", true, false, time.Hour))
		h.mustReconcile()
		bs := h.batchSandbox()
		c := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionReady)
		if bs.Status.Phase != controlv1alpha1.PhasePending || c == nil || c.Reason != controlv1alpha1.ReasonPoolExhausted {
			t.Fatalf("status = %s %+v, want Pending with PoolExhausted", bs.Status.Phase, c)
		}
		if diff := cmp.Diff(map[string]string{"0": "a"}, h.allocatedPods()); diff != "" {
			t.Errorf("allocation (-want +got):\n%s", diff)
		}
		checkEvents(t, h.events(), []string{"Normal Allocated", "Warning PoolExhausted"})
		// The starting pod becomes ready: the next replica gets it.
		h.setPodStatus("b", func(s *corev1.PodStatus) {
			s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		})
		h.mustReconcile()
		if diff := cmp.Diff(map[string]string{"0": "a", "1": "b"}, h.allocatedPods()); diff != "" {
			t.Errorf("allocation (-want +got):\n%s", diff)
		}
	})
}

// TestPooledAllocationConflict: another sandbox won the first candidate (its resourceVersion
// changed): the replica gets the next one, and the pod taken stays with its winner.
func TestPooledAllocationConflict(t *testing.T) {
	funcs := &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if obj.GetName() == "first" {
			return apierrors.NewConflict(corev1.Resource("pods"), "first", nil)
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
	h, _ := newPooledHarness(t, funcs, pooledBatchSandbox(1), testPool(),
		idlePod("first", true, true, 2*time.Hour), idlePod("second", true, true, time.Hour))
	h.mustReconcile()
	if diff := cmp.Diff(map[string]string{"0": "second"}, h.allocatedPods()); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
	if _, ok := h.pod("first").Labels[controlv1alpha1.LabelBatchSandbox]; ok {
		t.Error("the pod that lost the race was labelled")
	}
}

func TestPooledLostPodAndScaleDown(t *testing.T) {
	h, claimer := newPooledHarness(t, nil, pooledBatchSandbox(2), testPool(),
		idlePod("a", true, true, 3*time.Hour), idlePod("b", true, true, 2*time.Hour), idlePod("c", true, true, time.Hour))
	h.mustReconcile()
	h.events()
	if diff := cmp.Diff(map[string]string{"0": "a", "1": "b"}, h.allocatedPods()); diff != "" {
		t.Fatalf("allocation (-want +got):\n%s", diff)
	}
	// Pod a is deleted (evicted, or by hand): replica 0 gets c at once, and the Event says so.
	if err := h.client.Delete(h.ctx(), h.pod("a")); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile()
	if diff := cmp.Diff(map[string]string{"0": "c", "1": "b"}, h.allocatedPods()); diff != "" {
		t.Fatalf("after losing a pod (-want +got):\n%s", diff)
	}
	checkEvents(t, h.events(), []string{"Warning PodLost"})
	if bs := h.batchSandbox(); bs.Status.Ready != 2 || bs.Status.Pods[0].Name != "c" {
		t.Errorf("status after replacement = %+v", bs.Status)
	}

	// A restarted container forgets its claim: it is claimed again.
	claimer.claims = nil
	h.setPodStatus("c", func(s *corev1.PodStatus) { s.ContainerStatuses[0].ContainerID = "containerd://c-restarted" })
	h.mustReconcile()
	if diff := cmp.Diff([]string{"c"}, claimer.claimedPods()); diff != "" {
		t.Errorf("claims after a container restart (-want +got):\n%s", diff)
	}

	// Scale down to 1: replica 1's pod is released (deleted: recycleStrategy Delete).
	bs := h.batchSandbox()
	bs.Spec.Replicas = ptr.To[int32](1)
	if err := h.client.Update(h.ctx(), bs); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile()
	if diff := cmp.Diff([]string{"c"}, h.podNames()); diff != "" {
		t.Errorf("pods after scaling down (-want +got):\n%s", diff)
	}
}

func TestPooledClaimRejected(t *testing.T) {
	t.Run("bad entrypoint fails the sandbox", func(t *testing.T) {
		h, claimer := newPooledHarness(t, nil, pooledBatchSandbox(1), testPool(), idlePod("a", true, true, time.Hour))
		claimer.reject = map[string]int{"a": http.StatusBadRequest}
		h.mustReconcile()
		bs := h.batchSandbox()
		c := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionReady)
		if bs.Status.Phase != controlv1alpha1.PhaseFailed || c == nil || c.Reason != controlv1alpha1.ReasonAllocateFailed {
			t.Errorf("status = %s %+v, want Failed with AllocateFailed", bs.Status.Phase, c)
		}
		if bs.Status.Ready != 0 {
			t.Errorf("ready = %d, want 0: the pod did not accept the sandbox", bs.Status.Ready)
		}
		checkEvents(t, h.events(), []string{"Warning AllocateFailed"})
	})
	t.Run("a pod claimed by someone else is replaced", func(t *testing.T) {
		h, claimer := newPooledHarness(t, nil, pooledBatchSandbox(1), testPool(),
			idlePod("a", true, true, 2*time.Hour), idlePod("b", true, true, time.Hour))
		claimer.reject = map[string]int{"a": http.StatusConflict}
		if err := h.reconcile(); err == nil {
			t.Fatal("Reconcile() = nil, want an error that retries")
		}
		if diff := cmp.Diff([]string{"b"}, h.podNames()); diff != "" {
			t.Errorf("pods (-want +got):\n%s", diff)
		}
		checkEvents(t, h.events(), []string{"Warning AllocateFailed execd of pod a refused the allocation"})
		h.mustReconcile()
		if diff := cmp.Diff(map[string]string{"0": "b"}, h.allocatedPods()); diff != "" {
			t.Errorf("allocation (-want +got):\n%s", diff)
		}
		checkEvents(t, h.events(), []string{"Normal PodsReady"})
	})
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// TestPooledClaimNeedsIdentity: a pod whose execd does not prove to be the pod gets no claim,
// and the sandbox says why.
func TestPooledClaimNeedsIdentity(t *testing.T) {
	h, claimer := newPooledHarness(t, nil, pooledBatchSandbox(1), testPool(), idlePod("a", true, true, time.Hour))
	h.certifier.fail = map[string]error{"a": &identity.ErrNotThePod{Pod: "a", Reason: "its token is bound to pod b"}}
	if err := h.reconcile(); err == nil {
		t.Fatal("Reconcile() = nil, want the identity error, so that it is retried")
	}
	if got := claimer.claimedPods(); len(got) != 0 {
		t.Errorf("claimed %v, want nothing before the pod's identity verified", got)
	}
	bs := h.batchSandbox()
	cond := findReady(t, bs)
	if bs.Status.Ready != 0 || cond.Reason != controlv1alpha1.ReasonIdentityFailed || !strings.Contains(cond.Message, "bound to pod b") {
		t.Errorf("status %d ready, condition %s %q; want none ready and IdentityFailed", bs.Status.Ready, cond.Reason, cond.Message)
	}
	checkEvents(t, h.events(), []string{"Warning IdentityFailed"})
}

// TestPooledPoolNotAllowed: a pool of the namespace's pod security level gives pods only to a
// sandbox admitted for them, and no pool gives pods of a template it refuses.
func TestPooledPoolNotAllowed(t *testing.T) {
	elevated := testPool()
	elevated.Spec.PodSecurity = controlv1alpha1.PodSecurityNamespace
	refusing := testPool()
	refusing.Generation = 3
	refusing.Status.Conditions = []metav1.Condition{{Type: controlv1alpha1.PoolConditionReady, Status: metav1.ConditionFalse,
		Reason: controlv1alpha1.ReasonTemplateRefused, Message: "privileged", ObservedGeneration: 3}}
	admitted := pooledBatchSandbox(1)
	admitted.Annotations = map[string]string{controlv1alpha1.AnnotationPodSecurity: "Namespace"}
	tests := []struct {
		name        string
		bs          *controlv1alpha1.BatchSandbox
		pool        *controlv1alpha1.Pool
		wantAlloc   bool
		wantMessage string
	}{
		{name: "elevated pool, sandbox not admitted", bs: pooledBatchSandbox(1), pool: elevated, wantMessage: "podSecurity: Namespace"},
		{name: "elevated pool, sandbox admitted", bs: admitted, pool: elevated, wantAlloc: true},
		{name: "pool refusing its template", bs: pooledBatchSandbox(1), pool: refusing, wantMessage: "refuses its own template: privileged"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newPooledHarness(t, nil, tc.bs, tc.pool, idlePod("a", true, true, time.Hour))
			h.mustReconcile()
			if got := len(h.allocatedPods()) == 1; got != tc.wantAlloc {
				t.Fatalf("allocated: %v, want %v", got, tc.wantAlloc)
			}
			if !tc.wantAlloc {
				cond := findReady(t, h.batchSandbox())
				if cond.Reason != controlv1alpha1.ReasonPoolNotAllowed || !strings.Contains(cond.Message, tc.wantMessage) {
					t.Errorf("condition %s %q, want PoolNotAllowed with %q", cond.Reason, cond.Message, tc.wantMessage)
				}
				checkEvents(t, h.events(), []string{"Warning PoolNotAllowed"})
			}
		})
	}
}

// TestPooledElevatedPodsStayElevated: a pod made while its pool had podSecurity: Namespace goes
// only to a sandbox admitted for that, even once the pool says Platform again (a user who may
// write pools but not create pods switched it back).
func TestPooledElevatedPodsStayElevated(t *testing.T) {
	elevatedPod := idlePod("elevated", false, true, time.Hour)
	elevatedPod.Labels[controlv1alpha1.LabelPodSecurity] = string(controlv1alpha1.PodSecurityNamespace)
	admitted := pooledBatchSandbox(1)
	admitted.Annotations = map[string]string{controlv1alpha1.AnnotationPodSecurity: "Namespace"}
	for name, tc := range map[string]struct {
		bs        *controlv1alpha1.BatchSandbox
		wantAlloc bool
	}{
		"sandbox not admitted": {bs: pooledBatchSandbox(1)},
		"sandbox admitted":     {bs: admitted, wantAlloc: true},
	} {
		t.Run(name, func(t *testing.T) {
			h, _ := newPooledHarness(t, nil, tc.bs, testPool(), elevatedPod.DeepCopy())
			h.mustReconcile()
			if got := len(h.allocatedPods()) == 1; got != tc.wantAlloc {
				t.Fatalf("allocated: %v, want %v", got, tc.wantAlloc)
			}
			if !tc.wantAlloc {
				if cond := findReady(t, h.batchSandbox()); cond.Reason != controlv1alpha1.ReasonPoolExhausted {
					t.Errorf("condition %s %q, want PoolExhausted: the pool has no pod for it", cond.Reason, cond.Message)
				}
			}
		})
	}
}

// TestPooledStaleCache: a reconcile that reads the sandbox as it was before this process's
// own status write (the cache behind, while the pod's allocation already shows) neither claims
// again nor writes nor records anything; once the cache shows the write, reconciles go on.
func TestPooledStaleCache(t *testing.T) {
	var stale *controlv1alpha1.BatchSandbox
	var statusWrites int
	funcs := &interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if bs, ok := obj.(*controlv1alpha1.BatchSandbox); ok && stale != nil {
				stale.DeepCopyInto(bs)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			statusWrites++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
	h, claimer := newPooledHarness(t, funcs, pooledBatchSandbox(1), testPool(), idlePod("a", true, true, time.Hour))
	before := h.batchSandbox()
	h.mustReconcile()
	if statusWrites != 1 || len(claimer.claimedPods()) != 1 {
		t.Fatalf("first reconcile: %d status writes, claims %v; want 1 and one", statusWrites, claimer.claimedPods())
	}
	checkEvents(t, h.events(), nil)

	// The cache still serves the sandbox as it was read before the write.
	stale = before
	claimer.claims = nil
	h.mustReconcile()
	if statusWrites != 1 || len(claimer.claimedPods()) != 0 {
		t.Errorf("reconcile on a stale cache: %d status writes, claims %v; want none", statusWrites-1, claimer.claimedPods())
	}
	checkEvents(t, h.events(), nil)

	// Caught up: nothing to do either, and what was remembered is dropped.
	stale = nil
	h.mustReconcile()
	if statusWrites != 1 || len(claimer.claimedPods()) != 0 {
		t.Errorf("reconcile on a fresh cache: %d status writes, claims %v; want none", statusWrites-1, claimer.claimedPods())
	}
	if r := h.r.writes.over; len(r) != 0 {
		t.Errorf("still remembered: %v", r)
	}
}
