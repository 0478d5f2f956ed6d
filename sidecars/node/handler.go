package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/mtls"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const (
	// maxRequestBytes bounds a SnapshotRequest: five names and a number.
	maxRequestBytes = 64 << 10
	// streamWriteTimeout bounds one line's write: a client that reads nothing for this long
	// (its connection's window full) has gone, and its snapshot is cancelled.
	streamWriteTimeout = 30 * time.Second
	// healthTimeout bounds the health check's call to containerd, below a probe's timeout.
	healthTimeout = 3 * time.Second
)

// engine is what the handler needs of a Committer: the seam between the protocol and
// containerd.
type engine interface {
	Find(ctx context.Context, req *nodeapi.SnapshotRequest) (*Container, error)
	Snapshot(ctx context.Context, ctr *Container, image reference.NamedTagged, maxBytes int64, progress func(nodeapi.Event)) (*nodeapi.Result, error)
	Healthy(ctx context.Context) error
}

// handler serves snapshotterapi's endpoints.
type handler struct {
	engine   engine
	registry *Registry
	// maxBytes is the agent's bound on a layer; a request may ask for less.
	maxBytes int64
	// slots bounds the snapshots that run at once: each is a walk of a container's
	// filesystem and a gzip in containerd, and more at once only slow each other down.
	// Requests beyond it wait in their stream, with heartbeats.
	slots chan struct{}
	// heartbeat is nodeapi.Heartbeat, shorter in tests.
	heartbeat time.Duration
	// work ends running snapshots when the shutdown grace period is over.
	work     context.Context
	draining atomic.Bool
}

func newHandler(e engine, r *Registry, maxBytes int64, concurrent int, work context.Context) *handler {
	return &handler{engine: e, registry: r, maxBytes: maxBytes, slots: make(chan struct{}, concurrent),
		heartbeat: nodeapi.Heartbeat, work: work}
}

func (h *handler) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc(nodeapi.SnapshotPath, h.serveSnapshot)
	mux.HandleFunc(nodeapi.HealthzPath, h.serveHealthz)
	return mux
}

func (h *handler) serveHealthz(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithTimeout(req.Context(), healthTimeout)
	defer cancel()
	if err := h.engine.Healthy(ctx); err != nil {
		http.Error(w, "containerd: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// requestError is an answer before the stream: a status and a message.
type requestError struct {
	code int
	err  error
}

// parse reads, validates and authorizes a request: what is refused is answered before the
// stream, as the contract says.
func (h *handler) parse(w http.ResponseWriter, req *http.Request) (*nodeapi.SnapshotRequest, reference.NamedTagged, *requestError) {
	if req.Method != http.MethodPost {
		return nil, nil, &requestError{http.StatusMethodNotAllowed, errors.New("POST a SnapshotRequest")}
	}
	if err := authorize(req); err != nil {
		return nil, nil, &requestError{http.StatusForbidden, err}
	}
	if h.draining.Load() {
		return nil, nil, &requestError{http.StatusServiceUnavailable, errors.New("sandbox-node is shutting down")}
	}
	if h.registry.Host == "" {
		return nil, nil, &requestError{http.StatusServiceUnavailable, errors.New("sandbox-node has no snapshot registry (--registry): this cluster does not pause sandboxes")}
	}
	body := http.MaxBytesReader(w, req.Body, maxRequestBytes)
	sr := &nodeapi.SnapshotRequest{}
	if err := json.NewDecoder(body).Decode(sr); err != nil {
		return nil, nil, &requestError{http.StatusBadRequest, fmt.Errorf("the body is not a SnapshotRequest: %w", err)}
	}
	// To the end of the body, so that the server notices a client that hangs up (and
	// cancels the request's context) while the snapshot runs.
	_, _ = io.Copy(io.Discard, body)
	if err := sr.Validate(); err != nil {
		return nil, nil, &requestError{http.StatusBadRequest, err}
	}
	image, err := h.registry.checkImage(sr.Image)
	if err != nil {
		return nil, nil, &requestError{http.StatusBadRequest, err}
	}
	return sr, image, nil
}

func (h *handler) serveSnapshot(w http.ResponseWriter, req *http.Request) {
	sr, image, rerr := h.parse(w, req)
	if rerr != nil {
		klog.V(2).InfoS("Refused a snapshot request", "code", rerr.code, "client", mtls.ClientIdentity(req), "remoteAddr", req.RemoteAddr, "err", rerr.err)
		http.Error(w, rerr.err.Error(), rerr.code)
		return
	}
	pod := klog.KRef(sr.Namespace, sr.Pod)
	maxBytes := h.maxBytes
	if sr.MaxBytes > 0 && sr.MaxBytes < maxBytes {
		maxBytes = sr.MaxBytes
	}
	// The snapshot ends when its client hangs up, or when the shutdown grace period is over.
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	defer context.AfterFunc(h.work, cancel)()

	ctr, err := h.engine.Find(ctx, sr)
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case reasonOf(err) == nodeapi.ReasonContainerNotFound:
			code = http.StatusNotFound
		case errdefs.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded):
			code = http.StatusServiceUnavailable
		}
		klog.V(2).InfoS("No container to snapshot", "pod", pod, "container", sr.Container, "code", code, "err", err)
		http.Error(w, err.Error(), code)
		return
	}

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	write := func(line []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write(line); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := write(nil); err != nil {
		return
	}

	// Progress is dropped rather than waited for when the stream is behind: the next
	// event carries the newer count.
	events := make(chan nodeapi.Event, 16)
	progress := func(e nodeapi.Event) {
		select {
		case events <- e:
		default:
		}
	}
	type outcome struct {
		res *nodeapi.Result
		err error
	}
	done := make(chan outcome, 1)
	start := time.Now()
	go func() {
		select {
		case h.slots <- struct{}{}:
			defer func() { <-h.slots }()
		case <-ctx.Done():
			done <- outcome{err: ctx.Err()}
			return
		}
		res, err := h.engine.Snapshot(ctx, ctr, image, maxBytes, progress)
		done <- outcome{res, err}
	}()

	hb := time.NewTicker(h.heartbeat)
	defer hb.Stop()
	clientGone := false
	send := func(e *nodeapi.Event) {
		if clientGone {
			return
		}
		line, _ := json.Marshal(e)
		if err := write(append(line, '\n')); err != nil {
			// Gone: cancel the snapshot, and wait for it to have stopped.
			clientGone = true
			cancel()
			return
		}
		hb.Reset(h.heartbeat)
	}
	for {
		select {
		case e := <-events:
			send(&e)
		case <-hb.C:
			if !clientGone && write([]byte("\n")) != nil {
				clientGone = true
				cancel()
			}
		case o := <-done:
			h.finish(sr, ctr, start, o.res, o.err, send)
			return
		}
	}
}

// finish logs a snapshot's outcome and sends its last event.
func (h *handler) finish(sr *nodeapi.SnapshotRequest, ctr *Container, start time.Time, res *nodeapi.Result, err error, send func(*nodeapi.Event)) {
	pod := klog.KRef(sr.Namespace, sr.Pod)
	took := time.Since(start).Round(time.Millisecond)
	if err == nil {
		klog.InfoS("Pushed a snapshot", "pod", pod, "container", sr.Container, "containerID", ctr.ID,
			"image", res.Image, "digest", res.Digest, "layerSize", res.LayerSize, "took", took)
		send(&nodeapi.Event{Type: nodeapi.EventDone, Result: res})
		return
	}
	reason := reasonOf(err)
	if errors.Is(err, context.Canceled) && h.work.Err() != nil {
		err = fmt.Errorf("sandbox-node is shutting down: %w", err)
	}
	klog.ErrorS(err, "Snapshot failed; nothing was pushed under its tag", "pod", pod, "container", sr.Container,
		"containerID", ctr.ID, "image", sr.Image, "reason", reason, "took", took)
	send(&nodeapi.Event{Type: nodeapi.EventFailed, Reason: reason, Message: err.Error()})
}
