package execd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientremotecommand "k8s.io/client-go/tools/remotecommand"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// startServer serves a Handler of a pod made for testSandbox the way tests' clients reach execd.
func startServer(t *testing.T) (*httptest.Server, *Handler) {
	t.Helper()
	h, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil), StreamIdleTimeout: time.Minute, Sandbox: testSandbox}, newTestIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTLS(t, h, h.identity)
	t.Cleanup(h.StopSessions)
	return srv, h
}

type execRequest struct {
	cmd []string
	// identity of the client certificate; "": the apiserver's.
	identity string
	stdin    io.Reader
	tty      bool
	// stdout defaults to a buffer returned as execResult.stdout.
	stdout io.Writer
	sizes  clientremotecommand.TerminalSizeQueue
	// websocket selects client-go's websocket executor instead of SPDY.
	websocket bool
}

type execResult struct {
	stdout, stderr string
	err            error
}

// execVia runs a command with client-go's SPDY executor, the client the
// apiserver and kubectl use. It may run outside the test goroutine, so it
// reports setup failures as the result's error rather than failing t.
func execVia(ctx context.Context, baseURL string, r execRequest) execResult {
	u, err := execURL(baseURL, r.cmd, remotecommand.Options{Stdin: r.stdin != nil, Stdout: true, Stderr: !r.tty, TTY: r.tty})
	if err != nil {
		return execResult{err: err}
	}
	identity := r.identity
	if identity == "" {
		identity = asAPIServer
	}
	config := restConfigFor(baseURL, identity)
	var exec clientremotecommand.Executor
	if r.websocket {
		// v4: like kubelet, execd's websocket server predates v5.
		exec, err = clientremotecommand.NewWebSocketExecutorForProtocols(config, http.MethodGet, u.String(), remotecommand.StreamProtocolV4Name)
	} else {
		exec, err = clientremotecommand.NewSPDYExecutor(config, http.MethodPost, u)
	}
	if err != nil {
		return execResult{err: err}
	}
	var stdout, stderr lockedBuffer
	opts := clientremotecommand.StreamOptions{Stdin: r.stdin, Stdout: &stdout, Tty: r.tty, TerminalSizeQueue: r.sizes}
	if r.stdout != nil {
		opts.Stdout = r.stdout
	}
	if !r.tty {
		opts.Stderr = &stderr
	}
	err = exec.StreamWithContext(ctx, opts)
	return execResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use: when its context
// is cancelled, StreamWithContext returns while its copies may still write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// exitCode is the exit code a client sees: 0 for success, -1 for an error
// that is no exit code.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitStatus()
	}
	return -1
}

func TestExec(t *testing.T) {
	srv, _ := startServer(t)
	notExecutable := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name           string
		cmd            []string
		wantStdout     string
		wantStderr     string // substring
		wantExitCode   int
		wantStderrFull bool // wantStderr must match exactly
	}{
		{
			name:       "success",
			cmd:        []string{"sh", "-c", "echo hello"},
			wantStdout: "hello\n",
		},
		{
			name:           "stdout, stderr and exit code",
			cmd:            []string{"sh", "-c", "echo out; echo err >&2; exit 3"},
			wantStdout:     "out\n",
			wantStderr:     "err\n",
			wantStderrFull: true,
			wantExitCode:   3,
		},
		{
			name:         "missing command exits 127 like a shell",
			cmd:          []string{"no-such-command-for-execd"},
			wantStderr:   "no-such-command-for-execd",
			wantExitCode: 127,
		},
		{
			name:         "missing path exits 127",
			cmd:          []string{"/no/such/dir/cmd"},
			wantStderr:   "/no/such/dir/cmd",
			wantExitCode: 127,
		},
		{
			name:         "non-executable file exits 126",
			cmd:          []string{notExecutable},
			wantStderr:   "permission denied",
			wantExitCode: 126,
		},
		{
			name:         "killed by a signal reports 128+signal",
			cmd:          []string{"sh", "-c", "kill -KILL $$"},
			wantExitCode: 128 + int(syscall.SIGKILL),
		},
		{
			name:       "runs in execd's working directory",
			cmd:        []string{"pwd"},
			wantStdout: mustGetwd(t) + "\n",
		},
	}
	for _, transport := range []string{"spdy", "websocket"} {
		for _, tt := range tests {
			t.Run(transport+"/"+tt.name, func(t *testing.T) {
				res := execVia(testContext(t), srv.URL, execRequest{cmd: tt.cmd, websocket: transport == "websocket"})
				if got := exitCode(res.err); got != tt.wantExitCode {
					t.Errorf("exit code = %d (err %v), want %d", got, res.err, tt.wantExitCode)
				}
				if res.stdout != tt.wantStdout {
					t.Errorf("stdout = %q, want %q", res.stdout, tt.wantStdout)
				}
				if tt.wantStderrFull && res.stderr != tt.wantStderr || !strings.Contains(res.stderr, tt.wantStderr) {
					t.Errorf("stderr = %q, want %q", res.stderr, tt.wantStderr)
				}
			})
		}
	}
}

func mustGetwd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

func TestExecStdin(t *testing.T) {
	srv, _ := startServer(t)
	big := make([]byte, 5<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		cmd   []string
		input []byte
		// want is the expected stdout; nil means "the input itself".
		want []byte
	}{
		{name: "5 MB through cat", cmd: []string{"cat"}, input: big},
		{name: "end of input reaches the command", cmd: []string{"wc", "-c"}, input: []byte("12345"), want: []byte("5\n")},
		{name: "empty input", cmd: []string{"cat"}, input: []byte{}},
		{name: "command that ignores its input", cmd: []string{"echo", "done"}, input: big, want: []byte("done\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := execVia(testContext(t), srv.URL, execRequest{cmd: tt.cmd, stdin: bytes.NewReader(tt.input)})
			if res.err != nil {
				t.Fatalf("exec: %v (stderr %q)", res.err, res.stderr)
			}
			want := tt.want
			if want == nil {
				want = tt.input
			}
			gotSum, wantSum := sha256.Sum256([]byte(res.stdout)), sha256.Sum256(want)
			if gotSum != wantSum {
				t.Errorf("stdout: %d bytes sha256 %x, want %d bytes sha256 %x", len(res.stdout), gotSum, len(want), wantSum)
			}
		})
	}
}

// sizeQueue hands out fixed terminal sizes, then reports the end.
type sizeQueue struct {
	sizes chan clientremotecommand.TerminalSize
}

func newSizeQueue(sizes ...clientremotecommand.TerminalSize) *sizeQueue {
	q := &sizeQueue{sizes: make(chan clientremotecommand.TerminalSize, len(sizes))}
	for _, s := range sizes {
		q.sizes <- s
	}
	close(q.sizes)
	return q
}

func (q *sizeQueue) Next() *clientremotecommand.TerminalSize {
	s, ok := <-q.sizes
	if !ok {
		return nil
	}
	return &s
}

func TestExecTTY(t *testing.T) {
	srv, _ := startServer(t)
	tests := []struct {
		name       string
		cmd        []string
		stdin      io.Reader
		sizes      clientremotecommand.TerminalSizeQueue
		wantPrefix string
		wantOutput string // substring
		wantExit   int
	}{
		{name: "stdin is a terminal", cmd: []string{"tty"}, wantPrefix: "/dev/"},
		{
			name:       "terminal has the client's size",
			cmd:        []string{"stty", "size"},
			sizes:      newSizeQueue(clientremotecommand.TerminalSize{Width: 123, Height: 45}),
			wantOutput: "45 123\r\n",
		},
		{
			name:       "end of input ends a reading command",
			cmd:        []string{"cat"},
			stdin:      strings.NewReader("hello\n"),
			wantOutput: "hello\r\n",
		},
		{
			name:       "stderr goes to the terminal",
			cmd:        []string{"sh", "-c", "echo oops >&2; exit 4"},
			wantOutput: "oops\r\n",
			wantExit:   4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := execVia(testContext(t), srv.URL, execRequest{cmd: tt.cmd, tty: true, stdin: tt.stdin, sizes: tt.sizes})
			if got := exitCode(res.err); got != tt.wantExit {
				t.Fatalf("exit code = %d (err %v), want %d; output %q", got, res.err, tt.wantExit, res.stdout)
			}
			if !strings.HasPrefix(res.stdout, tt.wantPrefix) || !strings.Contains(res.stdout, tt.wantOutput) {
				t.Errorf("output = %q, want prefix %q containing %q", res.stdout, tt.wantPrefix, tt.wantOutput)
			}
		})
	}
}

// TestExecAuthentication: only sandbox-apiserver's certificate opens exec; without a
// certificate of the kube-sandbox CA the TLS handshake itself fails.
func TestExecAuthentication(t *testing.T) {
	srv, _ := startServer(t)
	tests := []struct {
		name     string
		identity string
		// wantHandshake: the TLS handshake succeeds (then the handler decides).
		wantHandshake bool
		wantRan       bool
	}{
		{name: "no certificate", identity: asNobody},
		{name: "certificate of another CA", identity: asStranger},
		{name: "the controller may not exec", identity: asController, wantHandshake: true},
		{name: "an unknown identity of our CA", identity: asSomeone, wantHandshake: true},
		// The control proves the marker check can fail.
		{name: "sandbox-apiserver runs", identity: asAPIServer, wantHandshake: true, wantRan: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			cmd := []string{"touch", marker}
			u, err := execURL(srv.URL, cmd, remotecommand.Options{Stdout: true})
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, u.String(), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := httpClient(t, tt.identity).Do(req)
			if (err == nil) != tt.wantHandshake {
				t.Fatalf("plain request: err %v, want a handshake: %v", err, tt.wantHandshake)
			}
			if err == nil {
				_ = resp.Body.Close()
				// sandbox-apiserver's plain request fails the upgrade handshake instead (400):
				// it is not an upgrade request.
				if wantForbidden := !tt.wantRan; (resp.StatusCode == http.StatusForbidden) != wantForbidden {
					t.Errorf("plain request status = %d, want 403: %v", resp.StatusCode, wantForbidden)
				}
			}
			res := execVia(testContext(t), srv.URL, execRequest{cmd: cmd, identity: tt.identity})
			if (res.err == nil) != tt.wantRan {
				t.Errorf("exec err = %v, want success: %v", res.err, tt.wantRan)
			}
			_, err = os.Stat(marker)
			if ran := err == nil; ran != tt.wantRan {
				t.Errorf("command ran = %v, want %v", ran, tt.wantRan)
			}
		})
	}
}

// TestExecNeedsItsSandbox: an execd that belongs to no sandbox (an idle pool pod) runs
// nothing, and a request meant for another sandbox is refused.
func TestExecNeedsItsSandbox(t *testing.T) {
	h, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil)}, newTestIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	idle := serveTLS(t, h, h.identity)
	owned, _ := startServer(t)
	tests := []struct {
		name    string
		url     string
		header  string
		wantRan bool
	}{
		{name: "pool pod not claimed yet", url: idle.URL},
		{name: "meant for another sandbox", url: owned.URL, header: "another-uid"},
		{name: "meant for its sandbox", url: owned.URL, header: testSandbox.UID, wantRan: true},
		// sandbox-apiserver names the sandbox of every request; one that names none is refused.
		{name: "no sandbox named", url: owned.URL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			u, err := execURL(tt.url, []string{"touch", marker}, remotecommand.Options{Stdout: true})
			if err != nil {
				t.Fatal(err)
			}
			cfg := restConfigFor(tt.url, asAPIServer)
			cfg.WrapTransport = nil
			if tt.header != "" {
				cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
					return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
						req.Header.Set(execdapi.SandboxUIDHeader, tt.header)
						return rt.RoundTrip(req)
					})
				}
			}
			exec, err := clientremotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
			if err != nil {
				t.Fatal(err)
			}
			err = exec.StreamWithContext(testContext(t), clientremotecommand.StreamOptions{Stdout: io.Discard})
			if (err == nil) != tt.wantRan {
				t.Errorf("exec err = %v, want success: %v", err, tt.wantRan)
			}
			if _, err := os.Stat(marker); (err == nil) != tt.wantRan {
				t.Errorf("command ran = %v, want %v", err == nil, tt.wantRan)
			}
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestHTTPEndpoints(t *testing.T) {
	srv, _ := startServer(t)
	tests := []struct {
		name     string
		method   string
		path     string
		identity string
		// unnamed: the request names no sandbox (as sandbox-apiserver always does).
		unnamed    bool
		wantStatus int
		wantBody   string
	}{
		{name: "files naming no sandbox", method: http.MethodGet, path: FilesPath, unnamed: true, wantStatus: http.StatusBadRequest},
		{name: "proxy naming no sandbox", method: http.MethodGet, path: execdapi.ProxyPath + "8080/", unnamed: true, wantStatus: http.StatusBadRequest},
		{name: "exec GET needs sandbox-apiserver", method: http.MethodGet, path: execdapi.ExecPath + "?command=true&output=1", identity: asController, wantStatus: http.StatusForbidden},
		{name: "exec without command", method: http.MethodPost, path: execdapi.ExecPath + "?output=1", wantStatus: http.StatusBadRequest},
		{name: "exec with empty command", method: http.MethodPost, path: execdapi.ExecPath + "?command=&output=1", wantStatus: http.StatusBadRequest},
		{name: "exec without streams", method: http.MethodPost, path: execdapi.ExecPath + "?command=true", wantStatus: http.StatusBadRequest},
		{name: "metrics for sandbox-apiserver", method: http.MethodGet, path: MetricsPath, wantStatus: http.StatusOK},
		{name: "metrics for the controller", method: http.MethodGet, path: MetricsPath, identity: asController, wantStatus: http.StatusOK},
		{name: "metrics for nobody else", method: http.MethodGet, path: MetricsPath, identity: asSomeone, wantStatus: http.StatusForbidden},
		{name: "files need sandbox-apiserver", method: http.MethodGet, path: FilesPath, identity: asController, wantStatus: http.StatusForbidden},
		{name: "claims need the controller", method: http.MethodPost, path: execdapi.ClaimPath, wantStatus: http.StatusForbidden},
		{name: "identity needs the controller", method: http.MethodGet, path: execdapi.IdentityPath, wantStatus: http.StatusForbidden},
		{name: "certificates need the controller", method: http.MethodPut, path: execdapi.IdentityPath, wantStatus: http.StatusForbidden},
		{name: "proxy needs sandbox-apiserver", method: http.MethodGet, path: execdapi.ProxyPath + "8080/", identity: asController, wantStatus: http.StatusForbidden},
		{name: "proxy to execd's own port", method: http.MethodGet, path: execdapi.ProxyPath + "44771/", wantStatus: http.StatusBadRequest},
		{name: "proxy without a port", method: http.MethodGet, path: execdapi.ProxyPath + "x/", wantStatus: http.StatusBadRequest},
		{name: "probes are not on the TLS port", method: http.MethodGet, path: execdapi.HealthzPath, wantStatus: http.StatusNotFound},
		{name: "exec wrong method", method: http.MethodPut, path: execdapi.ExecPath + "?command=true&output=1", wantStatus: http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(testContext(t), tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			identity := tt.identity
			if identity == "" {
				identity = asAPIServer
			}
			hc := httpClient(t, identity)
			if tt.unnamed {
				hc = &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, identity)}}
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %q)", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantBody != "" && string(body) != tt.wantBody {
				t.Errorf("body = %q, want %q", body, tt.wantBody)
			}
		})
	}
}

func TestHealthHandler(t *testing.T) {
	srv := httptest.NewServer(HealthHandler())
	t.Cleanup(srv.Close)
	for path, want := range map[string]int{
		execdapi.HealthzPath: http.StatusOK, execdapi.ReadyzPath: http.StatusOK,
		execdapi.ExecPath: http.StatusNotFound, FilesPath: http.StatusNotFound, MetricsPath: http.StatusNotFound,
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want || want == http.StatusOK && string(body) != "ok" {
			t.Errorf("GET %s on the health port = %d %q, want %d", path, resp.StatusCode, body, want)
		}
	}
}

// processGone reports whether pid has exited. A zombie counts as gone: it
// only waits for its parent (init, outside this test) to collect it.
func processGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := bytes.Fields(data[bytes.LastIndexByte(data, ')')+1:])
	return len(fields) > 0 && string(fields[0]) == "Z"
}

// startBackgroundSleep runs a command that leaves "sleep 1000" running in
// its process group and returns the sleep's pid and the session's result.
func startBackgroundSleep(ctx context.Context, t *testing.T, baseURL string, websocket bool) (int, <-chan execResult) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan execResult, 1)
	go func() {
		res := execVia(ctx, baseURL, execRequest{cmd: []string{"sh", "-c", "sleep 1000 & echo $!; wait"}, stdout: pw, websocket: websocket})
		_ = pw.CloseWithError(io.EOF)
		done <- res
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the background pid: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("background pid %q: %v", line, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // in case the test fails
	if processGone(pid) {
		t.Fatalf("background sleep %d is not running", pid)
	}
	return pid, done
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if processGone(pid) {
			return
		}
	}
	t.Fatalf("process %d still running", pid)
}

func TestSessionEndKillsProcessGroup(t *testing.T) {
	tests := []struct {
		name      string
		websocket bool
		end       func(cancelClient context.CancelFunc, h *Handler)
	}{
		{name: "client cancels its context", end: func(cancel context.CancelFunc, _ *Handler) { cancel() }},
		{name: "websocket client cancels its context", websocket: true, end: func(cancel context.CancelFunc, _ *Handler) { cancel() }},
		{name: "execd stops its sessions", end: func(_ context.CancelFunc, h *Handler) { h.StopSessions() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, h := startServer(t)
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			pid, done := startBackgroundSleep(ctx, t, srv.URL, tt.websocket)

			// Still running while the session lives: the kill below is
			// what ends it.
			time.Sleep(200 * time.Millisecond)
			if processGone(pid) {
				t.Fatalf("background sleep %d died before the session ended", pid)
			}
			tt.end(cancel, h)
			waitGone(t, pid)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("exec did not return")
			}
		})
	}
}

func TestInstallCommand(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		existing bool
	}{
		{name: "creates parent directories"},
		{name: "replaces an existing file", existing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "a", "b", execdapi.BinaryName)
			if tt.existing {
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cmd := NewCommand()
			cmd.SetArgs([]string{"install", "--to", dst})
			if code := Execute(context.Background(), cmd); code != 0 {
				t.Fatalf("install exited %d", code)
			}
			st, err := os.Stat(dst)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o755 {
				t.Errorf("mode = %v, want 0755", st.Mode().Perm())
			}
			got, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("installed %d bytes, want a copy of %s (%d bytes)", len(got), self, len(want))
			}
			entries, _ := os.ReadDir(filepath.Dir(dst))
			if len(entries) != 1 {
				t.Errorf("install left %d files behind, want only %s", len(entries), execdapi.BinaryName)
			}
		})
	}
}

func TestServeConfigValidate(t *testing.T) {
	valid := ServeConfig{ListenAddr: ":44771", ClientCAs: testCA().pem, StreamIdleTimeout: time.Hour}
	tests := []struct {
		name    string
		mutate  func(*ServeConfig)
		wantErr string
	}{
		{name: "valid", mutate: func(*ServeConfig) {}},
		{name: "valid with host and entrypoint", mutate: func(c *ServeConfig) {
			c.ListenAddr, c.Entrypoint = "localhost:80", []string{"nginx"}
		}},
		{name: "valid IPv6", mutate: func(c *ServeConfig) { c.ListenAddr = "[::1]:44771" }},
		{name: "valid sandbox", mutate: func(c *ServeConfig) { c.Sandbox = testSandbox }},
		{name: "no client CA refused", mutate: func(c *ServeConfig) { c.ClientCAs = nil }, wantErr: "client CA"},
		{name: "client CA not PEM", mutate: func(c *ServeConfig) { c.ClientCAs = []byte("nope") }, wantErr: "no CA certificate"},
		{name: "sandbox without a name", mutate: func(c *ServeConfig) { c.Sandbox = &Sandbox{UID: "u", Namespace: "ns"} }, wantErr: "sandbox name"},
		{name: "listen address without port", mutate: func(c *ServeConfig) { c.ListenAddr = "localhost" }, wantErr: "listen address"},
		{name: "health address without port", mutate: func(c *ServeConfig) { c.HealthListenAddr = "localhost" }, wantErr: "health listen address"},
		{name: "listen port out of range", mutate: func(c *ServeConfig) { c.ListenAddr = ":70000" }, wantErr: "port"},
		{name: "listen host invalid", mutate: func(c *ServeConfig) { c.ListenAddr = "bad host:1" }, wantErr: "host"},
		{name: "empty entrypoint command", mutate: func(c *ServeConfig) { c.Entrypoint = []string{""} }, wantErr: "entrypoint"},
		{name: "negative idle timeout", mutate: func(c *ServeConfig) { c.StreamIdleTimeout = -time.Second }, wantErr: "negative"},
		{name: "valid files settings", mutate: func(c *ServeConfig) { c.FilesRoot, c.MaxUploadBytes = "/", DefaultMaxUploadBytes }},
		{name: "relative files root", mutate: func(c *ServeConfig) { c.FilesRoot = "data" }, wantErr: "files root"},
		{name: "relative state directory", mutate: func(c *ServeConfig) { c.StateDir = "run" }, wantErr: "state directory"},
		{name: "negative upload limit", mutate: func(c *ServeConfig) { c.MaxUploadBytes = -1 }, wantErr: "max upload bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.mutate(&cfg)
			err := cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// waitHealthy waits until the probe endpoint at addr answers.
func waitHealthy(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + execdapi.HealthzPath)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	t.Fatalf("execd at %s did not become healthy", addr)
}

// TestServeCommand runs the serve command end to end: the client CA from the environment,
// the sandbox from the environment, the entrypoint, an exec session and the exit code.
func TestServeCommand(t *testing.T) {
	tests := []struct {
		name     string
		clientCA string
		wantCode int
		// exec, when set, runs an exec session while the entrypoint waits for stopFile.
		exec bool
	}{
		{name: "no client CA is refused", clientCA: "", wantCode: 1},
		{name: "entrypoint exit code is execd's", clientCA: string(testCA().pem), wantCode: 7, exec: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			envFile, stopFile := filepath.Join(dir, "env"), filepath.Join(dir, "stop")
			addr, health := freeAddr(t), freeAddr(t)
			t.Setenv(execdapi.EnvClientCA, tt.clientCA)
			t.Setenv(execdapi.EnvSandboxUID, testSandbox.UID)
			t.Setenv(execdapi.EnvSandboxNamespace, testSandbox.Namespace)
			t.Setenv(execdapi.EnvSandboxName, testSandbox.Name)
			entrypoint := fmt.Sprintf(`printf %%s "${%s-unset} $%s" > %s; while [ ! -e %s ]; do sleep 0.05; done; exit 7`,
				execdapi.EnvClientCA, execdapi.EnvSandboxName, envFile, stopFile)
			cmd := NewCommand()
			var stderr bytes.Buffer
			cmd.SetErr(&stderr)
			cmd.SetArgs([]string{"serve", "--listen", addr, "--health-listen", health, "--state-dir", filepath.Join(dir, "state"),
				"--", "sh", "-c", entrypoint})
			ctx := testContext(t)
			code := make(chan int, 1)
			go func() { code <- Execute(ctx, cmd) }()

			if tt.exec {
				waitHealthy(t, health)
				res := execVia(testContext(t), "https://"+addr, execRequest{
					cmd: []string{"sh", "-c", fmt.Sprintf(`printf %%s "${%s-unset}"`, execdapi.EnvClientCA)},
				})
				if res.err != nil || res.stdout != "unset" {
					t.Errorf("exec session sees the client CA variable %q (err %v), want it unset", res.stdout, res.err)
				}
				if err := os.WriteFile(stopFile, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case got := <-code:
				if got != tt.wantCode {
					t.Errorf("exit code = %d, want %d; stderr %q", got, tt.wantCode, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not return")
			}
			if tt.clientCA == "" {
				if !strings.Contains(stderr.String(), "no client CA") {
					t.Errorf("stderr = %q, want it to explain the missing client CA", stderr.String())
				}
				if _, err := os.Stat(envFile); err == nil {
					t.Error("entrypoint ran without a client CA")
				}
				return
			}
			env, err := os.ReadFile(envFile)
			if err != nil || string(env) != "unset "+testSandbox.Name {
				t.Errorf("entrypoint sees %q (%v), want the client CA unset and the sandbox's name", env, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "state", stateKeyFile)); err != nil {
				t.Errorf("no key kept in the state directory: %v", err)
			}
		})
	}
}

// TestServeEntrypointSignals checks how the entrypoint is stopped.
func TestServeEntrypointSignals(t *testing.T) {
	trapping := `trap "exit 42" TERM; while :; do sleep 0.05; done`
	tests := []struct {
		name       string
		entrypoint []string
		stop       func(cancel context.CancelFunc, signals chan<- os.Signal)
		wantCode   int
	}{
		{
			name:       "forwarded SIGTERM",
			entrypoint: []string{"sh", "-c", trapping},
			stop:       func(_ context.CancelFunc, s chan<- os.Signal) { s <- syscall.SIGTERM },
			wantCode:   42,
		},
		{
			name:       "context cancelled without a signal sends SIGTERM",
			entrypoint: []string{"sh", "-c", trapping},
			stop:       func(cancel context.CancelFunc, _ chan<- os.Signal) { cancel() },
			wantCode:   42,
		},
		{
			name:       "killed by a forwarded signal",
			entrypoint: []string{"sleep", "1000"},
			stop:       func(_ context.CancelFunc, s chan<- os.Signal) { s <- syscall.SIGINT },
			wantCode:   128 + int(syscall.SIGINT),
		},
		{
			name:       "missing entrypoint exits 127",
			entrypoint: []string{"no-such-entrypoint-for-execd"},
			stop:       func(context.CancelFunc, chan<- os.Signal) {},
			wantCode:   127,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			addr, health := freeAddr(t), freeAddr(t)
			signals := make(chan os.Signal, 1)
			type result struct {
				code int
				err  error
			}
			done := make(chan result, 1)
			go func() {
				code, err := Serve(ctx, ServeConfig{ListenAddr: addr, HealthListenAddr: health, ClientCAs: testCA().pem, Entrypoint: tt.entrypoint}, signals)
				done <- result{code, err}
			}()
			if tt.wantCode != 127 {
				waitHealthy(t, health)
				time.Sleep(100 * time.Millisecond) // let sh install its trap
			}
			tt.stop(cancel, signals)
			select {
			case r := <-done:
				if r.code != tt.wantCode {
					t.Errorf("exit code = %d (err %v), want %d", r.code, r.err, tt.wantCode)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("serve did not return")
			}
		})
	}
}
