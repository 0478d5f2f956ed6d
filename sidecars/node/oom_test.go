package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/usage"
)

// oomReader is a usage reader whose pods' OOM-kill counts the test sets.
type oomReader struct {
	mu   sync.Mutex
	ooms map[string]uint64
}

func (f *oomReader) Read(_ context.Context, p usage.Pod) *nodeapi.PodStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &nodeapi.PodStats{PodUID: p.UID, Namespace: p.Namespace, Pod: p.Name, Sandbox: p.Sandbox, Replica: p.Replica, Timestamp: time.Now(),
		Memory: &nodeapi.MemoryStats{OOMKills: f.ooms[p.UID], LimitBytes: 256 << 20, PeakBytes: 250 << 20}}
}

func (f *oomReader) Forget(string) {}

func (f *oomReader) set(uid string, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ooms[uid] = n
}

// lines collects what a watch of the OOM stream got: "Synced", or "POD KILLS".
type lines struct {
	mu  sync.Mutex
	got []string
}

func (l *lines) add(line nodeapi.OOMLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if line.Report == nil {
		l.got = append(l.got, string(line.Type))
		return
	}
	l.got = append(l.got, line.Report.Pod+" "+strconv.FormatUint(line.Report.OOMKills, 10))
}

func (l *lines) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestOOMStream: over mutual TLS, the controller gets the pods with kills, Synced, then each
// kill as the sampler sees it, with heartbeats between; nobody else gets the stream; a
// server that shuts down ends it.
func TestOOMStream(t *testing.T) {
	reader := &oomReader{ooms: map[string]uint64{"uid-a": 2}}
	sampler := usage.NewSampler(reader, 10*time.Millisecond, 1)
	sampler.Observe(usage.Pod{UID: "uid-a", Namespace: "ns", Name: "pod-a", Sandbox: "sbx"})
	sampler.Observe(usage.Pod{UID: "uid-b", Namespace: "ns", Name: "pod-b", Sandbox: "sbx", Replica: 1})
	ts := startServer(t, &fakeEngine{}, func(s *server) {
		s.stats, s.sampler, s.node = sampler, sampler, "node1"
	})
	waitFor(t, "pod a sampled", func() bool { st, ok := sampler.Stats("uid-a"); return ok && st.Memory.OOMKills == 2 })
	waitFor(t, "pod b sampled", func() bool { _, ok := sampler.Stats("uid-b"); return ok })
	host, port, err := net.SplitHostPort(ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	watcher := func(cn string, silence time.Duration) *nodeclient.OOMs {
		return &nodeclient.OOMs{Client: ts.client(t, cn), Port: p, Silence: silence}
	}

	t.Run("others are refused", func(t *testing.T) {
		for _, cn := range []string{execdapi.APIServerIdentity, "sb-abc"} {
			err := watcher(cn, 0).Watch(t.Context(), host, func(nodeapi.OOMLine) { t.Error("a line for " + cn) })
			var se *nodeclient.StatusError
			if !errors.As(err, &se) || se.Code != http.StatusForbidden {
				t.Errorf("%s: %v, want 403", cn, err)
			}
		}
	})

	var got lines
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	// The test server's heartbeat is 20 ms: a silence of 500 ms is a dead stream, not a
	// quiet one.
	go func() { done <- watcher(execdapi.ControllerIdentity, 500*time.Millisecond).Watch(ctx, host, got.add) }()
	waitFor(t, "the initial state", func() bool { return len(got.snapshot()) >= 2 })
	reader.set("uid-b", 1)
	waitFor(t, "the kill in pod b", func() bool { return len(got.snapshot()) >= 3 })
	reader.set("uid-a", 5)
	waitFor(t, "three kills in pod a", func() bool { return len(got.snapshot()) >= 4 })
	// Quiet for many heartbeats: the stream lives, and tells nothing more.
	time.Sleep(200 * time.Millisecond)
	want := []string{"pod-a 2", "Synced", "pod-b 1", "pod-a 5"}
	if diff := cmp.Diff(want, got.snapshot()); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	select {
	case err := <-done:
		t.Fatalf("the stream ended: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch after its context ended: %v, want nil", err)
	}

	t.Run("the agent shuts down", func(t *testing.T) {
		var again lines
		done := make(chan error, 1)
		go func() {
			done <- watcher(execdapi.ControllerIdentity, 0).Watch(t.Context(), host, again.add)
		}()
		waitFor(t, "the initial state", func() bool { return len(again.snapshot()) >= 3 })
		if diff := cmp.Diff([]string{"pod-a 5", "pod-b 1", "Synced"}, again.snapshot()); diff != "" {
			t.Errorf("initial state (-want +got):\n%s", diff)
		}
		ts.stop()
		select {
		case err := <-done:
			if err == nil {
				t.Error("Watch of a stream the agent ended: nil, want an error")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stream outlived the agent")
		}
	})
}
