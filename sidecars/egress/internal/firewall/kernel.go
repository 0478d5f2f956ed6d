package firewall

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

// probeTable is where CheckKernel tries things out, apart from the real table.
const probeTable = "kube_sandbox_egress_probe"

// probeAddr6 is 2001:db8::1, a documentation address, for the probe's set element and prefix.
var probeAddr6 = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1})

// CheckKernel probes every kernel feature the ruleset uses, one per netlink batch so that an
// error names the feature that is missing, in a temporary table that it deletes afterwards;
// then that conntrack can be listed over netlink (CutFlows needs it). sandbox-egress calls it
// at start and refuses to run without a working filter: a sandbox that was promised a policy
// must not run without one, and an error saying "the kernel lacks nf_tables reject with tcp
// reset" is more use to an operator than a half-installed ruleset.
//
// The probe is harmless to the namespace's traffic: its base chains accept everything, and
// every probed rule is guarded by a match no packet satisfies (l4proto both UDP and TCP); the
// kernel still validates the rule, expression by expression and against the chain's hook.
func (f *Firewall) CheckKernel() (err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	c := f.nft
	t := &nftables.Table{Name: probeTable, Family: nftables.TableFamilyINet}

	// A probe table left by a crash of an earlier check would make the first step fail.
	if tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err == nil {
		for _, x := range tables {
			if x.Name == probeTable {
				c.DelTable(t)
				if err := c.Flush(); err != nil {
					return fmt.Errorf("delete stale probe table: %w", err)
				}
			}
		}
	}

	filter := &nftables.Chain{Name: "filter", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &policyAccept}
	nat := &nftables.Chain{Name: "nat", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest, Policy: &policyAccept}
	regular := &nftables.Chain{Name: "regular", Table: t}
	set4 := &nftables.Set{Table: t, Name: "probe_4", HasTimeout: true, KeyType: nftables.TypeIPAddr}
	set6 := &nftables.Set{Table: t, Name: "probe_6", HasTimeout: true, KeyType: nftables.TypeIP6Addr}
	// never is the guard: no packet is both UDP and TCP.
	never := join(l4proto(unix.IPPROTO_UDP), l4proto(unix.IPPROTO_TCP))
	rule := func(ch *nftables.Chain, exprs ...any) func() error {
		return func() error {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: join(never, join(exprs...))})
			return nil
		}
	}

	steps := []struct {
		feature string
		queue   func() error
	}{
		{"inet family tables", func() error { c.AddTable(t); return nil }},
		{"filter chains on the output hook", func() error { c.AddChain(filter); return nil }},
		{"nat chains on the output hook", func() error { c.AddChain(nat); return nil }},
		{"regular chains", func() error { c.AddChain(regular); return nil }},
		{"rule comments (user data)", func() error {
			ud, err := ruleUserData("probe", "probe", nil)
			if err != nil {
				return err
			}
			c.AddRule(&nftables.Rule{Table: t, Chain: filter, Exprs: join(never, accept()), UserData: ud})
			return nil
		}},
		{"jumps to a regular chain", rule(filter, &expr.Verdict{Kind: expr.VerdictJump, Chain: regular.Name})},
		{"meta oifname", rule(filter, oifname("lo"), accept())},
		{"ct state", rule(filter, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), accept())},
		{"meta mark", rule(filter, metaMark(f.mark), accept())},
		{"meta nfproto, meta l4proto and th dport", rule(filter, nfproto(unix.NFPROTO_IPV4), l4proto(unix.IPPROTO_TCP), dport(53, 53), accept())},
		{"port ranges", rule(filter, dport(1000, 2000), accept())},
		{"ip and ip6 header matches", rule(filter, loadCmp(expr.PayloadBaseNetworkHeader, 7, []byte{255}), accept())},
		{"address prefixes", rule(filter, nfproto(unix.NFPROTO_IPV6), daddrPrefix(netip.PrefixFrom(probeAddr6, 32).Masked(), 24), accept())},
		{"counters", rule(filter, &expr.Counter{}, accept())},
		{"reject with tcp reset", rule(filter, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})},
		{"reject with icmpx", rule(filter, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED})},
		{"ipv4_addr sets with timeouts", func() error {
			return c.AddSet(set4, []nftables.SetElement{{Key: []byte{192, 0, 2, 1}, Timeout: time.Minute}})
		}},
		{"ipv6_addr sets with timeouts", func() error {
			return c.AddSet(set6, []nftables.SetElement{{Key: probeAddr6.AsSlice(), Timeout: time.Minute}})
		}},
		{"set lookups", rule(filter, nfproto(unix.NFPROTO_IPV4), load(expr.PayloadBaseNetworkHeader, 16, 4), lookup(set4.Name),
			nfproto(unix.NFPROTO_IPV6), load(expr.PayloadBaseNetworkHeader, 24, 16), lookup(set6.Name), accept())},
		{"nat redirect", rule(nat, dport(53, 53), redirectTo(f.dnsPort))},
	}

	defer func() {
		c.DelTable(t)
		if derr := c.Flush(); derr != nil && err == nil {
			err = fmt.Errorf("delete probe table: %w", derr)
		}
	}()
	for _, s := range steps {
		if err := s.queue(); err != nil {
			return fmt.Errorf("the kernel lacks nf_tables %s: %w", s.feature, err)
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("the kernel lacks nf_tables %s: %w", s.feature, err)
		}
	}

	if _, err := f.nl.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET); err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("the kernel lacks conntrack over netlink (nf_conntrack_netlink): %w", err)
	}
	return nil
}
