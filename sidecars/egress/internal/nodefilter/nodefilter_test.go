package nodefilter

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

func ptr[T any](v T) *T { return &v }

func compile(t *testing.T, def egressapi.Action, rules ...egressapi.Rule) *egressapi.Matcher {
	t.Helper()
	m, err := egressapi.Compile(rules, def)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return m
}

func allow(to string, ports ...egressapi.Port) egressapi.Rule {
	return egressapi.Rule{Action: egressapi.ActionAllow, To: to, Ports: ports}
}

func deny(to string, ports ...egressapi.Port) egressapi.Rule {
	return egressapi.Rule{Action: egressapi.ActionDeny, To: to, Ports: ports}
}

func tcp(p int32) egressapi.Port { return egressapi.Port{Port: p} }
func udp(p int32) egressapi.Port { return egressapi.Port{Port: p, Protocol: egressapi.ProtocolUDP} }
func tcpRange(p, end int32) egressapi.Port {
	return egressapi.Port{Port: p, EndPort: ptr(end), Protocol: egressapi.ProtocolTCP}
}

// everything is a policy with every kind of rule.
func everything(t *testing.T) *egressapi.Matcher {
	return compile(t, egressapi.ActionDeny,
		deny("169.254.169.254"),
		allow("10.0.0.0/8", tcp(443), udp(123), tcpRange(8000, 8080)),
		allow("2001:db8::/32"),
		allow("pypi.org", tcp(443)),
		deny("*.internal.example.com"),
		allow("*.example.com", tcp(80), tcp(443)),
		allow("pypi.org", tcp(80)))
}

// Options of the tests' Filters: the node's addresses are the bridge's, the probe goes to
// the uplink's.
const (
	testDNSPort   = 15353
	testWaitPort  = 44780
	testProbePort = 44781
)

func testOptions(ns netns.NsHandle) Options {
	return Options{
		NetNS:     ns,
		DNSPort:   testDNSPort,
		WaitPort:  testWaitPort,
		NodeAddrs: []netip.Addr{bridgeIP4, bridgeIP6, gwCIP4, gwCIP6},
		ProbeAddr: upIP4,
		ProbePort: testProbePort,
	}
}

func testConfig(t *testing.T) config {
	t.Helper()
	c, err := newConfig(testOptions(0))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// descs are the descriptions of a chain's rules, as their comments carry them.
func descs(rules []ruleSpec) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.desc)
	}
	return out
}

var testPodA = Pod{UID: "0b0c2a0e-5d27-4a8e-9a3c-1d2e3f405060", Iface: "veth1234", IPs: []netip.Addr{
	netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("::ffff:10.0.0.5")}}

// ---- Pure tests: what a Matcher and a Pod compile to. ----

func TestBuildPod(t *testing.T) {
	id := PodID(testPodA.UID)
	meta := "pod uid=0b0c2a0e-5d27-4a8e-9a3c-1d2e3f405060 iface=veth1234 ips=10.0.0.5,fd00::5"
	prologue := []string{
		meta, "established,related", "probe 10.20.0.1:44781",
		"wait 10.10.0.1:44780", "wait 10.10.1.1:44780", "wait [fd00:10::1]:44780", "wait [fd00:11::1]:44780",
		"dns udp", "dns tcp",
		"ipv6 nd router-solicit", "ipv6 nd neighbor-solicit", "ipv6 nd neighbor-advert",
	}
	tests := []struct {
		name   string
		m      *egressapi.Matcher
		policy []string // after the prologue
		sets   []string // keys, in order
	}{
		{
			name:   "deny all",
			m:      compile(t, egressapi.ActionDeny),
			policy: []string{"default Deny"},
		},
		{
			name:   "allow all",
			m:      compile(t, egressapi.ActionAllow),
			policy: []string{"default Allow"},
		},
		{
			name: "prefixes",
			m: compile(t, egressapi.ActionDeny,
				allow("10.0.0.0/8", tcp(443), udp(53), tcpRange(8000, 8080)),
				deny("2001:db8::1"),
				allow("0.0.0.0/0", tcp(80))),
			policy: []string{
				"rule 0 Allow ipv4 10.0.0.0/8 tcp/443",
				"rule 0 Allow ipv4 10.0.0.0/8 udp/53",
				"rule 0 Allow ipv4 10.0.0.0/8 tcp/8000-8080",
				"rule 1 Deny ipv6 2001:db8::1/128",
				"rule 2 Allow ipv4 0.0.0.0/0 tcp/80",
				"default Deny",
			},
		},
		{
			name: "names share sets by key",
			m: compile(t, egressapi.ActionAllow,
				deny("pypi.org", tcp(22)),
				allow("*.pythonhosted.org"),
				allow("PyPI.org.", tcp(443))),
			policy: []string{
				"rule 0 Deny ipv4 pypi.org tcp/22",
				"rule 0 Deny ipv6 pypi.org tcp/22",
				"rule 1 Allow ipv4 *.pythonhosted.org",
				"rule 1 Allow ipv6 *.pythonhosted.org",
				"rule 2 Allow ipv4 pypi.org tcp/443",
				"rule 2 Allow ipv6 pypi.org tcp/443",
				"default Allow",
			},
			sets: []string{"pypi.org", "*.pythonhosted.org"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := buildPod(testPodA, tt.m, testConfig(t))
			if err != nil {
				t.Fatal(err)
			}
			if rs.id != id || rs.ingress.name != "p_"+id || rs.ingress.device != "veth1234" {
				t.Errorf("id %s, ingress chain %s on %s", rs.id, rs.ingress.name, rs.ingress.device)
			}
			if diff := cmp.Diff(append(slices.Clone(prologue), tt.policy...), descs(rs.rules["p_"+id])); diff != "" {
				t.Errorf("policy chain (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"deny: count", "deny: tcp reset", "deny: icmpx admin-prohibited"}, descs(rs.rules["p_"+id+"_deny"])); diff != "" {
				t.Errorf("deny chain (-want +got):\n%s", diff)
			}
			var keys []string
			for i, s := range rs.sets {
				if i%2 == 0 {
					keys = append(keys, s.key)
				}
				v4, v6 := SetNames(id, s.key)
				if want := map[bool]string{false: v4, true: v6}[s.v6]; s.name != want || !s.learns {
					t.Errorf("set %d is %s (timeouts %v), want %s with timeouts", i, s.name, s.learns, want)
				}
				if sid, ok := idOfPodSet(s.name); !ok || sid != id {
					t.Errorf("set %s is not recognized as the pod's", s.name)
				}
			}
			if diff := cmp.Diff(tt.sets, keys); diff != "" {
				t.Errorf("set keys (-want +got):\n%s", diff)
			}
			for _, r := range rs.rules["p_"+id] {
				wantKind := kindPlain
				switch {
				case strings.Contains(r.desc, " Allow"):
					wantKind = kindAllowed
				case strings.HasPrefix(r.desc, "probe "):
					wantKind = kindProbe
				case strings.HasPrefix(r.desc, "pod "):
					wantKind = kindMeta
				}
				if r.kind != wantKind {
					t.Errorf("rule %q kind %d, want %d", r.desc, r.kind, wantKind)
				}
			}
			seen := map[string]string{}
			for chain, rules := range rs.rules {
				for _, r := range rules {
					c := ruleComment(r.userData)
					fp, desc, _ := strings.Cut(c, " ")
					limit := maxCommentLen
					if r.kind == kindMeta {
						limit = maxMetaCommentLen
						if desc != r.desc {
							t.Errorf("meta rule's comment %q is cut", c)
						}
					}
					if len(c) > limit || len(fp) != 16 || !strings.HasPrefix(r.desc, desc) {
						t.Errorf("comment %q of rule %q", c, r.desc)
					}
					if other, dup := seen[fp]; dup {
						t.Errorf("rules %q and %q share fingerprint %s", other, r.desc, fp)
					}
					seen[fp] = chain + "/" + r.desc
				}
			}
		})
	}
}

func TestBuildIngress(t *testing.T) {
	nd := func(srcs ...string) []string {
		return append(srcs, "ipv6 link-local source nd", "ipv6 link-local source mldv2",
			"ipv6 unspecified source nd", "ipv6 unspecified source mldv2", "ipv4", "arp", "spoofed: anything else")
	}
	head := []string{"spoofed: arp sender", "spoofed: ipv4 source", "spoofed: ipv6 nd target", "spoofed: ipv6 router advert or redirect"}
	for _, tt := range []struct {
		name string
		ips  []string
		want []string
	}{
		{"ipv4 only", []string{"10.0.0.5"}, nd()},
		{"dual stack", []string{"10.0.0.5", "fd00::5", "fd00::6"}, nd("ipv6 source fd00::5", "ipv6 source fd00::6")},
		{"ipv6 only", []string{"fd00::5"}, nd("ipv6 source fd00::5")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := Pod{UID: "u", Iface: "eth9"}
			for _, s := range tt.ips {
				p.IPs = append(p.IPs, netip.MustParseAddr(s))
			}
			rs, err := buildPod(p, compile(t, egressapi.ActionDeny), testConfig(t))
			if err != nil {
				t.Fatal(err)
			}
			rules := rs.rules[ingressKey]
			if rules[0].kind != kindMeta {
				t.Errorf("first rule %q is not the meta rule", rules[0].desc)
			}
			if diff := cmp.Diff(append(slices.Clone(head), tt.want...), descs(rules[1:])); diff != "" {
				t.Errorf("ingress chain (-want +got):\n%s", diff)
			}
			if *rs.ingress.policy != nftables.ChainPolicyDrop || *rs.ingress.hook != *nftables.ChainHookIngress || *rs.ingress.priority != -500 {
				t.Errorf("ingress chain %+v", rs.ingress)
			}
			// Every drop counts as spoofed, and nothing else does.
			for _, r := range rules {
				drops := false
				for _, e := range r.exprs {
					if v, ok := e.(*expr.Verdict); ok && v.Kind == expr.VerdictDrop {
						drops = true
					}
				}
				if drops != (r.kind == kindSpoofed) {
					t.Errorf("rule %q: drops %v, kind %d", r.desc, drops, r.kind)
				}
			}
		})
	}
	// The address checks, exactly: the ARP sender and the IPv4 source differ from each of the
	// pod's addresses.
	rs, err := buildPod(Pod{UID: "u", Iface: "eth9", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")}},
		compile(t, egressapi.ActionDeny), testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 12, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x08, 0x00}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{10, 0, 0, 5}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{10, 0, 0, 6}},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
	if diff := cmp.Diff(want, rs.rules[ingressKey][2].exprs); diff != "" {
		t.Errorf("ipv4 source check (-want +got):\n%s", diff)
	}
}

func TestBuildGlobal(t *testing.T) {
	g, err := buildGlobal(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ipv4 pods", "ipv6 pods"}, descs(g.rules[ChainPrerouting])); diff != "" {
		t.Errorf("prerouting (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{
		"ipv4 dns udp redirect to :15353", "ipv4 dns tcp redirect to :15353",
		"ipv6 dns udp redirect to :15353", "ipv6 dns tcp redirect to :15353",
	}, descs(g.rules[ChainNATPrerouting])); diff != "" {
		t.Errorf("nat prerouting (-want +got):\n%s", diff)
	}
	pre := g.rules[ChainPrerouting][0].exprs
	if l, ok := pre[len(pre)-1].(*expr.Lookup); !ok || !l.IsDestRegSet || l.DestRegister != 0 || l.SetName != MapPods4 {
		t.Errorf("prerouting's ipv4 rule ends in %#v, want a verdict map lookup in %s", pre[len(pre)-1], MapPods4)
	}
	if *g.chains[0].priority != -150 || *g.chains[1].priority != -105 || g.chains[1].typ != nftables.ChainTypeNAT {
		t.Errorf("chains %+v", g.chains)
	}
}

func TestBuildRejects(t *testing.T) {
	cfg := testConfig(t)
	name := egressapi.Target{Kind: egressapi.TargetName, Name: "a.example"}
	ok := Pod{UID: "u", Iface: "eth0", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	for _, tt := range []struct {
		name string
		pod  Pod
		m    *egressapi.Matcher
	}{
		{"nil matcher", ok, nil},
		{"bad port", ok, &egressapi.Matcher{Rules: []egressapi.CompiledRule{{Action: egressapi.ActionAllow, Target: name, Ports: []egressapi.Port{{Port: 0}}}}}},
		{"bad range", ok, &egressapi.Matcher{Rules: []egressapi.CompiledRule{{Action: egressapi.ActionAllow, Target: name, Ports: []egressapi.Port{{Port: 80, EndPort: ptr[int32](70)}}}}}},
		{"bad protocol", ok, &egressapi.Matcher{Rules: []egressapi.CompiledRule{{Action: egressapi.ActionAllow, Target: name, Ports: []egressapi.Port{{Port: 80, Protocol: "SCTP"}}}}}},
		{"bad target", ok, &egressapi.Matcher{Rules: []egressapi.CompiledRule{{Action: egressapi.ActionAllow}}}},
		{"no uid", Pod{Iface: "eth0", IPs: ok.IPs}, &egressapi.Matcher{}},
		{"uid with a space", Pod{UID: "a b", Iface: "eth0", IPs: ok.IPs}, &egressapi.Matcher{}},
		{"no iface", Pod{UID: "u", IPs: ok.IPs}, &egressapi.Matcher{}},
		{"long iface", Pod{UID: "u", Iface: "0123456789abcdef", IPs: ok.IPs}, &egressapi.Matcher{}},
		{"no addresses", Pod{UID: "u", Iface: "eth0"}, &egressapi.Matcher{}},
		{"link-local address", Pod{UID: "u", Iface: "eth0", IPs: []netip.Addr{netip.MustParseAddr("fe80::1")}}, &egressapi.Matcher{}},
		{"too many addresses", Pod{UID: "u", Iface: "eth0", IPs: func() (out []netip.Addr) {
			for i := range 8 {
				out = append(out, netip.AddrFrom16([16]byte{0xfd, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, byte(i)}))
			}
			return out
		}()}, &egressapi.Matcher{}},
	} {
		if _, err := buildPod(tt.pod, tt.m, cfg); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for name, o := range map[string]Options{
		"no dns port":         {},
		"bad dns port":        {DNSPort: 70000},
		"wait without addrs":  {DNSPort: 53, WaitPort: 80},
		"probe without port":  {DNSPort: 53, ProbeAddr: netip.MustParseAddr("10.0.0.1")},
		"probe without addr":  {DNSPort: 53, ProbePort: 80},
		"invalid node addr":   {DNSPort: 53, WaitPort: 80, NodeAddrs: []netip.Addr{{}}},
		"unspecified address": {DNSPort: 53, WaitPort: 80, NodeAddrs: []netip.Addr{netip.IPv4Unspecified()}},
	} {
		if f, err := New(o); err == nil {
			f.Close()
			t.Errorf("%s: no error", name)
		}
	}
}

func TestFingerprints(t *testing.T) {
	cfg := testConfig(t)
	fp := func(p Pod, m *egressapi.Matcher, c config) []string {
		t.Helper()
		rs, err := buildPod(p, m, c)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, chain := range []string{ingressKey, "p_" + rs.id, "p_" + rs.id + "_deny"} {
			for _, r := range rs.rules[chain] {
				out = append(out, ruleComment(r.userData))
			}
		}
		return out
	}
	base := compile(t, egressapi.ActionDeny, allow("10.0.0.0/8", tcp(443)), allow("pypi.org"))
	same := compile(t, egressapi.ActionDeny, allow("10.1.2.3/8", tcp(443)), allow("PYPI.ORG."))
	reordered := testPodA
	reordered.IPs = []netip.Addr{testPodA.IPs[1], testPodA.IPs[0]}
	if diff := cmp.Diff(fp(testPodA, base, cfg), fp(reordered, same, cfg)); diff != "" {
		t.Errorf("equivalent policies differ:\n%s", diff)
	}
	other := func(f func(*config)) config { c := cfg; f(&c); return c }
	otherPod := func(f func(*Pod)) Pod { p := testPodA; p.IPs = slices.Clone(p.IPs); f(&p); return p }
	for name, got := range map[string][]string{
		"port":       fp(testPodA, compile(t, egressapi.ActionDeny, allow("10.0.0.0/8", tcp(444)), allow("pypi.org")), cfg),
		"name":       fp(testPodA, compile(t, egressapi.ActionDeny, allow("10.0.0.0/8", tcp(443)), allow("*.pypi.org")), cfg),
		"default":    fp(testPodA, compile(t, egressapi.ActionAllow, allow("10.0.0.0/8", tcp(443)), allow("pypi.org")), cfg),
		"wait port":  fp(testPodA, base, other(func(c *config) { c.waitPort++ })),
		"probe port": fp(testPodA, base, other(func(c *config) { c.probePort++ })),
		"iface":      fp(otherPod(func(p *Pod) { p.Iface = "veth9" }), base, cfg),
		"address":    fp(otherPod(func(p *Pod) { p.IPs[0] = netip.MustParseAddr("10.0.0.6") }), base, cfg),
	} {
		if cmp.Equal(fp(testPodA, base, cfg), got) {
			t.Errorf("a different %s gives the same rules", name)
		}
	}
}

func TestNames(t *testing.T) {
	id := PodID("some-uid")
	if len(id) != 12 || !isHexID(id) || PodID("some-uid") != id || PodID("other-uid") == id {
		t.Fatalf("PodID %q", id)
	}
	v4, v6 := SetNames(id, "pypi.org")
	for _, tt := range []struct {
		name        string
		chainID     string
		deny, chain bool
		setID       string
	}{
		{"p_" + id, id, false, true, ""},
		{"p_" + id + "_deny", id, true, true, ""},
		{v4, "", false, false, id},
		{v6, "", false, false, id},
		{"prerouting", "", false, false, ""},
		{"p_" + id + "x", "", false, false, ""},
		{"p_XYZ", "", false, false, ""},
	} {
		gotID, deny, ok := idOfPodChain(tt.name)
		if ok != tt.chain || gotID != tt.chainID || deny != tt.deny {
			t.Errorf("idOfPodChain(%q) = %q, %v, %v", tt.name, gotID, deny, ok)
		}
		sid, ok := idOfPodSet(tt.name)
		if ok != (tt.setID != "") || sid != tt.setID {
			t.Errorf("idOfPodSet(%q) = %q, %v", tt.name, sid, ok)
		}
	}
	p, err := normalizePod(testPodA)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := parseMeta("0123456789abcdef " + metaDesc(p))
	if !ok {
		t.Fatal("meta comment not parsed")
	}
	if diff := cmp.Diff(p, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("meta round trip (-want +got):\n%s", diff)
	}
}

func TestOutboundFlow(t *testing.T) {
	pod := []netip.Addr{netip.MustParseAddr("10.10.0.2"), netip.MustParseAddr("fd00:10::2")}
	node := []netip.Addr{netip.MustParseAddr("10.10.0.1")}
	flow := func(proto uint8, src, dst string, dport uint16) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst), SrcPort: 40000, DstPort: dport},
			Reverse: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(dst), DstIP: net.ParseIP(src), SrcPort: dport, DstPort: 40000},
		}
	}
	m := compile(t, egressapi.ActionDeny, allow("198.51.100.0/24", tcp(443)), allow("pypi.org"))
	learned := func(key string, a netip.Addr) bool {
		return key == "pypi.org" && a == netip.MustParseAddr("2001:db8:1::9")
	}
	ff := &flowFilter{pod: pod, node: node, waitPort: 44780, m: m, learned: learned}
	tests := []struct {
		name string
		flow *netlink.ConntrackFlow
		want *egressapi.Flow
		cut  bool
	}{
		{"outbound tcp, allowed", flow(6, "10.10.0.2", "198.51.100.7", 443),
			&egressapi.Flow{Addr: netip.MustParseAddr("198.51.100.7"), Protocol: egressapi.ProtocolTCP, Port: 443}, false},
		{"outbound tcp, denied", flow(6, "10.10.0.2", "198.51.100.7", 80),
			&egressapi.Flow{Addr: netip.MustParseAddr("198.51.100.7"), Protocol: egressapi.ProtocolTCP, Port: 80}, true},
		{"outbound udp v6, learned", flow(17, "fd00:10::2", "2001:db8:1::9", 4000),
			&egressapi.Flow{Addr: netip.MustParseAddr("2001:db8:1::9"), Protocol: egressapi.ProtocolUDP, Port: 4000}, false},
		{"outbound udp v6, not learned", flow(17, "fd00:10::2", "2001:db8:1::8", 4000),
			&egressapi.Flow{Addr: netip.MustParseAddr("2001:db8:1::8"), Protocol: egressapi.ProtocolUDP, Port: 4000}, true},
		{"outbound icmp", flow(1, "10.10.0.2", "198.51.100.7", 0), &egressapi.Flow{Addr: netip.MustParseAddr("198.51.100.7")}, true},
		{"inbound (kubelet probe)", flow(6, "10.10.0.1", "10.10.0.2", 8080), nil, false},
		{"another pod's", flow(6, "10.10.0.3", "198.51.100.7", 80), nil, false},
		{"dns", flow(17, "10.10.0.2", "8.8.8.8", 53), nil, false},
		{"tcp dns", flow(6, "fd00:10::2", "2001:4860:4860::8888", 53), nil, false},
		{"the wait endpoint", flow(6, "10.10.0.2", "10.10.0.1", 44780), nil, false},
		{"the wait port elsewhere", flow(6, "10.10.0.2", "10.10.0.9", 44780),
			&egressapi.Flow{Addr: netip.MustParseAddr("10.10.0.9"), Protocol: egressapi.ProtocolTCP, Port: 44780}, true},
	}
	for _, tt := range tests {
		got, ok := ff.outbound(tt.flow)
		switch {
		case tt.want == nil && ok:
			t.Errorf("%s: outbound %+v, want not", tt.name, got)
		case tt.want != nil && !ok:
			t.Errorf("%s: not outbound", tt.name)
		case tt.want != nil && got != *tt.want:
			t.Errorf("%s: %+v, want %+v", tt.name, got, *tt.want)
		}
		if cut := ff.MatchConntrackFlow(tt.flow); cut != tt.cut {
			t.Errorf("%s: cut %v, want %v", tt.name, cut, tt.cut)
		}
	}
}

// TestLearnedExpiry checks the mirror's expiry with a fake clock (no kernel needed).
func TestLearnedExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	f := &Filter{now: func() time.Time { return now }, learned: map[string]map[string]map[netip.Addr]time.Time{
		"uid": {"pypi.org": {netip.MustParseAddr("192.0.2.9"): now.Add(30 * time.Second)}},
	}}
	if !f.Learned("uid", "pypi.org", netip.MustParseAddr("192.0.2.9")) {
		t.Error("not learned")
	}
	if !f.Learned("uid", "pypi.org", netip.MustParseAddr("::ffff:192.0.2.9")) {
		t.Error("the mapped form is not learned")
	}
	if f.Learned("other", "pypi.org", netip.MustParseAddr("192.0.2.9")) || f.Learned("uid", "*.pypi.org", netip.MustParseAddr("192.0.2.9")) ||
		f.Learned("uid", "pypi.org", netip.MustParseAddr("192.0.2.8")) {
		t.Error("learned for another pod, key or address")
	}
	now = now.Add(30 * time.Second)
	if f.Learned("uid", "pypi.org", netip.MustParseAddr("192.0.2.9")) {
		t.Error("learned after its expiry")
	}
}

// ---- Tests in fresh network namespaces (root). ----

func newFilter(t *testing.T, ns netns.NsHandle) *Filter {
	t.Helper()
	f, err := New(testOptions(ns))
	if err != nil {
		t.Fatalf("new filter: %v", err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func nftConn(t *testing.T, ns netns.NsHandle) *nftables.Conn {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatalf("nftables: %v", err)
	}
	return c
}

var (
	inetTable   = &nftables.Table{Name: EgressTable, Family: nftables.TableFamilyINet}
	netdevTable = &nftables.Table{Name: IngressTable, Family: nftables.TableFamilyNetdev}
)

// dumper lists the tables as text: chains (with their devices), rules (with their handles if
// asked) with counters zeroed, sets and their elements' keys (and verdicts).
type dumper struct {
	t       *testing.T
	c       *nftables.Conn
	f       *Filter // for the netdev chains' devices
	handles bool
}

func (d dumper) dump() string {
	t := d.t
	t.Helper()
	var b strings.Builder
	for _, tb := range []*nftables.Table{netdevTable, inetTable} {
		have, err := d.f.findTable(tb)
		if err != nil {
			t.Fatalf("list tables: %v", err)
		}
		if have == nil {
			fmt.Fprintf(&b, "no table %s\n", tb.Name)
			continue
		}
		fmt.Fprintf(&b, "table %s flags=%d\n", tb.Name, have.Flags)
		chains, err := d.c.ListChainsOfTableFamily(tb.Family)
		if err != nil {
			t.Fatalf("list chains: %v", err)
		}
		devices := map[string][]string{}
		if tb.Family == nftables.TableFamilyNetdev {
			raw, err := d.f.netdevChains()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range raw {
				devices[c.name] = c.devices
			}
		}
		sort.Slice(chains, func(i, j int) bool { return chains[i].Name < chains[j].Name })
		for _, ch := range chains {
			if ch.Table.Name != tb.Name {
				continue
			}
			fmt.Fprintf(&b, "chain %s type=%q", ch.Name, ch.Type)
			if ch.Hooknum != nil {
				fmt.Fprintf(&b, " hook=%d prio=%d", *ch.Hooknum, *ch.Priority)
			}
			if ch.Policy != nil {
				fmt.Fprintf(&b, " policy=%d", *ch.Policy)
			}
			if devs := devices[ch.Name]; devs != nil {
				fmt.Fprintf(&b, " devices=%v", devs)
			}
			b.WriteString("\n")
			rules, err := d.c.GetRules(tb, ch)
			if err != nil {
				t.Fatalf("list rules: %v", err)
			}
			for _, r := range rules {
				b.WriteString("  ")
				if d.handles {
					fmt.Fprintf(&b, "[%d] ", r.Handle)
				}
				fmt.Fprintf(&b, "%q", ruleComment(r.UserData))
				for _, e := range r.Exprs {
					if _, ok := e.(*expr.Counter); ok {
						b.WriteString(" counter")
						continue
					}
					fmt.Fprintf(&b, " %#v", e)
				}
				b.WriteString("\n")
			}
		}
		if tb.Family != nftables.TableFamilyINet {
			continue
		}
		sets, err := d.c.GetSets(tb)
		if err != nil {
			t.Fatalf("list sets: %v", err)
		}
		sort.Slice(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
		for _, s := range sets {
			fmt.Fprintf(&b, "set %s map=%v timeout=%v:", s.Name, s.IsMap, s.HasTimeout)
			elems, err := d.c.GetSetElements(s)
			if err != nil {
				t.Fatalf("list elements: %v", err)
			}
			var keys []string
			for _, e := range elems {
				a, _ := netip.AddrFromSlice(e.Key)
				k := a.String()
				if s.IsMap {
					k += "->" + vmapChain(e)
				}
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprintf(&b, " %v\n", keys)
		}
	}
	return b.String()
}

// of keeps the lines of a dump that mention one of the strings (a pod's ID, say).
func of(dump string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

func mustSync(t *testing.T, f *Filter, p Pod, m *egressapi.Matcher, wantChanged bool) {
	t.Helper()
	changed, err := f.Sync(p, m)
	if err != nil {
		t.Fatalf("sync %s: %v", p.UID, err)
	}
	if changed != wantChanged {
		t.Fatalf("sync %s changed=%v, want %v", p.UID, changed, wantChanged)
	}
}

func TestCheckKernel(t *testing.T) {
	requireRoot(t)
	ns := newNS(t)
	f := newFilter(t, ns)
	if err := f.CheckKernel(); err != nil {
		t.Fatalf("CheckKernel: %v", err)
	}
	tables, err := nftConn(t, ns).ListTablesOfFamily(nftables.TableFamilyUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 0 {
		t.Errorf("CheckKernel left %d tables, first %q", len(tables), tables[0].Name)
	}
	// Twice: nothing left behind gets in the way.
	if err := f.CheckKernel(); err != nil {
		t.Fatalf("CheckKernel again: %v", err)
	}
}

func TestSyncIdempotent(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	d := dumper{t: t, c: nftConn(t, tp.node), f: f, handles: true}
	m := everything(t)

	mustSync(t, f, tp.a.Pod, m, true)
	mustSync(t, f, tp.c.Pod, compile(t, egressapi.ActionAllow), true)
	first := d.dump()
	if n := strings.Count(first, "\n  "); n < 50 {
		t.Fatalf("only %d rules:\n%s", n, first)
	}
	mustSync(t, f, tp.a.Pod, m, false)
	mustSync(t, f, tp.c.Pod, compile(t, egressapi.ActionAllow), false)
	if diff := cmp.Diff(first, d.dump()); diff != "" {
		t.Errorf("a second Sync changed the tables (-first +second):\n%s", diff)
	}
	// A matcher compiled anew from the same rules, and the pod with its addresses in another
	// order, are the same.
	reordered := tp.a.Pod
	reordered.IPs = []netip.Addr{podAIP6, podAIP4, podAIP4}
	mustSync(t, f, reordered, everything(t), false)
	for _, want := range []string{"table kube_sandbox_ingress flags=0", "table kube_sandbox_egress flags=0",
		"devices=[veth-a]", "devices=[veth-c]", "10.10.0.2->p_" + PodID(tp.a.UID), "fd00:11::2->p_" + PodID(tp.c.UID)} {
		if !strings.Contains(first, want) {
			t.Errorf("the tables lack %q:\n%s", want, first)
		}
	}

	// Another policy changes the pod's chain, and nothing of the other pod; going back
	// restores the first tables, handles aside.
	idA, idC := PodID(tp.a.UID), PodID(tp.c.UID)
	mustSync(t, f, tp.a.Pod, compile(t, egressapi.ActionAllow), true)
	second := d.dump()
	if strings.Contains(of(second, "set p_"+idA), "set ") {
		t.Error("sets of keys no rule has are left")
	}
	if diff := cmp.Diff(of(first, idC), of(second, idC)); diff != "" {
		t.Errorf("syncing pod a changed pod c's rules (-before +after):\n%s", diff)
	}
	mustSync(t, f, tp.a.Pod, m, true)
	d.handles = false
	if diff := cmp.Diff(stripHandles(first), d.dump()); diff != "" {
		t.Errorf("back to the first policy (-want +got):\n%s", diff)
	}
}

func stripHandles(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "  [") {
			l = "  " + l[strings.Index(l, "] ")+2:]
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func TestSyncRepairs(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	c := nftConn(t, tp.node)
	d := dumper{t: t, c: c, f: f}
	m := everything(t)
	mustSync(t, f, tp.a.Pod, m, true)
	mustSync(t, f, tp.b.Pod, m, true)
	idA := PodID(tp.a.UID)
	v4, v6 := SetNames(idA, "pypi.org")
	if err := f.Learn(tp.a.UID, "pypi.org", []netip.Addr{netip.MustParseAddr("192.0.2.80"), netip.MustParseAddr("2001:db8:80::1")}, time.Hour); err != nil {
		t.Fatalf("learn: %v", err)
	}
	want := d.dump()
	if !strings.Contains(want, "set "+v4+" map=false timeout=true: [192.0.2.80]") || !strings.Contains(want, "set "+v6+" map=false timeout=true: [2001:db8:80::1]") {
		t.Fatalf("learned addresses are not in the sets:\n%s", want)
	}
	policy := &nftables.Chain{Name: podChain(idA), Table: inetTable}
	ingress := &nftables.Chain{Name: podChain(idA), Table: netdevTable}
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}

	tamper := []struct {
		name string
		do   func() error
		// both: b's filter went too, and is synced again after a's.
		both bool
	}{
		{name: "delete a rule, add a foreign one", do: func() error {
			rules, err := c.GetRules(inetTable, policy)
			if err != nil {
				return err
			}
			if err := c.DelRule(rules[len(rules)/2]); err != nil {
				return err
			}
			c.AddRule(&nftables.Rule{Table: inetTable, Chain: policy, Exprs: accept})
			return c.Flush()
		}},
		{name: "insert a foreign rule first", do: func() error {
			c.InsertRule(&nftables.Rule{Table: inetTable, Chain: policy, Exprs: accept})
			return c.Flush()
		}},
		{name: "delete an anti-spoofing rule", do: func() error {
			rules, err := c.GetRules(netdevTable, ingress)
			if err != nil {
				return err
			}
			if err := c.DelRule(rules[2]); err != nil {
				return err
			}
			return c.Flush()
		}},
		{name: "delete the anti-spoofing chain", do: func() error {
			c.DelChain(ingress)
			return c.Flush()
		}},
		{name: "move the anti-spoofing chain to another device, accepting", do: func() error {
			c.DelChain(ingress)
			c.AddChain(&nftables.Chain{Name: ingress.Name, Table: netdevTable, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookIngress, Priority: nftables.ChainPriorityRef(-500), Policy: &policyAccept, Device: "veth-c"})
			return c.Flush()
		}},
		{name: "flush the deny chain", do: func() error {
			c.FlushChain(&nftables.Chain{Name: denyChain(idA), Table: inetTable})
			return c.Flush()
		}},
		{name: "delete the policy chain and its map elements", do: func() error {
			if err := c.SetDeleteElements(&nftables.Set{Name: MapPods4, Table: inetTable, IsMap: true, KeyType: nftables.TypeIPAddr},
				[]nftables.SetElement{{Key: podAIP4.AsSlice()}}); err != nil {
				return err
			}
			if err := c.SetDeleteElements(&nftables.Set{Name: MapPods6, Table: inetTable, IsMap: true, KeyType: nftables.TypeIP6Addr},
				[]nftables.SetElement{{Key: podAIP6.AsSlice()}}); err != nil {
				return err
			}
			c.FlushChain(policy)
			c.DelChain(policy)
			return c.Flush()
		}},
		{name: "delete a dns element", do: func() error {
			if err := c.SetDeleteElements(&nftables.Set{Name: SetDNS4, Table: inetTable, KeyType: nftables.TypeIPAddr},
				[]nftables.SetElement{{Key: podAIP4.AsSlice()}}); err != nil {
				return err
			}
			return c.Flush()
		}},
		{name: "delete a learned set", do: func() error {
			c.FlushChain(policy) // the set is in use otherwise
			c.DelSet(&nftables.Set{Table: inetTable, Name: v6})
			return c.Flush()
		}},
		{name: "replace the dns set with a map", do: func() error {
			c.FlushChain(&nftables.Chain{Name: ChainNATPrerouting, Table: inetTable})
			c.DelSet(&nftables.Set{Table: inetTable, Name: SetDNS4})
			if err := c.AddSet(&nftables.Set{Table: inetTable, Name: SetDNS4, KeyType: nftables.TypeIPAddr, IsMap: true, DataType: nftables.TypeVerdict}, nil); err != nil {
				return err
			}
			return c.Flush()
		}},
		{name: "delete the pods map (both pods' elements go)", do: func() error {
			c.FlushChain(&nftables.Chain{Name: ChainPrerouting, Table: inetTable})
			c.DelSet(&nftables.Set{Table: inetTable, Name: MapPods6})
			return c.Flush()
		}},
		{name: "change the prerouting chain's policy", do: func() error {
			c.AddChain(&nftables.Chain{Name: ChainPrerouting, Table: inetTable, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(-150), Policy: &policyDrop})
			return c.Flush()
		}},
		{name: "make the nat chain a filter chain", do: func() error {
			nat := &nftables.Chain{Name: ChainNATPrerouting, Table: inetTable}
			c.FlushChain(nat)
			c.DelChain(nat)
			c.AddChain(&nftables.Chain{Name: ChainNATPrerouting, Table: inetTable, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &policyAccept})
			return c.Flush()
		}},
		{name: "add foreign chains and a foreign set", do: func() error {
			foreign := c.AddChain(&nftables.Chain{Name: "foreign", Table: inetTable, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(-160), Policy: &policyAccept})
			c.AddRule(&nftables.Rule{Table: inetTable, Chain: foreign, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: denyChain(idA)}}})
			c.AddChain(&nftables.Chain{Name: "foreign", Table: netdevTable})
			if err := c.AddSet(&nftables.Set{Table: inetTable, Name: "foreign", KeyType: nftables.TypeIPAddr}, nil); err != nil {
				return err
			}
			return c.Flush()
		}},
		{name: "delete the tables", both: true, do: func() error {
			c.DelTable(inetTable)
			c.DelTable(netdevTable)
			return c.Flush()
		}},
	}
	for _, tt := range tamper {
		if err := tt.do(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if d.dump() == want {
			t.Fatalf("%s: changed nothing", tt.name)
		}
		mustSync(t, f, tp.a.Pod, m, true)
		if tt.both {
			mustSync(t, f, tp.b.Pod, m, true)
		}
		if diff := cmp.Diff(want, d.dump()); diff != "" {
			t.Errorf("%s: Sync did not restore the tables (-want +got):\n%s", tt.name, diff)
		}
		mustSync(t, f, tp.a.Pod, m, false)
		mustSync(t, f, tp.b.Pod, m, false)
	}
}

// TestTwoPods: pods do not disturb each other, an address another pod had is taken over, and
// Remove takes everything of a pod, and nothing else.
func TestTwoPods(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	d := dumper{t: t, c: nftConn(t, tp.node), f: f, handles: true}
	idA, idB := PodID(tp.a.UID), PodID(tp.b.UID)
	mustSync(t, f, tp.b.Pod, everything(t), true)
	onlyB := d.dump()
	mustSync(t, f, tp.a.Pod, everything(t), true)
	if err := f.Learn(tp.a.UID, "pypi.org", []netip.Addr{netip.MustParseAddr("192.0.2.80")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := f.Learn(tp.b.UID, "pypi.org", []netip.Addr{netip.MustParseAddr("192.0.2.81")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if f.Learned(tp.a.UID, "pypi.org", netip.MustParseAddr("192.0.2.81")) || !f.Learned(tp.b.UID, "pypi.org", netip.MustParseAddr("192.0.2.81")) {
		t.Error("learned addresses leak between pods")
	}
	before := d.dump()
	mustSync(t, f, tp.a.Pod, compile(t, egressapi.ActionDeny, allow("pypi.org")), true)
	after := d.dump()
	if diff := cmp.Diff(of(before, idB), of(after, idB)); diff != "" {
		t.Errorf("a's new policy changed b's filter (-before +after):\n%s", diff)
	}

	// a takes over one of b's addresses (b is gone, its deletion not yet seen).
	a2 := tp.a.Pod
	a2.IPs = []netip.Addr{podAIP4, podAIP6, podBIP6}
	mustSync(t, f, a2, everything(t), true)
	got := d.dump()
	if !strings.Contains(got, podBIP6.String()+"->p_"+idA) {
		t.Errorf("a did not take over %s:\n%s", podBIP6, of(got, "set pods"))
	}
	if err := f.Remove(tp.b.UID); err != nil {
		t.Fatal(err)
	}
	got = d.dump()
	if strings.Contains(got, idB) {
		t.Errorf("Remove left some of b:\n%s", of(got, idB))
	}
	if !strings.Contains(got, podBIP6.String()+"->p_"+idA) || !strings.Contains(of(got, "set dns6"), podBIP6.String()) {
		t.Errorf("removing b took the address a took over:\n%s", of(got, "set "))
	}
	if err := f.Remove(tp.b.UID); err != nil {
		t.Errorf("Remove again: %v", err)
	}
	if _, err := f.Counters(tp.b.UID); !errors.Is(err, ErrUnknownPod) {
		t.Errorf("counters of a removed pod: %v", err)
	}
	// a gives the address up again: its elements go.
	mustSync(t, f, tp.a.Pod, everything(t), true)
	if got := of(d.dump(), "set pods6", "set dns6"); strings.Contains(got, podBIP6.String()) {
		t.Errorf("a gave %s up, and the elements stay:\n%s", podBIP6, got)
	}

	// Without a, only what b had alone is left (but for b's address that a took, and b's own
	// rules, which went too): b again, then no a, is the first state.
	if err := f.Remove(tp.a.UID); err != nil {
		t.Fatal(err)
	}
	mustSync(t, f, tp.b.Pod, everything(t), true)
	if diff := cmp.Diff(stripHandles(onlyB), stripHandles(d.dump())); diff != "" {
		t.Errorf("b alone again (-want +got):\n%s", diff)
	}
	if err := f.Remove(tp.b.UID); err != nil {
		t.Fatal(err)
	}
	// What is left is what every pod shares, empty.
	for _, l := range strings.Split(d.dump(), "\n") {
		if strings.Contains(l, "p_") || (strings.HasPrefix(l, "set ") && !strings.HasSuffix(l, " []")) {
			t.Errorf("left after removing every pod: %s", l)
		}
	}
}

// TestPods: a new Filter (a restarted agent) finds the pods, changes nothing when it syncs
// them again, and knows what they learned.
func TestPods(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	m := everything(t)
	for _, p := range []testPod{tp.a, tp.b, tp.c} {
		mustSync(t, f, p.Pod, m, true)
	}
	learnedAddr := netip.MustParseAddr("192.0.2.80")
	if err := f.Learn(tp.c.UID, "pypi.org", []netip.Addr{learnedAddr}, time.Hour); err != nil {
		t.Fatal(err)
	}
	f.Close()

	f2 := newFilter(t, tp.node)
	got, err := f2.Pods()
	if err != nil {
		t.Fatal(err)
	}
	var want []Pod
	for _, p := range []testPod{tp.a, tp.b, tp.c} {
		np, err := normalizePod(p.Pod)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, np)
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("Pods (-want +got):\n%s", diff)
	}
	if f2.Learned(tp.c.UID, "pypi.org", learnedAddr) {
		t.Error("learned before a Sync")
	}
	for _, p := range []testPod{tp.a, tp.b, tp.c} {
		mustSync(t, f2, p.Pod, m, false)
	}
	if !f2.Learned(tp.c.UID, "pypi.org", learnedAddr) {
		t.Error("a new Filter did not read the learned addresses back")
	}

	// The routed pod moves to another interface (its veth was made anew).
	newVeth(t, tp.node, "veth-c2")
	moved := tp.c.Pod
	moved.Iface = "veth-c2"
	mustSync(t, f2, moved, m, true)
	mustSync(t, f2, moved, m, false)
	got, err = f2.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2].UID != tp.c.UID || got[2].Iface != "veth-c2" {
		t.Errorf("after the move: %+v", got)
	}
	raw, err := f2.netdevChains()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range raw {
		if c.name == podChain(PodID(tp.c.UID)) && !slices.Equal(c.devices, []string{"veth-c2"}) {
			t.Errorf("the anti-spoofing chain is on %v", c.devices)
		}
	}
	// Another pod on a's interface: a's anti-spoofing chain goes (a is gone).
	intruder := Pod{UID: "uid-pod-new", Iface: tp.a.Iface, IPs: []netip.Addr{netip.MustParseAddr("10.10.0.50")}}
	mustSync(t, f2, intruder, m, true)
	raw, err = f2.netdevChains()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range raw {
		if c.name == podChain(PodID(tp.a.UID)) {
			t.Errorf("a's anti-spoofing chain is still there, on %v", c.devices)
		}
	}
}

func TestSyncRefuses(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	m := compile(t, egressapi.ActionDeny)
	missing := tp.a.Pod
	missing.Iface = "nosuch0"
	if _, err := f.Sync(missing, m); err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("sync on a missing interface: %v", err)
	}
	sysctl(t, tp.node, "net/bridge/bridge-nf-call-iptables", "0")
	_, err := f.Sync(tp.a.Pod, m)
	sysctl(t, tp.node, "net/bridge/bridge-nf-call-iptables", "1")
	if err == nil || !strings.Contains(err.Error(), "bridge-nf-call-iptables=0") {
		t.Errorf("sync of a bridged pod without br_netfilter: %v", err)
	}
	// A routed pod does not need it.
	sysctl(t, tp.node, "net/bridge/bridge-nf-call-iptables", "0")
	_, err = f.Sync(tp.c.Pod, m)
	sysctl(t, tp.node, "net/bridge/bridge-nf-call-iptables", "1")
	if err != nil {
		t.Errorf("sync of a routed pod: %v", err)
	}
	if pods, err := f.Pods(); err != nil || len(pods) != 1 {
		t.Errorf("pods after refused syncs: %v, %v", pods, err)
	}
}

// TestSyncLargePolicy: the largest policy a sandbox may have, every rule a name with every
// port, goes in one batch (3,200 rules: more than default netlink socket buffers hold).
func TestSyncLargePolicy(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	var rules []egressapi.Rule
	for i := range egressapi.MaxRules {
		var ports []egressapi.Port
		for j := range egressapi.MaxPorts {
			ports = append(ports, tcp(int32(1000+j)))
		}
		rules = append(rules, allow(fmt.Sprintf("host%d.example.com", i), ports...))
	}
	m := compile(t, egressapi.ActionDeny, rules...)
	mustSync(t, f, tp.a.Pod, m, true)
	mustSync(t, f, tp.a.Pod, m, false)
	rules[0].Ports = rules[0].Ports[1:]
	mustSync(t, f, tp.a.Pod, compile(t, egressapi.ActionDeny, rules...), true)
}

// TestClosed: a closed Filter refuses work rather than fall back to the caller's namespace.
func TestClosed(t *testing.T) {
	requireRoot(t)
	ns := newNS(t)
	f := newFilter(t, ns)
	m := compile(t, egressapi.ActionDeny)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	p := Pod{UID: "u", Iface: "lo", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	if _, err := f.Sync(p, m); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync: %v", err)
	}
	if err := f.Remove("u"); !errors.Is(err, ErrClosed) {
		t.Errorf("Remove: %v", err)
	}
	if _, err := f.Pods(); !errors.Is(err, ErrClosed) {
		t.Errorf("Pods: %v", err)
	}
	if _, err := f.CutFlows("u", m); !errors.Is(err, ErrClosed) {
		t.Errorf("CutFlows: %v", err)
	}
	if err := f.CheckKernel(); !errors.Is(err, ErrClosed) {
		t.Errorf("CheckKernel: %v", err)
	}
	if _, err := f.Counters("u"); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters: %v", err)
	}
	if err := f.Learn("u", "k", []netip.Addr{netip.MustParseAddr("10.0.0.2")}, time.Minute); !errors.Is(err, ErrClosed) {
		t.Errorf("Learn: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestConcurrent: the methods may be called from many goroutines at once (run with -race).
func TestConcurrent(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	m := compile(t, egressapi.ActionDeny, allow("pypi.org"))
	pods := []testPod{tp.a, tp.b, tp.c}
	errc := make(chan error, 3*len(pods))
	for i, p := range pods {
		go func() {
			var err error
			for j := range 5 {
				if _, err = f.Sync(p.Pod, m); err != nil {
					break
				}
				a := netip.AddrFrom4([4]byte{192, 0, 2, byte(10*i + j)})
				if err = f.Learn(p.UID, "pypi.org", []netip.Addr{a}, time.Minute); err != nil {
					break
				}
				if !f.Learned(p.UID, "pypi.org", a) {
					err = fmt.Errorf("%s: %s not learned", p.UID, a)
					break
				}
				if _, err = f.Counters(p.UID); err != nil {
					break
				}
			}
			errc <- err
		}()
		go func() {
			_, err := f.Pods()
			errc <- err
		}()
		go func() {
			_, err := f.CutFlows(p.UID, m)
			if errors.Is(err, ErrUnknownPod) {
				err = nil // not synced yet
			}
			errc <- err
		}()
	}
	for range 3 * len(pods) {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	got, err := f.Pods()
	if err != nil || len(got) != 3 {
		t.Errorf("pods: %v, %v", got, err)
	}
}
