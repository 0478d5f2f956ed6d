package client

import (
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// The kinds of failure a caller acts on. The errors the Client returns keep the server's
// *apierrors.StatusError (errors.As gives its Status); errors.Is matches them against these:
//
//	if errors.Is(err, client.ErrForbidden) { ... }
var (
	// ErrNotFound: the sandbox, process, context or file does not exist (404).
	ErrNotFound = errors.New("not found")
	// ErrForbidden: RBAC (or the platform's policy) does not let the caller do this (403).
	ErrForbidden = errors.New("forbidden")
	// ErrConflict: the sandbox changed, is being deleted, or is in no state for this (409).
	ErrConflict = errors.New("conflict")
	// ErrExpired: the sandbox reached its expiry; renewing it no longer helps.
	ErrExpired = errors.New("expired")
)

// Error is a failure the server answered, with its Status, sortable with errors.Is.
type Error struct {
	*apierrors.StatusError
}

// Unwrap gives the StatusError, so that apierrors.IsNotFound and the like work on an Error.
func (e *Error) Unwrap() error { return e.StatusError }

// Is matches the sentinel errors of this package.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return apierrors.IsNotFound(e.StatusError)
	case ErrForbidden:
		return apierrors.IsForbidden(e.StatusError)
	case ErrConflict:
		return apierrors.IsConflict(e.StatusError)
	case ErrExpired:
		return isExpiredStatus(e.StatusError.Status())
	}
	return false
}

// ExpiredError is a sandbox the client saw in phase Expired.
type ExpiredError struct {
	Name string
}

func (e *ExpiredError) Error() string { return "sandbox " + `"` + e.Name + `"` + " has expired" }

// Is makes errors.Is(err, ErrExpired) true.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// CauseExpired is the type of the StatusCause with which the server marks a refusal because the
// sandbox has expired (a renewal too late, say).
const CauseExpired = metav1.CauseType(sandboxv1alpha1.CauseTypeExpired)

func isExpiredStatus(s metav1.Status) bool {
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			if c.Type == CauseExpired {
				return true
			}
		}
	}
	// A server from before the cause: its message says it.
	return s.Reason == metav1.StatusReasonConflict && strings.Contains(s.Message, "expired")
}

// wrap makes a server's Status an *Error; other errors pass unchanged.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if statusErr := answeredStatus(err); statusErr != nil {
		// A refused exec or attach: the server's Status, not the transport's words.
		return &Error{statusErr}
	}
	var statusErr *apierrors.StatusError
	if errors.As(err, &statusErr) {
		return &Error{statusErr}
	}
	return err
}

// IsNotFound reports whether err means the thing asked for does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) || apierrors.IsNotFound(err) }

// IsForbidden reports whether err is an RBAC or policy denial.
func IsForbidden(err error) bool { return errors.Is(err, ErrForbidden) || apierrors.IsForbidden(err) }

// IsConflict reports whether err is a conflict with the sandbox's state.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) || apierrors.IsConflict(err) }

// IsExpired reports whether err says the sandbox has expired.
func IsExpired(err error) bool {
	if errors.Is(err, ErrExpired) {
		return true
	}
	var status apierrors.APIStatus
	return errors.As(err, &status) && isExpiredStatus(status.Status())
}
