package tasks

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// fakeStreamer serves each pod the states sent on its channel; closing the channel breaks the
// stream with an error.
type fakeStreamer struct {
	mu      sync.Mutex
	streams map[string]chan execdapi.TaskState
	opened  map[string]int
}

func (f *fakeStreamer) ch(uid string) chan execdapi.TaskState {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.streams[uid] == nil {
		f.streams[uid] = make(chan execdapi.TaskState)
	}
	return f.streams[uid]
}

func (f *fakeStreamer) Watch(ctx context.Context, t execdclient.Target, _ string, fn func(execdapi.TaskState)) error {
	f.mu.Lock()
	f.opened[t.PodUID]++
	f.mu.Unlock()
	ch := f.ch(t.PodUID)
	for {
		select {
		case <-ctx.Done():
			return nil
		case st, ok := <-ch:
			if !ok {
				f.mu.Lock()
				f.streams[t.PodUID] = nil
				f.mu.Unlock()
				return errors.New("connection reset")
			}
			fn(st)
		}
	}
}

func TestWatcher(t *testing.T) {
	fs := &fakeStreamer{streams: map[string]chan execdapi.TaskState{}, opened: map[string]int{}}
	notified := make(chan types.NamespacedName, 100)
	w := &Watcher{Streamer: fs, Notify: func(n types.NamespacedName) { notified <- n },
		Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1 << 30}}
	sbx := types.NamespacedName{Namespace: "ns", Name: "batch"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "p1"}, Status: corev1.PodStatus{PodIP: "10.0.0.1"}}

	// Asked before Start: opens with it.
	w.Ensure(pod, sbx, "sbx-uid")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = w.Start(ctx) }()
	expect := func(what string) {
		t.Helper()
		select {
		case n := <-notified:
			if n != sbx {
				t.Fatalf("%s: notified %v", what, n)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no notification", what)
		}
	}
	ch := fs.ch("p1")
	ch <- execdapi.TaskState{ID: "t", Phase: execdapi.TaskRunning, Generation: 1}
	expect("first state")
	if c, ok := w.Contact("p1"); !ok || !c.Known || c.Lost || c.State.Generation != 1 {
		t.Fatalf("contact = %+v, %v", c, ok)
	}
	// The same state again (a reconnect's first line) is not a change.
	ch <- execdapi.TaskState{ID: "t", Phase: execdapi.TaskRunning, Generation: 1}
	ch <- execdapi.TaskState{ID: "t", Phase: execdapi.TaskSucceeded, Generation: 2}
	expect("the change")
	select {
	case <-notified:
		t.Fatal("a repeated state notified")
	default:
	}
	// A broken stream: Lost, notified once, reconnected.
	close(ch)
	expect("the loss")
	if c, _ := w.Contact("p1"); !c.Lost || c.State.Generation != 2 {
		t.Fatalf("after the loss: %+v", c)
	}
	fs.ch("p1") <- execdapi.TaskState{ID: "t", Phase: execdapi.TaskSucceeded, Generation: 2}
	expect("contact back")
	if c, _ := w.Contact("p1"); c.Lost {
		t.Fatalf("still lost: %+v", c)
	}
	// Ensure again holds no second stream; Sync without the pod closes it.
	w.Ensure(pod, sbx, "sbx-uid")
	if w.Open() != 1 {
		t.Fatalf("%d streams", w.Open())
	}
	w.Sync(sbx, nil)
	if w.Open() != 0 {
		t.Fatalf("%d streams after Sync", w.Open())
	}
	if _, ok := w.Contact("p1"); ok {
		t.Fatal("a closed stream still answers")
	}
}
