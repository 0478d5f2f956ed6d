package netpolicy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// Edit is a change to a sandbox's policy. It is given the policy as read (nil: none of the
// sandbox's own), which it must not modify, and returns the new one (nil to remove the
// sandbox's own) and warnings for the user. It runs again on the policy read anew when the
// sandbox changed before the update went through.
type Edit func(old *sandboxv1alpha1.SandboxNetworkPolicy) (*sandboxv1alpha1.SandboxNetworkPolicy, []string, error)

// NoPolicyOfItsOwn warns that a sandbox that followed its pool's or the platform's policy now
// has one of its own, which replaces that one.
const NoPolicyOfItsOwn = "the sandbox had no network policy of its own, so its pool's or the platform's default applied; it now has its own, which replaces that one and denies what no rule allows"

// AddRules inserts rules: at the end of the list, or before the others with first. A rule the
// list has already (the same target, ports and action) is not added again; with first it is
// moved to the front instead.
func AddRules(rules []sandboxv1alpha1.SandboxEgressRule, first bool) Edit {
	return func(old *sandboxv1alpha1.SandboxNetworkPolicy) (*sandboxv1alpha1.SandboxNetworkPolicy, []string, error) {
		var warnings []string
		p := &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: ActionDeny}
		if old != nil {
			p = old.DeepCopy()
		} else {
			warnings = append(warnings, NoPolicyOfItsOwn)
		}
		if first {
			var added []sandboxv1alpha1.SandboxEgressRule
			for _, r := range rules {
				if !slices.ContainsFunc(added, func(a sandboxv1alpha1.SandboxEgressRule) bool { return a.Action == r.Action && sameMatch(a, r) }) {
					added = append(added, r)
				}
			}
			// What the new rules duplicate further down is redundant once they come first.
			rest := slices.DeleteFunc(p.Egress, func(e sandboxv1alpha1.SandboxEgressRule) bool {
				return slices.ContainsFunc(added, func(a sandboxv1alpha1.SandboxEgressRule) bool { return a.Action == e.Action && sameMatch(a, e) })
			})
			for i, e := range rest {
				for _, a := range added {
					if covers(a, e) {
						warnings = append(warnings, fmt.Sprintf("rule %d (%s) no longer has any effect: %s matches first", len(added)+i+1, FormatRule(e), FormatRule(a)))
						break
					}
				}
			}
			p.Egress = append(added, rest...)
			return p, warnings, nil
		}

		appended := map[string]bool{}
		for _, r := range rules {
			i := slices.IndexFunc(p.Egress, func(e sandboxv1alpha1.SandboxEgressRule) bool { return covers(e, r) })
			switch {
			case i >= 0 && p.Egress[i].Action == r.Action && sameMatch(p.Egress[i], r):
				warnings = append(warnings, fmt.Sprintf("%s is rule %d already", FormatRule(r), i+1))
				continue
			case i >= 0 && p.Egress[i].Action == r.Action:
				warnings = append(warnings, fmt.Sprintf("%s is not added: rule %d (%s) covers it already", FormatRule(r), i+1, FormatRule(p.Egress[i])))
				continue
			case i >= 0:
				warnings = append(warnings, fmt.Sprintf("%s has no effect: rule %d (%s) matches first; remove that rule, or add this one with --first", FormatRule(r), i+1, FormatRule(p.Egress[i])))
			}
			p.Egress = append(p.Egress, r)
			appended[r.Action] = true
		}
		switch def := DefaultAction(p); {
		case def == ActionAllow && appended[ActionAllow]:
			warnings = append(warnings, "the default action is Allow, so Allow rules at the end of the list change nothing")
		case def == ActionDeny && appended[ActionDeny]:
			warnings = append(warnings, "the default action is Deny, so Deny rules at the end of the list change nothing; add them with --first to override the Allow rules before them")
		}
		return p, warnings, nil
	}
}

// RuleSelector picks rules to remove: a rule number, as 'network NAME' shows them (from 1), or a
// target, with or without ports.
type RuleSelector struct {
	// Number is the rule's position from 1; 0 for a target.
	Number int
	// Rule holds the target and, if given, the ports; its action is not used.
	Rule sandboxv1alpha1.SandboxEgressRule
	// Arg is the selector as given, for messages.
	Arg string
}

// ParseSelectors parses the arguments of remove: rule numbers and TARGET[:PORTS] lists.
func ParseSelectors(args []string) ([]RuleSelector, error) {
	var out []RuleSelector
	for _, arg := range args {
		if n, err := strconv.Atoi(arg); err == nil && strings.Trim(arg, "0123456789") == "" {
			if n < 1 {
				return nil, &TargetError{Value: arg, Reason: "rules are numbered from 1"}
			}
			out = append(out, RuleSelector{Number: n, Arg: arg})
			continue
		}
		rules, err := ParseRules([]string{arg}, "")
		if err != nil {
			return nil, err
		}
		for _, r := range rules {
			out = append(out, RuleSelector{Rule: r, Arg: FormatTarget(r)})
		}
	}
	return out, nil
}

// RemoveRules removes the rules the selectors pick: a target without ports picks every rule for
// it, a target with ports the rules for it with exactly those ports, whatever their actions. A
// selector that picks nothing is an error, and nothing is removed.
func RemoveRules(selectors []RuleSelector) Edit {
	return func(old *sandboxv1alpha1.SandboxNetworkPolicy) (*sandboxv1alpha1.SandboxNetworkPolicy, []string, error) {
		if old == nil {
			return nil, nil, fmt.Errorf("the sandbox has no network policy of its own, so no rules to remove")
		}
		if len(old.Egress) == 0 {
			return nil, nil, fmt.Errorf("the sandbox's network policy has no rules to remove")
		}
		remove := make([]bool, len(old.Egress))
		for _, s := range selectors {
			if s.Number > 0 {
				if s.Number > len(old.Egress) {
					return nil, nil, fmt.Errorf("there is no rule %d: the policy has %d", s.Number, len(old.Egress))
				}
				remove[s.Number-1] = true
				continue
			}
			found := false
			for i, e := range old.Egress {
				if targetKey(e.To) == targetKey(s.Rule.To) && (len(s.Rule.Ports) == 0 || portKey(e.Ports) == portKey(s.Rule.Ports)) {
					remove[i], found = true, true
				}
			}
			if !found {
				return nil, nil, fmt.Errorf("no rule matches %q", s.Arg)
			}
		}
		p := old.DeepCopy()
		p.Egress = nil
		for i, e := range old.Egress {
			if !remove[i] {
				p.Egress = append(p.Egress, e)
			}
		}
		return p, nil, nil
	}
}

// SetPolicy replaces the policy.
func SetPolicy(p *sandboxv1alpha1.SandboxNetworkPolicy) Edit {
	return func(*sandboxv1alpha1.SandboxNetworkPolicy) (*sandboxv1alpha1.SandboxNetworkPolicy, []string, error) {
		return p.DeepCopy(), nil, nil
	}
}

// SetDefaultAction sets what no rule matches, keeping the rules.
func SetDefaultAction(action string) Edit {
	return func(old *sandboxv1alpha1.SandboxNetworkPolicy) (*sandboxv1alpha1.SandboxNetworkPolicy, []string, error) {
		var warnings []string
		p := &sandboxv1alpha1.SandboxNetworkPolicy{}
		if old != nil {
			p = old.DeepCopy()
		} else if action == ActionDeny {
			warnings = append(warnings, NoPolicyOfItsOwn)
		} else {
			warnings = append(warnings, "the sandbox had no network policy of its own, so its pool's or the platform's default applied; it now has its own, which replaces that one")
		}
		p.DefaultAction = action
		return p, warnings, nil
	}
}

// DenyAll leaves no rules and denies everything.
func DenyAll() Edit {
	return func(*sandboxv1alpha1.SandboxNetworkPolicy) (*sandboxv1alpha1.SandboxNetworkPolicy, []string, error) {
		return &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: ActionDeny}, nil, nil
	}
}

// Reset removes the sandbox's own policy: its pool's policy or the platform's default applies.
func Reset() Edit {
	return func(*sandboxv1alpha1.SandboxNetworkPolicy) (*sandboxv1alpha1.SandboxNetworkPolicy, []string, error) {
		return nil, nil, nil
	}
}

// ParseDefaultAction takes Allow or Deny in any case.
func ParseDefaultAction(s string) (string, error) {
	switch {
	case strings.EqualFold(s, ActionAllow):
		return ActionAllow, nil
	case strings.EqualFold(s, ActionDeny):
		return ActionDeny, nil
	}
	return "", fmt.Errorf("must be Allow or Deny")
}

// checkRuleCount refuses a policy with more rules than the server takes, in words rather than
// the server's field path.
func CheckRuleCount(p *sandboxv1alpha1.SandboxNetworkPolicy) error {
	if p != nil && len(p.Egress) > egressapi.MaxRules {
		return fmt.Errorf("the policy would have %d rules; at most %d are allowed", len(p.Egress), egressapi.MaxRules)
	}
	return nil
}
