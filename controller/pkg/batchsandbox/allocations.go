package batchsandbox

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// allocationMemory bounds how long an allocation is remembered without the cache showing it:
// the watch delivers it within milliseconds; a pod deleted meanwhile never shows up.
const allocationMemory = time.Minute

// allocations bridges the gap between a write and the cache: the pool pods this process is
// allocating or has just allocated. Without it, a reconcile that runs before the watch
// delivers an allocation would see the replica without a pod and allocate a second one, and
// two reconciles would race for the same idle pod (the resourceVersion precondition makes
// the loser fail, which is safe but slow). It is a hint, never the truth: the truth is the
// label on the pod, and a restarted controller starts with an empty memory and a fresh cache.
type allocations struct {
	mu   sync.Mutex
	pods map[types.UID]*allocation
}

type allocation struct {
	sandbox types.NamespacedName
	// pod is the pod as the allocation wrote it; nil while the write is in flight.
	pod *corev1.Pod
	at  time.Time
}

// reserve marks a pool pod as being allocated to sandbox; false if it is taken already.
func (a *allocations) reserve(pod types.UID, sandbox types.NamespacedName) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pods == nil {
		a.pods = map[types.UID]*allocation{}
	}
	if al, ok := a.pods[pod]; ok && time.Since(al.at) < allocationMemory {
		return false
	}
	a.pods[pod] = &allocation{sandbox: sandbox, at: time.Now()}
	return true
}

// done records a successful allocation: pod is the object the write returned.
func (a *allocations) done(pod *corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if al, ok := a.pods[pod.UID]; ok {
		al.pod = pod.DeepCopy()
	}
}

// release forgets a reservation whose write failed.
func (a *allocations) release(pod types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pods, pod)
}

// merge adds to cached (the sandbox's pods as the cache shows them) the pods allocated to it
// that the cache does not show yet, and forgets those it shows. lookup reads a pod from the
// cache: an allocated pod was in the cache before (it was idle there), so one the cache no
// longer has is gone, not late.
func (a *allocations) merge(bs *controlv1alpha1.BatchSandbox, cached []corev1.Pod, lookup func(name string) (*corev1.Pod, bool)) []corev1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}
	seen := make(map[types.UID]bool, len(cached))
	for i := range cached {
		seen[cached[i].UID] = true
	}
	for uid, al := range a.pods {
		switch {
		case time.Since(al.at) >= allocationMemory:
			delete(a.pods, uid)
		case al.sandbox != key || al.pod == nil:
		case seen[uid]:
			delete(a.pods, uid)
		case !metav1.IsControlledBy(al.pod, bs):
		default:
			if p, ok := lookup(al.pod.Name); !ok || p.UID != uid || p.DeletionTimestamp != nil {
				delete(a.pods, uid) // deleted since: the replica needs another pod
				continue
			}
			cached = append(cached, *al.pod.DeepCopy())
		}
	}
	return cached
}

// forget drops what is remembered of a sandbox (it is gone).
func (a *allocations) forget(sandbox types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid, al := range a.pods {
		if al.sandbox == sandbox {
			delete(a.pods, uid)
		}
	}
}
