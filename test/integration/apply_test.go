package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// applied is a Sandbox as a GitOps tool holds it: only the fields it means to own.
func applied(ns, name string, replicas int64, policyTo string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sandbox.kube-sandbox.io/v1alpha1",
		"kind":       "Sandbox",
		"metadata":   map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"team": "a"}},
		"spec": map[string]any{
			"replicas": replicas,
			"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "sandbox", "image": "python:3.11"},
			}}},
			"networkPolicy": map[string]any{"defaultAction": "Deny", "egress": []any{map[string]any{"action": "Allow", "to": policyTo}}},
		},
	}}
	return u
}

func managers(s *sandboxv1alpha1.Sandbox) map[string]metav1.ManagedFieldsEntry {
	out := map[string]metav1.ManagedFieldsEntry{}
	for _, f := range s.ManagedFields {
		out[f.Manager+"/"+string(f.Operation)+"/"+f.Subresource] = f
	}
	return out
}

// TestServerSideApply: sandboxes behave as built-in resources under server-side apply, as a
// GitOps controller (Flux's kustomize-controller, controller-runtime's client.Apply) uses it.
func TestServerSideApply(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	apply := func(u *unstructured.Unstructured, opts ...client.ApplyOption) error {
		return kube.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), opts...)
	}
	get := func() *sandboxv1alpha1.Sandbox {
		t.Helper()
		s, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "gitops", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	t.Run("dry-run apply of a missing sandbox creates nothing", func(t *testing.T) {
		if err := apply(applied(ns, "gitops", 1, "pypi.org"), client.FieldOwner("flux"), client.ForceOwnership, client.DryRunAll); err != nil {
			t.Fatalf("dry-run apply: %v", err)
		}
		if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "gitops", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("after a dry run: %v, want NotFound", err)
		}
	})

	t.Run("apply creates", func(t *testing.T) {
		if err := apply(applied(ns, "gitops", 1, "pypi.org"), client.FieldOwner("flux"), client.ForceOwnership); err != nil {
			t.Fatalf("apply: %v", err)
		}
		s := get()
		if s.Spec.NetworkPolicy == nil || s.Spec.NetworkPolicy.Egress[0].To != "pypi.org" || s.Labels["team"] != "a" {
			t.Errorf("created %+v", s.Spec)
		}
		f, ok := managers(s)["flux/Apply/"]
		if !ok || f.FieldsV1 == nil || !strings.Contains(string(f.FieldsV1.Raw), `"f:networkPolicy"`) || !strings.Contains(string(f.FieldsV1.Raw), `"f:replicas"`) {
			t.Errorf("managedFields %+v, want flux's Apply owning spec.replicas and spec.networkPolicy", s.ManagedFields)
		}
		if _, ok := s.Annotations["sandbox.kube-sandbox.io/managed-fields"]; ok {
			t.Error("the Sandbox shows the annotation that stores its managedFields")
		}
		bs := &controlv1alpha1.BatchSandbox{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gitops"}, bs); err != nil || bs.Spec.NetworkPolicy == nil {
			t.Fatalf("the BatchSandbox: %v %+v", err, bs.Spec.NetworkPolicy)
		}
	})

	t.Run("the same manager applies a change", func(t *testing.T) {
		if err := apply(applied(ns, "gitops", 2, "files.pythonhosted.org"), client.FieldOwner("flux")); err != nil {
			t.Fatalf("apply: %v", err)
		}
		if s := get(); *s.Spec.Replicas != 2 || s.Spec.NetworkPolicy.Egress[0].To != "files.pythonhosted.org" {
			t.Errorf("after the change: replicas %d, policy %+v", *s.Spec.Replicas, s.Spec.NetworkPolicy)
		}
	})

	t.Run("another manager conflicts, naming the fields", func(t *testing.T) {
		err := apply(applied(ns, "gitops", 3, "files.pythonhosted.org"), client.FieldOwner("argo"))
		if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), ".spec.replicas") || !strings.Contains(err.Error(), `"flux"`) {
			t.Fatalf("apply by another manager: %v, want 409 naming .spec.replicas and flux", err)
		}
		if s := get(); *s.Spec.Replicas != 2 {
			t.Errorf("a conflicting apply changed replicas to %d", *s.Spec.Replicas)
		}
	})

	t.Run("force takes ownership", func(t *testing.T) {
		if err := apply(applied(ns, "gitops", 3, "files.pythonhosted.org"), client.FieldOwner("argo"), client.ForceOwnership); err != nil {
			t.Fatalf("forced apply: %v", err)
		}
		s := get()
		if *s.Spec.Replicas != 3 {
			t.Errorf("replicas %d after the forced apply", *s.Spec.Replicas)
		}
		m := managers(s)
		if f, ok := m["argo/Apply/"]; !ok || !strings.Contains(string(f.FieldsV1.Raw), `"f:replicas"`) {
			t.Errorf("argo does not own spec.replicas: %+v", s.ManagedFields)
		}
		if f, ok := m["flux/Apply/"]; ok && strings.Contains(string(f.FieldsV1.Raw), `"f:replicas"`) {
			t.Errorf("flux still owns spec.replicas: %s", f.FieldsV1.Raw)
		}
	})

	t.Run("an update through the API has a manager too", func(t *testing.T) {
		// The controller writes the status meanwhile: a read-modify-write retries, as clients do.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s := get()
			s.Labels["owner"] = "someone"
			_, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Update(ctx, s, metav1.UpdateOptions{FieldManager: "hand"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if _, ok := managers(get())["hand/Update/"]; !ok {
			t.Errorf("no manager for the update: %+v", get().ManagedFields)
		}
	})

	t.Run("the status has its own managers", func(t *testing.T) {
		// The controller writes the status (of the BatchSandbox) through the status subresource.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			for _, f := range get().ManagedFields {
				if f.Subresource == "status" && f.Manager != "" && strings.Contains(string(f.FieldsV1.Raw), `"f:status"`) {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("no status manager: %+v", get().ManagedFields)
		}
		for _, f := range get().ManagedFields {
			if f.Subresource == "" && strings.Contains(string(f.FieldsV1.Raw), `"f:status"`) {
				t.Errorf("manager %s of the main resource owns status fields", f.Manager)
			}
		}
	})

	t.Run("apply with a bad policy is 422 and changes nothing", func(t *testing.T) {
		err := apply(applied(ns, "gitops", 3, "*.com"), client.FieldOwner("argo"), client.ForceOwnership)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.networkPolicy.egress[0].to") {
			t.Fatalf("apply: %v, want 422", err)
		}
		if s := get(); s.Spec.NetworkPolicy.Egress[0].To != "files.pythonhosted.org" {
			t.Errorf("policy changed to %+v", s.Spec.NetworkPolicy)
		}
	})
}

// TestEventsOnTheSandbox: the controller's Events about a sandbox are about the Sandbox, as
// kubectl describe and kubectl events look them up (involvedObject kind, name and UID).
func TestEventsOnTheSandbox(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	s := &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "waits"},
		Spec:       sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "missing"}},
	}
	created, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.EventList
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got = corev1.EventList{}
		err := kube.List(ctx, &got, client.InNamespace(ns), client.MatchingFieldsSelector{Selector: fields.SelectorFromSet(fields.Set{
			"involvedObject.kind": "Sandbox", "involvedObject.name": "waits", "involvedObject.uid": string(created.UID),
		})})
		if err != nil {
			return false, err
		}
		for _, e := range got.Items {
			if e.Reason == controlv1alpha1.ReasonPoolNotFound {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no PoolNotFound Event on the Sandbox: %v; %+v", err, got.Items)
	}
	for _, e := range got.Items {
		if e.InvolvedObject.APIVersion != "sandbox.kube-sandbox.io/v1alpha1" || e.InvolvedObject.Namespace != ns {
			t.Errorf("event %s is about %+v", e.Reason, e.InvolvedObject)
		}
	}
}
