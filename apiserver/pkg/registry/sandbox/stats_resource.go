package sandbox

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// sandboxStatsResource is the resource of the usage of many sandboxes.
var sandboxStatsResource = sandboxv1alpha1.Resource("sandboxstats")

// SandboxStatsREST implements the sandboxstats resource, as metrics-server's podmetrics
// serves pods' usage: list the SandboxStats of the sandboxes of a namespace, or of every
// namespace (`kubectl sandbox top`, `-A`), selected by the sandboxes' labels and by
// metadata.name and metadata.namespace; get one by its sandbox's name (the same as GET
// sandboxes/NAME/stats). Nothing is stored and nothing changes but the figures, so it has no
// resourceVersion and no watch: a client that wants them again asks again.
//
// A list reads the sandboxes and their pods from the caches and asks each node that runs one
// of their replicas once, all nodes at once: a top of hundreds of sandboxes costs the
// kube-apiserver nothing and takes one round trip to the slowest node.
type SandboxStatsREST struct {
	Stats *StatsReader
	statsTableConvertor
}

var (
	_ rest.Storage              = &SandboxStatsREST{}
	_ rest.Scoper               = &SandboxStatsREST{}
	_ rest.SingularNameProvider = &SandboxStatsREST{}
	_ rest.Getter               = &SandboxStatsREST{}
	_ rest.Lister               = &SandboxStatsREST{}
	_ rest.TableConvertor       = &SandboxStatsREST{}
)

// New implements rest.Storage.
func (r *SandboxStatsREST) New() runtime.Object { return &sandboxv1alpha1.SandboxStats{} }

// Destroy implements rest.Storage.
func (r *SandboxStatsREST) Destroy() {}

// NamespaceScoped implements rest.Scoper: a sandbox's figures are in its namespace.
func (r *SandboxStatsREST) NamespaceScoped() bool { return true }

// GetSingularName implements rest.SingularNameProvider: stats is one word, singular and
// plural, as endpoints is.
func (r *SandboxStatsREST) GetSingularName() string { return "sandboxstats" }

// NewList implements rest.Lister.
func (r *SandboxStatsREST) NewList() runtime.Object { return &sandboxv1alpha1.SandboxStatsList{} }

// Get implements rest.Getter; a 404 of sandboxstats for a missing sandbox.
func (r *SandboxStatsREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return r.Stats.get(ctx, genericapirequest.NamespaceValue(ctx), name, sandboxStatsResource)
}

// List implements rest.Lister: the figures of every sandbox the selectors select, ordered
// by namespace and name. limit and continue are not supported (the whole list is one
// answer, as for metrics.k8s.io), nor resourceVersion: the figures are as of now.
func (r *SandboxStatsREST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	selector, err := listSelectors(options)
	if err != nil {
		return nil, err
	}
	list := &controlv1alpha1.BatchSandboxList{}
	// From the cache, and its own copies: nothing here writes to them.
	opts := &client.ListOptions{Namespace: genericapirequest.NamespaceValue(ctx), LabelSelector: selector.labels, UnsafeDisableDeepCopy: ptr.To(true)}
	if err := r.Stats.Reader.List(ctx, list, opts); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("list batchsandboxes: %w", err))
	}
	selected := make([]*controlv1alpha1.BatchSandbox, 0, len(list.Items))
	for i := range list.Items {
		bs := &list.Items[i]
		if selector.fields.Matches(fields.Set{"metadata.name": bs.Name, "metadata.namespace": bs.Namespace}) {
			selected = append(selected, bs)
		}
	}
	slices.SortFunc(selected, func(a, b *controlv1alpha1.BatchSandbox) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	items, err := r.Stats.gather(ctx, selected)
	if err != nil {
		return nil, err
	}
	return &sandboxv1alpha1.SandboxStatsList{Items: items}, nil
}

type selectors struct {
	labels labels.Selector
	fields fields.Selector
}

// listSelectors are the label selector (of the sandboxes' labels) and the field selector of
// a list. The generic list handler has already refused fields other than metadata.name and
// metadata.namespace (the scheme's default field labels for a kind without its own); a
// caller other than the handler gets the same 400.
func listSelectors(options *metainternalversion.ListOptions) (selectors, error) {
	out := selectors{labels: labels.Everything(), fields: fields.Everything()}
	if options == nil {
		return out, nil
	}
	if options.LabelSelector != nil {
		out.labels = options.LabelSelector
	}
	if options.FieldSelector != nil {
		for _, req := range options.FieldSelector.Requirements() {
			if req.Field != "metadata.name" && req.Field != "metadata.namespace" {
				return out, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
			}
		}
		out.fields = options.FieldSelector
	}
	return out, nil
}
