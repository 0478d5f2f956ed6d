package batchsandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/reference"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/identity"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/index"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

const (
	testNamespace = "team-a"
	testName      = "demo"
)

// ignoreTransitionTime: the clock is not under test; reason, status and message are.
var ignoreTransitionTime = cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")

// testAuthority is a real kube-sandbox CA, as the controller holds it.
var testAuthority = sync.OnceValue(func() *pki.Authority {
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	if err != nil {
		panic(err)
	}
	a := pki.NewAuthority(nil)
	a.Set(ca, nil)
	return a
})

// fakeCertifier stands in for package identity, which needs a pod's execd on the network: it
// certifies every pod but those in fail, and counts what it was asked.
type fakeCertifier struct {
	mu      sync.Mutex
	fail    map[string]error // by pod name
	ensured []string
	forgot  []types.UID
}

func (f *fakeCertifier) Ensure(_ context.Context, pod *corev1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ensured = append(f.ensured, pod.Name)
	return f.fail[pod.Name]
}

func (f *fakeCertifier) Forget(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = append(f.forgot, uid)
}

func newBatchSandbox(replicas *int32) *controlv1alpha1.BatchSandbox {
	return &controlv1alpha1.BatchSandbox{
		ObjectMeta: metav1.ObjectMeta{Name: testName, Namespace: testNamespace, UID: "demo-uid", Generation: 1},
		Spec: controlv1alpha1.BatchSandboxSpec{
			Replicas: replicas,
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
			}},
		},
	}
}

func readyCondition(status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{
		Type:               controlv1alpha1.ConditionReady,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: 1,
	}
}

// harness is a Reconciler on a fake client, with the helpers the tests share.
type harness struct {
	t         *testing.T
	client    client.Client
	rec       *recorder
	r         *Reconciler
	certifier *fakeCertifier
}

func newHarness(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) *harness {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := controlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&controlv1alpha1.BatchSandbox{}).
		WithObjects(objs...)
	for _, f := range index.Fields() {
		b = b.WithIndex(f.Object, f.Name, f.Extract)
	}
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	c := b.Build()
	rec := &recorder{scheme: s, events: make(chan recordedEvent, 100)}
	certifier := &fakeCertifier{}
	return &harness{t: t, client: c, rec: rec, certifier: certifier,
		r: &Reconciler{Client: c, Recorder: rec, ExecdImage: testExecdImage, Authority: testAuthority(), Certifier: certifier}}
}

func (h *harness) ctx() context.Context { return h.t.Context() }

func (h *harness) reconcile() error {
	h.t.Helper()
	res, err := h.r.Reconcile(h.ctx(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNamespace, Name: testName}})
	if !res.IsZero() {
		h.t.Errorf("Reconcile() result = %+v, want zero: pod events drive the controller, not polling", res)
	}
	return err
}

func (h *harness) mustReconcile() {
	h.t.Helper()
	if err := h.reconcile(); err != nil {
		h.t.Fatalf("Reconcile(): %v", err)
	}
}

func (h *harness) batchSandbox() *controlv1alpha1.BatchSandbox {
	h.t.Helper()
	bs := &controlv1alpha1.BatchSandbox{}
	if err := h.client.Get(h.ctx(), types.NamespacedName{Namespace: testNamespace, Name: testName}, bs); err != nil {
		h.t.Fatalf("get BatchSandbox: %v", err)
	}
	return bs
}

func (h *harness) pods() []corev1.Pod {
	h.t.Helper()
	list := &corev1.PodList{}
	if err := h.client.List(h.ctx(), list, client.InNamespace(testNamespace)); err != nil {
		h.t.Fatalf("list pods: %v", err)
	}
	sort.Slice(list.Items, func(a, b int) bool { return list.Items[a].Name < list.Items[b].Name })
	return list.Items
}

func (h *harness) podNames() []string {
	h.t.Helper()
	var names []string
	for _, p := range h.pods() {
		names = append(names, p.Name)
	}
	return names
}

func (h *harness) pod(name string) *corev1.Pod {
	h.t.Helper()
	p := &corev1.Pod{}
	if err := h.client.Get(h.ctx(), types.NamespacedName{Namespace: testNamespace, Name: name}, p); err != nil {
		h.t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

func (h *harness) secrets() []corev1.Secret {
	h.t.Helper()
	list := &corev1.SecretList{}
	if err := h.client.List(h.ctx(), list, client.InNamespace(testNamespace)); err != nil {
		h.t.Fatalf("list secrets: %v", err)
	}
	return list.Items
}

// setPodStatus writes a pod's status through the status subresource, as the kubelet does.
func (h *harness) setPodStatus(name string, mutate func(*corev1.PodStatus)) {
	h.t.Helper()
	p := h.pod(name)
	mutate(&p.Status)
	if err := h.client.Status().Update(h.ctx(), p); err != nil {
		h.t.Fatalf("update status of pod %s: %v", name, err)
	}
}

// recorder is an events recorder for tests: it keeps each Event's text, as events.FakeRecorder
// writes it ("type reason note"), and the reference the events API would record as its
// regarding object, with the manager's scheme (which knows BatchSandboxes, not Sandboxes).
type recorder struct {
	scheme *runtime.Scheme
	events chan recordedEvent
}

type recordedEvent struct {
	text      string
	regarding *corev1.ObjectReference
	err       error
}

var _ events.EventRecorder = &recorder{}

func (r *recorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	ref, err := reference.GetReference(r.scheme, regarding)
	r.events <- recordedEvent{text: eventtype + " " + reason + " " + fmt.Sprintf(note, args...), regarding: ref, err: err}
}

// sandboxRef is the regarding object of every Event about the test's sandbox: its Sandbox, which
// users see, not the BatchSandbox. Its resourceVersion is whichever the controller read.
var sandboxRef = corev1.ObjectReference{APIVersion: "sandbox.kube-sandbox.io/v1alpha1", Kind: "Sandbox",
	Namespace: testNamespace, Name: testName, UID: "demo-uid"}

// events drains the events recorded so far, and checks that each is about the sandbox's Sandbox.
func (h *harness) events() []string {
	h.t.Helper()
	var out []string
	for {
		select {
		case e := <-h.rec.events:
			out = append(out, e.text)
			if e.err != nil {
				h.t.Errorf("event %q: no reference to its object: %v", e.text, e.err)
			} else if diff := cmp.Diff(sandboxRef, *e.regarding, cmpopts.IgnoreFields(corev1.ObjectReference{}, "ResourceVersion")); diff != "" {
				h.t.Errorf("event %q regards %+v, want the Sandbox (-want +got):\n%s", e.text, *e.regarding, diff)
			}
		default:
			return out
		}
	}
}

// checkEvents compares recorded events by prefix: error texts at the end are not under test.
func checkEvents(t *testing.T, got, wantPrefixes []string) {
	t.Helper()
	if len(got) != len(wantPrefixes) {
		t.Errorf("events = %q, want %d starting with %q", got, len(wantPrefixes), wantPrefixes)
		return
	}
	for i := range got {
		if !strings.HasPrefix(got[i], wantPrefixes[i]) {
			t.Errorf("event %d = %q, want prefix %q", i, got[i], wantPrefixes[i])
		}
	}
}

func TestReconcileCreatesPods(t *testing.T) {
	tests := []struct {
		name       string
		replicas   *int32
		wantPods   []string
		wantStatus controlv1alpha1.BatchSandboxStatus
		wantEvents []string
	}{
		{
			name:     "two replicas",
			replicas: ptr.To[int32](2),
			wantPods: []string{"demo-0", "demo-1"},
			wantStatus: controlv1alpha1.BatchSandboxStatus{
				ObservedGeneration: 1,
				Phase:              controlv1alpha1.PhasePending,
				Replicas:           2,
				Pods:               []controlv1alpha1.SandboxPodStatus{{Replica: 0, Name: "demo-0"}, {Replica: 1, Name: "demo-1"}},
				Conditions:         []metav1.Condition{readyCondition(metav1.ConditionFalse, controlv1alpha1.ReasonPodsNotReady, "0/2 replicas ready")},
			},
		},
		{
			name:     "replicas unset means one",
			wantPods: []string{"demo-0"},
			wantStatus: controlv1alpha1.BatchSandboxStatus{
				ObservedGeneration: 1,
				Phase:              controlv1alpha1.PhasePending,
				Replicas:           1,
				Pods:               []controlv1alpha1.SandboxPodStatus{{Replica: 0, Name: "demo-0"}},
				Conditions:         []metav1.Condition{readyCondition(metav1.ConditionFalse, controlv1alpha1.ReasonPodsNotReady, "0/1 replicas ready")},
			},
		},
		{
			name:     "zero replicas: no pods, and every one of them is ready",
			replicas: ptr.To[int32](0),
			wantStatus: controlv1alpha1.BatchSandboxStatus{
				ObservedGeneration: 1,
				Phase:              controlv1alpha1.PhaseRunning,
				Conditions:         []metav1.Condition{readyCondition(metav1.ConditionTrue, controlv1alpha1.ReasonPodsReady, "0/0 replicas ready")},
			},
			wantEvents: []string{"Normal PodsReady 0/0 replicas ready"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, newBatchSandbox(tc.replicas))
			h.mustReconcile()
			bs := h.batchSandbox()

			// Nothing a pod could hold opens another: no token Secret.
			if secrets := h.secrets(); len(secrets) != 0 {
				t.Errorf("secrets = %v, want none", secrets)
			}

			if diff := cmp.Diff([]string{controlv1alpha1.FinalizerPods}, bs.Finalizers); diff != "" {
				t.Errorf("finalizers mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPods, h.podNames()); diff != "" {
				t.Errorf("pods mismatch (-want +got):\n%s", diff)
			}
			for _, p := range h.pods() {
				if !metav1.IsControlledBy(&p, bs) {
					t.Errorf("pod %s owners = %+v, want controlled by the BatchSandbox", p.Name, p.OwnerReferences)
				}
			}
			if diff := cmp.Diff(tc.wantStatus, bs.Status, ignoreTransitionTime); diff != "" {
				t.Errorf("status mismatch (-want +got):\n%s", diff)
			}
			checkEvents(t, h.events(), tc.wantEvents)
		})
	}
}

func TestReconcileIsIdempotent(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *harness)
	}{
		{
			name: "pods just created",
		},
		{
			name: "pods ready",
			setup: func(h *harness) {
				for i, name := range []string{"demo-0", "demo-1"} {
					h.setPodStatus(name, readyStatus(i))
				}
				h.mustReconcile()
			},
		},
		{
			name: "a pod cannot pull its image",
			setup: func(h *harness) {
				h.setPodStatus("demo-1", waitingStatus("main", "ErrImagePull"))
				h.mustReconcile()
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var writes []string
			count := func(verb string, obj client.Object) {
				writes = append(writes, fmt.Sprintf("%s %T %s", verb, obj, obj.GetName()))
			}
			h := newHarness(t, &interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					count("create", obj)
					return c.Create(ctx, obj, opts...)
				},
				Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					count("delete", obj)
					return c.Delete(ctx, obj, opts...)
				},
				Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
					count("update", obj)
					return c.Update(ctx, obj, opts...)
				},
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					count("patch", obj)
					return c.Patch(ctx, obj, patch, opts...)
				},
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					count("patch "+sub, obj)
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				},
				SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
					count("update "+sub, obj)
					return c.SubResource(sub).Update(ctx, obj, opts...)
				},
			}, newBatchSandbox(ptr.To[int32](2)))
			h.mustReconcile()
			if len(writes) == 0 {
				t.Fatal("first Reconcile() wrote nothing; the write counter is broken")
			}
			if tc.setup != nil {
				tc.setup(h)
			}
			bsBefore, podsBefore := h.batchSandbox(), h.pods()
			h.events()
			writes = nil

			h.mustReconcile()

			if len(writes) != 0 {
				t.Errorf("second Reconcile() wrote %q, want no writes", writes)
			}
			if got, want := h.batchSandbox().ResourceVersion, bsBefore.ResourceVersion; got != want {
				t.Errorf("BatchSandbox resourceVersion = %s after the second Reconcile(), want %s unchanged", got, want)
			}
			if diff := cmp.Diff(podsBefore, h.pods()); diff != "" {
				t.Errorf("pods changed (-before +after):\n%s", diff)
			}
			checkEvents(t, h.events(), nil)
		})
	}
}

// readyStatus is the status of replica i's pod once execd answers its readiness probe.
func readyStatus(i int) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.PodIP = fmt.Sprintf("10.0.0.%d", i+1)
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name:        "main",
			Ready:       true,
			ContainerID: fmt.Sprintf("containerd://c%d", i),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		}}
	}
}

func waitingStatus(container, reason string) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name:  container,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "image " + reason}},
		}}
	}
}

// notReadyStatus is a running pod whose execd does not answer its readiness probe yet.
func notReadyStatus(i int) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		readyStatus(i)(s)
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}}
		s.ContainerStatuses[0].Ready = false
	}
}

func TestReconcileReportsReadiness(t *testing.T) {
	tests := []struct {
		name string
		// status of pods demo-0 and demo-1; nil leaves the empty status of a new pod.
		status     [2]func(*corev1.PodStatus)
		wantStatus controlv1alpha1.BatchSandboxStatus
		wantEvents []string
	}{
		{
			name:   "running but not ready",
			status: [2]func(*corev1.PodStatus){notReadyStatus(0), nil},
			wantStatus: controlv1alpha1.BatchSandboxStatus{
				ObservedGeneration: 1,
				Phase:              controlv1alpha1.PhasePending,
				Replicas:           2,
				Pods: []controlv1alpha1.SandboxPodStatus{
					{Replica: 0, Name: "demo-0", IP: "10.0.0.1", NodeName: "node-a"},
					{Replica: 1, Name: "demo-1"},
				},
				Conditions: []metav1.Condition{readyCondition(metav1.ConditionFalse, controlv1alpha1.ReasonPodsNotReady, "0/2 replicas ready")},
			},
		},
		{
			name:   "one of two ready",
			status: [2]func(*corev1.PodStatus){notReadyStatus(0), readyStatus(1)},
			wantStatus: controlv1alpha1.BatchSandboxStatus{
				ObservedGeneration: 1,
				Phase:              controlv1alpha1.PhasePending,
				Replicas:           2,
				Ready:              1,
				Pods: []controlv1alpha1.SandboxPodStatus{
					{Replica: 0, Name: "demo-0", IP: "10.0.0.1", NodeName: "node-a"},
					{Replica: 1, Name: "demo-1", IP: "10.0.0.2", NodeName: "node-a", RuntimeID: "containerd://c1", Ready: true},
				},
				Conditions: []metav1.Condition{readyCondition(metav1.ConditionFalse, controlv1alpha1.ReasonPodsNotReady, "1/2 replicas ready")},
			},
		},
		{
			name:   "all ready",
			status: [2]func(*corev1.PodStatus){readyStatus(0), readyStatus(1)},
			wantStatus: controlv1alpha1.BatchSandboxStatus{
				ObservedGeneration: 1,
				Phase:              controlv1alpha1.PhaseRunning,
				Replicas:           2,
				Ready:              2,
				Pods: []controlv1alpha1.SandboxPodStatus{
					{Replica: 0, Name: "demo-0", IP: "10.0.0.1", NodeName: "node-a", RuntimeID: "containerd://c0", Ready: true},
					{Replica: 1, Name: "demo-1", IP: "10.0.0.2", NodeName: "node-a", RuntimeID: "containerd://c1", Ready: true},
				},
				Conditions: []metav1.Condition{readyCondition(metav1.ConditionTrue, controlv1alpha1.ReasonPodsReady, "2/2 replicas ready")},
			},
			wantEvents: []string{"Normal PodsReady 2/2 replicas ready"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, newBatchSandbox(ptr.To[int32](2)))
			h.mustReconcile()
			h.events()
			for i, status := range tc.status {
				if status == nil {
					continue
				}
				name := fmt.Sprintf("demo-%d", i)
				p := h.pod(name)
				p.Spec.NodeName = "node-a" // the scheduler's binding, as far as the controller can tell
				if err := h.client.Update(h.ctx(), p); err != nil {
					t.Fatalf("bind pod %s: %v", name, err)
				}
				h.setPodStatus(name, status)
			}

			h.mustReconcile()
			if diff := cmp.Diff(tc.wantStatus, h.batchSandbox().Status, ignoreTransitionTime); diff != "" {
				t.Errorf("status mismatch (-want +got):\n%s", diff)
			}
			checkEvents(t, h.events(), tc.wantEvents)

			// The event marks the transition to ready, not every reconcile while ready.
			h.mustReconcile()
			checkEvents(t, h.events(), nil)
		})
	}
}

// TestReconcileReadyEventOnTransition walks one sandbox through a life: the PodsReady event
// marks each change to ready, and no other status change while ready.
func TestReconcileReadyEventOnTransition(t *testing.T) {
	h := newHarness(t, nil, newBatchSandbox(ptr.To[int32](1)))
	h.mustReconcile()
	h.events()

	steps := []struct {
		name          string
		status        func(*corev1.PodStatus)
		wantPhase     controlv1alpha1.SandboxPhase
		wantRuntimeID string
		wantEvents    []string
	}{
		{
			name:          "becomes ready",
			status:        readyStatus(0),
			wantPhase:     controlv1alpha1.PhaseRunning,
			wantRuntimeID: "containerd://c0",
			wantEvents:    []string{"Normal PodsReady 1/1 replicas ready"},
		},
		{
			name: "container restarted, still ready",
			status: func(s *corev1.PodStatus) {
				s.ContainerStatuses[0].ContainerID = "containerd://c0-restarted"
				s.ContainerStatuses[0].RestartCount = 1
			},
			wantPhase:     controlv1alpha1.PhaseRunning,
			wantRuntimeID: "containerd://c0-restarted",
		},
		{
			name:          "stops answering its probe",
			status:        func(s *corev1.PodStatus) { s.Conditions[0].Status = corev1.ConditionFalse },
			wantPhase:     controlv1alpha1.PhasePending,
			wantRuntimeID: "containerd://c0-restarted",
		},
		{
			name:          "ready again",
			status:        func(s *corev1.PodStatus) { s.Conditions[0].Status = corev1.ConditionTrue },
			wantPhase:     controlv1alpha1.PhaseRunning,
			wantRuntimeID: "containerd://c0-restarted",
			wantEvents:    []string{"Normal PodsReady 1/1 replicas ready"},
		},
	}
	for _, step := range steps {
		h.setPodStatus("demo-0", step.status)
		h.mustReconcile()
		st := h.batchSandbox().Status
		if st.Phase != step.wantPhase || len(st.Pods) != 1 || st.Pods[0].RuntimeID != step.wantRuntimeID {
			t.Errorf("%s: status = %+v, want phase %s and runtimeID %s", step.name, st, step.wantPhase, step.wantRuntimeID)
		}
		got := h.events()
		if len(got) != len(step.wantEvents) {
			t.Errorf("%s: events = %q, want %q", step.name, got, step.wantEvents)
			continue
		}
		checkEvents(t, got, step.wantEvents)
	}
}

func TestReconcileScalesDown(t *testing.T) {
	tests := []struct {
		name         string
		from, to     int32
		wantPods     []string
		wantStatPods []controlv1alpha1.SandboxPodStatus
	}{
		{
			name:         "2 to 1",
			from:         2,
			to:           1,
			wantPods:     []string{"demo-0"},
			wantStatPods: []controlv1alpha1.SandboxPodStatus{{Replica: 0, Name: "demo-0"}},
		},
		{
			name:         "3 to 1",
			from:         3,
			to:           1,
			wantPods:     []string{"demo-0"},
			wantStatPods: []controlv1alpha1.SandboxPodStatus{{Replica: 0, Name: "demo-0"}},
		},
		{
			name: "2 to 0",
			from: 2,
			to:   0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, newBatchSandbox(ptr.To(tc.from)))
			h.mustReconcile()

			bs := h.batchSandbox()
			bs.Spec.Replicas = ptr.To(tc.to)
			if err := h.client.Update(h.ctx(), bs); err != nil {
				t.Fatalf("scale BatchSandbox: %v", err)
			}
			h.mustReconcile()

			if diff := cmp.Diff(tc.wantPods, h.podNames()); diff != "" {
				t.Errorf("pods mismatch (-want +got):\n%s", diff)
			}
			st := h.batchSandbox().Status
			if st.Replicas != tc.to {
				t.Errorf("status.replicas = %d, want %d", st.Replicas, tc.to)
			}
			if diff := cmp.Diff(tc.wantStatPods, st.Pods); diff != "" {
				t.Errorf("status.pods mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReconcileReplacesLostPod(t *testing.T) {
	tests := []struct {
		name string
		lost []string
	}{
		{name: "the last replica", lost: []string{"demo-1"}},
		{name: "the first replica", lost: []string{"demo-0"}},
		{name: "every replica", lost: []string{"demo-0", "demo-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, newBatchSandbox(ptr.To[int32](2)))
			h.mustReconcile()
			survivors := map[string]string{}
			for _, p := range h.pods() {
				survivors[p.Name] = p.ResourceVersion
			}
			for _, name := range tc.lost {
				delete(survivors, name)
				if err := h.client.Delete(h.ctx(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name}}); err != nil {
					t.Fatalf("delete pod %s: %v", name, err)
				}
			}

			h.mustReconcile()
			if diff := cmp.Diff([]string{"demo-0", "demo-1"}, h.podNames()); diff != "" {
				t.Errorf("pods mismatch (-want +got):\n%s", diff)
			}
			for name, rv := range survivors {
				if got := h.pod(name).ResourceVersion; got != rv {
					t.Errorf("surviving pod %s resourceVersion = %s, want %s: it must be left alone", name, got, rv)
				}
			}
			if got := h.batchSandbox().Status.Replicas; got != 2 {
				t.Errorf("status.replicas = %d, want 2", got)
			}
		})
	}
}

func TestReconcileReportsPodFailure(t *testing.T) {
	tests := []struct {
		name        string
		status      func(*corev1.PodStatus)
		wantPhase   controlv1alpha1.SandboxPhase
		wantReason  string
		wantMessage string // a substring
	}{
		{
			name:        "sandbox image never pulled",
			status:      waitingStatus("main", "ErrImageNeverPull"),
			wantPhase:   controlv1alpha1.PhaseFailed,
			wantReason:  controlv1alpha1.ReasonImagePullFailed,
			wantMessage: "container main: ErrImageNeverPull",
		},
		{
			name: "execd image backing off",
			status: func(s *corev1.PodStatus) {
				s.Phase = corev1.PodPending
				s.InitContainerStatuses = []corev1.ContainerStatus{{
					Name:  execdapi.InitContainerName,
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}},
				}}
			},
			wantPhase:   controlv1alpha1.PhaseFailed,
			wantReason:  controlv1alpha1.ReasonImagePullFailed,
			wantMessage: "container " + execdapi.InitContainerName + ": ImagePullBackOff",
		},
		{
			name: "pod failed",
			status: func(s *corev1.PodStatus) {
				s.Phase = corev1.PodFailed
				s.Reason = "Evicted"
				s.Message = "The node was low on resource: memory."
			},
			wantPhase:   controlv1alpha1.PhasePending,
			wantReason:  controlv1alpha1.ReasonPodLost,
			wantMessage: "pod demo-0 of replica 0 failed (Evicted The node was low on resource: memory.) and is being replaced",
		},
		{
			name:        "container still being created is not a failure",
			status:      waitingStatus("main", "ContainerCreating"),
			wantPhase:   controlv1alpha1.PhasePending,
			wantReason:  controlv1alpha1.ReasonPodsNotReady,
			wantMessage: "0/1 replicas ready",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, newBatchSandbox(ptr.To[int32](1)))
			h.mustReconcile()
			h.setPodStatus("demo-0", tc.status)

			h.mustReconcile()
			bs := h.batchSandbox()
			if bs.Status.Phase != tc.wantPhase {
				t.Errorf("phase = %q, want %q", bs.Status.Phase, tc.wantPhase)
			}
			cond := findReady(t, bs)
			if cond.Status != metav1.ConditionFalse || cond.Reason != tc.wantReason || !strings.Contains(cond.Message, tc.wantMessage) {
				t.Errorf("Ready condition = %s %s %q, want False %s containing %q", cond.Status, cond.Reason, cond.Message, tc.wantReason, tc.wantMessage)
			}
			if len(h.podNames()) > 0 {
				// Reported, not replaced: its status is what the user needs to see.
				if diff := cmp.Diff([]string{"demo-0"}, h.podNames()); diff != "" {
					t.Errorf("pods mismatch (-want +got):\n%s", diff)
				}
				if tc.wantReason == controlv1alpha1.ReasonPodLost {
					t.Error("a failed pod was kept: it should be replaced")
				}
				return
			}
			// A failed pod is replaced: the next reconcile makes another of the same name.
			if tc.wantReason != controlv1alpha1.ReasonPodLost {
				t.Fatalf("pod demo-0 was deleted for %s", tc.wantReason)
			}
			h.mustReconcile()
			if diff := cmp.Diff([]string{"demo-0"}, h.podNames()); diff != "" {
				t.Errorf("no replacement pod (-want +got):\n%s", diff)
			}
			if !slices.ContainsFunc(h.events(), func(e string) bool { return strings.Contains(e, controlv1alpha1.ReasonPodLost) }) {
				t.Errorf("events %v: want PodLost", h.events())
			}
		})
	}
}

func findReady(t *testing.T, bs *controlv1alpha1.BatchSandbox) metav1.Condition {
	t.Helper()
	for _, c := range bs.Status.Conditions {
		if c.Type == controlv1alpha1.ConditionReady {
			return c
		}
	}
	t.Fatalf("no Ready condition in %+v", bs.Status.Conditions)
	return metav1.Condition{}
}

func TestReconcilePodCreateErrors(t *testing.T) {
	podsGR := schema.GroupResource{Resource: "pods"}
	tests := []struct {
		name string
		err  error
		// wantErr checks the error Reconcile returns; nil means it must return none.
		wantErr     func(error) bool
		wantPhase   controlv1alpha1.SandboxPhase
		wantReason  string
		wantMessage string
		wantEvents  []string
	}{
		{
			name: "invalid pod is a user error, not retried",
			err: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "demo-0", field.ErrorList{
				field.Invalid(field.NewPath("spec", "containers").Index(0).Child("image"), "", "must not be empty"),
			}),
			wantPhase:   controlv1alpha1.PhaseFailed,
			wantReason:  controlv1alpha1.ReasonPodCreateFailed,
			wantMessage: "must not be empty",
			// Every replica is tried and reported, not only the first.
			wantEvents: []string{"Warning PodCreateFailed replica 0: ", "Warning PodCreateFailed replica 1: "},
		},
		{
			name:        "quota refusal is a user error, not retried",
			err:         apierrors.NewForbidden(podsGR, "demo-0", errors.New("exceeded quota: compute")),
			wantPhase:   controlv1alpha1.PhaseFailed,
			wantReason:  controlv1alpha1.ReasonPodCreateFailed,
			wantMessage: "exceeded quota: compute",
			wantEvents:  []string{"Warning PodCreateFailed replica 0: ", "Warning PodCreateFailed replica 1: "},
		},
		{
			name:    "server timeout is retried",
			err:     apierrors.NewServerTimeout(podsGR, "create", 1),
			wantErr: apierrors.IsServerTimeout,
		},
		{
			name:        "already exists waits for the watch",
			err:         apierrors.NewAlreadyExists(podsGR, "demo-0"),
			wantPhase:   controlv1alpha1.PhasePending,
			wantReason:  controlv1alpha1.ReasonPodsNotReady,
			wantMessage: "0/2 replicas ready",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, &interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if _, ok := obj.(*corev1.Pod); ok {
						return tc.err
					}
					return c.Create(ctx, obj, opts...)
				},
			}, newBatchSandbox(ptr.To[int32](2)))

			err := h.reconcile()
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Reconcile() = %v, want no error: retrying cannot help until the user changes something", err)
			case tc.wantErr != nil && (err == nil || !tc.wantErr(err)):
				t.Fatalf("Reconcile() = %v, want the create error %v so that it is retried", err, tc.err)
			}

			if names := h.podNames(); len(names) != 0 {
				t.Errorf("pods = %v, want none", names)
			}
			bs := h.batchSandbox()
			if tc.wantErr != nil {
				if !cmp.Equal(bs.Status, controlv1alpha1.BatchSandboxStatus{}) {
					t.Errorf("status = %+v after a transient error, want it unwritten", bs.Status)
				}
			} else {
				if bs.Status.Phase != tc.wantPhase {
					t.Errorf("phase = %q, want %q", bs.Status.Phase, tc.wantPhase)
				}
				cond := findReady(t, bs)
				if cond.Status != metav1.ConditionFalse || cond.Reason != tc.wantReason || !strings.Contains(cond.Message, tc.wantMessage) {
					t.Errorf("Ready condition = %s %s %q, want False %s containing %q", cond.Status, cond.Reason, cond.Message, tc.wantReason, tc.wantMessage)
				}
			}
			checkEvents(t, h.events(), tc.wantEvents)
		})
	}
}

func TestReconcileIgnoresForeignPods(t *testing.T) {
	tests := []struct {
		name    string
		replica string
		owners  []metav1.OwnerReference
	}{
		{
			name:    "controlled by an earlier BatchSandbox of the same name",
			replica: "0",
			owners: []metav1.OwnerReference{{
				APIVersion: "control.kube-sandbox.io/v1alpha1", Kind: "BatchSandbox", Name: testName, UID: "earlier-uid", Controller: ptr.To(true),
			}},
		},
		{
			name:    "no owner",
			replica: "0",
		},
		{
			name:    "no owner, replica beyond the spec",
			replica: "5",
		},
		{
			name:    "owned by this BatchSandbox but not as controller",
			replica: "0",
			owners: []metav1.OwnerReference{{
				APIVersion: "control.kube-sandbox.io/v1alpha1", Kind: "BatchSandbox", Name: testName, UID: "demo-uid",
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			foreign := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: "someone-elses", Namespace: testNamespace,
					Labels: map[string]string{
						controlv1alpha1.LabelBatchSandbox: testName,
						controlv1alpha1.LabelReplica:      tc.replica,
					},
					OwnerReferences: tc.owners,
				},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
			}
			h := newHarness(t, nil, newBatchSandbox(ptr.To[int32](1)), foreign)
			// Ready with an IP: counting it would make the sandbox look Running.
			h.setPodStatus(foreign.Name, readyStatus(8))
			foreignBefore := h.pod(foreign.Name)

			h.mustReconcile()

			if diff := cmp.Diff([]string{"demo-0", "someone-elses"}, h.podNames()); diff != "" {
				t.Errorf("pods mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(foreignBefore, h.pod(foreign.Name)); diff != "" {
				t.Errorf("foreign pod changed (-before +after):\n%s", diff)
			}
			want := controlv1alpha1.BatchSandboxStatus{
				ObservedGeneration: 1,
				Phase:              controlv1alpha1.PhasePending,
				Replicas:           1,
				Pods:               []controlv1alpha1.SandboxPodStatus{{Replica: 0, Name: "demo-0"}},
				Conditions:         []metav1.Condition{readyCondition(metav1.ConditionFalse, controlv1alpha1.ReasonPodsNotReady, "0/1 replicas ready")},
			}
			if diff := cmp.Diff(want, h.batchSandbox().Status, ignoreTransitionTime); diff != "" {
				t.Errorf("status mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReconcileDoesNothing(t *testing.T) {
	deleting := newBatchSandbox(ptr.To[int32](2))
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	// Someone else's finalizer: without one the fake client would not keep an object that is
	// being deleted, and without ours the controller has nothing left to do.
	deleting.Finalizers = []string{"test.kube-sandbox.io/keep"}

	tests := []struct {
		name string
		objs []client.Object
	}{
		{name: "BatchSandbox being deleted", objs: []client.Object{deleting}},
		{name: "BatchSandbox missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var writes []string
			record := func(verb string, obj client.Object) {
				writes = append(writes, fmt.Sprintf("%s %T %s", verb, obj, obj.GetName()))
			}
			h := newHarness(t, &interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					record("create", obj)
					return c.Create(ctx, obj, opts...)
				},
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					record("patch", obj)
					return c.Patch(ctx, obj, patch, opts...)
				},
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					record("patch "+sub, obj)
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				},
			}, tc.objs...)

			if err := h.reconcile(); err != nil {
				t.Fatalf("Reconcile() = %v, want nil", err)
			}
			if len(writes) != 0 {
				t.Errorf("Reconcile() wrote %q, want nothing", writes)
			}
			if names := h.podNames(); len(names) != 0 {
				t.Errorf("pods = %v, want none", names)
			}
			if s := h.secrets(); len(s) != 0 {
				t.Errorf("secrets = %v, want none", s)
			}
			checkEvents(t, h.events(), nil)
		})
	}
}

// TestReconcileFinalizesDeletedBatchSandbox: deleting a sandbox deletes its pods and holds the
// BatchSandbox until they are gone, without making new ones meanwhile.
func TestReconcileFinalizesDeletedBatchSandbox(t *testing.T) {
	tests := []struct {
		name string
		// otherFinalizers are someone else's; they must survive ours being removed.
		otherFinalizers []string
		wantGone        bool
	}{
		{name: "only our finalizer", wantGone: true},
		{name: "another finalizer too", otherFinalizers: []string{"test.kube-sandbox.io/keep"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs := newBatchSandbox(ptr.To[int32](2))
			bs.Finalizers = tc.otherFinalizers
			foreign := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: "someone-elses", Namespace: testNamespace,
					Labels: map[string]string{controlv1alpha1.LabelBatchSandbox: testName, controlv1alpha1.LabelReplica: "0"},
				},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
			}
			h := newHarness(t, nil, bs, foreign)
			h.mustReconcile()
			if err := h.client.Delete(h.ctx(), h.batchSandbox()); err != nil {
				t.Fatalf("delete BatchSandbox: %v", err)
			}

			// First pass: the pods go; the finalizer stays until the controller sees them gone.
			h.mustReconcile()
			if diff := cmp.Diff([]string{"someone-elses"}, h.podNames()); diff != "" {
				t.Errorf("pods after the first pass mismatch (-want +got):\n%s", diff)
			}
			got := h.batchSandbox()
			if got.DeletionTimestamp == nil || !slices.Contains(got.Finalizers, controlv1alpha1.FinalizerPods) {
				t.Fatalf("BatchSandbox after the first pass: deletionTimestamp %v, finalizers %q; want it held by %s",
					got.DeletionTimestamp, got.Finalizers, controlv1alpha1.FinalizerPods)
			}

			// Second pass: no pods left, the finalizer goes.
			h.mustReconcile()
			if diff := cmp.Diff([]string{"someone-elses"}, h.podNames()); diff != "" {
				t.Errorf("pods after the second pass mismatch (-want +got):\n%s", diff)
			}
			final := &controlv1alpha1.BatchSandbox{}
			err := h.client.Get(h.ctx(), types.NamespacedName{Namespace: testNamespace, Name: testName}, final)
			switch {
			case tc.wantGone && !apierrors.IsNotFound(err):
				t.Errorf("get BatchSandbox after the second pass = %v, finalizers %q; want it gone", err, final.Finalizers)
			case !tc.wantGone && err != nil:
				t.Errorf("get BatchSandbox after the second pass: %v", err)
			case !tc.wantGone:
				if diff := cmp.Diff(tc.otherFinalizers, final.Finalizers); diff != "" {
					t.Errorf("finalizers mismatch (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestReconcileTemplateWithoutContainers(t *testing.T) {
	tests := []struct {
		name     string
		template *corev1.PodTemplateSpec
	}{
		{name: "no template"},
		{name: "template without containers", template: &corev1.PodTemplateSpec{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs := newBatchSandbox(ptr.To[int32](1))
			bs.Spec.Template = tc.template
			h := newHarness(t, nil, bs)

			if err := h.reconcile(); err != nil {
				t.Fatalf("Reconcile() = %v, want nil: only the user can fix the template", err)
			}
			if names := h.podNames(); len(names) != 0 {
				t.Errorf("pods = %v, want none", names)
			}
			want := controlv1alpha1.BatchSandboxStatus{
				ObservedGeneration: 1,
				Phase:              controlv1alpha1.PhaseFailed,
				Conditions:         []metav1.Condition{readyCondition(metav1.ConditionFalse, controlv1alpha1.ReasonPodCreateFailed, "spec.template has no containers")},
			}
			if diff := cmp.Diff(want, h.batchSandbox().Status, ignoreTransitionTime); diff != "" {
				t.Errorf("status mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReconcileReadyNeedsIdentity: a replica is ready only once its pod's execd serves the
// pod's own certificate; a pod that cannot prove to be itself is reported.
func TestReconcileReadyNeedsIdentity(t *testing.T) {
	tests := []struct {
		name       string
		fail       error
		wantErr    bool
		wantReady  int32
		wantReason string
	}{
		{name: "certified", wantReady: 1, wantReason: controlv1alpha1.ReasonPodsReady},
		{name: "execd not reachable yet", fail: errors.New("connection refused"), wantErr: true, wantReason: controlv1alpha1.ReasonPodsNotReady},
		{name: "not the pod", fail: &identity.ErrNotThePod{Pod: "demo-0", Reason: "its token is bound to pod x"}, wantErr: true,
			wantReason: controlv1alpha1.ReasonIdentityFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, newBatchSandbox(ptr.To[int32](1)))
			h.mustReconcile()
			h.setPodStatus("demo-0", readyStatus(0))
			if tc.fail != nil {
				h.certifier.fail = map[string]error{"demo-0": tc.fail}
			}
			if err := h.reconcile(); (err != nil) != tc.wantErr {
				t.Fatalf("Reconcile() = %v, want an error: %v", err, tc.wantErr)
			}
			bs := h.batchSandbox()
			if cond := findReady(t, bs); bs.Status.Ready != tc.wantReady || cond.Reason != tc.wantReason {
				t.Errorf("ready %d, reason %s (%q); want %d, %s", bs.Status.Ready, cond.Reason, cond.Message, tc.wantReady, tc.wantReason)
			}
			if diff := cmp.Diff([]string{"demo-0"}, h.certifier.ensured); diff != "" {
				t.Errorf("certified (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReconcileExpires: an expired sandbox is marked Expired, told in an Event on its Sandbox,
// and deleted.
func TestReconcileExpires(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	bs := newBatchSandbox(nil)
	bs.Spec.ExpireTime = &metav1.Time{Time: now.Add(-time.Second)}
	h := newHarness(t, nil, bs)
	h.r.Clock = testingclock.NewFakePassiveClock(now)
	h.mustReconcile()
	checkEvents(t, h.events(), []string{"Normal Expired expired at 2026-01-02T03:04:04Z"})
	err := h.client.Get(h.ctx(), types.NamespacedName{Namespace: testNamespace, Name: testName}, &controlv1alpha1.BatchSandbox{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("get BatchSandbox after expiry = %v, want it gone", err)
	}
	if len(h.pods()) != 0 {
		t.Errorf("pods = %v, want none for an expired sandbox", h.podNames())
	}
}
