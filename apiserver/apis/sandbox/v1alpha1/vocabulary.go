package v1alpha1

import "k8s.io/apimachinery/pkg/runtime/schema"

// The Sandbox API's own words for what its status says: condition types, reasons, task phases
// and the values of the task fields. A Sandbox is a view of a BatchSandbox, so each has the
// value of its control.kube-sandbox.io counterpart; the sandbox registry's conversion is the
// one place that relies on it, and its test fails when either side changes alone. Clients
// (kubectl sandbox among them) speak these and never import the backing CRD's types.

// Condition types of status.conditions.
const (
	// ConditionReady is True when every replica has a ready pod.
	ConditionReady = "Ready"
	// ConditionPaused is True when every replica is in a snapshot and no pod is left; False
	// while it pauses, resumes, or when a snapshot failed (the reason says which).
	ConditionPaused = "Paused"
	// ConditionEgressReady is True when every replica's node enforces the sandbox's current
	// egress policy (observedGeneration says which generation's).
	ConditionEgressReady = "EgressReady"
	// ConditionTasksComplete is True when every replica's task has ended.
	ConditionTasksComplete = "TasksComplete"
	// ConditionTasksFailed is True when a task has failed for good.
	ConditionTasksFailed = "TasksFailed"
	// ConditionOOMKilled is True once a replica's sandbox container was OOM-killed; its
	// message is the latest kill's. It never goes back to False.
	ConditionOOMKilled = "OOMKilled"
)

// Reasons of conditions and Events a user can act on.
const (
	ReasonPodsReady       = "PodsReady"
	ReasonPodsNotReady    = "PodsNotReady"
	ReasonPodCreateFailed = "PodCreateFailed"
	ReasonPodFailed       = "PodFailed"
	ReasonImagePullFailed = "ImagePullFailed"
	ReasonExpired         = "Expired"
	// ReasonPoolExhausted: the pool has no idle pod for a replica yet; it grows, and the
	// replica gets the next pod that becomes ready.
	ReasonPoolExhausted = "PoolExhausted"
	// ReasonPoolNotFound: spec.poolRef names no Pool of the namespace.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonPoolNotAllowed: the pool's pods are for users admitted to its namespace's level.
	ReasonPoolNotAllowed      = "PoolNotAllowed"
	ReasonAllocated           = "Allocated"
	ReasonAllocateFailed      = "AllocateFailed"
	ReasonPodLost             = "PodLost"
	ReasonIdentityFailed      = "IdentityFailed"
	ReasonPausing             = "Pausing"
	ReasonPaused              = "Paused"
	ReasonResuming            = "Resuming"
	ReasonResumed             = "Resumed"
	ReasonSnapshotFailed      = "SnapshotFailed"
	ReasonRegistryUnavailable = "RegistryUnavailable"
	// ReasonSnapshotPolicyMissing: the platform's snapshot admission policy does not name the
	// registry; pausing waits until it does.
	ReasonSnapshotPolicyMissing = "SnapshotPolicyMissing"
	// ReasonPauseNotSupported: a sandbox that runs tasks cannot pause.
	ReasonPauseNotSupported = "PauseNotSupported"
	// ReasonOOMKilled (condition OOMKilled, and a Warning Event): a replica's sandbox
	// container was OOM-killed; the message names the replica, its limit and its peak.
	ReasonOOMKilled = "OOMKilled"

	ReasonPolicyApplied = "PolicyApplied"
	ReasonPolicyPending = "PolicyPending"
	// ReasonPolicyFailed: a node refused, failed to apply or could not prove the policy.
	ReasonPolicyFailed = "PolicyFailed"
	// ReasonEgressDenied (Event): code in the sandbox asked for what its policy denies.
	ReasonEgressDenied = "EgressDenied"

	ReasonAllSucceeded   = "AllSucceeded"
	ReasonSomeFailed     = "SomeFailed"
	ReasonTasksRunning   = "TasksRunning"
	ReasonNoTaskFailed   = "NoTaskFailed"
	ReasonTaskFailed     = "TaskFailed"
	ReasonTasksSucceeded = "TasksSucceeded"
)

// Reasons of a task's own end or retry (SandboxTaskStatus.reason).
const (
	ReasonTaskExitCode       = "Error"
	ReasonTaskDeadline       = "DeadlineExceeded"
	ReasonTaskBackoffLimit   = "BackoffLimitExceeded"
	ReasonTaskPreStartFailed = "PreStartFailed"
	ReasonTaskStartFailed    = "StartFailed"
	ReasonTaskPodLost        = "PodLost"
	// ReasonTaskOOMKilled: the attempt died with its container, which was OOM-killed.
	ReasonTaskOOMKilled        = "OOMKilled"
	ReasonTaskContactLost      = "ContactLost"
	ReasonTaskRetriedOnNewPod  = "RetriedOnNewPod"
	ReasonTaskContainerRestart = "ContainerRestarted"
)

// Phases of a replica's task (SandboxTaskStatus.phase).
const (
	TaskPhasePending   = "Pending"
	TaskPhaseRunning   = "Running"
	TaskPhaseSucceeded = "Succeeded"
	TaskPhaseFailed    = "Failed"
	// TaskPhaseUnknown: contact with the replica's pod was lost while its task ran.
	TaskPhaseUnknown = "Unknown"
)

// TaskPhaseFinal reports whether a task in phase has ended for good.
func TaskPhaseFinal(phase string) bool {
	return phase == TaskPhaseSucceeded || phase == TaskPhaseFailed
}

// Values of SandboxTaskTemplate.restartPolicy.
const (
	TaskRestartNever     = "Never"
	TaskRestartOnFailure = "OnFailure"
)

// DefaultTaskBackoffLimit is a task's backoffLimit when it names none.
const DefaultTaskBackoffLimit = 3

// Values of SandboxSpec.taskResourcePolicyWhenCompleted.
const (
	TaskResourceRetain  = "Retain"
	TaskResourceRelease = "Release"
)

// PoolsResource is what spec.poolRef names: the warm pools a sandbox is taken from.
var PoolsResource = schema.GroupVersionResource{Group: "control.kube-sandbox.io", Version: "v1alpha1", Resource: "pools"}

// CauseTypeExpired is the type of the StatusCause with which the server marks a request
// refused because the sandbox has expired (a renewal too late), so that clients tell it from
// other conflicts without reading the message.
const CauseTypeExpired = "SandboxExpired"
