package egress

import (
	"errors"
	"fmt"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/podnet"
)

// ErrUnknownPod is a pod the enforcer does not hold: not a sandbox pod of this node (yet), or
// gone.
var ErrUnknownPod = errors.New("no such sandbox pod on this node")

// PodCounters are what the enforcer counted of one pod: the verdicts of its filter (in the
// kernel, since its rules went in: they outlive an agent restart) and the answers of its DNS
// proxy (in the agent, since it started). All only grow, as Prometheus counters must.
type PodCounters struct {
	// ConnectionsAllowed and ConnectionsDenied are the new outbound flows the filter let
	// through and dropped; ConnectionsSpoofed the frames from the pod's interface with another
	// source than the pod's, dropped.
	ConnectionsAllowed, ConnectionsDenied, ConnectionsSpoofed uint64
	// DNSAllowed are queries resolved upstream, DNSDenied those the policy answered NXDOMAIN,
	// DNSFailed those the upstreams did not answer.
	DNSAllowed, DNSDenied, DNSFailed uint64
}

// Traffic is a pod's network as the node sees it: the counters of the host side of its veth,
// turned round to be the sandbox's (RX came in to the sandbox), and PodCounters. The veth
// carries every packet of the pod, whatever its runtime: gVisor's network stack, in the
// sandbox, sends through it as runc's kernel stack does.
type Traffic struct {
	RxBytes, TxBytes, RxPackets, TxPackets uint64
	PodCounters
}

// Counters reads the pod's PodCounters: an atomic load per DNS answer and one read of the
// filter's counters, cheap enough for every scrape.
func (n *Node) Counters(uid string) (PodCounters, error) {
	n.mu.RLock()
	p := n.pods[uid]
	if p == nil || p.gone {
		n.mu.RUnlock()
		return PodCounters{}, fmt.Errorf("pod %s: %w", uid, ErrUnknownPod)
	}
	c := PodCounters{DNSAllowed: p.dnsStat.allowed.Load(), DNSDenied: p.dnsStat.denied.Load(), DNSFailed: p.dnsStat.failed.Load()}
	n.mu.RUnlock()
	fc, err := n.filter.Counters(uid)
	if err != nil {
		return PodCounters{}, fmt.Errorf("read the filter's counters of pod %s: %w", uid, err)
	}
	c.ConnectionsAllowed, c.ConnectionsDenied, c.ConnectionsSpoofed = fc.Allowed, fc.Denied, fc.Spoofed
	return c, nil
}

// Traffic reads the pod's Traffic. It fails for a pod whose interface the enforcer has not
// found yet, or whose interface is not the one it found any more (its sandbox remade: the
// next sync finds the new one).
func (n *Node) Traffic(uid string) (Traffic, error) {
	c, err := n.Counters(uid)
	if err != nil {
		return Traffic{}, err
	}
	var l *podnet.Link
	n.mu.RLock()
	if p := n.pods[uid]; p != nil {
		l = p.link
	}
	n.mu.RUnlock()
	if l == nil {
		return Traffic{}, fmt.Errorf("the interface of pod %s is not known yet", uid)
	}
	st, err := n.net.Statistics(l)
	if err != nil {
		return Traffic{}, fmt.Errorf("read the interface counters of pod %s: %w", uid, err)
	}
	// The host side received what the sandbox sent.
	return Traffic{RxBytes: st.TxBytes, TxBytes: st.RxBytes, RxPackets: st.TxPackets, TxPackets: st.RxPackets, PodCounters: c}, nil
}
