package nodefilter

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
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

// ErrUnknownKey is returned by Learn for a key that the pod's last synced matcher has no name
// rule for (the DNS proxy can race a policy change): there is no set to add it to, and no
// rule that would use it.
var ErrUnknownKey = errors.New("no name rule for this key")

// ErrUnknownPod is returned for a pod that this Filter has not synced (Learn, CutFlows), or
// that the kernel holds nothing of (Counters).
var ErrUnknownPod = errors.New("no filter for this pod")

// ErrClosed is returned by the methods of a closed Filter. It matters: a closed netlink
// handle would fall back to the caller's own namespace.
var ErrClosed = errors.New("node filter is closed")

// minTTL is the shortest time an address is learned for. A DNS answer with TTL 0 must still
// let the connection that follows it through.
const minTTL = 5 * time.Second

// Options configure a Filter.
type Options struct {
	// NetNS is the network namespace to filter in; 0 or netns.None(): the current one (the
	// node's root namespace, in production). The netlink sockets are opened in it by New and
	// stay there; New keeps a copy of the handle, so the caller may close its own.
	NetNS netns.NsHandle
	// DNSPort is where the node's DNS proxy listens (on the wildcard address: a redirected
	// query arrives at the address of the interface it came in on). Required.
	DNSPort int
	// WaitPort is the TCP port of the node agent's wait endpoint, which every pod may reach
	// on NodeAddrs whatever its policy; 0: none.
	WaitPort int
	// NodeAddrs are the node's addresses the wait endpoint is reached at.
	NodeAddrs []netip.Addr
	// ProbeAddr and ProbePort are the destination of the proof probe: a pod's TCP SYN there
	// is answered by its filter with a reset (and counted), which a pod without a filter
	// would not get. Zero: no probe rule.
	ProbeAddr netip.Addr
	ProbePort int
}

// Pod is a sandbox pod as the node sees it.
type Pod struct {
	UID string
	// Iface is the host side of the pod's interface (a veth, routed or a bridge port).
	Iface string
	// IPs are the pod's addresses (IPv4 and/or IPv6).
	IPs []netip.Addr
}

// Counters of one pod, since its filter was installed or this Filter first synced it.
type Counters struct {
	// Allowed and Denied are new connections (strictly: first packets of flows) that the
	// pod's rules or default allowed and denied; Spoofed are frames the anti-spoofing chain
	// dropped; Probes are proof probes answered.
	Allowed, Denied, Spoofed, Probes uint64
}

func (c *Counters) add(o Counters) {
	c.Allowed += o.Allowed
	c.Denied += o.Denied
	c.Spoofed += o.Spoofed
	c.Probes += o.Probes
}

// Filter manages the node's two tables. Its methods may be called concurrently.
type Filter struct {
	cfg    config
	global *globalRuleset
	inet   *nftables.Table
	netdev *nftables.Table
	// now is time.Now, and minTTL the package's, but for tests of expiry.
	now    func() time.Time
	minTTL time.Duration

	// mu serializes netlink use (a lasting netlink socket is not safe for concurrent
	// requests) and guards what follows.
	mu     sync.Mutex
	closed bool
	// pending are the Syncs waiting for mu, for the next holder to do together (Sync).
	pendingMu sync.Mutex
	pending   []*syncReq
	// transactions counts the transactions of Syncs sent; refuse, if set, refuses a
	// transaction with that pod in it, as the kernel would (tests of syncGroup).
	transactions int
	refuse       func(uid string) error
	// reopened counts the nf_tables connections opened again (see transact), for tests.
	reopened int
	// nft is the nf_tables connection, under mu; nftOpts opened it, and open it again when a
	// transaction fails (see transact). nftErr is why it could not be opened again, if so:
	// until it is, no transaction is sent.
	nft     *nftables.Conn
	nftOpts []nftables.ConnOption
	nftErr  error
	raw     *mdnetlink.Conn // nf_tables too, for what the library does not parse (hook devices)
	nl      *netlink.Handle
	ns      netns.NsHandle // a copy of Options.NetNS, or none
	pods    map[string]*podState
	// walking is held (read) by the conntrack walks, which run without mu, and taken by
	// Close, under mu, before it closes nl.
	walking sync.RWMutex

	// learnedMu guards learned, apart from mu: the DNS proxy asks Learned on every query.
	learnedMu sync.RWMutex
	// learned mirrors the pods' sets: pod UID → key → address → expiry.
	learned map[string]map[string]map[netip.Addr]time.Time
}

// podState is what the Filter remembers of a pod it synced.
type podState struct {
	pod Pod
	id  string
	// keys are the name target keys of the last synced matcher, with their sets.
	keys map[string][2]string
	// mirrored are the sets whose elements the in-memory mirror is known to hold: after a
	// restart it is empty, and Sync reads the elements back before trusting it.
	mirrored map[string]bool
	// base carries the counts of the rules Sync replaced, so that Counters never goes
	// backwards (they are Prometheus counters).
	base Counters
}

// New opens netlink sockets in the namespace. It changes nothing: the caller checks the
// kernel (CheckKernel), then installs the pods' filters (Sync).
func New(o Options) (*Filter, error) {
	cfg, err := newConfig(o)
	if err != nil {
		return nil, err
	}
	g, err := buildGlobal(cfg)
	if err != nil {
		return nil, err
	}
	f := &Filter{
		cfg:     cfg,
		global:  g,
		inet:    &nftables.Table{Name: EgressTable, Family: nftables.TableFamilyINet},
		netdev:  &nftables.Table{Name: IngressTable, Family: nftables.TableFamilyNetdev},
		now:     time.Now,
		minTTL:  minTTL,
		ns:      netns.None(),
		pods:    map[string]*podState{},
		learned: map[string]map[string]map[netip.Addr]time.Time{},
	}
	ns := o.NetNS
	if ns == 0 {
		ns = netns.None()
	}
	nftOpts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(bigBuffers)}
	var rawCfg mdnetlink.Config
	if ns.IsOpen() {
		fd, err := unix.FcntlInt(uintptr(ns), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("keep the namespace handle: %w", err)
		}
		f.ns = netns.NsHandle(fd)
		nftOpts = append(nftOpts, nftables.WithNetNSFd(fd))
		rawCfg.NetNS = fd
	}
	fail := func(err error) (*Filter, error) {
		if f.nft != nil {
			_ = f.nft.CloseLasting()
		}
		if f.raw != nil {
			_ = f.raw.Close()
		}
		if f.ns.IsOpen() {
			_ = f.ns.Close()
		}
		return nil, err
	}
	f.nftOpts = nftOpts
	if f.nft, err = nftables.New(nftOpts...); err != nil {
		return fail(fmt.Errorf("open nf_tables netlink socket: %w", err))
	}
	if f.raw, err = mdnetlink.Dial(unix.NETLINK_NETFILTER, &rawCfg); err != nil {
		return fail(fmt.Errorf("open nf_tables netlink socket: %w", err))
	}
	if err := bigBuffers(f.raw); err != nil {
		return fail(err)
	}
	if f.nl, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER); err != nil {
		return fail(fmt.Errorf("open rtnetlink and conntrack sockets: %w", err))
	}
	return f, nil
}

// batchBuffer is the socket buffer size of the nf_tables sockets. Sync sends a pod's whole
// filter in one batch (it must: that is what makes it atomic), and the kernel refuses a
// message larger than the send buffer (EMSGSIZE) and drops replies beyond the receive buffer
// (ENOBUFS), of which there is one per message, echoing each rule. A rule takes some 600
// bytes, so the default of about 200 KiB holds some 350 rules, while MaxRules name rules of
// MaxPorts ports each are 3,200 rules, about 1.9 MiB each way. The buffer is a limit, not an
// allocation.
const batchBuffer = 16 << 20

// bigBuffers raises the socket's buffers to batchBuffer: with the *FORCE options, which
// CAP_NET_ADMIN (which the agent has, to change the filter at all) lets exceed
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

// Close closes the netlink sockets. It leaves the tables in place, on purpose: the pods stay
// filtered while the agent is down.
func (f *Filter) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.walking.Lock()
	f.nl.Close()
	f.walking.Unlock()
	errs := []error{f.raw.Close()}
	if err := f.nft.CloseLasting(); err != nil {
		errs = append(errs, fmt.Errorf("close nf_tables netlink socket: %w", err))
	}
	if f.ns.IsOpen() {
		errs = append(errs, f.ns.Close())
	}
	return errors.Join(errs...)
}

// ---- What the kernel holds. ----

// current is what the tables hold, of what one Sync or Remove looks at: everything shared,
// every chain's and set's name, and one pod's rules.
type current struct {
	inet, netdev *nftables.Table // nil: no table
	chains       map[string]*nftables.Chain
	rules        map[string][]*nftables.Rule // the shared chains' and the pod's
	sets         map[string]*nftables.Set
	elems        map[string][]nftables.SetElement // of the shared maps and sets
	ndChains     map[string]rawChain
	ndRules      map[string][]*nftables.Rule // the anti-spoofing chains' of the pods listed, by chain
}

// list reads what the tables hold, with the rules of the pods with those IDs.
func (f *Filter) list(ids ...string) (*current, error) {
	cur := &current{
		chains: map[string]*nftables.Chain{}, rules: map[string][]*nftables.Rule{},
		sets: map[string]*nftables.Set{}, elems: map[string][]nftables.SetElement{},
		ndChains: map[string]rawChain{}, ndRules: map[string][]*nftables.Rule{},
	}
	var err error
	if cur.inet, err = f.findTable(f.inet); err != nil {
		return nil, err
	}
	if cur.netdev, err = f.findTable(f.netdev); err != nil {
		return nil, err
	}
	if cur.inet != nil {
		chains, err := f.nft.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			return nil, fmt.Errorf("list chains: %w", err)
		}
		for _, c := range chains {
			if c.Table != nil && c.Table.Name == EgressTable {
				cur.chains[c.Name] = c
			}
		}
		look := []string{ChainPrerouting, ChainNATPrerouting}
		for _, id := range ids {
			if id != "" {
				look = append(look, podChain(id), denyChain(id))
			}
		}
		for _, name := range look {
			if _, ok := cur.chains[name]; !ok {
				continue
			}
			rules, err := f.nft.GetRules(f.inet, &nftables.Chain{Name: name, Table: f.inet})
			if err != nil {
				return nil, fmt.Errorf("list rules of chain %s: %w", name, err)
			}
			cur.rules[name] = rules
		}
		sets, err := f.nft.GetSets(f.inet)
		if err != nil {
			return nil, fmt.Errorf("list sets: %w", err)
		}
		for _, s := range sets {
			cur.sets[s.Name] = s
		}
		for _, w := range f.global.sets {
			s, ok := cur.sets[w.name]
			if !ok || !setShapeOK(s, w) {
				continue
			}
			elems, err := f.nft.GetSetElements(s)
			if err != nil {
				return nil, fmt.Errorf("list elements of %s: %w", w.name, err)
			}
			cur.elems[w.name] = elems
		}
	}
	if cur.netdev != nil {
		chains, err := f.netdevChains()
		if err != nil {
			return nil, err
		}
		for _, c := range chains {
			cur.ndChains[c.name] = c
		}
		for _, id := range ids {
			if _, ok := cur.ndChains[podChain(id)]; !ok || id == "" {
				continue
			}
			if cur.ndRules[podChain(id)], err = f.nft.GetRules(f.netdev, &nftables.Chain{Name: podChain(id), Table: f.netdev}); err != nil {
				return nil, fmt.Errorf("list rules of chain %s: %w", podChain(id), err)
			}
		}
	}
	return cur, nil
}

func (f *Filter) findTable(t *nftables.Table) (*nftables.Table, error) {
	tables, err := f.nft.ListTablesOfFamily(t.Family)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	for _, x := range tables {
		if x.Name == t.Name {
			return x, nil
		}
	}
	return nil, nil
}

// vmapChain is the chain a verdict map element jumps to ("" if it does not jump).
func vmapChain(e nftables.SetElement) string {
	ad, err := mdnetlink.NewAttributeDecoder(e.Val)
	if err != nil {
		return ""
	}
	var code uint32
	var chain string
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_VERDICT_CODE:
			if b := ad.Bytes(); len(b) == 4 {
				code = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
			}
		case unix.NFTA_VERDICT_CHAIN:
			chain = ad.String()
		}
	}
	if int32(code) != int32(expr.VerdictJump) {
		return ""
	}
	return chain
}

// podElems are a verdict map's elements: address → chain it jumps to.
func podElems(elems []nftables.SetElement) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.Key); ok {
			out[a] = vmapChain(e)
		}
	}
	return out
}

func setAddrs(elems []nftables.SetElement) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.Key); ok {
			out[a] = true
		}
	}
	return out
}

// metaOf finds a pod's meta rule among a chain's rules.
func metaOf(rules []*nftables.Rule) (Pod, bool) {
	for _, r := range rules {
		if len(r.Exprs) != 0 {
			continue
		}
		if p, ok := parseMeta(ruleComment(r.UserData)); ok {
			return p, true
		}
	}
	return Pod{}, false
}

// ---- Sync. ----

// Sync makes the pod's filter what p and m want. It is idempotent: if the kernel already
// holds that, it changes nothing and reports changed=false; otherwise it rewrites what
// differs, and only that, in one netlink batch, which the kernel applies atomically. It
// touches no other pod's chains or sets; a map element for one of p's addresses that jumps to
// another pod's chain (the address was that pod's) is taken over, and the anti-spoofing chain
// of another pod on p's interface (a pod that is gone) is deleted. Sets of name keys that m
// still has keep their learned addresses.
//
// Syncs that arrive while another runs are done together, as a group commit (syncGroup): one
// read of the tables and one transaction for all of them. A claim's Sync costs mostly that
// read, which grows with the pods of the node, so a hundred claims at once (a batch sandbox's
// replicas) cost a few reads instead of a hundred.
func (f *Filter) Sync(p Pod, m *egressapi.Matcher) (changed bool, err error) {
	want, err := buildPod(p, m, f.cfg)
	if err != nil {
		return false, err
	}
	req := &syncReq{want: want, done: make(chan struct{})}
	f.pendingMu.Lock()
	f.pending = append(f.pending, req)
	f.pendingMu.Unlock()

	f.mu.Lock()
	select {
	case <-req.done:
		// The Sync that held mu took this one along.
	default:
		// Still pending (only a holder of mu takes pending): this Sync does it, with every
		// other pending one.
		f.pendingMu.Lock()
		group := f.pending
		f.pending = nil
		f.pendingMu.Unlock()
		f.syncGroup(group)
	}
	f.mu.Unlock()
	<-req.done
	return req.changed, req.err
}

// syncReq is a Sync waiting for its group's commit.
type syncReq struct {
	want    *podRuleset
	changed bool
	err     error
	done    chan struct{}
}

func (r *syncReq) finish(changed bool, err error) {
	r.changed, r.err = changed, err
	close(r.done)
}

// plannedSync is a syncReq with the batch that does it.
type plannedSync struct {
	req *syncReq
	st  *podState
	b   *batch
}

// syncGroup does the Syncs of group, under mu. Each round reads the tables once, for all the
// pods left, and plans each pod's batch against that. The batches of different pods that
// change only their pods' own objects (distinct pods, interfaces and addresses) go in one
// transaction. A batch that changes shared ones (see batch.shared) goes in a transaction
// with none planned after it, and the pods after it wait for the next round's read, as do
// those that share an interface or an address with one taken: so every batch is planned
// against the state its transaction applies to. If a transaction of several is refused, its
// pods are done again one per transaction, so that the refusal is the refused pod's alone.
func (f *Filter) syncGroup(group []*syncReq) {
	solo := false
	for len(group) > 0 {
		if f.closed {
			for _, r := range group {
				r.finish(false, ErrClosed)
			}
			return
		}
		live := group[:0:0]
		ids := make([]string, 0, len(group))
		for _, r := range group {
			if err := f.checkIface(r.want.pod); err != nil {
				r.finish(false, err)
				continue
			}
			live = append(live, r)
			ids = append(ids, r.want.id)
		}
		if len(live) == 0 {
			return
		}
		cur, err := f.list(ids...)
		if err != nil {
			for _, r := range live {
				r.finish(false, err)
			}
			return
		}
		var (
			taken  []plannedSync
			rest   []*syncReq
			ifaces = map[string]bool{}
			addrs  = map[netip.Addr]bool{}
			uids   = map[string]bool{}
		)
		for i, r := range live {
			if len(taken) > 0 && (solo || uids[r.want.pod.UID] || ifaces[r.want.pod.Iface] || slices.ContainsFunc(r.want.pod.IPs, func(a netip.Addr) bool { return addrs[a] })) {
				rest = append(rest, r)
				continue
			}
			st := f.pods[r.want.pod.UID]
			if st == nil {
				st = &podState{id: r.want.id, mirrored: map[string]bool{}}
			}
			// Before trusting the mirror for a set that is kept, read back what the kernel
			// holds: after a restart, the sets remember what the previous agent learned.
			if err := f.loadMirror(r.want, cur, st); err != nil {
				r.finish(false, err)
				continue
			}
			b, err := f.plan(r.want, cur, st)
			if err != nil {
				r.finish(false, err)
				continue
			}
			if b.empty() {
				f.commitState(st, r.want)
				r.finish(false, nil)
				continue
			}
			if b.shared && len(taken) > 0 {
				rest = append(rest, r)
				continue
			}
			taken = append(taken, plannedSync{req: r, st: st, b: b})
			uids[r.want.pod.UID], ifaces[r.want.pod.Iface] = true, true
			for _, a := range r.want.pod.IPs {
				addrs[a] = true
			}
			if b.shared {
				rest = append(rest, live[i+1:]...)
				break
			}
		}
		if len(taken) > 0 {
			err := f.apply(taken)
			switch {
			case err != nil && len(taken) > 1 && !errors.Is(err, errQueue):
				solo = true
				again := make([]*syncReq, 0, len(taken)+len(rest))
				for _, t := range taken {
					again = append(again, t.req)
				}
				rest = append(again, rest...)
			case err != nil:
				for _, t := range taken {
					t.req.finish(false, fmt.Errorf("pod %s: apply filter: %w", t.req.want.pod.UID, err))
				}
			default:
				for _, t := range taken {
					t.st.base.add(t.b.dropped)
					f.commitState(t.st, t.req.want)
					t.req.finish(true, nil)
				}
			}
		}
		group = rest
	}
}

// errQueue: a batch could not even be queued (see batch.queue).
var errQueue = errors.New("queue")

// apply sends the batches of taken in one transaction, which the kernel applies whole or not
// at all. They touch disjoint objects, so one batch made of all of them, in batch.queue's
// order, is what each of them is alone.
func (f *Filter) apply(taken []plannedSync) error {
	if f.refuse != nil {
		for _, t := range taken {
			if err := f.refuse(t.req.want.pod.UID); err != nil {
				return err
			}
		}
	}
	f.transactions++
	all := taken[0].b
	if len(taken) > 1 {
		all = newBatch()
		for _, t := range taken {
			all.merge(t.b)
		}
	}
	return f.transact(all.queue)
}

// transact queues one transaction with queue and sends it; the kernel applies it whole or not
// at all. mu must be held. A transaction that fails takes the connection with it, and the
// next one starts on a new one: the nftables Conn cannot drop what was queued (its next Flush
// would send the rest of a half-queued transaction with the next one), it keeps a
// serialization error for good, and a send that stops at the first error leaves
// acknowledgements unread on the socket. An error of queue is wrapped in errQueue.
func (f *Filter) transact(queue func(c *nftables.Conn) error) error {
	if f.nftErr != nil {
		if err := f.reopen(); err != nil {
			return err
		}
	}
	err := queue(f.nft)
	if err != nil {
		err = fmt.Errorf("%w: %w", errQueue, err)
	} else if err = f.nft.Flush(); err == nil {
		return nil
	}
	if rerr := f.reopen(); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// reopen replaces the nf_tables connection with a new one (see transact). mu must be held.
func (f *Filter) reopen() error {
	c, err := nftables.New(f.nftOpts...)
	if err != nil {
		f.nftErr = fmt.Errorf("open nf_tables netlink socket again: %w", err)
		return f.nftErr
	}
	_ = f.nft.CloseLasting()
	f.nft, f.nftErr = c, nil
	f.reopened++
	return nil
}

// loadMirror reads back, before the mirror is trusted for a set that is kept, the elements
// the kernel holds: after a restart, the sets remember what the previous agent learned.
func (f *Filter) loadMirror(want *podRuleset, cur *current, st *podState) error {
	for _, s := range want.sets {
		if have, ok := cur.sets[s.name]; ok && setShapeOK(have, s) && !st.mirrored[s.name] {
			if err := f.loadElements(want.pod.UID, have, s.key); err != nil {
				return err
			}
			st.mirrored[s.name] = true
		}
	}
	return nil
}

func (f *Filter) commitState(st *podState, want *podRuleset) {
	st.pod = want.pod
	st.keys = want.keys
	wantSets := map[string]bool{}
	for _, s := range want.sets {
		wantSets[s.name] = true
		st.mirrored[s.name] = true
	}
	for name := range st.mirrored {
		if !wantSets[name] {
			delete(st.mirrored, name)
		}
	}
	f.pods[want.pod.UID] = st
	f.pruneLearned(want.pod.UID, want.keys)
}

// checkIface refuses a pod whose interface is not there (the netdev chain would wait for it,
// and filter nothing meanwhile), or is a port of anything but a Linux bridge, or of a bridge
// on a node that does not send bridged packets through the inet hooks (pod-to-pod traffic
// would pass unfiltered).
func (f *Filter) checkIface(p Pod) error {
	l, err := f.nl.LinkByName(p.Iface)
	if err != nil {
		return fmt.Errorf("pod %s: interface %s: %w", p.UID, p.Iface, err)
	}
	if l.Attrs().MasterIndex == 0 {
		return nil
	}
	master, err := f.nl.LinkByIndex(l.Attrs().MasterIndex)
	if err != nil {
		return fmt.Errorf("pod %s: master of interface %s: %w", p.UID, p.Iface, err)
	}
	if master.Type() != "bridge" {
		// An Open vSwitch bridge, say, switches frames without the inet hooks ever seeing
		// them: the policy would hold for routed traffic only. Fail closed.
		return fmt.Errorf("pod %s: %s is a port of %s, a %s: only Linux bridges (with br_netfilter) and routed interfaces are filtered",
			p.UID, p.Iface, master.Attrs().Name, master.Type())
	}
	v4, v6 := split(p.IPs)
	for _, c := range []struct {
		need bool
		name string
	}{{len(v4) > 0, "bridge-nf-call-iptables"}, {len(v6) > 0, "bridge-nf-call-ip6tables"}} {
		if !c.need {
			continue
		}
		v, err := f.readSysctl("net/bridge/" + c.name)
		if err != nil {
			return fmt.Errorf("pod %s: %s is a port of bridge %s, and bridged packets are not filtered without br_netfilter: %w",
				p.UID, p.Iface, master.Attrs().Name, err)
		}
		if v != "1" {
			return fmt.Errorf("pod %s: %s is a port of bridge %s, and bridged packets are not filtered with net.bridge.%s=%s",
				p.UID, p.Iface, master.Attrs().Name, c.name, v)
		}
	}
	return nil
}

// readSysctl reads a /proc/sys file as the Filter's namespace sees it (net.* files are per
// namespace). In another namespace, on a thread of its own that the runtime then discards.
func (f *Filter) readSysctl(path string) (string, error) {
	read := func() (string, error) {
		b, err := os.ReadFile("/proc/sys/" + path)
		return strings.TrimSpace(string(b)), err
	}
	if !f.ns.IsOpen() {
		return read()
	}
	type result struct {
		v   string
		err error
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // and never unlocked: the thread goes with the goroutine
		if err := netns.Set(f.ns); err != nil {
			c <- result{err: fmt.Errorf("enter namespace: %w", err)}
			return
		}
		v, err := read()
		c <- result{v, err}
	}()
	r := <-c
	return r.v, r.err
}

// elemOp is a batch's additions to or deletions from one set or map.
type elemOp struct {
	set   *nftables.Set
	elems []nftables.SetElement
}

// batch is what a Sync or Remove sends, in an order the kernel accepts within one
// transaction: elements and rules go before the chains and sets they use, chains and sets
// are created before the rules and elements that use them.
type batch struct {
	addTables []*nftables.Table
	delElems  []elemOp
	flush     []*nftables.Chain
	delSets   []*nftables.Set
	delChains []*nftables.Chain
	addChains []*nftables.Chain
	addSets   []elemOp
	addRules  []*nftables.Rule
	addElems  []elemOp

	flushed map[[2]string]bool // table, chain
	// dropped are the counts of the counters of the pod's rules that go.
	dropped Counters
	// shared: the batch changes more than the pod's own chains, sets and address elements
	// (the tables, the shared chains and sets, what is foreign, or what another pod left): it
	// is not planned next to other pods' batches in one transaction (see syncGroup).
	shared bool
}

func newBatch() *batch { return &batch{flushed: map[[2]string]bool{}} }

// merge appends o's operations to b's (o's pod's objects are not b's).
func (b *batch) merge(o *batch) {
	b.addTables = append(b.addTables, o.addTables...)
	b.delElems = append(b.delElems, o.delElems...)
	b.flush = append(b.flush, o.flush...)
	b.delSets = append(b.delSets, o.delSets...)
	b.delChains = append(b.delChains, o.delChains...)
	b.addChains = append(b.addChains, o.addChains...)
	b.addSets = append(b.addSets, o.addSets...)
	b.addRules = append(b.addRules, o.addRules...)
	b.addElems = append(b.addElems, o.addElems...)
	for k := range o.flushed {
		b.flushed[k] = true
	}
	b.dropped.add(o.dropped)
	b.shared = b.shared || o.shared
}

func (b *batch) empty() bool {
	return len(b.addTables) == 0 && len(b.delElems) == 0 && len(b.flush) == 0 && len(b.delSets) == 0 &&
		len(b.delChains) == 0 && len(b.addChains) == 0 && len(b.addSets) == 0 && len(b.addRules) == 0 && len(b.addElems) == 0
}

// flushChain empties a chain, once, counting what its rules counted if they are the pod's.
func (b *batch) flushChain(t *nftables.Table, name string, rules []*nftables.Rule) {
	k := [2]string{t.Name, name}
	if b.flushed[k] {
		return
	}
	b.flushed[k] = true
	b.flush = append(b.flush, &nftables.Chain{Name: name, Table: t})
	for _, r := range rules {
		b.dropped.add(countsOf(t.Family, name, r))
	}
}

func (b *batch) queue(c *nftables.Conn) error {
	for _, t := range b.addTables {
		c.AddTable(t)
	}
	for _, op := range b.delElems {
		if err := c.SetDeleteElements(op.set, op.elems); err != nil {
			return fmt.Errorf("delete elements of %s: %w", op.set.Name, err)
		}
	}
	for _, ch := range b.flush {
		c.FlushChain(ch)
	}
	for _, s := range b.delSets {
		c.DelSet(s)
	}
	for _, ch := range b.delChains {
		c.DelChain(ch)
	}
	for _, ch := range b.addChains {
		c.AddChain(ch)
	}
	for _, op := range b.addSets {
		if err := c.AddSet(op.set, op.elems); err != nil {
			return fmt.Errorf("add set %s: %w", op.set.Name, err)
		}
	}
	for _, r := range b.addRules {
		c.AddRule(r)
	}
	for _, op := range b.addElems {
		if err := c.SetAddElements(op.set, op.elems); err != nil {
			return fmt.Errorf("add elements to %s: %w", op.set.Name, err)
		}
	}
	return nil
}

func (f *Filter) newChain(t *nftables.Table, w chainSpec) *nftables.Chain {
	return &nftables.Chain{Name: w.name, Table: t, Type: w.typ, Hooknum: w.hook, Priority: w.priority, Policy: w.policy, Device: w.device}
}

func (f *Filter) newSet(w setSpec) *nftables.Set {
	s := &nftables.Set{Table: f.inet, Name: w.name, KeyType: nftables.TypeIPAddr, HasTimeout: w.learns, Comment: w.key}
	if w.v6 {
		s.KeyType = nftables.TypeIP6Addr
	}
	if w.isMap {
		s.IsMap = true
		s.DataType = nftables.TypeVerdict
	}
	return s
}

func (f *Filter) addRules(b *batch, t *nftables.Table, chain string, rules []ruleSpec) {
	ch := &nftables.Chain{Name: chain, Table: t}
	for _, r := range rules {
		b.addRules = append(b.addRules, &nftables.Rule{Table: t, Chain: ch, Exprs: r.exprs, UserData: r.userData})
	}
}

func jumpTo(chain string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

// plan is the difference between what the kernel holds and what is wanted, as the batch that
// removes it.
func (f *Filter) plan(want *podRuleset, cur *current, st *podState) (*batch, error) {
	b := newBatch()
	if cur.inet == nil || cur.inet.Flags != 0 {
		// Missing, or dormant (flags 1), or owned by a process (flags 2, which would make it
		// go when that process does): NEWTABLE with flags 0 fixes all three.
		b.addTables = append(b.addTables, f.inet)
		b.shared = true
	}
	if cur.netdev == nil || cur.netdev.Flags != 0 {
		b.addTables = append(b.addTables, f.netdev)
		b.shared = true
	}

	// Foreign chains and sets in our inet table go; other pods' stay as they are.
	for name := range cur.chains {
		if _, _, ok := idOfPodChain(name); ok || name == ChainPrerouting || name == ChainNATPrerouting {
			continue
		}
		b.flushChain(f.inet, name, nil)
		b.delChains = append(b.delChains, &nftables.Chain{Name: name, Table: f.inet})
		b.shared = true
	}
	globalSets := map[string]setSpec{}
	for _, s := range f.global.sets {
		globalSets[s.name] = s
	}
	podSets := map[string]setSpec{}
	for _, s := range want.sets {
		podSets[s.name] = s
	}
	podSetsGone := false
	for name, s := range cur.sets {
		if s.Anonymous {
			continue // goes with the rule that uses it
		}
		if _, ok := globalSets[name]; ok {
			continue // below
		}
		if id, ok := idOfPodSet(name); ok {
			if id != want.id {
				continue
			}
			if w, ok := podSets[name]; ok && setShapeOK(s, w) {
				continue
			}
			podSetsGone = true
		} else {
			b.shared = true
		}
		b.delSets = append(b.delSets, &nftables.Set{Name: name, Table: f.inet})
	}

	// The shared sets and maps. One that has to be made anew loses every pod's elements:
	// they are put back below, from the pods' meta rules.
	recreated := map[string]bool{}
	for _, w := range f.global.sets {
		have, ok := cur.sets[w.name]
		if ok && setShapeOK(have, w) {
			continue
		}
		if ok {
			b.delSets = append(b.delSets, &nftables.Set{Name: w.name, Table: f.inet})
		}
		recreated[w.name] = true
		b.shared = true
	}

	// The shared chains.
	for _, w := range f.global.chains {
		have, ok := cur.chains[w.name]
		rewrite := !ok || !rulesMatch(cur.rules[w.name], f.global.rules[w.name])
		switch {
		case !ok:
			b.addChains = append(b.addChains, f.newChain(f.inet, w))
		case !chainShapeOK(have, w):
			b.flushChain(f.inet, w.name, nil)
			b.delChains = append(b.delChains, &nftables.Chain{Name: w.name, Table: f.inet})
			b.addChains = append(b.addChains, f.newChain(f.inet, w))
			rewrite = true
		case !chainPolicyOK(have, w):
			// NEWCHAIN on an existing base chain updates its policy in place.
			b.addChains = append(b.addChains, f.newChain(f.inet, w))
			b.shared = true
		}
		// A recreated set takes the lookups in it along: rewrite the rules that use it.
		switch w.name {
		case ChainPrerouting:
			rewrite = rewrite || recreated[MapPods4] || recreated[MapPods6]
		case ChainNATPrerouting:
			rewrite = rewrite || recreated[SetDNS4] || recreated[SetDNS6]
		}
		if rewrite {
			if ok {
				b.flushChain(f.inet, w.name, nil)
			}
			f.addRules(b, f.inet, w.name, f.global.rules[w.name])
			b.shared = true
		}
	}

	// The pod's chains in the inet table: the deny chain first, which the policy jumps to.
	chainRecreated := false
	denyRecreated := false
	for _, w := range want.chains {
		have, ok := cur.chains[w.name]
		recreate := ok && !chainShapeOK(have, w)
		rewrite := !ok || recreate || !rulesMatch(cur.rules[w.name], want.rules[w.name])
		if w.name == podChain(want.id) && (denyRecreated || podSetsGone) {
			rewrite = true
		}
		if recreate {
			b.flushChain(f.inet, w.name, cur.rules[w.name])
			b.delChains = append(b.delChains, &nftables.Chain{Name: w.name, Table: f.inet})
			if w.name == denyChain(want.id) {
				denyRecreated = true
			} else {
				chainRecreated = true
			}
		}
		if !ok || recreate {
			b.addChains = append(b.addChains, f.newChain(f.inet, w))
		}
		if rewrite {
			if ok && !recreate {
				b.flushChain(f.inet, w.name, cur.rules[w.name])
			}
			f.addRules(b, f.inet, w.name, want.rules[w.name])
		}
	}
	// (A deny chain recreated under a policy chain that is kept: the policy's jumps must go
	// before the deny chain does. The rewrite flushes them, and flushes come before deletions.)

	for _, w := range want.sets {
		if s, ok := cur.sets[w.name]; ok && setShapeOK(s, w) {
			continue
		}
		// A set recreated after tampering gets back what the mirror holds.
		b.addSets = append(b.addSets, elemOp{set: f.newSet(w), elems: f.mirrorElements(want.pod.UID, w)})
	}

	// The anti-spoofing chain. Another pod's on the same interface is of a pod that is gone
	// (two pods do not share an interface), and would drop this one's traffic as spoofed.
	for name, c := range cur.ndChains {
		id, deny, ok := idOfPodChain(name)
		switch {
		case ok && !deny && id == want.id:
			continue
		case ok && !deny && !slices.Contains(c.devices, want.pod.Iface):
			continue
		}
		b.flushChain(f.netdev, name, nil)
		b.delChains = append(b.delChains, &nftables.Chain{Name: name, Table: f.netdev})
		b.shared = true
	}
	w := want.ingress
	have, ok := cur.ndChains[w.name]
	recreate := ok && !have.matches(w)
	if recreate {
		b.flushChain(f.netdev, w.name, cur.ndRules[w.name])
		b.delChains = append(b.delChains, &nftables.Chain{Name: w.name, Table: f.netdev})
	}
	if !ok || recreate {
		b.addChains = append(b.addChains, f.newChain(f.netdev, w))
	}
	if !ok || recreate || !rulesMatch(cur.ndRules[w.name], want.rules[ingressKey]) {
		if ok && !recreate {
			b.flushChain(f.netdev, w.name, cur.ndRules[w.name])
		}
		f.addRules(b, f.netdev, w.name, want.rules[ingressKey])
	}

	// The pod's addresses in the shared maps and sets.
	var refill []Pod
	if len(recreated) > 0 {
		var err error
		if refill, err = f.podsLocked(cur); err != nil {
			return nil, err
		}
	}
	v4, v6 := split(want.pod.IPs)
	chain := podChain(want.id)
	for i, fam := range families {
		wantIPs := [][]netip.Addr{v4, v6}[i]
		mapSet := f.newSet(setSpec{name: fam.pods, isMap: true, v6: i == 1})
		dnsSet := f.newSet(setSpec{name: fam.dns, v6: i == 1})
		var have map[netip.Addr]string
		var dns map[netip.Addr]bool
		if !recreated[fam.pods] {
			have = podElems(cur.elems[fam.pods])
		}
		if !recreated[fam.dns] {
			dns = setAddrs(cur.elems[fam.dns])
		}
		var addMap, delMap, addDNS, delDNS []nftables.SetElement
		for _, a := range wantIPs {
			c, ok := have[a]
			if ok && c == chain && !chainRecreated {
				continue
			}
			if ok {
				delMap = append(delMap, nftables.SetElement{Key: a.AsSlice()})
				// Another pod's address until now (or a chain recreated): the element is
				// taken over.
				b.shared = b.shared || c != chain
			}
			addMap = append(addMap, nftables.SetElement{Key: a.AsSlice(), VerdictData: jumpTo(chain)})
		}
		for a, c := range have {
			if c == chain && !slices.Contains(wantIPs, a) {
				delMap = append(delMap, nftables.SetElement{Key: a.AsSlice()})
				if dns[a] {
					delDNS = append(delDNS, nftables.SetElement{Key: a.AsSlice()})
				}
			}
		}
		for _, a := range wantIPs {
			if !dns[a] {
				addDNS = append(addDNS, nftables.SetElement{Key: a.AsSlice()})
			}
		}
		// Every other pod's addresses, into a map or set made anew.
		claimed := map[netip.Addr]bool{}
		for _, a := range wantIPs {
			claimed[a] = true
		}
		for _, p := range refill {
			pid := PodID(p.UID)
			if pid == want.id {
				continue
			}
			if _, ok := cur.chains[podChain(pid)]; !ok {
				continue
			}
			for _, a := range p.IPs {
				if a.Is6() != (i == 1) || claimed[a] {
					continue
				}
				claimed[a] = true
				if recreated[fam.pods] {
					addMap = append(addMap, nftables.SetElement{Key: a.AsSlice(), VerdictData: jumpTo(podChain(pid))})
				}
				if recreated[fam.dns] {
					addDNS = append(addDNS, nftables.SetElement{Key: a.AsSlice()})
				}
			}
		}
		sortElems(addMap, delMap, addDNS, delDNS)
		if len(delMap) > 0 {
			b.delElems = append(b.delElems, elemOp{mapSet, delMap})
		}
		if len(delDNS) > 0 {
			b.delElems = append(b.delElems, elemOp{dnsSet, delDNS})
		}
		if recreated[fam.pods] {
			b.addSets = append(b.addSets, elemOp{mapSet, addMap})
		} else if len(addMap) > 0 {
			b.addElems = append(b.addElems, elemOp{mapSet, addMap})
		}
		if recreated[fam.dns] {
			b.addSets = append(b.addSets, elemOp{dnsSet, addDNS})
		} else if len(addDNS) > 0 {
			b.addElems = append(b.addElems, elemOp{dnsSet, addDNS})
		}
	}
	return b, nil
}

func sortElems(lists ...[]nftables.SetElement) {
	for _, l := range lists {
		slices.SortFunc(l, func(a, b nftables.SetElement) int { return bytes.Compare(a.Key, b.Key) })
	}
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
	if have.Interval || have.Constant || have.Anonymous || have.IsMap != w.isMap || have.HasTimeout != w.learns {
		return false
	}
	if w.isMap {
		// The library reads a verdict map's data type into its KeyType, and loses the key's:
		// the flags are what is left to check.
		return true
	}
	kt := nftables.TypeIPAddr
	if w.v6 {
		kt = nftables.TypeIP6Addr
	}
	return have.KeyType.Name == kt.Name && have.KeyType.Bytes == kt.Bytes
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

// countsOf is what a listed rule of a pod's chain counted.
func countsOf(family nftables.TableFamily, chain string, r *nftables.Rule) Counters {
	var n uint64
	counted, rejects := false, false
	var verdict *expr.Verdict
	for _, e := range r.Exprs {
		switch v := e.(type) {
		case *expr.Counter:
			n += v.Packets
			counted = true
		case *expr.Verdict:
			verdict = v
		case *expr.Reject:
			rejects = true
		}
	}
	var c Counters
	_, deny, ok := idOfPodChain(chain)
	if !counted || !ok {
		return c
	}
	switch {
	case family == nftables.TableFamilyNetdev:
		if verdict != nil && verdict.Kind == expr.VerdictDrop {
			c.Spoofed = n
		}
	case deny:
		c.Denied = n
	case rejects:
		c.Probes = n
	case verdict != nil && verdict.Kind == expr.VerdictAccept:
		c.Allowed = n
	}
	return c
}

// ---- Remove, Pods, Counters. ----

// Remove deletes everything of the pod: its chains, its sets, and its addresses' elements in
// the shared map and sets (those that still lead to it: an address another pod took over
// stays that pod's). It is not an error if there is nothing to remove.
func (f *Filter) Remove(uid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	id := PodID(uid)
	cur, err := f.list(id)
	if err != nil {
		return err
	}
	chain := podChain(id)
	b := newBatch()
	// The pod's addresses: from its meta rules, and from the map elements that lead to it.
	meta, _ := metaOf(cur.rules[chain])
	if m, ok := metaOf(cur.ndRules[podChain(id)]); ok && len(meta.IPs) == 0 {
		meta = m
	}
	for i, fam := range families {
		have := podElems(cur.elems[fam.pods])
		dns := setAddrs(cur.elems[fam.dns])
		var delMap, delDNS []nftables.SetElement
		gone := map[netip.Addr]bool{}
		for a, c := range have {
			if c == chain {
				delMap = append(delMap, nftables.SetElement{Key: a.AsSlice()})
				gone[a] = true
			}
		}
		for _, a := range meta.IPs {
			if _, ok := have[a]; !ok && a.Is6() == (i == 1) {
				gone[a] = true
			}
		}
		for a := range gone {
			if dns[a] {
				delDNS = append(delDNS, nftables.SetElement{Key: a.AsSlice()})
			}
		}
		sortElems(delMap, delDNS)
		if len(delMap) > 0 {
			b.delElems = append(b.delElems, elemOp{f.newSet(setSpec{name: fam.pods, isMap: true, v6: i == 1}), delMap})
		}
		if len(delDNS) > 0 {
			b.delElems = append(b.delElems, elemOp{f.newSet(setSpec{name: fam.dns, v6: i == 1}), delDNS})
		}
	}
	for _, name := range []string{chain, denyChain(id)} {
		if _, ok := cur.chains[name]; ok {
			b.flushChain(f.inet, name, nil)
			b.delChains = append(b.delChains, &nftables.Chain{Name: name, Table: f.inet})
		}
	}
	if _, ok := cur.ndChains[chain]; ok {
		b.flushChain(f.netdev, chain, nil)
		b.delChains = append(b.delChains, &nftables.Chain{Name: chain, Table: f.netdev})
	}
	for name := range cur.sets {
		if sid, ok := idOfPodSet(name); ok && sid == id {
			b.delSets = append(b.delSets, &nftables.Set{Name: name, Table: f.inet})
		}
	}
	if !b.empty() {
		if err := f.transact(b.queue); err != nil {
			return fmt.Errorf("pod %s: remove filter: %w", uid, err)
		}
	}
	delete(f.pods, uid)
	f.learnedMu.Lock()
	delete(f.learned, uid)
	f.learnedMu.Unlock()
	return nil
}

// Pods are the pods whose filters the kernel holds, as their meta rules describe them (the
// interface is the anti-spoofing chain's, if it has one), sorted by UID. A restarted agent
// compares them with the pods it should filter: it Syncs those, and Removes the others.
func (f *Filter) Pods() ([]Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	cur, err := f.list("")
	if err != nil {
		return nil, err
	}
	return f.podsLocked(cur)
}

func (f *Filter) podsLocked(cur *current) ([]Pod, error) {
	ids := map[string]bool{}
	for name := range cur.chains {
		if id, deny, ok := idOfPodChain(name); ok && !deny {
			ids[id] = true
		}
	}
	for name := range cur.ndChains {
		if id, deny, ok := idOfPodChain(name); ok && !deny {
			ids[id] = true
		}
	}
	var out []Pod
	for id := range ids {
		name := podChain(id)
		var p Pod
		found := false
		for _, t := range []*nftables.Table{f.inet, f.netdev} {
			if t == f.inet && cur.chains[name] == nil {
				continue
			}
			if t == f.netdev {
				if _, ok := cur.ndChains[name]; !ok {
					continue
				}
			}
			rules, err := f.nft.GetRules(t, &nftables.Chain{Name: name, Table: t})
			if err != nil {
				return nil, fmt.Errorf("list rules of chain %s: %w", name, err)
			}
			if m, ok := metaOf(rules); ok && PodID(m.UID) == id {
				p, found = m, true
				break
			}
		}
		if !found {
			continue // not ours, or tampered with beyond telling whose
		}
		if c, ok := cur.ndChains[name]; ok && len(c.devices) == 1 {
			p.Iface = c.devices[0]
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pod) int { return strings.Compare(a.UID, b.UID) })
	return out, nil
}

// Counters are the pod's counts: what its rules' counters hold, and what the counters of the
// rules that Sync replaced held.
func (f *Filter) Counters(uid string) (Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return Counters{}, ErrClosed
	}
	var c Counters
	if st := f.pods[uid]; st != nil {
		c = st.base
	}
	id := PodID(uid)
	// The library's errors do not wrap the kernel's: whether a chain is there is asked first.
	inet, err := f.nft.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return Counters{}, fmt.Errorf("list chains: %w", err)
	}
	netdev, err := f.netdevChains()
	if err != nil {
		return Counters{}, err
	}
	has := map[[2]string]bool{}
	for _, ch := range inet {
		if ch.Table != nil && ch.Table.Name == EgressTable {
			has[[2]string{EgressTable, ch.Name}] = true
		}
	}
	for _, ch := range netdev {
		has[[2]string{IngressTable, ch.name}] = true
	}
	found := false
	for _, x := range []struct {
		t     *nftables.Table
		chain string
	}{{f.inet, podChain(id)}, {f.inet, denyChain(id)}, {f.netdev, podChain(id)}} {
		if !has[[2]string{x.t.Name, x.chain}] {
			continue
		}
		rules, err := f.nft.GetRules(x.t, &nftables.Chain{Name: x.chain, Table: x.t})
		if err != nil {
			return Counters{}, fmt.Errorf("list rules of chain %s: %w", x.chain, err)
		}
		found = true
		for _, r := range rules {
			c.add(countsOf(x.t.Family, x.chain, r))
		}
	}
	if !found {
		return Counters{}, fmt.Errorf("counters of pod %s: %w", uid, ErrUnknownPod)
	}
	return c, nil
}

// ---- Learned addresses. ----

// Learn adds addresses the DNS proxy resolved for a name target key to that key's sets in
// the pod's filter, for ttl (at least minTTL), refreshing the timeout of those already there
// (unless every address has at least half of ttl to go: then it changes nothing), and mirrors
// them in memory. The proxy calls it before it answers, so that the connection
// that follows the answer finds its address in the set.
func (f *Filter) Learn(uid, key string, addrs []netip.Addr, ttl time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	ttl = max(ttl, f.minTTL).Truncate(time.Millisecond) // the kernel counts in milliseconds
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	st := f.pods[uid]
	if st == nil {
		return fmt.Errorf("learn %q for pod %s: %w", key, uid, ErrUnknownPod)
	}
	names, ok := st.keys[key]
	if !ok {
		return fmt.Errorf("learn %q for pod %s: %w", key, uid, ErrUnknownKey)
	}
	if f.fresh(uid, key, addrs, ttl/2) {
		// Every address is in the sets with at least half of this answer's time to go: the
		// client's connection finds them there, and a commit per answer (most of what a
		// lookup through the proxy costs) is spared. They are refreshed once half has passed.
		return nil
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
	// Adding an element that is already there (without NLM_F_EXCL) updates its timeout, on
	// kernels since 6.10; the mirror records the new expiry either way.
	err := f.transact(func(c *nftables.Conn) error {
		for i, elems := range [][]nftables.SetElement{v4, v6} {
			if len(elems) == 0 {
				continue
			}
			s := f.newSet(setSpec{name: names[i], key: key, v6: i == 1, learns: true})
			if err := c.SetAddElements(s, elems); err != nil {
				return fmt.Errorf("add to set %s: %w", s.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("learn %q for pod %s: %w", key, uid, err)
	}
	now := f.now()
	expiry := now.Add(ttl)
	f.learnedMu.Lock()
	defer f.learnedMu.Unlock()
	m := f.keyMirror(uid, key)
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

// fresh reports whether every address is learned for the pod's key with at least left to go.
func (f *Filter) fresh(uid, key string, addrs []netip.Addr, left time.Duration) bool {
	deadline := f.now().Add(left)
	f.learnedMu.RLock()
	defer f.learnedMu.RUnlock()
	m := f.learned[uid][key]
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if !a.Is4() && !a.Is6() {
			continue
		}
		if exp, ok := m[a]; !ok || exp.Before(deadline) {
			return false
		}
	}
	return true
}

// Learned reports whether addr was learned for the name target key in the pod's filter and
// has not expired. Bound to a pod, it is an egressapi.Learned.
func (f *Filter) Learned(uid, key string, addr netip.Addr) bool {
	addr = addr.Unmap().WithZone("")
	f.learnedMu.RLock()
	defer f.learnedMu.RUnlock()
	exp, ok := f.learned[uid][key][addr]
	return ok && f.now().Before(exp)
}

// keyMirror is the mirror of a pod's key, made if missing; learnedMu must be held.
func (f *Filter) keyMirror(uid, key string) map[netip.Addr]time.Time {
	pm := f.learned[uid]
	if pm == nil {
		pm = map[string]map[netip.Addr]time.Time{}
		f.learned[uid] = pm
	}
	m := pm[key]
	if m == nil {
		m = map[netip.Addr]time.Time{}
		pm[key] = m
	}
	return m
}

// loadElements merges a set's kernel elements into the mirror.
func (f *Filter) loadElements(uid string, s *nftables.Set, key string) error {
	elems, err := f.nft.GetSetElements(s)
	if err != nil {
		return fmt.Errorf("list elements of set %s: %w", s.Name, err)
	}
	now := f.now()
	f.learnedMu.Lock()
	defer f.learnedMu.Unlock()
	m := f.keyMirror(uid, key)
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

// mirrorElements are the mirror's live addresses of a pod's set, with their remaining time.
func (f *Filter) mirrorElements(uid string, w setSpec) []nftables.SetElement {
	now := f.now()
	f.learnedMu.RLock()
	defer f.learnedMu.RUnlock()
	var out []nftables.SetElement
	for a, exp := range f.learned[uid][w.key] {
		left := exp.Sub(now).Truncate(time.Millisecond)
		if left <= 0 || a.Is6() != w.v6 {
			continue
		}
		out = append(out, nftables.SetElement{Key: a.AsSlice(), Timeout: left})
	}
	sortElems(out)
	return out
}

// pruneLearned forgets the keys the pod's matcher no longer has: their sets are gone.
func (f *Filter) pruneLearned(uid string, keys map[string][2]string) {
	f.learnedMu.Lock()
	defer f.learnedMu.Unlock()
	for k := range f.learned[uid] {
		if _, ok := keys[k]; !ok {
			delete(f.learned[uid], k)
		}
	}
}
