// Package apitesting holds helpers for the apiserver's unit tests.
package apitesting

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// APIErr is what a test pins of an API error.
type APIErr struct {
	Code   int32
	Reason metav1.StatusReason
	Group  string
	Kind   string
	Name   string
}

// APIErrOf returns what err says as an API status, failing the test when it is none.
func APIErrOf(t testing.TB, err error) APIErr {
	t.Helper()
	var statusErr apierrors.APIStatus
	if !errors.As(err, &statusErr) {
		t.Fatalf("got %T %v, want an API status error", err, err)
	}
	s := statusErr.Status()
	out := APIErr{Code: s.Code, Reason: s.Reason}
	if s.Details != nil {
		out.Group, out.Kind, out.Name = s.Details.Group, s.Details.Kind, s.Details.Name
	}
	return out
}
