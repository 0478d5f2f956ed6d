package v1alpha1

import "github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"

// EgressPolicy is the policy as the node agent (sandbox-node) reads it (egressapi validates and matches it).
func (p *NetworkPolicy) EgressPolicy() egressapi.Policy {
	out := egressapi.Policy{DefaultAction: egressapi.Action(p.DefaultAction)}
	for _, r := range p.Egress {
		er := egressapi.Rule{Action: egressapi.Action(r.Action), To: r.To}
		for _, port := range r.Ports {
			er.Ports = append(er.Ports, egressapi.Port{Port: port.Port, EndPort: port.EndPort, Protocol: egressapi.Protocol(port.Protocol)})
		}
		out.Egress = append(out.Egress, er)
	}
	return out
}
