package sandbox

import (
	"context"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/pod-security-admission/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/admission"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// podCreators may create pods in every namespace; everyone else may not.
func podCreators(names ...string) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		for _, n := range names {
			if a.GetVerb() == "create" && a.GetResource() == "pods" && a.GetAPIGroup() == "" && a.IsResourceRequest() && a.GetUser().GetName() == n {
				return authorizer.DecisionAllow, "", nil
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

func testAdmitter(t *testing.T, objs ...runtime.Object) *Admitter {
	t.Helper()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = controlv1alpha1.AddToScheme(s)
	lv, _ := admission.ParseLevel("baseline")
	checker, err := admission.NewChecker(lv)
	if err != nil {
		t.Fatal(err)
	}
	return &Admitter{Checker: checker, Reader: fake.NewClientBuilder().WithScheme(s).WithRuntimeObjects(objs...).Build(),
		Authorizer: podCreators("pod-creator")}
}

func TestAdmit(t *testing.T) {
	open := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open"}}
	baseline := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "base", Labels: map[string]string{api.EnforceLevelLabel: "baseline"}}}
	elevated := &controlv1alpha1.Pool{ObjectMeta: metav1.ObjectMeta{Namespace: "open", Name: "elevated"},
		Spec: controlv1alpha1.PoolSpec{PodSecurity: controlv1alpha1.PodSecurityNamespace}}
	plain := &controlv1alpha1.Pool{ObjectMeta: metav1.ObjectMeta{Namespace: "open", Name: "plain"}}
	a := testAdmitter(t, open, baseline, elevated, plain)

	direct := func(ns string, mutate func(*corev1.PodSpec)) *sandboxv1alpha1.Sandbox {
		sbx := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}, Spec: sandboxv1alpha1.SandboxSpec{
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}}}}
		if mutate != nil {
			mutate(&sbx.Spec.Template.Spec)
		}
		return sbx
	}
	pooled := func(pool string) *sandboxv1alpha1.Sandbox {
		return &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "open"},
			Spec: sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: pool}}}
	}
	privileged := func(s *corev1.PodSpec) {
		s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	}
	tests := []struct {
		name           string
		user           string
		sbx            *sandboxv1alpha1.Sandbox
		wantCode       int
		wantField      string
		wantAnnotation bool
	}{
		{name: "a plain template for anyone", user: "alice", sbx: direct("open", nil)},
		{name: "privileged for a sandbox-only user", user: "alice", sbx: direct("open", privileged), wantCode: http.StatusForbidden,
			wantField: "spec.template.spec.containers[0].securityContext.privileged"},
		{name: "privileged for a user who may create pods", user: "pod-creator", sbx: direct("open", privileged), wantAnnotation: true},
		{name: "privileged in a baseline namespace, for anyone", user: "pod-creator", sbx: direct("base", privileged),
			wantCode: http.StatusUnprocessableEntity, wantField: "spec.template.spec.containers[0].securityContext.privileged"},
		{name: "a service account for a sandbox-only user", user: "alice", sbx: direct("open", func(s *corev1.PodSpec) { s.ServiceAccountName = "admin" }),
			wantCode: http.StatusForbidden, wantField: "spec.template.spec.serviceAccountName"},
		{name: "a privileged shard for a sandbox-only user", user: "alice", sbx: withShardPatch(direct("open", nil), `{"spec":{"containers":[{"name":"sandbox","securityContext":{"privileged":true}}]}}`),
			wantCode: http.StatusForbidden, wantField: "spec.shardPatches[1].spec.containers[0].securityContext.privileged"},
		{name: "a privileged shard in a baseline namespace", user: "pod-creator", sbx: withShardPatch(direct("base", nil), `{"spec":{"containers":[{"name":"sandbox","securityContext":{"privileged":true}}]}}`),
			wantCode: http.StatusUnprocessableEntity, wantField: "spec.shardPatches[1].spec.containers[0].securityContext.privileged"},
		{name: "plain shards for anyone", user: "alice", sbx: withShardPatch(direct("open", nil), `{"metadata":{"labels":{"x":"y"}}}`)},
		{name: "a missing namespace", user: "alice", sbx: direct("gone", nil), wantCode: http.StatusNotFound},
		{name: "a plain pool for anyone", user: "alice", sbx: pooled("plain")},
		{name: "a missing pool waits (PoolNotFound)", user: "alice", sbx: pooled("nope")},
		{name: "an elevated pool for a sandbox-only user", user: "alice", sbx: pooled("elevated"), wantCode: http.StatusForbidden,
			wantField: "spec.poolRef.name"},
		{name: "an elevated pool for a user who may create pods", user: "pod-creator", sbx: pooled("elevated"), wantAnnotation: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := genericapirequest.WithUser(t.Context(), &user.DefaultInfo{Name: tc.user})
			err := a.Admit(ctx, tc.sbx)
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("Admit() = %v, want nil", err)
				}
			} else {
				status, ok := err.(apierrors.APIStatus)
				if !ok || int(status.Status().Code) != tc.wantCode {
					t.Fatalf("Admit() = %v, want %d", err, tc.wantCode)
				}
				if tc.wantField != "" {
					found := false
					for _, c := range status.Status().Details.Causes {
						found = found || c.Field == tc.wantField
					}
					if !found || !strings.Contains(err.Error(), tc.wantField) {
						t.Errorf("error %v: want cause and message naming %s", err, tc.wantField)
					}
				}
				if tc.wantCode == http.StatusForbidden && !strings.Contains(err.Error(), `user "alice"`) {
					t.Errorf("error %q: want it to name the user who lacks the right", err)
				}
			}
			if got := tc.sbx.Annotations[controlv1alpha1.AnnotationPodSecurity] == "Namespace"; got != tc.wantAnnotation {
				t.Errorf("pod-security annotation set: %v, want %v", got, tc.wantAnnotation)
			}
		})
	}
}

// TestEnsureMayUseElevated: a sandbox whose pods are beyond a sandbox's is for callers who may
// create pods; any other sandbox for anyone the subresource's RBAC lets in.
// withShardPatch gives replica 1 the patch (replica 0 none).
func withShardPatch(sbx *sandboxv1alpha1.Sandbox, patch string) *sandboxv1alpha1.Sandbox {
	sbx.Spec.ShardPatches = []runtime.RawExtension{{Raw: []byte(`{}`)}, {Raw: []byte(patch)}}
	return sbx
}

func TestEnsureMayUseElevated(t *testing.T) {
	authz := podCreators("pod-creator")
	marked := map[string]string{controlv1alpha1.AnnotationPodSecurity: "Namespace"}
	for _, tc := range []struct {
		user        string
		annotations map[string]string
		wantErr     bool
	}{
		{user: "alice", annotations: nil},
		{user: "alice", annotations: marked, wantErr: true},
		{user: "pod-creator", annotations: marked},
	} {
		ctx := genericapirequest.WithUser(t.Context(), &user.DefaultInfo{Name: tc.user})
		err := ensureMayUseElevated(ctx, authz, "open", "s", tc.annotations, "using it")
		if tc.wantErr != (err != nil) || err != nil && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `user "alice"`)) {
			t.Errorf("%s, annotations %v: %v, want an error: %v (a 403 naming the user)", tc.user, tc.annotations, err, tc.wantErr)
		}
	}
}

// TestAdmitCacheMiss: a namespace and a pool made just before the sandbox, which the cache
// does not hold yet, are read from the kube-apiserver (CacheFirst): the sandbox is admitted in
// the namespace, and the pool's level is held to as if the cache had it.
func TestAdmitCacheMiss(t *testing.T) {
	fresh := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}
	elevated := &controlv1alpha1.Pool{ObjectMeta: metav1.ObjectMeta{Namespace: "fresh", Name: "elevated"},
		Spec: controlv1alpha1.PoolSpec{PodSecurity: controlv1alpha1.PodSecurityNamespace}}
	direct := testAdmitter(t, fresh, elevated).Reader
	a := testAdmitter(t) // an empty cache
	a.Reader = CacheFirst{Cache: a.Reader, Direct: direct}

	ctx := genericapirequest.WithUser(t.Context(), &user.DefaultInfo{Name: "alice"})
	sbx := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "fresh"}, Spec: sandboxv1alpha1.SandboxSpec{
		Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}}}}
	if err := a.Admit(ctx, sbx); err != nil {
		t.Errorf("a namespace the cache does not hold yet: Admit() = %v, want nil", err)
	}
	pooled := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "fresh"},
		Spec: sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "elevated"}}}
	if err := a.Admit(ctx, pooled); !apierrors.IsForbidden(err) {
		t.Errorf("an elevated pool the cache does not hold yet, for a sandbox-only user: Admit() = %v, want Forbidden", err)
	}
	gone := sbx.DeepCopy()
	gone.Namespace = "gone"
	if err := a.Admit(ctx, gone); !apierrors.IsNotFound(err) {
		t.Errorf("a namespace that exists nowhere: Admit() = %v, want NotFound", err)
	}
}

// TestAdmitDefaultRuntimeClass: with a platform runtime class, a sandbox whose template names
// none is stored under it, and another class is for users who may create pods (and makes the
// sandbox theirs, as any template beyond a sandbox's does).
func TestAdmitDefaultRuntimeClass(t *testing.T) {
	a := testAdmitter(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open"}},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"})
	a.Checker.RuntimeClass = "gvisor"
	direct := func(rc *string) *sandboxv1alpha1.Sandbox {
		return &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "open"}, Spec: sandboxv1alpha1.SandboxSpec{
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{RuntimeClassName: rc, Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}}}}
	}
	as := func(name string) context.Context {
		return genericapirequest.WithUser(t.Context(), &user.DefaultInfo{Name: name})
	}

	sbx := direct(nil)
	if err := a.Admit(as("alice"), sbx); err != nil {
		t.Fatalf("a template naming no class: %v", err)
	}
	if got := ptr.Deref(sbx.Spec.Template.Spec.RuntimeClassName, ""); got != "gvisor" {
		t.Errorf("stored runtimeClassName %q, want the platform's gvisor", got)
	}
	if elevated(sbx.Annotations) {
		t.Error("a sandbox under the platform's class is marked as more than a sandbox")
	}

	sbx = direct(ptr.To("runc"))
	err := a.Admit(as("alice"), sbx)
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Code != http.StatusForbidden || len(status.Status().Details.Causes) != 1 ||
		status.Status().Details.Causes[0].Field != "spec.template.spec.runtimeClassName" {
		t.Fatalf("runc for a sandbox-only user: %v, want 403 naming spec.template.spec.runtimeClassName", err)
	}

	sbx = direct(ptr.To("runc"))
	if err := a.Admit(as("pod-creator"), sbx); err != nil {
		t.Fatalf("runc for a user who may create pods: %v", err)
	}
	if got := ptr.Deref(sbx.Spec.Template.Spec.RuntimeClassName, ""); got != "runc" || !elevated(sbx.Annotations) {
		t.Errorf("runc for a user who may create pods: runtimeClassName %q, elevated %v; want runc, true", got, elevated(sbx.Annotations))
	}
}
