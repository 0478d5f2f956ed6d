package batchsandbox

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxpod"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/claimapi"
)

// podName is the name of a replica's pod in direct mode: deterministic, so that creating it
// twice (a restarted controller, a stale cache) fails with AlreadyExists instead of making two.
func podName(bs *controlv1alpha1.BatchSandbox, replica int32) string {
	return fmt.Sprintf("%s-%d", bs.Name, replica)
}

// buildPod makes the pod of one replica from the template: execd is installed by an init
// container into an emptyDir and wraps the entrypoint of the first container, so any image
// works unchanged.
func buildPod(bs *controlv1alpha1.BatchSandbox, replica int32, execdImage string) *corev1.Pod {
	tmpl := bs.Spec.Template.DeepCopy()
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

	// The sandbox's identity comes first, so that its own env may still override it.
	env := []corev1.EnvVar{
		{Name: claimapi.EnvSandboxName, Value: bs.Name},
		{Name: claimapi.EnvSandboxNamespace, Value: bs.Namespace},
	}
	sandboxpod.Inject(&pod.Spec, sandboxpod.Options{
		ExecdImage:  execdImage,
		Entrypoint:  bs.Spec.Entrypoint,
		Env:         append(env, bs.Spec.Env...),
		TokenSecret: controlv1alpha1.TokenSecretName(bs.Name),
	})
	return pod
}
