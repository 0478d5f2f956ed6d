package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "it-"}}
	if err := kube.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	// No kube-controller-manager runs here to make the default ServiceAccount pods need.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
	if err := kube.Create(context.Background(), sa); err != nil {
		t.Fatalf("create service account: %v", err)
	}
	return ns.Name
}

func sandbox(name string) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "a"}},
		Spec: sandboxv1alpha1.SandboxSpec{
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "sandbox", Image: "python:3.11"}},
			}},
			Entrypoint: []string{"python3", "-m", "http.server"},
			Env:        []corev1.EnvVar{{Name: "GREETING", Value: "hi"}},
		},
	}
}

func TestSandboxCreateGetListDelete(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)

	created, err := api.Create(ctx, sandbox("demo"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.CreationTimestamp.IsZero() {
		t.Errorf("created sandbox lacks system metadata: %+v", created.ObjectMeta)
	}
	if got := ptr.Deref(created.Spec.Replicas, 0); got != 1 {
		t.Errorf("replicas defaulted to %d, want 1", got)
	}

	// The apiserver stores nothing: the sandbox is a BatchSandbox of the same name and UID.
	bs := &controlv1alpha1.BatchSandbox{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, bs); err != nil {
		t.Fatalf("get backing BatchSandbox: %v", err)
	}
	if bs.UID != created.UID {
		t.Errorf("BatchSandbox UID %s, sandbox UID %s", bs.UID, created.UID)
	}
	wantSpec := controlv1alpha1.BatchSandboxSpec{
		Replicas:   ptr.To[int32](1),
		Template:   sandbox("demo").Spec.Template,
		Entrypoint: []string{"python3", "-m", "http.server"},
		Env:        []corev1.EnvVar{{Name: "GREETING", Value: "hi"}},
	}
	if diff := cmp.Diff(wantSpec, bs.Spec); diff != "" {
		t.Errorf("BatchSandbox spec (-want +got):\n%s", diff)
	}

	got, err := api.Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.UID != created.UID || got.Labels["team"] != "a" {
		t.Errorf("get returned %+v", got.ObjectMeta)
	}

	if _, err := api.Create(ctx, sandbox("other"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create other: %v", err)
	}
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if names := itemNames(list.Items); !cmp.Equal(names, []string{"demo", "other"}) {
		t.Errorf("list = %v, want [demo other]", names)
	}
	list, err = api.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=other"})
	if err != nil {
		t.Fatalf("list with field selector: %v", err)
	}
	if names := itemNames(list.Items); !cmp.Equal(names, []string{"other"}) {
		t.Errorf("field-selected list = %v, want [other]", names)
	}
	list, err = api.List(ctx, metav1.ListOptions{LabelSelector: "team=b"})
	if err != nil {
		t.Fatalf("list with label selector: %v", err)
	}
	if len(list.Items) != 0 {
		t.Errorf("label selector team=b matched %v", itemNames(list.Items))
	}

	// Creating it twice is a conflict named in terms of sandboxes.
	_, err = api.Create(ctx, sandbox("demo"), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) || !strings.Contains(err.Error(), "sandboxes.sandbox.kube-sandbox.io") {
		t.Errorf("second create: got %v, want AlreadyExists for sandboxes", err)
	}

	if err := api.Delete(ctx, "demo", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	// Deletion is graceful: the controller's finalizer holds the BatchSandbox until its pods
	// are gone (at once here, where no pod is bound to a node).
	waitGone(t, ns, "demo")
	if _, err := api.Get(ctx, "demo", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: got %v, want NotFound", err)
	}
	if err := api.Delete(ctx, "demo", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("second delete: got %v, want NotFound", err)
	}
}

// TestSandboxMetadataClient: Kubernetes' namespace controller and garbage collector reach
// sandboxes through the metadata client, which asks for protobuf first and JSON second. Sandboxes
// have no protobuf encoding; the server must answer JSON, not fail to write protobuf, or a
// namespace holding sandboxes cannot be deleted.
func TestSandboxMetadataClient(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)
	for _, name := range []string{"one", "two", "three"} {
		if _, err := api.Create(ctx, sandbox(name), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	meta, err := metadata.NewForConfig(cp.Config(framework.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	res := meta.Resource(sandboxv1alpha1.SchemeGroupVersion.WithResource("sandboxes")).Namespace(ns)

	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("metadata list: %v", err)
	}
	var names []string
	for _, item := range list.Items {
		names = append(names, item.Name)
	}
	if want := []string{"one", "three", "two"}; !cmp.Equal(names, want) {
		t.Errorf("metadata list = %v, want %v", names, want)
	}
	got, err := res.Get(ctx, "one", metav1.GetOptions{})
	if err != nil || got.Labels["team"] != "a" {
		t.Fatalf("metadata get: %v, labels %v", err, got)
	}

	if err := res.Delete(ctx, "one", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("metadata delete: %v", err)
	}
	waitGone(t, ns, "one")
	// With a limit, one page goes: the first sandbox by name.
	if err := res.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{Limit: 1}); err != nil {
		t.Fatalf("metadata deletecollection of one page: %v", err)
	}
	waitGone(t, ns, "three")
	if _, err := api.Get(ctx, "two", metav1.GetOptions{}); err != nil {
		t.Fatalf("the sandbox on the next page: %v", err)
	}
	if err := res.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("metadata deletecollection: %v", err)
	}
	waitGone(t, ns, "two")
}

func TestSandboxDryRunCreatesNothing(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	out, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, sandbox("dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	if out.Name != "dry" {
		t.Errorf("dry-run returned %q", out.Name)
	}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dry"}, &controlv1alpha1.BatchSandbox{}); !apierrors.IsNotFound(err) {
		t.Errorf("dry-run left a BatchSandbox: %v", err)
	}
}

func TestSandboxValidation(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tests := []struct {
		name      string
		mutate    func(*sandboxv1alpha1.Sandbox)
		wantField string
	}{
		{"name not a DNS label", func(s *sandboxv1alpha1.Sandbox) { s.Name = "Bad_Name" }, "metadata.name"},
		{"no template", func(s *sandboxv1alpha1.Sandbox) { s.Spec.Template = nil }, "spec.template"},
		{"no containers", func(s *sandboxv1alpha1.Sandbox) { s.Spec.Template.Spec.Containers = nil }, "spec.template.spec.containers"},
		{"no image", func(s *sandboxv1alpha1.Sandbox) { s.Spec.Template.Spec.Containers[0].Image = "" }, "spec.template.spec.containers[0].image"},
		{"negative replicas", func(s *sandboxv1alpha1.Sandbox) { s.Spec.Replicas = ptr.To[int32](-1) }, "spec.replicas"},
		{"bad env name", func(s *sandboxv1alpha1.Sandbox) { s.Spec.Env = []corev1.EnvVar{{Name: "1=x"}} }, "spec.env[0].name"},
		{"reserved env name", func(s *sandboxv1alpha1.Sandbox) { s.Spec.Env = []corev1.EnvVar{{Name: execdapi.EnvClientCA}} }, "spec.env[0].name"},
		{"server's annotation", func(s *sandboxv1alpha1.Sandbox) {
			s.Annotations = map[string]string{controlv1alpha1.AnnotationPodSecurity: "Namespace"}
		}, "metadata.annotations[control.kube-sandbox.io/pod-security]"},
		{"empty entrypoint", func(s *sandboxv1alpha1.Sandbox) { s.Spec.Entrypoint = []string{""} }, "spec.entrypoint[0]"},
		{"egress wildcard in the middle", func(s *sandboxv1alpha1.Sandbox) {
			s.Spec.NetworkPolicy = &sandboxv1alpha1.SandboxNetworkPolicy{Egress: []sandboxv1alpha1.SandboxEgressRule{{Action: "Allow", To: "api.*.example.com"}}}
		}, "spec.networkPolicy.egress[0].to"},
		{"egress CIDR out of range", func(s *sandboxv1alpha1.Sandbox) {
			s.Spec.NetworkPolicy = &sandboxv1alpha1.SandboxNetworkPolicy{Egress: []sandboxv1alpha1.SandboxEgressRule{{Action: "Deny", To: "10.0.0.0/33"}}}
		}, "spec.networkPolicy.egress[0].to"},
		{"egress port out of range", func(s *sandboxv1alpha1.Sandbox) {
			s.Spec.NetworkPolicy = &sandboxv1alpha1.SandboxNetworkPolicy{Egress: []sandboxv1alpha1.SandboxEgressRule{
				{Action: "Allow", To: "pypi.org", Ports: []sandboxv1alpha1.SandboxEgressPort{{Port: 70000}}}}}
		}, "spec.networkPolicy.egress[0].ports[0].port"},
		{"too many egress rules", func(s *sandboxv1alpha1.Sandbox) {
			s.Spec.NetworkPolicy = &sandboxv1alpha1.SandboxNetworkPolicy{Egress: make([]sandboxv1alpha1.SandboxEgressRule, 101)}
			for i := range s.Spec.NetworkPolicy.Egress {
				s.Spec.NetworkPolicy.Egress[i] = sandboxv1alpha1.SandboxEgressRule{Action: "Allow", To: "pypi.org"}
			}
		}, "spec.networkPolicy.egress"},
		{"hostNetwork", func(s *sandboxv1alpha1.Sandbox) { s.Spec.Template.Spec.HostNetwork = true }, "spec.template.spec.hostNetwork"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sandbox("invalid")
			tt.mutate(s)
			_, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want 422 Invalid", err)
			}
			status := err.(apierrors.APIStatus).Status()
			if status.Code != 422 || status.Details == nil || status.Details.Kind != "Sandbox" {
				t.Errorf("status = %+v", status)
			}
			var fields []string
			for _, c := range status.Details.Causes {
				fields = append(fields, c.Field)
			}
			if !contains(fields, tt.wantField) {
				t.Errorf("causes name fields %v, want %s", fields, tt.wantField)
			}
		})
	}
	list := &controlv1alpha1.BatchSandboxList{}
	if err := kube.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("invalid sandboxes left %d BatchSandboxes behind", len(list.Items))
	}
}

// TestSandboxNetworkPolicy: the policy is stored on the BatchSandbox, read back, mutable, and
// a bad update is a 422 that changes nothing.
func TestSandboxNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	s := sandbox("egress")
	s.Spec.NetworkPolicy = &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny", Egress: []sandboxv1alpha1.SandboxEgressRule{
		{Action: "Allow", To: "pypi.org"},
		{Action: "Allow", To: "10.250.0.1", Ports: []sandboxv1alpha1.SandboxEgressPort{{Port: 8080, EndPort: ptr.To[int32](8090), Protocol: "TCP"}}},
	}}
	created, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s.Spec.NetworkPolicy, created.Spec.NetworkPolicy); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}
	bs := &controlv1alpha1.BatchSandbox{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "egress"}, bs); err != nil {
		t.Fatal(err)
	}
	if bs.Spec.NetworkPolicy == nil || len(bs.Spec.NetworkPolicy.Egress) != 2 || bs.Spec.NetworkPolicy.Egress[1].Ports[0].EndPort == nil {
		t.Errorf("stored policy %+v", bs.Spec.NetworkPolicy)
	}

	patch := []byte(`{"spec":{"networkPolicy":{"defaultAction":"Allow","egress":[{"action":"Deny","to":"192.0.2.0/24"}]}}}`)
	patched, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Patch(ctx, "egress", types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	want := &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Allow", Egress: []sandboxv1alpha1.SandboxEgressRule{{Action: "Deny", To: "192.0.2.0/24"}}}
	if diff := cmp.Diff(want, patched.Spec.NetworkPolicy); diff != "" {
		t.Errorf("patched (-want +got):\n%s", diff)
	}
	if patched.Generation <= created.Generation {
		t.Errorf("generation %d after a policy change, was %d", patched.Generation, created.Generation)
	}

	bad := []byte(`{"spec":{"networkPolicy":{"egress":[{"action":"Allow","to":"*.com"}]}}}`)
	_, err = sandboxes.SandboxV1alpha1().Sandboxes(ns).Patch(ctx, "egress", types.MergePatchType, bad, metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.networkPolicy.egress[0].to") {
		t.Fatalf("a bad patch: %v, want 422 naming spec.networkPolicy.egress[0].to", err)
	}
	got, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "egress", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// (The controller may have written the status meanwhile: the spec is what must not change.)
	if diff := cmp.Diff(want, got.Spec.NetworkPolicy); diff != "" || got.Generation != patched.Generation {
		t.Errorf("a refused patch changed the sandbox (-want +got):\n%s", diff)
	}
}

func TestControllerCreatesHardenedPod(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, sandbox("pods"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	pod := &corev1.Pod{}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pods-0"}, pod) == nil, nil
	}); err != nil {
		t.Fatalf("pod pods-0 never appeared: %v", err)
	}
	if got := pod.Labels[controlv1alpha1.LabelBatchSandbox]; got != "pods" {
		t.Errorf("pod label %s=%q", controlv1alpha1.LabelBatchSandbox, got)
	}
	if len(pod.Spec.InitContainers) == 0 || pod.Spec.InitContainers[0].Name != execdapi.InitContainerName {
		t.Errorf("no execd installer: %+v", pod.Spec.InitContainers)
	}
	wantCmd := []string{execdapi.BinaryPath, "serve", "--", "python3", "-m", "http.server"}
	if diff := cmp.Diff(wantCmd, pod.Spec.Containers[0].Command); diff != "" {
		t.Errorf("sandbox container command (-want +got):\n%s", diff)
	}
	if ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
		t.Error("sandbox pods must not get API credentials by default")
	}
	c := pod.Spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || !ptr.Deref(sc.AllowPrivilegeEscalation, true) == false || sc.Capabilities == nil || !contains(capNames(sc.Capabilities.Drop), "NET_RAW") {
		t.Errorf("sandbox container security context %+v, want no privilege escalation and NET_RAW dropped", sc)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v, want seccomp RuntimeDefault", sc)
	}
	// execd trusts the kube-sandbox CA, and nothing in the pod is a secret: no Secret was made.
	ca := &corev1.Secret{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: framework.SystemNamespace, Name: "kube-sandbox-ca"}, ca); err != nil {
		t.Fatal(err)
	}
	var clientCA string
	for _, e := range c.Env {
		if e.Name == execdapi.EnvClientCA {
			clientCA = e.Value
		}
		if e.ValueFrom != nil {
			t.Errorf("env %s comes from %+v: a sandbox pod holds no reference to a secret", e.Name, e.ValueFrom)
		}
	}
	if clientCA == "" || clientCA != string(ca.Data["ca.crt"]) {
		t.Errorf("execd's client CA is not the kube-sandbox CA's bundle")
	}
	secrets := &corev1.SecretList{}
	if err := kube.List(ctx, secrets, client.InNamespace(ns)); err != nil || len(secrets.Items) != 0 {
		t.Errorf("secrets in the sandbox's namespace: %d (%v), want none", len(secrets.Items), err)
	}

	// The status names the pod; without a kubelet it stays Pending.
	_ = c
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "pods", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return s.Status.Phase == sandboxv1alpha1.PhasePending && len(s.Status.Pods) == 1 && s.Status.Pods[0].Name == "pods-0", nil
	}); err != nil {
		s, _ := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "pods", metav1.GetOptions{})
		t.Fatalf("status never showed the pending pod: %v; status %+v", err, s.Status)
	}
}

func TestSandboxRBAC(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	other := newNamespace(t)
	alice := sandboxClientFor(t, "alice-token")

	if _, err := alice.SandboxV1alpha1().Sandboxes(ns).Create(ctx, sandbox("a"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice without rights: got %v, want Forbidden", err)
	}
	grant(t, ns, "alice", []string{"sandboxes"}, []string{"get", "list", "watch", "create", "delete"})
	if _, err := alice.SandboxV1alpha1().Sandboxes(ns).Create(ctx, sandbox("a"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice with sandbox rights: %v", err)
	}
	if _, err := alice.SandboxV1alpha1().Sandboxes(other).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice in another namespace: got %v, want Forbidden", err)
	}
	// Alice needs no rights on the backing CRD: the apiserver writes it as itself.
	if err := alice.SandboxV1alpha1().Sandboxes(ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Errorf("alice delete: %v", err)
	}
}

func grant(t *testing.T, ns, user string, resources, verbs []string) {
	t.Helper()
	name := user + "-" + strings.ReplaceAll(strings.Join(resources, "-"), "/", "-")
	grantRules(t, ns, name, user, rbacv1.PolicyRule{APIGroups: []string{sandboxv1alpha1.GroupName}, Resources: resources, Verbs: verbs})
}

// waitGone waits until the BatchSandbox behind a sandbox is gone.
func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &controlv1alpha1.BatchSandbox{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		bs := &controlv1alpha1.BatchSandbox{}
		_ = kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, bs)
		t.Fatalf("BatchSandbox %s/%s still there: finalizers %v, deletionTimestamp %v", ns, name, bs.Finalizers, bs.DeletionTimestamp)
	}
}

func itemNames(items []sandboxv1alpha1.Sandbox) []string {
	var out []string
	for _, i := range items {
		out = append(out, i.Name)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func capNames(caps []corev1.Capability) []string {
	var out []string
	for _, c := range caps {
		out = append(out, string(c))
	}
	return out
}
