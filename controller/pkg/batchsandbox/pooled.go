package batchsandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/egress"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/identity"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxevents"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// parallelWrites bounds the allocations (and claims) one reconcile makes at once: a
// 100-replica sandbox is allocated in a few round trips instead of 100, without flooding the
// kube-apiserver.
const parallelWrites = 16

// reconcilePooled keeps one pod of the pool per replica. A pod is allocated by one write: the
// sandbox's labels and controller reference on the idle pod, with its resourceVersion as
// precondition, so no pod is ever given to two sandboxes; then its execd is claimed for the
// sandbox (env, entrypoint). Lost pods (deleted, evicted, failed) are replaced from the pool,
// surplus ones are released.
func (r *Reconciler) reconcilePooled(ctx context.Context, bs *controlv1alpha1.BatchSandbox, result reconcile.Result) (reconcile.Result, error) {
	desired := replicas(bs)
	pods, err := r.listPods(ctx, bs)
	if err != nil {
		return reconcile.Result{}, err
	}
	byReplica := map[int32]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		idx, err := strconv.ParseInt(p.Labels[controlv1alpha1.LabelReplica], 10, 32)
		switch {
		case err != nil || idx < 0 || int32(idx) >= desired:
			r.release(ctx, bs, p, "surplus after a scale-down") // and its replica needs no pod
		case p.DeletionTimestamp != nil:
			// Going: the replica gets another pod now, not after the grace period.
		case p.Status.Phase == corev1.PodFailed:
			r.release(ctx, bs, p, "failed: "+p.Status.Reason)
		default:
			if prev, ok := byReplica[int32(idx)]; ok {
				// Two pods for one replica: only two controllers running at once can do that.
				// Keep one, deterministically.
				keep, drop := prev, p
				if sandboxpod.Ready(p) && !sandboxpod.Ready(prev) || sandboxpod.Ready(p) == sandboxpod.Ready(prev) && p.Name < prev.Name {
					keep, drop = p, prev
				}
				byReplica[int32(idx)] = keep
				r.release(ctx, bs, drop, "a second pod of the same replica")
				continue
			}
			byReplica[int32(idx)] = p
		}
	}

	ended := endedReplicas(bs)
	r.releaseEnded(ctx, bs, ended, byReplica)
	var missing []int32
	for i := int32(0); i < desired; i++ {
		if _, ok := byReplica[i]; !ok && !ended[i] {
			missing = append(missing, i)
		}
	}
	var failure *sandboxpod.Problem
	if len(missing) > 0 {
		failure, err = r.allocate(ctx, bs, missing, byReplica)
		if err != nil {
			return reconcile.Result{}, err
		}
	}
	r.reportLost(bs, byReplica, desired, ended)

	eg := &egressOnce{r: r, bs: bs, pool: r.poolOf(ctx, bs)}
	claimed, claimFailure, claimErr := r.claimAll(ctx, bs, eg, byReplica)
	if failure == nil {
		failure = claimFailure
	}
	// A pool pod gets the sandbox's policy at its claim; a pod of the sandbox's own (resumed
	// from a snapshot) as soon as it has an address, for its init container waits for it.
	eligible := addressed(byReplica)
	for i, p := range byReplica {
		if p.Labels[controlv1alpha1.LabelPool] != "" && claimed[i] == "" {
			delete(eligible, i)
		}
	}
	egressCond, egressErr := r.enforceEgress(ctx, bs, eg, byReplica, eligible)
	tk, taskErr := r.reconcileTasks(ctx, bs, byReplica, claimed)
	if err := r.updateStatus(ctx, bs, byReplica, claimed, tk, failure, egressCond); err != nil {
		return reconcile.Result{}, err
	}
	if claimErr != nil {
		return reconcile.Result{}, claimErr
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

// allocate gives idle pods of the pool to the missing replicas, recording each in byReplica.
// It returns the problem to report when replicas remain without a pod.
func (r *Reconciler) allocate(ctx context.Context, bs *controlv1alpha1.BatchSandbox, missing []int32, byReplica map[int32]*corev1.Pod) (*sandboxpod.Problem, error) {
	poolName := bs.Spec.PoolRef.Name
	pool := &controlv1alpha1.Pool{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Namespace: bs.Namespace, Name: poolName}, pool); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get pool: %w", err)
		}
		problem := &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPoolNotFound, Pending: true,
			Message: fmt.Sprintf("pool %q does not exist in namespace %q: create it (the sandbox then gets its pods) or delete the sandbox", poolName, bs.Namespace)}
		r.eventOnce(bs, problem, corev1.EventTypeWarning, "Allocate")
		return problem, nil
	}
	if problem := poolNotAllowed(bs, pool); problem != nil {
		r.eventOnce(bs, problem, corev1.EventTypeWarning, "Allocate")
		return problem, nil
	}
	candidates, err := r.idlePods(ctx, bs, pool)
	if err != nil {
		return nil, err
	}

	// Workers take replicas and candidates in order; a candidate another sandbox won first
	// (precondition failed) is skipped and the replica tries the next.
	sandbox := types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}
	var (
		mu       sync.Mutex
		next     int
		firstErr error
		wg       sync.WaitGroup
	)
	take := func() *corev1.Pod {
		mu.Lock()
		defer mu.Unlock()
		for next < len(candidates) {
			c := candidates[next]
			next++
			if r.allocations.reserve(c.UID, sandbox) {
				return c
			}
		}
		return nil
	}
	work := make(chan int32)
	workers := min(len(missing), parallelWrites)
	for range workers {
		wg.Go(func() {
			for replica := range work {
				for c := take(); c != nil; c = take() {
					pod, err := r.allocateOne(ctx, bs, replica, c)
					if err == nil {
						r.allocations.done(pod)
						mu.Lock()
						byReplica[replica] = pod
						mu.Unlock()
						break
					}
					r.allocations.release(c.UID)
					if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
						break
					}
				}
			}
		})
	}
	for _, replica := range missing {
		work <- replica
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}

	allocated := 0
	for _, replica := range missing {
		if _, ok := byReplica[replica]; ok {
			allocated++
		}
	}
	if allocated == len(missing) {
		// No Event: PodsReady follows within milliseconds, and every write counts here.
		return nil, nil
	}
	if allocated > 0 {
		r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeNormal, controlv1alpha1.ReasonAllocated, "Allocate",
			"%d pod(s) allocated from pool %s", allocated, poolName)
	}
	problem := &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPoolExhausted, Pending: true,
		Message: fmt.Sprintf("%d of %d replicas wait for an idle pod of pool %q (available %d, total %d of poolMax %d); the pool grows and they get the next pods that become ready",
			len(missing)-allocated, replicas(bs), poolName, pool.Status.Available, pool.Status.Total, pool.Spec.CapacitySpec.PoolMax)}
	r.eventOnce(bs, problem, corev1.EventTypeWarning, "Allocate")
	return problem, nil
}

// idlePods lists the pool's pods that bs can be given now: idle, ready, controlled by the
// pool, not being allocated by another reconcile, and, when made of the namespace's pod
// security level, only for a sandbox admitted for that. Pods of the current revision come
// first, then those ready longest.
func (r *Reconciler) idlePods(ctx context.Context, bs *controlv1alpha1.BatchSandbox, pool *controlv1alpha1.Pool) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	// Read-only: the cache's own objects, not copies of every pod of the pool per reconcile.
	// allocateOne copies the one it writes.
	if err := r.Client.List(ctx, list, ctrl.InNamespace(pool.Namespace),
		ctrl.MatchingLabels{controlv1alpha1.LabelPool: pool.Name}, ctrl.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list pool pods: %w", err)
	}
	revision := sandboxpod.PoolRevision(pool, r.RuntimeClass)
	var out []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if _, allocated := p.Labels[controlv1alpha1.LabelBatchSandbox]; allocated ||
			!metav1.IsControlledBy(p, pool) || !sandboxpod.Ready(p) || r.allocations.taken(p.UID) {
			continue
		}
		if p.Labels[controlv1alpha1.LabelPodSecurity] == string(controlv1alpha1.PodSecurityNamespace) &&
			bs.Annotations[controlv1alpha1.AnnotationPodSecurity] != string(controlv1alpha1.PodSecurityNamespace) {
			// Made while the pool had podSecurity: Namespace, which it may have no more.
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(a, b int) bool {
		ca, cb := out[a].Labels[controlv1alpha1.LabelPoolRevision] == revision, out[b].Labels[controlv1alpha1.LabelPoolRevision] == revision
		if ca != cb {
			return ca
		}
		if !out[a].CreationTimestamp.Equal(&out[b].CreationTimestamp) {
			return out[a].CreationTimestamp.Before(&out[b].CreationTimestamp)
		}
		return out[a].Name < out[b].Name
	})
	return out, nil
}

// allocateOne writes the allocation onto the pod: the sandbox's labels and its controller
// reference in place of the pool's, with the pod's resourceVersion as precondition. Of two
// sandboxes that try for the same pod, one gets a conflict.
func (r *Reconciler) allocateOne(ctx context.Context, bs *controlv1alpha1.BatchSandbox, replica int32, candidate *corev1.Pod) (*corev1.Pod, error) {
	pod := candidate.DeepCopy()
	patch := ctrl.MergeFromWithOptions(candidate, ctrl.MergeFromWithOptimisticLock{})
	pod.Labels[controlv1alpha1.LabelBatchSandbox] = bs.Name
	pod.Labels[controlv1alpha1.LabelReplica] = strconv.Itoa(int(replica))
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[controlv1alpha1.AnnotationAllocatedAt] = r.now().UTC().Format(time.RFC3339Nano)
	refs := []metav1.OwnerReference{*metav1.NewControllerRef(bs, controlv1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))}
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			refs = append(refs, ref)
		}
	}
	pod.OwnerReferences = refs
	if err := r.Client.Patch(ctx, pod, patch); err != nil {
		return nil, err
	}
	log.FromContext(ctx).V(4).Info("allocated pool pod", "pod", pod.Name, "replica", replica)
	return pod, nil
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

// claimAll makes sure that the execd of every ready pod whose current container is not recorded
// yet (new pods, and containers that restarted since) serves its pod's certificate (package
// identity) and, for a pooled sandbox, belongs to the sandbox (a claim: env, entrypoint). It
// returns the runtime ID recorded per replica, a problem to report, and an error worth a retry.
func (r *Reconciler) claimAll(ctx context.Context, bs *controlv1alpha1.BatchSandbox, eg *egressOnce, byReplica map[int32]*corev1.Pod) (map[int32]string, *sandboxpod.Problem, error) {
	claimed := map[int32]string{}
	var todo []int32
	for i, p := range byReplica {
		rid := sandboxpod.RuntimeID(p)
		if st := statusOf(bs, i); st != nil && st.Name == p.Name && st.RuntimeID != "" && st.RuntimeID == rid {
			claimed[i] = rid
			continue
		}
		if sandboxpod.Ready(p) && rid != "" {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return claimed, nil, nil
	}
	var req *execdapi.ClaimRequest
	if bs.Spec.PoolRef != nil {
		req = &execdapi.ClaimRequest{SandboxUID: string(bs.UID), Namespace: bs.Namespace, Name: bs.Name, Entrypoint: bs.Spec.Entrypoint}
		for _, e := range bs.Spec.Env {
			// execd sets these itself (and refuses a claim that sets them); the aggregated API
			// refuses them, a BatchSandbox written directly may still carry them.
			if _, reserved := execdapi.ReservedEnv(e.Name); reserved {
				continue
			}
			req.Env = append(req.Env, execdapi.EnvVar{Name: e.Name, Value: e.Value})
		}
	}
	claimer := r.Claimer
	if claimer == nil {
		claimer = r.defaultClaimer()
	}
	// A pool pod denies all outbound traffic until the claim: the sandbox's policy goes to its
	// node agent (sandbox-node) first, so that the entrypoint the claim starts never runs without it.
	var egressCfg *egressapi.Config
	if req != nil && r.Egress != nil {
		cfg, err := eg.get(ctx)
		var invalid *egress.InvalidPolicy
		if errors.As(err, &invalid) {
			return claimed, &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPolicyFailed, Pending: true, Message: err.Error()}, nil
		}
		if err != nil {
			return claimed, nil, err
		}
		egressCfg = &cfg
	}

	var (
		mu       sync.Mutex
		problem  *sandboxpod.Problem
		retryErr error
		refused  []int32
		wg       sync.WaitGroup
		sem      = make(chan struct{}, parallelWrites)
	)
	for _, i := range todo {
		p := byReplica[i] // read here: the goroutines never touch the map
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := r.Certifier.Ensure(ctx, p)
			// Only a pool pod is claimed; a pooled sandbox's pods of its own (resumed from
			// snapshots) are the sandbox's from their start, policy included.
			poolPod := p.Labels[controlv1alpha1.LabelPool] != ""
			if err == nil && egressCfg != nil && poolPod {
				err = r.Egress.Ensure(ctx, p, *egressCfg)
			}
			if err == nil && req != nil && poolPod {
				_, err = claimer.Claim(ctx, p, req)
			}
			mu.Lock()
			defer mu.Unlock()
			var rejected *ClaimRejected
			var notThePod *identity.ErrNotThePod
			var policyRejected *egress.Rejected
			switch {
			case err == nil:
				claimed[i] = sandboxpod.RuntimeID(p)
			case errors.As(err, &policyRejected):
				// The pod cannot enforce the sandbox's policy: it is not given the sandbox.
				problem = &sandboxpod.Problem{Reason: controlv1alpha1.ReasonPolicyFailed, Pending: true, Message: err.Error()}
				if retryErr == nil {
					retryErr = err
				}
			case errors.As(err, &notThePod):
				// Whatever answers at the pod's IP is not the pod: nothing of the sandbox goes there.
				problem = &sandboxpod.Problem{Reason: controlv1alpha1.ReasonIdentityFailed, Pending: true, Message: err.Error()}
				if retryErr == nil {
					retryErr = err
				}
			case errors.As(err, &rejected) && rejected.StatusCode == http.StatusConflict && req != nil:
				// The pod's execd belongs to another sandbox: it cannot be ours. Give it back
				// (deleted) and take another.
				r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, controlv1alpha1.ReasonAllocateFailed, "Claim", "%v; replacing the pod", err)
				r.release(ctx, bs, p, "its execd refused the allocation")
				r.allocations.release(p.UID)
				refused = append(refused, i)
				if retryErr == nil {
					retryErr = err
				}
			case errors.As(err, &rejected) && rejected.StatusCode != http.StatusForbidden:
				// The sandbox's own spec is at fault (an entrypoint that does not start, say).
				problem = &sandboxpod.Problem{Reason: controlv1alpha1.ReasonAllocateFailed, Message: err.Error()}
			default:
				if retryErr == nil {
					retryErr = err
				}
			}
		})
	}
	wg.Wait()
	for _, i := range refused {
		delete(byReplica, i)
	}
	if problem != nil {
		r.eventOnce(bs, problem, corev1.EventTypeWarning, "Claim")
	}
	return claimed, problem, retryErr
}

// defaultClaimer is made once, with the Authority's credentials.
func (r *Reconciler) defaultClaimer() Claimer {
	r.claimerOnce.Do(func() { r.claimer = NewHTTPClaimer(r.Authority) })
	return r.claimer
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

// reportLost records an Event for each replica whose pod the status listed and that is gone or
// replaced. The status then forgets that pod, so each loss is told once.
func (r *Reconciler) reportLost(bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, desired int32, ended map[int32]bool) {
	for _, st := range bs.Status.Pods {
		if st.Replica >= desired || ended[st.Replica] {
			continue
		}
		p, ok := byReplica[st.Replica]
		switch {
		case !ok:
			r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, controlv1alpha1.ReasonPodLost, "Replace",
				"pod %s of replica %d is gone or failed; waiting for another pod of the pool", st.Name, st.Replica)
		case p.Name != st.Name:
			r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, controlv1alpha1.ReasonPodLost, "Replace",
				"pod %s of replica %d is gone or failed; replaced by %s", st.Name, st.Replica, p.Name)
		}
	}
}

// eventOnce records a problem as an Event on the Sandbox when the Ready condition does not say
// it already.
func (r *Reconciler) eventOnce(bs *controlv1alpha1.BatchSandbox, problem *sandboxpod.Problem, eventType, action string) {
	if c := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionReady); c != nil && c.Reason == problem.Reason {
		return
	}
	r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, eventType, problem.Reason, action, "%s", problem.Message)
}

func statusOf(bs *controlv1alpha1.BatchSandbox, replica int32) *controlv1alpha1.SandboxPodStatus {
	for i := range bs.Status.Pods {
		if bs.Status.Pods[i].Replica == replica {
			return &bs.Status.Pods[i]
		}
	}
	return nil
}
