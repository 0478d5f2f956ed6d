package egress

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxpod"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// Enforcer is what the reconcilers need of egress: the sidecar's image, the platform policy,
// and the pusher.
type Enforcer struct {
	Image  string
	Source *Source
	Pusher *Pusher
	// Certifier certifies each pod's sandbox-egress (an identity.Certifier for it), before
	// anything is pushed to it; nil: none (tests).
	Certifier PodCertifier
	// Denials reports denied names as Events; nil: none.
	Denials *DenialWatcher
}

// Forget drops what is remembered of a pod that is gone.
func (e *Enforcer) Forget(uid types.UID) {
	e.Pusher.Forget(uid)
	e.Denials.Forget(uid)
	if e.Certifier != nil {
		e.Certifier.Forget(uid)
	}
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

// Sidecar is how sandboxpod.Inject adds sandbox-egress with cfg; nil when e is nil.
func (e *Enforcer) Sidecar(cfg egressapi.Config) *sandboxpod.Egress {
	if e == nil {
		return nil
	}
	return &sandboxpod.Egress{Image: e.Image, Config: cfg}
}

// PodCertifier certifies a pod's sandbox-egress (identity.Certifier).
type PodCertifier interface {
	Ensure(ctx context.Context, pod *corev1.Pod) error
	Forget(uid types.UID)
}

// Ensure pushes cfg, for pod, to the pod's sandbox-egress unless it has it already, once that
// sandbox-egress proved to be the pod's.
func (e *Enforcer) Ensure(ctx context.Context, pod *corev1.Pod, cfg egressapi.Config) error {
	cfg.PodUID = string(pod.UID)
	if e.Pusher.Applied(pod, cfg.Revision) {
		return nil
	}
	if e.Certifier != nil {
		if err := e.Certifier.Ensure(ctx, pod); err != nil {
			return fmt.Errorf("certify the sandbox-egress of pod %s: %w", pod.Name, err)
		}
	}
	return e.Pusher.Ensure(ctx, pod, &cfg)
}
