package podnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Probe is the TCP SYN SendProbe writes: from the pod's address SrcIP to the node's DstIP
// and DstPort, in an Ethernet frame to DstMAC, the next hop as the pod sees it
// (Link.NextHopMAC: the bridge's MAC for a bridge port, the host-side veth's for a routed
// veth). IPv4 and IPv6 both; the addresses are of one family.
type Probe struct {
	SrcIP, DstIP netip.Addr
	DstPort      uint16
	DstMAC       net.HardwareAddr
}

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	protoTCP      = 6
	// probeTTL is the IPv4 TTL and the IPv6 hop limit: the node is one hop away.
	probeTTL = 64
	// minFrame is the shortest Ethernet frame (without its FCS); shorter ones are padded,
	// as a NIC would. The receiver trims the padding by the IP header's length.
	minFrame = 60
)

// validate checks p and returns it with its addresses unmapped and unzoned.
func (p Probe) validate() (Probe, error) {
	if !p.SrcIP.IsValid() || !p.DstIP.IsValid() {
		return p, errors.New("podnet: probe without a source or destination address")
	}
	p.SrcIP, p.DstIP = p.SrcIP.Unmap().WithZone(""), p.DstIP.Unmap().WithZone("")
	if p.SrcIP.Is4() != p.DstIP.Is4() {
		return p, fmt.Errorf("podnet: probe from %s to %s: the addresses are of different families", p.SrcIP, p.DstIP)
	}
	if p.SrcIP.IsUnspecified() || p.SrcIP.IsMulticast() || p.DstIP.IsUnspecified() || p.DstIP.IsMulticast() {
		return p, fmt.Errorf("podnet: probe from %s to %s: not unicast addresses", p.SrcIP, p.DstIP)
	}
	if p.DstPort == 0 {
		return p, errors.New("podnet: probe to port 0")
	}
	if err := checkMAC(p.DstMAC); err != nil {
		return p, fmt.Errorf("podnet: probe's destination MAC: %w", err)
	}
	return p, nil
}

// checkMAC: a unicast Ethernet address.
func checkMAC(mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("%q is not an Ethernet address (%d bytes, not 6)", mac, len(mac))
	}
	if mac[0]&1 != 0 {
		return fmt.Errorf("%s is not a unicast address", mac)
	}
	return nil
}

// SendProbe writes p as one Ethernet frame into the pod's interface podIfName, from inside
// podNetNS, so that the node receives it as it receives the pod's own traffic. The frame is
// built by hand (the source port random): the interface needs no address in the pod's
// kernel, as a gVisor pod's has none. Nil means the kernel took the frame for the
// interface; whether the node's filter saw it is for the caller to read.
func SendProbe(podNetNS netns.NsHandle, podIfName string, p Probe) error {
	p, err := p.validate()
	if err != nil {
		return err
	}
	if podNetNS <= 0 {
		return errors.New("podnet: no pod network namespace")
	}
	if podIfName == "" {
		podIfName = DefaultPodIfName
	}
	h, err := netlink.NewHandleAt(podNetNS, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("podnet: netlink in the pod's namespace: %w", err)
	}
	l, err := h.LinkByName(podIfName)
	h.Close()
	if err != nil {
		return fmt.Errorf("podnet: the pod's %s: %w", podIfName, err)
	}
	src := l.Attrs().HardwareAddr
	if err := checkMAC(src); err != nil {
		return fmt.Errorf("podnet: the pod's %s: %w", podIfName, err)
	}
	frame, etherType := buildFrame(src, p, uint16(32768+rand.N(61000-32768)), rand.Uint32(), uint16(rand.Uint32()))

	fd, err := packetSocketIn(podNetNS)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifindex := l.Attrs().Index
	// Bound to the interface with protocol 0: the socket receives nothing.
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		return fmt.Errorf("podnet: bind a packet socket to the pod's %s: %w", podIfName, err)
	}
	to := &unix.SockaddrLinklayer{Ifindex: ifindex, Protocol: htons(etherType), Halen: 6}
	copy(to.Addr[:], p.DstMAC)
	if err := unix.Sendto(fd, frame, 0, to); err != nil {
		return fmt.Errorf("podnet: send the probe into the pod's %s: %w", podIfName, err)
	}
	return nil
}

// packetSocketIn is a raw AF_PACKET socket of ns. It is made on a locked thread switched
// into ns, which is switched back, or, if that fails, left locked so that the runtime ends
// it with its goroutine.
func packetSocketIn(ns netns.NsHandle) (int, error) {
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("podnet: the thread's network namespace: %w", err)}
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			// setns changes nothing when it fails.
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("podnet: enter the pod's network namespace: %w", err)}
			return
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err := netns.Set(orig); err != nil {
			if err == nil {
				unix.Close(fd)
			}
			done <- result{-1, fmt.Errorf("podnet: back to the original network namespace: %w", err)}
			return // locked: the thread goes with the goroutine
		}
		runtime.UnlockOSThread()
		if err != nil {
			err = fmt.Errorf("podnet: packet socket in the pod's network namespace: %w", err)
		}
		done <- result{fd, err}
	}()
	r := <-done
	return r.fd, r.err
}

// htons is v in network byte order, as sockaddr_ll's protocol has it.
func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// buildFrame is p as an Ethernet frame from srcMAC, a TCP SYN from sport with sequence
// number seq (and, for IPv4, identification id), and its EtherType. p is valid.
func buildFrame(srcMAC net.HardwareAddr, p Probe, sport uint16, seq uint32, id uint16) ([]byte, uint16) {
	const ethLen, tcpLen = 14, 20
	ipLen, etherType := 20, uint16(etherTypeIPv4)
	if p.SrcIP.Is6() {
		ipLen, etherType = 40, etherTypeIPv6
	}
	frame := make([]byte, max(ethLen+ipLen+tcpLen, minFrame))
	be := binary.BigEndian

	copy(frame[0:6], p.DstMAC)
	copy(frame[6:12], srcMAC)
	be.PutUint16(frame[12:14], etherType)

	ip := frame[ethLen : ethLen+ipLen]
	src, dst := p.SrcIP.AsSlice(), p.DstIP.AsSlice()
	if p.SrcIP.Is4() {
		ip[0] = 0x45 // version 4, 5 words of header
		be.PutUint16(ip[2:4], uint16(ipLen+tcpLen))
		be.PutUint16(ip[4:6], id)
		be.PutUint16(ip[6:8], 0x4000) // don't fragment
		ip[8] = probeTTL
		ip[9] = protoTCP
		copy(ip[12:16], src)
		copy(ip[16:20], dst)
		be.PutUint16(ip[10:12], ^fold(sum(0, ip)))
	} else {
		ip[0] = 0x60 // version 6, no traffic class, no flow label
		be.PutUint16(ip[4:6], tcpLen)
		ip[6] = protoTCP
		ip[7] = probeTTL
		copy(ip[8:24], src)
		copy(ip[24:40], dst)
	}

	tcp := frame[ethLen+ipLen : ethLen+ipLen+tcpLen]
	be.PutUint16(tcp[0:2], sport)
	be.PutUint16(tcp[2:4], p.DstPort)
	be.PutUint32(tcp[4:8], seq)
	tcp[12] = 5 << 4 // data offset: 5 words, no options
	tcp[13] = 0x02   // SYN
	be.PutUint16(tcp[14:16], 64240)
	// The checksum covers the pseudo-header: both addresses, the protocol and the length.
	s := sum(0, src)
	s = sum(s, dst)
	s += protoTCP + tcpLen
	s = sum(s, tcp)
	be.PutUint16(tcp[16:18], ^fold(s))
	return frame, etherType
}

// sum adds b, as big-endian 16-bit words (an odd last byte padded with zero), to s: the
// Internet checksum's one's complement sum, before folding.
func sum(s uint32, b []byte) uint32 {
	for ; len(b) >= 2; b = b[2:] {
		s += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

// fold folds the carries of s into 16 bits.
func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
