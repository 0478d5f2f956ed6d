package wait

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clienttesting "k8s.io/client-go/testing"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

func sandbox(name string, uid types.UID, rv string, phase sandboxv1alpha1.SandboxPhase) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cmdtesting.Namespace, UID: uid, ResourceVersion: rv},
		Status:     sandboxv1alpha1.SandboxStatus{Phase: phase},
	}
}

func failed(name, rv string) *sandboxv1alpha1.Sandbox {
	sb := sandbox(name, types.UID("uid-"+name), rv, sandboxv1alpha1.PhaseFailed)
	sb.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "ImagePullFailed", Message: `image "nope" not found`}}
	return sb
}

// withTask gives sb a task.
func withTask(sb *sandboxv1alpha1.Sandbox) *sandboxv1alpha1.Sandbox {
	sb.Spec.TaskTemplate = &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"true"}}
	return sb
}

// withCondition adds a condition to sb.
func withCondition(sb *sandboxv1alpha1.Sandbox, typ string, status metav1.ConditionStatus, reason, message string) *sandboxv1alpha1.Sandbox {
	sb.Status.Conditions = append(sb.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message})
	return sb
}

// change is what the test's controller does once the wait watches: store sb in place of the
// sandbox of its name, or delete the sandbox named remove.
type change struct {
	sb     *sandboxv1alpha1.Sandbox
	remove string
}

func update(sb *sandboxv1alpha1.Sandbox) change { return change{sb: sb} }
func remove(name string) change                 { return change{remove: name} }

// brokenWatch is what a watch request gets before the watch works: an error, or a watch that
// ends at once, or one whose only event is an error.
type brokenWatch struct {
	err   error
	event *watch.Event
}

func TestWait(t *testing.T) {
	pending := func(name, rv string) *sandboxv1alpha1.Sandbox {
		return sandbox(name, types.UID("uid-"+name), rv, sandboxv1alpha1.PhasePending)
	}
	running := func(name, rv string) *sandboxv1alpha1.Sandbox {
		return sandbox(name, types.UID("uid-"+name), rv, sandboxv1alpha1.PhaseRunning)
	}
	// waiting is a pending sandbox whose Ready condition says why, as the controller reports a
	// pooled sandbox that has no pod yet.
	waiting := func(name, rv, reason, message string) *sandboxv1alpha1.Sandbox {
		sb := pending(name, rv)
		sb.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: reason, Message: message}}
		return sb
	}
	expiredRV := watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version: 10 (12)").ErrStatus}

	tests := []struct {
		name string
		args []string
		// stored are the sandboxes at the start.
		stored []*sandboxv1alpha1.Sandbox
		// broken are what the first watches get; the ones after them work.
		broken []brokenWatch
		// changes happen once the first working watch has started.
		changes []change
		wantOut string
		wantErr string
		// wantWatch says whether the wait lists and watches; it always does so with the field
		// selector of the one sandbox waited for.
		wantWatch bool
	}{
		{
			name:    "already running",
			args:    []string{"sb"},
			stored:  []*sandboxv1alpha1.Sandbox{running("sb", "10")},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name:      "becomes running",
			args:      []string{"sb"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			changes:   []change{update(pending("sb", "11")), update(running("sb", "12"))},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:      "phase in any case",
			args:      []string{"sb", "--for=rUNNING"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			changes:   []change{update(running("sb", "12"))},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			// The fake clientset ignores field selectors, as a server might.
			name:      "events of other sandboxes are ignored",
			args:      []string{"sb"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10"), pending("other", "10")},
			changes:   []change{update(failed("other", "11")), remove("other"), update(running("sb", "13"))},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:      "fails at once when the sandbox fails",
			args:      []string{"sb", "--timeout=1h"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			changes:   []change{update(failed("sb", "11"))},
			wantErr:   "error: sandbox \"sb\" failed: ImagePullFailed: image \"nope\" not found\n",
			wantWatch: true,
		},
		{
			name:    "already failed",
			args:    []string{"sb", "--timeout=1h"},
			stored:  []*sandboxv1alpha1.Sandbox{failed("sb", "10")},
			wantErr: "error: sandbox \"sb\" failed: ImagePullFailed: image \"nope\" not found\n",
		},
		{
			name:    "waits for failed",
			args:    []string{"sb", "--for", "Failed"},
			stored:  []*sandboxv1alpha1.Sandbox{failed("sb", "10")},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name:      "expires while waiting for running",
			args:      []string{"sb", "--timeout=1h"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			changes:   []change{update(sandbox("sb", "uid-sb", "11", sandboxv1alpha1.PhaseExpired))},
			wantErr:   "error: sandbox \"sb\" expired\n",
			wantWatch: true,
		},
		{
			name:      "being deleted while waiting for running",
			args:      []string{"sb", "--timeout=1h"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			changes:   []change{update(sandbox("sb", "uid-sb", "11", sandboxv1alpha1.PhaseTerminating))},
			wantErr:   "error: sandbox \"sb\" is being deleted\n",
			wantWatch: true,
		},
		{
			name:      "deleted while waiting for running",
			args:      []string{"sb", "--timeout=1h"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			changes:   []change{remove("sb")},
			wantErr:   "error: sandbox \"sb\" was deleted while waiting for phase Running\n",
			wantWatch: true,
		},
		{
			name:      "times out",
			args:      []string{"sb", "--timeout=200ms"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			wantErr:   "error: timed out waiting for the condition on sandboxes/sb\n",
			wantWatch: true,
		},
		{
			name:      "times out with the reason of the sandbox last seen",
			args:      []string{"sb", "--timeout=300ms"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			changes:   []change{update(waiting("sb", "11", "PoolExhausted", `no idle pod in pool "python"`))},
			wantErr:   "error: timed out waiting for the condition on sandboxes/sb: PoolExhausted: no idle pod in pool \"python\"\n",
			wantWatch: true,
		},
		{
			name:      "times out on a sandbox whose pool does not exist",
			args:      []string{"sb", "--timeout=200ms"},
			stored:    []*sandboxv1alpha1.Sandbox{waiting("sb", "10", "PoolNotFound", `pool "nope" not found`)},
			wantErr:   "error: timed out waiting for the condition on sandboxes/sb: PoolNotFound: pool \"nope\" not found\n",
			wantWatch: true,
		},
		{
			name:    "zero timeout says why",
			args:    []string{"sb", "--timeout=0"},
			stored:  []*sandboxv1alpha1.Sandbox{waiting("sb", "10", "PoolExhausted", `no idle pod in pool "python"`)},
			wantErr: "error: condition not met for sandboxes/sb: PoolExhausted: no idle pod in pool \"python\"\n",
		},
		{
			name:      "delete times out without a reason",
			args:      []string{"sb", "--for=delete", "--timeout=200ms"},
			stored:    []*sandboxv1alpha1.Sandbox{waiting("sb", "10", "PoolExhausted", "x")},
			wantErr:   "error: timed out waiting for the condition on sandboxes/sb\n",
			wantWatch: true,
		},
		{
			name:    "zero timeout checks once",
			args:    []string{"sb", "--timeout=0"},
			stored:  []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			wantErr: "error: condition not met for sandboxes/sb\n",
		},
		{
			name:      "a watch that ends at once is watched again",
			args:      []string{"sb"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			broken:    []brokenWatch{{}},
			changes:   []change{update(running("sb", "11"))},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:      "a watch the server refuses is tried again",
			args:      []string{"sb"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			broken:    []brokenWatch{{err: apierrors.NewServiceUnavailable("the server is restarting")}},
			changes:   []change{update(running("sb", "11"))},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:      "a resourceVersion too old to watch from is listed again",
			args:      []string{"sb"},
			stored:    []*sandboxv1alpha1.Sandbox{pending("sb", "10")},
			broken:    []brokenWatch{{event: &expiredRV}},
			changes:   []change{update(running("sb", "21"))},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:      "several sandboxes in turn",
			args:      []string{"a", "b", "a"},
			stored:    []*sandboxv1alpha1.Sandbox{running("a", "10"), pending("b", "11")},
			changes:   []change{update(running("b", "12"))},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/a condition met\nsandbox.sandbox.kube-sandbox.io/b condition met\n",
			wantWatch: true,
		},
		{
			name:    "output name",
			args:    []string{"sb", "-o", "name"},
			stored:  []*sandboxv1alpha1.Sandbox{running("sb", "10")},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb\n",
		},
		{
			name:    "missing sandbox",
			args:    []string{"nope"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n",
		},
		{
			name:      "delete",
			args:      []string{"sb", "--for=delete"},
			stored:    []*sandboxv1alpha1.Sandbox{running("sb", "10")},
			changes:   []change{update(sandbox("sb", "uid-sb", "11", sandboxv1alpha1.PhaseTerminating)), remove("sb")},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:    "delete of a sandbox already gone",
			args:    []string{"nope", "--for=Delete"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/nope condition met\n",
		},
		{
			name:      "delete ends when a new sandbox takes the name",
			args:      []string{"sb", "--for=delete"},
			stored:    []*sandboxv1alpha1.Sandbox{running("sb", "10")},
			changes:   []change{update(sandbox("sb", "uid-new", "12", sandboxv1alpha1.PhasePending))},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:      "delete times out",
			args:      []string{"sb", "--for=delete", "--timeout=200ms"},
			stored:    []*sandboxv1alpha1.Sandbox{running("sb", "10")},
			wantErr:   "error: timed out waiting for the condition on sandboxes/sb\n",
			wantWatch: true,
		},
		{
			name:      "delete across a broken watch",
			args:      []string{"sb", "--for=delete"},
			stored:    []*sandboxv1alpha1.Sandbox{running("sb", "10")},
			broken:    []brokenWatch{{}},
			changes:   []change{remove("sb")},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:    "phase it cannot wait for",
			args:    []string{"sb", "--for=Terminating"},
			wantErr: "error: invalid --for \"Terminating\": must be one of Pending, Running, Succeeded, Failed, Expired, TasksComplete, condition=TYPE[=STATUS] or delete\nSee 'wait -h' for help and examples\n",
		},
		{
			name:    "condition syntax of kubectl wait",
			args:    []string{"sb", "--for=condition=Ready"},
			stored:  []*sandboxv1alpha1.Sandbox{withCondition(running("sb", "10"), "Ready", metav1.ConditionTrue, "", "")},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name:      "condition with a status, in any case",
			args:      []string{"sb", "--for=Condition=tasksfailed=false"},
			stored:    []*sandboxv1alpha1.Sandbox{withTask(pending("sb", "10"))},
			changes:   []change{update(withCondition(withTask(running("sb", "11")), "TasksFailed", metav1.ConditionFalse, "NoTaskFailed", ""))},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:    "condition without a type",
			args:    []string{"sb", "--for=condition="},
			wantErr: "error: invalid --for \"condition=\": a condition is condition=TYPE or condition=TYPE=STATUS\nSee 'wait -h' for help and examples\n",
		},
		{
			name:    "condition with an empty status",
			args:    []string{"sb", "--for=condition=Ready="},
			wantErr: "error: invalid --for \"condition=Ready=\": a condition is condition=TYPE or condition=TYPE=STATUS\nSee 'wait -h' for help and examples\n",
		},
		{
			name:   "tasks complete",
			args:   []string{"sb", "--for=TasksComplete"},
			stored: []*sandboxv1alpha1.Sandbox{withTask(running("sb", "10"))},
			changes: []change{
				update(withCondition(withTask(running("sb", "11")), "TasksComplete", metav1.ConditionFalse, "TasksRunning", "2 of 3 tasks running")),
				update(withCondition(withTask(sandbox("sb", "uid-sb", "12", sandboxv1alpha1.PhaseSucceeded)), "TasksComplete", metav1.ConditionTrue, "AllSucceeded", "")),
			},
			wantOut:   "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatch: true,
		},
		{
			name:    "tasks complete in any case, some failed",
			args:    []string{"sb", "--for=taskscomplete"},
			stored:  []*sandboxv1alpha1.Sandbox{withCondition(withTask(failed("sb", "10")), "TasksComplete", metav1.ConditionTrue, "SomeFailed", "")},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name:    "tasks complete of a sandbox that cannot run",
			args:    []string{"sb", "--for=TasksComplete", "--timeout=1h"},
			stored:  []*sandboxv1alpha1.Sandbox{withTask(failed("sb", "10"))},
			wantErr: "error: sandbox \"sb\" failed: ImagePullFailed: image \"nope\" not found\n",
		},
		{
			name:    "tasks complete of a sandbox without a task",
			args:    []string{"sb", "--for=TasksComplete", "--timeout=1h"},
			stored:  []*sandboxv1alpha1.Sandbox{running("sb", "10")},
			wantErr: "error: sandbox \"sb\" runs no task (it has no spec.taskTemplate): its tasks never complete\n",
		},
		{
			name:      "tasks complete times out with the reason",
			args:      []string{"sb", "--for=TasksComplete", "--timeout=200ms"},
			stored:    []*sandboxv1alpha1.Sandbox{withCondition(withTask(running("sb", "10")), "TasksComplete", metav1.ConditionFalse, "TasksRunning", "2 of 3 tasks running")},
			wantErr:   "error: timed out waiting for the condition on sandboxes/sb: TasksRunning: 2 of 3 tasks running\n",
			wantWatch: true,
		},
		{
			name:      "deleted while waiting for tasks",
			args:      []string{"sb", "--for=TasksComplete", "--timeout=1h"},
			stored:    []*sandboxv1alpha1.Sandbox{withTask(running("sb", "10"))},
			changes:   []change{remove("sb")},
			wantErr:   "error: sandbox \"sb\" was deleted while waiting for condition TasksComplete=True\n",
			wantWatch: true,
		},
		{
			name:    "succeeded",
			args:    []string{"sb", "--for=succeeded"},
			stored:  []*sandboxv1alpha1.Sandbox{withTask(sandbox("sb", "uid-sb", "10", sandboxv1alpha1.PhaseSucceeded))},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name:   "succeeded fails at once when a task fails",
			args:   []string{"sb", "--for=Succeeded", "--timeout=1h"},
			stored: []*sandboxv1alpha1.Sandbox{withTask(running("sb", "10"))},
			changes: []change{
				update(withCondition(withTask(sandbox("sb", "uid-sb", "11", sandboxv1alpha1.PhaseFailed)), "TasksFailed", metav1.ConditionTrue, "TaskFailed", "replica 2 exited 1")),
			},
			wantErr:   "error: sandbox \"sb\" failed: TaskFailed: replica 2 exited 1\n",
			wantWatch: true,
		},
		{
			name:    "running fails at once when the tasks have ended",
			args:    []string{"sb", "--timeout=1h"},
			stored:  []*sandboxv1alpha1.Sandbox{withTask(sandbox("sb", "uid-sb", "10", sandboxv1alpha1.PhaseSucceeded))},
			wantErr: "error: sandbox \"sb\" succeeded: its tasks have ended (--for=TasksComplete waits for that)\n",
		},
		{
			name:    "no name",
			args:    nil,
			wantErr: "error: at least one sandbox NAME is required\nSee 'wait -h' for help and examples\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cmdtesting.NewTestFactory(tt.stored...)
			tracker := f.Clientset.Tracker()
			var mu sync.Mutex
			var requests []string
			record := func(verb string, action clienttesting.Action) {
				var fs string
				switch a := action.(type) {
				case clienttesting.ListAction:
					fs = a.GetListRestrictions().Fields.String()
				case clienttesting.WatchAction:
					fs = a.GetWatchRestrictions().Fields.String()
				}
				mu.Lock()
				defer mu.Unlock()
				requests = append(requests, verb+" "+fs)
			}
			f.Clientset.PrependReactor("list", "sandboxes", func(action clienttesting.Action) (bool, runtime.Object, error) {
				record("list", action)
				return false, nil, nil
			})
			var changed sync.WaitGroup
			watches := 0
			f.Clientset.PrependWatchReactor("sandboxes", func(action clienttesting.Action) (bool, watch.Interface, error) {
				record("watch", action)
				mu.Lock()
				i := watches
				watches++
				mu.Unlock()
				if i < len(tt.broken) {
					b := tt.broken[i]
					if b.err != nil {
						return true, nil, b.err
					}
					w := watch.NewRaceFreeFake()
					if b.event != nil {
						w.Action(b.event.Type, b.event.Object)
					}
					w.Stop()
					return true, w, nil
				}
				w, err := tracker.Watch(cmdtesting.SandboxesResource, action.GetNamespace())
				if err != nil || i != len(tt.broken) {
					return true, w, err
				}
				// The controller acts once the wait watches, so that no change falls between
				// its list and its watch.
				changed.Go(func() {
					for _, c := range tt.changes {
						var err error
						if c.sb != nil {
							err = tracker.Update(cmdtesting.SandboxesResource, c.sb.DeepCopy(), cmdtesting.Namespace)
						} else {
							err = tracker.Delete(cmdtesting.SandboxesResource, cmdtesting.Namespace, c.remove)
						}
						if err != nil {
							t.Errorf("change %+v: %v", c, err)
						}
					}
				})
				return true, w, nil
			})

			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			cmd := NewCmdWait(f, streams)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(tt.args)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			err := cmd.ExecuteContext(ctx)
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Errorf("took %s", elapsed)
			}
			changed.Wait()

			var msg bytes.Buffer
			if err != nil {
				cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr {
				t.Errorf("error %q, want %q", msg.String(), tt.wantErr)
			}
			if out.String() != tt.wantOut {
				t.Errorf("output %q, want %q", out.String(), tt.wantOut)
			}
			mu.Lock()
			defer mu.Unlock()
			if tt.wantWatch != (watches > 0) {
				t.Errorf("watched %d times, want a watch: %v", watches, tt.wantWatch)
			}
			for _, r := range requests {
				if !strings.HasPrefix(r, "list metadata.name=") && !strings.HasPrefix(r, "watch metadata.name=") {
					t.Errorf("request %q is not for the one sandbox waited for", r)
				}
			}
		})
	}
}

// TestWaitOverHTTP runs wait against the sandbox server stand-in, to check the requests the
// real client makes: a read, then a watch of the one sandbox (its initial list streamed), and
// a new watch when the server ends one.
func TestWaitOverHTTP(t *testing.T) {
	const getPath = sandboxserver.Prefix + cmdtesting.Namespace + "/sandboxes/sb"
	tests := []struct {
		name string
		// then is what the controller makes of the sandbox once the wait watches; endFirst
		// has the server end the first watch instead, and change the sandbox on the next.
		then     func(sb *sandboxv1alpha1.Sandbox)
		endFirst bool
		wantOut  string
		wantErr  string
		// wantWatches is the least number of watches.
		wantWatches int
	}{
		{
			name:        "watch",
			then:        func(sb *sandboxv1alpha1.Sandbox) { sb.Status.Phase = sandboxv1alpha1.PhaseRunning },
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: 1,
		},
		{
			name:        "failure seen by the watch",
			then:        func(sb *sandboxv1alpha1.Sandbox) { *sb = *failed("sb", "") },
			wantErr:     "error: sandbox \"sb\" failed: ImagePullFailed: image \"nope\" not found\n",
			wantWatches: 1,
		},
		{
			name:        "a watch the server ends is watched again",
			then:        func(sb *sandboxv1alpha1.Sandbox) { sb.Status.Phase = sandboxv1alpha1.PhaseRunning },
			endFirst:    true,
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sandboxserver.New(t, cmdtesting.Namespace)
			srv.Add(&sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb"}, Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhasePending}})
			var started atomic.Int32
			srv.WatchStarted = func() {
				switch n := started.Add(1); {
				case n == 1 && tt.endFirst:
					srv.EndWatches()
				case n == 1 || (n == 2 && tt.endFirst):
					srv.Modify("sb", tt.then)
				}
			}
			f := cmdtesting.NewServerFactory(srv.URL)
			f.RESTConfig.BearerToken = sandboxserver.UserToken
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			cmd := NewCmdWait(f, streams)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs([]string{"sb", "--timeout=5s"})
			err := cmd.ExecuteContext(context.Background())

			var msg bytes.Buffer
			if err != nil {
				cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr {
				t.Errorf("error %q, want %q", msg.String(), tt.wantErr)
			}
			if out.String() != tt.wantOut {
				t.Errorf("output %q, want %q", out.String(), tt.wantOut)
			}
			requests := srv.Requests()
			if len(requests) == 0 || requests[0].Method != http.MethodGet || requests[0].Path != getPath {
				t.Fatalf("requests %v, want a GET of %s first", requests, getPath)
			}
			watches := 0
			for _, r := range requests[1:] {
				q, _ := url.ParseQuery(r.RawQuery)
				if q.Get("fieldSelector") != "metadata.name=sb" {
					t.Errorf("%s %s?%s is not for the one sandbox", r.Method, r.Path, r.RawQuery)
				}
				if q.Get("watch") == "true" {
					watches++
				}
			}
			if watches < tt.wantWatches {
				t.Errorf("%d watches, want at least %d", watches, tt.wantWatches)
			}
		})
	}
}

// TestWaitForTasksComplete waits for the tasks of a sandbox against the sandbox server
// stand-in: the wait watches, and ends when the controller (here, the test) reports the tasks
// complete.
func TestWaitForTasksComplete(t *testing.T) {
	srv := sandboxserver.New(t, cmdtesting.Namespace)
	srv.Add(withTask(&sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "eval"},
		Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning, TaskRunning: 2, Conditions: []metav1.Condition{
			{Type: "TasksComplete", Status: metav1.ConditionFalse, Reason: "TasksRunning"},
		}},
	}))
	srv.WatchStarted = func() {
		srv.Modify("eval", func(sb *sandboxv1alpha1.Sandbox) {
			sb.Status.Phase, sb.Status.TaskRunning, sb.Status.TaskSucceeded = sandboxv1alpha1.PhaseSucceeded, 0, 2
			sb.Status.Conditions = []metav1.Condition{{Type: "TasksComplete", Status: metav1.ConditionTrue, Reason: "AllSucceeded"}}
		})
	}
	f := cmdtesting.NewServerFactory(srv.URL)
	f.RESTConfig.BearerToken = sandboxserver.UserToken
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	cmd := NewCmdWait(f, streams)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetArgs([]string{"eval", "--for=TasksComplete", "--timeout=10s"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		var msg bytes.Buffer
		cmdutil.PrintError(&msg, err)
		t.Fatal(msg.String())
	}
	if out.String() != "sandbox.sandbox.kube-sandbox.io/eval condition met\n" {
		t.Errorf("output %q", out.String())
	}
	var watched bool
	for _, r := range srv.Requests() {
		watched = watched || strings.Contains(r.RawQuery, "watch=true")
	}
	if !watched {
		t.Error("the wait did not watch")
	}
}
