package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-sandbox/kube-sandbox/controller/pkg/snapshot"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

// TestSnapshotImagesPolicy: the ValidatingAdmissionPolicy of artifacts/pause, in the real
// kube-apiserver. With a registry named in its ConfigMap, a pod that names one of the
// registry's images is refused to everyone but sandbox-controller: in a container, an init
// container, an ephemeral container, or put there by an update; so is an image named by its
// ID alone, which would run whatever image of that ID the node holds. An update that leaves a
// snapshot pod's images as they were, and images of any other registry, pass. With the
// ConfigMap's registry empty (as shipped), or without the ConfigMap, every pod passes. Every
// request but the pods that must be stored is a dry run: admission runs, nothing is stored.
func TestSnapshotImagesPolicy(t *testing.T) {
	ctx := context.Background()
	const (
		registry   = "10.250.0.1:5000"
		snapshotOf = registry + "/kube-sandbox/snapshots/team-a/work@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		controller = "system:serviceaccount:kube-sandbox-system:sandbox-controller"
	)
	if err := framework.ApplyManifest(ctx, kube, "artifacts/pause/snapshot-images.yaml"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{
			&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"}, ObjectMeta: metav1.ObjectMeta{Name: "kube-sandbox-snapshot-images"}},
			&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"}, ObjectMeta: metav1.ObjectMeta{Name: "kube-sandbox-snapshot-images"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: snapshot.DefaultPolicyConfigMap, Namespace: framework.SystemNamespace}},
		} {
			if err := kube.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s: %v", o.GetName(), err)
			}
		}
	})
	ns := newNamespace(t)
	pod := func(name string, images ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		for _, img := range images {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c" + string(rune('0'+len(p.Spec.Containers))), Image: img})
		}
		return p
	}
	dryCreate := func(p *corev1.Pod) error { return kube.Create(ctx, p, client.DryRunAll) }
	refused := func(t *testing.T, what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "kube-sandbox-snapshot-images") || !strings.Contains(err.Error(), "is a sandbox's snapshot") {
			t.Errorf("%s: %v, want Forbidden by kube-sandbox-snapshot-images", what, err)
		}
	}

	// As shipped, the ConfigMap names no registry: the policy has nothing to keep.
	if err := dryCreate(pod("before", snapshotOf)); err != nil {
		t.Fatalf("no registry named: %v", err)
	}
	params := &corev1.ConfigMap{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: framework.SystemNamespace, Name: snapshot.DefaultPolicyConfigMap}, params); err != nil {
		t.Fatal(err)
	}
	params.Data[snapshot.PolicyRegistryKey] = registry
	if err := kube.Update(ctx, params); err != nil {
		t.Fatal(err)
	}
	// The kube-apiserver's policy and parameter informers take a moment.
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = dryCreate(pod("probe", snapshotOf))
		return apierrors.IsForbidden(last), nil
	}); err != nil {
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		_ = kube.Get(ctx, client.ObjectKey{Name: "kube-sandbox-snapshot-images"}, policy)
		t.Fatalf("the policy is not in force after 30 s: the last pod's create answered %v; the policy's status: %+v", last, policy.Status)
	}

	refused(t, "a container", dryCreate(pod("container", "python:3.11", snapshotOf)))
	init := pod("init", "python:3.11")
	init.Spec.InitContainers = []corev1.Container{{Name: "i", Image: snapshotOf}}
	refused(t, "an init container", dryCreate(init))
	byID := pod("by-id", "sha256:"+strings.Repeat("ab", 32))
	if err := dryCreate(byID); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "names an image by its ID only") {
		t.Errorf("an image named by its ID: %v, want Forbidden", err)
	}
	if err := dryCreate(pod("elsewhere", "python:3.11", "10.250.0.1:5001/kube-sandbox/snapshots/x:y", "10.250.0.1:50000/a")); err != nil {
		t.Errorf("images of other registries: %v", err)
	}

	// sandbox-controller makes a resumed replica's pod.
	grantRules(t, ns, "sandbox-controller-pods", controller, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}})
	asController, err := client.New(func() *rest.Config {
		c := cp.Config(framework.AdminToken)
		c.Impersonate = rest.ImpersonationConfig{UserName: controller}
		return c
	}(), client.Options{Scheme: framework.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	resumed := pod("resumed", snapshotOf)
	if err := asController.Create(ctx, resumed); err != nil {
		t.Fatalf("sandbox-controller's pod: %v", err)
	}
	labelled := resumed.DeepCopy()
	labelled.Labels = map[string]string{"checked": "true"}
	if err := kube.Update(ctx, labelled, client.DryRunAll); err != nil {
		t.Errorf("an update that leaves the images: %v", err)
	}
	second := resumed.DeepCopy()
	second.Spec.Containers[0].Image = strings.Replace(snapshotOf, "0123", "4567", 1)
	refused(t, "an update to another snapshot", kube.Update(ctx, second, client.DryRunAll))

	plain := pod("plain", "python:3.11")
	if err := kube.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	changed := plain.DeepCopy()
	changed.Spec.Containers[0].Image = snapshotOf
	refused(t, "an update that puts a snapshot in", kube.Update(ctx, changed, client.DryRunAll))
	debug := plain.DeepCopy()
	debug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: snapshotOf, TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}}}
	refused(t, "an ephemeral container", kube.SubResource("ephemeralcontainers").Update(ctx, debug, client.DryRunAll))

	// Without the ConfigMap, nothing is refused, and nothing is broken.
	if err := kube.Delete(ctx, params); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the policy to let snapshots through without its ConfigMap", 30*time.Second, func(context.Context) (bool, error) {
		return dryCreate(pod("after", snapshotOf)) == nil, nil
	})
}
