package batchsandbox

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/http"
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
// tl times the stages of the reconcile that allocates (timeline.go).
func (r *Reconciler) actPooled(ctx context.Context, obs *observed, p pooledPlan, tl *claimTimeline) (*placed, error) {
	bs := obs.bs
	if err := r.remove(ctx, bs, p.remove); err != nil {
		return nil, err
	}
	var failure *sandboxpod.Problem
	if len(p.missing) > 0 {
		var err error
		if failure, err = r.allocate(ctx, bs, p.missing, p.byReplica, tl); err != nil {
			return nil, err
		}
	}
	r.record(bs, lostEvents(bs, p.byReplica, p.desired, p.ended)...)
	return &placed{byReplica: p.byReplica, failure: failure, eg: &egressOnce{r: r, bs: bs, pool: r.poolOf(ctx, bs)}, claimFirst: true, timeline: tl}, nil
}

// allocate gives idle pods of the pool to the missing replicas, recording each in byReplica
// and, in tl, the pods allocated, the conflicts met and the ends of the stages list and
// allocate. It returns the problem to report when replicas remain without a pod.
func (r *Reconciler) allocate(ctx context.Context, bs *controlv1alpha1.BatchSandbox, missing []int32, byReplica map[int32]*corev1.Pod, tl *claimTimeline) (*sandboxpod.Problem, error) {
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
	tl.mark(stageList)

	// Workers take replicas and candidates in order, a replica and its first candidate in one
	// step, so that without a conflict replica k gets the k-th candidate whichever worker runs
	// first; a candidate another reconcile of this process holds (allocations) is passed over,
	// and one another sandbox won first (precondition failed) is skipped and the replica tries
	// the next.
	sandbox := types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}
	var (
		mu          sync.Mutex
		nextMissing int // of missing
		conflicts   int
		firstErr    error
		wg          sync.WaitGroup
	)
	takeLocked := func() *corev1.Pod {
		for c := candidates.next(); c != nil; c = candidates.next() {
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
					if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
						// Lost to another sandbox (or gone): each one costs a write, and many
						// say that allocations race (several controllers, a stale cache).
						allocationConflicts.Inc()
						mu.Lock()
						conflicts++
						mu.Unlock()
						continue
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					break
				}
			}
		})
	}
	wg.Wait()

	allocated := 0
	for _, replica := range missing {
		if _, ok := byReplica[replica]; ok {
			allocated++
		}
	}
	tl.allocated(allocated, conflicts)
	if firstErr != nil {
		return nil, firstErr
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

// idlePods returns the pool's pods that bs can be given now, in the order they are given: idle,
// ready, controlled by the pool, and, when made of the namespace's pod security level, only for
// a sandbox admitted for that. Pods of the current revision come first, then those created
// first (ready longest, as a rule), then by name, so that the order is the same on every
// reconcile. Pods another reconcile of this process is allocating are passed over as they are
// taken (allocations.reserve).
//
// The pods are the cache's own objects (index.Pods), not copies: allocateOne copies the one
// it writes.
func (r *Reconciler) idlePods(ctx context.Context, bs *controlv1alpha1.BatchSandbox, pool *controlv1alpha1.Pool) (*candidates, error) {
	pods, err := r.Pods.Idle(ctx, r.Client, pool.Namespace, pool.Name)
	if err != nil {
		return nil, fmt.Errorf("list idle pool pods: %w", err)
	}
	revision := sandboxpod.PoolRevision(pool, r.RuntimeClass)
	admitted := bs.Annotations[controlv1alpha1.AnnotationPodSecurity] == string(controlv1alpha1.PodSecurityNamespace)
	out := make(candidates, 0, len(pods))
	for _, p := range pods {
		// The index keys the pool's name: a pod of an earlier pool of that name is not this one's.
		if !metav1.IsControlledBy(p, pool) {
			continue
		}
		if !admitted && p.Labels[controlv1alpha1.LabelPodSecurity] == string(controlv1alpha1.PodSecurityNamespace) {
			// Made while the pool had podSecurity: Namespace, which it may have no more.
			continue
		}
		out = append(out, candidate{pod: p, current: p.Labels[controlv1alpha1.LabelPoolRevision] == revision,
			created: p.CreationTimestamp.UnixNano(), name: p.Name})
	}
	heap.Init(&out)
	return &out, nil
}

// candidate is an idle pod with its place in the order of idlePods, computed once: the order
// is then a comparison of fields, not of label lookups.
type candidate struct {
	pod     *corev1.Pod
	current bool  // of the pool's current revision
	created int64 // Unix nanoseconds
	name    string
}

// candidates is a heap of idle pods in the order of idlePods. A reconcile takes a few of a
// pool's hundreds of idle pods: making the heap costs O(n) and each pod taken O(log n), where
// sorting them all cost O(n log n).
type candidates []candidate

var _ heap.Interface = &candidates{}

// Len, Less, Swap, Push and Pop implement heap.Interface.
func (c candidates) Len() int { return len(c) }

func (c candidates) Less(i, j int) bool {
	a, b := &c[i], &c[j]
	if a.current != b.current {
		return a.current
	}
	if a.created != b.created {
		return a.created < b.created
	}
	return a.name < b.name
}

func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }

func (c *candidates) Push(x any) { *c = append(*c, x.(candidate)) }

func (c *candidates) Pop() any {
	old := *c
	last := old[len(old)-1]
	old[len(old)-1] = candidate{} // no reference to the pod left behind in the array
	*c = old[:len(old)-1]
	return last
}

// next takes the first pod left; nil when none is.
func (c *candidates) next() *corev1.Pod {
	if c.Len() == 0 {
		return nil
	}
	return heap.Pop(c).(candidate).pod
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
// tl (nil but in pooled mode) gets the ends of the stages policy and claim.
func (r *Reconciler) claimAll(ctx context.Context, bs *controlv1alpha1.BatchSandbox, eg *egressOnce, byReplica map[int32]*corev1.Pod, tl *claimTimeline) (map[int32]string, *sandboxpod.Problem, error) {
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
			// Only a pool pod is claimed; a pooled sandbox's pods of its own (resumed from
			// snapshots) are the sandbox's from their start, policy included.
			poolPod := p.Labels[controlv1alpha1.LabelPool] != ""
			var err error
			if egressCfg != nil && poolPod {
				// The certification (with the pod's execd) and the policy's push (to the
				// node agent) do not depend on each other: they run at once, each a round
				// trip, and the certification's error, if any, is the one that counts.
				var egressErr error
				var push sync.WaitGroup
				push.Go(func() { egressErr = r.Egress.Ensure(ctx, p, *egressCfg) })
				err = r.Certifier.Ensure(ctx, p)
				push.Wait()
				if err == nil {
					err = egressErr
				}
			} else {
				err = r.Certifier.Ensure(ctx, p)
			}
			if err == nil {
				tl.mark(stagePolicy)
			}
			// Only after both: the claim starts the entrypoint, which must never run without
			// the sandbox's policy in force.
			if err == nil && req != nil && poolPod {
				if _, err = claimer.Claim(ctx, p, req); err == nil {
					tl.mark(stageClaim)
				}
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
