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
	base := PoolRevision(pool("python", controlv1alpha1.PodSecurityPlatform), "")
	if again := PoolRevision(pool("python", controlv1alpha1.PodSecurityPlatform), ""); again != base {
		t.Errorf("equal pools: %s and %s", base, again)
	}
	// Pods of another template, or made under another podSecurity, are not current.
	for name, other := range map[string]*controlv1alpha1.Pool{
		"image":       pool("python:3.13", controlv1alpha1.PodSecurityPlatform),
		"podSecurity": pool("python", controlv1alpha1.PodSecurityNamespace),
	} {
		if PoolRevision(other, "") == base {
			t.Errorf("another %s, the same revision %s", name, base)
		}
	}
}

func TestPoolRevisionRuntimeClass(t *testing.T) {
	pool := func(rc *string) *controlv1alpha1.Pool {
		return &controlv1alpha1.Pool{Spec: controlv1alpha1.PoolSpec{PodSecurity: controlv1alpha1.PodSecurityPlatform,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RuntimeClassName: rc, Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}}}}
	}
	gvisor, runc := "gvisor", "runc"
	unnamed := PoolRevision(pool(nil), "")
	// A template that names no class runs under the platform's default: pods made under
	// another default are not current.
	if got := PoolRevision(pool(nil), gvisor); got == unnamed {
		t.Errorf("default gvisor and no default: the same revision %s", got)
	}
	if a, b := PoolRevision(pool(nil), gvisor), PoolRevision(pool(nil), "kata"); a == b {
		t.Errorf("defaults gvisor and kata: the same revision %s", a)
	}
	// A template that names its class is what it says, whatever the default.
	if a, b := PoolRevision(pool(&runc), ""), PoolRevision(pool(&runc), gvisor); a != b {
		t.Errorf("a template naming runc: revision %s without a default, %s with gvisor", a, b)
	}
}
