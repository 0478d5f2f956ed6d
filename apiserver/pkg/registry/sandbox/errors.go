package sandbox

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

var (
	sandboxResource      = sandboxv1alpha1.Resource("sandboxes")
	sandboxKind          = sandboxv1alpha1.SchemeGroupVersion.WithKind("Sandbox").GroupKind()
	batchSandboxResource = controlv1alpha1.Resource("batchsandboxes")
)

// translateError turns an error the backend returned about a BatchSandbox into the error a
// Sandbox user expects: the same status code and reason, naming sandboxes instead of the
// BatchSandbox CRD they never need to know. Errors about anything else (a missing namespace,
// a timeout) pass through unchanged. Being forbidden on the backend is our deployment's fault,
// not the caller's, so it becomes an internal error that says what to fix.
func translateError(err error, name string) error {
	if err == nil {
		return nil
	}
	if isTooLarge(err) {
		// etcd's refusal would reach the caller as an internal error.
		return apierrors.NewRequestEntityTooLargeError("the sandbox is too large to be stored: make its template, env or entrypoint smaller")
	}
	var statusErr *apierrors.StatusError
	if !errors.As(err, &statusErr) {
		return apierrors.NewInternalError(err)
	}
	details := statusErr.Status().Details
	// Details.Kind names the resource in most errors and the kind in Invalid ones.
	if details == nil || details.Group != batchSandboxResource.Group ||
		(details.Kind != batchSandboxResource.Resource && details.Kind != "BatchSandbox") {
		return err
	}
	if details.Name != "" {
		name = details.Name
	}
	switch {
	case apierrors.IsNotFound(err):
		return apierrors.NewNotFound(sandboxResource, name)
	case apierrors.IsAlreadyExists(err):
		return apierrors.NewAlreadyExists(sandboxResource, name)
	case apierrors.IsConflict(err):
		// Keep the cause, without the backend's "Operation cannot be fulfilled on ..." prefix.
		msg := statusErr.Status().Message
		if _, cause, ok := strings.Cut(msg, fmt.Sprintf("%q: ", name)); ok {
			msg = cause
		}
		return apierrors.NewConflict(sandboxResource, name, errors.New(msg))
	case apierrors.IsInvalid(err):
		out := &apierrors.StatusError{ErrStatus: *statusErr.ErrStatus.DeepCopy()}
		out.ErrStatus.Details.Group = sandboxKind.Group
		out.ErrStatus.Details.Kind = sandboxKind.Kind
		out.ErrStatus.Message = fmt.Sprintf("Sandbox.%s %q is invalid: %s", sandboxKind.Group, name, causesMessage(out))
		return out
	case apierrors.IsForbidden(err):
		return apierrors.NewInternalError(fmt.Errorf("sandbox-apiserver is not allowed to act on batchsandboxes (check its RBAC): %s", statusErr.Status().Message))
	}
	return err
}

func causesMessage(err *apierrors.StatusError) string {
	msg := ""
	for i, c := range err.ErrStatus.Details.Causes {
		if i > 0 {
			msg += ", "
		}
		msg += c.Field + ": " + c.Message
	}
	return msg
}

// isTooLarge recognizes etcd's and gRPC's refusals of an object too large to store, which the
// kube-apiserver passes on as they are.
func isTooLarge(err error) bool {
	if apierrors.IsRequestEntityTooLargeError(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "request is too large") || strings.Contains(msg, "ResourceExhausted") ||
		strings.Contains(msg, "trying to send message larger than max")
}
