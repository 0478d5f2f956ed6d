package nodefilter

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/netnstest"
)

// ---- Namespaces and a node's topology, for the tests that need a kernel (root). ----

func requireRoot(t testing.TB) { netnstest.RequireRoot(t) }

func newNS(t testing.TB) netns.NsHandle { return netnstest.New(t) }

func inNS(ns netns.NsHandle, fn func() error) error { return netnstest.In(ns, fn) }

func handle(t testing.TB, ns netns.NsHandle) *netlink.Handle { return netnstest.Handle(t, ns) }

func sysctl(t testing.TB, ns netns.NsHandle, path, value string) {
	t.Helper()
	netnstest.Sysctl(t, ns, path, value)
}

func readSysctlIn(t testing.TB, ns netns.NsHandle, path string) (string, error) {
	t.Helper()
	return netnstest.ReadSysctl(t, ns, path)
}

// The addresses of the topology. The bridge's subnet has the bridged pods, the routed pod has
// /32 and /128 routes (as the ptp plugin sets up), the outside is one hop away through the node.
var (
	bridgeIP4, bridgeIP6 = netip.MustParseAddr("10.10.0.1"), netip.MustParseAddr("fd00:10::1")
	podAIP4, podAIP6     = netip.MustParseAddr("10.10.0.2"), netip.MustParseAddr("fd00:10::2")
	podBIP4, podBIP6     = netip.MustParseAddr("10.10.0.3"), netip.MustParseAddr("fd00:10::3")
	gwCIP4, gwCIP6       = netip.MustParseAddr("10.10.1.1"), netip.MustParseAddr("fd00:11::1")
	podCIP4, podCIP6     = netip.MustParseAddr("10.10.1.2"), netip.MustParseAddr("fd00:11::2")
	upIP4, upIP6         = netip.MustParseAddr("10.20.0.1"), netip.MustParseAddr("fd00:20::1")
	outIP4, outIP6       = netip.MustParseAddr("10.20.0.2"), netip.MustParseAddr("fd00:20::2")
	// spoofIP4 is an address of the bridge's subnet that no pod has.
	spoofIP4 = netip.MustParseAddr("10.10.0.99")
)

// testPod is a pod of the topology: its namespace, and what the Filter is told about it.
type testPod struct {
	ns netns.NsHandle
	Pod
}

// topology is a node with two bridged pods (a, b), a routed one (c), and an outside host.
type topology struct {
	node, outside netns.NsHandle
	a, b, c       testPod
}

func newTopology(t *testing.T) *topology {
	t.Helper()
	tp := &topology{node: newNS(t), outside: newNS(t)}
	hn := handle(t, tp.node)
	sysctl(t, tp.node, "net/ipv4/ip_forward", "1")
	sysctl(t, tp.node, "net/ipv6/conf/all/forwarding", "1")

	// Without multicast snooping, which would hold back neighbour solicitations until the
	// bridge has heard the listeners' reports.
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}, MulticastSnooping: ptr(false)}
	if err := hn.LinkAdd(br); err != nil {
		t.Fatalf("add bridge: %v", err)
	}
	brl, err := hn.LinkByName("br0")
	if err != nil {
		t.Fatal(err)
	}
	addAddrs(t, hn, brl, "10.10.0.1/24", "fd00:10::1/64")
	if err := hn.LinkSetUp(brl); err != nil {
		t.Fatal(err)
	}
	// br_netfilter's switches are per namespace (if the module is loaded, each new namespace
	// gets its own /proc/sys/net/bridge); turn them on in the node's.
	if _, err := readSysctlIn(t, tp.node, "net/bridge/bridge-nf-call-iptables"); err == nil {
		sysctl(t, tp.node, "net/bridge/bridge-nf-call-iptables", "1")
		sysctl(t, tp.node, "net/bridge/bridge-nf-call-ip6tables", "1")
	}

	tp.a = tp.newPod(t, hn, "uid-pod-a", "veth-a", brl, []string{"10.10.0.2/24", "fd00:10::2/64"},
		[]netip.Addr{podAIP4, podAIP6}, bridgeIP4, bridgeIP6)
	tp.b = tp.newPod(t, hn, "uid-pod-b", "veth-b", brl, []string{"10.10.0.3/24", "fd00:10::3/64"},
		[]netip.Addr{podBIP4, podBIP6}, bridgeIP4, bridgeIP6)

	// The routed pod: a /32 and a /128 on each side, and routes to each other.
	tp.c = tp.newPod(t, hn, "uid-pod-c", "veth-c", nil, []string{"10.10.1.2/32", "fd00:11::2/128"},
		[]netip.Addr{podCIP4, podCIP6}, gwCIP4, gwCIP6)
	hc, err := hn.LinkByName("veth-c")
	if err != nil {
		t.Fatal(err)
	}
	addAddrs(t, hn, hc, "10.10.1.1/32", "fd00:11::1/128")
	for _, dst := range []string{"10.10.1.2/32", "fd00:11::2/128"} {
		if err := hn.RouteAdd(&netlink.Route{LinkIndex: hc.Attrs().Index, Dst: mustIPNet(t, dst), Scope: netlink.SCOPE_LINK}); err != nil {
			t.Fatalf("route %s: %v", dst, err)
		}
	}

	// The outside: a host one routed hop away.
	ho := handle(t, tp.outside)
	if err := ho.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "up0"}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	up, err := ho.LinkByName("up0")
	if err != nil {
		t.Fatal(err)
	}
	if err := ho.LinkSetNsFd(up, int(tp.node)); err != nil {
		t.Fatal(err)
	}
	oe, err := ho.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	addAddrs(t, ho, oe, "10.20.0.2/24", "fd00:20::2/64")
	if err := ho.LinkSetUp(oe); err != nil {
		t.Fatal(err)
	}
	if up, err = hn.LinkByName("up0"); err != nil {
		t.Fatal(err)
	}
	addAddrs(t, hn, up, "10.20.0.1/24", "fd00:20::1/64")
	if err := hn.LinkSetUp(up); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]string{{"10.10.0.0/16", "10.20.0.1"}, {"fd00:10::/31", "fd00:20::1"}} {
		if err := ho.RouteAdd(&netlink.Route{Dst: mustIPNet(t, r[0]), Gw: net.ParseIP(r[1])}); err != nil {
			t.Fatalf("outside route %s: %v", r[0], err)
		}
	}
	return tp
}

// newPod makes a pod namespace with eth0, whose peer (named iface) goes to the node, onto the
// bridge if br is given, and a default route through gw4 and gw6.
func (tp *topology) newPod(t *testing.T, hn *netlink.Handle, uid, iface string, br netlink.Link, cidrs []string, ips []netip.Addr, gw4, gw6 netip.Addr) testPod {
	t.Helper()
	p := testPod{ns: newNS(t), Pod: Pod{UID: uid, Iface: iface, IPs: ips}}
	hp := handle(t, p.ns)
	// Both ends are made in the pod's namespace, never the caller's; the peer then moves.
	if err := hp.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: iface}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	peer, err := hp.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	if err := hp.LinkSetNsFd(peer, int(tp.node)); err != nil {
		t.Fatalf("move veth end: %v", err)
	}
	eth, err := hp.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	addAddrs(t, hp, eth, cidrs...)
	if err := hp.LinkSetUp(eth); err != nil {
		t.Fatal(err)
	}
	for _, gw := range []netip.Addr{gw4, gw6} {
		bits := gw.BitLen()
		// The gateway is on the link (it is in the subnet of a bridged pod, and the routed pod
		// needs it said), then the default route through it.
		if err := hp.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: &net.IPNet{IP: gw.AsSlice(), Mask: net.CIDRMask(bits, bits)}, Scope: netlink.SCOPE_LINK}); err != nil && !errors.Is(err, unix.EEXIST) {
			t.Fatalf("route to %s: %v", gw, err)
		}
		if err := hp.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
			t.Fatalf("default route via %s: %v", gw, err)
		}
	}

	hl, err := hn.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	if br != nil {
		if err := hn.LinkSetMaster(hl, br); err != nil {
			t.Fatalf("%s onto the bridge: %v", iface, err)
		}
	}
	if err := hn.LinkSetUp(hl); err != nil {
		t.Fatal(err)
	}
	return p
}

// newVeth adds an interface named name to ns: a veth, whose other end stays in a namespace
// of its own.
func newVeth(t *testing.T, ns netns.NsHandle, name string) {
	t.Helper()
	other := newNS(t)
	h := handle(t, other)
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: name}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetNsFd(l, int(ns)); err != nil {
		t.Fatalf("move %s: %v", name, err)
	}
}

func mustIPNet(t *testing.T, s string) *net.IPNet {
	t.Helper()
	ipn, err := netlink.ParseIPNet(s)
	if err != nil {
		t.Fatal(err)
	}
	return ipn
}

func addAddrs(t *testing.T, h *netlink.Handle, l netlink.Link, cidrs ...string) {
	t.Helper()
	for _, a := range cidrs {
		// No duplicate address detection: the address is usable at once.
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: mustIPNet(t, a), Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatalf("add %s to %s: %v", a, l.Attrs().Name, err)
		}
	}
}

// ---- Traffic. ----

// echo serves TCP on addr in ns, echoing what it reads.
func echo(t *testing.T, ns netns.NsHandle, addr string) {
	t.Helper()
	var l net.Listener
	if err := inNS(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
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

// dial connects from ns, from the local address from if it is valid.
func dial(ns netns.NsHandle, network string, from netip.Addr, to netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := inNS(ns, func() (err error) {
		d := net.Dialer{Timeout: 10 * time.Second}
		if from.IsValid() {
			switch network {
			case "tcp":
				d.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
			case "udp":
				d.LocalAddr = &net.UDPAddr{IP: from.AsSlice()}
			}
		}
		c, err = d.Dial(network, to.String())
		return err
	})
	return c, err
}

// roundTrip writes a message and reads the answer.
func roundTrip(c net.Conn, msg string) (string, error) {
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, 200)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}
