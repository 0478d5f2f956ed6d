package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Labels and annotations the controller puts on what it creates. They are part of the API:
// the apiserver and users find a sandbox's pods by them.
const (
	// LabelBatchSandbox names the BatchSandbox a pod belongs to.
	LabelBatchSandbox = "control.kube-sandbox.io/batchsandbox"
	// LabelReplica is the replica index of a sandbox pod, "0" to replicas-1.
	LabelReplica = "control.kube-sandbox.io/replica"
	// AnnotationPodSecurity on a BatchSandbox ("Namespace") records that its pods may be more
	// than a sandbox's: its template went beyond the platform's pod security level or into the
	// namespace, or it takes pods from a Pool with podSecurity Namespace. sandbox-apiserver
	// sets it when the creator may create pods; only such callers may then use the sandbox
	// (exec, files, proxy) or add replicas, and users cannot change it through the Sandbox API.
	AnnotationPodSecurity = "control.kube-sandbox.io/pod-security"

	// SandboxContainerName is the name kubectl sandbox gives the container that runs the
	// user's code under execd. Whatever its name, the first container of a template is it.
	SandboxContainerName = "sandbox"
)

// SandboxPhase is a coarse summary of where a sandbox is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Pausing;Paused;Resuming;Succeeded;Failed;Terminating;Expired
type SandboxPhase string

const (
	// PhasePending: not all replicas have a ready pod yet.
	PhasePending SandboxPhase = "Pending"
	// PhaseRunning: every replica has a ready pod.
	PhaseRunning SandboxPhase = "Running"
	// PhasePausing: spec.paused is set and some replica's pod is still there: its filesystem
	// is being snapshotted, or its snapshot is done and the pod is being deleted.
	PhasePausing SandboxPhase = "Pausing"
	// PhasePaused: every replica's filesystem is in a snapshot (status.snapshots) and no pod
	// is left.
	PhasePaused SandboxPhase = "Paused"
	// PhaseResuming: spec.paused was cleared and not every replica's pod, made from its
	// snapshot, is ready yet.
	PhaseResuming SandboxPhase = "Resuming"
	// PhaseSucceeded: every replica's task has ended, and all succeeded.
	PhaseSucceeded SandboxPhase = "Succeeded"
	// PhaseFailed: a replica cannot run (its pod failed or could not be created), or every
	// replica's task has ended and some failed.
	PhaseFailed SandboxPhase = "Failed"
	// PhaseTerminating: the sandbox is being deleted.
	PhaseTerminating SandboxPhase = "Terminating"
	// PhaseExpired: the sandbox reached its expiry and is being deleted.
	PhaseExpired SandboxPhase = "Expired"
)

// Condition types and reasons a user can act on.
const (
	// ConditionReady is True when every replica has a ready pod.
	ConditionReady = "Ready"

	ReasonPodsReady       = "PodsReady"
	ReasonPodsNotReady    = "PodsNotReady"
	ReasonPodCreateFailed = "PodCreateFailed"
	ReasonPodFailed       = "PodFailed"
	ReasonImagePullFailed = "ImagePullFailed"
	ReasonExpired         = "Expired"
	// ReasonPoolExhausted: the pool has no idle pod for a replica; the pool grows (up to its
	// poolMax) and the replica gets the next pod that becomes ready.
	ReasonPoolExhausted = "PoolExhausted"
	// ReasonPoolNotFound: spec.poolRef names no Pool of the namespace.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonAllocated (Event): a pool pod was allocated to a replica.
	ReasonAllocated = "Allocated"
	// ReasonAllocateFailed: execd of an allocated pod refused or failed the allocation.
	ReasonAllocateFailed = "AllocateFailed"
	// ReasonPodLost (Event): a replica's pod disappeared or failed and is being replaced.
	ReasonPodLost = "PodLost"
	// ReasonPoolNotAllowed: spec.poolRef names a Pool with podSecurity Namespace, and the
	// sandbox was not admitted for it (AnnotationPodSecurity).
	ReasonPoolNotAllowed = "PoolNotAllowed"
	// ReasonIdentityFailed: the controller could not certify a pod's execd (its pod identity
	// did not verify); the replica waits.
	ReasonIdentityFailed = "IdentityFailed"

	// ConditionOOMKilled is True once the kernel's OOM killer ended a process of a replica
	// (the replica used more memory than its limit, or its node ran out): under runc on
	// cgroup v1 the largest process alone, under runc on cgroup v2 the whole container, under
	// gVisor the sandbox's kernel with every process. The node agent counts the kills; the
	// pod's status tells of the containers they ended. The message tells of the latest kill:
	// when, the replica and its pod, how many processes, the memory limit and the peak. Absent while no replica was killed; it does not turn
	// False again, for it tells the sandbox's history (Ready tells whether the replica runs
	// again), and status.oomKills holds the last kill of each replica.
	ConditionOOMKilled = "OOMKilled"
	// ReasonOOMKilled: a replica's sandbox container was OOM-killed. The reason of the
	// OOMKilled condition and of the Warning Event told of each kill (a task's attempt that
	// died of it has ReasonTaskOOMKilled).
	ReasonOOMKilled = "OOMKilled"

	// ConditionPaused is True when the sandbox is paused: every replica in a snapshot and no
	// pod left. False while it pauses (Pausing), when a snapshot failed (the pods are kept and
	// the sandbox stays usable), and while it resumes (Resuming).
	ConditionPaused = "Paused"
	// ReasonPausing: snapshots are being taken, or pods deleted after theirs.
	ReasonPausing = "Pausing"
	// ReasonPaused: Ready is False because the sandbox is paused.
	ReasonPaused = "Paused"
	// ReasonResuming: pods are being made from the snapshots.
	ReasonResuming = "Resuming"
	// ReasonResumed: the sandbox runs again, from its snapshots.
	ReasonResumed = "Resumed"
	// ReasonSnapshotFailed: a replica's snapshot failed (the message has the snapshotter's or
	// the registry's error); its pod is kept, and the snapshot is tried again.
	ReasonSnapshotFailed = "SnapshotFailed"
	// ReasonRegistryUnavailable: the snapshot registry could not be reached (or none is
	// configured); pausing waits, and a paused sandbox stays Paused until it can resume.
	ReasonRegistryUnavailable = "RegistryUnavailable"
	// ReasonSnapshotPolicyMissing: the admission policy that keeps snapshots to their
	// sandboxes' pods does not name this registry (its ConfigMap is missing, or names none or
	// another); the sandbox does not start to pause until it does.
	ReasonSnapshotPolicyMissing = "SnapshotPolicyMissing"
	// ReasonPauseNotSupported: a sandbox that runs tasks cannot pause (processes are not
	// kept, and a task would start again from its beginning).
	ReasonPauseNotSupported = "PauseNotSupported"
)

// FinalizerPods holds a BatchSandbox until its pods are gone, so that deleting a sandbox
// waits for what it runs.
const FinalizerPods = "control.kube-sandbox.io/pods"

// BatchSandboxSpec is the desired state of a BatchSandbox.
// +kubebuilder:validation:XValidation:rule="has(self.template) != has(self.poolRef)",message="exactly one of template and poolRef is required"
// +kubebuilder:validation:XValidation:rule="has(self.poolRef) == has(oldSelf.poolRef) && (!has(self.poolRef) || self.poolRef.name == oldSelf.poolRef.name)",message="poolRef is immutable: a sandbox keeps its mode and its pool"
// +kubebuilder:validation:XValidation:rule="!has(self.poolRef) || !has(self.env) || self.env.all(e, !has(e.valueFrom))",message="env of a pooled sandbox takes literal values only: valueFrom is resolved when a pod starts, and a pool pod has started already"
// +kubebuilder:validation:XValidation:rule="!has(self.poolRef) || !has(self.shardPatches) || size(self.shardPatches) == 0",message="shardPatches patch the pod template of direct mode: a pooled sandbox's pods come from its pool"
// +kubebuilder:validation:XValidation:rule="!has(self.paused) || !self.paused || !has(self.taskTemplate)",message="a sandbox that runs tasks cannot pause: processes are not kept, and a task would start again"
type BatchSandboxSpec struct {
	// replicas is the number of sandbox pods.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// poolRef names the Pool (in the same namespace) whose warm pods the replicas are allocated
	// from. Exactly one of poolRef and template. Immutable.
	// +optional
	PoolRef *PoolReference `json:"poolRef,omitempty"`

	// template is the pod template of direct mode: each replica is a pod made from it. Its first
	// container is the sandbox container, which runs the entrypoint under sandbox-execd.
	// +optional
	Template *corev1.PodTemplateSpec `json:"template,omitempty"`

	// entrypoint is the command the sandbox container runs under sandbox-execd. Without it, the
	// container's command and args from the template; without those, execd alone, waiting for
	// commands. (The image's own ENTRYPOINT is not known here: a template container that sets
	// args sets command too.)
	// +optional
	Entrypoint []string `json:"entrypoint,omitempty"`

	// env is added to the sandbox container's environment (and to every exec).
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// timeoutSeconds is the lifetime the sandbox was created with; expireTime holds the
	// deadline it led to.
	// +optional
	// +kubebuilder:validation:Minimum=1
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`

	// expireTime is when the controller deletes this BatchSandbox. Absent: never. Renewals
	// move it forward.
	// +optional
	ExpireTime *metav1.Time `json:"expireTime,omitempty"`

	// autoRenew extends expireTime whenever the sandbox is used through sandbox-apiserver.
	// +optional
	AutoRenew *AutoRenew `json:"autoRenew,omitempty"`

	// networkPolicy is the sandbox's outbound policy. Without it, its pool's
	// (spec.networkPolicy of the Pool), else the platform's default policy. Changes reach the
	// pods within a second (condition EgressReady).
	// +optional
	NetworkPolicy *NetworkPolicy `json:"networkPolicy,omitempty"`

	// shardPatches[i] is a strategic merge patch on the pod template of replica i (direct
	// mode only): per-replica resources, labels, env, node selectors. Replicas past the end
	// get the template as it is. Immutable, as the template is.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	ShardPatches []runtime.RawExtension `json:"shardPatches,omitempty"`

	// taskTemplate is the task each replica runs once its pod is ready. Without it, replicas
	// run no task (an interactive sandbox).
	// +optional
	TaskTemplate *TaskTemplate `json:"taskTemplate,omitempty"`

	// shardTaskPatches[i] is a strategic merge patch on the task of replica i (its args, its
	// env, ...). Replicas past the end run the template as it is.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	ShardTaskPatches []runtime.RawExtension `json:"shardTaskPatches,omitempty"`

	// paused: each replica's filesystem is snapshotted into an image in the snapshot registry
	// and its pod deleted; set back to false, the sandbox comes back with new pods made from
	// the snapshots (a pooled sandbox's from its pool's template, as direct-mode pods). The
	// sandbox container's filesystem is kept, apart from volumes and the virtual filesystems
	// (/proc, /sys, /dev, /tmp if a volume); processes and memory are not: the entrypoint
	// starts again on resume. The name, labels, spec, policy and identity stay the same.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// taskResourcePolicyWhenCompleted says what happens to a replica's pod when its task has
	// ended: Retain (the default) keeps it, Release deletes it (a pool pod goes the way of its
	// pool's recycleStrategy) and the replica counts as done. Mutable.
	// +optional
	TaskResourcePolicyWhenCompleted TaskResourcePolicy `json:"taskResourcePolicyWhenCompleted,omitempty"`
}

// PoolReference names a Pool of the same namespace.
type PoolReference struct {
	// name of the Pool.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// AutoRenew keeps a sandbox alive while it is used.
type AutoRenew struct {
	// extendSeconds: every access (exec, files, proxy) moves the expiry to at least
	// now + extendSeconds.
	// +kubebuilder:validation:Minimum=1
	ExtendSeconds int64 `json:"extendSeconds"`
}

// SandboxPodStatus is what the controller knows of one replica's pod.
type SandboxPodStatus struct {
	// replica is the index of this replica.
	Replica int32 `json:"replica"`
	// name of the pod.
	Name string `json:"name"`
	// ip of the pod, once it has one.
	// +optional
	IP string `json:"ip,omitempty"`
	// nodeName is where the pod runs.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// runtimeID is the container runtime's ID of the sandbox container. For a pool pod, it is
	// the container that accepted the allocation: a container that restarted gets the
	// allocation again before the replica is ready.
	// +optional
	RuntimeID string `json:"runtimeID,omitempty"`
	// ready is true when the sandbox container is ready for commands (for a pool pod: once it
	// accepted the allocation).
	Ready bool `json:"ready"`
}

// SnapshotStatus is a replica's filesystem as it was when the sandbox paused: an image in the
// snapshot registry, its base the image the replica's pod ran.
type SnapshotStatus struct {
	// replica is the index of the replica.
	Replica int32 `json:"replica"`
	// image is the snapshot's reference by digest (REGISTRY/REPOSITORY@sha256:...), which
	// the replica's pods are made from while the snapshot is current.
	Image string `json:"image"`
	// tag is the tag the snapshot was pushed under (REGISTRY/REPOSITORY:TAG).
	// +optional
	Tag string `json:"tag,omitempty"`
	// digest of the image's manifest.
	Digest string `json:"digest"`
	// size of the image (manifest, config and all layers) and of the layer of the sandbox's
	// own changes, in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// +optional
	LayerSize int64 `json:"layerSize,omitempty"`
	// baseImage is the image the snapshotted container ran.
	// +optional
	BaseImage string `json:"baseImage,omitempty"`
	// creationTime is when the snapshot was pushed.
	CreationTime metav1.Time `json:"creationTime"`
	// pod and podUID name the pod it was taken from.
	Pod    string `json:"pod"`
	PodUID string `json:"podUID"`
}

// OOMKillStatus is the last OOM kill of a replica that the controller told of (the condition
// OOMKilled and a Warning Event): the record that keeps a kill from being told twice, across
// reconciles and restarts of the controller. Kills are counted by the node agent of the pod's
// node (the processes the kernel's OOM killer ended in the pod's cgroup), and seen in the
// pod's status when they end the sandbox container.
type OOMKillStatus struct {
	// replica is the index of the replica.
	Replica int32 `json:"replica"`
	// pod is the replica's pod the kill was in.
	Pod string `json:"pod"`
	// podUID is the UID of that pod: podOOMKills counts its kills.
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// containerID is the container runtime's ID of the sandbox container the kill ended;
	// absent when it ended processes only (the container lived on).
	// +optional
	ContainerID string `json:"containerID,omitempty"`
	// time is when the kill was seen: the killed container's finishedAt, or the time of the
	// node agent's sample that counted it (the kill came before), whichever is later. Every
	// kill told of so far came at or before it.
	Time metav1.Time `json:"time"`
	// processes is how many processes the kill ended, as the node agent counted them; absent:
	// unknown (told from the pod's status alone).
	// +optional
	Processes int32 `json:"processes,omitempty"`
	// count is the number of OOM kills of the replica told of so far: processes, or one for
	// a kill whose processes are unknown.
	Count int32 `json:"count"`
	// podOOMKills is the node agent's count of the pod's kills that were told of (a kill told
	// from the pod's status alone counts as one): only a count beyond it is news.
	// +optional
	PodOOMKills int64 `json:"podOOMKills,omitempty"`
	// limitBytes is the memory limit the kill was under (the pod's cgroup's, else the
	// container's); absent: none.
	// +optional
	LimitBytes int64 `json:"limitBytes,omitempty"`
	// peakBytes is the most memory the pod used (its cgroup's peak, read by the node agent
	// at or after the kill); absent: unknown.
	// +optional
	PeakBytes int64 `json:"peakBytes,omitempty"`
}

// BatchSandboxStatus is the observed state of a BatchSandbox.
type BatchSandboxStatus struct {
	// observedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase summarizes the state of the sandbox.
	// +optional
	Phase SandboxPhase `json:"phase,omitempty"`
	// replicas is the number of pods that exist.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ready is the number of replicas whose pod is ready.
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// pods lists the replicas' pods, by replica index.
	// +optional
	// +listType=map
	// +listMapKey=replica
	Pods []SandboxPodStatus `json:"pods,omitempty"`
	// conditions: Ready, with a reason a user can act on; with a task, TasksComplete and
	// TasksFailed; OOMKilled once a replica was OOM-killed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// taskPending, taskRunning, taskSucceeded, taskFailed and taskUnknown count the
	// replicas' tasks by phase (with a taskTemplate).
	// +optional
	TaskPending int32 `json:"taskPending,omitempty"`
	// +optional
	TaskRunning int32 `json:"taskRunning,omitempty"`
	// +optional
	TaskSucceeded int32 `json:"taskSucceeded,omitempty"`
	// +optional
	TaskFailed int32 `json:"taskFailed,omitempty"`
	// +optional
	TaskUnknown int32 `json:"taskUnknown,omitempty"`
	// tasks lists the replicas' tasks, by replica index: the record that survives the pods
	// (with Release) and restarts of the controller.
	// +optional
	// +listType=map
	// +listMapKey=replica
	Tasks []TaskStatus `json:"tasks,omitempty"`
	// snapshots lists the replicas' snapshots, by replica index, from the last pause: a
	// replica's pods are made from its snapshot from then on. Deleting the sandbox deletes
	// them from the registry.
	// +optional
	// +listType=map
	// +listMapKey=replica
	Snapshots []SnapshotStatus `json:"snapshots,omitempty"`
	// oomKills lists, by replica index, the last OOM kill of each replica that was told of
	// (condition OOMKilled).
	// +optional
	// +listType=map
	// +listMapKey=replica
	OOMKills []OOMKillStatus `json:"oomKills,omitempty"`
}

// BatchSandbox is a set of sandbox pods. It is the stored truth behind a Sandbox of the same
// namespace and name, and usable directly for batch work.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bsbx,categories=kube-sandbox
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.taskSucceeded`,priority=1
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.taskFailed`,priority=1
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.spec.expireTime`
// +kubebuilder:selectablefield:JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BatchSandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BatchSandboxSpec   `json:"spec,omitempty"`
	Status BatchSandboxStatus `json:"status,omitempty"`
}

// BatchSandboxList is a list of BatchSandboxes.
//
// +kubebuilder:object:root=true
type BatchSandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BatchSandbox `json:"items"`
}
