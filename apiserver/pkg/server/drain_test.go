package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

func TestInFlightWaitsForStreams(t *testing.T) {
	f := newInFlight()
	if !f.wait(time.Millisecond) {
		t.Fatal("nothing in flight, yet wait timed out")
	}
	release := make(chan struct{})
	started := make(chan struct{})
	h := f.track(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(started)
		<-release
	}))
	go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/exec", nil))
	<-started
	if f.count() != 1 {
		t.Fatalf("count = %d, want 1", f.count())
	}
	if f.wait(20 * time.Millisecond) {
		t.Fatal("wait returned true with a stream open")
	}
	done := make(chan bool)
	go func() { done <- f.wait(time.Minute) }()
	close(release)
	if !<-done {
		t.Fatal("wait did not see the stream end")
	}
	if f.count() != 0 {
		t.Fatalf("count = %d after the end", f.count())
	}

	// A watch is not waited for.
	watching := make(chan struct{})
	hold := make(chan struct{})
	defer close(hold)
	w := f.track(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(watching)
		<-hold
	}))
	req := httptest.NewRequest(http.MethodGet, "/apis/sandbox.kube-sandbox.io/v1alpha1/sandboxes?watch=true", nil)
	req = req.WithContext(genericapirequest.WithRequestInfo(req.Context(), &genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "watch"}))
	go w.ServeHTTP(httptest.NewRecorder(), req)
	<-watching
	if f.count() != 0 || !f.wait(time.Millisecond) {
		t.Fatalf("a watch is waited for (count %d)", f.count())
	}
}
