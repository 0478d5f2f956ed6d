package batchsandbox

import (
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// SetupWithManager registers the reconciler: BatchSandboxes, and the pods and token Secrets
// they own, so that every change of a pod arrives as an event (no polling).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&controlv1alpha1.BatchSandbox{}).
		Owns(&corev1.Pod{}).
		Owns(&corev1.Secret{}).
		Named("batchsandbox").
		Complete(r)
}
