package egress

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitReady(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if asked.Add(1) < 3 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := waitReady(ctx, srv.URL); err != nil || asked.Load() != 3 {
		t.Fatalf("waitReady: %v after %d asks, want ready at the third", err, asked.Load())
	}

	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "the last policy could not be applied", http.StatusServiceUnavailable)
	}))
	defer never.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := waitReady(ctx, never.URL); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("waitReady on a sidecar that never gets ready: %v", err)
	}
}
