//go:build e2e

package outside

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
)

// TestOutside needs no cluster: from the host's namespace it talks to the servers of two hosts,
// then checks that the cleanup left no bridge and no veth behind.
func TestOutside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a bridge, veths and network namespaces")
	}
	t.Run("network", func(t *testing.T) {
		n := New(t)
		web := n.AddHost(t, "web")
		ns := n.AddHost(t, "ns")
		if web.IP != netip.MustParseAddr("198.51.100.2") || web.IP6 != netip.MustParseAddr("2001:db8:5b::2") ||
			ns.IP != netip.MustParseAddr("198.51.100.3") || ns.IP6 != netip.MustParseAddr("2001:db8:5b::3") {
			t.Fatalf("addresses: web %s %s, ns %s %s", web.IP, web.IP6, ns.IP, ns.IP6)
		}
		for _, h := range []*Host{web, ns} {
			checkDefaultRoutes(t, h)
		}
		t.Run("http", func(t *testing.T) { testHTTP(t, web) })
		t.Run("dns", func(t *testing.T) { testDNS(t, ns) })
		t.Run("tcp", func(t *testing.T) { testTCP(t, ns) })
	})
	// the cleanups of "network" have run
	if _, err := netlink.LinkByName(BridgeName); err == nil {
		t.Errorf("link %s still there after the cleanup", BridgeName)
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("link %s: %v", BridgeName, err)
	}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		// (other veths, of the cluster's pods for one, may come and go meanwhile)
		if strings.HasPrefix(l.Attrs().Name, VethPrefix) {
			t.Errorf("link %s (%s) still there after the cleanup", l.Attrs().Name, l.Type())
		}
	}
}

// TestNetworkAPI drives the error-returning API, as a program without a testing.T would: servers
// started on hosts stay until Network.Close, which stops them and removes everything; a client
// made in a host's namespace (InNamespace) reaches another host with the host's address.
func TestNetworkAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a bridge, veths and network namespaces")
	}
	n, err := NewNetwork()
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			n.Close()
		}
	})
	client, err := n.NewHost("client")
	if err != nil {
		t.Fatal(err)
	}
	server, err := n.NewHost("server")
	if err != nil {
		t.Fatal(err)
	}
	if client.IP != netip.MustParseAddr("198.51.100.2") || server.IP != netip.MustParseAddr("198.51.100.3") {
		t.Fatalf("addresses: client %s, server %s", client.IP, server.IP)
	}
	v4 := netip.MustParseAddr("203.0.113.9")
	if err := server.StartDNS(map[string][]netip.Addr{"bench.example": {v4}}); err != nil {
		t.Fatal(err)
	}
	if err := server.StartTCP(5000); err != nil {
		t.Fatal(err)
	}
	var remote string
	if err := server.StartHTTP(8080, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.RemoteAddr)
	})); err != nil {
		t.Fatal(err)
	}
	// the port is taken: an error, not a t.Fatal
	if err := server.StartTCP(8080); err == nil {
		t.Error("StartTCP on the port of the HTTP server: no error")
	}

	// from the client host's namespace: DNS over UDP and TCP, and HTTP, to the server host
	var tcpConn net.Conn
	err = client.InNamespace(func() error {
		for _, netw := range []string{"udp", "tcp"} {
			c := &dns.Client{Net: netw, Timeout: 3 * time.Second}
			m := new(dns.Msg)
			m.SetQuestion("bench.example.", dns.TypeA)
			r, _, err := c.Exchange(m, server.Addr(53))
			if err != nil {
				return err
			}
			if a, ok := r.Answer[0].(*dns.A); len(r.Answer) != 1 || !ok || !a.A.Equal(v4.AsSlice()) {
				return errors.New("unexpected answer: " + r.String())
			}
		}
		// (not http.Client: its Transport dials on goroutines of its own, outside the namespace)
		hc, err := net.DialTimeout("tcp", server.Addr6(8080), 3*time.Second)
		if err != nil {
			return err
		}
		defer hc.Close()
		hc.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(hc, "GET / HTTP/1.0\r\nHost: server\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(hc), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		remote = string(body)
		// a connection dialled here stays in the namespace, used after InNamespace returns
		tcpConn, err = net.DialTimeout("tcp", server.Addr(5000), 3*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("InNamespace: %v", err)
	}
	if !strings.HasPrefix(remote, "["+client.IP6.String()+"]:") {
		t.Errorf("HTTP client seen as %s, want %s (the client host, not the bridge)", remote, client.IP6)
	}
	defer tcpConn.Close()
	if _, err := tcpConn.Write([]byte("x")); err != nil {
		t.Errorf("write outside InNamespace: %v", err)
	}
	waitFor(t, func() bool { return server.Connections(5000) == 1 }, "Connections(5000) == 1")
	if got := server.DNSQueries("bench.example"); got != 2 {
		t.Errorf("DNSQueries = %d, want 2", got)
	}
	if got := server.HTTPRequests(8080); got != 1 {
		t.Errorf("HTTPRequests(8080) = %d, want 1", got)
	}
	// from this process's namespace, the servers are there until Close
	addr := server.Addr(8080)
	if c, err := net.DialTimeout("tcp", addr, 3*time.Second); err != nil {
		t.Fatalf("dial %s before Close: %v", addr, err)
	} else {
		c.Close()
	}

	if err := n.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	closed = true
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// (no dial after Close to see the servers gone: without the bridge, 198.51.100.0/24 follows
	// the default route, where on some machines something accepts any connection)
	if _, err := netlink.LinkByName(BridgeName); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("link %s after Close: %v", BridgeName, err)
	}
	for _, h := range []*Host{client, server} {
		if _, err := netlink.LinkByName(h.Veth); !errors.As(err, new(netlink.LinkNotFoundError)) {
			t.Errorf("link %s after Close: %v", h.Veth, err)
		}
		if err := h.InNamespace(func() error { return nil }); err == nil {
			t.Errorf("InNamespace on host %s after Close: no error", h.Name)
		}
		if err := h.StartTCP(6000); err == nil {
			t.Errorf("StartTCP on host %s after Close: no error", h.Name)
		}
	}
	if _, err := n.NewHost("late"); err == nil {
		t.Error("NewHost after Close: no error")
	}
}

func checkDefaultRoutes(t *testing.T, h *Host) {
	t.Helper()
	nh, err := netlink.NewHandleAt(h.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	for family, gw := range map[int]netip.Addr{netlink.FAMILY_V4: GatewayIP, netlink.FAMILY_V6: GatewayIP6} {
		routes, err := nh.RouteList(nil, family)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range routes {
			if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(gw.AsSlice()) {
				found = true
			}
		}
		if !found {
			t.Errorf("host %s: no default route via %s in %v", h.Name, gw, routes)
		}
	}
}

func testHTTP(t *testing.T, h *Host) {
	var mu sync.Mutex
	var clients []string
	h.ServeHTTP(t, 8080, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		clients = append(clients, r.RemoteAddr)
		mu.Unlock()
		io.WriteString(w, "hello from "+h.Name)
	}))
	c := &http.Client{Timeout: 5 * time.Second}
	for i, addr := range []string{h.Addr(8080), h.Addr6(8080)} {
		resp, err := c.Get("http://" + addr + "/x")
		if err != nil {
			t.Fatalf("GET %s: %v", addr, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "hello from web" {
			t.Fatalf("GET %s: %d %q", addr, resp.StatusCode, body)
		}
		if got := h.HTTPRequests(8080); got != i+1 {
			t.Fatalf("HTTPRequests(8080) = %d after %d requests", got, i+1)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// from the host's namespace the client is the bridge address
	if len(clients) != 2 || !strings.HasPrefix(clients[0], GatewayIP.String()+":") ||
		!strings.HasPrefix(clients[1], "["+GatewayIP6.String()+"]:") {
		t.Errorf("clients %v, want %s and %s", clients, GatewayIP, GatewayIP6)
	}
	if got := h.HTTPRequests(9999); got != 0 {
		t.Errorf("HTTPRequests(9999) = %d", got)
	}
}

func testDNS(t *testing.T, h *Host) {
	v4, v6 := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8:1::7")
	h.ServeDNS(t, map[string][]netip.Addr{"Allowed.Example.": {v4, v6}, "v4only.example": {v4}})
	server := net.JoinHostPort(h.IP.String(), "53")
	query := func(netw, name string, qtype uint16) *dns.Msg {
		t.Helper()
		c := &dns.Client{Net: netw, Timeout: 3 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), qtype)
		r, _, err := c.Exchange(m, server)
		if err != nil {
			t.Fatalf("%s %s %s: %v", netw, name, dns.TypeToString[qtype], err)
		}
		return r
	}
	r := query("udp", "allowed.example", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("A allowed.example: %v", r)
	}
	if a, ok := r.Answer[0].(*dns.A); !ok || !a.A.Equal(v4.AsSlice()) || a.Hdr.Ttl != 30 {
		t.Fatalf("A allowed.example: %v", r.Answer[0])
	}
	r = query("udp", "ALLOWED.example", dns.TypeAAAA)
	if a, ok := r.Answer[0].(*dns.AAAA); len(r.Answer) != 1 || !ok || !a.AAAA.Equal(v6.AsSlice()) || a.Hdr.Ttl != 30 {
		t.Fatalf("AAAA allowed.example: %v", r)
	}
	r = query("tcp", "allowed.example", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("A allowed.example over TCP: %v", r)
	}
	r = query("udp", "v4only.example", dns.TypeAAAA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("AAAA v4only.example: want NOERROR without answers, got %v", r)
	}
	r = query("udp", "denied.example", dns.TypeA)
	if r.Rcode != dns.RcodeNameError {
		t.Fatalf("A denied.example: want NXDOMAIN, got %v", r)
	}
	// the IPv6 address answers too
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion("allowed.example.", dns.TypeA)
	if _, _, err := c.Exchange(m, net.JoinHostPort(h.IP6.String(), "53")); err != nil {
		t.Fatalf("DNS via %s: %v", h.IP6, err)
	}
	for name, want := range map[string]int{"allowed.example": 4, "Allowed.Example.": 4, "v4only.example": 1, "denied.example.": 1, "other.example": 0} {
		if got := h.DNSQueries(name); got != want {
			t.Errorf("DNSQueries(%q) = %d, want %d", name, got, want)
		}
	}
	if got := h.DNSQueriesTotal(); got != 6 {
		t.Errorf("DNSQueriesTotal() = %d, want 6", got)
	}
}

func testTCP(t *testing.T, h *Host) {
	h.ServeTCP(t, 853)
	h.ServeTCP(t, 5000)
	for i, addr := range []string{h.Addr(853), h.Addr6(853), h.Addr(853)} {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		c.Write([]byte("\x16\x03\x01")) // the start of a TLS ClientHello: read and dropped
		c.Close()
		waitFor(t, func() bool { return h.Connections(853) == i+1 }, "Connections(853) == %d", i+1)
	}
	// a connection left open is closed by the cleanup
	c, err := net.DialTimeout("tcp", h.Addr(5000), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	waitFor(t, func() bool { return h.Connections(5000) == 1 }, "Connections(5000) == 1")
	if got := h.Connections(853); got != 3 {
		t.Errorf("Connections(853) = %d, want 3", got)
	}
	// nothing listens on other ports: refused, not counted
	if c, err := net.DialTimeout("tcp", h.Addr(854), 3*time.Second); err == nil {
		c.Close()
		t.Errorf("dial %s: connected, want refused", h.Addr(854))
	}
}

func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
