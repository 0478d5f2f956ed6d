package pool

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// SetupWithManager registers the reconciler: Pools, every pod labelled with a pool (idle or
// allocated: an allocation takes a pod out of the buffer), the token Secret, and the pooled
// BatchSandboxes, whose unmet replicas make the pool grow. index.Setup must have registered
// the indexes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&controlv1alpha1.Pool{}).
		Owns(&corev1.Secret{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToPool)).
		Watches(&controlv1alpha1.BatchSandbox{}, handler.EnqueueRequestsFromMapFunc(sandboxToPool)).
		Named("pool").
		Complete(r)
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

// waiting reports whether a sandbox found its pool without an idle pod.
func waiting(bs *controlv1alpha1.BatchSandbox) bool {
	c := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controlv1alpha1.ReasonPoolExhausted
}
