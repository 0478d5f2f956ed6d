package util

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilexec "k8s.io/utils/exec"
)

func TestPrintError(t *testing.T) {
	sandboxes := schema.GroupResource{Group: "sandbox.kube-sandbox.io", Resource: "sandboxes"}
	exit3 := utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3}
	tests := []struct {
		name     string
		err      error
		want     string
		wantCode int
	}{
		{
			name:     "not found",
			err:      apierrors.NewNotFound(sandboxes, "x"),
			want:     "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"x\" not found\n",
			wantCode: 1,
		},
		{
			name:     "forbidden",
			err:      apierrors.NewForbidden(sandboxes, "x", errors.New("no")),
			want:     "Error from server (Forbidden): sandboxes.sandbox.kube-sandbox.io \"x\" is forbidden: no\n",
			wantCode: 1,
		},
		{
			name:     "unauthorized",
			err:      apierrors.NewUnauthorized("token expired"),
			want:     "error: You must be logged in to the server (token expired)\n",
			wantCode: 1,
		},
		{
			name: "invalid with causes",
			err: apierrors.NewInvalid(schema.GroupKind{Group: "sandbox.kube-sandbox.io", Kind: "Sandbox"}, "x", field.ErrorList{
				field.Required(field.NewPath("spec", "template"), "template or poolRef is required"),
				field.Invalid(field.NewPath("spec", "replicas"), -1, "must be at least 1"),
			}),
			want:     "The Sandbox \"x\" is invalid: \n* spec.template: Required value: template or poolRef is required\n* spec.replicas: Invalid value: -1: must be at least 1\n",
			wantCode: 1,
		},
		{
			name:     "remote exit code",
			err:      exit3,
			want:     "command terminated with exit code 3\n",
			wantCode: 3,
		},
		{
			name:     "wrapped remote exit code",
			err:      fmt.Errorf("exec: %w", exit3),
			want:     "exec: command terminated with exit code 3\n",
			wantCode: 3,
		},
		{
			name:     "aggregate of one is its error",
			err:      utilerrors.NewAggregate([]error{exit3}),
			want:     "command terminated with exit code 3\n",
			wantCode: 3,
		},
		{
			name:     "aggregate",
			err:      utilerrors.NewAggregate([]error{apierrors.NewNotFound(sandboxes, "a"), errors.New("boom")}),
			want:     "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"a\" not found\nerror: boom\n",
			wantCode: 1,
		},
		{
			name:     "connection refused",
			err:      &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/apis", Err: syscall.ECONNREFUSED},
			want:     "The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?\n",
			wantCode: 1,
		},
		{
			name:     "plain error",
			err:      errors.New("something broke"),
			want:     "error: something broke\n",
			wantCode: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			code := PrintError(&b, tt.err)
			if b.String() != tt.want || code != tt.wantCode {
				t.Errorf("PrintError printed %q and returned %d, want %q and %d", b.String(), code, tt.want, tt.wantCode)
			}
		})
	}
}

func TestTemplates(t *testing.T) {
	tests := []struct {
		name string
		fn   func(string) string
		in   string
		want string
	}{
		{name: "long", fn: LongDesc, in: "\n\t\tFirst line.\n\n\t\t  indented\n\t\tlast.  \n\t", want: "First line.\n\n  indented\nlast."},
		{name: "examples", fn: Examples, in: "\n\t\t# a\n\t\tkubectl x\n\n\t\t# b\n", want: "  # a\n  kubectl x\n\n  # b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.fn(tt.in); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
