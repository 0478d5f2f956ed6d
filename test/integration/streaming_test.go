package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

// runningSandbox creates a sandbox in a namespace of a simulated node (framework.SimulatedNode)
// and waits until it runs: its pod at a loopback address of its own, where a real execd (the
// one the sandbox image gets) serves over TLS with a temporary files root, certified by the
// controller for its pod. Everything between the client and that execd is the real path:
// kube-apiserver, the aggregator, sandbox-apiserver, mutual TLS.
func runningSandbox(t *testing.T, ns, name string) (root string) {
	t.Helper()
	root = t.TempDir()
	ctx, cancel := context.WithCancel(suiteCtx)
	t.Cleanup(cancel)
	if _, err := framework.StartSimulatedNode(ctx, cp, ns, true, root); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, sandbox(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && s.Status.Phase == sandboxv1alpha1.PhaseRunning, nil
	}); err != nil {
		s, _ := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
		t.Fatalf("sandbox never Running: %v; status %+v", err, s.Status)
	}
	return root
}

func TestExecThroughTheAggregator(t *testing.T) {
	ns := newNamespace(t)
	runningSandbox(t, ns, "run")
	cfg := userConfig("admin-token")
	for _, protocol := range []string{"websocket", "spdy"} {
		t.Run(protocol, func(t *testing.T) {
			u := sandboxes.SandboxV1alpha1().RESTClient().Post().Namespace(ns).Resource("sandboxes").Name("run").SubResource("exec").
				VersionedParams(&sandboxv1alpha1.SandboxExecOptions{
					Command: []string{"sh", "-c", "cat; echo err >&2; exit 3"}, Stdin: true, Stdout: true, Stderr: true,
				}, scheme.ParameterCodec).URL()
			var exec remotecommand.Executor
			var err error
			if protocol == "spdy" {
				exec, err = remotecommand.NewSPDYExecutor(cfg, "POST", u)
			} else {
				exec, err = remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
			}
			if err != nil {
				t.Fatal(err)
			}
			in := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
			var out, errOut bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: bytes.NewReader(in), Stdout: &out, Stderr: &errOut})
			var exitErr utilexec.ExitError
			if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
				t.Errorf("exit: %v, want exit code 3", err)
			}
			if sha256.Sum256(out.Bytes()) != sha256.Sum256(in) || errOut.String() != "err\n" {
				t.Errorf("stdout %d bytes (want %d, same content), stderr %q", out.Len(), len(in), errOut.String())
			}
		})
	}
}

func TestExecOptionsThroughTheAggregator(t *testing.T) {
	ns := newNamespace(t)
	runningSandbox(t, ns, "opts")
	cfg := userConfig("admin-token")
	dir := t.TempDir()
	run := func(o sandboxv1alpha1.SandboxExecOptions) (string, error, time.Duration) {
		o.Stdout, o.Stderr = true, true
		u := sandboxes.SandboxV1alpha1().RESTClient().Post().Namespace(ns).Resource("sandboxes").Name("opts").SubResource("exec").
			VersionedParams(&o, scheme.ParameterCodec).URL()
		exec, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		start := time.Now()
		err = exec.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &out, Stderr: io.Discard})
		return out.String(), err, time.Since(start)
	}
	out, err, _ := run(sandboxv1alpha1.SandboxExecOptions{Command: []string{"sh", "-c", "echo $GREETING; pwd"}, Env: []string{"GREETING=hello"}, WorkingDir: dir})
	if err != nil || out != "hello\n"+dir+"\n" {
		t.Errorf("env and workingDir: %q %v", out, err)
	}
	_, err, took := run(sandboxv1alpha1.SandboxExecOptions{Command: []string{"sleep", "30"}, TimeoutSeconds: 1})
	if err == nil || took > 15*time.Second {
		t.Errorf("timeoutSeconds 1 on sleep 30: %v after %s", err, took)
	}
	_, err, _ = run(sandboxv1alpha1.SandboxExecOptions{Command: []string{"true"}, Env: []string{"1BAD=x"}})
	if err == nil || !strings.Contains(err.Error(), "env") {
		t.Errorf("a bad env name: %v", err)
	}
}

func filesURL(ns, name, path string) string {
	return fmt.Sprintf("%s/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/%s/sandboxes/%s/files/%s", cp.URL, ns, name, path)
}

func TestFilesThroughTheAggregator(t *testing.T) {
	ns := newNamespace(t)
	root := runningSandbox(t, ns, "fs")
	hc, err := rest.HTTPClientFor(userConfig("admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, url string, body io.Reader) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, url, body)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp, data
	}
	payload := bytes.Repeat([]byte("kube-sandbox "), 100000)
	resp, body := do(http.MethodPut, filesURL(ns, "fs", "dir/a.txt?mkdirs=true&mode=0600"), bytes.NewReader(payload))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %s %s", resp.Status, body)
	}
	if got, err := os.ReadFile(filepath.Join(root, "dir", "a.txt")); err != nil || !bytes.Equal(got, payload) {
		t.Errorf("uploaded file in the sandbox: %d bytes, %v", len(got), err)
	}
	resp, body = do(http.MethodGet, filesURL(ns, "fs", "dir/a.txt"), nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, payload) {
		t.Errorf("download: %s, %d bytes", resp.Status, len(body))
	}
	resp, body = do(http.MethodGet, filesURL(ns, "fs", "dir"), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"a.txt"`) {
		t.Errorf("listing: %s %s", resp.Status, body)
	}
	resp, body = do(http.MethodGet, filesURL(ns, "fs", "../../etc/passwd"), nil)
	if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound {
		t.Errorf("traversal: %s %s", resp.Status, body)
	}
	resp, body = do(http.MethodGet, filesURL(ns, "fs", "missing"), nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"NotFound"`) {
		t.Errorf("missing file: %s %s", resp.Status, body)
	}
	resp, _ = do(http.MethodDelete, filesURL(ns, "fs", "dir/a.txt"), nil)
	if resp.StatusCode >= 300 {
		t.Errorf("delete: %s", resp.Status)
	}
	if _, err := os.Stat(filepath.Join(root, "dir", "a.txt")); !os.IsNotExist(err) {
		t.Errorf("file still there after delete: %v", err)
	}
}

func TestProxyThroughTheAggregator(t *testing.T) {
	ns := newNamespace(t)
	runningSandbox(t, ns, "web")
	// A server in the "sandbox" (the pod is at 127.0.0.1): it echoes what reached it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var caller []string
		for k := range r.Header {
			if k == "Authorization" || k == "Cookie" || strings.HasPrefix(k, "X-Remote-") || strings.HasPrefix(k, "Impersonate-") || strings.HasPrefix(k, "X-Forwarded-") {
				caller = append(caller, k)
			}
		}
		fmt.Fprintf(w, "path=%s query=%s caller=%v", r.URL.EscapedPath(), r.URL.RawQuery, caller)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := l.Addr().(*net.TCPAddr).Port

	hc, err := rest.HTTPClientFor(userConfig("admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/%s/sandboxes/web/proxy/%s", cp.URL, ns, path), nil)
		req.Header.Set("Cookie", "session=secret")
		req.Header.Set("X-Forwarded-For", "10.9.8.7")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// The caller's query passes whole (path and replica included), its identity not at all.
	// (The kube-apiserver's aggregator passes the path decoded and the query re-encoded.)
	code, body := get(fmt.Sprintf("%d/hello/world?x=1&path=p&replica=9", port))
	if code != http.StatusOK || body != `path=/hello/world query=path=p&replica=9&x=1 caller=[]` {
		t.Errorf("proxied request: %d %s", code, body)
	}
	if code, body := get(fmt.Sprintf("0:%d/r0", port)); code != http.StatusOK || !strings.HasPrefix(body, "path=/r0 ") {
		t.Errorf("proxied request to replica 0 by name: %d %s", code, body)
	}
	if code, body := get(fmt.Sprintf("1:%d/", port)); code != http.StatusBadRequest {
		t.Errorf("proxy to a replica that does not exist: %d %s, want 400", code, body)
	}
	// Nothing listens on the next port (almost surely): a clear gateway error, not a hang.
	free, _ := framework.FreePort()
	if code, body := get(fmt.Sprintf("%d/", free)); code < 500 {
		t.Errorf("proxy to a closed port: %d %s, want a 5xx", code, body)
	}
	if code, _ := get("notaport/"); code != http.StatusBadRequest {
		t.Errorf("proxy with a bad port: %d, want 400", code)
	}
	if code, _ := get(fmt.Sprintf("%d/", execdapi.Port)); code != http.StatusBadRequest {
		t.Errorf("proxy to execd's port: %d, want 400", code)
	}
}
