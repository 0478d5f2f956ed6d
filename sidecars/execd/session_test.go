package execd

import (
	"bytes"
	"net/http"
	"net/url"
	"testing"
	"time"

	clientremotecommand "k8s.io/client-go/tools/remotecommand"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

func TestExecSessionOptions(t *testing.T) {
	srv, _ := startServer(t)
	dir := t.TempDir()
	tests := []struct {
		name       string
		cmd        []string
		params     url.Values
		wantOut    string
		wantExit   int
		maxSeconds float64
	}{
		{name: "env added", cmd: []string{"sh", "-c", "echo $GREETING-$OTHER"}, params: url.Values{EnvParam: {"GREETING=hi", "OTHER=a=b"}}, wantOut: "hi-a=b\n"},
		{name: "working directory", cmd: []string{"pwd"}, params: url.Values{WorkingDirParam: {dir}}, wantOut: dir + "\n"},
		{name: "timeout kills the process group", cmd: []string{"sh", "-c", "sleep 30 & sleep 30"}, params: url.Values{TimeoutSecondsParam: {"1"}}, wantExit: -1, maxSeconds: 10},
		{name: "no options", cmd: []string{"sh", "-c", "echo plain"}, wantOut: "plain\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := execURL(srv.URL, tt.cmd, remotecommand.Options{Stdout: true, Stderr: true})
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			for k, v := range tt.params {
				q[k] = v
			}
			u.RawQuery = q.Encode()
			exec, err := clientremotecommand.NewSPDYExecutor(restConfigFor(srv.URL, asAPIServer), http.MethodPost, u)
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			start := time.Now()
			err = exec.StreamWithContext(testContext(t), clientremotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
			if tt.wantExit == 0 && (err != nil || out.String() != tt.wantOut) {
				t.Errorf("out %q err %v stderr %q, want %q", out.String(), err, errOut.String(), tt.wantOut)
			}
			if tt.wantExit != 0 && err == nil {
				t.Errorf("want the command killed, it succeeded")
			}
			if tt.maxSeconds > 0 && time.Since(start).Seconds() > tt.maxSeconds {
				t.Errorf("took %s, want the timeout to end it", time.Since(start))
			}
		})
	}
}

func TestExecSessionOptionsRefused(t *testing.T) {
	srv, _ := startServer(t)
	for _, tt := range []struct{ name, param, value string }{
		{"env without =", EnvParam, "NOPE"},
		{"relative working dir", WorkingDirParam, "tmp"},
		{"negative timeout", TimeoutSecondsParam, "-1"},
		{"non-numeric timeout", TimeoutSecondsParam, "soon"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, _ := execURL(srv.URL, []string{"true"}, remotecommand.Options{Stdout: true})
			q := u.Query()
			q.Set(tt.param, tt.value)
			u.RawQuery = q.Encode()
			req, _ := http.NewRequest(http.MethodPost, u.String(), nil)
			resp, err := httpClient(t, asAPIServer).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400", resp.StatusCode)
			}
		})
	}
}
