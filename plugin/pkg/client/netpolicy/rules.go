package netpolicy

import (
	"cmp"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// The actions and protocols as the API spells them.
const (
	ActionAllow = string(egressapi.ActionAllow)
	ActionDeny  = string(egressapi.ActionDeny)
)

// TargetSyntax is how help describes a TARGET[:PORTS] argument.
const TargetSyntax = `TARGET is a DNS name (pypi.org), a wildcard for its subdomains at any depth
(*.pythonhosted.org, which does not match the bare name), an IPv4 or IPv6 address or
a CIDR (10.0.0.0/8). Without ports a rule matches every port and protocol; :PORT
limits it to a port or a range, TCP unless /UDP follows: pypi.org:443,
10.0.0.0/8:8080-8090/UDP. Put an IPv6 address or CIDR in brackets to give it ports:
[2001:db8::1]:443. Separate several targets with commas; a port alone after a target
with ports adds to its ports: pypi.org:80,443.`

// TargetError is a TARGET[:PORTS] that does not parse; callers prefix it with what it was
// given as, like `invalid --allow`.
type TargetError struct {
	Value  string
	Reason string
}

func (e *TargetError) Error() string { return fmt.Sprintf("%q: %s", e.Value, e.Reason) }

// portSpec is a port item: PORT[-END][/PROTO].
var portSpec = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(/[A-Za-z]+)?$`)

// ParseRules parses TARGET[:PORTS] values, each a comma-separated list, into rules with the
// given action, in order. A list item that is only a port adds it to the ports of the item
// before it, so that pypi.org:80,443 is one rule with two ports.
func ParseRules(values []string, action string) ([]sandboxv1alpha1.SandboxEgressRule, error) {
	var rules []sandboxv1alpha1.SandboxEgressRule
	for _, value := range values {
		// The index of this value's last rule, for the port items that follow it; -1 when
		// that rule has no ports, so adding one would narrow it.
		last := -1
		for _, item := range strings.Split(value, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				return nil, &TargetError{Value: value, Reason: "empty target in the list"}
			}
			if portSpec.MatchString(item) {
				if last < 0 {
					return nil, &TargetError{Value: item, Reason: "a port needs a target with a port before it, as in pypi.org:80,443"}
				}
				port, err := parsePort(item)
				if err != nil {
					return nil, &TargetError{Value: item, Reason: err.Error()}
				}
				rules[last].Ports = append(rules[last].Ports, port)
				if len(rules[last].Ports) > egressapi.MaxPorts {
					return nil, &TargetError{Value: value, Reason: fmt.Sprintf("at most %d ports per target", egressapi.MaxPorts)}
				}
				continue
			}
			rule, err := parseRule(item, action)
			if err != nil {
				return nil, err
			}
			rules = append(rules, rule)
			last = -1
			if len(rule.Ports) > 0 {
				last = len(rules) - 1
			}
		}
	}
	return rules, nil
}

// parseRule parses one TARGET[:PORT].
func parseRule(item, action string) (sandboxv1alpha1.SandboxEgressRule, error) {
	rule := sandboxv1alpha1.SandboxEgressRule{Action: action}
	host, ports, err := splitHostPort(item)
	if err != nil {
		return rule, &TargetError{Value: item, Reason: err.Error()}
	}
	if _, err := egressapi.ParseTarget(host); err != nil {
		return rule, &TargetError{Value: item, Reason: err.Error()}
	}
	rule.To = host
	if ports != "" {
		port, err := parsePort(ports)
		if err != nil {
			return rule, &TargetError{Value: item, Reason: err.Error()}
		}
		rule.Ports = []sandboxv1alpha1.SandboxEgressPort{port}
	}
	return rule, nil
}

// splitHostPort splits TARGET[:PORT] and [ADDRESS]:PORT; a bare IPv6 address or CIDR has no
// port.
func splitHostPort(item string) (host, port string, err error) {
	if rest, ok := strings.CutPrefix(item, "["); ok {
		host, rest, ok := strings.Cut(rest, "]")
		if !ok {
			return "", "", fmt.Errorf("missing ] after the address")
		}
		if _, err := netip.ParseAddr(host); err != nil {
			if _, err := netip.ParsePrefix(host); err != nil {
				return "", "", fmt.Errorf("brackets hold an IP address or a CIDR, as in [2001:db8::1]:443")
			}
		}
		if rest == "" {
			return host, "", nil
		}
		port, ok := strings.CutPrefix(rest, ":")
		if !ok || port == "" {
			return "", "", fmt.Errorf("expected :PORT after ]")
		}
		return host, port, nil
	}
	switch strings.Count(item, ":") {
	case 0:
		return item, "", nil
	case 1:
		host, port, _ := strings.Cut(item, ":")
		if port == "" {
			return "", "", fmt.Errorf("missing port after :")
		}
		return host, port, nil
	}
	if _, err := netip.ParseAddr(item); err == nil {
		return item, "", nil
	}
	if _, err := netip.ParsePrefix(item); err == nil {
		return item, "", nil
	}
	return "", "", fmt.Errorf("put an IPv6 address in brackets to give it a port, as in [2001:db8::1]:443")
}

// parsePort parses PORT[-END][/PROTO].
func parsePort(s string) (sandboxv1alpha1.SandboxEgressPort, error) {
	var port sandboxv1alpha1.SandboxEgressPort
	spec, proto, hasProto := strings.Cut(s, "/")
	if hasProto {
		switch {
		case strings.EqualFold(proto, string(egressapi.ProtocolTCP)):
			port.Protocol = string(egressapi.ProtocolTCP)
		case strings.EqualFold(proto, string(egressapi.ProtocolUDP)):
			port.Protocol = string(egressapi.ProtocolUDP)
		default:
			return port, fmt.Errorf("unknown protocol %q: must be TCP or UDP", proto)
		}
	}
	first, end, isRange := strings.Cut(spec, "-")
	p, err := portNumber(first)
	if err != nil {
		return port, err
	}
	port.Port = p
	if isRange {
		e, err := portNumber(end)
		if err != nil {
			return port, err
		}
		if e < p {
			return port, fmt.Errorf("the port range %s ends before it starts", spec)
		}
		if e > p {
			port.EndPort = &e
		}
	}
	return port, nil
}

func portNumber(s string) (int32, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a port number", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %s is out of range (1-65535)", s)
	}
	return int32(n), nil
}

// ValidatePolicy checks a policy as the server will, with egressapi's rules; field paths start
// at fld.
func ValidatePolicy(p *sandboxv1alpha1.SandboxNetworkPolicy, fld *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	return egressapi.ValidatePolicy(p.EgressPolicy(), fld)
}

// DefaultAction is the policy's effective default: Deny unless Allow is given.
func DefaultAction(p *sandboxv1alpha1.SandboxNetworkPolicy) string {
	if p != nil && p.DefaultAction == ActionAllow {
		return ActionAllow
	}
	return ActionDeny
}

// Summary is a policy in a few words, as the Egress column of 'kubectl get sandboxes -o wide'
// shows it (the server's table says the same).
func Summary(p *sandboxv1alpha1.SandboxNetworkPolicy) string { return p.Summary() }

// FormatTarget writes a rule's target and ports in the TARGET[:PORTS] syntax, TCP left implicit.
func FormatTarget(r sandboxv1alpha1.SandboxEgressRule) string {
	if len(r.Ports) == 0 {
		return r.To
	}
	host := r.To
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	ports := make([]string, 0, len(r.Ports))
	for _, p := range r.Ports {
		s := portRange(p)
		if p.Protocol == string(egressapi.ProtocolUDP) {
			s += "/UDP"
		}
		ports = append(ports, s)
	}
	return host + ":" + strings.Join(ports, ",")
}

// FormatRule is a rule for messages: "Allow pypi.org:443".
func FormatRule(r sandboxv1alpha1.SandboxEgressRule) string {
	return r.Action + " " + FormatTarget(r)
}

// FormatPorts is a rule's ports for the PORTS column: "443/TCP, 8080-8090/UDP", or "all".
func FormatPorts(ports []sandboxv1alpha1.SandboxEgressPort) string {
	if len(ports) == 0 {
		return "all"
	}
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = string(egressapi.ProtocolTCP)
		}
		out = append(out, portRange(p)+"/"+proto)
	}
	return strings.Join(out, ", ")
}

func portRange(p sandboxv1alpha1.SandboxEgressPort) string {
	if p.EndPort != nil && *p.EndPort != p.Port {
		return fmt.Sprintf("%d-%d", p.Port, *p.EndPort)
	}
	return strconv.Itoa(int(p.Port))
}

// targetKey is what a rule's target matches, so that PyPI.org. and pypi.org, or 10.1.2.3/8 and
// 10.0.0.0/8, are the same target.
func targetKey(to string) string {
	t, err := egressapi.ParseTarget(to)
	if err != nil {
		return strings.ToLower(to)
	}
	if t.Kind == egressapi.TargetPrefix {
		return t.Prefix.String()
	}
	return t.Key()
}

// portKey is a rule's ports in a canonical form: sorted, TCP explicit, single ports without an
// end. Rules with the same portKey match the same ports.
func portKey(ports []sandboxv1alpha1.SandboxEgressPort) string {
	type span struct {
		proto      string
		start, end int32
	}
	spans := make([]span, 0, len(ports))
	for _, p := range ports {
		s := span{proto: p.Protocol, start: p.Port, end: p.Port}
		if s.proto == "" {
			s.proto = string(egressapi.ProtocolTCP)
		}
		if p.EndPort != nil {
			s.end = *p.EndPort
		}
		spans = append(spans, s)
	}
	slices.SortFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.proto, b.proto), cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end))
	})
	spans = slices.Compact(spans)
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "%s:%d-%d;", s.proto, s.start, s.end)
	}
	return b.String()
}

// sameMatch reports whether two rules match the same traffic (whatever their actions).
func sameMatch(a, b sandboxv1alpha1.SandboxEgressRule) bool {
	return targetKey(a.To) == targetKey(b.To) && portKey(a.Ports) == portKey(b.Ports)
}

// covers reports whether rule a matches at least what b does, as far as can be told without
// resolving names: the same target with all ports, or with the same ports.
func covers(a, b sandboxv1alpha1.SandboxEgressRule) bool {
	return targetKey(a.To) == targetKey(b.To) && (len(a.Ports) == 0 || portKey(a.Ports) == portKey(b.Ports))
}

// ForCreate is the policy of a new sandbox that allows the targets (TARGET[:PORTS] each, see
// TargetSyntax) and denies the rest, or with denyAll denies everything; nil when neither is
// given, for the pool's or the platform's default.
func ForCreate(allow []string, denyAll bool) (*sandboxv1alpha1.SandboxNetworkPolicy, error) {
	switch {
	case len(allow) > 0 && denyAll:
		return nil, fmt.Errorf("--allow and --deny-all cannot be used together: --allow denies what its targets do not match already")
	case denyAll:
		return &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: ActionDeny}, nil
	case len(allow) == 0:
		return nil, nil
	}
	rules, err := ParseRules(allow, ActionAllow)
	if err != nil {
		return nil, fmt.Errorf("invalid --allow %w", err)
	}
	if len(rules) > egressapi.MaxRules {
		return nil, fmt.Errorf("--allow gives %d targets; at most %d are allowed", len(rules), egressapi.MaxRules)
	}
	policy := &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: ActionDeny, Egress: rules}
	if errs := ValidatePolicy(policy, field.NewPath("spec", "networkPolicy")); len(errs) > 0 {
		return nil, fmt.Errorf("invalid --allow: %w", errs.ToAggregate())
	}
	return policy, nil
}
