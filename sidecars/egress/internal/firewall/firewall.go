package firewall

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// ErrUnknownKey is returned by Learn for a key that the last synced matcher has no name rule
// for (the DNS proxy can race a policy change): there is no set to add it to, and no rule
// that would use it.
var ErrUnknownKey = errors.New("no name rule for this key")

// ErrClosed is returned by the methods of a closed Firewall. It matters: a closed netlink
// handle would fall back to the caller's own namespace.
var ErrClosed = errors.New("firewall is closed")

// minTTL is the shortest time an address is learned for. A DNS answer with TTL 0 must still
// let the connection that follows it through.
const minTTL = 5 * time.Second

// Options configure a Firewall.
type Options struct {
	// NetNS is the network namespace to filter; 0 or netns.None(): the current one. The
	// netlink sockets are opened in it by New, and stay there: the caller may close the
	// handle afterwards, and call the Firewall from any thread.
	NetNS netns.NsHandle
	// DNSPort is where the DNS proxy listens on loopback; egressapi.DNSPort when 0.
	DNSPort int
	// Mark is the socket mark of the DNS proxy's upstream queries; egressapi.SocketMark when 0.
	Mark uint32
}

// Firewall manages the table in one network namespace. Its methods may be called
// concurrently.
type Firewall struct {
	mark    uint32
	dnsPort uint16
	table   *nftables.Table
	// now is time.Now, but for tests of expiry.
	now func() time.Time

	// mu serializes netlink use (a lasting netlink socket is not safe for concurrent
	// requests) and guards what follows.
	mu     sync.Mutex
	closed bool
	nft    *nftables.Conn
	nl     *netlink.Handle
	// keys are the name target keys of the last synced matcher, with their sets.
	keys map[string][2]string
	// mirrored are the sets whose elements the in-memory mirror is known to hold: after a
	// restart it is empty, and Sync reads the elements back before trusting it.
	mirrored map[string]bool
	// baseAllowed and baseDenied carry the counts of rules Sync replaced, so that Counters
	// never goes backwards (they are Prometheus counters).
	baseAllowed, baseDenied uint64

	// learnedMu guards learned, apart from mu: the DNS proxy asks Learned on every query.
	learnedMu sync.RWMutex
	// learned mirrors the sets' elements: key → address → expiry.
	learned map[string]map[netip.Addr]time.Time
}

// New opens netlink sockets in the namespace. It changes nothing: the caller checks the
// kernel (CheckKernel), then installs the policy (Sync).
func New(o Options) (*Firewall, error) {
	f := &Firewall{
		mark:     o.Mark,
		table:    &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet},
		now:      time.Now,
		keys:     map[string][2]string{},
		mirrored: map[string]bool{},
		learned:  map[string]map[netip.Addr]time.Time{},
	}
	if f.mark == 0 {
		f.mark = egressapi.SocketMark
	}
	port := o.DNSPort
	if port == 0 {
		port = egressapi.DNSPort
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("invalid DNS port %d", port)
	}
	f.dnsPort = uint16(port)

	ns := o.NetNS
	if ns == 0 {
		ns = netns.None()
	}
	nftOpts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(bigBuffers)}
	if ns.IsOpen() {
		nftOpts = append(nftOpts, nftables.WithNetNSFd(int(ns)))
	}
	var err error
	if f.nft, err = nftables.New(nftOpts...); err != nil {
		return nil, fmt.Errorf("open nf_tables netlink socket: %w", err)
	}
	if f.nl, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER); err != nil {
		_ = f.nft.CloseLasting()
		return nil, fmt.Errorf("open rtnetlink and conntrack sockets: %w", err)
	}
	return f, nil
}

// batchBuffer is the socket buffer size of the nf_tables socket. Sync sends a whole policy in
// one batch (it must: that is what makes it atomic), and the kernel refuses a message larger
// than the send buffer (EMSGSIZE) and drops replies beyond the receive buffer (ENOBUFS), of
// which there is one per message, echoing each rule. A rule takes some 600 bytes, so the
// default of about 200 KiB holds some 350 rules, while MaxRules name rules of MaxPorts ports
// each are 3,200 rules, about 1.9 MiB each way. The buffer is a limit, not an allocation.
const batchBuffer = 16 << 20

// bigBuffers raises the socket's buffers to batchBuffer: with the *FORCE options, which
// CAP_NET_ADMIN (which sandbox-egress has, to change the filter at all) lets exceed
// net.core.[rw]mem_max, else as far as those allow.
func bigBuffers(c *mdnetlink.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}, {unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], batchBuffer) == nil {
				continue
			}
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], batchBuffer); err != nil {
				serr = fmt.Errorf("set netlink socket buffer: %w", err)
			}
		}
	})
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	return serr
}

// Close closes the netlink sockets. It leaves the table in place, on purpose: the pod stays
// filtered when sandbox-egress exits.
func (f *Firewall) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.nl.Close()
	if err := f.nft.CloseLasting(); err != nil {
		return fmt.Errorf("close nf_tables netlink socket: %w", err)
	}
	return nil
}

// current is what the table holds.
type current struct {
	table  *nftables.Table // nil: no table
	chains map[string]*nftables.Chain
	rules  map[string][]*nftables.Rule
	sets   map[string]*nftables.Set
}

func (f *Firewall) list() (*current, error) {
	cur := &current{chains: map[string]*nftables.Chain{}, rules: map[string][]*nftables.Rule{}, sets: map[string]*nftables.Set{}}
	tables, err := f.nft.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			cur.table = t
		}
	}
	if cur.table == nil {
		return cur, nil
	}
	chains, err := f.nft.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list chains: %w", err)
	}
	for _, c := range chains {
		if c.Table == nil || c.Table.Name != TableName {
			continue
		}
		cur.chains[c.Name] = c
		rules, err := f.nft.GetRules(f.table, c)
		if err != nil {
			return nil, fmt.Errorf("list rules of chain %s: %w", c.Name, err)
		}
		cur.rules[c.Name] = rules
	}
	sets, err := f.nft.GetSets(f.table)
	if err != nil {
		return nil, fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		cur.sets[s.Name] = s
	}
	return cur, nil
}

// Sync makes the table what m wants. It is idempotent: if the table already matches, it
// changes nothing and reports changed=false; otherwise it rewrites what differs in one
// netlink batch, which the kernel applies atomically. Sets of name keys that m still has keep
// their learned addresses; those of keys it no longer has are deleted, with their mirror.
func (f *Firewall) Sync(m *egressapi.Matcher) (changed bool, err error) {
	want, err := buildRuleset(m, f.mark, f.dnsPort)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false, ErrClosed
	}
	cur, err := f.list()
	if err != nil {
		return false, err
	}

	// Before trusting the mirror for a set that is kept, read back what the kernel holds: after
	// a restart, the sets remember what the previous process learned.
	for _, s := range want.sets {
		if have, ok := cur.sets[s.name]; ok && setShapeOK(have, s) && !f.mirrored[s.name] {
			if err := f.loadElements(have, s.key); err != nil {
				return false, err
			}
			f.mirrored[s.name] = true
		}
	}

	p := f.plan(want, cur)
	if !p.changed {
		f.keys = want.keys
		f.pruneLearned(want.keys)
		return false, nil
	}
	if err := p.apply(f); err != nil {
		return false, err
	}
	if err := f.nft.Flush(); err != nil {
		return false, fmt.Errorf("apply ruleset: %w", err)
	}
	f.baseAllowed += p.droppedAllowed
	f.baseDenied += p.droppedDenied
	f.keys = want.keys
	wantSets := want.setsByName()
	for name := range f.mirrored {
		if _, ok := wantSets[name]; !ok {
			delete(f.mirrored, name)
		}
	}
	for name := range wantSets {
		f.mirrored[name] = true
	}
	f.pruneLearned(want.keys)
	return true, nil
}

func (rs *ruleset) setsByName() map[string]setSpec {
	out := make(map[string]setSpec, len(rs.sets))
	for _, s := range rs.sets {
		out[s.name] = s
	}
	return out
}

// plan is the difference between the table and what is wanted, as the batch that removes it.
type plan struct {
	changed bool

	addTable      bool
	flushChains   []*nftables.Chain // their rules go: foreign rules, stale rules, or chains to delete
	delChains     []*nftables.Chain // foreign chains, and ours with the wrong type or hook
	delSets       []*nftables.Set   // foreign and stale sets, and ours with the wrong type
	addChains     []chainSpec       // missing, recreated, or with another policy
	addSets       []setSpec         // missing or recreated
	rewriteChains []string          // chains whose rules are (re)added

	// the counts of the counters that go with flushed rules
	droppedAllowed, droppedDenied uint64

	want *ruleset
}

func (f *Firewall) plan(want *ruleset, cur *current) *plan {
	p := &plan{}
	if cur.table == nil || cur.table.Flags != 0 {
		// Missing, or dormant (flags 1), or owned by a process (flags 2, which would make it
		// go when that process does): NEWTABLE with flags 0 fixes all three.
		p.addTable = true
	}
	flushed := map[string]bool{}
	flush := func(name string) {
		if c, ok := cur.chains[name]; ok && !flushed[name] {
			flushed[name] = true
			p.flushChains = append(p.flushChains, c)
			for _, r := range cur.rules[name] {
				a, d := ruleCounts(r)
				p.droppedAllowed += a
				p.droppedDenied += d
			}
		}
	}

	wantChains := map[string]chainSpec{}
	for _, c := range want.chains {
		wantChains[c.name] = c
	}
	for name, c := range cur.chains {
		if _, ok := wantChains[name]; !ok {
			flush(name)
			p.delChains = append(p.delChains, c)
		}
	}
	recreated := map[string]bool{}
	for _, w := range want.chains {
		have, ok := cur.chains[w.name]
		switch {
		case !ok:
			p.addChains = append(p.addChains, w)
		case !chainShapeOK(have, w):
			flush(w.name)
			p.delChains = append(p.delChains, have)
			p.addChains = append(p.addChains, w)
			recreated[w.name] = true
		case !chainPolicyOK(have, w):
			// NEWCHAIN on an existing base chain updates its policy in place.
			p.addChains = append(p.addChains, w)
		}
	}

	setsChanged := false
	wantSets := want.setsByName()
	for name, s := range cur.sets {
		if s.Anonymous {
			continue // goes with the rule that uses it
		}
		if w, ok := wantSets[name]; !ok || !setShapeOK(s, w) {
			p.delSets = append(p.delSets, s)
			setsChanged = true
		}
	}
	for _, w := range want.sets {
		if s, ok := cur.sets[w.name]; !ok || !setShapeOK(s, w) {
			p.addSets = append(p.addSets, w)
			setsChanged = true
		}
	}

	for _, w := range want.chains {
		_, exists := cur.chains[w.name]
		rewrite := !exists || recreated[w.name] || !rulesMatch(cur.rules[w.name], want.rules[w.name])
		// A recreated deny chain takes the jumps to it along, and a recreated or deleted set the
		// lookups in it: rewrite the rules that refer to them too.
		if w.name == ChainOutput && (recreated[ChainDeny] || setsChanged) {
			rewrite = true
		}
		if rewrite {
			flush(w.name)
			p.rewriteChains = append(p.rewriteChains, w.name)
		}
	}

	p.changed = p.addTable || len(p.flushChains) > 0 || len(p.delChains) > 0 || len(p.delSets) > 0 ||
		len(p.addChains) > 0 || len(p.addSets) > 0 || len(p.rewriteChains) > 0
	p.want = want
	return p
}

// apply queues the plan's messages, in an order the kernel accepts within one transaction:
// rules go before the chains and sets they use, chains and sets are created before the rules
// that use them.
func (p *plan) apply(f *Firewall) error {
	c := f.nft
	t := f.table
	if p.addTable {
		c.AddTable(t)
	}
	for _, ch := range p.flushChains {
		c.FlushChain(&nftables.Chain{Name: ch.Name, Table: t})
	}
	for _, ch := range p.delChains {
		c.DelChain(&nftables.Chain{Name: ch.Name, Table: t})
	}
	for _, s := range p.delSets {
		c.DelSet(&nftables.Set{Name: s.Name, Table: t})
	}
	for _, w := range p.addChains {
		c.AddChain(&nftables.Chain{Name: w.name, Table: t, Type: w.typ, Hooknum: w.hook, Priority: w.priority, Policy: w.policy})
	}
	for _, w := range p.addSets {
		s := newSet(t, w)
		// A set recreated after tampering gets back what the mirror holds.
		if err := c.AddSet(s, f.mirrorElements(w)); err != nil {
			return fmt.Errorf("add set %s: %w", w.name, err)
		}
	}
	for _, name := range p.rewriteChains {
		ch := &nftables.Chain{Name: name, Table: t}
		for _, r := range p.want.rules[name] {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r.exprs, UserData: r.userData})
		}
	}
	return nil
}

func newSet(t *nftables.Table, w setSpec) *nftables.Set {
	s := &nftables.Set{Table: t, Name: w.name, HasTimeout: true, KeyType: nftables.TypeIPAddr, Comment: w.key}
	if w.v6 {
		s.KeyType = nftables.TypeIP6Addr
	}
	return s
}

func chainShapeOK(have *nftables.Chain, w chainSpec) bool {
	if have.Type != w.typ {
		return false
	}
	if (have.Hooknum == nil) != (w.hook == nil) || (have.Hooknum != nil && *have.Hooknum != *w.hook) {
		return false
	}
	if w.priority != nil && (have.Priority == nil || *have.Priority != *w.priority) {
		return false
	}
	return true
}

func chainPolicyOK(have *nftables.Chain, w chainSpec) bool {
	if w.policy == nil {
		return true
	}
	return have.Policy != nil && *have.Policy == *w.policy
}

func setShapeOK(have *nftables.Set, w setSpec) bool {
	kt := nftables.TypeIPAddr
	if w.v6 {
		kt = nftables.TypeIP6Addr
	}
	return have.KeyType.Name == kt.Name && have.KeyType.Bytes == kt.Bytes && have.HasTimeout &&
		!have.Interval && !have.IsMap && !have.Constant && !have.Anonymous
}

func rulesMatch(have []*nftables.Rule, want []ruleSpec) bool {
	if len(have) != len(want) {
		return false
	}
	for i := range have {
		if !bytes.Equal(have[i].UserData, want[i].userData) {
			return false
		}
	}
	return true
}

// ruleCounts are a listed rule's counted packets: allowed if it accepts, denied if it is the
// deny chain's counter rule.
func ruleCounts(r *nftables.Rule) (allowed, denied uint64) {
	var n uint64
	counted, accepts := false, false
	for _, e := range r.Exprs {
		switch v := e.(type) {
		case *expr.Counter:
			n += v.Packets
			counted = true
		case *expr.Verdict:
			accepts = v.Kind == expr.VerdictAccept
		}
	}
	if !counted {
		return 0, 0
	}
	if r.Chain != nil && r.Chain.Name == ChainDeny {
		return 0, n
	}
	if accepts && r.Chain != nil && r.Chain.Name == ChainOutput {
		return n, 0
	}
	return 0, 0
}

// Counters are the new connections (strictly: the first packets of flows) allowed by a rule
// or the default, and denied, since the table was created or this Firewall was made.
func (f *Firewall) Counters() (allowed, denied uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, 0, ErrClosed
	}
	allowed, denied = f.baseAllowed, f.baseDenied
	for _, name := range []string{ChainOutput, ChainDeny} {
		rules, err := f.nft.GetRules(f.table, &nftables.Chain{Name: name, Table: f.table})
		if err != nil {
			return 0, 0, fmt.Errorf("list rules of chain %s: %w", name, err)
		}
		for _, r := range rules {
			a, d := ruleCounts(r)
			allowed += a
			denied += d
		}
	}
	return allowed, denied, nil
}

// Learn adds addresses the DNS proxy resolved for a name target key to that key's sets, for
// ttl (at least minTTL), refreshing the timeout of those already there, and mirrors them in
// memory. The proxy calls it before it answers, so that the connection that follows the
// answer finds its address in the set.
func (f *Firewall) Learn(key string, addrs []netip.Addr, ttl time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	ttl = max(ttl, minTTL).Truncate(time.Millisecond) // the kernel counts in milliseconds
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	names, ok := f.keys[key]
	if !ok {
		return fmt.Errorf("learn %q: %w", key, ErrUnknownKey)
	}
	var v4, v6 []nftables.SetElement
	var learned []netip.Addr
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		switch {
		case a.Is4():
			v4 = append(v4, nftables.SetElement{Key: a.AsSlice(), Timeout: ttl})
		case a.Is6():
			v6 = append(v6, nftables.SetElement{Key: a.AsSlice(), Timeout: ttl})
		default:
			continue
		}
		learned = append(learned, a)
	}
	for i, elems := range [][]nftables.SetElement{v4, v6} {
		if len(elems) == 0 {
			continue
		}
		s := newSet(f.table, setSpec{name: names[i], key: key, v6: i == 1})
		if err := f.nft.SetAddElements(s, elems); err != nil {
			return fmt.Errorf("learn %q: add to set %s: %w", key, s.Name, err)
		}
	}
	// Adding an element that is already there (without NLM_F_EXCL) updates its timeout, on
	// kernels since 6.10 (see the tests); the mirror records the new expiry either way.
	if err := f.nft.Flush(); err != nil {
		return fmt.Errorf("learn %q: %w", key, err)
	}
	expiry := f.now().Add(ttl)
	f.learnedMu.Lock()
	defer f.learnedMu.Unlock()
	m := f.learned[key]
	if m == nil {
		m = map[netip.Addr]time.Time{}
		f.learned[key] = m
	}
	now := f.now()
	for a, exp := range m {
		if !now.Before(exp) {
			delete(m, a) // keep the mirror from growing with addresses that expired
		}
	}
	for _, a := range learned {
		m[a] = expiry
	}
	return nil
}

// Learned reports whether addr was learned for the name target key and has not expired. It
// has the signature of egressapi.Learned.
func (f *Firewall) Learned(key string, addr netip.Addr) bool {
	addr = addr.Unmap().WithZone("")
	f.learnedMu.RLock()
	defer f.learnedMu.RUnlock()
	exp, ok := f.learned[key][addr]
	return ok && f.now().Before(exp)
}

// loadElements merges a set's kernel elements into the mirror.
func (f *Firewall) loadElements(s *nftables.Set, key string) error {
	elems, err := f.nft.GetSetElements(s)
	if err != nil {
		return fmt.Errorf("list elements of set %s: %w", s.Name, err)
	}
	now := f.now()
	f.learnedMu.Lock()
	defer f.learnedMu.Unlock()
	m := f.learned[key]
	if m == nil {
		m = map[netip.Addr]time.Time{}
		f.learned[key] = m
	}
	for _, e := range elems {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok {
			continue
		}
		exp := now.Add(e.Expires)
		if e.Expires == 0 && e.Timeout == 0 {
			// An element without a timeout (not one of ours) never expires: the filter lets it
			// through, so the mirror must say so too.
			exp = now.AddDate(100, 0, 0)
		}
		if old, ok := m[a.Unmap()]; !ok || old.Before(exp) {
			m[a.Unmap()] = exp
		}
	}
	return nil
}

// mirrorElements are the mirror's live addresses of a set, with their remaining time.
func (f *Firewall) mirrorElements(w setSpec) []nftables.SetElement {
	now := f.now()
	f.learnedMu.RLock()
	defer f.learnedMu.RUnlock()
	var out []nftables.SetElement
	for a, exp := range f.learned[w.key] {
		left := exp.Sub(now).Truncate(time.Millisecond)
		if left <= 0 || a.Is6() != w.v6 {
			continue
		}
		out = append(out, nftables.SetElement{Key: a.AsSlice(), Timeout: left})
	}
	return out
}

// pruneLearned forgets the keys the matcher no longer has: their sets are gone.
func (f *Firewall) pruneLearned(keys map[string][2]string) {
	f.learnedMu.Lock()
	defer f.learnedMu.Unlock()
	for k := range f.learned {
		if _, ok := keys[k]; !ok {
			delete(f.learned, k)
		}
	}
}
