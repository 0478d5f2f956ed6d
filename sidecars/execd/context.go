package execd

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/internal/jupyter"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/httpjson"
)

// Code contexts (execdapi.ContextsPath): a Jupyter kernel per context, started and driven by
// the jupyter package. The manager keeps them in memory only: a kernel does not outlive its
// container, so a restarted execd has none to report.

const (
	maxContextRequestBytes = 1 << 20
	maxRunRequestBytes     = execdapi.MaxRunCodeBytes + 64<<10
	// runInterruptGrace bounds how long a run waits for the kernel to stop after an
	// interrupt before the answer ends anyway.
	runInterruptGrace = 10 * time.Second
)

var contextsResource = schema.GroupResource{Resource: "contexts"}

// contextConfig configures a contextManager.
type contextConfig struct {
	// dir holds a directory per kernel: its connection file.
	dir string
	// python is the interpreter; "": python3 on the kernel's PATH.
	python string
	// max bounds the contexts; 0: execdapi.MaxContexts.
	max          int
	startTimeout time.Duration
}

// contextManager is the contexts of a pod.
type contextManager struct {
	cfg contextConfig
	now func() time.Time

	mu       sync.Mutex
	stopped  bool
	starting int // contexts being made, counted against the limit
	ctxs     map[string]*codeContext
	wg       sync.WaitGroup // the watchers of the kernels
}

// codeContext is one context: its kernel and what the API shows of it.
type codeContext struct {
	id, workingDir string
	start          time.Time
	kernel         *jupyter.Kernel

	mu          sync.Mutex
	busy        bool
	interrupted bool // the current run was interrupted on request
	count       int
	lastRun     time.Time
	dead        string // why the kernel ended; "": it runs
}

func (c *codeContext) snapshot() execdapi.ContextState {
	c.mu.Lock()
	defer c.mu.Unlock()
	info := c.kernel.Info()
	st := execdapi.ContextState{
		ID: c.id, Language: execdapi.LanguagePython, Phase: execdapi.ContextIdle, LanguageVersion: info.LanguageVersion,
		PID: c.kernel.PID(), WorkingDir: c.workingDir, ExecutionCount: c.count, StartTime: c.start, LastRunTime: c.lastRun,
	}
	switch {
	case c.dead != "":
		st.Phase, st.Message, st.PID = execdapi.ContextDead, c.dead, 0
	case c.busy:
		st.Phase = execdapi.ContextBusy
	}
	return st
}

// newHandlerContexts is the context manager of a Handler; nil when it has no directory for
// the kernels' files.
func newHandlerContexts(cfg HandlerConfig) (*contextManager, error) {
	if cfg.ContextDir == "" {
		return nil, nil
	}
	return newContextManager(contextConfig{dir: cfg.ContextDir, python: cfg.ContextPython},
		func() time.Time { return cfg.Clock.Now().UTC() })
}

// newContextManager empties dir of what an earlier execd of this container left: the kernels
// ended with it.
func newContextManager(cfg contextConfig, now func() time.Time) (*contextManager, error) {
	if cfg.max <= 0 {
		cfg.max = execdapi.MaxContexts
	}
	if cfg.startTimeout <= 0 {
		cfg.startTimeout = execdapi.ContextStartTimeout
	}
	if err := os.RemoveAll(cfg.dir); err != nil {
		return nil, fmt.Errorf("context directory: %w", err)
	}
	if err := os.MkdirAll(cfg.dir, 0o700); err != nil {
		return nil, fmt.Errorf("context directory: %w", err)
	}
	return &contextManager{cfg: cfg, now: now, ctxs: map[string]*codeContext{}}, nil
}

// create starts a kernel for req with env and answers once it is ready.
func (m *contextManager) create(ctx context.Context, req *execdapi.ContextRequest, env []string) (*codeContext, *apierrors.StatusError) {
	m.mu.Lock()
	switch {
	case m.stopped:
		m.mu.Unlock()
		return nil, apierrors.NewServiceUnavailable("sandbox-execd is shutting down")
	case len(m.ctxs)+m.starting >= m.cfg.max:
		m.mu.Unlock()
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf(
			"the sandbox has %d code contexts, the most it may have: delete one", m.cfg.max), 0)
	}
	id := req.ID
	if id == "" {
		var err error
		if id, err = m.newIDLocked(); err != nil {
			m.mu.Unlock()
			return nil, apierrors.NewInternalError(fmt.Errorf("making a context ID: %w", err))
		}
	} else if _, taken := m.ctxs[id]; taken {
		m.mu.Unlock()
		return nil, apierrors.NewAlreadyExists(contextsResource, id)
	}
	// A placeholder keeps the ID taken while the kernel starts.
	m.ctxs[id] = nil
	m.starting++
	m.mu.Unlock()

	c, serr := m.startKernel(ctx, id, req, env)
	m.mu.Lock()
	m.starting--
	if serr != nil || m.stopped {
		delete(m.ctxs, id)
		stopped := m.stopped
		m.mu.Unlock()
		if serr == nil && stopped {
			_ = c.kernel.Close()
			return nil, apierrors.NewServiceUnavailable("sandbox-execd is shutting down")
		}
		return nil, serr
	}
	m.ctxs[id] = c
	m.wg.Add(1)
	m.mu.Unlock()
	go m.watch(c)
	klog.V(2).InfoS("Started a code context", "context", id, "pid", c.kernel.PID())
	return c, nil
}

func (m *contextManager) startKernel(ctx context.Context, id string, req *execdapi.ContextRequest, env []string) (*codeContext, *apierrors.StatusError) {
	dir := filepath.Join(m.cfg.dir, id)
	if err := os.RemoveAll(dir); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if req.WorkingDir != "" {
		if fi, err := os.Stat(req.WorkingDir); err != nil || !fi.IsDir() {
			_ = os.RemoveAll(dir)
			return nil, processError(http.StatusUnprocessableEntity, fmt.Sprintf("workingDir %s is not a directory of the sandbox", req.WorkingDir))
		}
	}
	start := m.now()
	k, err := jupyter.Start(ctx, jupyter.Config{
		Python: m.cfg.python, Dir: req.WorkingDir, Env: env, StateDir: dir, StartTimeout: m.cfg.startTimeout,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		if ctx.Err() != nil {
			return nil, processError(http.StatusServiceUnavailable, "the request ended before the kernel started")
		}
		var se *jupyter.StartError
		if errors.As(err, &se) {
			msg := "the code context's kernel did not start: " + se.Err.Error()
			if tail := strings.TrimSpace(se.Stderr); tail != "" {
				msg += "; it said: " + lastLines(tail, 5)
			}
			msg += " (code contexts need python3 with ipykernel in the sandbox's image)"
			return nil, processError(http.StatusUnprocessableEntity, msg)
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("starting a kernel: %w", err))
	}
	return &codeContext{id: id, workingDir: req.WorkingDir, start: start, kernel: k}, nil
}

// lastLines is the last n lines of s, joined with " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// watch marks c Dead when its kernel ends by itself.
func (m *contextManager) watch(c *codeContext) {
	defer m.wg.Done()
	<-c.kernel.Done()
	msg := "the kernel ended"
	if err := c.kernel.Err(); err != nil {
		msg = err.Error()
	}
	c.markDead(msg)
}

// markDead records why c's kernel ended, once.
func (c *codeContext) markDead(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead == "" {
		c.dead = msg
		klog.V(2).InfoS("A code context's kernel ended", "context", c.id, "reason", msg)
	}
}

func (m *contextManager) newIDLocked() (string, error) {
	b := make([]byte, processIDBytes)
	for {
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		if id := "c-" + processIDEncoding.EncodeToString(b); !m.taken(id) {
			return id, nil
		}
	}
}

func (m *contextManager) taken(id string) bool {
	_, ok := m.ctxs[id]
	return ok
}

// lookup is the context id, or nil (also while it starts).
func (m *contextManager) lookup(id string) *codeContext {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ctxs[id]
}

func (m *contextManager) list() []execdapi.ContextState {
	m.mu.Lock()
	cs := make([]*codeContext, 0, len(m.ctxs))
	for _, c := range m.ctxs {
		if c != nil {
			cs = append(cs, c)
		}
	}
	m.mu.Unlock()
	out := make([]execdapi.ContextState, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.snapshot())
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].StartTime.Equal(out[j].StartTime) {
			return out[i].StartTime.Before(out[j].StartTime)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// remove ends c's kernel and forgets it.
func (m *contextManager) remove(c *codeContext) execdapi.ContextState {
	m.mu.Lock()
	if m.ctxs[c.id] == c {
		delete(m.ctxs, c.id)
	}
	m.mu.Unlock()
	c.mu.Lock()
	if c.dead == "" {
		c.dead = "deleted"
	}
	c.mu.Unlock()
	_ = c.kernel.Close()
	_ = os.RemoveAll(filepath.Join(m.cfg.dir, c.id))
	klog.V(2).InfoS("Deleted a code context", "context", c.id)
	return c.snapshot()
}

// stop ends every kernel; no context is made after it.
func (m *contextManager) stop() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.stopped = true
	cs := make([]*codeContext, 0, len(m.ctxs))
	for _, c := range m.ctxs {
		if c != nil {
			cs = append(cs, c)
		}
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { _ = c.kernel.Close() })
	}
	wg.Wait()
	m.wg.Wait()
}

// beginRun marks c busy, or says why it cannot run.
func (c *codeContext) beginRun(now time.Time) *apierrors.StatusError {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.dead != "":
		return processError(http.StatusGone, fmt.Sprintf("code context %s is dead (%s): delete it and make another", c.id, c.dead))
	case c.busy:
		return apierrors.NewConflict(contextsResource, c.id, errors.New("a run is in progress: wait for it, or interrupt it"))
	}
	c.busy, c.interrupted, c.lastRun = true, false, now
	return nil
}

func (c *codeContext) endRun(count int) (interrupted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy = false
	if count > c.count {
		c.count = count
	}
	return c.interrupted
}

// interrupt interrupts c's run; false when none runs.
func (c *codeContext) interrupt() (bool, error) {
	c.mu.Lock()
	if !c.busy || c.dead != "" {
		c.mu.Unlock()
		return false, nil
	}
	c.interrupted = true
	c.mu.Unlock()
	return true, c.kernel.Interrupt()
}

// runWriter writes a run's events, one JSON line each, flushing each one so that the client
// sees outputs as they come. It bounds the stream text it passes.
type runWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	enc       *json.Encoder
	streamed  [2]int // bytes of stdout, stderr written
	truncated bool
	failed    bool // the client went away
}

func newRunWriter(w http.ResponseWriter) *runWriter {
	return &runWriter{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w)}
}

func (rw *runWriter) write(ev *execdapi.RunEvent) {
	if rw.failed {
		return
	}
	if err := rw.enc.Encode(ev); err != nil {
		rw.failed = true
		return
	}
	if err := rw.rc.Flush(); err != nil {
		rw.failed = true
	}
}

// output passes one of the kernel's outputs on.
func (rw *runWriter) output(o jupyter.Output) {
	ev := &execdapi.RunEvent{}
	switch o.Type {
	case jupyter.Stdout, jupyter.Stderr:
		i, t := 0, execdapi.RunStdout
		if o.Type == jupyter.Stderr {
			i, t = 1, execdapi.RunStderr
		}
		text := o.Text
		if left := execdapi.MaxRunStreamBytes - rw.streamed[i]; len(text) > left {
			text, rw.truncated = text[:max(left, 0)], true
		}
		if text == "" {
			return
		}
		rw.streamed[i] += len(text)
		ev.Type, ev.Text = t, text
	case jupyter.Result, jupyter.Display:
		ev.Type, ev.Text, ev.Data, ev.ExecutionCount = execdapi.RunResult, o.Text, o.Data, o.ExecutionCount
		if o.Type == jupyter.Display {
			ev.Type = execdapi.RunDisplay
		}
		if size := eventDataSize(ev); size > execdapi.MaxRunEventBytes {
			// Too large to pass whole: its text stands for it.
			ev.Data = map[string]string{"text/plain": ev.Text}
			rw.truncated = true
		}
	case jupyter.Error:
		ev.Type, ev.Error = execdapi.RunError, runError(o.Error)
	default:
		return
	}
	rw.write(ev)
}

func eventDataSize(ev *execdapi.RunEvent) int {
	n := len(ev.Text)
	for k, v := range ev.Data {
		n += len(k) + len(v)
	}
	return n
}

func runError(e *jupyter.ErrorInfo) *execdapi.RunErrorInfo {
	if e == nil {
		return nil
	}
	tb := make([]string, len(e.Traceback))
	for i, l := range e.Traceback {
		tb[i] = jupyter.StripANSI(l)
	}
	return &execdapi.RunErrorInfo{Name: e.Name, Value: e.Value, Traceback: tb}
}

// HTTP.

// registerContextRoutes adds the endpoints of execdapi.ContextsPath to the mux.
func (h *Handler) registerContextRoutes() {
	one := execdapi.ContextsPath + "/{id}"
	h.mux.HandleFunc("POST "+execdapi.ContextsPath, h.metrics.instrument("context:create", h.serveContextCreate))
	h.mux.HandleFunc("GET "+execdapi.ContextsPath, h.metrics.instrument("context:list", h.serveContextList))
	h.mux.HandleFunc("GET "+one, h.metrics.instrument("context:get", h.serveContextGet))
	h.mux.HandleFunc("DELETE "+one, h.metrics.instrument("context:delete", h.serveContextDelete))
	h.mux.HandleFunc("POST "+one+"/"+execdapi.ContextRunSubpath, h.metrics.instrument("context:run", h.serveContextRun))
	h.mux.HandleFunc("POST "+one+"/"+execdapi.ContextInterruptSubpath, h.metrics.instrument("context:interrupt", h.serveContextInterrupt))
}

// contextsOf returns the claim a context request is served under, or answers why it is
// refused: as for a process.
func (h *Handler) contextsOf(w http.ResponseWriter, req *http.Request) (*claim, bool) {
	c, code, msg := h.sandboxOf(req)
	if c == nil {
		writeProcessError(w, processError(code, msg))
		return nil, false
	}
	if h.contexts == nil {
		writeProcessError(w, processError(http.StatusNotFound,
			"sandbox-execd runs no code contexts here: it has no state directory for them"))
		return nil, false
	}
	return c, true
}

// contextOf is the context the request's path names, or answers 404.
func (h *Handler) contextOf(w http.ResponseWriter, req *http.Request) *codeContext {
	id := req.PathValue("id")
	c := h.contexts.lookup(id)
	if c == nil {
		writeProcessError(w, apierrors.NewNotFound(contextsResource, id))
	}
	return c
}

// contextEnv is the environment of a kernel: the sandbox's, then the request's.
func contextEnv(c *claim, vars []execdapi.EnvVar) []string {
	env := slices.Clone(c.env)
	for _, e := range vars {
		env = append(env, e.Name+"="+e.Value)
	}
	return env
}

// serveContextCreate serves POST execdapi.ContextsPath.
func (h *Handler) serveContextCreate(w http.ResponseWriter, req *http.Request) {
	cl, ok := h.contextsOf(w, req)
	if !ok {
		return
	}
	cr := &execdapi.ContextRequest{}
	if code, err := decodeOptionalJSONBody(w, req, maxContextRequestBytes, cr, "a JSON context"); err != nil {
		writeProcessError(w, processError(code, "invalid context: "+err.Error()))
		return
	}
	if errs := execdapi.ValidateContextRequest(cr, nil); len(errs) > 0 {
		serr := apierrors.NewInvalid(schema.GroupKind{Kind: "Context"}, cr.ID, errs)
		serr.ErrStatus.Message = "invalid context: " + errs.ToAggregate().Error()
		writeProcessError(w, serr)
		return
	}
	c, serr := h.contexts.create(req.Context(), cr, contextEnv(cl, cr.Env))
	if serr != nil {
		writeProcessError(w, serr)
		return
	}
	st := c.snapshot()
	w.Header().Set("Location", execdapi.ContextPath(st.ID))
	httpjson.Write(w, http.StatusCreated, &st)
}

// serveContextList serves GET execdapi.ContextsPath.
func (h *Handler) serveContextList(w http.ResponseWriter, req *http.Request) {
	if _, ok := h.contextsOf(w, req); !ok {
		return
	}
	httpjson.Write(w, http.StatusOK, &execdapi.ContextList{Kind: execdapi.ContextListKind, Items: h.contexts.list()})
}

// serveContextGet serves GET execdapi.ContextPath.
func (h *Handler) serveContextGet(w http.ResponseWriter, req *http.Request) {
	if _, ok := h.contextsOf(w, req); !ok {
		return
	}
	if c := h.contextOf(w, req); c != nil {
		st := c.snapshot()
		httpjson.Write(w, http.StatusOK, &st)
	}
}

// serveContextDelete serves DELETE execdapi.ContextPath: its kernel ends, a run with it.
func (h *Handler) serveContextDelete(w http.ResponseWriter, req *http.Request) {
	if _, ok := h.contextsOf(w, req); !ok {
		return
	}
	if c := h.contextOf(w, req); c != nil {
		st := h.contexts.remove(c)
		httpjson.Write(w, http.StatusOK, &st)
	}
}

// serveContextInterrupt serves POST execdapi.ContextInterruptPath.
func (h *Handler) serveContextInterrupt(w http.ResponseWriter, req *http.Request) {
	if _, ok := h.contextsOf(w, req); !ok {
		return
	}
	c := h.contextOf(w, req)
	if c == nil {
		return
	}
	running, err := c.interrupt()
	switch {
	case err != nil:
		writeProcessError(w, apierrors.NewInternalError(fmt.Errorf("interrupting the kernel: %w", err)))
		return
	case !running:
		st := c.snapshot()
		if st.Phase == execdapi.ContextDead {
			writeProcessError(w, processError(http.StatusGone, fmt.Sprintf("code context %s is dead (%s)", c.id, st.Message)))
			return
		}
		writeProcessError(w, apierrors.NewConflict(contextsResource, c.id, errors.New("no run is in progress: there is nothing to interrupt")))
		return
	}
	klog.V(2).InfoS("Interrupted a code context", "context", c.id, "remoteAddr", req.RemoteAddr)
	st := c.snapshot()
	httpjson.Write(w, http.StatusOK, &st)
}

// serveContextRun serves POST execdapi.ContextRunPath: the kernel's outputs stream as they
// come, then RunEnd. The run is interrupted past its timeout, or when the client goes away.
func (h *Handler) serveContextRun(w http.ResponseWriter, req *http.Request) {
	cl, ok := h.contextsOf(w, req)
	if !ok {
		return
	}
	rr := &execdapi.RunRequest{}
	if code, err := decodeJSONBody(w, req, maxRunRequestBytes, rr, "a JSON run request"); err != nil {
		writeProcessError(w, processError(code, "invalid run request: "+err.Error()))
		return
	}
	if errs := execdapi.ValidateRunRequest(rr, nil); len(errs) > 0 {
		serr := apierrors.NewInvalid(schema.GroupKind{Kind: "Run"}, "", errs)
		serr.ErrStatus.Message = "invalid run request: " + errs.ToAggregate().Error()
		writeProcessError(w, serr)
		return
	}
	id := req.PathValue("id")
	c := h.contexts.lookup(id)
	if c == nil && id == execdapi.DefaultContext {
		var serr *apierrors.StatusError
		c, serr = h.contexts.create(req.Context(), &execdapi.ContextRequest{ID: id}, contextEnv(cl, nil))
		if serr != nil && apierrors.IsAlreadyExists(serr) {
			// Another run made it first; it may still be starting.
			c, serr = nil, apierrors.NewConflict(contextsResource, id, errors.New("the default context is being made by another run: run again"))
		}
		if serr != nil {
			writeProcessError(w, serr)
			return
		}
	}
	if c == nil {
		writeProcessError(w, apierrors.NewNotFound(contextsResource, id))
		return
	}
	if serr := c.beginRun(h.contexts.now()); serr != nil {
		writeProcessError(w, serr)
		return
	}
	ctx, done, ok := h.beginSession(req)
	if !ok {
		c.endRun(0)
		writeProcessError(w, processError(http.StatusServiceUnavailable, "sandbox-execd is shutting down"))
		return
	}
	defer done()
	var cancel context.CancelFunc = func() {}
	if rr.TimeoutSeconds > 0 {
		ctx, cancel = context.WithTimeout(ctx, secondsDuration(rr.TimeoutSeconds))
	}
	defer cancel()

	w.Header().Set("Content-Type", execdapi.RunContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rw := newRunWriter(w)
	if rw.rc.Flush() != nil { // the header, at once
		c.endRun(0)
		return
	}
	reply, err := c.kernel.Execute(ctx, rr.Code, rw.output)
	end := &execdapi.RunEvent{Type: execdapi.RunEnd, Truncated: rw.truncated}
	if reply != nil {
		end.Status, end.ExecutionCount, end.Error = reply.Status, reply.ExecutionCount, runError(reply.Error)
	}
	if errors.Is(err, jupyter.ErrKernelDied) {
		c.markDead(err.Error())
	}
	interrupted := c.endRun(end.ExecutionCount)
	switch {
	case errors.Is(err, jupyter.ErrKernelDied):
		end.Status, end.Reason, end.Message = execdapi.RunStatusError, execdapi.RunReasonKernelDied, err.Error()
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && req.Context().Err() == nil:
		end.Status, end.Reason = execdapi.RunStatusError, execdapi.RunReasonDeadlineExceeded
		end.Message = fmt.Sprintf("the run took longer than %ds and was interrupted; the context keeps its state", rr.TimeoutSeconds)
	case err != nil:
		end.Status, end.Reason, end.Message = execdapi.RunStatusError, execdapi.RunReasonInterrupted, err.Error()
	case interrupted:
		end.Reason, end.Message = execdapi.RunReasonInterrupted, "interrupted on request; the context keeps its state"
	}
	klog.V(3).InfoS("Ran code", "context", c.id, "status", end.Status, "reason", end.Reason, "executionCount", end.ExecutionCount)
	rw.write(end)
}
