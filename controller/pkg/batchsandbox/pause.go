package batchsandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/egress"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxevents"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/snapshot"
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

// fromSnapshots tells whether the sandbox's pods are made from snapshots (it paused before),
// which makes a pooled sandbox's replicas pods of its own.
func fromSnapshots(bs *controlv1alpha1.BatchSandbox) bool {
	return len(bs.Status.Snapshots) > 0
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

// actPause does what planPause says: the surplus pods go, and each replica's snapshot is taken
// (snapshot.Runner, in the background), or found taken; what the snapshots came to
// (planPaused) goes into the status, and only then do the pods whose snapshot the status holds
// go. pauseRefused must be nil.
func (r *Reconciler) actPause(ctx context.Context, obs *observed, p pausePlan, result reconcile.Result) (reconcile.Result, error) {
	bs := obs.bs
	logger := log.FromContext(ctx)
	if err := r.remove(ctx, bs, p.remove); err != nil {
		return reconcile.Result{}, err
	}
	key := types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}
	jobs := map[int32]snapshotJob{}
	for _, s := range p.steps {
		if s.snapshot != nil {
			job, err := r.Snapshots.Runner.Ensure(key, s.replica, s.pod.UID, s.pod.Status.HostIP, *s.snapshot)
			jobs[s.replica] = snapshotJob{job: job, err: err}
		}
	}
	var egressCond *metav1.Condition
	if p.noPodLeft {
		egressCond = r.pausedEgress(ctx, bs)
	}
	out := planPaused(obs, p, jobs, egressCond, r.now(), time.Now())
	for _, uid := range out.forget {
		r.Snapshots.Runner.Forget(uid)
	}
	r.record(bs, out.events...)
	if err := r.writeStatus(ctx, bs, out.status); err != nil {
		return reconcile.Result{}, err
	}

	// Only now that the status holds their snapshots do the pods go.
	for _, pod := range out.release {
		logger.V(4).Info("deleting the pod of a paused replica", "pod", pod.Name)
		r.release(ctx, bs, pod, "the sandbox paused")
		r.Snapshots.Runner.Forget(pod.UID)
	}
	// A replica paused again has a new snapshot; the one before is no longer anyone's.
	for _, old := range out.replaced {
		if err := r.Snapshots.Deleter.DeleteManifest(ctx, r.Snapshots.Registry.RepositoryPath(bs.Namespace, bs.Name), old.Digest); err != nil {
			// The sandbox's deletion takes whatever is tagged with its UID: nothing is lost.
			logger.Error(err, "deleting a replaced snapshot", "digest", old.Digest)
		}
	}
	if out.requeueAfter > 0 && (result.RequeueAfter == 0 || out.requeueAfter < result.RequeueAfter) {
		result.RequeueAfter = out.requeueAfter
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
		cond.Message = fmt.Sprintf("no pod while the sandbox is paused: its files are kept in its snapshots, its processes and code contexts are not (they start anew on resume); its pods enforce revision %s when it resumes", cfg.Revision)
	}
	return cond
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
