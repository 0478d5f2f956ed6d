package batchsandbox

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/oomwatch"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// OOM kills.
//
// Each OOM kill of a replica is told of once: a Warning Event (OOMKilled) on the Sandbox naming
// the replica, its pod, how many processes died, the memory limit and the peak; the condition
// OOMKilled with the latest kill; and, when it ended the container a task's attempt ran in,
// that attempt's reason. What was told is recorded in status.oomKills, one entry per replica,
// so that neither another reconcile nor a restarted controller tells it again.
//
// The count is the node agent's (PodStats.Memory.OOMKills: the processes the kernel's OOM
// killer ended in the pod's cgroup, v1 or v2, under runc or gVisor), which the agent streams to
// the controller (package oomwatch) at the sample that sees it grow: the new kills of a replica
// are the agent's count for its current pod less what status.oomKills recorded for that pod
// (a new pod starts at 0). That covers what the pod's status misses:
//   - runc on cgroup v1 (no OOM groups): only the largest process dies; execd and the
//     container live on, and the pod's status says nothing.
//   - runc on cgroup v2: the container is one OOM group (memory.oom.group), so the whole of it
//     dies; the status shows one container killed, the count every process.
//   - gVisor: the kernel kills the sentry; the pod sandbox is made again and the status shows
//     the container OOMKilled, usually before the agent's next sample counts the kill.
//
// The pod's status is kept for what the count cannot say: which container died (the Event and
// a task's reason), and, as a fallback, a kill the agent does not report (unreachable, or a pod
// that failed, which the agent forgets at once). A container kill in the status and the count
// are one kill, never two:
//   - a kill whose finishedAt is at or before status.oomKills' time (the latest kill told, or
//     the sample that counted it: every kill counted came before its sample) is told already;
//   - a fresh container kill waits, up to agentWait, for the agent's count to grow, and is
//     then told with it in one Event (a deadline, not a poll: the stream's report enqueues the
//     sandbox when it comes);
//   - if the count does not grow in time, or the pod failed, it is told from the status alone,
//     and counted as one of the agent's kills of the pod, so that the agent's later count of
//     it (gVisor: one) is no news. A cgroup-v2 container of N processes told so is told again
//     for its other N-1 when its count comes.
//
// A kill the agent counted while its stream was down is told when the stream comes back: its
// initial state holds every pod with a kill, and the difference is what is new.

// agentWait is how long a container kill in the pod's status waits for the node agent to
// count it: two of its samples, so that one missed sample does not tell the kill twice, and a
// second for finishedAt's whole seconds.
const agentWait = 2*nodeapi.SampleInterval + time.Second

// OOMReports is what the node agents reported last of the pods with kills (oomwatch.Watcher).
type OOMReports interface {
	// Sync says which node addresses the sandbox's pods are on (nil: none).
	Sync(sandbox types.NamespacedName, hostIPs []string)
	// Report is the latest report of the pod on the node at hostIP.
	Report(hostIP string, uid types.UID) (nodeapi.OOMReport, bool)
}

var _ OOMReports = &oomwatch.Watcher{}

// oomKill is a telling of kills of a replica's pod.
type oomKill struct {
	replica int32
	pod     *corev1.Pod
	// containerID is the sandbox container the kill ended, if the pod's status shows one.
	containerID string
	// at is when the kill was seen (OOMKillStatus.Time).
	at metav1.Time
	// processes the agent counted (0: unknown, told from the status alone); podKills is the
	// agent's count of the pod once this is told.
	processes             int64
	podKills              int64
	limitBytes, peakBytes int64
}

// sandboxContainerStatus is the status of the pod's sandbox container (its first), or nil.
func sandboxContainerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	if len(pod.Spec.Containers) == 0 {
		return nil
	}
	name := pod.Spec.Containers[0].Name
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// oomKilled is t if it is an end by the OOM killer, else nil.
func oomKilled(t *corev1.ContainerStateTerminated) *corev1.ContainerStateTerminated {
	if t != nil && t.Reason == "OOMKilled" {
		return t
	}
	return nil
}

// lastOOMKill is the latest end of the pod's sandbox container by the OOM killer: its current
// state (a container not restarted, yet or ever) or its last one; nil if neither.
func lastOOMKill(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	cs := sandboxContainerStatus(pod)
	if cs == nil {
		return nil
	}
	now, last := oomKilled(cs.State.Terminated), oomKilled(cs.LastTerminationState.Terminated)
	if now != nil && (last == nil || !now.FinishedAt.Before(&last.FinishedAt)) {
		return now
	}
	return last
}

// memoryLimit is the memory limit the sandbox container ran under: its own, else the pod's
// (pod-level resources); 0: none.
func memoryLimit(pod *corev1.Pod) int64 {
	if len(pod.Spec.Containers) > 0 {
		if q, ok := pod.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; ok {
			return q.Value()
		}
	}
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Limits[corev1.ResourceMemory]; ok {
			return q.Value()
		}
	}
	return 0
}

// oomReportFunc is the latest report of the node agent of a pod, if any.
type oomReportFunc func(pod *corev1.Pod) (nodeapi.OOMReport, bool)

// planOOMKills says, of each replica's current pod (its newest not being deleted: a pod being
// deleted ends by its deletion), what kills to tell now, in replica order, and how long until a
// container kill that waits for the agent's count is told without it (0: none waits). See the
// package's comment on OOM kills for the rules.
func planOOMKills(obs *observed, reports oomReportFunc, now time.Time) (tell []oomKill, requeueAfter time.Duration) {
	bs := obs.bs
	current := map[int32]*corev1.Pod{}
	for i := range obs.pods {
		pod := &obs.pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		idx, err := strconv.ParseInt(pod.Labels[controlv1alpha1.LabelReplica], 10, 32)
		if err != nil || idx < 0 {
			continue
		}
		if prev, ok := current[int32(idx)]; ok && (pod.CreationTimestamp.Before(&prev.CreationTimestamp) ||
			pod.CreationTimestamp.Equal(&prev.CreationTimestamp) && pod.Name < prev.Name) {
			continue
		}
		current[int32(idx)] = pod
	}
	replicas := make([]int32, 0, len(current))
	for i := range current {
		replicas = append(replicas, i)
	}
	slices.Sort(replicas)
	for _, i := range replicas {
		k, wait := planReplicaOOM(bs, i, current[i], reports, now)
		if k != nil {
			tell = append(tell, *k)
		}
		if wait > 0 && (requeueAfter == 0 || wait < requeueAfter) {
			requeueAfter = wait
		}
	}
	return tell, requeueAfter
}

// planReplicaOOM is planOOMKills for one replica's pod.
func planReplicaOOM(bs *controlv1alpha1.BatchSandbox, replica int32, pod *corev1.Pod, reports oomReportFunc, now time.Time) (*oomKill, time.Duration) {
	rec := oomKillOf(bs, replica)
	rep, reported := reports(pod)
	k, wait := planPodOOM(bs, rec, pod, rep, reported, now)
	// The time told until never goes back: a kill at or before it is one told already.
	if k != nil && rec != nil && k.at.Before(&rec.Time) {
		k.at = rec.Time
	}
	if k != nil {
		k.replica = replica
	}
	return k, wait
}

// planPodOOM is planReplicaOOM for the replica's pod, given its record rec (nil: none) and
// the agent's report (if reported).
func planPodOOM(bs *controlv1alpha1.BatchSandbox, rec *controlv1alpha1.OOMKillStatus, pod *corev1.Pod,
	rep nodeapi.OOMReport, reported bool, now time.Time) (*oomKill, time.Duration) {
	// told is the agent's count of this pod's kills told already: a new pod starts at 0.
	var told int64
	if rec != nil && rec.PodUID == string(pod.UID) {
		told = rec.PodOOMKills
	}
	counted := int64(0)
	if reported {
		counted = int64(rep.OOMKills)
	}
	// A container kill in the status that is no kill told already, nor older than the
	// sandbox (a pool pod's while it was idle).
	var fresh *corev1.ContainerStateTerminated
	if t := lastOOMKill(pod); t != nil && !t.FinishedAt.Before(&bs.CreationTimestamp) && (rec == nil || t.FinishedAt.After(rec.Time.Time)) {
		fresh = t
	}
	k := &oomKill{pod: pod, podKills: told, limitBytes: memoryLimit(pod)}
	if reported {
		if rep.LimitBytes > 0 {
			k.limitBytes = int64(rep.LimitBytes)
		}
		k.peakBytes = int64(rep.PeakBytes)
	}
	if counted > told {
		k.processes, k.podKills = counted-told, counted
		k.at = metav1.NewTime(rep.Timestamp).Rfc3339Copy()
		if fresh == nil || !fresh.FinishedAt.After(rep.Timestamp) {
			// The container's kill came before the sample: it is among those counted.
			if fresh != nil {
				k.containerID = fresh.ContainerID
				if k.at.Before(&fresh.FinishedAt) {
					k.at = fresh.FinishedAt
				}
			}
			return k, 0
		}
	}
	if fresh == nil {
		return nil, 0
	}
	if deadline := fresh.FinishedAt.Add(agentWait); now.Before(deadline) && !podDone(pod) {
		if k.processes > 0 {
			// The count grew for earlier kills: those are told now, the container's waits.
			return k, deadline.Sub(now)
		}
		return nil, deadline.Sub(now)
	}
	// Told from the status: the agent did not count it in time, or never will (it forgets a
	// pod that failed). It counts as one of the pod's kills, so that the agent's later count
	// of it is no news.
	k.containerID, k.podKills = fresh.ContainerID, k.podKills+1
	if k.processes > 0 {
		k.processes++
	}
	if !reported || rep.Timestamp.Before(fresh.FinishedAt.Time) {
		k.peakBytes = 0 // a sample before the kill: not its peak
	}
	k.at = fresh.FinishedAt
	return k, 0
}

// podDone tells whether the pod ended: the node agent forgets it, and counts nothing more.
func podDone(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// oomResult is what a reconcile found of OOM kills: those to tell now.
type oomResult struct {
	tell []oomKill
	// requeueAfter > 0: a container kill waits for the node agent's count.
	requeueAfter time.Duration
}

// oomKills says which node agents' streams the sandbox needs (those of its pods' nodes), and
// finds the kills to tell (planOOMKills) from their latest reports.
func (r *Reconciler) oomKills(obs *observed) *oomResult {
	reports := func(*corev1.Pod) (nodeapi.OOMReport, bool) { return nodeapi.OOMReport{}, false }
	if r.OOMs != nil {
		reports = func(pod *corev1.Pod) (nodeapi.OOMReport, bool) { return r.OOMs.Report(pod.Status.HostIP, pod.UID) }
	}
	tell, requeueAfter := planOOMKills(obs, reports, r.now())
	if len(tell) == 0 && requeueAfter == 0 {
		return nil
	}
	return &oomResult{tell: tell, requeueAfter: requeueAfter}
}

// syncOOMNodes tells the OOM watcher the node addresses of the sandbox's pods (none once it
// has none).
func (r *Reconciler) syncOOMNodes(bs *controlv1alpha1.BatchSandbox, pods []corev1.Pod) {
	if r.OOMs == nil {
		return
	}
	var addrs []string
	for i := range pods {
		if pods[i].DeletionTimestamp == nil && pods[i].Status.HostIP != "" && !slices.Contains(addrs, pods[i].Status.HostIP) {
			addrs = append(addrs, pods[i].Status.HostIP)
		}
	}
	r.OOMs.Sync(types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}, addrs)
}

// applyOOMKills records the kills told now in status.oomKills, sets the condition OOMKilled
// from the records (the latest kill of all), and returns the Events of the kills, one each, in
// replica order. It is idempotent: with nothing to tell, the records and the condition stay.
func applyOOMKills(bs *controlv1alpha1.BatchSandbox, status *controlv1alpha1.BatchSandboxStatus, res *oomResult) []sandboxEvent {
	records := map[int32]controlv1alpha1.OOMKillStatus{}
	for _, rec := range bs.Status.OOMKills {
		records[rec.Replica] = rec
	}
	var events []sandboxEvent
	if res != nil {
		for _, k := range res.tell {
			n := int32(k.processes)
			if n == 0 {
				n = 1
			}
			rec := controlv1alpha1.OOMKillStatus{Replica: k.replica, Pod: k.pod.Name, PodUID: string(k.pod.UID), ContainerID: k.containerID,
				Time: k.at, Processes: int32(k.processes), Count: records[k.replica].Count + n, PodOOMKills: k.podKills,
				LimitBytes: k.limitBytes, PeakBytes: k.peakBytes}
			records[k.replica] = rec
			events = append(events, sandboxEvent{eventType: corev1.EventTypeWarning, reason: controlv1alpha1.ReasonOOMKilled,
				action: "Observe", message: oomText(rec)})
		}
	}
	if len(records) == 0 {
		return nil
	}
	status.OOMKills = make([]controlv1alpha1.OOMKillStatus, 0, len(records))
	var total int32
	for _, rec := range records {
		status.OOMKills = append(status.OOMKills, rec)
		total += rec.Count
	}
	sort.Slice(status.OOMKills, func(a, b int) bool { return status.OOMKills[a].Replica < status.OOMKills[b].Replica })
	latest := status.OOMKills[0]
	for _, rec := range status.OOMKills[1:] {
		if latest.Time.Before(&rec.Time) {
			latest = rec
		}
	}
	msg := oomText(latest)
	if total > max(latest.Processes, 1) {
		msg += fmt.Sprintf(" (%d OOM kills in all)", total)
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: controlv1alpha1.ConditionOOMKilled, Status: metav1.ConditionTrue,
		ObservedGeneration: bs.Generation, Reason: controlv1alpha1.ReasonOOMKilled, Message: msg})
	return events
}

// oomText tells of a kill, for the Event and the condition: "replica 0 (pod p) was OOM-killed
// at T" when its container died, "replica 0 (pod p): the OOM killer ended a process by T"
// when it lived on (T is then the sample that counted it), with the number of processes when
// more than one died, the limit and the peak.
func oomText(rec controlv1alpha1.OOMKillStatus) string {
	limit, peak := "no memory limit", "peak unknown"
	if rec.LimitBytes > 0 {
		limit = "memory limit " + formatBytes(rec.LimitBytes)
	}
	if rec.PeakBytes > 0 {
		peak = "peak " + formatBytes(rec.PeakBytes)
	}
	at := rec.Time.UTC().Format(time.RFC3339)
	var what string
	switch {
	case rec.ContainerID != "" && rec.Processes > 1:
		what = fmt.Sprintf("replica %d (pod %s) was OOM-killed at %s, %d processes with it", rec.Replica, rec.Pod, at, rec.Processes)
	case rec.ContainerID != "":
		what = fmt.Sprintf("replica %d (pod %s) was OOM-killed at %s", rec.Replica, rec.Pod, at)
	case rec.Processes > 1:
		what = fmt.Sprintf("replica %d (pod %s): the OOM killer ended %d processes by %s", rec.Replica, rec.Pod, rec.Processes, at)
	default:
		what = fmt.Sprintf("replica %d (pod %s): the OOM killer ended a process by %s", rec.Replica, rec.Pod, at)
	}
	return what + ": " + limit + ", " + peak
}

// taskOOMKill tells, for a replica's task (tasks.Observation.OOMKill), of the OOM kill that
// ended the container its last attempt ran in ("OOM-killed at T, memory limit 256Mi"); "" if
// the container did not end so. pod is the replica's pod, if the task ran there
// (prev.PodUID): a container that restarted has the kill as its last state, that of a pod
// that failed as its state. The peak is left to the Event: the task's end does not wait for
// the node agent.
func taskOOMKill(bs *controlv1alpha1.BatchSandbox, prev *controlv1alpha1.TaskStatus, pod *corev1.Pod) string {
	if pod == nil || prev == nil || prev.PodUID != string(pod.UID) {
		return ""
	}
	cs := sandboxContainerStatus(pod)
	if cs == nil {
		return ""
	}
	t := oomKilled(cs.LastTerminationState.Terminated)
	if !usableForTasks(pod) {
		t = oomKilled(cs.State.Terminated)
	}
	if t == nil || t.FinishedAt.Before(&bs.CreationTimestamp) {
		return ""
	}
	msg := "OOM-killed at " + t.FinishedAt.UTC().Format(time.RFC3339)
	if limit := memoryLimit(pod); limit > 0 {
		msg += ", memory limit " + formatBytes(limit)
	}
	return msg
}

// formatBytes writes a size in binary units, as a limit is written: 256Mi, 1.5Gi, 255.3Mi.
func formatBytes(b int64) string {
	const ki, mi, gi = 1 << 10, 1 << 20, 1 << 30
	switch {
	case b >= gi && b%gi == 0:
		return fmt.Sprintf("%dGi", b/gi)
	case b >= gi:
		return fmt.Sprintf("%.1fGi", float64(b)/gi)
	case b >= mi && b%mi == 0:
		return fmt.Sprintf("%dMi", b/mi)
	case b >= mi:
		return fmt.Sprintf("%.1fMi", float64(b)/mi)
	case b >= ki:
		return fmt.Sprintf("%dKi", b/ki)
	}
	return strconv.FormatInt(b, 10)
}

// oomKillOf is replica's record in status.oomKills, or nil.
func oomKillOf(bs *controlv1alpha1.BatchSandbox, replica int32) *controlv1alpha1.OOMKillStatus {
	for i := range bs.Status.OOMKills {
		if bs.Status.OOMKills[i].Replica == replica {
			return &bs.Status.OOMKills[i]
		}
	}
	return nil
}
