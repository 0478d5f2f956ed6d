package client

import (
	"context"
	"encoding/json"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/retry"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client/netpolicy"
)

// NetworkPolicy is the sandbox's own egress policy (nil: its pool's or the platform's default
// applies) and the sandbox, whose EgressReady condition says whether its nodes enforce it.
func (c *Client) NetworkPolicy(ctx context.Context, name string) (*sandboxv1alpha1.SandboxNetworkPolicy, *sandboxv1alpha1.Sandbox, error) {
	sb, err := c.Get(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return sb.Spec.NetworkPolicy, sb, nil
}

// Allow adds Allow rules for the targets (TARGET[:PORTS], see netpolicy.TargetSyntax) at the
// end of the sandbox's policy, and waits until its nodes enforce it.
func (c *Client) Allow(ctx context.Context, name string, targets ...string) (*sandboxv1alpha1.Sandbox, error) {
	return c.addRules(ctx, name, netpolicy.ActionAllow, targets)
}

// Deny adds Deny rules for the targets before the others, and waits until its nodes enforce
// the policy.
func (c *Client) Deny(ctx context.Context, name string, targets ...string) (*sandboxv1alpha1.Sandbox, error) {
	return c.addRules(ctx, name, netpolicy.ActionDeny, targets)
}

func (c *Client) addRules(ctx context.Context, name, action string, targets []string) (*sandboxv1alpha1.Sandbox, error) {
	rules, err := netpolicy.ParseRules(targets, action)
	if err != nil {
		return nil, fmt.Errorf("invalid target %w", err)
	}
	sb, _, _, err := c.UpdateNetworkPolicy(ctx, name, netpolicy.AddRules(rules, action == netpolicy.ActionDeny))
	if err != nil {
		return nil, err
	}
	return c.WaitNetworkPolicy(ctx, sb)
}

// UpdateNetworkPolicy reads the sandbox, applies edit to its policy and sends the result as a
// JSON merge patch that names the resourceVersion read, so that it fails with a conflict if the
// sandbox changed in between; then edit runs again on the sandbox read anew. It returns the
// sandbox, whether the policy changed, and edit's warnings for the user.
func (c *Client) UpdateNetworkPolicy(ctx context.Context, name string, edit netpolicy.Edit) (sb *sandboxv1alpha1.Sandbox, changed bool, warnings []string, err error) {
	sandboxes := c.clientset.SandboxV1alpha1().Sandboxes(c.namespace)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := sandboxes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		old := current.Spec.NetworkPolicy
		p, w, err := edit(old)
		if err != nil {
			return fmt.Errorf("sandbox %q: %w", name, err)
		}
		warnings = w
		if apiequality.Semantic.DeepEqual(old, p) {
			sb, changed = current, false
			return nil
		}
		if err := netpolicy.CheckRuleCount(p); err != nil {
			return fmt.Errorf("sandbox %q: %w", name, err)
		}
		if errs := netpolicy.ValidatePolicy(p, field.NewPath("spec", "networkPolicy")); len(errs) > 0 {
			return fmt.Errorf("sandbox %q: the new policy is invalid: %w", name, errs.ToAggregate())
		}
		patch, err := policyPatch(current.ResourceVersion, p)
		if err != nil {
			return err
		}
		updated, err := sandboxes.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldValidation: metav1.FieldValidationStrict})
		if err != nil {
			return err
		}
		if !apiequality.Semantic.DeepEqual(updated.Spec.NetworkPolicy, p) {
			return fmt.Errorf("the server did not store the network policy of sandbox %q as sent: it may not support changing spec.networkPolicy", name)
		}
		sb, changed = updated, true
		return nil
	})
	return sb, changed, warnings, wrap(err)
}

// policyPatch is a JSON merge patch that replaces spec.networkPolicy with p (removes it when
// nil), conditional on resourceVersion. A merge patch merges objects field by field, so the
// policy's fields that p leaves out are set to null rather than left out; its lists are
// replaced whole.
func policyPatch(resourceVersion string, p *sandboxv1alpha1.SandboxNetworkPolicy) ([]byte, error) {
	var policy any
	if p != nil {
		fields := map[string]any{"defaultAction": nil, "egress": nil}
		if p.DefaultAction != "" {
			fields["defaultAction"] = p.DefaultAction
		}
		if len(p.Egress) > 0 {
			fields["egress"] = p.Egress
		}
		policy = fields
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"spec":     map[string]any{"networkPolicy": policy},
	})
}

// WaitNetworkPolicy waits until EgressReady is True for sb's generation or later, watching the
// sandbox. It fails at once when the policy failed to apply or the sandbox is deleted; when ctx
// ends first, the error says what EgressReady last showed.
func (c *Client) WaitNetworkPolicy(ctx context.Context, sb *sandboxv1alpha1.Sandbox) (*sandboxv1alpha1.Sandbox, error) {
	generation := sb.Generation
	last := sb
	if done, err := PolicyInForce(sb, generation); done || err != nil {
		return sb, err
	}
	result, err := c.Wait(ctx, sb.Name, func(current *sandboxv1alpha1.Sandbox) (bool, error) {
		if current == nil {
			return false, fmt.Errorf("sandbox %q was deleted while waiting for its network policy", sb.Name)
		}
		last = current
		return PolicyInForce(current, generation)
	})
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("timed out waiting for the network policy of sandbox %q (generation %d) to be in force%s", sb.Name, generation, NotInForceReason(last, generation))
	}
	return result, err
}

// PolicyInForce tells whether sb's nodes enforce its policy of generation (or a later one), and
// fails when the policy failed to apply.
func PolicyInForce(sb *sandboxv1alpha1.Sandbox, generation int64) (bool, error) {
	c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1alpha1.ConditionEgressReady)
	if c == nil || ObservedGeneration(sb, c) < generation {
		return false, nil
	}
	switch {
	case c.Status == metav1.ConditionTrue:
		return true, nil
	case c.Status == metav1.ConditionFalse && c.Reason == sandboxv1alpha1.ReasonPolicyFailed:
		return false, fmt.Errorf("the network policy of sandbox %q failed to apply%s", sb.Name, conditionReason(c))
	}
	return false, nil
}

// NotInForceReason is ": EgressReady is ..." of the sandbox last seen, for a wait for generation
// that ended before the policy was in force.
func NotInForceReason(sb *sandboxv1alpha1.Sandbox, generation int64) string {
	c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1alpha1.ConditionEgressReady)
	if c == nil {
		return ": EgressReady is not reported yet"
	}
	if observed := ObservedGeneration(sb, c); observed < generation {
		return fmt.Sprintf(": EgressReady is pending (reported for generation %d)", observed)
	}
	return fmt.Sprintf(": EgressReady is %s%s", c.Status, conditionReason(c))
}

// conditionReason is ": REASON: MESSAGE" of a condition, leaving out what it lacks.
func conditionReason(c *metav1.Condition) string {
	s := ""
	if c.Reason != "" {
		s += ": " + c.Reason
	}
	if c.Message != "" {
		s += ": " + c.Message
	}
	return s
}

// ObservedGeneration is the generation EgressReady was computed for: its own
// observedGeneration, else the status's.
func ObservedGeneration(sb *sandboxv1alpha1.Sandbox, c *metav1.Condition) int64 {
	if c.ObservedGeneration > 0 {
		return c.ObservedGeneration
	}
	return sb.Status.ObservedGeneration
}
