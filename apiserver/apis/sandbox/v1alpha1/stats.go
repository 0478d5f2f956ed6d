package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Reasons of a replica whose figures are missing (SandboxReplicaStats.reason).
const (
	// StatsReasonNoPod: the replica has no pod now (pending, paused, or being replaced).
	StatsReasonNoPod = "NoPod"
	// StatsReasonNodeUnavailable: the node agent of the replica's node did not answer.
	StatsReasonNodeUnavailable = "NodeUnavailable"
	// StatsReasonNotSampled: the node agent has no figures of the pod yet (it has just
	// started, or the agent has just seen it).
	StatsReasonNotSampled = "NotSampled"
	// StatsReasonPartial: some figures could not be read; message says which and why.
	StatsReasonPartial = "Partial"
)

// SandboxStats is what the replicas of a sandbox use, read on their nodes by the node agent
// (sandbox-node) from each pod's cgroup (under gVisor, the sentry and gofer too), containerd
// and the egress filter, never from inside the sandbox, whose code could forge it. GET the
// stats subresource of a sandbox (authorized as get sandboxes/stats) for one, or list
// sandboxstats (get, list sandboxstats) for those of a namespace or of all. As metrics.k8s.io's
// PodMetrics, each replica's figures come with the time they were read and the window the CPU
// rate is over; they are at most about 10 s old.
//
// metadata.name and namespace are the sandbox's; metadata.creationTimestamp is when the
// answer was made.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxStats struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// replicas are the figures of each replica, by index.
	// +listType=map
	// +listMapKey=replica
	Replicas []SandboxReplicaStats `json:"replicas"`
}

// SandboxStatsList is the SandboxStats of many sandboxes.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type SandboxStatsList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []SandboxStats `json:"items"`
}

// SandboxReplicaStats is the usage of one replica's pod. When the figures cannot be had,
// reason and message say why and the figures are absent; this is never an error for the
// whole sandbox.
type SandboxReplicaStats struct {
	// replica is the replica's index.
	Replica int32 `json:"replica"`
	// pod and node are where the replica runs.
	// +optional
	Pod string `json:"pod,omitempty"`
	// +optional
	Node string `json:"node,omitempty"`
	// timestamp is when the figures were read.
	// +optional
	Timestamp metav1.Time `json:"timestamp,omitempty"`
	// window is the span the CPU rate is over; 0 when the pod was read once so far.
	// +optional
	Window metav1.Duration `json:"window,omitempty"`
	// reason is set when figures are missing: NoPod, NodeUnavailable, NotSampled, or Partial
	// (some figures are there).
	// +optional
	Reason string `json:"reason,omitempty"`
	// message says why, for a person.
	// +optional
	Message string `json:"message,omitempty"`

	// +optional
	CPU *SandboxCPUStats `json:"cpu,omitempty"`
	// +optional
	Memory *SandboxMemoryStats `json:"memory,omitempty"`
	// +optional
	Disk *SandboxDiskStats `json:"disk,omitempty"`
	// +optional
	Network *SandboxNetworkStats `json:"network,omitempty"`
	// processes is the number of tasks in the pod's cgroup (pids.current). Under gVisor these
	// are the sentry's and gofer's threads on the node, not the processes in the sandbox.
	// +optional
	Processes *int64 `json:"processes,omitempty"`
}

// SandboxCPUStats is the CPU a replica used.
type SandboxCPUStats struct {
	// usageNanoCores is the CPU used over the window, in billionths of a core.
	UsageNanoCores int64 `json:"usageNanoCores"`
	// usageCoreNanoSeconds is the CPU time used since the pod started.
	UsageCoreNanoSeconds int64 `json:"usageCoreNanoSeconds"`
}

// SandboxMemoryStats is the memory of a replica.
type SandboxMemoryStats struct {
	// workingSetBytes is what the kubelet evicts and the kernel OOM-kills by (usage less
	// inactive file pages).
	WorkingSetBytes int64 `json:"workingSetBytes"`
	// rssBytes is anonymous and shared memory.
	RSSBytes int64 `json:"rssBytes"`
	// usageBytes is everything charged to the pod, page cache included.
	UsageBytes int64 `json:"usageBytes"`
	// limitBytes is the pod's limit; absent when it has none.
	// +optional
	LimitBytes int64 `json:"limitBytes,omitempty"`
	// peakBytes is the most the pod has used since it started.
	// +optional
	PeakBytes int64 `json:"peakBytes,omitempty"`
	// oomKills counts the processes the kernel's OOM killer ended in the pod.
	OOMKills int64 `json:"oomKills"`
}

// SandboxDiskStats is the disk a replica uses.
type SandboxDiskStats struct {
	// writableLayerBytes is what the sandbox wrote to its root filesystem.
	WritableLayerBytes int64 `json:"writableLayerBytes"`
	// emptyDirBytes is what its disk-backed emptyDir volumes hold.
	EmptyDirBytes int64 `json:"emptyDirBytes"`
}

// SandboxNetworkStats is a replica's traffic, as the sandbox sees it (rx in, tx out), on its
// pod's interface, and the egress filter's verdicts on its new outbound connections.
type SandboxNetworkStats struct {
	RxBytes   int64 `json:"rxBytes"`
	TxBytes   int64 `json:"txBytes"`
	RxPackets int64 `json:"rxPackets"`
	TxPackets int64 `json:"txPackets"`
	// connectionsAllowed and connectionsDenied are the new outbound connections (and other
	// flows) the egress policy let through and refused.
	ConnectionsAllowed int64 `json:"connectionsAllowed"`
	ConnectionsDenied  int64 `json:"connectionsDenied"`
}
