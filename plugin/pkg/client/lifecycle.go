package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// RenewOptions say how far to move a sandbox's expiry: by Extend from now (whole seconds), or
// to Until. The expiry only moves forward.
type RenewOptions struct {
	Extend time.Duration
	Until  time.Time
}

// Renewal is the SandboxRenewal that o describes.
func (o RenewOptions) Renewal(name string) (*sandboxv1alpha1.SandboxRenewal, error) {
	renewal := &sandboxv1alpha1.SandboxRenewal{
		// Set explicitly, although the client's encoder would fill them in from the scheme:
		// the server decodes the body by them.
		TypeMeta:   metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxRenewal"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
	switch {
	case o.Extend != 0 && !o.Until.IsZero():
		return nil, errors.New("extend and until cannot be used together")
	case o.Extend != 0:
		if o.Extend < 0 || o.Extend%time.Second != 0 {
			return nil, fmt.Errorf("extend must be a positive whole number of seconds, got %s", o.Extend)
		}
		seconds := int64(o.Extend / time.Second)
		renewal.ExtendSeconds = &seconds
	case !o.Until.IsZero():
		renewal.ExpiresAt = &metav1.Time{Time: o.Until}
	default:
		return nil, errors.New("one of extend and until is required")
	}
	return renewal, nil
}

// Renew moves the sandbox's expiry forward and returns the sandbox with its new
// status.expiresAt. A sandbox without expiry, or one that has expired (ErrExpired), is a
// conflict.
func (c *Client) Renew(ctx context.Context, name string, o RenewOptions) (*sandboxv1alpha1.Sandbox, error) {
	renewal, err := o.Renewal(name)
	if err != nil {
		return nil, err
	}
	renewal.Namespace = c.namespace
	sb := &sandboxv1alpha1.Sandbox{}
	err = c.subresource("POST", name, "renew").Body(renewal).Do(ctx).Into(sb)
	return sb, wrap(err)
}

// SetPaused sets spec.paused with an update (the verb RBAC authorizes pause and resume by),
// retrying on conflicts; changed is false when it was so already. The sandbox gets there
// later: Pause and Resume wait for it.
func (c *Client) SetPaused(ctx context.Context, name string, paused bool) (changed bool, err error) {
	sandboxes := c.clientset.SandboxV1alpha1().Sandboxes(c.namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sb, err := sandboxes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if sb.Spec.Paused == paused {
			return nil
		}
		sb.Spec.Paused = paused
		_, err = sandboxes.Update(ctx, sb, metav1.UpdateOptions{FieldValidation: metav1.FieldValidationStrict})
		changed = err == nil
		return err
	})
	return changed, wrap(err)
}

// Pause snapshots the sandbox's filesystem and frees its pods, and waits until it is Paused.
// Processes and code contexts are not kept.
func (c *Client) Pause(ctx context.Context, name string) (*sandboxv1alpha1.Sandbox, error) {
	return c.pauseOrResume(ctx, name, true)
}

// Resume brings a paused sandbox back from its snapshot and waits until it is Running.
func (c *Client) Resume(ctx context.Context, name string) (*sandboxv1alpha1.Sandbox, error) {
	return c.pauseOrResume(ctx, name, false)
}

func (c *Client) pauseOrResume(ctx context.Context, name string, paused bool) (*sandboxv1alpha1.Sandbox, error) {
	if _, err := c.SetPaused(ctx, name, paused); err != nil {
		return nil, err
	}
	want := sandboxv1alpha1.PhaseRunning
	if paused {
		want = sandboxv1alpha1.PhasePaused
	}
	return c.Wait(ctx, name, func(sb *sandboxv1alpha1.Sandbox) (bool, error) { return Reached(sb, want) })
}

// Reached tells whether sb is in phase want, or can no longer get there: deleted, failed or
// expired, or refused to pause.
func Reached(sb *sandboxv1alpha1.Sandbox, want sandboxv1alpha1.SandboxPhase) (bool, error) {
	if sb == nil {
		return false, fmt.Errorf("the sandbox was deleted")
	}
	switch phase := Phase(sb); phase {
	case want:
		return true, nil
	case sandboxv1alpha1.PhaseExpired:
		return false, &ExpiredError{Name: sb.Name}
	case sandboxv1alpha1.PhaseFailed, sandboxv1alpha1.PhaseTerminating:
		return false, fmt.Errorf("sandbox %q is %s%s", sb.Name, phase, Why(sb))
	}
	if c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1alpha1.ConditionPaused); c != nil &&
		c.Reason == sandboxv1alpha1.ReasonPauseNotSupported && c.ObservedGeneration == sb.Generation {
		return false, fmt.Errorf("sandbox %q cannot pause: %s", sb.Name, c.Message)
	}
	return false, nil
}

// Why is " (TYPE REASON: MESSAGE)" of the Paused condition, else of Ready, when it is not
// True, for a message; empty otherwise.
func Why(sb *sandboxv1alpha1.Sandbox) string {
	for _, t := range []string{sandboxv1alpha1.ConditionPaused, sandboxv1alpha1.ConditionReady} {
		if c := meta.FindStatusCondition(sb.Status.Conditions, t); c != nil && c.Status != metav1.ConditionTrue {
			return fmt.Sprintf(" (%s %s: %s)", t, c.Reason, c.Message)
		}
	}
	return ""
}
