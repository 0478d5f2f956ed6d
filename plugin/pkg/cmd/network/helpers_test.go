package network

import (
	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client/netpolicy"
)

// Shorthands for the policies of the tests.
type (
	rule   = sandboxv1alpha1.SandboxEgressRule
	port   = sandboxv1alpha1.SandboxEgressPort
	policy = sandboxv1alpha1.SandboxNetworkPolicy
)

func allow(to string, ports ...port) rule {
	return rule{Action: netpolicy.ActionAllow, To: to, Ports: ports}
}
func deny(to string, ports ...port) rule {
	return rule{Action: netpolicy.ActionDeny, To: to, Ports: ports}
}
func tcp(p int32) port { return port{Port: p} }
