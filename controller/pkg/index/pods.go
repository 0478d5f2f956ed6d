package index

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Informers is what Setup needs of the manager's cache (a cache.Cache has it): the field
// indexes, and the pod informer, whose indexer Pods reads.
type Informers interface {
	client.FieldIndexer
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// The names of the indexes Pods adds to the pod informer itself. They are not field indexes
// (controller-runtime names those, and keys them, its own way), so that their names and keys
// are this package's to know.
const (
	idlePodsIndex = "kube-sandbox.io/idle-pods"
	poolPodsIndex = "kube-sandbox.io/pool-pods"
)

// Pods reads the pods of pools straight from the pod informer's indexer. A List from the cache,
// even with UnsafeDisableDeepCopy and an index, copies every Pod struct it returns into the
// list's Items (about 1 KB each): for the hundreds of idle pods of a pool, on every allocation
// and every pool reconcile, that copying was most of the controller's CPU. Pods hands out the
// cache's own objects, which callers must only read.
//
// A nil *Pods, or one whose cache's informer is not client-go's (a multi-namespace cache, a
// test's fake), reads through a client.Reader with the field indexes IdlePods and PoolPods
// instead: slower, same answers.
type Pods struct {
	// indexer is the pod informer's, with idlePodsIndex and poolPodsIndex.
	indexer toolscache.Indexer
}

// newPods adds the indexes to the pod informer, if it is client-go's SharedIndexInformer
// (what controller-runtime's informer cache returns from GetInformer), and returns the reader
// of them; else a Pods that reads through the field indexes. Adding indexes must happen
// before the informer starts.
func newPods(ctx context.Context, informers Informers) (*Pods, error) {
	inf, err := informers.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("get the pod informer: %w", err)
	}
	// controller-runtime's Informer interface has AddIndexers but not GetIndexer; the
	// concrete type has both.
	withIndexer, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return fallback(ctx, inf), nil
	}
	if err := inf.AddIndexers(toolscache.Indexers{
		idlePodsIndex: namespacedPodIndex(idlePoolOfPod),
		poolPodsIndex: namespacedPodIndex(poolOfPod),
	}); err != nil {
		return nil, fmt.Errorf("add pod indexes: %w", err)
	}
	indexer := withIndexer.GetIndexer()
	// An informer that only looks like client-go's (a test's fake) may drop the indexes.
	if indexer == nil {
		return fallback(ctx, inf), nil
	}
	for _, name := range []string{idlePodsIndex, poolPodsIndex} {
		if _, ok := indexer.GetIndexers()[name]; !ok {
			return fallback(ctx, inf), nil
		}
	}
	return &Pods{indexer: indexer}, nil
}

// fallback is the Pods that reads through the field indexes, and says so: at hundreds of
// allocations a second, the copies a List makes were a third of the controller's CPU.
func fallback(ctx context.Context, inf cache.Informer) *Pods {
	log.FromContext(ctx).Info("the pod informer keeps no index of its own here: pool pods are read through the cache's List, which copies them",
		"informer", fmt.Sprintf("%T", inf))
	return &Pods{}
}

// namespacedPodIndex keys a pod by its namespace and key(pod): pools are namespaced.
func namespacedPodIndex(key func(*corev1.Pod) string) toolscache.IndexFunc {
	return func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		if k := key(p); k != "" {
			return []string{p.Namespace + "/" + k}, nil
		}
		return nil, nil
	}
}

// Idle returns the pods of namespace that pool controls, not allocated and ready (IdlePods),
// in no particular order. They are the cache's own objects: read them, copy one to write it.
// c is read when p cannot read the informer itself.
func (p *Pods) Idle(ctx context.Context, c client.Reader, namespace, pool string) ([]*corev1.Pod, error) {
	return p.by(ctx, c, idlePodsIndex, IdlePods, namespace, pool)
}

// OfPool returns the pods of namespace labelled with pool, idle or allocated (PoolPods), in
// no particular order; read-only, as Idle's.
func (p *Pods) OfPool(ctx context.Context, c client.Reader, namespace, pool string) ([]*corev1.Pod, error) {
	return p.by(ctx, c, poolPodsIndex, PoolPods, namespace, pool)
}

func (p *Pods) by(ctx context.Context, c client.Reader, index, field, namespace, value string) ([]*corev1.Pod, error) {
	if p == nil || p.indexer == nil {
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{field: value}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		out := make([]*corev1.Pod, len(list.Items))
		for i := range list.Items {
			out[i] = &list.Items[i]
		}
		return out, nil
	}
	objs, err := p.indexer.ByIndex(index, namespace+"/"+value)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok {
			out = append(out, pod)
		}
	}
	return out, nil
}
