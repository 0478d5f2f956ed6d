package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
)

const statsAPI = "/apis/sandbox.kube-sandbox.io/v1alpha1"

// webStats are the figures of sandbox web of namespace ns: one replica read, one without a pod.
var webStats = sandboxv1alpha1.SandboxStats{
	TypeMeta:   metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxStats"},
	ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
	Replicas: []sandboxv1alpha1.SandboxReplicaStats{
		{
			Replica: 0, Pod: "web-abc", Node: "node-1",
			Timestamp: metav1.NewTime(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)),
			Window:    metav1.Duration{Duration: 10 * time.Second},
			CPU:       &sandboxv1alpha1.SandboxCPUStats{UsageNanoCores: 998_000_000, UsageCoreNanoSeconds: 42e9},
			Memory:    &sandboxv1alpha1.SandboxMemoryStats{WorkingSetBytes: 203 << 20, LimitBytes: 512 << 20},
			Processes: ptr.To[int64](14),
		},
		{Replica: 1, Reason: sandboxv1alpha1.StatsReasonNoPod, Message: "the replica has no pod now"},
	},
}

// statsServer answers as sandbox-apiserver does: the stats subresource of web (ns), 403 for
// that of secret, 404 for any other sandbox, and the sandboxstats collections. It records
// each request as "PATH?QUERY".
func statsServer(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	list := func() *sandboxv1alpha1.SandboxStatsList {
		return &sandboxv1alpha1.SandboxStatsList{
			TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1alpha1.SchemeGroupVersion.String(), Kind: "SandboxStatsList"},
			Items:    []sandboxv1alpha1.SandboxStats{webStats},
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen = append(seen, req.URL.Path+"?"+req.URL.RawQuery)
		mu.Unlock()
		var status *apierrors.StatusError
		var body any
		switch req.URL.Path {
		case statsAPI + "/namespaces/ns/sandboxes/web/stats", statsAPI + "/namespaces/ns/sandboxstats/web":
			body = &webStats
		case statsAPI + "/namespaces/ns/sandboxes/secret/stats":
			status = apierrors.NewForbidden(sandboxv1alpha1.Resource("sandboxes/stats"), "secret",
				errors.New(`User "eve" cannot get resource "sandboxes/stats" in API group "sandbox.kube-sandbox.io" in the namespace "ns"`))
		case statsAPI + "/namespaces/ns/sandboxstats", statsAPI + "/sandboxstats":
			body = list()
		default:
			status = apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), "ghost")
		}
		w.Header().Set("Content-Type", "application/json")
		if status != nil {
			w.WriteHeader(int(status.Status().Code))
			s := status.Status()
			s.Kind, s.APIVersion = "Status", "v1"
			body = &s
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

func TestStats(t *testing.T) {
	srv, seen := statsServer(t)
	c, err := client.New(&rest.Config{Host: srv.URL}, "ns")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	got, err := c.Stats(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	want := webStats.DeepCopy()
	// The client's decoder drops the kind, as for every object it reads.
	want.TypeMeta = metav1.TypeMeta{}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}

	if _, err := c.Stats(ctx, "secret"); !errors.Is(err, client.ErrForbidden) || !client.IsForbidden(err) {
		t.Errorf("Stats of a sandbox RBAC hides: %v, want ErrForbidden", err)
	}
	if _, err := c.Stats(ctx, "ghost"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Stats of a missing sandbox: %v, want ErrNotFound", err)
	}
	var status apierrors.APIStatus
	if _, err := c.Stats(ctx, "ghost"); !errors.As(err, &status) || status.Status().Reason != metav1.StatusReasonNotFound {
		t.Errorf("Stats of a missing sandbox: %v, want the server's Status", err)
	}

	list, err := c.ListStats(ctx, client.ListStatsOptions{LabelSelector: "team=ml"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "web" || len(list.Items[0].Replicas) != 2 {
		t.Errorf("ListStats = %+v, want web's two replicas", list.Items)
	}
	if _, err := c.ListStats(ctx, client.ListStatsOptions{AllNamespaces: true}); err != nil {
		t.Fatal(err)
	}

	wantSeen := []string{
		statsAPI + "/namespaces/ns/sandboxes/web/stats?",
		statsAPI + "/namespaces/ns/sandboxes/secret/stats?",
		statsAPI + "/namespaces/ns/sandboxes/ghost/stats?",
		statsAPI + "/namespaces/ns/sandboxes/ghost/stats?",
		statsAPI + "/namespaces/ns/sandboxstats?labelSelector=team%3Dml",
		statsAPI + "/sandboxstats?",
	}
	if diff := cmp.Diff(wantSeen, seen()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
