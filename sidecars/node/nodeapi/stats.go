package nodeapi

import (
	"strings"
	"time"
)

// The usage endpoints, on Port (mutual TLS), for sandbox-apiserver (the stats subresource) and
// sandbox-controller (OOM kills):
//
//	GET StatsPath          a StatsList of every sandbox pod of the node that serves a sandbox
//	GET PodStatsPath(uid)  one PodStats; 404 for a pod the agent does not know (or an idle
//	                       pool pod, which serves no sandbox)
//	GET OOMsPath           sandbox-controller alone: a stream of OOMLine, one JSON document per
//	                       line (application/x-ndjson): a Report of every sampled sandbox pod
//	                       whose OOMKills is above 0, then Synced (the node's state is
//	                       complete), then a Report of a pod at each sample whose OOMKills grew;
//	                       a bare newline every Heartbeat keeps it alive. A client that falls
//	                       behind is cut off: it connects again and gets the whole state again.
//
// The figures are read on the node, from the pod's cgroup (which, under gVisor, holds the
// sentry and the gofer: everything the sandbox costs the node), from containerd (the writable
// layer), from the kubelet's emptyDir directories, and from the pod's host-side interface and
// the egress filter's counters. Nothing comes from inside the sandbox, whose code could forge
// it. The agent samples every sandbox pod of its node every SampleInterval and answers from
// the last sample: an answer costs no read of the node.
const (
	// StatsPath lists the node's sandbox pods' usage.
	StatsPath = "/v1/stats"
	// PodStatsPattern is the route of one pod's usage (net/http's pattern syntax).
	PodStatsPattern = "GET /v1/stats/{uid}"
	// OOMsPath streams the OOM kills of the node's sandbox pods. Not below StatsPath, where it
	// would hide the pod of that UID.
	OOMsPath = "/v1/ooms"
	// SampleInterval is how often the agent reads the figures of each pod, and so the CPU
	// window: figures are at most this old (plus a read's time) when answered. 10 s keeps
	// them well within the 15 s that `kubectl sandbox top` promises, and costs a node with
	// 200 sandboxes 20 cgroup reads a second.
	SampleInterval = 10 * time.Second
	// MetricsPort serves MetricsPath, the same figures as Prometheus series, over TLS (the
	// agent's serving certificate, for ServerName) to scrapers the kube-apiserver
	// authenticates (a bearer token, TokenReview) and authorizes (get on the non-resource URL
	// /metrics, SubjectAccessReview), as the kubelet's own metrics are served.
	MetricsPort = 9450
)

// PodStatsPath is the path of one pod's usage.
func PodStatsPath(uid string) string {
	return strings.Replace(strings.TrimPrefix(PodStatsPattern, "GET "), "{uid}", uid, 1)
}

// StatsList is the answer of StatsPath.
type StatsList struct {
	// Node is the agent's node.
	Node  string     `json:"node"`
	Items []PodStats `json:"items"`
}

// PodStats is the usage of one sandbox pod, as the agent last sampled it. A figure the agent
// could not read is nil, and Errors says why; the others stand.
type PodStats struct {
	PodUID    string `json:"podUID"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Sandbox and Replica: the sandbox the pod serves (its BatchSandbox's name, from the pod's
	// labels) and its replica index.
	Sandbox string `json:"sandbox"`
	Replica int32  `json:"replica"`
	// Timestamp is when the figures were read; Window is the span the CPU rate is over (the
	// time since the sample before; 0 for a pod sampled once so far, which has no rate yet).
	Timestamp time.Time     `json:"timestamp"`
	Window    time.Duration `json:"window"`

	CPU       *CPUStats     `json:"cpu,omitempty"`
	Memory    *MemoryStats  `json:"memory,omitempty"`
	Disk      *DiskStats    `json:"disk,omitempty"`
	Network   *NetworkStats `json:"network,omitempty"`
	Processes *uint64       `json:"processes,omitempty"`

	// Errors names each figure that could not be read ("cpu", "memory", "disk", "network",
	// "processes") and why.
	Errors map[string]string `json:"errors,omitempty"`
}

// CPUStats of the pod's cgroup.
type CPUStats struct {
	// UsageNanoCores is the CPU used over Window, in billionths of a core (10^9: one core);
	// absent (0) until the pod has been sampled twice.
	UsageNanoCores uint64 `json:"usageNanoCores"`
	// UsageCoreNanoSeconds is the CPU time used since the pod started (cpu.stat usage_usec).
	UsageCoreNanoSeconds uint64 `json:"usageCoreNanoSeconds"`
}

// MemoryStats of the pod's cgroup.
type MemoryStats struct {
	// WorkingSetBytes is what the kubelet evicts and the kernel OOM-kills by: memory.current
	// less inactive file pages.
	WorkingSetBytes uint64 `json:"workingSetBytes"`
	// RSSBytes is anonymous memory (memory.stat anon) plus shared memory (shmem: under gVisor,
	// the sentry's memory file is shmem).
	RSSBytes uint64 `json:"rssBytes"`
	// UsageBytes is memory.current: everything charged, page cache included.
	UsageBytes uint64 `json:"usageBytes"`
	// LimitBytes is the pod's limit (memory.max); 0: none.
	LimitBytes uint64 `json:"limitBytes,omitempty"`
	// PeakBytes is the most the pod has used (memory.peak); 0 where the kernel keeps none.
	PeakBytes uint64 `json:"peakBytes,omitempty"`
	// OOMKills counts the processes the kernel's OOM killer ended in the pod (memory.events
	// oom_kill), since the pod started.
	OOMKills uint64 `json:"oomKills"`
}

// DiskStats of the pod's sandbox container and volumes.
type DiskStats struct {
	// WritableLayerBytes is what the sandbox container wrote to its root filesystem (its
	// active snapshot's usage, which containerd reports).
	WritableLayerBytes uint64 `json:"writableLayerBytes"`
	// EmptyDirBytes is the disk used by the pod's disk-backed emptyDir volumes.
	EmptyDirBytes uint64 `json:"emptyDirBytes"`
}

// NetworkStats of the pod's host-side interface, and the egress filter's verdicts. RX and TX
// are the sandbox's: RX came in to it, TX went out of it.
type NetworkStats struct {
	RxBytes   uint64 `json:"rxBytes"`
	TxBytes   uint64 `json:"txBytes"`
	RxPackets uint64 `json:"rxPackets"`
	TxPackets uint64 `json:"txPackets"`
	// ConnectionsAllowed and ConnectionsDenied are the new outbound flows the egress filter
	// let through and dropped.
	ConnectionsAllowed uint64 `json:"connectionsAllowed"`
	ConnectionsDenied  uint64 `json:"connectionsDenied"`
}

// Figures, the keys of PodStats.Errors.
const (
	FigureCPU       = "cpu"
	FigureMemory    = "memory"
	FigureDisk      = "disk"
	FigureNetwork   = "network"
	FigureProcesses = "processes"
)

// OOMLineType says what an OOMLine is.
type OOMLineType string

const (
	// OOMReportLine: Report is a pod's count, in the initial state or because it grew.
	OOMReportLine OOMLineType = "Report"
	// OOMSyncedLine: every pod with a kill was reported; from here on, lines are news. A pod
	// the initial state did not name had no kill the agent knows of.
	OOMSyncedLine OOMLineType = "Synced"
)

// OOMLine is one line of the OOMsPath stream.
type OOMLine struct {
	Type   OOMLineType `json:"type"`
	Report *OOMReport  `json:"report,omitempty"`
}

// OOMReport is a sandbox pod's count of OOM kills at a sample, with what its memory was.
type OOMReport struct {
	PodUID    string `json:"podUID"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Sandbox and Replica: the sandbox the pod serves and its replica index.
	Sandbox string `json:"sandbox"`
	Replica int32  `json:"replica"`
	// OOMKills is MemoryStats.OOMKills: the processes the kernel's OOM killer ended in the pod
	// since it started; it never goes back while the agent runs.
	OOMKills uint64 `json:"oomKills"`
	// LimitBytes and PeakBytes are MemoryStats': the pod's limit (0: none) and the most it
	// used (0: unknown).
	LimitBytes uint64 `json:"limitBytes,omitempty"`
	PeakBytes  uint64 `json:"peakBytes,omitempty"`
	// Timestamp is when the sample that counted them was read: every kill counted happened
	// before it.
	Timestamp time.Time `json:"timestamp"`
}

// OOMReportOf is the report of a sample; false for one without a memory figure.
func OOMReportOf(st *PodStats) (OOMReport, bool) {
	if st == nil || st.Memory == nil {
		return OOMReport{}, false
	}
	return OOMReport{PodUID: st.PodUID, Namespace: st.Namespace, Pod: st.Pod, Sandbox: st.Sandbox, Replica: st.Replica,
		OOMKills: st.Memory.OOMKills, LimitBytes: st.Memory.LimitBytes, PeakBytes: st.Memory.PeakBytes, Timestamp: st.Timestamp}, true
}
