package batchsandbox

import (
	"context"
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
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/shard"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/egress"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxevents"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/snapshot"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// Pause and resume.
//
// Pausing (spec.paused) takes a snapshot of each replica's pod through the sandbox-node
// of its node (snapshot.Runner, in the background; its end is an event), records it in
// status.snapshots, and only then deletes the pod: a controller that restarts in between finds
// the snapshot in the status, or takes it again. A snapshot that fails keeps the pod, says why
// in the Paused condition, and is tried again after SnapshotRetryDelay.
//
// Resuming (spec.paused false again) is the direct mode's reconcile, with each replica's pod
// made from its snapshot image (replicaTemplate): a pooled sandbox's from its pool's template,
// since the pool's pods run another image. Before the first pod, the registry must answer for
// the snapshots: while it does not, the sandbox stays Paused (RegistryUnavailable) and tries
// again after SnapshotRetryDelay.
//
// Deleting the sandbox deletes every manifest tagged with its UID from the registry
// (finalizeSnapshots), whether or not the status knew of it.

// Snapshots is what pausing needs: the registry, the Runner that takes snapshots, and the
// client that deletes them.
type Snapshots struct {
	Registry snapshot.Registry
	Runner   *snapshot.Runner
	Deleter  SnapshotDeleter
	// MaxBytes bounds a replica's layer of changes; 0: the snapshotter's own limit.
	MaxBytes int64
	// Guard tells whether the registry's snapshots will be kept to their sandboxes' pods
	// (snapshot.PolicyGuard); a pause does not start until they are. nil: no check.
	Guard SnapshotGuard
}

// SnapshotGuard tells whether pods other than the sandbox's are kept from its snapshots
// (snapshot.PolicyGuard): nil, or what to fix.
type SnapshotGuard interface {
	Guarded(ctx context.Context) error
}

var _ SnapshotGuard = &snapshot.PolicyGuard{}

// SnapshotDeleter deletes snapshots from the registry, and tells whether it answers.
type SnapshotDeleter interface {
	DeleteTagged(ctx context.Context, repository, prefix string) (int, error)
	DeleteManifest(ctx context.Context, repository, digest string) error
	Digest(ctx context.Context, repository, tag string) (string, error)
}

var _ SnapshotDeleter = &snapshot.RegistryClient{}

// SnapshotRetryDelay: a failed snapshot is taken again, and a resume that found the registry
// unavailable tried again, after this long.
const SnapshotRetryDelay = 30 * time.Second

// snapshotOf is replica's snapshot in the status, or nil.
func snapshotOf(bs *controlv1alpha1.BatchSandbox, replica int32) *controlv1alpha1.SnapshotStatus {
	for i := range bs.Status.Snapshots {
		if bs.Status.Snapshots[i].Replica == replica {
			return &bs.Status.Snapshots[i]
		}
	}
	return nil
}

// fromSnapshots tells whether the sandbox's pods are made from snapshots (it paused before),
// which makes a pooled sandbox's replicas pods of its own.
func fromSnapshots(bs *controlv1alpha1.BatchSandbox) bool {
	return len(bs.Status.Snapshots) > 0
}

// replicaTemplate is the pod template of replica i outside the pool: the template with the
// replica's shard patch, or the pool's template for a pooled sandbox that resumed; with the
// replica's snapshot as the sandbox container's image.
func (r *Reconciler) replicaTemplate(bs *controlv1alpha1.BatchSandbox, pool *controlv1alpha1.Pool, i int32) (*corev1.PodTemplateSpec, *sandboxpod.Problem) {
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
		if r.Snapshots == nil || !strings.HasPrefix(sn.Image, r.Snapshots.Registry.Repository(bs.Namespace, bs.Name)+"@sha256:") {
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

// pauseRefused is why a sandbox with spec.paused cannot pause here, or nil. Such a sandbox is
// reconciled as if it were not paused (its pods are kept, replaced and claimed as ever), with
// this as its Paused condition.
func (r *Reconciler) pauseRefused(ctx context.Context, bs *controlv1alpha1.BatchSandbox) *metav1.Condition {
	c := &metav1.Condition{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionFalse, ObservedGeneration: bs.Generation}
	switch {
	case bs.Spec.TaskTemplate != nil:
		// The CRD refuses this; a BatchSandbox written before that rule may have it.
		c.Reason, c.Message = controlv1alpha1.ReasonPauseNotSupported,
			"a sandbox that runs tasks cannot pause: processes are not kept, and a task would start again"
	case r.Snapshots == nil || !r.Snapshots.Registry.Configured() || r.Snapshots.Runner == nil:
		c.Reason, c.Message = controlv1alpha1.ReasonRegistryUnavailable,
			"no snapshot registry is configured (sandbox-controller --snapshot-registry): the sandbox cannot pause"
	case pauseStarting(bs) && r.Snapshots.Guard != nil:
		// Checked only before the first snapshot: a pause under way, or done, goes on (a
		// Paused sandbox reconciled as not paused would get its pods back).
		err := r.Snapshots.Guard.Guarded(ctx)
		if err == nil {
			return nil
		}
		c.Reason, c.Message = controlv1alpha1.ReasonSnapshotPolicyMissing, err.Error()+": the sandbox does not pause"
	default:
		return nil
	}
	return c
}

// pauseStarting tells whether no snapshot of the sandbox has been taken or begun yet.
func pauseStarting(bs *controlv1alpha1.BatchSandbox) bool {
	return len(bs.Status.Snapshots) == 0 && bs.Status.Phase != controlv1alpha1.PhasePausing && bs.Status.Phase != controlv1alpha1.PhasePaused
}

// reconcilePause takes each replica's snapshot and deletes its pod once the status holds it.
// pauseRefused must be nil.
func (r *Reconciler) reconcilePause(ctx context.Context, bs *controlv1alpha1.BatchSandbox, result reconcile.Result) (reconcile.Result, error) {
	logger := log.FromContext(ctx)
	pods, err := r.listPods(ctx, bs)
	if err != nil {
		return reconcile.Result{}, err
	}
	desired := replicas(bs)
	byReplica := map[int32]*corev1.Pod{}
	going := 0
	for i := range pods {
		p := &pods[i]
		idx, err := strconv.ParseInt(p.Labels[controlv1alpha1.LabelReplica], 10, 32)
		switch {
		case p.DeletionTimestamp != nil:
			going++
		case err != nil || idx < 0 || int32(idx) >= desired:
			r.release(ctx, bs, p, "surplus after a scale-down")
			going++
		default:
			byReplica[int32(idx)] = p
		}
	}

	paused := metav1.Condition{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionFalse, ObservedGeneration: bs.Generation}
	var failed *metav1.Condition

	key := types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}
	snaps := map[int32]controlv1alpha1.SnapshotStatus{}
	for _, sn := range bs.Status.Snapshots {
		snaps[sn.Replica] = sn
	}
	var (
		toDelete []*corev1.Pod
		replaced []controlv1alpha1.SnapshotStatus
		stages   []string
		retry    time.Duration
	)
	requeueIn := func(d time.Duration) {
		if retry == 0 || d < retry {
			retry = d
		}
	}
	idx := make([]int32, 0, len(byReplica))
	for i := range byReplica {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		p := byReplica[i]
		if sn, ok := snaps[i]; ok && sn.PodUID == string(p.UID) {
			toDelete = append(toDelete, p) // its snapshot is in the status already
			continue
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Spec.Containers) == 0 {
			// Nothing ran there (still starting, or failed): there is nothing to keep. The
			// replica keeps the snapshot it had, if any.
			toDelete = append(toDelete, p)
			continue
		}
		tag := snapshot.Tag(bs.UID, i, p.UID)
		req := nodeapi.SnapshotRequest{
			PodUID: string(p.UID), Namespace: p.Namespace, Pod: p.Name, Container: p.Spec.Containers[0].Name,
			Image:    r.Snapshots.Registry.Repository(bs.Namespace, bs.Name) + ":" + tag,
			MaxBytes: r.Snapshots.MaxBytes,
		}
		job, err := r.Snapshots.Runner.Ensure(key, i, p.UID, p.Status.HostIP, req)
		if err != nil {
			// Not the leader's runner yet: try again in a moment.
			requeueIn(time.Second)
			stages = append(stages, fmt.Sprintf("replica %d: waiting to start", i))
			continue
		}
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
					Message: fmt.Sprintf("replica %d (pod %s): %v; the pod is kept, and the snapshot is taken again in %s", i, p.Name, job.Err, SnapshotRetryDelay)}
				r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, reason, "Pause", "%s", failed.Message)
			}
			if left := SnapshotRetryDelay - time.Since(job.Finished); left > 0 {
				requeueIn(left)
			} else {
				r.Snapshots.Runner.Forget(p.UID)
				requeueIn(time.Millisecond)
			}
		default:
			res := job.Result
			sn := controlv1alpha1.SnapshotStatus{
				Replica: i, Image: snapshot.ByDigest(res.Image, res.Digest), Tag: res.Image, Digest: res.Digest,
				Size: res.Size, LayerSize: res.LayerSize, BaseImage: res.BaseImage,
				CreationTime: metav1.NewTime(res.Created), Pod: p.Name, PodUID: string(p.UID),
			}
			if sn.CreationTime.IsZero() {
				sn.CreationTime = metav1.NewTime(r.now())
			}
			if old, ok := snaps[i]; ok && old.Digest != sn.Digest {
				replaced = append(replaced, old)
			}
			snaps[i] = sn
			toDelete = append(toDelete, p)
		}
	}

	status := r.computeStatus(bs, byReplica, claimedNow(bs, byReplica), nil, nil)
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
	case len(byReplica) == 0 && going == 0:
		status.Phase = controlv1alpha1.PhasePaused
		paused.Status, paused.Reason = metav1.ConditionTrue, controlv1alpha1.ReasonPaused
		paused.Message = fmt.Sprintf("paused: %d replica(s) in snapshots, no pod left", len(status.Snapshots))
		ready.Reason, ready.Message = controlv1alpha1.ReasonPaused, "the sandbox is paused; set spec.paused to false to resume it"
		meta.SetStatusCondition(&status.Conditions, ready)
		if c := r.pausedEgress(ctx, bs); c != nil {
			meta.SetStatusCondition(&status.Conditions, *c)
		}
	default:
		status.Phase = controlv1alpha1.PhasePausing
		paused.Reason = controlv1alpha1.ReasonPausing
		paused.Message = fmt.Sprintf("%d pod(s) left", len(byReplica)+going)
		if len(stages) > 0 {
			paused.Message += ": " + strings.Join(stages, ", ")
		}
	}
	meta.SetStatusCondition(&status.Conditions, paused)
	if status.Phase == controlv1alpha1.PhasePaused && bs.Status.Phase != controlv1alpha1.PhasePaused {
		r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeNormal, controlv1alpha1.ReasonPaused, "Pause", "%s", paused.Message)
	}
	if err := r.writeStatus(ctx, bs, status); err != nil {
		return reconcile.Result{}, err
	}

	// Only now that the status holds their snapshots do the pods go.
	for _, p := range toDelete {
		logger.V(4).Info("deleting the pod of a paused replica", "pod", p.Name)
		r.release(ctx, bs, p, "the sandbox paused")
		r.Snapshots.Runner.Forget(p.UID)
	}
	// A replica paused again has a new snapshot; the one before is no longer anyone's.
	for _, old := range replaced {
		if err := r.Snapshots.Deleter.DeleteManifest(ctx, r.Snapshots.Registry.RepositoryPath(bs.Namespace, bs.Name), old.Digest); err != nil {
			// The sandbox's deletion takes whatever is tagged with its UID: nothing is lost.
			logger.Error(err, "deleting a replaced snapshot", "digest", old.Digest)
		}
	}
	if retry > 0 && (result.RequeueAfter == 0 || retry < result.RequeueAfter) {
		result.RequeueAfter = retry
	}
	return result, nil
}

// pausedEgress is the EgressReady condition of a sandbox with no pod: its policy is accepted
// and reaches the pods made when it resumes, or it is invalid. nil without egress.
func (r *Reconciler) pausedEgress(ctx context.Context, bs *controlv1alpha1.BatchSandbox) *metav1.Condition {
	if r.Egress == nil {
		return nil
	}
	cond := &metav1.Condition{Type: controlv1alpha1.ConditionEgressReady, ObservedGeneration: bs.Generation}
	cfg, err := r.Egress.SandboxConfig(ctx, bs, r.poolOf(ctx, bs))
	var invalid *egress.InvalidPolicy
	switch {
	case errors.As(err, &invalid):
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, controlv1alpha1.ReasonPolicyFailed, err.Error()
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, controlv1alpha1.ReasonPolicyPending, err.Error()
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, controlv1alpha1.ReasonPaused
		cond.Message = fmt.Sprintf("no pod while the sandbox is paused: its pods enforce revision %s when it resumes", cfg.Revision)
	}
	return cond
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

// resumeBlocked tells why a Paused sandbox cannot get its pods back yet: the registry does not
// answer for its snapshots. nil: go ahead. Checked only on the way out of Paused, once.
func (r *Reconciler) resumeBlocked(ctx context.Context, bs *controlv1alpha1.BatchSandbox) *metav1.Condition {
	if bs.Status.Phase != controlv1alpha1.PhasePaused || !fromSnapshots(bs) {
		return nil
	}
	if r.Snapshots == nil || r.Snapshots.Deleter == nil || !r.Snapshots.Registry.Configured() {
		return &metav1.Condition{Reason: controlv1alpha1.ReasonRegistryUnavailable,
			Message: "no snapshot registry is configured (sandbox-controller --snapshot-registry): the sandbox stays paused"}
	}
	repo := r.Snapshots.Registry.RepositoryPath(bs.Namespace, bs.Name)
	for _, sn := range bs.Status.Snapshots {
		d, err := r.Snapshots.Deleter.Digest(ctx, repo, sn.Digest)
		switch {
		case err != nil:
			return &metav1.Condition{Reason: controlv1alpha1.ReasonRegistryUnavailable,
				Message: fmt.Sprintf("the snapshot registry does not answer (%v); the sandbox stays paused and tries again in %s", err, SnapshotRetryDelay)}
		case d == "":
			return &metav1.Condition{Reason: controlv1alpha1.ReasonSnapshotFailed,
				Message: fmt.Sprintf("the snapshot of replica %d (%s) is gone from the registry; the sandbox stays paused", sn.Replica, sn.Image)}
		}
	}
	return nil
}

// stayPaused writes why a resume waits, and comes back after SnapshotRetryDelay.
func (r *Reconciler) stayPaused(ctx context.Context, bs *controlv1alpha1.BatchSandbox, why *metav1.Condition, result reconcile.Result) (reconcile.Result, error) {
	status := bs.Status.DeepCopy()
	status.ObservedGeneration = bs.Generation
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionTrue,
		ObservedGeneration: bs.Generation, Reason: why.Reason, Message: why.Message})
	if err := r.writeStatus(ctx, bs, *status); err != nil {
		return reconcile.Result{}, err
	}
	if result.RequeueAfter == 0 || SnapshotRetryDelay < result.RequeueAfter {
		result.RequeueAfter = SnapshotRetryDelay
	}
	return result, nil
}

// errSnapshotInProgress: the sandbox's snapshots are deleted once the one being taken ends.
var errSnapshotInProgress = errors.New("a snapshot of the sandbox is in progress")

// finalizeSnapshots deletes the sandbox's snapshots from the registry: every manifest tagged
// with its UID, which also takes those a controller restart kept out of the status. Sandboxes
// that never paused cost nothing.
func (r *Reconciler) finalizeSnapshots(ctx context.Context, bs *controlv1alpha1.BatchSandbox) error {
	if !fromSnapshots(bs) && meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionPaused) == nil {
		return nil
	}
	if r.Snapshots == nil || r.Snapshots.Deleter == nil || !r.Snapshots.Registry.Configured() {
		log.FromContext(ctx).Info("no snapshot registry configured: the sandbox's snapshots, if any, stay in the registry")
		return nil
	}
	if r.Snapshots.Runner != nil && r.Snapshots.Runner.Busy(types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}) {
		// Its end is an event, which brings the sandbox back here.
		log.FromContext(ctx).V(2).Info("waiting for a snapshot in progress before deleting the sandbox's snapshots")
		return errSnapshotInProgress
	}
	n, err := r.Snapshots.Deleter.DeleteTagged(ctx, r.Snapshots.Registry.RepositoryPath(bs.Namespace, bs.Name), snapshot.TagPrefix(bs.UID))
	if err != nil {
		r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, controlv1alpha1.ReasonRegistryUnavailable, "DeleteSnapshots",
			"deleting the sandbox's snapshots: %v; trying again", err)
		return fmt.Errorf("delete snapshots: %w", err)
	}
	log.FromContext(ctx).V(2).Info("deleted the sandbox's snapshots", "manifests", n)
	if r.Snapshots.Runner != nil {
		r.Snapshots.Runner.ForgetSandbox(types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name})
	}
	return nil
}
