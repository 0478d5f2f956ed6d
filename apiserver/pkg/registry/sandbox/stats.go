package sandbox

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// StatsREST implements the stats subresource: GET sandboxes/NAME/stats answers the
// SandboxStats of the sandbox, what each of its replicas uses as its node's agent last read
// it, and asked for a Table a row per replica (stats_table.go), as kubectl top prints pods.
//
// A subresource rather than only a GET of sandboxstats/NAME: RBAC grants it per sandbox
// resource, next to sandboxes/log (get on sandboxes/stats, which the view role grants), and a
// client that has a sandbox reads its usage where it reads the rest of it. It answers a kind
// of its own, not the Sandbox, because the figures are no part of the sandbox: they are read
// at the time of the request, from the nodes, and stored nowhere.
type StatsREST struct {
	Stats *StatsReader
	statsTableConvertor
}

var (
	_ rest.Storage        = &StatsREST{}
	_ rest.Getter         = &StatsREST{}
	_ rest.TableConvertor = &StatsREST{}
)

// New implements rest.Storage.
func (r *StatsREST) New() runtime.Object { return &sandboxv1alpha1.SandboxStats{} }

// Destroy implements rest.Storage.
func (r *StatsREST) Destroy() {}

// Get implements rest.Getter: the figures of every replica; a 404 of sandboxes for a missing
// sandbox, as the other subresources answer. A node whose agent does not answer is a reason
// on its replicas, not an error.
func (r *StatsREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return r.Stats.get(ctx, genericapirequest.NamespaceValue(ctx), name, sandboxResource)
}
