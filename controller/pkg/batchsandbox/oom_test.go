package batchsandbox

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// fakeOOMs stands in for the OOM watcher: the reports the test sets, and the node addresses
// each sandbox asked for.
type fakeOOMs struct {
	mu      sync.Mutex
	reports map[types.UID]nodeapi.OOMReport
	needs   map[types.NamespacedName][]string
}

func newFakeOOMs() *fakeOOMs {
	return &fakeOOMs{reports: map[types.UID]nodeapi.OOMReport{}, needs: map[types.NamespacedName][]string{}}
}

func (f *fakeOOMs) Sync(sandbox types.NamespacedName, hostIPs []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(hostIPs) == 0 {
		delete(f.needs, sandbox)
		return
	}
	f.needs[sandbox] = hostIPs
}

func (f *fakeOOMs) Report(hostIP string, uid types.UID) (nodeapi.OOMReport, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.reports[uid]
	return r, ok && hostIP == "192.168.0.1"
}

func (f *fakeOOMs) set(uid types.UID, r *nodeapi.OOMReport) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r == nil {
		delete(f.reports, uid)
		return
	}
	f.reports[uid] = *r
}

// oomEvents are the OOMKilled Events among events.
func oomEvents(events []string) []string {
	var out []string
	for _, e := range events {
		if strings.HasPrefix(e, "Warning "+controlv1alpha1.ReasonOOMKilled+" ") {
			out = append(out, e)
		}
	}
	return out
}

// TestReconcileTellsOOMKillOnce: the node agent's count is told once, whatever reconciles
// follow, whether the controller restarted and whether the agent's stream was away; the
// sandbox asks for the stream of its pod's node, and for none once it is gone.
func TestReconcileTellsOOMKillOnce(t *testing.T) {
	bs := newBatchSandbox(nil)
	bs.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
	h := newHarness(t, nil, bs)
	ooms := newFakeOOMs()
	h.r.OOMs = ooms
	h.mustReconcile() // creates demo-0
	h.setPodStatus("demo-0", func(s *corev1.PodStatus) {
		readyStatus(0)(s)
		s.HostIP = "192.168.0.1"
	})
	uid := h.pod("demo-0").UID
	h.mustReconcile()
	key := types.NamespacedName{Namespace: testNamespace, Name: testName}
	if diff := cmp.Diff(map[types.NamespacedName][]string{key: {"192.168.0.1"}}, ooms.needs); diff != "" {
		t.Errorf("streams asked for (-want +got):\n%s", diff)
	}
	checkEvents(t, oomEvents(h.events()), nil)

	sample := killT1.Add(4 * time.Second)
	report := &nodeapi.OOMReport{PodUID: string(uid), Namespace: testNamespace, Pod: "demo-0", Sandbox: testName, OOMKills: 1,
		LimitBytes: 256 << 20, PeakBytes: 250 << 20, Timestamp: sample}
	ooms.set(uid, report)
	h.mustReconcile()
	t1 := sample.Format(time.RFC3339)
	checkEvents(t, oomEvents(h.events()), []string{"Warning OOMKilled replica 0 (pod demo-0): the OOM killer ended a process by " + t1 + ": memory limit 256Mi, peak 250Mi"})
	got := h.batchSandbox().Status
	c := meta.FindStatusCondition(got.Conditions, controlv1alpha1.ConditionOOMKilled)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != controlv1alpha1.ReasonOOMKilled || !strings.Contains(c.Message, "by "+t1) {
		t.Errorf("condition OOMKilled = %+v, want True, OOMKilled, the kill by %s", c, t1)
	}
	if len(got.OOMKills) != 1 || got.OOMKills[0].PodUID != string(uid) || got.OOMKills[0].PodOOMKills != 1 || got.OOMKills[0].Count != 1 {
		t.Errorf("status.oomKills = %+v, want the pod's one kill", got.OOMKills)
	}

	// Seen again; by a restarted controller before the stream's initial state, and after:
	// nothing to tell.
	h.mustReconcile()
	restarted := newFakeOOMs()
	h.r = &Reconciler{Client: h.client, Recorder: h.rec, ExecdImage: testExecdImage, Authority: testAuthority(), Certifier: h.certifier, OOMs: restarted}
	h.mustReconcile()
	restarted.set(uid, report)
	h.mustReconcile()
	checkEvents(t, oomEvents(h.events()), nil)

	// Two more while the stream was away, told when it is back.
	restarted.set(uid, nil)
	h.mustReconcile()
	later := *report
	later.OOMKills, later.Timestamp = 3, killT2
	restarted.set(uid, &later)
	h.mustReconcile()
	checkEvents(t, oomEvents(h.events()), []string{"Warning OOMKilled replica 0 (pod demo-0): the OOM killer ended 2 processes by " + killT2.Format(time.RFC3339) +
		": memory limit 256Mi, peak 250Mi"})
	if c := meta.FindStatusCondition(h.batchSandbox().Status.Conditions, controlv1alpha1.ConditionOOMKilled); c == nil || !strings.HasSuffix(c.Message, "(3 OOM kills in all)") {
		t.Errorf("condition OOMKilled = %+v, want three kills in all", c)
	}
}

// TestReconcileOOMKillWaitsForCount: a container kill in the pod's status waits for the node
// agent's count, at a deadline, not by polling, and is told with it once.
func TestReconcileOOMKillWaitsForCount(t *testing.T) {
	h := newHarness(t, nil, newBatchSandbox(nil))
	clk := testingclock.NewFakePassiveClock(killT1.Add(2 * time.Second))
	h.r.Clock = clk
	ooms := newFakeOOMs()
	h.r.OOMs = ooms
	h.mustReconcile()
	h.setPodStatus("demo-0", func(s *corev1.PodStatus) {
		readyStatus(0)(s)
		s.HostIP = "192.168.0.1"
		s.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: "OOMKilled", ContainerID: "containerd://first", FinishedAt: metav1.NewTime(killT1)}}
	})
	res, err := h.r.Reconcile(h.ctx(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNamespace, Name: testName}})
	if err != nil {
		t.Fatal(err)
	}
	if want := agentWait - 2*time.Second; res.RequeueAfter != want {
		t.Errorf("RequeueAfter = %v, want %v", res.RequeueAfter, want)
	}
	checkEvents(t, oomEvents(h.events()), nil)
	if got := h.batchSandbox().Status.OOMKills; len(got) != 0 {
		t.Errorf("status.oomKills = %+v, want none before the count", got)
	}

	uid := h.pod("demo-0").UID
	ooms.set(uid, &nodeapi.OOMReport{PodUID: string(uid), OOMKills: 1, PeakBytes: 256 << 20, Timestamp: killT1.Add(6 * time.Second)})
	clk.SetTime(killT1.Add(7 * time.Second))
	h.mustReconcile()
	clk.SetTime(killT1.Add(time.Hour))
	h.mustReconcile()
	checkEvents(t, oomEvents(h.events()), []string{"Warning OOMKilled replica 0 (pod demo-0) was OOM-killed at " +
		killT1.Add(6*time.Second).Format(time.RFC3339) + ": no memory limit, peak 256Mi"})
}
