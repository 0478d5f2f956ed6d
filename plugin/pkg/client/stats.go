package client

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
)

// statsResource is the collection of every sandbox's figures, beside the stats subresource
// of each sandbox: a caller who may list it need not be allowed to read each sandbox's.
const statsResource = "sandboxstats"

// ListStatsOptions select the sandboxes whose figures ListStats reads.
type ListStatsOptions struct {
	// AllNamespaces reads those of every namespace the caller may list sandboxstats in,
	// rather than the Client's namespace.
	AllNamespaces bool
	// LabelSelector selects by the sandboxes' labels ("team=ml").
	LabelSelector string
}

// Stats reads what the replicas of sandbox name use now: CPU, memory, disk, network and
// processes, as the node agent last read them on each replica's node (at most about 10 s
// ago; see each replica's Timestamp and Window). A replica without figures (no pod, a node
// that did not answer) has Reason and Message instead; that is not an error. RBAC: get on
// sandboxes/stats.
func (c *Client) Stats(ctx context.Context, name string) (*sandboxv1alpha1.SandboxStats, error) {
	out := &sandboxv1alpha1.SandboxStats{}
	err := c.StatsRequest(name).Do(ctx).Into(out)
	return out, wrap(err)
}

// ListStats reads the figures of the sandboxes o selects, in the Client's namespace or in
// all. RBAC: list on sandboxstats.
func (c *Client) ListStats(ctx context.Context, o ListStatsOptions) (*sandboxv1alpha1.SandboxStatsList, error) {
	out := &sandboxv1alpha1.SandboxStatsList{}
	err := c.ListStatsRequest(o).Do(ctx).Into(out)
	return out, wrap(err)
}

// StatsRequest is the GET of Stats, for a caller that wants the answer in another form, such
// as `kubectl sandbox top` asking for the server's table.
func (c *Client) StatsRequest(name string) *rest.Request {
	return c.subresource("GET", name, "stats")
}

// ListStatsRequest is the GET of ListStats, for a caller that wants the answer in another
// form (the server's table).
func (c *Client) ListStatsRequest(o ListStatsOptions) *rest.Request {
	namespace := c.namespace
	if o.AllNamespaces {
		// An empty namespace leaves "namespaces/NS" out of the path: the cluster-wide list.
		namespace = metav1.NamespaceAll
	}
	return c.rest.Get().
		Namespace(namespace).
		Resource(statsResource).
		VersionedParams(&metav1.ListOptions{LabelSelector: o.LabelSelector}, scheme.ParameterCodec)
}
