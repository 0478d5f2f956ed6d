package batchsandbox

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// podName is the name of a replica's pod in direct mode: deterministic, so that creating it
// twice (a restarted controller, a stale cache) fails with AlreadyExists instead of making two.
func podName(bs *controlv1alpha1.BatchSandbox, replica int32) string {
	return fmt.Sprintf("%s-%d", bs.Name, replica)
}

// buildPod makes the pod of one replica from its template (the template with the replica's
// shard patch): execd is installed by an init
// container into an emptyDir and wraps the entrypoint of the first container, so any image
// works unchanged; it trusts clientCA and serves the sandbox from the start.
func buildPod(bs *controlv1alpha1.BatchSandbox, tmpl *corev1.PodTemplateSpec, replica int32, execdImage string, clientCA []byte, podEgress *sandboxpod.Egress, runtimeClass string) *corev1.Pod {
	tmpl = tmpl.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        podName(bs, replica),
			Namespace:   bs.Namespace,
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(bs,
				controlv1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))},
		},
		Spec: tmpl.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[controlv1alpha1.LabelBatchSandbox] = bs.Name
	pod.Labels[controlv1alpha1.LabelReplica] = strconv.Itoa(int(replica))
	pod.Labels[controlv1alpha1.LabelManagedBy] = controlv1alpha1.ManagedByController
	sandboxpod.LabelEgress(pod.Labels, podEgress)
	sandboxpod.Inject(&pod.Spec, sandboxpod.Options{
		ExecdImage:   execdImage,
		ClientCA:     clientCA,
		Sandbox:      &sandboxpod.Sandbox{UID: string(bs.UID), Namespace: bs.Namespace, Name: bs.Name},
		Entrypoint:   bs.Spec.Entrypoint,
		Env:          bs.Spec.Env,
		Egress:       podEgress,
		RuntimeClass: runtimeClass,
	})
	return pod
}
