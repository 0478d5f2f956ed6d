package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

const namespace = "ns"

func newClient(t *testing.T, host, sandbox string, replica int32) *Files {
	t.Helper()
	c, err := NewFiles(&rest.Config{Host: host, BearerToken: sandboxserver.UserToken}, namespace, sandbox, replica)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeFile(t *testing.T, p, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// TestClient runs the client against the sandbox server stand-in: the requests are the
// files subresource's, paths escaped segment by segment, and the answers typed.
func TestClient(t *testing.T) {
	srv := sandboxserver.New(t, namespace, "sb")
	writeFile(t, filepath.Join(srv.Root, "dir", "a b%?#.txt"), "hello", 0o640)
	writeFile(t, filepath.Join(srv.Root, "dir", "z.txt"), "z", 0o600)
	ctx := context.Background()
	c := newClient(t, srv.URL, "sb", 0)
	token := continueToken(t, c, ctx)
	srv.Requests()

	fi, err := c.Stat(ctx, "dir/a b%?#.txt")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Type != sandboxv1alpha1.SandboxFileTypeFile || fi.Size != 5 || fi.Mode != "0640" {
		t.Errorf("stat %+v, want a file of 5 bytes, mode 0640", fi)
	}

	body, mode, err := c.Download(ctx, "/dir/a b%?#.txt")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(body)
	_ = body.Close()
	if string(data) != "hello" || mode != 0o640 {
		t.Errorf("download %q mode %o, want hello, 0640", data, mode)
	}

	// One entry a page: the continue token is followed.
	var names []string
	if err := c.List(ctx, "dir", 1, 1, func(f *sandboxv1alpha1.SandboxFile) error {
		names = append(names, f.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a b%?#.txt", "z.txt"}, names); diff != "" {
		t.Errorf("listing (-want +got):\n%s", diff)
	}

	mode = 0o600
	if err := c.Upload(ctx, "new/dir/up load.txt", strings.NewReader("uploaded"), &mode, true); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(srv.Root, "new", "dir", "up load.txt")); err != nil || string(got) != "uploaded" {
		t.Errorf("uploaded file %q, %v", got, err)
	}
	if err := c.Mkdir(ctx, "made/deep", nil); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(srv.Root, "made", "deep")); err != nil || !st.IsDir() {
		t.Errorf("made directory: %v", err)
	}

	var paths []string
	for _, r := range srv.Requests() {
		paths = append(paths, r.Method+" "+r.Path+"?"+r.RawQuery)
	}
	const files = sandboxserver.Prefix + namespace + "/sandboxes/sb/files"
	want := []string{
		"GET " + files + "/dir/a%20b%25%3F%23.txt?stat=true",
		"GET " + files + "/dir/a%20b%25%3F%23.txt?",
		"GET " + files + "/dir?depth=1&limit=1",
		"GET " + files + "/dir?continue=" + url.QueryEscape(token) + "&depth=1&limit=1",
		"PUT " + files + "/new/dir/up%20load.txt?mkdirs=true&mode=0600",
		"PUT " + files + "/made/deep?mkdirs=true&type=dir",
	}
	if diff := cmp.Diff(want, paths); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// continueToken is the token of the second page of dir, one entry a page.
func continueToken(t *testing.T, c *Files, ctx context.Context) string {
	t.Helper()
	list, err := c.listPage(ctx, "dir", 1, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	return list.Continue
}

func TestClientErrors(t *testing.T) {
	srv := sandboxserver.New(t, namespace, "sb")
	writeFile(t, filepath.Join(srv.Root, "f"), "f", 0o644)
	if err := os.Mkdir(filepath.Join(srv.Root, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := newClient(t, srv.URL, "sb", 0)

	if _, err := c.Stat(ctx, "nope"); !apierrors.IsNotFound(err) {
		t.Errorf("stat of a missing file: %v, want NotFound", err)
	}
	_, err := newClient(t, srv.URL, "ghost", 0).Stat(ctx, "f")
	if !apierrors.IsNotFound(err) || err.Error() != `sandboxes.sandbox.kube-sandbox.io "ghost" not found` {
		t.Errorf("stat in a missing sandbox: %v, want the server's NotFound", err)
	}
	if _, _, err := c.Download(ctx, "d"); !errors.Is(err, ErrNotAFile) {
		t.Errorf("download of a directory: %v, want ErrNotAFile", err)
	}
	if err := c.List(ctx, "f", 1, 0, func(*sandboxv1alpha1.SandboxFile) error { return nil }); !errors.Is(err, ErrNotADirectory) {
		t.Errorf("list of a file: %v, want ErrNotADirectory", err)
	}
	if err := c.Upload(ctx, "missing/parent", strings.NewReader("x"), nil, false); !apierrors.IsNotFound(err) {
		t.Errorf("upload without its parent: %v, want NotFound", err)
	}
	srv.Requests()
	for _, p := range []string{"../x", "a/../../x", ".."} {
		if _, err := c.Stat(ctx, p); !errors.Is(err, ErrParentPath) {
			t.Errorf("stat of %q: %v, want ErrParentPath", p, err)
		}
	}
	if r := srv.Requests(); len(r) > 0 {
		t.Errorf("paths with .. made requests: %v", r)
	}
}

// TestClientReplica: a replica other than the first is a query parameter of every request.
func TestClientReplica(t *testing.T) {
	srv := sandboxserver.New(t, namespace, "sb")
	writeFile(t, filepath.Join(srv.Root, "f"), "f", 0o644)
	c := newClient(t, srv.URL, "sb", 2)
	if _, err := c.Stat(context.Background(), "f"); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()
	if len(r) != 1 || r[0].RawQuery != "replica=2&stat=true" {
		t.Errorf("requests %+v, want one with replica=2", r)
	}
}

// TestClientStreams: a download is handed over as it arrives, and an upload sent as it is
// read, neither held in memory whole: each side here waits for the other's first part before it
// sends the rest, which would never happen if either were buffered.
func TestClientStreams(t *testing.T) {
	firstPart := make(chan struct{})
	uploadedFirst := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.Method {
		case http.MethodGet:
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set(execdapi.FileModeHeader, "0644")
			_, _ = w.Write([]byte("first "))
			w.(http.Flusher).Flush()
			select {
			case <-firstPart:
			case <-time.After(5 * time.Second):
				return
			}
			_, _ = w.Write([]byte("second"))
		case http.MethodPut:
			buf := make([]byte, 6)
			if _, err := io.ReadFull(req.Body, buf); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			uploadedFirst <- buf
			if remaining, _ := io.ReadAll(req.Body); string(remaining) != "part2" {
				http.Error(w, "the upload ended with "+string(remaining), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"apiVersion":"sandbox.kube-sandbox.io/v1alpha1","kind":"SandboxFile","name":"f"}`))
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newClient(t, srv.URL, "sb", 0)

	body, _, err := c.Download(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 6)
	if _, err := io.ReadFull(body, first); err != nil || string(first) != "first " {
		t.Fatalf("first part %q, %v", first, err)
	}
	close(firstPart)
	second, _ := io.ReadAll(body)
	_ = body.Close()
	if string(second) != "second" {
		t.Errorf("second part %q, want second", second)
	}

	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte("part1-"))
		select {
		case got := <-uploadedFirst:
			if !bytes.Equal(got, []byte("part1-")) {
				t.Errorf("the server's first part %q", got)
			}
		case <-ctx.Done():
		}
		_, _ = pw.Write([]byte("part2"))
		_ = pw.Close()
	}()
	if err := c.Upload(ctx, "f", pr, nil, false); err != nil {
		t.Fatal(err)
	}
}
