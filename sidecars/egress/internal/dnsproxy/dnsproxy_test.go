package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// bigCount A records make big.example.com too large for a 512-byte UDP answer.
const bigCount = 80

// zone is what the test upstream serves: low TTLs, a CNAME chain, a wildcard's parent and
// child, and a name too big for UDP.
func zone(t *testing.T) map[string][]dns.RR {
	t.Helper()
	lines := []string{
		"allowed.example.com. 60 IN A 192.0.2.1",
		"allowed.example.com. 30 IN AAAA 2001:db8::1",
		"www.example.org. 300 IN CNAME cdn.example.net.",
		"cdn.example.net. 120 IN CNAME edge.example.net.",
		"edge.example.net. 20 IN A 192.0.2.10",
		"edge.example.net. 40 IN A 192.0.2.11",
		"wild.example.com. 60 IN A 192.0.2.20",
		"a.wild.example.com. 60 IN A 192.0.2.21",
		"denied.example.com. 60 IN A 192.0.2.30",
	}
	for i := range bigCount {
		lines = append(lines, fmt.Sprintf("big.example.com. 60 IN A 198.51.100.%d", i+1))
	}
	z := map[string][]dns.RR{}
	for _, l := range lines {
		rr, err := dns.NewRR(l)
		if err != nil {
			t.Fatalf("zone line %q: %v", l, err)
		}
		z[rr.Header().Name] = append(z[rr.Header().Name], rr)
	}
	return z
}

// upstream is a real resolver on loopback, UDP and TCP on one port, that counts its queries.
type upstream struct {
	addr  string
	zone  map[string][]dns.RR
	rcode int // if not 0, every answer is this rcode (a refusing resolver)

	mu      sync.Mutex
	queries map[string]int // "udp" or "tcp"
}

func newUpstream(t *testing.T, rcode int) *upstream {
	t.Helper()
	u := &upstream{zone: zone(t), rcode: rcode, queries: map[string]int{}}
	pc, l := listenPair(t)
	u.addr = pc.LocalAddr().String()
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: u}, {Listener: l, Handler: u}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	return u
}

// listenPair binds UDP and TCP on one free loopback port.
func listenPair(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l
		}
		pc.Close()
	}
	t.Fatal("no free port for UDP and TCP")
	return nil, nil
}

func (u *upstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	proto := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		proto = "tcp"
	}
	u.mu.Lock()
	u.queries[proto]++
	u.mu.Unlock()

	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if u.rcode != 0 {
		m.Rcode = u.rcode
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	for range 8 { // follow the CNAME chain
		rrs, ok := u.zone[name]
		if !ok {
			if len(m.Answer) == 0 {
				m.Rcode = dns.RcodeNameError
			}
			break
		}
		next := ""
		for _, rr := range rrs {
			switch {
			case rr.Header().Rrtype == q.Qtype:
				m.Answer = append(m.Answer, rr)
			case rr.Header().Rrtype == dns.TypeCNAME:
				m.Answer = append(m.Answer, rr)
				next = rr.(*dns.CNAME).Target
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	if proto == "udp" {
		// As resolvers do since DNS flag day 2020, whatever the client offers.
		m.Truncate(min(udpSize(r), 1232))
	}
	_ = w.WriteMsg(m)
}

func (u *upstream) count() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]int{}
	for k, v := range u.queries {
		out[k] = v
	}
	return out
}

// garbageUpstream answers every UDP query with its ID and a body that does not parse.
func garbageUpstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 2 {
				continue
			}
			// ID, QR|RD|RA, one question, three answers, then a compression pointer past the end.
			reply := []byte{buf[0], buf[1], 0x81, 0x80, 0, 1, 0, 3, 0, 0, 0, 0, 0xc0, 0xff, 0xff}
			_, _ = pc.WriteTo(reply, from)
		}
	}()
	return pc.LocalAddr().String()
}

// downUpstream is a loopback address nothing listens on.
func downUpstream(t *testing.T) string {
	t.Helper()
	pc, l := listenPair(t)
	addr := pc.LocalAddr().String()
	pc.Close()
	l.Close()
	return addr
}

// recorder is a dns.ResponseWriter that keeps what the handler writes, as CoreDNS's
// dnstest.Recorder.
type recorder struct {
	tcp bool
	msg *dns.Msg
}

func (r *recorder) LocalAddr() net.Addr {
	if r.tcp {
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: egressapi.DNSPort}
	}
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: egressapi.DNSPort}
}

func (r *recorder) RemoteAddr() net.Addr {
	if r.tcp {
		return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	}
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}

func (r *recorder) WriteMsg(m *dns.Msg) error {
	// What the client would get: packed and parsed again.
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = r.Write(b)
	return err
}

func (r *recorder) Write(b []byte) (int, error) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return 0, err
	}
	r.msg = m
	return len(b), nil
}

func (r *recorder) Close() error        { return nil }
func (r *recorder) TsigStatus() error   { return nil }
func (r *recorder) TsigTimersOnly(bool) {}
func (r *recorder) Hijack()             {}

// learner is a fake packet filter.
type learner struct {
	err error

	mu      sync.Mutex
	learned map[string][]string // key: sorted addresses
	ttls    map[string]time.Duration
}

func newLearner(err error) *learner {
	return &learner{err: err, learned: map[string][]string{}, ttls: map[string]time.Duration{}}
}

func (l *learner) Learn(key string, addrs []netip.Addr, ttl time.Duration) error {
	if l.err != nil {
		return l.err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range addrs {
		l.learned[key] = append(l.learned[key], a.String())
	}
	slices.Sort(l.learned[key])
	l.ttls[key] = ttl
	return nil
}

type observation struct {
	QName   string
	Allowed bool
	Rcode   int
}

func compile(t *testing.T, def egressapi.Action, rules ...egressapi.Rule) *egressapi.Matcher {
	t.Helper()
	m, err := egressapi.Compile(rules, def)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func allow(to string) egressapi.Rule { return egressapi.Rule{Action: egressapi.ActionAllow, To: to} }
func deny(to string) egressapi.Rule  { return egressapi.Rule{Action: egressapi.ActionDeny, To: to} }

func answerAddrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	slices.Sort(out)
	return out
}

func bigAddrs(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("198.51.100.%d", i+1))
	}
	slices.Sort(out)
	return out
}

func TestServeDNS(t *testing.T) {
	good := newUpstream(t, 0)
	refusing := newUpstream(t, dns.RcodeRefused)
	garbage := garbageUpstream(t)
	down := downUpstream(t)
	learnErr := errors.New("nftables: no room")

	const grace = 30 * time.Second
	tests := []struct {
		name      string
		matcher   *egressapi.Matcher
		upstreams []string // default: good
		learnErr  error
		grace     time.Duration
		// the query
		qname  string
		qtype  uint16
		tcp    bool
		edns   uint16 // UDP size advertised; 0: no OPT
		modify func(*dns.Msg)
		// what comes back
		rcode       int
		answer      []string // addresses in the answer
		truncated   bool
		learned     map[string][]string
		ttl         time.Duration // of every learned key
		goodQueries map[string]int
		refused     map[string]int // queries the refusing upstream got
		observed    observation
	}{
		{
			name:    "allowed name is answered and learned",
			matcher: compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			qname:   "allowed.example.com.", qtype: dns.TypeA,
			answer:      []string{"192.0.2.1"},
			learned:     map[string][]string{"allowed.example.com": {"192.0.2.1"}},
			ttl:         60*time.Second + grace,
			goodQueries: map[string]int{"udp": 1},
			observed:    observation{"allowed.example.com", true, dns.RcodeSuccess},
		},
		{
			name:    "AAAA is learned with its own TTL and the given grace",
			matcher: compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			grace:   5 * time.Second,
			qname:   "Allowed.Example.COM.", qtype: dns.TypeAAAA,
			answer:      []string{"2001:db8::1"},
			learned:     map[string][]string{"allowed.example.com": {"2001:db8::1"}},
			ttl:         35 * time.Second,
			goodQueries: map[string]int{"udp": 1},
			observed:    observation{"allowed.example.com", true, dns.RcodeSuccess},
		},
		{
			name: "CNAME chain is learned under every matching key with the smallest address TTL",
			matcher: compile(t, egressapi.ActionDeny,
				egressapi.Rule{Action: egressapi.ActionDeny, To: "www.example.org", Ports: []egressapi.Port{{Port: 22}}},
				allow("*.example.org")),
			qname: "www.example.org.", qtype: dns.TypeA,
			answer: []string{"192.0.2.10", "192.0.2.11"},
			learned: map[string][]string{
				"www.example.org": {"192.0.2.10", "192.0.2.11"},
				"*.example.org":   {"192.0.2.10", "192.0.2.11"},
			},
			ttl:         20*time.Second + grace,
			goodQueries: map[string]int{"udp": 1},
			observed:    observation{"www.example.org", true, dns.RcodeSuccess},
		},
		{
			name:    "wildcard matches a subdomain",
			matcher: compile(t, egressapi.ActionDeny, allow("*.wild.example.com")),
			qname:   "a.wild.example.com.", qtype: dns.TypeA,
			answer:      []string{"192.0.2.21"},
			learned:     map[string][]string{"*.wild.example.com": {"192.0.2.21"}},
			ttl:         60*time.Second + grace,
			goodQueries: map[string]int{"udp": 1},
			observed:    observation{"a.wild.example.com", true, dns.RcodeSuccess},
		},
		{
			name:    "wildcard does not match the bare name",
			matcher: compile(t, egressapi.ActionDeny, allow("*.wild.example.com")),
			qname:   "wild.example.com.", qtype: dns.TypeA,
			rcode:    dns.RcodeNameError,
			observed: observation{"wild.example.com", false, dns.RcodeNameError},
		},
		{
			name:    "denied by default: NXDOMAIN and the upstream sees nothing",
			matcher: compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			qname:   "denied.example.com.", qtype: dns.TypeA,
			rcode:    dns.RcodeNameError,
			observed: observation{"denied.example.com", false, dns.RcodeNameError},
		},
		{
			name:    "denied by a rule before a wildcard allow",
			matcher: compile(t, egressapi.ActionAllow, deny("denied.example.com"), allow("*.example.com")),
			qname:   "denied.example.com.", qtype: dns.TypeTXT,
			rcode:    dns.RcodeNameError,
			observed: observation{"denied.example.com", false, dns.RcodeNameError},
		},
		{
			name:  "no policy yet denies everything",
			qname: "allowed.example.com.", qtype: dns.TypeA,
			rcode:    dns.RcodeNameError,
			observed: observation{"allowed.example.com", false, dns.RcodeNameError},
		},
		{
			name:    "default Allow forwards and learns nothing",
			matcher: compile(t, egressapi.ActionAllow),
			qname:   "allowed.example.com.", qtype: dns.TypeA,
			answer:      []string{"192.0.2.1"},
			goodQueries: map[string]int{"udp": 1},
			observed:    observation{"allowed.example.com", true, dns.RcodeSuccess},
		},
		{
			name:    "upstream NXDOMAIN is passed on",
			matcher: compile(t, egressapi.ActionDeny, allow("*.example.com")),
			qname:   "nothere.example.com.", qtype: dns.TypeA,
			rcode:       dns.RcodeNameError,
			goodQueries: map[string]int{"udp": 1},
			observed:    observation{"nothere.example.com", true, dns.RcodeNameError},
		},
		{
			name:     "learn error fails closed",
			matcher:  compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			learnErr: learnErr,
			qname:    "allowed.example.com.", qtype: dns.TypeA,
			rcode:       dns.RcodeServerFailure,
			goodQueries: map[string]int{"udp": 1},
			observed:    observation{"allowed.example.com", true, dns.RcodeServerFailure},
		},
		{
			name:      "upstream down",
			matcher:   compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			upstreams: []string{down},
			qname:     "allowed.example.com.", qtype: dns.TypeA,
			rcode:    dns.RcodeServerFailure,
			observed: observation{"allowed.example.com", true, dns.RcodeServerFailure},
		},
		{
			name:      "no upstreams",
			matcher:   compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			upstreams: []string{},
			qname:     "allowed.example.com.", qtype: dns.TypeA,
			rcode:    dns.RcodeServerFailure,
			observed: observation{"allowed.example.com", true, dns.RcodeServerFailure},
		},
		{
			name:      "first upstream down, the next answers",
			matcher:   compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			upstreams: []string{down, "GOOD"},
			qname:     "allowed.example.com.", qtype: dns.TypeA,
			answer:      []string{"192.0.2.1"},
			learned:     map[string][]string{"allowed.example.com": {"192.0.2.1"}},
			ttl:         60*time.Second + grace,
			goodQueries: map[string]int{"udp": 1},
			observed:    observation{"allowed.example.com", true, dns.RcodeSuccess},
		},
		{
			name:      "a refusing upstream is passed over",
			matcher:   compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			upstreams: []string{"REFUSING", "GOOD"},
			qname:     "allowed.example.com.", qtype: dns.TypeA,
			answer:      []string{"192.0.2.1"},
			learned:     map[string][]string{"allowed.example.com": {"192.0.2.1"}},
			ttl:         60*time.Second + grace,
			goodQueries: map[string]int{"udp": 1},
			refused:     map[string]int{"udp": 1},
			observed:    observation{"allowed.example.com", true, dns.RcodeSuccess},
		},
		{
			name:      "malformed upstream answer",
			matcher:   compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			upstreams: []string{garbage},
			qname:     "allowed.example.com.", qtype: dns.TypeA,
			rcode:    dns.RcodeServerFailure,
			observed: observation{"allowed.example.com", true, dns.RcodeServerFailure},
		},
		{
			name:      "malformed upstream answer, the next answers",
			matcher:   compile(t, egressapi.ActionDeny, allow("allowed.example.com")),
			upstreams: []string{garbage, "GOOD"},
			qname:     "allowed.example.com.", qtype: dns.TypeA,
			answer:      []string{"192.0.2.1"},
			learned:     map[string][]string{"allowed.example.com": {"192.0.2.1"}},
			ttl:         60*time.Second + grace,
			goodQueries: map[string]int{"udp": 1},
			observed:    observation{"allowed.example.com", true, dns.RcodeSuccess},
		},
		{
			name:    "truncated UDP answer is retried over TCP, everything learned, fitted to the client",
			matcher: compile(t, egressapi.ActionDeny, allow("big.example.com")),
			qname:   "big.example.com.", qtype: dns.TypeA,
			answer:      bigAddrs(29), // what fits in 512 bytes
			truncated:   true,
			learned:     map[string][]string{"big.example.com": bigAddrs(bigCount)},
			ttl:         60*time.Second + grace,
			goodQueries: map[string]int{"udp": 1, "tcp": 1},
			observed:    observation{"big.example.com", true, dns.RcodeSuccess},
		},
		{
			name:    "truncated UDP answer is retried over TCP, whole for an EDNS client",
			matcher: compile(t, egressapi.ActionDeny, allow("big.example.com")),
			qname:   "big.example.com.", qtype: dns.TypeA, edns: 4096,
			answer:      bigAddrs(bigCount),
			learned:     map[string][]string{"big.example.com": bigAddrs(bigCount)},
			ttl:         60*time.Second + grace,
			goodQueries: map[string]int{"tcp": 1, "udp": 1},
			observed:    observation{"big.example.com", true, dns.RcodeSuccess},
		},
		{
			name:    "TCP query goes over TCP",
			matcher: compile(t, egressapi.ActionDeny, allow("big.example.com")),
			qname:   "big.example.com.", qtype: dns.TypeA, tcp: true,
			answer:      bigAddrs(bigCount),
			learned:     map[string][]string{"big.example.com": bigAddrs(bigCount)},
			ttl:         60*time.Second + grace,
			goodQueries: map[string]int{"tcp": 1},
			observed:    observation{"big.example.com", true, dns.RcodeSuccess},
		},
		{
			name:    "two questions",
			matcher: compile(t, egressapi.ActionAllow),
			qname:   "allowed.example.com.", qtype: dns.TypeA,
			modify: func(m *dns.Msg) {
				m.Question = append(m.Question, dns.Question{Name: "www.example.org.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
			},
			rcode:    dns.RcodeFormatError,
			observed: observation{"", false, dns.RcodeFormatError},
		},
		{
			name:    "class other than IN",
			matcher: compile(t, egressapi.ActionAllow),
			qname:   "version.bind.", qtype: dns.TypeTXT,
			modify:   func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS },
			rcode:    dns.RcodeFormatError,
			observed: observation{"", false, dns.RcodeFormatError},
		},
		{
			name:    "opcode other than QUERY",
			matcher: compile(t, egressapi.ActionAllow),
			qname:   "allowed.example.com.", qtype: dns.TypeSOA,
			modify:   func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify },
			rcode:    dns.RcodeNotImplemented,
			observed: observation{"", false, dns.RcodeNotImplemented},
		},
		{
			name:    "zone transfer",
			matcher: compile(t, egressapi.ActionAllow),
			qname:   "example.com.", qtype: dns.TypeAXFR, tcp: true,
			rcode:    dns.RcodeNotImplemented,
			observed: observation{"example.com", false, dns.RcodeNotImplemented},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			goodBefore, refusedBefore := good.count(), refusing.count()
			ups := tc.upstreams
			if ups == nil {
				ups = []string{"GOOD"}
			}
			ups = slices.Clone(ups)
			for i, u := range ups {
				switch u {
				case "GOOD":
					ups[i] = good.addr
				case "REFUSING":
					ups[i] = refusing.addr
				}
			}
			l := newLearner(tc.learnErr)
			var observed []observation
			h := &Handler{
				Matcher:   func() *egressapi.Matcher { return tc.matcher },
				Learner:   l,
				Upstreams: func() []string { return ups },
				Grace:     tc.grace,
				Timeout:   time.Second,
				Observe: func(qname string, allowed bool, rcode int) {
					observed = append(observed, observation{qname, allowed, rcode})
				},
			}
			req := new(dns.Msg)
			req.SetQuestion(tc.qname, tc.qtype)
			if tc.edns != 0 {
				req.SetEdns0(tc.edns, false)
			}
			if tc.modify != nil {
				tc.modify(req)
			}
			w := &recorder{tcp: tc.tcp}
			h.ServeDNS(w, req)

			resp := w.msg
			if resp == nil {
				t.Fatal("no answer written")
			}
			if resp.Id != req.Id || !resp.Response {
				t.Errorf("answer ID %d (response %v), want %d", resp.Id, resp.Response, req.Id)
			}
			if resp.Rcode != tc.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tc.rcode])
			}
			if !resp.RecursionAvailable {
				t.Error("RecursionAvailable not set")
			}
			if diff := cmp.Diff(tc.answer, answerAddrs(resp)); diff != "" {
				t.Errorf("answer addresses (-want +got):\n%s", diff)
			}
			if resp.Truncated != tc.truncated {
				t.Errorf("truncated %v, want %v", resp.Truncated, tc.truncated)
			}
			wantLearned := tc.learned
			if wantLearned == nil {
				wantLearned = map[string][]string{}
			}
			if diff := cmp.Diff(wantLearned, l.learned); diff != "" {
				t.Errorf("learned (-want +got):\n%s", diff)
			}
			for k, ttl := range l.ttls {
				if ttl != tc.ttl {
					t.Errorf("learned %s for %v, want %v", k, ttl, tc.ttl)
				}
			}
			if diff := cmp.Diff(delta(goodBefore, good.count()), nonNil(tc.goodQueries)); diff != "" {
				t.Errorf("queries the upstream got (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(delta(refusedBefore, refusing.count()), nonNil(tc.refused)); diff != "" {
				t.Errorf("queries the refusing upstream got (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff([]observation{tc.observed}, observed); diff != "" {
				t.Errorf("observed (-want +got):\n%s", diff)
			}
		})
	}
}

func delta(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func nonNil(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
}

// TestServe runs the proxy as the node agent does and asks it with a real client.
func TestServe(t *testing.T) {
	up := newUpstream(t, 0)
	l := newLearner(nil)
	h := &Handler{
		Matcher: func() *egressapi.Matcher {
			return compile(t, egressapi.ActionDeny, allow("allowed.example.com"), allow("big.example.com"))
		},
		Learner:   l,
		Upstreams: func() []string { return []string{up.addr} },
		Timeout:   time.Second,
	}
	pc, tl := listenPair(t)
	addr := pc.LocalAddr().String()
	pc.Close()
	tl.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, h, []string{addr}, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-served:
		t.Fatalf("Serve: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve never became ready")
	}

	tests := []struct {
		name      string
		net       string
		qname     string
		rcode     int
		answers   int
		truncated bool
	}{
		{name: "allowed over UDP", net: "udp", qname: "allowed.example.com.", answers: 1},
		{name: "allowed over TCP", net: "tcp", qname: "allowed.example.com.", answers: 1},
		{name: "denied over UDP", net: "udp", qname: "denied.example.com.", rcode: dns.RcodeNameError},
		{name: "denied over TCP", net: "tcp", qname: "denied.example.com.", rcode: dns.RcodeNameError},
		{name: "big over UDP is truncated", net: "udp", qname: "big.example.com.", answers: 29, truncated: true},
		{name: "big over TCP is whole", net: "tcp", qname: "big.example.com.", answers: bigCount},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &dns.Client{Net: tc.net, Timeout: 3 * time.Second}
			req := new(dns.Msg)
			req.SetQuestion(tc.qname, dns.TypeA)
			resp, _, err := c.Exchange(req, addr)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Rcode != tc.rcode || len(resp.Answer) != tc.answers || resp.Truncated != tc.truncated {
				t.Errorf("got %s, %d answers, truncated %v; want %s, %d, %v",
					dns.RcodeToString[resp.Rcode], len(resp.Answer), resp.Truncated,
					dns.RcodeToString[tc.rcode], tc.answers, tc.truncated)
			}
		})
	}
	l.mu.Lock()
	n := len(l.learned["allowed.example.com"])
	l.mu.Unlock()
	if n == 0 {
		t.Error("allowed.example.com was not learned")
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve returned %v after its context ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not stop")
	}
	// The port is free again.
	c := &dns.Client{Net: "tcp", Timeout: time.Second}
	req := new(dns.Msg)
	req.SetQuestion("allowed.example.com.", dns.TypeA)
	if _, _, err := c.Exchange(req, addr); err == nil {
		t.Error("the proxy still answers after Serve returned")
	}
}

func TestServeAddressInUse(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	free, tl := listenPair(t)
	freeAddr := free.LocalAddr().String()
	free.Close()
	tl.Close()

	readied := false
	err = Serve(context.Background(), &Handler{}, []string{freeAddr, pc.LocalAddr().String()}, func() { readied = true })
	if err == nil || readied {
		t.Fatalf("Serve on a taken address: err %v, ready %v", err, readied)
	}
	// The first address's sockets were released.
	again, err := net.ListenPacket("udp", freeAddr)
	if err != nil {
		t.Fatalf("the first address stayed bound: %v", err)
	}
	again.Close()
}

// TestMark checks that upstream sockets carry the mark (it needs CAP_NET_ADMIN).
func TestMark(t *testing.T) {
	up := newUpstream(t, 0)
	h := &Handler{Mark: testMark}
	conn, err := h.dialer().Dial("udp", up.addr)
	if errors.Is(err, unix.EPERM) {
		t.Skip("setting SO_MARK needs CAP_NET_ADMIN")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var mark int
	var serr error
	if err := raw.Control(func(fd uintptr) { mark, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	if mark != testMark {
		t.Errorf("SO_MARK %#x, want %#x", mark, testMark)
	}
}

func TestUpstreamsFromResolvConf(t *testing.T) {
	tests := []struct {
		name    string
		content string // "" : no file
		want    []string
		wantErr bool
	}{
		{
			name:    "kubernetes pod",
			content: "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\nnameserver fd00:10:96::a\noptions ndots:5\n",
			want:    []string{"10.96.0.10:53", "[fd00:10:96::a]:53"},
		},
		{name: "no nameserver", content: "search cluster.local\n", wantErr: true},
		{name: "no file", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "resolv.conf")
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := UpstreamsFromResolvConf(path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("upstreams (-want +got):\n%s", diff)
			}
		})
	}
}
