package egressapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TargetKind says what a rule's "to" is.
type TargetKind int

const (
	// TargetName is a DNS name: it matches that name only.
	TargetName TargetKind = iota + 1
	// TargetWildcard is "*.example.com": it matches the subdomains of example.com, at any
	// depth, and not example.com itself.
	TargetWildcard
	// TargetPrefix is an address (a /32 or /128) or a CIDR.
	TargetPrefix
)

// Target is a parsed "to".
type Target struct {
	Kind TargetKind
	// Name is the lower-case name without a trailing dot; for a wildcard, the part after "*.".
	Name string
	// Prefix, for TargetPrefix, in canonical (masked) form.
	Prefix netip.Prefix
}

// ParseTarget parses a rule's "to".
func ParseTarget(to string) (Target, error) {
	if to == "" {
		return Target{}, fmt.Errorf("must be a DNS name, a *. wildcard, an IP address or a CIDR")
	}
	if addr, err := netip.ParseAddr(to); err == nil {
		if addr.Zone() != "" {
			return Target{}, fmt.Errorf("an address with a zone is not a target")
		}
		addr = addr.Unmap()
		return Target{Kind: TargetPrefix, Prefix: netip.PrefixFrom(addr, addr.BitLen())}, nil
	}
	if strings.Contains(to, "/") {
		p, err := netip.ParsePrefix(to)
		if err != nil {
			return Target{}, fmt.Errorf("not a valid CIDR: %v", err)
		}
		if p.Addr().Is4In6() {
			return Target{}, fmt.Errorf("write an IPv4 CIDR in IPv4 form")
		}
		return Target{Kind: TargetPrefix, Prefix: p.Masked()}, nil
	}
	name := strings.ToLower(strings.TrimSuffix(to, "."))
	kind := TargetName
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		kind, name = TargetWildcard, rest
	}
	if strings.Contains(name, "*") {
		return Target{}, fmt.Errorf("a wildcard may only be the first label, as in *.example.com")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return Target{}, fmt.Errorf("not a valid DNS name: %s", strings.Join(errs, "; "))
	}
	if !strings.Contains(name, ".") && kind == TargetWildcard {
		// "*.com" would open a whole top-level domain.
		return Target{}, fmt.Errorf("a wildcard needs at least two labels after \"*.\", as in *.example.com")
	}
	// An all-numeric last label is how a mistyped address looks (10.0.0.256).
	labels := strings.Split(name, ".")
	if isDigits(labels[len(labels)-1]) {
		return Target{}, fmt.Errorf("not a valid IP address, and a DNS name does not end in a number")
	}
	return Target{Kind: kind, Name: name}, nil
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// MatchesName reports whether a name target matches qname (lower case, no trailing dot).
func (t Target) MatchesName(qname string) bool {
	switch t.Kind {
	case TargetName:
		return qname == t.Name
	case TargetWildcard:
		return strings.HasSuffix(qname, "."+t.Name)
	}
	return false
}

// Key names a name target's learned addresses; rules with the same target share them.
func (t Target) Key() string {
	if t.Kind == TargetWildcard {
		return "*." + t.Name
	}
	return t.Name
}

// ValidatePolicy validates a sandbox's or a pool's policy.
func ValidatePolicy(p *Policy, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch p.DefaultAction {
	case "", ActionAllow, ActionDeny:
	default:
		errs = append(errs, field.NotSupported(fld.Child("defaultAction"), p.DefaultAction, []string{string(ActionAllow), string(ActionDeny)}))
	}
	if len(p.Egress) > MaxRules {
		errs = append(errs, field.TooMany(fld.Child("egress"), len(p.Egress), MaxRules))
		return errs
	}
	for i := range p.Egress {
		errs = append(errs, ValidateRule(&p.Egress[i], fld.Child("egress").Index(i))...)
	}
	return errs
}

// ValidateRule validates one rule.
func ValidateRule(r *Rule, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch r.Action {
	case ActionAllow, ActionDeny:
	case "":
		errs = append(errs, field.Required(fld.Child("action"), "Allow or Deny"))
	default:
		errs = append(errs, field.NotSupported(fld.Child("action"), r.Action, []string{string(ActionAllow), string(ActionDeny)}))
	}
	if _, err := ParseTarget(r.To); err != nil {
		if r.To == "" {
			errs = append(errs, field.Required(fld.Child("to"), err.Error()))
		} else {
			errs = append(errs, field.Invalid(fld.Child("to"), r.To, err.Error()))
		}
	}
	if len(r.Ports) > MaxPorts {
		errs = append(errs, field.TooMany(fld.Child("ports"), len(r.Ports), MaxPorts))
		return errs
	}
	for i, p := range r.Ports {
		pf := fld.Child("ports").Index(i)
		if p.Port < 1 || p.Port > 65535 {
			errs = append(errs, field.Invalid(pf.Child("port"), p.Port, "must be between 1 and 65535"))
		}
		if p.EndPort != nil && (*p.EndPort < p.Port || *p.EndPort > 65535) {
			errs = append(errs, field.Invalid(pf.Child("endPort"), *p.EndPort, "must be between port and 65535"))
		}
		switch p.Protocol {
		case "", ProtocolTCP, ProtocolUDP:
		default:
			errs = append(errs, field.NotSupported(pf.Child("protocol"), p.Protocol, []string{string(ProtocolTCP), string(ProtocolUDP)}))
		}
	}
	return errs
}

// ProtocolOf is the port's protocol, TCP when unset.
func (p Port) ProtocolOf() Protocol {
	if p.Protocol == "" {
		return ProtocolTCP
	}
	return p.Protocol
}

// Last is the port range's last port.
func (p Port) Last() int32 {
	if p.EndPort != nil {
		return *p.EndPort
	}
	return p.Port
}

// Hash is the revision of a Config: a digest of what it enforces (not of the pod it is for).
func (c Config) Hash() string {
	c.Revision, c.PodUID = "", ""
	data, _ := json.Marshal(c)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// ValidateConfig checks a pushed Config as the node agent (sandbox-node) receives it.
func ValidateConfig(c *Config) error {
	if c.PodUID == "" {
		return fmt.Errorf("podUID is required")
	}
	p := Policy{DefaultAction: c.DefaultAction, Egress: c.Rules}
	// The platform's lists come on top of a sandbox's MaxRules.
	var errs field.ErrorList
	for i := range c.Rules {
		errs = append(errs, ValidateRule(&c.Rules[i], field.NewPath("rules").Index(i))...)
	}
	if c.DefaultAction != ActionAllow && c.DefaultAction != ActionDeny {
		errs = append(errs, field.NotSupported(field.NewPath("defaultAction"), p.DefaultAction, []string{string(ActionAllow), string(ActionDeny)}))
	}
	for i, u := range c.Upstreams {
		if _, err := netip.ParseAddrPort(u); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("upstreams").Index(i), u, "must be ADDRESS:PORT"))
		}
	}
	return errs.ToAggregate()
}
