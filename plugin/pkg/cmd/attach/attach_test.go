package attach

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	criremotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"

	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

const attachPath = "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/web/attach"

// fakeExecutor records what attach asked for instead of connecting.
type fakeExecutor struct {
	url    *url.URL
	stdin  io.Reader
	stderr io.Writer
	tty    bool
}

func (e *fakeExecutor) ExecuteWithContext(_ context.Context, u *url.URL, _ *rest.Config, stdin io.Reader, stdout, stderr io.Writer, tty bool, _ remotecommand.TerminalSizeQueue) error {
	e.url, e.stdin, e.stderr, e.tty = u, stdin, stderr, tty
	_, _ = io.WriteString(stdout, "output\n")
	return nil
}

var _ sandboxclient.RemoteExecutor = &fakeExecutor{}

func TestAttach(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantQuery  url.Values
		wantStdin  bool
		wantErr    string
		wantErrOut string
	}{
		{
			name:      "output only",
			args:      []string{"web", "p-abc"},
			wantQuery: url.Values{"process": {"p-abc"}, "stdout": {"true"}, "stderr": {"true"}},
		},
		{
			name:      "stdin and replica",
			args:      []string{"web", "p-abc", "-i", "--replica", "1"},
			wantQuery: url.Values{"process": {"p-abc"}, "replica": {"1"}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}},
			wantStdin: true,
		},
		{
			name:       "a terminal without a terminal as stdin falls back with kubectl's warning",
			args:       []string{"web", "p-abc", "-it"},
			wantQuery:  url.Values{"process": {"p-abc"}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}},
			wantStdin:  true,
			wantErrOut: "Unable to use a TTY - input is not a terminal or the right kind of file\n",
		},
		{name: "no ID", args: []string{"web"}, wantErr: "error: attach takes a sandbox NAME and a process ID, got [\"web\"]\nSee 'attach -h' for help and examples\n"},
		{name: "negative replica", args: []string{"web", "p-abc", "--replica=-1"}, wantErr: "error: --replica must not be negative, got -1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cmdtesting.NewTestFactory()
			streams, _, out, errOut := genericiooptions.NewTestIOStreams()
			executor := &fakeExecutor{}
			cmd := NewCmdAttach(f, streams, executor)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(tt.args)
			var msg bytes.Buffer
			if err := cmd.ExecuteContext(context.Background()); err != nil {
				cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr {
				t.Fatalf("error %q, want %q", msg.String(), tt.wantErr)
			}
			if tt.wantErr != "" {
				if executor.url != nil {
					t.Error("attached after an error")
				}
				return
			}
			if executor.url.Path != attachPath {
				t.Errorf("path %s, want %s", executor.url.Path, attachPath)
			}
			if diff := cmp.Diff(tt.wantQuery, executor.url.Query()); diff != "" {
				t.Errorf("query (-want +got):\n%s", diff)
			}
			if (executor.stdin != nil) != tt.wantStdin || executor.tty || executor.stderr == nil {
				t.Errorf("stdin %v, tty %v, stderr %v", executor.stdin != nil, executor.tty, executor.stderr != nil)
			}
			if out.String() != "output\n" || errOut.String() != tt.wantErrOut {
				t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
			}
		})
	}
}

// echoAttacher stands for a running process: it prints what the attached client sends.
type echoAttacher struct{}

func (echoAttacher) AttachContainer(_ context.Context, _, _, _ string, in io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan criremotecommand.TerminalSize) error {
	fmt.Fprintln(out, "attached")
	if in != nil {
		data, _ := io.ReadAll(in)
		fmt.Fprintf(out, "stdin=%q\n", data)
	}
	fmt.Fprintln(errOut, "a warning")
	return nil
}

// attachServer serves the attach subresource with the CRI streaming server kubelet uses, which
// speaks SPDY; a WebSocket request gets a plain error, so the client must fall back, as exec's.
type attachServer struct {
	mu        sync.Mutex
	websocket int
	spdy      int
	queries   []url.Values
}

func (s *attachServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	isWebSocket := strings.EqualFold(req.Header.Get("Upgrade"), "websocket")
	if isWebSocket {
		s.websocket++
	} else {
		s.spdy++
	}
	s.queries = append(s.queries, req.URL.Query())
	s.mu.Unlock()
	if isWebSocket || req.URL.Path != attachPath {
		http.Error(w, "websocket not supported here", http.StatusBadRequest)
		return
	}
	q := req.URL.Query()
	opts := &criremotecommand.Options{
		Stdin:  q.Get("stdin") == "true",
		Stdout: q.Get("stdout") == "true",
		Stderr: q.Get("stderr") == "true",
		TTY:    q.Get("tty") == "true",
	}
	criremotecommand.ServeAttach(w, req, echoAttacher{}, "pod", "", "sandbox", opts,
		0, 10*time.Second, []string{criremotecommand.StreamProtocolV4Name})
}

// TestAttachOverStreamingProtocol attaches with exec's executor: WebSocket first, SPDY after.
func TestAttachOverStreamingProtocol(t *testing.T) {
	server := &attachServer{}
	srv := httptest.NewServer(server)
	defer srv.Close()

	f := cmdtesting.NewTestFactory()
	f.RESTConfig.Host = srv.URL
	streams, in, out, errOut := genericiooptions.NewTestIOStreams()
	in.WriteString("hello")
	cmd := NewCmdAttach(f, streams, sandboxclient.DefaultRemoteExecutor{})
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetArgs([]string{"web", "p-abc", "-i"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "attached\nstdin=\"hello\"\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got := errOut.String(); got != "a warning\n" {
		t.Errorf("stderr %q, want the process's", got)
	}
	server.mu.Lock()
	defer server.mu.Unlock()
	if server.websocket != 1 || server.spdy != 1 {
		t.Errorf("%d WebSocket and %d SPDY requests, want one of each", server.websocket, server.spdy)
	}
	for _, q := range server.queries {
		if q.Get("process") != "p-abc" {
			t.Errorf("query %v, want process p-abc", q)
		}
	}
}
