package identity

import (
	"context"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// DefaultMaxConcurrentReconciles: certifying waits for the pod and one TokenReview; a pool that
// starts many pods at once gets them certified together. A run of make bench-scale with 16 (on
// two cores) filled a pool at 131 pods/s against 182 with 8, and allocated at 100 creates/s
// half as fast.
const DefaultMaxConcurrentReconciles = 8

// Reconciler certifies every sandbox pod as soon as it is ready, driven by the pod watch:
// pool pods are certified before a sandbox needs them, so an allocation costs no certification.
type Reconciler struct {
	Client    client.Client
	Certifier *Certifier
	Recorder  events.EventRecorder
}

var _ reconcile.Reconciler = &Reconciler{}

// SetupWithManager registers the reconciler for the pods the controller made: labelled so, and
// controlled by a BatchSandbox or a Pool (a label anyone who may create pods can set; a pod of
// its own gets no certificate and no TokenReview from the controller).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[controlv1alpha1.LabelManagedBy] == controlv1alpha1.ManagedByController && controlledByUs(o)
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Pod{}, builder.WithPredicates(ours)).
		WithOptions(controller.Options{MaxConcurrentReconciles: DefaultMaxConcurrentReconciles}).
		Named("podidentity").
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		if client.IgnoreNotFound(err) == nil {
			// The UID is not known any more; what is remembered of it is dropped by Forget
			// when the sandbox or pool lets the pod go, or stays as a few bytes.
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	certifiers := []*Certifier{r.Certifier}
	if pod.DeletionTimestamp != nil {
		for _, c := range certifiers {
			c.Forget(pod.UID)
		}
		return reconcile.Result{}, nil
	}
	if !sandboxpod.Ready(pod) || pod.Status.PodIP == "" {
		return reconcile.Result{}, nil
	}
	var err error
	for _, c := range certifiers {
		if c.Certified(pod) {
			continue
		}
		err = c.Ensure(ctx, pod)
		var notThePod *ErrNotThePod
		if errors.As(err, &notThePod) && r.Recorder != nil {
			r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, controlv1alpha1.ReasonIdentityFailed, "Certify", "%v", err)
		}
		if err != nil {
			break
		}
	}
	// Errors come back with the workqueue's backoff: a pod whose execd is not up yet, or one
	// whose identity does not verify, is not retried in a loop.
	return reconcile.Result{}, err
}

// controlledByUs reports whether o's controller is a BatchSandbox or a Pool.
func controlledByUs(o metav1.Object) bool {
	ref := metav1.GetControllerOf(o)
	return ref != nil && (ref.Kind == "BatchSandbox" || ref.Kind == "Pool") &&
		strings.HasPrefix(ref.APIVersion, controlv1alpha1.GroupName+"/")
}
