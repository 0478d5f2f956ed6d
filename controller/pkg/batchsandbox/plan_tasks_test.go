package batchsandbox

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/tasks"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

func withTaskTemplate(bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.BatchSandbox {
	bs.Spec.TaskTemplate = &controlv1alpha1.TaskTemplate{Command: []string{"python3", "eval.py"}}
	return bs
}

// taskPhases summarizes the tasks' status: "REPLICA PHASE REASON".
func taskPhases(st []controlv1alpha1.TaskStatus) []string {
	var out []string
	for _, t := range st {
		out = append(out, fmt.Sprintf("%d %s %s", t.Replica, t.Phase, t.Reason))
	}
	return out
}

func TestPlanTasks(t *testing.T) {
	certified := map[int32]string{0: "containerd://c0", 1: "containerd://c1"}
	running := func(replica int32) tasks.Contact {
		return tasks.Contact{Known: true, State: execdapi.TaskState{ID: tasks.TaskID("demo-uid", replica, fmt.Sprintf("uid-%d", replica)),
			Phase: execdapi.TaskRunning, Attempt: 1}}
	}
	tests := []struct {
		name       string
		bs         *controlv1alpha1.BatchSandbox
		pods       []corev1.Pod
		claimed    map[int32]string
		contacts   map[types.UID]tasks.Contact
		wantTasks  []string
		wantWatch  []string
		wantKeep   []types.UID
		wantStarts []string // "REPLICA POD"
	}{
		{
			name:       "certified pods with nothing known of their task: start it, and hear what it does",
			bs:         withTaskTemplate(newBatchSandbox(ptr.To[int32](2))),
			pods:       []corev1.Pod{replicaPod(0), replicaPod(1)},
			claimed:    certified,
			wantTasks:  []string{"0 Pending ", "1 Pending "},
			wantWatch:  []string{"demo-0", "demo-1"},
			wantKeep:   []types.UID{"uid-0", "uid-1"},
			wantStarts: []string{"0 demo-0", "1 demo-1"},
		},
		{
			name:      "a pod not certified yet, or none at all: the task waits",
			bs:        withTaskTemplate(newBatchSandbox(ptr.To[int32](2))),
			pods:      []corev1.Pod{replicaPod(0)},
			claimed:   map[int32]string{},
			wantTasks: []string{"0 Pending ", "1 Pending "},
		},
		{
			name:      "a container that restarted since its certification is not the task's",
			bs:        withTaskTemplate(newBatchSandbox(nil)),
			pods:      []corev1.Pod{replicaPod(0)},
			claimed:   map[int32]string{0: "containerd://before"},
			wantTasks: []string{"0 Pending "},
		},
		{
			name:      "a running task is recorded from its stream",
			bs:        withTaskTemplate(newBatchSandbox(nil)),
			pods:      []corev1.Pod{replicaPod(0)},
			claimed:   certified,
			contacts:  map[types.UID]tasks.Contact{"uid-0": running(0)},
			wantTasks: []string{"0 Running "},
			wantWatch: []string{"demo-0"},
			wantKeep:  []types.UID{"uid-0"},
		},
		{
			name: "the pod a task ran in is heard while it is not usable",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := withTaskTemplate(newBatchSandbox(nil))
				bs.Status.Tasks = []controlv1alpha1.TaskStatus{{Replica: 0, Phase: controlv1alpha1.TaskRunning, Pod: "demo-0", PodUID: "uid-0", Attempts: 1}}
				return bs
			}(),
			pods:      []corev1.Pod{replicaPod(0, notReady)},
			claimed:   map[int32]string{},
			wantTasks: []string{"0 Running "},
			wantWatch: []string{"demo-0"},
			wantKeep:  []types.UID{"uid-0"},
		},
		{
			name: "a task that ended stays as it is: nothing to watch",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := withTaskTemplate(newBatchSandbox(nil))
				bs.Status.Tasks = []controlv1alpha1.TaskStatus{{Replica: 0, Phase: controlv1alpha1.TaskSucceeded, PodUID: "uid-0"}}
				return bs
			}(),
			pods:      []corev1.Pod{replicaPod(0)},
			claimed:   certified,
			wantTasks: []string{"0 Succeeded "},
		},
		{
			name:      "a pod being deleted or failed runs no task",
			bs:        withTaskTemplate(newBatchSandbox(ptr.To[int32](2))),
			pods:      []corev1.Pod{replicaPod(0, deleting), replicaPod(1, failedPod("Evicted"))},
			claimed:   certified,
			wantTasks: []string{"0 Pending ", "1 Pending "},
		},
		{
			name: "a shard task patch that does not apply fails its replica's task",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := withTaskTemplate(newBatchSandbox(ptr.To[int32](2)))
				bs.Spec.ShardTaskPatches = []runtime.RawExtension{{}, {Raw: []byte(`"x"`)}}
				return bs
			}(),
			pods:       []corev1.Pod{replicaPod(0), replicaPod(1)},
			claimed:    certified,
			wantTasks:  []string{"0 Pending ", "1 Failed " + controlv1alpha1.ReasonTaskStartFailed},
			wantWatch:  []string{"demo-0"},
			wantKeep:   []types.UID{"uid-0"},
			wantStarts: []string{"0 demo-0"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planTasks(tc.bs, byReplicaOf(tc.pods...), tc.claimed, tc.contacts, planT0)
			if diff := cmp.Diff(tc.wantTasks, taskPhases(p.tasks)); diff != "" {
				t.Errorf("tasks (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWatch, podNamesOf(p.watch)); diff != "" {
				t.Errorf("watch (-want +got):\n%s", diff)
			}
			var keep []types.UID
			for _, uid := range []types.UID{"uid-0", "uid-1"} {
				if p.keep[uid] {
					keep = append(keep, uid)
				}
			}
			if diff := cmp.Diff(tc.wantKeep, keep); diff != "" {
				t.Errorf("keep (-want +got):\n%s", diff)
			}
			var starts []string
			for _, s := range p.starts {
				starts = append(starts, fmt.Sprintf("%d %s", s.replica, s.pod.Name))
				if s.task == nil || s.obs.PodUID != string(s.pod.UID) || !s.obs.Usable {
					t.Errorf("start of replica %d = %+v, want its task on its usable pod", s.replica, s)
				}
			}
			if diff := cmp.Diff(tc.wantStarts, starts); diff != "" {
				t.Errorf("starts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanTasksPatchFailure: the failure of a shard task patch says which patch, and when.
func TestPlanTasksPatchFailure(t *testing.T) {
	bs := withTaskTemplate(newBatchSandbox(nil))
	bs.Spec.ShardTaskPatches = []runtime.RawExtension{{Raw: []byte(`{"command":[]}`)}}
	p := planTasks(bs, nil, nil, nil, planT0)
	finish := metav1.NewTime(planT0)
	want := []controlv1alpha1.TaskStatus{{Replica: 0, Phase: controlv1alpha1.TaskFailed, Reason: controlv1alpha1.ReasonTaskStartFailed,
		Message: "spec.shardTaskPatches[0]: the patched task has no command", FinishTime: &finish}}
	if diff := cmp.Diff(want, p.tasks); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
}

// TestTaskStartRejected: a task execd refuses fails for good, keeping the attempts and start
// recorded before.
func TestTaskStartRejected(t *testing.T) {
	started := metav1.NewTime(planT0.Add(-1))
	pod := replicaPod(0)
	s := taskStart{replica: 0, pod: &pod, prev: &controlv1alpha1.TaskStatus{Replica: 0, Attempts: 2, StartTime: &started}}
	got := taskStartRejected(s, fmt.Errorf("execd runs another task"), planT0)
	finish := metav1.NewTime(planT0)
	want := controlv1alpha1.TaskStatus{Replica: 0, Phase: controlv1alpha1.TaskFailed, Pod: "demo-0", PodUID: "uid-0",
		Reason: controlv1alpha1.ReasonTaskStartFailed, Message: "execd runs another task", FinishTime: &finish, Attempts: 2, StartTime: &started}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}
