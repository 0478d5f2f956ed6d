package ls

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// watchServer serves the files subresource of sandbox "sb" as sandbox-apiserver does for a
// watch: each event passed on as execd flushes it. sandboxserver buffers execd's answers,
// which a watch never ends. started receives a value when a watch has begun.
type watchServer struct {
	url     string
	root    string
	started chan struct{}
}

const watchSandboxUID = "uid"

func newWatchServer(t *testing.T) *watchServer {
	t.Helper()
	root := t.TempDir()
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	id, err := execd.NewServerIdentity("", pool)
	if err != nil {
		t.Fatal(err)
	}
	h, err := execd.NewHandler(execd.HandlerConfig{Executor: noExec{}, FilesRoot: root,
		Sandbox: &execd.Sandbox{UID: watchSandboxUID, Namespace: cmdtesting.Namespace, Name: "sb"}}, id)
	if err != nil {
		t.Fatal(err)
	}
	ws := &watchServer{root: root, started: make(chan struct{}, 16)}
	prefix := sandboxserver.Prefix + cmdtesting.Namespace + "/sandboxes/sb/files"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rest, ok := strings.CutPrefix(req.URL.Path, prefix)
		if !ok || req.Header.Get("Authorization") != "Bearer "+sandboxserver.UserToken {
			http.NotFound(w, req)
			return
		}
		out := req.Clone(req.Context())
		out.URL.Path = execd.FilesPath + strings.TrimPrefix(rest, "/")
		out.URL.RawPath = ""
		out.Header.Set(execdapi.SandboxUIDHeader, watchSandboxUID)
		out.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: execdapi.APIServerIdentity}}}}}
		h.ServeHTTP(&startRecorder{ResponseWriter: w, started: ws.started}, out)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = h.Close()
	})
	ws.url = srv.URL
	return ws
}

// startRecorder tells when a watch stream's header went out.
type startRecorder struct {
	http.ResponseWriter
	started chan<- struct{}
}

func (r *startRecorder) WriteHeader(code int) {
	r.ResponseWriter.WriteHeader(code)
	if code == http.StatusOK && strings.HasPrefix(r.Header().Get("Content-Type"), execdapi.FileWatchContentType) {
		http.NewResponseController(r.ResponseWriter).Flush()
		r.started <- struct{}{}
	}
}

func (r *startRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

type noExec struct{}

func (noExec) ExecInContainer(context.Context, string, string, string, []string, io.Reader, io.WriteCloser, io.WriteCloser, bool, <-chan remotecommand.TerminalSize, time.Duration) error {
	return errors.New("exec is not supported by this test server")
}

// runWatch runs ls with args until cancel; its output comes line by line on lines, and its
// error message on done once it returned.
func runWatch(t *testing.T, url string, args ...string) (lines <-chan string, cancel context.CancelFunc, done <-chan string) {
	t.Helper()
	pr, pw := io.Pipe()
	streams := genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: pw, ErrOut: io.Discard}
	f := cmdtesting.NewServerFactory(url)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	cmd := NewCmdLs(f, streams)
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out := make(chan string, 1024)
	finished := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(out)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out <- sc.Text()
		}
	})
	go func() {
		var msg bytes.Buffer
		if err := cmd.ExecuteContext(ctx); err != nil {
			cmdutil.PrintError(&msg, err)
		}
		_ = pw.Close()
		wg.Wait()
		finished <- msg.String()
	}()
	return out, cancel, finished
}

// next returns the next line, failing t if none comes in time.
func next(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("the output ended")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no output line within 20s")
	}
	return ""
}

// waitStarted waits until the server began a watch.
func (ws *watchServer) waitStarted(t *testing.T, done <-chan string) {
	t.Helper()
	select {
	case <-ws.started:
	case msg := <-done:
		t.Fatalf("ls ended before watching: %q", msg)
	case <-time.After(20 * time.Second):
		t.Fatal("no watch within 20s")
	}
}

func TestLsWatch(t *testing.T) {
	ws := newWatchServer(t)
	if err := os.MkdirAll(filepath.Join(ws.root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	lines, cancel, done := runWatch(t, ws.url, "sb", "dir", "--watch", "--recursive")
	ws.waitStarted(t, done)

	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustDo(os.Mkdir(filepath.Join(ws.root, "dir", "sub"), 0o755))
	if got := next(t, lines); got != "Created  sub/" {
		t.Errorf("line %q, want %q", got, "Created  sub/")
	}
	// The next line after a change is printed before the one after it is made: the output
	// is not held back.
	mustDo(os.Rename(filepath.Join(ws.root, "dir", "sub"), filepath.Join(ws.root, "dir", "moved")))
	if got := next(t, lines); got != "Renamed  sub/" {
		t.Errorf("line %q, want %q", got, "Renamed  sub/")
	}
	if got := next(t, lines); got != "Created  moved/" {
		t.Errorf("line %q, want %q", got, "Created  moved/")
	}
	mustDo(os.Remove(filepath.Join(ws.root, "dir", "moved")))
	if got := next(t, lines); got != "Removed  moved/" {
		t.Errorf("line %q, want %q", got, "Removed  moved/")
	}

	cancel()
	select {
	case msg := <-done:
		if msg != "" {
			t.Errorf("interrupted watch failed: %q", msg)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ls did not end when interrupted")
	}
}

func TestLsWatchJSON(t *testing.T) {
	ws := newWatchServer(t)
	lines, cancel, done := runWatch(t, ws.url, "sb", "--watch", "-o", "json")
	ws.waitStarted(t, done)
	if err := os.WriteFile(filepath.Join(ws.root, "a.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var ev execdapi.FileEvent
	if err := json.Unmarshal([]byte(next(t, lines)), &ev); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(execdapi.FileEvent{Type: execdapi.FileCreated, Path: "a.txt"}, ev); diff != "" {
		t.Errorf("event differs (-want +got):\n%s", diff)
	}
	cancel()
	if msg := <-done; msg != "" {
		t.Errorf("interrupted watch failed: %q", msg)
	}
}

func TestLsWatchRefused(t *testing.T) {
	ws := newWatchServer(t)
	if err := os.WriteFile(filepath.Join(ws.root, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(ws.root, "etc")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "a file", args: []string{"sb", "f", "--watch"}, wantErr: "Error from server (BadRequest): f is not a directory"},
		{name: "a symlink", args: []string{"sb", "etc", "--watch"}, wantErr: "Error from server (BadRequest): etc is a symlink"},
		{name: "recursive without watch", args: []string{"sb", "--recursive"}, wantErr: "error: --recursive needs --watch"},
		{name: "watch with -l", args: []string{"sb", "--watch", "-l"}, wantErr: "error: --watch prints changes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, done := runWatch(t, ws.url, tt.args...)
			select {
			case msg := <-done:
				if !strings.HasPrefix(msg, tt.wantErr) {
					t.Errorf("error %q, want %q", msg, tt.wantErr)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("ls did not end")
			}
		})
	}
}
