package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client/netpolicy"
)

// ContainerName is the name of the sandbox's container in a pod template Create makes from an
// image.
const ContainerName = "sandbox"

// DefaultGenerateName prefixes the name the server gives a sandbox created without one.
const DefaultGenerateName = "sandbox-"

// CreateOptions describe a sandbox to create: from a warm pool (Pool) or from an image (Image,
// a pod of its own), exactly one of them.
type CreateOptions struct {
	// Name of the sandbox; empty for a name the server makes from GenerateName.
	Name string
	// GenerateName prefixes a server-made name; DefaultGenerateName when both are empty.
	GenerateName string
	Labels       map[string]string
	Annotations  map[string]string

	// Pool is the warm pool to take a pod from, in milliseconds.
	Pool string
	// Image runs the sandbox in a pod of its own made from this image, with RuntimeClass
	// ("gvisor", say) when set.
	Image        string
	RuntimeClass string
	// Replicas is the number of pods (1 when zero).
	Replicas int32

	// Timeout is the sandbox's lifetime, in whole seconds (the server's minimum is a minute);
	// zero for none, within the server's maximum.
	Timeout time.Duration
	// AutoRenew extends the expiry to at least this far ahead at each use.
	AutoRenew time.Duration
	// Env is set in the sandbox's container, and in everything it runs.
	Env []corev1.EnvVar
	// Entrypoint runs in the container instead of an idle wait.
	Entrypoint []string

	// Allow lists egress targets (see netpolicy.TargetSyntax: "example.com:443",
	// "10.0.0.0/8"); with them everything else is denied. NetworkPolicy gives a whole policy
	// instead; DenyAll denies all egress.
	Allow         []string
	DenyAll       bool
	NetworkPolicy *sandboxv1alpha1.SandboxNetworkPolicy

	// Wait returns once the sandbox is Ready (WaitReady), failing if it cannot be, within
	// ReadyTimeout (two minutes when zero).
	Wait         bool
	ReadyTimeout time.Duration
	// DryRun asks the server to check and default the sandbox without storing it.
	DryRun bool
}

// Sandbox is the object the options describe, checked on the client.
func (o CreateOptions) Sandbox(namespace string) (*sandboxv1alpha1.Sandbox, error) {
	var errs []error
	switch {
	case o.Pool == "" && o.Image == "":
		errs = append(errs, errors.New("one of a pool and an image is required"))
	case o.Pool != "" && o.Image != "":
		errs = append(errs, errors.New("a pool and an image cannot be used together: a pool's pods have their image"))
	case o.Pool != "" && o.RuntimeClass != "":
		errs = append(errs, errors.New("a runtime class is the pool's: it cannot be set for a sandbox from a pool"))
	}
	if o.Timeout < 0 || o.Timeout%time.Second != 0 {
		errs = append(errs, fmt.Errorf("timeout must be a whole number of seconds, got %s", o.Timeout))
	}
	if o.AutoRenew < 0 || o.AutoRenew%time.Second != 0 {
		errs = append(errs, fmt.Errorf("autoRenew must be a whole number of seconds, got %s", o.AutoRenew))
	}
	policy := o.NetworkPolicy
	if policy == nil {
		p, err := netpolicy.ForCreate(o.Allow, o.DenyAll)
		if err != nil {
			errs = append(errs, err)
		}
		policy = p
	} else if len(o.Allow) > 0 || o.DenyAll {
		errs = append(errs, errors.New("a network policy cannot be given with allow targets or deny-all"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	sb := &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			Name: o.Name, GenerateName: o.GenerateName, Namespace: namespace,
			Labels: o.Labels, Annotations: o.Annotations,
		},
		Spec: sandboxv1alpha1.SandboxSpec{
			Env:           o.Env,
			Entrypoint:    o.Entrypoint,
			NetworkPolicy: policy,
		},
	}
	if sb.Name == "" && sb.GenerateName == "" {
		sb.GenerateName = DefaultGenerateName
	}
	if o.Timeout > 0 {
		seconds := int64(o.Timeout / time.Second)
		sb.Spec.TimeoutSeconds = &seconds
	}
	if o.AutoRenew > 0 {
		sb.Spec.AutoRenew = &sandboxv1alpha1.SandboxAutoRenew{ExtendSeconds: int64(o.AutoRenew / time.Second)}
	}
	if o.Replicas > 0 {
		replicas := o.Replicas
		sb.Spec.Replicas = &replicas
	}
	if o.Pool != "" {
		sb.Spec.PoolRef = &sandboxv1alpha1.SandboxPoolReference{Name: o.Pool}
	} else {
		sb.Spec.Template = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: ContainerName, Image: o.Image}},
		}}
		if o.RuntimeClass != "" {
			rc := o.RuntimeClass
			sb.Spec.Template.Spec.RuntimeClassName = &rc
		}
	}
	return sb, nil
}

// Create makes the sandbox the options describe and, with Wait, waits until it is Ready.
func (c *Client) Create(ctx context.Context, o CreateOptions) (*sandboxv1alpha1.Sandbox, error) {
	sb, err := o.Sandbox(c.namespace)
	if err != nil {
		return nil, err
	}
	created, err := c.CreateSandbox(ctx, sb, o.DryRun)
	if err != nil || !o.Wait || o.DryRun {
		return created, err
	}
	timeout := o.ReadyTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ready, err := c.WaitReady(waitCtx, created.Name)
	if err != nil && waitCtx.Err() != nil && ctx.Err() == nil {
		last := created
		if ready != nil {
			last = ready
		}
		return last, fmt.Errorf("sandbox %q is not ready after %s: %s", created.Name, timeout, DescribeNotReady(last))
	}
	return ready, err
}

// CreateSandbox sends sb as it is (the plugin's create builds it from flags). Fields the server
// might not know, a network policy or a task, are sent with strict field validation: a server
// that does not know them refuses the sandbox rather than dropping them.
func (c *Client) CreateSandbox(ctx context.Context, sb *sandboxv1alpha1.Sandbox, dryRun bool) (*sandboxv1alpha1.Sandbox, error) {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if sb.Spec.NetworkPolicy != nil || sb.Spec.TaskTemplate != nil {
		opts.FieldValidation = metav1.FieldValidationStrict
	}
	created, err := c.clientset.SandboxV1alpha1().Sandboxes(c.namespace).Create(ctx, sb, opts)
	return created, wrap(err)
}

// Get reads a sandbox.
func (c *Client) Get(ctx context.Context, name string) (*sandboxv1alpha1.Sandbox, error) {
	sb, err := c.clientset.SandboxV1alpha1().Sandboxes(c.namespace).Get(ctx, name, metav1.GetOptions{})
	return sb, wrap(err)
}

// List lists the sandboxes of the namespace that opts select (labels, fields such as
// status.phase).
func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*sandboxv1alpha1.SandboxList, error) {
	list, err := c.clientset.SandboxV1alpha1().Sandboxes(c.namespace).List(ctx, opts)
	return list, wrap(err)
}

// Delete deletes a sandbox (the server waits until its pods are gone). A sandbox already gone
// is not an error.
func (c *Client) Delete(ctx context.Context, name string) error {
	err := c.clientset.SandboxV1alpha1().Sandboxes(c.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return wrap(err)
}

// Wait watches sandbox name until cond is done or fails, or ctx ends (WaitForSandbox), and
// returns it as last seen.
func (c *Client) Wait(ctx context.Context, name string, cond SandboxCondition) (*sandboxv1alpha1.Sandbox, error) {
	sb, err := WaitForSandbox(ctx, c.clientset, c.namespace, name, cond)
	return sb, wrap(err)
}

// WaitReady waits until the sandbox's condition Ready is True, and fails at once when it never
// will be: failed (with its reason), expired (ErrExpired), being deleted or gone (ErrNotFound).
func (c *Client) WaitReady(ctx context.Context, name string) (*sandboxv1alpha1.Sandbox, error) {
	return c.Wait(ctx, name, Ready)
}

// Ready is the condition of WaitReady.
func Ready(sb *sandboxv1alpha1.Sandbox) (bool, error) {
	if sb == nil {
		return false, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), "")
	}
	if meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1alpha1.ConditionReady) {
		return true, nil
	}
	switch Phase(sb) {
	case sandboxv1alpha1.PhaseFailed:
		return false, fmt.Errorf("sandbox %q failed: %s", sb.Name, DescribeNotReady(sb))
	case sandboxv1alpha1.PhaseExpired:
		return false, &ExpiredError{Name: sb.Name}
	case sandboxv1alpha1.PhaseTerminating:
		return false, fmt.Errorf("sandbox %q is being deleted", sb.Name)
	case sandboxv1alpha1.PhaseSucceeded:
		return false, fmt.Errorf("sandbox %q succeeded: its tasks have ended", sb.Name)
	}
	return false, nil
}
