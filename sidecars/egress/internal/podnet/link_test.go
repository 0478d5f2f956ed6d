package podnet

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// linkCmp compares Links, their unexported fields too.
var linkCmp = cmp.Options{cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.AllowUnexported(Link{})}

func netNsID(t *testing.T, h *netlink.Handle, ns netns.NsHandle) int {
	t.Helper()
	id, err := h.GetNetNsIdByFd(int(ns))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestLinkVerify(t *testing.T) {
	requireRoot(t)
	n := newPodNet(t, true, "eth0")
	hp, hn := handle(t, n.pod), handle(t, n.node)
	find := func() *Link {
		t.Helper()
		var l *Link
		if err := inNS(n.node, func() (err error) { l, err = HostLinkAt(nsPath(n.pod)); return err }); err != nil {
			t.Fatalf("HostLinkAt: %v", err)
		}
		return l
	}
	verify := func(l *Link) error { return inNS(n.node, l.Verify) }

	l := find()
	if err := verify(l); err != nil {
		t.Fatalf("Verify of the link just found: %v", err)
	}
	if err := verify(&Link{Name: l.Name, Index: l.Index, MAC: l.MAC}); err == nil {
		t.Error("Verify of a Link that HostLink did not find: no error")
	}
	for name, change := range map[string]func(*Link){
		"another name": func(l *Link) { l.Name = "vethother" },
		"another MAC":  func(l *Link) { l.MAC = bridgeMAC },
		"another peer": func(l *Link) { l.peerIndex++ },
	} {
		c := *l
		change(&c)
		if err := verify(&c); err == nil {
			t.Errorf("Verify of the link with %s: no error", name)
		}
	}

	// The pod's sandbox remade: its veth deleted and another one made, with the same names.
	if err := hn.LinkDel(link(t, hn, hostVeth)); err != nil {
		t.Fatal(err)
	}
	if err := verify(l); err == nil {
		t.Error("Verify after the veth was deleted: no error")
	}
	if err := hp.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: hostVeth}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	if err := hp.LinkSetNsFd(link(t, hp, hostVeth), int(n.node)); err != nil {
		t.Fatalf("move veth end: %v", err)
	}
	if err := verify(l); err == nil {
		t.Error("Verify after the veth was made again: no error")
	}
	again := find()
	if again.Index == l.Index {
		t.Fatalf("the new veth has the old one's index %d", l.Index)
	}
	if err := verify(again); err != nil {
		t.Errorf("Verify of the link found again: %v", err)
	}
}

func TestHostLink(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name      string
		bridged   bool
		podIfName string
		podAddrs  []string
		want      []netip.Addr
	}{
		{
			name: "bridge port", bridged: true, podIfName: "eth0",
			// The link-local ones are left out.
			podAddrs: []string{"10.244.0.5/24", "fd00:10:244::5/64", "fe80::5/64", "169.254.3.4/16"},
			want:     []netip.Addr{podIPv4, podIPv6},
		},
		{name: "bridge port, no addresses (gVisor)", bridged: true, podIfName: "eth0"},
		{
			name: "routed veth", podIfName: "eth0",
			podAddrs: []string{"10.244.0.5/32", "10.244.0.6/32"},
			want:     []netip.Addr{podIPv4, netip.MustParseAddr("10.244.0.6")},
		},
		{name: "routed veth, no addresses (gVisor)", podIfName: "eth0"},
		{name: "the only veth, not eth0", bridged: true, podIfName: "net0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newPodNet(t, tt.bridged, tt.podIfName, tt.podAddrs...)
			hp, hn := handle(t, n.pod), handle(t, n.node)
			host, pod := link(t, hn, hostVeth), link(t, hp, tt.podIfName)
			want := &Link{
				Name: hostVeth, Index: host.Attrs().Index, MAC: host.Attrs().HardwareAddr,
				PodIfName: tt.podIfName, PodMAC: pod.Attrs().HardwareAddr, PodAddrs: tt.want,
				peerIndex: pod.Attrs().Index, peerNetNsID: netNsID(t, hn, n.pod),
			}
			if tt.bridged {
				want.Bridge, want.BridgeMAC = bridge, bridgeMAC
			}

			got, err := HostLink(n.pod, n.node)
			if err != nil {
				t.Fatalf("HostLink: %v", err)
			}
			if diff := cmp.Diff(want, got, linkCmp); diff != "" {
				t.Errorf("HostLink (-want +got):\n%s", diff)
			}
			next := want.MAC
			if tt.bridged {
				next = bridgeMAC
			}
			if got.NextHopMAC().String() != next.String() {
				t.Errorf("NextHopMAC %s, want %s", got.NextHopMAC(), next)
			}

			// From the node's namespace, as a node agent calls it: by path, and the current
			// namespace the node's.
			for name, call := range map[string]func() (*Link, error){
				"HostLinkAt":       func() (*Link, error) { return HostLinkAt(nsPath(n.pod)) },
				"HostLink from ns": func() (*Link, error) { return HostLink(n.pod, 0) },
			} {
				var got *Link
				if err := inNS(n.node, func() (err error) { got, err = call(); return err }); err != nil {
					t.Errorf("%s: %v", name, err)
				} else if diff := cmp.Diff(want, got, linkCmp); diff != "" {
					t.Errorf("%s (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}

func TestHostLinkErrors(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name string
		// setup returns the pod's and the node's namespaces.
		setup func(t *testing.T) (pod, node netns.NsHandle)
		want  string
	}{
		{
			name:  "no veth",
			setup: func(t *testing.T) (netns.NsHandle, netns.NsHandle) { return newNS(t), newNS(t) },
			want:  "has no veth",
		},
		{
			name: "eth0 is not a veth",
			setup: func(t *testing.T) (netns.NsHandle, netns.NsHandle) {
				pod := newNS(t)
				if err := handle(t, pod).LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}}); err != nil {
					t.Fatal(err)
				}
				return pod, newNS(t)
			},
			want: "eth0 is a bridge, not a veth",
		},
		{
			name: "several veths, none eth0",
			setup: func(t *testing.T) (netns.NsHandle, netns.NsHandle) {
				pod := newNS(t)
				h := handle(t, pod)
				for _, name := range []string{"net0", "net1"} {
					if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
						t.Fatal(err)
					}
				}
				return pod, newNS(t)
			},
			want: "several veths",
		},
		{
			name: "both ends in the pod",
			setup: func(t *testing.T) (netns.NsHandle, netns.NsHandle) {
				pod := newNS(t)
				if err := handle(t, pod).LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}); err != nil {
					t.Fatal(err)
				}
				return pod, newNS(t)
			},
			want: "in the pod's own namespace",
		},
		{
			name: "the peer in another namespace than the node's",
			setup: func(t *testing.T) (netns.NsHandle, netns.NsHandle) {
				n := newPodNet(t, false, "eth0")
				return n.pod, newNS(t)
			},
			want: "in another namespace than the node's",
		},
		{
			name: "the pod in the node's namespace",
			setup: func(t *testing.T) (netns.NsHandle, netns.NsHandle) {
				n := newPodNet(t, false, "eth0")
				return n.pod, n.pod
			},
			want: "host network",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, node := tt.setup(t)
			l, err := HostLink(pod, node)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("HostLink: %+v, %v; want an error with %q", l, err, tt.want)
			}
		})
	}
	if _, err := HostLinkAt("/nonexistent/netns"); err == nil {
		t.Error("HostLinkAt of a missing path: no error")
	}
}
