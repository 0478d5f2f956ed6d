package dnsproxy

import (
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Cache limits.
const (
	// DefaultCacheSize is how many answers a pod's cache keeps.
	DefaultCacheSize = 256
	// maxCacheTTL bounds how long an answer is kept, whatever its TTL says.
	maxCacheTTL = time.Hour
)

// Cache keeps one pod's allowed answers for their TTL, so that a name the sandbox looks up
// again is answered from the node without a round trip to the resolvers, as a node-local DNS
// cache answers. It is one pod's: a cache shared by pods would tell a sandbox, by the time an
// answer takes, which names another sandbox looked up. Only complete positive answers are
// kept (NOERROR, not truncated, with a TTL); the policy is asked on every query before the
// cache, so a name a new policy denies is never answered from it. Safe for concurrent use.
type Cache struct {
	size int
	now  func() time.Time

	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
}

// cacheKey is what makes two queries the same one: the name (case-folded), type and class,
// the flags that change what a resolver answers, and the resolvers asked.
type cacheKey struct {
	name      string
	qtype     uint16
	rd, cd    bool
	edns, do  bool
	upstreams string
}

type cacheEntry struct {
	msg            *dns.Msg
	stored, expiry time.Time
}

// NewCache is a cache of at most size answers (DefaultCacheSize if size <= 0).
func NewCache(size int) *Cache {
	if size <= 0 {
		size = DefaultCacheSize
	}
	return &Cache{size: size, now: time.Now, entries: map[cacheKey]cacheEntry{}}
}

func keyOf(q *dns.Msg, upstreams []string) cacheKey {
	k := cacheKey{
		name:      strings.ToLower(q.Question[0].Name),
		qtype:     q.Question[0].Qtype,
		rd:        q.RecursionDesired,
		cd:        q.CheckingDisabled,
		upstreams: strings.Join(upstreams, ","),
	}
	if o := q.IsEdns0(); o != nil {
		k.edns, k.do = true, o.Do()
	}
	return k
}

// get is a copy of the kept answer to the query, its TTLs lowered by the time it was kept;
// nil if there is none that is still live.
func (c *Cache) get(k cacheKey) *dns.Msg {
	if c == nil {
		return nil
	}
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[k]
	if ok && !now.Before(e.expiry) {
		delete(c.entries, k)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return nil
	}
	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, rrs := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range rrs {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl -= min(h.Ttl, age)
			}
		}
	}
	return m
}

// put keeps a copy of an upstream's answer, if it is one to keep, for its smallest TTL.
func (c *Cache) put(k cacheKey, m *dns.Msg) {
	if c == nil || m.Rcode != dns.RcodeSuccess || m.Truncated || len(m.Answer) == 0 {
		return
	}
	ttl, ok := minTTL(m)
	if !ok || ttl == 0 {
		return
	}
	now := c.now()
	e := cacheEntry{msg: m.Copy(), stored: now, expiry: now.Add(min(ttl, maxCacheTTL))}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.size {
		c.evictLocked(now)
	}
	c.entries[k] = e
}

// evictLocked makes room: the expired answers go, else the one closest to its expiry.
func (c *Cache) evictLocked(now time.Time) {
	var victim cacheKey
	var first time.Time
	for k, e := range c.entries {
		if !now.Before(e.expiry) {
			delete(c.entries, k)
			continue
		}
		if first.IsZero() || e.expiry.Before(first) {
			victim, first = k, e.expiry
		}
	}
	if len(c.entries) >= c.size {
		delete(c.entries, victim)
	}
}

// Len is how many answers are kept (expired ones included until they are looked up).
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// minTTL is the smallest TTL of the answer's records (the OPT pseudo-record aside).
func minTTL(m *dns.Msg) (time.Duration, bool) {
	var ttl uint32
	found := false
	for _, rrs := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range rrs {
			h := rr.Header()
			if h.Rrtype == dns.TypeOPT {
				continue
			}
			if !found || h.Ttl < ttl {
				ttl, found = h.Ttl, true
			}
		}
	}
	return time.Duration(ttl) * time.Second, found
}
