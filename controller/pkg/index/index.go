// Package index registers the cache indexes the controllers share, so that "which sandboxes
// use this pool" is one indexed lookup.
package index

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// PoolRef indexes BatchSandboxes by spec.poolRef.name.
const PoolRef = "spec.poolRef.name"

// Setup registers the indexes with the manager's cache. Call it once, before the controllers
// start.
func Setup(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &controlv1alpha1.BatchSandbox{}, PoolRef, func(obj client.Object) []string {
		bs := obj.(*controlv1alpha1.BatchSandbox)
		if bs.Spec.PoolRef == nil {
			return nil
		}
		return []string{bs.Spec.PoolRef.Name}
	})
}

// SandboxesOfPool lists the BatchSandboxes of namespace that use pool. They are the cache's
// own objects, not copies (a pool's sandboxes are listed on every event of its pods, and a
// pool may have thousands): callers only read them.
func SandboxesOfPool(ctx context.Context, c client.Reader, namespace, pool string) ([]controlv1alpha1.BatchSandbox, error) {
	list := &controlv1alpha1.BatchSandboxList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{PoolRef: pool}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return list.Items, nil
}
