package kill

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

func run(srv *sandboxserver.Server, args ...string) (string, string) {
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	cmd := NewCmdKill(f, streams)
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var msg bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&msg, err)
	}
	return out.String(), msg.String()
}

func TestKill(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// wantOut is the output, or with a prefix of "{" a fragment of it.
		wantOut   string
		wantErr   string
		wantPath  string
		wantQuery string
		// wantSignal is what the process shows after.
		wantSignal string
		// wantBody is the SandboxProcessSignal sent, when it is checked.
		wantBody *sandboxv1alpha1.SandboxProcessSignal
	}{
		{
			name:       "TERM by default",
			args:       []string{"web", "p-abc"},
			wantOut:    "process p-abc of sandbox \"web\" signalled (TERM): Exited, signal TERM\n",
			wantPath:   "/sandboxes/web/processes/p-abc/signal",
			wantSignal: "TERM",
			wantBody:   &sandboxv1alpha1.SandboxProcessSignal{Signal: "TERM"},
		},
		{
			name:       "another replica, a signal with SIG, a grace period",
			args:       []string{"web", "p-def", "--replica", "1", "--signal", "SIGINT", "--grace-period", "10"},
			wantOut:    "process p-def of sandbox \"web\" signalled (SIGINT): Exited, signal INT\n",
			wantPath:   "/sandboxes/web/processes/p-def/signal",
			wantQuery:  "replica=1",
			wantSignal: "INT",
			wantBody:   &sandboxv1alpha1.SandboxProcessSignal{Signal: "SIGINT", GracePeriodSeconds: ptr.To[int64](10)},
		},
		{
			name:       "-o json",
			args:       []string{"web", "p-abc", "--signal", "KILL", "-o", "json"},
			wantOut:    `"signal": "KILL"`,
			wantPath:   "/sandboxes/web/processes/p-abc/signal",
			wantSignal: "KILL",
		},
		{
			name:     "a process the replica does not have",
			args:     []string{"web", "p-def"},
			wantErr:  "Error from server (NotFound): sandboxes/processes.sandbox.kube-sandbox.io \"p-def\" not found\n",
			wantPath: "/sandboxes/web/processes/p-def/signal",
		},
		{
			name:     "the server's validation of the signal",
			args:     []string{"web", "p-abc", "--signal", "no such"},
			wantErr:  "signal",
			wantPath: "/sandboxes/web/processes/p-abc/signal",
		},
		{name: "no ID", args: []string{"web"}, wantErr: "error: kill takes a sandbox NAME and a process ID, got [\"web\"]\nSee 'kill -h' for help and examples\n"},
		{name: "negative grace period", args: []string{"web", "p-abc", "--grace-period", "-2"}, wantErr: "error: --grace-period must be -1 (no KILL) or more, got -2\n"},
		{name: "negative replica", args: []string{"web", "p-abc", "--replica", "-1"}, wantErr: "error: --replica must not be negative, got -1\n"},
		{name: "unknown output", args: []string{"web", "p-abc", "-o", "wide"}, wantErr: "error: unknown output format \"wide\"; use one of: json, yaml, name\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sandboxserver.New(t, cmdtesting.Namespace)
			srv.Now = func() time.Time { return time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC) }
			srv.Add(cmdtesting.Sandbox("web", 2, sandboxv1alpha1.PhaseRunning, 0, 1))
			srv.AddProcess("web", &sandboxv1alpha1.SandboxProcess{
				ObjectMeta: metav1.ObjectMeta{Name: "p-abc"},
				Spec:       sandboxv1alpha1.SandboxProcessSpec{Command: []string{"sleep", "1000"}},
				Status:     sandboxv1alpha1.SandboxProcessStatus{Phase: "Running"},
			})
			srv.AddProcess("web", &sandboxv1alpha1.SandboxProcess{
				ObjectMeta: metav1.ObjectMeta{Name: "p-def"},
				Spec:       sandboxv1alpha1.SandboxProcessSpec{Replica: 1, Command: []string{"sleep", "1000"}},
				Status:     sandboxv1alpha1.SandboxProcessStatus{Phase: "Running"},
			})
			out, msg := run(srv, tt.args...)
			switch {
			case tt.wantErr != "" && strings.HasSuffix(tt.wantErr, "\n"):
				if msg != tt.wantErr {
					t.Errorf("error = %q, want %q", msg, tt.wantErr)
				}
			case tt.wantErr != "":
				if !strings.Contains(msg, tt.wantErr) {
					t.Errorf("error = %q, want it to contain %q", msg, tt.wantErr)
				}
			case msg != "":
				t.Fatalf("error: %s", msg)
			}
			if strings.HasPrefix(tt.wantOut, `"`) {
				if !json.Valid([]byte(out)) || !strings.Contains(out, tt.wantOut) {
					t.Errorf("output = %s, want JSON with %s", out, tt.wantOut)
				}
			} else if out != tt.wantOut {
				t.Errorf("output = %q, want %q", out, tt.wantOut)
			}
			var got []string
			reqs := srv.Requests()
			if tt.wantBody != nil && len(reqs) == 1 {
				sent := &sandboxv1alpha1.SandboxProcessSignal{}
				if err := json.Unmarshal(reqs[0].Body, sent); err != nil {
					t.Fatalf("the signal is not JSON: %v", err)
				}
				sent.TypeMeta = metav1.TypeMeta{}
				if diff := cmp.Diff(tt.wantBody, sent); diff != "" {
					t.Errorf("the signal sent (-want +got):\n%s", diff)
				}
			}
			for _, r := range reqs {
				got = append(got, r.Method+" "+strings.TrimPrefix(r.Path, sandboxserver.Prefix+cmdtesting.Namespace)+"?"+r.RawQuery)
			}
			var want []string
			if tt.wantPath != "" {
				want = []string{"POST " + tt.wantPath + "?" + tt.wantQuery}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			if tt.wantSignal != "" {
				replica := int32(0)
				id := tt.args[1]
				if id == "p-def" {
					replica = 1
				}
				if p := srv.Process("web", replica, id); p.Status.Signal != tt.wantSignal {
					t.Errorf("the process's signal = %q, want %q", p.Status.Signal, tt.wantSignal)
				}
			}
		})
	}
}
