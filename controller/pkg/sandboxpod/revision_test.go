package sandboxpod

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

func TestPoolRevision(t *testing.T) {
	pool := func(image string, ps controlv1alpha1.PodSecurity) *controlv1alpha1.Pool {
		return &controlv1alpha1.Pool{Spec: controlv1alpha1.PoolSpec{PodSecurity: ps,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: image}}}}}}
	}
	base := PoolRevision(pool("python", controlv1alpha1.PodSecurityPlatform))
	if again := PoolRevision(pool("python", controlv1alpha1.PodSecurityPlatform)); again != base {
		t.Errorf("equal pools: %s and %s", base, again)
	}
	// Pods of another template, or made under another podSecurity, are not current.
	for name, other := range map[string]*controlv1alpha1.Pool{
		"image":       pool("python:3.13", controlv1alpha1.PodSecurityPlatform),
		"podSecurity": pool("python", controlv1alpha1.PodSecurityNamespace),
	} {
		if PoolRevision(other) == base {
			t.Errorf("another %s, the same revision %s", name, base)
		}
	}
}
