package sandbox

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// StatusREST implements the status subresource. It is read-only: the status is what the
// controller observed, and no user writes it.
type StatusREST struct {
	store *REST
}

var _ rest.Getter = &StatusREST{}

// NewStatusREST returns the status subresource of store.
func NewStatusREST(store *REST) *StatusREST { return &StatusREST{store: store} }

// New implements rest.Storage.
func (r *StatusREST) New() runtime.Object { return &sandboxv1alpha1.Sandbox{} }

// Destroy implements rest.Storage.
func (r *StatusREST) Destroy() {}

// Get implements rest.Getter.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}
