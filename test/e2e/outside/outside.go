// Package outside gives end-to-end tests (and the benchmark command) hosts "outside" the cluster:
// addresses that are neither a node's nor a pod's, on a network the caller makes and removes,
// with servers the caller controls and counts (HTTP, DNS, plain TCP).
//
// There are two APIs over the same code. Tests use New, AddHost and ServeHTTP / ServeDNS /
// ServeTCP, which take a testing.TB, fail it with t.Fatal and remove what they made with
// t.Cleanup. Other programs use NewNetwork, NewHost and StartHTTP / StartDNS / StartTCP, which
// return errors; Network.Close stops the servers and removes the hosts and the bridge.
//
// New / NewNetwork make a bridge on the host, BridgeName (ksbout0), with GatewayIP/24 and
// GatewayIP6/64. AddHost / NewHost make a network namespace (from Go, held by a file descriptor
// of this process: nothing under /run/netns) with one end of a veth pair as eth0, the other end
// on the bridge, addresses 198.51.100.N/24 and 2001:db8:5b::N/64 and default routes via the
// bridge's addresses.
//
// Pods reach the hosts through the node: their default route is the pod bridge's address, the
// node forwards pod traffic (10.244.0.0/22) to 198.51.100.0/24 through the bridge, and the CNI
// bridge plugin's ipMasq masquerades it, so a host sees GatewayIP as the client and needs no
// route back to the pod network.
//
// Servers run in the calling process: their listening sockets are made on a goroutine whose
// locked OS thread is switched into the host's namespace (a socket stays in the namespace it was
// made in), and are then served as usual. Host.InNamespace does the same for the caller's own
// sockets, e.g. to be a client from a host's side.
//
// All of it needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN). The network is one per machine at a time
// (one bridge name): tests in one process share one Network.
package outside

import (
	"errors"
	"fmt"
	"io"
	"log"
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
	logf   func(format string, args ...any) // for servers' errors and the removal of a stale bridge

	mu     sync.Mutex
	next   int // host number of the next host
	hosts  []*Host
	closed bool
}

// Host is a network namespace on the Network with its own addresses and servers.
type Host struct {
	Name string
	IP   netip.Addr // 198.51.100.N
	IP6  netip.Addr // 2001:db8:5b::N
	// Veth is the name of the bridge side of the host's veth pair (its eth0 is the other).
	Veth string

	ns   netns.NsHandle
	logf func(format string, args ...any)

	// smu guards closed and stops; ns is not closed while smu is held by someone entering it.
	smu    sync.Mutex
	closed bool
	stops  []func() // of the servers still running, in start order

	mu        sync.Mutex
	http      map[int]int    // port -> requests
	conns     map[int]int    // port -> accepted connections
	dnsByName map[string]int // lower-case FQDN -> queries
	dnsTotal  int
}

// New creates the bridge BridgeName with GatewayIP/24 and GatewayIP6/64, as NewNetwork does
// (logging with t.Logf); t.Cleanup removes it and every host added to it (Close). It fails t if
// NewNetwork would return an error.
func New(t testing.TB) *Network {
	t.Helper()
	n, err := newNetwork(t.Logf, func(n *Network) {
		t.Cleanup(func() {
			if err := n.Close(); err != nil {
				t.Logf("%v", err)
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// NewNetwork creates the bridge BridgeName with GatewayIP/24 and GatewayIP6/64; Close removes it
// and every host added to it. A bridge of that name left by a process that died (no ports) is
// removed first (logged with the standard logger); one with ports belongs to a running process,
// and NewNetwork fails. On an error it removes what it made, as far as it can.
func NewNetwork() (*Network, error) {
	return newNetwork(log.Printf, nil)
}

// newNetwork is NewNetwork logging with logf; made, if not nil, is called with the Network once
// the bridge exists (before it has its addresses and is up), to arrange for its Close.
func newNetwork(logf func(string, ...any), made func(*Network)) (*Network, error) {
	if old, err := netlink.LinkByName(BridgeName); err == nil {
		if ports := bridgePorts(old); len(ports) > 0 {
			return nil, fmt.Errorf("outside: %s exists with ports %v: another process uses it", BridgeName, ports)
		}
		logf("outside: removing %s left by an earlier run", BridgeName)
		if err := netlink.LinkDel(old); err != nil {
			return nil, fmt.Errorf("outside: delete stale %s: %w", BridgeName, err)
		}
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: BridgeName}}
	if err := netlink.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("outside: create bridge %s: %w", BridgeName, err)
	}
	n := &Network{next: 2, logf: logf}
	if made != nil {
		made(n)
	}
	fail := func(err error) (*Network, error) {
		if made == nil { // else the caller's cleanup closes it
			_ = n.Close()
		}
		return nil, err
	}
	link, err := netlink.LinkByName(BridgeName)
	if err != nil {
		return fail(fmt.Errorf("outside: %s: %w", BridgeName, err))
	}
	n.bridge = link
	for _, a := range []netip.Prefix{
		netip.PrefixFrom(GatewayIP, Prefix.Bits()),
		netip.PrefixFrom(GatewayIP6, Prefix6.Bits()),
	} {
		if err := netlink.AddrAdd(link, addr(a)); err != nil {
			return fail(fmt.Errorf("outside: add %s to %s: %w", a, BridgeName, err))
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fail(fmt.Errorf("outside: set %s up: %w", BridgeName, err))
	}
	return n, nil
}

// Close stops the servers of the hosts that are still there, removes those hosts, then the
// bridge. It returns what failed (links that could not be deleted); a second Close does nothing.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	hosts := n.hosts
	n.hosts = nil
	n.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		errs = append(errs, h.close())
	}
	if n.bridge != nil {
		if err := netlink.LinkDel(n.bridge); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("outside: delete %s: %w", BridgeName, err))
		}
	}
	return errors.Join(errs...)
}

// AddHost creates a host as NewHost does, failing t if it cannot. t.Cleanup removes it (servers
// first: they are registered later, so their cleanups run earlier), or else Close does.
func (n *Network) AddHost(t testing.TB, name string) *Host {
	t.Helper()
	h, err := n.NewHost(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.close(); err != nil {
			t.Logf("%v", err)
		}
	})
	return h
}

// NewHost creates a host: a fresh network namespace with lo up and eth0 (a veth whose peer is on
// the bridge) carrying the next free 198.51.100.N/24 and 2001:db8:5b::N/64 (N from 2), and
// default routes via GatewayIP and GatewayIP6. Network.Close stops its servers and removes it.
// On an error, nothing it made is left (the host number is used up all the same).
func (n *Network) NewHost(name string) (*Host, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("outside: host %s: the network is closed", name)
	}
	num := n.next
	n.next++
	n.mu.Unlock()
	if num > 254 {
		return nil, fmt.Errorf("outside: no address left for host %q", name)
	}
	h := &Host{
		Name:      name,
		IP:        hostAddr(Prefix, num),
		IP6:       hostAddr(Prefix6, num),
		Veth:      VethPrefix + strconv.Itoa(num),
		logf:      n.logf,
		http:      map[int]int{},
		conns:     map[int]int{},
		dnsByName: map[string]int{},
		ns:        -1,
	}
	ns, err := newNS()
	if err != nil {
		return nil, fmt.Errorf("outside: host %s: %w", name, err)
	}
	h.ns = ns
	if err := n.setUp(h); err != nil {
		_ = h.close()
		return nil, fmt.Errorf("outside: host %s (%s): %w", name, h.IP, err)
	}
	n.mu.Lock()
	if n.closed { // closed meanwhile
		n.mu.Unlock()
		_ = h.close()
		return nil, fmt.Errorf("outside: host %s: the network is closed", name)
	}
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()
	return h, nil
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

// close stops the host's servers (the latest first), removes the bridge side of the veth pair
// (the kernel removes eth0 with it) and lets the namespace go (it lives as long as this handle
// or a socket in it). A second close does nothing.
func (h *Host) close() error {
	h.smu.Lock()
	if h.closed {
		h.smu.Unlock()
		return nil
	}
	h.closed = true
	stops := h.stops
	h.stops = nil
	h.smu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	var errs []error
	if l, err := netlink.LinkByName(h.Veth); err == nil {
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("outside: host %s: delete %s: %w", h.Name, h.Veth, err))
		}
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		errs = append(errs, fmt.Errorf("outside: host %s: %s: %w", h.Name, h.Veth, err))
	}
	if h.ns >= 0 {
		if err := h.ns.Close(); err != nil {
			errs = append(errs, fmt.Errorf("outside: host %s: close namespace: %w", h.Name, err))
		}
	}
	return errors.Join(errs...)
}

// track makes stop (made idempotent) run when the host is closed, or at once, with an error, if
// it already is. It returns the idempotent stop.
func (h *Host) track(stop func()) (func(), error) {
	stop = sync.OnceFunc(stop)
	h.smu.Lock()
	if h.closed {
		h.smu.Unlock()
		stop()
		return nil, fmt.Errorf("outside: host %s is closed", h.Name)
	}
	h.stops = append(h.stops, stop)
	h.smu.Unlock()
	return stop, nil
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

// InNamespace runs fn on a locked OS thread switched into the host's namespace and returns what
// fn returns. Sockets fn makes (listening, or dialled: a client from the host's side) are in the
// host's namespace for good and can be used from any goroutine afterwards. Goroutines fn starts
// are not in the namespace, nor is what dials on goroutines of its own (net/http's Transport):
// dial in fn, or give such a client a dialler that returns connections made in fn. It fails, without running fn, if the host is closed or the thread
// cannot enter the namespace; a thread that cannot switch back is thrown away.
func (h *Host) InNamespace(fn func() error) error {
	c := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			c <- fmt.Errorf("outside: host %s: current namespace: %w", h.Name, err)
			return
		}
		defer orig.Close()
		h.smu.Lock() // h.ns stays open while the thread enters it
		if h.closed {
			h.smu.Unlock()
			runtime.UnlockOSThread()
			c <- fmt.Errorf("outside: host %s is closed", h.Name)
			return
		}
		err = netns.Set(h.ns)
		h.smu.Unlock()
		if err != nil {
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
	err := h.InNamespace(func() error {
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
	err := h.InNamespace(func() error {
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

// ServeHTTP is StartHTTP until t's cleanup (or the host's removal, if that comes first), failing
// t if it cannot start; errors of the server are logged with t.Logf.
func (h *Host) ServeHTTP(t testing.TB, port int, handler http.Handler) {
	t.Helper()
	stop, err := h.startHTTP(port, handler, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// StartHTTP serves handler on IP:port and [IP6]:port of the host until Network.Close, counting
// requests (HTTPRequests) before handler sees them.
func (h *Host) StartHTTP(port int, handler http.Handler) error {
	_, err := h.startHTTP(port, handler, h.logf)
	return err
}

// startHTTP starts the server of StartHTTP, logging its errors with logf, and returns its stop.
func (h *Host) startHTTP(port int, handler http.Handler, logf func(string, ...any)) (func(), error) {
	ls, err := h.listenTCP(port)
	if err != nil {
		return nil, fmt.Errorf("outside: host %s: HTTP on port %d: %w", h.Name, port, err)
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
				logf("outside: host %s: HTTP on %s: %v", h.Name, l.Addr(), err)
			}
		}()
	}
	return h.track(func() {
		srv.Close()
		wg.Wait()
	})
}

// HTTPRequests is the number of requests the HTTP servers on port have received.
func (h *Host) HTTPRequests(port int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.http[port]
}

// ServeTCP is StartTCP until t's cleanup (or the host's removal, if that comes first), failing t
// if it cannot start.
func (h *Host) ServeTCP(t testing.TB, port int) {
	t.Helper()
	stop, err := h.startTCP(port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// StartTCP accepts connections on IP:port and [IP6]:port of the host until Network.Close and
// counts them (Connections) as they are accepted; it sends nothing, reads and discards what a
// client sends and closes a connection when the client does, or after a minute (or when the
// server stops). For port 853 ("DNS over TLS": a client sees the connection made, then no TLS
// handshake) and plain TCP.
func (h *Host) StartTCP(port int) error {
	_, err := h.startTCP(port)
	return err
}

// startTCP starts the server of StartTCP and returns its stop.
func (h *Host) startTCP(port int) (func(), error) {
	ls, err := h.listenTCP(port)
	if err != nil {
		return nil, fmt.Errorf("outside: host %s: TCP on port %d: %w", h.Name, port, err)
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
					return // closed by stop
				}
				h.mu.Lock()
				h.conns[port]++
				h.mu.Unlock()
				cmu.Lock()
				if closed { // accepted just as stop began
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
	return h.track(func() {
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

// Connections is the number of connections the TCP servers on port have accepted.
func (h *Host) Connections(port int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns[port]
}

// ServeDNS is StartDNS until t's cleanup (or the host's removal, if that comes first), failing t
// if it cannot start.
func (h *Host) ServeDNS(t testing.TB, zone map[string][]netip.Addr) {
	t.Helper()
	stop, err := h.startDNS(zone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// StartDNS serves zone on UDP and TCP port 53 of IP and IP6 until Network.Close: A and AAAA
// queries for a name in zone are answered with its IPv4 / IPv6 addresses (TTL DNSTTL; none of
// the type: an empty NOERROR answer), names not in zone with NXDOMAIN. Names are matched
// without regard to case or a final dot. Every query is counted, by name (DNSQueries) and in all
// (DNSQueriesTotal), before it is answered.
func (h *Host) StartDNS(zone map[string][]netip.Addr) error {
	_, err := h.startDNS(zone)
	return err
}

// startDNS starts the servers of StartDNS and returns their stop.
func (h *Host) startDNS(zone map[string][]netip.Addr) (func(), error) {
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
		return nil, fmt.Errorf("outside: host %s: DNS on UDP 53: %w", h.Name, err)
	}
	ls, err := h.listenTCP(53)
	if err != nil {
		for _, pc := range pcs {
			pc.Close()
		}
		return nil, fmt.Errorf("outside: host %s: DNS on TCP 53: %w", h.Name, err)
	}
	var servers []*dns.Server
	for _, pc := range pcs {
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: handler})
	}
	for _, l := range ls {
		servers = append(servers, &dns.Server{Listener: l, Handler: handler})
	}
	var wg sync.WaitGroup
	for i, s := range servers {
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
			for _, s := range servers[:i] {
				_ = s.Shutdown()
			}
			for _, s := range servers[i:] { // not started, or failed: their sockets are still open
				if s.PacketConn != nil {
					s.PacketConn.Close()
				}
				if s.Listener != nil {
					s.Listener.Close()
				}
			}
			wg.Wait()
			return nil, fmt.Errorf("outside: host %s: DNS server: %w", h.Name, err)
		}
	}
	return h.track(func() {
		for _, s := range servers {
			_ = s.Shutdown()
		}
		wg.Wait()
	})
}

// DNSQueries is the number of queries the DNS servers have received for name (any type).
func (h *Host) DNSQueries(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dnsByName[canonical(name)]
}

// DNSQueriesTotal is the number of DNS queries the DNS servers have received.
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
