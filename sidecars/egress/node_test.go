package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/nodefilter"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/podnet"
)

// fakeFilter records what the enforcer asks of the kernel. Probes arrive only where the
// datapath is seen (seen), as the real filter counts them.
type fakeFilter struct {
	mu      sync.Mutex
	pods    map[string]nodefilter.Pod
	rules   map[string]*egressapi.Matcher
	probes  map[string]uint64
	syncErr error
	counts  map[string]nodefilter.Counters
	removed []string
	cuts    int
}

func newFakeFilter() *fakeFilter {
	return &fakeFilter{pods: map[string]nodefilter.Pod{}, rules: map[string]*egressapi.Matcher{}, probes: map[string]uint64{},
		counts: map[string]nodefilter.Counters{}}
}

func (f *fakeFilter) Sync(p nodefilter.Pod, m *egressapi.Matcher) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.syncErr != nil {
		return false, f.syncErr
	}
	f.pods[p.UID], f.rules[p.UID] = p, m
	return true, nil
}

func (f *fakeFilter) Remove(uid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, uid)
	delete(f.rules, uid)
	f.removed = append(f.removed, uid)
	return nil
}

func (f *fakeFilter) Pods() ([]nodefilter.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []nodefilter.Pod
	for _, p := range f.pods {
		out = append(out, p)
	}
	return out, nil
}

func (f *fakeFilter) Learn(uid, key string, addrs []netip.Addr, ttl time.Duration) error { return nil }
func (f *fakeFilter) Learned(uid, key string, addr netip.Addr) bool                      { return false }

func (f *fakeFilter) CutFlows(uid string, m *egressapi.Matcher) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cuts++
	return 0, nil
}

func (f *fakeFilter) Counters(uid string) (nodefilter.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.counts[uid]
	c.Probes = f.probes[uid]
	return c, nil
}

func (f *fakeFilter) matcher(uid string) *egressapi.Matcher {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rules[uid]
}

func (f *fakeFilter) pod(uid string) nodefilter.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods[uid]
}

// fakeNet finds pods by UID; blind: probes never reach the filter (a datapath that bypasses
// netfilter).
type fakeNet struct {
	f     *fakeFilter
	mu    sync.Mutex
	links map[string]*podnet.Link
	blind bool
	finds int // Link calls
	stats map[string]podnet.Statistics
}

func (n *fakeNet) Link(_ context.Context, uid string) (*podnet.Link, string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.finds++
	l, ok := n.links[uid]
	if !ok {
		return nil, "", fmt.Errorf("pod %s: %w", uid, podnet.ErrNotFound)
	}
	return l, "/var/run/netns/" + uid, nil
}

// Verify knows a link by its pointer: add makes a new one (the pod's sandbox remade).
func (n *fakeNet) Verify(l *podnet.Link) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, have := range n.links {
		if have == l {
			return nil
		}
	}
	return errors.New("no such link")
}

// Statistics of a link are those set in stats, for a link Verify knows.
func (n *fakeNet) Statistics(l *podnet.Link) (podnet.Statistics, error) {
	if err := n.Verify(l); err != nil {
		return podnet.Statistics{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats[l.Name], nil
}

func (n *fakeNet) findCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.finds
}

func (n *fakeNet) Probe(path string, l *podnet.Link, p podnet.Probe) error {
	if n.blind {
		return nil
	}
	if p.DstMAC.String() != l.NextHopMAC().String() {
		return errors.New("the probe goes to another MAC than the pod's next hop")
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	for uid, pod := range n.f.pods {
		if pod.Iface == l.Name && slices.Contains(pod.IPs, p.SrcIP) {
			n.f.probes[uid]++
		}
	}
	return nil
}

func (n *fakeNet) add(uid, iface string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.links[uid] = &podnet.Link{Name: iface, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, PodIfName: "eth0"}
}

type testNode struct {
	*Node
	f   *fakeFilter
	net *fakeNet
}

func newTestNode(t *testing.T, stateDir string) *testNode {
	t.Helper()
	f := newFakeFilter()
	pn := &fakeNet{f: f, links: map[string]*podnet.Link{}, stats: map[string]podnet.Statistics{}}
	n := NewNode(Options{NodeAddrs: []netip.Addr{netip.MustParseAddr("10.250.0.1")}, StateDir: stateDir, ResolvConf: os.DevNull}, f, pn)
	return &testNode{Node: n, f: f, net: pn}
}

func (n *testNode) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func sandboxPod(uid, ip string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid)}}
	if ip != "" {
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	return p
}

func allowConfig(uid string, to ...string) *egressapi.Config {
	cfg := &egressapi.Config{PodUID: uid, DefaultAction: egressapi.ActionDeny, Sandbox: &egressapi.SandboxRef{Namespace: "ns", Name: "sbx", UID: "s"}}
	for _, x := range to {
		cfg.Rules = append(cfg.Rules, egressapi.Rule{Action: egressapi.ActionAllow, To: x})
	}
	cfg.Revision = cfg.Hash()
	return cfg
}

func within(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// TestWaitDenyAllFirst: a pod that nothing was pushed for is denied everything, and its init
// container's wait returns once that is in force and proven; a later push supersedes it.
func TestWaitDenyAllFirst(t *testing.T) {
	n := newTestNode(t, t.TempDir())
	n.run(t)
	n.net.add("a", "veth-a")
	n.ObservePod(sandboxPod("a", "10.244.0.10"))
	ctx, cancel := within(10 * time.Second)
	defer cancel()
	st, err := n.Wait(ctx, "a", denyAll("a").Revision)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != denyAll("a").Revision || st.Interface != "veth-a" {
		t.Errorf("status %+v, want deny-all on veth-a", st)
	}
	if m := n.f.matcher("a"); m == nil || m.Default != egressapi.ActionDeny || len(m.Rules) != 0 {
		t.Errorf("the filter got %+v, want deny-all", m)
	}
	cfg := allowConfig("a", "pypi.org")
	if _, err := n.Push(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if m := n.f.matcher("a"); m == nil || len(m.Rules) != 1 {
		t.Errorf("the filter got %+v after the push", m)
	}
	// A wait for the first revision is answered by the pushed one, which supersedes it.
	if st, err := n.Wait(ctx, "a", denyAll("a").Revision); err != nil || st.Revision != cfg.Revision {
		t.Errorf("wait after the push: %+v, %v", st, err)
	}
}

// TestLinkFoundOnce: a pod's interface is found once, and verified on each later sync; a pod
// whose sandbox was remade (another interface) is found again, and its rules move there.
func TestLinkFoundOnce(t *testing.T) {
	n := newTestNode(t, t.TempDir())
	n.run(t)
	n.net.add("a", "veth-a")
	n.ObservePod(sandboxPod("a", "10.244.0.10"))
	push := func(to ...string) *egressapi.Status {
		t.Helper()
		ctx, cancel := within(10 * time.Second)
		defer cancel()
		st, err := n.Push(ctx, allowConfig("a", to...))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	push("pypi.org")
	first := n.net.findCount()
	if first == 0 {
		t.Fatal("the pod's interface was never looked up")
	}
	push("github.com")
	push("pypi.org", "github.com")
	if got := n.net.findCount(); got != first {
		t.Errorf("interface look-ups after two more pushes: %d, want still %d", got, first)
	}

	n.net.add("a", "veth-a2")
	if st := push("example.com"); st.Interface != "veth-a2" {
		t.Errorf("status after the sandbox was remade: %+v, want veth-a2", st)
	}
	if got := n.net.findCount(); got != first+1 {
		t.Errorf("interface look-ups after the sandbox was remade: %d, want %d", got, first+1)
	}
	if got := n.f.pod("a"); got.Iface != "veth-a2" {
		t.Errorf("the filter has the pod on %q, want veth-a2", got.Iface)
	}
}

// TestPushBeforeThePodIsSeen: the controller's push may come before the agent's informer has
// the pod: it waits for it, then for the policy to be in force.
func TestPushBeforeThePodIsSeen(t *testing.T) {
	n := newTestNode(t, t.TempDir())
	n.run(t)
	cfg := allowConfig("b", "pypi.org")
	got := make(chan error, 1)
	go func() {
		ctx, cancel := within(10 * time.Second)
		defer cancel()
		_, err := n.Push(ctx, cfg)
		got <- err
	}()
	n.net.add("b", "veth-b")
	n.ObservePod(sandboxPod("b", "10.244.0.11"))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// A push for a pod that never comes says so.
	ctx, cancel := within(100 * time.Millisecond)
	defer cancel()
	var f *Failure
	if _, err := n.Push(ctx, allowConfig("nobody")); !errors.As(err, &f) || f.Reason != egressapi.ReasonPodNotFound {
		t.Errorf("push for an unknown pod: %v, want %s", err, egressapi.ReasonPodNotFound)
	}
}

// TestUnverified: a pod whose probe never reaches the filter is never reported in force, and
// the reason says why.
func TestUnverified(t *testing.T) {
	n := newTestNode(t, t.TempDir())
	n.net.blind = true
	n.run(t)
	n.net.add("c", "veth-c")
	n.ObservePod(sandboxPod("c", "10.244.0.12"))
	ctx, cancel := within(5 * time.Second)
	defer cancel()
	_, err := n.Wait(ctx, "c", "")
	var f *Failure
	if !errors.As(err, &f) || f.Reason != egressapi.ReasonUnverified {
		t.Fatalf("wait: %v, want %s", err, egressapi.ReasonUnverified)
	}
}

// TestInvalidPushChangesNothing: a Config that does not validate, or whose revision is not its
// hash, is refused and the rules in force stay.
func TestInvalidPushChangesNothing(t *testing.T) {
	n := newTestNode(t, t.TempDir())
	n.run(t)
	n.net.add("d", "veth-d")
	n.ObservePod(sandboxPod("d", "10.244.0.13"))
	ctx, cancel := within(10 * time.Second)
	defer cancel()
	if _, err := n.Wait(ctx, "d", ""); err != nil {
		t.Fatal(err)
	}
	before := n.f.matcher("d")
	bad := allowConfig("d", "pypi.org")
	bad.Revision = "0000"
	tampered := allowConfig("d")
	tampered.Rules = []egressapi.Rule{{Action: egressapi.ActionAllow, To: "not a name!"}}
	tampered.Revision = tampered.Hash()
	for name, cfg := range map[string]*egressapi.Config{"wrong revision": bad, "invalid rule": tampered} {
		var invalid *InvalidConfig
		if _, err := n.Push(ctx, cfg); !errors.As(err, &invalid) {
			t.Errorf("%s: %v, want InvalidConfig", name, err)
		}
	}
	if n.f.matcher("d") != before {
		t.Error("a refused push changed the rules")
	}
}

// TestAddressGivenAgain: when a pod's address was another (gone) pod's, that pod's rules go
// first, so that they never decide for the new one.
func TestAddressGivenAgain(t *testing.T) {
	n := newTestNode(t, t.TempDir())
	n.run(t)
	n.net.add("old", "veth-old")
	n.ObservePod(sandboxPod("old", "10.244.0.14"))
	ctx, cancel := within(10 * time.Second)
	defer cancel()
	if _, err := n.Wait(ctx, "old", ""); err != nil {
		t.Fatal(err)
	}
	n.net.add("new", "veth-new")
	n.ObservePod(sandboxPod("new", "10.244.0.14"))
	if _, err := n.Wait(ctx, "new", ""); err != nil {
		t.Fatal(err)
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	if _, ok := n.f.pods["old"]; ok || !slices.Contains(n.f.removed, "old") {
		t.Errorf("the old pod's rules stayed: pods %v, removed %v", n.f.pods, n.f.removed)
	}
}

// TestRestore: a restarted agent takes back the pods the kernel holds with the policies it
// saved, and drops those the API no longer has.
func TestRestore(t *testing.T) {
	dir := t.TempDir()
	first := newTestNode(t, dir)
	first.run(t)
	for _, uid := range []string{"kept", "gone"} {
		first.net.add(uid, "veth-"+uid)
		first.ObservePod(sandboxPod(uid, map[string]string{"kept": "10.244.0.20", "gone": "10.244.0.21"}[uid]))
	}
	ctx, cancel := within(10 * time.Second)
	defer cancel()
	cfg := allowConfig("kept", "pypi.org")
	if _, err := first.Push(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Wait(ctx, "gone", ""); err != nil {
		t.Fatal(err)
	}

	// The second agent sees the same kernel.
	second := newTestNode(t, dir)
	second.f, second.Node.filter = first.f, first.f
	second.net.f = first.f
	second.net.links = first.net.links
	if err := second.Restore(); err != nil {
		t.Fatal(err)
	}
	second.run(t)
	if st, err := second.Wait(ctx, "kept", cfg.Revision); err != nil || st.Revision != cfg.Revision {
		t.Errorf("after restore: %+v, %v; want the saved policy", st, err)
	}
	if h := second.DNS(netip.MustParseAddr("10.244.0.20")); h == nil {
		t.Error("no DNS proxy for a restored pod's address")
	}
	second.Resync(map[string]bool{"kept": true})
	if err := pollUntil(ctx, func() bool {
		_, _, ok := second.Status("gone")
		return !ok
	}); err != nil {
		t.Fatal("the pod the API no longer has was not dropped")
	}
	if _, ok := first.f.pods["gone"]; ok {
		t.Error("its rules stayed")
	}
	if _, err := os.Stat(second.configPath("gone")); !os.IsNotExist(err) {
		t.Errorf("its saved policy stayed: %v", err)
	}
}

// TestDNSBySource: queries are answered by the proxy of the pod they come from; an address of
// no sandbox pod gets none.
func TestDNSBySource(t *testing.T) {
	n := newTestNode(t, t.TempDir())
	n.run(t)
	n.net.add("e", "veth-e")
	n.ObservePod(sandboxPod("e", "10.244.0.30"))
	if n.DNS(netip.MustParseAddr("10.244.0.30")) == nil {
		t.Error("no proxy for the pod's address")
	}
	if n.DNS(netip.MustParseAddr("10.244.0.31")) != nil {
		t.Error("a proxy for an address of no sandbox pod")
	}
	n.ForgetPod("e")
	ctx, cancel := within(5 * time.Second)
	defer cancel()
	if err := pollUntil(ctx, func() bool { return n.DNS(netip.MustParseAddr("10.244.0.30")) == nil }); err != nil {
		t.Error("a proxy for a pod that is gone")
	}
}

func pollUntil(ctx context.Context, ok func() bool) error {
	for !ok() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func TestProbeAddrs(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.244.0.9"), netip.MustParseAddr("fd00::9")
	n4, n6 := netip.MustParseAddr("10.250.0.1"), netip.MustParseAddr("fd00::1")
	tests := []struct {
		name     string
		ips      []netip.Addr
		node     []netip.Addr
		src, dst netip.Addr
		ok       bool
	}{
		{"IPv4 first", []netip.Addr{v6, v4}, []netip.Addr{n6, n4}, v4, n4, true},
		{"IPv6 only", []netip.Addr{v6}, []netip.Addr{n4, n6}, v6, n6, true},
		{"no node address of the family", []netip.Addr{v6}, []netip.Addr{n4}, netip.Addr{}, netip.Addr{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, dst, ok := probeAddrs(tt.ips, tt.node)
			if diff := cmp.Diff([]any{tt.src, tt.dst, tt.ok}, []any{src, dst, ok}, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestCutFlowsOnlyWhereFlowsCanBeOpen: a change of policy cuts the flows the new one denies,
// except where the policy in force allowed nothing (a pool pod's deny-all, at its claim): no
// flow can have opened there, and walking the node's conntrack table for it is most of what a
// claim would cost at hundreds of pods.
func TestCutFlowsOnlyWhereFlowsCanBeOpen(t *testing.T) {
	n := newTestNode(t, t.TempDir())
	n.run(t)
	n.net.add("c", "veth-c")
	n.ObservePod(sandboxPod("c", "10.244.0.12"))
	push := func(cfg *egressapi.Config) int {
		t.Helper()
		ctx, cancel := within(10 * time.Second)
		defer cancel()
		if _, err := n.Push(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		n.f.mu.Lock()
		defer n.f.mu.Unlock()
		return n.f.cuts
	}
	// The first policy a pod gets cuts: after an agent restart, the kernel may hold flows of
	// an earlier one.
	if got := push(allowConfig("c")); got != 1 {
		t.Fatalf("cuts after the first policy (deny-all): %d, want 1", got)
	}
	if got := push(allowConfig("c", "pypi.org")); got != 1 {
		t.Errorf("cuts after deny-all gave way to a policy: %d, want still 1", got)
	}
	if got := push(allowConfig("c")); got != 2 {
		t.Errorf("cuts after a policy that allowed pypi.org gave way to deny-all: %d, want 2", got)
	}
	if got := push(allowConfig("c", "github.com")); got != 2 {
		t.Errorf("cuts after deny-all gave way to a policy again: %d, want still 2", got)
	}
	if got := push(allowConfig("c", "pypi.org")); got != 3 {
		t.Errorf("cuts after a policy that allowed github.com changed: %d, want 3", got)
	}
}
