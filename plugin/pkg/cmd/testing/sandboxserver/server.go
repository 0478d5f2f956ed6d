// Package sandboxserver is a stand-in for the sandbox API server in tests: the files
// subresource is served by execd's own handler over a temporary directory, its answers typed as
// the real server types them, the proxy subresource echoes HTTP requests and upgraded
// connections, the log subresource serves the task logs a test sets (see log.go), and the
// tasks subresource the sandbox or the real server's table of its tasks (see tasks.go); the
// processes subresource serves processes kept in memory, validated and tabled by the real
// server's code, and the log subresource their output (see processes.go). The sandboxes themselves are kept in memory (see objects.go) and served as the API server does:
// get, list and watch, create, JSON merge patch and update, with resourceVersions, generations
// and conflicts, label and field selectors, and as tables from the real server's table code
// (see table.go).
package sandboxserver

import (
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
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxregistry "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/registry/sandbox"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// UserToken is the bearer token the server accepts; a ServerFactory's config must carry it.
const UserToken = "user-token"

// Prefix is the path of the namespaces of the sandbox API.
const Prefix = "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/"

// AllNamespacesPath is the path of the sandboxes of all namespaces: those of the server's
// namespace, the only one it has.
const AllNamespacesPath = "/apis/sandbox.kube-sandbox.io/v1alpha1/sandboxes"

// Request is what the server received.
type Request struct {
	Method string
	// Path is the escaped path, RawQuery the query as sent.
	Path     string
	RawQuery string
	Header   http.Header
	// Body is the body of a request for a sandbox, the collection or processes (a start or a
	// signal); other subresources' bodies are not kept.
	Body []byte
}

// Echo is the proxy subresource's reply to a plain HTTP request.
type Echo struct {
	Method        string `json:"method"`
	Path          string `json:"path"`
	RawQuery      string `json:"rawQuery"`
	Authorization string `json:"authorization"`
	Cookie        string `json:"cookie"`
}

// Server is the stand-in API server.
type Server struct {
	*httptest.Server
	// Root is the files root of every sandbox it knows.
	Root string
	// Namespace is the namespace of the sandboxes it knows; others are not found. Sandboxes
	// are the names New was given.
	Namespace string
	Sandboxes []string

	// Hooks for tests, called without the server's lock, so they may call its methods.
	// BeforeWrite runs before a PATCH or PUT of the named sandbox is applied: changing the
	// sandbox in it makes the write conflict, as another writer's would.
	BeforeWrite func(name string)
	// AfterWrite runs after a request created or changed a sandbox, with what was stored.
	AfterWrite func(sb *sandboxv1alpha1.Sandbox)
	// WatchStarted runs when a watch has sent its initial events.
	WatchStarted func()

	// Now is the clock of the tables' AGE and EXPIRES; time.Now when nil.
	Now func() time.Time

	execd *execd.Handler

	mu       sync.Mutex
	requests []Request
	store
	logs map[taskLogKey]string
	// procs are the processes of each sandbox, processLogs their output, nextPID the last
	// process started.
	procs       map[string][]*sandboxv1alpha1.SandboxProcess
	processLogs map[processLogKey]string
	nextPID     int32
}

// New starts a Server knowing the sandboxes of namespace, closed when the test ends.
func New(t testing.TB, namespace string, sandboxes ...string) *Server {
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
		Sandbox: &execd.Sandbox{UID: sandboxUID, Namespace: namespace, Name: "any"}}, id)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Root: root, Namespace: namespace, Sandboxes: sandboxes, execd: h, store: newStore()}
	for _, name := range sandboxes {
		s.Add(&sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	s.Server = httptest.NewServer(s)
	t.Cleanup(func() {
		// Ends the watches, which would hold Close up.
		close(s.done)
		s.CloseClientConnections()
		s.Close()
		_ = h.Close()
	})
	return s
}

// Requests returns the requests received so far and forgets them.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.requests
	s.requests = nil
	return r
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r := Request{Method: req.Method, Path: req.URL.EscapedPath(), RawQuery: req.URL.RawQuery, Header: req.Header.Clone()}
	rest, ok := strings.CutPrefix(req.URL.Path, Prefix+s.Namespace+"/sandboxes")
	allNamespaces := req.URL.Path == AllNamespacesPath
	if allNamespaces {
		rest, ok = "", true
	}
	name, sub := "", ""
	if ok && rest != "" {
		name, rest, _ = strings.Cut(strings.TrimPrefix(rest, "/"), "/")
		sub, rest, _ = strings.Cut(rest, "/")
	}
	if ok && sub == "" {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		r.Body = body
	}
	if ok && sub == "processes" {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			writeStatus(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		r.Body = body
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	s.mu.Lock()
	s.requests = append(s.requests, r)
	s.mu.Unlock()

	if req.Header.Get("Authorization") != "Bearer "+UserToken {
		writeStatus(w, apierrors.NewUnauthorized("Unauthorized"))
		return
	}
	if !ok {
		writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), ""))
		return
	}
	if name == "" {
		s.serveCollection(w, req, r.Body, allNamespaces)
		return
	}
	if !s.known(name) {
		writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), name))
		return
	}
	switch sub {
	case "":
		s.serveSandbox(w, req, name, r.Body)
	case "files":
		// As the real server: on to execd as sandbox-apiserver (whose certificate the TLS
		// layer would have verified), for the sandbox, with the path after files/; its
		// descriptions typed.
		out := req.Clone(req.Context())
		out.URL.Path = execd.FilesPath + rest
		out.URL.RawPath = ""
		out.Header.Set(execdapi.SandboxUIDHeader, sandboxUID)
		out.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: execdapi.APIServerIdentity}}}}}
		rec := httptest.NewRecorder()
		s.execd.ServeHTTP(rec, out)
		resp := rec.Result()
		resp.Request = req
		if err := sandboxregistry.TypedDescription(resp, sandboxregistry.DescribedKind(req)); err != nil {
			writeStatus(w, apierrors.NewInternalError(err))
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	case "proxy":
		s.proxy(w, req)
	case "log":
		s.serveLog(w, req, name)
	case "tasks":
		s.serveTasks(w, req, name)
	case "processes":
		s.serveProcesses(w, req, name, rest)
	default:
		writeStatus(w, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes/"+sub), name))
	}
}

func (s *Server) known(name string) bool {
	return s.Sandbox(name) != nil
}

// proxy echoes a plain request as JSON, and an upgrade request by switching protocols and
// echoing the bytes of the connection back.
func (s *Server) proxy(w http.ResponseWriter, req *http.Request) {
	if strings.EqualFold(req.Header.Get("Connection"), "upgrade") && req.Header.Get("Upgrade") != "" {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + req.Header.Get("Upgrade") + "\r\n\r\n")
		if rw.Flush() != nil {
			return
		}
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		// Echo until the client closes; what the reader buffered comes first.
		buf := make([]byte, 32<<10)
		for {
			n, err := rw.Read(buf)
			if n > 0 {
				if _, werr := conn.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Echo{
		Method:        req.Method,
		Path:          req.URL.EscapedPath(),
		RawQuery:      req.URL.RawQuery,
		Authorization: req.Header.Get("Authorization"),
		Cookie:        req.Header.Get("Cookie"),
	})
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.APIVersion, status.Kind = "v1", "Status"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}

// sandboxUID is the sandbox the server's execd belongs to.
const sandboxUID = "uid"

// noExec refuses commands: these tests need only execd's files API.
type noExec struct{}

func (noExec) ExecInContainer(context.Context, string, string, string, []string, io.Reader, io.WriteCloser, io.WriteCloser, bool, <-chan remotecommand.TerminalSize, time.Duration) error {
	return errors.New("exec is not supported by this test server")
}
