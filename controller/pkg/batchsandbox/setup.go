package batchsandbox

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/index"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/oomwatch"
)

// DefaultMaxConcurrentReconciles: reconciles mostly wait for the kube-apiserver and execd, so
// many run at once even on two CPUs; sandboxes created together are allocated together. With
// 8, a reconcile of 50–250 ms under load capped claims at 30–160 a second, whatever the CPU;
// a worker that waits costs a goroutine.
const DefaultMaxConcurrentReconciles = 32

// SetupWithManager registers the reconciler: BatchSandboxes and the pods they own, so that every
// change of a pod arrives as an event (no polling); and, for pooled sandboxes still waiting for
// pods, the pool's idle pods that become ready and the Pool itself.
// index.Setup must have registered the indexes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrent int) error {
	if maxConcurrent <= 0 {
		maxConcurrent = DefaultMaxConcurrentReconciles
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&controlv1alpha1.BatchSandbox{}).
		Owns(&corev1.Pod{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.waitingForPod)).
		Watches(&controlv1alpha1.Pool{}, handler.EnqueueRequestsFromMapFunc(r.waitingForPool))
	if r.Egress != nil {
		// What the pods enforce follows the pool's policy, the platform's ConfigMap and the
		// cluster's ranges: a change of any of them reaches the sandboxes it concerns.
		b = b.Watches(&controlv1alpha1.Pool{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesOfPool),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.allSandboxes)).
			Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allSandboxes), builder.WithPredicates(nodeRangesChanged())).
			Watches(&networkingv1.ServiceCIDR{}, handler.EnqueueRequestsFromMapFunc(r.allSandboxes))
	}
	if r.Tasks != nil {
		// execd's task streams tell of every change of a task: the sandbox is reconciled
		// then, a batch window later, with every change of the window at once.
		r.taskEvents = newTaskEvents(TaskBatchWindow)
		r.Tasks.Notify = r.taskEvents.notify
		b = b.WatchesRawSource(source.Channel(r.taskEvents.ch, r.taskEvents.handler()))
	}
	if w, ok := r.OOMs.(*oomwatch.Watcher); ok {
		// A node agent's count of a pod's OOM kills that grew is an event of its own: the
		// sandbox is reconciled at once, and tells the kill.
		oomEvents := newTaskEvents(0)
		w.Notify = oomEvents.notify
		b = b.WatchesRawSource(source.Channel(oomEvents.ch, oomEvents.handler()))
	}
	if r.Snapshots != nil && r.Snapshots.Runner != nil {
		// The end of a snapshot (and each new stage) is an event of its own: nothing polls.
		snapshotEvents := newTaskEvents(0)
		r.Snapshots.Runner.Notify = snapshotEvents.notify
		b = b.WatchesRawSource(source.Channel(snapshotEvents.ch, snapshotEvents.handler()))
	}
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrent}).
		Named("batchsandbox").
		Complete(r)
}

// sandboxesOfPool maps a Pool whose spec changed to all its sandboxes.
func (r *Reconciler) sandboxesOfPool(ctx context.Context, obj client.Object) []reconcile.Request {
	sandboxes, err := index.SandboxesOfPool(ctx, r.Client, obj.GetNamespace(), obj.GetName())
	if err != nil {
		log.FromContext(ctx).Error(err, "listing the sandboxes of a pool", "pool", obj.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(sandboxes))
	for i := range sandboxes {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&sandboxes[i])})
	}
	return out
}

// allSandboxes maps a change of the platform's egress policy to every sandbox.
func (r *Reconciler) allSandboxes(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &controlv1alpha1.BatchSandboxList{}
	if err := r.Client.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "listing sandboxes")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// nodeRangesChanged passes node events that change what cluster:nodes and cluster:pods
// stand for, not the status updates a node makes all the time.
func nodeRangesChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Spec.PodCIDRs, n.Spec.PodCIDRs) ||
				!equality.Semantic.DeepEqual(o.Status.Addresses, n.Status.Addresses)
		},
	}
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

// waiting maps a pool to its sandboxes that lack pods. It runs on every event of an idle pod
// that is ready: the index (index.LackingPods) holds only those sandboxes, of the thousands a
// pool may serve.
func (r *Reconciler) waiting(ctx context.Context, namespace, pool string) []reconcile.Request {
	sandboxes, err := index.SandboxesLackingPods(ctx, r.Client, namespace, pool)
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
