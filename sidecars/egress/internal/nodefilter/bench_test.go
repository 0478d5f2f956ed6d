package nodefilter

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// BenchmarkClaim is what a pool pod's claim costs the filter on a node that holds others: the
// Sync that replaces deny-all with a sandbox's policy, and the one that puts deny-all back (a
// pod's filter goes both ways in a pool's life). Run as root:
//
//	go test -run '^$' -bench Claim ./sidecars/egress/internal/nodefilter/
func BenchmarkClaim(b *testing.B) {
	for _, n := range []int{10, 200} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) { benchmarkClaim(b, n) })
	}
}

func benchmarkClaim(b *testing.B, n int) {
	f, pods, denyAll, own := benchFilter(b, n)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		p := pods[i%n]
		for _, m := range []*egressapi.Matcher{own, denyAll} {
			if changed, err := f.Sync(p, m); err != nil || !changed {
				b.Fatalf("sync %s: changed %v, %v", p.UID, changed, err)
			}
		}
	}
}

// BenchmarkClaimConcurrent is BenchmarkClaim with 16 claims at once (a batch sandbox's
// replicas, or a burst, on one node: the agent's workers and the controller's parallel pushes
// are 16), per claim: the Syncs that meet go in one read of the tables and one transaction.
// Compare with BenchmarkClaim, one at a time, in the same run. Run as root:
//
//	go test -run '^$' -bench Claim ./sidecars/egress/internal/nodefilter/
func BenchmarkClaimConcurrent(b *testing.B) {
	const at = 16
	for _, n := range []int{200} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			f, pods, denyAll, own := benchFilter(b, n)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				var wg sync.WaitGroup
				for j := range at {
					p := pods[(i*at+j)%n]
					wg.Go(func() {
						for _, m := range []*egressapi.Matcher{own, denyAll} {
							if changed, err := f.Sync(p, m); err != nil || !changed {
								b.Errorf("sync %s: changed %v, %v", p.UID, changed, err)
							}
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*at), "ns/claim")
		})
	}
}

// BenchmarkLearn is what the DNS proxy's answer of a name it had not seen costs the filter: an
// address learned for a pod's key (a set element, one commit), on a node of sandboxes. Run as
// root:
//
//	go test -run '^$' -bench Learn ./sidecars/egress/internal/nodefilter/
func BenchmarkLearn(b *testing.B) {
	for _, n := range []int{10, 200} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			f, pods, _, own := benchFilter(b, n)
			for _, p := range pods {
				if _, err := f.Sync(p, own); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				addr := netip.AddrFrom4([4]byte{198, 18 + byte(i>>16&1), byte(i >> 8), byte(i)})
				if err := f.Learn(pods[i%n].UID, "*.pythonhosted.org", []netip.Addr{addr}, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchFilter is a filter in a namespace of its own with n pods on a bridge, each denied
// everything, and the two policies the benchmarks switch between.
func benchFilter(b testing.TB, n int) (f *Filter, pods []Pod, denyAll, own *egressapi.Matcher) {
	requireRoot(b)
	node := newNS(b)
	h := handle(b, node)
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := h.LinkAdd(br); err != nil {
		b.Fatalf("add bridge: %v", err)
	}
	if _, err := readSysctlIn(b, node, "net/bridge/bridge-nf-call-iptables"); err == nil {
		sysctl(b, node, "net/bridge/bridge-nf-call-iptables", "1")
		sysctl(b, node, "net/bridge/bridge-nf-call-ip6tables", "1")
	}
	f, err := New(testOptions(node))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })

	if denyAll, err = egressapi.Compile(nil, egressapi.ActionDeny); err != nil {
		b.Fatal(err)
	}
	own, err = egressapi.Compile([]egressapi.Rule{
		allow("pypi.org", tcp(443)), allow("*.pythonhosted.org", tcp(443)), allow("github.com"),
		allow("10.0.0.0/8", tcp(8080)), deny("169.254.169.254"),
	}, egressapi.ActionDeny)
	if err != nil {
		b.Fatal(err)
	}
	pods = make([]Pod, n)
	for i := range pods {
		name := fmt.Sprintf("veth%d", i)
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MasterIndex: mustIndex(b, h, "br0")}, PeerName: "p" + name}); err != nil {
			b.Fatalf("add veth: %v", err)
		}
		pods[i] = Pod{UID: fmt.Sprintf("uid-%d", i), Iface: name, IPs: []netip.Addr{
			netip.AddrFrom4([4]byte{10, 30, byte(i >> 8), byte(i)}),
			netip.MustParseAddr(fmt.Sprintf("fd00:30::%x", i+1)),
		}}
		if _, err := f.Sync(pods[i], denyAll); err != nil {
			b.Fatal(err)
		}
	}
	return f, pods, denyAll, own
}

func mustIndex(b testing.TB, h *netlink.Handle, name string) int {
	b.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		b.Fatal(err)
	}
	return l.Attrs().Index
}
