package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

// sandboxStatsOf GETs the stats subresource of a sandbox.
func sandboxStatsOf(ctx context.Context, c sandboxclient.Interface, ns, name string) (*sandboxv1alpha1.SandboxStats, error) {
	out := &sandboxv1alpha1.SandboxStats{}
	err := c.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxes").Name(name).SubResource("stats").Do(ctx).Into(out)
	return out, err
}

// sandboxStatsList lists sandboxstats of ns ("": every namespace).
func sandboxStatsList(ctx context.Context, c sandboxclient.Interface, ns string) (*sandboxv1alpha1.SandboxStatsList, error) {
	out := &sandboxv1alpha1.SandboxStatsList{}
	err := c.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxstats").Do(ctx).Into(out)
	return out, err
}

// asTable asks req for a Table, as kubectl and the plugin do.
func asTable(ctx context.Context, req *rest.Request) (*metav1.Table, error) {
	result := req.SetHeader("Accept", tasksTableAccept).Do(ctx)
	if err := result.Error(); err != nil {
		return nil, err
	}
	data, err := result.Raw()
	if err != nil {
		return nil, err
	}
	table := &metav1.Table{}
	if err := utiljson.Unmarshal(data, table); err != nil || table.Kind != "Table" {
		return nil, fmt.Errorf("not a Table (%v): %s", err, data)
	}
	return table, nil
}

// placePod puts a sandbox's pod on a node, as the scheduler and the kubelet would: bound to
// node, and started on addr (status.hostIP), still Pending (no kubelet runs here). It
// returns the pod's UID, which the node agent knows it by.
func placePod(t *testing.T, ns, name, node, addr string) string {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{}
	waitFor(t, "pod "+name, 30*time.Second, func(ctx context.Context) (bool, error) {
		return kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod) == nil, nil
	})
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := kube.SubResource("binding").Create(ctx, pod, binding); err != nil {
		t.Fatalf("bind pod %s to %s: %v", name, node, err)
	}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.HostIP = addr
	pod.Status.HostIPs = []corev1.HostIP{{IP: addr}}
	if err := kube.Status().Update(ctx, pod); err != nil {
		t.Fatalf("start pod %s on %s: %v", name, addr, err)
	}
	return string(pod.UID)
}

// podFigures is what an agent answers for a pod.
func podFigures(uid, ns, pod string, workingSet uint64) nodeapi.PodStats {
	return nodeapi.PodStats{
		PodUID: uid, Namespace: ns, Pod: pod, Timestamp: time.Now().Add(-2 * time.Second), Window: 10 * time.Second,
		CPU:       &nodeapi.CPUStats{UsageNanoCores: 998_000_000, UsageCoreNanoSeconds: 12_000_000_000},
		Memory:    &nodeapi.MemoryStats{WorkingSetBytes: workingSet, RSSBytes: workingSet / 2, UsageBytes: workingSet * 2, LimitBytes: 768 << 20, OOMKills: 1},
		Disk:      &nodeapi.DiskStats{WritableLayerBytes: 100 << 20},
		Network:   &nodeapi.NetworkStats{RxBytes: 10 << 20, TxBytes: 2 << 20, ConnectionsDenied: 3},
		Processes: ptr.To[uint64](7),
	}
}

// TestStats: what sandboxes use, through the aggregator and sandbox-apiserver to stand-ins
// for the node agents over mutual TLS with their real certificates: GET sandboxes/NAME/stats
// and sandboxstats (a namespace's, every namespace's) answer each replica's figures, or why
// it has none (its node's agent is down, the agent does not know the pod yet, figures read
// in part), as objects and as tables; a namespace's list asks its node once; a missing
// sandbox is a 404; the view role of artifacts/ reads them in its namespace and nowhere else.
func TestStats(t *testing.T) {
	ctx, cancel := context.WithTimeout(suiteCtx, 2*time.Minute)
	defer cancel()
	ns, other := newNamespace(t), newNamespace(t)
	nodeA, down := framework.NodeAddress(), framework.NodeAddress()
	agent, err := framework.StartNodeAgent(ctx, kube, nodeA, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()

	top := sandbox("top")
	top.Spec.Replicas = ptr.To[int32](4)
	for _, s := range []struct {
		ns  string
		sbx *sandboxv1alpha1.Sandbox
	}{{ns, top}, {ns, sandbox("one")}, {other, sandbox("far")}} {
		if _, err := sandboxes.SandboxV1alpha1().Sandboxes(s.ns).Create(ctx, s.sbx, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// top: replicas 0 and 1 on node A, which reads replica 1 in part; replica 2 on a node
	// whose agent is down; replica 3 on node A, which has not sampled it yet.
	uid0 := placePod(t, ns, "top-0", "node-a", nodeA)
	uid1 := placePod(t, ns, "top-1", "node-a", nodeA)
	placePod(t, ns, "top-2", "node-b", down)
	placePod(t, ns, "top-3", "node-a", nodeA)
	uidOne := placePod(t, ns, "one-0", "node-a", nodeA)
	uidFar := placePod(t, other, "far-0", "node-a", nodeA)
	agent.Set(podFigures(uid0, ns, "top-0", 203<<20))
	partial := podFigures(uid1, ns, "top-1", 50<<20)
	partial.Network, partial.Errors = nil, map[string]string{nodeapi.FigureNetwork: "no host-side interface"}
	agent.Set(partial)
	agent.Set(podFigures(uidOne, ns, "one-0", 1<<30))
	agent.Set(podFigures(uidFar, other, "far-0", 64<<20))

	// sandbox-apiserver sees the pods on their nodes through its cache, a moment later.
	var stats *sandboxv1alpha1.SandboxStats
	waitFor(t, "the stats of top", 30*time.Second, func(ctx context.Context) (bool, error) {
		stats, err = sandboxStatsOf(ctx, sandboxes, ns, "top")
		return err == nil && len(stats.Replicas) == 4 && stats.Replicas[3].Reason == sandboxv1alpha1.StatsReasonNotSampled, nil
	})
	if stats.Name != "top" || stats.Namespace != ns || stats.CreationTimestamp.IsZero() {
		t.Errorf("metadata %+v", stats.ObjectMeta)
	}
	var reasons []string
	for _, rs := range stats.Replicas {
		reasons = append(reasons, rs.Reason)
	}
	if diff := cmp.Diff([]string{"", "Partial", "NodeUnavailable", "NotSampled"}, reasons); diff != "" {
		t.Errorf("reasons (-want +got):\n%s; replicas %+v", diff, stats.Replicas)
	}
	if r := stats.Replicas[0]; r.Pod != "top-0" || r.Node != "node-a" || r.CPU == nil || r.CPU.UsageNanoCores != 998_000_000 ||
		r.Memory == nil || r.Memory.WorkingSetBytes != 203<<20 || r.Window.Duration != 10*time.Second || ptr.Deref(r.Processes, 0) != 7 {
		t.Errorf("replica 0: %+v", r)
	}
	if r := stats.Replicas[1]; r.Network != nil || r.Memory == nil || r.Message != "not read: network: no host-side interface" {
		t.Errorf("replica 1 (in part): %+v", r)
	}
	if r := stats.Replicas[2]; r.Node != "node-b" || r.Message != "sandbox-node on node node-b: dial: connect: connection refused" || r.CPU != nil {
		t.Errorf("replica 2 (its node's agent down): %+v", r)
	}

	// As a table, a row per replica.
	table, err := asTable(ctx, sandboxes.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxes").Name("top").SubResource("stats"))
	if err != nil {
		t.Fatalf("the stats of top as a table: %v", err)
	}
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	wantColumns := []string{"Name", "Replica", "CPU(cores)", "Memory(bytes)", "Disk(bytes)", "Net-In", "Net-Out", "Processes",
		"Mem-Limit", "OOM-Kills", "Denied", "Node", "Window", "Message"}
	if diff := cmp.Diff(wantColumns, columns); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	if len(table.Rows) != 4 {
		t.Fatalf("%d rows, want 4", len(table.Rows))
	}
	wantRows := [][]any{
		{"top", int64(0), "998m", "203Mi", "100Mi", "10Mi", "2Mi", "7", "768Mi", "1", "3", "node-a", "10s", "<none>"},
		{"top", int64(1), "998m", "50Mi", "100Mi", "<unknown>", "<unknown>", "7", "768Mi", "1", "<unknown>", "node-a", "10s",
			"Partial: not read: network: no host-side interface"},
		{"top", int64(2), "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "node-b", "<none>",
			"NodeUnavailable: sandbox-node on node node-b: dial: connect: connection refused"},
		{"top", int64(3), "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "node-a", "<none>",
			"NotSampled: sandbox-node on node node-a has no figures of pod top-3 yet"},
	}
	for i, row := range table.Rows {
		if diff := cmp.Diff(wantRows[i], row.Cells); diff != "" {
			t.Errorf("row %d (-want +got):\n%s", i, diff)
		}
		m := &metav1.PartialObjectMetadata{}
		if err := utiljson.Unmarshal(row.Object.Raw, m); err != nil || m.Name != "top" || m.Namespace != ns {
			t.Errorf("row %d: object %s (%v), want the metadata of top", i, row.Object.Raw, err)
		}
	}

	// A namespace's list asks node A once for its five pods there, and the down node once.
	before := agent.Requests.Load()
	start := time.Now()
	list, err := sandboxStatsList(ctx, sandboxes, ns)
	if err != nil {
		t.Fatalf("sandboxstats of %s: %v", ns, err)
	}
	t.Logf("a list of %d sandboxes took %s", len(list.Items), time.Since(start))
	if n := agent.Requests.Load() - before; n != 1 {
		t.Errorf("the list asked node A %d times, want once", n)
	}
	if len(list.Items) != 2 || list.Items[0].Name != "one" || list.Items[1].Name != "top" ||
		list.Items[0].Replicas[0].Memory == nil || list.Items[0].Replicas[0].Memory.WorkingSetBytes != 1<<30 {
		t.Errorf("sandboxstats of %s: %+v", ns, list.Items)
	}
	one := &sandboxv1alpha1.SandboxStats{}
	if err := sandboxes.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxstats").Name("one").Do(ctx).Into(one); err != nil ||
		len(one.Replicas) != 1 || one.Replicas[0].Pod != "one-0" || one.Replicas[0].CPU == nil {
		t.Errorf("sandboxstats/one: %+v (%v)", one, err)
	}
	listTable, err := asTable(ctx, sandboxes.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxstats"))
	if err != nil || len(listTable.Rows) != 5 {
		t.Errorf("sandboxstats of %s as a table: %v, %d rows, want 5", ns, err, len(listTable.Rows))
	}
	all, err := sandboxStatsList(ctx, sandboxes, "")
	if err != nil {
		t.Fatalf("sandboxstats of every namespace: %v", err)
	}
	var names []string
	for _, item := range all.Items {
		if item.Namespace == ns || item.Namespace == other {
			names = append(names, item.Namespace+"/"+item.Name)
		}
	}
	// By namespace, then name (the generated namespaces' names are of one length).
	wantNames := []string{ns + "/one", ns + "/top", other + "/far"}
	slices.Sort(wantNames)
	if diff := cmp.Diff(wantNames, names); diff != "" {
		t.Errorf("sandboxstats of every namespace (-want +got):\n%s", diff)
	}

	// Missing sandboxes.
	if _, err := sandboxStatsOf(ctx, sandboxes, ns, "nope"); !apierrors.IsNotFound(err) {
		t.Errorf("sandboxes/nope/stats: %v, want 404", err)
	}
	if err := sandboxes.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxstats").Name("nope").Do(ctx).Error(); !apierrors.IsNotFound(err) {
		t.Errorf("sandboxstats/nope: %v, want 404", err)
	}

	// Discovery lists both, with their verbs, for kubectl.
	resources, err := sandboxes.Discovery().ServerResourcesForGroupVersion(sandboxv1alpha1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string][]string{}
	for _, r := range resources.APIResources {
		if r.Name == "sandboxes/stats" || r.Name == "sandboxstats" {
			verbs[r.Name+" "+r.Kind] = slices.Sorted(slices.Values(r.Verbs))
		}
	}
	if diff := cmp.Diff(map[string][]string{"sandboxes/stats SandboxStats": {"get"}, "sandboxstats SandboxStats": {"get", "list"}}, verbs); diff != "" {
		t.Errorf("discovery (-want +got):\n%s", diff)
	}

	// The OpenAPI of the group names the two GETs apart (sandbox-apiserver builds v3 when
	// first asked for it; the aggregator asks once it has seen the APIService available).
	var doc []byte
	start = time.Now()
	waitFor(t, "the OpenAPI v3 of the group", 90*time.Second, func(ctx context.Context) (bool, error) {
		doc, err = sandboxes.Discovery().RESTClient().Get().AbsPath("/openapi/v3/apis/sandbox.kube-sandbox.io/v1alpha1").DoRaw(ctx)
		return err == nil, nil
	})
	t.Logf("the OpenAPI v3 of the group came after %s", time.Since(start))
	for _, id := range []string{`"readSandboxKubeSandboxIoV1alpha1NamespacedSandboxStats"`, `"readSandboxKubeSandboxIoV1alpha1NamespacedSandboxStatsSubresource"`,
		`"listSandboxKubeSandboxIoV1alpha1NamespacedSandboxStats"`} {
		if !strings.Contains(string(doc), id) {
			t.Errorf("OpenAPI v3 of the group has no operation %s", id)
		}
	}

	// Carol may get sandboxes, not their stats.
	carol := sandboxClientFor(t, framework.CarolToken)
	grant(t, ns, "carol", []string{"sandboxes"}, []string{"get"})
	waitFor(t, "carol's get of sandboxes", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := carol.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "top", metav1.GetOptions{})
		return err == nil, nil
	})
	if _, err := sandboxStatsOf(ctx, carol, ns, "top"); !apierrors.IsForbidden(err) {
		t.Errorf("carol's stats: %v, want 403", err)
	}
	// Bob has the view role of artifacts/ in ns only: stats there, a 403 in the other.
	if err := framework.ApplyManifest(ctx, kube, "artifacts/base/rbac-users.yaml"); err != nil {
		t.Fatal(err)
	}
	bind(t, ns, "bob", "ClusterRole", "kube-sandbox-view")
	bob := sandboxClientFor(t, framework.BobToken)
	waitFor(t, "bob's view role", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := sandboxStatsOf(ctx, bob, ns, "top")
		return err == nil, nil
	})
	if l, err := sandboxStatsList(ctx, bob, ns); err != nil || len(l.Items) != 2 {
		t.Errorf("bob's sandboxstats of %s: %v (%v)", ns, l, err)
	}
	if _, err := asTable(ctx, bob.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxstats")); err != nil {
		t.Errorf("bob's sandboxstats of %s as a table: %v", ns, err)
	}
	if _, err := sandboxStatsOf(ctx, bob, other, "far"); !apierrors.IsForbidden(err) {
		t.Errorf("bob's stats in another namespace: %v, want 403", err)
	}
	if _, err := sandboxStatsList(ctx, bob, other); !apierrors.IsForbidden(err) {
		t.Errorf("bob's sandboxstats of another namespace: %v, want 403", err)
	}
	if _, err := sandboxStatsList(ctx, bob, ""); !apierrors.IsForbidden(err) {
		t.Errorf("bob's sandboxstats of every namespace: %v, want 403", err)
	}
}
