package podnet

import (
	"net/netip"
	"testing"
)

// TestLinkStatistics: the host side of the veth counts what the pod sends as received, and
// a link that is not the pod's any more has no statistics.
func TestLinkStatistics(t *testing.T) {
	requireRoot(t)
	n := newPodNet(t, false, "eth0")
	hn := handle(t, n.node)
	var l *Link
	if err := inNS(n.node, func() (err error) { l, err = HostLinkAt(nsPath(n.pod)); return err }); err != nil {
		t.Fatalf("HostLinkAt: %v", err)
	}
	read := func() (s Statistics, err error) {
		err = inNS(n.node, func() (err error) { s, err = l.Statistics(); return err })
		return s, err
	}
	before, err := read()
	if err != nil {
		t.Fatalf("Statistics: %v", err)
	}
	const frames = 3
	for range frames {
		if err := SendProbe(n.pod, l.PodIfName, Probe{SrcIP: podIPv4, DstIP: netip.MustParseAddr("192.0.2.1"), DstPort: 15999, DstMAC: l.NextHopMAC()}); err != nil {
			t.Fatalf("SendProbe: %v", err)
		}
	}
	var after Statistics
	poll(t, "the frames counted", func() (bool, error) {
		after, err = read()
		return err == nil && after.RxPackets >= before.RxPackets+frames, err
	})
	if after.RxBytes <= before.RxBytes {
		t.Errorf("received bytes %d, then %d: want more", before.RxBytes, after.RxBytes)
	}

	if err := hn.LinkDel(link(t, hn, hostVeth)); err != nil {
		t.Fatal(err)
	}
	if _, err := read(); err == nil {
		t.Error("Statistics after the veth was deleted: no error")
	}
}
