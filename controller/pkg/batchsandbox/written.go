package batchsandbox

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// writes bridges the gap between this process's writes of a BatchSandbox and the cache, as
// allocations does for pods. A reconcile that reads a BatchSandbox at a resourceVersion this
// process has since written over (its status, its finalizer) would work from a status that
// is no more: it would claim the pods it just claimed again, write the same status again and
// record its Event twice. Such a reconcile does nothing instead; the watch event of the write
// brings the next one, with the cache caught up.
//
// It remembers, per sandbox, the resourceVersions that were current when this process wrote
// over them, until the cache shows another. It is a hint: a restarted controller starts with
// none, and then at worst repeats an idempotent write.
type writes struct {
	mu sync.Mutex
	// over holds, per sandbox, the resourceVersions written over.
	over map[types.NamespacedName][]string
}

// wroteOver records that a write of the sandbox replaced resourceVersion rv.
func (w *writes) wroteOver(key types.NamespacedName, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over == nil {
		w.over = map[types.NamespacedName][]string{}
	}
	w.over[key] = append(w.over[key], rv)
}

// stale tells whether rv, read from the cache, is one this process has written over. Any
// other resourceVersion means the cache has caught up (or someone wrote since): what was
// remembered of the sandbox is dropped.
func (w *writes) stale(key types.NamespacedName, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, old := range w.over[key] {
		if old == rv {
			return true
		}
	}
	delete(w.over, key)
	return false
}

// forget drops what is remembered of a sandbox that is gone.
func (w *writes) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.over, key)
}
