package execd

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// filesEnv is an execd serving a temp dir as its files root. The root's
// parent also holds "outside", which no request may reach.
type filesEnv struct {
	srv     *httptest.Server
	client  *http.Client
	root    string
	outside string
}

func startFilesServer(t *testing.T, maxUpload int64) *filesEnv {
	t.Helper()
	parent := t.TempDir()
	env := &filesEnv{root: filepath.Join(parent, "root"), outside: filepath.Join(parent, "outside")}
	for _, dir := range []string{env.root, env.outside} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil), FilesRoot: env.root, MaxUploadBytes: maxUpload, Sandbox: testSandbox}, newTestIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	env.srv = serveTLS(t, h, h.identity)
	env.client = httpClient(t, asAPIServer)
	t.Cleanup(func() { _ = h.Close() })
	return env
}

type response struct {
	code   int
	header http.Header
	body   []byte
}

// do sends method to the raw (unescaped as given) files path and query, as sandbox-apiserver.
func (e *filesEnv) do(t *testing.T, method, rawPath string, body io.Reader, header http.Header) response {
	t.Helper()
	return e.doAs(t, e.client, method, rawPath, body, header)
}

func (e *filesEnv) doAs(t *testing.T, client *http.Client, method, rawPath string, body io.Reader, header http.Header) response {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), method, e.srv.URL+rawPath, body)
	if err != nil {
		t.Fatal(err)
	}
	if header != nil {
		req.Header = header.Clone()
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawPath, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, rawPath, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: b}
}

func (e *filesEnv) write(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(e.root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *filesEnv) symlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, filepath.Join(e.root, name)); err != nil {
		t.Fatal(err)
	}
}

// snapshot lists every path under dir with its type, size and content
// digest, to tell whether a request changed anything.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fmt.Sprintf("%v %d", fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		m[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func decodeStatus(t *testing.T, r response) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatalf("error body %q is not a Status: %v", r.body, err)
	}
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Status != metav1.StatusFailure || int(st.Code) != r.code {
		t.Errorf("status = %+v, want a v1 Failure Status with code %d", st, r.code)
	}
	return st
}

// heapSampler records the largest HeapInuse seen while it runs.
type heapSampler struct {
	max  atomic.Uint64
	stop chan struct{}
	done sync.WaitGroup
}

func startHeapSampler() *heapSampler {
	s := &heapSampler{stop: make(chan struct{})}
	s.done.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > s.max.Load() {
				s.max.Store(ms.HeapInuse)
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	})
	return s
}

func (s *heapSampler) Stop() uint64 {
	close(s.stop)
	s.done.Wait()
	return s.max.Load()
}

// pseudoRandom is a deterministic, incompressible stream of n bytes.
func pseudoRandom(seed uint64, n int64) io.Reader {
	var s [32]byte
	s[0] = byte(seed)
	return io.LimitReader(rand.NewChaCha8(s), n)
}

func TestFilesRoundTrip100MB(t *testing.T) {
	const size = 100 << 20
	const maxHeapGrowth = 32 << 20
	env := startFilesServer(t, DefaultMaxUploadBytes)

	tests := []struct {
		name          string
		contentLength bool
	}{
		{name: "with content length", contentLength: true},
		{name: "chunked"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := sha256.New()
			body := io.TeeReader(pseudoRandom(uint64(i), size), sent)
			req, err := http.NewRequestWithContext(testContext(t), http.MethodPut, env.srv.URL+FilesPath+"data/blob.bin?mkdirs=true&mode=0640", onlyReader{body})
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentLength {
				req.ContentLength = size
			}
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			sampler := startHeapSampler()
			resp, err := env.client.Do(req)
			peak := sampler.Stop()
			if err != nil {
				t.Fatal(err)
			}
			respBody, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
				t.Fatalf("upload status = %d (%s)", resp.StatusCode, respBody)
			}
			growth := int64(peak) - int64(before.HeapInuse)
			t.Logf("heap growth during the upload: %d KiB", growth>>10)
			if growth > maxHeapGrowth {
				t.Errorf("heap grew by %d MiB during the upload, want < %d MiB", growth>>20, maxHeapGrowth>>20)
			}
			var info FileInfo
			if err := json.Unmarshal(respBody, &info); err != nil {
				t.Fatal(err)
			}
			if info.Size != size || info.Mode != "0640" || info.Type != FileTypeFile || info.Path != "data/blob.bin" {
				t.Errorf("upload response = %+v, want a 0640 file data/blob.bin of %d bytes", info, size)
			}

			req, err = http.NewRequestWithContext(testContext(t), http.MethodGet, env.srv.URL+FilesPath+"data/blob.bin", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err = env.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			got := sha256.New()
			n, err := io.Copy(got, resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || n != size {
				t.Fatalf("download status %d, %d bytes; want 200, %d bytes", resp.StatusCode, n, size)
			}
			if !bytes.Equal(got.Sum(nil), sent.Sum(nil)) {
				t.Error("downloaded content differs from the uploaded")
			}
			for header, want := range map[string]string{"Content-Type": "application/octet-stream", FileModeHeader: "0640"} {
				if v := resp.Header.Get(header); v != want {
					t.Errorf("%s = %q, want %q", header, v, want)
				}
			}
			if resp.Header.Get("Last-Modified") == "" {
				t.Error("no Last-Modified header")
			}
		})
	}
}

func TestFilesRange(t *testing.T) {
	env := startFilesServer(t, 0)
	content := "0123456789abcdefghij"
	env.write(t, "r.txt", content)
	tests := []struct {
		name     string
		rng      string
		wantCode int
		wantBody string
	}{
		{name: "first bytes", rng: "bytes=0-9", wantCode: http.StatusPartialContent, wantBody: content[:10]},
		{name: "open ended", rng: "bytes=15-", wantCode: http.StatusPartialContent, wantBody: content[15:]},
		{name: "suffix", rng: "bytes=-5", wantCode: http.StatusPartialContent, wantBody: content[15:]},
		{name: "middle", rng: "bytes=3-4", wantCode: http.StatusPartialContent, wantBody: "34"},
		{name: "unsatisfiable", rng: "bytes=100-", wantCode: http.StatusRequestedRangeNotSatisfiable},
		{name: "no range", wantCode: http.StatusOK, wantBody: content},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.rng != "" {
				h.Set("Range", tt.rng)
			}
			r := env.do(t, http.MethodGet, FilesPath+"r.txt", nil, h)
			if r.code != tt.wantCode {
				t.Fatalf("status = %d, want %d (%s)", r.code, tt.wantCode, r.body)
			}
			if tt.wantBody != "" && string(r.body) != tt.wantBody {
				t.Errorf("body = %q, want %q", r.body, tt.wantBody)
			}
		})
	}
}

func TestFilesTraversal(t *testing.T) {
	env := startFilesServer(t, 0)
	if err := os.WriteFile(filepath.Join(env.outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	env.write(t, "inside.txt", "inside")
	env.symlink(t, "/etc", "etc-link")
	env.symlink(t, "../outside", "outside-dir")
	env.symlink(t, "../outside/secret", "secret-link")
	env.symlink(t, filepath.Join(env.outside, "secret"), "secret-abs-link")
	env.symlink(t, "loop-b", "loop-a")
	env.symlink(t, "loop-a", "loop-b")
	before := snapshot(t, env.outside)

	tests := []struct {
		name   string
		method string
		path   string
		body   string
		// want404 allows 404 besides 400: a path that is relative to the
		// root names nothing there.
		want404 bool
	}{
		{name: "dot dot", method: http.MethodGet, path: "../../etc/passwd"},
		{name: "dot dot to sibling", method: http.MethodGet, path: "../outside/secret"},
		{name: "encoded dot dot", method: http.MethodGet, path: "%2e%2e/outside/secret"},
		{name: "encoded dot dot and slash", method: http.MethodGet, path: "%2e%2e%2foutside%2fsecret"},
		{name: "dot dot after a dir", method: http.MethodGet, path: "sub/../../outside/secret"},
		{name: "absolute looking path is relative", method: http.MethodGet, path: "/etc/passwd", want404: true},
		{name: "encoded absolute path is relative", method: http.MethodGet, path: "%2Fetc%2Fpasswd", want404: true},
		{name: "read through symlink to /etc", method: http.MethodGet, path: "etc-link/passwd"},
		{name: "list symlink to /etc", method: http.MethodGet, path: "etc-link"},
		{name: "read through relative symlink leaving root", method: http.MethodGet, path: "outside-dir/secret"},
		{name: "symlink to file outside", method: http.MethodGet, path: "secret-link"},
		{name: "absolute symlink to file outside", method: http.MethodGet, path: "secret-abs-link"},
		{name: "symlink loop", method: http.MethodGet, path: "loop-a"},
		{name: "symlink loop below", method: http.MethodGet, path: "loop-a/x"},
		{name: "put through symlinked dir", method: http.MethodPut, path: "outside-dir/planted", body: "x"},
		{name: "put with mkdirs through symlinked dir", method: http.MethodPut, path: "outside-dir/a/b/planted?mkdirs=true", body: "x"},
		{name: "put over symlink to outside file", method: http.MethodPut, path: "outside-dir/secret", body: "x"},
		{name: "put dot dot", method: http.MethodPut, path: "../outside/planted", body: "x"},
		{name: "mkdir through symlinked dir", method: http.MethodPut, path: "outside-dir/d?type=dir&mkdirs=true"},
		{name: "delete through symlinked dir", method: http.MethodDelete, path: "outside-dir/secret"},
		{name: "delete tree through symlinked dir", method: http.MethodDelete, path: "outside-dir/secret?recursive=true"},
		{name: "delete dot dot", method: http.MethodDelete, path: "../outside?recursive=true"},
		{name: "move out of root", method: http.MethodPost, path: "inside.txt?moveTo=../outside/moved"},
		{name: "move out through symlinked dir", method: http.MethodPost, path: "inside.txt?moveTo=outside-dir/moved"},
		{name: "move in from outside", method: http.MethodPost, path: "outside-dir/secret?moveTo=stolen"},
		{name: "stat through symlinked dir", method: http.MethodGet, path: "outside-dir/secret?stat=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := env.do(t, tt.method, FilesPath+tt.path, strings.NewReader(tt.body), nil)
			if r.code != http.StatusBadRequest && !(tt.want404 && r.code == http.StatusNotFound) {
				t.Errorf("status = %d, want 400 (body %s)", r.code, r.body)
			} else {
				decodeStatus(t, r)
			}
			if bytes.Contains(r.body, []byte("root:")) || bytes.Contains(r.body, []byte("secret\n")) || string(r.body) == "secret" {
				t.Errorf("body leaks outside content: %q", r.body)
			}
			if diff := cmp.Diff(before, snapshot(t, env.outside)); diff != "" {
				t.Errorf("outside the root changed (-before +after):\n%s", diff)
			}
			if b, err := os.ReadFile(filepath.Join(env.root, "inside.txt")); err != nil || string(b) != "inside" {
				t.Errorf("inside.txt = %q, %v; want it untouched", b, err)
			}
		})
	}

	// Last: it removes the link the cases above use.
	t.Run("deleting a symlink to outside removes only the link", func(t *testing.T) {
		r := env.do(t, http.MethodDelete, FilesPath+"outside-dir/?recursive=true", nil, nil)
		if r.code != http.StatusNoContent {
			t.Errorf("status = %d, want 204 (%s)", r.code, r.body)
		}
		if _, err := os.Lstat(filepath.Join(env.root, "outside-dir")); !os.IsNotExist(err) {
			t.Errorf("link still there: %v", err)
		}
		if diff := cmp.Diff(before, snapshot(t, env.outside)); diff != "" {
			t.Errorf("outside the root changed (-before +after):\n%s", diff)
		}
	})

	t.Run("stat describes a symlink without following it", func(t *testing.T) {
		r := env.do(t, http.MethodGet, FilesPath+"etc-link?stat=true", nil, nil)
		if r.code != http.StatusOK {
			t.Fatalf("status = %d (%s)", r.code, r.body)
		}
		var info FileInfo
		if err := json.Unmarshal(r.body, &info); err != nil {
			t.Fatal(err)
		}
		if info.Type != FileTypeSymlink || info.LinkTarget != "/etc" || info.Name != "etc-link" {
			t.Errorf("stat = %+v, want symlink etc-link -> /etc", info)
		}
	})
}

// listAll pages through a listing and returns every item.
func (e *filesEnv) listAll(t *testing.T, dir string, limit, depth int) (items []FileInfo, pages int) {
	t.Helper()
	token := ""
	for {
		q := fmt.Sprintf("?limit=%d&depth=%d", limit, depth)
		if token != "" {
			q += "&continue=" + token
		}
		r := e.do(t, http.MethodGet, FilesPath+dir+q, nil, nil)
		if r.code != http.StatusOK {
			t.Fatalf("list page %d: status %d (%s)", pages, r.code, r.body)
		}
		var list FileList
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatal(err)
		}
		if list.Kind != FileListKind {
			t.Fatalf("kind = %q, want %q", list.Kind, FileListKind)
		}
		if len(list.Items) > limit {
			t.Fatalf("page %d has %d items, over the limit %d", pages, len(list.Items), limit)
		}
		pages++
		items = append(items, list.Items...)
		if list.Continue == "" {
			return items, pages
		}
		if pages > 1_000_000 {
			t.Fatal("listing does not end")
		}
		token = list.Continue
	}
}

func TestFilesListLargeDirectory(t *testing.T) {
	const entries = 100_000
	env := startFilesServer(t, 0)
	dir := filepath.Join(env.root, "big")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := make([]string, entries)
	// Names in an order unrelated to their creation order.
	for i, n := range rand.New(rand.NewPCG(1, 2)).Perm(entries) {
		want[i] = fmt.Sprintf("f%d", n)
		if err := os.WriteFile(filepath.Join(dir, want[i]), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)

	start := time.Now()
	items, pages := env.listAll(t, "big", 1000, 1)
	t.Logf("listed %d entries in %d pages in %v", len(items), pages, time.Since(start))
	if pages != 100 {
		t.Errorf("pages = %d, want 100", pages)
	}
	got := make([]string, len(items))
	for i, it := range items {
		got[i] = it.Name
		if it.Path != it.Name || it.Type != FileTypeFile {
			t.Fatalf("item %+v, want a file whose path is its name", it)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("listing has %d names, want every one of %d once and sorted", len(got), entries)
	}
}

func TestFilesListDepth(t *testing.T) {
	env := startFilesServer(t, 0)
	for _, f := range []string{"d/b/x", "d/b/c/deep", "d/a", "d/c", "d/e/f"} {
		env.write(t, f, "")
	}
	env.symlink(t, "b", "d/blink")
	tests := []struct {
		name  string
		depth int
		want  []string
	}{
		{name: "depth 1", depth: 1, want: []string{"a", "b", "blink", "c", "e"}},
		{name: "depth 2", depth: 2, want: []string{"a", "b", "b/c", "b/x", "blink", "c", "e", "e/f"}},
		{name: "depth 3, symlinks not followed", depth: 3, want: []string{"a", "b", "b/c", "b/c/deep", "b/x", "blink", "c", "e", "e/f"}},
	}
	for _, tt := range tests {
		for _, limit := range []int{1, 2, 3, 1000} {
			t.Run(fmt.Sprintf("%s limit %d", tt.name, limit), func(t *testing.T) {
				items, _ := env.listAll(t, "d", limit, tt.depth)
				var got []string
				for _, it := range items {
					got = append(got, it.Path)
					if it.Path == "blink" && (it.Type != FileTypeSymlink || it.LinkTarget != "b") {
						t.Errorf("blink = %+v, want a symlink to b", it)
					}
					if it.Path == "b" && (it.Type != FileTypeDir || it.Mode != "0755") {
						t.Errorf("b = %+v, want a 0755 dir", it)
					}
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("listing (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestFilesConcurrentUploads(t *testing.T) {
	const size = 8 << 20
	env := startFilesServer(t, 0)
	contents := [2][]byte{}
	for i := range contents {
		b, err := io.ReadAll(pseudoRandom(uint64(i+10), size))
		if err != nil {
			t.Fatal(err)
		}
		contents[i] = b
	}
	for round := range 3 {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			var wg sync.WaitGroup
			codes := make([]int, len(contents))
			for i, c := range contents {
				wg.Go(func() {
					req, err := http.NewRequestWithContext(testContext(t), http.MethodPut, env.srv.URL+FilesPath+"same.bin", bytes.NewReader(c))
					if err != nil {
						t.Error(err)
						return
					}
					resp, err := env.client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					codes[i] = resp.StatusCode
				})
			}
			wg.Wait()
			for i, code := range codes {
				if code != http.StatusCreated && code != http.StatusOK {
					t.Errorf("upload %d: status %d", i, code)
				}
			}
			got, err := os.ReadFile(filepath.Join(env.root, "same.bin"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, contents[0]) && !bytes.Equal(got, contents[1]) {
				t.Errorf("file (%d bytes) is neither upload whole", len(got))
			}
			assertNoTempFiles(t, env.root)
		})
	}
}

func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file %s left behind", e.Name())
		}
	}
}

// sizedReader hides its length from net/http, forcing a chunked upload.
type sizedReader struct{ io.Reader }

func TestFilesUploadLimit(t *testing.T) {
	const limit = 1 << 20
	env := startFilesServer(t, limit)
	env.write(t, "keep", "old")
	tests := []struct {
		name     string
		query    string
		body     func() io.Reader
		wantCode int
	}{
		{name: "content length over the limit", body: func() io.Reader { return bytes.NewReader(make([]byte, limit+1)) }, wantCode: http.StatusRequestEntityTooLarge},
		{name: "chunked over the limit", body: func() io.Reader { return sizedReader{pseudoRandom(1, 3*limit)} }, wantCode: http.StatusRequestEntityTooLarge},
		{name: "maxBytes below the server limit", query: "?maxBytes=10", body: func() io.Reader { return strings.NewReader("01234567890") }, wantCode: http.StatusRequestEntityTooLarge},
		{name: "maxBytes above the server limit does not raise it", query: "?maxBytes=10000000", body: func() io.Reader { return sizedReader{pseudoRandom(2, limit+1)} }, wantCode: http.StatusRequestEntityTooLarge},
		{name: "invalid maxBytes", query: "?maxBytes=-1", body: func() io.Reader { return strings.NewReader("new") }, wantCode: http.StatusBadRequest},
		{name: "invalid mode", query: "?mode=8", body: func() io.Reader { return strings.NewReader("new") }, wantCode: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := env.do(t, http.MethodPut, FilesPath+"keep"+tt.query, tt.body(), nil)
			if r.code != tt.wantCode {
				t.Fatalf("status = %d, want %d (%s)", r.code, tt.wantCode, r.body)
			}
			if st := decodeStatus(t, r); r.code == http.StatusRequestEntityTooLarge && st.Reason != metav1.StatusReasonRequestEntityTooLarge {
				t.Errorf("reason = %q", st.Reason)
			}
			if b, err := os.ReadFile(filepath.Join(env.root, "keep")); err != nil || string(b) != "old" {
				t.Errorf("keep = %q, %v; want \"old\"", b, err)
			}
			assertNoTempFiles(t, env.root)
		})
	}
	t.Run("exactly at the limit", func(t *testing.T) {
		for _, q := range []string{"", "?maxBytes=5"} {
			n := limit
			if q != "" {
				n = 5
			}
			r := env.do(t, http.MethodPut, FilesPath+"exact"+q, sizedReader{pseudoRandom(3, int64(n))}, nil)
			if r.code != http.StatusCreated && r.code != http.StatusOK {
				t.Fatalf("%q: status = %d (%s)", q, r.code, r.body)
			}
		}
	})
}

func TestFilesOperations(t *testing.T) {
	env := startFilesServer(t, 0)
	// Steps run in order, each on the state the previous ones left.
	steps := []struct {
		name       string
		method     string
		path       string
		body       string
		wantCode   int
		wantReason metav1.StatusReason
		// wantInfo, if set, is checked against the FileInfo returned
		// (ModTime ignored).
		wantInfo *FileInfo
		check    func(t *testing.T)
	}{
		{name: "mkdir", method: http.MethodPut, path: "a?type=dir&mode=0750", wantCode: http.StatusCreated,
			wantInfo: &FileInfo{Name: "a", Path: "a", Type: FileTypeDir, Mode: "0750"}},
		{name: "mkdir existing dir", method: http.MethodPut, path: "a?type=dir", wantCode: http.StatusOK},
		{name: "mkdir without parent", method: http.MethodPut, path: "x/y/z?type=dir", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound},
		{name: "mkdir with parents", method: http.MethodPut, path: "x/y/z?type=dir&mkdirs=true", wantCode: http.StatusCreated},
		{name: "upload", method: http.MethodPut, path: "a/f.txt?mode=0600", body: "hello", wantCode: http.StatusCreated,
			wantInfo: &FileInfo{Name: "f.txt", Path: "a/f.txt", Type: FileTypeFile, Size: 5, Mode: "0600"}},
		{name: "replace", method: http.MethodPut, path: "a/f.txt", body: "hello!", wantCode: http.StatusOK,
			wantInfo: &FileInfo{Name: "f.txt", Path: "a/f.txt", Type: FileTypeFile, Size: 6, Mode: "0644"}},
		{name: "upload without parent", method: http.MethodPut, path: "nope/f", body: "x", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound},
		{name: "upload with parents", method: http.MethodPut, path: "n/m/f?mkdirs=true", body: "x", wantCode: http.StatusCreated},
		{name: "mkdir over a file", method: http.MethodPut, path: "a/f.txt?type=dir", wantCode: http.StatusConflict, wantReason: metav1.StatusReasonConflict},
		{name: "upload over a dir", method: http.MethodPut, path: "a", body: "x", wantCode: http.StatusConflict, wantReason: metav1.StatusReasonConflict},
		{name: "upload below a file", method: http.MethodPut, path: "a/f.txt/child", body: "x", wantCode: http.StatusConflict, wantReason: metav1.StatusReasonConflict},
		{name: "upload over the root", method: http.MethodPut, path: "", body: "x", wantCode: http.StatusBadRequest},
		{name: "unknown type", method: http.MethodPut, path: "t?type=fifo", wantCode: http.StatusBadRequest},
		{name: "stat", method: http.MethodGet, path: "a/f.txt?stat=true", wantCode: http.StatusOK,
			wantInfo: &FileInfo{Name: "f.txt", Path: "a/f.txt", Type: FileTypeFile, Size: 6, Mode: "0644"}},
		{name: "stat root", method: http.MethodGet, path: "?stat=true", wantCode: http.StatusOK},
		{name: "stat missing", method: http.MethodGet, path: "missing?stat=true", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound},
		{name: "get missing", method: http.MethodGet, path: "missing", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound},
		{name: "move", method: http.MethodPost, path: "a/f.txt?moveTo=a/g.txt", wantCode: http.StatusOK,
			wantInfo: &FileInfo{Name: "g.txt", Path: "a/g.txt", Type: FileTypeFile, Size: 6, Mode: "0644"},
			check: func(t *testing.T) {
				if _, err := os.Lstat(filepath.Join(env.root, "a/f.txt")); !os.IsNotExist(err) {
					t.Errorf("a/f.txt still exists: %v", err)
				}
			}},
		{name: "move onto existing", method: http.MethodPost, path: "a/g.txt?moveTo=n/m/f", wantCode: http.StatusConflict, wantReason: metav1.StatusReasonConflict},
		{name: "move onto existing with overwrite", method: http.MethodPost, path: "a/g.txt?moveTo=/n/m/f&overwrite=true", wantCode: http.StatusOK,
			check: func(t *testing.T) {
				if b, _ := os.ReadFile(filepath.Join(env.root, "n/m/f")); string(b) != "hello!" {
					t.Errorf("n/m/f = %q, want the moved content", b)
				}
			}},
		{name: "move a dir", method: http.MethodPost, path: "n?moveTo=n2", wantCode: http.StatusOK},
		{name: "move missing", method: http.MethodPost, path: "missing?moveTo=b", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound},
		{name: "move without destination", method: http.MethodPost, path: "a", wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest},
		{name: "move the root", method: http.MethodPost, path: "?moveTo=r", wantCode: http.StatusBadRequest},
		{name: "move a dir into itself", method: http.MethodPost, path: "x?moveTo=x/y/inner", wantCode: http.StatusBadRequest},
		{name: "delete non-empty dir", method: http.MethodDelete, path: "x", wantCode: http.StatusConflict, wantReason: metav1.StatusReasonConflict},
		{name: "delete tree", method: http.MethodDelete, path: "x?recursive=true", wantCode: http.StatusNoContent},
		{name: "delete missing", method: http.MethodDelete, path: "x", wantCode: http.StatusNotFound, wantReason: metav1.StatusReasonNotFound},
		{name: "delete empty dir", method: http.MethodDelete, path: "a", wantCode: http.StatusNoContent},
		{name: "delete file", method: http.MethodDelete, path: "n2/m/f", wantCode: http.StatusNoContent},
		{name: "delete root", method: http.MethodDelete, path: "", wantCode: http.StatusBadRequest, wantReason: metav1.StatusReasonBadRequest},
		{name: "delete root recursively", method: http.MethodDelete, path: "?recursive=true", wantCode: http.StatusBadRequest},
		{name: "delete root via dot", method: http.MethodDelete, path: "./?recursive=true", wantCode: http.StatusBadRequest},
		{name: "bad boolean", method: http.MethodDelete, path: "n2?recursive=maybe", wantCode: http.StatusBadRequest},
		{name: "limit too small", method: http.MethodGet, path: "?limit=0", wantCode: http.StatusBadRequest},
		{name: "limit too large", method: http.MethodGet, path: "?limit=10001", wantCode: http.StatusBadRequest},
		{name: "depth too large", method: http.MethodGet, path: "?depth=11", wantCode: http.StatusBadRequest},
		{name: "bad continue", method: http.MethodGet, path: "?continue=!!", wantCode: http.StatusBadRequest},
		{name: "method not allowed", method: http.MethodPatch, path: "n2", wantCode: http.StatusMethodNotAllowed, wantReason: metav1.StatusReasonMethodNotAllowed},
		{name: "root listing", method: http.MethodGet, path: "", wantCode: http.StatusOK, check: func(t *testing.T) {
			items, _ := env.listAll(t, "", 10, 3)
			var got []string
			for _, it := range items {
				got = append(got, it.Path)
			}
			if diff := cmp.Diff([]string{"n2", "n2/m"}, got); diff != "" {
				t.Errorf("final tree (-want +got):\n%s", diff)
			}
		}},
	}
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) {
			r := env.do(t, st.method, FilesPath+st.path, strings.NewReader(st.body), nil)
			if r.code != st.wantCode {
				t.Fatalf("status = %d, want %d (%s)", r.code, st.wantCode, r.body)
			}
			if r.code >= 400 {
				if s := decodeStatus(t, r); st.wantReason != "" && s.Reason != st.wantReason {
					t.Errorf("reason = %q, want %q", s.Reason, st.wantReason)
				}
			}
			if st.wantInfo != nil {
				var got FileInfo
				if err := json.Unmarshal(r.body, &got); err != nil {
					t.Fatal(err)
				}
				if got.ModTime.IsZero() {
					t.Error("no modTime")
				}
				got.ModTime = metav1.Time{}
				if got.Type == FileTypeDir {
					got.Size = 0 // whatever the filesystem says
				}
				if diff := cmp.Diff(*st.wantInfo, got); diff != "" {
					t.Errorf("info (-want +got):\n%s", diff)
				}
			}
			if st.check != nil {
				st.check(t)
			}
		})
		if !ok {
			// Later steps depend on this one.
			break
		}
	}
}

func TestFilesAuthentication(t *testing.T) {
	env := startFilesServer(t, 0)
	env.write(t, "d/f", "content")
	tests := []struct {
		method string
		path   string
		body   string
	}{
		{method: http.MethodGet, path: "d/f"},
		{method: http.MethodGet, path: "d"},
		{method: http.MethodGet, path: "d/f?stat=true"},
		{method: http.MethodPut, path: "d/f", body: "replaced"},
		{method: http.MethodPut, path: "d/new", body: "new"},
		{method: http.MethodPut, path: "d/newdir?type=dir"},
		{method: http.MethodDelete, path: "d?recursive=true"},
		{method: http.MethodPost, path: "d/f?moveTo=moved"},
	}
	for _, identity := range []string{asController, asSomeone} {
		client := httpClient(t, identity)
		for _, tt := range tests {
			t.Run(identity+" "+tt.method+" "+tt.path, func(t *testing.T) {
				before := snapshot(t, env.root)
				r := env.doAs(t, client, tt.method, FilesPath+tt.path, strings.NewReader(tt.body), nil)
				if r.code != http.StatusForbidden {
					t.Errorf("status = %d, want 403 (%s)", r.code, r.body)
				}
				if bytes.Contains(r.body, []byte("content")) {
					t.Errorf("body leaks the file: %q", r.body)
				}
				if diff := cmp.Diff(before, snapshot(t, env.root)); diff != "" {
					t.Errorf("files changed (-before +after):\n%s", diff)
				}
			})
		}
	}
	for _, identity := range []string{asNobody, asStranger} {
		t.Run("TLS refuses "+identity, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, env.srv.URL+FilesPath+"d/f", nil)
			if resp, err := httpClient(t, identity).Do(req); err == nil {
				_ = resp.Body.Close()
				t.Errorf("a client with %s got an answer: %d", identity, resp.StatusCode)
			}
		})
	}
}

func TestFilesDisabled(t *testing.T) {
	h, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil), Sandbox: testSandbox}, newTestIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	env := &filesEnv{srv: serveTLS(t, h, h.identity), client: httpClient(t, asAPIServer)}
	if r := env.do(t, http.MethodGet, FilesPath+"etc/passwd", nil, nil); r.code != http.StatusNotFound {
		t.Errorf("status = %d, want 404 with no files root", r.code)
	}
}

func TestMetrics(t *testing.T) {
	env := startFilesServer(t, 0)
	env.do(t, http.MethodPut, FilesPath+"m.txt", strings.NewReader("12345"), nil)
	env.do(t, http.MethodGet, FilesPath+"m.txt", nil, nil)
	env.do(t, http.MethodGet, FilesPath+"m.txt", nil, nil)
	env.do(t, http.MethodGet, FilesPath+"missing", nil, nil)
	env.doAs(t, httpClient(t, asController), http.MethodGet, FilesPath, nil, nil)
	env.do(t, http.MethodPost, execdapi.ClaimPath, nil, nil)

	r := env.do(t, http.MethodGet, MetricsPath, nil, nil)
	body := r.body
	if r.code != http.StatusOK {
		t.Fatalf("status = %d", r.code)
	}
	for _, want := range []string{
		`sandbox_execd_requests_total{code="201",endpoint="files:upload"} 1`,
		`sandbox_execd_requests_total{code="200",endpoint="files:download"} 2`,
		`sandbox_execd_requests_total{code="404",endpoint="files:download"} 1`,
		`sandbox_execd_requests_total{code="403",endpoint="files:download"} 1`,
		`sandbox_execd_requests_total{code="403",endpoint="claim"} 1`,
		`sandbox_execd_files_uploaded_bytes_total 5`,
		`sandbox_execd_files_downloaded_bytes_total 10`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

func TestFilesURL(t *testing.T) {
	tests := []struct {
		name  string
		base  string
		path  string
		query url.Values
		want  string
	}{
		{name: "relative path", base: "http://10.0.0.1:44771", path: "a/b c.txt", want: "http://10.0.0.1:44771/files/a/b%20c.txt"},
		{name: "absolute path is relative", base: "http://10.0.0.1:44771/", path: "/etc/hosts", want: "http://10.0.0.1:44771/files/etc/hosts"},
		{name: "root with query", base: "http://[fd00::1]:44771", path: "", query: url.Values{DepthParam: {"2"}}, want: "http://[fd00::1]:44771/files/?depth=2"},
		{name: "dot dot kept for execd to refuse", base: "http://h:1", path: "../x", want: "http://h:1/files/../x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := FilesURL(tt.base, tt.path, tt.query)
			if err != nil {
				t.Fatal(err)
			}
			if got := u.String(); got != tt.want {
				t.Errorf("FilesURL = %q, want %q", got, tt.want)
			}
		})
	}
}
