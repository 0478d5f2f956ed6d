package v1alpha1

import (
	"fmt"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// EgressPolicy is the policy as the node agent (sandbox-node) reads it (egressapi validates and matches it).
func (p *SandboxNetworkPolicy) EgressPolicy() *egressapi.Policy {
	out := &egressapi.Policy{DefaultAction: egressapi.Action(p.DefaultAction)}
	for _, r := range p.Egress {
		er := egressapi.Rule{Action: egressapi.Action(r.Action), To: r.To}
		for _, port := range r.Ports {
			er.Ports = append(er.Ports, egressapi.Port{Port: port.Port, EndPort: port.EndPort, Protocol: egressapi.Protocol(port.Protocol)})
		}
		out.Egress = append(out.Egress, er)
	}
	return out
}

// Summary is the policy in a few words, as the Egress column shows it: "default" without one
// of the sandbox's own (p is nil), "deny-all" or "allow-all" without rules, else the default
// action and the number of rules, like "deny, 2 rules".
func (p *SandboxNetworkPolicy) Summary() string {
	if p == nil {
		return "default"
	}
	action := "deny"
	if p.DefaultAction == string(egressapi.ActionAllow) {
		action = "allow"
	}
	switch n := len(p.Egress); n {
	case 0:
		return action + "-all"
	case 1:
		return action + ", 1 rule"
	default:
		return fmt.Sprintf("%s, %d rules", action, n)
	}
}
