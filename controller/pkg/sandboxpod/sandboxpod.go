// Package sandboxpod holds what sandbox pods have in common, whether a BatchSandbox makes them
// from its template or a Pool keeps them warm: sandbox-execd installed by an init container and
// wrapping the first container, the execd token, and how to read a pod's state.
package sandboxpod

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// DefaultTerminationGracePeriod: sandboxes hold no state worth a long shutdown, and a fast
// delete frees the node for the next one. A template that sets its own keeps it.
const DefaultTerminationGracePeriod = int64(5)

// ExecdInstallPath is where the execd binary sits in the kube-sandbox image.
const ExecdInstallPath = "/usr/local/bin/sandbox-execd"

// Options say how Inject wires execd into a pod.
type Options struct {
	// ExecdImage holds ExecdInstallPath; an init container copies it into the pod.
	ExecdImage string
	// Entrypoint is what execd runs; empty: the first container's command and args.
	Entrypoint []string
	// Env is added to the first container, after the container's own.
	Env []corev1.EnvVar
	// TokenSecret names the Secret whose ExecdTokenKey execd takes as its token.
	TokenSecret string
	// ReadinessPeriodSeconds of the default readiness probe; 0: 1 s.
	ReadinessPeriodSeconds int32
}

// Inject installs execd into spec (a copy the caller owns): an init container copies the
// static binary into an emptyDir, and the first container runs under it, so any image works
// unchanged. It also sets the defaults that suit code nobody reviewed.
func Inject(spec *corev1.PodSpec, o Options) {
	// Sandboxes run code nobody reviewed: no API credentials and no service environment unless
	// the template asks for them.
	if spec.AutomountServiceAccountToken == nil {
		spec.AutomountServiceAccountToken = ptr.To(false)
	}
	if spec.EnableServiceLinks == nil {
		spec.EnableServiceLinks = ptr.To(false)
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To(DefaultTerminationGracePeriod)
	}

	spec.Volumes = append(spec.Volumes, corev1.Volume{
		Name: controlv1alpha1.ExecdVolumeName,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			// The static execd binary is ~15 MiB.
			SizeLimit: ptr.To(resource.MustParse("64Mi")),
		}},
	})
	install := corev1.Container{
		Name:    controlv1alpha1.ExecdInitContainerName,
		Image:   o.ExecdImage,
		Command: []string{ExecdInstallPath, "install", "--to", controlv1alpha1.ExecdBinary},
		VolumeMounts: []corev1.VolumeMount{{
			Name:      controlv1alpha1.ExecdVolumeName,
			MountPath: controlv1alpha1.ExecdMountPath,
		}},
		Resources: corev1.ResourceRequirements{
			// An init container's requests count toward the pod's (the larger of init and app
			// containers): with 10m, a pool of 200 pods whose template requests nothing would
			// reserve a whole 2-CPU node. Copying a file needs next to nothing.
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	spec.InitContainers = append([]corev1.Container{install}, spec.InitContainers...)

	c := &spec.Containers[0]
	entrypoint := o.Entrypoint
	if len(entrypoint) == 0 {
		entrypoint = append(append([]string{}, c.Command...), c.Args...)
	}
	c.Command = append([]string{controlv1alpha1.ExecdBinary, "serve", "--"}, entrypoint...)
	c.Args = nil
	for i := range o.Env {
		c.Env = append(c.Env, *o.Env[i].DeepCopy())
	}
	c.Env = append(c.Env, corev1.EnvVar{
		Name: controlv1alpha1.ExecdTokenEnv,
		ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.TokenSecret},
			Key:                  controlv1alpha1.ExecdTokenKey,
		}},
	})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{
		Name:      controlv1alpha1.ExecdVolumeName,
		MountPath: controlv1alpha1.ExecdMountPath,
		ReadOnly:  true,
	})
	if c.ReadinessProbe == nil {
		// Ready means execd answers: the sandbox can take commands. A short period makes a new
		// sandbox usable soon after its container starts.
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/readyz",
				Port: intstr.FromInt32(controlv1alpha1.ExecdPort),
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
