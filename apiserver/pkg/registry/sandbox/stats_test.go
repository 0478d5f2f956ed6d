package sandbox

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/internal/apitesting"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeclient"
)

var (
	statsNow    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	statsSample = statsNow.Add(-3 * time.Second)
)

// statsNode is what a stand-in node agent answers.
type statsNode struct {
	name  string
	items []nodeapi.PodStats
	// err is its answer to every request; hang makes it answer only when the request ends.
	err  error
	hang bool
}

// fakeNodeStats stands in for the node agents, by host address, and records the requests.
type fakeNodeStats struct {
	nodes map[string]*statsNode
	mu    sync.Mutex
	calls []string
}

var _ NodeStats = &fakeNodeStats{}

func (f *fakeNodeStats) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeNodeStats) answer(ctx context.Context, host string) (*statsNode, error) {
	n, ok := f.nodes[host]
	switch {
	case !ok:
		// What nodeclient returns for an address nothing listens on.
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.ParseIP(host), Port: nodeapi.Port}, Err: fmt.Errorf("connect: connection refused")}
	case n.hang:
		<-ctx.Done()
		return nil, ctx.Err()
	case n.err != nil:
		return nil, n.err
	}
	return n, nil
}

// List implements NodeStats.
func (f *fakeNodeStats) List(ctx context.Context, host string) (*nodeapi.StatsList, error) {
	f.record("list " + host)
	n, err := f.answer(ctx, host)
	if err != nil {
		return nil, err
	}
	return &nodeapi.StatsList{Node: n.name, Items: slices.Clone(n.items)}, nil
}

// Pod implements NodeStats.
func (f *fakeNodeStats) Pod(ctx context.Context, host, uid string) (*nodeapi.PodStats, error) {
	f.record("pod " + host + " " + uid)
	n, err := f.answer(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, ps := range n.items {
		if ps.PodUID == uid {
			return &ps, nil
		}
	}
	return nil, &nodeclient.StatusError{Code: http.StatusNotFound, Message: "no such sandbox pod"}
}

func (f *fakeNodeStats) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.calls)
	slices.Sort(out)
	return out
}

// statsSandbox is a running sandbox of replicas whose status names pods[i] for replica i
// ("": none).
func statsSandbox(ns, name string, replicas int32, pods ...string) *controlv1alpha1.BatchSandbox {
	bs := &controlv1alpha1.BatchSandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("bs-" + ns + "-" + name), Labels: map[string]string{"team": "a"}},
		Spec:       controlv1alpha1.BatchSandboxSpec{Replicas: ptr.To(replicas)},
		Status:     controlv1alpha1.BatchSandboxStatus{Phase: controlv1alpha1.PhaseRunning},
	}
	for i, p := range pods {
		if p != "" {
			bs.Status.Pods = append(bs.Status.Pods, controlv1alpha1.SandboxPodStatus{Replica: int32(i), Name: p, Ready: true})
		}
	}
	return bs
}

// statsPod is a pod of bs on node at host ("": not started), its UID "uid-" + its name.
func statsPod(bs *controlv1alpha1.BatchSandbox, name string, replica int, node, host string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: bs.Namespace, UID: types.UID("uid-" + name),
			Labels: map[string]string{controlv1alpha1.LabelBatchSandbox: bs.Name, controlv1alpha1.LabelReplica: strconv.Itoa(replica)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: controlv1alpha1.SchemeGroupVersion.String(), Kind: "BatchSandbox",
				Name: bs.Name, UID: bs.UID, Controller: ptr.To(true)}},
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: host},
	}
}

// figures is what an agent answers for the pod of UID uid-pod, all of it read.
func figures(pod string) nodeapi.PodStats {
	return nodeapi.PodStats{
		PodUID: "uid-" + pod, Namespace: "ns", Pod: pod, Timestamp: statsSample, Window: 10 * time.Second,
		CPU:       &nodeapi.CPUStats{UsageNanoCores: 998_000_000, UsageCoreNanoSeconds: 42_000_000_000},
		Memory:    &nodeapi.MemoryStats{WorkingSetBytes: 203 << 20, RSSBytes: 150 << 20, UsageBytes: 300 << 20, LimitBytes: 768 << 20, PeakBytes: 400 << 20, OOMKills: 1},
		Disk:      &nodeapi.DiskStats{WritableLayerBytes: 100 << 20, EmptyDirBytes: 1 << 20},
		Network:   &nodeapi.NetworkStats{RxBytes: 10 << 20, TxBytes: 3 << 10, RxPackets: 7000, TxPackets: 3000, ConnectionsAllowed: 4, ConnectionsDenied: 2},
		Processes: ptr.To[uint64](12),
	}
}

// replicaWith is the SandboxReplicaStats of figures(pod).
func replicaWith(replica int32, pod, node string) sandboxv1alpha1.SandboxReplicaStats {
	return sandboxv1alpha1.SandboxReplicaStats{
		Replica: replica, Pod: pod, Node: node, Timestamp: metav1.NewTime(statsSample), Window: metav1.Duration{Duration: 10 * time.Second},
		CPU:       &sandboxv1alpha1.SandboxCPUStats{UsageNanoCores: 998_000_000, UsageCoreNanoSeconds: 42_000_000_000},
		Memory:    &sandboxv1alpha1.SandboxMemoryStats{WorkingSetBytes: 203 << 20, RSSBytes: 150 << 20, UsageBytes: 300 << 20, LimitBytes: 768 << 20, PeakBytes: 400 << 20, OOMKills: 1},
		Disk:      &sandboxv1alpha1.SandboxDiskStats{WritableLayerBytes: 100 << 20, EmptyDirBytes: 1 << 20},
		Network:   &sandboxv1alpha1.SandboxNetworkStats{RxBytes: 10 << 20, TxBytes: 3 << 10, RxPackets: 7000, TxPackets: 3000, ConnectionsAllowed: 4, ConnectionsDenied: 2},
		Processes: ptr.To[int64](12),
	}
}

func newStatsReader(t *testing.T, nodes *fakeNodeStats, objs ...client.Object) *StatsReader {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := controlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	return &StatsReader{Reader: c, Pods: c, Nodes: nodes, Clock: testingclock.NewFakePassiveClock(statsNow), Timeout: time.Second}
}

func statsCtx(ns string) context.Context {
	return genericapirequest.WithNamespace(context.Background(), ns)
}

// TestStatsJoin: each replica of a sandbox gets its pod's figures from its node's agent, or
// a reason: no pod, a node whose agent does not answer, a pod the agent does not know yet,
// figures it could read only in part. One request per node; a node that fails is the
// reason of its replicas only.
func TestStatsJoin(t *testing.T) {
	web := statsSandbox("ns", "web", 1, "web-0")
	tests := []struct {
		name  string
		objs  []client.Object
		nodes map[string]*statsNode
		want  []sandboxv1alpha1.SandboxReplicaStats
		// wantCalls are the requests to the agents, sorted.
		wantCalls []string
	}{
		{
			name:      "one replica: the pod's figures, from its node's pod endpoint",
			objs:      []client.Object{web, statsPod(web, "web-0", 0, "n1", "10.0.0.1")},
			nodes:     map[string]*statsNode{"10.0.0.1": {name: "n1", items: []nodeapi.PodStats{figures("other"), figures("web-0")}}},
			want:      []sandboxv1alpha1.SandboxReplicaStats{replicaWith(0, "web-0", "n1")},
			wantCalls: []string{"pod 10.0.0.1 uid-web-0"},
		},
		{
			name: "replicas without pods: pending, the pod gone, a pod of another sandbox",
			objs: func() []client.Object {
				bs := statsSandbox("ns", "web", 3, "", "web-1", "web-2")
				stolen := statsPod(bs, "web-2", 2, "n1", "10.0.0.1")
				stolen.Labels[controlv1alpha1.LabelBatchSandbox] = "other"
				return []client.Object{bs, stolen}
			}(),
			want: []sandboxv1alpha1.SandboxReplicaStats{
				{Replica: 0, Reason: "NoPod", Message: "replica 0 has no pod yet (phase Running)"},
				{Replica: 1, Reason: "NoPod", Message: "pod web-1 of replica 1 is gone and is being replaced"},
				{Replica: 2, Reason: "NoPod", Message: "pod web-2 no longer belongs to the sandbox"},
			},
		},
		{
			name: "a paused sandbox",
			objs: func() []client.Object {
				bs := statsSandbox("ns", "web", 1)
				bs.Spec.Paused, bs.Status.Phase = true, controlv1alpha1.PhasePaused
				return []client.Object{bs}
			}(),
			want: []sandboxv1alpha1.SandboxReplicaStats{{Replica: 0, Reason: "NoPod", Message: "the sandbox is paused (phase Paused)"}},
		},
		{
			name: "a pod that has not started: no node to ask",
			objs: func() []client.Object {
				pod := statsPod(web, "web-0", 0, "n1", "")
				pod.Status.Phase = corev1.PodPending
				return []client.Object{web, pod}
			}(),
			want: []sandboxv1alpha1.SandboxReplicaStats{{Replica: 0, Pod: "web-0", Node: "n1", Reason: "NotSampled", Message: "pod web-0 has not started on a node yet (Pending)"}},
		},
		{
			name:      "a node whose agent does not listen: no address in the message",
			objs:      []client.Object{web, statsPod(web, "web-0", 0, "n1", "10.0.0.1")},
			want:      []sandboxv1alpha1.SandboxReplicaStats{{Replica: 0, Pod: "web-0", Node: "n1", Reason: "NodeUnavailable", Message: "sandbox-node on node n1: dial: connect: connection refused"}},
			wantCalls: []string{"pod 10.0.0.1 uid-web-0"},
		},
		{
			name:  "a node whose agent answers an error",
			objs:  []client.Object{web, statsPod(web, "web-0", 0, "n1", "10.0.0.1")},
			nodes: map[string]*statsNode{"10.0.0.1": {err: &nodeclient.StatusError{Code: http.StatusForbidden, Message: "client identity kube-sandbox:x is not allowed"}}},
			want: []sandboxv1alpha1.SandboxReplicaStats{{Replica: 0, Pod: "web-0", Node: "n1", Reason: "NodeUnavailable",
				Message: "sandbox-node on node n1 answered 403 Forbidden: client identity kube-sandbox:x is not allowed"}},
			wantCalls: []string{"pod 10.0.0.1 uid-web-0"},
		},
		{
			name:      "a pod the agent does not know yet",
			objs:      []client.Object{web, statsPod(web, "web-0", 0, "n1", "10.0.0.1")},
			nodes:     map[string]*statsNode{"10.0.0.1": {name: "n1"}},
			want:      []sandboxv1alpha1.SandboxReplicaStats{{Replica: 0, Pod: "web-0", Node: "n1", Reason: "NotSampled", Message: "sandbox-node on node n1 has no figures of pod web-0 yet"}},
			wantCalls: []string{"pod 10.0.0.1 uid-web-0"},
		},
		{
			name: "figures read in part",
			objs: []client.Object{web, statsPod(web, "web-0", 0, "n1", "10.0.0.1")},
			nodes: map[string]*statsNode{"10.0.0.1": {items: []nodeapi.PodStats{func() nodeapi.PodStats {
				ps := figures("web-0")
				ps.Disk, ps.Network = nil, nil
				ps.Errors = map[string]string{nodeapi.FigureNetwork: "no host-side interface", nodeapi.FigureDisk: "containerd: unavailable"}
				return ps
			}()}}},
			want: []sandboxv1alpha1.SandboxReplicaStats{func() sandboxv1alpha1.SandboxReplicaStats {
				rs := replicaWith(0, "web-0", "n1")
				rs.Disk, rs.Network = nil, nil
				rs.Reason, rs.Message = "Partial", "not read: disk: containerd: unavailable; network: no host-side interface"
				return rs
			}()},
			wantCalls: []string{"pod 10.0.0.1 uid-web-0"},
		},
		{
			name: "several nodes: a list of the node of two replicas, the pod of the node of one, a node down",
			objs: func() []client.Object {
				bs := statsSandbox("ns", "batch", 4, "batch-0", "batch-1", "batch-2", "batch-3")
				return []client.Object{bs,
					statsPod(bs, "batch-0", 0, "n1", "10.0.0.1"), statsPod(bs, "batch-1", 1, "n2", "10.0.0.2"),
					statsPod(bs, "batch-2", 2, "n1", "10.0.0.1"), statsPod(bs, "batch-3", 3, "n3", "10.0.0.3")}
			}(),
			nodes: map[string]*statsNode{
				"10.0.0.1": {name: "n1", items: []nodeapi.PodStats{figures("batch-0"), figures("batch-2")}},
				"10.0.0.2": {name: "n2", items: []nodeapi.PodStats{figures("batch-1")}},
			},
			want: []sandboxv1alpha1.SandboxReplicaStats{
				replicaWith(0, "batch-0", "n1"), replicaWith(1, "batch-1", "n2"), replicaWith(2, "batch-2", "n1"),
				{Replica: 3, Pod: "batch-3", Node: "n3", Reason: "NodeUnavailable", Message: "sandbox-node on node n3: dial: connect: connection refused"},
			},
			wantCalls: []string{"list 10.0.0.1", "pod 10.0.0.2 uid-batch-1", "pod 10.0.0.3 uid-batch-3"},
		},
		{
			name: "a replica scaled away whose pod still runs",
			objs: func() []client.Object {
				bs := statsSandbox("ns", "web", 1, "web-0", "web-1")
				return []client.Object{bs, statsPod(bs, "web-0", 0, "n1", "10.0.0.1"), statsPod(bs, "web-1", 1, "n1", "10.0.0.1")}
			}(),
			nodes:     map[string]*statsNode{"10.0.0.1": {name: "n1", items: []nodeapi.PodStats{figures("web-0"), figures("web-1")}}},
			want:      []sandboxv1alpha1.SandboxReplicaStats{replicaWith(0, "web-0", "n1"), replicaWith(1, "web-1", "n1")},
			wantCalls: []string{"list 10.0.0.1"},
		},
		{
			name: "the node's name from its agent when the pod has none",
			objs: func() []client.Object {
				bs := statsSandbox("ns", "web", 2, "web-0", "web-1")
				return []client.Object{bs, statsPod(bs, "web-0", 0, "", "10.0.0.1"), statsPod(bs, "web-1", 1, "", "10.0.0.1")}
			}(),
			nodes:     map[string]*statsNode{"10.0.0.1": {name: "n1", items: []nodeapi.PodStats{figures("web-0"), figures("web-1")}}},
			want:      []sandboxv1alpha1.SandboxReplicaStats{replicaWith(0, "web-0", "n1"), replicaWith(1, "web-1", "n1")},
			wantCalls: []string{"list 10.0.0.1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := &fakeNodeStats{nodes: tt.nodes}
			r := &StatsREST{Stats: newStatsReader(t, nodes, tt.objs...)}
			name := tt.objs[0].GetName()
			obj, err := r.Get(statsCtx("ns"), name, &metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := obj.(*sandboxv1alpha1.SandboxStats)
			wantMeta := metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"team": "a"}, CreationTimestamp: metav1.NewTime(statsNow)}
			if diff := cmp.Diff(wantMeta, got.ObjectMeta); diff != "" {
				t.Errorf("metadata (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got.Replicas); diff != "" {
				t.Errorf("replicas (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, nodes.seen()); diff != "" {
				t.Errorf("requests to the agents (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStatsSaturate: an agent's uint64 past int64 stays at the int64 maximum.
func TestStatsSaturate(t *testing.T) {
	rs := &sandboxv1alpha1.SandboxReplicaStats{}
	replicaFigures(rs, &nodeapi.PodStats{Network: &nodeapi.NetworkStats{RxBytes: math.MaxUint64, TxBytes: math.MaxInt64 + 1, RxPackets: math.MaxInt64}})
	want := &sandboxv1alpha1.SandboxNetworkStats{RxBytes: math.MaxInt64, TxBytes: math.MaxInt64, RxPackets: math.MaxInt64}
	if diff := cmp.Diff(want, rs.Network); diff != "" {
		t.Errorf("network (-want +got):\n%s", diff)
	}
}

// TestStatsSlowNode: a node whose agent does not answer costs the answer the timeout, not
// more, and its replicas only.
func TestStatsSlowNode(t *testing.T) {
	bs := statsSandbox("ns", "web", 2, "web-0", "web-1")
	nodes := &fakeNodeStats{nodes: map[string]*statsNode{
		"10.0.0.1": {name: "n1", items: []nodeapi.PodStats{figures("web-0")}},
		"10.0.0.2": {hang: true},
	}}
	s := newStatsReader(t, nodes, bs, statsPod(bs, "web-0", 0, "n1", "10.0.0.1"), statsPod(bs, "web-1", 1, "n2", "10.0.0.2"))
	s.Timeout = 100 * time.Millisecond
	start := time.Now()
	obj, err := (&StatsREST{Stats: s}).Get(statsCtx("ns"), "web", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the answer took %s", took)
	}
	want := []sandboxv1alpha1.SandboxReplicaStats{
		replicaWith(0, "web-0", "n1"),
		{Replica: 1, Pod: "web-1", Node: "n2", Reason: "NodeUnavailable", Message: "sandbox-node on node n2 did not answer within 100ms"},
	}
	if diff := cmp.Diff(want, obj.(*sandboxv1alpha1.SandboxStats).Replicas); diff != "" {
		t.Errorf("replicas (-want +got):\n%s", diff)
	}
}

// TestStatsAgentMessage: a real nodeclient's error for an agent that does not listen names
// what failed, not the URL or the node's address.
func TestStatsAgentMessage(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	c := &nodeclient.Stats{Client: &http.Client{}, Port: port}
	_, err = c.List(context.Background(), "127.0.0.1")
	if err == nil {
		t.Fatal("a list from a closed port answered")
	}
	msg := agentMessage("n1", err, StatsTimeout)
	if msg != "sandbox-node on node n1: dial: connect: connection refused" {
		t.Errorf("message %q (of %v)", msg, err)
	}
	if strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, strconv.Itoa(port)) {
		t.Errorf("message %q names the node's address", msg)
	}
}

// TestStatsNotFound: a missing sandbox is a 404 of the resource the client asked for.
func TestStatsNotFound(t *testing.T) {
	s := newStatsReader(t, &fakeNodeStats{})
	_, err := (&StatsREST{Stats: s}).Get(statsCtx("ns"), "nope", &metav1.GetOptions{})
	want := apitesting.APIErr{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Group: sandboxv1alpha1.GroupName, Kind: "sandboxes", Name: "nope"}
	if got := apitesting.APIErrOf(t, err); got != want {
		t.Errorf("sandboxes/nope/stats: %+v, want %+v", got, want)
	}
	_, err = (&SandboxStatsREST{Stats: s}).Get(statsCtx("ns"), "nope", &metav1.GetOptions{})
	want.Kind = "sandboxstats"
	if got := apitesting.APIErrOf(t, err); got != want {
		t.Errorf("sandboxstats/nope: %+v, want %+v", got, want)
	}
}

// TestSandboxStatsList: a list selects sandboxes by their labels and by name and namespace
// as a list of sandboxes does, orders them by namespace and name, and asks each node once,
// whatever the number of sandboxes on it.
func TestSandboxStatsList(t *testing.T) {
	var objs []client.Object
	// 200 sandboxes of one replica in two namespaces, on 10 nodes.
	nodes := &fakeNodeStats{nodes: map[string]*statsNode{}}
	for i := range 200 {
		ns := []string{"a", "b"}[i%2]
		bs := statsSandbox(ns, fmt.Sprintf("s%03d", i), 1, fmt.Sprintf("s%03d-0", i))
		bs.Labels["parity"] = strconv.Itoa(i % 2)
		bs.Labels["tens"] = strconv.Itoa(i / 10)
		host := fmt.Sprintf("10.0.0.%d", i%10)
		objs = append(objs, bs, statsPod(bs, bs.Name+"-0", 0, "n"+strconv.Itoa(i%10), host))
		ps := figures(bs.Name + "-0")
		ps.Namespace = ns
		if nodes.nodes[host] == nil {
			nodes.nodes[host] = &statsNode{name: "n" + strconv.Itoa(i%10)}
		}
		nodes.nodes[host].items = append(nodes.nodes[host].items, ps)
	}
	s := newStatsReader(t, nodes, objs...)
	r := &SandboxStatsREST{Stats: s}
	list := func(t *testing.T, ns string, opts *metainternalversion.ListOptions) []string {
		t.Helper()
		obj, err := r.List(statsCtx(ns), opts)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, item := range obj.(*sandboxv1alpha1.SandboxStatsList).Items {
			if len(item.Replicas) != 1 || item.Replicas[0].Reason != "" || item.Replicas[0].CPU == nil {
				t.Errorf("%s/%s: replicas %+v", item.Namespace, item.Name, item.Replicas)
			}
			names = append(names, item.Namespace+"/"+item.Name)
		}
		return names
	}

	start := time.Now()
	all := list(t, "", nil)
	t.Logf("a list of %d sandboxes took %s", len(all), time.Since(start))
	if len(all) != 200 || all[0] != "a/s000" || all[1] != "a/s002" || all[100] != "b/s001" {
		t.Errorf("every namespace: %d items, first %v", len(all), all[:min(3, len(all))])
	}
	var wantCalls []string
	for i := range 10 {
		wantCalls = append(wantCalls, fmt.Sprintf("list 10.0.0.%d", i))
	}
	if diff := cmp.Diff(wantCalls, nodes.seen()); diff != "" {
		t.Errorf("requests to the agents (-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		ns   string
		opts *metainternalversion.ListOptions
		want []string
	}{
		{name: "a namespace, by labels", ns: "b", opts: &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"tens": "3"})},
			want: []string{"b/s031", "b/s033", "b/s035", "b/s037", "b/s039"}},
		{name: "by name", ns: "a", opts: &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "s010")},
			want: []string{"a/s010"}},
		{name: "by namespace, across namespaces", ns: "", opts: &metainternalversion.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.namespace", "a"), LabelSelector: labels.SelectorFromSet(labels.Set{"tens": "0"})},
			want: []string{"a/s000", "a/s002", "a/s004", "a/s006", "a/s008"}},
		{name: "a name of another namespace", ns: "a", opts: &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "s001")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, list(t, tt.ns, tt.opts)); diff != "" {
				t.Errorf("items (-want +got):\n%s", diff)
			}
		})
	}

	_, err := r.List(statsCtx("a"), &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.phase", "Running")})
	if got := apitesting.APIErrOf(t, err); got.Code != http.StatusBadRequest {
		t.Errorf("a field selector on status.phase: %+v, want 400", got)
	}
}
