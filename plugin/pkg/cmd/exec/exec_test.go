package exec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// fakeExecutor records what the command asked for instead of connecting.
type fakeExecutor struct {
	called bool
	url    *url.URL
	config *rest.Config
	stdin  io.Reader
	stderr io.Writer
	tty    bool
	err    error
}

func (e *fakeExecutor) ExecuteWithContext(_ context.Context, u *url.URL, config *rest.Config, stdin io.Reader, stdout, stderr io.Writer, tty bool, _ remotecommand.TerminalSizeQueue) error {
	e.called = true
	e.url, e.config, e.stdin, e.stderr, e.tty = u, config, stdin, stderr, tty
	if stdout != nil {
		_, _ = io.WriteString(stdout, "remote output\n")
	}
	return e.err
}

var sandbox = cmdtesting.Sandbox

func TestExec(t *testing.T) {
	running := sandbox("sb", 1, sandboxv1alpha1.PhaseRunning, 0)
	two := sandbox("two", 2, sandboxv1alpha1.PhaseRunning, 0, 1)
	failed := sandbox("broken", 1, sandboxv1alpha1.PhaseFailed)
	failed.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "ImagePullFailed", Message: `image "nope" not found`}}

	tests := []struct {
		name  string
		args  []string
		stdin string
		// wantQuery is the query of the exec request; the path is always that of the sandbox.
		wantPath  string
		wantQuery url.Values
		wantStdin bool
		wantTTY   bool
		execErr   error
		// wantErr is what main would print, wantCode the exit code it would return.
		wantErr    string
		wantCode   int
		wantErrOut string
	}{
		{
			name:      "command with arguments",
			args:      []string{"sb", "--", "sh", "-c", "echo hi; exit 0"},
			wantPath:  "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/exec",
			wantQuery: url.Values{"command": {"sh", "-c", "echo hi; exit 0"}, "stdout": {"true"}, "stderr": {"true"}},
		},
		{
			name:      "stdin and replica",
			args:      []string{"two", "-i", "--replica", "1", "--", "cat"},
			stdin:     "data",
			wantPath:  "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/two/exec",
			wantQuery: url.Values{"command": {"cat"}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}, "replica": {"1"}},
			wantStdin: true,
		},
		{
			name:       "tty without a terminal falls back with kubectl's warning",
			args:       []string{"sb", "-it", "--", "sh"},
			wantPath:   "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/exec",
			wantQuery:  url.Values{"command": {"sh"}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}},
			wantStdin:  true,
			wantErrOut: "Unable to use a TTY - input is not a terminal or the right kind of file\n",
		},
		{
			name:      "env, working directory and timeout",
			args:      []string{"sb", "-e", "A=1", "--env", "B=x=y", "-w", "/tmp", "--timeout", "30s", "--", "env"},
			wantPath:  "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/exec",
			wantQuery: url.Values{"command": {"env"}, "stdout": {"true"}, "stderr": {"true"}, "env": {"A=1", "B=x=y"}, "workingDir": {"/tmp"}, "timeoutSeconds": {"30"}},
		},
		{
			name:      "tty without stdin is ignored, as by kubectl",
			args:      []string{"sb", "-t", "--", "sh"},
			wantPath:  "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/exec",
			wantQuery: url.Values{"command": {"sh"}, "stdout": {"true"}, "stderr": {"true"}},
		},
		{
			name:      "remote exit code becomes ours",
			args:      []string{"sb", "--", "false"},
			wantPath:  "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/exec",
			wantQuery: url.Values{"command": {"false"}, "stdout": {"true"}, "stderr": {"true"}},
			execErr:   utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3},
			wantErr:   "command terminated with exit code 3\n",
			wantCode:  3,
		},
		{
			name:      "stream error is exit code 1",
			args:      []string{"sb", "--", "true"},
			wantPath:  "/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb/exec",
			wantQuery: url.Values{"command": {"true"}, "stdout": {"true"}, "stderr": {"true"}},
			execErr:   errors.New("connection reset"),
			wantErr:   "error: connection reset\n",
			wantCode:  1,
		},
		{
			name:     "sandbox not found",
			args:     []string{"nope", "--", "ls"},
			wantErr:  "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n",
			wantCode: 1,
		},
		{
			name:     "replica out of range",
			args:     []string{"sb", "--replica", "1", "--", "ls"},
			wantErr:  "error: sandbox \"sb\" has 1 replica(s); --replica must be between 0 and 0\n",
			wantCode: 1,
		},
		{
			name:     "failed sandbox says why",
			args:     []string{"broken", "--", "ls"},
			wantErr:  "error: cannot exec into sandbox \"broken\": phase Failed, ImagePullFailed: image \"nope\" not found\n",
			wantCode: 1,
		},
		{
			name:     "no command",
			args:     []string{"sb"},
			wantErr:  "error: you must specify at least one command for the sandbox, after --\n",
			wantCode: 1,
		},
		{
			name:     "command without --",
			args:     []string{"sb", "ls", "/tmp"},
			wantErr:  "error: put the command after --, as in: exec sb -- ls /tmp\nSee 'exec -h' for help and examples\n",
			wantCode: 1,
		},
		{
			name:     "no name",
			args:     []string{"--", "ls"},
			wantErr:  "error: sandbox NAME is required\n",
			wantCode: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cmdtesting.NewTestFactory(running, two, failed)
			streams, in, out, errOut := genericiooptions.NewTestIOStreams()
			in.WriteString(tt.stdin)
			executor := &fakeExecutor{err: tt.execErr}
			cmd := NewCmdExec(f, streams, executor)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(tt.args)
			err := cmd.ExecuteContext(context.Background())

			var msg bytes.Buffer
			code := 0
			if err != nil {
				code = cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr || code != tt.wantCode {
				t.Errorf("printed %q with exit code %d, want %q with %d", msg.String(), code, tt.wantErr, tt.wantCode)
			}
			if got := errOut.String(); got != tt.wantErrOut {
				t.Errorf("stderr %q, want %q", got, tt.wantErrOut)
			}
			if tt.wantPath == "" {
				if executor.called {
					t.Errorf("executor called with %s, want no call", executor.url)
				}
				return
			}
			if !executor.called {
				t.Fatalf("executor not called")
			}
			if executor.url.Host != "sandbox-api.test:6443" || executor.config.Host != cmdtesting.Host {
				t.Errorf("request to %s with config host %s, want the factory's server", executor.url, executor.config.Host)
			}
			if executor.url.Path != tt.wantPath {
				t.Errorf("path %q, want %q", executor.url.Path, tt.wantPath)
			}
			if diff := cmp.Diff(tt.wantQuery, executor.url.Query()); diff != "" {
				t.Errorf("query (-want +got):\n%s", diff)
			}
			if (executor.stdin != nil) != tt.wantStdin {
				t.Errorf("stdin passed: %v, want %v", executor.stdin != nil, tt.wantStdin)
			}
			if executor.tty != tt.wantTTY {
				t.Errorf("tty %v, want %v", executor.tty, tt.wantTTY)
			}
			if executor.stderr == nil {
				t.Errorf("stderr not passed without a terminal")
			}
			if got := out.String(); got != "remote output\n" {
				t.Errorf("stdout %q, want the remote output", got)
			}
		})
	}
}

// TestExecWaitsForReplica checks that exec right after create waits for the replica, watching
// the sandbox, and gives up with the reason when it does not get ready in time.
func TestExecWaitsForReplica(t *testing.T) {
	pending := sandbox("sb", 1, sandboxv1alpha1.PhasePending)
	pending.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PoolExhausted", Message: `no idle pod in pool "small"`}}
	allocated := sandbox("sb", 1, sandboxv1alpha1.PhasePending)
	allocated.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PodsNotReady"}}
	ready := sandbox("sb", 1, sandboxv1alpha1.PhaseRunning, 0)
	failed := sandbox("sb", 1, sandboxv1alpha1.PhaseFailed)
	failed.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "ImagePullFailed"}}
	paused := sandbox("sb", 1, sandboxv1alpha1.PhasePaused)
	paused.Spec.Paused = true
	tests := []struct {
		name  string
		first *sandboxv1alpha1.Sandbox
		// then are the sandbox's states once exec watches; nil deletes it.
		then      []*sandboxv1alpha1.Sandbox
		timeout   string
		wantErr   string
		wantWatch bool
	}{
		{name: "ready at once", first: ready, timeout: "5s"},
		{name: "ready after two changes", first: pending, then: []*sandboxv1alpha1.Sandbox{allocated, ready}, timeout: "5s", wantWatch: true},
		{name: "never ready", first: pending, timeout: "300ms", wantWatch: true,
			wantErr: `sandbox "sb" replica 0 is not ready after 300ms: phase Pending, PoolExhausted: no idle pod in pool "small"`},
		{name: "times out with the reason last seen", first: pending, then: []*sandboxv1alpha1.Sandbox{allocated}, timeout: "300ms", wantWatch: true,
			wantErr: `sandbox "sb" replica 0 is not ready after 300ms: phase Pending, PodsNotReady`},
		{name: "fails while waiting", first: pending, then: []*sandboxv1alpha1.Sandbox{failed}, timeout: "5s", wantWatch: true,
			wantErr: `cannot exec into sandbox "sb": phase Failed, ImagePullFailed`},
		{name: "paused", first: paused, timeout: "5s",
			wantErr: `cannot exec into sandbox "sb": it is paused (phase Paused); 'kubectl sandbox resume sb' brings it back`},
		{name: "deleted while waiting", first: pending, then: []*sandboxv1alpha1.Sandbox{nil}, timeout: "5s", wantWatch: true,
			wantErr: `sandboxes.sandbox.kube-sandbox.io "sb" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cmdtesting.NewTestFactory(tt.first)
			tracker := f.Clientset.Tracker()
			var watches atomic.Int32
			var changes sync.WaitGroup
			f.Clientset.PrependWatchReactor("sandboxes", func(action clienttesting.Action) (bool, watch.Interface, error) {
				w, err := tracker.Watch(cmdtesting.SandboxesResource, action.GetNamespace())
				if err == nil && watches.Add(1) == 1 {
					changes.Go(func() {
						for _, sb := range tt.then {
							var err error
							if sb == nil {
								err = tracker.Delete(cmdtesting.SandboxesResource, cmdtesting.Namespace, "sb")
							} else {
								err = tracker.Update(cmdtesting.SandboxesResource, sb.DeepCopy(), cmdtesting.Namespace)
							}
							if err != nil {
								t.Errorf("change the sandbox: %v", err)
							}
						}
					})
				}
				return true, w, err
			})
			streams, _, _, _ := genericiooptions.NewTestIOStreams()
			executor := &fakeExecutor{}
			cmd := NewCmdExec(f, streams, executor)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs([]string{"sb", "--pod-running-timeout", tt.timeout, "--", "ls"})
			start := time.Now()
			err := cmd.ExecuteContext(context.Background())
			changes.Wait()
			if elapsed := time.Since(start); elapsed > 3*time.Second {
				t.Errorf("took %s", elapsed)
			}
			if tt.wantWatch != (watches.Load() > 0) {
				t.Errorf("%d watches, want a watch: %v", watches.Load(), tt.wantWatch)
			}

			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				if executor.called {
					t.Errorf("executor called for a replica that is not ready")
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !executor.called {
				t.Errorf("executor not called")
			}
		})
	}
}
