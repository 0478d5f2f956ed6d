package firewall

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// Names of the table and its chains.
const (
	TableName      = "kube_sandbox_egress"
	ChainOutput    = "output"
	ChainDeny      = "deny"
	ChainNATOutput = "nat_output"
)

// rulesetVersion is part of every rule's fingerprint: bump it when the meaning of a rule
// changes without its expressions changing, so that Sync rewrites what an older
// sandbox-egress left.
const rulesetVersion = "ks1"

// maxCommentLen keeps a rule's comment within what nft displays (NFTNL_UDATA_COMMENT_MAXLEN,
// 128 with its NUL); the fingerprint comes first so that it always survives.
const maxCommentLen = 127

// ruleKind says what a rule's counter counts, so that Counters knows which to add up.
type ruleKind int

const (
	kindPlain   ruleKind = iota // no counter
	kindAllowed                 // counter of new connections allowed (matcher rule or default)
	kindDenied                  // the deny chain's counter
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
}

// setSpec is a named set of learned addresses.
type setSpec struct {
	name string
	key  string // the name target key (egressapi.Target.Key)
	v6   bool
}

// ruleset is everything Sync wants in the table.
type ruleset struct {
	// chains in the order they are created (a jump's target before its source).
	chains []chainSpec
	rules  map[string][]ruleSpec
	sets   []setSpec
	// keys maps each name target key to its sets (v4, v6).
	keys map[string][2]string
}

// SetNames are the names of the sets holding the addresses learned for a name target key.
// Names are a hash, not the key itself: keys can be 253 characters long and contain "*",
// neither of which nft's parser likes; the key is in the set's comment. The leading letter
// keeps the name a valid nft identifier.
func SetNames(key string) (v4, v6 string) {
	sum := sha256.Sum256([]byte(key))
	h := "n" + hex.EncodeToString(sum[:6])
	return h + "_4", h + "_6"
}

var (
	policyDrop   = nftables.ChainPolicyDrop
	policyAccept = nftables.ChainPolicyAccept
)

// buildRuleset compiles a matcher into the ruleset. It is pure, so that it can be tested
// without a kernel.
func buildRuleset(m *egressapi.Matcher, mark uint32, dnsPort uint16) (*ruleset, error) {
	if m == nil {
		return nil, fmt.Errorf("no matcher")
	}
	rs := &ruleset{
		chains: []chainSpec{
			{name: ChainDeny},
			{name: ChainOutput, typ: nftables.ChainTypeFilter, hook: nftables.ChainHookOutput, priority: nftables.ChainPriorityFilter, policy: &policyDrop},
			{name: ChainNATOutput, typ: nftables.ChainTypeNAT, hook: nftables.ChainHookOutput, priority: nftables.ChainPriorityNATDest, policy: &policyAccept},
		},
		rules: map[string][]ruleSpec{},
		keys:  map[string][2]string{},
	}
	add := func(chain, desc string, kind ruleKind, exprs ...expr.Any) error {
		r := ruleSpec{desc: desc, kind: kind, exprs: exprs}
		ud, err := ruleUserData(chain, desc, exprs)
		if err != nil {
			return fmt.Errorf("rule %q: %w", desc, err)
		}
		r.userData = ud
		rs.rules[chain] = append(rs.rules[chain], r)
		return nil
	}
	var errs []error
	addOrErr := func(chain, desc string, kind ruleKind, exprs ...expr.Any) {
		if err := add(chain, desc, kind, exprs...); err != nil {
			errs = append(errs, err)
		}
	}

	// deny: count, then fail the connection fast.
	addOrErr(ChainDeny, "deny: count", kindDenied, &expr.Counter{})
	addOrErr(ChainDeny, "deny: tcp reset", kindPlain, join(l4proto(unix.IPPROTO_TCP),
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})...)
	addOrErr(ChainDeny, "deny: icmpx admin-prohibited", kindPlain,
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})

	// output: the fixed prologue.
	addOrErr(ChainOutput, "loopback", kindPlain, join(oifname("lo"), accept())...)
	// The output hook's interface is the route's before nat: a query the nat chain redirected
	// to the DNS proxy still says eth0 here, with loopback as its new destination. Nothing with a
	// loopback destination leaves the pod (the kernel does not route it out), so these are safe.
	addOrErr(ChainOutput, "loopback destination ipv4", kindPlain,
		join(nfproto(unix.NFPROTO_IPV4), daddrPrefix(netip.PrefixFrom(netip.AddrFrom4([4]byte{127}), 8), 16), accept())...)
	addOrErr(ChainOutput, "loopback destination ipv6", kindPlain,
		join(nfproto(unix.NFPROTO_IPV6), daddrPrefix(netip.PrefixFrom(netip.IPv6Loopback(), 128), 24), accept())...)
	addOrErr(ChainOutput, "established,related", kindPlain, join(ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), accept())...)
	for _, p := range []struct {
		name  string
		proto byte
	}{{"tcp", unix.IPPROTO_TCP}, {"udp", unix.IPPROTO_UDP}} {
		addOrErr(ChainOutput, "dns upstream "+p.name+" (marked)", kindPlain,
			join(metaMark(mark), l4proto(p.proto), dport(53, 53), accept())...)
	}
	for _, t := range []struct {
		name string
		typ  byte
	}{{"router-solicit", 133}, {"neighbor-solicit", 135}, {"neighbor-advert", 136}} {
		addOrErr(ChainOutput, "ipv6 nd "+t.name, kindPlain,
			join(nfproto(unix.NFPROTO_IPV6), l4proto(unix.IPPROTO_ICMPV6),
				loadCmp(expr.PayloadBaseNetworkHeader, 7, []byte{255}),     // ip6 hoplimit 255
				loadCmp(expr.PayloadBaseTransportHeader, 0, []byte{t.typ}), // icmpv6 type
				accept())...)
	}

	// output: the matcher's rules, in order.
	for i, r := range m.Rules {
		dsts, err := destinations(r.Target, rs)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i, err))
			continue
		}
		ports, err := portMatches(r.Ports)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i, err))
			continue
		}
		verdict, kind := verdictOf(r.Action)
		for _, d := range dsts {
			for _, p := range ports {
				desc := fmt.Sprintf("rule %d %s %s %s%s", i, r.Action, d.family, targetString(r.Target), p.desc)
				addOrErr(ChainOutput, desc, kind, join(d.exprs, p.exprs, verdict)...)
			}
		}
	}
	verdict, kind := verdictOf(m.Default)
	addOrErr(ChainOutput, "default "+string(m.Default), kind, verdict...)

	// nat_output: send every DNS query but the proxy's own to the proxy.
	addOrErr(ChainNATOutput, "dns: the proxy's own", kindPlain, join(metaMark(mark), []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}})...)
	for _, p := range []struct {
		name  string
		proto byte
	}{{"udp", unix.IPPROTO_UDP}, {"tcp", unix.IPPROTO_TCP}} {
		addOrErr(ChainNATOutput, fmt.Sprintf("dns %s redirect to :%d", p.name, dnsPort), kindPlain,
			join(l4proto(p.proto), dport(53, 53), redirectTo(dnsPort))...)
	}

	if len(errs) > 0 {
		return nil, fmt.Errorf("build ruleset: %w", errors.Join(errs...))
	}
	return rs, nil
}

// destination is one family's match of a rule's target.
type destination struct {
	family string // "ipv4" or "ipv6"
	exprs  []expr.Any
}

// destinations matches a target: a prefix in its own family, a name in both families' sets.
func destinations(t egressapi.Target, rs *ruleset) ([]destination, error) {
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
		v4, v6 := SetNames(key)
		if _, ok := rs.keys[key]; !ok {
			rs.keys[key] = [2]string{v4, v6}
			rs.sets = append(rs.sets, setSpec{name: v4, key: key}, setSpec{name: v6, key: key, v6: true})
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
	addr := p.Addr().AsSlice()
	n := uint32(len(addr))
	switch {
	case p.Bits() == 0:
		return nil
	case p.Bits() == p.Addr().BitLen():
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: n},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
		}
	}
	mask := make([]byte, n)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: n},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
	}
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

func verdictOf(a egressapi.Action) ([]expr.Any, ruleKind) {
	if a == egressapi.ActionAllow {
		return []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictAccept}}, kindAllowed
	}
	// Anything but an explicit Allow denies: the filter fails closed.
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: ChainDeny}}, kindPlain
}

func targetString(t egressapi.Target) string {
	if t.Kind == egressapi.TargetPrefix {
		return t.Prefix.String()
	}
	return t.Key()
}

// ruleUserData is the rule's comment: its fingerprint, then its description (truncated). The
// fingerprint covers the full description and the marshalled expressions, so that any change
// to what a rule does, or where it sits, changes it.
func ruleUserData(chain, desc string, exprs []expr.Any) ([]byte, error) {
	h := sha256.New()
	h.Write([]byte(rulesetVersion + "\x00" + chain + "\x00" + desc + "\x00"))
	for _, e := range exprs {
		b, err := expr.Marshal(byte(nftables.TableFamilyINet), e)
		if err != nil {
			return nil, fmt.Errorf("marshal %T: %w", e, err)
		}
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	comment := hex.EncodeToString(h.Sum(nil)[:8]) + " " + desc
	if len(comment) > maxCommentLen {
		comment = comment[:maxCommentLen]
	}
	return userdata.AppendString(nil, userdata.TypeComment, comment), nil
}

// ruleComment reads a rule's comment back (for tests and error messages).
func ruleComment(ud []byte) string {
	s, _ := userdata.GetString(ud, userdata.TypeComment)
	return s
}

// Expression helpers. Register 1 throughout: every match loads and compares at once.

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

func load(base expr.PayloadBase, offset, n uint32) *expr.Payload {
	return &expr.Payload{DestRegister: 1, Base: base, Offset: offset, Len: n}
}

func loadCmp(base expr.PayloadBase, offset uint32, data []byte) []expr.Any {
	return []expr.Any{load(base, offset, uint32(len(data))), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}}
}

func metaCmp(key expr.MetaKey, data []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}}
}

// nfproto guards an address match: in an inet table, the network header may be either family.
func nfproto(p byte) []expr.Any { return metaCmp(expr.MetaKeyNFPROTO, []byte{p}) }

// l4proto is the transport protocol after any IPv6 extension headers.
func l4proto(p byte) []expr.Any { return metaCmp(expr.MetaKeyL4PROTO, []byte{p}) }

// metaMark matches the packet mark, which nft keeps in host byte order.
func metaMark(mark uint32) []expr.Any {
	return metaCmp(expr.MetaKeyMARK, binaryutil.NativeEndian.PutUint32(mark))
}

// oifname matches an interface name, padded to IFNAMSIZ as nft does for an exact match.
func oifname(name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return metaCmp(expr.MetaKeyOIFNAME, b)
}

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

// redirectTo is "redirect to :port": to the loopback address of the packet's family.
func redirectTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}
}
