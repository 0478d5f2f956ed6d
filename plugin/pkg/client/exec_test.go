package client

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/streaming/pkg/httpstream"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// TestShouldFallback pins kubectl's fallback rule.
func TestShouldFallback(t *testing.T) {
	if shouldFallback(errors.New("connection refused")) {
		t.Error("fallback on a plain error")
	}
	if !shouldFallback(errors.New("proxy: unknown scheme: https")) {
		t.Error("no fallback on the HTTPS proxy error of gorilla/websocket")
	}
}

// TestAnsweredRefusalIsFinal: a WebSocket upgrade an API server refused with a Status about the
// request is not retried over SPDY, and its Status survives as a typed error.
func TestAnsweredRefusalIsFinal(t *testing.T) {
	notFound := &httpstream.UpgradeFailureError{Cause: apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), "ghost")}
	if shouldFallback(notFound) {
		t.Error("fallback after a 404")
	}
	if err := wrap(notFound); !IsNotFound(err) || !errors.Is(err, ErrNotFound) {
		t.Errorf("wrap = %v, want not found", err)
	}
	forbidden := &httpstream.UpgradeFailureError{Cause: apierrors.NewForbidden(sandboxv1alpha1.Resource("sandboxes"), "sb", errors.New("no"))}
	if err := wrap(forbidden); !errors.Is(err, ErrForbidden) {
		t.Errorf("wrap = %v, want forbidden", err)
	}
	// A proxy that knows no WebSocket answers with a plain 400 or a Status about the request
	// line: SPDY may pass.
	badRequest := &httpstream.UpgradeFailureError{Cause: apierrors.NewBadRequest("upgrade not supported")}
	if !shouldFallback(badRequest) {
		t.Error("no fallback after a 400")
	}
}
