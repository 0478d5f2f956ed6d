package tasks

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// Streamer opens a pod's task stream (execdclient.TaskClient).
type Streamer interface {
	Watch(ctx context.Context, t execdclient.Target, sandboxUID string, fn func(execdapi.TaskState)) error
}

// Watcher holds one watch stream open to the execd of each pod that runs a task, and records
// what each said last. Every change (a new state, a stream lost or back) calls Notify with the
// pod's sandbox, which enqueues it: the controller learns of a task's progress when it
// happens, and a batch at rest costs nothing but open connections and heartbeats.
//
// It runs on the leader only (a manager Runnable): a new leader opens the streams again, and
// the first message of each is the task's current state, so nothing is lost in between.
type Watcher struct {
	Streamer Streamer
	// Notify is called, from the stream's goroutine, after a change for a sandbox.
	Notify func(sandbox types.NamespacedName)
	// Port overrides execd's port (tests).
	Port int
	// Backoff between reconnects; zero: 500 ms doubling to 30 s.
	Backoff wait.Backoff

	mu      sync.Mutex
	ctx     context.Context
	streams map[types.UID]*stream
	// bySandbox indexes streams, so that Sync costs what a sandbox has, not what all have.
	bySandbox map[types.NamespacedName]map[types.UID]*stream
}

type stream struct {
	sandbox    types.NamespacedName
	target     execdclient.Target
	sandboxUID string
	cancel     context.CancelFunc // nil until opened (Start)
	contact    Contact
}

var _ manager.LeaderElectionRunnable = &Watcher{}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (w *Watcher) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: streams asked for before it open now, and all close when
// ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	for uid, s := range w.streams {
		if s.cancel == nil {
			w.openLocked(uid, s)
		}
	}
	w.mu.Unlock()
	<-ctx.Done()
	return nil
}

// Ensure opens a stream to the pod's execd unless one is open. sandbox is the pod's
// BatchSandbox, sandboxUID its UID.
func (w *Watcher) Ensure(pod *corev1.Pod, sandbox types.NamespacedName, sandboxUID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.streams == nil {
		w.streams = map[types.UID]*stream{}
		w.bySandbox = map[types.NamespacedName]map[types.UID]*stream{}
	}
	if _, ok := w.streams[pod.UID]; ok {
		return
	}
	s := &stream{sandbox: sandbox, sandboxUID: sandboxUID,
		target: execdclient.Target{PodIP: pod.Status.PodIP, PodUID: string(pod.UID), Port: w.Port}}
	w.streams[pod.UID] = s
	if w.bySandbox[sandbox] == nil {
		w.bySandbox[sandbox] = map[types.UID]*stream{}
	}
	w.bySandbox[sandbox][pod.UID] = s
	if w.ctx != nil {
		w.openLocked(pod.UID, s)
	}
}

func (w *Watcher) openLocked(uid types.UID, s *stream) {
	ctx, cancel := context.WithCancel(w.ctx)
	s.cancel = cancel
	go w.run(ctx, uid, s)
}

// run keeps the stream open until ctx ends, reconnecting with backoff.
func (w *Watcher) run(ctx context.Context, uid types.UID, s *stream) {
	logger := log.FromContext(ctx).WithValues("pod", uid, "sandbox", s.sandbox)
	backoff := w.backoff()
	for ctx.Err() == nil {
		err := w.Streamer.Watch(ctx, s.target, s.sandboxUID, func(st execdapi.TaskState) {
			w.mu.Lock()
			changed := !s.contact.Known || s.contact.Lost || st.Generation != s.contact.State.Generation || st.ID != s.contact.State.ID
			if changed {
				s.contact = Contact{Known: true, State: st}
				backoff = w.backoff() // it answered: the next loss retries soon again
			}
			w.mu.Unlock()
			if changed {
				w.Notify(s.sandbox)
			}
		})
		if ctx.Err() != nil {
			return
		}
		reason := "the stream ended"
		if err != nil {
			reason = err.Error()
		}
		logger.V(2).Info("task stream lost; reconnecting", "reason", reason)
		w.mu.Lock()
		wasLost := s.contact.Lost
		// Known stays false if it never answered: the controller keeps what it recorded until
		// execd says more (a new leader reaching a pod still starting), but Lost tells the
		// status that contact is missing.
		s.contact.Lost, s.contact.LostReason = true, reason
		w.mu.Unlock()
		if !wasLost {
			w.Notify(s.sandbox)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff.Step()):
		}
	}
}

// Contact is what the pod's stream said last; ok is false if none is open for it.
func (w *Watcher) Contact(uid types.UID) (Contact, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.streams[uid]
	if !ok {
		return Contact{}, false
	}
	return s.contact, true
}

// Observe records a state learnt otherwise (the answer to a start), unless the stream told a
// newer one.
func (w *Watcher) Observe(uid types.UID, st execdapi.TaskState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.streams[uid]
	if !ok || s.contact.Known && s.contact.State.ID == st.ID && s.contact.State.Generation >= st.Generation {
		return
	}
	s.contact = Contact{Known: true, Lost: s.contact.Lost, LostReason: s.contact.LostReason, State: st}
}

// Sync closes the streams of sandbox's pods that are not in keep.
func (w *Watcher) Sync(sandbox types.NamespacedName, keep map[types.UID]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for uid, s := range w.bySandbox[sandbox] {
		if !keep[uid] {
			w.closeLocked(uid, s)
		}
	}
}

// Forget closes the stream of a pod that is gone.
func (w *Watcher) Forget(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.streams[uid]; ok {
		w.closeLocked(uid, s)
	}
}

func (w *Watcher) closeLocked(uid types.UID, s *stream) {
	if s.cancel != nil {
		s.cancel()
	}
	delete(w.streams, uid)
	if m := w.bySandbox[s.sandbox]; m != nil {
		delete(m, uid)
		if len(m) == 0 {
			delete(w.bySandbox, s.sandbox)
		}
	}
}

// Open is the number of streams held (metrics, tests).
func (w *Watcher) Open() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.streams)
}

func (w *Watcher) backoff() wait.Backoff {
	if w.Backoff.Duration != 0 {
		return w.Backoff
	}
	return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
}
