package batchsandbox

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/shard"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/snapshot"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/tasks"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// The pure half of a reconcile: given what was observed, what to do. Nothing here calls a
// client, reads the clock or records an Event, so that each mode's rules can be tested case by
// case (plan_*_test.go); the reconciler observes, calls a plan and does what it says
// (reconciler.go for direct mode, pooled.go, pause.go, tasks.go).

// observed is what a reconcile saw of a sandbox before it acted.
type observed struct {
	bs *controlv1alpha1.BatchSandbox
	// pods are the pods the sandbox controls (listPods). Which of them is a replica's is the
	// plan's to say: the rules differ by mode.
	pods []corev1.Pod
	// pool is the Pool of a pooled sandbox that resumed from its snapshots (direct mode), whose
	// pods are made from the pool's template; nil for the others, or when the cache has no
	// such pool.
	pool *controlv1alpha1.Pool
	// snapshotRepo is the sandbox's repository in the snapshot registry
	// (snapshot.Registry.Repository), "" when no snapshot registry is set up; snapshotMaxBytes
	// bounds a replica's layer of changes (0: the snapshotter's own limit).
	snapshotRepo     string
	snapshotMaxBytes int64
}

// sandboxEvent is an Event a plan records about the sandbox, on its Sandbox
// (sandboxevents.SandboxRef).
type sandboxEvent struct {
	eventType, reason, action, message string
}

// removal is a pod that a plan takes from the sandbox.
type removal struct {
	pod *corev1.Pod
	// why is logged with a release.
	why string
	// surplus: a direct-mode pod of no replica (after a scale-down, or with a label tampered
	// with), deleted as such: a deletion that fails fails the reconcile. Any other pod is
	// released (release), which only logs a failure: the next reconcile tries again.
	surplus bool
	// event is recorded just before the pod goes; nil: none.
	event *sandboxEvent
}

// newPod is a direct-mode replica without a pod: the pod is made from template, or, when
// problem is set, is not made and problem is reported.
type newPod struct {
	replica  int32
	template *corev1.PodTemplateSpec
	problem  *sandboxpod.Problem
}

// directPlan is what a direct-mode reconcile does before the pods are served (serve).
type directPlan struct {
	// remove, in this order.
	remove []removal
	// byReplica are the replicas' pods that stay: a failed one stays until it is gone, and its
	// replica then gets a pod of the same name.
	byReplica map[int32]*corev1.Pod
	// create, in replica order.
	create []newPod
}

// planDirect keeps one pod per replica, from the template (or, resumed, from the replica's
// snapshot):
//   - a pod of no replica (an index out of range, a name not the replica's) is deleted;
//   - a failed pod is released, with a PodLost Event, unless its replica's task has ended;
//   - with taskResourcePolicyWhenCompleted: Release, the pods of replicas whose task ended go;
//   - every other replica without a pod gets one, but those whose task ended.
func planDirect(obs *observed) directPlan {
	bs := obs.bs
	desired := replicas(bs)
	ended := endedReplicas(bs)
	p := directPlan{byReplica: map[int32]*corev1.Pod{}}
	for i := range obs.pods {
		pod := &obs.pods[i]
		idx, err := strconv.ParseInt(pod.Labels[controlv1alpha1.LabelReplica], 10, 32)
		if err != nil || idx < 0 || int32(idx) >= desired || pod.Name != podName(bs, int32(idx)) {
			// Surplus after a scale-down (the highest indexes), or a pod whose label was
			// tampered with.
			if pod.DeletionTimestamp == nil {
				p.remove = append(p.remove, removal{pod: pod, why: "surplus", surplus: true})
			}
			continue
		}
		if pod.Status.Phase == corev1.PodFailed && pod.DeletionTimestamp == nil && !ended[int32(idx)] {
			// Evicted, or failed for good: the replica gets a new pod (of the same name, once
			// this one is gone, which brings the next reconcile).
			p.remove = append(p.remove, removal{pod: pod, why: "failed: " + pod.Status.Reason, event: &sandboxEvent{
				eventType: corev1.EventTypeWarning, reason: controlv1alpha1.ReasonPodLost, action: "Replace",
				message: fmt.Sprintf("pod %s of replica %d failed (%s %s); replacing it", pod.Name, idx, pod.Status.Reason, pod.Status.Message),
			}})
		}
		p.byReplica[int32(idx)] = pod
	}
	p.remove = append(p.remove, removeEnded(bs, ended, p.byReplica)...)
	for i := int32(0); i < desired; i++ {
		if _, ok := p.byReplica[i]; ok || ended[i] {
			continue
		}
		tmpl, problem := replicaTemplate(bs, obs.pool, obs.snapshotRepo, i)
		p.create = append(p.create, newPod{replica: i, template: tmpl, problem: problem})
	}
	return p
}

// pooledPlan is what a pooled reconcile does before it allocates and serves the pods.
type pooledPlan struct {
	desired int32
	ended   map[int32]bool
	// remove are released, in this order.
	remove []removal
	// byReplica are the replicas' pods that stay.
	byReplica map[int32]*corev1.Pod
	// missing are the replicas that need a pod of the pool, in order.
	missing []int32
}

// planPooled keeps one pod of the pool per replica:
//   - a pod of no replica (surplus after a scale-down) is released;
//   - a pod being deleted counts for nothing: its replica gets another pod now, not after the
//     grace period;
//   - a failed pod is released, and its replica gets another;
//   - of two pods of one replica (only two controllers running at once can do that), the
//     ready one stays, or the first by name;
//   - with taskResourcePolicyWhenCompleted: Release, the pods of replicas whose task ended go;
//   - every other replica without a pod is missing one, but those whose task ended.
func planPooled(obs *observed) pooledPlan {
	bs := obs.bs
	p := pooledPlan{desired: replicas(bs), ended: endedReplicas(bs), byReplica: map[int32]*corev1.Pod{}}
	for i := range obs.pods {
		pod := &obs.pods[i]
		idx, err := strconv.ParseInt(pod.Labels[controlv1alpha1.LabelReplica], 10, 32)
		switch {
		case err != nil || idx < 0 || int32(idx) >= p.desired:
			p.remove = appendRelease(p.remove, pod, "surplus after a scale-down") // and its replica needs no pod
		case pod.DeletionTimestamp != nil:
			// Going: the replica gets another pod now, not after the grace period.
		case pod.Status.Phase == corev1.PodFailed:
			p.remove = appendRelease(p.remove, pod, "failed: "+pod.Status.Reason)
		default:
			if prev, ok := p.byReplica[int32(idx)]; ok {
				// Two pods for one replica: only two controllers running at once can do that.
				// Keep one, deterministically.
				keep, drop := prev, pod
				if sandboxpod.Ready(pod) && !sandboxpod.Ready(prev) || sandboxpod.Ready(pod) == sandboxpod.Ready(prev) && pod.Name < prev.Name {
					keep, drop = pod, prev
				}
				p.byReplica[int32(idx)] = keep
				p.remove = appendRelease(p.remove, drop, "a second pod of the same replica")
				continue
			}
			p.byReplica[int32(idx)] = pod
		}
	}
	p.remove = append(p.remove, removeEnded(bs, p.ended, p.byReplica)...)
	for i := int32(0); i < p.desired; i++ {
		if _, ok := p.byReplica[i]; !ok && !p.ended[i] {
			p.missing = append(p.missing, i)
		}
	}
	return p
}

// appendRelease appends the release of pod, unless it is being deleted already.
func appendRelease(rm []removal, pod *corev1.Pod, why string) []removal {
	if pod.DeletionTimestamp != nil {
		return rm
	}
	return append(rm, removal{pod: pod, why: why})
}

// removeEnded takes from byReplica the pods of replicas whose ended task the status records,
// with taskResourcePolicyWhenCompleted: Release, and returns their releases, in replica order.
func removeEnded(bs *controlv1alpha1.BatchSandbox, ended map[int32]bool, byReplica map[int32]*corev1.Pod) []removal {
	if !releases(bs) {
		return nil
	}
	idx := make([]int32, 0, len(ended))
	for i := range ended {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	var out []removal
	for _, i := range idx {
		p, ok := byReplica[i]
		if !ok {
			continue
		}
		out = appendRelease(out, p, "its task ended (taskResourcePolicyWhenCompleted: Release)")
		delete(byReplica, i)
	}
	return out
}

// lostEvents are the Events of the replicas whose pod the status listed and that is gone or
// replaced, byReplica being the pods after allocation. The status then forgets that pod, so
// each loss is told once.
func lostEvents(bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, desired int32, ended map[int32]bool) []sandboxEvent {
	var out []sandboxEvent
	for _, st := range bs.Status.Pods {
		if st.Replica >= desired || ended[st.Replica] {
			continue
		}
		p, ok := byReplica[st.Replica]
		switch {
		case !ok:
			out = append(out, sandboxEvent{eventType: corev1.EventTypeWarning, reason: controlv1alpha1.ReasonPodLost, action: "Replace",
				message: fmt.Sprintf("pod %s of replica %d is gone or failed; waiting for another pod of the pool", st.Name, st.Replica)})
		case p.Name != st.Name:
			out = append(out, sandboxEvent{eventType: corev1.EventTypeWarning, reason: controlv1alpha1.ReasonPodLost, action: "Replace",
				message: fmt.Sprintf("pod %s of replica %d is gone or failed; replaced by %s", st.Name, st.Replica, p.Name)})
		}
	}
	return out
}

// egressEligible are the replicas whose pods are pushed the sandbox's policy: those with an
// address; with claimFirst (pooled mode), a pool pod only once it is claimed, for it gets the
// policy at its claim. A pod of a pooled sandbox's own (resumed from a snapshot) is eligible as
// soon as it has an address, for its init container waits for the policy.
func egressEligible(byReplica map[int32]*corev1.Pod, claimed map[int32]string, claimFirst bool) map[int32]string {
	eligible := make(map[int32]string, len(byReplica))
	for i, p := range byReplica {
		if p.Status.PodIP != "" {
			eligible[i] = p.Status.PodIP
		}
	}
	if claimFirst {
		for i, p := range byReplica {
			if p.Labels[controlv1alpha1.LabelPool] != "" && claimed[i] == "" {
				delete(eligible, i)
			}
		}
	}
	return eligible
}

// pausePlan is the first half of a pausing reconcile: which pods go at once, and what becomes
// of each replica's pod. The snapshots' state then decides the rest (planPaused).
type pausePlan struct {
	// remove are the surplus pods, released at once.
	remove []removal
	// going counts the pods on their way out: being deleted, or surplus.
	going int
	// byReplica are the replicas' pods.
	byReplica map[int32]*corev1.Pod
	// steps, in replica order, one per pod of byReplica.
	steps []pauseStep
	// noPodLeft: the sandbox has no pod any more; it is Paused.
	noPodLeft bool
}

// pauseStep is what becomes of a replica's pod while the sandbox pauses.
type pauseStep struct {
	replica int32
	pod     *corev1.Pod
	// snapshot is the snapshot to take of the pod (snapshot.Runner); nil: the pod goes without
	// one, for its snapshot is in the status already, or nothing ran there.
	snapshot *nodeapi.SnapshotRequest
}

// planPause is the first half of a pause: every replica's pod is snapshotted, unless the status
// has its snapshot already or nothing ran there (still starting, or failed: the replica keeps
// the snapshot it had, if any); surplus pods go at once.
func planPause(obs *observed) pausePlan {
	bs := obs.bs
	desired := replicas(bs)
	p := pausePlan{byReplica: map[int32]*corev1.Pod{}}
	for i := range obs.pods {
		pod := &obs.pods[i]
		idx, err := strconv.ParseInt(pod.Labels[controlv1alpha1.LabelReplica], 10, 32)
		switch {
		case pod.DeletionTimestamp != nil:
			p.going++
		case err != nil || idx < 0 || int32(idx) >= desired:
			p.remove = appendRelease(p.remove, pod, "surplus after a scale-down")
			p.going++
		default:
			p.byReplica[int32(idx)] = pod
		}
	}
	idx := make([]int32, 0, len(p.byReplica))
	for i := range p.byReplica {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	snaps := map[int32]controlv1alpha1.SnapshotStatus{}
	for _, sn := range bs.Status.Snapshots {
		snaps[sn.Replica] = sn
	}
	for _, i := range idx {
		pod := p.byReplica[i]
		step := pauseStep{replica: i, pod: pod}
		if sn, ok := snaps[i]; ok && sn.PodUID == string(pod.UID) {
			p.steps = append(p.steps, step) // its snapshot is in the status already
			continue
		}
		if pod.Status.Phase != corev1.PodRunning || len(pod.Spec.Containers) == 0 {
			p.steps = append(p.steps, step) // nothing ran there: there is nothing to keep
			continue
		}
		step.snapshot = &nodeapi.SnapshotRequest{
			PodUID: string(pod.UID), Namespace: pod.Namespace, Pod: pod.Name, Container: pod.Spec.Containers[0].Name,
			Image:    obs.snapshotRepo + ":" + snapshot.Tag(bs.UID, i, pod.UID),
			MaxBytes: obs.snapshotMaxBytes,
		}
		p.steps = append(p.steps, step)
	}
	p.noPodLeft = len(p.byReplica) == 0 && p.going == 0
	return p
}

// snapshotJob is what the Runner answered for a replica's snapshot: the job, or why it could
// not start one.
type snapshotJob struct {
	job snapshot.Job
	err error
}

// pausedPlan is the second half of a pausing reconcile.
type pausedPlan struct {
	status controlv1alpha1.BatchSandboxStatus
	// events are recorded before the status is written.
	events []sandboxEvent
	// forget are the pods whose failed snapshot is due again: the Runner forgets their job, so
	// that the next Ensure starts another.
	forget []types.UID
	// release are the pods that go once the status holds their snapshots, in replica order.
	release []*corev1.Pod
	// replaced are the snapshots of replicas paused again: no longer anyone's, they are
	// deleted from the registry after the status write.
	replaced []controlv1alpha1.SnapshotStatus
	// requeueAfter > 0: look again that soon (a snapshot to start or to take again).
	requeueAfter time.Duration
}

// planPaused is the second half of a pause, given the Runner's jobs of the replicas whose
// snapshot planPause asked for, and egress, the EgressReady condition of a sandbox with no pod
// left (pausedEgress). now is the reconciler's clock; wall is the real clock, which the Runner
// stamps its jobs with.
//   - a snapshot taken goes into the status, replacing the replica's earlier one, and the pod
//     goes once the status holds it;
//   - a snapshot under way (or one that could not start yet) keeps the pod: the sandbox is
//     Pausing, with each replica's stage;
//   - a snapshot that failed keeps the pod, and the phase the pods give: the Paused condition
//     says why, the first failure is an Event, and it is taken again SnapshotRetryDelay after
//     it failed;
//   - with no pod left the sandbox is Paused, and that is an Event when it becomes so.
func planPaused(obs *observed, p pausePlan, jobs map[int32]snapshotJob, egress *metav1.Condition, now, wall time.Time) pausedPlan {
	bs := obs.bs
	var out pausedPlan
	paused := metav1.Condition{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionFalse, ObservedGeneration: bs.Generation}
	var failed *metav1.Condition
	snaps := map[int32]controlv1alpha1.SnapshotStatus{}
	for _, sn := range bs.Status.Snapshots {
		snaps[sn.Replica] = sn
	}
	var stages []string
	requeueIn := func(d time.Duration) {
		if out.requeueAfter == 0 || d < out.requeueAfter {
			out.requeueAfter = d
		}
	}
	for _, s := range p.steps {
		i, pod := s.replica, s.pod
		if s.snapshot == nil {
			out.release = append(out.release, pod)
			continue
		}
		j := jobs[i]
		if j.err != nil {
			// Not the leader's runner yet: try again in a moment.
			requeueIn(time.Second)
			stages = append(stages, fmt.Sprintf("replica %d: waiting to start", i))
			continue
		}
		job := j.job
		switch {
		case !job.Done:
			stage := job.Stage
			if stage == "" {
				stage = "Starting"
			}
			stages = append(stages, fmt.Sprintf("replica %d: %s", i, stage))
		case job.Err != nil:
			reason := controlv1alpha1.ReasonSnapshotFailed
			var f *snapshot.Failed
			if errors.As(job.Err, &f) && (f.Reason == nodeapi.ReasonRegistryUnavailable || f.Reason == nodeapi.ReasonRegistryUnauthorized) {
				reason = controlv1alpha1.ReasonRegistryUnavailable
			}
			if failed == nil {
				failed = &metav1.Condition{Reason: reason,
					Message: fmt.Sprintf("replica %d (pod %s): %v; the pod is kept, and the snapshot is taken again in %s", i, pod.Name, job.Err, SnapshotRetryDelay)}
				out.events = append(out.events, sandboxEvent{eventType: corev1.EventTypeWarning, reason: reason, action: "Pause", message: failed.Message})
			}
			if left := SnapshotRetryDelay - wall.Sub(job.Finished); left > 0 {
				requeueIn(left)
			} else {
				out.forget = append(out.forget, pod.UID)
				requeueIn(time.Millisecond)
			}
		default:
			res := job.Result
			sn := controlv1alpha1.SnapshotStatus{
				Replica: i, Image: snapshot.ByDigest(res.Image, res.Digest), Tag: res.Image, Digest: res.Digest,
				Size: res.Size, LayerSize: res.LayerSize, BaseImage: res.BaseImage,
				CreationTime: metav1.NewTime(res.Created), Pod: pod.Name, PodUID: string(pod.UID),
			}
			if sn.CreationTime.IsZero() {
				sn.CreationTime = metav1.NewTime(now)
			}
			if old, ok := snaps[i]; ok && old.Digest != sn.Digest {
				out.replaced = append(out.replaced, old)
			}
			snaps[i] = sn
			out.release = append(out.release, pod)
		}
	}

	status, _ := computeStatus(bs, p.byReplica, claimedNow(bs, p.byReplica), nil, nil)
	status.Snapshots = status.Snapshots[:0:0]
	for _, sn := range snaps {
		status.Snapshots = append(status.Snapshots, sn)
	}
	sort.Slice(status.Snapshots, func(a, b int) bool { return status.Snapshots[a].Replica < status.Snapshots[b].Replica })
	ready := metav1.Condition{Type: controlv1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: bs.Generation}
	switch {
	case failed != nil:
		// The pods stay, and so does the phase the pods give: a sandbox whose snapshot failed
		// is as usable as before.
		paused.Reason, paused.Message = failed.Reason, failed.Message
	case p.noPodLeft:
		status.Phase = controlv1alpha1.PhasePaused
		paused.Status, paused.Reason = metav1.ConditionTrue, controlv1alpha1.ReasonPaused
		paused.Message = fmt.Sprintf("paused: %d replica(s) in snapshots, no pod left", len(status.Snapshots))
		ready.Reason, ready.Message = controlv1alpha1.ReasonPaused, "the sandbox is paused; set spec.paused to false to resume it"
		meta.SetStatusCondition(&status.Conditions, ready)
		if egress != nil {
			meta.SetStatusCondition(&status.Conditions, *egress)
		}
	default:
		status.Phase = controlv1alpha1.PhasePausing
		paused.Reason = controlv1alpha1.ReasonPausing
		paused.Message = fmt.Sprintf("%d pod(s) left", len(p.byReplica)+p.going)
		if len(stages) > 0 {
			paused.Message += ": " + strings.Join(stages, ", ")
		}
	}
	meta.SetStatusCondition(&status.Conditions, paused)
	if status.Phase == controlv1alpha1.PhasePaused && bs.Status.Phase != controlv1alpha1.PhasePaused {
		out.events = append(out.events, sandboxEvent{eventType: corev1.EventTypeNormal, reason: controlv1alpha1.ReasonPaused, action: "Pause", message: paused.Message})
	}
	out.status = status
	return out
}

// tasksPlan is what a reconcile does with the replicas' tasks.
type tasksPlan struct {
	// tasks is the status of every desired replica's task, by replica; those of starts are
	// replaced by what the starts answer.
	tasks []controlv1alpha1.TaskStatus
	// watch are the pods whose task may run, in replica order: their task streams are opened
	// (tasks.Watcher.Ensure), and kept (keep, by UID) where the others close.
	watch []*corev1.Pod
	keep  map[types.UID]bool
	// starts are the tasks to start, in replica order.
	starts []taskStart
}

// taskStart is a task to start in a replica's pod.
type taskStart struct {
	replica int32
	pod     *corev1.Pod
	task    *controlv1alpha1.TaskTemplate
	obs     tasks.Observation
	// prev is the task's status as recorded, nil if none.
	prev *controlv1alpha1.TaskStatus
}

// planTasks moves every desired replica's task along (tasks.Next), given the replicas' pods,
// the runtime IDs of their certified (and, in pooled mode, claimed) containers, and what each
// pod's task stream said last (by pod UID):
//   - a task that ended for good stays as it is;
//   - a shard task patch that does not apply fails the replica's task (sandbox-apiserver
//     refuses such a patch; a BatchSandbox written directly may have it);
//   - a pod whose task may run (usable, or the one the task ran in) has its stream open;
//   - what tasks.Next says to start is started.
func planTasks(bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, claimed map[int32]string, contacts map[types.UID]tasks.Contact, now time.Time) tasksPlan {
	desired := replicas(bs)
	uid := string(bs.UID)
	p := tasksPlan{tasks: make([]controlv1alpha1.TaskStatus, desired), keep: map[types.UID]bool{}}
	for i := int32(0); i < desired; i++ {
		prev := taskStatusOf(bs, i)
		if prev != nil && prev.Phase.Final() {
			// Ended for good: nothing to apply a patch for, nothing to watch.
			p.tasks[i] = *prev
			continue
		}
		task, err := shard.TaskOf(bs, i)
		if err != nil {
			// sandbox-apiserver refuses such a patch; a BatchSandbox written directly may have it.
			t := metav1.NewTime(now)
			p.tasks[i] = controlv1alpha1.TaskStatus{Replica: i, Phase: controlv1alpha1.TaskFailed, Reason: controlv1alpha1.ReasonTaskStartFailed,
				Message: fmt.Sprintf("spec.shardTaskPatches[%d]: %v", i, err), FinishTime: &t}
			continue
		}
		pod := byReplica[i]
		obs := tasks.Observation{OOMKill: taskOOMKill(bs, prev, pod)}
		if usableForTasks(pod) {
			obs.Pod, obs.PodUID = pod.Name, string(pod.UID)
			rid, ok := claimed[i]
			obs.Usable = ok && rid != "" && rid == sandboxpod.RuntimeID(pod)
			if obs.Usable || prev != nil && prev.PodUID == string(pod.UID) {
				// A pod whose task may run: hear what it does.
				p.watch = append(p.watch, pod)
				p.keep[pod.UID] = true
			}
			obs.Contact = contacts[pod.UID]
		}
		st, act := tasks.Next(prev, i, uid, obs, tasks.PolicyOf(task), now)
		p.tasks[i] = st
		if act == tasks.Start {
			p.starts = append(p.starts, taskStart{replica: i, pod: pod, task: task, obs: obs, prev: prev})
		}
	}
	return p
}

// usableForTasks tells whether a replica's pod is one its task may run in: there, and neither
// going nor ended.
func usableForTasks(p *corev1.Pod) bool {
	return p != nil && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded
}

// taskStartRejected is the status of a task execd will not run as it is (a pod without tasks,
// another task): it failed, and is not tried again.
func taskStartRejected(s taskStart, err error, now time.Time) controlv1alpha1.TaskStatus {
	t := metav1.NewTime(now)
	st := controlv1alpha1.TaskStatus{Replica: s.replica, Phase: controlv1alpha1.TaskFailed,
		Pod: s.pod.Name, PodUID: string(s.pod.UID), Reason: controlv1alpha1.ReasonTaskStartFailed, Message: err.Error(), FinishTime: &t}
	if s.prev != nil {
		st.Attempts, st.StartTime = s.prev.Attempts, s.prev.StartTime
	}
	return st
}

// claimsPlan is what certifying (and claiming) the replicas' pods takes.
type claimsPlan struct {
	// claimed are the runtime IDs of the replicas whose current container the status records
	// as certified (and claimed) already.
	claimed map[int32]string
	// todo are the replicas whose ready pod runs a container not recorded yet (a new pod, or a
	// container that restarted since), in order.
	todo []int32
	// claim is what a pooled sandbox's pool pods are claimed with: the sandbox, its entrypoint
	// and env; nil in direct mode, whose pods are the sandbox's from their start.
	claim *execdapi.ClaimRequest
}

// planClaims says which replicas' pods are to be certified (and claimed), and with what claim.
// The env names execd sets itself are left out of the claim: execd refuses a claim that sets
// them, and the aggregated API refuses them, but a BatchSandbox written directly may carry
// them.
func planClaims(bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod) claimsPlan {
	p := claimsPlan{claimed: map[int32]string{}}
	for i, pod := range byReplica {
		rid := sandboxpod.RuntimeID(pod)
		if st := statusOf(bs, i); st != nil && st.Name == pod.Name && st.RuntimeID != "" && st.RuntimeID == rid {
			p.claimed[i] = rid
			continue
		}
		if sandboxpod.Ready(pod) && rid != "" {
			p.todo = append(p.todo, i)
		}
	}
	sort.Slice(p.todo, func(a, b int) bool { return p.todo[a] < p.todo[b] })
	if len(p.todo) == 0 || bs.Spec.PoolRef == nil {
		return p
	}
	p.claim = &execdapi.ClaimRequest{SandboxUID: string(bs.UID), Namespace: bs.Namespace, Name: bs.Name, Entrypoint: bs.Spec.Entrypoint}
	for _, e := range bs.Spec.Env {
		if _, reserved := execdapi.ReservedEnv(e.Name); reserved {
			continue
		}
		p.claim.Env = append(p.claim.Env, execdapi.EnvVar{Name: e.Name, Value: e.Value})
	}
	return p
}

// replicaTemplate is the pod template of replica i outside the pool: the template with the
// replica's shard patch, or the pool's template for a pooled sandbox that resumed; with the
// replica's snapshot as the sandbox container's image. snapshotRepo is the sandbox's
// repository in the snapshot registry, "" when none is set up.
func replicaTemplate(bs *controlv1alpha1.BatchSandbox, pool *controlv1alpha1.Pool, snapshotRepo string, i int32) (*corev1.PodTemplateSpec, *sandboxpod.Problem) {
	var tmpl *corev1.PodTemplateSpec
	if bs.Spec.PoolRef != nil {
		if pool == nil {
			return nil, &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPoolNotFound, Pending: true,
				Message: fmt.Sprintf("pool %q, whose template the resumed pods are made from, does not exist", bs.Spec.PoolRef.Name)}
		}
		if p := poolNotAllowed(bs, pool); p != nil {
			return nil, p
		}
		tmpl = pool.Spec.Template.DeepCopy()
		// The pod is the sandbox's own, not the pool's: nothing may count it as a pool pod.
		for _, l := range []string{controlv1alpha1.LabelPool, controlv1alpha1.LabelPoolRevision, controlv1alpha1.LabelPodSecurity} {
			delete(tmpl.Labels, l)
		}
	} else {
		var err error
		if tmpl, err = shard.PodTemplateOf(bs, i); err != nil {
			// sandbox-apiserver refuses such a patch; a BatchSandbox written directly may have it.
			return nil, &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPodCreateFailed, Message: fmt.Sprintf("spec.shardPatches[%d]: %v", i, err)}
		}
	}
	if sn := snapshotOf(bs, i); sn != nil && len(tmpl.Spec.Containers) > 0 {
		// Only this sandbox's own repository: a status written by anyone but this controller
		// (someone with rights on batchsandboxes/status) must not give it another's files.
		if snapshotRepo == "" || !strings.HasPrefix(sn.Image, snapshotRepo+"@sha256:") {
			return nil, &sandboxpod.Problem{Reason: controlv1alpha1.ReasonSnapshotFailed,
				Message: fmt.Sprintf("status.snapshots[replica %d] names %q, which is not a snapshot of this sandbox", i, sn.Image)}
		}
		tmpl = tmpl.DeepCopy()
		c := &tmpl.Spec.Containers[0]
		c.Image = sn.Image
		// By digest: what is on the node is what was pushed.
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
	return tmpl, nil
}

// poolNotAllowed says why a sandbox may not have the pool's pods, or nil: the pool refuses its
// own template, or it makes pods of the namespace's level and the sandbox was not admitted for
// those.
func poolNotAllowed(bs *controlv1alpha1.BatchSandbox, pool *controlv1alpha1.Pool) *sandboxpod.Problem {
	if c := meta.FindStatusCondition(pool.Status.Conditions, controlv1alpha1.PoolConditionReady); c != nil &&
		c.Reason == controlv1alpha1.ReasonTemplateRefused && c.ObservedGeneration == pool.Generation {
		return &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPoolNotAllowed, Pending: true,
			Message: fmt.Sprintf("pool %q refuses its own template: %s", pool.Name, c.Message)}
	}
	if pool.Spec.PodSecurity == controlv1alpha1.PodSecurityNamespace &&
		bs.Annotations[controlv1alpha1.AnnotationPodSecurity] != string(controlv1alpha1.PodSecurityNamespace) {
		return &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPoolNotAllowed, Pending: true,
			Message: fmt.Sprintf("pool %q makes pods of the namespace's pod security level (podSecurity: Namespace), which only sandboxes of users who may create pods get", pool.Name)}
	}
	return nil
}

// planStatus is the status of a sandbox reconciled as not paused (direct or pooled mode), with
// the Events it is worth: its tasks' end, and a refused pause (refused, see pauseRefused) as
// the Paused condition turns to it: once, for the refusal is checked again while it lasts.
// A sandbox no longer paused tells of its resumption (resumeStatus).
func planStatus(bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, claimed map[int32]string, tk *taskResult, failure *sandboxpod.Problem,
	refused *metav1.Condition, extra ...*metav1.Condition) (controlv1alpha1.BatchSandboxStatus, []sandboxEvent) {
	status, done := computeStatus(bs, byReplica, claimed, tk, failure, extra...)
	var events []sandboxEvent
	if done != nil {
		events = append(events, *done)
	}
	if refused == nil {
		resumeStatus(bs, &status)
		return status, events
	}
	if prev := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionPaused); prev == nil || prev.Reason != refused.Reason {
		events = append(events, sandboxEvent{eventType: corev1.EventTypeWarning, reason: refused.Reason, action: "Pause", message: refused.Message})
	}
	meta.SetStatusCondition(&status.Conditions, *refused)
	return status, events
}

// computeStatus is the status of the sandbox with these pods (see updateStatus), and the Event
// its tasks' end is worth, if any.
func computeStatus(bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, claimed map[int32]string, tk *taskResult, failure *sandboxpod.Problem, extra ...*metav1.Condition) (controlv1alpha1.BatchSandboxStatus, *sandboxEvent) {
	status := controlv1alpha1.BatchSandboxStatus{
		ObservedGeneration: bs.Generation,
		Conditions:         append([]metav1.Condition(nil), bs.Status.Conditions...),
		Snapshots:          bs.Status.Snapshots,
		OOMKills:           bs.Status.OOMKills,
	}
	idx := make([]int32, 0, len(byReplica))
	for i := range byReplica {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })

	var podProblem *sandboxpod.Problem
	for _, i := range idx {
		p := byReplica[i]
		ps := controlv1alpha1.SandboxPodStatus{Replica: i, Name: p.Name, IP: p.Status.PodIP, NodeName: p.Spec.NodeName,
			Ready: sandboxpod.Ready(p), RuntimeID: sandboxpod.RuntimeID(p)}
		if claimed != nil {
			ps.RuntimeID = claimed[i]
			ps.Ready = ps.Ready && ps.RuntimeID != "" && ps.RuntimeID == sandboxpod.RuntimeID(p)
		}
		status.Pods = append(status.Pods, ps)
		status.Replicas++
		if ps.Ready {
			status.Ready++
		}
		switch {
		case podProblem != nil:
		case p.Status.Phase == corev1.PodFailed:
			// Being replaced (direct mode; a pooled one is released at once): the replica
			// waits for its next pod, which is no failure of the sandbox.
			podProblem = &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPodLost, Pending: true,
				Message: fmt.Sprintf("pod %s of replica %d failed (%s %s) and is being replaced", p.Name, i, p.Status.Reason, p.Status.Message)}
		default:
			podProblem = sandboxpod.Failure(p)
		}
	}

	// Replicas whose task ended and whose pod was released need no pod any more.
	// Counted against the replicas the spec asks for, not against what is left of them, so
	// that the count does not depend on the order of the map.
	n := replicas(bs)
	desired := n
	for i := range endedReplicas(bs) {
		if _, ok := byReplica[i]; !ok && i < n {
			desired--
		}
	}
	cond := metav1.Condition{Type: controlv1alpha1.ConditionReady, ObservedGeneration: bs.Generation}
	switch {
	case failure != nil:
		status.Phase = controlv1alpha1.PhaseFailed
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, failure.Reason, failure.Message
		if failure.Pending {
			status.Phase = controlv1alpha1.PhasePending
		}
	case podProblem != nil:
		status.Phase = controlv1alpha1.PhaseFailed
		if podProblem.Pending {
			status.Phase = controlv1alpha1.PhasePending
		}
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, podProblem.Reason, podProblem.Message
	case status.Ready == desired:
		status.Phase = controlv1alpha1.PhaseRunning
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, controlv1alpha1.ReasonPodsReady, fmt.Sprintf("%d/%d replicas ready", status.Ready, desired)
	default:
		status.Phase = controlv1alpha1.PhasePending
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, controlv1alpha1.ReasonPodsNotReady, fmt.Sprintf("%d/%d replicas ready", status.Ready, desired)
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	for _, c := range extra {
		if c != nil {
			meta.SetStatusCondition(&status.Conditions, *c)
		}
	}
	done := applyTasks(bs, &status, tk)
	return status, done
}

// applyTasks puts the tasks' counters, conditions and phase into status, and returns the Event
// of their end when they have all ended now.
func applyTasks(bs *controlv1alpha1.BatchSandbox, status *controlv1alpha1.BatchSandboxStatus, tk *taskResult) *sandboxEvent {
	if tk == nil {
		for _, t := range []string{controlv1alpha1.ConditionTasksComplete, controlv1alpha1.ConditionTasksFailed} {
			meta.RemoveStatusCondition(&status.Conditions, t)
		}
		return nil
	}
	status.Tasks = tk.tasks
	c := tasks.Count(tk.tasks)
	status.TaskPending, status.TaskRunning, status.TaskSucceeded, status.TaskFailed, status.TaskUnknown = c.Pending, c.Running, c.Succeeded, c.Failed, c.Unknown
	desired := replicas(bs)
	complete, failed := tasks.Conditions(c, desired, bs.Generation)
	meta.SetStatusCondition(&status.Conditions, complete)
	meta.SetStatusCondition(&status.Conditions, failed)
	if complete.Status != metav1.ConditionTrue || desired == 0 {
		return nil
	}
	status.Phase = controlv1alpha1.PhaseSucceeded
	if c.Failed > 0 {
		status.Phase = controlv1alpha1.PhaseFailed
	}
	if prev := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionTasksComplete); prev != nil && prev.Status == metav1.ConditionTrue {
		return nil
	}
	if c.Failed > 0 {
		return &sandboxEvent{eventType: corev1.EventTypeWarning, reason: controlv1alpha1.ReasonTaskFailed, action: "Complete", message: complete.Message}
	}
	return &sandboxEvent{eventType: corev1.EventTypeNormal, reason: controlv1alpha1.ReasonTasksSucceeded, action: "Complete", message: complete.Message}
}

// resumeStatus makes the status of a sandbox that is not (or no longer) paused tell of its
// resumption: Resuming until its pods are ready, Resumed after. Nothing changes for a sandbox
// that never paused.
func resumeStatus(bs *controlv1alpha1.BatchSandbox, status *controlv1alpha1.BatchSandboxStatus) {
	prev := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionPaused)
	if prev == nil || bs.Spec.Paused {
		return
	}
	cond := metav1.Condition{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionFalse, ObservedGeneration: bs.Generation}
	wasPaused := bs.Status.Phase == controlv1alpha1.PhasePaused || bs.Status.Phase == controlv1alpha1.PhaseResuming
	switch {
	case status.Phase == controlv1alpha1.PhaseRunning:
		cond.Reason = controlv1alpha1.ReasonResumed
		cond.Message = fmt.Sprintf("running again, from %d snapshot(s)", len(status.Snapshots))
		if !wasPaused && prev.Reason != controlv1alpha1.ReasonResumed {
			cond.Message = "not paused: the pause was called off before it was done"
		}
	case wasPaused && status.Phase == controlv1alpha1.PhasePending:
		status.Phase = controlv1alpha1.PhaseResuming
		cond.Reason, cond.Message = controlv1alpha1.ReasonResuming, "making the replicas' pods from their snapshots"
	default:
		// Failed (an image the registry no longer has, say), or an unfinished pause called off:
		// the Ready condition says why.
		cond.Reason, cond.Message = prev.Reason, prev.Message
		if prev.Reason == controlv1alpha1.ReasonPausing || prev.Reason == controlv1alpha1.ReasonPaused {
			cond.Reason, cond.Message = controlv1alpha1.ReasonResuming, "making the replicas' pods from their snapshots"
		}
	}
	meta.SetStatusCondition(&status.Conditions, cond)
}

// claimedNow is, per replica, the runtime ID the status recorded for the pod it has now: what
// a reconcile that claims nothing (pausing) keeps of the replicas' readiness.
func claimedNow(bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod) map[int32]string {
	claimed := map[int32]string{}
	for i, p := range byReplica {
		if st := statusOf(bs, i); st != nil && st.Name == p.Name {
			claimed[i] = st.RuntimeID
		}
	}
	return claimed
}

func replicas(bs *controlv1alpha1.BatchSandbox) int32 {
	if bs.Spec.Replicas == nil {
		return 1
	}
	return *bs.Spec.Replicas
}

// endedReplicas are the replicas whose task the recorded status says has ended: they get no
// new pod, and with Release they lose the one they have.
func endedReplicas(bs *controlv1alpha1.BatchSandbox) map[int32]bool {
	if bs.Spec.TaskTemplate == nil {
		return nil
	}
	out := map[int32]bool{}
	for _, t := range bs.Status.Tasks {
		if t.Phase.Final() {
			out[t.Replica] = true
		}
	}
	return out
}

// releases reports whether the pod of an ended replica goes.
func releases(bs *controlv1alpha1.BatchSandbox) bool {
	return bs.Spec.TaskTemplate != nil && bs.Spec.TaskResourcePolicyWhenCompleted == controlv1alpha1.TaskResourceRelease
}

func statusOf(bs *controlv1alpha1.BatchSandbox, replica int32) *controlv1alpha1.SandboxPodStatus {
	for i := range bs.Status.Pods {
		if bs.Status.Pods[i].Replica == replica {
			return &bs.Status.Pods[i]
		}
	}
	return nil
}

func taskStatusOf(bs *controlv1alpha1.BatchSandbox, replica int32) *controlv1alpha1.TaskStatus {
	for i := range bs.Status.Tasks {
		if bs.Status.Tasks[i].Replica == replica {
			return &bs.Status.Tasks[i]
		}
	}
	return nil
}

// snapshotOf is replica's snapshot in the status, or nil.
func snapshotOf(bs *controlv1alpha1.BatchSandbox, replica int32) *controlv1alpha1.SnapshotStatus {
	for i := range bs.Status.Snapshots {
		if bs.Status.Snapshots[i].Replica == replica {
			return &bs.Status.Snapshots[i]
		}
	}
	return nil
}
