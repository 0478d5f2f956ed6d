package podnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/netnstest"
)

func requireRoot(t *testing.T) { netnstest.RequireRoot(t) }

func newNS(t *testing.T) netns.NsHandle { return netnstest.New(t) }

// nsPath is a path that opens ns, as long as the test's process has it open.
func nsPath(ns netns.NsHandle) string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns))
}

func inNS(ns netns.NsHandle, fn func() error) error { return netnstest.In(ns, fn) }

func handle(t *testing.T, ns netns.NsHandle) *netlink.Handle { return netnstest.Handle(t, ns) }

func link(t *testing.T, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

func addAddrs(t *testing.T, h *netlink.Handle, name string, addrs ...string) {
	t.Helper()
	l := link(t, h, name)
	for _, a := range addrs {
		ipn, err := netlink.ParseIPNet(a)
		if err != nil {
			t.Fatal(err)
		}
		// No duplicate address detection: the address is usable at once.
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatalf("add %s to %s: %v", a, name, err)
		}
	}
}

func addRoute(t *testing.T, h *netlink.Handle, dev, dst string) {
	t.Helper()
	_, ipn, err := net.ParseCIDR(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: link(t, h, dev).Attrs().Index, Dst: ipn, Scope: netlink.SCOPE_LINK}); err != nil {
		t.Fatalf("route %s dev %s: %v", dst, dev, err)
	}
}

func setUp(t *testing.T, h *netlink.Handle, name string) {
	t.Helper()
	if err := h.LinkSetUp(link(t, h, name)); err != nil {
		t.Fatalf("%s up: %v", name, err)
	}
}

// Names and addresses of podNet's networks.
const (
	hostVeth = "vethpod0"
	bridge   = "cni0"
)

var (
	bridgeMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0xb2, 0x01}
	bridgeAddrs = []string{"10.244.0.1/24", "fd00:10:244::1/64"}
	routedNode  = []string{"192.0.2.1/32", "2001:db8::1/128"} // the routed host veth's
	podIPv4     = netip.MustParseAddr("10.244.0.5")
	podIPv6     = netip.MustParseAddr("fd00:10:244::5")
)

// podNet is a pod's namespace and a node's, joined by a veth as a CNI plugin does: the
// pod's eth0, and on the node hostVeth, either a port of the bridge (with bridgeAddrs) or a
// routed veth (with routedNode, and routes to the pod's addresses through it).
type podNet struct {
	pod, node netns.NsHandle
}

// newPodNet makes a podNet; podIfName is the pod's interface ("eth0"), podAddrs the
// addresses it has in the pod's kernel (none, as a gVisor pod's). It returns when the
// pod's frames reach the node: the pod's interface is up last, so that its queue is
// attached at once, and a bridge is up (it is when its port forwards).
func newPodNet(t *testing.T, bridged bool, podIfName string, podAddrs ...string) podNet {
	t.Helper()
	n := podNet{pod: newNS(t), node: newNS(t)}
	hp, hn := handle(t, n.pod), handle(t, n.node)
	// Both ends are made in the pod's namespace, never the host's; the host end then moves.
	if err := hp.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: podIfName}, PeerName: hostVeth}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	if err := hp.LinkSetNsFd(link(t, hp, hostVeth), int(n.node)); err != nil {
		t.Fatalf("move veth end: %v", err)
	}
	if bridged {
		// A MAC of its own: a bridge without one takes its lowest port's, the host veth's.
		if err := hn.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridge, HardwareAddr: bridgeMAC}}); err != nil {
			t.Fatalf("add bridge: %v", err)
		}
		if err := hn.LinkSetMaster(link(t, hn, hostVeth), link(t, hn, bridge)); err != nil {
			t.Fatalf("bridge port: %v", err)
		}
		addAddrs(t, hn, bridge, bridgeAddrs...)
		setUp(t, hn, bridge)
	} else {
		addAddrs(t, hn, hostVeth, routedNode...)
	}
	setUp(t, hn, hostVeth)
	if !bridged {
		addRoute(t, hn, hostVeth, podIPv4.String()+"/32")
		addRoute(t, hn, hostVeth, podIPv6.String()+"/128")
	}
	addAddrs(t, hp, podIfName, podAddrs...)
	setUp(t, hp, podIfName)

	nodeAddrs := routedNode
	if bridged {
		nodeAddrs = bridgeAddrs
		poll(t, "the bridge is up", func() (bool, error) {
			l, err := hn.LinkByName(bridge)
			return err == nil && l.Attrs().OperState == netlink.OperUp, err
		})
	}
	// An IPv6 address is the node's (its local route is in) only once its duplicate address
	// detection has run, NODAD or not: in a work queue.
	for _, a := range nodeAddrs {
		ip, _, _ := net.ParseCIDR(a)
		poll(t, a+" is local", func() (bool, error) {
			rs, err := hn.RouteGet(ip)
			return err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL, nil
		})
	}
	return n
}

// poll waits, a bounded time, until cond is true.
func poll(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond()
	}); err != nil {
		t.Fatalf("waiting until %s: %v", what, err)
	}
}

// counters are an nftables table in a node's namespace that counts TCP packets to port
// (arriving for the node: the input hook) and the node's RSTs from it (the output hook).
type counters struct {
	c     *nftables.Conn
	table *nftables.Table
}

func newCounters(t *testing.T, ns netns.NsHandle, port uint16) *counters {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatalf("nftables: %v", err)
	}
	cs := &counters{c: c, table: c.AddTable(&nftables.Table{Name: "podnet_test", Family: nftables.TableFamilyINet})}
	accept := nftables.ChainPolicyAccept
	tcpPort := func(offset uint32) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: offset, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		}
	}
	in := c.AddChain(&nftables.Chain{Name: "in", Table: cs.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: cs.table, Chain: in, Exprs: append(tcpPort(2), &expr.Counter{})})
	out := c.AddChain(&nftables.Chain{Name: "out", Table: cs.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: cs.table, Chain: out, Exprs: append(tcpPort(0),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x04}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0}},
		&expr.Counter{})})
	if err := c.Flush(); err != nil {
		t.Fatalf("nftables: %v", err)
	}
	return cs
}

// packets is the count of the chain's counter.
func (cs *counters) packets(chain string) (uint64, error) {
	rules, err := cs.c.GetRules(cs.table, &nftables.Chain{Name: chain, Table: cs.table})
	if err != nil {
		return 0, err
	}
	for _, r := range rules {
		for _, e := range r.Exprs {
			if c, ok := e.(*expr.Counter); ok {
				return c.Packets, nil
			}
		}
	}
	return 0, fmt.Errorf("no counter in chain %s", chain)
}

// waitFor waits until both counters have counted something, and returns their counts.
func (cs *counters) waitFor(t *testing.T) (in, out uint64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var err error
		if in, err = cs.packets("in"); err != nil {
			return false, err
		}
		if out, err = cs.packets("out"); err != nil {
			return false, err
		}
		return in > 0 && out > 0, nil
	})
	if err != nil {
		t.Fatalf("counted %d probes arriving and %d RSTs leaving: %v", in, out, err)
	}
	return in, out
}
