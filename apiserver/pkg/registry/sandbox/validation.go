package sandbox

import (
	"bytes"
	"fmt"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/admission"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/shard"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// maxReplicas matches the CRD's bound, so that a Sandbox the aggregated API accepts is never
// refused by the backend.
const maxReplicas = 1000

// MinTimeoutSeconds is the shortest lifetime: a sandbox that expires sooner than a pod can
// start is a mistake.
const MinTimeoutSeconds = 60

// Limits are the server-side bounds a deployment sets.
type Limits struct {
	// MaxTimeout bounds timeoutSeconds and how far a renewal may reach; 0: no bound.
	MaxTimeout time.Duration
	// PauseStopsExpiry: a resumed sandbox's expiry moves forward by the time it was Paused
	// (sandbox-controller, with the same flag, expires no Paused sandbox).
	PauseStopsExpiry bool
}

// setDefaults fills what a user may leave out.
func setDefaults(sbx *sandboxv1alpha1.Sandbox) {
	if sbx.Spec.Replicas == nil {
		one := int32(1)
		sbx.Spec.Replicas = &one
	}
	// An empty patch (null) patches nothing: it is stored as {}, which the CRD's schema
	// (a list of objects) takes.
	for _, patches := range [][]runtime.RawExtension{sbx.Spec.ShardPatches, sbx.Spec.ShardTaskPatches} {
		for i := range patches {
			if raw := bytes.TrimSpace(patches[i].Raw); patches[i].Object == nil && (len(raw) == 0 || string(raw) == "null") {
				patches[i].Raw = []byte("{}")
			}
		}
	}
	if t := sbx.Spec.TaskTemplate; t != nil {
		if t.RestartPolicy == "" {
			t.RestartPolicy = string(controlv1alpha1.TaskRestartNever)
		}
		if t.BackoffLimit == nil {
			limit := int32(controlv1alpha1.DefaultTaskBackoffLimit)
			t.BackoffLimit = &limit
		}
		if sbx.Spec.TaskResourcePolicyWhenCompleted == "" {
			sbx.Spec.TaskResourcePolicyWhenCompleted = string(controlv1alpha1.TaskResourceRetain)
		}
	}
}

// validateSandbox checks a Sandbox for creation. Names are DNS labels (not subdomains) because
// they become label values and pod name prefixes.
func validateSandbox(sbx *sandboxv1alpha1.Sandbox, limits Limits) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&sbx.ObjectMeta, true,
		apimachineryvalidation.NameIsDNSLabel, field.NewPath("metadata"))
	if v, ok := sbx.Annotations[controlv1alpha1.AnnotationPodSecurity]; ok {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("metadata", "annotations").Key(controlv1alpha1.AnnotationPodSecurity),
			fmt.Sprintf("%q is set by the server, when the creator may create pods", v)))
	}
	allErrs = append(allErrs, validateSpec(&sbx.Spec, limits, field.NewPath("spec"))...)
	return allErrs
}

// validateSandboxUpdate checks an update: what made the pods cannot change under them, and
// the lifetime changes only through renew.
func validateSandboxUpdate(sbx, old *sandboxv1alpha1.Sandbox, limits Limits) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&sbx.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	if sbx.Annotations[controlv1alpha1.AnnotationPodSecurity] != old.Annotations[controlv1alpha1.AnnotationPodSecurity] {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("metadata", "annotations").Key(controlv1alpha1.AnnotationPodSecurity),
			"set by the server when the sandbox was created"))
	}
	spec := field.NewPath("spec")
	allErrs = append(allErrs, validateSpec(&sbx.Spec, limits, spec)...)
	immutable := func(newV, oldV interface{}, fld *field.Path) {
		if !apiequality.Semantic.DeepEqual(newV, oldV) {
			allErrs = append(allErrs, field.Invalid(fld, newV, "field is immutable"))
		}
	}
	immutable(sbx.Spec.PoolRef, old.Spec.PoolRef, spec.Child("poolRef"))
	immutable(sbx.Spec.Template, old.Spec.Template, spec.Child("template"))
	immutable(sbx.Spec.Entrypoint, old.Spec.Entrypoint, spec.Child("entrypoint"))
	immutable(sbx.Spec.Env, old.Spec.Env, spec.Child("env"))
	immutable(sbx.Spec.TimeoutSeconds, old.Spec.TimeoutSeconds, spec.Child("timeoutSeconds"))
	immutable(sbx.Spec.ShardPatches, old.Spec.ShardPatches, spec.Child("shardPatches"))
	if tasksStarted(old) {
		// Tasks run as they were started: a change would make the status describe tasks
		// that no longer match the spec. What happens to pods after a task (the resource
		// policy) and the number of replicas stay mutable.
		for _, f := range []struct {
			newV, oldV interface{}
			name       string
		}{{sbx.Spec.TaskTemplate, old.Spec.TaskTemplate, "taskTemplate"}, {sbx.Spec.ShardTaskPatches, old.Spec.ShardTaskPatches, "shardTaskPatches"}} {
			if !apiequality.Semantic.DeepEqual(f.newV, f.oldV) {
				allErrs = append(allErrs, field.Invalid(spec.Child(f.name), "", "field is immutable once tasks have started"))
			}
		}
	}
	return allErrs
}

// tasksStarted reports whether a task of sbx has started on some replica.
func tasksStarted(sbx *sandboxv1alpha1.Sandbox) bool {
	if sbx.Status.TaskRunning+sbx.Status.TaskSucceeded+sbx.Status.TaskFailed+sbx.Status.TaskUnknown > 0 {
		return true
	}
	for _, t := range sbx.Status.Tasks {
		if t.Attempts > 0 || t.Phase != string(controlv1alpha1.TaskPending) {
			return true
		}
	}
	return false
}

func validateSpec(spec *sandboxv1alpha1.SandboxSpec, limits Limits, fld *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if t := spec.TimeoutSeconds; t != nil {
		switch {
		case *t < MinTimeoutSeconds:
			allErrs = append(allErrs, field.Invalid(fld.Child("timeoutSeconds"), *t, fmt.Sprintf("must be at least %d", MinTimeoutSeconds)))
		case limits.MaxTimeout > 0 && time.Duration(*t)*time.Second > limits.MaxTimeout:
			allErrs = append(allErrs, field.Invalid(fld.Child("timeoutSeconds"), *t, fmt.Sprintf("must be at most %d (the server's maximum)", int64(limits.MaxTimeout/time.Second))))
		}
	}
	if ar := spec.AutoRenew; ar != nil {
		switch {
		case ar.ExtendSeconds < 1:
			allErrs = append(allErrs, field.Invalid(fld.Child("autoRenew", "extendSeconds"), ar.ExtendSeconds, "must be positive"))
		case limits.MaxTimeout > 0 && time.Duration(ar.ExtendSeconds)*time.Second > limits.MaxTimeout:
			allErrs = append(allErrs, field.Invalid(fld.Child("autoRenew", "extendSeconds"), ar.ExtendSeconds, fmt.Sprintf("must be at most %d (the server's maximum)", int64(limits.MaxTimeout/time.Second))))
		}
		if spec.TimeoutSeconds == nil {
			allErrs = append(allErrs, field.Invalid(fld.Child("autoRenew"), "", "a sandbox without timeoutSeconds never expires: there is nothing to renew"))
		}
	}
	if spec.Replicas != nil && (*spec.Replicas < 0 || *spec.Replicas > maxReplicas) {
		allErrs = append(allErrs, field.Invalid(fld.Child("replicas"), *spec.Replicas,
			fmt.Sprintf("must be between 0 and %d", maxReplicas)))
	}

	tmpl := fld.Child("template")
	switch {
	case spec.PoolRef != nil && spec.Template != nil:
		allErrs = append(allErrs, field.Forbidden(tmpl, "a sandbox takes its pods from poolRef or from template, not both"))
	case spec.PoolRef != nil:
		poolRef := fld.Child("poolRef", "name")
		if spec.PoolRef.Name == "" {
			allErrs = append(allErrs, field.Required(poolRef, "the name of a Pool of this namespace"))
		} else {
			for _, msg := range utilvalidation.IsDNS1123Subdomain(spec.PoolRef.Name) {
				allErrs = append(allErrs, field.Invalid(poolRef, spec.PoolRef.Name, msg))
			}
		}
		for i, e := range spec.Env {
			if e.ValueFrom != nil {
				allErrs = append(allErrs, field.Forbidden(fld.Child("env").Index(i).Child("valueFrom"),
					"a pooled sandbox takes literal values only: valueFrom is resolved when a pod starts, and a pool pod has started already"))
			}
		}
	case spec.Template == nil:
		allErrs = append(allErrs, field.Required(tmpl, "template or poolRef is required"))
	case len(spec.Template.Spec.Containers) == 0:
		allErrs = append(allErrs, field.Required(tmpl.Child("spec", "containers"), "the first container is the sandbox container"))
	default:
		allErrs = append(allErrs, validateTemplate(spec.Template, tmpl)...)
	}
	allErrs = append(allErrs, validateShardPatches(spec, fld)...)
	allErrs = append(allErrs, validateTasks(spec, fld)...)
	if spec.Paused && spec.TaskTemplate != nil {
		allErrs = append(allErrs, field.Forbidden(fld.Child("paused"),
			"a sandbox that runs tasks cannot pause: processes are not kept, and a task would start again from its beginning"))
	}

	if spec.NetworkPolicy != nil {
		allErrs = append(allErrs, egressapi.ValidatePolicy(spec.NetworkPolicy.EgressPolicy(), fld.Child("networkPolicy"))...)
	}
	if len(spec.Entrypoint) > 0 && spec.Entrypoint[0] == "" {
		allErrs = append(allErrs, field.Invalid(fld.Child("entrypoint").Index(0), "", "the command must not be empty"))
	}
	for i, e := range spec.Env {
		for _, msg := range utilvalidation.IsEnvVarName(e.Name) {
			allErrs = append(allErrs, field.Invalid(fld.Child("env").Index(i).Child("name"), e.Name, msg))
		}
		if why, reserved := execdapi.ReservedEnv(e.Name); reserved {
			allErrs = append(allErrs, field.Invalid(fld.Child("env").Index(i).Child("name"), e.Name, "this name is reserved: "+why))
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
	for i, kv := range opts.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			allErrs = append(allErrs, field.Invalid(field.NewPath("env").Index(i), kv, "want NAME=VALUE"))
			continue
		}
		for _, msg := range utilvalidation.IsEnvVarName(name) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("env").Index(i), kv, msg))
		}
	}
	if opts.WorkingDir != "" && !path.IsAbs(opts.WorkingDir) {
		allErrs = append(allErrs, field.Invalid(field.NewPath("workingDir"), opts.WorkingDir, "must be an absolute path"))
	}
	if opts.TimeoutSeconds < 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("timeoutSeconds"), opts.TimeoutSeconds, "must not be negative"))
	}
	return allErrs
}

// validateRenewal checks a renewal request on its own; what it means for a sandbox is decided
// against the sandbox's current expiry.
func validateRenewal(r *sandboxv1alpha1.SandboxRenewal, now time.Time, limits Limits) field.ErrorList {
	var allErrs field.ErrorList
	switch {
	case (r.ExpiresAt == nil) == (r.ExtendSeconds == nil):
		allErrs = append(allErrs, field.Invalid(field.NewPath("expiresAt"), r.ExpiresAt, "exactly one of expiresAt and extendSeconds is required"))
	case r.ExtendSeconds != nil && *r.ExtendSeconds < 1:
		allErrs = append(allErrs, field.Invalid(field.NewPath("extendSeconds"), *r.ExtendSeconds, "must be positive"))
	case r.ExpiresAt != nil && !r.ExpiresAt.After(now):
		allErrs = append(allErrs, field.Invalid(field.NewPath("expiresAt"), r.ExpiresAt.UTC().Format(time.RFC3339), "must be in the future"))
	}
	if len(allErrs) == 0 && limits.MaxTimeout > 0 && requestedExpiry(r, now).After(now.Add(limits.MaxTimeout)) {
		fld := field.NewPath("expiresAt")
		if r.ExtendSeconds != nil {
			fld = field.NewPath("extendSeconds")
		}
		allErrs = append(allErrs, field.Invalid(fld, requestedExpiry(r, now).UTC().Format(time.RFC3339),
			fmt.Sprintf("must be at most %s from now (the server's maximum)", limits.MaxTimeout)))
	}
	return allErrs
}

// requestedExpiry is the expiry a valid renewal asks for.
func requestedExpiry(r *sandboxv1alpha1.SandboxRenewal, now time.Time) time.Time {
	if r.ExpiresAt != nil {
		return r.ExpiresAt.Time
	}
	return now.Add(time.Duration(*r.ExtendSeconds) * time.Second)
}

// validateTemplate checks a pod template (the sandbox's, or one a shard patch made) at fld.
func validateTemplate(t *corev1.PodTemplateSpec, tmpl *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(t.Spec.Containers) == 0 {
		return append(allErrs, field.Required(tmpl.Child("spec", "containers"), "the first container is the sandbox container"))
	}
	containers := tmpl.Child("spec", "containers")
	for i, c := range t.Spec.Containers {
		for _, msg := range utilvalidation.IsDNS1123Label(c.Name) {
			allErrs = append(allErrs, field.Invalid(containers.Index(i).Child("name"), c.Name, msg))
		}
	}
	if t.Spec.Containers[0].Image == "" {
		allErrs = append(allErrs, field.Required(containers.Index(0).Child("image"), ""))
	}
	initContainers := tmpl.Child("spec", "initContainers")
	for i, c := range t.Spec.InitContainers {
		if c.Name == execdapi.InitContainerName {
			allErrs = append(allErrs, field.Invalid(initContainers.Index(i).Child("name"), c.Name, "this name is reserved for the execd installer"))
		}
	}
	for i, c := range t.Spec.Containers {
		for j, e := range c.Env {
			if why, reserved := execdapi.ReservedEnv(e.Name); reserved {
				allErrs = append(allErrs, field.Invalid(containers.Index(i).Child("env").Index(j).Child("name"), e.Name, "this name is reserved: "+why))
			}
		}
	}
	volumes := tmpl.Child("spec", "volumes")
	for i, v := range t.Spec.Volumes {
		switch v.Name {
		case execdapi.BinaryVolume, execdapi.StateVolume, execdapi.IdentityVolume, execdapi.LogVolume:
			allErrs = append(allErrs, field.Invalid(volumes.Index(i).Child("name"), v.Name, "this name is reserved for sandbox-execd"))
		}
	}
	allErrs = append(allErrs, admission.EgressSpecErrors(&t.Spec, tmpl.Child("spec"))...)
	return allErrs
}

// validateShardPatches checks that every shard patch applies to the template and makes a
// template that is valid in its turn (admit checks each against the pod security level).
func validateShardPatches(spec *sandboxv1alpha1.SandboxSpec, fld *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	patches := fld.Child("shardPatches")
	switch {
	case len(spec.ShardPatches) == 0:
		return nil
	case spec.PoolRef != nil:
		return append(allErrs, field.Forbidden(patches, "shardPatches patch the pod template: a pooled sandbox's pods come from its pool"))
	case spec.Template == nil || len(spec.Template.Spec.Containers) == 0:
		return nil // told already
	case len(spec.ShardPatches) > maxReplicas:
		return append(allErrs, field.TooMany(patches, len(spec.ShardPatches), maxReplicas))
	}
	for i := range spec.ShardPatches {
		t, err := shard.PodTemplate(spec.Template, spec.ShardPatches[i])
		if err != nil {
			allErrs = append(allErrs, field.Invalid(patches.Index(i), string(spec.ShardPatches[i].Raw), err.Error()))
			continue
		}
		allErrs = append(allErrs, validateTemplate(t, patches.Index(i))...)
	}
	return allErrs
}

// validateTasks checks the task template, each shard's patched task and the resource policy.
func validateTasks(spec *sandboxv1alpha1.SandboxSpec, fld *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch p := controlv1alpha1.TaskResourcePolicy(spec.TaskResourcePolicyWhenCompleted); {
	case p != "" && p != controlv1alpha1.TaskResourceRetain && p != controlv1alpha1.TaskResourceRelease:
		allErrs = append(allErrs, field.NotSupported(fld.Child("taskResourcePolicyWhenCompleted"), p,
			[]string{string(controlv1alpha1.TaskResourceRetain), string(controlv1alpha1.TaskResourceRelease)}))
	case p == controlv1alpha1.TaskResourceRelease && spec.TaskTemplate == nil:
		allErrs = append(allErrs, field.Invalid(fld.Child("taskResourcePolicyWhenCompleted"), p, "a sandbox without a taskTemplate has no task to complete"))
	}
	patches := fld.Child("shardTaskPatches")
	if spec.TaskTemplate == nil {
		if len(spec.ShardTaskPatches) > 0 {
			allErrs = append(allErrs, field.Forbidden(patches, "shardTaskPatches patch the taskTemplate, which is not set"))
		}
		return allErrs
	}
	task := toControlTaskTemplate(spec.TaskTemplate)
	allErrs = append(allErrs, validateTask(task, fld.Child("taskTemplate"))...)
	if len(allErrs) > 0 {
		return allErrs
	}
	if len(spec.ShardTaskPatches) > maxReplicas {
		return append(allErrs, field.TooMany(patches, len(spec.ShardTaskPatches), maxReplicas))
	}
	for i := range spec.ShardTaskPatches {
		t, err := shard.Task(task, spec.ShardTaskPatches[i])
		if err != nil {
			allErrs = append(allErrs, field.Invalid(patches.Index(i), string(spec.ShardTaskPatches[i].Raw), err.Error()))
			continue
		}
		allErrs = append(allErrs, validateTask(t, patches.Index(i))...)
	}
	return allErrs
}

// maxTaskBackoffLimit matches the CRD's bound.
const maxTaskBackoffLimit = 100

func validateTask(t *controlv1alpha1.TaskTemplate, fld *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(t.Command) == 0 || t.Command[0] == "" {
		allErrs = append(allErrs, field.Required(fld.Child("command"), "the task's executable"))
	}
	seen := map[string]bool{}
	for i, e := range t.Env {
		name := fld.Child("env").Index(i).Child("name")
		for _, msg := range utilvalidation.IsEnvVarName(e.Name) {
			allErrs = append(allErrs, field.Invalid(name, e.Name, msg))
		}
		if why, reserved := execdapi.ReservedEnv(e.Name); reserved {
			allErrs = append(allErrs, field.Invalid(name, e.Name, "this name is reserved: "+why))
		}
		if seen[e.Name] {
			allErrs = append(allErrs, field.Duplicate(name, e.Name))
		}
		seen[e.Name] = true
	}
	if t.WorkingDir != "" && !path.IsAbs(t.WorkingDir) {
		allErrs = append(allErrs, field.Invalid(fld.Child("workingDir"), t.WorkingDir, "must be an absolute path"))
	}
	if t.TimeoutSeconds != nil && *t.TimeoutSeconds < 1 {
		allErrs = append(allErrs, field.Invalid(fld.Child("timeoutSeconds"), *t.TimeoutSeconds, "must be positive"))
	}
	switch t.RestartPolicy {
	case "", controlv1alpha1.TaskRestartNever, controlv1alpha1.TaskRestartOnFailure:
	default:
		allErrs = append(allErrs, field.NotSupported(fld.Child("restartPolicy"), t.RestartPolicy,
			[]string{string(controlv1alpha1.TaskRestartNever), string(controlv1alpha1.TaskRestartOnFailure)}))
	}
	if b := t.BackoffLimit; b != nil && (*b < 0 || *b > maxTaskBackoffLimit) {
		allErrs = append(allErrs, field.Invalid(fld.Child("backoffLimit"), *b, fmt.Sprintf("must be between 0 and %d", maxTaskBackoffLimit)))
	}
	if l := t.Lifecycle; l != nil {
		for _, hh := range []struct {
			name string
			h    *controlv1alpha1.TaskHook
		}{{"preStart", l.PreStart}, {"postStop", l.PostStop}} {
			name, h := hh.name, hh.h
			if h == nil {
				continue
			}
			hook := fld.Child("lifecycle", name)
			if len(h.Command) == 0 || h.Command[0] == "" {
				allErrs = append(allErrs, field.Required(hook.Child("command"), ""))
			}
			if h.TimeoutSeconds != nil && *h.TimeoutSeconds < 1 {
				allErrs = append(allErrs, field.Invalid(hook.Child("timeoutSeconds"), *h.TimeoutSeconds, "must be positive"))
			}
		}
	}
	return allErrs
}
