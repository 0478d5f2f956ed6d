// Package sandboxpod holds what sandbox pods have in common, whether a BatchSandbox makes them
// from its template or a Pool keeps them warm: sandbox-execd installed by an init container and
// wrapping the first container, its identity and client CA, the hardening every sandbox gets,
// and how to read a pod's state.
package sandboxpod

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// DefaultTerminationGracePeriod: sandboxes hold no state worth a long shutdown, and a fast
// delete frees the node for the next one. A template that sets its own keeps it.
const DefaultTerminationGracePeriod = int64(5)

// ExecdInstallPath is where the execd binary sits in the kube-sandbox image.
const ExecdInstallPath = "/usr/local/bin/sandbox-execd"

// InjectionVersion names how Inject wires a pod; it is part of a pool's revision, so that idle
// pods made by an older controller are replaced by its successor's. Raise it when Inject
// changes in a way old pods cannot serve.
const InjectionVersion = "7"

// identityTokenSeconds is the life of the projected identity token: the kubelet renews it at
// 80%; the controller reads it only to certify a pod, right after the pod starts.
const identityTokenSeconds = 3600

// installerUID runs the execd installer: any user but root, so that the init container meets
// the restricted level.
const installerUID = int64(65532)

// Options say how Inject wires execd into a pod.
type Options struct {
	// ExecdImage holds ExecdInstallPath; an init container copies it into the pod.
	ExecdImage string
	// ClientCA is the PEM of the kube-sandbox CA: execd accepts clients it issued.
	ClientCA []byte
	// Sandbox, for a pod made for a sandbox, names it (execd serves it from the start); nil
	// for a pool pod.
	Sandbox *Sandbox
	// Entrypoint is what execd runs; empty: the first container's command and args.
	Entrypoint []string
	// Env is added to the first container, after the container's own.
	Env []corev1.EnvVar
	// ReadinessPeriodSeconds of the default readiness probe; 0: 1 s.
	ReadinessPeriodSeconds int32
	// Egress, if set, makes the pod's first init container wait until the node agent
	// (sandbox-node) has the pod's egress filter in force, before anything of the sandbox runs.
	Egress *Egress
	// RuntimeClass is the platform's default runtime class (DefaultRuntimeClass), for a
	// template that names none; "": the node's default runtime.
	RuntimeClass string
}

// DefaultRuntimeClass gives spec the platform's default runtime class (like gvisor) when it
// names none; name "" leaves it to the node's default runtime (runc). A template that names a
// class keeps it: the admission of templates (package admission) decides who may.
func DefaultRuntimeClass(spec *corev1.PodSpec, name string) {
	if name != "" && (spec.RuntimeClassName == nil || *spec.RuntimeClassName == "") {
		spec.RuntimeClassName = ptr.To(name)
	}
}

// Egress says what a pod's egress filter starts with.
type Egress struct {
	// Config is what the pod enforces from its start: a direct-mode sandbox's policy (which
	// sandbox-controller pushes to the node agent once the pod has an address), or deny-all for
	// a pool pod (which the node agent applies by itself). The init container waits for its
	// revision, or for any the controller pushed after it.
	Config egressapi.Config
}

// LabelEgress marks a pod for the node agent, which filters the pods of its node that carry
// egressapi.PodLabel: set whenever e is, whatever the template said.
func LabelEgress(labels map[string]string, e *Egress) {
	if e != nil {
		labels[egressapi.PodLabel] = "true"
	}
}

// Sandbox names the sandbox of a pod.
type Sandbox struct {
	UID, Namespace, Name string
}

// Harden applies, in place, the defaults that suit code nobody reviewed: no API credentials
// and no service environment unless the template asks, the runtime's seccomp profile, no
// privilege escalation and no raw sockets unless a container asks for privileges. The admission
// of templates (package admission) sees a template as Harden leaves it.
func Harden(spec *corev1.PodSpec) {
	if spec.AutomountServiceAccountToken == nil {
		spec.AutomountServiceAccountToken = ptr.To(false)
	}
	if spec.EnableServiceLinks == nil {
		spec.EnableServiceLinks = ptr.To(false)
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.SecurityContext.SeccompProfile == nil {
		spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			hardenContainer(&list[i])
		}
	}
}

// Hardened returns a hardened copy of spec.
func Hardened(spec *corev1.PodSpec) *corev1.PodSpec {
	out := spec.DeepCopy()
	Harden(out)
	return out
}

func hardenContainer(c *corev1.Container) {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	sc := c.SecurityContext
	privileged := sc.Privileged != nil && *sc.Privileged
	if sc.AllowPrivilegeEscalation == nil && !privileged {
		sc.AllowPrivilegeEscalation = ptr.To(false)
	}
	if privileged {
		return
	}
	if sc.Capabilities == nil {
		sc.Capabilities = &corev1.Capabilities{}
	}
	caps := sc.Capabilities
	// Raw sockets forge packets and sniff the pod's network; the runtime grants NET_RAW by
	// default. A container that asks for it (and may) keeps it.
	if !slices.Contains(caps.Add, "NET_RAW") && !slices.Contains(caps.Drop, "NET_RAW") && !slices.Contains(caps.Drop, "ALL") {
		caps.Drop = append(caps.Drop, "NET_RAW")
	}
}

// Inject installs execd into spec (a copy the caller owns): an init container copies the
// static binary into an emptyDir, and the first container runs under it, so any image works
// unchanged. It hardens the pod (Harden), gives it the platform's runtime class if it names
// none (DefaultRuntimeClass), and gives execd its identity: the projected token
// that proves which pod it runs in, a small state volume that keeps its key, and the CA whose
// clients it accepts.
func Inject(spec *corev1.PodSpec, o Options) {
	Harden(spec)
	DefaultRuntimeClass(spec, o.RuntimeClass)
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To(DefaultTerminationGracePeriod)
	}

	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: execdapi.BinaryVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			// The static execd binary is ~15 MiB.
			SizeLimit: ptr.To(resource.MustParse("64Mi")),
		}}},
		corev1.Volume{Name: execdapi.StateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			// A key and a certificate: a few kilobytes, in memory.
			Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi")),
		}}},
		corev1.Volume{Name: execdapi.LogVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			// A task's output, on the node's disk: two attempts of at most
			// execdapi.MaxTaskLogBytes each.
			SizeLimit: ptr.To(resource.MustParse(execdapi.LogVolumeSizeLimit)),
		}}},
		corev1.Volume{Name: execdapi.IdentityVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				// Only sandbox-controller accepts this audience: the token opens nothing.
				Audience: execdapi.IdentityAudience, ExpirationSeconds: ptr.To(int64(identityTokenSeconds)), Path: execdapi.IdentityTokenFile,
			}}},
		}}},
	)
	install := corev1.Container{
		Name:    execdapi.InitContainerName,
		Image:   o.ExecdImage,
		Command: []string{ExecdInstallPath, "install", "--to", execdapi.BinaryPath},
		VolumeMounts: []corev1.VolumeMount{{
			Name:      execdapi.BinaryVolume,
			MountPath: execdapi.InstallDir,
		}},
		Resources: corev1.ResourceRequirements{
			// An init container's requests count toward the pod's (the larger of init and app
			// containers): with 10m, a pool of 200 pods whose template requests nothing would
			// reserve a whole 2-CPU node. Copying a file needs next to nothing.
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		// The restricted level, so that a template that meets it yields a pod that does.
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(installerUID),
			RunAsGroup:               ptr.To(installerUID),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if o.Egress != nil {
		// First of all init containers: the template's own come after it, and they are the
		// sandbox's code too. Its connection to the node agent is made before the filter is
		// in, or to the wait port that the filter always lets through.
		install.Command = append(install.Command, "--wait-egress", "--egress-revision", o.Egress.Config.Revision)
		install.Env = []corev1.EnvVar{
			{Name: execdapi.EnvHostIP, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
			{Name: execdapi.EnvPodUID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
			{Name: execdapi.EnvClientCA, Value: string(o.ClientCA)},
		}
	}
	spec.InitContainers = append([]corev1.Container{install}, spec.InitContainers...)

	c := &spec.Containers[0]
	entrypoint := o.Entrypoint
	if len(entrypoint) == 0 {
		entrypoint = append(append([]string{}, c.Command...), c.Args...)
	}
	c.Command = append([]string{execdapi.BinaryPath, "serve", "--"}, entrypoint...)
	c.Args = nil
	for i := range o.Env {
		c.Env = append(c.Env, *o.Env[i].DeepCopy())
	}
	// Last, so that no env of the template's or the sandbox's overrides them (the admission
	// refuses those names there anyway): who execd serves and whom it trusts.
	if s := o.Sandbox; s != nil {
		c.Env = append(c.Env,
			corev1.EnvVar{Name: execdapi.EnvSandboxUID, Value: s.UID},
			corev1.EnvVar{Name: execdapi.EnvSandboxName, Value: s.Name},
			corev1.EnvVar{Name: execdapi.EnvSandboxNamespace, Value: s.Namespace},
		)
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: execdapi.EnvClientCA, Value: string(o.ClientCA)})
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: execdapi.BinaryVolume, MountPath: execdapi.InstallDir, ReadOnly: true},
		corev1.VolumeMount{Name: execdapi.StateVolume, MountPath: execdapi.StateDir},
		corev1.VolumeMount{Name: execdapi.LogVolume, MountPath: execdapi.LogDir},
		corev1.VolumeMount{Name: execdapi.IdentityVolume, MountPath: execdapi.IdentityDir, ReadOnly: true},
	)
	if c.ReadinessProbe == nil {
		// Ready means execd answers: the sandbox can take commands. A short period makes a new
		// sandbox usable soon after its container starts.
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: execdapi.ReadyzPath,
				Port: intstr.FromInt32(execdapi.HealthPort),
			}},
			PeriodSeconds:    max(o.ReadinessPeriodSeconds, 1),
			FailureThreshold: 3,
			TimeoutSeconds:   1,
		}
	}
}

// Ready reports whether the pod is ready and not being deleted.
func Ready(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SandboxContainerStatus is the status of the pod's first container, the sandbox container.
func SandboxContainerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	if len(p.Spec.Containers) == 0 {
		return nil
	}
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == p.Spec.Containers[0].Name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// RuntimeID is the container ID of the sandbox container, "" before it started.
func RuntimeID(p *corev1.Pod) string {
	if cs := SandboxContainerStatus(p); cs != nil {
		return cs.ContainerID
	}
	return ""
}

// imagePullReasons are the waiting reasons of a container whose image cannot be had.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
}

// Problem says why a pod cannot run, in terms a user can act on.
type Problem struct {
	Reason, Message string
	// Pending: the sandbox waits for something that will come (phase Pending); otherwise it
	// cannot run as it is (phase Failed).
	Pending bool
}

// Failure says why a pod cannot run, or nil.
func Failure(p *corev1.Pod) *Problem {
	if p.Status.Phase == corev1.PodFailed {
		return &Problem{Reason: controlv1alpha1.ReasonPodFailed, Message: fmt.Sprintf("pod %s failed: %s %s", p.Name, p.Status.Reason, p.Status.Message)}
	}
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && imagePullReasons[w.Reason] {
			return &Problem{Reason: controlv1alpha1.ReasonImagePullFailed,
				Message: fmt.Sprintf("pod %s container %s: %s: %s", p.Name, cs.Name, w.Reason, w.Message)}
		}
	}
	return nil
}

// Slim is the cache transform of pods, in sandbox-controller and in sandbox-apiserver: of a
// pod they read its metadata, its status, its node and the names of its containers (the
// sandbox container is the first; which sidecars it has), and nothing else of its spec. Every write of a pod is a patch or a
// delete, never an update of a cached copy, so nothing that is dropped here can be written
// back. At 10,000 sandboxes the rest of the spec (env with the CA bundle, volumes,
// probes, security contexts) is most of the cache.
func Slim(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: pod.ObjectMeta, Status: pod.Status}
	slim.ManagedFields = nil
	slim.Spec.NodeName = pod.Spec.NodeName
	for _, c := range pod.Spec.InitContainers {
		slim.Spec.InitContainers = append(slim.Spec.InitContainers, corev1.Container{Name: c.Name})
	}
	for _, c := range pod.Spec.Containers {
		slim.Spec.Containers = append(slim.Spec.Containers, corev1.Container{Name: c.Name})
	}
	return slim, nil
}
