package sandbox

import (
	"fmt"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// maxReplicas matches the CRD's bound, so that a Sandbox the aggregated API accepts is never
// refused by the backend.
const maxReplicas = 1000

// setDefaults fills what a user may leave out.
func setDefaults(sbx *sandboxv1alpha1.Sandbox) {
	if sbx.Spec.Replicas == nil {
		one := int32(1)
		sbx.Spec.Replicas = &one
	}
}

// validateSandbox checks a Sandbox for creation. Names are DNS labels (not subdomains) because
// they become label values and pod name prefixes.
func validateSandbox(sbx *sandboxv1alpha1.Sandbox) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&sbx.ObjectMeta, true,
		apimachineryvalidation.NameIsDNSLabel, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpec(&sbx.Spec, field.NewPath("spec"))...)
	return allErrs
}

func validateSpec(spec *sandboxv1alpha1.SandboxSpec, fld *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.Replicas != nil && (*spec.Replicas < 0 || *spec.Replicas > maxReplicas) {
		allErrs = append(allErrs, field.Invalid(fld.Child("replicas"), *spec.Replicas,
			fmt.Sprintf("must be between 0 and %d", maxReplicas)))
	}

	tmpl := fld.Child("template")
	switch {
	case spec.Template == nil:
		allErrs = append(allErrs, field.Required(tmpl, "a pod template is required"))
	case len(spec.Template.Spec.Containers) == 0:
		allErrs = append(allErrs, field.Required(tmpl.Child("spec", "containers"), "the first container is the sandbox container"))
	default:
		containers := tmpl.Child("spec", "containers")
		for i, c := range spec.Template.Spec.Containers {
			for _, msg := range utilvalidation.IsDNS1123Label(c.Name) {
				allErrs = append(allErrs, field.Invalid(containers.Index(i).Child("name"), c.Name, msg))
			}
		}
		if spec.Template.Spec.Containers[0].Image == "" {
			allErrs = append(allErrs, field.Required(containers.Index(0).Child("image"), ""))
		}
		initContainers := tmpl.Child("spec", "initContainers")
		for i, c := range spec.Template.Spec.InitContainers {
			if c.Name == controlv1alpha1.ExecdInitContainerName {
				allErrs = append(allErrs, field.Invalid(initContainers.Index(i).Child("name"), c.Name, "this name is reserved for the execd installer"))
			}
		}
		volumes := tmpl.Child("spec", "volumes")
		for i, v := range spec.Template.Spec.Volumes {
			if v.Name == controlv1alpha1.ExecdVolumeName {
				allErrs = append(allErrs, field.Invalid(volumes.Index(i).Child("name"), v.Name, "this name is reserved for the execd binary"))
			}
		}
	}

	if len(spec.Entrypoint) > 0 && spec.Entrypoint[0] == "" {
		allErrs = append(allErrs, field.Invalid(fld.Child("entrypoint").Index(0), "", "the command must not be empty"))
	}
	for i, e := range spec.Env {
		for _, msg := range utilvalidation.IsEnvVarName(e.Name) {
			allErrs = append(allErrs, field.Invalid(fld.Child("env").Index(i).Child("name"), e.Name, msg))
		}
		if e.Name == controlv1alpha1.ExecdTokenEnv {
			allErrs = append(allErrs, field.Invalid(fld.Child("env").Index(i).Child("name"), e.Name, "this name is reserved for execd"))
		}
	}
	return allErrs
}

// validateExecOptions checks the query parameters of an exec.
func validateExecOptions(opts *sandboxv1alpha1.SandboxExecOptions) field.ErrorList {
	var allErrs field.ErrorList
	if len(opts.Command) == 0 || opts.Command[0] == "" {
		allErrs = append(allErrs, field.Required(field.NewPath("command"), "a command to run is required"))
	}
	if !opts.Stdin && !opts.Stdout && !opts.Stderr {
		allErrs = append(allErrs, field.Required(field.NewPath("stdout"), "at least one of stdin, stdout or stderr is required"))
	}
	if opts.Replica < 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("replica"), opts.Replica, "must not be negative"))
	}
	return allErrs
}
