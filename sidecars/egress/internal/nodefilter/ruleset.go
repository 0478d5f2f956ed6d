package nodefilter

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// Names of the tables and of the objects every pod shares.
const (
	// IngressTable (netdev family) holds one anti-spoofing chain per pod.
	IngressTable = "kube_sandbox_ingress"
	// EgressTable (inet family) holds the pods' policies.
	EgressTable = "kube_sandbox_egress"

	ChainPrerouting    = "prerouting"
	ChainNATPrerouting = "nat_prerouting"
	MapPods4           = "pods4"
	MapPods6           = "pods6"
	SetDNS4            = "dns4"
	SetDNS6            = "dns6"
)

// Priorities of the base chains.
const (
	// ingressPriority runs the anti-spoofing chain before anything else on the device.
	ingressPriority = -500
	// preroutingPriority is after conntrack (-200), so that "ct state" works, and before
	// dstnat (-100), so that the destination is the one the pod sent to, not the one
	// kube-proxy's DNAT made of it.
	preroutingPriority = -150
	// natPriority is just before dstnat (-100), where kube-proxy's DNAT is (iptables' nat
	// table, or its nftables chain): of two nat chains on a hook the first to bind the flow
	// wins, and a query to the cluster DNS service's address must go to the node's proxy,
	// not be sent on to CoreDNS by kube-proxy.
	natPriority = -105
)

// rulesetVersion is part of every rule's fingerprint: bump it when the meaning of a rule
// changes without its expressions changing, so that Sync rewrites what an older agent left.
const rulesetVersion = "nf1"

// maxCommentLen keeps a rule's comment within what nft displays (NFTNL_UDATA_COMMENT_MAXLEN,
// 128 with its NUL); the fingerprint comes first so that it always survives. The pod's meta
// rule is not cut (Pods reads it back): it may use what the kernel stores, 256 bytes of user
// data, of which the comment's type, length and NUL take 3.
const (
	maxCommentLen     = 127
	maxMetaCommentLen = 253
)

// metaPrefix starts the description of a pod's meta rule.
const metaPrefix = "pod "

// ruleKind says what a rule's counter counts, so that Counters knows which to add up.
type ruleKind int

const (
	kindPlain   ruleKind = iota // no counter
	kindMeta                    // the pod's meta rule: no expressions, the pod in its comment
	kindAllowed                 // new connections allowed (matcher rule or default)
	kindDenied                  // the deny chain's counter
	kindSpoofed                 // frames the anti-spoofing chain drops
	kindProbe                   // the proof probe
)

// ruleSpec is a rule as Sync wants it.
type ruleSpec struct {
	desc     string
	kind     ruleKind
	exprs    []expr.Any
	userData []byte // comment "<fingerprint> <desc>"
}

// chainSpec is a chain as Sync wants it.
type chainSpec struct {
	name     string
	typ      nftables.ChainType
	hook     *nftables.ChainHook
	priority *nftables.ChainPriority
	policy   *nftables.ChainPolicy
	device   string
}

// setSpec is a named set (or verdict map) in the inet table.
type setSpec struct {
	name   string
	key    string // for a pod's learned addresses: the name target key (egressapi.Target.Key)
	v6     bool
	isMap  bool // a verdict map
	learns bool // elements with timeouts
}

// PodID is the part of the names of a pod's chains and sets that stands for it: the first
// 12 hex digits of the SHA-256 of its UID. A UID is 36 characters and its own business; the
// ID is short, a valid nft identifier, and the same in every agent that ever sees the pod.
func PodID(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:6])
}

const podIDLen = 12

func podChain(id string) string  { return "p_" + id }
func denyChain(id string) string { return "p_" + id + "_deny" }

// SetNames are the names of the sets holding the addresses learned for a name target key in
// the pod with that ID. Names are a hash, not the key itself: keys can be 253 characters long
// and contain "*", neither of which nft's parser likes; the key is in the set's comment.
func SetNames(id, key string) (v4, v6 string) {
	sum := sha256.Sum256([]byte(key))
	h := "p_" + id + "_" + hex.EncodeToString(sum[:6])
	return h + "_4", h + "_6"
}

// idOfPodChain is the pod ID of a chain name: "p_<id>" (the policy, and the anti-spoofing
// chain in the netdev table) or "p_<id>_deny".
func idOfPodChain(name string) (id string, deny, ok bool) {
	rest, ok := strings.CutPrefix(name, "p_")
	if !ok {
		return "", false, false
	}
	if r, d := strings.CutSuffix(rest, "_deny"); d {
		rest, deny = r, true
	}
	if !isHexID(rest) {
		return "", false, false
	}
	return rest, deny, true
}

// idOfPodSet is the pod ID of a learned-address set's name, "p_<id>_<hash>_4" or "_6".
func idOfPodSet(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "p_")
	if !ok || len(rest) != podIDLen+1+podIDLen+2 {
		return "", false
	}
	id, h, fam := rest[:podIDLen], rest[podIDLen+1:2*podIDLen+1], rest[2*podIDLen+1:]
	if rest[podIDLen] != '_' || !isHexID(id) || !isHexID(h) || (fam != "_4" && fam != "_6") {
		return "", false
	}
	return id, true
}

func isHexID(s string) bool {
	if len(s) != podIDLen {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

var (
	policyDrop   = nftables.ChainPolicyDrop
	policyAccept = nftables.ChainPolicyAccept
)

// config is the Options, checked and in the forms the rules use.
type config struct {
	dnsPort   uint16
	waitPort  uint16 // 0: no wait rule
	nodeAddrs []netip.Addr
	probeAddr netip.Addr // invalid: no probe rule
	probePort uint16
}

func newConfig(o Options) (config, error) {
	var c config
	var errs []error
	port := func(name string, p int, required bool) uint16 {
		if p == 0 && !required {
			return 0
		}
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("invalid %s %d", name, p))
			return 0
		}
		return uint16(p)
	}
	c.dnsPort = port("DNS port", o.DNSPort, true)
	c.waitPort = port("wait port", o.WaitPort, false)
	c.probePort = port("probe port", o.ProbePort, false)
	for _, a := range o.NodeAddrs {
		a = a.Unmap()
		if !a.IsValid() || a.Zone() != "" || a.IsUnspecified() {
			errs = append(errs, fmt.Errorf("invalid node address %q", a))
			continue
		}
		c.nodeAddrs = append(c.nodeAddrs, a)
	}
	slices.SortFunc(c.nodeAddrs, netip.Addr.Compare)
	c.nodeAddrs = slices.Compact(c.nodeAddrs)
	if c.waitPort != 0 && len(c.nodeAddrs) == 0 {
		errs = append(errs, fmt.Errorf("a wait port needs node addresses"))
	}
	if o.ProbeAddr.IsValid() || c.probePort != 0 {
		c.probeAddr = o.ProbeAddr.Unmap()
		if !c.probeAddr.IsValid() || c.probeAddr.Zone() != "" || c.probeAddr.IsUnspecified() || c.probePort == 0 {
			errs = append(errs, fmt.Errorf("the probe needs both an address and a port (got %q, %d)", o.ProbeAddr, o.ProbePort))
		}
	}
	return c, errors.Join(errs...)
}

// normalizePod checks a pod and puts its addresses in canonical order, so that the same pod
// always compiles to the same rules.
func normalizePod(p Pod) (Pod, error) {
	if p.UID == "" || len(p.UID) > 128 || strings.ContainsFunc(p.UID, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return Pod{}, fmt.Errorf("invalid pod UID %q", p.UID)
	}
	if p.Iface == "" || len(p.Iface) >= unix.IFNAMSIZ || strings.ContainsAny(p.Iface, "/: \t\n") || p.Iface == "." || p.Iface == ".." {
		return Pod{}, fmt.Errorf("pod %s: invalid interface name %q", p.UID, p.Iface)
	}
	out := Pod{UID: p.UID, Iface: p.Iface}
	for _, a := range p.IPs {
		a = a.Unmap()
		if !a.IsValid() || a.Zone() != "" || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() {
			return Pod{}, fmt.Errorf("pod %s: invalid address %q", p.UID, a)
		}
		out.IPs = append(out.IPs, a)
	}
	if len(out.IPs) == 0 {
		return Pod{}, fmt.Errorf("pod %s: no addresses", p.UID)
	}
	slices.SortFunc(out.IPs, netip.Addr.Compare)
	out.IPs = slices.Compact(out.IPs)
	return out, nil
}

func split(addrs []netip.Addr) (v4, v6 []netip.Addr) {
	for _, a := range addrs {
		if a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	return v4, v6
}

// metaDesc is the description of the pod's meta rule: what Pods reads back.
func metaDesc(p Pod) string {
	ips := make([]string, len(p.IPs))
	for i, a := range p.IPs {
		ips[i] = a.String()
	}
	return fmt.Sprintf("%suid=%s iface=%s ips=%s", metaPrefix, p.UID, p.Iface, strings.Join(ips, ","))
}

// parseMeta reads a meta rule's comment back; ok is false for any other rule.
func parseMeta(comment string) (Pod, bool) {
	_, desc, _ := strings.Cut(comment, " ")
	rest, ok := strings.CutPrefix(desc, metaPrefix)
	if !ok {
		return Pod{}, false
	}
	var p Pod
	for _, f := range strings.Fields(rest) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "uid":
			p.UID = v
		case "iface":
			p.Iface = v
		case "ips":
			for _, s := range strings.Split(v, ",") {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return Pod{}, false
				}
				p.IPs = append(p.IPs, a)
			}
		}
	}
	if p.UID == "" {
		return Pod{}, false
	}
	return p, true
}

// globalRuleset is what every pod shares: the hooks that send each pod's packets to its
// chain, and the redirect of its DNS queries.
type globalRuleset struct {
	chains []chainSpec
	rules  map[string][]ruleSpec
	sets   []setSpec
}

func buildGlobal(c config) (*globalRuleset, error) {
	g := &globalRuleset{
		chains: []chainSpec{
			{name: ChainPrerouting, typ: nftables.ChainTypeFilter, hook: nftables.ChainHookPrerouting,
				priority: nftables.ChainPriorityRef(preroutingPriority), policy: &policyAccept},
			{name: ChainNATPrerouting, typ: nftables.ChainTypeNAT, hook: nftables.ChainHookPrerouting,
				priority: nftables.ChainPriorityRef(natPriority), policy: &policyAccept},
		},
		rules: map[string][]ruleSpec{},
		sets: []setSpec{
			{name: MapPods4, isMap: true}, {name: MapPods6, isMap: true, v6: true},
			{name: SetDNS4}, {name: SetDNS6, v6: true},
		},
	}
	b := newBuilder(nftables.TableFamilyINet)
	for _, f := range families {
		b.add(ChainPrerouting, f.name+" pods", kindPlain,
			nfproto(f.nfproto), load(expr.PayloadBaseNetworkHeader, f.saddr, f.len), vmap(f.pods))
	}
	for _, f := range families {
		for _, p := range []struct {
			name  string
			proto byte
		}{{"udp", unix.IPPROTO_UDP}, {"tcp", unix.IPPROTO_TCP}} {
			b.add(ChainNATPrerouting, fmt.Sprintf("%s dns %s redirect to :%d", f.name, p.name, c.dnsPort), kindPlain,
				nfproto(f.nfproto), load(expr.PayloadBaseNetworkHeader, f.saddr, f.len), lookup(f.dns),
				l4proto(p.proto), dport(53, 53), redirectTo(c.dnsPort))
		}
	}
	if err := b.err(); err != nil {
		return nil, err
	}
	g.rules = b.rules
	return g, nil
}

// families are the offsets and names the rules need per IP family.
var families = []struct {
	name         string
	nfproto      byte
	saddr, daddr uint32
	len          uint32
	pods, dns    string
}{
	{"ipv4", unix.NFPROTO_IPV4, 12, 16, 4, MapPods4, SetDNS4},
	{"ipv6", unix.NFPROTO_IPV6, 8, 24, 16, MapPods6, SetDNS6},
}

// podRuleset is everything of one pod.
type podRuleset struct {
	pod Pod
	id  string
	// ingress is the anti-spoofing chain in the netdev table.
	ingress chainSpec
	// chains of the inet table, in the order they are created (a jump's target first).
	chains []chainSpec
	rules  map[string][]ruleSpec // by chain; the netdev chain's under ingressKey
	sets   []setSpec
	// keys maps each name target key to its sets (v4, v6).
	keys map[string][2]string
}

// ingressKey is where podRuleset.rules keeps the netdev chain's rules (its name is the
// policy chain's, in the other table).
const ingressKey = "ingress"

// buildPod compiles a pod's chains from its addresses and policy. It is pure, so that it can
// be tested without a kernel.
func buildPod(p Pod, m *egressapi.Matcher, c config) (*podRuleset, error) {
	if m == nil {
		return nil, fmt.Errorf("no matcher")
	}
	p, err := normalizePod(p)
	if err != nil {
		return nil, err
	}
	id := PodID(p.UID)
	chain, deny := podChain(id), denyChain(id)
	rs := &podRuleset{
		pod: p,
		id:  id,
		ingress: chainSpec{name: chain, typ: nftables.ChainTypeFilter, hook: nftables.ChainHookIngress,
			priority: nftables.ChainPriorityRef(ingressPriority), policy: &policyDrop, device: p.Iface},
		chains: []chainSpec{{name: deny}, {name: chain}},
		keys:   map[string][2]string{},
	}
	meta := metaDesc(p)
	if len(meta)+1+16 > maxMetaCommentLen {
		return nil, fmt.Errorf("pod %s: too many addresses to record (%d)", p.UID, len(p.IPs))
	}
	v4, v6 := split(p.IPs)

	// The anti-spoofing chain, in the netdev table. Policy drop, and explicit accepts: what is
	// not recognized as the pod's own traffic (another ethertype, a VLAN tag, a frame too
	// short to parse) goes.
	nd := newBuilder(nftables.TableFamilyNetdev)
	nd.add(ingressKey, meta, kindMeta)
	nd.add(ingressKey, "spoofed: arp sender", kindSpoofed,
		etherType(unix.ETH_P_ARP), neqAll(load(expr.PayloadBaseNetworkHeader, 14, 4), v4), counter(), drop())
	nd.add(ingressKey, "spoofed: ipv4 source", kindSpoofed,
		etherType(unix.ETH_P_IP), neqAll(load(expr.PayloadBaseNetworkHeader, 12, 4), v4), counter(), drop())
	nd.add(ingressKey, "spoofed: ipv6 nd target", kindSpoofed,
		etherType(unix.ETH_P_IPV6), l4proto(unix.IPPROTO_ICMPV6), loadCmp(expr.PayloadBaseTransportHeader, 0, []byte{136}),
		neqAll(load(expr.PayloadBaseTransportHeader, 8, 16), v6), notInPrefix(linkLocal), counter(), drop())
	nd.add(ingressKey, "spoofed: ipv6 router advert or redirect", kindSpoofed,
		etherType(unix.ETH_P_IPV6), l4proto(unix.IPPROTO_ICMPV6), load(expr.PayloadBaseTransportHeader, 0, 1),
		inRange([]byte{134}, []byte{137}), neq([]byte{135}), neq([]byte{136}), counter(), drop())
	for _, a := range v6 {
		nd.add(ingressKey, "ipv6 source "+a.String(), kindPlain,
			etherType(unix.ETH_P_IPV6), loadCmp(expr.PayloadBaseNetworkHeader, 8, a.AsSlice()), accept())
	}
	for _, src := range []struct {
		name  string
		match []expr.Any
	}{
		{"link-local", join(load(expr.PayloadBaseNetworkHeader, 8, 16), inPrefix(linkLocal))},
		{"unspecified", loadCmp(expr.PayloadBaseNetworkHeader, 8, netip.IPv6Unspecified().AsSlice())},
	} {
		// Neighbour discovery and multicast listener messages (130-133, 135, 136 and 143;
		// 134 went above): what a link-local or not yet configured address is for.
		nd.add(ingressKey, "ipv6 "+src.name+" source nd", kindPlain,
			etherType(unix.ETH_P_IPV6), src.match, l4proto(unix.IPPROTO_ICMPV6),
			load(expr.PayloadBaseTransportHeader, 0, 1), inRange([]byte{130}, []byte{136}), accept())
		nd.add(ingressKey, "ipv6 "+src.name+" source mldv2", kindPlain,
			etherType(unix.ETH_P_IPV6), src.match, l4proto(unix.IPPROTO_ICMPV6),
			loadCmp(expr.PayloadBaseTransportHeader, 0, []byte{143}), accept())
	}
	nd.add(ingressKey, "ipv4", kindPlain, etherType(unix.ETH_P_IP), accept())
	nd.add(ingressKey, "arp", kindPlain, etherType(unix.ETH_P_ARP), accept())
	nd.add(ingressKey, "spoofed: anything else", kindSpoofed, counter(), drop())

	// The policy, in the inet table.
	b := newBuilder(nftables.TableFamilyINet)
	b.add(deny, "deny: count", kindDenied, counter())
	b.add(deny, "deny: tcp reset", kindPlain, l4proto(unix.IPPROTO_TCP), &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
	b.add(deny, "deny: icmpx admin-prohibited", kindPlain,
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})

	b.add(chain, meta, kindMeta)
	b.add(chain, "established,related", kindPlain, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), accept())
	if c.probeAddr.IsValid() {
		b.add(chain, fmt.Sprintf("probe %s", netip.AddrPortFrom(c.probeAddr, c.probePort)), kindProbe,
			daddrIs(c.probeAddr), l4proto(unix.IPPROTO_TCP), dport(c.probePort, c.probePort), counter(),
			&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
	}
	if c.waitPort != 0 {
		for _, a := range c.nodeAddrs {
			b.add(chain, fmt.Sprintf("wait %s", netip.AddrPortFrom(a, c.waitPort)), kindPlain,
				daddrIs(a), l4proto(unix.IPPROTO_TCP), dport(c.waitPort, c.waitPort), accept())
		}
	}
	for _, p := range []struct {
		name  string
		proto byte
	}{{"udp", unix.IPPROTO_UDP}, {"tcp", unix.IPPROTO_TCP}} {
		b.add(chain, "dns "+p.name, kindPlain, l4proto(p.proto), dport(53, 53), accept())
	}
	for _, t := range []struct {
		name string
		typ  byte
	}{{"router-solicit", 133}, {"neighbor-solicit", 135}, {"neighbor-advert", 136}} {
		b.add(chain, "ipv6 nd "+t.name, kindPlain,
			nfproto(unix.NFPROTO_IPV6), l4proto(unix.IPPROTO_ICMPV6),
			loadCmp(expr.PayloadBaseNetworkHeader, 7, []byte{255}),     // ip6 hoplimit 255
			loadCmp(expr.PayloadBaseTransportHeader, 0, []byte{t.typ}), // icmpv6 type
			accept())
	}
	for i, r := range m.Rules {
		dsts, err := destinations(r.Target, rs)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("rule %d: %w", i, err))
			continue
		}
		ports, err := portMatches(r.Ports)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("rule %d: %w", i, err))
			continue
		}
		verdict, kind := verdictOf(r.Action, deny)
		for _, d := range dsts {
			for _, pm := range ports {
				desc := fmt.Sprintf("rule %d %s %s %s%s", i, r.Action, d.family, targetString(r.Target), pm.desc)
				b.add(chain, desc, kind, d.exprs, pm.exprs, verdict)
			}
		}
	}
	verdict, kind := verdictOf(m.Default, deny)
	b.add(chain, "default "+string(m.Default), kind, verdict)

	if err := errors.Join(nd.err(), b.err()); err != nil {
		return nil, fmt.Errorf("pod %s: %w", p.UID, err)
	}
	rs.rules = b.rules
	rs.rules[ingressKey] = nd.rules[ingressKey]
	return rs, nil
}

var linkLocal = netip.MustParsePrefix("fe80::/10")

// builder collects rules with their fingerprints, and the errors of making them.
type builder struct {
	family nftables.TableFamily
	rules  map[string][]ruleSpec
	errs   []error
}

func newBuilder(f nftables.TableFamily) *builder {
	return &builder{family: f, rules: map[string][]ruleSpec{}}
}

func (b *builder) add(chain, desc string, kind ruleKind, parts ...any) {
	exprs := join(parts...)
	limit := maxCommentLen
	if kind == kindMeta {
		limit = maxMetaCommentLen
	}
	ud, err := ruleUserData(b.family, chain, desc, exprs, limit)
	if err != nil {
		b.errs = append(b.errs, fmt.Errorf("rule %q: %w", desc, err))
		return
	}
	b.rules[chain] = append(b.rules[chain], ruleSpec{desc: desc, kind: kind, exprs: exprs, userData: ud})
}

func (b *builder) err() error {
	if len(b.errs) == 0 {
		return nil
	}
	return fmt.Errorf("build ruleset: %w", errors.Join(b.errs...))
}

// destination is one family's match of a rule's target.
type destination struct {
	family string // "ipv4" or "ipv6"
	exprs  []expr.Any
}

// destinations matches a target: a prefix in its own family, a name in both families' sets.
func destinations(t egressapi.Target, rs *podRuleset) ([]destination, error) {
	switch t.Kind {
	case egressapi.TargetPrefix:
		if !t.Prefix.IsValid() {
			return nil, fmt.Errorf("invalid prefix")
		}
		p := t.Prefix.Masked()
		if p.Addr().Is4() {
			return []destination{{"ipv4", join(nfproto(unix.NFPROTO_IPV4), daddrPrefix(p, 16))}}, nil
		}
		return []destination{{"ipv6", join(nfproto(unix.NFPROTO_IPV6), daddrPrefix(p, 24))}}, nil
	case egressapi.TargetName, egressapi.TargetWildcard:
		key := t.Key()
		v4, v6 := SetNames(rs.id, key)
		if _, ok := rs.keys[key]; !ok {
			rs.keys[key] = [2]string{v4, v6}
			rs.sets = append(rs.sets, setSpec{name: v4, key: key, learns: true}, setSpec{name: v6, key: key, v6: true, learns: true})
		}
		return []destination{
			{"ipv4", join(nfproto(unix.NFPROTO_IPV4), load(expr.PayloadBaseNetworkHeader, 16, 4), lookup(v4))},
			{"ipv6", join(nfproto(unix.NFPROTO_IPV6), load(expr.PayloadBaseNetworkHeader, 24, 16), lookup(v6))},
		}, nil
	}
	return nil, fmt.Errorf("unknown target kind %d", t.Kind)
}

// daddrPrefix matches the destination address against a prefix: exact for a full-length one,
// masked for a CIDR, nothing at all for /0 (the family check alone matches it).
func daddrPrefix(p netip.Prefix, offset uint32) []expr.Any {
	n := uint32(p.Addr().BitLen() / 8)
	switch {
	case p.Bits() == 0:
		return nil
	case p.Bits() == p.Addr().BitLen():
		return loadCmp(expr.PayloadBaseNetworkHeader, offset, p.Addr().AsSlice())
	}
	return join(load(expr.PayloadBaseNetworkHeader, offset, n), inPrefix(p))
}

// daddrIs matches one destination address, with its family.
func daddrIs(a netip.Addr) []expr.Any {
	if a.Is4() {
		return join(nfproto(unix.NFPROTO_IPV4), loadCmp(expr.PayloadBaseNetworkHeader, 16, a.AsSlice()))
	}
	return join(nfproto(unix.NFPROTO_IPV6), loadCmp(expr.PayloadBaseNetworkHeader, 24, a.AsSlice()))
}

// portMatch is one port entry's match; a rule without ports has a single empty one.
type portMatch struct {
	desc  string
	exprs []expr.Any
}

func portMatches(ports []egressapi.Port) ([]portMatch, error) {
	if len(ports) == 0 {
		return []portMatch{{}}, nil
	}
	out := make([]portMatch, 0, len(ports))
	for _, p := range ports {
		first, last := p.Port, p.Last()
		if first < 1 || last > 65535 || last < first {
			return nil, fmt.Errorf("invalid port range %d-%d", first, last)
		}
		var proto byte
		switch p.ProtocolOf() {
		case egressapi.ProtocolTCP:
			proto = unix.IPPROTO_TCP
		case egressapi.ProtocolUDP:
			proto = unix.IPPROTO_UDP
		default:
			return nil, fmt.Errorf("unsupported protocol %q", p.Protocol)
		}
		desc := fmt.Sprintf(" %s/%d", strings.ToLower(string(p.ProtocolOf())), first)
		if last != first {
			desc += fmt.Sprintf("-%d", last)
		}
		out = append(out, portMatch{desc: desc, exprs: join(l4proto(proto), dport(uint16(first), uint16(last)))})
	}
	return out, nil
}

func verdictOf(a egressapi.Action, denyChain string) ([]expr.Any, ruleKind) {
	if a == egressapi.ActionAllow {
		return []expr.Any{counter(), &expr.Verdict{Kind: expr.VerdictAccept}}, kindAllowed
	}
	// Anything but an explicit Allow denies: the filter fails closed.
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: denyChain}}, kindPlain
}

func targetString(t egressapi.Target) string {
	if t.Kind == egressapi.TargetPrefix {
		return t.Prefix.String()
	}
	return t.Key()
}

// ruleUserData is the rule's comment: its fingerprint, then its description (cut at limit).
// The fingerprint covers the full description and the marshalled expressions, so that any
// change to what a rule does, or where it sits, changes it.
func ruleUserData(family nftables.TableFamily, chain, desc string, exprs []expr.Any, limit int) ([]byte, error) {
	h := sha256.New()
	h.Write([]byte(rulesetVersion + "\x00" + chain + "\x00" + desc + "\x00"))
	for _, e := range exprs {
		b, err := expr.Marshal(byte(family), e)
		if err != nil {
			return nil, fmt.Errorf("marshal %T: %w", e, err)
		}
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	comment := hex.EncodeToString(h.Sum(nil)[:8]) + " " + desc
	if len(comment) > limit {
		comment = comment[:limit]
	}
	return userdata.AppendString(nil, userdata.TypeComment, comment), nil
}

// ruleComment reads a rule's comment back.
func ruleComment(ud []byte) string {
	s, _ := userdata.GetString(ud, userdata.TypeComment)
	return s
}

// Expression helpers. Register 1 holds what is matched; register 2 a masked copy of it.

func join(parts ...any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		switch v := p.(type) {
		case expr.Any:
			out = append(out, v)
		case []expr.Any:
			out = append(out, v...)
		}
	}
	return out
}

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }
func drop() []expr.Any   { return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}} }
func counter() expr.Any  { return &expr.Counter{} }

func load(base expr.PayloadBase, offset, n uint32) *expr.Payload {
	return &expr.Payload{DestRegister: 1, Base: base, Offset: offset, Len: n}
}

func loadCmp(base expr.PayloadBase, offset uint32, data []byte) []expr.Any {
	return []expr.Any{load(base, offset, uint32(len(data))), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}}
}

func neq(data []byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: data} }

// neqAll is "differs from each of addrs", after ld loaded register 1: a conjunction, which a
// rule is, does what "not in a set" would, without a set to keep in step.
func neqAll(ld *expr.Payload, addrs []netip.Addr) []expr.Any {
	out := []expr.Any{ld}
	for _, a := range addrs {
		out = append(out, neq(a.AsSlice()))
	}
	return out
}

// inPrefix and notInPrefix test register 1 against a prefix, through a masked copy in
// register 2 (register 1 stays for the matches that follow).
func inPrefix(p netip.Prefix) []expr.Any    { return prefixCmp(p, expr.CmpOpEq) }
func notInPrefix(p netip.Prefix) []expr.Any { return prefixCmp(p, expr.CmpOpNeq) }

func prefixCmp(p netip.Prefix, op expr.CmpOp) []expr.Any {
	n := uint32(p.Addr().BitLen() / 8)
	mask := make([]byte, n)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{
		&expr.Bitwise{SourceRegister: 1, DestRegister: 2, Len: n, Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: op, Register: 2, Data: p.Masked().Addr().AsSlice()},
	}
}

func inRange(from, to []byte) *expr.Range {
	return &expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: from, ToData: to}
}

// etherType matches the frame's ethertype as the link layer header has it, where a VLAN tag
// (which the kernel took off into the skb's metadata) shows again as 0x8100.
func etherType(t uint16) []expr.Any {
	return loadCmp(expr.PayloadBaseLLHeader, 12, binaryutil.BigEndian.PutUint16(t))
}

func metaCmp(key expr.MetaKey, data []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}}
}

// nfproto guards an address match: in an inet table, the network header may be either family.
func nfproto(p byte) []expr.Any { return metaCmp(expr.MetaKeyNFPROTO, []byte{p}) }

// l4proto is the transport protocol after any IPv6 extension headers.
func l4proto(p byte) []expr.Any { return metaCmp(expr.MetaKeyL4PROTO, []byte{p}) }

// ctState matches any of the given state bits (host byte order).
func ctState(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// dport matches the transport header's destination port ("th dport"), which sits at the same
// offset in TCP and UDP; it always follows an l4proto match.
func dport(first, last uint16) []expr.Any {
	ld := load(expr.PayloadBaseTransportHeader, 2, 2)
	if first == last {
		return []expr.Any{ld, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(first)}}
	}
	return []expr.Any{ld, &expr.Range{Op: expr.CmpOpEq, Register: 1,
		FromData: binaryutil.BigEndian.PutUint16(first), ToData: binaryutil.BigEndian.PutUint16(last)}}
}

// lookup matches register 1 against a named set. By name only: the set may be one created in
// the same batch, or one that has been there for a while.
func lookup(set string) *expr.Lookup {
	return &expr.Lookup{SourceRegister: 1, SetName: set}
}

// vmap looks register 1 up in a verdict map, and takes the element's verdict.
func vmap(m string) *expr.Lookup {
	return &expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: m}
}

// redirectTo is "redirect to :port": to the primary address of the interface the packet came
// in on (the bridge, for a bridged pod; the host side of the veth, for a routed one).
func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}
