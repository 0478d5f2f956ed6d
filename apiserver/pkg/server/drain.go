package server

import (
	"net/http"
	"sync"
	"time"

	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"
)

// inFlight counts the requests this server's API handlers are serving but watches, streams
// included:
// exec, files, proxy and followed logs run on hijacked or long-lived connections, which the
// generic server's graceful shutdown neither waits for nor ends. Run waits for them (up to
// --stream-drain-timeout) after the server stopped taking requests, so that a rolling
// restart lets open streams finish instead of cutting them.
type inFlight struct {
	mu     sync.Mutex
	n      int
	zero   chan struct{} // closed while n == 0
	active map[*http.Request]struct{}
}

func newInFlight() *inFlight {
	z := make(chan struct{})
	close(z)
	return &inFlight{zero: z, active: map[*http.Request]struct{}{}}
}

// track wraps the API handler (after authentication and authorization). Watches are not
// waited for: they end with the server, and their clients open them again elsewhere.
func (f *inFlight) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if info, ok := genericapirequest.RequestInfoFrom(req.Context()); ok && info.Verb == "watch" {
			h.ServeHTTP(w, req)
			return
		}
		f.add(req, 1)
		defer f.add(req, -1)
		h.ServeHTTP(w, req)
	})
}

func (f *inFlight) add(req *http.Request, d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 && d > 0 {
		f.zero = make(chan struct{})
	}
	f.n += d
	if d > 0 {
		f.active[req] = struct{}{}
	} else {
		delete(f.active, req)
	}
	if f.n == 0 {
		close(f.zero)
	}
}

// requests names up to max of the requests in progress, for the log.
func (f *inFlight) requests(max int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for req := range f.active {
		if len(out) == max {
			break
		}
		out = append(out, req.Method+" "+req.URL.RequestURI())
	}
	return out
}

// count is the number of requests in progress.
func (f *inFlight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// wait returns when no request is in progress, or after timeout; it reports whether all
// ended.
func (f *inFlight) wait(timeout time.Duration) bool {
	f.mu.Lock()
	zero, n := f.zero, f.n
	f.mu.Unlock()
	if n == 0 {
		return true
	}
	klog.InfoS("Waiting for open streams to end", "streams", n, "timeout", timeout, "requests", f.requests(10))
	select {
	case <-zero:
		return true
	case <-time.After(timeout):
		klog.InfoS("Open streams did not end in time; stopping anyway", "streams", f.count(), "requests", f.requests(10))
		return false
	}
}
