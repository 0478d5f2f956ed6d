package tasks

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

const sbxUID = "sbx-uid"

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func onPod(pod, podUID string, c Contact) Observation {
	return Observation{Pod: pod, PodUID: podUID, Usable: true, Contact: c}
}

func state(pod string, phase execdapi.TaskPhase, attempt int32, gen int64) Contact {
	start := now.Add(-time.Minute)
	st := execdapi.TaskState{ID: TaskID(sbxUID, 0, pod+"-uid"), Phase: phase, Attempt: attempt, StartTime: &start, Generation: gen}
	if phase == execdapi.TaskSucceeded || phase == execdapi.TaskFailed {
		code := int32(0)
		if phase == execdapi.TaskFailed {
			code, st.Reason, st.Message = 3, execdapi.TaskReasonError, "exit code 3"
		}
		st.ExitCode, st.FinishTime = &code, &now
	}
	return Contact{Known: true, State: st}
}

var (
	never     = Policy{}
	onFailure = Policy{RestartOnFailure: true, BackoffLimit: 2}
)

func TestNext(t *testing.T) {
	running := &controlv1alpha1.TaskStatus{Replica: 0, Phase: controlv1alpha1.TaskRunning, Pod: "p", PodUID: "p-uid", Attempts: 1}
	tests := []struct {
		name      string
		prev      *controlv1alpha1.TaskStatus
		obs       Observation
		pol       Policy
		wantPhase controlv1alpha1.TaskPhase
		wantAct   Action
		wantWhy   string
		wantAtt   int32
	}{
		{name: "no pod yet", obs: Observation{}, wantPhase: controlv1alpha1.TaskPending},
		{name: "a pod not certified yet", obs: Observation{Pod: "p", PodUID: "p-uid"}, wantPhase: controlv1alpha1.TaskPending},
		{name: "a usable pod, nothing heard: start", obs: onPod("p", "p-uid", Contact{}), wantPhase: controlv1alpha1.TaskPending, wantAct: Start},
		{name: "execd has no task: start", obs: onPod("p", "p-uid", Contact{Known: true}), wantPhase: controlv1alpha1.TaskPending, wantAct: Start},
		{name: "no task, stream lost: wait for it", obs: onPod("p", "p-uid", Contact{Known: true, Lost: true}), wantPhase: controlv1alpha1.TaskPending},
		{name: "running", obs: onPod("p", "p-uid", state("p", execdapi.TaskRunning, 1, 2)), wantPhase: controlv1alpha1.TaskRunning, wantAtt: 1},
		{name: "restarted controller: no start again before the stream tells", prev: running, obs: onPod("p", "p-uid", Contact{}),
			wantPhase: controlv1alpha1.TaskRunning, wantAtt: 1},
		{name: "succeeded", prev: running, obs: onPod("p", "p-uid", state("p", execdapi.TaskSucceeded, 1, 3)), wantPhase: controlv1alpha1.TaskSucceeded, wantAtt: 1},
		{name: "failed, Never", prev: running, obs: onPod("p", "p-uid", state("p", execdapi.TaskFailed, 1, 3)),
			wantPhase: controlv1alpha1.TaskFailed, wantWhy: execdapi.TaskReasonError, wantAtt: 1},
		{name: "failed after retries", pol: onFailure, prev: running, obs: onPod("p", "p-uid", state("p", execdapi.TaskFailed, 3, 9)),
			wantPhase: controlv1alpha1.TaskFailed, wantWhy: controlv1alpha1.ReasonTaskBackoffLimit, wantAtt: 3},
		{name: "contact lost while running", prev: running, obs: onPod("p", "p-uid", func() Contact {
			c := state("p", execdapi.TaskRunning, 1, 2)
			c.Lost, c.LostReason = true, "connection reset"
			return c
		}()), wantPhase: controlv1alpha1.TaskUnknown, wantWhy: controlv1alpha1.ReasonTaskContactLost, wantAtt: 1},
		{name: "pod lost, Never: failed", prev: running, obs: Observation{}, wantPhase: controlv1alpha1.TaskFailed, wantWhy: controlv1alpha1.ReasonTaskPodLost, wantAtt: 1},
		{name: "pod lost, OnFailure: retried on the next pod", pol: onFailure, prev: running, obs: Observation{},
			wantPhase: controlv1alpha1.TaskPending, wantWhy: controlv1alpha1.ReasonTaskRetriedOnNewPod, wantAtt: 1},
		{name: "pod lost, OnFailure, the next pod is there: start on it", pol: onFailure, prev: running, obs: onPod("q", "q-uid", Contact{}),
			wantPhase: controlv1alpha1.TaskPending, wantAct: Start, wantWhy: controlv1alpha1.ReasonTaskRetriedOnNewPod, wantAtt: 1},
		{name: "pod lost, OnFailure, no retry left", pol: onFailure, prev: &controlv1alpha1.TaskStatus{Phase: controlv1alpha1.TaskUnknown, Pod: "p", PodUID: "p-uid", Attempts: 3},
			obs: Observation{}, wantPhase: controlv1alpha1.TaskFailed, wantWhy: controlv1alpha1.ReasonTaskPodLost, wantAtt: 3},
		{name: "a replacement of the same name is another pod", prev: running, obs: onPod("p", "p2-uid", Contact{}),
			wantPhase: controlv1alpha1.TaskFailed, wantWhy: controlv1alpha1.ReasonTaskPodLost, wantAtt: 1},
		{name: "another task in the pod", obs: onPod("p", "p-uid", Contact{Known: true, State: execdapi.TaskState{ID: "other", Phase: execdapi.TaskRunning}}),
			wantPhase: controlv1alpha1.TaskFailed, wantWhy: controlv1alpha1.ReasonTaskStartFailed},
		{name: "final stays final", prev: &controlv1alpha1.TaskStatus{Phase: controlv1alpha1.TaskSucceeded, Pod: "p", Attempts: 1, FinishTime: &metav1.Time{Time: now}},
			obs: Observation{}, wantPhase: controlv1alpha1.TaskSucceeded, wantAtt: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before *controlv1alpha1.TaskStatus
			if tc.prev != nil {
				before = tc.prev.DeepCopy()
			}
			st, act := Next(tc.prev, 0, sbxUID, tc.obs, tc.pol, now)
			if st.Phase != tc.wantPhase || act != tc.wantAct || st.Reason != tc.wantWhy || st.Attempts != tc.wantAtt {
				t.Errorf("Next() = phase %s action %d reason %q attempts %d (%s), want %s %d %q %d",
					st.Phase, act, st.Reason, st.Attempts, st.Message, tc.wantPhase, tc.wantAct, tc.wantWhy, tc.wantAtt)
			}
			if st.Phase.Final() && st.FinishTime == nil {
				t.Error("a final phase without finishTime")
			}
			if tc.prev != nil && tc.prev.Phase != before.Phase {
				t.Error("Next changed prev")
			}
		})
	}
}

func TestRequestCarriesTheRetryBudget(t *testing.T) {
	tmpl := &controlv1alpha1.TaskTemplate{Command: []string{"python3"}, Args: []string{"x"}, RestartPolicy: controlv1alpha1.TaskRestartOnFailure,
		BackoffLimit: ptr.To[int32](3), TimeoutSeconds: ptr.To[int64](9), Env: []controlv1alpha1.TaskEnvVar{{Name: "A", Value: "1"}},
		Lifecycle: &controlv1alpha1.TaskLifecycle{PreStart: &controlv1alpha1.TaskHook{Command: []string{"true"}}}}
	fresh := Request(tmpl, sbxUID, 2, "p-uid", nil)
	if fresh.FirstAttempt != 1 || fresh.Retries != 3 || !fresh.RestartOnFailure || fresh.TimeoutSeconds != 9 || fresh.ID != TaskID(sbxUID, 2, "p-uid") ||
		len(fresh.Env) != 1 || len(fresh.PreStart) != 1 {
		t.Errorf("fresh request = %+v", fresh)
	}
	// Two attempts failed on pods that were lost: the third starts with one retry left.
	again := Request(tmpl, sbxUID, 2, "q-uid", &controlv1alpha1.TaskStatus{Attempts: 2})
	if again.FirstAttempt != 3 || again.Retries != 1 {
		t.Errorf("request after two attempts: first %d retries %d, want 3 and 1", again.FirstAttempt, again.Retries)
	}
	never := Request(&controlv1alpha1.TaskTemplate{Command: []string{"true"}}, sbxUID, 0, "p-uid", nil)
	if never.RestartOnFailure || never.Retries != 0 {
		t.Errorf("Never: %+v", never)
	}
}

func TestConditions(t *testing.T) {
	c, f := Conditions(Counts{Running: 2, Succeeded: 1}, 3, 1)
	if c.Status != "False" || f.Status != "False" {
		t.Errorf("running: %v %v", c, f)
	}
	c, f = Conditions(Counts{Succeeded: 3}, 3, 1)
	if c.Status != "True" || c.Reason != controlv1alpha1.ReasonAllSucceeded || f.Status != "False" {
		t.Errorf("all succeeded: %v %v", c, f)
	}
	c, f = Conditions(Counts{Succeeded: 2, Failed: 1}, 3, 1)
	if c.Status != "True" || c.Reason != controlv1alpha1.ReasonSomeFailed || f.Status != "True" {
		t.Errorf("some failed: %v %v", c, f)
	}
	c, f = Conditions(Counts{Running: 2, Failed: 1}, 3, 1)
	if c.Status != "False" || f.Status != "True" {
		t.Errorf("one failed, others running: %v %v", c, f)
	}
}
