package logs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
)

// TestLogsProcess reads the output of processes, of a sandbox that runs no task.
func TestLogsProcess(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	srv.Add(cmdtesting.Sandbox("web", 2, sandboxv1alpha1.PhaseRunning, 0, 1))
	srv.AddProcess("web", &sandboxv1alpha1.SandboxProcess{
		ObjectMeta: metav1.ObjectMeta{Name: "p-abc"},
		Spec:       sandboxv1alpha1.SandboxProcessSpec{Command: []string{"python3", "-m", "http.server"}},
		Status:     sandboxv1alpha1.SandboxProcessStatus{Phase: "Running"},
	})
	srv.AddProcess("web", &sandboxv1alpha1.SandboxProcess{
		ObjectMeta: metav1.ObjectMeta{Name: "p-def"},
		Spec:       sandboxv1alpha1.SandboxProcessSpec{Replica: 1, Command: []string{"make"}},
		Status:     sandboxv1alpha1.SandboxProcessStatus{Phase: "Exited"},
	})
	srv.SetProcessLog("web", 0, "p-abc", "Serving HTTP on 0.0.0.0 port 8000\nGET /\nGET /x\n")
	srv.SetProcessLog("web", 1, "p-def", "cc main.c\n")

	tests := []struct {
		name      string
		args      []string
		wantOut   string
		wantErr   string
		wantQuery string
	}{
		{
			name:      "a process's output",
			args:      []string{"web", "--process", "p-abc"},
			wantOut:   "Serving HTTP on 0.0.0.0 port 8000\nGET /\nGET /x\n",
			wantQuery: "process=p-abc",
		},
		{
			name:      "from an offset, bounded, followed",
			args:      []string{"web", "--process=p-abc", "--offset-bytes", "34", "--limit-bytes", "6", "-f"},
			wantOut:   "GET /\n",
			wantQuery: "follow=true&limitBytes=6&offsetBytes=34&process=p-abc",
		},
		{
			name:      "offset 0 is asked for",
			args:      []string{"web", "--process=p-def", "--replica", "1", "--offset-bytes=0"},
			wantOut:   "cc main.c\n",
			wantQuery: "offsetBytes=0&process=p-def&replica=1",
		},
		{
			name:      "the last line",
			args:      []string{"web", "--process", "p-abc", "--tail", "1"},
			wantOut:   "GET /x\n",
			wantQuery: "process=p-abc&tailLines=1",
		},
		{
			name:      "a process of another replica",
			args:      []string{"web", "--process", "p-def"},
			wantErr:   "Error from server (NotFound): sandboxes/processes.sandbox.kube-sandbox.io \"p-def\" not found\n",
			wantQuery: "process=p-def",
		},
		{
			name:      "not a process ID: the server's validation",
			args:      []string{"web", "--process", "P_1"},
			wantErr:   "process",
			wantQuery: "process=P_1",
		},
		{
			name:    "an offset without a process",
			args:    []string{"web", "--offset-bytes", "3"},
			wantErr: "error: --offset-bytes is for the output of a process: use it with --process\n",
		},
		{
			name:    "previous of a process",
			args:    []string{"web", "--process", "p-abc", "-p"},
			wantErr: "error: --previous is for a task's attempts: a process has one output\n",
		},
		{
			name:    "offset and tail",
			args:    []string{"web", "--process", "p-abc", "--offset-bytes", "3", "--tail", "1"},
			wantErr: "error: --offset-bytes and --tail exclude each other\n",
		},
		{
			name:    "negative offset",
			args:    []string{"web", "--process", "p-abc", "--offset-bytes", "-2"},
			wantErr: "error: --offset-bytes must be -1 (from the first) or more, got -2\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, msg := runLogs(srv, tt.args...)
			reqs := srv.Requests()
			if tt.wantErr != "" {
				if !containsOrEqual(msg, tt.wantErr) {
					t.Errorf("error = %q, want %q", msg, tt.wantErr)
				}
			} else if msg != "" {
				t.Fatalf("error: %s", msg)
			}
			if diff := cmp.Diff(tt.wantOut, out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			var queries []string
			for _, r := range reqs {
				if r.Path == sandboxserver.Prefix+cmdtesting.Namespace+"/sandboxes/web/log" {
					queries = append(queries, r.RawQuery)
				}
			}
			var want []string
			if tt.wantQuery != "" {
				want = []string{tt.wantQuery}
			}
			if diff := cmp.Diff(want, queries); diff != "" {
				t.Errorf("log queries (-want +got):\n%s", diff)
			}
		})
	}
}

// containsOrEqual: a full message ends with a newline; a fragment is looked for.
func containsOrEqual(got, want string) bool {
	if want[len(want)-1] == '\n' {
		return got == want
	}
	return strings.Contains(got, want)
}
