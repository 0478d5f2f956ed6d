package execd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
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

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/claimapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/internal/reaper"
)

// HandlerConfig configures NewHandler.
type HandlerConfig struct {
	// Token is the bearer token execd starts with: exec and files requests must present it
	// until a claim (see claimapi) replaces it with the sandbox's token; claims must present
	// it. Required.
	Token string
	// Executor runs the sessions. Required.
	Executor remotecommand.Executor
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
}

// Handler serves execd's HTTP API: the exec endpoint, the files API, the claim
// endpoint, metrics and health probes.
type Handler struct {
	mux *http.ServeMux
	// poolTokenSum is the digest of the token execd started with (HandlerConfig.Token). It
	// opens exec and files until a claim, and claims forever.
	poolTokenSum        [sha256.Size]byte
	executor            remotecommand.Executor
	reaper              *reaper.Reaper
	entrypointStopGrace time.Duration
	streamIdleTimeout   time.Duration
	filesRoot           *os.Root
	maxUploadBytes      int64
	metrics             *metrics

	// Exec connections are hijacked, so http.Server.Shutdown neither waits
	// for them nor ends them; the handler owns them instead.
	mu             sync.Mutex
	stopped        bool
	sessions       sync.WaitGroup
	sessionsCtx    context.Context
	cancelSessions context.CancelFunc

	// claimMu guards the claim state. Requests authenticate under the read lock; a claim
	// holds the write lock until it is complete (entrypoint started, token switched).
	claimMu       sync.RWMutex
	current       *claim // nil until claimed; never changes once set
	entrypoint    *claimedEntrypoint
	claimsStopped bool
	// preClaimCtx is cancelled by the claim: exec sessions the pool's token opened end.
	preClaimCtx         context.Context
	endPreClaimSessions context.CancelCauseFunc
}

// NewHandler returns the execd HTTP handler.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Token == "" {
		return nil, errors.New("an exec token is required")
	}
	if cfg.Executor == nil {
		return nil, errors.New("an executor is required")
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
	ctx, cancel := context.WithCancel(context.Background())
	preClaimCtx, endPreClaim := context.WithCancelCause(context.Background())
	h := &Handler{
		mux:                 http.NewServeMux(),
		poolTokenSum:        sha256.Sum256([]byte(cfg.Token)),
		executor:            cfg.Executor,
		reaper:              cfg.Reaper,
		entrypointStopGrace: cfg.EntrypointStopGrace,
		streamIdleTimeout:   cfg.StreamIdleTimeout,
		filesRoot:           filesRoot,
		maxUploadBytes:      cfg.MaxUploadBytes,
		metrics:             newMetrics(),
		sessionsCtx:         ctx,
		cancelSessions:      cancel,
		preClaimCtx:         preClaimCtx,
		endPreClaimSessions: endPreClaim,
	}
	// GET for websocket clients, POST for SPDY ones (kubectl's default).
	exec := h.metrics.instrument("exec", h.serveExec)
	h.mux.HandleFunc("GET "+ExecPath, exec)
	h.mux.HandleFunc("POST "+ExecPath, exec)
	h.mux.HandleFunc("POST "+claimapi.Path, h.metrics.instrument("claim", h.serveClaim))
	h.mux.HandleFunc("GET "+HealthzPath, h.metrics.instrument("healthz", serveOK))
	h.mux.HandleFunc("GET "+ReadyzPath, h.metrics.instrument("readyz", serveOK))
	h.mux.Handle("GET "+MetricsPath, h.metrics.handler())
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// The files API bypasses the mux: the mux would clean ".." out of the
	// path and redirect, and the files API refuses such paths instead.
	if p := req.URL.Path; p == strings.TrimSuffix(FilesPath, "/") || strings.HasPrefix(p, FilesPath) {
		h.serveFiles(w, req)
		return
	}
	h.mux.ServeHTTP(w, req)
}

// Close releases the files root. Call it after the server stopped.
func (h *Handler) Close() error {
	if h.filesRoot == nil {
		return nil
	}
	return h.filesRoot.Close()
}

// StopSessions refuses new exec sessions, kills the running ones and waits
// until their handlers returned.
func (h *Handler) StopSessions() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.cancelSessions()
	h.sessions.Wait()
}

// Probes only say that execd is up; they carry no information worth a
// token, and kubelet's probes cannot present one.
func serveOK(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
}

func (h *Handler) serveExec(w http.ResponseWriter, req *http.Request) {
	ok, claimed := h.authorize(req)
	if !ok {
		klog.V(2).InfoS("Rejected unauthenticated exec request", "remoteAddr", req.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-execd"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	// Query only: parsing a form body would consume a POST's body, which is
	// part of the upgraded connection.
	cmd := req.URL.Query()[CommandParam]
	if len(cmd) == 0 || cmd[0] == "" {
		http.Error(w, "no command given: set the "+CommandParam+" query parameter", http.StatusBadRequest)
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
	if claimed != nil {
		// The sandbox's env, below the session's own: later entries win.
		session.Env = slices.Concat(claimed.env, session.Env)
	}

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
	if claimed == nil {
		// Opened with the pool's token: a claim ends it (at once if one came meanwhile).
		stopPreClaim := context.AfterFunc(h.preClaimCtx, func() { cancel(context.Cause(h.preClaimCtx)) })
		defer stopPreClaim()
	}
	watched := &disconnectWatcher{ResponseWriter: w, cancel: cancel}

	// argv[0] only: arguments may carry secrets ("sh -c 'TOKEN=...'").
	klog.V(4).InfoS("Exec request", "command", cmd[0], "args", len(cmd)-1, "tty", opts.TTY, "stdin", opts.Stdin, "remoteAddr", req.RemoteAddr)
	ctx = withSessionOptions(ctx, session)
	remotecommand.ServeExec(watched, req.WithContext(ctx), requestedStreams{h.executor, *opts, session.Timeout}, "", "", "", cmd,
		opts, h.streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// authorized reports whether the request carries the token exec and files currently accept.
func (h *Handler) authorized(req *http.Request) bool {
	ok, _ := h.authorize(req)
	return ok
}

// authorize checks the request's token against the one in force: the token execd started
// with until a claim, the claiming sandbox's after it (the claim endpoint checks its own).
// It also returns the claim it checked against, nil before one. The token comes as a bearer
// token, or as the "token" query parameter: the apiserver's WebSocket-to-SPDY translation
// cannot set headers on its upstream request.
func (h *Handler) authorize(req *http.Request) (bool, *claim) {
	token := req.URL.Query().Get(TokenParam)
	if bearer, ok := bearerToken(req); ok {
		token = bearer
	}
	h.claimMu.RLock()
	c := h.current
	h.claimMu.RUnlock()
	want := &h.poolTokenSum
	if c != nil {
		want = &c.tokenSum
	}
	return tokenMatches(token, want), c
}

// bearerToken returns the request's bearer token and whether it has an Authorization header
// of the Bearer scheme.
func bearerToken(req *http.Request) (string, bool) {
	if scheme, bearer, ok := strings.Cut(req.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(bearer), true
	}
	return "", false
}

// tokenMatches compares token with a token digest in constant time. Comparing digests also
// hides the token's length. An empty token never matches.
func tokenMatches(token string, sum *[sha256.Size]byte) bool {
	if token == "" {
		return false
	}
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], sum[:]) == 1
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
