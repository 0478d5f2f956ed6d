package batchsandbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/egress"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// egressOnce is a sandbox's egress Config, composed at most once per reconcile: new pods,
// claims and the pushes to running pods all want the same one.
type egressOnce struct {
	r    *Reconciler
	bs   *controlv1alpha1.BatchSandbox
	pool *controlv1alpha1.Pool
	done bool
	cfg  egressapi.Config
	err  error
}

func (e *egressOnce) get(ctx context.Context) (egressapi.Config, error) {
	if !e.done {
		e.cfg, e.err = e.r.Egress.SandboxConfig(ctx, e.bs, e.pool)
		e.done = true
	}
	return e.cfg, e.err
}

func (r *Reconciler) forgetEgress(uid types.UID) {
	if r.Egress != nil {
		r.Egress.Forget(uid)
	}
}

// enforceEgress pushes the sandbox's current policy, through the node agent of each pod's
// node, to every replica whose pod serves the sandbox (eligible: a pool pod claimed, a
// direct-mode pod with an address) and has not confirmed it yet, and says in the EgressReady condition whether all of them enforce it. A push
// happens only when the policy (or the platform's) changed, or for a pod not seen before:
// nothing here runs on a timer.
func (r *Reconciler) enforceEgress(ctx context.Context, bs *controlv1alpha1.BatchSandbox, eg *egressOnce,
	byReplica map[int32]*corev1.Pod, claimed map[int32]string) (*metav1.Condition, error) {
	if r.Egress == nil {
		return nil, nil
	}
	cond := &metav1.Condition{Type: controlv1alpha1.ConditionEgressReady, ObservedGeneration: bs.Generation}
	cfg, err := eg.get(ctx)
	var invalid *egress.InvalidPolicy
	switch {
	case errors.As(err, &invalid):
		// A user's error: a new spec brings a new reconcile.
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, controlv1alpha1.ReasonPolicyFailed, err.Error()
		return cond, nil
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, controlv1alpha1.ReasonPolicyPending, err.Error()
		return cond, err
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		sem      = make(chan struct{}, parallelWrites)
		applied  int
		failed   []string
		retryErr error
	)
	for i, p := range byReplica {
		if claimed[i] == "" || p.Status.PodIP == "" || p.Status.HostIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := r.Egress.Ensure(ctx, p, cfg)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				applied++
				r.Egress.Denials.Watch(p, bs)
			default:
				failed = append(failed, err.Error())
				retryErr = errors.Join(retryErr, err)
			}
		})
	}
	wg.Wait()
	desired := replicas(bs)
	switch {
	case len(failed) > 0:
		sort.Strings(failed)
		cond.Status, cond.Reason = metav1.ConditionFalse, controlv1alpha1.ReasonPolicyFailed
		cond.Message = fmt.Sprintf("%d/%d replicas enforce revision %s: %s", applied, desired, cfg.Revision, strings.Join(failed, "; "))
	case int32(applied) == desired:
		cond.Status, cond.Reason = metav1.ConditionTrue, controlv1alpha1.ReasonPolicyApplied
		cond.Message = fmt.Sprintf("%d/%d replicas enforce revision %s", applied, desired, cfg.Revision)
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, controlv1alpha1.ReasonPolicyPending
		cond.Message = fmt.Sprintf("%d/%d replicas enforce revision %s", applied, desired, cfg.Revision)
	}
	return cond, retryErr
}
