package execd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/internal/reaper"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/mtls"
)

// HandlerConfig configures NewHandler.
type HandlerConfig struct {
	// Executor runs the sessions. Required.
	Executor remotecommand.Executor
	// Sandbox, when set, is the sandbox execd belongs to from the start (a pod made for it);
	// nil for a pool pod, which a claim gives to a sandbox.
	Sandbox *Sandbox
	// IdentityTokenFile is the projected service account token that proves the pod's
	// identity to sandbox-controller (execdapi.IdentityTokenPath).
	IdentityTokenFile string
	// StreamIdleTimeout closes an exec connection without traffic for this
	// long (0: never), as kubelet's streaming server does.
	StreamIdleTimeout time.Duration
	// FilesRoot is the directory the files API serves (see FilesPath); ""
	// disables the files API.
	FilesRoot string
	// MaxUploadBytes caps a file upload; 0 means no cap.
	MaxUploadBytes int64
	// Reaper, when execd is PID 1, must know the entrypoint a claim starts; nil otherwise.
	Reaper *reaper.Reaper
	// EntrypointStopGrace is how long StopClaimedEntrypoint waits between SIGTERM and
	// SIGKILL; 0 means DefaultEntrypointStopGrace.
	EntrypointStopGrace time.Duration
	// ProxyResponseHeaderTimeout bounds the wait for a local server's response headers
	// through the proxy endpoint; 0: DefaultProxyResponseHeaderTimeout.
	ProxyResponseHeaderTimeout time.Duration
	// TaskStateDir keeps the pod's task (execdapi.TaskPath) and its state across container
	// restarts; "" disables tasks: the task endpoints answer 404. It is made if missing.
	// Processes (execdapi.ProcessesPath) keep their records in it and their output in
	// TaskLogDir; without both, the process endpoints answer 404.
	TaskStateDir string
	// TaskLogDir holds the task's logs (execdapi.LogDir); required with TaskStateDir.
	TaskLogDir string
	// ContextDir holds the files of the code contexts' kernels (execdapi.ContextsPath); it is
	// emptied at start. "" disables code contexts: their endpoints answer 404.
	ContextDir string
	// ContextPython is the interpreter of the kernels; "": python3 on the sandbox's PATH.
	ContextPython string
	// TaskHeartbeat is how often a task watch without changes carries a bare newline; 0:
	// execdapi.TaskHeartbeat.
	TaskHeartbeat time.Duration
	// TaskRetryBackoff is the wait before a task's first retry, doubled for each further one
	// up to 10 s; 0: 1 s.
	TaskRetryBackoff time.Duration
	// TaskMaxLogBytes bounds one attempt's log; 0: execdapi.MaxTaskLogBytes.
	TaskMaxLogBytes int64
	// Clock; nil: the real clock.
	Clock clock.PassiveClock
}

// Handler serves execd's HTTP API on its TLS port: exec, files, proxy, identity, claims, the
// task, processes and metrics, each for the client identities the execdapi package names. It
// must be served with ServerTLSConfig, which requires a client certificate of the kube-sandbox
// CA.
type Handler struct {
	mux                 *http.ServeMux
	proxyHandler        http.HandlerFunc
	executor            remotecommand.Executor
	reaper              *reaper.Reaper
	entrypointStopGrace time.Duration
	streamIdleTimeout   time.Duration
	filesRoot           *os.Root
	maxUploadBytes      int64
	metrics             *metrics
	identity            *ServerIdentity
	identityTokenFile   string
	proxy               *localProxy
	clock               clock.PassiveClock
	tasks               *taskRunner     // nil: tasks are disabled
	processes           *processManager // nil: processes are disabled
	contexts            *contextManager // nil: code contexts are disabled
	// watchSlots is a semaphore of the file watches running (execdapi.MaxFileWatches).
	watchSlots chan struct{}

	// Exec connections are hijacked, so http.Server.Shutdown neither waits
	// for them nor ends them; the handler owns them instead.
	mu             sync.Mutex
	stopped        bool
	sessions       sync.WaitGroup
	sessionsCtx    context.Context
	cancelSessions context.CancelFunc

	// claimMu guards the claim state. Requests read it under the read lock; a claim holds
	// the write lock until it is complete (entrypoint started).
	claimMu       sync.RWMutex
	current       *claim // nil until claimed; never changes once set
	entrypoint    *claimedEntrypoint
	claimsStopped bool
}

// NewHandler returns the execd HTTP handler for the server identity id.
func NewHandler(cfg HandlerConfig, id *ServerIdentity) (*Handler, error) {
	if cfg.Executor == nil {
		return nil, errors.New("an executor is required")
	}
	if id == nil {
		return nil, errors.New("a server identity is required")
	}
	if cfg.MaxUploadBytes < 0 {
		return nil, errors.New("the upload limit must not be negative")
	}
	var filesRoot *os.Root
	if cfg.FilesRoot != "" {
		var err error
		if filesRoot, err = os.OpenRoot(cfg.FilesRoot); err != nil {
			return nil, fmt.Errorf("opening the files root: %w", err)
		}
	}
	if cfg.EntrypointStopGrace < 0 {
		return nil, errors.New("the entrypoint stop grace period must not be negative")
	}
	if cfg.EntrypointStopGrace == 0 {
		cfg.EntrypointStopGrace = DefaultEntrypointStopGrace
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.TaskHeartbeat < 0 || cfg.TaskRetryBackoff < 0 || cfg.TaskMaxLogBytes < 0 {
		return nil, errors.New("the task heartbeat, retry backoff and log bound must not be negative")
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Handler{
		mux:                 http.NewServeMux(),
		watchSlots:          make(chan struct{}, execdapi.MaxFileWatches),
		executor:            cfg.Executor,
		reaper:              cfg.Reaper,
		entrypointStopGrace: cfg.EntrypointStopGrace,
		streamIdleTimeout:   cfg.StreamIdleTimeout,
		filesRoot:           filesRoot,
		maxUploadBytes:      cfg.MaxUploadBytes,
		metrics:             newMetrics(),
		identity:            id,
		identityTokenFile:   cfg.IdentityTokenFile,
		proxy:               newLocalProxy(cfg.ProxyResponseHeaderTimeout),
		clock:               cfg.Clock,
		sessionsCtx:         ctx,
		cancelSessions:      cancel,
	}
	if s := cfg.Sandbox; s != nil {
		if s.UID == "" || s.Namespace == "" || s.Name == "" {
			return nil, errors.New("a sandbox needs a UID, a namespace and a name")
		}
		h.current = &claim{sandboxUID: s.UID, namespace: s.Namespace, name: s.Name,
			resp: execdapi.ClaimResponse{SandboxUID: s.UID}}
	}
	processes, err := newHandlerProcesses(cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	h.processes = processes
	contexts, err := newHandlerContexts(cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	h.contexts = contexts
	if cfg.TaskStateDir != "" {
		// Last: it resumes a task a previous execd of this container left, which nothing
		// stops if NewHandler fails after it.
		tasks, err := newTaskRunner(taskConfig{
			stateDir: cfg.TaskStateDir, logDir: cfg.TaskLogDir, heartbeat: cfg.TaskHeartbeat,
			retryBackoff: cfg.TaskRetryBackoff, maxLogBytes: cfg.TaskMaxLogBytes,
		}, cfg.Reaper, func() time.Time { return cfg.Clock.Now().UTC() }, h.metrics.taskAttempts)
		if err != nil {
			cancel()
			return nil, err
		}
		h.tasks = tasks
	}
	// GET for websocket clients, POST for SPDY ones (kubectl's default).
	exec := h.metrics.instrument("exec", h.serveExec)
	h.mux.HandleFunc("GET "+execdapi.ExecPath, exec)
	h.mux.HandleFunc("POST "+execdapi.ExecPath, exec)
	h.mux.HandleFunc("POST "+execdapi.ClaimPath, h.metrics.instrument("claim", h.serveClaim))
	h.mux.HandleFunc("GET "+execdapi.IdentityPath, h.metrics.instrument("identity", h.serveIdentity))
	h.mux.HandleFunc("PUT "+execdapi.IdentityPath, h.metrics.instrument("certificate", h.serveCertificate))
	h.mux.HandleFunc("PUT "+execdapi.TaskPath, h.metrics.instrument("task:start", h.serveTaskStart))
	h.mux.HandleFunc("GET "+execdapi.TaskPath, h.metrics.instrument("task", h.serveTask))
	h.mux.HandleFunc("GET "+execdapi.TaskLogPath, h.metrics.instrument("task:log", h.serveTaskLog))
	h.registerProcessRoutes()
	h.registerContextRoutes()
	metrics := h.metrics.handler()
	h.mux.HandleFunc("GET "+MetricsPath, func(w http.ResponseWriter, req *http.Request) {
		if h.allow(w, req, execdapi.APIServerIdentity, execdapi.ControllerIdentity) {
			metrics.ServeHTTP(w, req)
		}
	})
	h.proxyHandler = h.metrics.instrument("proxy", h.serveProxy)
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// The files and proxy APIs bypass the mux: the mux would clean ".." and "//" out of the
	// path and redirect; the files API refuses such paths instead, and the proxy passes them
	// to the sandbox's server as they came.
	switch p := req.URL.Path; {
	case p == strings.TrimSuffix(FilesPath, "/") || strings.HasPrefix(p, FilesPath):
		h.serveFiles(w, req)
	case strings.HasPrefix(p, execdapi.ProxyPath):
		h.proxyHandler(w, req)
	default:
		h.mux.ServeHTTP(w, req)
	}
}

// Close releases the files root. Call it after the server stopped.
func (h *Handler) Close() error {
	if h.filesRoot == nil {
		return nil
	}
	return h.filesRoot.Close()
}

// StopSessions refuses new exec sessions, task watches and log follows, ends the running ones
// and waits until their handlers returned. It also kills the task's running attempt, if any
// (its process group: SIGTERM, then SIGKILL after a short grace), and starts no other: execd
// stops because its container does. The task's state stays Running, so that an execd of a
// restarted container records the attempt as ContainerRestarted. The running processes are
// stopped the same way, and their records stay, so that it reports them Lost. The code
// contexts' kernels end.
func (h *Handler) StopSessions() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.cancelSessions()
	if h.tasks != nil {
		h.tasks.stop()
	}
	h.processes.stop()
	h.contexts.stop()
	h.sessions.Wait()
}

// allow answers 403 unless req comes from one of identities. The TLS layer has verified the
// certificate already; this decides what each component may do.
func (h *Handler) allow(w http.ResponseWriter, req *http.Request, identities ...string) bool {
	who := mtls.ClientIdentity(req)
	if who != "" && slices.Contains(identities, who) {
		return true
	}
	klog.V(2).InfoS("Refused a request", "path", req.URL.Path, "client", who, "remoteAddr", req.RemoteAddr)
	http.Error(w, fmt.Sprintf("forbidden: %q may not use %s", who, req.URL.Path), http.StatusForbidden)
	return false
}

// sandboxOf returns the claim a request for the sandbox (exec, files, proxy) is served under,
// or why it is refused: status code and message. The request must name the sandbox it is for
// (SandboxUIDHeader; an exec may name it in ExecSandboxUIDParam instead, as proxies may drop
// headers of an upgrade), and execd must belong to that one.
func (h *Handler) sandboxOf(req *http.Request) (*claim, int, string) {
	if who := mtls.ClientIdentity(req); who != execdapi.APIServerIdentity {
		return nil, http.StatusForbidden, fmt.Sprintf("forbidden: %q may not use %s", who, req.URL.Path)
	}
	return h.namedSandbox(req)
}

// namedSandbox is sandboxOf for any client: the claim req is served under, or why not.
func (h *Handler) namedSandbox(req *http.Request) (*claim, int, string) {
	h.claimMu.RLock()
	c := h.current
	h.claimMu.RUnlock()
	if c == nil {
		return nil, http.StatusConflict, "sandbox-execd is not allocated to a sandbox"
	}
	named := false
	for _, uid := range []string{req.Header.Get(execdapi.SandboxUIDHeader), execQuerySandbox(req)} {
		if uid == "" {
			continue
		}
		if uid != c.sandboxUID {
			return nil, http.StatusConflict, fmt.Sprintf("sandbox-execd belongs to another sandbox than %s", uid)
		}
		named = true
	}
	if !named {
		return nil, http.StatusBadRequest, "the request names no sandbox: set the " + execdapi.SandboxUIDHeader + " header"
	}
	return c, 0, ""
}

// execQuerySandbox is the sandbox an exec or a process attach names in its query, "" for
// other requests.
func execQuerySandbox(req *http.Request) string {
	if req.URL.Path != execdapi.ExecPath && !isProcessAttachPath(req.URL.Path) {
		return ""
	}
	return req.URL.Query().Get(execdapi.ExecSandboxUIDParam)
}

// Claimed reports the sandbox execd belongs to, if any.
func (h *Handler) Claimed() (Sandbox, bool) {
	h.claimMu.RLock()
	defer h.claimMu.RUnlock()
	if h.current == nil {
		return Sandbox{}, false
	}
	return Sandbox{UID: h.current.sandboxUID, Namespace: h.current.namespace, Name: h.current.name}, true
}

func (h *Handler) serveExec(w http.ResponseWriter, req *http.Request) {
	claimed, code, msg := h.sandboxOf(req)
	if claimed == nil {
		http.Error(w, msg, code)
		return
	}
	// Query only: parsing a form body would consume a POST's body, which is
	// part of the upgraded connection.
	cmd := req.URL.Query()[execdapi.ExecCommandParam]
	if len(cmd) == 0 || cmd[0] == "" {
		http.Error(w, "no command given: set the "+execdapi.ExecCommandParam+" query parameter", http.StatusBadRequest)
		return
	}
	opts, err := remotecommand.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	session, err := parseSessionOptions(req.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The sandbox's env, below the session's own: later entries win.
	session.Env = slices.Concat(claimed.env, session.Env)

	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		http.Error(w, "sandbox-execd is shutting down", http.StatusServiceUnavailable)
		return
	}
	h.sessions.Add(1)
	h.mu.Unlock()
	defer h.sessions.Done()

	// The session ends when the client goes away (see disconnectWatcher) or
	// execd shuts down.
	ctx, cancel := context.WithCancelCause(req.Context())
	defer cancel(nil)
	stop := context.AfterFunc(h.sessionsCtx, func() { cancel(errors.New("sandbox-execd is shutting down")) })
	defer stop()
	watched := &disconnectWatcher{ResponseWriter: w, cancel: cancel}

	// argv[0] only: arguments may carry secrets ("sh -c 'TOKEN=...'").
	klog.V(4).InfoS("Exec request", "command", cmd[0], "args", len(cmd)-1, "tty", opts.TTY, "stdin", opts.Stdin, "remoteAddr", req.RemoteAddr)
	ctx = withSessionOptions(ctx, session)
	remotecommand.ServeExec(watched, req.WithContext(ctx), requestedStreams{h.executor, *opts, session.Timeout}, "", "", "", cmd,
		opts, h.streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// requestedStreams hands the executor only the streams the client asked
// for. Over websockets ServeExec passes every channel, requested or not, and
// copying a never-ending unrequested stdin would keep the command's input
// open forever.
type requestedStreams struct {
	remotecommand.Executor
	opts    remotecommand.Options
	timeout time.Duration
}

func (r requestedStreams) ExecInContainer(ctx context.Context, name, uid, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	if !r.opts.Stdin {
		in = nil
	}
	if !r.opts.Stdout {
		out = nil
	}
	if !r.opts.Stderr {
		errw = nil
	}
	if r.timeout > 0 {
		timeout = r.timeout
	}
	return r.Executor.ExecInContainer(ctx, name, uid, container, cmd, in, out, errw, tty, resize, timeout)
}

// disconnectWatcher notices when the client of a hijacked connection goes
// away. net/http stops watching a connection once it is hijacked, so the
// request context is not cancelled when the client disconnects, and a silent
// command ("sleep 1000") would otherwise outlive its session. The watcher
// cancels the session when the connection fails or is closed, which is also
// how the stream idle timeout ends a session.
//
// It deliberately has no Unwrap method: ServeExec unwraps writers for
// websockets, and then the watcher would be bypassed.
type disconnectWatcher struct {
	http.ResponseWriter
	cancel context.CancelCauseFunc
}

func (d *disconnectWatcher) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(d.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	wc := &watchedConn{Conn: conn, cancel: d.cancel}
	// The server may already have read bytes past the request headers (a
	// client can send its first frames right away); they must come first.
	var r io.Reader = wc
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ := brw.Reader.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(buffered)), wc)
	}
	return wc, bufio.NewReadWriter(bufio.NewReader(r), bufio.NewWriter(wc)), nil
}

type watchedConn struct {
	net.Conn
	cancel context.CancelCauseFunc
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.cancel(errors.New("exec client disconnected"))
	}
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.cancel(errors.New("exec client disconnected"))
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.cancel(errors.New("exec connection closed"))
	return c.Conn.Close()
}

// HealthHandler answers the kubelet's probes, in plain HTTP on execdapi.HealthPort. Probes
// only learn that execd is up; they carry no certificate.
func HealthHandler() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	}
	mux.HandleFunc("GET "+execdapi.HealthzPath, ok)
	mux.HandleFunc("GET "+execdapi.ReadyzPath, ok)
	return mux
}
