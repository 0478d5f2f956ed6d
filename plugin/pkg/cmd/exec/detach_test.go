package exec

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

const processesPath = sandboxserver.Prefix + cmdtesting.Namespace + "/sandboxes/two/processes"

// runServer runs kubectl sandbox exec against srv as its user, with an executor that fails
// the test if anything streams.
func runServer(t *testing.T, srv *sandboxserver.Server, args ...string) (out, msg string) {
	t.Helper()
	streams, _, stdout, _ := genericiooptions.NewTestIOStreams()
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	executor := &fakeExecutor{}
	cmd := NewCmdExec(f, streams, executor)
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var errOut bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&errOut, err)
	}
	if executor.called {
		t.Errorf("exec %q streamed; a detached command must not", args)
	}
	return stdout.String(), errOut.String()
}

func TestExecDetach(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		args    []string
		wantOut string
		// check checks the output; wantOut is compared when it is nil.
		check    func(t *testing.T, out string)
		wantErr  string
		wantSpec *sandboxv1alpha1.SandboxProcessSpec
		// wantEnv is the env of the start, which the server never answers.
		wantEnv []sandboxv1alpha1.SandboxProcessEnvVar
	}{
		{
			name:     "prints the ID",
			args:     []string{"two", "--detach", "--", "python3", "-m", "http.server", "8000"},
			wantOut:  "p-1\n",
			wantSpec: &sandboxv1alpha1.SandboxProcessSpec{Command: []string{"python3", "-m", "http.server", "8000"}},
		},
		{
			name:    "replica, terminal, stdin, env, workdir and timeout",
			args:    []string{"two", "-d", "--replica", "1", "-it", "-e", "A=1", "-e", "B=x=y", "-w", "/tmp", "--timeout", "1m", "--", "bash"},
			wantEnv: []sandboxv1alpha1.SandboxProcessEnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "x=y"}},
			wantOut: "p-1\n",
			wantSpec: &sandboxv1alpha1.SandboxProcessSpec{Replica: 1, Command: []string{"bash"}, TTY: true, Stdin: true,
				WorkingDir: "/tmp", TimeoutSeconds: 60},
		},
		{
			name:    "-o name",
			args:    []string{"two", "--detach", "-o", "name", "--", "sleep", "60"},
			wantOut: "sandboxprocess.sandbox.kube-sandbox.io/p-1\n",
		},
		{
			name: "-o json",
			args: []string{"two", "--detach", "-o", "json", "--", "sleep", "60"},
			check: func(t *testing.T, out string) {
				p := &sandboxv1alpha1.SandboxProcess{}
				if err := json.Unmarshal([]byte(out), p); err != nil {
					t.Fatalf("output is not JSON: %v\n%s", err, out)
				}
				if p.Kind != "SandboxProcess" || p.Name != "p-1" || p.Status.Phase != sandboxv1alpha1.ProcessPhaseRunning || p.Status.Pod != "two-0" {
					t.Errorf("output: %+v", p)
				}
			},
		},
		{
			name: "-o yaml",
			args: []string{"two", "--detach", "-o", "yaml", "--", "sleep", "60"},
			check: func(t *testing.T, out string) {
				p := &sandboxv1alpha1.SandboxProcess{}
				if err := yaml.Unmarshal([]byte(out), p); err != nil || p.Name != "p-1" || !strings.HasPrefix(out, "apiVersion: sandbox.kube-sandbox.io/v1alpha1\n") {
					t.Errorf("output: %v\n%s", err, out)
				}
			},
		},
		{
			name:    "-o without --detach",
			args:    []string{"two", "-o", "json", "--", "sleep", "60"},
			wantErr: "error: --output is for --detach: an attached command prints its own output\n",
		},
		{
			name:    "unknown output",
			args:    []string{"two", "-d", "-o", "wide", "--", "sleep", "60"},
			wantErr: "error: unknown output format \"wide\"; use one of: json, yaml, name\n",
		},
		{
			name:    "the server's validation",
			args:    []string{"two", "-d", "--", ""},
			wantErr: "The SandboxProcess \"\" is invalid",
		},
		{
			name:    "a replica the sandbox does not have",
			args:    []string{"two", "-d", "--replica", "2", "--", "sleep", "60"},
			wantErr: "error: sandbox \"two\" has 2 replica(s); --replica must be between 0 and 1\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sandboxserver.New(t, cmdtesting.Namespace)
			srv.Now = func() time.Time { return now }
			srv.Add(cmdtesting.Sandbox("two", 2, sandboxv1alpha1.PhaseRunning, 0, 1))
			out, msg := runServer(t, srv, tt.args...)
			if tt.wantErr != "" {
				if !strings.Contains(msg, tt.wantErr) {
					t.Errorf("error = %q, want it to contain %q", msg, tt.wantErr)
				}
				return
			}
			if msg != "" {
				t.Fatalf("error: %s", msg)
			}
			if tt.check != nil {
				tt.check(t, out)
			} else if out != tt.wantOut {
				t.Errorf("output = %q, want %q", out, tt.wantOut)
			}
			var posts int
			for _, r := range srv.Requests() {
				if r.Method == http.MethodPost {
					posts++
					if r.Path != processesPath {
						t.Errorf("POST %s, want %s", r.Path, processesPath)
					}
					sent := &sandboxv1alpha1.SandboxProcess{}
					if err := json.Unmarshal(r.Body, sent); err != nil {
						t.Fatalf("the start is not JSON: %v", err)
					}
					if sent.Kind != "SandboxProcess" || sent.APIVersion != sandboxv1alpha1.SchemeGroupVersion.String() {
						t.Errorf("the start is a %s %s", sent.APIVersion, sent.Kind)
					}
					if diff := cmp.Diff(tt.wantEnv, sent.Spec.Env); diff != "" {
						t.Errorf("env of the start (-want +got):\n%s", diff)
					}
				}
			}
			if posts != 1 {
				t.Errorf("%d POSTs, want 1", posts)
			}
			if tt.wantSpec == nil {
				return
			}
			p := srv.Process("two", tt.wantSpec.Replica, "p-1")
			if p == nil {
				t.Fatal("no process p-1 started")
			}
			if diff := cmp.Diff(*tt.wantSpec, p.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}
