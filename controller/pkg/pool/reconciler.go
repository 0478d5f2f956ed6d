// Package pool reconciles Pools: warm pods from a template, kept between the buffer and pool
// bounds, rolled on a template change within the maxUnavailable budget, never touching the
// pods given to sandboxes (pkg/batchsandbox allocates them).
package pool

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/admission"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/egress"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/index"
)

const (
	// DefaultRefillDelay: a pool replaces the pods it gave away only after this long without an
	// allocation (unless sandboxes wait for pods). Starting pods costs the node CPU, and a
	// refill that starts in the middle of a burst of allocations slows every one of them down.
	DefaultRefillDelay = time.Second
	// DefaultMaxStarting bounds the idle pods of a pool starting at once: a pool never floods
	// its node, and a template that cannot start does not churn through pods.
	DefaultMaxStarting = 10
	// defaultMaxUnavailable of a rolling update when the Pool does not say.
	defaultMaxUnavailable = "25%"
)

// Reconciler reconciles a Pool.
type Reconciler struct {
	Client client.Client
	// Pods reads the pool's pods from the cache's own index (index.Setup); nil: through
	// Client, with the field index index.PoolPods (unit tests on a fake client).
	Pods     *index.Pods
	Recorder events.EventRecorder
	// ExecdImage is the image whose sandbox-execd the init container copies.
	ExecdImage string
	// Authority is the kube-sandbox CA: execd in every pod trusts its bundle.
	Authority *pki.Authority
	// Checker holds templates to the platform's pod security level (spec.podSecurity
	// Platform); nil: templates are not checked (tests).
	Checker *admission.Checker
	// RuntimeClass is the platform's default runtime class, for templates that name none
	// (sandboxpod.DefaultRuntimeClass); "": the node's default runtime.
	RuntimeClass string
	// RefillDelay: see DefaultRefillDelay; 0: the default.
	RefillDelay time.Duration
	// MaxStarting: see DefaultMaxStarting; 0: the default.
	MaxStarting int32
	// Egress marks the pool's pods for the node agent (sandbox-node), which denies them everything
	// until a claim; nil: none (tests whose simulated nodes run no node agent).
	Egress *egress.Enforcer
	// Clock; nil: the real clock.
	Clock clock.PassiveClock

	expectations expectations
	statusWrites statusWrites
}

var _ reconcile.Reconciler = &Reconciler{}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pool := &controlv1alpha1.Pool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.expectations.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pool.DeletionTimestamp != nil {
		// Its idle pods go with it (owner references); allocated pods belong to their sandboxes.
		return reconcile.Result{}, nil
	}
	if len(pool.Spec.Template.Spec.Containers) == 0 {
		// The CRD refuses this; an object written before that rule existed gets a condition.
		_, err := r.updateStatus(ctx, pool, &observed{revision: sandboxpod.PoolRevision(pool, r.RuntimeClass)},
			&sandboxpod.Problem{Reason: controlv1alpha1.ReasonInvalidTemplate, Message: "spec.template has no containers"}, false)
		return reconcile.Result{}, err
	}
	obs, err := r.observe(ctx, pool)
	if err != nil {
		return reconcile.Result{}, err
	}
	if problem, err := r.admit(ctx, pool); err != nil || problem != nil {
		if err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, r.refuse(ctx, pool, obs, problem)
	}
	p := plan(obs, pool, r.maxStarting(), r.refillDelay(), r.now())
	log.FromContext(ctx).V(4).Info("pool plan", "create", p.create, "delete", len(p.delete), "paced", p.pacedFor,
		"idle", obs.idle(), "allocated", obs.allocated, "demand", obs.demand)

	key := client.ObjectKeyFromObject(pool)
	for _, pod := range p.delete {
		// The resourceVersion precondition: a pod allocated since the cache saw it idle is no
		// longer the pool's to delete.
		err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID, ResourceVersion: &pod.ResourceVersion})
		switch {
		case err == nil:
			r.expectations.deleted(key, pod.UID)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			return reconcile.Result{}, fmt.Errorf("delete pool pod %s: %w", pod.Name, err)
		}
	}
	var problem *sandboxpod.Problem
	var clientCA []byte
	if p.create > 0 {
		if clientCA, err = r.Authority.Bundle(); err != nil {
			return reconcile.Result{}, err
		}
	}
	created, err := slowStartBatch(int(p.create), func() error {
		pod := buildPod(pool, obs.revision, r.ExecdImage, clientCA, r.Egress.PodEgress(egress.IdleConfig()), r.RuntimeClass)
		if err := r.Client.Create(ctx, pod); err != nil {
			return err
		}
		r.expectations.created(key, pod.Name)
		return nil
	})
	obs.pendingCreates += int32(created)
	if err != nil {
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err) {
			return reconcile.Result{}, fmt.Errorf("create pool pod: %w", err)
		}
		// The template cannot make a pod (or a quota or policy refuses it): retrying will not
		// help until something changes, which brings an event.
		problem = &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPodCreateFailed, Message: err.Error()}
		if c := meta.FindStatusCondition(pool.Status.Conditions, controlv1alpha1.PoolConditionReady); c == nil || c.Reason != problem.Reason {
			r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, controlv1alpha1.ReasonPodCreateFailed, "CreatePod", "%v", err)
		}
	}
	statusDue, err := r.updateStatus(ctx, pool, obs, problem, p.pacedFor > 0)
	if err != nil {
		return reconcile.Result{}, err
	}
	requeue := p.pacedFor
	if statusDue > 0 && (requeue == 0 || statusDue < requeue) {
		requeue = statusDue
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// maxCreatesAtOnce bounds the pod creates of one reconcile in flight at once.
const maxCreatesAtOnce = 32

// slowStartBatch calls create n times, as the ReplicaSet controller creates pods: in batches
// of 1, 2, 4, … (at most maxCreatesAtOnce) whose calls run at once, stopping after the first
// batch with a failure, so that a template every create refuses costs one request, not n. It
// returns how many creates succeeded and the first error.
func slowStartBatch(n int, create func() error) (int, error) {
	done := 0
	for batch := 1; done < n; batch = min(2*batch, maxCreatesAtOnce) {
		size := min(batch, n-done)
		errs := make(chan error, size)
		var wg sync.WaitGroup
		for range size {
			wg.Go(func() { errs <- create() })
		}
		wg.Wait()
		close(errs)
		var first error
		for err := range errs {
			if err == nil {
				done++
			} else if first == nil {
				first = err
			}
		}
		if first != nil {
			return done, first
		}
	}
	return done, nil
}

// admit checks the pool's template against its podSecurity. A refused template is a Problem
// for the status: the pool then makes no pods, and gives away none of those it holds.
func (r *Reconciler) admit(ctx context.Context, pool *controlv1alpha1.Pool) (*sandboxpod.Problem, error) {
	if r.Egress != nil {
		// As the pods will be: under the platform's runtime class if the template names none
		// (a shallow copy: only the runtime class's pointer is replaced).
		spec := pool.Spec.Template.Spec
		sandboxpod.DefaultRuntimeClass(&spec, r.RuntimeClass)
		ferr, err := admission.CheckEgress(ctx, r.Client, &spec, field.NewPath("spec", "template", "spec"))
		if err != nil {
			return nil, err
		}
		if ferr != nil {
			return &sandboxpod.Problem{Reason: controlv1alpha1.ReasonTemplateRefused, Message: ferr.Error()}, nil
		}
	}
	if r.Checker == nil || pool.Spec.PodSecurity == controlv1alpha1.PodSecurityNamespace {
		// Namespace: the kube-apiserver holds the pods to the namespace's level when they are
		// created, and only users who may create pods can have set it (see PodSecurity).
		return nil, nil
	}
	res, err := r.Checker.CheckIn(ctx, r.Client, pool.Namespace, admission.Template{
		Meta: &pool.Spec.Template.ObjectMeta, Spec: &pool.Spec.Template.Spec, Path: field.NewPath("spec", "template", "spec"),
	})
	if err != nil {
		return nil, fmt.Errorf("get namespace %s: %w", pool.Namespace, err)
	}
	if res.Allowed() {
		return nil, nil
	}
	errs := append(append(field.ErrorList{}, res.Invalid...), res.NeedsPodRights...)
	return &sandboxpod.Problem{Reason: controlv1alpha1.ReasonTemplateRefused, Message: fmt.Sprintf(
		"the template needs more than podSecurity Platform allows (%s): %s; "+
			"a user who may create such pods can set spec.podSecurity: Namespace", res.Limit(), errs.ToAggregate().Error())}, nil
}

// refuse reports a refused template and lets the pool's idle pods go: they may come from a
// template (or a namespace level) that was allowed before, and must not reach a sandbox now.
func (r *Reconciler) refuse(ctx context.Context, pool *controlv1alpha1.Pool, obs *observed, problem *sandboxpod.Problem) error {
	if c := meta.FindStatusCondition(pool.Status.Conditions, controlv1alpha1.PoolConditionReady); c == nil || c.Reason != problem.Reason || c.Message != problem.Message {
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, problem.Reason, "Admit", "%s", problem.Message)
	}
	key := client.ObjectKeyFromObject(pool)
	for _, pod := range append(append([]*corev1.Pod(nil), obs.idleReady...), obs.idleStarting...) {
		err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID, ResourceVersion: &pod.ResourceVersion})
		switch {
		case err == nil:
			r.expectations.deleted(key, pod.UID)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		default:
			return fmt.Errorf("delete idle pod %s of a refused template: %w", pod.Name, err)
		}
	}
	_, err := r.updateStatus(ctx, pool, obs, problem, false)
	return err
}

func (r *Reconciler) maxStarting() int32 {
	if r.MaxStarting <= 0 {
		return DefaultMaxStarting
	}
	return r.MaxStarting
}

func (r *Reconciler) refillDelay() time.Duration {
	if r.RefillDelay <= 0 {
		return DefaultRefillDelay
	}
	return r.RefillDelay
}

// observed is what a reconcile sees of a pool's pods.
type observed struct {
	revision string
	// Idle pods (controlled by the pool, not allocated, not being deleted).
	idleReady, idleStarting []*corev1.Pod
	// failed idle pods, to delete.
	failed []*corev1.Pod
	// pendingCreates: pods this process created that the cache does not show yet.
	pendingCreates int32
	// idleTerminating: idle pods being deleted.
	idleTerminating int32
	allocated       int32
	// demand: replicas of the pool's sandboxes that wait for a pod (PoolExhausted).
	demand int32
	// lastAllocation is the latest allocation of a pod of the pool still allocated.
	lastAllocation time.Time
	// problem of a starting pod (an image that cannot be pulled, say).
	problem *sandboxpod.Problem
}

func (o *observed) idle() int32 {
	return int32(len(o.idleReady)+len(o.idleStarting)) + o.pendingCreates
}

func (r *Reconciler) observe(ctx context.Context, pool *controlv1alpha1.Pool) (*observed, error) {
	// Read-only: the cache's own objects, by the pool's index; a pool reconcile runs on every
	// change of any of its pods, and scanning the namespace and copying hundreds of pods each
	// time would cost more than the rest.
	pods, err := r.Pods.OfPool(ctx, r.Client, pool.Namespace, pool.Name)
	if err != nil {
		return nil, fmt.Errorf("list pool pods: %w", err)
	}
	pendingCreates, deleting := r.expectations.observe(client.ObjectKeyFromObject(pool), pods)
	obs := &observed{revision: sandboxpod.PoolRevision(pool, r.RuntimeClass), pendingCreates: int32(pendingCreates)}
	allocatedTo := map[string]int32{}
	for _, p := range pods {
		if sandbox, ok := p.Labels[controlv1alpha1.LabelBatchSandbox]; ok {
			if p.DeletionTimestamp == nil && !deleting[p.UID] {
				obs.allocated++
				allocatedTo[sandbox]++
			}
			if at, err := time.Parse(time.RFC3339Nano, p.Annotations[controlv1alpha1.AnnotationAllocatedAt]); err == nil && at.After(obs.lastAllocation) {
				obs.lastAllocation = at
			}
			continue
		}
		if !metav1.IsControlledBy(p, pool) {
			continue // not ours: neither allocated nor the pool's
		}
		switch {
		case p.DeletionTimestamp != nil || deleting[p.UID]:
			obs.idleTerminating++
		case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
			obs.failed = append(obs.failed, p)
		case sandboxpod.Ready(p):
			obs.idleReady = append(obs.idleReady, p)
		default:
			obs.idleStarting = append(obs.idleStarting, p)
			if obs.problem == nil {
				obs.problem = sandboxpod.Failure(p)
			}
		}
	}
	// Only sandboxes that found the pool empty count: one being allocated right now does not,
	// or every allocation would start a refill at once (see RefillDelay). The index holds only
	// those, of the thousands of sandboxes a pool may serve.
	sandboxes, err := index.SandboxesExhausted(ctx, r.Client, pool.Namespace, pool.Name)
	if err != nil {
		return nil, fmt.Errorf("list the pool's sandboxes: %w", err)
	}
	for i := range sandboxes {
		bs := &sandboxes[i]
		want := int32(1)
		if bs.Spec.Replicas != nil {
			want = *bs.Spec.Replicas
		}
		if bs.DeletionTimestamp == nil && waiting(bs) && want > allocatedTo[bs.Name] {
			obs.demand += want - allocatedTo[bs.Name]
		}
	}
	return obs, nil
}

// planned is what a reconcile does.
type planned struct {
	create int32
	delete []*corev1.Pod
	// pacedFor > 0: a refill is held back that long (see RefillDelay).
	pacedFor time.Duration
}

// plan decides the creates and deletes that bring the pool toward its bounds. It is pure, so
// the rules can be tested case by case:
//   - failed idle pods go; idle pods of an older revision that are still starting go;
//   - ready idle pods of an older revision are replaced within the maxUnavailable budget
//     (starting and terminating idle pods use it up);
//   - the idle buffer (ready, starting and just created) is filled to bufferMin plus the
//     replicas that wait for a pod, and the pool to poolMin, never above poolMax, and never
//     with more than maxStarting pods starting at once;
//   - a refill with nobody waiting waits until refillDelay after the latest allocation;
//   - the buffer is trimmed to bufferMax only when no idle pod is starting and nobody waits,
//     so ready pods are never deleted to make room for pending ones.
func plan(obs *observed, pool *controlv1alpha1.Pool, maxStarting int32, refillDelay time.Duration, now time.Time) planned {
	var p planned
	c := pool.Spec.CapacitySpec
	current := func(pod *corev1.Pod) bool { return pod.Labels[controlv1alpha1.LabelPoolRevision] == obs.revision }
	gone := map[*corev1.Pod]bool{}
	drop := func(pod *corev1.Pod) {
		if !gone[pod] {
			gone[pod] = true
			p.delete = append(p.delete, pod)
		}
	}
	p.delete = append(p.delete, obs.failed...)

	starting := obs.pendingCreates
	for _, pod := range obs.idleStarting {
		if current(pod) {
			starting++
		} else {
			drop(pod)
		}
	}
	var old []*corev1.Pod
	for _, pod := range obs.idleReady {
		if !current(pod) {
			old = append(old, pod)
		}
	}
	if len(old) > 0 {
		sort.Slice(old, func(a, b int) bool { return old[a].CreationTimestamp.Before(&old[b].CreationTimestamp) })
		budget := maxUnavailable(pool) - starting - obs.idleTerminating
		for i := 0; i < len(old) && int32(i) < budget; i++ {
			drop(old[i])
		}
	}

	idle := int32(len(obs.idleReady)) + starting
	for _, pod := range obs.idleReady {
		if gone[pod] {
			idle--
		}
	}
	total := obs.allocated + idle
	want := max(c.BufferMin+obs.demand-idle, c.PoolMin-total)
	want = min(want, c.PoolMax-total, maxStarting-starting)
	if want > 0 && obs.demand == 0 && total >= c.PoolMin && !obs.lastAllocation.IsZero() {
		if wait := obs.lastAllocation.Add(refillDelay).Sub(now); wait > 0 {
			p.pacedFor = wait
			want = 0
		}
	}
	p.create = max(want, 0)

	if starting == 0 && obs.demand == 0 && p.pacedFor == 0 {
		excess := min(idle-c.BufferMax, total-c.PoolMin)
		if excess > 0 {
			// Old revisions first, then the youngest: the longest-ready pods stay.
			ready := append([]*corev1.Pod(nil), obs.idleReady...)
			sort.SliceStable(ready, func(a, b int) bool {
				ca, cb := current(ready[a]), current(ready[b])
				if ca != cb {
					return !ca
				}
				return ready[b].CreationTimestamp.Before(&ready[a].CreationTimestamp)
			})
			for _, pod := range ready {
				if excess == 0 {
					break
				}
				if !gone[pod] {
					drop(pod)
					excess--
				}
			}
		}
	}
	return p
}

// maxUnavailable resolves updateStrategy.maxUnavailable against bufferMax, rounding up; at
// least 1, so that a rolling update always progresses.
func maxUnavailable(pool *controlv1alpha1.Pool) int32 {
	v := intstr.FromString(defaultMaxUnavailable)
	if mu := pool.Spec.UpdateStrategy.MaxUnavailable; mu != nil {
		v = *mu
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, int(pool.Spec.CapacitySpec.BufferMax), true)
	if err != nil || n < 1 {
		return 1
	}
	return int32(n)
}

// statusCountsInterval: when only the counts of a pool's status changed, they are written at
// most this often. A burst of allocations changes them with every sandbox, and a status write
// per sandbox would cost the kube-apiserver as much as the allocation itself; a change of
// condition's status or reason, or of the revision, is written at once.
const statusCountsInterval = time.Second

// updateStatus writes the counts and conditions if they changed. It returns how long until a
// held-back change of counts is due (0: nothing held back).
func (r *Reconciler) updateStatus(ctx context.Context, pool *controlv1alpha1.Pool, obs *observed, problem *sandboxpod.Problem, paced bool) (time.Duration, error) {
	status := controlv1alpha1.PoolStatus{
		ObservedGeneration: pool.Generation,
		Revision:           obs.revision,
		Allocated:          obs.allocated,
		Available:          int32(len(obs.idleReady)),
		Conditions:         append([]metav1.Condition(nil), pool.Status.Conditions...),
	}
	status.Total = status.Allocated + obs.idle()
	old := int32(0)
	for _, pod := range append(append([]*corev1.Pod(nil), obs.idleReady...), obs.idleStarting...) {
		if pod.Labels[controlv1alpha1.LabelPoolRevision] == obs.revision {
			status.Updated++
		} else {
			old++
		}
	}
	status.Updated += obs.pendingCreates

	c := pool.Spec.CapacitySpec
	want := min(c.BufferMin, max(c.PoolMax-status.Allocated, 0))
	ready := metav1.Condition{Type: controlv1alpha1.PoolConditionReady, ObservedGeneration: pool.Generation}
	if problem == nil {
		problem = obs.problem
	}
	switch {
	case problem != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, problem.Reason, problem.Message
	case status.Available >= want && status.Available < c.BufferMin:
		ready.Status, ready.Reason = metav1.ConditionTrue, controlv1alpha1.ReasonPoolMaxReached
		ready.Message = fmt.Sprintf("%d idle pods available, fewer than bufferMin %d: %d of poolMax %d are allocated", status.Available, c.BufferMin, status.Allocated, c.PoolMax)
	case status.Available >= want:
		ready.Status, ready.Reason = metav1.ConditionTrue, controlv1alpha1.ReasonBufferFull
		ready.Message = fmt.Sprintf("%d idle pods available (bufferMin %d)", status.Available, c.BufferMin)
	case paced:
		ready.Status, ready.Reason = metav1.ConditionFalse, controlv1alpha1.ReasonRefillPaced
		ready.Message = fmt.Sprintf("%d idle pods available of bufferMin %d; refilling once allocations pause", status.Available, c.BufferMin)
	default:
		ready.Status, ready.Reason = metav1.ConditionFalse, controlv1alpha1.ReasonBufferFilling
		ready.Message = fmt.Sprintf("%d idle pods available of bufferMin %d; %d starting", status.Available, c.BufferMin, int32(len(obs.idleStarting))+obs.pendingCreates)
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	progressing := metav1.Condition{Type: controlv1alpha1.PoolConditionProgressing, ObservedGeneration: pool.Generation,
		Status: metav1.ConditionFalse, Reason: controlv1alpha1.ReasonUpToDate, Message: "every idle pod is of revision " + obs.revision}
	if old > 0 {
		progressing.Status, progressing.Reason = metav1.ConditionTrue, controlv1alpha1.ReasonRollingUpdate
		progressing.Message = fmt.Sprintf("%d idle pods of older revisions left to replace with revision %s", old, obs.revision)
	}
	meta.SetStatusCondition(&status.Conditions, progressing)

	if equality.Semantic.DeepEqual(pool.Status, status) {
		return 0, nil
	}
	key := client.ObjectKeyFromObject(pool)
	onlyCounts := pool.Status.ObservedGeneration == status.ObservedGeneration && pool.Status.Revision == status.Revision &&
		conditionsEqual(pool.Status.Conditions, status.Conditions)
	if onlyCounts {
		if due := r.statusWrites.due(key, r.now()); due > 0 {
			return due, nil
		}
	}
	patch := client.MergeFrom(pool.DeepCopy())
	pool.Status = status
	if err := r.Client.Status().Patch(ctx, pool, patch); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("update pool status: %w", err)
	}
	r.statusWrites.wrote(key, r.now())
	return 0, nil
}

// conditionsEqual compares conditions by type, status and reason: their messages repeat the
// counts, which may wait.
func conditionsEqual(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		c := meta.FindStatusCondition(b, a[i].Type)
		if c == nil || c.Status != a[i].Status || c.Reason != a[i].Reason {
			return false
		}
	}
	return true
}

// statusWrites remembers when each pool's status was last written by this process.
type statusWrites struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
}

// due returns how long until the pool's counts may be written again; 0: now.
func (w *statusWrites) due(key types.NamespacedName, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if last, ok := w.last[key]; ok {
		if d := last.Add(statusCountsInterval).Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

func (w *statusWrites) wrote(key types.NamespacedName, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = map[types.NamespacedName]time.Time{}
	}
	w.last[key] = now
}
