package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
)

const statsAPI = "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/" + cmdtesting.Namespace

var statsRead = metav1.NewTime(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))

// testStats are the figures of sandbox web: a replica read over 10 s, with OOM kills and
// refused connections; one without a pod; and one read once, so with no CPU rate yet.
var testStats = sandboxv1alpha1.SandboxStats{
	TypeMeta:   metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxStats"},
	ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: cmdtesting.Namespace},
	Replicas: []sandboxv1alpha1.SandboxReplicaStats{
		{
			Replica: 0, Pod: "web-a", Node: "node-1", Timestamp: statsRead, Window: metav1.Duration{Duration: 10 * time.Second},
			CPU:       &sandboxv1alpha1.SandboxCPUStats{UsageNanoCores: 998_000_000},
			Memory:    &sandboxv1alpha1.SandboxMemoryStats{WorkingSetBytes: 203 << 20, LimitBytes: 512 << 20, OOMKills: 2},
			Disk:      &sandboxv1alpha1.SandboxDiskStats{WritableLayerBytes: 10 << 20, EmptyDirBytes: 2 << 20},
			Network:   &sandboxv1alpha1.SandboxNetworkStats{RxBytes: 3 << 19, TxBytes: 300 << 10, ConnectionsDenied: 3},
			Processes: ptr[int64](14),
		},
		{Replica: 1, Reason: sandboxv1alpha1.StatsReasonNoPod, Message: "the replica has no pod now"},
		{
			Replica: 2, Node: "node-2", Timestamp: statsRead,
			CPU:    &sandboxv1alpha1.SandboxCPUStats{UsageNanoCores: 1},
			Memory: &sandboxv1alpha1.SandboxMemoryStats{WorkingSetBytes: 512},
			Reason: sandboxv1alpha1.StatsReasonPartial, Message: "disk: the writable layer could not be read",
		},
	},
}

// connectStats serves the tools on a client of a stand-in that answers the stats of web and
// the sandboxstats of the namespace, and refuses those of any other sandbox (403); it records
// the paths asked for.
func connectStats(t *testing.T) (*mcp.ClientSession, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen = append(seen, req.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch req.URL.Path {
		case statsAPI + "/sandboxes/web/stats":
			_ = json.NewEncoder(w).Encode(&testStats)
		case statsAPI + "/sandboxstats":
			_ = json.NewEncoder(w).Encode(&sandboxv1alpha1.SandboxStatsList{
				TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxStatsList"},
				Items:    []sandboxv1alpha1.SandboxStats{testStats, {ObjectMeta: metav1.ObjectMeta{Name: "idle"}, Replicas: []sandboxv1alpha1.SandboxReplicaStats{}}},
			})
		default:
			s := apierrors.NewForbidden(sandboxv1alpha1.Resource("sandboxes"), "secret",
				errors.New(`User "agent" cannot get resource "sandboxes/stats" in API group "sandbox.kube-sandbox.io"`)).Status()
			s.Kind, s.APIVersion = "Status", "v1"
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(&s)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := sandboxclient.New(&rest.Config{Host: srv.URL}, cmdtesting.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	serverT, clientT := mcp.NewInMemoryTransports()
	ss, err := New(c, DefaultOptions()).Connect(ctx, serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, clientT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

func TestSandboxStats(t *testing.T) {
	cs, seen := connectStats(t)
	var out StatsOutput
	res := call(t, cs, "sandbox_stats", map[string]any{"name": "web"}, &out)
	if res.IsError {
		t.Fatalf("sandbox_stats: %s", text(res))
	}
	wantText := strings.Join([]string{
		"web/0: cpu 0.998 cores, memory 203.0 MiB of 512.0 MiB, disk 12.0 MiB, net in 1.5 MiB out 300.0 KiB, 14 processes, 2 OOM kills, 3 connections denied",
		"web/1: no figures (NoPod: the replica has no pod now)",
		"web/2: memory 512 B (Partial: disk: the writable layer could not be read)",
	}, "\n")
	if diff := cmp.Diff(wantText, text(res)); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
	want := StatsOutput{Replicas: []ReplicaStatsOutput{
		{Sandbox: "web", Replica: 0, Node: "node-1", CPUCores: ptr(0.998), MemoryBytes: ptr[int64](203 << 20),
			MemoryLimitBytes: ptr[int64](512 << 20), OOMKills: ptr[int64](2), DiskBytes: ptr[int64](12 << 20),
			NetInBytes: ptr[int64](3 << 19), NetOutBytes: ptr[int64](300 << 10), ConnectionsDenied: ptr[int64](3),
			Processes: ptr[int64](14), ReadAt: "2026-12-06T10:00:00Z"},
		{Sandbox: "web", Replica: 1, Reason: "NoPod", Message: "the replica has no pod now"},
		{Sandbox: "web", Replica: 2, Node: "node-2", MemoryBytes: ptr[int64](512), OOMKills: ptr[int64](0),
			Reason: "Partial", Message: "disk: the writable layer could not be read", ReadAt: "2026-12-06T10:00:00Z"},
	}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("structured content (-want +got):\n%s", diff)
	}

	// Without a name: the namespace's sandboxes; one without replicas adds nothing.
	out = StatsOutput{}
	if res := call(t, cs, "sandbox_stats", map[string]any{}, &out); res.IsError || len(out.Replicas) != 3 ||
		!strings.HasPrefix(text(res), "web/0: cpu 0.998 cores") {
		t.Errorf("sandbox_stats of the namespace: %q, %d replicas", text(res), len(out.Replicas))
	}

	res = call(t, cs, "sandbox_stats", map[string]any{"name": "secret"}, nil)
	if !res.IsError || !strings.Contains(text(res), "Forbidden") || !strings.Contains(text(res), `"sandboxes/stats"`) {
		t.Errorf("a denial: error %v %q, want Forbidden naming the resource", res.IsError, text(res))
	}

	wantSeen := []string{statsAPI + "/sandboxes/web/stats", statsAPI + "/sandboxstats", statsAPI + "/sandboxes/secret/stats"}
	if diff := cmp.Diff(wantSeen, seen()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 19: "1.5 MiB", 5 << 30: "5.0 GiB", 3 << 40: "3.0 TiB", 1 << 52: "4096.0 TiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
