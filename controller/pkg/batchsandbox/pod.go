package batchsandbox

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// defaultTerminationGracePeriod: sandboxes hold no state worth a long shutdown, and a fast
// delete frees the node for the next one. A template that sets its own keeps it.
const defaultTerminationGracePeriod = int64(5)

// execdInstallPath is where the execd binary sits in the kube-sandbox image.
const execdInstallPath = "/usr/local/bin/sandbox-execd"

// podName is the name of a replica's pod in direct mode: deterministic, so that creating it
// twice (a restarted controller, a stale cache) fails with AlreadyExists instead of making two.
func podName(bs *controlv1alpha1.BatchSandbox, replica int32) string {
	return fmt.Sprintf("%s-%d", bs.Name, replica)
}

// buildPod makes the pod of one replica from the template: execd is installed by an init
// container into an emptyDir and wraps the entrypoint of the first container, so any image
// works unchanged.
func buildPod(bs *controlv1alpha1.BatchSandbox, replica int32, execdImage string) *corev1.Pod {
	tmpl := bs.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        podName(bs, replica),
			Namespace:   bs.Namespace,
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(bs,
				controlv1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))},
		},
		Spec: tmpl.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[controlv1alpha1.LabelBatchSandbox] = bs.Name
	pod.Labels[controlv1alpha1.LabelReplica] = strconv.Itoa(int(replica))

	spec := &pod.Spec
	// Sandboxes run code nobody reviewed: no API credentials and no service environment unless
	// the template asks for them.
	if spec.AutomountServiceAccountToken == nil {
		spec.AutomountServiceAccountToken = ptr.To(false)
	}
	if spec.EnableServiceLinks == nil {
		spec.EnableServiceLinks = ptr.To(false)
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = ptr.To(defaultTerminationGracePeriod)
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
		Image:   execdImage,
		Command: []string{execdInstallPath, "install", "--to", controlv1alpha1.ExecdBinary},
		VolumeMounts: []corev1.VolumeMount{{
			Name:      controlv1alpha1.ExecdVolumeName,
			MountPath: controlv1alpha1.ExecdMountPath,
		}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	spec.InitContainers = append([]corev1.Container{install}, spec.InitContainers...)

	c := &spec.Containers[0]
	entrypoint := bs.Spec.Entrypoint
	if len(entrypoint) == 0 {
		entrypoint = append(append([]string{}, c.Command...), c.Args...)
	}
	c.Command = append([]string{controlv1alpha1.ExecdBinary, "serve", "--"}, entrypoint...)
	c.Args = nil
	for i := range bs.Spec.Env {
		c.Env = append(c.Env, *bs.Spec.Env[i].DeepCopy())
	}
	c.Env = append(c.Env, corev1.EnvVar{
		Name: controlv1alpha1.ExecdTokenEnv,
		ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: controlv1alpha1.TokenSecretName(bs.Name)},
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
			PeriodSeconds:    1,
			FailureThreshold: 3,
			TimeoutSeconds:   1,
		}
	}
	return pod
}
