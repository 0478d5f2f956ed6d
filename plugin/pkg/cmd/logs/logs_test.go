package logs

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

const logPath = sandboxserver.Prefix + cmdtesting.Namespace + "/sandboxes/eval/log"

// runLogs runs kubectl sandbox logs against srv as its user, and returns what it printed and
// the error as kubectl prints it.
func runLogs(srv *sandboxserver.Server, args ...string) (out, msg string) {
	streams, _, stdout, _ := genericiooptions.NewTestIOStreams()
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	cmd := NewCmdLogs(f, streams)
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var errOut bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&errOut, err)
	}
	return stdout.String(), errOut.String()
}

func TestLogs(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	srv.Add(&sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "eval"},
		Spec: sandboxv1alpha1.SandboxSpec{
			Replicas:     ptr.To[int32](3),
			PoolRef:      &sandboxv1alpha1.SandboxPoolReference{Name: "python"},
			TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"python3", "eval.py"}},
		},
	})
	srv.Add(&sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "shell"}})
	srv.SetTaskLog("eval", 0, false, "loading\nepoch 1\nepoch 2\ndone\n")
	srv.SetTaskLog("eval", 1, false, "attempt 2\n")
	srv.SetTaskLog("eval", 1, true, "attempt 1\nTraceback (most recent call last):\nKeyError: 'x'\n")

	tests := []struct {
		name    string
		args    []string
		wantOut string
		wantErr string
		// wantQuery is the query of the one log request; unset: no request.
		wantQuery *string
	}{
		{
			name:      "the first replica's log",
			args:      []string{"eval"},
			wantOut:   "loading\nepoch 1\nepoch 2\ndone\n",
			wantQuery: ptr.To(""),
		},
		{
			name:      "follow the last lines",
			args:      []string{"eval", "-f", "--tail", "2"},
			wantOut:   "epoch 2\ndone\n",
			wantQuery: ptr.To("follow=true&tailLines=2"),
		},
		{
			name:      "the previous attempt of another replica, bounded",
			args:      []string{"eval", "--replica=1", "--previous", "--limit-bytes", "10"},
			wantOut:   "attempt 1\n",
			wantQuery: ptr.To("limitBytes=10&previous=true&replica=1"),
		},
		{
			name:      "every flag, short ones",
			args:      []string{"eval", "--replica", "1", "-p", "-f", "--tail=1", "--limit-bytes=3"},
			wantOut:   "Key",
			wantQuery: ptr.To("follow=true&limitBytes=3&previous=true&replica=1&tailLines=1"),
		},
		{
			name:      "no lines",
			args:      []string{"eval", "--tail", "0"},
			wantQuery: ptr.To("tailLines=0"),
		},
		{
			name:      "all lines, no limit, as kubectl logs' defaults say",
			args:      []string{"eval", "--tail=-1", "--limit-bytes=0"},
			wantOut:   "loading\nepoch 1\nepoch 2\ndone\n",
			wantQuery: ptr.To(""),
		},
		{
			name:      "a replica without output yet",
			args:      []string{"eval", "--replica", "2"},
			wantErr:   "Error from server (BadRequest): replica 2 of sandbox \"eval\" has no task log yet\n",
			wantQuery: ptr.To("replica=2"),
		},
		{
			name:      "a replica the sandbox does not have",
			args:      []string{"eval", "--replica", "3"},
			wantErr:   "Error from server (BadRequest): sandbox \"eval\" has 3 replica(s); replica 3 does not exist\n",
			wantQuery: ptr.To("replica=3"),
		},
		{
			name:      "a sandbox without a task",
			args:      []string{"shell"},
			wantErr:   "Error from server (BadRequest): sandbox \"shell\" runs no task (it has no spec.taskTemplate), so it has no task log; use exec to run commands in it\n",
			wantQuery: ptr.To(""),
		},
		{
			name:    "negative tail",
			args:    []string{"eval", "--tail", "-2"},
			wantErr: "error: --tail must be -1 (all) or more, got -2\n",
		},
		{
			name:    "negative limit",
			args:    []string{"eval", "--limit-bytes", "-1"},
			wantErr: "error: --limit-bytes must be 0 (no limit) or more, got -1\n",
		},
		{
			name:    "negative replica",
			args:    []string{"eval", "--replica", "-1"},
			wantErr: "error: --replica must not be negative, got -1\n",
		},
		{
			name:    "no name",
			wantErr: "error: sandbox NAME is required\nSee 'logs -h' for help and examples\n",
		},
		{
			name:    "two names",
			args:    []string{"eval", "shell"},
			wantErr: "error: logs takes one NAME, got [\"eval\" \"shell\"]\nSee 'logs -h' for help and examples\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_ = srv.Requests()
			out, msg := runLogs(srv, tt.args...)
			if msg != tt.wantErr {
				t.Errorf("error %q, want %q", msg, tt.wantErr)
			}
			if diff := cmp.Diff(tt.wantOut, out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			requests := srv.Requests()
			if tt.wantQuery == nil {
				if len(requests) > 0 {
					t.Errorf("requests %v, want none", requests)
				}
				return
			}
			if len(requests) != 1 {
				t.Fatalf("%d requests, want 1: %v", len(requests), requests)
			}
			r := requests[0]
			if r.Method != http.MethodGet || (r.Path != logPath && r.Path != sandboxserver.Prefix+cmdtesting.Namespace+"/sandboxes/shell/log") {
				t.Errorf("request %s %s, want GET of the log subresource", r.Method, r.Path)
			}
			if r.RawQuery != *tt.wantQuery {
				t.Errorf("query %q, want %q", r.RawQuery, *tt.wantQuery)
			}
		})
	}
}

// TestLogsWaitsForReplica: a replica the server says is not ready (503) is waited for with a
// watch of the sandbox, and its log asked for again once it is ready; a wait that times out
// says what the server said and what the sandbox last showed.
func TestLogsWaitsForReplica(t *testing.T) {
	notReady := &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "eval"},
		Spec: sandboxv1alpha1.SandboxSpec{
			TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"python3", "eval.py"}},
		},
		Status: sandboxv1alpha1.SandboxStatus{
			Phase:      sandboxv1alpha1.PhaseRunning,
			Pods:       []sandboxv1alpha1.SandboxPodStatus{{Replica: 0, Name: "eval-0"}},
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PodsNotReady", Message: "0/1 pods ready"}},
		},
	}
	tests := []struct {
		name string
		args []string
		// ready: the replica becomes ready once the wait watches.
		ready    bool
		wantOut  string
		wantErr  string
		wantLogs int
	}{
		{name: "ready while waited for", args: []string{"eval"}, ready: true, wantOut: "done\n", wantLogs: 2},
		{name: "never ready", args: []string{"eval", "--pod-running-timeout", "300ms"}, wantLogs: 1,
			wantErr: "Error from server (ServiceUnavailable): sandbox \"eval\" is not ready: pod eval-0 of replica 0 is being set up (its execd is not certified or allocated yet) " +
				"(sandbox \"eval\" replica 0 is not ready after 300ms: phase Running, PodsNotReady: 0/1 pods ready)\n"},
		{name: "no wait of zero", args: []string{"eval", "--pod-running-timeout", "0s"},
			wantErr: "error: --pod-running-timeout must be higher than zero, got 0s\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sandboxserver.New(t, cmdtesting.Namespace)
			srv.Add(notReady.DeepCopy())
			srv.SetTaskLog("eval", 0, false, "done\n")
			if tt.ready {
				srv.WatchStarted = func() {
					srv.Modify("eval", func(sb *sandboxv1alpha1.Sandbox) {
						sb.Status.Pods[0].Ready, sb.Status.Conditions = true, nil
					})
				}
			}
			out, msg := runLogs(srv, tt.args...)
			if msg != tt.wantErr {
				t.Errorf("error %q, want %q", msg, tt.wantErr)
			}
			if out != tt.wantOut {
				t.Errorf("output %q, want %q", out, tt.wantOut)
			}
			logs := 0
			for _, r := range srv.Requests() {
				if r.Path == logPath {
					logs++
				}
			}
			if logs != tt.wantLogs {
				t.Errorf("%d log requests, want %d: %v", logs, tt.wantLogs, srv.Requests())
			}
		})
	}
}
