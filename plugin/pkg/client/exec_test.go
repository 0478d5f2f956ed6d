package client

import (
	"errors"
	"testing"
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
