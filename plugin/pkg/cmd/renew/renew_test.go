package renew

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// request is what the server received.
type request struct {
	method      string
	path        string
	contentType string
	body        map[string]any
}

// renewServer answers every request with reply and records it.
type renewServer struct {
	reply func(w http.ResponseWriter)

	mu       sync.Mutex
	requests []request
}

func (s *renewServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	data, _ := io.ReadAll(req.Body)
	r := request{method: req.Method, path: req.URL.Path, contentType: req.Header.Get("Content-Type")}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &r.body); err != nil {
			r.body = map[string]any{"unparsable": string(data)}
		}
	}
	s.mu.Lock()
	s.requests = append(s.requests, r)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	s.reply(w)
}

// expiringAt replies with the sandbox as the server returns it after a renewal.
func expiringAt(t time.Time) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		_ = json.NewEncoder(w).Encode(&sandboxv1alpha1.Sandbox{
			TypeMeta:   metav1.TypeMeta{APIVersion: "sandbox.kube-sandbox.io/v1alpha1", Kind: "Sandbox"},
			ObjectMeta: metav1.ObjectMeta{Name: "sb", Namespace: cmdtesting.Namespace},
			Spec:       sandboxv1alpha1.SandboxSpec{TimeoutSeconds: ptr.To[int64](600)},
			Status:     sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning, ExpiresAt: &metav1.Time{Time: t}},
		})
	}
}

// failing replies with the Status of err.
func failing(err *apierrors.StatusError) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		status := err.Status()
		status.APIVersion, status.Kind = "v1", "Status"
		w.WriteHeader(int(status.Code))
		_ = json.NewEncoder(w).Encode(status)
	}
}

func TestRenew(t *testing.T) {
	const renewPath = "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/renew"
	body := func(field string, value any) map[string]any {
		return map[string]any{
			"apiVersion": "sandbox.kube-sandbox.io/v1alpha1",
			"kind":       "SandboxRenewal",
			"metadata":   map[string]any{"name": "sb", "namespace": "test"},
			field:        value,
		}
	}
	sandboxes := sandboxv1alpha1.Resource("sandboxes")

	tests := []struct {
		name  string
		args  []string
		reply func(w http.ResponseWriter)
		// wantBody is the body of the one request expected; nil when none may be sent.
		wantBody map[string]any
		wantOut  string
		wantErr  string
	}{
		{
			name:     "for extends by seconds",
			args:     []string{"sb", "--for", "30m"},
			reply:    expiringAt(now.Add(30 * time.Minute)),
			wantBody: body("extendSeconds", 1800.0),
			wantOut:  "sandbox.sandbox.kube-sandbox.io/sb renewed, expires at 2026-05-01T12:30:00Z (in 30m)\n",
		},
		{
			name:     "until sets the time",
			args:     []string{"sb", "--until=2026-12-01T10:00:00Z"},
			reply:    expiringAt(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)),
			wantBody: body("expiresAt", "2026-12-01T10:00:00Z"),
			wantOut:  "sandbox.sandbox.kube-sandbox.io/sb renewed, expires at 2026-12-01T10:00:00Z (in 213d)\n",
		},
		{
			name:     "until with a zone offset is sent in UTC",
			args:     []string{"sb", "--until", "2026-05-01T15:00:00+02:00"},
			reply:    expiringAt(now.Add(time.Hour)),
			wantBody: body("expiresAt", "2026-05-01T13:00:00Z"),
			wantOut:  "sandbox.sandbox.kube-sandbox.io/sb renewed, expires at 2026-05-01T13:00:00Z (in 60m)\n",
		},
		{
			name: "an expiry already later is what the server reports",
			args: []string{"sb", "--for", "1m"},
			// Expiry only moves forward: the server keeps the later one.
			reply:    expiringAt(now.Add(2 * time.Hour)),
			wantBody: body("extendSeconds", 60.0),
			wantOut:  "sandbox.sandbox.kube-sandbox.io/sb renewed, expires at 2026-05-01T14:00:00Z (in 120m)\n",
		},
		{
			name:     "no expiry to renew",
			args:     []string{"sb", "--for", "30m"},
			reply:    failing(apierrors.NewConflict(sandboxes, "sb", errors.New("the sandbox has no expiry (no timeoutSeconds): there is nothing to renew"))),
			wantBody: body("extendSeconds", 1800.0),
			wantErr:  "Error from server (Conflict): Operation cannot be fulfilled on sandboxes.sandbox.kube-sandbox.io \"sb\": the sandbox has no expiry (no timeoutSeconds): there is nothing to renew\n",
		},
		{
			name: "beyond the server's maximum",
			args: []string{"sb", "--for", "48h"},
			reply: failing(apierrors.NewInvalid(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxRenewal").GroupKind(), "sb", field.ErrorList{
				field.Invalid(field.NewPath("extendSeconds"), "2026-05-03T12:00:00Z", "must be at most 24h0m0s from now (the server's maximum)"),
			})),
			wantBody: body("extendSeconds", 172800.0),
			wantErr:  "The SandboxRenewal \"sb\" is invalid: extendSeconds: Invalid value: \"2026-05-03T12:00:00Z\": must be at most 24h0m0s from now (the server's maximum)\n",
		},
		{
			name:     "not found",
			args:     []string{"sb", "--for", "30m"},
			reply:    failing(apierrors.NewNotFound(sandboxes, "sb")),
			wantBody: body("extendSeconds", 1800.0),
			wantErr:  "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"sb\" not found\n",
		},
		{
			name:    "for and until",
			args:    []string{"sb", "--for", "30m", "--until", "2026-12-01T10:00:00Z"},
			wantErr: "error: --for and --until cannot be used together\nSee 'renew -h' for help and examples\n",
		},
		{
			name:    "neither for nor until",
			args:    []string{"sb"},
			wantErr: "error: one of --for and --until is required\nSee 'renew -h' for help and examples\n",
		},
		{
			name:    "zero for",
			args:    []string{"sb", "--for", "0s"},
			wantErr: "error: --for must be at least 1s, got 0s\nSee 'renew -h' for help and examples\n",
		},
		{
			name:    "for with a fraction of a second",
			args:    []string{"sb", "--for", "1.5s"},
			wantErr: "error: --for must be a whole number of seconds, got 1.5s\nSee 'renew -h' for help and examples\n",
		},
		{
			name:    "for without unit",
			args:    []string{"sb", "--for", "30"},
			wantErr: "error: invalid argument \"30\" for \"--for\" flag: time: missing unit in duration \"30\"\n",
		},
		{
			name:    "until without time of day",
			args:    []string{"sb", "--until", "2026-12-01"},
			wantErr: "error: invalid --until \"2026-12-01\": must be a time in RFC 3339, like 2026-12-01T10:00:00Z\nSee 'renew -h' for help and examples\n",
		},
		{
			name:    "no name",
			args:    []string{"--for", "30m"},
			wantErr: "error: sandbox NAME is required\nSee 'renew -h' for help and examples\n",
		},
		{
			name:    "two names",
			args:    []string{"a", "b", "--for", "30m"},
			wantErr: "error: renew takes one NAME, got [\"a\" \"b\"]\nSee 'renew -h' for help and examples\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := &renewServer{reply: tt.reply}
			srv := httptest.NewServer(server)
			defer srv.Close()
			f := cmdtesting.NewServerFactory(srv.URL)

			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			o := NewRenewOptions(streams)
			o.Now = func() time.Time { return now }
			cmd := newCmdRenew(f, o)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(tt.args)
			err := cmd.ExecuteContext(context.Background())

			var msg bytes.Buffer
			if err != nil {
				cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr {
				t.Errorf("error %q, want %q", msg.String(), tt.wantErr)
			}
			if out.String() != tt.wantOut {
				t.Errorf("output %q, want %q", out.String(), tt.wantOut)
			}

			server.mu.Lock()
			defer server.mu.Unlock()
			if tt.wantBody == nil {
				if len(server.requests) > 0 {
					t.Errorf("sent %d requests, want none: %+v", len(server.requests), server.requests)
				}
				return
			}
			if len(server.requests) != 1 {
				t.Fatalf("sent %d requests, want one: %+v", len(server.requests), server.requests)
			}
			got := server.requests[0]
			if got.method != http.MethodPost || got.path != renewPath || got.contentType != "application/json" {
				t.Errorf("request %s %s (Content-Type %q), want POST %s (application/json)", got.method, got.path, got.contentType, renewPath)
			}
			if diff := cmp.Diff(tt.wantBody, got.body); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}
