// Package oomwatch holds the controller's streams of OOM kills from the node agents
// (nodeapi.OOMsPath): one per node that runs allocated sandbox pods, on the leader, so that a
// kill reaches its sandbox's reconcile at the node agent's sample that counts it, with no
// question asked in between.
package oomwatch

import (
	"context"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeclient"
)

// Streamer opens a node agent's OOM stream (nodeclient.OOMs).
type Streamer interface {
	Watch(ctx context.Context, hostIP string, fn func(nodeapi.OOMLine)) error
}

var _ Streamer = &nodeclient.OOMs{}

// Watcher keeps one OOM stream open to the node agent of each node address a sandbox needs
// (Sync), and the latest report of each pod with a kill (Report). A count that grows calls
// Notify with the pod's sandbox, which enqueues it: its reconcile compares the count with what
// its status told (package batchsandbox) and tells the difference. The Watcher itself decides
// nothing, so that a lost stream, a reconnect or a new leader can at worst notify in vain.
//
// A stream that breaks is opened again with backoff; its reports are kept meanwhile, and the
// stream's initial state replaces them when it is back: a kill counted while it was away is
// told then. It runs on the leader only (a manager Runnable): a new leader starts empty, and
// each stream's initial state notifies every sandbox with a kill, whose status says what was
// told already.
type Watcher struct {
	Streamer Streamer
	// Notify is called, from a stream's goroutine, for a sandbox whose pod's count grew.
	Notify func(sandbox types.NamespacedName)
	// Backoff between reconnects; zero: 500 ms doubling to 30 s.
	Backoff wait.Backoff

	mu    sync.Mutex
	ctx   context.Context
	nodes map[string]*node
	// needs says which node addresses each sandbox needs (Sync).
	needs map[types.NamespacedName]map[string]bool
}

// node is the stream of one node address.
type node struct {
	cancel context.CancelFunc // nil until opened (Start)
	// users counts the sandboxes that need it.
	users int
	// reports are the last reports of the node's pods with kills, by pod UID.
	reports map[types.UID]nodeapi.OOMReport
	// initial gathers the stream's initial state until Synced.
	initial map[types.UID]nodeapi.OOMReport
	synced  bool
}

var _ manager.LeaderElectionRunnable = &Watcher{}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (w *Watcher) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: streams asked for before it open now, and all close when
// ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	for addr, n := range w.nodes {
		w.openLocked(addr, n)
	}
	w.mu.Unlock()
	<-ctx.Done()
	return nil
}

// Sync says which node addresses the sandbox's pods are on now: streams open to those no
// stream is open to, and close where no sandbox needs them any more (nil: the sandbox needs
// none, it is gone).
func (w *Watcher) Sync(sandbox types.NamespacedName, hostIPs []string) {
	want := map[string]bool{}
	for _, ip := range hostIPs {
		if ip != "" {
			want[ip] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.nodes == nil {
		w.nodes = map[string]*node{}
		w.needs = map[types.NamespacedName]map[string]bool{}
	}
	had := w.needs[sandbox]
	for ip := range want {
		if had[ip] {
			continue
		}
		n := w.nodes[ip]
		if n == nil {
			n = &node{reports: map[types.UID]nodeapi.OOMReport{}}
			w.nodes[ip] = n
			if w.ctx != nil {
				w.openLocked(ip, n)
			}
		}
		n.users++
	}
	for ip := range had {
		if want[ip] {
			continue
		}
		if n := w.nodes[ip]; n != nil {
			if n.users--; n.users <= 0 {
				if n.cancel != nil {
					n.cancel()
				}
				delete(w.nodes, ip)
			}
		}
	}
	if len(want) == 0 {
		delete(w.needs, sandbox)
	} else {
		w.needs[sandbox] = want
	}
}

func (w *Watcher) openLocked(addr string, n *node) {
	ctx, cancel := context.WithCancel(w.ctx)
	n.cancel = cancel
	go w.run(ctx, addr, n)
}

// run keeps the stream open until ctx ends, reconnecting with backoff.
func (w *Watcher) run(ctx context.Context, addr string, n *node) {
	logger := log.FromContext(ctx).WithValues("node", addr)
	backoff := w.backoff()
	for ctx.Err() == nil {
		w.mu.Lock()
		n.initial, n.synced = map[types.UID]nodeapi.OOMReport{}, false
		w.mu.Unlock()
		err := w.Streamer.Watch(ctx, addr, func(line nodeapi.OOMLine) {
			notify := w.apply(n, line)
			if line.Type == nodeapi.OOMSyncedLine {
				backoff = w.backoff() // it answered: the next loss retries soon again
				logger.V(4).Info("OOM stream in sync")
			}
			for _, sb := range notify {
				w.Notify(sb)
			}
		})
		if ctx.Err() != nil {
			return
		}
		logger.V(2).Info("OOM stream lost; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff.Step()):
		}
	}
}

// apply records a line of node n's stream, and says which sandboxes to notify: those of pods
// whose count is new or grew (a stream's first state is news for all its pods: the leader
// may be new).
func (w *Watcher) apply(n *node, line nodeapi.OOMLine) []types.NamespacedName {
	w.mu.Lock()
	defer w.mu.Unlock()
	var notify []types.NamespacedName
	grew := func(r nodeapi.OOMReport) {
		if old, ok := n.reports[types.UID(r.PodUID)]; !ok || r.OOMKills > old.OOMKills {
			notify = append(notify, types.NamespacedName{Namespace: r.Namespace, Name: r.Sandbox})
		}
	}
	switch line.Type {
	case nodeapi.OOMReportLine:
		if line.Report == nil || line.Report.PodUID == "" {
			return nil
		}
		r := *line.Report
		if !n.synced {
			n.initial[types.UID(r.PodUID)] = r
			return nil
		}
		grew(r)
		n.reports[types.UID(r.PodUID)] = r
	case nodeapi.OOMSyncedLine:
		// The agent's state replaces what the last stream said: a pod it no longer names is
		// gone from the node.
		for _, r := range n.initial {
			grew(r)
		}
		n.reports, n.initial, n.synced = n.initial, nil, true
	}
	sort.Slice(notify, func(i, j int) bool { return notify[i].String() < notify[j].String() })
	return dedup(notify)
}

func dedup(s []types.NamespacedName) []types.NamespacedName {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// Report is the latest report of the pod on the node at hostIP; false if none: the agent
// counted no kill there, or its stream has not told yet.
func (w *Watcher) Report(hostIP string, uid types.UID) (nodeapi.OOMReport, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.nodes[hostIP]
	if n == nil {
		return nodeapi.OOMReport{}, false
	}
	r, ok := n.reports[uid]
	return r, ok
}

// Open is the number of node addresses streams are held to (metrics, tests).
func (w *Watcher) Open() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.nodes)
}

func (w *Watcher) backoff() wait.Backoff {
	if w.Backoff.Duration != 0 {
		return w.Backoff
	}
	return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
}
