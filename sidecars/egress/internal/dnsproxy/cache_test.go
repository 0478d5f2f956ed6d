package dnsproxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// TestCache: an allowed answer is kept for its TTL and answered from the node, its TTLs
// lowered by its age and its addresses learned again; the policy is asked before the cache;
// what is not a complete positive answer is never kept; the cache holds at most its size.
func TestCache(t *testing.T) {
	up := newUpstream(t, 0)
	other := newUpstream(t, 0)
	now := time.Unix(1000, 0)
	c := NewCache(3)
	c.now = func() time.Time { return now }
	matcher := compile(t, egressapi.ActionDeny, allow("allowed.example.com"), allow("*.example.org"), allow("*.example.net"),
		allow("wild.example.com"), allow("missing.example.com"))
	upstreams := []string{up.addr}
	l := newLearner(nil)
	h := &Handler{
		Matcher:   func() *egressapi.Matcher { return matcher },
		Learner:   l,
		Upstreams: func() []string { return upstreams },
		Cache:     c,
		Grace:     time.Second,
	}
	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		q := new(dns.Msg)
		q.SetQuestion(name, qtype)
		q.Id = 4242
		w := &recorder{}
		h.ServeDNS(w, q)
		if w.msg == nil || w.msg.Id != 4242 || len(w.msg.Question) != 1 || w.msg.Question[0].Name != name {
			t.Fatalf("%s: answer %v", name, w.msg)
		}
		return w.msg
	}
	queries := func(u *upstream) int { n := u.count(); return n["udp"] + n["tcp"] }

	first := ask("allowed.example.com.", dns.TypeA)
	if queries(up) != 1 || len(first.Answer) != 1 || first.Answer[0].Header().Ttl != 60 {
		t.Fatalf("first answer: %v after %d upstream queries", first.Answer, queries(up))
	}
	now = now.Add(25 * time.Second)
	delete(l.learned, "allowed.example.com")
	again := ask("ALLOWED.example.com.", dns.TypeA) // the case of the name is the client's
	if queries(up) != 1 {
		t.Errorf("a cached answer went upstream: %d queries", queries(up))
	}
	if len(again.Answer) != 1 || again.Answer[0].Header().Ttl != 35 {
		t.Errorf("cached answer 25 s on: %v, want TTL 35", again.Answer)
	}
	if got := l.learned["allowed.example.com"]; len(got) != 1 || l.ttls["allowed.example.com"] != 36*time.Second {
		t.Errorf("a cached answer was not learned again for what is left: %v for %v", got, l.ttls["allowed.example.com"])
	}
	// Another type, and other resolvers, are other questions.
	ask("allowed.example.com.", dns.TypeAAAA)
	upstreams = []string{other.addr}
	ask("allowed.example.com.", dns.TypeA)
	if queries(up) != 2 || queries(other) != 1 {
		t.Errorf("upstream queries %d and %d, want 2 and 1", queries(up), queries(other))
	}
	upstreams = []string{up.addr}

	// The policy comes first: a name it no longer allows is NXDOMAIN, cached or not.
	was := matcher
	matcher = compile(t, egressapi.ActionDeny)
	if m := ask("allowed.example.com.", dns.TypeA); m.Rcode != dns.RcodeNameError {
		t.Errorf("a denied name answered from the cache: %s", dns.RcodeToString[m.Rcode])
	}
	matcher = was

	// Expired: asked again.
	now = now.Add(36 * time.Second)
	ask("allowed.example.com.", dns.TypeA)
	if queries(up) != 3 {
		t.Errorf("an expired answer was served: %d upstream queries, want 3", queries(up))
	}

	// Not kept: NXDOMAIN.
	before := queries(up)
	ask("missing.example.com.", dns.TypeA)
	ask("missing.example.com.", dns.TypeA)
	if queries(up) != before+2 {
		t.Errorf("a negative answer was kept: %d upstream queries, want %d", queries(up), before+2)
	}

	// At most its size: three kept at a time, the one closest to expiry goes.
	for i, name := range []string{"www.example.org.", "edge.example.net.", "wild.example.com."} {
		ask(name, dns.TypeA)
		if c.Len() > 3 {
			t.Fatalf("after %d more: %d kept, want at most 3", i+1, c.Len())
		}
	}
	if c.Len() != 3 {
		t.Errorf("%d kept, want 3", c.Len())
	}
}

// TestCacheKeepsOnlyCompleteAnswers: put refuses what must be asked again.
func TestCacheKeepsOnlyCompleteAnswers(t *testing.T) {
	a, err := dns.NewRR("x.example.com. 60 IN A 192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	zero, err := dns.NewRR("x.example.com. 0 IN A 192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		m    func(*dns.Msg)
		kept bool
	}{
		{"positive", func(m *dns.Msg) { m.Answer = []dns.RR{a} }, true},
		{"truncated", func(m *dns.Msg) { m.Answer, m.Truncated = []dns.RR{a}, true }, false},
		{"TTL 0", func(m *dns.Msg) { m.Answer = []dns.RR{zero} }, false},
		{"empty", func(m *dns.Msg) {}, false},
		{"SERVFAIL", func(m *dns.Msg) { m.Answer, m.Rcode = []dns.RR{a}, dns.RcodeServerFailure }, false},
	} {
		c := NewCache(0)
		q := new(dns.Msg)
		q.SetQuestion("x.example.com.", dns.TypeA)
		m := new(dns.Msg)
		m.SetReply(q)
		tt.m(m)
		k := keyOf(q, nil)
		c.put(k, m)
		if got := c.get(k) != nil; got != tt.kept {
			t.Errorf("%s: kept %v, want %v", tt.name, got, tt.kept)
		}
		// A copy is kept: changing what was put changes nothing.
		if tt.kept {
			m.Answer[0].Header().Ttl = 1
			if got := c.get(k); got.Answer[0].Header().Ttl != 60 {
				t.Errorf("%s: the cache shares the message: %s", tt.name, fmt.Sprint(got.Answer))
			}
		}
	}
}
