// Package batchsandbox reconciles BatchSandboxes: in direct mode one pod per replica from the
// template, in pooled mode one warm pod per replica allocated from a Pool (pooled.go); every
// pod's execd certified for its pod (package identity) and, in pooled mode, claimed for the
// sandbox; and a status that says what a user can act on.
//
// A reconcile observes, plans and acts, as the Pool reconciler does: Reconcile (here) picks the
// mode and observes; a pure plan per mode (plan.go) says what to do; the act functions do it,
// each mode's in its file (direct mode here, pooled.go, pause.go, and tasks.go for the tasks of
// either), and the status is written last.
package batchsandbox

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/index"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxevents"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/tasks"
)

// Reconciler reconciles a BatchSandbox.
type Reconciler struct {
	Client ctrl.Client
	// Pods reads the idle pods of pools from the cache's own index (index.Setup); nil: through
	// Client, with the field index index.IdlePods (unit tests on a fake client).
	Pods *index.Pods
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
	// OOMs holds the streams of OOM kills from the node agents of the sandboxes' nodes
	// (oom.go); nil: kills are told from the pods' status alone, once agentWait is over.
	OOMs OOMReports

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
// deletes what is surplus, and writes the status only when it changed. It reads top to bottom:
// the guards, the mode, what is there (observe), what to do about it (a pure plan per mode,
// plan.go), doing it (act), and the status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	start := time.Now()
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
		log.FromContext(ctx).V(5).Info("cache behind our last write; waiting for it", "resourceVersion", bs.ResourceVersion)
		return reconcile.Result{}, nil
	}
	if bs.DeletionTimestamp != nil {
		return reconcile.Result{}, r.finalize(ctx, bs)
	}
	// Expiry is driven by the deadline itself (RequeueAfter), never by polling; after a
	// restart the initial list brings every BatchSandbox here again.
	left, expires := r.timeLeft(bs)
	if expires && left <= 0 {
		return reconcile.Result{}, r.expire(ctx, bs)
	}
	result := reconcile.Result{RequeueAfter: left}
	if err := r.ensureFinalizer(ctx, bs); err != nil {
		return reconcile.Result{}, err
	}

	m, why := r.pickMode(ctx, bs, &result)
	switch m {
	case modeStayPaused:
		return r.stayPaused(ctx, bs, why, result)
	case modeNoTemplate:
		// The CRD refuses this; an object written before that rule existed gets a condition.
		return result, r.updateStatus(ctx, bs, nil, nil, nil, nil, &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPodCreateFailed, Message: "spec.template has no containers"})
	}
	obs, err := r.observe(ctx, bs, m)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.syncOOMNodes(bs, obs.pods)
	var pl *placed
	if m == modePaused {
		// Snapshots first, then the status that holds them, and only then do the pods go.
		return r.actPause(ctx, obs, planPause(obs), result)
	}
	// Before the pods are acted on: a failed pod, whose status tells of its kill, is released.
	oom := r.oomKills(obs)
	if oom != nil && oom.requeueAfter > 0 && (result.RequeueAfter == 0 || oom.requeueAfter < result.RequeueAfter) {
		result.RequeueAfter = oom.requeueAfter
	}
	switch m {
	case modePooled:
		tl := &claimTimeline{start: start}
		// Told once the status is written (report), or the reconcile failed.
		defer tl.finish(ctx, bs)
		pl, err = r.actPooled(ctx, obs, planPooled(obs), tl)
	default:
		pl, err = r.actDirect(ctx, obs, planDirect(obs))
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return r.report(ctx, bs, r.serve(ctx, bs, pl, oom), result)
}

// timeLeft is how long the sandbox has before it expires; expires is false when it does not
// (no expiry, or a Paused sandbox with PauseStopsExpiry).
func (r *Reconciler) timeLeft(bs *controlv1alpha1.BatchSandbox) (left time.Duration, expires bool) {
	if bs.Spec.ExpireTime == nil || r.PauseStopsExpiry && bs.Spec.Paused && bs.Status.Phase == controlv1alpha1.PhasePaused {
		return 0, false
	}
	return bs.Spec.ExpireTime.Sub(r.now()), true
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

// ensureFinalizer adds the finalizer that keeps a sandbox until its pods are gone.
func (r *Reconciler) ensureFinalizer(ctx context.Context, bs *controlv1alpha1.BatchSandbox) error {
	if controllerutil.ContainsFinalizer(bs, controlv1alpha1.FinalizerPods) {
		return nil
	}
	// A merge patch replaces the whole list: the optimistic lock keeps others' finalizers.
	patch := ctrl.MergeFromWithOptions(bs.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(bs, controlv1alpha1.FinalizerPods)
	before := bs.ResourceVersion
	if err := r.Client.Patch(ctx, bs, patch); err != nil {
		return fmt.Errorf("add finalizer: %w", err)
	}
	r.writes.wroteOver(types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}, before)
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
	r.syncOOMNodes(bs, nil)
	if r.Tasks != nil {
		r.Tasks.Sync(types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}, nil)
	}
	return nil
}

// mode is how a reconcile treats a sandbox.
type mode int

const (
	// modeDirect: one pod of the sandbox's own per replica, from its template; also a pooled
	// sandbox that resumed from its snapshots, whose pods are its own.
	modeDirect mode = iota
	// modePooled: one pod of the pool per replica (pooled.go).
	modePooled
	// modePaused: each replica is snapshotted and its pod freed (pause.go).
	modePaused
	// modeStayPaused: a Paused sandbox whose snapshots the registry cannot give back yet.
	modeStayPaused
	// modeNoTemplate: a direct-mode sandbox whose template has no containers.
	modeNoTemplate
)

// pickMode says how the sandbox is reconciled, and for modeStayPaused why. A pause that cannot
// be done here is reconciled as if the sandbox were not paused, with the refusal as its Paused
// condition (updateStatus); one that waits for the snapshot policy is looked at again after
// SnapshotRetryDelay, for the install that fixes it brings no event of the sandbox's.
func (r *Reconciler) pickMode(ctx context.Context, bs *controlv1alpha1.BatchSandbox, result *reconcile.Result) (mode, *metav1.Condition) {
	if bs.Spec.Paused {
		refused := r.pauseRefused(ctx, bs)
		if refused == nil {
			return modePaused, nil
		}
		if refused.Reason == controlv1alpha1.ReasonSnapshotPolicyMissing && (result.RequeueAfter == 0 || result.RequeueAfter > SnapshotRetryDelay) {
			result.RequeueAfter = SnapshotRetryDelay
		}
	}
	if why := r.resumeBlocked(ctx, bs); why != nil {
		return modeStayPaused, why
	}
	switch {
	case bs.Spec.PoolRef != nil && !fromSnapshots(bs):
		return modePooled, nil
	case bs.Spec.PoolRef == nil && (bs.Spec.Template == nil || len(bs.Spec.Template.Spec.Containers) == 0):
		return modeNoTemplate, nil
	}
	return modeDirect, nil
}

// observe reads what the plans work from: the sandbox's pods and, for a pooled sandbox that
// resumed from its snapshots, the pool whose template its pods are made from.
func (r *Reconciler) observe(ctx context.Context, bs *controlv1alpha1.BatchSandbox, m mode) (*observed, error) {
	obs := &observed{bs: bs}
	if m == modeDirect && bs.Spec.PoolRef != nil {
		obs.pool = r.poolOf(ctx, bs)
	}
	if r.Snapshots != nil {
		obs.snapshotRepo = r.Snapshots.Registry.Repository(bs.Namespace, bs.Name)
		obs.snapshotMaxBytes = r.Snapshots.MaxBytes
	}
	pods, err := r.listPods(ctx, bs)
	if err != nil {
		return nil, err
	}
	obs.pods = pods
	return obs, nil
}

// listPods returns the sandbox's pods: those it controls, as the cache shows them, and those this
// process allocated to it that the cache does not show yet.
func (r *Reconciler) listPods(ctx context.Context, bs *controlv1alpha1.BatchSandbox) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	// By the index, not the label: a label selector scans every pod of the namespace (the
	// pools' idle ones too) on every reconcile. Read-only (callers never change these pods):
	// the cache's own objects, not copies.
	if err := r.Client.List(ctx, list, ctrl.InNamespace(bs.Namespace),
		ctrl.MatchingFields{index.SandboxPods: bs.Name}, ctrl.UnsafeDisableDeepCopy); err != nil {
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

// poolOf is the sandbox's Pool from the cache, nil if it is not there.
func (r *Reconciler) poolOf(ctx context.Context, bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.Pool {
	if bs.Spec.PoolRef == nil {
		return nil
	}
	pool := &controlv1alpha1.Pool{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Namespace: bs.Namespace, Name: bs.Spec.PoolRef.Name}, pool); err != nil {
		return nil
	}
	return pool
}

// placed is where acting on a direct or pooled plan left the replicas' pods, to be served.
type placed struct {
	byReplica map[int32]*corev1.Pod
	// failure is the problem to report, if any.
	failure *sandboxpod.Problem
	// eg is the sandbox's egress policy, composed at most once per reconcile.
	eg *egressOnce
	// claimFirst: a pool pod gets the sandbox's policy at its claim (pooled mode).
	claimFirst bool
	// refused: no pod could enforce the sandbox's policy, so none was made and none is served
	// (failure says why).
	refused bool
	// timeline times a pooled reconcile's stages; nil in direct mode.
	timeline *claimTimeline
}

// actDirect does what planDirect says: the pods of no replica are deleted, failed ones
// released, and the replicas without a pod get one.
func (r *Reconciler) actDirect(ctx context.Context, obs *observed, p directPlan) (*placed, error) {
	bs := obs.bs
	if err := r.remove(ctx, bs, p.remove); err != nil {
		return nil, err
	}
	pl := &placed{byReplica: p.byReplica, eg: &egressOnce{r: r, bs: bs, pool: obs.pool}}
	failure, refused, err := r.createPods(ctx, bs, pl.eg, p.create, p.byReplica)
	if err != nil {
		return nil, err
	}
	pl.failure = failure
	if refused != nil {
		// No pod without a policy it can enforce; a new spec brings a new reconcile.
		pl.failure, pl.refused = refused, true
	}
	return pl, nil
}

// createPods makes the pods of the replicas that have none, in order, recording each in
// byReplica. It returns the problem to report (the last one met), or, as refused, the problem
// of a policy no pod could enforce, for which no pod is made; an error is worth a retry.
func (r *Reconciler) createPods(ctx context.Context, bs *controlv1alpha1.BatchSandbox, eg *egressOnce, create []newPod,
	byReplica map[int32]*corev1.Pod) (failure, refused *sandboxpod.Problem, err error) {
	if len(create) == 0 {
		return nil, nil, nil
	}
	clientCA, err := r.Authority.Bundle()
	if err != nil {
		return nil, nil, err
	}
	var podEgress *sandboxpod.Egress
	if r.Egress != nil {
		// The pod enforces the sandbox's current policy from its start: a replaced pod gets the
		// policy as it is now, not as it was at creation.
		cfg, err := eg.get(ctx)
		var invalid *egress.InvalidPolicy
		if errors.As(err, &invalid) {
			return nil, &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPolicyFailed, Message: err.Error()}, nil
		}
		if err != nil {
			return nil, nil, err
		}
		podEgress = r.Egress.PodEgress(cfg)
	}
	logger := log.FromContext(ctx)
	for _, c := range create {
		if c.problem != nil {
			failure = c.problem
			continue
		}
		pod := buildPod(bs, c.template, c.replica, r.ExecdImage, clientCA, podEgress, r.RuntimeClass)
		err := r.Client.Create(ctx, pod)
		switch {
		case err == nil:
			logger.V(4).Info("created pod", "pod", ctrl.ObjectKeyFromObject(pod), "replica", c.replica)
			byReplica[c.replica] = pod
		case apierrors.IsAlreadyExists(err):
			// Our cache has not seen it yet; the watch will bring it.
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
			// The template cannot make a pod (or a quota/policy refuses it): retrying will not
			// help until the user changes something, which brings a new event.
			failure = &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPodCreateFailed, Message: err.Error()}
			r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, controlv1alpha1.ReasonPodCreateFailed, "CreatePod", "replica %d: %v", c.replica, err)
		default:
			return nil, nil, fmt.Errorf("create pod for replica %d: %w", c.replica, err)
		}
	}
	return failure, nil, nil
}

// remove takes a plan's pods from the sandbox, in order, each after its Event: a surplus pod
// is deleted (the UID precondition: a pod of that name made since is not ours), any other is
// released.
func (r *Reconciler) remove(ctx context.Context, bs *controlv1alpha1.BatchSandbox, rm []removal) error {
	for _, m := range rm {
		if m.event != nil {
			r.record(bs, *m.event)
		}
		if !m.surplus {
			r.release(ctx, bs, m.pod, m.why)
			continue
		}
		p := m.pod
		log.FromContext(ctx).V(4).Info("deleting surplus pod", "pod", ctrl.ObjectKeyFromObject(p))
		if err := r.Client.Delete(ctx, p, ctrl.Preconditions{UID: &p.UID}); ctrl.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete surplus pod: %w", err)
		}
	}
	return nil
}

// release gives a pod back per the pool's recycleStrategy; Delete, the only one, deletes it:
// a pod that ran a sandbox's code is never given to another. The UID precondition: a pod of
// the same name made since is not ours.
func (r *Reconciler) release(ctx context.Context, bs *controlv1alpha1.BatchSandbox, p *corev1.Pod, why string) {
	if p.DeletionTimestamp != nil {
		return
	}
	log.FromContext(ctx).V(4).Info("releasing pod", "pod", p.Name, "why", why)
	r.Certifier.Forget(p.UID)
	r.forgetEgress(p.UID)
	if err := r.Client.Delete(ctx, p, ctrl.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		// The pod keeps the sandbox's labels, so the next reconcile tries again.
		log.FromContext(ctx).Error(err, "releasing pod", "pod", p.Name)
	}
}

// served is what serving a sandbox's pods came to, for its status.
type served struct {
	byReplica map[int32]*corev1.Pod
	// claimed holds the runtime IDs of the certified (and, pooled, claimed) containers.
	claimed map[int32]string
	tasks   *taskResult
	failure *sandboxpod.Problem
	egress  *metav1.Condition
	// retry are the errors worth a retry, in the order they are returned: the first one that
	// is not nil, after the status is written.
	retry []error
	// statusOnly: the pods were not served (no policy they could enforce): the status is all
	// there is, written without claims, egress and tasks.
	statusOnly bool
	// oom are the OOM kills to tell.
	oom *oomResult
	// timeline gets the end of the stage status; nil in direct mode.
	timeline *claimTimeline
}

// serve makes the placed pods the sandbox's: their execd certified (and a pool pod's claimed:
// claimAll), the sandbox's policy pushed to them (enforceEgress), their tasks moved along
// (reconcileTasks); oom, the OOM kills to tell, goes with them to the status.
func (r *Reconciler) serve(ctx context.Context, bs *controlv1alpha1.BatchSandbox, pl *placed, oom *oomResult) *served {
	if pl.refused {
		return &served{byReplica: pl.byReplica, failure: pl.failure, statusOnly: true, oom: oom, timeline: pl.timeline}
	}
	byReplica, failure := pl.byReplica, pl.failure
	// A replica is ready once its execd serves the pod's own certificate.
	claimed, problem, claimErr := r.claimAll(ctx, bs, pl.eg, byReplica, pl.timeline)
	if failure == nil {
		failure = problem
	}
	// A pod of the sandbox's own gets its policy as soon as it has an address: its init
	// container waits for it, and execd (which certification needs) starts only after. A pool
	// pod gets it at its claim.
	egressCond, egressErr := r.enforceEgress(ctx, bs, pl.eg, byReplica, egressEligible(byReplica, claimed, pl.claimFirst))
	tk, taskErr := r.reconcileTasks(ctx, bs, byReplica, claimed)
	return &served{byReplica: byReplica, claimed: claimed, tasks: tk, failure: failure, egress: egressCond, oom: oom,
		retry: []error{claimErr, taskErr, egressErr}, timeline: pl.timeline}
}

// report writes the status of served pods, and then returns the first error worth a retry:
// the status is good all the same.
func (r *Reconciler) report(ctx context.Context, bs *controlv1alpha1.BatchSandbox, s *served, result reconcile.Result) (reconcile.Result, error) {
	if s.statusOnly {
		err := r.updateStatus(ctx, bs, s.byReplica, nil, nil, s.oom, s.failure)
		if err == nil {
			s.timeline.mark(stageStatus)
		}
		return result, err
	}
	if err := r.updateStatus(ctx, bs, s.byReplica, s.claimed, s.tasks, s.oom, s.failure, s.egress); err != nil {
		return reconcile.Result{}, err
	}
	s.timeline.mark(stageStatus)
	for _, err := range s.retry {
		if err != nil {
			// The workqueue's backoff retries it (a pod whose node agent has not answered yet,
			// say); the expiry deadline is computed again then.
			return reconcile.Result{}, err
		}
	}
	return result, nil
}

// updateStatus computes the status from the pods (planStatus) and the OOM kills to tell
// (applyOOMKills), and writes it if it changed. claimed holds, per replica, the runtime ID of
// the container whose execd was certified (and, in pooled mode, accepted the allocation): a
// replica is ready only when that is the running container.
func (r *Reconciler) updateStatus(ctx context.Context, bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, claimed map[int32]string, tk *taskResult, oom *oomResult, failure *sandboxpod.Problem, extra ...*metav1.Condition) error {
	var refused *metav1.Condition
	if bs.Spec.Paused {
		refused = r.pauseRefused(ctx, bs)
	}
	status, events := planStatus(bs, byReplica, claimed, tk, failure, refused, extra...)
	oomEvents := applyOOMKills(bs, &status, oom)
	r.record(bs, events...)
	if err := r.writeStatus(ctx, bs, status); err != nil {
		return err
	}
	// Only once status.oomKills holds them: a write that failed leaves the kills to tell to
	// the next reconcile, which tells them once.
	r.record(bs, oomEvents...)
	return nil
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

// record records events about the sandbox, on its Sandbox.
func (r *Reconciler) record(bs *controlv1alpha1.BatchSandbox, events ...sandboxEvent) {
	for _, e := range events {
		r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, e.eventType, e.reason, e.action, "%s", e.message)
	}
}
