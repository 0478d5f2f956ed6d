package integration

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

// grantPods lets user create pods in ns (as the built-in edit role would).
func grantPods(t *testing.T, ns, user string) {
	t.Helper()
	grantRules(t, ns, user+"-pods", user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}})
}

// grantPools lets user write pools in ns, as kube-sandbox-edit does.
func grantPools(t *testing.T, ns, user string) {
	t.Helper()
	grantRules(t, ns, user+"-pools", user,
		rbacv1.PolicyRule{APIGroups: []string{controlv1alpha1.GroupName}, Resources: []string{"pools"}, Verbs: []string{"get", "create", "update", "patch"}})
}

// grantRules binds user to a Role name of rules in ns.
func grantRules(t *testing.T, ns, name, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	// RBAC is read from an informer in the kube-apiserver; give it a moment to see the binding.
	time.Sleep(500 * time.Millisecond)
}

// TestTemplateAdmission: a template that needs more than a sandbox is refused (403, naming
// the fields) for a user who may not create pods, and admitted for one who may; one that no
// pod of the namespace may be is 422 for everyone; nothing is stored when refused.
func TestTemplateAdmission(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	grant(t, ns, "alice", []string{"sandboxes"}, []string{"create", "get"})
	grant(t, ns, "carol", []string{"sandboxes"}, []string{"create", "get"})
	grantPods(t, ns, "carol")
	alice, carol := sandboxClientFor(t, framework.AliceToken), sandboxClientFor(t, framework.CarolToken)

	templates := map[string]func(*corev1.PodSpec){
		"privileged": func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		},
		"hostPath": func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		},
		"serviceToken": func(s *corev1.PodSpec) {
			s.ServiceAccountName, s.AutomountServiceAccountToken = "default", ptr.To(true)
		},
	}
	wantField := map[string]string{
		"privileged": "spec.template.spec.containers[0].securityContext.privileged",
		"hostPath":   "spec.template.spec.volumes[0]", "serviceToken": "spec.template.spec.automountServiceAccountToken",
	}
	for name, mutate := range templates {
		t.Run(name, func(t *testing.T) {
			s := sandbox("t-" + strings.ToLower(name))
			mutate(&s.Spec.Template.Spec)
			_, err := alice.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s.DeepCopy(), metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), wantField[name]) {
				t.Fatalf("alice: %v, want 403 naming %s", err, wantField[name])
			}
			if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Name}, &controlv1alpha1.BatchSandbox{}); !apierrors.IsNotFound(err) {
				t.Errorf("a refused sandbox was stored: %v", err)
			}
			if _, err := carol.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s.DeepCopy(), metav1.CreateOptions{}); err != nil {
				t.Errorf("carol, who may create pods: %v", err)
			}
		})
	}

	t.Run("hostNetwork is refused for everyone: the egress policy is enforced in the pod's network namespace", func(t *testing.T) {
		s := sandbox("t-hostnetwork")
		s.Spec.Template.Spec.HostNetwork = true
		_, err := carol.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template.spec.hostNetwork") {
			t.Fatalf("carol: %v, want 422 naming spec.template.spec.hostNetwork", err)
		}
	})

	t.Run("a namespace that enforces baseline refuses it for everyone", func(t *testing.T) {
		nsObj := &corev1.Namespace{}
		if err := kube.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
			t.Fatal(err)
		}
		nsObj.Labels["pod-security.kubernetes.io/enforce"] = "baseline"
		if err := kube.Update(ctx, nsObj); err != nil {
			t.Fatal(err)
		}
		s := sandbox("priv-in-baseline")
		templates["privileged"](&s.Spec.Template.Spec)
		waitFor(t, "the namespace label in sandbox-apiserver's cache", 10*time.Second, func(ctx context.Context) (bool, error) {
			_, err := carol.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return apierrors.IsInvalid(err), nil
		})
		_, err := carol.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), wantField["privileged"]) {
			t.Errorf("carol in a baseline namespace: %v, want 422 naming the field", err)
		}
	})
}

// TestPoolPodSecurity: a Pool's template is held to the platform level whoever wrote it; only a
// user who may create pods may set podSecurity: Namespace (the kube-apiserver's policy), and
// only such a user may create sandboxes from such a pool.
func TestPoolPodSecurity(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	grantPools(t, ns, "alice")
	grantPools(t, ns, "carol")
	grantPods(t, ns, "carol")
	grant(t, ns, "alice", []string{"sandboxes"}, []string{"create", "get"})
	grant(t, ns, "carol", []string{"sandboxes"}, []string{"create", "get"})
	aliceKube, err := client.New(userConfig(framework.AliceToken), client.Options{Scheme: framework.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	carolKube, err := client.New(userConfig(framework.CarolToken), client.Options{Scheme: framework.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	// Alice's privileged pool is stored, and refused by the controller: no pods.
	priv := newPool(ns, "priv", 1, 1, 2)
	priv.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	if err := aliceKube.Create(ctx, priv.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool refuses its template", 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, ns, "priv")
		c := meta.FindStatusCondition(p.Status.Conditions, controlv1alpha1.PoolConditionReady)
		return err == nil && c != nil && c.Reason == controlv1alpha1.ReasonTemplateRefused &&
			strings.Contains(c.Message, "securityContext.privileged"), nil
	})
	pods := &corev1.PodList{}
	if err := kube.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{controlv1alpha1.LabelPool: "priv"}); err != nil || len(pods.Items) != 0 {
		t.Errorf("a refused pool made %d pods (%v)", len(pods.Items), err)
	}

	// Alice may not ask for the namespace's level; Carol may.
	elevated := newPool(ns, "elevated", 1, 1, 2)
	elevated.Spec.PodSecurity = controlv1alpha1.PodSecurityNamespace
	if err := aliceKube.Create(ctx, elevated.DeepCopy()); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "podSecurity") {
		t.Fatalf("alice sets podSecurity Namespace: %v, want Forbidden", err)
	}
	if err := carolKube.Create(ctx, elevated.DeepCopy()); err != nil {
		t.Fatalf("carol sets podSecurity Namespace: %v", err)
	}
	// Nor may Alice change the template of such a pool.
	p := &controlv1alpha1.Pool{}
	if err := aliceKube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "elevated"}, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Template.Spec.HostPID = true
	if err := aliceKube.Update(ctx, p); !apierrors.IsForbidden(err) {
		t.Errorf("alice changes the template of an elevated pool: %v, want Forbidden", err)
	}
	waitPoolAvailable(t, ns, "elevated", 1)

	// Sandboxes from it: Carol only.
	if _, err := sandboxClientFor(t, framework.AliceToken).SandboxV1alpha1().Sandboxes(ns).Create(ctx, pooledSandbox("a", "elevated"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice's sandbox from the elevated pool: %v, want Forbidden", err)
	}
	if _, err := sandboxClientFor(t, framework.CarolToken).SandboxV1alpha1().Sandboxes(ns).Create(ctx, pooledSandbox("c", "elevated"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("carol's sandbox from the elevated pool: %v", err)
	}
	s := waitSandboxPhase(t, ns, "c", sandboxv1alpha1.PhaseRunning)
	if s.Annotations[controlv1alpha1.AnnotationPodSecurity] != "Namespace" {
		t.Errorf("annotations %v, want the server's record", s.Annotations)
	}
}

// TestTrustPlumbing: the APIService verifies sandbox-apiserver with the kube-sandbox CA, and a
// sandbox pod's execd answers nobody without a client certificate of it.
func TestTrustPlumbing(t *testing.T) {
	ctx := context.Background()
	svc := &apiregistrationv1.APIService{}
	if err := kube.Get(ctx, client.ObjectKey{Name: "v1alpha1.sandbox.kube-sandbox.io"}, svc); err != nil {
		t.Fatal(err)
	}
	ca := &corev1.Secret{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: framework.SystemNamespace, Name: "kube-sandbox-ca"}, ca); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.InsecureSkipTLSVerify || string(svc.Spec.CABundle) != string(ca.Data["ca.crt"]) {
		t.Errorf("APIService: insecure %v, caBundle is the CA's: %v", svc.Spec.InsecureSkipTLSVerify, string(svc.Spec.CABundle) == string(ca.Data["ca.crt"]))
	}

	ns := newNamespace(t)
	runningSandbox(t, ns, "tls")
	s, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(s.Status.Pods[0].IP, strconv.Itoa(execdapi.Port))
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec
	if err == nil {
		// TLS 1.3: the server's verdict on the (missing) client certificate comes with the
		// first read.
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
		if err == nil {
			_, err = conn.Read(make([]byte, 1))
		}
		_ = conn.Close()
	}
	if err == nil {
		t.Errorf("execd answered a client without a certificate")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	if resp, err := hc.Get("https://" + addr + "/metrics"); err == nil {
		_ = resp.Body.Close()
		t.Errorf("GET /metrics without a certificate: %s", resp.Status)
	}
}

// TestSandboxTooLarge: a spec too large for etcd is a typed 413 and stores nothing.
func TestSandboxTooLarge(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	s := sandbox("huge")
	s.Spec.Env = []corev1.EnvVar{{Name: "BIG", Value: strings.Repeat("x", 2<<20)}}
	_, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{})
	if !apierrors.IsRequestEntityTooLargeError(err) {
		t.Fatalf("create: %v, want 413", err)
	}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "huge"}, &controlv1alpha1.BatchSandbox{}); !apierrors.IsNotFound(err) {
		t.Errorf("stored: %v", err)
	}
}
