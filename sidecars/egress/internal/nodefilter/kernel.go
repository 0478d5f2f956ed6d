package nodefilter

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// probeSuffix names the tables where CheckKernel tries things out, apart from the real ones.
const probeSuffix = "_probe"

// probeAddr6 is 2001:db8::1, a documentation address, for the probe's set elements.
var probeAddr6 = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})

// CheckKernel probes every kernel feature the rulesets use, one per netlink batch so that an
// error names the feature that is missing, in temporary tables that it deletes afterwards;
// then that conntrack can be listed over netlink (CutFlows needs it). The agent calls it at
// start and refuses to run without a working filter: a sandbox that was promised a policy
// must not run without one, and an error saying "the kernel lacks nf_tables reject with tcp
// reset" is more use to an operator than a half-installed ruleset.
//
// The probe is harmless to the namespace's traffic: its base chains accept everything (the
// netdev one is on the loopback device), and every probed rule is guarded by a match no
// packet satisfies (l4proto both UDP and TCP); the kernel still validates the rule, expression
// by expression and against the hooks it can be reached from.
func (f *Filter) CheckKernel() (err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	nd := &nftables.Table{Name: IngressTable + probeSuffix, Family: nftables.TableFamilyNetdev}
	in := &nftables.Table{Name: EgressTable + probeSuffix, Family: nftables.TableFamilyINet}

	// Probe tables left by a crash of an earlier check would make the first steps fail.
	for _, t := range []*nftables.Table{nd, in} {
		have, err := f.findTable(t)
		if err != nil {
			return err
		}
		if have != nil {
			if err := f.transact(func(c *nftables.Conn) error { c.DelTable(t); return nil }); err != nil {
				return fmt.Errorf("delete stale probe table %s: %w", t.Name, err)
			}
		}
	}

	ingress := &nftables.Chain{Name: "ingress", Table: nd, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookIngress,
		Priority: nftables.ChainPriorityRef(ingressPriority), Policy: &policyAccept, Device: "lo"}
	filter := &nftables.Chain{Name: "filter", Table: in, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(preroutingPriority), Policy: &policyAccept}
	nat := &nftables.Chain{Name: "nat", Table: in, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(natPriority), Policy: &policyAccept}
	regular := &nftables.Chain{Name: "regular", Table: in}
	vmap4 := &nftables.Set{Table: in, Name: "vmap_4", IsMap: true, KeyType: nftables.TypeIPAddr, DataType: nftables.TypeVerdict}
	plain6 := &nftables.Set{Table: in, Name: "plain_6", KeyType: nftables.TypeIP6Addr}
	set4 := &nftables.Set{Table: in, Name: "timeout_4", HasTimeout: true, KeyType: nftables.TypeIPAddr}
	set6 := &nftables.Set{Table: in, Name: "timeout_6", HasTimeout: true, KeyType: nftables.TypeIP6Addr}
	// never is the guard: no packet is both UDP and TCP.
	never := join(l4proto(unix.IPPROTO_UDP), l4proto(unix.IPPROTO_TCP))
	rule := func(ch *nftables.Chain, exprs ...any) func(*nftables.Conn) error {
		return func(c *nftables.Conn) error {
			c.AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: join(never, join(exprs...))})
			return nil
		}
	}
	comment := func(ch *nftables.Chain, exprs ...any) func(*nftables.Conn) error {
		return func(c *nftables.Conn) error {
			ud, err := ruleUserData(ch.Table.Family, ch.Name, "probe", nil, maxCommentLen)
			if err != nil {
				return err
			}
			c.AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: join(exprs...), UserData: ud})
			return nil
		}
	}

	steps := []struct {
		feature string
		queue   func(*nftables.Conn) error
	}{
		{"netdev family tables", func(c *nftables.Conn) error { c.AddTable(nd); return nil }},
		{"netdev chains on a device's ingress hook", func(c *nftables.Conn) error { c.AddChain(ingress); return nil }},
		{"rules without expressions, with comments (user data)", comment(ingress)},
		{"ether type, arp and ip matches", rule(ingress, etherType(unix.ETH_P_ARP),
			neqAll(load(expr.PayloadBaseNetworkHeader, 14, 4), []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 2, 1})}), drop())},
		{"ip6 prefix matches (bitwise into a second register)", rule(ingress, etherType(unix.ETH_P_IPV6),
			load(expr.PayloadBaseNetworkHeader, 8, 16), notInPrefix(linkLocal), counter(), drop())},
		{"icmpv6 matches in netdev chains", rule(ingress, l4proto(unix.IPPROTO_ICMPV6),
			load(expr.PayloadBaseTransportHeader, 0, 1), inRange([]byte{130}, []byte{136}), neq([]byte{134}), accept())},
		{"inet family tables", func(c *nftables.Conn) error { c.AddTable(in); return nil }},
		{"filter chains on the prerouting hook", func(c *nftables.Conn) error { c.AddChain(filter); return nil }},
		{"nat chains on the prerouting hook", func(c *nftables.Conn) error { c.AddChain(nat); return nil }},
		{"regular chains", func(c *nftables.Conn) error { c.AddChain(regular); return nil }},
		{"jumps to a regular chain", rule(filter, jumpTo(regular.Name))},
		{"verdict maps", func(c *nftables.Conn) error {
			return c.AddSet(vmap4, []nftables.SetElement{{Key: []byte{192, 0, 2, 1}, VerdictData: jumpTo(regular.Name)}})
		}},
		{"verdict map lookups", rule(filter, nfproto(unix.NFPROTO_IPV4), load(expr.PayloadBaseNetworkHeader, 12, 4), vmap(vmap4.Name))},
		{"ct state", rule(regular, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), accept())},
		{"meta nfproto, meta l4proto and th dport", rule(regular, nfproto(unix.NFPROTO_IPV4), l4proto(unix.IPPROTO_TCP), dport(53, 53), accept())},
		{"port ranges", rule(regular, dport(1000, 2000), accept())},
		{"ip6 header matches", rule(regular, loadCmp(expr.PayloadBaseNetworkHeader, 7, []byte{255}), accept())},
		{"address prefixes", rule(regular, nfproto(unix.NFPROTO_IPV6), daddrPrefix(netip.PrefixFrom(probeAddr6, 32).Masked(), 24), accept())},
		{"counters", rule(regular, counter(), accept())},
		{"reject with tcp reset in prerouting", rule(regular, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})},
		{"reject with icmpx in prerouting", rule(regular, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})},
		{"ipv6_addr sets", func(c *nftables.Conn) error {
			return c.AddSet(plain6, []nftables.SetElement{{Key: probeAddr6.AsSlice()}})
		}},
		{"ipv4_addr sets with timeouts", func(c *nftables.Conn) error {
			return c.AddSet(set4, []nftables.SetElement{{Key: []byte{192, 0, 2, 1}, Timeout: time.Minute}})
		}},
		{"ipv6_addr sets with timeouts", func(c *nftables.Conn) error {
			return c.AddSet(set6, []nftables.SetElement{{Key: probeAddr6.AsSlice(), Timeout: time.Minute}})
		}},
		{"set lookups", rule(regular, nfproto(unix.NFPROTO_IPV4), load(expr.PayloadBaseNetworkHeader, 16, 4), lookup(set4.Name),
			nfproto(unix.NFPROTO_IPV6), load(expr.PayloadBaseNetworkHeader, 24, 16), lookup(set6.Name), accept())},
		{"nat redirect in prerouting", rule(nat, nfproto(unix.NFPROTO_IPV6), load(expr.PayloadBaseNetworkHeader, 8, 16), lookup(plain6.Name),
			dport(53, 53), redirectTo(f.cfg.dnsPort))},
	}

	defer func() {
		// Only those that were made: deleting one that is not there would fail the batch.
		var made []*nftables.Table
		for _, t := range []*nftables.Table{in, nd} {
			if have, ferr := f.findTable(t); ferr == nil && have != nil {
				made = append(made, t)
			}
		}
		derr := f.transact(func(c *nftables.Conn) error {
			for _, t := range made {
				c.DelTable(t)
			}
			return nil
		})
		if derr != nil && err == nil {
			err = fmt.Errorf("delete probe tables: %w", derr)
		}
	}()
	for _, s := range steps {
		if err := f.transact(s.queue); err != nil {
			return fmt.Errorf("the kernel lacks nf_tables %s: %w", s.feature, err)
		}
	}

	if _, err := f.nl.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET); err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("the kernel lacks conntrack over netlink (nf_conntrack_netlink): %w", err)
	}
	return nil
}
