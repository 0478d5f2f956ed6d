package ps

import (
	"bytes"
	"context"
	"encoding/json"
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

func run(srv *sandboxserver.Server, args ...string) (string, string) {
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	cmd := NewCmdPs(f, streams)
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	var msg bytes.Buffer
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		cmdutil.PrintError(&msg, err)
	}
	return out.String(), msg.String()
}

func newServer(t *testing.T) *sandboxserver.Server {
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	srv.Now = func() time.Time { return now }
	srv.Add(cmdtesting.Sandbox("web", 2, sandboxv1alpha1.PhaseRunning, 0, 1))
	srv.AddProcess("web", &sandboxv1alpha1.SandboxProcess{
		ObjectMeta: metav1.ObjectMeta{Name: "p-abc"},
		Spec:       sandboxv1alpha1.SandboxProcessSpec{Command: []string{"python3", "-m", "http.server", "8000"}},
		Status:     sandboxv1alpha1.SandboxProcessStatus{Phase: "Running", Pod: "web-a", PID: 42, StartTime: at(-90 * time.Second)},
	})
	srv.AddProcess("web", &sandboxv1alpha1.SandboxProcess{
		ObjectMeta: metav1.ObjectMeta{Name: "p-def"},
		Spec:       sandboxv1alpha1.SandboxProcessSpec{Replica: 1, Command: []string{"bash"}, TTY: true},
		Status: sandboxv1alpha1.SandboxProcessStatus{Phase: "Exited", Pod: "web-b", PID: 7, Signal: "TERM", Reason: "Error",
			StartTime: at(-time.Hour), EndTime: at(-50 * time.Minute)},
	})
	return srv
}

func TestPs(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantOut   string
		wantErr   string
		wantQuery string
	}{
		{
			name: "every replica",
			args: []string{"web"},
			wantOut: `ID      REPLICA   PHASE     EXIT      PID   DURATION   COMMAND                       TTY
p-abc   0         Running   <none>    42    90s        python3 -m http.server 8000   false
p-def   1         Exited    SIGTERM   7     10m        bash                          true
`,
		},
		{
			name:      "one replica, wide, no headers",
			args:      []string{"web", "--replica", "1", "-o", "wide", "--no-headers"},
			wantQuery: "replica=1",
			wantOut: `p-def   1     Exited   SIGTERM   7     10m   bash   true   Error   web-b
`,
		},
		{
			name:      "replica 0 is asked for",
			args:      []string{"web", "--replica=0", "--no-headers"},
			wantQuery: "replica=0",
			wantOut: `p-abc   0     Running   <none>   42    90s   python3 -m http.server 8000   false
`,
		},
		{name: "no name", wantErr: "error: sandbox NAME is required\nSee 'ps -h' for help and examples\n"},
		{name: "unknown output", args: []string{"web", "-o", "name"}, wantErr: "unknown output format \"name\""},
		{name: "negative replica", args: []string{"web", "--replica", "-1"}, wantErr: "--replica must not be negative, got -1"},
		{name: "unknown sandbox", args: []string{"nope"}, wantErr: `sandboxes.sandbox.kube-sandbox.io "nope" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t)
			out, msg := run(srv, tt.args...)
			if tt.wantErr != "" {
				if !bytes.Contains([]byte(msg), []byte(tt.wantErr)) {
					t.Errorf("error = %q, want it to contain %q", msg, tt.wantErr)
				}
				return
			}
			if msg != "" {
				t.Fatalf("error: %s", msg)
			}
			if diff := cmp.Diff(tt.wantOut, out); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			if got := reqs[0].Path; got != sandboxserver.Prefix+cmdtesting.Namespace+"/sandboxes/web/processes" {
				t.Errorf("path = %s", got)
			}
			wantQuery := "includeObject=None"
			if tt.wantQuery != "" {
				wantQuery += "&" + tt.wantQuery
			}
			if reqs[0].RawQuery != wantQuery {
				t.Errorf("query = %q, want %q", reqs[0].RawQuery, wantQuery)
			}
		})
	}
}

func TestPsObjects(t *testing.T) {
	srv := newServer(t)
	out, msg := run(srv, "web", "-o", "json")
	if msg != "" {
		t.Fatal(msg)
	}
	list := &sandboxv1alpha1.SandboxProcessList{}
	if err := json.Unmarshal([]byte(out), list); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if list.Kind != "SandboxProcessList" || len(list.Items) != 2 || list.Items[1].Status.Signal != "TERM" || list.Items[0].Kind != "SandboxProcess" {
		t.Errorf("list: %+v", list)
	}

	out, msg = run(srv, "web", "--replica", "1", "-o", "yaml")
	if msg != "" {
		t.Fatal(msg)
	}
	list = &sandboxv1alpha1.SandboxProcessList{}
	if err := yaml.Unmarshal([]byte(out), list); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, out)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "p-def" {
		t.Errorf("list: %+v", list)
	}
}
