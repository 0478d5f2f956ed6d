package pool

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// poolReadinessPeriodSeconds: see buildPod.
const poolReadinessPeriodSeconds = 10

// poolOwnerRef makes the pool an idle pod's controller, without blockOwnerDeletion: the
// allocation takes this reference away, and the garbage collector answers the removal of a
// blocking reference by reading the owner back from the kube-apiserver (a GET of the pool for
// every sandbox) in case a foreground deletion of it was waiting for that pod. An idle pod
// need not hold up a pool's foreground deletion: the collector deletes it all the same.
func poolOwnerRef(pool *controlv1alpha1.Pool) metav1.OwnerReference {
	ref := metav1.NewControllerRef(pool, controlv1alpha1.SchemeGroupVersion.WithKind("Pool"))
	ref.BlockOwnerDeletion = nil
	return *ref
}

// buildPod makes an idle pod of the pool: the template with execd installed, trusting clientCA,
// belonging to no sandbox until one claims it, under runtimeClass (the platform's default) if
// the template names none. The name is generated: pool pods are
// interchangeable until allocated.
func buildPod(pool *controlv1alpha1.Pool, revision, execdImage string, clientCA []byte, podEgress *sandboxpod.Egress, runtimeClass string) *corev1.Pod {
	tmpl := pool.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    pool.Name + "-",
			Namespace:       pool.Namespace,
			Labels:          tmpl.Labels,
			Annotations:     tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{poolOwnerRef(pool)},
		},
		Spec: tmpl.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	// A template's own labels must not make an idle pod look allocated.
	delete(pod.Labels, controlv1alpha1.LabelBatchSandbox)
	delete(pod.Labels, controlv1alpha1.LabelReplica)
	delete(pod.Labels, controlv1alpha1.LabelPodSecurity)
	if pool.Spec.PodSecurity == controlv1alpha1.PodSecurityNamespace {
		pod.Labels[controlv1alpha1.LabelPodSecurity] = string(controlv1alpha1.PodSecurityNamespace)
	}
	pod.Labels[controlv1alpha1.LabelPool] = pool.Name
	pod.Labels[controlv1alpha1.LabelPoolRevision] = revision
	pod.Labels[controlv1alpha1.LabelManagedBy] = controlv1alpha1.ManagedByController
	sandboxpod.LabelEgress(pod.Labels, podEgress)
	sandboxpod.Inject(&pod.Spec, sandboxpod.Options{
		ExecdImage: execdImage,
		ClientCA:   clientCA,
		// The kubelet probes as soon as the container starts, so a new pod is ready at once
		// all the same; afterwards, hundreds of idle pods probed every second would cost the
		// node a good part of a CPU.
		ReadinessPeriodSeconds: poolReadinessPeriodSeconds,
		// Deny-all until a sandbox's claim brings its policy.
		Egress:       podEgress,
		RuntimeClass: runtimeClass,
	})
	return pod
}
