//go:build e2e

// Package outside gives end-to-end tests hosts "outside" the cluster: addresses that are neither
// a node's nor a pod's, on a network the test makes and removes, with servers the test controls
// and counts (HTTP, DNS, plain TCP).
//
// New makes a bridge on the host, BridgeName (ksbout0), with GatewayIP/24 and GatewayIP6/64.
// AddHost makes a network namespace (from Go, held by a file descriptor of this process: nothing
// under /run/netns) with one end of a veth pair as eth0, the other end on the bridge, addresses
// 198.51.100.N/24 and 2001:db8:5b::N/64 and default routes via the bridge's addresses.
//
// Pods reach the hosts through the node: their default route is the pod bridge's address, the
// node forwards pod traffic (10.244.0.0/22) to 198.51.100.0/24 through the bridge, and the CNI
// bridge plugin's ipMasq masquerades it, so a host sees GatewayIP as the client and needs no
// route back to the pod network.
//
// Servers run in the test process: their listening sockets are made on a goroutine whose locked
// OS thread is switched into the host's namespace (a socket stays in the namespace it was made
// in), and are then served as usual. Everything is removed by t.Cleanup.
//
// All of it needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN). The network is one per machine at a time
// (one bridge name): tests in one process share one Network.
package outside

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The outside network: TEST-NET-2 and a documentation IPv6 prefix, never routed anywhere real.
const (
	BridgeName = "ksbout0"
	// VethPrefix names the bridge side of each host's veth pair: VethPrefix + N.
	VethPrefix = "ksbo-"
	// DNSTTL is the TTL of the DNS server's answers, in seconds.
	DNSTTL = 30
)

var (
	Prefix     = netip.MustParsePrefix("198.51.100.0/24")
	Prefix6    = netip.MustParsePrefix("2001:db8:5b::/64")
	GatewayIP  = netip.MustParseAddr("198.51.100.1")
	GatewayIP6 = netip.MustParseAddr("2001:db8:5b::1")
)

// Network is the bridge BridgeName and the hosts on it.
type Network struct {
	bridge netlink.Link

	mu    sync.Mutex
	next  int // host number of the next AddHost
	hosts []*Host
}

// Host is a network namespace on the Network with its own addresses and servers.
type Host struct {
	Name string
	IP   netip.Addr // 198.51.100.N
	IP6  netip.Addr // 2001:db8:5b::N
	// Veth is the name of the bridge side of the host's veth pair (its eth0 is the other).
	Veth string

	ns        netns.NsHandle
	closeOnce sync.Once

	mu        sync.Mutex
	http      map[int]int    // port -> requests
	conns     map[int]int    // port -> accepted connections
	dnsByName map[string]int // lower-case FQDN -> queries
	dnsTotal  int
}

// New creates the bridge BridgeName with GatewayIP/24 and GatewayIP6/64; t.Cleanup removes it
// and every host added to it. A bridge of that name left by a test process that died (no ports)
// is removed first; one with ports belongs to a running test, and New fails.
func New(t testing.TB) *Network {
	t.Helper()
	if old, err := netlink.LinkByName(BridgeName); err == nil {
		if ports := bridgePorts(old); len(ports) > 0 {
			t.Fatalf("outside: %s exists with ports %v: another test process uses it", BridgeName, ports)
		}
		t.Logf("outside: removing %s left by an earlier run", BridgeName)
		if err := netlink.LinkDel(old); err != nil {
			t.Fatalf("outside: delete stale %s: %v", BridgeName, err)
		}
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: BridgeName}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatalf("outside: create bridge %s: %v", BridgeName, err)
	}
	n := &Network{next: 2}
	t.Cleanup(n.close)
	link, err := netlink.LinkByName(BridgeName)
	if err != nil {
		t.Fatalf("outside: %s: %v", BridgeName, err)
	}
	n.bridge = link
	for _, a := range []netip.Prefix{
		netip.PrefixFrom(GatewayIP, Prefix.Bits()),
		netip.PrefixFrom(GatewayIP6, Prefix6.Bits()),
	} {
		if err := netlink.AddrAdd(link, addr(a)); err != nil {
			t.Fatalf("outside: add %s to %s: %v", a, BridgeName, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatalf("outside: set %s up: %v", BridgeName, err)
	}
	return n
}

// close removes the hosts that are still there, then the bridge.
func (n *Network) close() {
	n.mu.Lock()
	hosts := n.hosts
	n.hosts = nil
	n.mu.Unlock()
	for _, h := range hosts {
		h.close()
	}
	if n.bridge != nil {
		_ = netlink.LinkDel(n.bridge)
	}
}

// AddHost creates a host: a fresh network namespace with lo up and eth0 (a veth whose peer is on
// the bridge) carrying the next free 198.51.100.N/24 and 2001:db8:5b::N/64 (N from 2), and
// default routes via GatewayIP and GatewayIP6. t.Cleanup removes it (servers first: they are
// registered later, so their cleanups run earlier).
func (n *Network) AddHost(t testing.TB, name string) *Host {
	t.Helper()
	n.mu.Lock()
	num := n.next
	n.next++
	n.mu.Unlock()
	if num > 254 {
		t.Fatalf("outside: no address left for host %q", name)
	}
	h := &Host{
		Name:      name,
		IP:        hostAddr(Prefix, num),
		IP6:       hostAddr(Prefix6, num),
		Veth:      VethPrefix + strconv.Itoa(num),
		http:      map[int]int{},
		conns:     map[int]int{},
		dnsByName: map[string]int{},
		ns:        -1,
	}
	ns, err := newNS()
	if err != nil {
		t.Fatalf("outside: host %s: %v", name, err)
	}
	h.ns = ns
	n.mu.Lock()
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()
	t.Cleanup(h.close)
	if err := n.setUp(h); err != nil {
		t.Fatalf("outside: host %s (%s): %v", name, h.IP, err)
	}
	return h
}

func (n *Network) setUp(h *Host) error {
	// The peer is created right in the namespace, named eth0 there.
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: h.Veth, MasterIndex: n.bridge.Attrs().Index},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(h.ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", h.Veth, err)
	}
	hostEnd, err := netlink.LinkByName(h.Veth)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(hostEnd); err != nil {
		return fmt.Errorf("%s up: %w", h.Veth, err)
	}
	nh, err := netlink.NewHandleAt(h.ns)
	if err != nil {
		return fmt.Errorf("netlink in the namespace: %w", err)
	}
	defer nh.Close()
	lo, err := nh.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := nh.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	eth, err := nh.LinkByName("eth0")
	if err != nil {
		return err
	}
	for _, a := range []netip.Prefix{netip.PrefixFrom(h.IP, Prefix.Bits()), netip.PrefixFrom(h.IP6, Prefix6.Bits())} {
		if err := nh.AddrAdd(eth, addr(a)); err != nil {
			return fmt.Errorf("add %s to eth0: %w", a, err)
		}
	}
	if err := nh.LinkSetUp(eth); err != nil {
		return fmt.Errorf("eth0 up: %w", err)
	}
	for _, gw := range []netip.Addr{GatewayIP, GatewayIP6} {
		r := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw.AsSlice()}
		if err := nh.RouteAdd(r); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	return nil
}

// close removes the bridge side of the veth pair (the kernel removes eth0 with it) and lets the
// namespace go (it lives as long as this handle or a socket in it).
func (h *Host) close() {
	h.closeOnce.Do(func() {
		if l, err := netlink.LinkByName(h.Veth); err == nil {
			_ = netlink.LinkDel(l)
		}
		if h.ns >= 0 {
			_ = h.ns.Close()
		}
	})
}

// newNS creates a network namespace and returns a handle on it. The calling OS thread enters
// it (netns.New unshares), so this runs on a locked thread of its own that switches back, and
// is thrown away (left locked when its goroutine ends) if switching back fails.
func newNS() (netns.NsHandle, error) {
	type res struct {
		ns  netns.NsHandle
		err error
	}
	c := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			c <- res{-1, err}
			return
		}
		defer orig.Close()
		ns, err := netns.New()
		if err != nil {
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			c <- res{-1, fmt.Errorf("new network namespace: %w", err)}
			return
		}
		if err := netns.Set(orig); err != nil {
			ns.Close()
			c <- res{-1, fmt.Errorf("back to the original namespace: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		c <- res{ns, nil}
	}()
	r := <-c
	return r.ns, r.err
}

// inNS runs fn on a locked OS thread switched into the host's namespace: sockets fn makes are in
// the host's namespace for good.
func (h *Host) inNS(fn func() error) error {
	c := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			c <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(h.ns); err != nil {
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			c <- fmt.Errorf("enter namespace of host %s: %w", h.Name, err)
			return
		}
		err = fn()
		if e := netns.Set(orig); e == nil {
			runtime.UnlockOSThread()
		} // else the thread ends with this goroutine
		c <- err
	}()
	return <-c
}

// listenTCP makes TCP listeners on IP:port and [IP6]:port in the host's namespace.
func (h *Host) listenTCP(port int) ([]net.Listener, error) {
	var ls []net.Listener
	err := h.inNS(func() error {
		for _, ip := range []netip.Addr{h.IP, h.IP6} {
			l, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String())
			if err != nil {
				return err
			}
			ls = append(ls, l)
		}
		return nil
	})
	if err != nil {
		for _, l := range ls {
			l.Close()
		}
		return nil, err
	}
	return ls, nil
}

// listenUDP makes UDP sockets on IP:port and [IP6]:port in the host's namespace.
func (h *Host) listenUDP(port int) ([]net.PacketConn, error) {
	var pcs []net.PacketConn
	err := h.inNS(func() error {
		for _, ip := range []netip.Addr{h.IP, h.IP6} {
			pc, err := net.ListenPacket("udp", netip.AddrPortFrom(ip, uint16(port)).String())
			if err != nil {
				return err
			}
			pcs = append(pcs, pc)
		}
		return nil
	})
	if err != nil {
		for _, pc := range pcs {
			pc.Close()
		}
		return nil, err
	}
	return pcs, nil
}

// Addr is IP:port, for clients.
func (h *Host) Addr(port int) string { return netip.AddrPortFrom(h.IP, uint16(port)).String() }

// Addr6 is [IP6]:port, for clients.
func (h *Host) Addr6(port int) string { return netip.AddrPortFrom(h.IP6, uint16(port)).String() }

// ServeHTTP serves handler on IP:port and [IP6]:port of the host until t's cleanup, counting
// requests (HTTPRequests) before handler sees them.
func (h *Host) ServeHTTP(t testing.TB, port int, handler http.Handler) {
	t.Helper()
	ls, err := h.listenTCP(port)
	if err != nil {
		t.Fatalf("outside: host %s: HTTP on port %d: %v", h.Name, port, err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.mu.Lock()
			h.http[port]++
			h.mu.Unlock()
			handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Logf("outside: host %s: HTTP on %s: %v", h.Name, l.Addr(), err)
			}
		}()
	}
	t.Cleanup(func() {
		srv.Close()
		wg.Wait()
	})
}

// HTTPRequests is the number of requests ServeHTTP on port has received.
func (h *Host) HTTPRequests(port int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.http[port]
}

// ServeTCP accepts connections on IP:port and [IP6]:port of the host until t's cleanup and
// counts them (Connections) as they are accepted; it sends nothing, reads and discards what a
// client sends and closes a connection when the client does, or after a minute. For port 853
// ("DNS over TLS": a client sees the connection made, then no TLS handshake) and plain TCP.
func (h *Host) ServeTCP(t testing.TB, port int) {
	t.Helper()
	ls, err := h.listenTCP(port)
	if err != nil {
		t.Fatalf("outside: host %s: TCP on port %d: %v", h.Name, port, err)
	}
	var wg sync.WaitGroup
	var cmu sync.Mutex
	open := map[net.Conn]struct{}{}
	closed := false
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return // closed by the cleanup
				}
				h.mu.Lock()
				h.conns[port]++
				h.mu.Unlock()
				cmu.Lock()
				if closed { // accepted just as the cleanup began
					cmu.Unlock()
					c.Close()
					return
				}
				open[c] = struct{}{}
				cmu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = c.SetDeadline(time.Now().Add(time.Minute))
					_, _ = io.Copy(io.Discard, c)
					c.Close()
					cmu.Lock()
					delete(open, c)
					cmu.Unlock()
				}()
			}
		}()
	}
	t.Cleanup(func() {
		for _, l := range ls {
			l.Close()
		}
		cmu.Lock()
		closed = true
		for c := range open {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
}

// Connections is the number of connections ServeTCP on port has accepted.
func (h *Host) Connections(port int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns[port]
}

// ServeDNS serves zone on UDP and TCP port 53 of IP and IP6 until t's cleanup: A and AAAA
// queries for a name in zone are answered with its IPv4 / IPv6 addresses (TTL DNSTTL; none of
// the type: an empty NOERROR answer), names not in zone with NXDOMAIN. Names are matched
// without regard to case or a final dot. Every query is counted, by name (DNSQueries) and in all
// (DNSQueriesTotal), before it is answered.
func (h *Host) ServeDNS(t testing.TB, zone map[string][]netip.Addr) {
	t.Helper()
	z := make(map[string][]netip.Addr, len(zone))
	for name, addrs := range zone {
		z[canonical(name)] = append([]netip.Addr(nil), addrs...)
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		h.mu.Lock()
		h.dnsTotal++
		for _, q := range req.Question {
			h.dnsByName[canonical(q.Name)]++
		}
		h.mu.Unlock()
		for _, q := range req.Question {
			addrs, ok := z[canonical(q.Name)]
			if !ok {
				m.Rcode = dns.RcodeNameError
				continue
			}
			hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: DNSTTL}
			for _, a := range addrs {
				a = a.Unmap()
				switch {
				case q.Qtype == dns.TypeA && a.Is4():
					hdr.Rrtype = dns.TypeA
					m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
				case q.Qtype == dns.TypeAAAA && a.Is6():
					hdr.Rrtype = dns.TypeAAAA
					m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
				}
			}
		}
		_ = w.WriteMsg(m)
	})
	pcs, err := h.listenUDP(53)
	if err != nil {
		t.Fatalf("outside: host %s: DNS on UDP 53: %v", h.Name, err)
	}
	ls, err := h.listenTCP(53)
	if err != nil {
		for _, pc := range pcs {
			pc.Close()
		}
		t.Fatalf("outside: host %s: DNS on TCP 53: %v", h.Name, err)
	}
	var servers []*dns.Server
	for _, pc := range pcs {
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: handler})
	}
	for _, l := range ls {
		servers = append(servers, &dns.Server{Listener: l, Handler: handler})
	}
	var wg sync.WaitGroup
	for _, s := range servers {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- s.ActivateAndServe()
		}()
		select {
		case <-started:
		case err := <-errc:
			t.Fatalf("outside: host %s: DNS server: %v", h.Name, err)
		}
	}
	t.Cleanup(func() {
		for _, s := range servers {
			_ = s.Shutdown()
		}
		wg.Wait()
	})
}

// DNSQueries is the number of queries ServeDNS has received for name (any type).
func (h *Host) DNSQueries(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dnsByName[canonical(name)]
}

// DNSQueriesTotal is the number of DNS queries ServeDNS has received.
func (h *Host) DNSQueriesTotal() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dnsTotal
}

func canonical(name string) string { return dns.Fqdn(strings.ToLower(name)) }

// hostAddr is the address number num in p (num < 255).
func hostAddr(p netip.Prefix, num int) netip.Addr {
	b := p.Addr().AsSlice()
	b[len(b)-1] = byte(num)
	a, _ := netip.AddrFromSlice(b)
	return a
}

// addr is p as a netlink address; IPv6 without duplicate address detection, so that it is usable
// (bind, source) at once rather than tentative for a second or two.
func addr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   p.Addr().AsSlice(),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

// bridgePorts names the links whose master is br.
func bridgePorts(br netlink.Link) []string {
	links, err := netlink.LinkList()
	if err != nil {
		return nil
	}
	var names []string
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			names = append(names, l.Attrs().Name)
		}
	}
	return names
}
