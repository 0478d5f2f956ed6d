package nodefilter

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// CutFlows deletes the node's conntrack entries of the pod's outbound flows that m denies,
// and returns how many it deleted. The filter accepts established flows without looking at
// them again, so a policy change reaches the flows already open only through here. A cut TCP
// flow's next packet is a new flow to the filter, which rejects it with a reset; a cut UDP or
// ICMP flow's next packet is rejected too.
//
// Outbound means: the original direction's source is one of the pod's addresses. So it never
// cuts connections into the pod (kubelet probes, the apiserver's to execd), whose original
// source is the remote. It leaves DNS alone (every query goes to the node's DNS proxy, by the
// redirect, whatever the policy), and the pod's connections to the wait endpoint, which the
// filter lets through whatever the policy. The destination is the original one, before any
// DNAT (kube-proxy's), as the filter sees it.
//
// Call it after the Sync that installs m, and after the DNS proxy has the new policy too: a
// flow the old rules let through and the new ones deny must not be re-opened in between.
func (f *Filter) CutFlows(uid string, m *egressapi.Matcher) (int, error) {
	if m == nil {
		return 0, fmt.Errorf("no matcher")
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return 0, ErrClosed
	}
	st := f.pods[uid]
	if st == nil {
		f.mu.Unlock()
		return 0, fmt.Errorf("cut flows of pod %s: %w", uid, ErrUnknownPod)
	}
	ips := slices.Clone(st.pod.IPs)
	// The walk of the node's conntrack table is done without f.mu: other pods' syncs and the
	// DNS proxy's learning do not wait for it (the netlink handle locks its socket per
	// request); walking keeps Close from closing the handle under it.
	f.walking.RLock()
	defer f.walking.RUnlock()
	f.mu.Unlock()
	ff := &flowFilter{
		pod:      ips,
		node:     f.cfg.nodeAddrs,
		waitPort: f.cfg.waitPort,
		m:        m,
		learned:  func(key string, a netip.Addr) bool { return f.Learned(uid, key, a) },
	}
	total := 0
	var errs []error
	for _, fam := range []struct {
		name string
		af   netlink.InetFamily
	}{{"ipv4", unix.AF_INET}, {"ipv6", unix.AF_INET6}} {
		// The library deletes each matching entry as it walks the dump, and counts those it
		// deleted (or found gone already).
		n, err := f.nl.ConntrackDeleteFilters(netlink.ConntrackTable, fam.af, ff)
		total += int(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("cut %s flows of pod %s: %w", fam.name, uid, err))
		}
	}
	return total, errors.Join(errs...)
}

// flowFilter selects the outbound flows of a pod that a matcher denies.
type flowFilter struct {
	pod      []netip.Addr
	node     []netip.Addr
	waitPort uint16
	m        *egressapi.Matcher
	learned  egressapi.Learned
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (ff *flowFilter) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	fl, ok := ff.outbound(flow)
	if !ok {
		return false
	}
	action, _ := ff.m.MatchFlow(fl, ff.learned)
	return action != egressapi.ActionAllow
}

// outbound is a conntrack entry's destination, as the matcher sees it, if the entry is an
// outbound flow of the pod that its policy governs.
func (ff *flowFilter) outbound(flow *netlink.ConntrackFlow) (egressapi.Flow, bool) {
	src, ok1 := toAddr(flow.Forward.SrcIP)
	dst, ok2 := toAddr(flow.Forward.DstIP)
	if !ok1 || !ok2 || !slices.Contains(ff.pod, src) {
		return egressapi.Flow{}, false // inbound, or another pod's
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
			return egressapi.Flow{}, false // DNS: to the node's proxy, by the redirect
		}
		if fl.Protocol == egressapi.ProtocolTCP && ff.waitPort != 0 && flow.Forward.DstPort == ff.waitPort && slices.Contains(ff.node, dst) {
			return egressapi.Flow{}, false // the wait endpoint: always allowed
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
