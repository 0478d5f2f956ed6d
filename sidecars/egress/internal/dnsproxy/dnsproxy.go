// Package dnsproxy is the node agent's DNS proxy. The node's packet filter redirects every
// DNS query a sandbox pod sends (UDP and TCP port 53, to any address) to it
// (egressapi.DNSPort); one Handler serves each pod. It decides each name by the pod's policy
// in force: a denied name is answered NXDOMAIN here and never reaches a resolver, so that a
// sandbox can neither resolve nor leak data through names it may not use; an allowed name is
// forwarded to the resolvers, and the addresses of the answer are handed to the packet filter
// (Learner) before the answer goes back, so that the filter already knows them when the
// client's first connection leaves.
//
// The proxy runs on the node's network, where the filter (which is keyed by the pods'
// interfaces and addresses) does not apply: its own upstream queries are the node's.
package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// Defaults of Handler's optional fields.
const (
	// DefaultGrace outlives a record's TTL by enough for a client that looked a name up just
	// before its TTL ran out to still connect to what it got.
	DefaultGrace = 30 * time.Second
	// DefaultTimeout is how long one upstream exchange may take: a resolver that has not
	// answered by then is taken as down, and the next one is tried.
	DefaultTimeout = 2 * time.Second
)

// Learner is the packet filter: it lets flows to addrs match the rules of the name target key
// for ttl. It is called concurrently, from every query in flight.
type Learner interface {
	Learn(key string, addrs []netip.Addr, ttl time.Duration) error
}

// Handler is the proxy's dns.Handler. Its fields are set before it serves and not changed
// after; what changes at runtime (the policy, the resolvers) it reads through the funcs, once
// a query.
type Handler struct {
	// Matcher is the policy in force now. nil (the func or what it returns): nothing is
	// allowed, as before a sidecar has its first policy.
	Matcher func() *egressapi.Matcher
	// Learner is told the addresses of every allowed answer. nil: every answer that would need
	// it is a SERVFAIL (fail closed).
	Learner Learner
	// Upstreams are the resolvers ("addr:port"), tried in order until one answers.
	Upstreams func() []string
	// Grace is added to the TTL of learned addresses; 0: DefaultGrace.
	Grace time.Duration
	// Mark is the SO_MARK of upstream sockets (for a node whose own rules route by marks; it
	// takes CAP_NET_ADMIN); 0: none.
	Mark int
	// Timeout bounds one upstream exchange; 0: DefaultTimeout.
	Timeout time.Duration
	// Cache keeps the pod's allowed answers for their TTL; nil: every allowed query goes to
	// the upstreams.
	Cache *Cache
	// Observe is told every query's outcome (metrics and events): the canonical name (""
	// without one), whether the policy allowed it, and the rcode answered. May be nil.
	Observe func(qname string, allowed bool, rcode int)
}

var _ dns.Handler = (*Handler)(nil)

// ServeDNS answers one query.
func (h *Handler) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	if r.Opcode != dns.OpcodeQuery {
		h.reply(w, r, "", false, dns.RcodeNotImplemented)
		return
	}
	// Several questions in one message are legal on paper and answered by no server; another
	// class than IN names nothing the policy speaks of.
	if len(r.Question) != 1 || r.Question[0].Qclass != dns.ClassINET {
		h.reply(w, r, "", false, dns.RcodeFormatError)
		return
	}
	q := r.Question[0]
	qname := egressapi.CanonicalName(q.Name)
	if q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		// A zone transfer spans several messages and would hand over the addresses of a whole
		// zone under one name's rule.
		h.reply(w, r, qname, false, dns.RcodeNotImplemented)
		return
	}

	d := egressapi.NameDecision{Rule: -1}
	if m := h.matcher(); m != nil {
		d = m.MatchName(q.Name)
	}
	if !d.Allow {
		// No SOA in the answer: a negative answer without one is not cached (RFC 2308), and
		// the name may be allowed a moment later.
		h.reply(w, r, qname, false, dns.RcodeNameError)
		return
	}

	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	var upstreams []string
	if h.Upstreams != nil {
		upstreams = h.Upstreams()
	}
	var key cacheKey
	var resp *dns.Msg
	if h.Cache != nil {
		key = keyOf(r, upstreams)
		resp = h.Cache.get(key)
	}
	cached := resp != nil
	if cached {
		// The client's question as it asked it (a resolver may randomize the case of names).
		resp.Question = []dns.Question{q}
	} else {
		var err error
		if resp, err = h.forward(r, upstreams, tcp); err != nil {
			klog.V(4).InfoS("No upstream answered", "qname", qname, "err", err)
			h.reply(w, r, qname, true, dns.RcodeServerFailure)
			return
		}
	}
	// A cached answer's addresses are learned again too, for what is left of their TTL: the
	// filter may have let them expire, and the pod's policy may have changed since.
	addrs, ttl := addresses(resp)
	if len(d.Keys) > 0 && len(addrs) > 0 {
		if err := h.learn(d.Keys, addrs, ttl+h.grace()); err != nil {
			// The client would connect to addresses the filter does not know and be cut
			// off; better it sees a failed lookup than a half-working one.
			klog.V(4).InfoS("Learning addresses failed", "qname", qname, "keys", d.Keys, "err", err)
			h.reply(w, r, qname, true, dns.RcodeServerFailure)
			return
		}
	}
	if !cached {
		h.Cache.put(key, resp)
	}
	resp.Id = r.Id
	if !tcp {
		// The answer may come from a TCP retry, or a resolver that offered more than the
		// client can take: make it fit the client's buffer (setting TC if records are cut).
		resp.Truncate(udpSize(r))
	}
	h.write(w, resp, qname)
	h.observe(qname, true, resp.Rcode)
}

// reply answers r locally with rcode; allowed is what the policy said of it.
func (h *Handler) reply(w dns.ResponseWriter, r *dns.Msg, qname string, allowed bool, rcode int) {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	// The client sent a recursive query to what it takes for its resolver.
	m.RecursionAvailable = true
	if o := r.IsEdns0(); o != nil {
		// RFC 6891 6.1.1: a responder that knows EDNS answers an OPT with one.
		m.SetEdns0(dns.DefaultMsgSize, o.Do())
	}
	h.write(w, m, qname)
	h.observe(qname, allowed, rcode)
}

func (h *Handler) write(w dns.ResponseWriter, m *dns.Msg, qname string) {
	if err := w.WriteMsg(m); err != nil {
		klog.V(4).InfoS("Writing a DNS answer failed", "qname", qname, "err", err)
	}
}

func (h *Handler) observe(qname string, allowed bool, rcode int) {
	if h.Observe != nil {
		h.Observe(qname, allowed, rcode)
	}
}

func (h *Handler) matcher() *egressapi.Matcher {
	if h.Matcher == nil {
		return nil
	}
	return h.Matcher()
}

func (h *Handler) grace() time.Duration {
	if h.Grace > 0 {
		return h.Grace
	}
	return DefaultGrace
}

func (h *Handler) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return DefaultTimeout
}

func (h *Handler) learn(keys []string, addrs []netip.Addr, ttl time.Duration) error {
	if h.Learner == nil {
		return errors.New("no learner")
	}
	for _, k := range keys {
		if err := h.Learner.Learn(k, addrs, ttl); err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}
	}
	return nil
}

// forward asks the upstreams in order; the first good answer wins.
func (h *Handler) forward(r *dns.Msg, upstreams []string, tcp bool) (*dns.Msg, error) {
	if len(upstreams) == 0 {
		return nil, errors.New("no upstreams")
	}
	q := upstreamQuery(r)
	var errs []error
	for _, u := range upstreams {
		network := "udp"
		if tcp {
			network = "tcp"
		}
		resp, err := h.exchange(q, u, network)
		if err == nil && resp.Truncated && network == "udp" {
			// The resolver has more than fits: ask it again over TCP, so that the client
			// (and the filter) get every address.
			resp, err = h.exchange(q, u, "tcp")
		}
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", u, err))
	}
	return nil, errors.Join(errs...)
}

// upstreamQuery is the query the upstreams get: the client's question, flags and EDNS, and
// nothing else the client put in its message.
func upstreamQuery(r *dns.Msg) *dns.Msg {
	q := new(dns.Msg)
	q.Opcode = dns.OpcodeQuery
	q.Question = []dns.Question{r.Question[0]}
	q.RecursionDesired = r.RecursionDesired
	q.CheckingDisabled = r.CheckingDisabled
	q.AuthenticatedData = r.AuthenticatedData
	if o := r.IsEdns0(); o != nil {
		q.Extra = []dns.RR{dns.Copy(o)}
	}
	return q
}

// exchange sends q to one upstream and checks that what comes back answers it.
func (h *Handler) exchange(q *dns.Msg, upstream, network string) (*dns.Msg, error) {
	// A random ID of our own for every exchange, not the client's (which the sandbox
	// chooses): the ID is what keeps an off-path forger from slipping in an answer, and so
	// addresses into the filter (RFC 5452).
	q.Id = dns.Id()
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout())
	defer cancel()
	c := &dns.Client{Net: network, Timeout: h.timeout(), Dialer: h.dialer()}
	resp, _, err := c.ExchangeContext(ctx, q, upstream)
	if err != nil {
		return nil, err
	}
	if resp == nil || !resp.Response || len(resp.Question) != 1 || !sameQuestion(resp.Question[0], q.Question[0]) {
		return nil, errors.New("the answer is not one to the query")
	}
	// A resolver that cannot or will not answer has not answered: the next one may, as a
	// stub resolver would try it.
	if resp.Rcode == dns.RcodeServerFailure || resp.Rcode == dns.RcodeRefused {
		return nil, fmt.Errorf("answered %s", dns.RcodeToString[resp.Rcode])
	}
	return resp, nil
}

func sameQuestion(a, b dns.Question) bool {
	return a.Qtype == b.Qtype && a.Qclass == b.Qclass && strings.EqualFold(a.Name, b.Name)
}

// dialer makes the upstream sockets; with a Mark, they are marked before they connect, so
// that not even their first packet meets the redirect.
func (h *Handler) dialer() *net.Dialer {
	d := &net.Dialer{}
	if h.Mark != 0 {
		mark := h.Mark
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, mark)
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("setting SO_MARK: %w", serr)
			}
			return nil
		}
	}
	return d
}

// addresses collects the A and AAAA records of the answer section (those at the end of a
// CNAME chain included) and the smallest TTL among them. A record without a usable address
// (an empty RDATA) is dropped from the answer: it would give the client nothing the filter
// knows of.
func addresses(m *dns.Msg) ([]netip.Addr, time.Duration) {
	var addrs []netip.Addr
	var minTTL uint32
	first := true
	kept := m.Answer[:0]
	for _, rr := range m.Answer {
		var ip net.IP
		switch rr := rr.(type) {
		case *dns.A:
			ip = rr.A
		case *dns.AAAA:
			ip = rr.AAAA
		default:
			kept = append(kept, rr)
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		kept = append(kept, rr)
		// The filter sees an IPv4 flow whether the address came as 1.2.3.4 or ::ffff:1.2.3.4.
		a = a.Unmap()
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
		if ttl := rr.Header().Ttl; first || ttl < minTTL {
			minTTL, first = ttl, false
		}
	}
	clear(m.Answer[len(kept):])
	m.Answer = kept
	return addrs, time.Duration(minTTL) * time.Second
}

// udpSize is the largest answer the client takes over UDP.
func udpSize(r *dns.Msg) int {
	if o := r.IsEdns0(); o != nil && int(o.UDPSize()) > dns.MinMsgSize {
		return int(o.UDPSize())
	}
	return dns.MinMsgSize
}
