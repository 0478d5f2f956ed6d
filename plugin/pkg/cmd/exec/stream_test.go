package exec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	criremotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// echoRuntime runs a pretend command: it prints its argv and stdin and exits with the code given
// as "exit N".
type echoRuntime struct{}

func (echoRuntime) ExecInContainer(_ context.Context, _, _, _ string, cmd []string, in io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan criremotecommand.TerminalSize, _ time.Duration) error {
	fmt.Fprintf(out, "argv=%q\n", cmd)
	if in != nil {
		data, _ := io.ReadAll(in)
		fmt.Fprintf(out, "stdin=%q\n", data)
	}
	fmt.Fprintln(errOut, "a warning")
	var code int
	if _, err := fmt.Sscanf(strings.Join(cmd, " "), "exit %d", &code); err == nil && code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("exit status %d", code), Code: code}
	}
	return nil
}

// streamServer serves the exec subresource with the CRI streaming server kubelet uses, which
// speaks SPDY; a WebSocket request gets a plain error, as from a server or proxy without
// WebSocket support, so the client must fall back.
type streamServer struct {
	mu        sync.Mutex
	websocket int
	spdy      int
	paths     []string
}

func (s *streamServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	s.paths = append(s.paths, req.URL.Path)
	isWebSocket := strings.EqualFold(req.Header.Get("Upgrade"), "websocket")
	if isWebSocket {
		s.websocket++
	} else {
		s.spdy++
	}
	s.mu.Unlock()
	if isWebSocket {
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
	criremotecommand.ServeExec(w, req, echoRuntime{}, "pod", "", "sandbox", q["command"], opts,
		0, 10*time.Second, []string{criremotecommand.StreamProtocolV4Name})
}

// TestExecOverStreamingProtocol runs exec with the real executor against a streaming server: the
// WebSocket attempt is refused, SPDY carries the streams, and the command's exit code comes back
// as the code main exits with.
func TestExecOverStreamingProtocol(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantOut  string
		wantErr  string
		wantCode int
	}{
		{
			name:    "output and stdin",
			args:    []string{"sb", "-i", "--", "cat", "-"},
			stdin:   "hello",
			wantOut: "argv=[\"cat\" \"-\"]\nstdin=\"hello\"\n",
		},
		{
			name:     "exit code",
			args:     []string{"sb", "--", "exit", "3"},
			wantOut:  "argv=[\"exit\" \"3\"]\n",
			wantErr:  "command terminated with exit code 3\n",
			wantCode: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			server := &streamServer{}
			srv := httptest.NewServer(server)
			defer srv.Close()

			f := cmdtesting.NewTestFactory(sandbox("sb", 1, sandboxv1alpha1.PhaseRunning, 0))
			f.RESTConfig.Host = srv.URL
			streams, in, out, errOut := genericiooptions.NewTestIOStreams()
			in.WriteString(tt.stdin)
			cmd := NewCmdExec(f, streams, sandboxclient.DefaultRemoteExecutor{})
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(tt.args)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := cmd.ExecuteContext(ctx)

			var msg bytes.Buffer
			code := 0
			if err != nil {
				code = cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr || code != tt.wantCode {
				t.Errorf("printed %q with exit code %d, want %q with %d (error %v)", msg.String(), code, tt.wantErr, tt.wantCode, err)
			}
			if got := out.String(); got != tt.wantOut {
				t.Errorf("stdout %q, want %q", got, tt.wantOut)
			}
			if got := errOut.String(); got != "a warning\n" {
				t.Errorf("stderr %q, want the command's", got)
			}
			server.mu.Lock()
			defer server.mu.Unlock()
			if server.websocket != 1 || server.spdy != 1 {
				t.Errorf("%d WebSocket and %d SPDY requests, want one of each (WebSocket first, then the fallback)", server.websocket, server.spdy)
			}
			for _, p := range server.paths {
				if p != "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/exec" {
					t.Errorf("request to %s", p)
				}
			}
		})
	}
}
