package node

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// fakeStats answers from fixed samples.
type fakeStats map[string]nodeapi.PodStats

func (f fakeStats) Stats(uid string) (nodeapi.PodStats, bool) { st, ok := f[uid]; return st, ok }

func (f fakeStats) SubscribeOOMs() ([]nodeapi.OOMReport, <-chan nodeapi.OOMReport, func()) {
	return nil, make(chan nodeapi.OOMReport), func() {}
}

func (f fakeStats) List() []nodeapi.PodStats {
	out := []nodeapi.PodStats{}
	for _, st := range f {
		out = append(out, st)
	}
	return out
}

// TestStatsEndpoints: sandbox-apiserver and sandbox-controller read the figures, nobody else;
// a pod the agent has no figures of is 404. Snapshots stay the controller's alone.
func TestStatsEndpoints(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	procs := uint64(3)
	one := nodeapi.PodStats{PodUID: "uid-1", Namespace: "team-a", Pod: "sbx-abc", Sandbox: "sbx", Replica: 0, Timestamp: at,
		Window: 10 * time.Second, CPU: &nodeapi.CPUStats{UsageNanoCores: 5e8, UsageCoreNanoSeconds: 7e9}, Processes: &procs,
		Errors: map[string]string{"disk": "containerd is down"}}
	ts := startServer(t, &fakeEngine{}, func(s *server) {
		s.stats, s.node = fakeStats{"uid-1": one}, "node1"
	})
	get := func(t *testing.T, cn, path string) (int, []byte) {
		t.Helper()
		resp, err := ts.client(t, cn).Get("https://" + ts.addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	tests := []struct {
		name     string
		client   string
		path     string
		wantCode int
		want     any // the body decoded into a new value of its type
	}{
		{"the apiserver lists", execdapi.APIServerIdentity, nodeapi.StatsPath, http.StatusOK, &nodeapi.StatsList{Node: "node1", Items: []nodeapi.PodStats{one}}},
		{"the controller lists", execdapi.ControllerIdentity, nodeapi.StatsPath, http.StatusOK, &nodeapi.StatsList{Node: "node1", Items: []nodeapi.PodStats{one}}},
		{"the apiserver reads a pod", execdapi.APIServerIdentity, nodeapi.PodStatsPath("uid-1"), http.StatusOK, &one},
		{"the controller reads a pod", execdapi.ControllerIdentity, nodeapi.PodStatsPath("uid-1"), http.StatusOK, &one},
		{"a pod of no figures", execdapi.APIServerIdentity, nodeapi.PodStatsPath("idle"), http.StatusNotFound, nil},
		{"another identity lists", "sb-abc", nodeapi.StatsPath, http.StatusForbidden, nil},
		{"another identity reads a pod", "sb-abc", nodeapi.PodStatsPath("uid-1"), http.StatusForbidden, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, tt.client, tt.path)
			if code != tt.wantCode {
				t.Fatalf("status %d (%s), want %d", code, body, tt.wantCode)
			}
			if tt.want == nil {
				return
			}
			var got any
			switch tt.want.(type) {
			case *nodeapi.StatsList:
				got = &nodeapi.StatsList{}
			default:
				got = &nodeapi.PodStats{}
			}
			if err := json.Unmarshal(body, got); err != nil {
				t.Fatalf("decode %s: %v", body, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	t.Run("the apiserver may not take snapshots", func(t *testing.T) {
		resp, err := post(t.Context(), t, ts.client(t, execdapi.APIServerIdentity), ts.url(), testRequest(goodImage()))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("status %s, want 403", resp.Status)
		}
	})
	t.Run("no POST", func(t *testing.T) {
		resp, err := ts.client(t, execdapi.APIServerIdentity).Post("https://"+ts.addr+nodeapi.StatsPath, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("status %s, want 405", resp.Status)
		}
	})
}
