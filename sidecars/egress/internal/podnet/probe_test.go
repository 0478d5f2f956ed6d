package podnet

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

var (
	testSrcMAC = net.HardwareAddr{0x02, 0x42, 0xac, 0x11, 0x00, 0x02}
	testDstMAC = net.HardwareAddr{0x02, 0x42, 0xac, 0x11, 0x00, 0x01}
)

// onesSum is the Internet checksum's sum of b, folded, computed as RFC 1071 says, apart
// from the code under test: a correctly checksummed header sums to 0xffff.
func onesSum(b ...[]byte) uint16 {
	var all []byte
	for _, p := range b {
		all = append(all, p...)
		if len(all)%2 == 1 {
			all = append(all, 0)
		}
	}
	var s uint64
	for i := 0; i < len(all); i += 2 {
		s += uint64(binary.BigEndian.Uint16(all[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

func TestBuildFrame(t *testing.T) {
	tests := []struct {
		name      string
		src, dst  string
		etherType uint16
		ipLen     int
		frameLen  int
	}{
		{name: "ipv4", src: "10.244.0.5", dst: "10.244.0.1", etherType: 0x0800, ipLen: 20, frameLen: 60},
		{name: "ipv6", src: "fd00:10:244::5", dst: "fd00:10:244::1", etherType: 0x86dd, ipLen: 40, frameLen: 74},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Probe{SrcIP: netip.MustParseAddr(tt.src), DstIP: netip.MustParseAddr(tt.dst), DstPort: 15001, DstMAC: testDstMAC}
			for _, sport := range []uint16{32768, 40000, 60999} {
				frame, et := buildFrame(testSrcMAC, p, sport, 0xdeadbeef, 0x1234)
				if et != tt.etherType || len(frame) != tt.frameLen {
					t.Fatalf("EtherType %#x, %d bytes; want %#x, %d", et, len(frame), tt.etherType, tt.frameLen)
				}
				if !bytes.Equal(frame[0:6], testDstMAC) || !bytes.Equal(frame[6:12], testSrcMAC) || binary.BigEndian.Uint16(frame[12:14]) != tt.etherType {
					t.Errorf("Ethernet header % x", frame[:14])
				}
				ip := frame[14 : 14+tt.ipLen]
				tcp := frame[14+tt.ipLen : 14+tt.ipLen+20]
				var src, dst netip.Addr
				if tt.ipLen == 20 {
					if ip[0] != 0x45 || binary.BigEndian.Uint16(ip[2:4]) != 40 || ip[9] != 6 || ip[8] == 0 || binary.BigEndian.Uint16(ip[6:8]) != 0x4000 {
						t.Errorf("IPv4 header % x", ip)
					}
					if s := onesSum(ip); s != 0xffff {
						t.Errorf("IPv4 header checksum %#04x: sums to %#04x", binary.BigEndian.Uint16(ip[10:12]), s)
					}
					src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
				} else {
					if ip[0]>>4 != 6 || binary.BigEndian.Uint16(ip[4:6]) != 20 || ip[6] != 6 || ip[7] == 0 {
						t.Errorf("IPv6 header % x", ip)
					}
					src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
				}
				if src != p.SrcIP || dst != p.DstIP {
					t.Errorf("addresses %s > %s, want %s > %s", src, dst, p.SrcIP, p.DstIP)
				}
				if binary.BigEndian.Uint16(tcp[0:2]) != sport || binary.BigEndian.Uint16(tcp[2:4]) != 15001 ||
					binary.BigEndian.Uint32(tcp[4:8]) != 0xdeadbeef || binary.BigEndian.Uint32(tcp[8:12]) != 0 ||
					tcp[12] != 0x50 || tcp[13] != 0x02 {
					t.Errorf("TCP header % x: want a SYN from %d to 15001", tcp, sport)
				}
				pseudo := append(append(p.SrcIP.AsSlice(), p.DstIP.AsSlice()...), 0, 6, 0, 20)
				if s := onesSum(pseudo, tcp); s != 0xffff {
					t.Errorf("TCP checksum %#04x: sums to %#04x", binary.BigEndian.Uint16(tcp[16:18]), s)
				}
				if rest := frame[14+tt.ipLen+20:]; !bytes.Equal(rest, make([]byte, len(rest))) {
					t.Errorf("padding % x", rest)
				}
			}
		})
	}
}

func TestProbeValidation(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("fd00::5")
	node4, node6 := netip.MustParseAddr("10.244.0.1"), netip.MustParseAddr("fd00::1")
	ok := Probe{SrcIP: v4, DstIP: node4, DstPort: 1, DstMAC: testDstMAC}
	with := func(f func(*Probe)) Probe { p := ok; f(&p); return p }
	tests := []struct {
		name string
		p    Probe
		want string
	}{
		{"no source", with(func(p *Probe) { p.SrcIP = netip.Addr{} }), "without a source or destination"},
		{"no destination", with(func(p *Probe) { p.DstIP = netip.Addr{} }), "without a source or destination"},
		{"ipv4 to ipv6", with(func(p *Probe) { p.DstIP = node6 }), "different families"},
		{"ipv6 to ipv4", with(func(p *Probe) { p.SrcIP = v6 }), "different families"},
		{"unspecified source", with(func(p *Probe) { p.SrcIP = netip.IPv4Unspecified() }), "not unicast"},
		{"multicast destination", with(func(p *Probe) { p.DstIP = netip.MustParseAddr("ff02::1"); p.SrcIP = v6 }), "not unicast"},
		{"port 0", with(func(p *Probe) { p.DstPort = 0 }), "port 0"},
		{"no MAC", with(func(p *Probe) { p.DstMAC = nil }), "not 6"},
		{"a 20-byte MAC", with(func(p *Probe) { p.DstMAC = make(net.HardwareAddr, 20) }), "not 6"},
		{"broadcast MAC", with(func(p *Probe) { p.DstMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }), "not a unicast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Checked before the namespace is used.
			if err := SendProbe(netns.None(), "eth0", tt.p); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("SendProbe: %v, want an error with %q", err, tt.want)
			}
		})
	}
	// A v4-mapped address is IPv4.
	p, err := with(func(p *Probe) { p.SrcIP = netip.AddrFrom16(v4.As16()) }).validate()
	if err != nil || p.SrcIP != v4 {
		t.Errorf("validate of a v4-mapped source: %+v, %v", p, err)
	}
	if err := SendProbe(netns.None(), "eth0", ok); err == nil || !strings.Contains(err.Error(), "no pod network namespace") {
		t.Errorf("SendProbe without a namespace: %v", err)
	}
}

func TestSendProbe(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name     string
		bridged  bool
		src, dst netip.Addr
		podAddrs []string // none: as a gVisor pod's interface
	}{
		{name: "bridge, ipv4, pod without addresses", bridged: true, src: podIPv4, dst: netip.MustParseAddr("10.244.0.1")},
		{name: "bridge, ipv4, pod with its address", bridged: true, src: podIPv4, dst: netip.MustParseAddr("10.244.0.1"), podAddrs: []string{"10.244.0.5/24"}},
		{name: "bridge, ipv6, pod without addresses", bridged: true, src: podIPv6, dst: netip.MustParseAddr("fd00:10:244::1")},
		{name: "bridge, ipv6, pod with its address", bridged: true, src: podIPv6, dst: netip.MustParseAddr("fd00:10:244::1"), podAddrs: []string{"fd00:10:244::5/64"}},
		{name: "routed, ipv4, pod without addresses", src: podIPv4, dst: netip.MustParseAddr("192.0.2.1")},
		{name: "routed, ipv4, pod with its address", src: podIPv4, dst: netip.MustParseAddr("192.0.2.1"), podAddrs: []string{"10.244.0.5/32"}},
		{name: "routed, ipv6, pod without addresses", src: podIPv6, dst: netip.MustParseAddr("2001:db8::1")},
		{name: "routed, ipv6, pod with its address", src: podIPv6, dst: netip.MustParseAddr("2001:db8::1"), podAddrs: []string{"fd00:10:244::5/128"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newPodNet(t, tt.bridged, "eth0", tt.podAddrs...)
			port := uint16(15000 + i)
			cs := newCounters(t, n.node, port)
			l, err := HostLink(n.pod, n.node)
			if err != nil {
				t.Fatal(err)
			}
			if err := SendProbe(n.pod, l.PodIfName, Probe{SrcIP: tt.src, DstIP: tt.dst, DstPort: port, DstMAC: l.NextHopMAC()}); err != nil {
				t.Fatalf("SendProbe: %v", err)
			}
			// The probe arrived for the node, past its input hook, and the node's TCP took it
			// (its checksums are right): it answered with a RST.
			if in, out := cs.waitFor(t); in != 1 || out != 1 {
				t.Errorf("counted %d probes arriving and %d RSTs leaving, want 1 and 1", in, out)
			}
		})
	}
	t.Run("no such interface", func(t *testing.T) {
		pod := newNS(t)
		err := SendProbe(pod, "eth0", Probe{SrcIP: podIPv4, DstIP: netip.MustParseAddr("10.244.0.1"), DstPort: 1, DstMAC: testDstMAC})
		if err == nil || !strings.Contains(err.Error(), "eth0") {
			t.Errorf("SendProbe: %v, want an error about eth0", err)
		}
	})
}
