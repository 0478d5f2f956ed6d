package sandbox

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// newFilesExecd is an execd over mutual TLS with a certificate of the kube-sandbox CA whose
// files API is answer.
func newFilesExecd(t *testing.T, answer http.HandlerFunc) (*pki.Authority, execdclient.Target) {
	t.Helper()
	a, cert := podServerCertificate(t, logPodUID, "batch-0")
	srv := httptest.NewUnstartedServer(answer)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	var target execdclient.Target
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	target.PodIP, target.PodUID = host, logPodUID
	target.Port, _ = strconv.Atoi(port)
	return a, target
}

// TestFilesWatchStreams checks that a watch's events reach the caller as execd sends them:
// execd sends the second only after the caller has read the first, so an answer held back
// anywhere on the way stalls the test.
func TestFilesWatchStreams(t *testing.T) {
	first := make(chan struct{})
	queries := make(chan url.Values, 1)
	authority, target := newFilesExecd(t, func(w http.ResponseWriter, req *http.Request) {
		queries <- req.URL.Query()
		w.Header().Set("Content-Type", execdapi.FileWatchContentType)
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_, _ = w.Write([]byte(`{"type":"Created","path":"a.txt","dir":false}` + "\n"))
		_ = rc.Flush()
		select {
		case <-first:
		case <-req.Context().Done():
			return
		}
		_, _ = w.Write([]byte("\n" + `{"type":"Removed","path":"a.txt","dir":false}` + "\n"))
		_ = rc.Flush()
	})
	var verbs []string
	r := &FilesREST{Access: Access{
		Resolver: &fakeResolver{ep: &sandboxconn.Endpoint{Target: target, Pod: "batch-0", Sandbox: taskSandbox(nil)}},
		Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			verbs = append(verbs, a.GetVerb()+" "+a.GetResource()+"/"+a.GetSubresource())
			return authorizer.DecisionAllow, "", nil
		}),
		Transport: execdclient.NewTransport(authority, execdclient.Options{ResponseHeaderTimeout: 5 * time.Second}),
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := genericapirequest.WithNamespace(req.Context(), "ns")
		ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
			IsResourceRequest: true, Verb: "get", APIGroup: sandboxv1alpha1.GroupName, APIVersion: "v1alpha1",
			Namespace: "ns", Resource: "sandboxes", Subresource: "files", Name: "batch",
		})
		h, err := r.Connect(ctx, "batch", &sandboxv1alpha1.SandboxFilesOptions{Path: "dir"}, writeResponder{w})
		if err != nil {
			writeError(w, err)
			return
		}
		h.ServeHTTP(w, req.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/files/dir?watch=true&recursive=true", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != execdapi.FileWatchContentType {
		t.Fatalf("status %d, Content-Type %q; want 200 %s", resp.StatusCode, resp.Header.Get("Content-Type"), execdapi.FileWatchContentType)
	}
	if q := <-queries; q.Get(execdapi.WatchParam) != "true" || q.Get(execdapi.RecursiveParam) != "true" {
		t.Errorf("execd's query %v, want watch and recursive passed on", q)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) == 1 {
			close(first)
		}
	}
	want := []string{`{"type":"Created","path":"a.txt","dir":false}`, "", `{"type":"Removed","path":"a.txt","dir":false}`}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("stream differs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"create sandboxes/files"}, verbs); diff != "" {
		t.Errorf("authorizations differ (-want +got):\n%s", diff)
	}
}
