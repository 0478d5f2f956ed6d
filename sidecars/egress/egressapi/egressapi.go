// Package egressapi is the contract of sandbox-egress, the sidecar that enforces a sandbox's
// outbound policy in its pod: the policy's types and validation, the first-match matcher that
// both the DNS proxy and the packet filter follow, its ports and paths, and the document
// sandbox-controller pushes to it. sandbox-apiserver (validation), sandbox-controller (what it
// pushes), sandbox-egress and the kubectl plugin import it; it depends on nothing heavier than
// apimachinery's field errors.
//
// # Transport
//
// sandbox-egress serves HTTPS on ControlPort and accepts only clients that present a
// certificate of the kube-sandbox CA for sandbox-controller (the same CA and identities as
// sandbox-execd's, execdapi.ControllerIdentity). Its serving certificate is its pod's, for
// ServerName(pod UID), certified by sandbox-controller as execd's is (IdentityPath, with a
// projected token of IdentityAudience that only the egress container mounts), so that the
// controller knows it reached that pod's sandbox-egress and not code in the sandbox, which
// shares the pod's network namespace. It serves plain HTTP on HealthPort: kubelet probes
// (HealthzPath, ReadyzPath) and Prometheus metrics (MetricsPath), which say nothing a
// sandbox's own code could not learn.
//
//	GET, PUT ControlPort IdentityPath  the pod's egress token; its serving certificate
//	PUT ControlPort PolicyPath   a Config: apply it, answer a Status (200) or why not (4xx/5xx)
//	GET ControlPort PolicyPath   the Status
//	GET ControlPort DenialsPath  waits for names the policy denied, answers Denials (a long
//	                             poll: at most one answer per 30 s, empty after 5 min)
//
// A Config names the pod it is for (PodUID); sandbox-egress refuses one for another pod (409),
// so that a pod IP given to a new pod never gets the old pod's policy.
package egressapi

import (
	"strings"
	"time"
)

// IdentityAudience is the audience of the token projected into the egress container only. It
// proves to sandbox-controller which pod's sandbox-egress answers; the sandbox container,
// which has execd's token (another audience), cannot pass for it.
const IdentityAudience = "egress.kube-sandbox.io"

// serverNameSuffix: see ServerName.
const serverNameSuffix = ".egress.kube-sandbox.internal"

// ServerName is the DNS name of the serving certificate of the sandbox-egress in the pod with
// that UID. It differs from execd's, so that execd's certificate (whose key code in the sandbox
// can read) never passes for sandbox-egress.
func ServerName(podUID string) string { return podUID + serverNameSuffix }

// PodUIDFromServerName is the pod UID of a ServerName; ok is false for any other name.
func PodUIDFromServerName(name string) (uid string, ok bool) {
	uid, ok = strings.CutSuffix(name, serverNameSuffix)
	if !ok || uid == "" || strings.Contains(uid, ".") {
		return "", false
	}
	return uid, true
}

// Ports. High, clear of what users start and below the ephemeral range, next to execd's.
const (
	// ControlPort is sandbox-egress's TLS port (sandbox-controller only).
	ControlPort = 44773
	// HealthPort answers probes and metrics in plain HTTP.
	HealthPort = 44774
	// DNSPort is where the DNS proxy listens on the pod's loopback addresses; every DNS query
	// the sandbox sends (UDP and TCP port 53, to any address) is redirected to it.
	DNSPort = 15353
)

// Paths.
const (
	PolicyPath   = "/v1/policy"
	IdentityPath = "/v1/identity"
	DenialsPath  = "/v1/denials"
	HealthzPath  = "/healthz"
	ReadyzPath   = "/readyz"
	MetricsPath  = "/metrics"
)

// SocketMark marks the sockets of sandbox-egress's own upstream DNS queries (SO_MARK, which
// needs CAP_NET_ADMIN: the sandbox container cannot set it). Only marked packets may reach a
// resolver; everything else on port 53 goes to the proxy. 0x4b53 is "KS".
const SocketMark = 0x4b53

// The layout of the egress sidecar in a sandbox pod.
const (
	// ContainerName is the native sidecar (an init container with restartPolicy Always) that
	// runs sandbox-egress. It starts, and installs its filter, before the sandbox container.
	ContainerName = "kube-sandbox-egress"
	// StateVolume is a small memory-backed emptyDir mounted in the egress container only,
	// where it keeps the last Config it applied, so that a restarted sidecar restores the
	// pod's current policy rather than its first.
	StateVolume = "kube-sandbox-egress-state"
	StateDir    = "/run/kube-sandbox-egress"
	// IdentityVolume is the projected token (IdentityAudience), mounted in the egress
	// container only, at IdentityTokenPath.
	IdentityVolume    = "kube-sandbox-egress-identity"
	IdentityDir       = "/run/kube-sandbox-egress-identity"
	IdentityTokenPath = IdentityDir + "/token"

	// EnvPodUID is the pod's UID (downward API).
	EnvPodUID = "POD_UID"
	// EnvPodIP and EnvHostIP (downward API): equal in a pod on the node's network, where
	// sandbox-egress refuses to run (its filter would be the node's).
	EnvPodIP  = "POD_IP"
	EnvHostIP = "HOST_IP"
	// EnvConfig holds the Config the pod starts with (JSON): a direct-mode sandbox's policy,
	// or deny-all for a pool pod. Later ones come over ControlPort.
	EnvConfig = "KUBE_SANDBOX_EGRESS_CONFIG"
	// EnvClientCA holds the kube-sandbox CA's PEM certificates.
	EnvClientCA = "KUBE_SANDBOX_EGRESS_CLIENT_CA"
)

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

// Config is what sandbox-controller pushes to a pod's sandbox-egress: everything it enforces.
type Config struct {
	// PodUID is the pod the Config is for.
	PodUID string `json:"podUID"`
	// Sandbox is the sandbox the pod serves; nil for an idle pool pod.
	Sandbox *SandboxRef `json:"sandbox,omitempty"`
	// Generation of the sandbox whose policy this is (0 for an idle pool pod); EgressReady
	// reports it as its observedGeneration.
	Generation int64 `json:"generation,omitempty"`
	// Revision identifies the content (Hash); sandbox-egress answers the one it applied.
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

// Status is sandbox-egress's answer: what it enforces.
type Status struct {
	PodUID     string    `json:"podUID"`
	Revision   string    `json:"revision"`
	Generation int64     `json:"generation,omitempty"`
	AppliedAt  time.Time `json:"appliedAt"`
	// FlowsCut is how many established flows the last change cut (they went to what it denies).
	FlowsCut int `json:"flowsCut,omitempty"`
}

// Denials are the DNS names the policy denied since the last report, with how often.
type Denials struct {
	Names map[string]int `json:"names,omitempty"`
	// Others counts the denials of names beyond the ones listed.
	Others int `json:"others,omitempty"`
}
