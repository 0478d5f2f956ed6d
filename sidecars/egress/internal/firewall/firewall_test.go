package firewall

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

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

// descs are the descriptions of a chain's rules, as their comments carry them.
func descs(rs *ruleset, chain string) []string {
	var out []string
	for _, r := range rs.rules[chain] {
		out = append(out, r.desc)
	}
	return out
}

var prologue = []string{
	"loopback", "loopback destination ipv4", "loopback destination ipv6", "established,related", "dns upstream tcp (marked)", "dns upstream udp (marked)",
	"ipv6 nd router-solicit", "ipv6 nd neighbor-solicit", "ipv6 nd neighbor-advert",
}

func TestBuildRuleset(t *testing.T) {
	tests := []struct {
		name   string
		m      *egressapi.Matcher
		output []string // after the prologue
		sets   []string // keys, in order
	}{
		{
			name:   "deny all",
			m:      compile(t, egressapi.ActionDeny),
			output: []string{"default Deny"},
		},
		{
			name:   "allow all",
			m:      compile(t, egressapi.ActionAllow),
			output: []string{"default Allow"},
		},
		{
			name: "prefixes",
			m: compile(t, egressapi.ActionDeny,
				allow("10.0.0.0/8", tcp(443), udp(53), tcpRange(8000, 8080)),
				deny("2001:db8::1"),
				allow("0.0.0.0/0", tcp(80))),
			output: []string{
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
			output: []string{
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
			rs, err := buildRuleset(tt.m, egressapi.SocketMark, egressapi.DNSPort)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(append(append([]string{}, prologue...), tt.output...), descs(rs, ChainOutput)); diff != "" {
				t.Errorf("output chain (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"deny: count", "deny: tcp reset", "deny: icmpx admin-prohibited"}, descs(rs, ChainDeny)); diff != "" {
				t.Errorf("deny chain (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"dns: the proxy's own", "dns udp redirect to :15353", "dns tcp redirect to :15353"}, descs(rs, ChainNATOutput)); diff != "" {
				t.Errorf("nat chain (-want +got):\n%s", diff)
			}
			var keys []string
			for i, s := range rs.sets {
				if i%2 == 0 {
					keys = append(keys, s.key)
				}
				v4, v6 := SetNames(s.key)
				if want := map[bool]string{false: v4, true: v6}[s.v6]; s.name != want {
					t.Errorf("set %d is %s, want %s", i, s.name, want)
				}
			}
			if diff := cmp.Diff(tt.sets, keys); diff != "" {
				t.Errorf("set keys (-want +got):\n%s", diff)
			}
			// Only accepting matcher rules and the default count as allowed; the deny chain's
			// first rule is the one denied counter.
			for _, r := range rs.rules[ChainOutput] {
				wantKind := kindPlain
				if strings.Contains(r.desc, " Allow") {
					wantKind = kindAllowed
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
					if len(c) > maxCommentLen || len(fp) != 16 || !strings.HasPrefix(r.desc, desc) {
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

func TestBuildRulesetRejects(t *testing.T) {
	for name, m := range map[string]*egressapi.Matcher{
		"nil":            nil,
		"bad port":       {Default: egressapi.ActionDeny, Rules: []egressapi.CompiledRule{{Action: egressapi.ActionAllow, Target: egressapi.Target{Kind: egressapi.TargetName, Name: "a.example"}, Ports: []egressapi.Port{{Port: 0}}}}},
		"bad range":      {Default: egressapi.ActionDeny, Rules: []egressapi.CompiledRule{{Action: egressapi.ActionAllow, Target: egressapi.Target{Kind: egressapi.TargetName, Name: "a.example"}, Ports: []egressapi.Port{{Port: 80, EndPort: ptr[int32](70)}}}}},
		"bad protocol":   {Default: egressapi.ActionDeny, Rules: []egressapi.CompiledRule{{Action: egressapi.ActionAllow, Target: egressapi.Target{Kind: egressapi.TargetName, Name: "a.example"}, Ports: []egressapi.Port{{Port: 80, Protocol: "SCTP"}}}}},
		"bad target":     {Default: egressapi.ActionDeny, Rules: []egressapi.CompiledRule{{Action: egressapi.ActionAllow}}},
		"invalid prefix": {Default: egressapi.ActionDeny, Rules: []egressapi.CompiledRule{{Action: egressapi.ActionAllow, Target: egressapi.Target{Kind: egressapi.TargetPrefix}}}},
	} {
		if _, err := buildRuleset(m, 1, 1); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestFingerprints(t *testing.T) {
	fp := func(m *egressapi.Matcher, mark uint32, port uint16) []string {
		t.Helper()
		rs, err := buildRuleset(m, mark, port)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range []string{ChainDeny, ChainOutput, ChainNATOutput} {
			for _, r := range rs.rules[c] {
				out = append(out, hex.EncodeToString(r.userData))
			}
		}
		return out
	}
	base := compile(t, egressapi.ActionDeny, allow("10.0.0.0/8", tcp(443)), allow("pypi.org"))
	same := compile(t, egressapi.ActionDeny, allow("10.1.2.3/8", tcp(443)), allow("PYPI.ORG."))
	if diff := cmp.Diff(fp(base, 1, 15353), fp(same, 1, 15353)); diff != "" {
		t.Errorf("equivalent policies differ:\n%s", diff)
	}
	for name, other := range map[string][]string{
		"port":     fp(compile(t, egressapi.ActionDeny, allow("10.0.0.0/8", tcp(444)), allow("pypi.org")), 1, 15353),
		"protocol": fp(compile(t, egressapi.ActionDeny, allow("10.0.0.0/8", udp(443)), allow("pypi.org")), 1, 15353),
		"prefix":   fp(compile(t, egressapi.ActionDeny, allow("10.0.0.0/9", tcp(443)), allow("pypi.org")), 1, 15353),
		"name":     fp(compile(t, egressapi.ActionDeny, allow("10.0.0.0/8", tcp(443)), allow("*.pypi.org")), 1, 15353),
		"action":   fp(compile(t, egressapi.ActionDeny, allow("10.0.0.0/8", tcp(443)), deny("pypi.org")), 1, 15353),
		"default":  fp(compile(t, egressapi.ActionAllow, allow("10.0.0.0/8", tcp(443)), allow("pypi.org")), 1, 15353),
		"order":    fp(compile(t, egressapi.ActionDeny, allow("pypi.org"), allow("10.0.0.0/8", tcp(443))), 1, 15353),
		"mark":     fp(base, 2, 15353),
		"dns port": fp(base, 1, 15354),
	} {
		if cmp.Equal(fp(base, 1, 15353), other) {
			t.Errorf("a different %s gives the same rules", name)
		}
	}
}

func TestDaddrPrefix(t *testing.T) {
	tests := []struct {
		prefix string
		want   []expr.Any
	}{
		{"0.0.0.0/0", nil},
		{"192.0.2.7/32", []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{192, 0, 2, 7}},
		}},
		{"10.128.0.0/9", []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 128, 0, 0}, Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{10, 128, 0, 0}},
		}},
		{"2001:db8::/33", []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 16},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 16, Mask: []byte{255, 255, 255, 255, 128, 15: 0}, Xor: make([]byte, 16)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x20, 0x01, 0x0d, 0xb8, 15: 0}},
		}},
	}
	for _, tt := range tests {
		p := netip.MustParsePrefix(tt.prefix)
		off := uint32(16)
		if p.Addr().Is6() {
			off = 24
		}
		if diff := cmp.Diff(tt.want, daddrPrefix(p, off)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.prefix, diff)
		}
	}
}

func TestOutboundFlow(t *testing.T) {
	own := map[netip.Addr]bool{netip.MustParseAddr("192.0.2.1"): true, netip.MustParseAddr("2001:db8::1"): true}
	flow := func(proto uint8, src, dst string, dport uint16, replySrc string) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst), SrcPort: 40000, DstPort: dport},
			Reverse: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(replySrc), DstIP: net.ParseIP(src), SrcPort: dport, DstPort: 40000},
		}
	}
	tests := []struct {
		name string
		flow *netlink.ConntrackFlow
		want *egressapi.Flow
	}{
		{"outbound tcp", flow(6, "192.0.2.1", "198.51.100.7", 443, "198.51.100.7"),
			&egressapi.Flow{Addr: netip.MustParseAddr("198.51.100.7"), Protocol: egressapi.ProtocolTCP, Port: 443}},
		{"outbound udp v6", flow(17, "2001:db8::1", "2001:db8:1::9", 4000, "2001:db8:1::9"),
			&egressapi.Flow{Addr: netip.MustParseAddr("2001:db8:1::9"), Protocol: egressapi.ProtocolUDP, Port: 4000}},
		{"outbound icmp", flow(1, "192.0.2.1", "198.51.100.7", 0, "198.51.100.7"),
			&egressapi.Flow{Addr: netip.MustParseAddr("198.51.100.7")}},
		{"inbound (kubelet probe)", flow(6, "192.0.2.254", "192.0.2.1", 8080, "192.0.2.1"), nil},
		{"to itself", flow(6, "192.0.2.1", "192.0.2.1", 8080, "192.0.2.1"), nil},
		{"loopback", flow(6, "127.0.0.1", "127.0.0.1", 8080, "127.0.0.1"), nil},
		{"dns redirected to the proxy", flow(17, "192.0.2.1", "8.8.8.8", 53, "127.0.0.1"), nil},
		{"the proxy's upstream query", flow(17, "192.0.2.1", "8.8.8.8", 53, "8.8.8.8"), nil},
		{"tcp dns", flow(6, "2001:db8::1", "2001:4860:4860::8888", 53, "2001:4860:4860::8888"), nil},
	}
	for _, tt := range tests {
		got, ok := outboundFlow(tt.flow, own)
		switch {
		case tt.want == nil && ok:
			t.Errorf("%s: outbound %+v, want not", tt.name, got)
		case tt.want != nil && !ok:
			t.Errorf("%s: not outbound", tt.name)
		case tt.want != nil && got != *tt.want:
			t.Errorf("%s: %+v, want %+v", tt.name, got, *tt.want)
		}
	}

	m := compile(t, egressapi.ActionDeny, allow("198.51.100.0/24", tcp(443)), allow("pypi.org"))
	learned := func(key string, a netip.Addr) bool {
		return key == "pypi.org" && a == netip.MustParseAddr("2001:db8:1::9")
	}
	ff := &flowFilter{own: own, m: m, learned: learned}
	for _, c := range []struct {
		flow *netlink.ConntrackFlow
		cut  bool
	}{
		{flow(6, "192.0.2.1", "198.51.100.7", 443, "198.51.100.7"), false},
		{flow(6, "192.0.2.1", "198.51.100.7", 80, "198.51.100.7"), true},
		{flow(17, "2001:db8::1", "2001:db8:1::9", 4000, "2001:db8:1::9"), false},
		{flow(17, "2001:db8::1", "2001:db8:1::8", 4000, "2001:db8:1::8"), true},
		{flow(6, "192.0.2.254", "192.0.2.1", 8080, "192.0.2.1"), false},
	} {
		if got := ff.MatchConntrackFlow(c.flow); got != c.cut {
			t.Errorf("cut %v → %v: %v, want %v", c.flow.Forward.DstIP, c.flow.Forward.DstPort, got, c.cut)
		}
	}
}

// TestLearnedExpiry checks the mirror's expiry with a fake clock (no kernel needed).
func TestLearnedExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	f := &Firewall{now: func() time.Time { return now }, learned: map[string]map[netip.Addr]time.Time{
		"pypi.org": {netip.MustParseAddr("192.0.2.9"): now.Add(30 * time.Second)},
	}}
	if !f.Learned("pypi.org", netip.MustParseAddr("192.0.2.9")) {
		t.Error("not learned")
	}
	if !f.Learned("pypi.org", netip.MustParseAddr("::ffff:192.0.2.9")) {
		t.Error("the mapped form is not learned")
	}
	if f.Learned("*.pypi.org", netip.MustParseAddr("192.0.2.9")) || f.Learned("pypi.org", netip.MustParseAddr("192.0.2.8")) {
		t.Error("learned for another key or address")
	}
	now = now.Add(30 * time.Second)
	if f.Learned("pypi.org", netip.MustParseAddr("192.0.2.9")) {
		t.Error("learned after its expiry")
	}
	var _ egressapi.Learned = f.Learned
}

// ---- Tests in fresh network namespaces (root). ----

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs in fresh network namespaces")
	}
}

// newNS makes a fresh network namespace with its loopback up, and leaves the calling thread
// where it was. Nothing is mounted in /run/netns: the handle keeps the namespace alive, and
// closing it (at cleanup) frees it.
func newNS(t *testing.T) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("get namespace: %v", err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("new namespace: %v", err)
	}
	if err := netns.Set(orig); err != nil {
		// Stay locked: the goroutine ends (Fatal) and the runtime discards its thread, which is
		// in the wrong namespace.
		t.Fatalf("back to the original namespace: %v", err)
	}
	runtime.UnlockOSThread()
	t.Cleanup(func() { ns.Close() })

	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatalf("lo: %v", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatalf("lo up: %v", err)
	}
	return ns
}

// inNS runs fn on an OS thread switched into ns. The goroutine ends with its thread locked,
// so the runtime throws the thread away instead of letting other goroutines run in ns. Sockets
// fn makes stay in ns and can be used from anywhere.
func inNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func newFirewall(t *testing.T, ns netns.NsHandle) *Firewall {
	t.Helper()
	f, err := New(Options{NetNS: ns})
	if err != nil {
		t.Fatalf("new firewall: %v", err)
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

var testTable = &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}

// dump lists the table as text: chains, rules (with their handles if asked) with counters
// zeroed, sets and their elements' keys.
func dump(t *testing.T, c *nftables.Conn, handles bool) string {
	t.Helper()
	var b strings.Builder
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	found := false
	for _, tb := range tables {
		found = found || tb.Name == TableName
	}
	if !found {
		return "no table"
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatalf("list chains: %v", err)
	}
	sort.Slice(chains, func(i, j int) bool { return chains[i].Name < chains[j].Name })
	for _, ch := range chains {
		if ch.Table.Name != TableName {
			continue
		}
		fmt.Fprintf(&b, "chain %s type=%q", ch.Name, ch.Type)
		if ch.Hooknum != nil {
			fmt.Fprintf(&b, " hook=%d prio=%d", *ch.Hooknum, *ch.Priority)
		}
		if ch.Policy != nil {
			fmt.Fprintf(&b, " policy=%d", *ch.Policy)
		}
		b.WriteString("\n")
		rules, err := c.GetRules(testTable, ch)
		if err != nil {
			t.Fatalf("list rules: %v", err)
		}
		for _, r := range rules {
			b.WriteString("  ")
			if handles {
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
	sets, err := c.GetSets(testTable)
	if err != nil {
		t.Fatalf("list sets: %v", err)
	}
	sort.Slice(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
	for _, s := range sets {
		fmt.Fprintf(&b, "set %s %s timeout=%v:", s.Name, s.KeyType.Name, s.HasTimeout)
		elems, err := c.GetSetElements(s)
		if err != nil {
			t.Fatalf("list elements: %v", err)
		}
		var keys []string
		for _, e := range elems {
			a, _ := netip.AddrFromSlice(e.Key)
			keys = append(keys, a.String())
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, " %v\n", keys)
	}
	return b.String()
}

func mustSync(t *testing.T, f *Firewall, m *egressapi.Matcher, wantChanged bool) {
	t.Helper()
	changed, err := f.Sync(m)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	if changed != wantChanged {
		t.Fatalf("sync changed=%v, want %v", changed, wantChanged)
	}
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

func TestCheckKernel(t *testing.T) {
	requireRoot(t)
	ns := newNS(t)
	f := newFirewall(t, ns)
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
	ns := newNS(t)
	f := newFirewall(t, ns)
	c := nftConn(t, ns)
	m := everything(t)

	mustSync(t, f, m, true)
	first := dump(t, c, true)
	if n := strings.Count(first, "\n  "); n < 20 {
		t.Fatalf("only %d rules:\n%s", n, first)
	}
	mustSync(t, f, m, false)
	if diff := cmp.Diff(first, dump(t, c, true)); diff != "" {
		t.Errorf("a second Sync changed the table (-first +second):\n%s", diff)
	}
	// A matcher compiled anew from the same rules is the same.
	mustSync(t, f, everything(t), false)

	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil || len(tables) != 1 || tables[0].Flags != 0 {
		t.Errorf("table: %+v, %v; want one, without flags (not owned, not dormant)", tables, err)
	}

	// Another policy changes it; going back restores the first table, handles aside.
	mustSync(t, f, compile(t, egressapi.ActionAllow), true)
	if strings.Contains(dump(t, c, false), "set ") {
		t.Error("sets of keys no rule has are left")
	}
	mustSync(t, f, m, true)
	if diff := cmp.Diff(dump(t, c, false), stripHandles(first)); diff != "" {
		t.Errorf("back to the first policy (-got +want):\n%s", diff)
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
	ns := newNS(t)
	f := newFirewall(t, ns)
	c := nftConn(t, ns)
	m := everything(t)
	mustSync(t, f, m, true)
	v4, v6 := SetNames("pypi.org")
	if err := f.Learn("pypi.org", []netip.Addr{netip.MustParseAddr("192.0.2.80"), netip.MustParseAddr("2001:db8:80::1")}, time.Hour); err != nil {
		t.Fatalf("learn: %v", err)
	}
	want := dump(t, c, false)
	if !strings.Contains(want, "set "+v4+" ipv4_addr timeout=true: [192.0.2.80]") || !strings.Contains(want, "set "+v6+" ipv6_addr timeout=true: [2001:db8:80::1]") {
		t.Fatalf("learned addresses are not in the sets:\n%s", want)
	}
	outputChain := &nftables.Chain{Name: ChainOutput, Table: testTable}

	tamper := []struct {
		name string
		do   func() error
	}{
		{"delete a rule, add a foreign one", func() error {
			rules, err := c.GetRules(testTable, outputChain)
			if err != nil {
				return err
			}
			if err := c.DelRule(rules[len(rules)/2]); err != nil {
				return err
			}
			c.AddRule(&nftables.Rule{Table: testTable, Chain: outputChain, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
			return c.Flush()
		}},
		{"insert a foreign rule first", func() error {
			c.InsertRule(&nftables.Rule{Table: testTable, Chain: outputChain, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
			return c.Flush()
		}},
		{"delete a set", func() error {
			c.FlushChain(outputChain) // the set is in use otherwise
			c.DelSet(&nftables.Set{Table: testTable, Name: v6})
			return c.Flush()
		}},
		{"replace a set with one of another type", func() error {
			c.FlushChain(outputChain)
			c.DelSet(&nftables.Set{Table: testTable, Name: v4})
			if err := c.AddSet(&nftables.Set{Table: testTable, Name: v4, KeyType: nftables.TypeIP6Addr}, nil); err != nil {
				return err
			}
			return c.Flush()
		}},
		{"change the policy", func() error {
			c.AddChain(&nftables.Chain{Name: ChainOutput, Table: testTable, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &policyAccept})
			return c.Flush()
		}},
		{"replace the output chain by a regular one", func() error {
			c.FlushChain(outputChain)
			c.DelChain(outputChain)
			c.AddChain(&nftables.Chain{Name: ChainOutput, Table: testTable})
			c.AddRule(&nftables.Rule{Table: testTable, Chain: outputChain, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
			return c.Flush()
		}},
		{"flush the deny chain", func() error {
			c.FlushChain(&nftables.Chain{Name: ChainDeny, Table: testTable})
			return c.Flush()
		}},
		{"add a foreign chain that jumps into ours, and a foreign set", func() error {
			foreign := c.AddChain(&nftables.Chain{Name: "foreign", Table: testTable, Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(-10), Policy: &policyAccept})
			c.AddRule(&nftables.Rule{Table: testTable, Chain: foreign, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: ChainDeny}}})
			if err := c.AddSet(&nftables.Set{Table: testTable, Name: "foreign", KeyType: nftables.TypeIPAddr}, nil); err != nil {
				return err
			}
			return c.Flush()
		}},
		{"delete the table", func() error {
			c.DelTable(testTable)
			return c.Flush()
		}},
	}
	for _, tt := range tamper {
		if err := tt.do(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if dump(t, c, false) == want {
			t.Fatalf("%s: changed nothing", tt.name)
		}
		mustSync(t, f, m, true)
		if diff := cmp.Diff(want, dump(t, c, false)); diff != "" {
			t.Errorf("%s: Sync did not restore the table (-want +got):\n%s", tt.name, diff)
		}
		mustSync(t, f, m, false)
	}
}

// TestSyncKeepsLearned: a resync keeps the learned addresses of the keys that remain, drops
// the sets of the others, and a new Firewall (a restarted sandbox-egress) reads them back.
func TestSyncKeepsLearned(t *testing.T) {
	requireRoot(t)
	ns := newNS(t)
	f := newFirewall(t, ns)
	c := nftConn(t, ns)
	mustSync(t, f, everything(t), true)
	a4, a6 := netip.MustParseAddr("192.0.2.80"), netip.MustParseAddr("2001:db8:80::1")
	if err := f.Learn("pypi.org", []netip.Addr{a4, a6}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := f.Learn("*.example.com", []netip.Addr{netip.MustParseAddr("192.0.2.81")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := f.Learn("nope.example.org", []netip.Addr{a4}, time.Hour); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("learn for a key without a rule: %v, want ErrUnknownKey", err)
	}

	// Drop *.example.com and the deny rules, keep pypi.org.
	m2 := compile(t, egressapi.ActionDeny, allow("pypi.org", tcp(443)), allow("10.0.0.0/8"))
	mustSync(t, f, m2, true)
	v4, v6 := SetNames("pypi.org")
	got := dump(t, c, false)
	if !strings.Contains(got, "set "+v4+" ipv4_addr timeout=true: [192.0.2.80]") || !strings.Contains(got, "set "+v6+" ipv6_addr timeout=true: [2001:db8:80::1]") {
		t.Errorf("pypi.org's sets lost their addresses:\n%s", got)
	}
	if strings.Count(got, "set ") != 2 {
		t.Errorf("want only pypi.org's sets:\n%s", got)
	}
	if !f.Learned("pypi.org", a4) || !f.Learned("pypi.org", a6) {
		t.Error("the mirror lost pypi.org's addresses")
	}
	if f.Learned("*.example.com", netip.MustParseAddr("192.0.2.81")) {
		t.Error("the mirror still has *.example.com, which no rule has")
	}

	f2 := newFirewall(t, ns)
	mustSync(t, f2, m2, false)
	if !f2.Learned("pypi.org", a4) || !f2.Learned("pypi.org", a6) {
		t.Error("a new Firewall did not read the learned addresses back")
	}
}

// TestLearnTimeouts: elements get the TTL, at least minTTL; learning again refreshes it; and
// Learned forgets an address when it expires.
func TestLearnTimeouts(t *testing.T) {
	requireRoot(t)
	ns := newNS(t)
	f := newFirewall(t, ns)
	c := nftConn(t, ns)
	now := time.Now()
	f.now = func() time.Time { return now }
	mustSync(t, f, compile(t, egressapi.ActionDeny, allow("pypi.org")), true)
	a := netip.MustParseAddr("192.0.2.80")
	v4, _ := SetNames("pypi.org")
	timeout := func() time.Duration {
		t.Helper()
		elems, err := c.GetSetElements(&nftables.Set{Table: testTable, Name: v4})
		if err != nil || len(elems) != 1 {
			t.Fatalf("elements: %v, %v", elems, err)
		}
		return elems[0].Timeout
	}

	if err := f.Learn("pypi.org", []netip.Addr{a}, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := timeout(); got != minTTL {
		t.Errorf("timeout %v, want the minimum %v", got, minTTL)
	}
	if err := f.Learn("pypi.org", []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.80")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := timeout(); got != time.Hour {
		t.Errorf("timeout %v after learning again for an hour, want it refreshed", got)
	}
	if !f.Learned("pypi.org", a) {
		t.Fatal("not learned")
	}
	now = now.Add(time.Hour - time.Millisecond)
	if !f.Learned("pypi.org", a) {
		t.Error("expired early")
	}
	now = now.Add(time.Millisecond)
	if f.Learned("pypi.org", a) {
		t.Error("learned after expiry")
	}
}

// ---- Real traffic. ----

// pair is two namespaces joined by a veth: the filtered one (the pod) and its peer.
type pair struct {
	pod, peer netns.NsHandle
}

var (
	podIP4, peerIP4, peerIP4b = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	podIP6, peerIP6, peerIP6b = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("2001:db8::3")
)

func newPair(t *testing.T) pair {
	t.Helper()
	p := pair{pod: newNS(t), peer: newNS(t)}
	hp, err := netlink.NewHandleAt(p.pod)
	if err != nil {
		t.Fatal(err)
	}
	defer hp.Close()
	hq, err := netlink.NewHandleAt(p.peer)
	if err != nil {
		t.Fatal(err)
	}
	defer hq.Close()
	// Both ends are made in the pod's namespace, never the host's; the peer end then moves.
	if err := hp.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	peerEnd, err := hp.LinkByName("peer0")
	if err != nil {
		t.Fatal(err)
	}
	if err := hp.LinkSetNsFd(peerEnd, int(p.peer)); err != nil {
		t.Fatalf("move veth end: %v", err)
	}
	setup := func(h *netlink.Handle, name string, addrs ...string) {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			ipn, err := netlink.ParseIPNet(a)
			if err != nil {
				t.Fatal(err)
			}
			// No duplicate address detection: the address is usable at once.
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
				t.Fatalf("add %s: %v", a, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	setup(hp, "eth0", "192.0.2.1/24", "2001:db8::1/64")
	setup(hq, "peer0", "192.0.2.2/24", "192.0.2.3/24", "2001:db8::2/64", "2001:db8::3/64")
	return p
}

// echo serves TCP on addr in ns, echoing what it reads.
func echo(t *testing.T, ns netns.NsHandle, network, addr string) {
	t.Helper()
	var l net.Listener
	if err := inNS(ns, func() (err error) { l, err = net.Listen(network, addr); return err }); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
}

// udpServe answers each datagram on addr in ns with prefix + the datagram.
func udpServe(t *testing.T, ns netns.NsHandle, addr, prefix string) {
	t.Helper()
	var pc net.PacketConn
	if err := inNS(ns, func() (err error) { pc, err = net.ListenPacket("udp", addr); return err }); err != nil {
		t.Fatalf("listen udp %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte(prefix), buf[:n]...), from)
		}
	}()
}

func dial(ns netns.NsHandle, network string, addr netip.AddrPort, mark uint32) (net.Conn, error) {
	var c net.Conn
	err := inNS(ns, func() (err error) {
		d := net.Dialer{Timeout: 10 * time.Second}
		if mark != 0 {
			d.Control = func(_, _ string, rc syscall.RawConn) error {
				var serr error
				if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark)) }); err != nil {
					return err
				}
				return serr
			}
		}
		c, err = d.Dial(network, addr.String())
		return err
	})
	return c, err
}

// roundTrip writes a line and reads it back (or the prefixed answer of udpServe).
func roundTrip(c net.Conn, msg string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

func TestTraffic(t *testing.T) {
	requireRoot(t)
	p := newPair(t)
	f := newFirewall(t, p.pod)
	if err := f.CheckKernel(); err != nil {
		t.Fatalf("CheckKernel: %v", err)
	}
	echo(t, p.peer, "tcp", ":8080")
	echo(t, p.peer, "tcp", ":9090")
	echo(t, p.pod, "tcp", ":7070")
	// Bound to an address: a wildcard socket would answer from the peer's newest IPv6 address
	// (RFC 6724 source selection), which a connected client ignores.
	udpServe(t, p.peer, "192.0.2.2:9999", "peer:")
	udpServe(t, p.peer, "[2001:db8::2]:9999", "peer:")

	const key = "svc.example.com"
	m := compile(t, egressapi.ActionDeny,
		allow(peerIP4.String(), tcp(8080)),
		allow("2001:db8::2/128", tcpRange(8000, 8090)),
		allow(key, tcp(9090)))
	mustSync(t, f, m, true)

	at := netip.AddrPortFrom
	mustConnect := func(addr netip.AddrPort) net.Conn {
		t.Helper()
		c, err := dial(p.pod, "tcp", addr, 0)
		if err != nil {
			t.Fatalf("connect to %s: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
		if got, err := roundTrip(c, "hello"); err != nil || got != "hello" {
			t.Fatalf("echo over %s: %q, %v", addr, got, err)
		}
		return c
	}
	mustRefuse := func(addr netip.AddrPort) {
		t.Helper()
		c, err := dial(p.pod, "tcp", addr, 0)
		if err == nil {
			c.Close()
			t.Fatalf("connected to %s, want it denied", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("connect to %s: %v, want ECONNREFUSED (a reset from the filter)", addr, err)
		}
	}

	// Allowed by prefix, both families (IPv6 needs neighbour discovery through the filter).
	keep := mustConnect(at(peerIP4, 8080))
	mustConnect(at(peerIP6, 8080))
	// Denied: a listener is there, the filter resets.
	mustRefuse(at(peerIP4, 9090))
	mustRefuse(at(peerIP6, 9090))
	mustRefuse(at(peerIP4b, 9090))
	mustRefuse(at(peerIP6b, 9090))

	// UDP is rejected too, not silently dropped.
	for _, a := range []netip.Addr{peerIP4, peerIP6} {
		c, err := dial(p.pod, "udp", at(a, 9999), 0)
		if err != nil {
			t.Fatal(err)
		}
		// The send itself fails: the filter drops the datagram on the sender's own path (after
		// queueing the ICMP error that tells a connected socket afterwards).
		_, err = roundTrip(c, "x")
		c.Close()
		if !errors.Is(err, syscall.EPERM) {
			t.Errorf("udp to %s: %v, want EPERM", a, err)
		}
	}

	// A name: allowed once learned.
	if err := f.Learn(key, []netip.Addr{peerIP4b, peerIP6b}, time.Minute); err != nil {
		t.Fatal(err)
	}
	cut4 := mustConnect(at(peerIP4b, 9090))
	cut6 := mustConnect(at(peerIP6b, 9090))

	// Into the pod: not filtered (the replies are established).
	var in net.Conn
	if err := inNS(p.peer, func() (err error) { in, err = net.Dial("tcp", at(podIP4, 7070).String()); return err }); err != nil {
		t.Fatalf("connect into the pod: %v", err)
	}
	defer in.Close()
	if got, err := roundTrip(in, "in"); err != nil || got != "in" {
		t.Fatalf("inbound echo: %q, %v", got, err)
	}

	allowed, denied, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if allowed < 4 || denied < 4 {
		t.Errorf("counters allowed=%d denied=%d, want at least 4 each", allowed, denied)
	}

	// The policy no longer allows the name: Sync, then cut.
	m2 := compile(t, egressapi.ActionDeny,
		allow(peerIP4.String(), tcp(8080)),
		allow("2001:db8::2/128", tcpRange(8000, 8090)))
	mustSync(t, f, m2, true)
	if a2, d2, err := f.Counters(); err != nil || a2 < allowed || d2 < denied {
		t.Errorf("counters went from %d/%d to %d/%d (%v): want them kept across a Sync", allowed, denied, a2, d2, err)
	}
	// Established flows outlive the Sync (that is why CutFlows exists).
	if _, err := roundTrip(cut4, "still"); err != nil {
		t.Fatalf("before CutFlows: %v", err)
	}
	n, err := f.CutFlows(m2)
	if err != nil {
		t.Fatalf("CutFlows: %v", err)
	}
	if n != 2 {
		t.Errorf("CutFlows cut %d flows, want 2", n)
	}
	for _, c := range []net.Conn{cut4, cut6} {
		_, err := roundTrip(c, "gone?")
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("flow to %s: %v after CutFlows, want it reset", c.RemoteAddr(), err)
		}
	}
	flows := conntrack(t, p.pod)
	for _, fl := range flows {
		if fl.Forward.DstPort == 9090 && fl.Forward.Protocol == unix.IPPROTO_TCP {
			t.Errorf("conntrack still has %s", fl)
		}
	}
	// What stays allowed, and what comes in, is untouched.
	if got, err := roundTrip(keep, "kept"); err != nil || got != "kept" {
		t.Errorf("allowed flow after CutFlows: %q, %v", got, err)
	}
	if got, err := roundTrip(in, "in again"); err != nil || got != "in again" {
		t.Errorf("inbound flow after CutFlows: %q, %v", got, err)
	}
	if n, err := f.CutFlows(m2); err != nil || n != 0 {
		t.Errorf("CutFlows again: %d, %v; want 0", n, err)
	}
	mustRefuse(at(peerIP4b, 9090))
}

func conntrack(t *testing.T, ns netns.NsHandle) []*netlink.ConntrackFlow {
	t.Helper()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var out []*netlink.ConntrackFlow
	for _, af := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		fl, err := h.ConntrackTableList(netlink.ConntrackTable, af)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fl...)
	}
	return out
}

// TestDNS: every query the pod sends goes to the proxy on loopback; only marked ones reach a
// resolver.
func TestDNS(t *testing.T) {
	requireRoot(t)
	p := newPair(t)
	f := newFirewall(t, p.pod)
	mustSync(t, f, compile(t, egressapi.ActionDeny), true) // deny-all: DNS still works

	port := fmt.Sprint(egressapi.DNSPort)
	udpServe(t, p.pod, "127.0.0.1:"+port, "proxy:")
	udpServe(t, p.pod, "[::1]:"+port, "proxy:")
	udpServe(t, p.peer, "192.0.2.2:53", "upstream:")
	udpServe(t, p.peer, "[2001:db8::2]:53", "upstream:")
	var l net.Listener
	if err := inNS(p.pod, func() (err error) { l, err = net.Listen("tcp", "127.0.0.1:"+port); return err }); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, io.MultiReader(bytes.NewReader([]byte("proxy:")), c)) }()
		}
	}()

	// A default route, as a pod has, so that a resolver off the link can be asked at all.
	h, err := netlink.NewHandleAt(p.pod)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.RouteAdd(&netlink.Route{Gw: net.ParseIP("192.0.2.2")}); err != nil {
		t.Fatalf("default route: %v", err)
	}

	for _, tt := range []struct {
		network string
		to      netip.Addr
		mark    uint32
		want    string
	}{
		{"udp", peerIP4, 0, "proxy:q"},
		{"udp", peerIP6, 0, "proxy:q"},
		{"udp", netip.MustParseAddr("198.51.100.53"), 0, "proxy:q"}, // any resolver, even unroutable
		{"tcp", peerIP4, 0, "proxy:"},
		{"udp", peerIP4, egressapi.SocketMark, "upstream:q"},
		{"udp", peerIP6, egressapi.SocketMark, "upstream:q"},
	} {
		name := fmt.Sprintf("%s to %s mark %#x", tt.network, tt.to, tt.mark)
		c, err := dial(p.pod, tt.network, netip.AddrPortFrom(tt.to, 53), tt.mark)
		if err != nil {
			t.Errorf("%s: dial: %v", name, err)
			continue
		}
		got, err := roundTrip(c, "q")
		c.Close()
		if tt.network == "tcp" && err == nil && len(got) < len(tt.want) {
			err = fmt.Errorf("short read %q", got)
		}
		if err != nil || !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: %q, %v; want %q", name, got, err, tt.want)
		}
	}
	// The mark opens port 53 only, and only port 53 is redirected: the policy (deny all)
	// decides the rest, marked or not, although the peer listens.
	echo(t, p.peer, "tcp", ":5353")
	for _, mark := range []uint32{0, egressapi.SocketMark} {
		c, err := dial(p.pod, "tcp", netip.AddrPortFrom(peerIP4, 5353), mark)
		if err == nil {
			c.Close()
			t.Errorf("mark %#x: connected to the peer's port 5353, want it denied", mark)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("mark %#x: %v, want ECONNREFUSED", mark, err)
		}
	}
}

// TestSyncLargePolicy: the largest policy a sandbox may have, every rule a name with every
// port, goes in one batch (3,200 rules: more than default netlink socket buffers hold).
func TestSyncLargePolicy(t *testing.T) {
	requireRoot(t)
	ns := newNS(t)
	f := newFirewall(t, ns)
	var rules []egressapi.Rule
	for i := 0; i < egressapi.MaxRules; i++ {
		var ports []egressapi.Port
		for j := 0; j < egressapi.MaxPorts; j++ {
			ports = append(ports, tcp(int32(1000+j)))
		}
		rules = append(rules, allow(fmt.Sprintf("host%d.example.com", i), ports...))
	}
	m := compile(t, egressapi.ActionDeny, rules...)
	mustSync(t, f, m, true)
	mustSync(t, f, m, false)
	rules[0].Ports = rules[0].Ports[1:]
	mustSync(t, f, compile(t, egressapi.ActionDeny, rules...), true)
}

// TestClosed: a closed Firewall refuses work rather than fall back to the caller's namespace.
func TestClosed(t *testing.T) {
	requireRoot(t)
	ns := newNS(t)
	f := newFirewall(t, ns)
	m := compile(t, egressapi.ActionDeny)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Sync(m); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync: %v", err)
	}
	if _, err := f.CutFlows(m); !errors.Is(err, ErrClosed) {
		t.Errorf("CutFlows: %v", err)
	}
	if err := f.CheckKernel(); !errors.Is(err, ErrClosed) {
		t.Errorf("CheckKernel: %v", err)
	}
	if _, _, err := f.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
