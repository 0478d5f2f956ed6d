package batchsandbox

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// The plans are pure: these tests give them an observed state and compare what they say,
// summarized as text where a whole object would hide the point.

// planT0 is the time the plans are told it is.
var planT0 = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// replicaPod is a pod of the test sandbox for replica i, named as direct mode names it (demo-i),
// running and ready with container containerd://ci (readyStatus), changed by change.
func replicaPod(i int32, change ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", testName, i), Namespace: testNamespace,
			UID: types.UID(fmt.Sprintf("uid-%d", i)),
			Labels: map[string]string{controlv1alpha1.LabelBatchSandbox: testName,
				controlv1alpha1.LabelReplica: strconv.Itoa(int(i))}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	readyStatus(int(i))(&p.Status)
	p.Status.HostIP = "192.168.0.1"
	for _, c := range change {
		c(&p)
	}
	return p
}

func named(name string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Name = name } }

func labelled(replica string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels[controlv1alpha1.LabelReplica] = replica }
}

func failedPod(reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, reason, "gone"
		p.Status.Conditions = nil
	}
}

func deleting(p *corev1.Pod) {
	t := metav1.NewTime(planT0)
	p.DeletionTimestamp = &t
}

func notReady(p *corev1.Pod) { notReadyStatus(0)(&p.Status) }

func pending(p *corev1.Pod) {
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
}

func fromPool(p *corev1.Pod) { p.Labels[controlv1alpha1.LabelPool] = testPoolName }

// removals summarizes removals: "delete NAME" for a surplus pod, "release NAME: WHY" for the
// others, each with the Event recorded before it.
func removals(rm []removal) []string {
	var out []string
	for _, m := range rm {
		s := "release " + m.pod.Name + ": " + m.why
		if m.surplus {
			s = "delete " + m.pod.Name
		}
		if m.event != nil {
			s += " after " + eventText(*m.event)
		}
		out = append(out, s)
	}
	return out
}

func eventText(e sandboxEvent) string {
	return e.eventType + " " + e.reason + " " + e.action + ": " + e.message
}

func eventTexts(events []sandboxEvent) []string {
	var out []string
	for _, e := range events {
		out = append(out, eventText(e))
	}
	return out
}

// podNamesByReplica is byReplica as pod names.
func podNamesByReplica(byReplica map[int32]*corev1.Pod) map[int32]string {
	out := map[int32]string{}
	for i, p := range byReplica {
		out[i] = p.Name
	}
	return out
}

func podNamesOf(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// byReplicaOf indexes pods by their replica label, as a plan would have them.
func byReplicaOf(pods ...corev1.Pod) map[int32]*corev1.Pod {
	out := map[int32]*corev1.Pod{}
	for i := range pods {
		idx, _ := strconv.Atoi(pods[i].Labels[controlv1alpha1.LabelReplica])
		out[int32(idx)] = &pods[i]
	}
	return out
}

// withStatusPods records pods in the sandbox's status as a reconcile would have: name and
// runtime ID per replica.
func withStatusPods(bs *controlv1alpha1.BatchSandbox, pods ...corev1.Pod) *controlv1alpha1.BatchSandbox {
	for _, p := range pods {
		idx, _ := strconv.Atoi(p.Labels[controlv1alpha1.LabelReplica])
		bs.Status.Pods = append(bs.Status.Pods, controlv1alpha1.SandboxPodStatus{Replica: int32(idx), Name: p.Name,
			RuntimeID: sandboxpod.RuntimeID(&p), Ready: true})
	}
	return bs
}

func TestPlanClaims(t *testing.T) {
	restarted := func(p *corev1.Pod) { p.Status.ContainerStatuses[0].ContainerID = "containerd://again" }
	tests := []struct {
		name        string
		bs          *controlv1alpha1.BatchSandbox
		pods        []corev1.Pod
		wantClaimed map[int32]string
		wantTodo    []int32
		wantClaim   *execdapi.ClaimRequest
	}{
		{
			name:        "new ready pods are certified, in replica order",
			bs:          newBatchSandbox(ptr.To[int32](3)),
			pods:        []corev1.Pod{replicaPod(2), replicaPod(0), replicaPod(1)},
			wantClaimed: map[int32]string{},
			wantTodo:    []int32{0, 1, 2},
		},
		{
			name:        "a container the status records keeps its record; one that restarted since is certified again",
			bs:          withStatusPods(newBatchSandbox(ptr.To[int32](2)), replicaPod(0), replicaPod(1)),
			pods:        []corev1.Pod{replicaPod(0), replicaPod(1, restarted)},
			wantClaimed: map[int32]string{0: "containerd://c0"},
			wantTodo:    []int32{1},
		},
		{
			name:        "a pod of another name than the status records is certified",
			bs:          withStatusPods(newBatchSandbox(nil), replicaPod(0)),
			pods:        []corev1.Pod{replicaPod(0, named("demo-0-b"))},
			wantClaimed: map[int32]string{},
			wantTodo:    []int32{0},
		},
		{
			name:        "a pod not ready, or with no container yet, waits",
			bs:          newBatchSandbox(ptr.To[int32](2)),
			pods:        []corev1.Pod{replicaPod(0, notReady), replicaPod(1, pending)},
			wantClaimed: map[int32]string{},
		},
		{
			name: "a pooled sandbox's pods are claimed with its entrypoint and env, without the names execd sets",
			bs: func() *controlv1alpha1.BatchSandbox {
				bs := pooledBatchSandbox(1)
				bs.Spec.Env = append(bs.Spec.Env, corev1.EnvVar{Name: execdapi.EnvSandboxUID, Value: "forged"},
					corev1.EnvVar{Name: execdapi.EnvClientCA, Value: "forged"})
				return bs
			}(),
			pods:        []corev1.Pod{replicaPod(0, fromPool)},
			wantClaimed: map[int32]string{},
			wantTodo:    []int32{0},
			wantClaim: &execdapi.ClaimRequest{SandboxUID: "demo-uid", Namespace: testNamespace, Name: testName,
				Entrypoint: []string{"python3", "-m", "http.server"}, Env: []execdapi.EnvVar{{Name: "GREETING", Value: "hi"}}},
		},
		{
			name:        "nothing to claim, no claim",
			bs:          withStatusPods(pooledBatchSandbox(1), replicaPod(0)),
			pods:        []corev1.Pod{replicaPod(0)},
			wantClaimed: map[int32]string{0: "containerd://c0"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := planClaims(tc.bs, byReplicaOf(tc.pods...))
			if diff := cmp.Diff(tc.wantClaimed, got.claimed); diff != "" {
				t.Errorf("claimed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTodo, got.todo); diff != "" {
				t.Errorf("todo (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantClaim, got.claim); diff != "" {
				t.Errorf("claim (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEgressEligible(t *testing.T) {
	noIP := func(p *corev1.Pod) { p.Status.PodIP = "" }
	pods := byReplicaOf(replicaPod(0, fromPool), replicaPod(1), replicaPod(2, noIP), replicaPod(3, fromPool))
	claimed := map[int32]string{0: "containerd://c0", 1: "containerd://c1"}
	if diff := cmp.Diff(map[int32]string{0: "10.0.0.1", 1: "10.0.0.2", 3: "10.0.0.4"}, egressEligible(pods, claimed, false)); diff != "" {
		t.Errorf("direct mode: every pod with an address (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int32]string{0: "10.0.0.1", 1: "10.0.0.2"}, egressEligible(pods, claimed, true)); diff != "" {
		t.Errorf("pooled mode: a pool pod once claimed, a pod of the sandbox's own once it has an address (-want +got):\n%s", diff)
	}
}

func TestPlanStatus(t *testing.T) {
	refusedBy := func(reason string) *metav1.Condition {
		return &metav1.Condition{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionFalse, ObservedGeneration: 1,
			Reason: reason, Message: "cannot pause: " + reason}
	}
	withPaused := func(bs *controlv1alpha1.BatchSandbox, phase controlv1alpha1.SandboxPhase, reason string) *controlv1alpha1.BatchSandbox {
		bs.Status.Phase = phase
		meta.SetStatusCondition(&bs.Status.Conditions, metav1.Condition{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionTrue,
			Reason: reason, Message: "before"})
		return bs
	}
	paused := func(bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.BatchSandbox { bs.Spec.Paused = true; return bs }
	withTask := func(bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.BatchSandbox {
		bs.Spec.TaskTemplate = &controlv1alpha1.TaskTemplate{Command: []string{"true"}}
		return bs
	}
	done := metav1.NewTime(planT0)
	tests := []struct {
		name       string
		bs         *controlv1alpha1.BatchSandbox
		pods       []corev1.Pod
		claimed    map[int32]string
		tasks      *taskResult
		failure    *sandboxpod.Problem
		refused    *metav1.Condition
		wantPhase  controlv1alpha1.SandboxPhase
		wantReady  string // reason
		wantPaused string // reason; "" for no Paused condition
		wantEvents []string
	}{
		{
			name: "pods ready and certified: Running",
			bs:   newBatchSandbox(ptr.To[int32](2)), pods: []corev1.Pod{replicaPod(0), replicaPod(1)},
			claimed:   map[int32]string{0: "containerd://c0", 1: "containerd://c1"},
			wantPhase: controlv1alpha1.PhaseRunning, wantReady: controlv1alpha1.ReasonPodsReady,
		},
		{
			name: "a pod not certified yet: Pending",
			bs:   newBatchSandbox(ptr.To[int32](2)), pods: []corev1.Pod{replicaPod(0), replicaPod(1)},
			claimed:   map[int32]string{0: "containerd://c0"},
			wantPhase: controlv1alpha1.PhasePending, wantReady: controlv1alpha1.ReasonPodsNotReady,
		},
		{
			name: "a failure wins over ready pods",
			bs:   newBatchSandbox(nil), pods: []corev1.Pod{replicaPod(0)}, claimed: map[int32]string{0: "containerd://c0"},
			failure:   &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPodCreateFailed, Message: "refused"},
			wantPhase: controlv1alpha1.PhaseFailed, wantReady: controlv1alpha1.ReasonPodCreateFailed,
		},
		{
			name: "a refused pause is the Paused condition, and an Event as it turns to it",
			bs:   paused(newBatchSandbox(nil)), pods: []corev1.Pod{replicaPod(0)}, claimed: map[int32]string{0: "containerd://c0"},
			refused:   refusedBy(controlv1alpha1.ReasonRegistryUnavailable),
			wantPhase: controlv1alpha1.PhaseRunning, wantReady: controlv1alpha1.ReasonPodsReady, wantPaused: controlv1alpha1.ReasonRegistryUnavailable,
			wantEvents: []string{"Warning RegistryUnavailable Pause: cannot pause: RegistryUnavailable"},
		},
		{
			name: "a refusal the Paused condition says already is no new Event",
			bs:   paused(withPaused(newBatchSandbox(nil), controlv1alpha1.PhaseRunning, controlv1alpha1.ReasonRegistryUnavailable)),
			pods: []corev1.Pod{replicaPod(0)}, claimed: map[int32]string{0: "containerd://c0"},
			refused:   refusedBy(controlv1alpha1.ReasonRegistryUnavailable),
			wantPhase: controlv1alpha1.PhaseRunning, wantReady: controlv1alpha1.ReasonPodsReady, wantPaused: controlv1alpha1.ReasonRegistryUnavailable,
		},
		{
			name: "resumed, pods not ready yet: Resuming",
			bs:   withPaused(newBatchSandbox(nil), controlv1alpha1.PhasePaused, controlv1alpha1.ReasonPaused),
			pods: []corev1.Pod{replicaPod(0, notReady)}, claimed: map[int32]string{},
			wantPhase: controlv1alpha1.PhaseResuming, wantReady: controlv1alpha1.ReasonPodsNotReady, wantPaused: controlv1alpha1.ReasonResuming,
		},
		{
			name: "resumed, pods ready: Running, Resumed",
			bs:   withPaused(newBatchSandbox(nil), controlv1alpha1.PhaseResuming, controlv1alpha1.ReasonResuming),
			pods: []corev1.Pod{replicaPod(0)}, claimed: map[int32]string{0: "containerd://c0"},
			wantPhase: controlv1alpha1.PhaseRunning, wantReady: controlv1alpha1.ReasonPodsReady, wantPaused: controlv1alpha1.ReasonResumed,
		},
		{
			name: "all tasks ended: Succeeded, with an Event",
			bs:   withTask(newBatchSandbox(nil)), pods: []corev1.Pod{replicaPod(0)}, claimed: map[int32]string{0: "containerd://c0"},
			tasks:     &taskResult{tasks: []controlv1alpha1.TaskStatus{{Replica: 0, Phase: controlv1alpha1.TaskSucceeded, FinishTime: &done}}},
			wantPhase: controlv1alpha1.PhaseSucceeded, wantReady: controlv1alpha1.ReasonPodsReady,
			wantEvents: []string{"Normal TasksSucceeded Complete: all 1 tasks succeeded"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, events := planStatus(tc.bs, byReplicaOf(tc.pods...), tc.claimed, tc.tasks, tc.failure, tc.refused)
			if status.Phase != tc.wantPhase {
				t.Errorf("phase = %s, want %s", status.Phase, tc.wantPhase)
			}
			if c := meta.FindStatusCondition(status.Conditions, controlv1alpha1.ConditionReady); c == nil || c.Reason != tc.wantReady {
				t.Errorf("Ready condition = %+v, want reason %s", c, tc.wantReady)
			}
			c := meta.FindStatusCondition(status.Conditions, controlv1alpha1.ConditionPaused)
			switch {
			case tc.wantPaused == "" && c != nil:
				t.Errorf("Paused condition = %+v, want none", c)
			case tc.wantPaused != "" && (c == nil || c.Reason != tc.wantPaused):
				t.Errorf("Paused condition = %+v, want reason %s", c, tc.wantPaused)
			}
			if diff := cmp.Diff(tc.wantEvents, eventTexts(events), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestComputeStatusEndedReplicas: replicas whose task ended and whose pods went are not
// waited for, however the map of ended replicas is ordered.
func TestComputeStatusEndedReplicas(t *testing.T) {
	bs := newBatchSandbox(ptr.To[int32](3))
	bs.Spec.TaskTemplate = &controlv1alpha1.TaskTemplate{Command: []string{"true"}}
	bs.Status.Tasks = []controlv1alpha1.TaskStatus{
		{Replica: 0, Phase: controlv1alpha1.TaskRunning},
		{Replica: 1, Phase: controlv1alpha1.TaskSucceeded},
		{Replica: 2, Phase: controlv1alpha1.TaskSucceeded},
	}
	p := replicaPod(0)
	byReplica := map[int32]*corev1.Pod{0: &p}
	// Map iteration order is random: enough rounds to see both orders of replicas 1 and 2.
	for range 50 {
		status, _ := computeStatus(bs, byReplica, map[int32]string{0: "containerd://c0"}, nil, nil)
		ready := meta.FindStatusCondition(status.Conditions, controlv1alpha1.ConditionReady)
		if ready == nil || ready.Reason != controlv1alpha1.ReasonPodsReady || ready.Message != "1/1 replicas ready" {
			t.Fatalf("Ready = %+v, want PodsReady, 1/1 replicas ready", ready)
		}
	}
}
