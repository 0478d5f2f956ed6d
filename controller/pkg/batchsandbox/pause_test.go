package batchsandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/snapshot"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// fakeAgent stands in for sandbox-node: it answers each pod's snapshot with a digest
// of its own, or with fail; release, when set, holds every answer until it is closed.
type fakeAgent struct {
	mu      sync.Mutex
	asked   []string // pod names
	fail    error
	release chan struct{}
}

func (f *fakeAgent) Snapshot(ctx context.Context, _ string, req *nodeapi.SnapshotRequest, progress func(nodeapi.Event)) (*nodeapi.Result, error) {
	f.mu.Lock()
	f.asked = append(f.asked, req.Pod)
	fail, release := f.fail, f.release
	f.mu.Unlock()
	progress(nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StageCommitting})
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	return &nodeapi.Result{Image: req.Image, Digest: "sha256:" + req.Pod, LayerSize: 10, Size: 100,
		BaseImage: "busybox", Created: time.Unix(1700000000, 0)}, nil
}

// fakeRegistry records what was deleted, and answers Digest as the registry would, or with
// down.
type fakeRegistry struct {
	mu       sync.Mutex
	tagged   []string // repository + " " + prefix
	manifest []string // repository + "@" + digest
	down     error
}

func (f *fakeRegistry) DeleteTagged(_ context.Context, repository, prefix string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tagged = append(f.tagged, repository+" "+prefix)
	return 1, f.down
}

func (f *fakeRegistry) DeleteManifest(_ context.Context, repository, digest string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.manifest = append(f.manifest, repository+"@"+digest)
	return f.down
}

func (f *fakeRegistry) Digest(_ context.Context, _, ref string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return ref, f.down
}

// pauseHarness is a harness whose Reconciler pauses, with a started Runner.
type pauseHarness struct {
	*harness
	agent    *fakeAgent
	registry *fakeRegistry
	notified chan types.NamespacedName
}

func newPauseHarness(t *testing.T, bs *controlv1alpha1.BatchSandbox) *pauseHarness {
	h := &pauseHarness{harness: newHarness(t, nil, bs), agent: &fakeAgent{}, registry: &fakeRegistry{},
		notified: make(chan types.NamespacedName, 100)}
	runner := &snapshot.Runner{Agent: h.agent, Notify: func(n types.NamespacedName) { h.notified <- n }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = runner.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-runner.Started()
	h.r.Snapshots = &Snapshots{Registry: snapshot.Registry{Host: "registry.test:5000"}, Runner: runner, Deleter: h.registry}
	return h
}

// giveUIDs gives the pods UIDs of their own, as the kube-apiserver does (the fake client
// leaves them empty), which the Runner tells jobs apart by.
func (h *pauseHarness) giveUIDs() {
	h.t.Helper()
	for _, p := range h.pods() {
		if p.UID == "" {
			p.UID = types.UID("uid-" + p.Name + "-" + p.ResourceVersion)
			if err := h.client.Update(h.ctx(), &p); err != nil {
				h.t.Fatalf("give pod %s a UID: %v", p.Name, err)
			}
		}
	}
}

func (h *pauseHarness) reconcileResult() reconcile.Result {
	h.t.Helper()
	res, err := h.r.Reconcile(h.ctx(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNamespace, Name: testName}})
	if err != nil {
		h.t.Fatalf("Reconcile(): %v", err)
	}
	return res
}

// waitJobsDone waits for the Runner to report the end of n jobs (each reports its first stage
// and its end).
func (h *pauseHarness) waitJobsDone(n int) {
	h.t.Helper()
	for range 2 * n {
		select {
		case <-h.notified:
		case <-time.After(10 * time.Second):
			h.t.Fatalf("the snapshot runner did not report; asked %v, status %+v", h.agent.asked, h.batchSandbox().Status)
		}
	}
	// The job is marked done before Notify; nothing more to wait for.
}

func (h *pauseHarness) setPaused(paused bool) {
	h.t.Helper()
	bs := h.batchSandbox()
	bs.Spec.Paused = paused
	bs.Generation++
	if err := h.client.Update(h.ctx(), bs); err != nil {
		h.t.Fatalf("update spec.paused: %v", err)
	}
}

func pausedCondition(t *testing.T, bs *controlv1alpha1.BatchSandbox) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionPaused)
	if c == nil {
		t.Fatalf("no Paused condition in %+v", bs.Status.Conditions)
	}
	return *c
}

// TestPauseAndResume walks the phase machine: Running → Pausing (snapshots taken, pods kept
// until the status holds them) → Paused (no pod) → Resuming (pods from the snapshot images) →
// Running; and deleting the sandbox deletes its snapshots by its UID.
func TestPauseAndResume(t *testing.T) {
	h := newPauseHarness(t, newBatchSandbox(ptr.To[int32](2)))
	h.mustReconcile()
	h.giveUIDs()
	for i, name := range []string{"demo-0", "demo-1"} {
		h.setPodStatus(name, readyStatus(i))
	}
	h.mustReconcile()
	if got := h.batchSandbox().Status.Phase; got != controlv1alpha1.PhaseRunning {
		t.Fatalf("phase before the pause = %s, want Running", got)
	}

	h.agent.release = make(chan struct{})
	h.setPaused(true)
	h.reconcileResult()
	bs := h.batchSandbox()
	if bs.Status.Phase != controlv1alpha1.PhasePausing || len(h.pods()) != 2 || len(bs.Status.Snapshots) != 0 {
		t.Fatalf("while the snapshots are taken: phase %s, %d pods, %d snapshots; want Pausing, both pods, none",
			bs.Status.Phase, len(h.pods()), len(bs.Status.Snapshots))
	}
	if c := pausedCondition(t, bs); c.Status != metav1.ConditionFalse || c.Reason != controlv1alpha1.ReasonPausing {
		t.Errorf("Paused condition while pausing = %s %s %q", c.Status, c.Reason, c.Message)
	}
	// A reconcile meanwhile starts nothing twice.
	h.reconcileResult()
	close(h.agent.release)
	h.waitJobsDone(2)
	if diff := cmp.Diff([]string{"demo-0", "demo-1"}, h.agent.asked, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("snapshots asked for (-want +got):\n%s", diff)
	}

	h.reconcileResult() // records the snapshots, then deletes the pods
	bs = h.batchSandbox()
	if len(h.pods()) != 0 {
		t.Errorf("pods after the snapshots were recorded: %v", h.podNames())
	}
	want := []controlv1alpha1.SnapshotStatus{}
	for i, name := range []string{"demo-0", "demo-1"} {
		p := "registry.test:5000/kube-sandbox/snapshots/team-a/demo"
		want = append(want, controlv1alpha1.SnapshotStatus{Replica: int32(i), Image: p + "@sha256:" + name,
			Tag: p + ":" + snapshot.Tag(bs.UID, int32(i), types.UID(bs.Status.Snapshots[i].PodUID)), Digest: "sha256:" + name,
			Size: 100, LayerSize: 10, BaseImage: "busybox", CreationTime: metav1.NewTime(time.Unix(1700000000, 0)), Pod: name,
			PodUID: bs.Status.Snapshots[i].PodUID})
	}
	if diff := cmp.Diff(want, bs.Status.Snapshots); diff != "" {
		t.Errorf("status.snapshots (-want +got):\n%s", diff)
	}

	h.reconcileResult() // no pod left
	bs = h.batchSandbox()
	if bs.Status.Phase != controlv1alpha1.PhasePaused {
		t.Errorf("phase with no pod left = %s, want Paused", bs.Status.Phase)
	}
	if c := pausedCondition(t, bs); c.Status != metav1.ConditionTrue || c.Reason != controlv1alpha1.ReasonPaused {
		t.Errorf("Paused condition = %s %s %q, want True Paused", c.Status, c.Reason, c.Message)
	}
	if c := findReady(t, bs); c.Status != metav1.ConditionFalse || c.Reason != controlv1alpha1.ReasonPaused {
		t.Errorf("Ready condition when paused = %s %s, want False Paused", c.Status, c.Reason)
	}
	checkEvents(t, h.events(), []string{"Normal PodsReady", "Normal Paused"})

	h.setPaused(false)
	h.mustReconcile()
	bs = h.batchSandbox()
	if bs.Status.Phase != controlv1alpha1.PhaseResuming {
		t.Errorf("phase right after the resume = %s, want Resuming", bs.Status.Phase)
	}
	for i, name := range []string{"demo-0", "demo-1"} {
		p := h.pod(name)
		if got, want := p.Spec.Containers[0].Image, bs.Status.Snapshots[i].Image; got != want {
			t.Errorf("pod %s image = %s, want its snapshot %s", name, got, want)
		}
		h.setPodStatus(name, readyStatus(i))
	}
	h.mustReconcile()
	bs = h.batchSandbox()
	if c := pausedCondition(t, bs); bs.Status.Phase != controlv1alpha1.PhaseRunning || c.Reason != controlv1alpha1.ReasonResumed {
		t.Errorf("after the pods are ready: phase %s, Paused %s %q; want Running, Resumed", bs.Status.Phase, c.Reason, c.Message)
	}

	if err := h.client.Delete(h.ctx(), bs); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile() // the pods go
	h.mustReconcile() // the snapshots and the finalizer go
	if diff := cmp.Diff([]string{"kube-sandbox/snapshots/team-a/demo s-demo-uid-"}, h.registry.tagged); diff != "" {
		t.Errorf("deleted from the registry (-want +got):\n%s", diff)
	}
}

// TestPauseSnapshotFails: a snapshot that fails keeps the pod, leaves the sandbox Running with
// the reason, and is taken again after SnapshotRetryDelay (a deadline, not a poll).
func TestPauseSnapshotFails(t *testing.T) {
	h := newPauseHarness(t, newBatchSandbox(nil))
	h.mustReconcile()
	h.setPodStatus("demo-0", readyStatus(0))
	h.mustReconcile()
	h.agent.fail = &snapshot.Failed{Reason: nodeapi.ReasonRegistryUnavailable, Message: "dial tcp 10.250.0.1:5000: connection refused"}
	h.setPaused(true)
	h.reconcileResult()
	h.waitJobsDone(1)
	res := h.reconcileResult()
	bs := h.batchSandbox()
	if len(h.pods()) != 1 || bs.Status.Phase != controlv1alpha1.PhaseRunning {
		t.Errorf("after a failed snapshot: %d pods, phase %s; want the pod kept and Running", len(h.pods()), bs.Status.Phase)
	}
	c := pausedCondition(t, bs)
	if c.Status != metav1.ConditionFalse || c.Reason != controlv1alpha1.ReasonRegistryUnavailable {
		t.Errorf("Paused condition = %s %s %q, want False RegistryUnavailable", c.Status, c.Reason, c.Message)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > SnapshotRetryDelay {
		t.Errorf("RequeueAfter = %s, want the retry within %s", res.RequeueAfter, SnapshotRetryDelay)
	}
	if c := findReady(t, bs); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready after a failed snapshot = %s %s, want True: the sandbox is usable", c.Status, c.Reason)
	}
}

// TestResumeWaitsForTheRegistry: a Paused sandbox whose registry does not answer makes no pod,
// stays Paused with the reason, and tries again after SnapshotRetryDelay.
func TestResumeWaitsForTheRegistry(t *testing.T) {
	bs := newBatchSandbox(nil)
	bs.Finalizers = []string{controlv1alpha1.FinalizerPods}
	bs.Status = controlv1alpha1.BatchSandboxStatus{Phase: controlv1alpha1.PhasePaused,
		Snapshots: []controlv1alpha1.SnapshotStatus{{Replica: 0, Image: "registry.test:5000/kube-sandbox/snapshots/team-a/demo@sha256:1", Digest: "sha256:1", Pod: "demo-0", PodUID: "p"}},
		Conditions: []metav1.Condition{{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionTrue, Reason: controlv1alpha1.ReasonPaused,
			LastTransitionTime: metav1.Now()}}}
	h := newPauseHarness(t, bs)
	h.registry.down = errors.New("dial tcp: connection refused")
	res := h.reconcileResult()
	got := h.batchSandbox()
	if len(h.pods()) != 0 || got.Status.Phase != controlv1alpha1.PhasePaused {
		t.Errorf("with the registry down: %d pods, phase %s; want none, Paused", len(h.pods()), got.Status.Phase)
	}
	if c := pausedCondition(t, got); c.Reason != controlv1alpha1.ReasonRegistryUnavailable {
		t.Errorf("Paused condition = %s %q, want RegistryUnavailable", c.Reason, c.Message)
	}
	if res.RequeueAfter != SnapshotRetryDelay {
		t.Errorf("RequeueAfter = %s, want %s", res.RequeueAfter, SnapshotRetryDelay)
	}
	h.registry.down = nil
	h.reconcileResult()
	if p := h.pod("demo-0"); p.Spec.Containers[0].Image != "registry.test:5000/kube-sandbox/snapshots/team-a/demo@sha256:1" {
		t.Errorf("once the registry answers: image %s, want the snapshot", p.Spec.Containers[0].Image)
	}
}

// TestPauseWithoutRegistry: with no registry configured a pause changes nothing but the
// condition, and the sandbox's pods are looked after as ever.
func TestPauseWithoutRegistry(t *testing.T) {
	h := newHarness(t, nil, newBatchSandbox(nil))
	h.mustReconcile()
	bs := h.batchSandbox()
	bs.Spec.Paused = true
	if err := h.client.Update(h.ctx(), bs); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile()
	bs = h.batchSandbox()
	if c := pausedCondition(t, bs); len(h.pods()) != 1 || c.Reason != controlv1alpha1.ReasonRegistryUnavailable {
		t.Errorf("pods %v, Paused %s %q; want the pod kept and RegistryUnavailable", h.podNames(), c.Reason, c.Message)
	}
	// It is looked after as any sandbox: a lost pod is replaced.
	if err := h.client.Delete(h.ctx(), h.pod("demo-0")); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile()
	if diff := cmp.Diff([]string{"demo-0"}, h.podNames()); diff != "" {
		t.Errorf("pods after the loss of the one it had (-want +got):\n%s", diff)
	}
}

// TestResumedPooledSandbox: a pooled sandbox that paused comes back with pods of its own, from
// its pool's template and its snapshot, never from the pool's idle pods.
func TestResumedPooledSandbox(t *testing.T) {
	pool := &controlv1alpha1.Pool{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "py"},
		Spec: controlv1alpha1.PoolSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "py", controlv1alpha1.LabelPool: "evil"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "python"}}}}}}
	bs := newBatchSandbox(nil)
	bs.Spec.Template = nil
	bs.Spec.PoolRef = &controlv1alpha1.PoolReference{Name: "py"}
	bs.Finalizers = []string{controlv1alpha1.FinalizerPods}
	bs.Status = controlv1alpha1.BatchSandboxStatus{Phase: controlv1alpha1.PhasePaused,
		Snapshots: []controlv1alpha1.SnapshotStatus{{Replica: 0, Image: "registry.test:5000/kube-sandbox/snapshots/team-a/demo@sha256:1", Digest: "sha256:1", Pod: "py-abcde", PodUID: "p"}},
		Conditions: []metav1.Condition{{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionTrue, Reason: controlv1alpha1.ReasonPaused,
			LastTransitionTime: metav1.Now()}}}
	h := newPauseHarness(t, bs)
	if err := h.client.Create(h.ctx(), pool); err != nil {
		t.Fatal(err)
	}
	h.mustReconcile()
	p := h.pod("demo-0")
	if p.Spec.Containers[0].Image != "registry.test:5000/kube-sandbox/snapshots/team-a/demo@sha256:1" || p.Labels["app"] != "py" || p.Labels[controlv1alpha1.LabelPool] != "" {
		t.Errorf("resumed pod: image %s, labels %v; want the snapshot, the pool template's labels but not the pool's own",
			p.Spec.Containers[0].Image, p.Labels)
	}
	if got := fmt.Sprint(p.OwnerReferences[0].Kind, "/", p.OwnerReferences[0].Name); got != "BatchSandbox/demo" {
		t.Errorf("resumed pod owned by %s, want BatchSandbox/demo", got)
	}
}

// TestPausedExpiry: a Paused sandbox past its expiry is deleted, unless a pause stops the
// clock (PauseStopsExpiry).
func TestPausedExpiry(t *testing.T) {
	for _, stops := range []bool{false, true} {
		t.Run(fmt.Sprintf("pause-stops-expiry=%v", stops), func(t *testing.T) {
			bs := newBatchSandbox(nil)
			bs.Spec.Paused = true
			bs.Spec.ExpireTime = &metav1.Time{Time: time.Now().Add(-time.Minute)}
			bs.Finalizers = []string{controlv1alpha1.FinalizerPods}
			bs.Status = controlv1alpha1.BatchSandboxStatus{Phase: controlv1alpha1.PhasePaused,
				Snapshots: []controlv1alpha1.SnapshotStatus{{Replica: 0, Image: "registry.test:5000/kube-sandbox/snapshots/team-a/demo@sha256:1", Digest: "sha256:1", Pod: "demo-0", PodUID: "p"}}}
			h := newPauseHarness(t, bs)
			h.r.PauseStopsExpiry = stops
			h.reconcileResult()
			got := h.batchSandbox()
			if deleting := got.DeletionTimestamp != nil; deleting == stops {
				t.Errorf("a Paused sandbox past its expiry: being deleted %v, want %v", deleting, !stops)
			}
		})
	}
}

// TestResumeRefusesAnotherSandboxsSnapshot: a status naming an image outside the sandbox's own
// repository (written by someone with rights on batchsandboxes/status) makes no pod.
func TestResumeRefusesAnotherSandboxsSnapshot(t *testing.T) {
	bs := newBatchSandbox(nil)
	bs.Finalizers = []string{controlv1alpha1.FinalizerPods}
	bs.Status = controlv1alpha1.BatchSandboxStatus{Phase: controlv1alpha1.PhaseResuming,
		Snapshots: []controlv1alpha1.SnapshotStatus{{Replica: 0, Image: "registry.test:5000/kube-sandbox/snapshots/team-b/secret@sha256:1",
			Digest: "sha256:1", Pod: "x", PodUID: "p"}}}
	h := newPauseHarness(t, bs)
	h.mustReconcile()
	if len(h.pods()) != 0 {
		t.Fatalf("pods %v made from another sandbox's snapshot", h.podNames())
	}
	if c := findReady(t, h.batchSandbox()); c.Reason != controlv1alpha1.ReasonSnapshotFailed || !strings.Contains(c.Message, "not a snapshot of this sandbox") {
		t.Errorf("Ready = %s %q, want SnapshotFailed naming the image", c.Reason, c.Message)
	}
}

// TestDeleteWaitsForSnapshot: a sandbox deleted while its snapshot is being pushed deletes its
// snapshots only once that push has ended, so that none is left behind.
func TestDeleteWaitsForSnapshot(t *testing.T) {
	h := newPauseHarness(t, newBatchSandbox(nil))
	h.mustReconcile()
	h.giveUIDs()
	h.setPodStatus("demo-0", readyStatus(0))
	h.mustReconcile()
	h.agent.release = make(chan struct{})
	h.setPaused(true)
	h.reconcileResult()
	if err := h.client.Delete(h.ctx(), h.batchSandbox()); err != nil {
		t.Fatal(err)
	}
	h.reconcileResult() // the pod goes
	h.reconcileResult() // no pod left, but the push goes on
	if len(h.registry.tagged) != 0 || len(h.batchSandbox().Finalizers) == 0 {
		t.Fatalf("while the push goes on: deleted %v, finalizers %v; want nothing deleted yet, the finalizer kept", h.registry.tagged, h.batchSandbox().Finalizers)
	}
	close(h.agent.release)
	h.waitJobsDone(1)
	h.reconcileResult()
	if diff := cmp.Diff([]string{"kube-sandbox/snapshots/team-a/demo s-demo-uid-"}, h.registry.tagged); diff != "" {
		t.Errorf("deleted from the registry after the push (-want +got):\n%s", diff)
	}
}

// guard is a SnapshotGuard that answers err and counts its checks.
type guard struct {
	err    error
	checks int
}

func (g *guard) Guarded(context.Context) error { g.checks++; return g.err }

// TestPauseWaitsForTheSnapshotPolicy: a sandbox does not start to pause while the admission
// policy that keeps snapshots to their sandboxes' pods does not name the registry. It keeps its
// pods, says why (SnapshotPolicyMissing), and is looked at again 30 s later; once the policy
// names the registry, it pauses. A pause under way is not held back by the check.
func TestPauseWaitsForTheSnapshotPolicy(t *testing.T) {
	h := newPauseHarness(t, newBatchSandbox(nil))
	g := &guard{err: errors.New("the ConfigMap kube-sandbox-system/kube-sandbox-snapshot-images names the registry \"\"")}
	h.r.Snapshots.Guard = g
	h.mustReconcile()
	h.giveUIDs()
	h.setPodStatus("demo-0", readyStatus(0))
	h.mustReconcile()

	h.setPaused(true)
	res := h.reconcileResult()
	bs := h.batchSandbox()
	c := pausedCondition(t, bs)
	if c.Status != metav1.ConditionFalse || c.Reason != controlv1alpha1.ReasonSnapshotPolicyMissing || !strings.Contains(c.Message, "kube-sandbox-snapshot-images") {
		t.Errorf("Paused condition = %s %s %q, want False SnapshotPolicyMissing naming the ConfigMap", c.Status, c.Reason, c.Message)
	}
	if len(h.pods()) != 1 || len(h.agent.asked) != 0 || bs.Status.Phase != controlv1alpha1.PhaseRunning {
		t.Errorf("pods %v, snapshots asked %v, phase %s; want the pod kept, none asked, Running", h.podNames(), h.agent.asked, bs.Status.Phase)
	}
	if res.RequeueAfter != SnapshotRetryDelay {
		t.Errorf("RequeueAfter = %s, want %s", res.RequeueAfter, SnapshotRetryDelay)
	}
	// One Warning, not one per look: the next reconcile, still refused, records none.
	h.reconcileResult()
	checkEvents(t, h.events(), []string{"Normal PodsReady", "Warning SnapshotPolicyMissing the ConfigMap kube-sandbox-system/kube-sandbox-snapshot-images"})

	g.err = nil
	h.agent.release = make(chan struct{})
	h.reconcileResult()
	if bs = h.batchSandbox(); bs.Status.Phase != controlv1alpha1.PhasePausing {
		t.Fatalf("phase once the policy names the registry = %s, want Pausing", bs.Status.Phase)
	}
	// Under way: the check is not made again, whatever it would say.
	g.err, g.checks = errors.New("gone"), 0
	h.reconcileResult()
	close(h.agent.release)
	h.waitJobsDone(1)
	h.reconcileResult()
	if bs = h.batchSandbox(); g.checks != 0 || len(bs.Status.Snapshots) != 1 || len(h.pods()) != 0 {
		t.Errorf("after the snapshot: %d checks, %d snapshots, pods %v; want none, 1, none", g.checks, len(bs.Status.Snapshots), h.podNames())
	}
}
