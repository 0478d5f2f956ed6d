package admission

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/pod-security-admission/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

func checker(t *testing.T, level string) *Checker {
	t.Helper()
	lv, err := ParseLevel(level)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewChecker(lv)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func podSpec() *corev1.PodSpec {
	return &corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}
}

// fields lists the field paths of errs, sorted.
func fields(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Field)
	}
	sort.Strings(out)
	return out
}

func TestCheck(t *testing.T) {
	restricted := map[string]string{api.EnforceLevelLabel: "restricted"}
	baselineNS := map[string]string{api.EnforceLevelLabel: "baseline"}
	tests := []struct {
		name        string
		level       string
		nsLabels    map[string]string
		spec        func(*corev1.PodSpec)
		env         []corev1.EnvVar
		wantInvalid []string
		wantRights  []string
	}{
		{name: "a plain template", level: "baseline"},
		{name: "privileged, unlabelled namespace: needs pod rights", level: "baseline",
			spec: func(s *corev1.PodSpec) {
				s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			},
			wantRights: []string{"spec.template.spec.containers[0].securityContext.privileged"}},
		{name: "privileged in a baseline namespace: nobody may", level: "baseline", nsLabels: baselineNS,
			spec: func(s *corev1.PodSpec) {
				s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			},
			wantInvalid: []string{"spec.template.spec.containers[0].securityContext.privileged"}},
		{name: "host namespaces, each at its field", level: "baseline",
			spec:       func(s *corev1.PodSpec) { s.HostNetwork, s.HostPID = true, true },
			wantRights: []string{"spec.template.spec.hostNetwork", "spec.template.spec.hostPID"}},
		{name: "hostPath at its volume", level: "baseline",
			spec: func(s *corev1.PodSpec) {
				s.Volumes = []corev1.Volume{
					{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}},
				}
			},
			wantRights: []string{"spec.template.spec.volumes[1]"}},
		{name: "added capabilities of the second container", level: "baseline",
			spec: func(s *corev1.PodSpec) {
				s.Containers = append(s.Containers, corev1.Container{Name: "side", Image: "x",
					SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"}}}})
			},
			wantRights: []string{"spec.template.spec.containers[1].securityContext.capabilities"}},
		{name: "an init container's host port", level: "baseline",
			spec: func(s *corev1.PodSpec) {
				s.InitContainers = []corev1.Container{{Name: "i", Image: "x", Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}}}
			},
			wantRights: []string{"spec.template.spec.initContainers[0].ports"}},
		{name: "a pod seccomp profile of Unconfined", level: "baseline",
			spec: func(s *corev1.PodSpec) {
				s.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
			},
			wantRights: []string{"spec.template.spec.securityContext.seccompProfile"}},
		{name: "restricted platform: root is beyond it", level: "restricted",
			wantRights: []string{"spec.template.spec.containers[0].securityContext.capabilities", "spec.template.spec.containers[0].securityContext.runAsNonRoot"}},
		{name: "restricted namespace: a template that meets it passes", level: "baseline", nsLabels: restricted,
			spec: func(s *corev1.PodSpec) {
				s.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
			}},
		{name: "restricted namespace: root is invalid there", level: "baseline", nsLabels: restricted,
			wantInvalid: []string{"spec.template.spec.containers[0].securityContext.capabilities", "spec.template.spec.containers[0].securityContext.runAsNonRoot"}},
		// restricted:v1.21 predates capabilities_restricted (v1.22), which replaces baseline's
		// capabilities check only from then on: baseline's still applies at v1.21.
		{name: "restricted namespace pinned before a restricted check: the baseline one applies", level: "baseline",
			nsLabels: map[string]string{api.EnforceLevelLabel: "restricted", api.EnforceVersionLabel: "v1.21"},
			spec: func(s *corev1.PodSpec) {
				s.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(true),
					Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
			},
			wantInvalid: []string{"spec.template.spec.containers[0].securityContext.capabilities"}},
		{name: "another service account", level: "baseline",
			spec:       func(s *corev1.PodSpec) { s.ServiceAccountName = "admin" },
			wantRights: []string{"spec.template.spec.serviceAccountName"}},
		{name: "the default service account is fine", level: "baseline",
			spec: func(s *corev1.PodSpec) { s.ServiceAccountName = "default" }},
		{name: "a mounted API token", level: "baseline",
			spec:       func(s *corev1.PodSpec) { s.AutomountServiceAccountToken = ptr.To(true) },
			wantRights: []string{"spec.template.spec.automountServiceAccountToken"}},
		{name: "Secrets, ConfigMaps and claims, wherever they come from", level: "baseline",
			spec: func(s *corev1.PodSpec) {
				s.Volumes = []corev1.Volume{
					{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}},
					{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
					{Name: "p", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
					{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}}}}}},
					{Name: "d", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
				}
				s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
				s.Containers[0].Env = []corev1.EnvVar{{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "pw"}}}}
				s.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
			},
			env: []corev1.EnvVar{{Name: "OK", Value: "v"}, {Name: "K", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "k"}}}},
			wantRights: []string{
				"spec.env[1].valueFrom.configMapKeyRef",
				"spec.template.spec.containers[0].envFrom[0].configMapRef",
				"spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef",
				"spec.template.spec.imagePullSecrets[0]",
				"spec.template.spec.volumes[0]", "spec.template.spec.volumes[1]", "spec.template.spec.volumes[2]", "spec.template.spec.volumes[3]",
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := podSpec()
			if tc.spec != nil {
				tc.spec(spec)
			}
			before := spec.DeepCopy()
			res := checker(t, tc.level).Check(tc.nsLabels, Template{
				Spec: spec, Path: field.NewPath("spec", "template", "spec"), Env: tc.env, EnvPath: field.NewPath("spec", "env"),
			})
			if diff := cmp.Diff(tc.wantInvalid, fields(res.Invalid)); diff != "" {
				t.Errorf("invalid (-want +got):\n%s\n%v", diff, res.Invalid)
			}
			if diff := cmp.Diff(tc.wantRights, fields(res.NeedsPodRights)); diff != "" {
				t.Errorf("needs pod rights (-want +got):\n%s\n%v", diff, res.NeedsPodRights)
			}
			if res.Allowed() != (len(tc.wantInvalid) == 0 && len(tc.wantRights) == 0) {
				t.Errorf("Allowed() = %v", res.Allowed())
			}
			if !cmp.Equal(before, spec) {
				t.Error("Check changed the template")
			}
			for _, e := range append(res.Invalid, res.NeedsPodRights...) {
				if e.Type != field.ErrorTypeForbidden || e.Detail == "" {
					t.Errorf("error %v: want Forbidden with a detail", e)
				}
			}
		})
	}
}

// TestMessagesNameTheLevel: a user learns what the level refuses and which level it was.
func TestMessagesNameTheLevel(t *testing.T) {
	spec := podSpec()
	spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	res := checker(t, "baseline").Check(nil, Template{Spec: spec, Path: field.NewPath("spec")})
	if len(res.NeedsPodRights) != 1 {
		t.Fatalf("errors %v", res.NeedsPodRights)
	}
	if msg := res.NeedsPodRights[0].Error(); !strings.Contains(msg, `privileged (container "sandbox"`) || !strings.Contains(msg, `"baseline:latest"`) {
		t.Errorf("message %q: want the check, the container and the level", msg)
	}
}

// TestInjectedPodMeetsRestricted: the execd installer and the wiring Inject adds meet the
// restricted level, so that a template that meets it yields a pod that does.
func TestInjectedPodMeetsRestricted(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python", SecurityContext: &corev1.SecurityContext{
		RunAsNonRoot: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}}}}
	sandboxpod.Inject(spec, sandboxpod.Options{ExecdImage: "execd", ClientCA: []byte("ca")})
	res := checker(t, "restricted").Check(map[string]string{api.EnforceLevelLabel: "restricted"}, Template{Spec: spec, Path: field.NewPath("spec")})
	// The projected identity token is ours, not the template's: only references count here.
	var others field.ErrorList
	for _, e := range res.NeedsPodRights {
		if !strings.HasPrefix(e.Field, "spec.volumes") {
			others = append(others, e)
		}
	}
	if len(res.Invalid) != 0 || len(others) != 0 {
		t.Errorf("the injected pod fails restricted: %v %v", res.Invalid, others)
	}
	if spec.InitContainers[0].Name != execdapi.InitContainerName {
		t.Fatalf("init containers %v", spec.InitContainers)
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]string{"baseline": "baseline:latest", "restricted:v1.30": "restricted:v1.30", "privileged": "privileged:latest"} {
		lv, err := ParseLevel(in)
		if err != nil || lv.String() != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %s", in, lv, err, want)
		}
	}
	for _, in := range []string{"", "strict", "baseline:1.30", "baseline:v2"} {
		if _, err := ParseLevel(in); err == nil {
			t.Errorf("ParseLevel(%q): want an error", in)
		}
	}
}

func TestNamespacePolicy(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{nil, "privileged:latest"},
		{map[string]string{api.EnforceLevelLabel: "baseline"}, "baseline:latest"},
		{map[string]string{api.EnforceLevelLabel: "restricted", api.EnforceVersionLabel: "v1.31"}, "restricted:v1.31"},
		{map[string]string{api.EnforceLevelLabel: "nonsense"}, "restricted:latest"}, // as PodSecurity reads it
	} {
		if got := NamespacePolicy(tc.labels).String(); got != tc.want {
			t.Errorf("NamespacePolicy(%v) = %s, want %s", tc.labels, got, tc.want)
		}
	}
}

func TestEgressSpecErrors(t *testing.T) {
	path := field.NewPath("spec", "template", "spec")
	if errs := EgressSpecErrors(&corev1.PodSpec{}, path); len(errs) != 0 {
		t.Errorf("a plain pod: %v", errs)
	}
	errs := EgressSpecErrors(&corev1.PodSpec{HostNetwork: true, ShareProcessNamespace: ptr.To(true)}, path)
	if len(errs) != 2 || errs[0].Field != "spec.template.spec.hostNetwork" || errs[1].Field != "spec.template.spec.shareProcessNamespace" {
		t.Errorf("errors %v, want hostNetwork and shareProcessNamespace", errs)
	}
	ferr, err := CheckEgress(context.Background(), nil, &corev1.PodSpec{HostNetwork: true}, path)
	if err != nil || ferr == nil || ferr.Field != "spec.template.spec.hostNetwork" {
		t.Errorf("CheckEgress of a pod on the node's network: %v, %v", ferr, err)
	}
}

// TestSnapshotImages: no template names an image of the snapshot registry, whoever asks; the
// registry's host is compared as containerd reads it.
func TestSnapshotImages(t *testing.T) {
	c := checker(t, "baseline")
	c.SnapshotRegistry = "10.250.0.1:5000"
	tests := []struct {
		name        string
		spec        func(*corev1.PodSpec)
		registry    string // the snapshot registry as configured; "": 10.250.0.1:5000
		wantInvalid []string
	}{
		{name: "an ordinary image", spec: func(s *corev1.PodSpec) { s.Containers[0].Image = "python:3.11" }},
		{name: "another registry", spec: func(s *corev1.PodSpec) { s.Containers[0].Image = "10.250.0.1:5001/kube-sandbox/snapshots/a/b:c" }},
		{name: "a snapshot in the sandbox container", spec: func(s *corev1.PodSpec) {
			s.Containers[0].Image = "10.250.0.1:5000/kube-sandbox/snapshots/other/sbx@sha256:0123"
		}, wantInvalid: []string{"spec.containers[0].image"}},
		{name: "a snapshot by its full digest", spec: func(s *corev1.PodSpec) {
			s.Containers[0].Image = "10.250.0.1:5000/kube-sandbox/snapshots/other/sbx@sha256:" + strings.Repeat("ab", 32)
		}, wantInvalid: []string{"spec.containers[0].image"}},
		{name: "the registry's host in another case", spec: func(s *corev1.PodSpec) { s.Containers[0].Image = "LOCALHOST:5000/x" },
			registry: "localhost:5000", wantInvalid: []string{"spec.containers[0].image"}},
		{name: "no image reference: which registry is unknown", spec: func(s *corev1.PodSpec) { s.Containers[0].Image = "Python:3" },
			wantInvalid: []string{"spec.containers[0].image"}},
		{name: "anything of the registry, in an init container", spec: func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init", Image: "10.250.0.1:5000/elsewhere:1"}}
		}, wantInvalid: []string{"spec.initContainers[0].image"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := podSpec()
			tc.spec(spec)
			c.SnapshotRegistry = "10.250.0.1:5000"
			if tc.registry != "" {
				c.SnapshotRegistry = tc.registry
			}
			res := c.Check(nil, Template{Spec: spec, Path: field.NewPath("spec")})
			if diff := cmp.Diff(tc.wantInvalid, fields(res.Invalid)); diff != "" {
				t.Errorf("invalid fields (-want +got):\n%s", diff)
			}
		})
	}
	for image, want := range map[string]string{"python": "docker.io", "library/python:3": "docker.io", "index.docker.io/a/b": "docker.io",
		"Localhost/x": "localhost", "localhost/x": "localhost", "LOCALHOST:5000/x": "localhost:5000", "Reg.Example:5000/a/b": "reg.example:5000",
		"10.250.0.1:5000/a@sha256:" + strings.Repeat("0", 64): "10.250.0.1:5000", "[fd00::1]:5000/a:b": "[fd00::1]:5000"} {
		if got, err := ImageRegistry(image); err != nil || got != want {
			t.Errorf("ImageRegistry(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
	for _, image := range []string{"", "10.250.0.1:5000/UPPER/case", "10.250.0.1:5000/a@sha256:0123", "a b"} {
		if got, err := ImageRegistry(image); err == nil {
			t.Errorf("ImageRegistry(%q) = %q, want an error", image, got)
		}
	}
}

// TestDefaultRuntimeClass: with a platform runtime class, a template that names none is
// checked as its pods will run (under the default), and one that names another class needs the
// right to create pods; without one, any allowed class is anyone's.
func TestDefaultRuntimeClass(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	reader := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: "runc"},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata-qemu"},
	).Build()
	path := field.NewPath("spec", "template", "spec")
	tests := []struct {
		name        string
		platform    string
		template    *string
		wantInvalid []string
		wantRights  []string
	}{
		{name: "no default, no class", platform: ""},
		{name: "no default, runc", platform: "", template: ptr.To("runc")},
		{name: "the default for a template naming none", platform: "gvisor"},
		{name: "the default named", platform: "gvisor", template: ptr.To("gvisor")},
		{name: "runc where gvisor is the default", platform: "gvisor", template: ptr.To("runc"),
			wantRights: []string{"spec.template.spec.runtimeClassName"}},
		{name: "a default outside the allowlist refuses what it would run", platform: "kata",
			wantInvalid: []string{"spec.template.spec.runtimeClassName"}},
		{name: "a class outside the allowlist, whoever asks", platform: "gvisor", template: ptr.To("kata"),
			wantInvalid: []string{"spec.template.spec.runtimeClassName"}, wantRights: []string{"spec.template.spec.runtimeClassName"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := checker(t, "baseline")
			c.RuntimeClass = tc.platform
			spec := podSpec()
			spec.RuntimeClassName = tc.template
			res, err := c.CheckIn(t.Context(), reader, "team", Template{Spec: spec, Path: path})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantInvalid, fields(res.Invalid)); diff != "" {
				t.Errorf("invalid fields (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRights, fields(res.NeedsPodRights)); diff != "" {
				t.Errorf("fields that need pod rights (-want +got):\n%s", diff)
			}
			if spec.RuntimeClassName != tc.template {
				t.Errorf("CheckIn changed the template's runtimeClassName to %v", spec.RuntimeClassName)
			}
		})
	}
}

func TestValidateRuntimeClassName(t *testing.T) {
	for name, ok := range map[string]bool{"": true, "gvisor": true, "kata.qemu": true, "GVisor": false, "a/b": false} {
		if err := ValidateRuntimeClassName(name); (err == nil) != ok {
			t.Errorf("ValidateRuntimeClassName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
