package egressapi

import (
	"fmt"
	"net/netip"
	"strings"
)

// CompiledRule is a rule with its target parsed.
type CompiledRule struct {
	Action Action
	Target Target
	// Ports as given; none: every port and protocol.
	Ports []Port
}

// Matcher decides names and flows by an ordered rule list, first match wins. The DNS proxy
// asks it about names, and the node agent (sandbox-node) about established flows after a change; the packet
// filter is compiled from the same list in the same order, so all three agree.
type Matcher struct {
	Rules   []CompiledRule
	Default Action
}

// Compile parses rules. Validation (ValidateRule) comes first; an error here names the rule.
func Compile(rules []Rule, def Action) (*Matcher, error) {
	m := &Matcher{Default: def, Rules: make([]CompiledRule, 0, len(rules))}
	if def != ActionAllow {
		m.Default = ActionDeny
	}
	for i, r := range rules {
		t, err := ParseTarget(r.To)
		if err != nil {
			return nil, fmt.Errorf("rule %d (%q): %w", i, r.To, err)
		}
		m.Rules = append(m.Rules, CompiledRule{Action: r.Action, Target: t, Ports: r.Ports})
	}
	return m, nil
}

// NameDecision is what the DNS proxy does with a query.
type NameDecision struct {
	// Allow: resolve it upstream; otherwise answer NXDOMAIN.
	Allow bool
	// Rule is the index of the deciding rule, -1 for the default.
	Rule int
	// Keys are the name targets (Target.Key) under which its addresses are learned: every
	// name rule that matches it, so that each can match the flows to them.
	Keys []string
}

// CanonicalName lower-cases a query name and drops the trailing dot.
func CanonicalName(qname string) string {
	return strings.ToLower(strings.TrimSuffix(qname, "."))
}

// MatchName decides a DNS name. The first name rule that matches decides, except a Deny with
// ports: the name must resolve for its other ports, so the search goes on.
func (m *Matcher) MatchName(qname string) NameDecision {
	qname = CanonicalName(qname)
	d := NameDecision{Rule: -1}
	decided := false
	for i, r := range m.Rules {
		if r.Target.Kind == TargetPrefix || !r.Target.MatchesName(qname) {
			continue
		}
		d.Keys = appendUnique(d.Keys, r.Target.Key())
		if decided {
			continue
		}
		switch {
		case r.Action == ActionAllow:
			d.Allow, d.Rule, decided = true, i, true
		case len(r.Ports) == 0:
			d.Allow, d.Rule, decided = false, i, true
		}
	}
	if !decided {
		d.Allow = m.Default == ActionAllow
	}
	if !d.Allow {
		d.Keys = nil
	}
	return d
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// Flow is an outbound connection's destination.
type Flow struct {
	Addr netip.Addr
	// Protocol is TCP, UDP or "" (anything else: ICMP, ...).
	Protocol Protocol
	Port     int32
}

// Learned reports whether addr was resolved for the name target key (and has not expired).
type Learned func(key string, addr netip.Addr) bool

// MatchFlow decides a flow: the action and the index of the deciding rule (-1: the default).
func (m *Matcher) MatchFlow(f Flow, learned Learned) (Action, int) {
	addr := f.Addr.Unmap()
	for i, r := range m.Rules {
		if !r.matchesPort(f) {
			continue
		}
		switch r.Target.Kind {
		case TargetPrefix:
			if r.Target.Prefix.Contains(addr) {
				return r.Action, i
			}
		default:
			if learned != nil && learned(r.Target.Key(), addr) {
				return r.Action, i
			}
		}
	}
	return m.Default, -1
}

func (r CompiledRule) matchesPort(f Flow) bool {
	if len(r.Ports) == 0 {
		return true
	}
	for _, p := range r.Ports {
		if p.ProtocolOf() == f.Protocol && f.Port >= p.Port && f.Port <= p.Last() {
			return true
		}
	}
	return false
}

// NameKeys are the distinct name targets of the rules, in order of first use.
func (m *Matcher) NameKeys() []string {
	var keys []string
	for _, r := range m.Rules {
		if r.Target.Kind != TargetPrefix {
			keys = appendUnique(keys, r.Target.Key())
		}
	}
	return keys
}
