package oomwatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// conn is one stream the fake agent serves: the test sends it lines, or ends it with an error.
type conn struct {
	lines chan nodeapi.OOMLine
	end   chan error
}

// fakeAgents are the node agents: every Watch is a new conn of its address.
type fakeAgents struct {
	mu    sync.Mutex
	conns map[string][]*conn
	open  map[string]int
}

func (f *fakeAgents) Watch(ctx context.Context, addr string, fn func(nodeapi.OOMLine)) error {
	c := &conn{lines: make(chan nodeapi.OOMLine), end: make(chan error)}
	f.mu.Lock()
	f.conns[addr] = append(f.conns[addr], c)
	f.open[addr]++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.open[addr]--
		f.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-c.end:
			return err
		case l := <-c.lines:
			fn(l)
		}
	}
}

// latest is the newest conn of addr, once there are n.
func (f *fakeAgents) latest(t *testing.T, addr string, n int) *conn {
	t.Helper()
	var c *conn
	eventually(t, "connection "+addr, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.conns[addr]) < n {
			return false
		}
		c = f.conns[addr][n-1]
		return true
	})
	return c
}

func (f *fakeAgents) opened(addr string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open[addr]
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// notes records the Notify calls.
type notes struct {
	mu  sync.Mutex
	got []string
}

func (n *notes) notify(s types.NamespacedName) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, s.String())
}

// take returns what was notified since the last take.
func (n *notes) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := n.got
	n.got = nil
	return out
}

func report(pod, sandbox string, kills uint64) nodeapi.OOMLine {
	return nodeapi.OOMLine{Type: nodeapi.OOMReportLine, Report: &nodeapi.OOMReport{PodUID: "uid-" + pod, Namespace: "ns", Pod: pod,
		Sandbox: sandbox, OOMKills: kills, LimitBytes: 256 << 20, PeakBytes: 250 << 20}}
}

var synced = nodeapi.OOMLine{Type: nodeapi.OOMSyncedLine}

// send gives c its lines, each once fn took the one before.
func send(c *conn, lines ...nodeapi.OOMLine) {
	for _, l := range lines {
		c.lines <- l
	}
}

func kills(w *Watcher, addr, pod string) uint64 {
	r, ok := w.Report(addr, types.UID("uid-"+pod))
	if !ok {
		return 0
	}
	return r.OOMKills
}

// TestWatcher: one stream per node address however many sandboxes need it, opened at Start;
// its initial state and each growth notify the sandbox, and nothing else does; a lost stream
// keeps its reports and comes back with the kills counted meanwhile; a node no sandbox needs
// loses its stream.
func TestWatcher(t *testing.T) {
	agents := &fakeAgents{conns: map[string][]*conn{}, open: map[string]int{}}
	var n notes
	w := &Watcher{Streamer: agents, Notify: n.notify, Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 30}}
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	w.Sync(a, []string{"10.0.0.1", "10.0.0.2", ""})
	w.Sync(b, []string{"10.0.0.1"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = w.Start(ctx) }()

	c1 := agents.latest(t, "10.0.0.1", 1)
	c2 := agents.latest(t, "10.0.0.2", 1)
	if w.Open() != 2 {
		t.Errorf("%d node streams, want 2", w.Open())
	}

	steps := []struct {
		name       string
		do         func()
		wantNotify []string
		check      func(t *testing.T)
	}{
		{
			name: "initial state: a sandbox per pod with kills, once Synced",
			do: func() {
				send(c1, report("a-0", "a", 1), report("b-0", "b", 2))
				if got := n.take(); len(got) != 0 {
					t.Errorf("notified before Synced: %v", got)
				}
				send(c1, synced)
				send(c2, synced)
			},
			wantNotify: []string{"ns/a", "ns/b"},
			check: func(t *testing.T) {
				if kills(w, "10.0.0.1", "a-0") != 1 || kills(w, "10.0.0.1", "b-0") != 2 {
					t.Error("reports of a-0 and b-0 not kept")
				}
			},
		},
		{
			name:       "a count that grows notifies; one that does not, not",
			do:         func() { send(c1, report("a-0", "a", 1), report("b-0", "b", 5)) },
			wantNotify: []string{"ns/b"},
		},
		{
			name: "a lost stream keeps its reports, and its next initial state notifies what grew meanwhile",
			do: func() {
				c1.end <- errors.New("connection reset")
				if kills(w, "10.0.0.1", "b-0") != 5 {
					t.Error("the report of b-0 lost with its stream")
				}
				again := agents.latest(t, "10.0.0.1", 2)
				send(again, report("a-0", "a", 3), report("b-0", "b", 5), synced)
				c1 = again
			},
			wantNotify: []string{"ns/a"},
			check: func(t *testing.T) {
				if kills(w, "10.0.0.1", "a-0") != 3 {
					t.Error("a-0's kills in the new state not kept")
				}
			},
		},
		{
			name: "a pod the new state does not name is gone",
			do: func() {
				c1.end <- errors.New("EOF")
				again := agents.latest(t, "10.0.0.1", 3)
				send(again, report("a-0", "a", 3), synced)
				c1 = again
			},
			check: func(t *testing.T) {
				if _, ok := w.Report("10.0.0.1", "uid-b-0"); ok {
					t.Error("b-0's report outlived the agent's state")
				}
			},
		},
		{
			name: "a node no sandbox needs any more loses its stream; one still needed keeps it",
			do: func() {
				w.Sync(a, []string{"10.0.0.1"})
				eventually(t, "the stream to 10.0.0.2 closed", func() bool { return agents.opened("10.0.0.2") == 0 })
				w.Sync(a, nil)
				w.Sync(a, nil) // idempotent
			},
			check: func(t *testing.T) {
				if w.Open() != 1 || agents.opened("10.0.0.1") != 1 {
					t.Errorf("%d node streams (%d to 10.0.0.1), want the one b needs", w.Open(), agents.opened("10.0.0.1"))
				}
				w.Sync(b, nil)
				eventually(t, "every stream closed", func() bool { return agents.opened("10.0.0.1") == 0 && w.Open() == 0 })
			},
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do()
			// Lines are taken one at a time: once the last was sent, all but its Notify are in.
			time.Sleep(20 * time.Millisecond)
			if diff := cmp.Diff(st.wantNotify, n.take()); diff != "" {
				t.Errorf("notified (-want +got):\n%s", diff)
			}
			if st.check != nil {
				st.check(t)
			}
		})
	}
}
