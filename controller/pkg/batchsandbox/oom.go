package batchsandbox

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeclient"
)

// OOM kills.
//
// A replica's sandbox container that the kernel's OOM killer ends is told of once: a Warning
// Event (OOMKilled) on the Sandbox, the condition OOMKilled with the latest kill, and, when the
// replica runs a task, the reason of the attempt that died with the container. What was told is
// recorded in status.oomKills, one entry per replica, so that neither another reconcile nor a
// restarted controller tells it again.
//
// The kill is read from the pod's status, which the controller watches anyway: the sandbox
// container's state or lastState terminated with reason OOMKilled. What that covers:
//   - runc on cgroup v2: the kubelet makes each container's cgroup one OOM group
//     (memory.oom.group), so a process that runs out of memory takes the whole container, execd
//     and every process with it; the container restarts, its lastState OOMKilled.
//   - gVisor: the kernel kills the sentry, which holds the memory of every process of the
//     sandbox; the pod sandbox is made again (with a new IP), and the container's lastState is
//     OOMKilled (seen on the local cluster, cgroup v1 and containerd 1.6).
//   - runc on cgroup v1 (no OOM groups): only the largest process dies, execd lives on, and the
//     pod's status says nothing until the container ends for whatever reason, which containerd
//     then calls OOMKilled (it remembers the kill), at the time of that end. Such a kill is
//     told only then; the node agent's oom_kill counter (PodStats.Memory.OOMKills) would tell
//     it at once.
//
// The peak is the pod cgroup's (PodStats.Memory.PeakBytes), which outlives the container's
// restart. The node agent answers from its last sample: a sample read before the kill does not
// hold the peak, so the kill waits for the next sample (a deadline, not a poll), and is told
// without a peak when the agent does not answer or after maxPeakWait.

const (
	// peakTimeout bounds the question to the node agent: a kill is told without its peak
	// rather than late.
	peakTimeout = 2 * time.Second
	// peakSampleMargin is added to the agent's next sample time: the read of a node's pods
	// takes a moment.
	peakSampleMargin = time.Second
	// maxPeakWait is how long after a kill it waits for a sample that holds the peak: two of
	// the agent's sample intervals, so that one missed sample does not lose the peak.
	maxPeakWait = 2 * nodeapi.SampleInterval
)

// PodStatsReader reads a pod's usage from the node agent of its node (nodeclient.Stats).
type PodStatsReader interface {
	Pod(ctx context.Context, hostIP, uid string) (*nodeapi.PodStats, error)
}

var _ PodStatsReader = &nodeclient.Stats{}

// oomKill is an OOM kill of a replica's sandbox container, as its pod's status tells it.
type oomKill struct {
	replica int32
	pod     *corev1.Pod
	// containerID and at (the container's finishedAt) identify the kill.
	containerID string
	at          metav1.Time
	// limitBytes is the container's memory limit, else the pod's; 0: none.
	limitBytes int64
}

// peakAnswer is what the node agent answered for the pod of a kill.
type peakAnswer struct {
	stats *nodeapi.PodStats
	err   error
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

// planOOMKills is the OOM kills the status has not told of yet, in replica order: of each
// replica, the latest its pods tell of, if it is neither the one status.oomKills holds nor
// older. Not counted: a pod being deleted (its container's end is the deletion's), and a kill
// before the sandbox existed (a pool pod's while it was idle).
func planOOMKills(obs *observed) []oomKill {
	bs := obs.bs
	latest := map[int32]oomKill{}
	for i := range obs.pods {
		pod := &obs.pods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		idx, err := strconv.ParseInt(pod.Labels[controlv1alpha1.LabelReplica], 10, 32)
		if err != nil || idx < 0 {
			continue
		}
		t := lastOOMKill(pod)
		if t == nil || t.FinishedAt.Before(&bs.CreationTimestamp) {
			continue
		}
		if prev, ok := latest[int32(idx)]; ok && !prev.at.Before(&t.FinishedAt) {
			continue
		}
		latest[int32(idx)] = oomKill{replica: int32(idx), pod: pod, containerID: t.ContainerID, at: t.FinishedAt, limitBytes: memoryLimit(pod)}
	}
	var fresh []oomKill
	for i, k := range latest {
		if rec := oomKillOf(bs, i); rec != nil && (rec.ContainerID == k.containerID || k.at.Before(&rec.Time)) {
			continue // told already; or older than what was (a replaced pod's)
		}
		fresh = append(fresh, k)
	}
	sort.Slice(fresh, func(a, b int) bool { return fresh[a].replica < fresh[b].replica })
	return fresh
}

// planPeaks says, given the node agent's answers for the pods of the fresh kills, which kills
// are told now, with their peak (by replica; 0: unknown), and when to look again for those
// that wait for the agent's next sample (0: none waits):
//   - no answer (an error, a pod the agent does not know, no memory figure): told without;
//   - a sample read after the kill: told with its peak;
//   - a sample read before the kill: the kill waits for the next sample, but no longer than
//     maxPeakWait after the kill, and is then told without.
func planPeaks(fresh []oomKill, answers map[int32]peakAnswer, now time.Time) (tell []oomKill, peaks map[int32]int64, requeueAfter time.Duration) {
	peaks = map[int32]int64{}
	for _, k := range fresh {
		a := answers[k.replica]
		if a.err != nil || a.stats == nil || a.stats.Memory == nil || a.stats.Memory.PeakBytes == 0 {
			tell = append(tell, k)
			continue
		}
		// finishedAt has whole seconds: the kill came before the second after it. A sample
		// with no time (against the contract) is taken as it is.
		if a.stats.Timestamp.IsZero() || !a.stats.Timestamp.Before(k.at.Add(time.Second)) {
			peaks[k.replica] = int64(a.stats.Memory.PeakBytes)
			tell = append(tell, k)
			continue
		}
		deadline := k.at.Add(maxPeakWait)
		if !now.Before(deadline) {
			tell = append(tell, k)
			continue
		}
		next := a.stats.Timestamp.Add(nodeapi.SampleInterval + peakSampleMargin)
		if next.After(deadline) || !next.After(now) {
			next = deadline
		}
		if d := next.Sub(now); requeueAfter == 0 || d < requeueAfter {
			requeueAfter = d
		}
	}
	return tell, peaks, requeueAfter
}

// oomResult is what a reconcile found of OOM kills: those to tell now, with their peaks.
type oomResult struct {
	tell  []oomKill
	peaks map[int32]int64
	// requeueAfter > 0: a kill waits for the node agent's next sample.
	requeueAfter time.Duration
}

// oomKills finds the kills to tell (planOOMKills) and asks the node agent of each one's pod
// for the peak (planPeaks).
func (r *Reconciler) oomKills(ctx context.Context, obs *observed) *oomResult {
	fresh := planOOMKills(obs)
	if len(fresh) == 0 {
		return nil
	}
	answers := r.readPeaks(ctx, fresh)
	tell, peaks, requeueAfter := planPeaks(fresh, answers, r.now())
	return &oomResult{tell: tell, peaks: peaks, requeueAfter: requeueAfter}
}

// readPeaks asks the node agent of each kill's pod for the pod's usage, a few at once.
func (r *Reconciler) readPeaks(ctx context.Context, kills []oomKill) map[int32]peakAnswer {
	stats := r.podStats()
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, parallelWrites)
		out = make(map[int32]peakAnswer, len(kills))
	)
	for _, k := range kills {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, peakTimeout)
			defer cancel()
			var a peakAnswer
			if k.pod.Status.HostIP == "" {
				a.err = fmt.Errorf("pod %s has no node address", k.pod.Name)
			} else {
				a.stats, a.err = stats.Pod(ctx, k.pod.Status.HostIP, string(k.pod.UID))
			}
			if a.err != nil {
				log.FromContext(ctx).V(2).Info("no peak for an OOM kill", "pod", k.pod.Name, "replica", k.replica, "err", a.err)
			}
			mu.Lock()
			defer mu.Unlock()
			out[k.replica] = a
		})
	}
	wg.Wait()
	return out
}

// podStats is the PodStatsReader, made once with the Authority's credentials unless given.
func (r *Reconciler) podStats() PodStatsReader {
	if r.Stats != nil {
		return r.Stats
	}
	r.statsOnce.Do(func() {
		r.defaultStats = &nodeclient.Stats{Client: &http.Client{Timeout: peakTimeout,
			// A kill is rare: one idle connection per node is plenty.
			Transport: nodeclient.NewTransport(r.Authority, peakTimeout, 1)}}
	})
	return r.defaultStats
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
			rec := controlv1alpha1.OOMKillStatus{Replica: k.replica, Pod: k.pod.Name, ContainerID: k.containerID, Time: k.at,
				Count: records[k.replica].Count + 1, LimitBytes: k.limitBytes, PeakBytes: res.peaks[k.replica]}
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
	if total > 1 {
		msg += fmt.Sprintf(" (%d OOM kills in all)", total)
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: controlv1alpha1.ConditionOOMKilled, Status: metav1.ConditionTrue,
		ObservedGeneration: bs.Generation, Reason: controlv1alpha1.ReasonOOMKilled, Message: msg})
	return events
}

// oomText tells of a kill, for the Event and the condition.
func oomText(rec controlv1alpha1.OOMKillStatus) string {
	limit, peak := "no memory limit", "peak unknown"
	if rec.LimitBytes > 0 {
		limit = "memory limit " + formatBytes(rec.LimitBytes)
	}
	if rec.PeakBytes > 0 {
		peak = "peak " + formatBytes(rec.PeakBytes)
	}
	return fmt.Sprintf("replica %d (pod %s) was OOM-killed at %s: %s, %s", rec.Replica, rec.Pod, rec.Time.UTC().Format(time.RFC3339), limit, peak)
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
