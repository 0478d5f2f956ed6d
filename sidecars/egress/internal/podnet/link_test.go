package podnet

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

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
			}
			if tt.bridged {
				want.Bridge, want.BridgeMAC = bridge, bridgeMAC
			}

			got, err := HostLink(n.pod, n.node)
			if err != nil {
				t.Fatalf("HostLink: %v", err)
			}
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
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
				} else if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
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
