package sandbox

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kube-sandbox/kube-sandbox/apiserver/internal/apitesting"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

func TestTranslateError(t *testing.T) {
	batchsandboxes := controlv1alpha1.Resource("batchsandboxes")
	// How kube-apiserver reports validation failures of a custom resource: by kind, not by
	// resource (rest.BeforeCreate calls NewInvalid(kind.GroupKind(), ...)).
	batchSandboxKind := schema.GroupKind{Group: controlv1alpha1.GroupName, Kind: "BatchSandbox"}
	replicasTooHigh := field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), 2000, "must be less than or equal to 1000")}
	namespaceNotFound := apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns")
	otherBatchSandboxError := apierrors.NewMethodNotSupported(batchsandboxes, "patch")

	tests := []struct {
		name string
		err  error
		// passThrough: the error must come back as it went in.
		passThrough bool
		want        apitesting.APIErr
		// wantMessage are substrings of the message; notInMessage must not be in it.
		wantMessage  []string
		notInMessage []string
		wantCauses   []metav1.StatusCause
	}{
		{
			name:         "not found",
			err:          apierrors.NewNotFound(batchsandboxes, "demo"),
			want:         apitesting.APIErr{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
			wantMessage:  []string{`sandboxes.sandbox.kube-sandbox.io "demo" not found`},
			notInMessage: []string{"batchsandbox"},
		},
		{
			name:         "wrapped not found",
			err:          fmt.Errorf("get: %w", apierrors.NewNotFound(batchsandboxes, "demo")),
			want:         apitesting.APIErr{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
			wantMessage:  []string{`sandboxes.sandbox.kube-sandbox.io "demo" not found`},
			notInMessage: []string{"batchsandbox"},
		},
		{
			name:         "not found without a name in the details takes the name given",
			err:          apierrors.NewNotFound(batchsandboxes, ""),
			want:         apitesting.APIErr{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
			wantMessage:  []string{`sandboxes.sandbox.kube-sandbox.io "demo" not found`},
			notInMessage: []string{"batchsandbox"},
		},
		{
			name:         "already exists",
			err:          apierrors.NewAlreadyExists(batchsandboxes, "demo"),
			want:         apitesting.APIErr{Code: http.StatusConflict, Reason: metav1.StatusReasonAlreadyExists, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
			wantMessage:  []string{`sandboxes.sandbox.kube-sandbox.io "demo" already exists`},
			notInMessage: []string{"batchsandbox"},
		},
		{
			name:         "conflict",
			err:          apierrors.NewConflict(batchsandboxes, "demo", errors.New("the object has been modified")),
			want:         apitesting.APIErr{Code: http.StatusConflict, Reason: metav1.StatusReasonConflict, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
			wantMessage:  []string{`Operation cannot be fulfilled on sandboxes.sandbox.kube-sandbox.io "demo": the object has been modified`},
			notInMessage: []string{"batchsandbox"},
		},
		{
			name: "invalid with details by resource",
			err: apierrors.NewInvalid(schema.GroupKind{Group: controlv1alpha1.GroupName, Kind: "batchsandboxes"}, "demo",
				replicasTooHigh),
			want:         apitesting.APIErr{Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Group: "sandbox.kube-sandbox.io", Kind: "Sandbox", Name: "demo"},
			wantMessage:  []string{`Sandbox.sandbox.kube-sandbox.io "demo" is invalid: spec.replicas: Invalid value: 2000: must be less than or equal to 1000`},
			notInMessage: []string{"atchsandbox", "atchSandbox"},
			wantCauses: []metav1.StatusCause{{
				Type:    metav1.CauseTypeFieldValueInvalid,
				Message: "Invalid value: 2000: must be less than or equal to 1000",
				Field:   "spec.replicas",
			}},
		},
		{
			name:         "invalid as kube-apiserver reports it, by kind",
			err:          apierrors.NewInvalid(batchSandboxKind, "demo", replicasTooHigh),
			want:         apitesting.APIErr{Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Group: "sandbox.kube-sandbox.io", Kind: "Sandbox", Name: "demo"},
			wantMessage:  []string{`Sandbox.sandbox.kube-sandbox.io "demo" is invalid`},
			notInMessage: []string{"atchSandbox"},
		},
		{
			name:        "forbidden on the backend is our fault",
			err:         apierrors.NewForbidden(batchsandboxes, "demo", errors.New("RBAC: access denied")),
			want:        apitesting.APIErr{Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError},
			wantMessage: []string{"not allowed to act on batchsandboxes", "RBAC: access denied"},
		},
		{
			name:        "not found about namespaces passes through",
			err:         namespaceNotFound,
			passThrough: true,
		},
		{
			name:        "another error about batchsandboxes passes through",
			err:         otherBatchSandboxError,
			passThrough: true,
		},
		{
			name:        "a non-API error becomes an internal error",
			err:         errors.New("connection refused"),
			want:        apitesting.APIErr{Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError},
			wantMessage: []string{"connection refused"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := translateError(tt.err, "demo")
			if tt.passThrough {
				if got != tt.err {
					t.Fatalf("translateError() = %v, want the error unchanged: %v", got, tt.err)
				}
				return
			}
			if diff := cmp.Diff(tt.want, apitesting.APIErrOf(t, got)); diff != "" {
				t.Errorf("translateError() (-want +got):\n%s", diff)
			}
			msg := got.Error()
			for _, s := range tt.wantMessage {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not contain %q", msg, s)
				}
			}
			for _, s := range tt.notInMessage {
				if strings.Contains(msg, s) {
					t.Errorf("message %q contains %q", msg, s)
				}
			}
			if tt.wantCauses != nil {
				if diff := cmp.Diff(tt.wantCauses, got.(*apierrors.StatusError).ErrStatus.Details.Causes); diff != "" {
					t.Errorf("causes (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestTranslateErrorNil(t *testing.T) {
	if err := translateError(nil, "demo"); err != nil {
		t.Errorf("translateError(nil) = %v, want nil", err)
	}
}

// TestTranslateErrorInvalidDoesNotChangeInput: the Invalid branch copies the status, so the
// backend's error value is left as it was.
func TestTranslateErrorInvalidDoesNotChangeInput(t *testing.T) {
	in := apierrors.NewInvalid(schema.GroupKind{Group: controlv1alpha1.GroupName, Kind: "batchsandboxes"}, "demo",
		field.ErrorList{field.Required(field.NewPath("spec", "template"), "")})
	before := in.ErrStatus.DeepCopy()
	if got := translateError(in, "demo"); !apierrors.IsInvalid(got) {
		t.Fatalf("translateError() = %v, want Invalid", got)
	}
	if diff := cmp.Diff(before, &in.ErrStatus); diff != "" {
		t.Errorf("input error changed (-before +after):\n%s", diff)
	}
}
