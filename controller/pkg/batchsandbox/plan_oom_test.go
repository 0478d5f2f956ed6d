package batchsandbox

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/tasks"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// The kills of the tests: a first one, and a second one a minute later.
var (
	killT1 = planT0.Add(-time.Hour)
	killT2 = killT1.Add(time.Minute)
)

// oomKilledAt makes the pod's sandbox container one that restarted after the OOM killer ended
// container id at t.
func oomKilledAt(id string, t time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		cs := &p.Status.ContainerStatuses[0]
		cs.RestartCount++
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 137, Reason: "OOMKilled", ContainerID: id, FinishedAt: metav1.NewTime(t)}}
	}
}

// oomFailed makes the pod one whose sandbox container the OOM killer ended for good
// (restartPolicy Never): the pod failed.
func oomFailed(id string, t time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		failedPod("")(p)
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 137, Reason: "OOMKilled", ContainerID: id, FinishedAt: metav1.NewTime(t)}}
	}
}

func memoryLimited(limit string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}
	}
}

// oomStep is a reconcile of a sandbox of one replica: its pod as observed, the node agent's
// latest report of the pod (nil: none, the agent's stream is down or not in sync yet), and the
// time.
type oomStep struct {
	pod    corev1.Pod
	report *nodeapi.OOMReport
	now    time.Duration // after killT1
	// wantEvents are the Events told; wantAfter the wait for a container kill's count.
	wantEvents []string
	wantAfter  time.Duration
}

// counted is the agent's report of the pod: kills counted by the sample at killT1+at.
func counted(kills uint64, at time.Duration, uid string) *nodeapi.OOMReport {
	return &nodeapi.OOMReport{PodUID: uid, Namespace: testNamespace, Pod: "demo-0", Sandbox: testName, OOMKills: kills,
		LimitBytes: 256 << 20, PeakBytes: 250 << 20, Timestamp: killT1.Add(at)}
}

func withUID(uid string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.UID = types.UID(uid) } }

// TestPlanOOMKillsOverTime: successive reconciles of a sandbox, whose status (written and read
// back, as the API server keeps it) is all they share, as a restarted controller's would be:
// each kill is told once, from the node agent's count, with the pod's status where it helps.
func TestPlanOOMKillsOverTime(t *testing.T) {
	at := func(d time.Duration) string { return killT1.Add(d).Format(time.RFC3339) }
	limited := memoryLimited("256Mi")
	pod := replicaPod(0, limited)
	killed := replicaPod(0, limited, oomKilledAt("containerd://c1", killT1))
	const uid = "uid-0"
	tests := []struct {
		name  string
		steps []oomStep
	}{
		{
			name: "runc on cgroup v1: a process killed, the container lives on (the count alone)",
			steps: []oomStep{
				{pod: pod, now: time.Second},
				{pod: pod, report: counted(1, 4*time.Second, uid), now: 5 * time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0): the OOM killer ended a process by " + at(4*time.Second) + ": memory limit 256Mi, peak 250Mi"}},
				{pod: pod, report: counted(1, 4*time.Second, uid), now: time.Minute},
				{pod: pod, report: counted(3, 64*time.Second, uid), now: 65 * time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0): the OOM killer ended 2 processes by " + at(64*time.Second) + ": memory limit 256Mi, peak 250Mi"}},
			},
		},
		{
			name: "gVisor: the pod's status first, then the count: one kill",
			steps: []oomStep{
				{pod: killed, now: 2 * time.Second, wantAfter: agentWait - 2*time.Second},
				{pod: killed, report: counted(1, 8500*time.Millisecond, uid), now: 9 * time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0) was OOM-killed at " + at(8*time.Second) + ": memory limit 256Mi, peak 250Mi"}},
				{pod: killed, report: counted(1, 8500*time.Millisecond, uid), now: time.Minute},
			},
		},
		{
			name: "gVisor: the count first, then the pod's status: one kill",
			steps: []oomStep{
				{pod: pod, report: counted(1, 500*time.Millisecond, uid), now: time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0): the OOM killer ended a process by " + at(0) + ": memory limit 256Mi, peak 250Mi"}},
				{pod: killed, report: counted(1, 500*time.Millisecond, uid), now: 2 * time.Second},
				{pod: killed, report: counted(1, 500*time.Millisecond, uid), now: time.Minute},
			},
		},
		{
			name: "runc on cgroup v2: the container and its 3 processes are one kill",
			steps: []oomStep{
				{pod: killed, report: counted(3, 4*time.Second, uid), now: 5 * time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0) was OOM-killed at " + at(4*time.Second) + ", 3 processes with it: memory limit 256Mi, peak 250Mi"}},
				{pod: killed, report: counted(3, 4*time.Second, uid), now: time.Minute},
			},
		},
		{
			name: "a new pod of the replica starts at 0",
			steps: []oomStep{
				{pod: pod, report: counted(2, 4*time.Second, uid), now: 5 * time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0): the OOM killer ended 2 processes by " + at(4*time.Second) + ": memory limit 256Mi, peak 250Mi"}},
				{pod: replicaPod(0, limited, named("demo-0-b"), withUID("uid-b"))},
				{pod: replicaPod(0, limited, named("demo-0-b"), withUID("uid-b")), report: counted(1, time.Minute, "uid-b"), now: time.Minute,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0-b): the OOM killer ended a process by " + at(time.Minute) + ": memory limit 256Mi, peak 250Mi"}},
			},
		},
		{
			name: "a restarted controller, before and after the stream's initial state: nothing again",
			steps: []oomStep{
				{pod: killed, report: counted(1, 4*time.Second, uid), now: 5 * time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0) was OOM-killed at " + at(4*time.Second) + ": memory limit 256Mi, peak 250Mi"}},
				{pod: killed, now: 10 * time.Minute},
				{pod: killed, report: counted(1, 4*time.Second, uid), now: 10 * time.Minute},
			},
		},
		{
			name: "the agent unreachable: nothing told, nothing lost; told when its stream is back",
			steps: []oomStep{
				{pod: pod, now: time.Minute},
				{pod: pod, report: counted(2, 30*time.Second, uid), now: 2 * time.Minute,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0): the OOM killer ended 2 processes by " + at(30*time.Second) + ": memory limit 256Mi, peak 250Mi"}},
			},
		},
		{
			name: "a container kill the agent does not count in time: told from the status, and its count later is no news",
			steps: []oomStep{
				{pod: killed, now: 2 * time.Second, wantAfter: agentWait - 2*time.Second},
				{pod: killed, now: agentWait,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0) was OOM-killed at " + at(0) + ": memory limit 256Mi, peak unknown"}},
				{pod: killed, report: counted(1, 25*time.Second, uid), now: 26 * time.Second},
				{pod: killed, report: counted(2, 45*time.Second, uid), now: 46 * time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0): the OOM killer ended a process by " + at(45*time.Second) + ": memory limit 256Mi, peak 250Mi"}},
			},
		},
		{
			name: "a pod that failed of its kill (restartPolicy Never) is told at once: the agent forgets it",
			steps: []oomStep{
				{pod: replicaPod(0, limited, oomFailed("containerd://c0", killT1)), now: time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0) was OOM-killed at " + at(0) + ": memory limit 256Mi, peak unknown"}},
			},
		},
		{
			name: "a count that grew for an earlier kill is told now; a container kill after its sample waits for the next",
			steps: []oomStep{
				{pod: replicaPod(0, limited, oomKilledAt("containerd://c1", killT1.Add(10*time.Second))), report: counted(1, 5*time.Second, uid), now: 11 * time.Second,
					wantAfter:  agentWait - time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0): the OOM killer ended a process by " + at(5*time.Second) + ": memory limit 256Mi, peak 250Mi"}},
				{pod: replicaPod(0, limited, oomKilledAt("containerd://c1", killT1.Add(10*time.Second))), report: counted(2, 15*time.Second, uid), now: 16 * time.Second,
					wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0) was OOM-killed at " + at(15*time.Second) + ": memory limit 256Mi, peak 250Mi"}},
			},
		},
		{
			name: "a pod being deleted ends by its deletion; a kill before the sandbox existed is a pool pod's",
			steps: []oomStep{
				{pod: replicaPod(0, limited, oomKilledAt("containerd://c1", killT1), deleting), now: time.Hour},
				{pod: replicaPod(0, limited, fromPool, oomKilledAt("containerd://c1", killT1.Add(-2*time.Hour))), now: time.Hour},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs := newBatchSandbox(nil)
			bs.CreationTimestamp = metav1.NewTime(killT1.Add(-time.Hour))
			for i, st := range tc.steps {
				reports := func(p *corev1.Pod) (nodeapi.OOMReport, bool) {
					if st.report == nil || st.report.PodUID != string(p.UID) {
						return nodeapi.OOMReport{}, false
					}
					return *st.report, true
				}
				tell, after := planOOMKills(&observed{bs: bs, pods: []corev1.Pod{st.pod}}, reports, killT1.Add(st.now))
				status := *bs.Status.DeepCopy()
				events := applyOOMKills(bs, &status, &oomResult{tell: tell})
				if diff := cmp.Diff(st.wantEvents, eventTexts(events)); diff != "" {
					t.Errorf("step %d: events (-want +got):\n%s", i, diff)
				}
				if after != st.wantAfter {
					t.Errorf("step %d: requeueAfter = %v, want %v", i, after, st.wantAfter)
				}
				// What the API server keeps: times in whole seconds.
				data, err := json.Marshal(status)
				if err != nil {
					t.Fatal(err)
				}
				bs.Status = controlv1alpha1.BatchSandboxStatus{}
				if err := json.Unmarshal(data, &bs.Status); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestApplyOOMKills(t *testing.T) {
	t1, t2 := killT1.Format(time.RFC3339), killT2.Format(time.RFC3339)
	first := replicaPod(0, memoryLimited("256Mi"))
	other := replicaPod(1, named("demo-1"), memoryLimited("1Gi"))
	firstRecord := controlv1alpha1.OOMKillStatus{Replica: 0, Pod: "demo-0", PodUID: "uid-0", ContainerID: "containerd://old", Time: metav1.NewTime(killT1),
		Processes: 1, Count: 1, PodOOMKills: 1, LimitBytes: 256 << 20, PeakBytes: 256 << 20}
	toldFirst := func() *controlv1alpha1.BatchSandbox {
		bs := newBatchSandbox(ptr.To[int32](2))
		bs.Status.OOMKills = []controlv1alpha1.OOMKillStatus{firstRecord}
		meta.SetStatusCondition(&bs.Status.Conditions, metav1.Condition{Type: controlv1alpha1.ConditionOOMKilled, Status: metav1.ConditionTrue,
			Reason: controlv1alpha1.ReasonOOMKilled, ObservedGeneration: 1, Message: "replica 0 (pod demo-0) was OOM-killed at " + t1 + ": memory limit 256Mi, peak 256Mi"})
		return bs
	}
	tests := []struct {
		name        string
		bs          *controlv1alpha1.BatchSandbox
		res         *oomResult
		wantEvents  []string
		wantRecords []controlv1alpha1.OOMKillStatus
		wantCond    string // "": none
	}{
		{
			name: "nothing ever killed: no record, no condition",
			bs:   newBatchSandbox(nil),
		},
		{
			name: "a fresh kill: an Event, its record, the condition",
			bs:   newBatchSandbox(nil),
			res: &oomResult{tell: []oomKill{{replica: 0, pod: &first, containerID: "containerd://old", at: metav1.NewTime(killT1), processes: 1, podKills: 1,
				limitBytes: 256 << 20, peakBytes: 267677696}}},
			wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0) was OOM-killed at " + t1 + ": memory limit 256Mi, peak 255.3Mi"},
			wantRecords: []controlv1alpha1.OOMKillStatus{{Replica: 0, Pod: "demo-0", PodUID: "uid-0", ContainerID: "containerd://old", Time: metav1.NewTime(killT1),
				Processes: 1, Count: 1, PodOOMKills: 1, LimitBytes: 256 << 20, PeakBytes: 267677696}},
			wantCond: "replica 0 (pod demo-0) was OOM-killed at " + t1 + ": memory limit 256Mi, peak 255.3Mi",
		},
		{
			name:        "the same kill seen again (nothing to tell): no Event, the same record and condition",
			bs:          toldFirst(),
			wantRecords: []controlv1alpha1.OOMKillStatus{firstRecord},
			wantCond:    "replica 0 (pod demo-0) was OOM-killed at " + t1 + ": memory limit 256Mi, peak 256Mi",
		},
		{
			name: "three processes later, the container living on: counted, and the condition tells of them",
			bs:   toldFirst(),
			res: &oomResult{tell: []oomKill{{replica: 0, pod: &first, at: metav1.NewTime(killT2), processes: 3, podKills: 4,
				limitBytes: 256 << 20}}},
			wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0): the OOM killer ended 3 processes by " + t2 + ": memory limit 256Mi, peak unknown"},
			wantRecords: []controlv1alpha1.OOMKillStatus{{Replica: 0, Pod: "demo-0", PodUID: "uid-0", Time: metav1.NewTime(killT2), Processes: 3, Count: 4,
				PodOOMKills: 4, LimitBytes: 256 << 20}},
			wantCond: "replica 0 (pod demo-0): the OOM killer ended 3 processes by " + t2 + ": memory limit 256Mi, peak unknown (4 OOM kills in all)",
		},
		{
			name: "an earlier kill of another replica, from its pod's status alone: its Event, and the condition keeps the latest",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := toldFirst()
				bs.Status.OOMKills[0].Time = metav1.NewTime(killT2)
				return bs
			}(),
			res:        &oomResult{tell: []oomKill{{replica: 1, pod: &other, containerID: "containerd://b", at: metav1.NewTime(killT1), podKills: 1, limitBytes: 1 << 30}}},
			wantEvents: []string{"Warning OOMKilled Observe: replica 1 (pod demo-1) was OOM-killed at " + t1 + ": memory limit 1Gi, peak unknown"},
			wantRecords: []controlv1alpha1.OOMKillStatus{
				func() controlv1alpha1.OOMKillStatus { r := firstRecord; r.Time = metav1.NewTime(killT2); return r }(),
				{Replica: 1, Pod: "demo-1", PodUID: "uid-1", ContainerID: "containerd://b", Time: metav1.NewTime(killT1), Count: 1, PodOOMKills: 1, LimitBytes: 1 << 30},
			},
			wantCond: "replica 0 (pod demo-0) was OOM-killed at " + t2 + ": memory limit 256Mi, peak 256Mi (2 OOM kills in all)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// As updateStatus does: the status of the pods, then the kills.
			status, _ := computeStatus(tc.bs, nil, nil, nil, nil)
			events := applyOOMKills(tc.bs, &status, tc.res)
			if diff := cmp.Diff(tc.wantEvents, eventTexts(events)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRecords, status.OOMKills); diff != "" {
				t.Errorf("status.oomKills (-want +got):\n%s", diff)
			}
			c := meta.FindStatusCondition(status.Conditions, controlv1alpha1.ConditionOOMKilled)
			switch {
			case tc.wantCond == "" && c != nil:
				t.Errorf("condition OOMKilled = %+v, want none", c)
			case tc.wantCond != "" && c == nil:
				t.Errorf("no condition OOMKilled, want %q", tc.wantCond)
			case c != nil && (c.Status != metav1.ConditionTrue || c.Reason != controlv1alpha1.ReasonOOMKilled || c.Message != tc.wantCond):
				t.Errorf("condition OOMKilled = %s %s %q, want True OOMKilled %q", c.Status, c.Reason, c.Message, tc.wantCond)
			}
		})
	}
}

// TestPlanTasksOOMKilled: the attempt that died with an OOM-killed container ends with reason
// OOMKilled, however execd or the pod's loss tells of its end.
func TestPlanTasksOOMKilled(t *testing.T) {
	t1 := killT1.Format(time.RFC3339)
	id := tasks.TaskID("demo-uid", 0, "uid-0")
	ranIn := func(bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.BatchSandbox {
		bs.Status.Tasks = []controlv1alpha1.TaskStatus{{Replica: 0, Phase: controlv1alpha1.TaskRunning, Pod: "demo-0", PodUID: "uid-0", Attempts: 1}}
		return bs
	}
	restarted := func(phase execdapi.TaskPhase, attempt int32) map[types.UID]tasks.Contact {
		return map[types.UID]tasks.Contact{"uid-0": {Known: true, State: execdapi.TaskState{ID: id, Phase: phase, Attempt: attempt,
			Reason: execdapi.TaskReasonContainerRestarted, Message: "the container restarted while attempt 1 ran"}}}
	}
	onFailure := func(bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.BatchSandbox {
		bs.Spec.TaskTemplate.RestartPolicy = controlv1alpha1.TaskRestartOnFailure
		bs.Spec.TaskTemplate.BackoffLimit = ptr.To[int32](1)
		return bs
	}
	tests := []struct {
		name     string
		bs       *controlv1alpha1.BatchSandbox
		pod      corev1.Pod
		claimed  map[int32]string
		contacts map[types.UID]tasks.Contact
		want     string // "PHASE REASON: MESSAGE"
	}{
		{
			name:     "the container restarted after the kill: execd's ContainerRestarted is the kill",
			bs:       ranIn(withTaskTemplate(newBatchSandbox(nil))),
			pod:      replicaPod(0, memoryLimited("256Mi"), oomKilledAt("containerd://old", killT1)),
			claimed:  map[int32]string{0: "containerd://c0"},
			contacts: restarted(execdapi.TaskFailed, 1),
			want:     "Failed OOMKilled: the container restarted while attempt 1 ran: it was OOM-killed at " + t1 + ", memory limit 256Mi",
		},
		{
			name:     "a restart that was no kill stays ContainerRestarted",
			bs:       ranIn(withTaskTemplate(newBatchSandbox(nil))),
			pod:      replicaPod(0, memoryLimited("256Mi")),
			claimed:  map[int32]string{0: "containerd://c0"},
			contacts: restarted(execdapi.TaskFailed, 1),
			want:     "Failed ContainerRestarted: the container restarted while attempt 1 ran",
		},
		{
			name:     "retried in the pod: the attempt that runs again tells of the kill",
			bs:       onFailure(ranIn(withTaskTemplate(newBatchSandbox(nil)))),
			pod:      replicaPod(0, memoryLimited("256Mi"), oomKilledAt("containerd://old", killT1)),
			claimed:  map[int32]string{0: "containerd://c0"},
			contacts: restarted(execdapi.TaskRunning, 2),
			want:     "Running OOMKilled: the container restarted while attempt 1 ran: it was OOM-killed at " + t1 + ", memory limit 256Mi",
		},
		{
			name:     "no retry left: the backoff limit tells of the kill",
			bs:       onFailure(ranIn(withTaskTemplate(newBatchSandbox(nil)))),
			pod:      replicaPod(0, memoryLimited("256Mi"), oomKilledAt("containerd://old", killT1)),
			claimed:  map[int32]string{0: "containerd://c0"},
			contacts: restarted(execdapi.TaskFailed, 2),
			want: "Failed BackoffLimitExceeded: attempt 2 of 2 failed (OOMKilled: the container restarted while attempt 1 ran: it was OOM-killed at " +
				t1 + ", memory limit 256Mi)",
		},
		{
			name: "the pod failed of the kill (restartPolicy Never): the task is lost with it",
			bs:   ranIn(withTaskTemplate(newBatchSandbox(nil))),
			pod:  replicaPod(0, memoryLimited("256Mi"), oomFailed("containerd://c0", killT1)),
			want: "Failed OOMKilled: pod demo-0 was lost during attempt 1 (its container was OOM-killed at " + t1 +
				", memory limit 256Mi), and restartPolicy Never retries nothing",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planTasks(tc.bs, byReplicaOf(tc.pod), tc.claimed, tc.contacts, planT0)
			st := p.tasks[0]
			if got := fmt.Sprintf("%s %s: %s", st.Phase, st.Reason, st.Message); got != tc.want {
				t.Errorf("task = %q\nwant   %q", got, tc.want)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	for b, want := range map[int64]string{
		512: "512", 64 << 10: "64Ki", 256 << 20: "256Mi", 267677696: "255.3Mi", 1 << 30: "1Gi", 3 << 29: "1.5Gi",
	} {
		if got := formatBytes(b); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", b, got, want)
		}
	}
}
