package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

func TestStripCallerHeaders(t *testing.T) {
	h := http.Header{}
	for _, k := range []string{
		"Authorization", "Proxy-Authorization", "Cookie", "Forwarded", "X-Real-Ip",
		"Impersonate-User", "Impersonate-Group", "Impersonate-Extra-Scopes", "Impersonate-Uid",
		"X-Remote-User", "X-Remote-Group", "X-Remote-Extra-Scopes", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
		"Accept", "Content-Type", "X-Custom", "Sec-Websocket-Key", "Upgrade",
	} {
		h.Set(k, "v")
	}
	h["x-remote-user"] = []string{"lowercase, as a hand-made request may send it"}
	stripCallerHeaders(h)
	var kept []string
	for k := range h {
		kept = append(kept, k)
	}
	want := map[string]bool{"Accept": true, "Content-Type": true, "X-Custom": true, "Sec-Websocket-Key": true, "Upgrade": true}
	if len(kept) != len(want) {
		t.Errorf("kept %v, want only %v", kept, want)
	}
	for _, k := range kept {
		if !want[k] {
			t.Errorf("kept %s", k)
		}
	}
}

func TestParseProxyTarget(t *testing.T) {
	for _, tc := range []struct {
		in      string
		replica int32
		port    int
		wantErr string
	}{
		{in: "8080", port: 8080},
		{in: "2:8080", replica: 2, port: 8080},
		{in: "0:1", port: 1},
		{in: "x", wantErr: "PORT a port number"},
		{in: "-1:80", wantErr: "REPLICA a replica's index"},
		{in: "a:80", wantErr: "REPLICA"},
		{in: "70000", wantErr: "not between"},
		{in: "44771", wantErr: "sandbox-execd's"},
		{in: "1:44772", wantErr: "sandbox-execd's"},
	} {
		replica, port, err := ParseProxyTarget(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseProxyTarget(%q) = %v, want an error with %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || replica != tc.replica || port != tc.port {
			t.Errorf("ParseProxyTarget(%q) = %d, %d, %v", tc.in, replica, port, err)
		}
	}
}

func TestProxiedPath(t *testing.T) {
	base := "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/ns/sandboxes/web/proxy/"
	for _, tc := range []struct{ escaped, first, want string }{
		{base + "8080/a/b", "8080", "/a/b"},
		{base + "8080", "8080", "/"},
		{base + "8080/", "8080", "/"},
		{base + "1:8080/a%2Fb/c%20d", "1:8080", "/a%2Fb/c%20d"},
		{base + "1%3A8080/x", "1:8080", "/x"},
		{base + "8080/x/../y", "8080", "/x/../y"},
	} {
		if got := proxiedPath(tc.escaped, "web", tc.first); got != tc.want {
			t.Errorf("proxiedPath(%q) = %q, want %q", tc.escaped, got, tc.want)
		}
	}
}

func describe(t *testing.T, method, query string, code int, contentType string, body any) (*http.Response, error) {
	t.Helper()
	data, _ := json.Marshal(body)
	req := httptest.NewRequest(method, "/files/d"+query, nil)
	resp := &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {contentType}}, Request: req,
		Body: io.NopCloser(bytes.NewReader(data))}
	return resp, TypedDescription(resp, DescribedKind(req))
}

func TestTypedDescription(t *testing.T) {
	mod := metav1.Unix(1700000000, 0)
	listing := execdapi.FileList{Kind: execdapi.FileListKind, Continue: "next", Items: []execdapi.FileInfo{
		{Name: "a", Path: "a", Type: execdapi.FileTypeFile, Size: 3, Mode: "0644", ModTime: mod},
		{Name: "l", Path: "l", Type: execdapi.FileTypeSymlink, Mode: "0777", ModTime: mod, LinkTarget: "a"},
	}}
	resp, err := describe(t, http.MethodGet, "", 200, "application/json", listing)
	if err != nil {
		t.Fatal(err)
	}
	var list sandboxv1alpha1.SandboxFileList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	want := sandboxv1alpha1.SandboxFileList{
		TypeMeta: metav1.TypeMeta{APIVersion: "sandbox.kube-sandbox.io/v1alpha1", Kind: "SandboxFileList"},
		ListMeta: metav1.ListMeta{Continue: "next"},
		Items: []sandboxv1alpha1.SandboxFile{
			{Name: "a", Path: "a", Type: "file", Size: 3, Mode: "0644", ModTime: mod},
			{Name: "l", Path: "l", Type: "symlink", Mode: "0777", ModTime: mod, LinkTarget: "a"},
		},
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("listing (-want +got):\n%s", diff)
	}

	resp, err = describe(t, http.MethodGet, "?stat=true", 200, "application/json", listing.Items[0])
	if err != nil {
		t.Fatal(err)
	}
	var one sandboxv1alpha1.SandboxFile
	_ = json.NewDecoder(resp.Body).Decode(&one)
	if one.Kind != "SandboxFile" || one.APIVersion != "sandbox.kube-sandbox.io/v1alpha1" || one.Name != "a" {
		t.Errorf("stat = %+v, want a typed SandboxFile", one)
	}

	// A file's contents and errors pass as they came.
	resp, err = describe(t, http.MethodGet, "", 200, "application/octet-stream", "raw")
	if data, _ := io.ReadAll(resp.Body); err != nil || string(data) != `"raw"` {
		t.Errorf("contents %q (%v), want them untouched", data, err)
	}
	resp, err = describe(t, http.MethodGet, "", 404, "application/json", metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status"}, Message: "no such file"})
	if data, _ := io.ReadAll(resp.Body); err != nil || !strings.Contains(string(data), "no such file") {
		t.Errorf("error %q (%v), want it untouched", data, err)
	}
	// A sandbox that sends something else as a listing is a bad gateway, not a listing.
	if _, err := describe(t, http.MethodGet, "", 200, "application/json", map[string]string{"kind": "Evil"}); err == nil {
		t.Error("a forged listing was passed on")
	}
}

func TestTooLarge(t *testing.T) {
	bs := &controlv1alpha1.BatchSandbox{Spec: controlv1alpha1.BatchSandboxSpec{Entrypoint: []string{strings.Repeat("x", maxStoredBytes)}}}
	if err := tooLarge(bs); !apierrors.IsRequestEntityTooLargeError(err) {
		t.Errorf("tooLarge() = %v, want 413", err)
	}
	bs.Spec.Entrypoint = []string{"sh"}
	bs.Spec.Replicas = ptr.To[int32](1)
	if err := tooLarge(bs); err != nil {
		t.Errorf("tooLarge() of a small sandbox = %v", err)
	}
	for _, msg := range []string{"etcdserver: request is too large", "rpc error: code = ResourceExhausted desc = trying to send message larger than max"} {
		if err := translateError(errors.New(msg), "s"); !apierrors.IsRequestEntityTooLargeError(err) {
			t.Errorf("translateError(%q) = %v, want 413", msg, err)
		}
	}
}

// TestRewriteNamesTheSandbox: what reaches execd names the sandbox the apiserver resolved,
// whatever the caller sent: its own value is replaced, and naming the header in Connection
// (which makes a proxy drop it as hop-by-hop) does not remove it.
func TestRewriteNamesTheSandbox(t *testing.T) {
	var got []string
	backend := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		got = req.Header.Values(execdapi.SandboxUIDHeader)
	}))
	t.Cleanup(backend.Close)
	location, _ := url.Parse(backend.URL + "/files/x")
	ep := &sandboxconn.Endpoint{Sandbox: &controlv1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{UID: "the-sandbox"}}}
	rp := &httputil.ReverseProxy{Rewrite: rewriteTo(location, ep)}
	req := httptest.NewRequest(http.MethodGet, "/whatever", nil)
	req.Header.Set("Connection", execdapi.SandboxUIDHeader)
	req.Header.Set(execdapi.SandboxUIDHeader, "another-sandbox")
	rp.ServeHTTP(httptest.NewRecorder(), req)
	if diff := cmp.Diff([]string{"the-sandbox"}, got); diff != "" {
		t.Errorf("%s at execd (-want +got):\n%s", execdapi.SandboxUIDHeader, diff)
	}
}
