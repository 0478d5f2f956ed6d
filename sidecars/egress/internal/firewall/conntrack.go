package firewall

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// CutFlows deletes the conntrack entries of the outbound flows that m denies, and returns how
// many it deleted. The filter accepts established flows without looking at them again, so a
// policy change reaches the flows already open only through here. A cut TCP flow's next
// packet is a new flow to the filter, which rejects it with a reset; a cut UDP or ICMP flow's
// next packet is rejected too.
//
// Outbound means: the original direction's source is one of the namespace's own (non-loopback)
// addresses, and the peer that answers (the reply direction's source) is neither loopback nor
// one of them. So it never cuts connections into the pod (kubelet probes, the apiserver's to
// execd), whose original source is the remote, nor the pod's traffic with itself, nor DNS:
// queries are redirected to the proxy (their reply comes from loopback), and the proxy's own
// upstream queries are not the policy's to decide.
//
// Call it after the Sync that installs m, and after the DNS proxy has the new policy too: a
// flow the old rules let through and the new ones deny must not be re-opened in between.
func (f *Firewall) CutFlows(m *egressapi.Matcher) (int, error) {
	if m == nil {
		return 0, fmt.Errorf("no matcher")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, ErrClosed
	}
	own, err := f.ownAddrs()
	if err != nil {
		return 0, err
	}
	filter := &flowFilter{own: own, m: m, learned: f.Learned}
	total := 0
	var errs []error
	for _, fam := range []struct {
		name string
		af   netlink.InetFamily
	}{{"ipv4", unix.AF_INET}, {"ipv6", unix.AF_INET6}} {
		// The library deletes each matching entry as it walks the dump, and counts those it
		// deleted (or found gone already).
		n, err := f.nl.ConntrackDeleteFilters(netlink.ConntrackTable, fam.af, filter)
		total += int(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("cut %s flows: %w", fam.name, err))
		}
	}
	return total, errors.Join(errs...)
}

// ownAddrs are the namespace's addresses, loopback excluded: a flow from 127.0.0.1 stays in
// the pod.
func (f *Firewall) ownAddrs() (map[netip.Addr]bool, error) {
	addrs, err := f.nl.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	own := map[netip.Addr]bool{}
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		if ip, ok := toAddr(a.IP); ok && !ip.IsLoopback() {
			own[ip] = true
		}
	}
	return own, nil
}

// flowFilter selects the outbound flows a matcher denies.
type flowFilter struct {
	own     map[netip.Addr]bool
	m       *egressapi.Matcher
	learned egressapi.Learned
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (ff *flowFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	fl, ok := outboundFlow(flow, ff.own)
	if !ok {
		return false
	}
	action, _ := ff.m.MatchFlow(fl, ff.learned)
	return action != egressapi.ActionAllow
}

// outboundFlow is a conntrack entry's destination, as the matcher sees it, if the entry is an
// outbound flow that the policy governs.
func outboundFlow(flow *netlink.ConntrackFlow, own map[netip.Addr]bool) (egressapi.Flow, bool) {
	src, ok1 := toAddr(flow.Forward.SrcIP)
	dst, ok2 := toAddr(flow.Forward.DstIP)
	peer, ok3 := toAddr(flow.Reverse.SrcIP)
	if !ok1 || !ok2 || !ok3 {
		return egressapi.Flow{}, false
	}
	if src.IsLoopback() || !own[src] {
		return egressapi.Flow{}, false // inbound, or the pod talking to itself
	}
	if peer.IsLoopback() || own[peer] || dst.IsLoopback() || own[dst] {
		return egressapi.Flow{}, false // stays in the pod (this includes DNS redirected to the proxy)
	}
	fl := egressapi.Flow{Addr: dst}
	switch flow.Forward.Protocol {
	case unix.IPPROTO_TCP:
		fl.Protocol = egressapi.ProtocolTCP
	case unix.IPPROTO_UDP:
		fl.Protocol = egressapi.ProtocolUDP
	}
	if fl.Protocol != "" {
		fl.Port = int32(flow.Forward.DstPort)
		if fl.Port == 53 {
			return egressapi.Flow{}, false // DNS: the proxy's, by mark; the filter lets it by
		}
	}
	return fl, true
}

func toAddr(ip net.IP) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}
