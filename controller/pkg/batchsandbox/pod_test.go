package batchsandbox

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

const testExecdImage = "registry.example/kube-sandbox/execd:v1"

// minimalBatchSandbox is a BatchSandbox whose template has only what the CRD requires.
func minimalBatchSandbox() *controlv1alpha1.BatchSandbox {
	return &controlv1alpha1.BatchSandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "team-a", UID: "demo-uid", Generation: 1},
		Spec: controlv1alpha1.BatchSandboxSpec{
			Replicas: ptr.To[int32](1),
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
			}},
		},
	}
}

// testClientCA stands for the kube-sandbox CA's PEM that execd trusts.
var testClientCA = []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n")

// identityEnv is what execd learns of its sandbox and of the CA, last in the env.
func identityEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "SANDBOX_UID", Value: "demo-uid"},
		{Name: "SANDBOX_NAME", Value: "demo"},
		{Name: "SANDBOX_NAMESPACE", Value: "team-a"},
		{Name: "SANDBOX_EXECD_CLIENT_CA", Value: string(testClientCA)},
	}
}

// execdMounts is how the sandbox container sees execd: its binary read-only, so user code
// cannot replace the process that guards it; its state; its task logs; its pod's identity token.
func execdMounts() []corev1.VolumeMount {
	return []corev1.VolumeMount{
		{Name: "kube-sandbox-execd", MountPath: "/.kube-sandbox/bin", ReadOnly: true},
		{Name: "kube-sandbox-execd-state", MountPath: "/.kube-sandbox/run"},
		{Name: "kube-sandbox-execd-log", MountPath: "/.kube-sandbox/log"},
		{Name: "kube-sandbox-identity", MountPath: "/.kube-sandbox/identity", ReadOnly: true},
	}
}

func execdVolumes() []corev1.Volume {
	return []corev1.Volume{
		{Name: "kube-sandbox-execd", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: ptr.To(resource.MustParse("64Mi")),
		}}},
		{Name: "kube-sandbox-execd-state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi")),
		}}},
		{Name: "kube-sandbox-execd-log", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			SizeLimit: ptr.To(resource.MustParse("64Mi")),
		}}},
		{Name: "kube-sandbox-identity", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: "execd.kube-sandbox.io", ExpirationSeconds: ptr.To[int64](3600), Path: "token",
			}}},
		}}},
	}
}

func installContainer() corev1.Container {
	return corev1.Container{
		Name:    "kube-sandbox-install-execd",
		Image:   testExecdImage,
		Command: []string{"/usr/local/bin/sandbox-execd", "install", "--to", "/.kube-sandbox/bin/sandbox-execd"},
		VolumeMounts: []corev1.VolumeMount{{
			Name:      "kube-sandbox-execd",
			MountPath: "/.kube-sandbox/bin",
		}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// hardened is the security context every container of a sandbox gets unless it says otherwise.
func hardened() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}},
	}
}

func defaultReadinessProbe() *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/readyz",
			Port: intstr.FromInt32(44772),
		}},
		PeriodSeconds:    1,
		FailureThreshold: 3,
		TimeoutSeconds:   1,
	}
}

// minimalPod is what buildPod must make of minimalBatchSandbox for replica 0. It is written
// out in full, not derived from the code under test.
func minimalPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "demo-0",
			Namespace: "team-a",
			Labels: map[string]string{
				controlv1alpha1.LabelBatchSandbox: "demo",
				controlv1alpha1.LabelReplica:      "0",
				controlv1alpha1.LabelManagedBy:    "sandbox-controller",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         "control.kube-sandbox.io/v1alpha1",
				Kind:               "BatchSandbox",
				Name:               "demo",
				UID:                "demo-uid",
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{installContainer()},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           "busybox",
				Command:         []string{"/.kube-sandbox/bin/sandbox-execd", "serve", "--"},
				Env:             identityEnv(),
				VolumeMounts:    execdMounts(),
				ReadinessProbe:  defaultReadinessProbe(),
				SecurityContext: hardened(),
			}},
			Volumes:                       execdVolumes(),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		},
	}
}

func TestBuildPod(t *testing.T) {
	execProbe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}

	tests := []struct {
		name    string
		replica int32
		// bs changes minimalBatchSandbox; want changes minimalPod accordingly.
		bs   func(*controlv1alpha1.BatchSandbox)
		want func(*corev1.Pod)
	}{
		{
			name: "minimal template gets execd and the safe defaults",
		},
		{
			name:    "replica index names and labels the pod",
			replica: 7,
			want: func(p *corev1.Pod) {
				p.Name = "demo-7"
				p.Labels[controlv1alpha1.LabelReplica] = "7"
			},
		},
		{
			name: "template labels and annotations are kept and ours win",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				bs.Spec.Template.Labels = map[string]string{
					"app":                             "web",
					controlv1alpha1.LabelBatchSandbox: "someone-else",
					controlv1alpha1.LabelReplica:      "42",
				}
				bs.Spec.Template.Annotations = map[string]string{"note": "kept"}
			},
			want: func(p *corev1.Pod) {
				p.Labels["app"] = "web"
				p.Annotations = map[string]string{"note": "kept"}
			},
		},
		{
			name: "entrypoint replaces the template's command and args",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				c := &bs.Spec.Template.Spec.Containers[0]
				c.Command = []string{"sh"}
				c.Args = []string{"-c", "sleep 1"}
				bs.Spec.Entrypoint = []string{"python", "-m", "http.server"}
			},
			want: func(p *corev1.Pod) {
				p.Spec.Containers[0].Command = []string{"/.kube-sandbox/bin/sandbox-execd", "serve", "--", "python", "-m", "http.server"}
			},
		},
		{
			name: "without entrypoint the template's command and args run under execd",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				c := &bs.Spec.Template.Spec.Containers[0]
				c.Command = []string{"sh"}
				c.Args = []string{"-c", "sleep 1"}
			},
			want: func(p *corev1.Pod) {
				p.Spec.Containers[0].Command = []string{"/.kube-sandbox/bin/sandbox-execd", "serve", "--", "sh", "-c", "sleep 1"}
			},
		},
		{
			name: "env is template env, spec env, then the sandbox's identity and the CA, which nothing overrides",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				bs.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "FROM_TEMPLATE", Value: "1"}}
				bs.Spec.Env = []corev1.EnvVar{{Name: "FROM_SPEC", Value: "2"}}
			},
			want: func(p *corev1.Pod) {
				p.Spec.Containers[0].Env = append([]corev1.EnvVar{
					{Name: "FROM_TEMPLATE", Value: "1"},
					{Name: "FROM_SPEC", Value: "2"},
				}, identityEnv()...)
			},
		},
		{
			name: "execd installer runs before the template's init containers; template volumes and mounts kept",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				spec := &bs.Spec.Template.Spec
				spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox", Command: []string{"touch", "/data/x"}}}
				spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
				spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
			},
			want: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{
					installContainer(),
					{Name: "setup", Image: "busybox", Command: []string{"touch", "/data/x"}, SecurityContext: hardened()},
				}
				p.Spec.Volumes = append([]corev1.Volume{
					{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				}, execdVolumes()...)
				p.Spec.Containers[0].VolumeMounts = append([]corev1.VolumeMount{{Name: "data", MountPath: "/data"}}, execdMounts()...)
			},
		},
		{
			name: "template's own probe and pod settings are kept",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				spec := &bs.Spec.Template.Spec
				spec.Containers[0].ReadinessProbe = execProbe.DeepCopy()
				spec.AutomountServiceAccountToken = ptr.To(true)
				spec.EnableServiceLinks = ptr.To(true)
				spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
			},
			want: func(p *corev1.Pod) {
				p.Spec.Containers[0].ReadinessProbe = execProbe.DeepCopy()
				p.Spec.AutomountServiceAccountToken = ptr.To(true)
				p.Spec.EnableServiceLinks = ptr.To(true)
				p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
			},
		},
		{
			name: "an explicit zero grace period is kept, not defaulted",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				bs.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
			},
			want: func(p *corev1.Pod) {
				p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
			},
		},
		{
			name: "only the first container is wrapped",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				bs.Spec.Template.Spec.Containers = append(bs.Spec.Template.Spec.Containers, corev1.Container{
					Name: "sidecar", Image: "envoy", Command: []string{"envoy"}, Args: []string{"-c", "/etc/envoy.yaml"},
				})
			},
			want: func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
					Name: "sidecar", Image: "envoy", Command: []string{"envoy"}, Args: []string{"-c", "/etc/envoy.yaml"},
					SecurityContext: hardened(),
				})
			},
		},
		{
			name: "a container's own security settings are kept; a privileged one is left alone",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				spec := &bs.Spec.Template.Spec
				spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}
				spec.Containers[0].SecurityContext = &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(true),
					Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}},
				}
				spec.Containers = append(spec.Containers, corev1.Container{Name: "priv", Image: "x", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}})
			},
			want: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(true),
					Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}},
				}
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "priv", Image: "x", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}})
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs := minimalBatchSandbox()
			if tc.bs != nil {
				tc.bs(bs)
			}
			want := minimalPod()
			if tc.want != nil {
				tc.want(want)
			}
			got := buildPod(bs, bs.Spec.Template, tc.replica, testExecdImage, testClientCA, nil, "")
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("buildPod() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBuildPodDoesNotMutateBatchSandbox guards the informer cache: the BatchSandbox handed to
// buildPod must come out as it went in, and the pods it returns must not share maps or slices
// with it (a later change to a pod would otherwise write through into the cached object).
func TestBuildPodDoesNotMutateBatchSandbox(t *testing.T) {
	tests := []struct {
		name string
		bs   func(*controlv1alpha1.BatchSandbox)
	}{
		{
			name: "minimal template",
		},
		{
			name: "template with everything buildPod touches",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				tmpl := bs.Spec.Template
				tmpl.Labels = map[string]string{"app": "web"}
				tmpl.Annotations = map[string]string{"note": "kept"}
				spec := &tmpl.Spec
				// Spare capacity makes an in-place append visible in the template.
				spec.InitContainers = make([]corev1.Container, 1, 4)
				spec.InitContainers[0] = corev1.Container{Name: "setup", Image: "busybox"}
				spec.Volumes = make([]corev1.Volume, 1, 4)
				spec.Volumes[0] = corev1.Volume{Name: "data"}
				c := &spec.Containers[0]
				c.Command = make([]string, 1, 8)
				c.Command[0] = "sh"
				c.Args = []string{"-c", "sleep 1"}
				c.Env = make([]corev1.EnvVar, 1, 8)
				c.Env[0] = corev1.EnvVar{Name: "A", Value: "1"}
				c.VolumeMounts = make([]corev1.VolumeMount, 1, 4)
				c.VolumeMounts[0] = corev1.VolumeMount{Name: "data", MountPath: "/data"}
			},
		},
		{
			name: "entrypoint and env in the spec",
			bs: func(bs *controlv1alpha1.BatchSandbox) {
				bs.Spec.Entrypoint = make([]string, 2, 8)
				copy(bs.Spec.Entrypoint, []string{"python", "app.py"})
				bs.Spec.Env = make([]corev1.EnvVar, 1, 8)
				bs.Spec.Env[0] = corev1.EnvVar{Name: "B", Value: "2"}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs := minimalBatchSandbox()
			if tc.bs != nil {
				tc.bs(bs)
			}
			before := bs.DeepCopy()

			p0 := buildPod(bs, bs.Spec.Template, 0, testExecdImage, testClientCA, nil, "")
			p1 := buildPod(bs, bs.Spec.Template, 1, testExecdImage, testClientCA, nil, "")
			if diff := cmp.Diff(before, bs); diff != "" {
				t.Fatalf("buildPod() changed the BatchSandbox (-before +after):\n%s", diff)
			}

			// Scribble on the first pod: neither the BatchSandbox nor the second pod may see it.
			p1Before := p1.DeepCopy()
			p0.Labels["scribbled"] = "yes"
			if p0.Annotations != nil {
				p0.Annotations["scribbled"] = "yes"
			}
			c := &p0.Spec.Containers[0]
			c.Command[len(c.Command)-1] = "scribbled"
			c.Env[0].Name = "SCRIBBLED"
			c.VolumeMounts[0].Name = "scribbled"
			p0.Spec.InitContainers[len(p0.Spec.InitContainers)-1].Name = "scribbled"
			p0.Spec.Volumes[0].Name = "scribbled"
			if diff := cmp.Diff(before, bs); diff != "" {
				t.Errorf("a change to a built pod reached the BatchSandbox (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(p1Before, p1); diff != "" {
				t.Errorf("a change to one built pod reached another (-before +after):\n%s", diff)
			}
		})
	}
}
