package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(now.Add(d))) }

// batch has four replicas: one succeeded, one failed after retries, one running, and one the
// status does not list yet; its pod is known already.
func batch() *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "eval"},
		Spec: sandboxv1alpha1.SandboxSpec{
			Replicas:     ptr.To[int32](4),
			PoolRef:      &sandboxv1alpha1.SandboxPoolReference{Name: "python"},
			TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"python3", "eval.py"}},
		},
		Status: sandboxv1alpha1.SandboxStatus{
			Phase: sandboxv1alpha1.PhaseRunning, TaskSucceeded: 1, TaskFailed: 1, TaskRunning: 1, TaskPending: 1,
			Pods: []sandboxv1alpha1.SandboxPodStatus{{Replica: 3, Name: "python-x7k2p"}},
			// Out of order: the table goes by replica.
			Tasks: []sandboxv1alpha1.SandboxTaskStatus{
				{Replica: 2, Phase: "Running", Pod: "python-c3d4e", Attempts: 1, StartTime: at(-90 * time.Second)},
				{Replica: 0, Phase: "Succeeded", Pod: "python-a1b2c", Attempts: 1, ExitCode: ptr.To[int32](0),
					StartTime: at(-10 * time.Minute), FinishTime: at(-7 * time.Minute)},
				{Replica: 1, Phase: "Failed", Pod: "python-f9g8h", Attempts: 4, ExitCode: ptr.To[int32](137),
					StartTime: at(-2 * time.Hour), FinishTime: at(-time.Hour), Reason: "BackoffLimitExceeded", Message: "4 attempts failed"},
			},
		},
	}
}

func run(t *testing.T, srv *sandboxserver.Server, args ...string) (string, string) {
	t.Helper()
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	cmd := newCmdTasks(f, NewTasksOptions(streams))
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var msg bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&msg, err)
	}
	return out.String(), msg.String()
}

// TestTasks prints the server's table: the durations of running tasks are the server's,
// measured with its clock.
func TestTasks(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	srv.Now = func() time.Time { return now }
	srv.Add(batch())
	interactive := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "shell"}, Spec: sandboxv1alpha1.SandboxSpec{Template: nil}}
	srv.Add(interactive)
	fresh := batch()
	fresh.Name, fresh.Spec.Replicas, fresh.Status = "fresh", nil, sandboxv1alpha1.SandboxStatus{}
	srv.Add(fresh)

	tests := []struct {
		name    string
		args    []string
		wantOut string
		wantErr string
	}{
		{
			name: "a row per replica",
			args: []string{"eval"},
			wantOut: "" +
				"REPLICA   PHASE       EXIT     ATTEMPTS   DURATION   POD            REASON\n" +
				"0         Succeeded   0        1          3m         python-a1b2c   <none>\n" +
				"1         Failed      137      4          60m        python-f9g8h   BackoffLimitExceeded\n" +
				"2         Running     <none>   1          90s        python-c3d4e   <none>\n" +
				"3         Pending     <none>   0          <none>     python-x7k2p   <none>\n",
		},
		{
			name: "no headers",
			args: []string{"eval", "--no-headers"},
			wantOut: "" +
				"0     Succeeded   0        1     3m       python-a1b2c   <none>\n" +
				"1     Failed      137      4     60m      python-f9g8h   BackoffLimitExceeded\n" +
				"2     Running     <none>   1     90s      python-c3d4e   <none>\n" +
				"3     Pending     <none>   0     <none>   python-x7k2p   <none>\n",
		},
		{
			name: "before any task has a status",
			args: []string{"fresh"},
			wantOut: "" +
				"REPLICA   PHASE     EXIT     ATTEMPTS   DURATION   POD      REASON\n" +
				"0         Pending   <none>   0          <none>     <none>   <none>\n",
		},
		{
			name:    "json before any task has a status",
			args:    []string{"fresh", "-o", "json"},
			wantOut: "[]\n",
		},
		{
			name:    "a sandbox without a task",
			args:    []string{"shell"},
			wantErr: "Error from server (BadRequest): sandbox \"shell\" runs no task (it has no spec.taskTemplate)\n",
		},
		{
			name:    "json of a sandbox without a task",
			args:    []string{"shell", "-o", "json"},
			wantErr: "Error from server (BadRequest): sandbox \"shell\" runs no task (it has no spec.taskTemplate)\n",
		},
		{
			name:    "a sandbox that does not exist",
			args:    []string{"nope"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n",
		},
		{
			name:    "an unknown format",
			args:    []string{"eval", "-o", "wide"},
			wantErr: "error: unknown output format \"wide\"; use one of: json, yaml\nSee 'tasks -h' for help and examples\n",
		},
		{
			name:    "no name",
			wantErr: "error: sandbox NAME is required\nSee 'tasks -h' for help and examples\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, msg := run(t, srv, tt.args...)
			if msg != tt.wantErr {
				t.Errorf("error %q, want %q", msg, tt.wantErr)
			}
			if diff := cmp.Diff(tt.wantOut, out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTasksStructured checks that -o json and -o yaml print status.tasks as the API has it.
func TestTasksStructured(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	srv.Add(batch())
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			out, msg := run(t, srv, "eval", "-o", format)
			if msg != "" {
				t.Fatal(msg)
			}
			var got []sandboxv1alpha1.SandboxTaskStatus
			var err error
			if format == "json" {
				err = json.Unmarshal([]byte(out), &got)
			} else {
				err = yaml.Unmarshal([]byte(out), &got)
			}
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			if diff := cmp.Diff(batch().Status.Tasks, got); diff != "" {
				t.Errorf("tasks (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTasksRequests checks that every format reads the tasks subresource, so that one right
// (get sandboxes/tasks) serves them all, and that the table is asked for without the rows'
// objects, which it does not print.
func TestTasksRequests(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	srv.Add(batch())
	const path = sandboxserver.Prefix + cmdtesting.Namespace + "/sandboxes/eval/tasks"
	tests := []struct {
		args      []string
		wantTable bool
	}{
		{args: []string{"eval"}, wantTable: true},
		{args: []string{"eval", "--no-headers"}, wantTable: true},
		{args: []string{"eval", "-o", "json"}},
		{args: []string{"eval", "-o", "yaml"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			srv.Requests()
			if _, msg := run(t, srv, tt.args...); msg != "" {
				t.Fatal(msg)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 || reqs[0].Method != http.MethodGet || reqs[0].Path != path {
				t.Fatalf("requests %+v, want one GET of %s", reqs, path)
			}
			accept := reqs[0].Header.Get("Accept")
			if got := strings.Contains(accept, "as=Table"); got != tt.wantTable {
				t.Errorf("Accept %q: asks for a table %t, want %t", accept, got, tt.wantTable)
			}
			if tt.wantTable && reqs[0].RawQuery != "includeObject=None" {
				t.Errorf("query %q, want includeObject=None", reqs[0].RawQuery)
			}
		})
	}
}
