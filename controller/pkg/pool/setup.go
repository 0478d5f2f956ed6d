package pool

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/index"
)

// SetupWithManager registers the reconciler: Pools, every pod labelled with a pool (idle or
// allocated: an allocation takes a pod out of the buffer), the pooled BatchSandboxes, whose
// unmet replicas make the pool grow, and Namespaces, whose pod security labels may refuse or
// allow a pool's template. index.Setup must have registered the indexes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&controlv1alpha1.Pool{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToPool)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.namespaceToPools), builder.WithPredicates(labelsChanged())).
		Watches(&controlv1alpha1.BatchSandbox{}, handler.EnqueueRequestsFromMapFunc(sandboxToPool)).
		Named("pool").
		Complete(r)
}

// namespaceToPools maps a namespace to its pools: its pod security labels decide their
// templates.
func (r *Reconciler) namespaceToPools(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &controlv1alpha1.PoolList{}
	if err := r.Client.List(ctx, list, client.InNamespace(obj.GetName())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// labelsChanged passes namespace updates that change labels only: namespaces change status and
// annotations for many reasons that do not concern pools.
func labelsChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
	}
}

func podToPool(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[controlv1alpha1.LabelPool]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
}

func sandboxToPool(_ context.Context, obj client.Object) []reconcile.Request {
	bs, ok := obj.(*controlv1alpha1.BatchSandbox)
	if !ok || bs.Spec.PoolRef == nil || !waiting(bs) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: bs.Namespace, Name: bs.Spec.PoolRef.Name}}}
}

// waiting reports whether a sandbox found its pool without an idle pod; the index
// index.PoolExhausted holds the same sandboxes.
func waiting(bs *controlv1alpha1.BatchSandbox) bool {
	return index.Exhausted(bs)
}
