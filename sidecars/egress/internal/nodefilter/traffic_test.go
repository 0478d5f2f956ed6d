package nodefilter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// ---- Real traffic through the node: routed, bridged, to the node itself. ----

var at = netip.AddrPortFrom

func mustConnect(t *testing.T, ns netns.NsHandle, to netip.AddrPort) net.Conn {
	t.Helper()
	c, err := dial(ns, "tcp", netip.Addr{}, to)
	if err != nil {
		t.Fatalf("connect to %s: %v", to, err)
	}
	t.Cleanup(func() { c.Close() })
	if got, err := roundTrip(c, "hello"); err != nil || got != "hello" {
		t.Fatalf("echo over %s: %q, %v", to, got, err)
	}
	return c
}

// mustRefuse: the filter answers the SYN with a reset, at once.
func mustRefuse(t *testing.T, ns netns.NsHandle, to netip.AddrPort) {
	t.Helper()
	start := time.Now()
	c, err := dial(ns, "tcp", netip.Addr{}, to)
	if err == nil {
		c.Close()
		t.Fatalf("connected to %s, want it denied", to)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("connect to %s: %v, want ECONNREFUSED (a reset from the filter)", to, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("connect to %s took %v to be refused", to, d)
	}
}

func counters(t *testing.T, f *Filter, uid string) Counters {
	t.Helper()
	c, err := f.Counters(uid)
	if err != nil {
		t.Fatalf("counters of %s: %v", uid, err)
	}
	return c
}

// waitFor polls cond until it holds, for at most 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTraffic(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	if err := f.CheckKernel(); err != nil {
		t.Fatalf("CheckKernel: %v", err)
	}
	for _, ns := range []netns.NsHandle{tp.outside, tp.b.ns} {
		echo(t, ns, ":8080")
		echo(t, ns, ":9090")
	}
	for _, p := range []testPod{tp.a, tp.c} {
		echo(t, p.ns, ":7070")
	}
	// The node: the wait endpoint, the probe's port (a listener, so that only the filter
	// can refuse), and something else the pods' policies do not allow.
	echo(t, tp.node, fmt.Sprintf(":%d", testWaitPort))
	echo(t, tp.node, fmt.Sprintf(":%d", testProbePort))
	echo(t, tp.node, ":8081")

	mustSync(t, f, tp.a.Pod, compile(t, egressapi.ActionDeny,
		allow(outIP4.String(), tcp(8080)),
		allow("fd00:20::2/128", tcpRange(8000, 8090)),
		allow(podBIP4.String(), tcp(8080)),
		allow(podBIP6.String(), tcp(8080))), true)
	mustSync(t, f, tp.b.Pod, compile(t, egressapi.ActionDeny), true)
	mustSync(t, f, tp.c.Pod, compile(t, egressapi.ActionDeny, allow(outIP4.String(), tcp(8080))), true)
	base := counters(t, f, tp.a.UID)

	t.Run("routed out of a bridged pod", func(t *testing.T) {
		mustConnect(t, tp.a.ns, at(outIP4, 8080))
		mustConnect(t, tp.a.ns, at(outIP6, 8080)) // IPv6: neighbour discovery gets through
		mustRefuse(t, tp.a.ns, at(outIP4, 9090))
		mustRefuse(t, tp.a.ns, at(outIP6, 9090))
	})
	t.Run("bridged pod to pod", func(t *testing.T) {
		mustConnect(t, tp.a.ns, at(podBIP4, 8080))
		mustConnect(t, tp.a.ns, at(podBIP6, 8080))
		mustRefuse(t, tp.a.ns, at(podBIP4, 9090))
		mustRefuse(t, tp.a.ns, at(podBIP6, 9090))
		mustRefuse(t, tp.b.ns, at(podAIP4, 7070)) // b denies everything
	})
	t.Run("routed pod", func(t *testing.T) {
		mustConnect(t, tp.c.ns, at(outIP4, 8080))
		mustRefuse(t, tp.c.ns, at(outIP4, 9090))
		mustRefuse(t, tp.c.ns, at(podAIP4, 7070))
		mustRefuse(t, tp.c.ns, at(podAIP6, 7070))
	})
	t.Run("udp is rejected too", func(t *testing.T) {
		// The ICMP administratively-prohibited error reaches the connected socket, bridged
		// or routed, as EHOSTUNREACH (IPv4) or EACCES (IPv6): no waiting for a timeout.
		for _, c := range []struct {
			ns   netns.NsHandle
			to   netip.Addr
			want error
		}{
			{tp.a.ns, podBIP4, syscall.EHOSTUNREACH}, {tp.a.ns, podBIP6, syscall.EACCES},
			{tp.a.ns, outIP4, syscall.EHOSTUNREACH}, {tp.c.ns, outIP6, syscall.EACCES},
		} {
			conn, err := dial(c.ns, "udp", netip.Addr{}, at(c.to, 9999))
			if err != nil {
				t.Fatal(err)
			}
			_, err = roundTrip(conn, "x")
			conn.Close()
			if !errors.Is(err, c.want) {
				t.Errorf("udp to %s: %v, want %v", c.to, err, c.want)
			}
		}
	})
	t.Run("counters", func(t *testing.T) {
		c := counters(t, f, tp.a.UID)
		if c.Allowed-base.Allowed < 4 || c.Denied-base.Denied < 4 {
			t.Errorf("pod a's counters went from %+v to %+v, want at least 4 more allowed and denied", base, c)
		}
		if c := counters(t, f, tp.b.UID); c.Denied < 1 || c.Allowed != 0 {
			t.Errorf("pod b's counters %+v, want denied only", c)
		}
		// Nothing the pods sent of their own (ARP, neighbour discovery, MLD) was taken for
		// spoofed.
		for _, p := range []testPod{tp.a, tp.b, tp.c} {
			if c := counters(t, f, p.UID); c.Spoofed != 0 {
				t.Errorf("pod %s: %d frames dropped as spoofed", p.UID, c.Spoofed)
			}
		}
	})
	t.Run("inbound under deny-all", func(t *testing.T) {
		// Into the pods: their replies are established, whatever their policy.
		for _, to := range []netip.AddrPort{at(podAIP4, 7070), at(podAIP6, 7070), at(podBIP4, 8080), at(podBIP6, 9090), at(podCIP4, 7070), at(podCIP6, 7070)} {
			mustConnect(t, tp.outside, to)
		}
		mustConnect(t, tp.a.ns, at(podBIP4, 8080)) // and b's replies to a, bridged
	})
	t.Run("the node", func(t *testing.T) {
		// The wait endpoint is always reachable; the rest of the node is the policy's to decide.
		for _, p := range []struct {
			ns netns.NsHandle
			to netip.Addr
		}{{tp.a.ns, bridgeIP4}, {tp.a.ns, bridgeIP6}, {tp.b.ns, bridgeIP4}, {tp.c.ns, gwCIP4}, {tp.c.ns, gwCIP6}} {
			mustConnect(t, p.ns, at(p.to, testWaitPort))
		}
		mustRefuse(t, tp.a.ns, at(bridgeIP4, 8081))
		mustRefuse(t, tp.c.ns, at(upIP4, 8081))
	})
	t.Run("probe", func(t *testing.T) {
		before := counters(t, f, tp.a.UID)
		mustRefuse(t, tp.a.ns, at(upIP4, testProbePort))
		after := counters(t, f, tp.a.UID)
		if after.Probes != before.Probes+1 || after.Denied != before.Denied {
			t.Errorf("counters went from %+v to %+v, want one probe and no denial", before, after)
		}
		// Without a filter, the probe connects: that is what it proves.
		if err := f.Remove(tp.b.UID); err != nil {
			t.Fatal(err)
		}
		mustConnect(t, tp.b.ns, at(upIP4, testProbePort))
		mustSync(t, f, tp.b.Pod, compile(t, egressapi.ActionDeny), true)
		mustRefuse(t, tp.b.ns, at(upIP4, testProbePort))
	})
	t.Run("spoofed source", func(t *testing.T) {
		// A second address in pod a's namespace, which the node does not know as a's.
		hp := handle(t, tp.a.ns)
		eth, err := hp.LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		addAddrs(t, hp, eth, spoofIP4.String()+"/24")
		before := counters(t, f, tp.a.UID)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- inNS(tp.a.ns, func() error {
				// To a destination a's policy allows: only the source is wrong.
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: spoofIP4.AsSlice()}}
				c, err := d.DialContext(ctx, "tcp", at(outIP4, 8080).String())
				if err == nil {
					c.Close()
				}
				return err
			})
		}()
		waitFor(t, "the spoofed SYN to be counted", func() bool { return counters(t, f, tp.a.UID).Spoofed > before.Spoofed })
		select {
		case err := <-done:
			t.Fatalf("the connection from the spoofed address ended before it was given up: %v", err)
		default:
		}
		cancel()
		if err := <-done; err == nil {
			t.Error("connected from a spoofed address")
		}
		after := counters(t, f, tp.a.UID)
		if after.Allowed != before.Allowed || after.Denied != before.Denied {
			t.Errorf("counters went from %+v to %+v: the spoofed packets reached the policy", before, after)
		}
		// The pod's own address still works.
		mustConnect(t, tp.a.ns, at(outIP4, 8080))
	})
}

// dnsServer answers on the node's DNSPort, UDP and TCP, with "proxy:" and the address the
// query came from (TCP: then echoes).
func dnsServer(t *testing.T, ns netns.NsHandle) {
	t.Helper()
	addr := fmt.Sprintf(":%d", testDNSPort)
	var pc net.PacketConn
	var l net.Listener
	if err := inNS(ns, func() (err error) {
		if pc, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close(); l.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			src := from.(*net.UDPAddr).AddrPort().Addr().Unmap()
			_, _ = pc.WriteTo([]byte(fmt.Sprintf("proxy:%s:%s", src, buf[:n])), from)
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
				if _, err := fmt.Fprintf(c, "proxy:%s:", src); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// TestDNS: every query a pod sends, to any address on port 53, reaches the node's DNS proxy,
// whatever the policy, from the pod's own address.
func TestDNS(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	for _, p := range []testPod{tp.a, tp.b, tp.c} {
		mustSync(t, f, p.Pod, compile(t, egressapi.ActionDeny), true)
	}
	// kube-proxy, (re)started after the filter: the cluster DNS service's address is DNATed
	// to a resolver (the outside's), at dstnat, where the chain registered last would go
	// first. The redirect to the node's proxy must win all the same.
	kubeProxy(t, tp.node, clusterDNS, at(outIP4, 53))
	dnsServer(t, tp.node)
	// A resolver outside that must not be reached.
	inNSUDPEcho(t, tp.outside, ":53")

	for _, tt := range []struct {
		name    string
		pod     testPod
		network string
		to      netip.Addr
		src     netip.Addr
	}{
		{"bridged udp to the outside resolver", tp.a, "udp", outIP4, podAIP4},
		{"bridged udp to the cluster dns service", tp.a, "udp", clusterDNS, podAIP4},
		{"routed tcp to the cluster dns service", tp.c, "tcp", clusterDNS, podCIP4},
		{"bridged udp to an unrouted resolver", tp.a, "udp", netip.MustParseAddr("198.51.100.53"), podAIP4},
		{"bridged udp ipv6", tp.a, "udp", outIP6, podAIP6},
		{"bridged tcp", tp.a, "tcp", netip.MustParseAddr("198.51.100.53"), podAIP4},
		{"bridged tcp ipv6", tp.a, "tcp", netip.MustParseAddr("2001:db8::53"), podAIP6},
		{"bridged udp to another pod on the bridge", tp.a, "udp", podBIP4, podAIP4},
		{"bridged tcp to the node", tp.b, "tcp", bridgeIP4, podBIP4},
		{"routed udp", tp.c, "udp", outIP4, podCIP4},
		{"routed udp ipv6", tp.c, "udp", outIP6, podCIP6},
		{"routed tcp", tp.c, "tcp", netip.MustParseAddr("198.51.100.53"), podCIP4},
		{"routed tcp ipv6", tp.c, "tcp", outIP6, podCIP6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := dial(tt.pod.ns, tt.network, netip.Addr{}, at(tt.to, 53))
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer c.Close()
			want := fmt.Sprintf("proxy:%s:", tt.src)
			if tt.network == "udp" {
				want += "q"
			}
			got, err := roundTrip(c, "q")
			if err == nil && tt.network == "tcp" && len(got) < len(want) {
				// The prefix and the echo may come apart.
				buf := make([]byte, 100)
				n, rerr := c.Read(buf)
				got, err = got+string(buf[:n]), rerr
			}
			if err != nil || !strings.HasPrefix(got, want) {
				t.Errorf("%q, %v; want %q", got, err, want)
			}
		})
	}
	// The simulated kube-proxy does its job for pods that are not sandboxes.
	tp2 := newTopology(t)
	kubeProxy(t, tp2.node, clusterDNS, at(outIP4, 53))
	inNSUDPEcho(t, tp2.outside, ":53")
	c, err := dial(tp2.a.ns, "udp", netip.Addr{}, at(clusterDNS, 53))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "q"); err != nil || got != "upstream:q" {
		t.Errorf("through kube-proxy without a filter: %q, %v", got, err)
	}

	// Only port 53 goes to the proxy: the rest is the policy's (deny all).
	echo(t, tp.outside, ":5353")
	mustRefuse(t, tp.a.ns, at(outIP4, 5353))
	mustRefuse(t, tp.c.ns, at(outIP4, 5353))
}

// TestLearn: a name's learned address becomes reachable, for that pod only, until its TTL.
func TestLearn(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	f.minTTL = time.Second
	echo(t, tp.outside, ":8080")
	const key = "svc.example.com"
	m := compile(t, egressapi.ActionDeny, allow(key, tcp(8080)))
	mustSync(t, f, tp.a.Pod, m, true)
	mustSync(t, f, tp.c.Pod, m, true)

	mustRefuse(t, tp.a.ns, at(outIP4, 8080))
	if err := f.Learn(tp.a.UID, "other.example.com", []netip.Addr{outIP4}, time.Minute); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("learn for a key without a rule: %v, want ErrUnknownKey", err)
	}
	if err := f.Learn("uid-nobody", key, []netip.Addr{outIP4}, time.Minute); !errors.Is(err, ErrUnknownPod) {
		t.Errorf("learn for an unknown pod: %v, want ErrUnknownPod", err)
	}
	if err := f.Learn(tp.a.UID, key, []netip.Addr{outIP4, outIP6}, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if !f.Learned(tp.a.UID, key, outIP4) || f.Learned(tp.c.UID, key, outIP4) {
		t.Error("Learned does not say what was learned for which pod")
	}
	mustConnect(t, tp.a.ns, at(outIP4, 8080))
	mustConnect(t, tp.a.ns, at(outIP6, 8080))
	mustRefuse(t, tp.c.ns, at(outIP4, 8080)) // another pod, with the same policy

	// Expiry: the kernel drops the elements, and the mirror forgets them.
	v4, v6 := SetNames(PodID(tp.a.UID), key)
	c := nftConn(t, tp.node)
	waitFor(t, "the learned addresses to expire", func() bool {
		for _, name := range []string{v4, v6} {
			elems, err := c.GetSetElements(&nftables.Set{Table: inetTable, Name: name})
			if err != nil {
				t.Fatal(err)
			}
			if len(elems) > 0 {
				return false
			}
		}
		return true
	})
	waitFor(t, "the mirror to forget", func() bool { return !f.Learned(tp.a.UID, key, outIP4) })
	mustRefuse(t, tp.a.ns, at(outIP4, 8080))
	mustRefuse(t, tp.a.ns, at(outIP6, 8080))
}

// TestLearnSparesFreshAnswers: an answer whose addresses are all learned, with at least half of
// its time still to go, changes nothing in the kernel (no commit per lookup); one that would
// outlive what is there refreshes the kernel's timeouts.
func TestLearnSparesFreshAnswers(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	const key = "svc.example.com"
	mustSync(t, f, tp.a.Pod, compile(t, egressapi.ActionDeny, allow(key, tcp(8080))), true)
	v4, _ := SetNames(PodID(tp.a.UID), key)
	c := nftConn(t, tp.node)
	expires := func(a netip.Addr) time.Duration {
		t.Helper()
		elems, err := c.GetSetElements(&nftables.Set{Table: inetTable, Name: v4})
		if err != nil {
			t.Fatalf("elements of %s: %v", v4, err)
		}
		for _, e := range elems {
			if netip.AddrFrom4([4]byte(e.Key)) == a {
				return e.Expires
			}
		}
		t.Fatalf("%s is not in %s", a, v4)
		return 0
	}

	if err := f.Learn(tp.a.UID, key, []netip.Addr{outIP4}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if e := expires(outIP4); e > time.Minute || e < 50*time.Second {
		t.Fatalf("expires in %v after learning for a minute", e)
	}
	// 100 s asked, a minute left: more than half, so the kernel keeps its minute.
	if err := f.Learn(tp.a.UID, key, []netip.Addr{outIP4}, 100*time.Second); err != nil {
		t.Fatal(err)
	}
	if e := expires(outIP4); e > time.Minute {
		t.Errorf("a fresh answer was committed: expires in %v, want at most a minute", e)
	}
	// A new address in the answer: the whole answer is committed, the old address with it.
	other := netip.MustParseAddr("192.0.2.77")
	if err := f.Learn(tp.a.UID, key, []netip.Addr{outIP4, other}, 100*time.Second); err != nil {
		t.Fatal(err)
	}
	if !f.Learned(tp.a.UID, key, other) {
		t.Error("a new address of a fresh answer is not learned")
	}
	if e := expires(outIP4); e < 90*time.Second {
		t.Errorf("an answer with a new address was not committed whole: the old one expires in %v", e)
	}
	// 250 s asked, 100 s left: less than half, so the timeouts are refreshed.
	if err := f.Learn(tp.a.UID, key, []netip.Addr{outIP4}, 250*time.Second); err != nil {
		t.Fatal(err)
	}
	if e := expires(outIP4); e < 4*time.Minute {
		t.Errorf("an answer that outlives the sets' elements was not committed: expires in %v", e)
	}
}

// TestCutFlows: flows a new policy denies are cut; what it allows, what comes in, DNS and the
// wait endpoint are not.
func TestCutFlows(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	for _, ns := range []netns.NsHandle{tp.outside, tp.b.ns} {
		echo(t, ns, ":8080")
		echo(t, ns, ":9090")
	}
	echo(t, tp.a.ns, ":7070")
	echo(t, tp.node, fmt.Sprintf(":%d", testWaitPort))
	dnsServer(t, tp.node)

	const key = "svc.example.com"
	m1 := compile(t, egressapi.ActionDeny,
		allow(outIP4.String(), tcp(8080), tcp(9090)),
		allow(podBIP4.String(), tcp(8080)),
		allow(key, tcp(9090)))
	m2 := compile(t, egressapi.ActionDeny, allow(outIP4.String(), tcp(9090)))
	mustSync(t, f, tp.a.Pod, m1, true)
	mustSync(t, f, tp.b.Pod, compile(t, egressapi.ActionAllow), true)
	if _, err := f.CutFlows("uid-nobody", m2); !errors.Is(err, ErrUnknownPod) {
		t.Errorf("CutFlows of an unknown pod: %v", err)
	}
	if err := f.Learn(tp.a.UID, key, []netip.Addr{outIP6}, time.Minute); err != nil {
		t.Fatal(err)
	}

	cut := []net.Conn{
		mustConnect(t, tp.a.ns, at(outIP4, 8080)),
		mustConnect(t, tp.a.ns, at(podBIP4, 8080)), // bridged
		mustConnect(t, tp.a.ns, at(outIP6, 9090)),  // by a name m2 no longer has
	}
	keep := []net.Conn{
		mustConnect(t, tp.a.ns, at(outIP4, 9090)),
		mustConnect(t, tp.outside, at(podAIP4, 7070)),        // inbound
		mustConnect(t, tp.b.ns, at(podAIP4, 7070)),           // inbound, bridged
		mustConnect(t, tp.b.ns, at(outIP4, 8080)),            // another pod's
		mustConnect(t, tp.a.ns, at(bridgeIP4, testWaitPort)), // the wait endpoint
	}
	dns, err := dial(tp.a.ns, "tcp", netip.Addr{}, at(outIP4, 53))
	if err != nil {
		t.Fatal(err)
	}
	defer dns.Close()
	if got, err := roundTrip(dns, "q"); err != nil || !strings.HasPrefix(got, "proxy:") {
		t.Fatalf("dns over tcp: %q, %v", got, err)
	}
	keep = append(keep, dns)

	mustSync(t, f, tp.a.Pod, m2, true)
	// Established flows outlive the Sync (that is why CutFlows exists).
	for _, c := range cut {
		if _, err := roundTrip(c, "still"); err != nil {
			t.Fatalf("flow to %s before CutFlows: %v", c.RemoteAddr(), err)
		}
	}
	n, err := f.CutFlows(tp.a.UID, m2)
	if err != nil {
		t.Fatalf("CutFlows: %v", err)
	}
	if n != len(cut) {
		t.Errorf("CutFlows cut %d flows, want %d", n, len(cut))
	}
	for _, c := range cut {
		_, err := roundTrip(c, "gone?")
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			t.Errorf("flow to %s: %v after CutFlows, want it reset", c.RemoteAddr(), err)
		}
	}
	for _, c := range keep {
		if _, err := roundTrip(c, "kept"); err != nil {
			t.Errorf("flow %s -> %s after CutFlows: %v", c.LocalAddr(), c.RemoteAddr(), err)
		}
	}
	if n, err := f.CutFlows(tp.a.UID, m2); err != nil || n != 0 {
		t.Errorf("CutFlows again: %d, %v; want 0", n, err)
	}
	mustRefuse(t, tp.a.ns, at(outIP4, 8080))
}

// TestAntiSpoofing sends frames no pod's own stack would send, from pod a's interface, and
// sees each dropped (and counted) before the bridge or the inet hooks see it.
func TestAntiSpoofing(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	mustSync(t, f, tp.a.Pod, compile(t, egressapi.ActionAllow), true)
	hp := handle(t, tp.a.ns)
	eth, err := hp.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	mac := eth.Attrs().HardwareAddr
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	llA := netip.MustParseAddr("fe80::a")

	var fd int
	if err := inNS(tp.a.ns, func() (err error) {
		fd, err = syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, 0)
		return err
	}); err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	defer syscall.Close(fd)
	send := func(frame []byte) {
		t.Helper()
		sa := &syscall.SockaddrLinklayer{Ifindex: eth.Attrs().Index, Halen: 6}
		copy(sa.Addr[:], frame[:6])
		if err := syscall.Sendto(fd, frame, 0, sa); err != nil {
			t.Fatalf("send: %v", err)
		}
	}

	for _, tt := range []struct {
		name  string
		frame []byte
	}{
		{"arp for another address", ethFrame(bcast, mac, 0x0806, arpRequest(mac, spoofIP4, bridgeIP4))},
		{"arp for another pod's address", ethFrame(bcast, mac, 0x0806, arpRequest(mac, podBIP4, bridgeIP4))},
		{"ipv4 from another address", ethFrame(bcast, mac, 0x0800, ipv4UDP(spoofIP4, outIP4))},
		{"ipv4 from another pod's address", ethFrame(bcast, mac, 0x0800, ipv4UDP(podBIP4, outIP4))},
		{"ipv6 from another address", ethFrame(bcast, mac, 0x86dd, ipv6Packet(netip.MustParseAddr("fd00:10::99"), outIP6, 17, make([]byte, 8)))},
		{"ipv6 udp from a link-local address", ethFrame(bcast, mac, 0x86dd, ipv6Packet(llA, netip.MustParseAddr("ff02::1"), 17, make([]byte, 8)))},
		{"neighbour advert for another pod's address", ethFrame(bcast, mac, 0x86dd, ipv6Packet(llA, netip.MustParseAddr("ff02::1"), 58, neighborAdvert(podBIP6)))},
		{"neighbour advert from the pod's own address for another", ethFrame(bcast, mac, 0x86dd, ipv6Packet(podAIP6, netip.MustParseAddr("ff02::1"), 58, neighborAdvert(podBIP6)))},
		{"router advert", ethFrame(bcast, mac, 0x86dd, ipv6Packet(llA, netip.MustParseAddr("ff02::1"), 58, append([]byte{134, 0, 0, 0, 64, 0, 0x07, 0x08}, make([]byte, 8)...)))},
		{"vlan-tagged ipv4 from the pod's own address", ethFrame(bcast, mac, 0x8100, append([]byte{0, 5, 0x08, 0x00}, ipv4UDP(podAIP4, outIP4)...))},
		{"another ethertype", ethFrame(bcast, mac, 0x88b5, make([]byte, 46))},
	} {
		before := counters(t, f, tp.a.UID).Spoofed
		send(tt.frame)
		waitFor(t, tt.name+" to be dropped", func() bool { return counters(t, f, tp.a.UID).Spoofed == before+1 })
	}
	// The pod's own address still passes (the last frame is sent after the others, and on a
	// connection: it would fail if something had taken a's address).
	echo(t, tp.outside, ":8080")
	mustConnect(t, tp.a.ns, at(outIP4, 8080))
	mustConnect(t, tp.a.ns, at(outIP6, 8080))
}

func ethFrame(dst, src net.HardwareAddr, typ uint16, payload []byte) []byte {
	b := append(append(append([]byte{}, dst...), src...), byte(typ>>8), byte(typ))
	b = append(b, payload...)
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

func arpRequest(sha net.HardwareAddr, spa, tpa netip.Addr) []byte {
	b := []byte{0, 1, 0x08, 0x00, 6, 4, 0, 1}
	b = append(b, sha...)
	b = append(b, spa.AsSlice()...)
	b = append(b, 0, 0, 0, 0, 0, 0)
	return append(b, tpa.AsSlice()...)
}

func ipv4UDP(src, dst netip.Addr) []byte {
	udp := []byte{0x30, 0x39, 0x1b, 0x58, 0, 12, 0, 0, 'x', 'x', 'x', 'x'}
	h := []byte{0x45, 0, 0, byte(20 + len(udp)), 0, 1, 0, 0, 64, 17, 0, 0}
	h = append(append(h, src.AsSlice()...), dst.AsSlice()...)
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	h[10], h[11] = byte(^sum>>8), byte(^sum)
	return append(h, udp...)
}

func ipv6Packet(src, dst netip.Addr, next byte, payload []byte) []byte {
	h := []byte{0x60, 0, 0, 0, byte(len(payload) >> 8), byte(len(payload)), next, 255}
	h = append(append(h, src.AsSlice()...), dst.AsSlice()...)
	return append(h, payload...)
}

func neighborAdvert(target netip.Addr) []byte {
	return append([]byte{136, 0, 0, 0, 0x20, 0, 0, 0}, target.AsSlice()...)
}

// TestBridgeNetfilterPerNamespace shows why Sync checks br_netfilter's switch, and that it is
// the node namespace's own: turned off there, bridged pod-to-pod traffic passes the policy
// by, while routed traffic is still filtered.
func TestBridgeNetfilterPerNamespace(t *testing.T) {
	requireRoot(t)
	tp := newTopology(t)
	f := newFilter(t, tp.node)
	echo(t, tp.b.ns, ":8080")
	echo(t, tp.outside, ":8080")
	mustSync(t, f, tp.a.Pod, compile(t, egressapi.ActionDeny), true)
	mustRefuse(t, tp.a.ns, at(podBIP4, 8080))

	sysctl(t, tp.node, "net/bridge/bridge-nf-call-iptables", "0")
	defer sysctl(t, tp.node, "net/bridge/bridge-nf-call-iptables", "1")
	if v, err := readSysctlIn(t, tp.a.ns, "net/bridge/bridge-nf-call-iptables"); err != nil || v != "1" {
		t.Errorf("another namespace's switch: %q, %v; want it untouched", v, err)
	}
	c, err := dial(tp.a.ns, "tcp", netip.Addr{}, at(podBIP4, 8080))
	if err != nil {
		t.Fatalf("bridged with br_netfilter off in the node's namespace: %v, want it unfiltered", err)
	}
	c.Close()
	mustRefuse(t, tp.a.ns, at(outIP4, 8080))
	if _, err := f.Sync(tp.a.Pod, compile(t, egressapi.ActionDeny)); err == nil {
		t.Error("Sync of a bridged pod with br_netfilter off: no error")
	}
}

// clusterDNS is the cluster DNS service's address.
var clusterDNS = netip.MustParseAddr("10.96.0.10")

// kubeProxy DNATs UDP and TCP port 53 of svc to backend in ns, as kube-proxy does, in a
// table of its own, at dstnat.
func kubeProxy(t *testing.T, ns netns.NsHandle, svc netip.Addr, backend netip.AddrPort) {
	t.Helper()
	c := nftConn(t, ns)
	tb := c.AddTable(&nftables.Table{Name: "kube-proxy", Family: nftables.TableFamilyIPv4})
	ch := c.AddChain(&nftables.Chain{Name: "nat-prerouting", Table: tb, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &policyAccept})
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: join(
			loadCmp(expr.PayloadBaseNetworkHeader, 16, svc.AsSlice()), l4proto(proto), dport(53, 53),
			&expr.Immediate{Register: 1, Data: backend.Addr().AsSlice()},
			&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(backend.Port())},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
		)})
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("kube-proxy's table: %v", err)
	}
}

// inNSUDPEcho answers each datagram on addr in ns with "upstream:" and the datagram.
func inNSUDPEcho(t *testing.T, ns netns.NsHandle, addr string) {
	t.Helper()
	var pc net.PacketConn
	if err := inNS(ns, func() (err error) { pc, err = net.ListenPacket("udp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("upstream:"), buf[:n]...), from)
		}
	}()
}
