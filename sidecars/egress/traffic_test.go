package egress

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/nodefilter"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/podnet"
)

// TestTraffic: a pod's traffic is its interface's counters turned round (the host side
// received what the sandbox sent), with the filter's verdicts and the DNS proxy's answers;
// a pod the enforcer does not hold, or whose interface it has not found, has none.
func TestTraffic(t *testing.T) {
	n := newTestNode(t, t.TempDir())
	n.run(t)
	if _, err := n.Traffic("a"); !errors.Is(err, ErrUnknownPod) {
		t.Errorf("Traffic of a pod never seen: %v, want ErrUnknownPod", err)
	}
	n.ObservePod(sandboxPod("a", ""))
	if _, err := n.Traffic("a"); err == nil {
		t.Error("Traffic of a pod whose interface is not found yet: no error")
	}

	n.net.add("a", "veth-a")
	n.net.mu.Lock()
	n.net.stats["veth-a"] = podnet.Statistics{RxBytes: 100, TxBytes: 2000, RxPackets: 1, TxPackets: 20}
	n.net.mu.Unlock()
	n.f.mu.Lock()
	n.f.counts["a"] = nodefilter.Counters{Allowed: 3, Denied: 4, Spoofed: 5}
	n.f.mu.Unlock()
	n.ObservePod(sandboxPod("a", "10.244.0.10"))
	ctx, cancel := within(10 * time.Second)
	defer cancel()
	if _, err := n.Push(ctx, allowConfig("a", "pypi.org")); err != nil {
		t.Fatal(err)
	}
	n.mu.RLock()
	p := n.pods["a"]
	n.mu.RUnlock()
	n.observeDNS(p, "pypi.org.", true, 0)
	n.observeDNS(p, "pypi.org.", true, 2) // SERVFAIL
	n.observeDNS(p, "evil.example.", false, 3)
	n.observeDNS(p, "evil.example.", false, 3)

	got, err := n.Traffic("a")
	if err != nil {
		t.Fatal(err)
	}
	want := Traffic{RxBytes: 2000, TxBytes: 100, RxPackets: 20, TxPackets: 1, PodCounters: PodCounters{
		ConnectionsAllowed: 3, ConnectionsDenied: 4, ConnectionsSpoofed: 5, DNSAllowed: 1, DNSDenied: 2, DNSFailed: 1,
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Traffic (-want +got):\n%s", diff)
	}
	if c, err := n.Counters("a"); err != nil || c != want.PodCounters {
		t.Errorf("Counters = %+v, %v, want %+v", c, err, want.PodCounters)
	}

	// The sandbox remade: the interface the enforcer found is not the pod's any more.
	n.net.add("a", "veth-a2")
	if _, err := n.Traffic("a"); err == nil {
		t.Error("Traffic through an interface that is not the pod's any more: no error")
	}

	n.ForgetPod("a")
	if _, err := n.Counters("a"); !errors.Is(err, ErrUnknownPod) {
		t.Errorf("Counters of a pod gone: %v, want ErrUnknownPod", err)
	}
}
