package runcode

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
)

var pngBytes = []byte("\x89PNG\r\n\x1a\nnot really an image")

// runServer answers a run of sandbox sb with events, and records the run it got.
func runServer(t *testing.T, events []sandboxv1alpha1.SandboxCodeRunEvent, got *sandboxv1alpha1.SandboxCodeRun, gotPath *string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		*gotPath = req.URL.Path + "?" + req.URL.RawQuery
		if err := json.NewDecoder(req.Body).Decode(got); err != nil {
			t.Errorf("decoding the run: %v", err)
		}
		w.Header().Set("Content-Type", "application/jsonl")
		enc := json.NewEncoder(w)
		for i := range events {
			_ = enc.Encode(&events[i])
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRunCode(t *testing.T) {
	plot := base64.StdEncoding.EncodeToString(pngBytes)
	stream := []sandboxv1alpha1.SandboxCodeRunEvent{
		{Type: sandboxv1alpha1.CodeRunStdout, Text: "hello\n"},
		{Type: sandboxv1alpha1.CodeRunStderr, Text: "warn\n"},
		{Type: sandboxv1alpha1.CodeRunDisplay, Text: "<Figure>", Data: map[string]string{"image/png": plot, "text/plain": "<Figure>"}},
		{Type: sandboxv1alpha1.CodeRunResult, Text: "42", Data: map[string]string{"text/plain": "42"}, ExecutionCount: 3},
		{Type: sandboxv1alpha1.CodeRunEnd, Status: "ok", ExecutionCount: 3},
	}
	raised := []sandboxv1alpha1.SandboxCodeRunEvent{
		{Type: sandboxv1alpha1.CodeRunError, Error: &sandboxv1alpha1.SandboxCodeError{Name: "ZeroDivisionError", Value: "division by zero",
			Traceback: []string{"Traceback (most recent call last):", "ZeroDivisionError: division by zero"}}},
		{Type: sandboxv1alpha1.CodeRunEnd, Status: "error", Error: &sandboxv1alpha1.SandboxCodeError{Name: "ZeroDivisionError"}},
	}
	cut := []sandboxv1alpha1.SandboxCodeRunEvent{{Type: sandboxv1alpha1.CodeRunStdout, Text: "partial\n"}}
	tests := []struct {
		name       string
		events     []sandboxv1alpha1.SandboxCodeRunEvent
		args       []string
		outputDir  bool
		wantOut    string
		wantErrOut string
		wantErr    string
		wantPath   string
		wantCode   string
		wantTO     int64
	}{
		{name: "text", events: stream, args: []string{"sb", "--", "print('hello')", "+", "1"},
			wantOut: "hello\n42\n", wantErrOut: "warn\n[image/png, 27 bytes: --output-dir saves it]\n",
			wantPath: "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/contexts/default/run?", wantCode: "print('hello') + 1"},
		{name: "context, replica, timeout", events: stream, args: []string{"sb", "--context", "c1", "--replica", "2", "--timeout", "30s", "--", "x"},
			wantOut: "hello\n42\n", wantErrOut: "warn\n[image/png, 27 bytes: --output-dir saves it]\n",
			wantPath: "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/contexts/c1/run?replica=2", wantCode: "x", wantTO: 30},
		{name: "output dir", events: stream, args: []string{"sb", "--", "plot()"}, outputDir: true,
			wantOut: "hello\n42\n", wantErrOut: "warn\n[image/png written to DIR/output-1.png]\n", wantCode: "plot()"},
		{name: "json", events: stream[:2], args: []string{"sb", "-o", "json", "--", "1"},
			wantOut: `{"type":"stdout","text":"hello\n"}` + "\n" + `{"type":"stderr","text":"warn\n"}` + "\n",
			wantErr: "the run's output ended before its end", wantCode: "1"},
		{name: "exception", events: raised, args: []string{"sb", "--", "1/0"},
			wantErrOut: "Traceback (most recent call last):\nZeroDivisionError: division by zero\n", wantErr: "the code raised ZeroDivisionError", wantCode: "1/0"},
		{name: "cut", events: cut, args: []string{"sb", "--", "1"}, wantOut: "partial\n", wantErr: "connection to the sandbox was lost", wantCode: "1"},
		{name: "no code", args: []string{"sb"}, wantErr: "no code"},
		{name: "code without dash", args: []string{"sb", "print(1)"}, wantErr: "the code goes after --"},
		{name: "bad timeout", args: []string{"sb", "--timeout", "1500ms", "--", "1"}, wantErr: "--timeout must be whole seconds"},
		{name: "bad output", args: []string{"sb", "-o", "yaml", "--", "1"}, wantErr: "unknown output format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got sandboxv1alpha1.SandboxCodeRun
			var path string
			srv := runServer(t, tt.events, &got, &path)
			args := tt.args
			dir := filepath.Join(t.TempDir(), "out")
			if tt.outputDir {
				args = append([]string{args[0], "--output-dir", dir}, args[1:]...)
			}
			out, errOut := &bytes.Buffer{}, &bytes.Buffer{}
			cmd := NewCmdRunCode(cmdtesting.NewServerFactory(srv.URL), genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut})
			cmd.SetArgs(args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			err := cmd.Execute()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one with %q", err, tt.wantErr)
			}
			if tt.wantCode != "" && (got.Code != tt.wantCode || got.TimeoutSeconds != tt.wantTO) {
				t.Errorf("the server got %+v, want code %q and timeout %d", got, tt.wantCode, tt.wantTO)
			}
			if tt.wantPath != "" && path != tt.wantPath {
				t.Errorf("path %q, want %q", path, tt.wantPath)
			}
			if out.String() != tt.wantOut {
				t.Errorf("stdout %q, want %q", out.String(), tt.wantOut)
			}
			if want := strings.ReplaceAll(tt.wantErrOut, "DIR", dir); errOut.String() != want {
				t.Errorf("stderr %q, want %q", errOut.String(), want)
			}
			if tt.outputDir {
				if data, err := os.ReadFile(filepath.Join(dir, "output-1.png")); err != nil || !bytes.Equal(data, pngBytes) {
					t.Errorf("saved image %q, %v", data, err)
				}
			}
			var exit interface{ ExitStatus() int }
			if tt.name == "exception" && (!errors.As(err, &exit) || exit.ExitStatus() != 1) {
				t.Errorf("an exception's error %T does not make exit status 1", err)
			}
		})
	}
}
