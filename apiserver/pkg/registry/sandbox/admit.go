package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/admission"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/shard"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// Admitter admits what a sandbox's pods may be, as the kube-apiserver admits a pod: a template
// is held to the platform's pod security level (or the namespace's, where stricter) and may not
// reach into the namespace; what goes beyond needs the caller to be allowed to create pods in
// the namespace (a SubjectAccessReview through Authorizer), and so does a sandbox from a Pool
// whose pods are of the namespace's level (podSecurity: Namespace).
type Admitter struct {
	Checker *admission.Checker
	// Reader reads Namespaces (their pod security labels) and Pools: from a cache, and from the
	// kube-apiserver for what the cache does not hold yet (CacheFirst).
	Reader     client.Reader
	Authorizer authorizer.Authorizer
}

// authorizer is the Admitter's Authorizer, nil without an Admitter (nothing is elevated then).
func (a *Admitter) authorizer() authorizer.Authorizer {
	if a == nil {
		return nil
	}
	return a.Authorizer
}

// Admit checks a sandbox about to be created, and records on it (AnnotationPodSecurity) when
// its pods may be more than a sandbox's: a template beyond the platform's level or reaching into
// the namespace, or a pool that makes pods of the namespace's level. Such a sandbox is then
// used and scaled only by callers who may create pods (ensureMayUseElevated).
func (a *Admitter) Admit(ctx context.Context, sbx *sandboxv1alpha1.Sandbox) error {
	if a == nil {
		return nil
	}
	caller, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return apierrors.NewInternalError(errors.New("no user in the request"))
	}
	switch {
	case sbx.Spec.Template != nil:
		// The platform's runtime class, written into the sandbox: it says what its pods run
		// under, and keeps it if the platform's default changes later.
		sandboxpod.DefaultRuntimeClass(&sbx.Spec.Template.Spec, a.Checker.RuntimeClass)
		spec := field.NewPath("spec")
		res, err := a.Checker.CheckIn(ctx, a.Reader, sbx.Namespace, admission.Template{
			Meta: &sbx.Spec.Template.ObjectMeta, Spec: &sbx.Spec.Template.Spec, Path: spec.Child("template", "spec"),
			Env: sbx.Spec.Env, EnvPath: spec.Child("env"),
		})
		// Each replica's own template is admitted as the template is: a shard patch is a
		// template too. (Validation made sure that each applies.)
		for i := range sbx.Spec.ShardPatches {
			if err != nil {
				break
			}
			t, perr := shard.PodTemplate(sbx.Spec.Template, sbx.Spec.ShardPatches[i])
			if perr != nil {
				return apierrors.NewInvalid(sandboxKind, sbx.Name, field.ErrorList{field.Invalid(spec.Child("shardPatches").Index(i), "", perr.Error())})
			}
			var shardRes admission.Result
			shardRes, err = a.Checker.CheckIn(ctx, a.Reader, sbx.Namespace, admission.Template{
				Meta: &t.ObjectMeta, Spec: &t.Spec, Path: spec.Child("shardPatches").Index(i).Child("spec"),
				Env: sbx.Spec.Env, EnvPath: spec.Child("env"),
			})
			res.Invalid = append(res.Invalid, shardRes.Invalid...)
			res.NeedsPodRights = append(res.NeedsPodRights, shardRes.NeedsPodRights...)
		}
		if apierrors.IsNotFound(err) {
			return apierrors.NewNotFound(corev1.Resource("namespaces"), sbx.Namespace)
		}
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("get namespace: %w", err))
		}
		if len(res.Invalid) > 0 {
			// No pod may run like this in the namespace, whoever asks.
			return apierrors.NewInvalid(sandboxKind, sbx.Name, res.Invalid)
		}
		if len(res.NeedsPodRights) == 0 {
			return nil
		}
		allowed, err := mayCreatePods(ctx, a.Authorizer, caller, sbx.Namespace)
		if err != nil {
			return err
		}
		if !allowed {
			return forbiddenFields(sbx.Name, caller, sbx.Namespace, fmt.Sprintf("the template needs more than a sandbox gets (%s)", res.Limit()), res.NeedsPodRights)
		}
		markElevated(sbx)
	case sbx.Spec.PoolRef != nil:
		pool := &controlv1alpha1.Pool{}
		if err := a.Reader.Get(ctx, client.ObjectKey{Namespace: sbx.Namespace, Name: sbx.Spec.PoolRef.Name}, pool); err != nil {
			if apierrors.IsNotFound(err) {
				return nil // PoolNotFound in the status, until it exists
			}
			return apierrors.NewInternalError(fmt.Errorf("get pool: %w", err))
		}
		if pool.Spec.PodSecurity != controlv1alpha1.PodSecurityNamespace {
			return nil
		}
		allowed, err := mayCreatePods(ctx, a.Authorizer, caller, sbx.Namespace)
		if err != nil {
			return err
		}
		if !allowed {
			return forbiddenFields(sbx.Name, caller, sbx.Namespace,
				fmt.Sprintf("pool %q makes pods of the namespace's pod security level (podSecurity: Namespace)", pool.Name),
				field.ErrorList{field.Forbidden(field.NewPath("spec", "poolRef", "name"), "a pool with podSecurity Namespace")})
		}
		markElevated(sbx)
	}
	return nil
}

// markElevated records on sbx that its pods may be more than a sandbox's.
func markElevated(sbx *sandboxv1alpha1.Sandbox) {
	if sbx.Annotations == nil {
		sbx.Annotations = map[string]string{}
	}
	sbx.Annotations[controlv1alpha1.AnnotationPodSecurity] = string(controlv1alpha1.PodSecurityNamespace)
}

// elevated reports whether a sandbox's pods may be more than a sandbox's (markElevated).
func elevated(annotations map[string]string) bool {
	return annotations[controlv1alpha1.AnnotationPodSecurity] == string(controlv1alpha1.PodSecurityNamespace)
}

// ensureMayUseElevated refuses (403) to let a caller who may not create pods in the namespace
// use (what: exec, files, proxy, more replicas) a sandbox whose pods may be more than a
// sandbox's: having them was the right of its creator, not of everyone with rights on sandboxes.
func ensureMayUseElevated(ctx context.Context, authz authorizer.Authorizer, namespace, name string, annotations map[string]string, what string) error {
	if authz == nil || !elevated(annotations) {
		return nil
	}
	caller, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return apierrors.NewInternalError(errors.New("no user in the request"))
	}
	allowed, err := mayCreatePods(ctx, authz, caller, namespace)
	if err != nil {
		return err
	}
	if allowed {
		return nil
	}
	return apierrors.NewForbidden(sandboxResource, name, fmt.Errorf(
		"its pods are of the namespace's pod security level (created by a user who may create pods), so %s needs the right to create pods in namespace %q, which user %q does not have",
		what, namespace, caller.GetName()))
}

// mayCreatePods asks whether the caller may create pods in the namespace.
func mayCreatePods(ctx context.Context, authz authorizer.Authorizer, caller user.Info, namespace string) (bool, error) {
	decision, _, err := authz.Authorize(ctx, authorizer.AttributesRecord{
		User: caller, Verb: "create", Namespace: namespace, APIGroup: "", APIVersion: "v1", Resource: "pods", ResourceRequest: true,
	})
	if err != nil {
		return false, apierrors.NewInternalError(fmt.Errorf("ask whether %q may create pods: %w", caller.GetName(), err))
	}
	return decision == authorizer.DecisionAllow, nil
}

// forbiddenFields is a 403 that names the fields that need the right to create pods.
func forbiddenFields(name string, caller user.Info, namespace, what string, errs field.ErrorList) error {
	causes := make([]metav1.StatusCause, 0, len(errs))
	for _, e := range errs {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseType(e.Type), Message: e.ErrorBody(), Field: e.Field})
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusForbidden,
		Reason: metav1.StatusReasonForbidden,
		Details: &metav1.StatusDetails{
			Group: sandboxResource.Group, Kind: sandboxResource.Resource, Name: name, Causes: causes,
		},
		Message: fmt.Sprintf("sandboxes.%s %q is forbidden: %s, which needs the right to create pods in namespace %q; user %q does not have it: %s",
			sandboxResource.Group, name, what, namespace, caller.GetName(), errs.ToAggregate().Error()),
	}}
}
