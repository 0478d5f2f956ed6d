package batchsandbox

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

func TestPlanPooled(t *testing.T) {
	pool := func(name string, replica int32, change ...func(*corev1.Pod)) corev1.Pod {
		return replicaPod(replica, append([]func(*corev1.Pod){named(name), fromPool}, change...)...)
	}
	tests := []struct {
		name        string
		bs          *controlv1alpha1.BatchSandbox
		pods        []corev1.Pod
		wantRemove  []string
		wantPods    map[int32]string
		wantMissing []int32
	}{
		{
			name:        "no pods: every replica wants one of the pool",
			bs:          pooledBatchSandbox(3),
			wantPods:    map[int32]string{},
			wantMissing: []int32{0, 1, 2},
		},
		{
			name:     "every replica has its pod: nothing to do",
			bs:       pooledBatchSandbox(2),
			pods:     []corev1.Pod{pool("a", 0), pool("b", 1)},
			wantPods: map[int32]string{0: "a", 1: "b"},
		},
		{
			name:       "after a scale-down the surplus pods are released",
			bs:         pooledBatchSandbox(1),
			pods:       []corev1.Pod{pool("a", 0), pool("b", 1), pool("c", 2, deleting), pool("d", 0, labelled("x"))},
			wantRemove: []string{"release b: surplus after a scale-down", "release d: surplus after a scale-down"},
			wantPods:   map[int32]string{0: "a"},
		},
		{
			name:        "a pod being deleted is replaced now, not after its grace period",
			bs:          pooledBatchSandbox(1),
			pods:        []corev1.Pod{pool("a", 0, deleting)},
			wantPods:    map[int32]string{},
			wantMissing: []int32{0},
		},
		{
			name:        "a failed pod is released and replaced",
			bs:          pooledBatchSandbox(2),
			pods:        []corev1.Pod{pool("a", 0, failedPod("Evicted")), pool("b", 1)},
			wantRemove:  []string{"release a: failed: Evicted"},
			wantPods:    map[int32]string{1: "b"},
			wantMissing: []int32{0},
		},
		{
			name:       "of two pods of one replica the ready one stays",
			bs:         pooledBatchSandbox(1),
			pods:       []corev1.Pod{pool("a", 0, notReady), pool("b", 0)},
			wantRemove: []string{"release a: a second pod of the same replica"},
			wantPods:   map[int32]string{0: "b"},
		},
		{
			name:       "of two ready pods of one replica the first by name stays",
			bs:         pooledBatchSandbox(1),
			pods:       []corev1.Pod{pool("b", 0), pool("a", 0), pool("c", 0)},
			wantRemove: []string{"release b: a second pod of the same replica", "release c: a second pod of the same replica"},
			wantPods:   map[int32]string{0: "a"},
		},
		{
			name:       "with Release the pods of ended replicas go, and get none again",
			bs:         endedTasks(pooledBatchSandbox(2), true, 1),
			pods:       []corev1.Pod{pool("a", 0), pool("b", 1)},
			wantRemove: []string{"release b: its task ended (taskResourcePolicyWhenCompleted: Release)"},
			wantPods:   map[int32]string{0: "a"},
		},
		{
			name:     "without Release an ended replica keeps its pod, and a lost one is not replaced",
			bs:       endedTasks(pooledBatchSandbox(2), false, 0, 1),
			pods:     []corev1.Pod{pool("a", 0)},
			wantPods: map[int32]string{0: "a"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planPooled(&observed{bs: tc.bs, pods: tc.pods})
			if diff := cmp.Diff(tc.wantRemove, removals(p.remove), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("remove (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPods, podNamesByReplica(p.byReplica)); diff != "" {
				t.Errorf("pods by replica (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMissing, p.missing); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
			if p.desired != replicas(tc.bs) {
				t.Errorf("desired = %d, want %d", p.desired, replicas(tc.bs))
			}
		})
	}
}

func TestLostEvents(t *testing.T) {
	bs := pooledBatchSandbox(3)
	bs.Status.Pods = []controlv1alpha1.SandboxPodStatus{{Replica: 0, Name: "a"}, {Replica: 1, Name: "b"}, {Replica: 2, Name: "c"}, {Replica: 3, Name: "d"}}
	now := byReplicaOf(replicaPod(0, named("a")), replicaPod(1, named("e")))
	want := []string{
		"Warning PodLost Replace: pod b of replica 1 is gone or failed; replaced by e",
		"Warning PodLost Replace: pod c of replica 2 is gone or failed; waiting for another pod of the pool",
	}
	if diff := cmp.Diff(want, eventTexts(lostEvents(bs, now, 3, nil))); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// An ended replica's pod, and one past a scale-down, are no loss.
	if got := lostEvents(bs, now, 2, map[int32]bool{1: true}); len(got) != 0 {
		t.Errorf("events of ended or surplus replicas = %q, want none", eventTexts(got))
	}
}

func TestPoolNotAllowed(t *testing.T) {
	refusing := testPool()
	refusing.Generation = 2
	meta.SetStatusCondition(&refusing.Status.Conditions, metav1.Condition{Type: controlv1alpha1.PoolConditionReady, Status: metav1.ConditionFalse,
		Reason: controlv1alpha1.ReasonTemplateRefused, Message: "forbidden", ObservedGeneration: 2})
	refusedBefore := refusing.DeepCopy()
	refusedBefore.Generation = 3
	elevated := testPool()
	elevated.Spec.PodSecurity = controlv1alpha1.PodSecurityNamespace
	admitted := pooledBatchSandbox(1)
	admitted.Annotations = map[string]string{controlv1alpha1.AnnotationPodSecurity: string(controlv1alpha1.PodSecurityNamespace)}
	tests := []struct {
		name string
		bs   *controlv1alpha1.BatchSandbox
		pool *controlv1alpha1.Pool
		want string
	}{
		{name: "a pool as it should be", bs: pooledBatchSandbox(1), pool: testPool()},
		{name: "a pool that refuses its own template", bs: pooledBatchSandbox(1), pool: refusing, want: `pool "py" refuses its own template: forbidden`},
		{name: "a refusal of an earlier generation", bs: pooledBatchSandbox(1), pool: refusedBefore},
		{name: "namespace-level pods for a sandbox not admitted for them", bs: pooledBatchSandbox(1), pool: elevated,
			want: `pool "py" makes pods of the namespace's pod security level (podSecurity: Namespace), which only sandboxes of users who may create pods get`},
		{name: "namespace-level pods for a sandbox admitted for them", bs: admitted, pool: elevated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if p := poolNotAllowed(tc.bs, tc.pool); p != nil {
				if p.Reason != controlv1alpha1.ReasonPoolNotAllowed || !p.Pending {
					t.Errorf("problem = %+v, want a pending PoolNotAllowed", p)
				}
				got = p.Message
			}
			if got != tc.want {
				t.Errorf("poolNotAllowed() = %q, want %q", got, tc.want)
			}
		})
	}
}
