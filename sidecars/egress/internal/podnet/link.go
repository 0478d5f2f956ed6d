package podnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// DefaultPodIfName is the name the CNI plugins give a pod's interface.
const DefaultPodIfName = "eth0"

// Link is a pod's veth, both ends: the host side in the node's namespace, the pod side in
// the pod's.
type Link struct {
	// Name is the host-side interface's name, in the node's namespace.
	Name  string
	Index int
	// MAC is the host-side interface's MAC: the next hop of a routed veth.
	MAC net.HardwareAddr
	// Bridge is the Linux bridge the host side is a port of; "" for a routed veth (or one
	// that is a port of something else than a Linux bridge, such as an Open vSwitch).
	Bridge string
	// BridgeMAC is the bridge's MAC: the next hop of a bridge port.
	BridgeMAC net.HardwareAddr
	// PodIfName is the interface's name inside the pod ("eth0").
	PodIfName string
	PodMAC    net.HardwareAddr
	// PodAddrs are the addresses other than link-local ones on the pod's interface, as the
	// pod's kernel has them: none for a gVisor pod, whose netstack holds them.
	PodAddrs []netip.Addr

	// What Verify checks besides the above: the host side's peer (the pod's interface's
	// index, in the pod's namespace) and that namespace's ID in the node's.
	peerIndex, peerNetNsID int
}

// NextHopMAC is the MAC the pod's frames to the node are addressed to: the bridge's for a
// bridge port, the host-side veth's for a routed one.
func (l *Link) NextHopMAC() net.HardwareAddr {
	if l.Bridge != "" {
		return l.BridgeMAC
	}
	return l.MAC
}

// HostLink finds the pod's interface in podNetNS (eth0 if there is one, else its only
// veth) and the other end of that veth in nodeNetNS (0 or netns.None(): the calling
// thread's namespace, the node's for a node agent). Both ends are checked to be each
// other's peer, so an interface index of another namespace is never taken for the peer's.
func HostLink(podNetNS netns.NsHandle, nodeNetNS netns.NsHandle) (*Link, error) {
	if podNetNS <= 0 {
		return nil, errors.New("podnet: no pod network namespace")
	}
	if nodeNetNS <= 0 {
		cur, err := currentNS()
		if err != nil {
			return nil, fmt.Errorf("podnet: the current network namespace: %w", err)
		}
		defer cur.Close()
		nodeNetNS = cur
	}
	if podNetNS.Equal(nodeNetNS) {
		return nil, errors.New("podnet: the pod is in the node's network namespace (host network)")
	}
	hp, err := netlink.NewHandleAt(podNetNS, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("podnet: netlink in the pod's namespace: %w", err)
	}
	defer hp.Close()
	hn, err := netlink.NewHandleAt(nodeNetNS, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("podnet: netlink in the node's namespace: %w", err)
	}
	defer hn.Close()

	pod, err := podLink(hp)
	if err != nil {
		return nil, err
	}
	pa := pod.Attrs()
	// A veth's IFLA_LINK is its peer's index, and IFLA_LINK_NETNSID the peer's namespace
	// as the pod's namespace numbers it.
	if pa.ParentIndex == 0 {
		return nil, fmt.Errorf("podnet: the kernel does not name the peer of the pod's %s", pa.Name)
	}
	if pa.NetNsID < 0 {
		return nil, fmt.Errorf("podnet: the peer of the pod's %s is in the pod's own namespace", pa.Name)
	}
	// The node's namespace has an ID in the pod's: the kernel gave it one when it reported
	// the link, if the peer is there.
	if id, err := hp.GetNetNsIdByFd(int(nodeNetNS)); err != nil {
		return nil, fmt.Errorf("podnet: the node namespace's ID in the pod's: %w", err)
	} else if id != pa.NetNsID {
		return nil, fmt.Errorf("podnet: the peer of the pod's %s is in another namespace than the node's (ID %d, the node's is %d)",
			pa.Name, pa.NetNsID, id)
	}
	host, err := hn.LinkByIndex(pa.ParentIndex)
	if err != nil {
		return nil, fmt.Errorf("podnet: the peer (index %d) of the pod's %s in the node's namespace: %w", pa.ParentIndex, pa.Name, err)
	}
	ha := host.Attrs()
	// And the other way round, so that a link that took the index since is not taken.
	podID, err := hn.GetNetNsIdByFd(int(podNetNS))
	if err != nil {
		return nil, fmt.Errorf("podnet: the pod namespace's ID in the node's: %w", err)
	}
	if host.Type() != "veth" || ha.ParentIndex != pa.Index || ha.NetNsID != podID {
		return nil, fmt.Errorf("podnet: %s (index %d) in the node's namespace is not the peer of the pod's %s", ha.Name, ha.Index, pa.Name)
	}

	l := &Link{
		Name:      ha.Name,
		Index:     ha.Index,
		MAC:       clone(ha.HardwareAddr),
		PodIfName: pa.Name,
		PodMAC:    clone(pa.HardwareAddr),

		peerIndex:   pa.Index,
		peerNetNsID: podID,
	}
	if ha.MasterIndex != 0 {
		m, err := hn.LinkByIndex(ha.MasterIndex)
		if err != nil {
			return nil, fmt.Errorf("podnet: the master (index %d) of %s: %w", ha.MasterIndex, ha.Name, err)
		}
		if m.Type() == "bridge" {
			l.Bridge, l.BridgeMAC = m.Attrs().Name, clone(m.Attrs().HardwareAddr)
		}
	}
	addrs, err := hp.AddrList(pod, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("podnet: the addresses of the pod's %s: %w", pa.Name, err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		if ip = ip.Unmap(); ip.IsLinkLocalUnicast() {
			continue
		}
		l.PodAddrs = append(l.PodAddrs, ip)
	}
	return l, nil
}

// HostLinkAt is HostLink of the network namespace at path (as NetNSPath gives it), from the
// calling thread's namespace.
func HostLinkAt(path string) (*Link, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("podnet: open the network namespace %s: %w", path, err)
	}
	defer ns.Close()
	return HostLink(ns, netns.None())
}

// Verify checks that l is still the pod's host-side interface, from the calling thread's
// namespace (the node's): the interface at l.Index is a veth with l's name and MAC, whose peer
// is the pod's interface in the same namespace as when HostLink found it. One netlink request,
// where HostLink takes several and a look-up of the pod's namespace before them; an error once
// the pod's namespace is gone or its sandbox was remade (the runtime's CNI deletes the veth
// with it, and a new one has another index), which HostLink then finds again.
func (l *Link) Verify() error {
	_, err := l.current()
	return err
}

// Statistics are the kernel's counters of the host side of a pod's veth, since the veth was
// made: what the host side received (RxBytes, RxPackets) is what the pod sent, and the other
// way round.
type Statistics struct {
	RxBytes, TxBytes, RxPackets, TxPackets uint64
}

// Statistics reads the counters of l, from the calling thread's namespace (the node's), in the
// one netlink request of Verify and with its checks: the counters of an interface that took
// l's index since are never taken for the pod's.
func (l *Link) Statistics() (Statistics, error) {
	got, err := l.current()
	if err != nil {
		return Statistics{}, err
	}
	s := got.Attrs().Statistics
	if s == nil {
		return Statistics{}, fmt.Errorf("podnet: the kernel reported no statistics of %s", l.Name)
	}
	return Statistics{RxBytes: s.RxBytes, TxBytes: s.TxBytes, RxPackets: s.RxPackets, TxPackets: s.TxPackets}, nil
}

// current is the interface at l.Index once it is checked to be l still (see Verify).
func (l *Link) current() (netlink.Link, error) {
	if l.Index == 0 || l.peerIndex == 0 {
		return nil, errors.New("podnet: the link was not found by HostLink")
	}
	got, err := netlink.LinkByIndex(l.Index)
	if err != nil {
		return nil, fmt.Errorf("podnet: %s (index %d): %w", l.Name, l.Index, err)
	}
	a := got.Attrs()
	if got.Type() != "veth" || a.Name != l.Name || a.HardwareAddr.String() != l.MAC.String() ||
		a.ParentIndex != l.peerIndex || a.NetNsID != l.peerNetNsID {
		return nil, fmt.Errorf("podnet: the interface at index %d is no longer %s, the peer of the pod's %s", l.Index, l.Name, l.PodIfName)
	}
	return got, nil
}

// podLink is the pod's interface: eth0, which must be a veth, or the namespace's only veth.
func podLink(h *netlink.Handle) (netlink.Link, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("podnet: list the pod's interfaces: %w", err)
	}
	var veths []netlink.Link
	for _, l := range links {
		if l.Attrs().Name == DefaultPodIfName {
			if l.Type() != "veth" {
				return nil, fmt.Errorf("podnet: the pod's %s is a %s, not a veth", DefaultPodIfName, l.Type())
			}
			return l, nil
		}
		if l.Type() == "veth" && l.Attrs().Flags&net.FlagLoopback == 0 {
			veths = append(veths, l)
		}
	}
	switch len(veths) {
	case 1:
		return veths[0], nil
	case 0:
		return nil, errors.New("podnet: the pod's namespace has no veth")
	default:
		var names []string
		for _, l := range veths {
			names = append(names, l.Attrs().Name)
		}
		return nil, fmt.Errorf("podnet: the pod's namespace has no %s and several veths (%s)", DefaultPodIfName, strings.Join(names, ", "))
	}
}

// currentNS is a handle of the calling thread's network namespace.
func currentNS() (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return netns.Get()
}

func clone(mac net.HardwareAddr) net.HardwareAddr {
	if mac == nil {
		return nil
	}
	return append(net.HardwareAddr(nil), mac...)
}
