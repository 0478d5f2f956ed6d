// Package egress is the node agent's egress enforcer: each sandbox pod's outbound policy,
// enforced from the node's network namespace, where nothing in the pod can reach it. A packet
// filter (internal/nodefilter) keyed by the pod's host-side interface and addresses, and a DNS
// proxy (internal/dnsproxy) that answers every query the filter sends it by the policy of the
// pod that asked and teaches the filter the addresses of allowed names. sandbox-controller
// pushes each pod's policy over mutual TLS (egressapi); the agent finds the pod's interface
// through containerd (internal/podnet) and the pod's addresses through the Kubernetes API.
//
// It works the same for every runtime whose pod traffic crosses the node's netfilter, which
// the agent proves for every pod before it reports the pod's policy in force: a probe written
// to the pod's own interface, from inside its network namespace, must be counted by the pod's
// rules. gVisor's user-space network stack, which bypasses the pod's own netfilter, passes;
// a datapath that bypasses the node's (Cilium's BPF host routing) does not, and the pod waits
// with a reason that says so.
//
// It fails closed:
//   - a pod runs nothing of its sandbox before its filter is in and proven: the pod's first init
//     container waits for that here (WaitPath), and nothing else of the pod starts before it;
//   - a pod no policy was pushed for yet gets deny-all;
//   - a policy the kernel refuses leaves the previous rules in force;
//   - the rules are the kernel's, not the process's: they outlive the agent, and a restarted
//     agent reads them back (and each pod's last policy from its state directory).
package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/dnsproxy"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/nodefilter"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/podnet"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/atomicfile"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const (
	// pushWait bounds how long a push waits for its pod to be seen on the node and its policy
	// to be in force: below the controller's push timeout, so that it hears why.
	pushWait = 4 * time.Second
	// probeWait bounds how long the proof probe may take to show in the pod's counter: the
	// counter moves in microseconds where netfilter sees the pod at all.
	probeWait = time.Second
	// probeTries: a probe is one frame; a busy node may drop one.
	probeTries = 3
	// workers sync pods in parallel: a sync is a few netlink round trips and a probe, and the
	// filter does the syncs that wait for it together (nodefilter.Filter.Sync). As many as
	// the controller pushes at once for one sandbox (its parallelWrites), so that the pushes
	// of a batch sandbox's replicas meet in the filter.
	workers = 16
	// stateDirPerm: the state directory holds every pod's policy.
	stateDirPerm = 0o700
)

// PacketFilter is what the enforcer needs of the node's packet filter (nodefilter.Filter):
// the seam between the enforcer's bookkeeping and netlink.
type PacketFilter interface {
	Sync(p nodefilter.Pod, m *egressapi.Matcher) (bool, error)
	Remove(uid string) error
	Pods() ([]nodefilter.Pod, error)
	Learn(uid, key string, addrs []netip.Addr, ttl time.Duration) error
	Learned(uid, key string, addr netip.Addr) bool
	CutFlows(uid string, m *egressapi.Matcher) (int, error)
	Counters(uid string) (nodefilter.Counters, error)
}

// PodNetwork finds a pod's interface and proves the filter sees it (podnet, through
// containerd): the seam between the enforcer and the node's runtime.
type PodNetwork interface {
	// Link is the pod's host-side interface; an error wrapping podnet.ErrNotFound while the
	// pod's sandbox does not exist yet.
	Link(ctx context.Context, podUID string) (*podnet.Link, string, error)
	// Verify checks, cheaply, that a link Link found is still the pod's interface: an error
	// once the pod's sandbox is gone or was remade.
	Verify(link *podnet.Link) error
	// Probe sends one probe frame from inside the pod's network namespace (netnsPath).
	Probe(netnsPath string, link *podnet.Link, p podnet.Probe) error
	// Statistics reads the counters of a link Link found, with Verify's checks.
	Statistics(link *podnet.Link) (podnet.Statistics, error)
}

// Options configure the enforcer.
type Options struct {
	// NodeAddrs are the node's addresses: the pods' init containers reach WaitPort at them, and
	// the proof probe goes to the first of each family.
	NodeAddrs []netip.Addr
	// ResolvConf names the resolvers asked for pods whose Config names none.
	ResolvConf string
	// StateDir keeps each pod's last pushed Config across restarts of the agent.
	StateDir string
}

// Node enforces the policies of the sandbox pods of one node.
type Node struct {
	o       Options
	filter  PacketFilter
	net     PodNetwork
	queue   workqueue.TypedRateLimitingInterface[string]
	metrics *metrics

	mu   sync.RWMutex
	pods map[string]*pod
	// informer is WatchPods', for AddPodHandler.
	informer cache.SharedIndexInformer
	byIP     map[netip.Addr]*pod
	// seen is closed and replaced whenever a pod is added or changes, for the requests
	// waiting on a pod the agent has not seen yet.
	seen chan struct{}
}

// pod is what the enforcer holds of one sandbox pod. Guarded by Node.mu.
type pod struct {
	uid       string
	namespace string
	name      string
	ips       []netip.Addr
	gone      bool

	// desired is the last Config sandbox-controller pushed, nil before the first: the pod is
	// then denied everything.
	desired *egressapi.Config

	// What is in force.
	cfg       *egressapi.Config
	matcher   *egressapi.Matcher
	upstreams []string
	iface     string // the interface its rules are on
	proven    string // the interface the probe was seen from
	// link and netnsPath are where the last sync found the pod's interface: the next sync
	// takes them again once PodNetwork.Verify says they are still the pod's (finding them
	// anew asks containerd, and a runsc shim runs runsc to answer: most of a gVisor claim).
	link      *podnet.Link
	netnsPath string
	status    egressapi.Status
	lastErr   error
	// flowsClean: no outbound flow that cfg denies is open (its CutFlows succeeded, or cfg
	// followed one that opens nothing). Until then, and after an agent restart, a change cuts.
	flowsClean bool
	// changed is closed and replaced whenever what is in force (or its error) changes.
	changed chan struct{}

	dns     *dnsproxy.Handler
	denials *denials
	dnsStat dnsCounts
}

// NewNode makes an enforcer. Run starts it.
func NewNode(o Options, filter PacketFilter, pn PodNetwork) *Node {
	n := &Node{
		o: o, filter: filter, net: pn,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			// A pod whose sandbox containerd has not made yet is asked again soon; the cap keeps a
			// pod that cannot be filtered from costing the node much.
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "egress"}),
		pods: map[string]*pod{},
		byIP: map[netip.Addr]*pod{},
		seen: make(chan struct{}),
	}
	n.metrics = newMetrics()
	return n
}

// Restore takes back what the kernel holds from an earlier run: every pod's rules stay in
// force, with the last Config pushed for it, until the pod's informer events say otherwise.
func (n *Node) Restore() error {
	held, err := n.filter.Pods()
	if err != nil {
		return fmt.Errorf("read back the pods the filter holds: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, h := range held {
		p := n.newPod(h.UID)
		p.ips, p.iface, p.proven = h.IPs, h.Iface, h.Iface
		if cfg, err := n.loadConfig(h.UID); err == nil {
			p.desired = cfg
		} else if !errors.Is(err, os.ErrNotExist) {
			klog.ErrorS(err, "Reading a pod's saved policy; it is denied everything until the controller pushes it again", "podUID", h.UID)
		}
		n.pods[h.UID] = p
		for _, ip := range p.ips {
			n.byIP[ip] = p
		}
		n.queue.Add(h.UID)
	}
	klog.InfoS("Restored the pods the filter holds", "pods", len(held))
	return nil
}

// Run syncs pods until ctx ends.
func (n *Node) Run(ctx context.Context) {
	defer n.queue.ShutDown()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for n.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	n.queue.ShutDown()
	wg.Wait()
}

func (n *Node) processNext(ctx context.Context) bool {
	uid, shutdown := n.queue.Get()
	if shutdown {
		return false
	}
	defer n.queue.Done(uid)
	if err := n.sync(ctx, uid); err != nil {
		klog.V(2).InfoS("Syncing a pod's filter", "podUID", uid, "err", err)
		n.queue.AddRateLimited(uid)
		return true
	}
	n.queue.Forget(uid)
	return true
}

// newPod is a pod entry with its DNS proxy. Callers hold n.mu.
func (n *Node) newPod(uid string) *pod {
	p := &pod{uid: uid, changed: make(chan struct{}), denials: newDenials()}
	p.dns = &dnsproxy.Handler{
		Matcher: func() *egressapi.Matcher {
			n.mu.RLock()
			defer n.mu.RUnlock()
			return p.matcher
		},
		Learner: podLearner{n.filter, uid},
		Cache:   dnsproxy.NewCache(dnsproxy.DefaultCacheSize),
		Upstreams: func() []string {
			n.mu.RLock()
			defer n.mu.RUnlock()
			return p.upstreams
		},
		Observe: func(qname string, allowed bool, rcode int) { n.observeDNS(p, qname, allowed, rcode) },
	}
	return p
}

// podLearner teaches one pod's sets.
type podLearner struct {
	f   PacketFilter
	uid string
}

func (l podLearner) Learn(key string, addrs []netip.Addr, ttl time.Duration) error {
	return l.f.Learn(l.uid, key, addrs, ttl)
}

// ObservePod takes an informer's view of a sandbox pod of this node.
func (n *Node) ObservePod(obj *corev1.Pod) {
	uid := string(obj.UID)
	var ips []netip.Addr
	for _, s := range obj.Status.PodIPs {
		if a, err := netip.ParseAddr(s.IP); err == nil {
			ips = append(ips, a.Unmap())
		}
	}
	n.mu.Lock()
	p := n.pods[uid]
	if p == nil {
		p = n.newPod(uid)
		n.pods[uid] = p
	}
	p.namespace, p.name = obj.Namespace, obj.Name
	changed := !slices.Equal(p.ips, ips)
	if changed {
		for _, ip := range p.ips {
			if n.byIP[ip] == p {
				delete(n.byIP, ip)
			}
		}
		p.ips = ips
		for _, ip := range ips {
			n.byIP[ip] = p
		}
	}
	close(n.seen)
	n.seen = make(chan struct{})
	n.mu.Unlock()
	if changed || p.iface == "" {
		n.queue.Add(uid)
	}
}

// ForgetPod drops a pod that is gone: its rules go with it.
func (n *Node) ForgetPod(uid string) {
	n.mu.Lock()
	if p := n.pods[uid]; p != nil {
		p.gone = true
	}
	n.mu.Unlock()
	n.queue.Add(uid)
}

// Resync asks every pod's sync again (after the informer's first list, which may show pods
// gone while the agent was down): known is what the API holds.
func (n *Node) Resync(known map[string]bool) {
	n.mu.Lock()
	var uids []string
	for uid, p := range n.pods {
		if !known[uid] {
			p.gone = true
		}
		uids = append(uids, uid)
	}
	n.mu.Unlock()
	for _, uid := range uids {
		n.queue.Add(uid)
	}
}

// sync makes the pod's rules what its state says. Idempotent.
func (n *Node) sync(ctx context.Context, uid string) error {
	n.mu.RLock()
	p := n.pods[uid]
	if p == nil {
		n.mu.RUnlock()
		return nil
	}
	gone, ips, desired, applied, proven, flowsClean := p.gone, slices.Clone(p.ips), p.desired, p.cfg, p.proven, p.flowsClean
	link, netnsPath := p.link, p.netnsPath
	n.mu.RUnlock()

	if gone {
		if err := n.filter.Remove(uid); err != nil {
			return fmt.Errorf("remove the rules of pod %s: %w", uid, err)
		}
		_ = os.Remove(n.configPath(uid))
		n.mu.Lock()
		if n.pods[uid] == p {
			delete(n.pods, uid)
			for _, ip := range p.ips {
				if n.byIP[ip] == p {
					delete(n.byIP, ip)
				}
			}
		}
		close(p.changed)
		p.changed = make(chan struct{})
		n.mu.Unlock()
		klog.V(2).InfoS("Removed a pod's filter", "podUID", uid)
		return nil
	}
	if len(ips) == 0 {
		return nil // the informer brings the addresses
	}
	cfg := desired
	if cfg == nil {
		cfg = denyAll(uid)
	}
	m, err := egressapi.Compile(cfg.Rules, cfg.DefaultAction)
	if err != nil {
		// Validated when pushed: a saved Config that no longer compiles is denied everything.
		cfg = denyAll(uid)
		m, _ = egressapi.Compile(nil, egressapi.ActionDeny)
	}

	start := time.Now()
	if link != nil {
		if err := n.net.Verify(link); err != nil {
			klog.V(2).InfoS("Finding a pod's interface again", "podUID", uid, "interface", link.Name, "err", err)
			link = nil
		}
	}
	if link == nil {
		var err error
		if link, netnsPath, err = n.net.Link(ctx, uid); err != nil {
			return n.failed(p, egressapi.ReasonPodNotFound, fmt.Errorf("find the interface of pod %s: %w", uid, err))
		}
	}
	linkTook := time.Since(start)
	// An address that another pod held is that pod's no more (the pod went, its address was
	// given again): its rules go first, or they would keep deciding for the address.
	n.takeAddresses(p, ips)

	filterStart := time.Now()
	if _, err := n.filter.Sync(nodefilter.Pod{UID: uid, Iface: link.Name, IPs: ips}, m); err != nil {
		n.metrics.updates.WithLabelValues("failed").Inc()
		return n.failed(p, egressapi.ReasonApplyFailed, fmt.Errorf("install the rules of pod %s on %s: %w", uid, link.Name, err))
	}
	filterTook := time.Since(filterStart)
	if proven != link.Name {
		if err := n.prove(uid, netnsPath, link, ips); err != nil {
			return n.failed(p, egressapi.ReasonUnverified, err)
		}
	}
	cut, clean := 0, flowsClean
	if applied == nil || applied.Revision != cfg.Revision {
		// A pool pod's claim replaces deny-all, under which no flow that CutFlows looks at can
		// have opened: no walk of the node's whole conntrack table for it (at hundreds of pods,
		// most of what a claim costs the agent).
		if !(flowsClean && opensNothing(applied)) {
			if cut, err = n.filter.CutFlows(uid, m); err != nil {
				// The rules are in force for new flows; an established one may outlive the change.
				klog.ErrorS(err, "Cutting the flows a new policy denies", "podUID", uid, "revision", cfg.Revision)
			}
			clean = err == nil
		}
		n.metrics.flowsCut.Add(float64(cut))
		n.metrics.updates.WithLabelValues("applied").Inc()
	}
	upstreams := cfg.Upstreams
	if len(upstreams) == 0 {
		if upstreams, err = dnsproxy.UpstreamsFromResolvConf(n.o.ResolvConf); err != nil {
			klog.ErrorS(err, "Reading the node's nameservers; names will not resolve", "file", n.o.ResolvConf)
		}
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	if p.desired != desired {
		// A push came in meanwhile: the next sync installs it (it was queued).
		n.queue.Add(uid)
	}
	if applied == nil || applied.Revision != cfg.Revision || p.iface != link.Name {
		p.status = egressapi.Status{PodUID: uid, Revision: cfg.Revision, Generation: cfg.Generation,
			AppliedAt: time.Now().UTC(), FlowsCut: cut, Interface: link.Name}
		klog.InfoS("Egress policy in force", "pod", klog.KRef(p.namespace, p.name), "sandbox", sandboxRef(cfg),
			"revision", cfg.Revision, "rules", len(cfg.Rules), "defaultAction", cfg.DefaultAction, "interface", link.Name, "flowsCut", cut,
			"took", time.Since(start), "linkTook", linkTook, "filterTook", filterTook)
	}
	p.cfg, p.matcher, p.upstreams, p.iface, p.proven, p.lastErr, p.flowsClean = cfg, m, upstreams, link.Name, link.Name, nil, clean
	p.link, p.netnsPath = link, netnsPath
	close(p.changed)
	p.changed = make(chan struct{})
	return nil
}

// failed records why a pod's policy is not in force, for the requests waiting on it, and
// returns err for the queue to retry.
func (n *Node) failed(p *pod, reason string, err error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	p.lastErr = &Failure{Reason: reason, Err: err}
	close(p.changed)
	p.changed = make(chan struct{})
	return p.lastErr
}

// Failure is why a pod's policy is not in force.
type Failure struct {
	Reason string
	Err    error
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// takeAddresses removes the rules of any other pod holding one of ips.
func (n *Node) takeAddresses(p *pod, ips []netip.Addr) {
	n.mu.Lock()
	var stale []*pod
	for _, other := range n.pods {
		if other == p {
			continue
		}
		for _, ip := range other.ips {
			if slices.Contains(ips, ip) {
				stale = append(stale, other)
				break
			}
		}
	}
	for _, o := range stale {
		o.gone = true
	}
	n.mu.Unlock()
	for _, o := range stale {
		if err := n.filter.Remove(o.uid); err != nil {
			klog.ErrorS(err, "Removing the rules of a pod whose address was given again", "podUID", o.uid)
		}
		n.queue.Add(o.uid)
	}
}

// prove sends a probe from the pod's interface, inside its network namespace, to a node
// address the pod's rules reject and count, and waits for the count: only then is it known
// that the node's netfilter sees what the pod sends.
func (n *Node) prove(uid, netnsPath string, link *podnet.Link, ips []netip.Addr) error {
	src, dst, ok := probeAddrs(ips, n.o.NodeAddrs)
	if !ok {
		return fmt.Errorf("no node address of the family of the pod's addresses %v to probe", ips)
	}
	mac := link.NextHopMAC()
	before, err := n.filter.Counters(uid)
	if err != nil {
		return fmt.Errorf("read the probe counter: %w", err)
	}
	for try := range probeTries {
		if err := n.net.Probe(netnsPath, link, podnet.Probe{SrcIP: src, DstIP: dst, DstPort: nodeapi.ProbePort, DstMAC: mac}); err != nil {
			return fmt.Errorf("send the probe from pod %s's interface: %w", uid, err)
		}
		err := wait.PollUntilContextTimeout(context.Background(), 2*time.Millisecond, probeWait, true, func(context.Context) (bool, error) {
			c, err := n.filter.Counters(uid)
			return err == nil && c.Probes > before.Probes, nil
		})
		if err == nil {
			klog.V(4).InfoS("Proved the filter sees the pod", "podUID", uid, "interface", link.Name, "tries", try+1)
			return nil
		}
	}
	return fmt.Errorf("a probe from pod %s's interface %s never reached the node's filter: this node's datapath bypasses netfilter, so the policy cannot be enforced here", uid, link.Name)
}

// probeAddrs are the probe's source (the pod's IPv4 address, else its IPv6) and destination
// (a node address of that family).
func probeAddrs(ips, node []netip.Addr) (src, dst netip.Addr, ok bool) {
	for _, want4 := range []bool{true, false} {
		for _, ip := range ips {
			if ip.Is4() != want4 {
				continue
			}
			for _, na := range node {
				if na.Is4() == want4 {
					return ip, na, true
				}
			}
		}
	}
	return netip.Addr{}, netip.Addr{}, false
}

// opensNothing reports whether no outbound flow that CutFlows looks at can open under cfg: it
// allows nothing (deny by default, no Allow rule), so the filter rejects every new flow of the
// pod but DNS to the node's proxy and its wait, which CutFlows leaves alone.
func opensNothing(cfg *egressapi.Config) bool {
	if cfg == nil || cfg.DefaultAction != egressapi.ActionDeny {
		return false
	}
	for _, r := range cfg.Rules {
		if r.Action != egressapi.ActionDeny {
			return false
		}
	}
	return true
}

func denyAll(uid string) *egressapi.Config {
	cfg := &egressapi.Config{PodUID: uid, DefaultAction: egressapi.ActionDeny}
	cfg.Revision = cfg.Hash()
	return cfg
}

func sandboxRef(cfg *egressapi.Config) klog.ObjectRef {
	if cfg == nil || cfg.Sandbox == nil {
		return klog.ObjectRef{}
	}
	return klog.KRef(cfg.Sandbox.Namespace, cfg.Sandbox.Name)
}

// Push makes cfg the pod's policy and waits until it is in force (or ctx ends): the
// controller's PUT.
func (n *Node) Push(ctx context.Context, cfg *egressapi.Config) (*egressapi.Status, error) {
	received := time.Now()
	if err := egressapi.ValidateConfig(cfg); err != nil {
		return nil, &InvalidConfig{err}
	}
	if _, err := egressapi.Compile(cfg.Rules, cfg.DefaultAction); err != nil {
		return nil, &InvalidConfig{err}
	}
	if cfg.Revision != cfg.Hash() {
		return nil, &InvalidConfig{errors.New("the revision does not match the Config")}
	}
	p, err := n.awaitPod(ctx, cfg.PodUID)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	same := p.desired != nil && p.desired.Revision == cfg.Revision
	if !same {
		p.desired = cfg
	}
	n.mu.Unlock()
	if !same {
		if err := n.saveConfig(cfg); err != nil {
			// A restarted agent would deny the pod everything until the next push.
			klog.ErrorS(err, "Saving a pod's policy", "podUID", cfg.PodUID)
		}
		n.queue.Add(cfg.PodUID)
	}
	st, err := n.awaitInForce(ctx, p, cfg.Revision)
	klog.V(2).InfoS("Answered a push", "podUID", cfg.PodUID, "revision", cfg.Revision, "took", time.Since(received), "err", err)
	return st, err
}

// InvalidConfig is a Config that no agent would apply.
type InvalidConfig struct{ err error }

func (e *InvalidConfig) Error() string { return "invalid config: " + e.err.Error() }

// Status is the pod's current status; ok is false for a pod the agent does not know.
func (n *Node) Status(uid string) (egressapi.Status, error, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	p := n.pods[uid]
	if p == nil {
		return egressapi.Status{}, nil, false
	}
	return p.status, p.lastErr, true
}

// awaitPod waits until the agent knows the pod (its informer may be behind the controller's).
func (n *Node) awaitPod(ctx context.Context, uid string) (*pod, error) {
	for {
		n.mu.RLock()
		p, seen := n.pods[uid], n.seen
		n.mu.RUnlock()
		if p != nil && !p.gone {
			return p, nil
		}
		select {
		case <-seen:
		case <-ctx.Done():
			return nil, &Failure{Reason: egressapi.ReasonPodNotFound, Err: fmt.Errorf("pod %s is not a sandbox pod of this node", uid)}
		}
	}
}

// awaitInForce waits until the pod's rules are in force and proven at revision ("": any), or
// ctx ends; it returns the last error the pod's sync met when ctx ends first.
func (n *Node) awaitInForce(ctx context.Context, p *pod, revision string) (*egressapi.Status, error) {
	for {
		n.mu.RLock()
		cfg, st, lastErr, changed, gone, desired := p.cfg, p.status, p.lastErr, p.changed, p.gone, p.desired
		n.mu.RUnlock()
		if gone {
			return nil, &Failure{Reason: egressapi.ReasonPodNotFound, Err: fmt.Errorf("pod %s is gone", p.uid)}
		}
		// A waiter for the pod's first revision is done once the controller pushed any: that
		// one supersedes it.
		if cfg != nil && lastErr == nil && (revision == "" || cfg.Revision == revision || (desired != nil && cfg.Revision == desired.Revision)) {
			return &st, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if lastErr != nil {
				return nil, lastErr
			}
			return nil, fmt.Errorf("the policy of pod %s is not in force yet", p.uid)
		}
	}
}

// Wait answers the pod's init container: it returns once the pod's filter is in force.
func (n *Node) Wait(ctx context.Context, uid, revision string) (*egressapi.Status, error) {
	p, err := n.awaitPod(ctx, uid)
	if err != nil {
		return nil, err
	}
	return n.awaitInForce(ctx, p, revision)
}

// DNS finds the proxy of the pod with address src; nil for an address of no sandbox pod.
func (n *Node) DNS(src netip.Addr) *dnsproxy.Handler {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if p := n.byIP[src.Unmap()]; p != nil && !p.gone {
		return p.dns
	}
	return nil
}

// Denials waits for the pod's denied names (the controller's long poll).
func (n *Node) Denials(ctx context.Context, uid string) (egressapi.Denials, bool) {
	n.mu.RLock()
	p := n.pods[uid]
	n.mu.RUnlock()
	if p == nil {
		return egressapi.Denials{}, false
	}
	return p.denials.wait(ctx), true
}

func (n *Node) configPath(uid string) string {
	return filepath.Join(n.o.StateDir, "pods", uid+".json")
}

func (n *Node) saveConfig(cfg *egressapi.Config) error {
	if n.o.StateDir == "" {
		return nil
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	path := n.configPath(cfg.PodUID)
	if err := os.MkdirAll(filepath.Dir(path), stateDirPerm); err != nil {
		return err
	}
	return atomicfile.Write(path, data)
}

func (n *Node) loadConfig(uid string) (*egressapi.Config, error) {
	if n.o.StateDir == "" {
		return nil, os.ErrNotExist
	}
	data, err := os.ReadFile(n.configPath(uid))
	if err != nil {
		return nil, err
	}
	cfg := &egressapi.Config{}
	if err := json.Unmarshal(data, cfg); err != nil {
		return nil, err
	}
	if cfg.PodUID != uid || egressapi.ValidateConfig(cfg) != nil || cfg.Revision != cfg.Hash() {
		return nil, fmt.Errorf("%s: not a valid Config of pod %s", n.configPath(uid), uid)
	}
	return cfg, nil
}
