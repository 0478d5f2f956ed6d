package batchsandbox

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/index"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxpod"
)

// DefaultMaxConcurrentReconciles: reconciles mostly wait for the kube-apiserver and execd, so
// several run at once even on two CPUs; sandboxes created together are allocated together.
const DefaultMaxConcurrentReconciles = 8

// SetupWithManager registers the reconciler: BatchSandboxes and the pods they own, so that every
// change of a pod arrives as an event (no polling); and, for pooled sandboxes still waiting for
// pods, the pool's idle pods that become ready and the Pool itself.
// index.Setup must have registered the indexes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrent int) error {
	if maxConcurrent <= 0 {
		maxConcurrent = DefaultMaxConcurrentReconciles
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&controlv1alpha1.BatchSandbox{}).
		Owns(&corev1.Pod{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.waitingForPod)).
		Watches(&controlv1alpha1.Pool{}, handler.EnqueueRequestsFromMapFunc(r.waitingForPool)).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrent}).
		Named("batchsandbox").
		Complete(r)
}

// waitingForPod maps an idle, ready pool pod to the sandboxes of its pool that lack pods.
func (r *Reconciler) waitingForPod(ctx context.Context, obj client.Object) []reconcile.Request {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	pool := pod.Labels[controlv1alpha1.LabelPool]
	if _, allocated := pod.Labels[controlv1alpha1.LabelBatchSandbox]; pool == "" || allocated || !sandboxpod.Ready(pod) {
		return nil
	}
	return r.waiting(ctx, pod.Namespace, pool)
}

// waitingForPool maps a Pool to its sandboxes that lack pods (PoolNotFound until it exists).
func (r *Reconciler) waitingForPool(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.waiting(ctx, obj.GetNamespace(), obj.GetName())
}

func (r *Reconciler) waiting(ctx context.Context, namespace, pool string) []reconcile.Request {
	sandboxes, err := index.SandboxesOfPool(ctx, r.Client, namespace, pool)
	if err != nil {
		log.FromContext(ctx).Error(err, "listing the sandboxes of a pool", "pool", pool)
		return nil
	}
	var out []reconcile.Request
	for i := range sandboxes {
		bs := &sandboxes[i]
		if bs.DeletionTimestamp == nil && bs.Status.Replicas < replicas(bs) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(bs)})
		}
	}
	return out
}
