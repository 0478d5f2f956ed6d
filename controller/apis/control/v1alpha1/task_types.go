package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TaskTemplate is the task every replica runs once its pod is ready: a command that sandbox-execd
// starts in the sandbox container, over the same authenticated channel as exec, and whose state
// it pushes to sandbox-controller as it changes. shardTaskPatches change it per replica.
type TaskTemplate struct {
	// command is the executable and its first arguments; required.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	Command []string `json:"command"`
	// args follow command.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`
	// env is added to the task's environment (after the sandbox's own env). Literal values
	// only: execd starts the task, and nothing resolves references there.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +patchMergeKey=name
	// +patchStrategy=merge
	Env []TaskEnvVar `json:"env,omitempty" patchStrategy:"merge" patchMergeKey:"name"`
	// workingDir is the absolute directory the task starts in; the container's by default.
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`
	// timeoutSeconds bounds each attempt: after that long the task, and everything it started,
	// is killed and the attempt fails (DeadlineExceeded). Absent: no limit.
	// +optional
	// +kubebuilder:validation:Minimum=1
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
	// restartPolicy: Never (a failed attempt fails the task) or OnFailure (a failed attempt is
	// retried, in the same pod, or on a replacement when the pod was lost, up to backoffLimit
	// times). Never by default.
	// +optional
	// +kubebuilder:validation:Enum=Never;OnFailure
	RestartPolicy TaskRestartPolicy `json:"restartPolicy,omitempty"`
	// backoffLimit is how many times a failed task is retried with restartPolicy OnFailure.
	// Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`
	// lifecycle runs commands around each attempt.
	// +optional
	Lifecycle *TaskLifecycle `json:"lifecycle,omitempty"`
}

// TaskEnvVar is one variable of a task's environment.
type TaskEnvVar struct {
	// name of the variable.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// value of the variable.
	// +optional
	Value string `json:"value,omitempty"`
}

// TaskLifecycle holds commands that run around each attempt of a task, in its environment.
type TaskLifecycle struct {
	// preStart runs before each attempt; if it fails (non-zero exit), so does the attempt
	// (PreStartFailed), and the task is not started.
	// +optional
	PreStart *TaskHook `json:"preStart,omitempty"`
	// postStop runs after each attempt, whatever its outcome; its own outcome is logged and
	// changes nothing.
	// +optional
	PostStop *TaskHook `json:"postStop,omitempty"`
}

// TaskHook is a command run around a task.
type TaskHook struct {
	// command and its arguments.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	Command []string `json:"command"`
	// timeoutSeconds bounds the hook; default 30.
	// +optional
	// +kubebuilder:validation:Minimum=1
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
}

// TaskRestartPolicy says what happens to a task whose attempt failed.
type TaskRestartPolicy string

const (
	TaskRestartNever     TaskRestartPolicy = "Never"
	TaskRestartOnFailure TaskRestartPolicy = "OnFailure"
)

// DefaultTaskBackoffLimit is backoffLimit when not given.
const DefaultTaskBackoffLimit = 3

// TaskResourcePolicy says what happens to a replica's pod once its task has ended.
// +kubebuilder:validation:Enum=Retain;Release
type TaskResourcePolicy string

const (
	// TaskResourceRetain keeps the pod (exec, files and logs work on it) until the sandbox
	// is deleted or expires.
	TaskResourceRetain TaskResourcePolicy = "Retain"
	// TaskResourceRelease deletes the pod once its task has ended and its end is recorded; a
	// pool pod goes the way of its pool's recycleStrategy. The replica counts as done and gets
	// no new pod.
	TaskResourceRelease TaskResourcePolicy = "Release"
)

// TaskPhase is where one replica's task is.
type TaskPhase string

const (
	// TaskPending: not started yet (no ready pod yet, or being started).
	TaskPending TaskPhase = "Pending"
	// TaskRunning: an attempt runs (or its preStart hook).
	TaskRunning TaskPhase = "Running"
	// TaskSucceeded: an attempt exited 0. Final.
	TaskSucceeded TaskPhase = "Succeeded"
	// TaskFailed: the last attempt failed and no retry is left. Final.
	TaskFailed TaskPhase = "Failed"
	// TaskUnknown: the controller lost contact with the pod's execd while the task ran; it
	// becomes Running, Succeeded or Failed again when contact is back, or Failed (PodLost)
	// if the pod is gone and no retry is left.
	TaskUnknown TaskPhase = "Unknown"
)

// Task condition types and reasons.
const (
	// ConditionTasksComplete is True when every replica's task has ended (Succeeded or
	// Failed).
	ConditionTasksComplete = "TasksComplete"
	// ConditionTasksFailed is True when a task has failed for good.
	ConditionTasksFailed = "TasksFailed"

	ReasonAllSucceeded   = "AllSucceeded"
	ReasonSomeFailed     = "SomeFailed"
	ReasonTasksRunning   = "TasksRunning"
	ReasonNoTaskFailed   = "NoTaskFailed"
	ReasonTaskFailed     = "TaskFailed"
	ReasonTasksSucceeded = "TasksSucceeded"
	// Reasons of a task's own failure (SandboxTaskStatus.reason).
	ReasonTaskExitCode         = "Error"
	ReasonTaskDeadline         = "DeadlineExceeded"
	ReasonTaskBackoffLimit     = "BackoffLimitExceeded"
	ReasonTaskPreStartFailed   = "PreStartFailed"
	ReasonTaskStartFailed      = "StartFailed"
	ReasonTaskPodLost          = "PodLost"
	ReasonTaskContactLost      = "ContactLost"
	ReasonTaskRetriedOnNewPod  = "RetriedOnNewPod"
	ReasonTaskContainerRestart = "ContainerRestarted"
	// ReasonTaskOOMKilled: the attempt died with its container, which was OOM-killed (the
	// message tells when, and the memory limit).
	ReasonTaskOOMKilled = "OOMKilled"
)

// TaskStatus is what the controller knows of one replica's task.
type TaskStatus struct {
	// replica is the index of the replica.
	Replica int32 `json:"replica"`
	// phase: Pending, Running, Succeeded, Failed or Unknown.
	Phase TaskPhase `json:"phase"`
	// pod runs (or ran) the current attempt.
	// +optional
	Pod string `json:"pod,omitempty"`
	// podUID is that pod's UID: a replacement pod has the same name in direct mode.
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// attempts is the number of attempts started, on every pod of the replica.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// exitCode of the last attempt that exited.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// startTime is when the first attempt started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// finishTime is when the task ended.
	// +optional
	FinishTime *metav1.Time `json:"finishTime,omitempty"`
	// reason of the last error, in CamelCase (Error, DeadlineExceeded, PodLost, ...).
	// +optional
	Reason string `json:"reason,omitempty"`
	// message tells the last error for humans.
	// +optional
	Message string `json:"message,omitempty"`
}

// Final reports whether the phase is one a task never leaves.
func (p TaskPhase) Final() bool { return p == TaskSucceeded || p == TaskFailed }
