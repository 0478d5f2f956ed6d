package sandbox

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheFirst reads from Cache and, for an object the cache does not hold, from Direct (a
// consistent read from the kube-apiserver), as the NamespaceLifecycle admission plugin does: a
// namespace or pool created just before the sandbox may not have reached the cache yet, and is
// no reason to refuse the sandbox. A miss costs one GET; a hit costs nothing.
type CacheFirst struct {
	Cache  client.Reader
	Direct client.Reader
}

var _ client.Reader = CacheFirst{}

// Get implements client.Reader.
func (r CacheFirst) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := r.Cache.Get(ctx, key, obj, opts...)
	if !apierrors.IsNotFound(err) || r.Direct == nil {
		return err
	}
	return r.Direct.Get(ctx, key, obj, opts...)
}

// List implements client.Reader, from the cache only: a list is no lookup of one object that
// may have just been made.
func (r CacheFirst) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.Cache.List(ctx, list, opts...)
}
