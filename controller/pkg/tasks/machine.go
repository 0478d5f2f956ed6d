// Package tasks drives the tasks of a BatchSandbox's replicas: what to tell each pod's execd
// (Next), and the streams through which execd tells back every change of a task's state
// (Watcher). Nothing here polls: a change of state arrives on a stream and enqueues its
// sandbox, and the status is computed from what the streams last said.
package tasks

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// Observation is what is known of a replica's pod and of the task its execd runs.
type Observation struct {
	// Pod is the name of the replica's pod; "" when it has none, or only one that is going.
	Pod string
	// PodUID identifies that pod (the task's ID names it).
	PodUID string
	// Usable: the pod's execd is certified (and claimed, in pooled mode): a task may start.
	Usable bool
	// Contact says what the pod's execd last told about its task.
	Contact Contact
	// OOMKill tells of the OOM kill that ended the container the task's last attempt ran in,
	// for the status ("OOM-killed at T, memory limit 256Mi"); "" when it did not end so. The
	// kill takes execd with every process: execd, restarted, reports the attempt as
	// ContainerRestarted, or the pod failed and is lost. Either way the attempt died of it.
	OOMKill string
}

// Contact is what a watch stream (or a start) said of a pod's task.
type Contact struct {
	// Known: execd told the task's state at least once since this process started.
	Known bool
	// Lost: the stream to execd broke, or could not be opened, since; State is what it said
	// last.
	Lost bool
	// LostReason tells why, for the status.
	LostReason string
	State      execdapi.TaskState
}

// Action is what the controller does for a replica after Next.
type Action int

const (
	// None: nothing to do.
	None Action = iota
	// Start: send the task (Request) to the pod's execd.
	Start
)

// Policy is what a replica's task is: its template after the replica's patch.
type Policy struct {
	RestartOnFailure bool
	BackoffLimit     int32
}

// PolicyOf is the restart policy of a task template.
func PolicyOf(t *controlv1alpha1.TaskTemplate) Policy {
	p := Policy{RestartOnFailure: t.RestartPolicy == controlv1alpha1.TaskRestartOnFailure, BackoffLimit: controlv1alpha1.DefaultTaskBackoffLimit}
	if t.BackoffLimit != nil {
		p.BackoffLimit = *t.BackoffLimit
	}
	return p
}

// retriesLeft: attempts so far all failed (or the task would have ended).
func (p Policy) retriesLeft(attempts int32) int32 {
	if !p.RestartOnFailure {
		return 0
	}
	return max(0, p.BackoffLimit-max(0, attempts-1))
}

// TaskID names the task of a replica on one pod: a retry on another pod is another task, and
// the same start twice (a controller restarted in between) is one.
func TaskID(sandboxUID string, replica int32, podUID string) string {
	return fmt.Sprintf("%s/%d/%s", sandboxUID, replica, podUID)
}

// Next is the state machine of one replica's task: from the status recorded so far (prev;
// nil for none) and what is observed now, the status to record and what to do. A final phase
// (Succeeded, Failed) is never left.
func Next(prev *controlv1alpha1.TaskStatus, replica int32, sandboxUID string, obs Observation, pol Policy, now time.Time) (controlv1alpha1.TaskStatus, Action) {
	st := controlv1alpha1.TaskStatus{Replica: replica, Phase: controlv1alpha1.TaskPending}
	if prev != nil {
		st = *prev.DeepCopy()
	}
	if st.Phase.Final() {
		return st, None
	}
	nowT := metav1.NewTime(now)

	// The pod that ran the task is gone (or going): retry on the next one, or fail.
	ranOnLostPod := st.PodUID != "" && st.PodUID != obs.PodUID && (st.Phase == controlv1alpha1.TaskRunning || st.Phase == controlv1alpha1.TaskUnknown)
	if ranOnLostPod {
		lost := st.Pod
		why := ""
		if obs.OOMKill != "" {
			why = " (its container was " + obs.OOMKill + ")"
		}
		if pol.retriesLeft(st.Attempts) > 0 {
			st.Phase, st.Reason = controlv1alpha1.TaskPending, controlv1alpha1.ReasonTaskRetriedOnNewPod
			st.Message = fmt.Sprintf("pod %s was lost during attempt %d%s; the task is retried on a new pod", lost, st.Attempts, why)
			st.Pod, st.PodUID = "", ""
		} else {
			st.Phase, st.Reason, st.FinishTime = controlv1alpha1.TaskFailed, controlv1alpha1.ReasonTaskPodLost, &nowT
			if obs.OOMKill != "" {
				st.Reason = controlv1alpha1.ReasonTaskOOMKilled
			}
			st.Message = fmt.Sprintf("pod %s was lost during attempt %d%s, and %s", lost, st.Attempts, why, noRetry(pol))
			return st, None
		}
	}
	if obs.Pod == "" || !obs.Usable {
		return st, None
	}

	id := TaskID(sandboxUID, replica, obs.PodUID)
	c := obs.Contact
	switch {
	case !c.Known:
		if st.PodUID == obs.PodUID && st.Phase != controlv1alpha1.TaskPending {
			return st, None // started before: wait for the stream to tell
		}
		return st, Start
	case c.State.ID == "":
		if c.Lost {
			return st, None // the stream is reconnecting; a start goes with it
		}
		return st, Start
	case c.State.ID != id:
		st.Phase, st.Reason, st.FinishTime = controlv1alpha1.TaskFailed, controlv1alpha1.ReasonTaskStartFailed, &nowT
		st.Message = fmt.Sprintf("the execd of pod %s runs another task (%s)", obs.Pod, c.State.ID)
		return st, None
	}

	s := c.State
	st.Pod, st.PodUID = obs.Pod, obs.PodUID
	if s.Attempt > st.Attempts {
		st.Attempts = s.Attempt
	}
	if st.StartTime == nil && s.StartTime != nil {
		t := metav1.NewTime(*s.StartTime)
		st.StartTime = &t
	}
	if s.ExitCode != nil {
		code := *s.ExitCode
		st.ExitCode = &code
	}
	reason, message := s.Reason, s.Message
	if reason == execdapi.TaskReasonContainerRestarted && obs.OOMKill != "" {
		// What restarted the container is known here, not to execd.
		reason, message = controlv1alpha1.ReasonTaskOOMKilled, message+": it was "+obs.OOMKill
	}
	if reason != "" {
		st.Reason, st.Message = reason, message
	}
	switch s.Phase {
	case execdapi.TaskRunning:
		st.Phase = controlv1alpha1.TaskRunning
		if c.Lost {
			st.Phase, st.Reason = controlv1alpha1.TaskUnknown, controlv1alpha1.ReasonTaskContactLost
			st.Message = fmt.Sprintf("lost contact with the execd of pod %s during attempt %d: %s", obs.Pod, st.Attempts, c.LostReason)
		} else if st.Reason == controlv1alpha1.ReasonTaskContactLost || st.Reason == controlv1alpha1.ReasonTaskRetriedOnNewPod && s.Reason == "" {
			st.Reason, st.Message = "", ""
		}
	case execdapi.TaskSucceeded:
		st.Phase, st.Reason, st.Message = controlv1alpha1.TaskSucceeded, "", ""
		st.FinishTime = finish(s, nowT)
	case execdapi.TaskFailed:
		st.Phase = controlv1alpha1.TaskFailed
		st.FinishTime = finish(s, nowT)
		if pol.RestartOnFailure && st.Attempts > 1 {
			st.Message = fmt.Sprintf("attempt %d of %d failed (%s: %s)", st.Attempts, pol.BackoffLimit+1, reason, message)
			st.Reason = controlv1alpha1.ReasonTaskBackoffLimit
		}
	}
	return st, None
}

func finish(s execdapi.TaskState, now metav1.Time) *metav1.Time {
	if s.FinishTime != nil {
		t := metav1.NewTime(*s.FinishTime)
		return &t
	}
	return &now
}

func noRetry(p Policy) string {
	if !p.RestartOnFailure {
		return "restartPolicy Never retries nothing"
	}
	return fmt.Sprintf("backoffLimit %d allows no more retries", p.BackoffLimit)
}

// Request is the start of a replica's task t on a pod, after the attempts it made elsewhere.
func Request(t *controlv1alpha1.TaskTemplate, sandboxUID string, replica int32, podUID string, prev *controlv1alpha1.TaskStatus) *execdapi.TaskRequest {
	pol := PolicyOf(t)
	var attempts int32
	if prev != nil {
		attempts = prev.Attempts
	}
	req := &execdapi.TaskRequest{
		ID:               TaskID(sandboxUID, replica, podUID),
		SandboxUID:       sandboxUID,
		Command:          t.Command,
		Args:             t.Args,
		WorkingDir:       t.WorkingDir,
		RestartOnFailure: pol.RestartOnFailure,
		FirstAttempt:     attempts + 1,
	}
	if pol.RestartOnFailure {
		// Every attempt so far failed, on pods that are gone.
		req.Retries = max(0, pol.BackoffLimit-attempts)
	}
	if t.TimeoutSeconds != nil {
		req.TimeoutSeconds = *t.TimeoutSeconds
	}
	for _, e := range t.Env {
		req.Env = append(req.Env, execdapi.EnvVar{Name: e.Name, Value: e.Value})
	}
	if l := t.Lifecycle; l != nil {
		if h := l.PreStart; h != nil {
			req.PreStart = h.Command
			if h.TimeoutSeconds != nil {
				req.PreStartTimeoutSeconds = *h.TimeoutSeconds
			}
		}
		if h := l.PostStop; h != nil {
			req.PostStop = h.Command
			if h.TimeoutSeconds != nil {
				req.PostStopTimeoutSeconds = *h.TimeoutSeconds
			}
		}
	}
	return req
}

// Counts are the status's task counters.
type Counts struct{ Pending, Running, Succeeded, Failed, Unknown int32 }

// Count counts tasks by phase.
func Count(tasks []controlv1alpha1.TaskStatus) Counts {
	var c Counts
	for _, t := range tasks {
		switch t.Phase {
		case controlv1alpha1.TaskRunning:
			c.Running++
		case controlv1alpha1.TaskSucceeded:
			c.Succeeded++
		case controlv1alpha1.TaskFailed:
			c.Failed++
		case controlv1alpha1.TaskUnknown:
			c.Unknown++
		default:
			c.Pending++
		}
	}
	return c
}

// Conditions are TasksComplete and TasksFailed for tasks of desired replicas.
func Conditions(c Counts, desired int32, generation int64) (complete, failed metav1.Condition) {
	complete = metav1.Condition{Type: controlv1alpha1.ConditionTasksComplete, ObservedGeneration: generation, Status: metav1.ConditionFalse,
		Reason:  controlv1alpha1.ReasonTasksRunning,
		Message: fmt.Sprintf("%d of %d tasks ended (%d running, %d pending, %d unknown)", c.Succeeded+c.Failed, desired, c.Running, c.Pending, c.Unknown)}
	if c.Succeeded+c.Failed >= desired {
		complete.Status = metav1.ConditionTrue
		complete.Reason, complete.Message = controlv1alpha1.ReasonAllSucceeded, fmt.Sprintf("all %d tasks succeeded", desired)
		if c.Failed > 0 {
			complete.Reason, complete.Message = controlv1alpha1.ReasonSomeFailed, fmt.Sprintf("all %d tasks ended: %d succeeded, %d failed", desired, c.Succeeded, c.Failed)
		}
	}
	failed = metav1.Condition{Type: controlv1alpha1.ConditionTasksFailed, ObservedGeneration: generation, Status: metav1.ConditionFalse,
		Reason: controlv1alpha1.ReasonNoTaskFailed, Message: "no task has failed"}
	if c.Failed > 0 {
		failed.Status, failed.Reason = metav1.ConditionTrue, controlv1alpha1.ReasonTaskFailed
		failed.Message = fmt.Sprintf("%d of %d tasks failed", c.Failed, desired)
	}
	return complete, failed
}
