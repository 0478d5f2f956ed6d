package testing

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// Sandbox is a sandbox of Namespace with replicas pods in phase, the readyReplicas listed
// ready, as the server shows one.
func Sandbox(name string, replicas int32, phase sandboxv1alpha1.SandboxPhase, readyReplicas ...int32) *sandboxv1alpha1.Sandbox {
	sb := &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec:       sandboxv1alpha1.SandboxSpec{Replicas: ptr.To(replicas)},
		Status:     sandboxv1alpha1.SandboxStatus{Phase: phase, Replicas: replicas},
	}
	for r := range replicas {
		ready := false
		for _, rr := range readyReplicas {
			ready = ready || rr == r
		}
		sb.Status.Pods = append(sb.Status.Pods, sandboxv1alpha1.SandboxPodStatus{Replica: r, Name: name + "-pod", Ready: ready})
		if ready {
			sb.Status.Ready++
		}
	}
	return sb
}
