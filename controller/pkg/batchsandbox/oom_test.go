package batchsandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

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

// fakeStats stands in for the node agents: it answers every pod with peak, sampled at
// sampled, or with err, and counts the questions.
type fakeStats struct {
	mu      sync.Mutex
	peak    uint64
	sampled time.Time
	err     error
	asked   []string // "HOSTIP UID"
}

func (f *fakeStats) Pod(_ context.Context, hostIP, uid string) (*nodeapi.PodStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, hostIP+" "+uid)
	if f.err != nil {
		return nil, f.err
	}
	return &nodeapi.PodStats{PodUID: uid, Timestamp: f.sampled, Memory: &nodeapi.MemoryStats{PeakBytes: f.peak, OOMKills: 1}}, nil
}

func (f *fakeStats) questions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.asked)
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

// TestReconcileTellsOOMKillOnce: a kill is told once, with the node agent's peak, whatever
// reconciles follow and whether the controller restarted; the next kill is told again.
func TestReconcileTellsOOMKillOnce(t *testing.T) {
	bs := newBatchSandbox(nil)
	bs.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
	h := newHarness(t, nil, bs)
	stats := &fakeStats{peak: 256 << 20, sampled: killT2.Add(5 * time.Second)}
	h.r.Stats = stats
	h.mustReconcile() // creates demo-0
	killedAt := func(id string, at time.Time) func(*corev1.PodStatus) {
		return func(s *corev1.PodStatus) {
			readyStatus(0)(s)
			s.HostIP = "192.168.0.1"
			s.ContainerStatuses[0].ContainerID = "containerd://" + id + "-next"
			s.ContainerStatuses[0].RestartCount++
			s.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "OOMKilled", ContainerID: "containerd://" + id, FinishedAt: metav1.NewTime(at)}}
		}
	}
	h.setPodStatus("demo-0", killedAt("first", killT1))
	uid := string(h.pod("demo-0").UID)

	h.mustReconcile()
	t1 := killT1.Format(time.RFC3339)
	checkEvents(t, oomEvents(h.events()), []string{"Warning OOMKilled replica 0 (pod demo-0) was OOM-killed at " + t1 + ": memory limit 256Mi, peak 256Mi"})
	if stats.questions() != 1 || stats.asked[0] != "192.168.0.1 "+uid {
		t.Errorf("node agent asked %q, want once for the pod %s on 192.168.0.1", stats.asked, uid)
	}
	got := h.batchSandbox().Status
	c := meta.FindStatusCondition(got.Conditions, controlv1alpha1.ConditionOOMKilled)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != controlv1alpha1.ReasonOOMKilled || !strings.Contains(c.Message, "at "+t1) {
		t.Errorf("condition OOMKilled = %+v, want True, OOMKilled, the kill at %s", c, t1)
	}
	if len(got.OOMKills) != 1 || got.OOMKills[0].ContainerID != "containerd://first" || got.OOMKills[0].Count != 1 {
		t.Errorf("status.oomKills = %+v, want the kill of containerd://first, counted once", got.OOMKills)
	}

	// Seen again, and by a restarted controller: nothing to tell, nothing to ask.
	h.mustReconcile()
	h.r = &Reconciler{Client: h.client, Recorder: h.rec, ExecdImage: testExecdImage, Authority: testAuthority(), Certifier: h.certifier, Stats: stats}
	h.mustReconcile()
	checkEvents(t, oomEvents(h.events()), nil)
	if stats.questions() != 1 {
		t.Errorf("node agent asked %d times, want once", stats.questions())
	}

	// The next kill, with an agent that does not answer: told, without its peak.
	stats.err = errors.New("connection refused")
	h.setPodStatus("demo-0", killedAt("second", killT2))
	h.mustReconcile()
	t2 := killT2.Format(time.RFC3339)
	checkEvents(t, oomEvents(h.events()), []string{"Warning OOMKilled replica 0 (pod demo-0) was OOM-killed at " + t2 + ": memory limit 256Mi, peak unknown"})
	got = h.batchSandbox().Status
	if c := meta.FindStatusCondition(got.Conditions, controlv1alpha1.ConditionOOMKilled); c == nil || !strings.HasSuffix(c.Message, "peak unknown (2 OOM kills in all)") {
		t.Errorf("condition OOMKilled = %+v, want the second kill of two", c)
	}
	if len(got.OOMKills) != 1 || got.OOMKills[0].ContainerID != "containerd://second" || got.OOMKills[0].Count != 2 {
		t.Errorf("status.oomKills = %+v, want the kill of containerd://second, the second", got.OOMKills)
	}
}

// TestReconcileOOMKillWaitsForSample: a kill the agent's last sample predates is told once the
// next sample holds its peak, at a deadline, not by polling.
func TestReconcileOOMKillWaitsForSample(t *testing.T) {
	h := newHarness(t, nil, newBatchSandbox(nil))
	h.r.Clock = testingclock.NewFakePassiveClock(killT1.Add(2 * time.Second))
	stats := &fakeStats{peak: 40 << 20, sampled: killT1.Add(-4 * time.Second)}
	h.r.Stats = stats
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
	// The agent's next sample: 10 s after its last, and a second's margin.
	if want := 5 * time.Second; res.RequeueAfter != want {
		t.Errorf("RequeueAfter = %v, want %v", res.RequeueAfter, want)
	}
	checkEvents(t, oomEvents(h.events()), nil)
	if got := h.batchSandbox().Status.OOMKills; len(got) != 0 {
		t.Errorf("status.oomKills = %+v, want none before the peak", got)
	}

	stats.mu.Lock()
	stats.sampled, stats.peak = killT1.Add(6*time.Second), 256<<20
	stats.mu.Unlock()
	h.mustReconcile()
	checkEvents(t, oomEvents(h.events()), []string{"Warning OOMKilled replica 0 (pod demo-0) was OOM-killed at " + killT1.Format(time.RFC3339) + ": no memory limit, peak 256Mi"})
}
