package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// RenewREST implements the renew subresource: POST a SandboxRenewal to move the expiry.
type RenewREST struct {
	renewer *Renewer
	limits  Limits
	clock   clock.PassiveClock
}

var _ rest.NamedCreater = &RenewREST{}

// NewRenewREST returns the renew subresource.
func NewRenewREST(renewer *Renewer, limits Limits, clk clock.PassiveClock) *RenewREST {
	return &RenewREST{renewer: renewer, limits: limits, clock: clk}
}

// New implements rest.Storage.
func (r *RenewREST) New() runtime.Object { return &sandboxv1alpha1.SandboxRenewal{} }

// Destroy implements rest.Storage.
func (r *RenewREST) Destroy() {}

var renewalKind = sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxRenewal").GroupKind()

// Create implements rest.NamedCreater. It returns the sandbox with its new expiry.
func (r *RenewREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	renewal, ok := obj.(*sandboxv1alpha1.SandboxRenewal)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a SandboxRenewal: %T", obj))
	}
	now := r.clock.Now()
	if errs := validateRenewal(renewal, now, r.limits); len(errs) > 0 {
		return nil, apierrors.NewInvalid(renewalKind, name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, renewal); err != nil {
			return nil, err
		}
	}
	bs, err := r.renewer.Extend(ctx, genericapirequest.NamespaceValue(ctx), name, requestedExpiry(renewal, now), options != nil && len(options.DryRun) > 0)
	if err != nil {
		return nil, err
	}
	return fromBatchSandbox(bs), nil
}

// Renewer moves expiries forward, for the renew subresource and for auto-renew on access.
type Renewer struct {
	backend client.Client
	clock   clock.PassiveClock

	// Auto-renew writes at most once per autoRenewInterval per sandbox: an agent that execs in
	// a loop must not turn into a stream of writes.
	mu        sync.Mutex
	lastTouch map[client.ObjectKey]time.Time
}

// autoRenewInterval: the expiry an access asks for is at least extendSeconds away, so a
// renewal a few seconds late costs nothing.
const autoRenewInterval = 5 * time.Second

// NewRenewer returns a Renewer writing through backend.
func NewRenewer(backend client.Client, clk clock.PassiveClock) *Renewer {
	return &Renewer{backend: backend, clock: clk, lastTouch: map[client.ObjectKey]time.Time{}}
}

var errConflict = errors.New("conflict")

// renewRetry bounds the rereads of a renewal that lost a race. Renewals of one sandbox race
// each other (every exec of an autoRenew sandbox is one) as well as the controller's status
// writes; each round lets at least one writer through, so n concurrent renewals need up to n
// rounds, where retry.DefaultRetry's 5 gave up under load. Jitter spreads the rounds; the whole
// wait stays well under a second.
var renewRetry = wait.Backoff{Steps: 30, Duration: 2 * time.Millisecond, Factor: 1.2, Jitter: 1, Cap: 50 * time.Millisecond}

// Extend sets the expiry of a sandbox to max(current, want). Expiry only moves forward, and
// concurrent renewals cannot move it back: each write is conditional on the version it read,
// and a conflict reads again. A sandbox without expiry, or one already expired, is a 409.
func (r *Renewer) Extend(ctx context.Context, namespace, name string, want time.Time, dryRun bool) (*controlv1alpha1.BatchSandbox, error) {
	// Stored times have second precision: compare in what will be stored.
	want = want.Truncate(time.Second)
	var out *controlv1alpha1.BatchSandbox
	err := retry.OnError(renewRetry, func(err error) bool { return errors.Is(err, errConflict) }, func() error {
		bs := &controlv1alpha1.BatchSandbox{}
		if err := r.backend.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, bs); err != nil {
			return translateError(err, name)
		}
		if bs.Spec.ExpireTime == nil {
			return apierrors.NewConflict(sandboxResource, name, errors.New("the sandbox has no expiry (no timeoutSeconds): there is nothing to renew"))
		}
		if bs.DeletionTimestamp != nil || !bs.Spec.ExpireTime.Time.After(r.clock.Now()) {
			expired := apierrors.NewConflict(sandboxResource, name, fmt.Errorf("the sandbox expired at %s", bs.Spec.ExpireTime.UTC().Format(time.RFC3339)))
			expired.ErrStatus.Details.Causes = append(expired.ErrStatus.Details.Causes, metav1.StatusCause{
				Type: sandboxv1alpha1.CauseTypeExpired, Message: "the sandbox has expired: create another",
			})
			return expired
		}
		out = bs
		if !want.After(bs.Spec.ExpireTime.Time) {
			return nil // already at least that late: nothing to write
		}
		updated := bs.DeepCopy()
		updated.Spec.ExpireTime = &metav1.Time{Time: want}
		opts := &client.UpdateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if err := r.backend.Update(ctx, updated, opts); err != nil {
			if apierrors.IsConflict(err) {
				return errConflict
			}
			return translateError(err, name)
		}
		out = updated
		return nil
	})
	if errors.Is(err, errConflict) {
		return nil, apierrors.NewConflict(sandboxResource, name, errors.New("the sandbox kept changing; try again"))
	}
	return out, err
}

// Touch extends the expiry of a sandbox that asks for auto-renew to now + extendSeconds. It
// is called on every access; failures are logged, never fatal to the access.
func (r *Renewer) Touch(ctx context.Context, bs *controlv1alpha1.BatchSandbox) {
	if bs.Spec.AutoRenew == nil || bs.Spec.ExpireTime == nil {
		return
	}
	now := r.clock.Now()
	want := now.Add(time.Duration(bs.Spec.AutoRenew.ExtendSeconds) * time.Second)
	if !want.Truncate(time.Second).After(bs.Spec.ExpireTime.Time) {
		return
	}
	key := client.ObjectKeyFromObject(bs)
	r.mu.Lock()
	if last, ok := r.lastTouch[key]; ok && now.Sub(last) < autoRenewInterval {
		r.mu.Unlock()
		return
	}
	r.lastTouch[key] = now
	// Forget sandboxes not touched for a while, so the map does not grow without bound.
	for k, t := range r.lastTouch {
		if now.Sub(t) > time.Minute {
			delete(r.lastTouch, k)
		}
	}
	r.mu.Unlock()
	if _, err := r.Extend(ctx, bs.Namespace, bs.Name, want, false); err != nil {
		klog.FromContext(ctx).V(2).Info("auto-renew failed", "sandbox", klog.KObj(bs), "err", err)
	}
}
