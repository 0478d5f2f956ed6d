// Package batchsandbox reconciles BatchSandboxes: in direct mode one pod per replica from the
// template, in pooled mode one warm pod per replica allocated from a Pool (pooled.go); every
// pod's execd certified for its pod (package identity) and, in pooled mode, claimed for the
// sandbox; and a status that says what a user can act on.
package batchsandbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/egress"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/identity"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxevents"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/tasks"
)

// Reconciler reconciles a BatchSandbox.
type Reconciler struct {
	Client ctrl.Client
	// Recorder records the Events about a sandbox on its Sandbox (sandboxevents.SandboxRef),
	// where users look, not on the BatchSandbox. The recorder folds repeats into a series, but
	// every new Event is a write: a sandbox that gets its pods at once records one, PodsReady
	// (and Expired if it expires); the others tell of a problem.
	Recorder events.EventRecorder
	// ExecdImage is the image whose /usr/local/bin/sandbox-execd the init container copies.
	ExecdImage string
	// RuntimeClass is the platform's default runtime class, for templates that name none
	// (sandboxpod.DefaultRuntimeClass), and for the revisions of pools; "": the node's
	// default runtime.
	RuntimeClass string
	// Clock tells the time for expiry; nil: the real clock.
	Clock clock.PassiveClock
	// Authority is the kube-sandbox CA: execd in every pod trusts its bundle.
	Authority *pki.Authority
	// Certifier certifies the execd of each pod for its pod.
	Certifier PodCertifier
	// Claimer allocates execd of a pool pod to a sandbox; nil: an HTTPClaimer with the
	// Authority's credentials.
	Claimer Claimer
	// Egress makes every pod wait for its node agent to enforce the sandbox's outbound
	// policy, and pushes the policy and its changes there; nil: none (tests whose simulated
	// nodes run no node agent).
	Egress *egress.Enforcer
	// Tasks holds the watch streams to the execd of pods that run tasks; nil: tasks are not
	// run (a taskTemplate then waits).
	Tasks *tasks.Watcher
	// TaskStarter starts tasks; nil: an execdclient.TaskClient with the Authority's
	// credentials.
	TaskStarter TaskStarter
	// Snapshots pauses and resumes sandboxes (pause.go); nil: a paused sandbox says that no
	// snapshot registry is configured, and keeps its pods.
	Snapshots *Snapshots
	// PauseStopsExpiry: a Paused sandbox does not expire (sandbox-apiserver, with the same
	// flag, moves its expiry forward by the pause when it resumes).
	PauseStopsExpiry bool

	taskStarterOnce    sync.Once
	defaultTaskStarter TaskStarter
	taskEvents         *taskEvents

	// allocations remembers the pool pods this process allocated until the cache shows them.
	allocations allocations
	// writes remembers the BatchSandboxes this process wrote until the cache shows the writes.
	writes writes

	claimerOnce sync.Once
	claimer     Claimer
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

var _ reconcile.Reconciler = &Reconciler{}

// PodCertifier makes sure the execd of a pod serves the pod's own certificate (package
// identity): nothing reaches a pod's execd before it proved to be that pod's.
type PodCertifier interface {
	// Ensure certifies the pod's execd, or finds it certified; an *identity.ErrNotThePod
	// means what answers at the pod's IP is not the pod.
	Ensure(ctx context.Context, pod *corev1.Pod) error
	// Forget drops what is remembered of a pod that is gone.
	Forget(uid types.UID)
}

var _ PodCertifier = &identity.Certifier{}

// Reconcile implements reconcile.Reconciler. It is idempotent: it creates what is missing,
// deletes what is surplus, and writes the status only when it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := log.FromContext(ctx)
	bs := &controlv1alpha1.BatchSandbox{}
	if err := r.Client.Get(ctx, req.NamespacedName, bs); err != nil {
		if apierrors.IsNotFound(err) {
			r.writes.forget(req.NamespacedName)
		}
		return reconcile.Result{}, ctrl.IgnoreNotFound(err)
	}
	if r.writes.stale(req.NamespacedName, bs.ResourceVersion) {
		// The cache has not seen this process's last write of the sandbox yet; its watch
		// event brings the next reconcile.
		logger.V(5).Info("cache behind our last write; waiting for it", "resourceVersion", bs.ResourceVersion)
		return reconcile.Result{}, nil
	}
	if bs.DeletionTimestamp != nil {
		return reconcile.Result{}, r.finalize(ctx, bs)
	}
	// Expiry is driven by the deadline itself (RequeueAfter below), never by polling; after a
	// restart the initial list brings every BatchSandbox here again.
	var result reconcile.Result
	if bs.Spec.ExpireTime != nil && !(r.PauseStopsExpiry && bs.Spec.Paused && bs.Status.Phase == controlv1alpha1.PhasePaused) {
		left := bs.Spec.ExpireTime.Sub(r.now())
		if left <= 0 {
			return reconcile.Result{}, r.expire(ctx, bs)
		}
		result.RequeueAfter = left
	}
	if !controllerutil.ContainsFinalizer(bs, controlv1alpha1.FinalizerPods) {
		// A merge patch replaces the whole list: the optimistic lock keeps others' finalizers.
		patch := ctrl.MergeFromWithOptions(bs.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(bs, controlv1alpha1.FinalizerPods)
		before := bs.ResourceVersion
		if err := r.Client.Patch(ctx, bs, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
		r.writes.wroteOver(req.NamespacedName, before)
	}
	if bs.Spec.Paused {
		refused := r.pauseRefused(ctx, bs)
		if refused == nil {
			return r.reconcilePause(ctx, bs, result)
		}
		if refused.Reason == controlv1alpha1.ReasonSnapshotPolicyMissing && (result.RequeueAfter == 0 || result.RequeueAfter > SnapshotRetryDelay) {
			// Fixed by an install, which brings no event of the sandbox's: look again.
			result.RequeueAfter = SnapshotRetryDelay
		}
	}
	if why := r.resumeBlocked(ctx, bs); why != nil {
		return r.stayPaused(ctx, bs, why, result)
	}
	if bs.Spec.PoolRef != nil && !fromSnapshots(bs) {
		return r.reconcilePooled(ctx, bs, result)
	}
	// Direct mode, and a pooled sandbox that resumed from its snapshots, whose pods are its own.
	var pool *controlv1alpha1.Pool
	if bs.Spec.PoolRef != nil {
		pool = r.poolOf(ctx, bs)
	} else if bs.Spec.Template == nil || len(bs.Spec.Template.Spec.Containers) == 0 {
		// The CRD refuses this; an object written before that rule existed gets a condition.
		return result, r.updateStatus(ctx, bs, nil, nil, nil, &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPodCreateFailed, Message: "spec.template has no containers"})
	}

	pods, err := r.listPods(ctx, bs)
	if err != nil {
		return reconcile.Result{}, err
	}
	desired := replicas(bs)
	ended := endedReplicas(bs)
	byReplica := map[int32]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		idx, err := strconv.ParseInt(p.Labels[controlv1alpha1.LabelReplica], 10, 32)
		if err != nil || idx < 0 || int32(idx) >= desired || p.Name != podName(bs, int32(idx)) {
			// Surplus after a scale-down (the highest indexes), or a pod whose label was
			// tampered with.
			if p.DeletionTimestamp == nil {
				logger.V(4).Info("deleting surplus pod", "pod", ctrl.ObjectKeyFromObject(p))
				if err := r.Client.Delete(ctx, p, ctrl.Preconditions{UID: &p.UID}); ctrl.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
					return reconcile.Result{}, fmt.Errorf("delete surplus pod: %w", err)
				}
			}
			continue
		}
		if p.Status.Phase == corev1.PodFailed && p.DeletionTimestamp == nil && !ended[int32(idx)] {
			// Evicted, or failed for good: the replica gets a new pod (of the same name, once
			// this one is gone, which brings the next reconcile).
			r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, controlv1alpha1.ReasonPodLost, "Replace",
				"pod %s of replica %d failed (%s %s); replacing it", p.Name, idx, p.Status.Reason, p.Status.Message)
			r.release(ctx, bs, p, "failed: "+p.Status.Reason)
		}
		byReplica[int32(idx)] = p
	}
	r.releaseEnded(ctx, bs, ended, byReplica)

	var failure *sandboxpod.Problem
	var clientCA []byte
	var podEgress *sandboxpod.Egress
	eg := &egressOnce{r: r, bs: bs, pool: pool}
	for i := int32(0); i < desired; i++ {
		if _, ok := byReplica[i]; ok || ended[i] {
			continue
		}
		if clientCA == nil {
			if clientCA, err = r.Authority.Bundle(); err != nil {
				return reconcile.Result{}, err
			}
			if r.Egress != nil {
				// The pod enforces the sandbox's current policy from its start: a replaced pod
				// gets the policy as it is now, not as it was at creation.
				cfg, err := eg.get(ctx)
				var invalid *egress.InvalidPolicy
				if errors.As(err, &invalid) {
					// No pod without a policy it can enforce; a new spec brings a new reconcile.
					return result, r.updateStatus(ctx, bs, byReplica, nil, nil, &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPolicyFailed, Message: err.Error()})
				}
				if err != nil {
					return reconcile.Result{}, err
				}
				podEgress = r.Egress.PodEgress(cfg)
			}
		}
		tmpl, problem := r.replicaTemplate(bs, pool, i)
		if problem != nil {
			failure = problem
			continue
		}
		pod := buildPod(bs, tmpl, i, r.ExecdImage, clientCA, podEgress, r.RuntimeClass)
		err = r.Client.Create(ctx, pod)
		switch {
		case err == nil:
			logger.V(4).Info("created pod", "pod", ctrl.ObjectKeyFromObject(pod), "replica", i)
			byReplica[i] = pod
		case apierrors.IsAlreadyExists(err):
			// Our cache has not seen it yet; the watch will bring it.
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
			// The template cannot make a pod (or a quota/policy refuses it): retrying will not
			// help until the user changes something, which brings a new event.
			failure = &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPodCreateFailed, Message: err.Error()}
			r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, controlv1alpha1.ReasonPodCreateFailed, "CreatePod", "replica %d: %v", i, err)
		default:
			return reconcile.Result{}, fmt.Errorf("create pod for replica %d: %w", i, err)
		}
	}
	// A replica is ready once its execd serves the pod's own certificate.
	certified, problem, certErr := r.claimAll(ctx, bs, eg, byReplica)
	if failure == nil {
		failure = problem
	}
	// A direct-mode pod's policy is pushed as soon as the pod has an address: its init
	// container waits for it, and execd (which certification needs) starts only after.
	egressCond, egressErr := r.enforceEgress(ctx, bs, eg, byReplica, addressed(byReplica))
	tk, taskErr := r.reconcileTasks(ctx, bs, byReplica, certified)
	if err := r.updateStatus(ctx, bs, byReplica, certified, tk, failure, egressCond); err != nil {
		return reconcile.Result{}, err
	}
	if certErr != nil {
		return reconcile.Result{}, certErr
	}
	if taskErr != nil {
		return reconcile.Result{}, taskErr
	}
	if egressErr != nil {
		// The workqueue's backoff retries it (a pod whose node agent has not answered yet); the expiry
		// deadline is computed again then.
		return reconcile.Result{}, egressErr
	}
	return result, nil
}

// expire marks the BatchSandbox Expired and deletes it; the finalizer then removes its pods.
func (r *Reconciler) expire(ctx context.Context, bs *controlv1alpha1.BatchSandbox) error {
	log.FromContext(ctx).Info("sandbox expired", "expireTime", bs.Spec.ExpireTime)
	if bs.Status.Phase != controlv1alpha1.PhaseExpired {
		patch := ctrl.MergeFrom(bs.DeepCopy())
		bs.Status.Phase = controlv1alpha1.PhaseExpired
		meta.SetStatusCondition(&bs.Status.Conditions, metav1.Condition{
			Type: controlv1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: bs.Generation,
			Reason: controlv1alpha1.ReasonExpired, Message: "expired at " + bs.Spec.ExpireTime.UTC().Format(time.RFC3339),
		})
		if err := r.Client.Status().Patch(ctx, bs, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("mark expired: %w", err)
		}
		r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeNormal, controlv1alpha1.ReasonExpired, "Delete",
			"expired at %s", bs.Spec.ExpireTime.UTC().Format(time.RFC3339))
	}
	// The precondition makes sure a renewal that raced with this decision wins.
	err := r.Client.Delete(ctx, bs, ctrl.Preconditions{UID: &bs.UID, ResourceVersion: &bs.ResourceVersion})
	if apierrors.IsConflict(err) {
		return nil // changed meanwhile (renewed?): the update brings it back here
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete expired sandbox: %w", err)
	}
	return nil
}

// finalize deletes the pods of a BatchSandbox being deleted and lets it go when they are gone.
// Pod deletions arrive as events, so it is called again until then.
func (r *Reconciler) finalize(ctx context.Context, bs *controlv1alpha1.BatchSandbox) error {
	if !controllerutil.ContainsFinalizer(bs, controlv1alpha1.FinalizerPods) {
		return nil
	}
	pods, err := r.listPods(ctx, bs)
	if err != nil {
		return err
	}
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			r.Certifier.Forget(pods[i].UID)
			r.forgetEgress(pods[i].UID)
			// The UID precondition: a pod of this name made since is not ours to delete.
			if err := r.Client.Delete(ctx, &pods[i], ctrl.Preconditions{UID: &pods[i].UID}); ctrl.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return fmt.Errorf("delete pod: %w", err)
			}
		}
	}
	if len(pods) > 0 {
		log.FromContext(ctx).V(4).Info("waiting for pods to go", "pods", len(pods))
		return nil
	}
	if err := r.finalizeSnapshots(ctx, bs); errors.Is(err, errSnapshotInProgress) {
		return nil
	} else if err != nil {
		return err
	}
	patch := ctrl.MergeFromWithOptions(bs.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(bs, controlv1alpha1.FinalizerPods)
	if err := r.Client.Patch(ctx, bs, patch); ctrl.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	r.allocations.forget(ctrl.ObjectKeyFromObject(bs))
	if r.Tasks != nil {
		r.Tasks.Sync(types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}, nil)
	}
	return nil
}

func replicas(bs *controlv1alpha1.BatchSandbox) int32 {
	if bs.Spec.Replicas == nil {
		return 1
	}
	return *bs.Spec.Replicas
}

func (r *Reconciler) listPods(ctx context.Context, bs *controlv1alpha1.BatchSandbox) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	// Read-only (callers never change these pods): the cache's own objects, not copies.
	if err := r.Client.List(ctx, list, ctrl.InNamespace(bs.Namespace),
		ctrl.MatchingLabels{controlv1alpha1.LabelBatchSandbox: bs.Name}, ctrl.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	// Only pods this BatchSandbox controls: a pod of an earlier BatchSandbox of the same name
	// that is still terminating is not ours.
	out := list.Items[:0]
	for _, p := range list.Items {
		if metav1.IsControlledBy(&p, bs) {
			out = append(out, p)
		}
	}
	// Pool pods this process allocated a moment ago that the cache does not show yet.
	return r.allocations.merge(bs, out, func(name string) (*corev1.Pod, bool) {
		p := &corev1.Pod{}
		if err := r.Client.Get(ctx, ctrl.ObjectKey{Namespace: bs.Namespace, Name: name}, p); err != nil {
			return nil, false
		}
		return p, true
	}), nil
}

// updateStatus computes the status from the pods and writes it if it changed. claimed holds,
// per replica, the runtime ID of the container whose execd was certified (and, in pooled mode,
// accepted the allocation): a replica is ready only when that is the running container.
func (r *Reconciler) updateStatus(ctx context.Context, bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, claimed map[int32]string, tk *taskResult, failure *sandboxpod.Problem, extra ...*metav1.Condition) error {
	status := r.computeStatus(bs, byReplica, claimed, tk, failure, extra...)
	var refused *metav1.Condition
	if bs.Spec.Paused {
		refused = r.pauseRefused(ctx, bs)
	}
	if refused != nil {
		if prev := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionPaused); prev == nil || prev.Reason != refused.Reason {
			// Once, as the condition changes to it: the refusal is re-checked while it lasts.
			r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, refused.Reason, "Pause", "%s", refused.Message)
		}
		meta.SetStatusCondition(&status.Conditions, *refused)
	} else {
		resumeStatus(bs, &status)
	}
	return r.writeStatus(ctx, bs, status)
}

// computeStatus is the status of the sandbox with these pods (see updateStatus).
func (r *Reconciler) computeStatus(bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, claimed map[int32]string, tk *taskResult, failure *sandboxpod.Problem, extra ...*metav1.Condition) controlv1alpha1.BatchSandboxStatus {
	status := controlv1alpha1.BatchSandboxStatus{
		ObservedGeneration: bs.Generation,
		Conditions:         append([]metav1.Condition(nil), bs.Status.Conditions...),
		Snapshots:          bs.Status.Snapshots,
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
	desired := replicas(bs)
	for i := range endedReplicas(bs) {
		if _, ok := byReplica[i]; !ok && i < desired {
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
	r.applyTasks(bs, &status, tk)
	return status
}

// writeStatus writes status if it differs from the sandbox's, with the PodsReady Event when
// the sandbox became Ready.
func (r *Reconciler) writeStatus(ctx context.Context, bs *controlv1alpha1.BatchSandbox, status controlv1alpha1.BatchSandboxStatus) error {
	if equality.Semantic.DeepEqual(bs.Status, status) {
		return nil
	}
	cond := meta.FindStatusCondition(status.Conditions, controlv1alpha1.ConditionReady)
	if prev := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionReady); cond != nil && cond.Status == metav1.ConditionTrue &&
		(prev == nil || prev.Status != metav1.ConditionTrue) && readyWorthAnEvent(bs, prev) {
		r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeNormal, controlv1alpha1.ReasonPodsReady, "Ready", "%s", cond.Message)
	}
	patch := ctrl.MergeFrom(bs.DeepCopy())
	bs.Status = status
	before := bs.ResourceVersion
	if err := r.Client.Status().Patch(ctx, bs, patch); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	r.writes.wroteOver(types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}, before)
	return nil
}

// readyWorthAnEvent tells whether a sandbox becoming Ready is news: a direct-mode sandbox's
// pods took their time to start, and a pooled one had to wait (a pool exhausted, a pod
// refused or lost) and was told so. A pooled sandbox Ready in its first status records
// nothing: that is the happy path, milliseconds after the create, where every write counts.
func readyWorthAnEvent(bs *controlv1alpha1.BatchSandbox, prev *metav1.Condition) bool {
	return bs.Spec.PoolRef == nil || prev != nil
}

// addressed are the replicas whose pods have an address.
func addressed(byReplica map[int32]*corev1.Pod) map[int32]string {
	out := make(map[int32]string, len(byReplica))
	for i, p := range byReplica {
		if p.Status.PodIP != "" {
			out[i] = p.Status.PodIP
		}
	}
	return out
}
