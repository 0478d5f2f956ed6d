package batchsandbox

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// testSnapshotRepo is the test sandbox's repository in the snapshot registry.
const testSnapshotRepo = "registry.test:5000/kube-sandbox/snapshots/team-a/demo"

// newPods summarizes the pods a plan makes: "REPLICA IMAGE PULLPOLICY", or "REPLICA REASON:
// MESSAGE" for a replica whose pod cannot be made.
func newPods(create []newPod) []string {
	var out []string
	for _, c := range create {
		if c.problem != nil {
			out = append(out, fmt.Sprintf("%d %s: %s", c.replica, c.problem.Reason, c.problem.Message))
			continue
		}
		ct := c.template.Spec.Containers[0]
		out = append(out, fmt.Sprintf("%d %s %s", c.replica, ct.Image, ct.ImagePullPolicy))
	}
	return out
}

// endedTasks gives bs a task whose replicas' tasks in ended have ended, and the policy
// Release when release is set.
func endedTasks(bs *controlv1alpha1.BatchSandbox, release bool, ended ...int32) *controlv1alpha1.BatchSandbox {
	bs.Spec.TaskTemplate = &controlv1alpha1.TaskTemplate{Command: []string{"true"}}
	if release {
		bs.Spec.TaskResourcePolicyWhenCompleted = controlv1alpha1.TaskResourceRelease
	}
	for _, i := range ended {
		bs.Status.Tasks = append(bs.Status.Tasks, controlv1alpha1.TaskStatus{Replica: i, Phase: controlv1alpha1.TaskSucceeded})
	}
	return bs
}

func withSnapshot(bs *controlv1alpha1.BatchSandbox, replica int32, image string) *controlv1alpha1.BatchSandbox {
	bs.Status.Snapshots = append(bs.Status.Snapshots, controlv1alpha1.SnapshotStatus{Replica: replica, Image: image})
	return bs
}

func TestPlanDirect(t *testing.T) {
	resumedPooled := func() *controlv1alpha1.BatchSandbox {
		return withSnapshot(pooledBatchSandbox(1), 0, testSnapshotRepo+"@sha256:aa")
	}
	labelledPool := testPool()
	labelledPool.Spec.Template.Labels = map[string]string{controlv1alpha1.LabelPool: testPoolName,
		controlv1alpha1.LabelPoolRevision: "r1", "app": "py"}
	tests := []struct {
		name       string
		bs         *controlv1alpha1.BatchSandbox
		pods       []corev1.Pod
		pool       *controlv1alpha1.Pool
		repo       string
		wantRemove []string
		wantPods   map[int32]string
		wantCreate []string
	}{
		{
			name:       "no pods: one per replica, from the template",
			bs:         newBatchSandbox(ptr.To[int32](2)),
			wantPods:   map[int32]string{},
			wantCreate: []string{"0 busybox ", "1 busybox "},
		},
		{
			name:     "every replica has its pod: nothing to do",
			bs:       newBatchSandbox(ptr.To[int32](2)),
			pods:     []corev1.Pod{replicaPod(0), replicaPod(1)},
			wantPods: map[int32]string{0: "demo-0", 1: "demo-1"},
		},
		{
			name:       "after a scale-down the surplus pods are deleted",
			bs:         newBatchSandbox(ptr.To[int32](1)),
			pods:       []corev1.Pod{replicaPod(0), replicaPod(1), replicaPod(2, deleting)},
			wantRemove: []string{"delete demo-1"},
			wantPods:   map[int32]string{0: "demo-0"},
		},
		{
			name:       "a pod whose label was tampered with is deleted, and its replica gets its own",
			bs:         newBatchSandbox(ptr.To[int32](2)),
			pods:       []corev1.Pod{replicaPod(0), replicaPod(1, named("other")), replicaPod(1, named("x"), labelled("one"))},
			wantRemove: []string{"delete other", "delete x"},
			wantPods:   map[int32]string{0: "demo-0"},
			wantCreate: []string{"1 busybox "},
		},
		{
			name: "a failed pod is released with an Event, and stays its replica's until it is gone",
			bs:   newBatchSandbox(ptr.To[int32](2)),
			pods: []corev1.Pod{replicaPod(0, failedPod("Evicted")), replicaPod(1)},
			wantRemove: []string{"release demo-0: failed: Evicted after Warning PodLost Replace: " +
				"pod demo-0 of replica 0 failed (Evicted gone); replacing it"},
			wantPods: map[int32]string{0: "demo-0", 1: "demo-1"},
		},
		{
			name:     "a failed pod being deleted is waited for",
			bs:       newBatchSandbox(nil),
			pods:     []corev1.Pod{replicaPod(0, failedPod("Evicted"), deleting)},
			wantPods: map[int32]string{0: "demo-0"},
		},
		{
			name:     "the failed pod of a replica whose task ended stays, and gets no replacement",
			bs:       endedTasks(newBatchSandbox(ptr.To[int32](2)), false, 0),
			pods:     []corev1.Pod{replicaPod(0, failedPod("Error"))},
			wantPods: map[int32]string{0: "demo-0"},
			wantCreate: []string{
				"1 busybox ",
			},
		},
		{
			name: "with Release the pods of ended replicas go, and get none again",
			bs:   endedTasks(newBatchSandbox(ptr.To[int32](3)), true, 2, 0),
			pods: []corev1.Pod{replicaPod(0), replicaPod(1), replicaPod(2)},
			wantRemove: []string{
				"release demo-0: its task ended (taskResourcePolicyWhenCompleted: Release)",
				"release demo-2: its task ended (taskResourcePolicyWhenCompleted: Release)",
			},
			wantPods: map[int32]string{1: "demo-1"},
		},
		{
			name: "a shard patch that does not apply is its replica's problem",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := newBatchSandbox(ptr.To[int32](2))
				bs.Spec.ShardPatches = []runtime.RawExtension{{Raw: []byte(`{"spec":{"containers":[{"name":"main","image":"alpine"}]}}`)}, {Raw: []byte(`[1]`)}}
				return bs
			}(),
			wantPods: map[int32]string{},
			wantCreate: []string{"0 alpine ",
				"1 PodCreateFailed: spec.shardPatches[1]: a strategic merge patch is a JSON object, not an array"},
		},
		{
			name:       "resumed: the replica's pod runs its snapshot, by digest",
			bs:         withSnapshot(newBatchSandbox(nil), 0, testSnapshotRepo+"@sha256:aa"),
			repo:       testSnapshotRepo,
			wantPods:   map[int32]string{},
			wantCreate: []string{"0 " + testSnapshotRepo + "@sha256:aa IfNotPresent"},
		},
		{
			name:     "a snapshot of another sandbox's repository is refused",
			bs:       withSnapshot(newBatchSandbox(nil), 0, "registry.test:5000/kube-sandbox/snapshots/team-b/other@sha256:aa"),
			repo:     testSnapshotRepo,
			wantPods: map[int32]string{},
			wantCreate: []string{`0 SnapshotFailed: status.snapshots[replica 0] names "registry.test:5000/kube-sandbox/snapshots/team-b/other@sha256:aa", ` +
				"which is not a snapshot of this sandbox"},
		},
		{
			name:     "without a snapshot registry no snapshot is trusted",
			bs:       withSnapshot(newBatchSandbox(nil), 0, testSnapshotRepo+"@sha256:aa"),
			wantPods: map[int32]string{},
			wantCreate: []string{`0 SnapshotFailed: status.snapshots[replica 0] names "` + testSnapshotRepo + `@sha256:aa", ` +
				"which is not a snapshot of this sandbox"},
		},
		{
			name:       "a pooled sandbox resumed: its pods are made from the pool's template and snapshot",
			bs:         resumedPooled(),
			pool:       labelledPool,
			repo:       testSnapshotRepo,
			wantPods:   map[int32]string{},
			wantCreate: []string{"0 " + testSnapshotRepo + "@sha256:aa IfNotPresent"},
		},
		{
			name:       "a pooled sandbox resumed without its pool waits for it",
			bs:         resumedPooled(),
			repo:       testSnapshotRepo,
			wantPods:   map[int32]string{},
			wantCreate: []string{`0 PoolNotFound: pool "py", whose template the resumed pods are made from, does not exist`},
		},
		{
			name: "a pooled sandbox resumed from a pool it may not use",
			bs:   resumedPooled(),
			pool: func() *controlv1alpha1.Pool {
				p := testPool()
				p.Spec.PodSecurity = controlv1alpha1.PodSecurityNamespace
				return p
			}(),
			repo:     testSnapshotRepo,
			wantPods: map[int32]string{},
			wantCreate: []string{`0 PoolNotAllowed: pool "py" makes pods of the namespace's pod security level (podSecurity: Namespace), ` +
				"which only sandboxes of users who may create pods get"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.bs.DeepCopy()
			p := planDirect(&observed{bs: tc.bs, pods: tc.pods, pool: tc.pool, snapshotRepo: tc.repo})
			if diff := cmp.Diff(tc.wantRemove, removals(p.remove), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("remove (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPods, podNamesByReplica(p.byReplica)); diff != "" {
				t.Errorf("pods by replica (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCreate, newPods(p.create), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("create (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.bs); diff != "" {
				t.Errorf("planDirect changed the sandbox (-before +after):\n%s", diff)
			}
		})
	}
}

// TestPlanDirectResumedPoolLabels: a resumed pooled sandbox's pod is its own, never counted as
// the pool's, and the pool's template is not changed by it.
func TestPlanDirectResumedPoolLabels(t *testing.T) {
	pool := testPool()
	pool.Spec.Template.Labels = map[string]string{controlv1alpha1.LabelPool: testPoolName, controlv1alpha1.LabelPoolRevision: "r1",
		controlv1alpha1.LabelPodSecurity: "Namespace", "app": "py"}
	before := pool.DeepCopy()
	bs := withSnapshot(pooledBatchSandbox(1), 0, testSnapshotRepo+"@sha256:aa")
	p := planDirect(&observed{bs: bs, pool: pool, snapshotRepo: testSnapshotRepo})
	if len(p.create) != 1 || p.create[0].template == nil {
		t.Fatalf("create = %+v, want one pod", p.create)
	}
	if diff := cmp.Diff(map[string]string{"app": "py"}, p.create[0].template.Labels); diff != "" {
		t.Errorf("labels of the resumed pod's template (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, pool); diff != "" {
		t.Errorf("the pool changed (-before +after):\n%s", diff)
	}
}
