package v1alpha1

// NetworkPolicy is a sandbox's outbound policy, enforced for each of its pods by the node
// agent (sandbox-node), from the node: a DNS proxy answers only the names the policy allows,
// and a stateful packet filter on the pod's interface lets out only what it allows. The first rule that matches decides; what no
// rule matches gets defaultAction. The platform's always-deny list (the cluster's pod and
// service ranges, the nodes, link-local addresses) wins over every rule.
type NetworkPolicy struct {
	// defaultAction decides what no rule matches: Allow or Deny. Deny when not given.
	// +kubebuilder:validation:Enum=Allow;Deny
	// +optional
	DefaultAction EgressAction `json:"defaultAction,omitempty"`

	// egress rules, first match wins. At most 100.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Egress []EgressRule `json:"egress,omitempty"`
}

// EgressAction is what a rule does with what it matches.
// +kubebuilder:validation:Enum=Allow;Deny
type EgressAction string

const (
	EgressAllow EgressAction = "Allow"
	EgressDeny  EgressAction = "Deny"
)

// EgressRule matches outbound traffic by destination and, optionally, port.
type EgressRule struct {
	// action: Allow or Deny.
	Action EgressAction `json:"action"`

	// to is a DNS name (pypi.org), a wildcard for its subdomains at any depth
	// (*.pythonhosted.org; the bare name needs its own rule), an IPv4 or IPv6 address, or a
	// CIDR. Names are matched on the sandbox's DNS queries: the addresses an allowed name
	// resolves to are allowed for their TTL.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	To string `json:"to"`

	// ports limit the rule to these ports; without them it matches every port and protocol.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Ports []EgressPort `json:"ports,omitempty"`
}

// EgressPort is a port or a range of ports.
type EgressPort struct {
	// port is the port, or the first port of the range.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// endPort, if set, makes the range port..endPort (inclusive).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	EndPort *int32 `json:"endPort,omitempty"`

	// protocol: TCP (the default) or UDP.
	// +kubebuilder:validation:Enum=TCP;UDP
	// +optional
	Protocol string `json:"protocol,omitempty"`
}

// Egress conditions and reasons.
const (
	// ConditionEgressReady is True when every replica's pod enforces the sandbox's current
	// policy (observedGeneration says which generation's).
	ConditionEgressReady = "EgressReady"

	// ReasonPolicyApplied: every pod enforces the current policy.
	ReasonPolicyApplied = "PolicyApplied"
	// ReasonPolicyPending: a pod has not yet confirmed the current policy.
	ReasonPolicyPending = "PolicyPending"
	// ReasonPolicyFailed: the node agent of a pod refused, failed to apply or could not prove
	// the policy (the message says which); the pod keeps what it enforced before, or denies
	// everything.
	ReasonPolicyFailed = "PolicyFailed"
	// ReasonDeniedName (Event): code in the sandbox asked for names its policy denies.
	ReasonDeniedName = "EgressDenied"
)
