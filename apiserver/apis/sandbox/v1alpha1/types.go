package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// SandboxPhase is a coarse summary of where a sandbox is in its life.
type SandboxPhase string

const (
	// PhasePending: not all replicas have a ready pod yet.
	PhasePending SandboxPhase = "Pending"
	// PhaseRunning: every replica has a ready pod.
	PhaseRunning SandboxPhase = "Running"
	// PhasePausing: spec.paused is set and some replica's pod is still there, being
	// snapshotted or deleted after its snapshot.
	PhasePausing SandboxPhase = "Pausing"
	// PhasePaused: every replica's filesystem is in a snapshot and no pod is left.
	PhasePaused SandboxPhase = "Paused"
	// PhaseResuming: spec.paused was cleared and the pods made from the snapshots are not all
	// ready yet.
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

// SandboxSpec is the desired state of a Sandbox.
type SandboxSpec struct {
	// replicas is the number of sandbox pods. Defaults to 1.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// poolRef names the Pool (control.kube-sandbox.io, same namespace) whose warm pods the
	// replicas are allocated from: a sandbox in milliseconds. Exactly one of poolRef and
	// template. Immutable.
	// +optional
	PoolRef *SandboxPoolReference `json:"poolRef,omitempty"`

	// template is the pod template of direct mode: each replica is a pod made from it. Its first
	// container is the sandbox container, which runs the entrypoint under sandbox-execd, so any
	// image works unchanged. Exactly one of poolRef and template. Immutable.
	// +optional
	Template *corev1.PodTemplateSpec `json:"template,omitempty"`

	// entrypoint is the command the sandbox container runs under sandbox-execd. Without it, the
	// container's command and args from the template; without those, execd alone, waiting for
	// commands. (The image's own ENTRYPOINT is not known here: a template container that sets
	// args sets command too.) With poolRef, execd starts it when the pod is allocated, and the
	// sandbox stays usable when it exits.
	// +optional
	Entrypoint []string `json:"entrypoint,omitempty"`

	// env is added to the sandbox container's environment. With poolRef, it reaches the pod when
	// it is allocated (with SANDBOX_NAME and SANDBOX_NAMESPACE), for the entrypoint and every
	// exec; only literal values then (no valueFrom).
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// timeoutSeconds is the sandbox's lifetime: it is deleted that long after its creation
	// unless renewed (see the renew subresource and autoRenew). At least 60; the server may set
	// a maximum. Absent: the sandbox does not expire. Immutable.
	// +optional
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`

	// autoRenew keeps the sandbox alive while it is used.
	// +optional
	AutoRenew *SandboxAutoRenew `json:"autoRenew,omitempty"`

	// networkPolicy is the sandbox's outbound policy: what code in it may reach. Without it,
	// the pool's policy (poolRef), else the platform's default, which denies everything. The
	// platform's always-deny list (the cluster's pods, services and nodes, link-local and
	// cloud metadata addresses) wins over every rule. Mutable: a change is in force in the
	// pods within a second, and the condition EgressReady tells when. exec, files and proxy
	// work whatever the policy says.
	// +optional
	NetworkPolicy *SandboxNetworkPolicy `json:"networkPolicy,omitempty"`

	// shardPatches[i] is a strategic merge patch on the pod template of replica i (template
	// only, not poolRef): per-replica resources, labels, env. A patched template is admitted
	// as the template is. Replicas past the end get the template as it is. Immutable.
	// +optional
	// +listType=atomic
	ShardPatches []runtime.RawExtension `json:"shardPatches,omitempty"`

	// taskTemplate is the task each replica runs once its pod is ready, through sandbox-execd:
	// command, args, env, workingDir, timeoutSeconds, restartPolicy (Never or OnFailure),
	// backoffLimit and lifecycle hooks. Its output is the log subresource; its state is
	// status.tasks and the conditions TasksComplete and TasksFailed. Immutable once tasks
	// have started.
	// +optional
	TaskTemplate *SandboxTaskTemplate `json:"taskTemplate,omitempty"`

	// shardTaskPatches[i] is a strategic merge patch on the task of replica i: its args, its
	// env (merged by name), its timeout. Immutable once tasks have started.
	// +optional
	// +listType=atomic
	ShardTaskPatches []runtime.RawExtension `json:"shardTaskPatches,omitempty"`

	// taskResourcePolicyWhenCompleted: Retain (the default) keeps a replica's pod when its
	// task has ended, for exec, files and logs; Release deletes it (a pool pod goes the way of
	// its pool's recycleStrategy) and the replica counts as done. Mutable.
	// +optional
	TaskResourcePolicyWhenCompleted string `json:"taskResourcePolicyWhenCompleted,omitempty"`

	// paused: true snapshots each replica's filesystem into an image in the platform's
	// snapshot registry and deletes its pods (phase Pausing, then Paused); false again brings
	// the same sandbox back (Resuming, then Running) with new pods made from the snapshots (a
	// pooled sandbox's from its pool's template, as pods of its own). Kept: the sandbox
	// container's filesystem, apart from volumes and the virtual filesystems (/proc, /sys,
	// /dev); the name, labels, spec, network policy and the identity exec, files and proxy
	// use. Not kept: processes and memory; the entrypoint starts again on resume. A paused
	// sandbox keeps its expiry (unless the platform says otherwise); an expired or deleted
	// one takes its snapshots with it. A sandbox with a taskTemplate cannot pause. Needs
	// `update` on sandboxes.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// SandboxTaskTemplate is the task of each replica.
type SandboxTaskTemplate struct {
	// command is the executable and its first arguments; required.
	// +listType=atomic
	Command []string `json:"command"`
	// args follow command.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`
	// env is added to the task's environment, after the sandbox's env. Literal values only.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +patchMergeKey=name
	// +patchStrategy=merge
	Env []SandboxTaskEnvVar `json:"env,omitempty" patchStrategy:"merge" patchMergeKey:"name"`
	// workingDir is the absolute directory the task starts in; the container's by default.
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`
	// timeoutSeconds bounds each attempt (DeadlineExceeded). Absent: no limit.
	// +optional
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
	// restartPolicy: Never (the default: a failed attempt fails the task) or OnFailure (a
	// failed attempt is retried, on a replacement pod if its pod was lost, up to backoffLimit
	// times).
	// +optional
	RestartPolicy string `json:"restartPolicy,omitempty"`
	// backoffLimit is the number of retries with OnFailure; 3 by default, at most 100.
	// +optional
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`
	// lifecycle runs commands before (preStart: its failure fails the attempt) and after
	// (postStop: whatever the outcome) each attempt.
	// +optional
	Lifecycle *SandboxTaskLifecycle `json:"lifecycle,omitempty"`
}

// SandboxTaskEnvVar is one variable of a task's environment.
type SandboxTaskEnvVar struct {
	Name string `json:"name"`
	// +optional
	Value string `json:"value,omitempty"`
}

// SandboxTaskLifecycle holds the hooks of a task.
type SandboxTaskLifecycle struct {
	// +optional
	PreStart *SandboxTaskHook `json:"preStart,omitempty"`
	// +optional
	PostStop *SandboxTaskHook `json:"postStop,omitempty"`
}

// SandboxTaskHook is a command run around each attempt of a task.
type SandboxTaskHook struct {
	// +listType=atomic
	Command []string `json:"command"`
	// timeoutSeconds bounds the hook; 30 by default.
	// +optional
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
}

// SandboxTaskStatus is one replica's task.
type SandboxTaskStatus struct {
	// replica is the index of the replica.
	Replica int32 `json:"replica"`
	// phase: Pending, Running, Succeeded, Failed or Unknown (contact with the pod lost).
	Phase string `json:"phase"`
	// pod runs (or ran) the current attempt.
	// +optional
	Pod string `json:"pod,omitempty"`
	// attempts started, on every pod of the replica.
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
	// reason of the last error (Error, DeadlineExceeded, BackoffLimitExceeded, PodLost, ...).
	// +optional
	Reason string `json:"reason,omitempty"`
	// message tells the last error.
	// +optional
	Message string `json:"message,omitempty"`
}

// SandboxNetworkPolicy is an outbound policy: the first rule that matches decides, and
// defaultAction decides what no rule matches.
type SandboxNetworkPolicy struct {
	// defaultAction decides what no rule matches: Allow or Deny. Deny when not given.
	// +optional
	DefaultAction string `json:"defaultAction,omitempty"`
	// egress rules, first match wins. At most 100.
	// +optional
	// +listType=atomic
	Egress []SandboxEgressRule `json:"egress,omitempty"`
}

// SandboxEgressRule matches outbound traffic by destination and, optionally, port.
type SandboxEgressRule struct {
	// action: Allow or Deny.
	Action string `json:"action"`
	// to is a DNS name (pypi.org), a wildcard for its subdomains at any depth
	// (*.pythonhosted.org; the bare name needs its own rule), an IPv4 or IPv6 address, or a
	// CIDR. A denied name does not resolve in the sandbox (NXDOMAIN); the addresses an
	// allowed name resolves to are allowed for their TTL.
	To string `json:"to"`
	// ports limit the rule to these ports; without them it matches every port and protocol.
	// At most 16.
	// +optional
	// +listType=atomic
	Ports []SandboxEgressPort `json:"ports,omitempty"`
}

// SandboxEgressPort is a port or a range of ports.
type SandboxEgressPort struct {
	// port is the port, or the first port of the range (1-65535).
	Port int32 `json:"port"`
	// endPort, if set, makes the range port..endPort (inclusive).
	// +optional
	EndPort *int32 `json:"endPort,omitempty"`
	// protocol: TCP (the default) or UDP.
	// +optional
	Protocol string `json:"protocol,omitempty"`
}

// SandboxPoolReference names a Pool of the sandbox's namespace.
type SandboxPoolReference struct {
	// name of the Pool.
	Name string `json:"name"`
}

// SandboxAutoRenew keeps a sandbox alive while it is used.
type SandboxAutoRenew struct {
	// extendSeconds: every exec (and files and proxy access) through this API moves the expiry
	// to at least now + extendSeconds.
	ExtendSeconds int64 `json:"extendSeconds"`
}

// SandboxPodStatus is what is known of one replica's pod.
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
	// runtimeID is the container runtime's ID of the sandbox container.
	// +optional
	RuntimeID string `json:"runtimeID,omitempty"`
	// ready is true when the sandbox container is ready for commands.
	Ready bool `json:"ready"`
}

// SandboxStatus is the observed state of a Sandbox.
type SandboxStatus struct {
	// observedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase summarizes the state of the sandbox: Pending, Running, Pausing, Paused, Resuming,
	// Succeeded, Failed, Expired or Terminating.
	// +optional
	Phase SandboxPhase `json:"phase,omitempty"`
	// expiresAt is when the sandbox will be deleted, unless renewed. Absent: never.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
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
	// conditions: Ready, with a reason a user can act on; EgressReady; with a taskTemplate,
	// TasksComplete and TasksFailed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// taskPending, taskRunning, taskSucceeded, taskFailed and taskUnknown count the
	// replicas' tasks by phase.
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
	// tasks lists the replicas' tasks, by replica index.
	// +optional
	// +listType=map
	// +listMapKey=replica
	Tasks []SandboxTaskStatus `json:"tasks,omitempty"`
	// snapshots lists the replicas' snapshots from the last pause, by replica index; the
	// replicas' pods are made from them from then on.
	// +optional
	// +listType=map
	// +listMapKey=replica
	Snapshots []SandboxSnapshotStatus `json:"snapshots,omitempty"`
}

// SandboxSnapshotStatus is a replica's filesystem as it was when the sandbox paused.
type SandboxSnapshotStatus struct {
	// replica is the index of the replica.
	Replica int32 `json:"replica"`
	// image is the snapshot's reference by digest (REGISTRY/REPOSITORY@sha256:...).
	Image string `json:"image"`
	// digest of the image's manifest.
	Digest string `json:"digest"`
	// size of the image (manifest, config and all layers), in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// layerSize is the size of the layer of the sandbox's own changes, in bytes.
	// +optional
	LayerSize int64 `json:"layerSize,omitempty"`
	// baseImage is the image the snapshotted container ran.
	// +optional
	BaseImage string `json:"baseImage,omitempty"`
	// creationTime is when the snapshot was taken.
	CreationTime metav1.Time `json:"creationTime"`
	// pod is the pod it was taken from.
	Pod string `json:"pod"`
}

// Sandbox is an isolated environment for running code: one or more pods that accept commands,
// files and HTTP through this API. It is a view of the BatchSandbox of the same namespace and
// name; the apiserver stores nothing itself.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Sandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxSpec   `json:"spec,omitempty"`
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxList is a list of Sandboxes.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}

// SandboxRenewal is the body of a POST to the renew subresource: move the sandbox's expiry
// to expiresAt, or to now + extendSeconds. Expiry only moves forward: the new expiry is the
// later of the current one and the requested one, so the same renewal twice changes nothing.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxRenewal struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// expiresAt is the requested expiry. Exactly one of expiresAt and extendSeconds is set.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// extendSeconds requests an expiry of now + extendSeconds.
	// +optional
	ExtendSeconds *int64 `json:"extendSeconds,omitempty"`
}

// SandboxFilesOptions are the options of the files subresource:
// /sandboxes/NAME/files/PATH. GET downloads a file (HTTP Range works) or lists a directory
// (limit, continue, depth), PUT uploads (mode, mkdirs, type=dir), DELETE removes (recursive),
// POST moves (moveTo). Other query parameters are passed to sandbox-execd as they are.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxFilesOptions struct {
	metav1.TypeMeta `json:",inline"`

	// path of the file in the sandbox, relative to its root.
	// +optional
	Path string `json:"path,omitempty"`
	// replica is the index of the replica. Defaults to 0.
	// +optional
	Replica int32 `json:"replica,omitempty"`
}

// SandboxProxyOptions are the options of the proxy subresource:
// /sandboxes/NAME/proxy/PORT/PATH reaches HTTP and WebSocket servers of the first replica,
// /sandboxes/NAME/proxy/REPLICA:PORT/PATH those of another. The query is the server's: it
// passes unchanged.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxProxyOptions struct {
	metav1.TypeMeta `json:",inline"`

	// path is [REPLICA:]PORT/PATH: the port in the sandbox (of replica REPLICA, 0 by
	// default), then the path to request there.
	// +optional
	Path string `json:"path,omitempty"`
}

// SandboxFileType is the type of a SandboxFile.
type SandboxFileType string

const (
	SandboxFileTypeFile    SandboxFileType = "file"
	SandboxFileTypeDir     SandboxFileType = "dir"
	SandboxFileTypeSymlink SandboxFileType = "symlink"
	// SandboxFileTypeOther covers devices, FIFOs and sockets, which the files subresource
	// neither reads nor writes.
	SandboxFileTypeOther SandboxFileType = "other"
)

// SandboxFile describes one entry of a sandbox's filesystem: an item of a SandboxFileList, and
// the answer of the files subresource to a stat (?stat=true), an upload, a mkdir and a move.
// Symbolic links are described, never followed.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxFile struct {
	// apiVersion and kind are set on an answer of its own, not on the items of a list.
	metav1.TypeMeta `json:",inline"`

	// name is the entry's base name ("" for the root).
	Name string `json:"name"`
	// path is relative to the listed directory in a list, and relative to the sandbox's files
	// root otherwise.
	Path string `json:"path"`
	// type is file, dir, symlink or other.
	Type SandboxFileType `json:"type"`
	// size in bytes.
	Size int64 `json:"size"`
	// mode is the permission bits (with setuid, setgid and sticky) in octal, e.g. "0644".
	Mode string `json:"mode"`
	// modTime is the last modification.
	ModTime metav1.Time `json:"modTime"`
	// linkTarget is a symbolic link's target as stored, not resolved.
	// +optional
	LinkTarget string `json:"linkTarget,omitempty"`
}

// SandboxFileList is a page of a directory listing of the files subresource: entries in
// depth-first order, each directory's entries sorted by name. metadata.continue, when set,
// gets the next page (the continue query parameter).
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxFileList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SandboxFile `json:"items"`
}

// SandboxExecOptions are the query parameters of the exec subresource. They follow
// PodExecOptions so that client-go's remotecommand executors work unchanged.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxExecOptions struct {
	metav1.TypeMeta `json:",inline"`

	// stdin: pass the caller's standard input to the command.
	// +optional
	Stdin bool `json:"stdin,omitempty"`
	// stdout: return the command's standard output. Defaults to true.
	// +optional
	Stdout bool `json:"stdout,omitempty"`
	// stderr: return the command's standard error. Defaults to true.
	// +optional
	Stderr bool `json:"stderr,omitempty"`
	// tty: run the command in a terminal.
	// +optional
	TTY bool `json:"tty,omitempty"`
	// replica is the index of the replica to run in. Defaults to 0.
	// +optional
	Replica int32 `json:"replica,omitempty"`
	// command and its arguments; required.
	Command []string `json:"command"`
	// env adds NAME=VALUE entries to the command's environment.
	// +optional
	Env []string `json:"env,omitempty"`
	// workingDir is the absolute directory the command starts in; the container's by default.
	// +optional
	WorkingDir string `json:"workingDir,omitempty"`
	// timeoutSeconds kills the command, and everything it started, after that long. 0: no limit.
	// +optional
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
}

// SandboxLogOptions are the query parameters of the log subresource: a task's output, as
// pods/log serves a container's, or a process's (process). A process's log answers, in the
// headers X-Kube-Sandbox-Log-Offset and X-Kube-Sandbox-Log-Next-Offset, at which byte of its
// output the body starts and, when the body is complete at once, where the next read would
// start: offsetBytes resumes there.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxLogOptions struct {
	metav1.TypeMeta `json:",inline"`

	// replica is the index of the replica. Defaults to 0.
	// +optional
	Replica int32 `json:"replica,omitempty"`
	// follow streams the log until the attempt ends.
	// +optional
	Follow bool `json:"follow,omitempty"`
	// tailLines returns only that many lines from the end.
	// +optional
	TailLines *int64 `json:"tailLines,omitempty"`
	// limitBytes stops after that many bytes.
	// +optional
	LimitBytes *int64 `json:"limitBytes,omitempty"`
	// previous returns the log of the previous attempt in the replica's pod (tasks only).
	// +optional
	Previous bool `json:"previous,omitempty"`
	// process is the ID of a process of the replica, whose output to read instead of the
	// task's.
	// +optional
	Process string `json:"process,omitempty"`
	// offsetBytes starts a process's log at that byte of its output, counted from its first;
	// later, if those bytes were dropped (the headers say where it starts). It excludes
	// tailLines.
	// +optional
	OffsetBytes *int64 `json:"offsetBytes,omitempty"`
}
