package egress

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// Enforcer is what the reconcilers need of egress: the platform policy, and the pusher to
// the node agents that enforce it.
type Enforcer struct {
	Source *Source
	Pusher *Pusher
	// Denials reports denied names as Events; nil: none.
	Denials *DenialWatcher
}

// Forget drops what is remembered of a pod that is gone.
func (e *Enforcer) Forget(uid types.UID) {
	e.Pusher.Forget(uid)
	e.Denials.Forget(uid)
}

// SandboxConfig is the Config of the pods of bs (PodUID left empty): its own policy, else its
// pool's (pool may be nil), else the platform's default.
func (e *Enforcer) SandboxConfig(ctx context.Context, bs *controlv1alpha1.BatchSandbox, pool *controlv1alpha1.Pool) (egressapi.Config, error) {
	platform, cluster, err := e.Source.Current(ctx)
	if err != nil {
		return egressapi.Config{}, err
	}
	policy := bs.Spec.NetworkPolicy
	from := field.NewPath("spec", "networkPolicy")
	if policy == nil && pool != nil {
		policy, from = pool.Spec.NetworkPolicy, field.NewPath("pool", pool.Name, "spec", "networkPolicy")
	}
	if policy != nil {
		// sandbox-apiserver validates a Sandbox's policy; a Pool's or a BatchSandbox's written
		// directly gets here unchecked but for its schema. An invalid one is not pushed: the
		// pods keep what they enforce (deny-all for a pool pod), and the sandbox says why.
		p := policy.EgressPolicy()
		if errs := egressapi.ValidatePolicy(&p, from); len(errs) > 0 {
			return egressapi.Config{}, &InvalidPolicy{Errs: errs}
		}
	}
	ref := &egressapi.SandboxRef{Namespace: bs.Namespace, Name: bs.Name, UID: string(bs.UID)}
	return platform.ConfigFor(cluster, "", ref, bs.Generation, policy), nil
}

// InvalidPolicy: the policy a sandbox would get does not validate.
type InvalidPolicy struct{ Errs field.ErrorList }

func (e *InvalidPolicy) Error() string {
	return "invalid network policy: " + e.Errs.ToAggregate().Error()
}

// IdleConfig is the Config of a pool pod no sandbox has: everything denied.
func IdleConfig() egressapi.Config {
	cfg := egressapi.Config{DefaultAction: egressapi.ActionDeny}
	cfg.Revision = cfg.Hash()
	return cfg
}

// PodEgress is how sandboxpod.Inject makes a pod wait for cfg (its policy at start) to be in
// force; nil when e is nil.
func (e *Enforcer) PodEgress(cfg egressapi.Config) *sandboxpod.Egress {
	if e == nil {
		return nil
	}
	return &sandboxpod.Egress{Config: cfg}
}

// Ensure pushes cfg, for pod, to the node agent of the pod's node unless the pod has it
// already.
func (e *Enforcer) Ensure(ctx context.Context, pod *corev1.Pod, cfg egressapi.Config) error {
	cfg.PodUID = string(pod.UID)
	return e.Pusher.Ensure(ctx, pod, &cfg)
}
