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

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/egress"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/identity"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxevents"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// parallelWrites bounds the allocations (and claims) one reconcile makes at once: a
// 100-replica sandbox is allocated in a few round trips instead of 100, without flooding the
// kube-apiserver.
const parallelWrites = 16

// actPooled does what planPooled says, keeping one pod of the pool per replica. A pod is
// allocated by one write: the sandbox's labels and controller reference on the idle pod, with
// its resourceVersion as precondition, so no pod is ever given to two sandboxes; its execd is
// then claimed for the sandbox (env, entrypoint: serve). Lost pods (deleted, evicted, failed)
// are replaced from the pool, surplus ones are released.
func (r *Reconciler) actPooled(ctx context.Context, obs *observed, p pooledPlan) (*placed, error) {
	bs := obs.bs
	if err := r.remove(ctx, bs, p.remove); err != nil {
		return nil, err
	}
	var failure *sandboxpod.Problem
	if len(p.missing) > 0 {
		var err error
		if failure, err = r.allocate(ctx, bs, p.missing, p.byReplica); err != nil {
			return nil, err
		}
	}
	r.record(bs, lostEvents(bs, p.byReplica, p.desired, p.ended)...)
	return &placed{byReplica: p.byReplica, failure: failure, eg: &egressOnce{r: r, bs: bs, pool: r.poolOf(ctx, bs)}, claimFirst: true}, nil
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

	// Workers take replicas and candidates in order, a replica and its first candidate in one
	// step, so that without a conflict replica k gets the k-th candidate whichever worker runs
	// first; a candidate another sandbox won first (precondition failed) is skipped and the
	// replica tries the next.
	sandbox := types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}
	var (
		mu          sync.Mutex
		next        int // of candidates
		nextMissing int // of missing
		firstErr    error
		wg          sync.WaitGroup
	)
	takeLocked := func() *corev1.Pod {
		for next < len(candidates) {
			c := candidates[next]
			next++
			if r.allocations.reserve(c.UID, sandbox) {
				return c
			}
		}
		return nil
	}
	take := func() *corev1.Pod {
		mu.Lock()
		defer mu.Unlock()
		return takeLocked()
	}
	start := func() (int32, *corev1.Pod, bool) {
		mu.Lock()
		defer mu.Unlock()
		if nextMissing >= len(missing) {
			return 0, nil, false
		}
		replica := missing[nextMissing]
		nextMissing++
		return replica, takeLocked(), true
	}
	workers := min(len(missing), parallelWrites)
	for range workers {
		wg.Go(func() {
			for replica, c, ok := start(); ok; replica, c, ok = start() {
				for ; c != nil; c = take() {
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

// claimAll makes sure that the execd of every ready pod whose current container is not recorded
// yet (new pods, and containers that restarted since) serves its pod's certificate (package
// identity) and, for a pooled sandbox, belongs to the sandbox (a claim: env, entrypoint). It
// returns the runtime ID recorded per replica, a problem to report, and an error worth a retry.
func (r *Reconciler) claimAll(ctx context.Context, bs *controlv1alpha1.BatchSandbox, eg *egressOnce, byReplica map[int32]*corev1.Pod) (map[int32]string, *sandboxpod.Problem, error) {
	plan := planClaims(bs, byReplica)
	claimed, todo, req := plan.claimed, plan.todo, plan.claim
	if len(todo) == 0 {
		return claimed, nil, nil
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

// eventOnce records a problem as an Event on the Sandbox when the Ready condition does not say
// it already.
func (r *Reconciler) eventOnce(bs *controlv1alpha1.BatchSandbox, problem *sandboxpod.Problem, eventType, action string) {
	if c := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionReady); c != nil && c.Reason == problem.Reason {
		return
	}
	r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, eventType, problem.Reason, action, "%s", problem.Message)
}
