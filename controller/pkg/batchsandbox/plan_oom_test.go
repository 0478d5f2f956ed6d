package batchsandbox

import (
	"errors"
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

// reported is a sandbox whose status told of the kill of container id of replica 0 at t.
func reported(bs *controlv1alpha1.BatchSandbox, id string, t time.Time) *controlv1alpha1.BatchSandbox {
	bs.Status.OOMKills = []controlv1alpha1.OOMKillStatus{{Replica: 0, Pod: "demo-0", ContainerID: id, Time: metav1.NewTime(t), Count: 1,
		LimitBytes: 256 << 20, PeakBytes: 256 << 20}}
	return bs
}

// killTexts summarizes kills: "REPLICA POD CONTAINER TIME LIMIT".
func killTexts(kills []oomKill) []string {
	var out []string
	for _, k := range kills {
		out = append(out, fmt.Sprintf("%d %s %s %s %d", k.replica, k.pod.Name, k.containerID, k.at.UTC().Format(time.RFC3339), k.limitBytes))
	}
	return out
}

func TestPlanOOMKills(t *testing.T) {
	t1, t2 := killT1.Format(time.RFC3339), killT2.Format(time.RFC3339)
	tests := []struct {
		name string
		bs   *controlv1alpha1.BatchSandbox
		pods []corev1.Pod
		want []string
	}{
		{
			name: "no kill",
			bs:   newBatchSandbox(nil),
			pods: []corev1.Pod{replicaPod(0, memoryLimited("256Mi"))},
		},
		{
			name: "a fresh kill, with the container's limit",
			bs:   newBatchSandbox(nil),
			pods: []corev1.Pod{replicaPod(0, memoryLimited("256Mi"), oomKilledAt("containerd://old", killT1))},
			want: []string{"0 demo-0 containerd://old " + t1 + " 268435456"},
		},
		{
			name: "the same kill seen again",
			bs:   reported(newBatchSandbox(nil), "containerd://old", killT1),
			pods: []corev1.Pod{replicaPod(0, memoryLimited("256Mi"), oomKilledAt("containerd://old", killT1))},
		},
		{
			name: "a second kill later",
			bs:   reported(newBatchSandbox(nil), "containerd://old", killT1),
			pods: []corev1.Pod{replicaPod(0, memoryLimited("256Mi"), oomKilledAt("containerd://second", killT2))},
			want: []string{"0 demo-0 containerd://second " + t2 + " 268435456"},
		},
		{
			name: "a container that ended for good (restartPolicy Never), with the pod's limit",
			bs:   newBatchSandbox(nil),
			pods: []corev1.Pod{replicaPod(0, oomFailed("containerd://c0", killT1), func(p *corev1.Pod) {
				p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
			})},
			want: []string{"0 demo-0 containerd://c0 " + t1 + " 1073741824"},
		},
		{
			name: "of two pods of a replica, the latest kill; an older one than the status's is no news",
			bs:   reported(newBatchSandbox(nil), "containerd://second", killT2),
			pods: []corev1.Pod{
				replicaPod(0, named("demo-0-old"), oomKilledAt("containerd://old", killT1)),
				replicaPod(0, oomKilledAt("containerd://second", killT2)),
			},
		},
		{
			name: "each replica its own, in replica order; no limit",
			bs:   newBatchSandbox(ptr.To[int32](3)),
			pods: []corev1.Pod{replicaPod(2, oomKilledAt("containerd://b", killT1)), replicaPod(1), replicaPod(0, oomKilledAt("containerd://a", killT2))},
			want: []string{"0 demo-0 containerd://a " + t2 + " 0", "2 demo-2 containerd://b " + t1 + " 0"},
		},
		{
			name: "a pod being deleted ends by its deletion",
			bs:   newBatchSandbox(nil),
			pods: []corev1.Pod{replicaPod(0, oomKilledAt("containerd://old", killT1), deleting)},
		},
		{
			name: "a kill before the sandbox existed (a pool pod's, while idle)",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := newBatchSandbox(nil)
				bs.CreationTimestamp = metav1.NewTime(killT2)
				return bs
			}(),
			pods: []corev1.Pod{replicaPod(0, fromPool, oomKilledAt("containerd://old", killT1))},
		},
		{
			name: "a container that ended otherwise",
			bs:   newBatchSandbox(nil),
			pods: []corev1.Pod{replicaPod(0, oomKilledAt("containerd://old", killT1), func(p *corev1.Pod) {
				p.Status.ContainerStatuses[0].LastTerminationState.Terminated.Reason = "Error"
			})},
		},
		{
			name: "another container's kill is not the sandbox's",
			bs:   newBatchSandbox(nil),
			pods: []corev1.Pod{replicaPod(0, func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar"})
				p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "sidecar",
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", FinishedAt: metav1.NewTime(killT1)}}})
			})},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := killTexts(planOOMKills(&observed{bs: tc.bs, pods: tc.pods}))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("kills (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanPeaks(t *testing.T) {
	pod := replicaPod(0)
	kill := oomKill{replica: 0, pod: &pod, containerID: "containerd://old", at: metav1.NewTime(killT1)}
	sampled := func(at time.Time, peak uint64) peakAnswer {
		return peakAnswer{stats: &nodeapi.PodStats{Timestamp: at, Memory: &nodeapi.MemoryStats{PeakBytes: peak}}}
	}
	tests := []struct {
		name      string
		answer    peakAnswer
		now       time.Time
		wantTold  bool
		wantPeak  int64
		wantAfter time.Duration
	}{
		{
			name:     "a sample after the kill holds the peak",
			answer:   sampled(killT1.Add(3*time.Second), 300<<20),
			now:      killT1.Add(4 * time.Second),
			wantTold: true, wantPeak: 300 << 20,
		},
		{
			name:     "no answer: told at once, without",
			answer:   peakAnswer{err: errors.New("connection refused")},
			now:      killT1.Add(time.Second),
			wantTold: true,
		},
		{
			name:     "no memory figure: told at once, without",
			answer:   peakAnswer{stats: &nodeapi.PodStats{Timestamp: killT1.Add(3 * time.Second)}},
			now:      killT1.Add(4 * time.Second),
			wantTold: true,
		},
		{
			name:   "a sample before the kill: wait for the next one",
			answer: sampled(killT1.Add(-4*time.Second), 40<<20),
			now:    killT1.Add(2 * time.Second),
			// The next sample is 10 s after the last, plus a second's margin.
			wantAfter: 5 * time.Second,
		},
		{
			name:      "a sample in the kill's second may be before it",
			answer:    sampled(killT1.Add(500*time.Millisecond), 40<<20),
			now:       killT1.Add(2 * time.Second),
			wantAfter: 9500 * time.Millisecond,
		},
		{
			name:     "still no later sample at maxPeakWait: told without",
			answer:   sampled(killT1.Add(-4*time.Second), 40<<20),
			now:      killT1.Add(maxPeakWait),
			wantTold: true,
		},
		{
			name:      "an agent that stopped sampling is waited for until maxPeakWait",
			answer:    sampled(killT1.Add(-30*time.Second), 40<<20),
			now:       killT1.Add(5 * time.Second),
			wantAfter: maxPeakWait - 5*time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tell, peaks, after := planPeaks([]oomKill{kill}, map[int32]peakAnswer{0: tc.answer}, tc.now)
			if told := len(tell) == 1; told != tc.wantTold {
				t.Errorf("told = %v, want %v", told, tc.wantTold)
			}
			if peaks[0] != tc.wantPeak {
				t.Errorf("peak = %d, want %d", peaks[0], tc.wantPeak)
			}
			if after != tc.wantAfter {
				t.Errorf("requeueAfter = %v, want %v", after, tc.wantAfter)
			}
		})
	}
}

func TestApplyOOMKills(t *testing.T) {
	t1, t2 := killT1.Format(time.RFC3339), killT2.Format(time.RFC3339)
	first := replicaPod(0, memoryLimited("256Mi"), oomKilledAt("containerd://old", killT1))
	second := replicaPod(0, memoryLimited("256Mi"), oomKilledAt("containerd://second", killT2))
	other := replicaPod(1, named("demo-1"), memoryLimited("1Gi"), oomKilledAt("containerd://b", killT1))
	toldFirst := func() *controlv1alpha1.BatchSandbox {
		bs := reported(newBatchSandbox(ptr.To[int32](2)), "containerd://old", killT1)
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
			res: &oomResult{tell: []oomKill{{replica: 0, pod: &first, containerID: "containerd://old", at: metav1.NewTime(killT1), limitBytes: 256 << 20}},
				peaks: map[int32]int64{0: 267677696}},
			wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0) was OOM-killed at " + t1 + ": memory limit 256Mi, peak 255.3Mi"},
			wantRecords: []controlv1alpha1.OOMKillStatus{{Replica: 0, Pod: "demo-0", ContainerID: "containerd://old", Time: metav1.NewTime(killT1), Count: 1,
				LimitBytes: 256 << 20, PeakBytes: 267677696}},
			wantCond: "replica 0 (pod demo-0) was OOM-killed at " + t1 + ": memory limit 256Mi, peak 255.3Mi",
		},
		{
			name: "the same kill seen again (nothing to tell): no Event, the same record and condition",
			bs:   toldFirst(),
			wantRecords: []controlv1alpha1.OOMKillStatus{{Replica: 0, Pod: "demo-0", ContainerID: "containerd://old", Time: metav1.NewTime(killT1), Count: 1,
				LimitBytes: 256 << 20, PeakBytes: 256 << 20}},
			wantCond: "replica 0 (pod demo-0) was OOM-killed at " + t1 + ": memory limit 256Mi, peak 256Mi",
		},
		{
			name:       "a second kill later, whose peak is unknown: counted, and the condition tells of it",
			bs:         toldFirst(),
			res:        &oomResult{tell: []oomKill{{replica: 0, pod: &second, containerID: "containerd://second", at: metav1.NewTime(killT2), limitBytes: 256 << 20}}},
			wantEvents: []string{"Warning OOMKilled Observe: replica 0 (pod demo-0) was OOM-killed at " + t2 + ": memory limit 256Mi, peak unknown"},
			wantRecords: []controlv1alpha1.OOMKillStatus{{Replica: 0, Pod: "demo-0", ContainerID: "containerd://second", Time: metav1.NewTime(killT2), Count: 2,
				LimitBytes: 256 << 20}},
			wantCond: "replica 0 (pod demo-0) was OOM-killed at " + t2 + ": memory limit 256Mi, peak unknown (2 OOM kills in all)",
		},
		{
			name: "an earlier kill of another replica: its Event, and the condition keeps the latest",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := toldFirst()
				bs.Status.OOMKills[0].Time = metav1.NewTime(killT2)
				return bs
			}(),
			res: &oomResult{tell: []oomKill{{replica: 1, pod: &other, containerID: "containerd://b", at: metav1.NewTime(killT1), limitBytes: 1 << 30}},
				peaks: map[int32]int64{1: 1 << 30}},
			wantEvents: []string{"Warning OOMKilled Observe: replica 1 (pod demo-1) was OOM-killed at " + t1 + ": memory limit 1Gi, peak 1Gi"},
			wantRecords: []controlv1alpha1.OOMKillStatus{
				{Replica: 0, Pod: "demo-0", ContainerID: "containerd://old", Time: metav1.NewTime(killT2), Count: 1, LimitBytes: 256 << 20, PeakBytes: 256 << 20},
				{Replica: 1, Pod: "demo-1", ContainerID: "containerd://b", Time: metav1.NewTime(killT1), Count: 1, LimitBytes: 1 << 30, PeakBytes: 1 << 30},
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
