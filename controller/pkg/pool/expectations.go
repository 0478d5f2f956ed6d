package pool

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// expectationTimeout bounds how long a create or delete is expected without the cache showing
// it: the watch delivers it within milliseconds, unless it never happened.
const expectationTimeout = time.Minute

// expectations remember the creates and deletes of this process that the cache does not show
// yet (as a ReplicaSet's controller does). Without them a reconcile that runs between a write
// and its watch event would count the pool short and create again, then long and delete: the
// create/delete storm this controller must never start.
type expectations struct {
	mu    sync.Mutex
	pools map[types.NamespacedName]*poolExpectations
}

type poolExpectations struct {
	created map[string]time.Time    // pod names
	deleted map[types.UID]time.Time // pod UIDs
}

func (e *expectations) get(pool types.NamespacedName) *poolExpectations {
	if e.pools == nil {
		e.pools = map[types.NamespacedName]*poolExpectations{}
	}
	pe, ok := e.pools[pool]
	if !ok {
		pe = &poolExpectations{created: map[string]time.Time{}, deleted: map[types.UID]time.Time{}}
		e.pools[pool] = pe
	}
	return pe
}

func (e *expectations) created(pool types.NamespacedName, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(pool).created[name] = time.Now()
}

func (e *expectations) deleted(pool types.NamespacedName, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(pool).deleted[uid] = time.Now()
}

// observe settles what the cached pods show and returns how many created pods are still
// missing from them, and which pods are being deleted though the cache does not say so yet.
func (e *expectations) observe(pool types.NamespacedName, pods []*corev1.Pod) (pendingCreates int, deleting map[types.UID]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pe := e.get(pool)
	names := make(map[string]bool, len(pods))
	live := make(map[types.UID]bool, len(pods))
	for i := range pods {
		names[pods[i].Name] = true
		if pods[i].DeletionTimestamp == nil {
			live[pods[i].UID] = true
		}
	}
	now := time.Now()
	for name, at := range pe.created {
		if names[name] || now.Sub(at) > expectationTimeout {
			delete(pe.created, name)
		}
	}
	deleting = map[types.UID]bool{}
	for uid, at := range pe.deleted {
		if !live[uid] || now.Sub(at) > expectationTimeout {
			delete(pe.deleted, uid)
			continue
		}
		deleting[uid] = true
	}
	return len(pe.created), deleting
}

func (e *expectations) forget(pool types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.pools, pool)
}
