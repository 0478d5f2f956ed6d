package snapshot

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// agentServer is a TLS server with a certificate of ca for serverName that requires a client
// certificate of ca and answers with handle, which sees the client's common name.
func agentServer(t *testing.T, ca *pki.CA, serverName string, handle func(w http.ResponseWriter, r *http.Request, client string)) (port int) {
	t.Helper()
	key, err := pki.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue(pki.Leaf{CommonName: "agent", DNSNames: []string{serverName}, ServerAuth: true, Lifetime: time.Hour}, &key.PublicKey, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handle(w, r, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ = strconv.Atoi(p)
	return port
}

func events(w http.ResponseWriter, evs ...nodeapi.Event) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	for _, ev := range evs {
		data, _ := json.Marshal(ev)
		_, _ = w.Write(append(data, '\n'))
		_, _ = w.Write([]byte("\n")) // a heartbeat between events
		w.(http.Flusher).Flush()
	}
}

// TestHTTPAgent: the controller's client of sandbox-node presents its identity, verifies
// the agent's name, reports progress, and tells the agent's refusals from failures to reach it.
func TestHTTPAgent(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	authority := pki.NewAuthority(nil)
	authority.Set(ca, nil)
	req := &nodeapi.SnapshotRequest{PodUID: "u", Namespace: "n", Pod: "p", Container: "sandbox", Image: "r:5000/x/y:t"}
	result := &nodeapi.Result{Image: req.Image, Digest: "sha256:1", LayerSize: 3, Size: 9}

	tests := []struct {
		name         string
		serverName   string
		handle       func(w http.ResponseWriter, r *http.Request)
		wantStages   []string
		wantErr      string
		wantFailed   string // the reason of a *Failed
		wantDigest   string
		wantIdentity bool
	}{
		{name: "progress, then done", serverName: nodeapi.ServerName, handle: func(w http.ResponseWriter, _ *http.Request) {
			events(w, nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StageCommitting},
				nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StagePushing, Bytes: 4},
				nodeapi.Event{Type: nodeapi.EventDone, Result: result})
		}, wantStages: []string{"Committing", "Pushing"}, wantDigest: "sha256:1", wantIdentity: true},
		{name: "the agent's failure", serverName: nodeapi.ServerName, handle: func(w http.ResponseWriter, _ *http.Request) {
			events(w, nodeapi.Event{Type: nodeapi.EventFailed, Reason: nodeapi.ReasonRegistryUnavailable, Message: "down"})
		}, wantFailed: nodeapi.ReasonRegistryUnavailable},
		{name: "no such container", serverName: nodeapi.ServerName, handle: func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no running container", http.StatusNotFound)
		}, wantFailed: nodeapi.ReasonContainerNotFound},
		{name: "shutting down is no refusal", serverName: nodeapi.ServerName, handle: func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		}, wantErr: "503"},
		{name: "a stream that ends without an outcome", serverName: nodeapi.ServerName, handle: func(w http.ResponseWriter, _ *http.Request) {
			events(w, nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StageCommitting})
		}, wantStages: []string{"Committing"}, wantErr: "without an outcome"},
		{name: "Done without a digest", serverName: nodeapi.ServerName, handle: func(w http.ResponseWriter, _ *http.Request) {
			events(w, nodeapi.Event{Type: nodeapi.EventDone, Result: &nodeapi.Result{}})
		}, wantErr: "Done without a result"},
		{name: "a server of another name", serverName: "someone-else.test", handle: func(w http.ResponseWriter, _ *http.Request) {
			events(w, nodeapi.Event{Type: nodeapi.EventDone, Result: result})
		}, wantErr: "certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var identity string
			port := agentServer(t, ca, tc.serverName, func(w http.ResponseWriter, r *http.Request, client string) {
				identity = client
				var got nodeapi.SnapshotRequest
				if r.URL.Path != nodeapi.SnapshotPath || json.NewDecoder(r.Body).Decode(&got) != nil || got != *req {
					http.Error(w, "bad request", http.StatusBadRequest)
					return
				}
				tc.handle(w, r)
			})
			var stages []string
			res, err := (&HTTPAgent{Creds: authority, Port: port}).Snapshot(t.Context(), "127.0.0.1", req, func(ev nodeapi.Event) {
				stages = append(stages, ev.Stage)
			})
			var failed *Failed
			switch {
			case tc.wantFailed != "":
				if !errors.As(err, &failed) || failed.Reason != tc.wantFailed {
					t.Fatalf("Snapshot() = %v, want a Failed %s", err, tc.wantFailed)
				}
			case tc.wantErr != "":
				if err == nil || errors.As(err, &failed) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Snapshot() = %v, want an error (not a Failed) containing %q", err, tc.wantErr)
				}
			case err != nil || res.Digest != tc.wantDigest:
				t.Fatalf("Snapshot() = %+v, %v; want digest %s", res, err, tc.wantDigest)
			}
			if strings.Join(stages, ",") != strings.Join(tc.wantStages, ",") {
				t.Errorf("progress stages %v, want %v", stages, tc.wantStages)
			}
			if tc.wantIdentity && identity != execdapi.ControllerIdentity {
				t.Errorf("the client presented %q, want %q", identity, execdapi.ControllerIdentity)
			}
		})
	}
}
