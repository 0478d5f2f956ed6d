package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const testRegistryHost = "registry.example:5000"

// fakeEngine stands for containerd in tests of the protocol.
type fakeEngine struct {
	find     func(ctx context.Context, req *nodeapi.SnapshotRequest) (*Container, error)
	snapshot func(ctx context.Context, ctr *Container, image reference.NamedTagged, maxBytes int64, progress func(nodeapi.Event)) (*nodeapi.Result, error)
	healthy  error
}

func (f *fakeEngine) Find(ctx context.Context, req *nodeapi.SnapshotRequest) (*Container, error) {
	if f.find != nil {
		return f.find(ctx, req)
	}
	return &Container{ID: "c1", Snapshotter: "overlayfs", SnapshotKey: "c1", Image: "example.com/base:1"}, nil
}

func (f *fakeEngine) Snapshot(ctx context.Context, ctr *Container, image reference.NamedTagged, maxBytes int64, progress func(nodeapi.Event)) (*nodeapi.Result, error) {
	if f.snapshot != nil {
		return f.snapshot(ctx, ctr, image, maxBytes, progress)
	}
	return &nodeapi.Result{Image: image.String(), Digest: "sha256:abc"}, nil
}

func (f *fakeEngine) Healthy(context.Context) error { return f.healthy }

// testServer is a running server (the real TLS listener) and what its clients need.
type testServer struct {
	addr, healthAddr string
	serverCA         *testCA
	clientCA         *testCA
	tlsDir           string
	stop             context.CancelFunc
	done             chan error
}

func startServer(t *testing.T, e engine, modify func(*server)) *testServer {
	t.Helper()
	ts := &testServer{serverCA: newTestCA(t, "server CA"), clientCA: newTestCA(t, "kube-sandbox CA"), tlsDir: t.TempDir(), done: make(chan error, 1)}
	c, k := ts.serverCA.issue(t, "sandbox-node", true)
	files, err := newFileTLS(writeFile(t, ts.tlsDir, "tls.crt", c), writeFile(t, ts.tlsDir, "tls.key", k),
		writeFile(t, ts.tlsDir, "ca.crt", ts.clientCA.pem))
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	s := &server{
		committer: e, registry: &Registry{Host: testRegistryHost, RepositoryPrefix: "kube-sandbox/snapshots"}, tls: files,
		listen: "127.0.0.1:0", healthListen: "127.0.0.1:0", maxBytes: 1000, concurrent: 2, grace: 5 * time.Second,
		heartbeat: 20 * time.Millisecond,
		ready: func(a, h net.Addr) {
			ts.addr, ts.healthAddr = a.String(), h.String()
			close(ready)
		},
	}
	if modify != nil {
		modify(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts.stop = cancel
	go func() { ts.done <- s.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ts.done:
		case <-time.After(30 * time.Second):
			t.Error("the server did not stop")
		}
	})
	select {
	case <-ready:
	case err := <-ts.done:
		t.Fatalf("server: %v", err)
	}
	return ts
}

// client is an HTTP client with a certificate for cn from the kube-sandbox CA.
func (ts *testServer) client(t *testing.T, cn string) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, ts.serverCA, ts.clientCA, cn)}}
}

func (ts *testServer) url() string { return "https://" + ts.addr + nodeapi.SnapshotPath }

func testRequest(image string) *nodeapi.SnapshotRequest {
	return &nodeapi.SnapshotRequest{PodUID: "uid-1", Namespace: "ns", Pod: "sb-abc", Container: "sandbox", Image: image}
}

func goodImage() string { return testRegistryHost + "/kube-sandbox/snapshots/ns/sb:1" }

func post(ctx context.Context, t *testing.T, c *http.Client, url string, body any) (*http.Response, error) {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	default:
		data, _ = json.Marshal(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return c.Do(req)
}

// readStream reads a stream to its end: its events, and how many heartbeats came.
func readStream(t *testing.T, r io.Reader) (events []nodeapi.Event, heartbeats int) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			heartbeats++
			continue
		}
		var e nodeapi.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	return events, heartbeats
}

func TestIdentity(t *testing.T) {
	ts := startServer(t, &fakeEngine{}, nil)
	otherCA := newTestCA(t, "another CA")
	tests := []struct {
		name     string
		tls      *tls.Config
		wantCode int // 0: the handshake fails
	}{
		{"sandbox-controller", clientTLS(t, ts.serverCA, ts.clientCA, execdapi.ControllerIdentity), http.StatusOK},
		{"sandbox-apiserver", clientTLS(t, ts.serverCA, ts.clientCA, execdapi.APIServerIdentity), http.StatusForbidden},
		{"a pod's name", clientTLS(t, ts.serverCA, ts.clientCA, "sb-abc"), http.StatusForbidden},
		{"the controller's name from another CA", clientTLS(t, ts.serverCA, otherCA, execdapi.ControllerIdentity), 0},
		{"no certificate", clientTLS(t, ts.serverCA, nil, ""), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: tt.tls}}
			resp, err := post(t.Context(), t, c, ts.url(), testRequest(goodImage()))
			if tt.wantCode == 0 {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatalf("got %s, want a failed handshake", resp.Status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status %s (%s), want %d", resp.Status, body, tt.wantCode)
			}
		})
	}
}

func TestRequestRefused(t *testing.T) {
	e := &fakeEngine{find: func(_ context.Context, req *nodeapi.SnapshotRequest) (*Container, error) {
		switch req.Pod {
		case "gone":
			return nil, withReason(nodeapi.ReasonContainerNotFound, errors.New("no such container"))
		case "down":
			return nil, fmt.Errorf("list containers: %w", errdefs.ErrUnavailable)
		}
		return &Container{ID: "c1"}, nil
	}}
	ts := startServer(t, e, nil)
	c := ts.client(t, execdapi.ControllerIdentity)
	with := func(f func(*nodeapi.SnapshotRequest)) *nodeapi.SnapshotRequest {
		r := testRequest(goodImage())
		f(r)
		return r
	}
	tests := []struct {
		name     string
		method   string
		body     any
		wantCode int
	}{
		{"GET", http.MethodGet, "", http.StatusMethodNotAllowed},
		{"not JSON", http.MethodPost, "{", http.StatusBadRequest},
		{"no pod UID", http.MethodPost, with(func(r *nodeapi.SnapshotRequest) { r.PodUID = "" }), http.StatusBadRequest},
		{"negative maxBytes", http.MethodPost, with(func(r *nodeapi.SnapshotRequest) { r.MaxBytes = -1 }), http.StatusBadRequest},
		{"another registry", http.MethodPost, testRequest("elsewhere.example/kube-sandbox/snapshots/a:1"), http.StatusBadRequest},
		{"outside the prefix", http.MethodPost, testRequest(testRegistryHost + "/library/busybox:1"), http.StatusBadRequest},
		{"no tag", http.MethodPost, testRequest(testRegistryHost + "/kube-sandbox/snapshots/a"), http.StatusBadRequest},
		{"no container", http.MethodPost, with(func(r *nodeapi.SnapshotRequest) { r.Pod = "gone" }), http.StatusNotFound},
		{"containerd down", http.MethodPost, with(func(r *nodeapi.SnapshotRequest) { r.Pod = "down" }), http.StatusServiceUnavailable},
		{"too large a body", http.MethodPost, `{"pod":"` + strings.Repeat("a", maxRequestBytes) + `"}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, _ := json.Marshal(tt.body)
			if s, ok := tt.body.(string); ok {
				data = []byte(s)
			}
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, ts.url(), bytes.NewReader(data))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status %s (%s), want %d", resp.Status, body, tt.wantCode)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("content type %q, want text/plain", ct)
			}
		})
	}
}

func TestStream(t *testing.T) {
	var gotMax atomic.Int64
	e := &fakeEngine{snapshot: func(ctx context.Context, _ *Container, image reference.NamedTagged, maxBytes int64, progress func(nodeapi.Event)) (*nodeapi.Result, error) {
		gotMax.Store(maxBytes)
		progress(nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StageCommitting, Bytes: 5})
		// Quiet for a few heartbeats.
		time.Sleep(150 * time.Millisecond)
		progress(nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StagePushing, Bytes: 5, Total: 10})
		if maxBytes < 500 {
			return nil, withReason(nodeapi.ReasonSnapshotTooLarge, errors.New("too large"))
		}
		return &nodeapi.Result{Image: image.String(), Digest: "sha256:abc"}, nil
	}}
	ts := startServer(t, e, nil)
	c := ts.client(t, execdapi.ControllerIdentity)

	tests := []struct {
		name       string
		maxBytes   int64
		wantMax    int64
		wantLast   nodeapi.EventType
		wantReason string
	}{
		{"the agent's limit", 0, 1000, nodeapi.EventDone, ""},
		{"a lower limit asked for", 100, 100, nodeapi.EventFailed, nodeapi.ReasonSnapshotTooLarge},
		{"no higher limit than the agent's", 1 << 40, 1000, nodeapi.EventDone, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRequest(goodImage())
			r.MaxBytes = tt.maxBytes
			resp, err := post(t.Context(), t, c, ts.url(), r)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
				t.Fatalf("status %s, content type %q", resp.Status, resp.Header.Get("Content-Type"))
			}
			events, heartbeats := readStream(t, resp.Body)
			if heartbeats == 0 {
				t.Error("no heartbeat on a quiet stream")
			}
			if len(events) != 3 || events[0].Stage != nodeapi.StageCommitting || events[1].Stage != nodeapi.StagePushing {
				t.Fatalf("events %+v, want Committing, Pushing and the end", events)
			}
			last := events[len(events)-1]
			if last.Type != tt.wantLast || last.Reason != tt.wantReason {
				t.Errorf("last event %+v, want %s %s", last, tt.wantLast, tt.wantReason)
			}
			if tt.wantLast == nodeapi.EventDone && (last.Result == nil || last.Result.Image != goodImage()) {
				t.Errorf("result %+v", last.Result)
			}
			if gotMax.Load() != tt.wantMax {
				t.Errorf("maxBytes %d, want %d", gotMax.Load(), tt.wantMax)
			}
		})
	}
}

// A client that hangs up cancels its snapshot.
func TestClientDisconnectCancels(t *testing.T) {
	started := make(chan struct{})
	ended := make(chan error, 1)
	e := &fakeEngine{snapshot: func(ctx context.Context, _ *Container, _ reference.NamedTagged, _ int64, progress func(nodeapi.Event)) (*nodeapi.Result, error) {
		progress(nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StageCommitting})
		close(started)
		select {
		case <-ctx.Done():
			ended <- ctx.Err()
			return nil, ctx.Err()
		case <-time.After(20 * time.Second):
			ended <- nil
			return &nodeapi.Result{}, nil
		}
	}}
	ts := startServer(t, e, func(s *server) { s.heartbeat = time.Hour })
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := post(ctx, t, ts.client(t, execdapi.ControllerIdentity), ts.url(), testRequest(goodImage()))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	_ = resp.Body.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the snapshot ended with %v, want cancelled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the snapshot went on after its client hung up")
	}
}

func TestShutdown(t *testing.T) {
	tests := []struct {
		name      string
		grace     time.Duration
		takes     time.Duration
		wantLast  nodeapi.EventType
		wantInMsg string
	}{
		{"a snapshot that ends within the grace period", 2 * time.Second, 200 * time.Millisecond, nodeapi.EventDone, ""},
		{"a snapshot cancelled when it is over", 200 * time.Millisecond, 20 * time.Second, nodeapi.EventFailed, "shutting down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			started := make(chan struct{})
			e := &fakeEngine{snapshot: func(ctx context.Context, _ *Container, image reference.NamedTagged, _ int64, _ func(nodeapi.Event)) (*nodeapi.Result, error) {
				close(started)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(tt.takes):
					return &nodeapi.Result{Image: image.String()}, nil
				}
			}}
			ts := startServer(t, e, func(s *server) { s.grace = tt.grace })
			c := ts.client(t, execdapi.ControllerIdentity)
			resp, err := post(t.Context(), t, c, ts.url(), testRequest(goodImage()))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			<-started
			ts.stop() // SIGTERM
			// No new snapshot once it is shutting down.
			time.Sleep(50 * time.Millisecond)
			if resp2, err := post(t.Context(), t, ts.client(t, execdapi.ControllerIdentity), ts.url(), testRequest(goodImage())); err == nil {
				_ = resp2.Body.Close()
				if resp2.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("a new request while shutting down: %s", resp2.Status)
				}
			}
			events, _ := readStream(t, resp.Body)
			if len(events) == 0 {
				t.Fatal("no event")
			}
			last := events[len(events)-1]
			if last.Type != tt.wantLast || !strings.Contains(last.Message, tt.wantInMsg) {
				t.Errorf("last event %+v, want %s with %q", last, tt.wantLast, tt.wantInMsg)
			}
			select {
			case err := <-ts.done:
				ts.done <- err
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the server did not stop")
			}
		})
	}
}

func TestHealthz(t *testing.T) {
	tests := []struct {
		name     string
		healthy  error
		wantCode int
	}{
		{"containerd answers", nil, http.StatusOK},
		{"containerd does not", errors.New("connection refused"), http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, &fakeEngine{healthy: tt.healthy}, nil)
			// The plain port, for the kubelet, and the TLS one, for clients with a certificate.
			for _, get := range []func() (*http.Response, error){
				func() (*http.Response, error) {
					return http.Get("http://" + ts.healthAddr + nodeapi.HealthzPath)
				},
				func() (*http.Response, error) {
					return ts.client(t, execdapi.ControllerIdentity).Get("https://" + ts.addr + nodeapi.HealthzPath)
				},
			} {
				resp, err := get()
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != tt.wantCode {
					t.Errorf("status %s, want %d", resp.Status, tt.wantCode)
				}
			}
		})
	}
}

// Rotated files are served from the next connection on; broken ones leave the last good
// ones in force.
func TestTLSReload(t *testing.T) {
	ts := startServer(t, &fakeEngine{}, nil)
	serial := func(cfg *tls.Config) (string, error) {
		conn, err := tls.Dial("tcp", ts.addr, cfg)
		if err != nil {
			return "", err
		}
		defer func() { _ = conn.Close() }()
		// The server verifies the client's certificate after the client's side of the
		// handshake is done: a request tells whether it was taken.
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", nodeapi.HealthzPath); err != nil {
			return "", err
		}
		if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
			return "", err
		}
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	controller := clientTLS(t, ts.serverCA, ts.clientCA, execdapi.ControllerIdentity)
	first, err := serial(controller)
	if err != nil {
		t.Fatal(err)
	}

	c, k := ts.serverCA.issue(t, "sandbox-node", true)
	writeFile(t, ts.tlsDir, "tls.crt", c)
	writeFile(t, ts.tlsDir, "tls.key", k)
	second, err := serial(controller)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Errorf("still serving certificate %s after it was replaced", first)
	}

	writeFile(t, ts.tlsDir, "tls.crt", []byte("not a certificate"))
	if third, err := serial(controller); err != nil || third != second {
		t.Errorf("with a broken file: serial %s (%v), want the last good one %s", third, err, second)
	}
	writeFile(t, ts.tlsDir, "tls.crt", c)

	// A new client CA: certificates of the old one are refused, of the new one taken.
	newCA := newTestCA(t, "kube-sandbox CA 2")
	writeFile(t, ts.tlsDir, "ca.crt", newCA.pem)
	if _, err := serial(controller); err == nil {
		t.Error("a client certificate of the replaced CA was taken")
	}
	if _, err := serial(clientTLS(t, ts.serverCA, newCA, execdapi.ControllerIdentity)); err != nil {
		t.Errorf("a client certificate of the new CA: %v", err)
	}
}
