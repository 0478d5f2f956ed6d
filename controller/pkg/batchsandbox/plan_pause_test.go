package batchsandbox

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/snapshot"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

func pausing(bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.BatchSandbox {
	bs.Spec.Paused = true
	return bs
}

// pauseSteps summarizes the steps of a pause: "REPLICA POD snapshot IMAGE" or "REPLICA POD goes".
func pauseSteps(steps []pauseStep) []string {
	var out []string
	for _, s := range steps {
		if s.snapshot == nil {
			out = append(out, fmt.Sprintf("%d %s goes", s.replica, s.pod.Name))
			continue
		}
		out = append(out, fmt.Sprintf("%d %s snapshot %s", s.replica, s.pod.Name, s.snapshot.Image))
	}
	return out
}

func TestPlanPause(t *testing.T) {
	tag := func(i int32) string {
		return testSnapshotRepo + ":" + snapshot.Tag("demo-uid", i, types.UID(fmt.Sprintf("uid-%d", i)))
	}
	tests := []struct {
		name          string
		bs            *controlv1alpha1.BatchSandbox
		pods          []corev1.Pod
		wantRemove    []string
		wantGoing     int
		wantSteps     []string
		wantNoPodLeft bool
	}{
		{
			name:      "every running replica is snapshotted, in replica order",
			bs:        pausing(newBatchSandbox(ptr.To[int32](2))),
			pods:      []corev1.Pod{replicaPod(1), replicaPod(0)},
			wantSteps: []string{"0 demo-0 snapshot " + tag(0), "1 demo-1 snapshot " + tag(1)},
		},
		{
			name: "a replica whose snapshot of this pod is in the status goes without another",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := pausing(newBatchSandbox(ptr.To[int32](2)))
				bs.Status.Snapshots = []controlv1alpha1.SnapshotStatus{{Replica: 0, PodUID: "uid-0"}, {Replica: 1, PodUID: "an-earlier-pod"}}
				return bs
			}(),
			pods:      []corev1.Pod{replicaPod(0), replicaPod(1)},
			wantSteps: []string{"0 demo-0 goes", "1 demo-1 snapshot " + tag(1)},
		},
		{
			name:      "a pod where nothing ran goes without a snapshot",
			bs:        pausing(newBatchSandbox(ptr.To[int32](2))),
			pods:      []corev1.Pod{replicaPod(0, pending), replicaPod(1, failedPod("Error"))},
			wantSteps: []string{"0 demo-0 goes", "1 demo-1 goes"},
		},
		{
			name:       "surplus pods go at once, and with those being deleted they are still pods left",
			bs:         pausing(newBatchSandbox(ptr.To[int32](1))),
			pods:       []corev1.Pod{replicaPod(1), replicaPod(0, deleting), replicaPod(2, labelled("x"))},
			wantRemove: []string{"release demo-1: surplus after a scale-down", "release demo-2: surplus after a scale-down"},
			wantGoing:  3,
		},
		{
			name:          "no pod left: Paused",
			bs:            pausing(newBatchSandbox(ptr.To[int32](2))),
			wantNoPodLeft: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planPause(&observed{bs: tc.bs, pods: tc.pods, snapshotRepo: testSnapshotRepo, snapshotMaxBytes: 1 << 20})
			if diff := cmp.Diff(tc.wantRemove, removals(p.remove), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("remove (-want +got):\n%s", diff)
			}
			if p.going != tc.wantGoing {
				t.Errorf("going = %d, want %d", p.going, tc.wantGoing)
			}
			if diff := cmp.Diff(tc.wantSteps, pauseSteps(p.steps)); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if p.noPodLeft != tc.wantNoPodLeft {
				t.Errorf("noPodLeft = %v, want %v", p.noPodLeft, tc.wantNoPodLeft)
			}
			for _, s := range p.steps {
				if s.snapshot != nil && (s.snapshot.MaxBytes != 1<<20 || s.snapshot.Container != "main" || s.snapshot.PodUID != string(s.pod.UID) ||
					s.snapshot.Pod != s.pod.Name || s.snapshot.Namespace != testNamespace) {
					t.Errorf("snapshot request of replica %d = %+v", s.replica, *s.snapshot)
				}
			}
		})
	}
}

func TestPlanPaused(t *testing.T) {
	wall := planT0.Add(time.Hour)
	created := time.Unix(1700000000, 0)
	taken := func(pod string) snapshotJob {
		return snapshotJob{job: snapshot.Job{Done: true, Finished: wall.Add(-time.Second), Result: &nodeapi.Result{
			Image: testSnapshotRepo + ":tag-" + pod, Digest: "sha256:" + pod, Size: 100, LayerSize: 10, BaseImage: "busybox", Created: created}}}
	}
	failed := func(err error, ago time.Duration) snapshotJob {
		return snapshotJob{job: snapshot.Job{Done: true, Err: err, Finished: wall.Add(-ago)}}
	}
	egressReady := &metav1.Condition{Type: controlv1alpha1.ConditionEgressReady, Status: metav1.ConditionTrue, Reason: controlv1alpha1.ReasonPaused, Message: "no pod"}
	wasPaused := func(bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.BatchSandbox {
		bs.Status.Phase = controlv1alpha1.PhasePaused
		return bs
	}
	tests := []struct {
		name string
		bs   *controlv1alpha1.BatchSandbox
		pods []corev1.Pod
		jobs map[int32]snapshotJob
		// egress is the EgressReady condition of a sandbox with no pod left.
		egress        *metav1.Condition
		wantPhase     controlv1alpha1.SandboxPhase
		wantPaused    string // "STATUS REASON: MESSAGE"
		wantSnapshots []string
		wantEvents    []string
		wantRelease   []string
		wantForget    []types.UID
		wantReplaced  []string
		wantRequeue   time.Duration
	}{
		{
			name:          "snapshots taken: in the status, and the pods go after it",
			bs:            pausing(newBatchSandbox(ptr.To[int32](2))),
			pods:          []corev1.Pod{replicaPod(0), replicaPod(1)},
			jobs:          map[int32]snapshotJob{0: taken("demo-0"), 1: taken("demo-1")},
			wantPhase:     controlv1alpha1.PhasePausing,
			wantPaused:    "False Pausing: 2 pod(s) left",
			wantSnapshots: []string{"0 " + testSnapshotRepo + "@sha256:demo-0", "1 " + testSnapshotRepo + "@sha256:demo-1"},
			wantRelease:   []string{"demo-0", "demo-1"},
		},
		{
			name: "a replica paused again: its earlier snapshot is no one's",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := pausing(newBatchSandbox(nil))
				bs.Status.Snapshots = []controlv1alpha1.SnapshotStatus{{Replica: 0, Image: "old", Digest: "sha256:old", PodUID: "an-earlier-pod"}}
				return bs
			}(),
			pods:          []corev1.Pod{replicaPod(0)},
			jobs:          map[int32]snapshotJob{0: taken("demo-0")},
			wantPhase:     controlv1alpha1.PhasePausing,
			wantPaused:    "False Pausing: 1 pod(s) left",
			wantSnapshots: []string{"0 " + testSnapshotRepo + "@sha256:demo-0"},
			wantRelease:   []string{"demo-0"},
			wantReplaced:  []string{"sha256:old"},
		},
		{
			name:        "snapshots under way: Pausing, with each replica's stage",
			bs:          pausing(newBatchSandbox(ptr.To[int32](3))),
			pods:        []corev1.Pod{replicaPod(0), replicaPod(1), replicaPod(2, pending)},
			jobs:        map[int32]snapshotJob{0: {job: snapshot.Job{Stage: nodeapi.StageCommitting}}, 1: {job: snapshot.Job{}}},
			wantPhase:   controlv1alpha1.PhasePausing,
			wantPaused:  "False Pausing: 3 pod(s) left: replica 0: " + nodeapi.StageCommitting + ", replica 1: Starting",
			wantRelease: []string{"demo-2"},
		},
		{
			name:        "a runner that cannot start snapshots yet: look again in a second",
			bs:          pausing(newBatchSandbox(nil)),
			pods:        []corev1.Pod{replicaPod(0)},
			jobs:        map[int32]snapshotJob{0: {err: snapshot.ErrNotStarted}},
			wantPhase:   controlv1alpha1.PhasePausing,
			wantPaused:  "False Pausing: 1 pod(s) left: replica 0: waiting to start",
			wantRequeue: time.Second,
		},
		{
			name:       "a snapshot that failed a moment ago keeps the pod, and the phase the pods give",
			bs:         pausing(withStatusPods(newBatchSandbox(ptr.To[int32](2)), replicaPod(0), replicaPod(1))),
			pods:       []corev1.Pod{replicaPod(0), replicaPod(1)},
			jobs:       map[int32]snapshotJob{0: failed(errors.New("disk full"), 10*time.Second), 1: failed(errors.New("also"), 20*time.Second)},
			wantPhase:  controlv1alpha1.PhaseRunning,
			wantPaused: "False SnapshotFailed: replica 0 (pod demo-0): disk full; the pod is kept, and the snapshot is taken again in 30s",
			wantEvents: []string{"Warning SnapshotFailed Pause: replica 0 (pod demo-0): disk full; the pod is kept, and the snapshot is taken again in 30s"},
			// The earliest of the replicas' retries.
			wantRequeue: 10 * time.Second,
		},
		{
			name: "a registry that does not let the snapshot in",
			bs:   pausing(newBatchSandbox(nil)),
			pods: []corev1.Pod{replicaPod(0)},
			jobs: map[int32]snapshotJob{0: failed(&snapshot.Failed{Reason: nodeapi.ReasonRegistryUnauthorized, Message: "401"}, time.Second)},
			wantPaused: "False RegistryUnavailable: replica 0 (pod demo-0): " + nodeapi.ReasonRegistryUnauthorized +
				": 401; the pod is kept, and the snapshot is taken again in 30s",
			wantPhase: controlv1alpha1.PhasePending,
			wantEvents: []string{"Warning RegistryUnavailable Pause: replica 0 (pod demo-0): " + nodeapi.ReasonRegistryUnauthorized +
				": 401; the pod is kept, and the snapshot is taken again in 30s"},
			wantRequeue: SnapshotRetryDelay - time.Second,
		},
		{
			name:        "a snapshot that failed long enough ago is taken again",
			bs:          pausing(newBatchSandbox(nil)),
			pods:        []corev1.Pod{replicaPod(0)},
			jobs:        map[int32]snapshotJob{0: failed(errors.New("disk full"), time.Minute)},
			wantPhase:   controlv1alpha1.PhasePending,
			wantPaused:  "False SnapshotFailed: replica 0 (pod demo-0): disk full; the pod is kept, and the snapshot is taken again in 30s",
			wantEvents:  []string{"Warning SnapshotFailed Pause: replica 0 (pod demo-0): disk full; the pod is kept, and the snapshot is taken again in 30s"},
			wantForget:  []types.UID{"uid-0"},
			wantRequeue: time.Millisecond,
		},
		{
			name: "no pod left: Paused, with an Event as it becomes so",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := pausing(newBatchSandbox(ptr.To[int32](2)))
				bs.Status.Phase = controlv1alpha1.PhasePausing
				bs.Status.Snapshots = []controlv1alpha1.SnapshotStatus{{Replica: 1, Image: "i1"}, {Replica: 0, Image: "i0"}}
				return bs
			}(),
			egress:        egressReady,
			wantPhase:     controlv1alpha1.PhasePaused,
			wantPaused:    "True Paused: paused: 2 replica(s) in snapshots, no pod left",
			wantSnapshots: []string{"0 i0", "1 i1"},
			wantEvents:    []string{"Normal Paused Pause: paused: 2 replica(s) in snapshots, no pod left"},
		},
		{
			name:       "Paused already: no Event again",
			bs:         wasPaused(pausing(newBatchSandbox(nil))),
			wantPhase:  controlv1alpha1.PhasePaused,
			wantPaused: "True Paused: paused: 0 replica(s) in snapshots, no pod left",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obs := &observed{bs: tc.bs, pods: tc.pods, snapshotRepo: testSnapshotRepo}
			before := tc.bs.DeepCopy()
			p := planPause(obs)
			out := planPaused(obs, p, tc.jobs, tc.egress, planT0, wall)
			if out.status.Phase != tc.wantPhase {
				t.Errorf("phase = %s, want %s", out.status.Phase, tc.wantPhase)
			}
			c := meta.FindStatusCondition(out.status.Conditions, controlv1alpha1.ConditionPaused)
			if c == nil {
				t.Fatalf("no Paused condition in %+v", out.status.Conditions)
			}
			if got := fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message); got != tc.wantPaused {
				t.Errorf("Paused condition = %q, want %q", got, tc.wantPaused)
			}
			var snaps []string
			for _, sn := range out.status.Snapshots {
				snaps = append(snaps, fmt.Sprintf("%d %s", sn.Replica, sn.Image))
			}
			if diff := cmp.Diff(tc.wantSnapshots, snaps); diff != "" {
				t.Errorf("snapshots (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEvents, eventTexts(out.events)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRelease, podNamesOf(out.release)); diff != "" {
				t.Errorf("pods released after the status (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantForget, out.forget); diff != "" {
				t.Errorf("jobs forgotten (-want +got):\n%s", diff)
			}
			var replaced []string
			for _, sn := range out.replaced {
				replaced = append(replaced, sn.Digest)
			}
			if diff := cmp.Diff(tc.wantReplaced, replaced); diff != "" {
				t.Errorf("snapshots replaced (-want +got):\n%s", diff)
			}
			if out.requeueAfter != tc.wantRequeue {
				t.Errorf("requeueAfter = %s, want %s", out.requeueAfter, tc.wantRequeue)
			}
			if ready := meta.FindStatusCondition(out.status.Conditions, controlv1alpha1.ConditionReady); tc.wantPhase == controlv1alpha1.PhasePaused &&
				(ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != controlv1alpha1.ReasonPaused) {
				t.Errorf("Ready condition when Paused = %+v, want False Paused", ready)
			}
			eg := meta.FindStatusCondition(out.status.Conditions, controlv1alpha1.ConditionEgressReady)
			if tc.egress != nil && (eg == nil || eg.Reason != tc.egress.Reason) || tc.egress == nil && eg != nil {
				t.Errorf("EgressReady condition = %+v, want %+v", eg, tc.egress)
			}
			if diff := cmp.Diff(before, tc.bs); diff != "" {
				t.Errorf("the plans changed the sandbox (-before +after):\n%s", diff)
			}
		})
	}
}

// TestPlanPausedSnapshotStatus: a snapshot taken is recorded with all the runner says of it,
// and with the reconciler's time when the node agent gave none.
func TestPlanPausedSnapshotStatus(t *testing.T) {
	obs := &observed{bs: pausing(newBatchSandbox(nil)), pods: []corev1.Pod{replicaPod(0)}, snapshotRepo: testSnapshotRepo}
	p := planPause(obs)
	job := snapshotJob{job: snapshot.Job{Done: true, Result: &nodeapi.Result{Image: testSnapshotRepo + ":t", Digest: "sha256:d",
		Size: 100, LayerSize: 10, BaseImage: "busybox"}}}
	out := planPaused(obs, p, map[int32]snapshotJob{0: job}, nil, planT0, planT0)
	want := []controlv1alpha1.SnapshotStatus{{Replica: 0, Image: testSnapshotRepo + "@sha256:d", Tag: testSnapshotRepo + ":t", Digest: "sha256:d",
		Size: 100, LayerSize: 10, BaseImage: "busybox", CreationTime: metav1.NewTime(planT0), Pod: "demo-0", PodUID: "uid-0"}}
	if diff := cmp.Diff(want, out.status.Snapshots); diff != "" {
		t.Errorf("snapshots (-want +got):\n%s", diff)
	}
}
