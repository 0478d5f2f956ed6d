// Package egressapi is the contract of a sandbox's outbound policy: the policy's types and
// validation, the first-match matcher that both the node agent's DNS proxy and its packet
// filter follow, and the document sandbox-controller pushes to the node agent (sandbox-node)
// for each pod. sandbox-apiserver (validation), sandbox-controller (what it pushes),
// sandbox-node and the kubectl plugin import it; it depends on nothing heavier than
// apimachinery's field errors.
//
// # Transport
//
// sandbox-node serves the endpoints below on nodeapi.Port, on the node's address, with a
// certificate of the kube-sandbox CA for nodeapi.ServerName, and accepts only clients that
// present one the CA issued to sandbox-controller (execdapi.ControllerIdentity). Nothing in a
// sandbox holds that key, nor can reach the node's address (the platform's always-deny has
// cluster:nodes, and the pod's filter lets through only the wait port).
//
// A Config names the pod it is for (PodUID), and is sent to that pod's path; the agent
// refuses one for another pod (409), so that a pod IP given to a new pod never gets the old
// pod's policy.
package egressapi

import "time"

// DNSPort is where the node agent's DNS proxy listens, on the node's addresses: the filter
// redirects every DNS query a sandbox pod sends (UDP and TCP port 53, to any address) to it.
const DNSPort = 15353

// Action is what a rule does with what it matches.
type Action string

const (
	ActionAllow Action = "Allow"
	ActionDeny  Action = "Deny"
)

// Protocol of a port.
type Protocol string

const (
	ProtocolTCP Protocol = "TCP"
	ProtocolUDP Protocol = "UDP"
)

// MaxRules is the most rules a policy may have. Every rule is a packet filter rule in the
// pod's kernel and a step of every DNS lookup; a hundred is ample for a sandbox's needs (the
// platform's always-deny and always-allow lists come on top).
const MaxRules = 100

// MaxPorts is the most ports a rule may have.
const MaxPorts = 16

// Port is a port or a range of ports.
type Port struct {
	// port is the port, or the first of the range.
	Port int32 `json:"port"`
	// endPort, if set, makes a range port..endPort (inclusive).
	// +optional
	EndPort *int32 `json:"endPort,omitempty"`
	// protocol: TCP (the default) or UDP.
	// +optional
	Protocol Protocol `json:"protocol,omitempty"`
}

// Rule is one egress rule.
type Rule struct {
	// action: Allow or Deny.
	Action Action `json:"action"`
	// to: a DNS name (pypi.org), a wildcard for its subdomains (*.pythonhosted.org, not the bare
	// name), an IPv4 or IPv6 address, or a CIDR.
	To string `json:"to"`
	// ports, if given, limit the rule to these; otherwise it matches every port and protocol.
	// +optional
	Ports []Port `json:"ports,omitempty"`
}

// Policy is a sandbox's outbound policy: the first rule that matches decides, and
// defaultAction decides what no rule matches.
type Policy struct {
	// defaultAction: Allow or Deny (when empty).
	// +optional
	DefaultAction Action `json:"defaultAction,omitempty"`
	// egress rules, first match wins.
	// +optional
	Egress []Rule `json:"egress,omitempty"`
}

// EffectiveDefault is the policy's default action: Deny unless Allow is given.
func (p *Policy) EffectiveDefault() Action {
	if p.DefaultAction == ActionAllow {
		return ActionAllow
	}
	return ActionDeny
}

// DenyAll is the policy of a pool pod that no sandbox has claimed yet.
func DenyAll() Policy { return Policy{DefaultAction: ActionDeny} }

// SandboxRef names the sandbox a Config is for.
type SandboxRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Config is what sandbox-controller pushes to the pod's node agent: everything it enforces.
type Config struct {
	// PodUID is the pod the Config is for.
	PodUID string `json:"podUID"`
	// Sandbox is the sandbox the pod serves; nil for an idle pool pod.
	Sandbox *SandboxRef `json:"sandbox,omitempty"`
	// Generation of the sandbox whose policy this is (0 for an idle pool pod); EgressReady
	// reports it as its observedGeneration.
	Generation int64 `json:"generation,omitempty"`
	// Revision identifies the content (Hash); the node agent (sandbox-node) answers the one it applied.
	Revision string `json:"revision"`
	// Rules are evaluated first match wins: the platform's always-deny, then its always-allow,
	// then the sandbox's own (or its pool's, or the platform's default policy).
	Rules []Rule `json:"rules,omitempty"`
	// DefaultAction decides what no rule matches.
	DefaultAction Action `json:"defaultAction"`
	// Upstreams are the resolvers the DNS proxy asks (host:port); empty: the nameservers of
	// the pod's /etc/resolv.conf.
	Upstreams []string `json:"upstreams,omitempty"`
}

// Status is the node agent (sandbox-node)'s answer: what it enforces.
type Status struct {
	PodUID     string    `json:"podUID"`
	Revision   string    `json:"revision"`
	Generation int64     `json:"generation,omitempty"`
	AppliedAt  time.Time `json:"appliedAt"`
	// FlowsCut is how many established flows the last change cut (they went to what it denies).
	FlowsCut int `json:"flowsCut,omitempty"`
	// Interface is the pod's host-side interface the node agent filters.
	Interface string `json:"interface,omitempty"`
}

// Denials are the DNS names the policy denied since the last report, with how often.
type Denials struct {
	Names map[string]int `json:"names,omitempty"`
	// Others counts the denials of names beyond the ones listed.
	Others int `json:"others,omitempty"`
}

// PodLabel marks the pods whose outbound traffic the node agent filters: sandbox-controller
// puts it on every sandbox pod it makes, and sandbox-node watches the pods of its node that
// carry it. Its value is "true".
const PodLabel = "egress.kube-sandbox.io/filtered"

// The node agent's egress endpoints (nodeapi.Port, mutual TLS, sandbox-controller only), per
// pod of its node:
//
//	PUT PodPolicyPath(uid)   a Config for that pod: apply it, answer a Status once it is in force
//	                         and proven (200), or why not (4xx/5xx)
//	GET PodPolicyPath(uid)   the Status
//	GET PodDenialsPath(uid)  waits for names the policy denied, answers Denials (a long poll)
//
// and, on nodeapi.WaitPort (TLS, any client, since no sandbox code runs yet when it is asked):
//
//	GET WaitPath(uid)?revision=R  waits up to MaxWait until the pod's filter is in force and
//	                              proven, at revision R if the controller pushed none other,
//	                              and answers its Status (200), or 503 with why not yet
const (
	podsPrefix = "/v1/pods/"
	// MaxWait bounds one wait request: the init container asks again at once.
	MaxWait = 30 * time.Second
)

// PodPolicyPath is the policy endpoint of a pod.
func PodPolicyPath(uid string) string { return podsPrefix + uid + "/policy" }

// PodDenialsPath is the denials endpoint of a pod.
func PodDenialsPath(uid string) string { return podsPrefix + uid + "/denials" }

// WaitPath is the endpoint the pod's init container waits on.
func WaitPath(uid string) string { return podsPrefix + uid + "/ready" }

// PodsPattern is the node agent's route for the paths above (net/http patterns).
const (
	PodPolicyPattern  = podsPrefix + "{uid}/policy"
	PodDenialsPattern = podsPrefix + "{uid}/denials"
	WaitPattern       = podsPrefix + "{uid}/ready"
)

// Reasons a node agent gives for a policy it could not put in force, as the first word of its
// error message (ReasonOf finds it); sandbox-controller carries them to EgressReady.
const (
	// ReasonUnverified: the filter is in, but a probe from the pod's interface never reached
	// it: the node's datapath bypasses netfilter (as Cilium's BPF host routing does), so the
	// policy cannot be enforced there.
	ReasonUnverified = "EnforcementUnverified"
	// ReasonPodNotFound: the node has no such pod yet (its sandbox not created, or no IP).
	ReasonPodNotFound = "PodNotOnNode"
	// ReasonApplyFailed: the kernel refused the rules; the previous ones stay in force.
	ReasonApplyFailed = "ApplyFailed"
)
