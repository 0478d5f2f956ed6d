// Package egress gives every sandbox pod the outbound policy it must enforce: it reads the
// platform's policy (the kube-sandbox-egress ConfigMap), composes it with a sandbox's own or its
// pool's policy into the egressapi.Config that the pod's node agent applies, and pushes
// that Config to the pod over mTLS.
package egress

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// DefaultConfigMap is the platform policy's ConfigMap, in the controller's namespace.
const DefaultConfigMap = "kube-sandbox-egress"

// Keys of the ConfigMap. Each holds a YAML document.
const (
	// KeyAlwaysDeny: a list of CIDRs, addresses or keywords, denied to every sandbox whatever
	// its rules say.
	KeyAlwaysDeny = "alwaysDeny"
	// KeyAlwaysAllow: a list of targets (names, wildcards, addresses, CIDRs) allowed to every
	// sandbox, after alwaysDeny and before the sandbox's own rules.
	KeyAlwaysAllow = "alwaysAllow"
	// KeyDefaultPolicy: the networkPolicy of sandboxes that set none (nor their pool).
	KeyDefaultPolicy = "defaultPolicy"
	// KeyDNSUpstreams: the resolvers (ADDRESS or ADDRESS:PORT) of the DNS proxy; empty: the
	// pod's own nameservers.
	KeyDNSUpstreams = "dnsUpstreams"
)

// Keywords of alwaysDeny that stand for what the cluster holds now.
const (
	// KeywordPods: every node's spec.podCIDRs.
	KeywordPods = "cluster:pods"
	// KeywordServices: the ServiceCIDR objects' ranges (networking.k8s.io/v1).
	KeywordServices = "cluster:services"
	// KeywordNodes: every node's addresses (status.addresses of type InternalIP and ExternalIP).
	KeywordNodes = "cluster:nodes"
)

// builtinAlwaysDeny applies when the ConfigMap is missing or its alwaysDeny is invalid: fail
// closed, as the shipped ConfigMap does.
var builtinAlwaysDeny = []string{KeywordPods, KeywordServices, KeywordNodes, "169.254.0.0/16", "fe80::/10"}

// Platform is the platform's policy, as parsed from the ConfigMap.
type Platform struct {
	AlwaysDeny    []string
	AlwaysAllow   []string
	DefaultPolicy egressapi.Policy
	Upstreams     []string
}

// Builtin is the platform policy without a ConfigMap: everything denied.
func Builtin() *Platform {
	return &Platform{AlwaysDeny: builtinAlwaysDeny, DefaultPolicy: egressapi.DenyAll()}
}

// ParsePlatform reads a ConfigMap's data. Errors name the key; an invalid ConfigMap is not
// used (the caller keeps the built-in policy, which denies everything).
func ParsePlatform(data map[string]string) (*Platform, error) {
	p := Builtin()
	var errs field.ErrorList
	list := func(key string) []string {
		var out []string
		if v := strings.TrimSpace(data[key]); v != "" {
			if err := yaml.UnmarshalStrict([]byte(v), &out); err != nil {
				errs = append(errs, field.Invalid(field.NewPath("data", key), "", "must be a YAML list of strings: "+err.Error()))
			}
		}
		return out
	}
	if _, ok := data[KeyAlwaysDeny]; ok {
		p.AlwaysDeny = list(KeyAlwaysDeny)
	}
	for i, t := range p.AlwaysDeny {
		if t == KeywordPods || t == KeywordServices || t == KeywordNodes {
			continue
		}
		if pt, err := egressapi.ParseTarget(t); err != nil || pt.Kind != egressapi.TargetPrefix {
			errs = append(errs, field.Invalid(field.NewPath("data", KeyAlwaysDeny).Index(i), t,
				"must be an address, a CIDR or one of "+strings.Join([]string{KeywordPods, KeywordServices, KeywordNodes}, ", ")))
		}
	}
	p.AlwaysAllow = list(KeyAlwaysAllow)
	for i, t := range p.AlwaysAllow {
		if _, err := egressapi.ParseTarget(t); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("data", KeyAlwaysAllow).Index(i), t, err.Error()))
		}
	}
	if v := strings.TrimSpace(data[KeyDefaultPolicy]); v != "" {
		var np controlv1alpha1.NetworkPolicy
		if err := yaml.UnmarshalStrict([]byte(v), &np); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("data", KeyDefaultPolicy), "", "must be a networkPolicy in YAML: "+err.Error()))
		} else {
			p.DefaultPolicy = np.EgressPolicy()
			errs = append(errs, egressapi.ValidatePolicy(&p.DefaultPolicy, field.NewPath("data", KeyDefaultPolicy))...)
		}
	}
	for i, u := range list(KeyDNSUpstreams) {
		ap, err := netip.ParseAddrPort(u)
		if err != nil {
			a, aerr := netip.ParseAddr(u)
			if aerr != nil {
				errs = append(errs, field.Invalid(field.NewPath("data", KeyDNSUpstreams).Index(i), u, "must be ADDRESS or ADDRESS:PORT"))
				continue
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		p.Upstreams = append(p.Upstreams, ap.String())
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return p, nil
}

// Cluster is what the keywords of alwaysDeny stand for.
type Cluster struct {
	PodCIDRs, ServiceCIDRs, NodeAddresses []string
}

// ReadCluster lists nodes and ServiceCIDRs (from the cache).
func ReadCluster(ctx context.Context, c client.Reader) (*Cluster, error) {
	out := &Cluster{}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		out.PodCIDRs = append(out.PodCIDRs, n.Spec.PodCIDRs...)
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				out.NodeAddresses = append(out.NodeAddresses, a.Address)
			}
		}
	}
	cidrs := &networkingv1.ServiceCIDRList{}
	if err := c.List(ctx, cidrs); err != nil {
		return nil, fmt.Errorf("list servicecidrs: %w", err)
	}
	for _, s := range cidrs.Items {
		out.ServiceCIDRs = append(out.ServiceCIDRs, s.Spec.CIDRs...)
	}
	for _, l := range [][]string{out.PodCIDRs, out.ServiceCIDRs, out.NodeAddresses} {
		slices.Sort(l)
	}
	return out, nil
}

// ConfigFor composes the Config of one pod. policy is the sandbox's own, else its pool's,
// else nil (the platform's default); sandbox is nil for an idle pool pod, which gets deny-all.
func (p *Platform) ConfigFor(cluster *Cluster, podUID string, sandbox *egressapi.SandboxRef, generation int64, policy *controlv1alpha1.NetworkPolicy) egressapi.Config {
	cfg := egressapi.Config{PodUID: podUID, Sandbox: sandbox, Generation: generation, Upstreams: p.Upstreams}
	seen := map[string]bool{}
	deny := func(t string) {
		if pt, err := egressapi.ParseTarget(t); err == nil && pt.Kind == egressapi.TargetPrefix && !seen[pt.Prefix.String()] {
			seen[pt.Prefix.String()] = true
			cfg.Rules = append(cfg.Rules, egressapi.Rule{Action: egressapi.ActionDeny, To: pt.Prefix.String()})
		}
	}
	for _, t := range p.AlwaysDeny {
		var expand []string
		switch t {
		case KeywordPods:
			expand = cluster.PodCIDRs
		case KeywordServices:
			expand = cluster.ServiceCIDRs
		case KeywordNodes:
			expand = cluster.NodeAddresses
		default:
			expand = []string{t}
		}
		for _, e := range expand {
			deny(e)
		}
	}
	if sandbox == nil {
		cfg.DefaultAction = egressapi.ActionDeny
		cfg.Revision = cfg.Hash()
		return cfg
	}
	for _, t := range p.AlwaysAllow {
		cfg.Rules = append(cfg.Rules, egressapi.Rule{Action: egressapi.ActionAllow, To: t})
	}
	own := p.DefaultPolicy
	if policy != nil {
		own = policy.EgressPolicy()
	}
	cfg.Rules = append(cfg.Rules, own.Egress...)
	cfg.DefaultAction = own.EffectiveDefault()
	cfg.Revision = cfg.Hash()
	return cfg
}
