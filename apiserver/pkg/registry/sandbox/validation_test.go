package sandbox

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// validSandbox is a Sandbox every validation accepts; the cases below break one thing in it.
func validSandbox() *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns", Labels: map[string]string{"team": "a"}},
		Spec: sandboxv1alpha1.SandboxSpec{
			Replicas: ptr.To[int32](1),
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "python:3.11"}},
			}},
			Entrypoint: []string{"python3", "-m", "http.server"},
			Env:        []corev1.EnvVar{{Name: "GREETING", Value: "hi"}},
		},
	}
}

// fieldErr is what a test pins of a field.Error: where and what kind, not the wording.
type fieldErr struct {
	Type  field.ErrorType
	Field string
}

func fieldErrs(errs field.ErrorList) []fieldErr {
	var out []fieldErr
	for _, e := range errs {
		out = append(out, fieldErr{Type: e.Type, Field: e.Field})
	}
	return out
}

func TestValidateSandbox(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*sandboxv1alpha1.Sandbox)
		want   []fieldErr
	}{
		{
			name:   "valid",
			modify: func(*sandboxv1alpha1.Sandbox) {},
		},
		{
			name:   "zero replicas is allowed",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Replicas = ptr.To[int32](0) },
		},
		{
			name: "a network policy",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.NetworkPolicy = &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny", Egress: []sandboxv1alpha1.SandboxEgressRule{
					{Action: "Allow", To: "pypi.org"}, {Action: "Allow", To: "*.pythonhosted.org"},
					{Action: "Allow", To: "10.250.0.1", Ports: []sandboxv1alpha1.SandboxEgressPort{{Port: 8080, Protocol: "TCP"}}},
					{Action: "Deny", To: "192.0.2.0/24"},
				}}
			},
		},
		{
			name: "a network policy with bad rules",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.NetworkPolicy = &sandboxv1alpha1.SandboxNetworkPolicy{Egress: []sandboxv1alpha1.SandboxEgressRule{
					{Action: "Allow", To: "api.*.example.com"},
					{Action: "Deny", To: "10.0.0.0/40"},
					{Action: "Allow", To: "example.com", Ports: []sandboxv1alpha1.SandboxEgressPort{{Port: 65536}}},
				}}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.networkPolicy.egress[0].to"},
				{field.ErrorTypeInvalid, "spec.networkPolicy.egress[1].to"},
				{field.ErrorTypeInvalid, "spec.networkPolicy.egress[2].ports[0].port"},
			},
		},
		{
			name:   "hostNetwork",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Template.Spec.HostNetwork = true },
			want:   []fieldErr{{field.ErrorTypeForbidden, "spec.template.spec.hostNetwork"}},
		},
		{
			name: "the execd installer's name (whose init container waits for the egress filter)",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: execdapi.InitContainerName, Image: "x"}}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.template.spec.initContainers[0].name"}},
		},
		{
			name:   "the maximum of replicas is allowed",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Replicas = ptr.To[int32](1000) },
		},
		{
			name:   "no entrypoint is allowed",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Entrypoint = nil },
		},
		{
			// Create generates the name before it validates, as the generic registry does.
			name: "generateName without a generated name",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Name = ""
				s.GenerateName = "demo-"
			},
			want: []fieldErr{{field.ErrorTypeRequired, "metadata.name"}},
		},
		{
			name:   "generateName that is not a DNS label prefix",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.GenerateName = "Demo_" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "metadata.generateName"}},
		},
		{
			name: "only the first container needs an image",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Template.Spec.Containers = append(s.Spec.Template.Spec.Containers, corev1.Container{Name: "side"})
			},
		},
		{
			name:   "name is not a DNS label",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Name = "Bad_Name" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "metadata.name"}},
		},
		{
			name:   "name is a DNS subdomain but not a label",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Name = "a.b" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "metadata.name"}},
		},
		{
			name:   "no name",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Name = "" },
			want:   []fieldErr{{field.ErrorTypeRequired, "metadata.name"}},
		},
		{
			name:   "no namespace",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Namespace = "" },
			want:   []fieldErr{{field.ErrorTypeRequired, "metadata.namespace"}},
		},
		{
			name:   "missing template",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Template = nil },
			want:   []fieldErr{{field.ErrorTypeRequired, "spec.template"}},
		},
		{
			name:   "no containers",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Template.Spec.Containers = nil },
			want:   []fieldErr{{field.ErrorTypeRequired, "spec.template.spec.containers"}},
		},
		{
			name:   "empty image of the first container",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Template.Spec.Containers[0].Image = "" },
			want:   []fieldErr{{field.ErrorTypeRequired, "spec.template.spec.containers[0].image"}},
		},
		{
			name:   "bad name of the first container",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Template.Spec.Containers[0].Name = "Bad_Name" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.template.spec.containers[0].name"}},
		},
		{
			name: "bad name of a later container",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Template.Spec.Containers = append(s.Spec.Template.Spec.Containers, corev1.Container{Name: "side.car", Image: "busybox"})
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.template.spec.containers[1].name"}},
		},
		{
			name:   "negative replicas",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Replicas = ptr.To[int32](-1) },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.replicas"}},
		},
		{
			name:   "too many replicas",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Replicas = ptr.To[int32](1001) },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.replicas"}},
		},
		{
			name: "reserved init container name",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Template.Spec.InitContainers = []corev1.Container{
					{Name: "setup", Image: "busybox"},
					{Name: execdapi.InitContainerName, Image: "busybox"},
				}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.template.spec.initContainers[1].name"}},
		},
		{
			name: "reserved volume names",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: execdapi.BinaryVolume}, {Name: "data"}, {Name: execdapi.StateVolume}, {Name: execdapi.IdentityVolume}}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.template.spec.volumes[0].name"}, {field.ErrorTypeInvalid, "spec.template.spec.volumes[2].name"},
				{field.ErrorTypeInvalid, "spec.template.spec.volumes[3].name"}},
		},
		{
			name: "reserved env names in the template",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "OK"}, {Name: execdapi.EnvClientCA, Value: "mine"}, {Name: execdapi.EnvSandboxUID, Value: "x"}}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.template.spec.containers[0].env[1].name"}, {field.ErrorTypeInvalid, "spec.template.spec.containers[0].env[2].name"}},
		},
		{
			name: "the server's annotation",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Annotations = map[string]string{controlv1alpha1.AnnotationPodSecurity: "Namespace"}
			},
			want: []fieldErr{{field.ErrorTypeForbidden, "metadata.annotations[control.kube-sandbox.io/pod-security]"}},
		},
		{
			name: "invalid env name",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Env = append(s.Spec.Env, corev1.EnvVar{Name: "1=BAD", Value: "x"})
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.env[1].name"}},
		},
		{
			name: "reserved env name",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Env = []corev1.EnvVar{{Name: execdapi.EnvClientCA, Value: "mine"}, {Name: execdapi.EnvSandboxName, Value: "other"}}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.env[0].name"}, {field.ErrorTypeInvalid, "spec.env[1].name"}},
		},
		{
			name:   "empty entrypoint command",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Entrypoint = []string{"", "-c", "true"} },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.entrypoint[0]"}},
		},
		{
			name: "a batch of tasks with patches",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Replicas = ptr.To[int32](3)
				s.Spec.ShardPatches = []runtime.RawExtension{{Raw: []byte(`{"metadata":{"labels":{"shard":"0"}}}`)}}
				s.Spec.TaskTemplate = &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"python3", "run.py"}, RestartPolicy: "OnFailure", BackoffLimit: ptr.To[int32](2)}
				s.Spec.ShardTaskPatches = []runtime.RawExtension{{Raw: []byte(`{"args":["0"]}`)}, {Raw: []byte(`{"env":[{"name":"SHARD","value":"1"}]}`)}}
				s.Spec.TaskResourcePolicyWhenCompleted = "Release"
			},
		},
		{
			name:   "a paused sandbox",
			modify: func(s *sandboxv1alpha1.Sandbox) { s.Spec.Paused = true },
		},
		{
			name: "a paused batch of tasks",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Paused = true
				s.Spec.TaskTemplate = &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"true"}}
			},
			want: []fieldErr{{field.ErrorTypeForbidden, "spec.paused"}},
		},
		{
			name: "bad tasks",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.TaskTemplate = &sandboxv1alpha1.SandboxTaskTemplate{
					Command: []string{""}, WorkingDir: "rel", TimeoutSeconds: ptr.To[int64](0), RestartPolicy: "Always",
					BackoffLimit: ptr.To[int32](101), Env: []sandboxv1alpha1.SandboxTaskEnvVar{{Name: "1X"}, {Name: "SANDBOX_UID"}},
					Lifecycle: &sandboxv1alpha1.SandboxTaskLifecycle{PreStart: &sandboxv1alpha1.SandboxTaskHook{}},
				}
				s.Spec.TaskResourcePolicyWhenCompleted = "Keep"
			},
			want: []fieldErr{
				{field.ErrorTypeNotSupported, "spec.taskResourcePolicyWhenCompleted"},
				{field.ErrorTypeRequired, "spec.taskTemplate.command"},
				{field.ErrorTypeInvalid, "spec.taskTemplate.env[0].name"},
				{field.ErrorTypeInvalid, "spec.taskTemplate.env[1].name"},
				{field.ErrorTypeInvalid, "spec.taskTemplate.workingDir"},
				{field.ErrorTypeInvalid, "spec.taskTemplate.timeoutSeconds"},
				{field.ErrorTypeNotSupported, "spec.taskTemplate.restartPolicy"},
				{field.ErrorTypeInvalid, "spec.taskTemplate.backoffLimit"},
				{field.ErrorTypeRequired, "spec.taskTemplate.lifecycle.preStart.command"},
			},
		},
		{
			name: "bad patches",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.ShardPatches = []runtime.RawExtension{
					{Raw: []byte(`{"spec":{"containers":[{"name":"main","$patch":"delete"}]}}`)},
					{Raw: []byte(`{"spec":{"volumes":[{"name":"kube-sandbox-execd","emptyDir":{}}]}}`)},
					{Raw: []byte(`{"spec":{"hostNetwork":true}}`)},
					{Raw: []byte(`{"spec":{"nodeSelector":"x"}}`)},
				}
				s.Spec.TaskTemplate = &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"true"}}
				s.Spec.ShardTaskPatches = []runtime.RawExtension{{Raw: []byte(`{"command":[]}`)}, {Raw: []byte(`{"workingDir":"x"}`)}, {Raw: []byte(`{"argz":[]}`)}}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.shardPatches[0]"},
				{field.ErrorTypeInvalid, "spec.shardPatches[1].spec.volumes[0].name"},
				{field.ErrorTypeForbidden, "spec.shardPatches[2].spec.hostNetwork"},
				{field.ErrorTypeInvalid, "spec.shardPatches[3]"},
				{field.ErrorTypeInvalid, "spec.shardTaskPatches[0]"},
				{field.ErrorTypeInvalid, "spec.shardTaskPatches[1].workingDir"},
				{field.ErrorTypeInvalid, "spec.shardTaskPatches[2]"},
			},
		},
		{
			name: "patches without what they patch",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Spec.Template = nil
				s.Spec.PoolRef = &sandboxv1alpha1.SandboxPoolReference{Name: "python"}
				s.Spec.ShardPatches = []runtime.RawExtension{{Raw: []byte(`{}`)}}
				s.Spec.ShardTaskPatches = []runtime.RawExtension{{Raw: []byte(`{}`)}}
				s.Spec.TaskResourcePolicyWhenCompleted = "Release"
			},
			want: []fieldErr{
				{field.ErrorTypeForbidden, "spec.shardPatches"},
				{field.ErrorTypeInvalid, "spec.taskResourcePolicyWhenCompleted"},
				{field.ErrorTypeForbidden, "spec.shardTaskPatches"},
			},
		},
		{
			name: "every error is reported",
			modify: func(s *sandboxv1alpha1.Sandbox) {
				s.Name = "Bad_Name"
				s.Spec.Replicas = ptr.To[int32](-1)
				s.Spec.Template = nil
				s.Spec.Entrypoint = []string{""}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "metadata.name"},
				{field.ErrorTypeInvalid, "spec.replicas"},
				{field.ErrorTypeRequired, "spec.template"},
				{field.ErrorTypeInvalid, "spec.entrypoint[0]"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sbx := validSandbox()
			tt.modify(sbx)
			errs := validateSandbox(sbx, Limits{})
			if diff := cmp.Diff(tt.want, fieldErrs(errs)); diff != "" {
				t.Errorf("validateSandbox() errors (-want +got):\n%s\nall errors: %v", diff, errs)
			}
		})
	}
}

func TestSetDefaults(t *testing.T) {
	tests := []struct {
		name     string
		replicas *int32
		want     *int32
	}{
		{name: "unset replicas become 1", replicas: nil, want: ptr.To[int32](1)},
		{name: "zero replicas are kept", replicas: ptr.To[int32](0), want: ptr.To[int32](0)},
		{name: "set replicas are kept", replicas: ptr.To[int32](3), want: ptr.To[int32](3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sbx := validSandbox()
			sbx.Spec.Replicas = tt.replicas
			want := validSandbox()
			want.Spec.Replicas = tt.want
			setDefaults(sbx)
			if diff := cmp.Diff(want, sbx); diff != "" {
				t.Errorf("setDefaults() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateExecOptions(t *testing.T) {
	tests := []struct {
		name string
		opts sandboxv1alpha1.SandboxExecOptions
		want []fieldErr
	}{
		{
			name: "valid",
			opts: sandboxv1alpha1.SandboxExecOptions{Command: []string{"ls", "-l"}, Stdout: true},
		},
		{
			name: "stdin alone is a stream",
			opts: sandboxv1alpha1.SandboxExecOptions{Command: []string{"cat"}, Stdin: true, Replica: 2},
		},
		{
			name: "stderr alone is a stream",
			opts: sandboxv1alpha1.SandboxExecOptions{Command: []string{"ls"}, Stderr: true},
		},
		{
			name: "no command",
			opts: sandboxv1alpha1.SandboxExecOptions{Stdout: true},
			want: []fieldErr{{field.ErrorTypeRequired, "command"}},
		},
		{
			name: "empty command",
			opts: sandboxv1alpha1.SandboxExecOptions{Command: []string{"", "x"}, Stdout: true},
			want: []fieldErr{{field.ErrorTypeRequired, "command"}},
		},
		{
			name: "no streams",
			opts: sandboxv1alpha1.SandboxExecOptions{Command: []string{"ls"}, TTY: true},
			want: []fieldErr{{field.ErrorTypeRequired, "stdout"}},
		},
		{
			name: "negative replica",
			opts: sandboxv1alpha1.SandboxExecOptions{Command: []string{"ls"}, Stdout: true, Replica: -1},
			want: []fieldErr{{field.ErrorTypeInvalid, "replica"}},
		},
		{
			name: "everything wrong",
			opts: sandboxv1alpha1.SandboxExecOptions{Replica: -1},
			want: []fieldErr{
				{field.ErrorTypeRequired, "command"},
				{field.ErrorTypeRequired, "stdout"},
				{field.ErrorTypeInvalid, "replica"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := validateExecOptions(&tt.opts)
			if diff := cmp.Diff(tt.want, fieldErrs(errs)); diff != "" {
				t.Errorf("validateExecOptions() errors (-want +got):\n%s\nall errors: %v", diff, errs)
			}
		})
	}
}
