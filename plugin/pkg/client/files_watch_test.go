package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// TestWatchOverflow checks what Watch makes of a stream: heartbeats skipped, events in order,
// and an overflow as ErrWatchOverflow after its event.
func TestWatchOverflow(t *testing.T) {
	var query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		query = req.URL.RawQuery
		w.Header().Set("Content-Type", execdapi.FileWatchContentType)
		_, _ = w.Write([]byte("\n" + `{"type":"Heartbeat"}` + "\n" +
			`{"type":"Created","path":"d","dir":true}` + "\n" +
			`{"type":"Overflow"}` + "\n" +
			`{"type":"Created","path":"after"}` + "\n"))
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, "sb", 0)
	var got []execdapi.FileEvent
	err := c.Watch(context.Background(), "dir", true, func(ev *execdapi.FileEvent) error {
		got = append(got, *ev)
		return nil
	})
	if !errors.Is(err, ErrWatchOverflow) {
		t.Errorf("error %v, want ErrWatchOverflow", err)
	}
	want := []execdapi.FileEvent{{Type: execdapi.FileCreated, Path: "d", Dir: true}, {Type: execdapi.FileOverflow}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events differ (-want +got):\n%s", diff)
	}
	if query != "recursive=true&watch=true" {
		t.Errorf("query %q, want recursive=true&watch=true", query)
	}
}
