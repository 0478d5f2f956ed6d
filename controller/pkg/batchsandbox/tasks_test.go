package batchsandbox

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestTaskEventsAreBatched: a hundred tasks of one sandbox that change within the window make
// one reconcile, and so one status write; another sandbox gets its own.
func TestTaskEventsAreBatched(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	e := newTaskEvents(100 * time.Millisecond)
	h := e.handler()
	a := types.NamespacedName{Namespace: "ns", Name: "batch"}
	b := types.NamespacedName{Namespace: "ns", Name: "other"}
	go func() {
		for range 100 {
			e.notify(a)
		}
		e.notify(b)
	}()
	for range 101 {
		h.Generic(context.Background(), <-e.ch, q)
	}
	if q.Len() != 0 {
		t.Fatalf("%d requests queued before the window ended", q.Len())
	}
	got := map[types.NamespacedName]int{}
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		if q.Len() == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		req, _ := q.Get()
		got[req.NamespacedName]++
		q.Done(req)
	}
	time.Sleep(200 * time.Millisecond) // anything still due would be queued by now
	if got[a] != 1 || got[b] != 1 || q.Len() != 0 {
		t.Errorf("reconciles: %v, %d more queued; want one per sandbox", got, q.Len())
	}
}
