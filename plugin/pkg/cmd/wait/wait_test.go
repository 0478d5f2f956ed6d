package wait

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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

// fakeWatch is what one watch request gets: an error, or events and then, if closed, the end.
type fakeWatch struct {
	err    error
	events []watch.Event
	closed bool
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
	modified := func(sb *sandboxv1alpha1.Sandbox) watch.Event { return watch.Event{Type: watch.Modified, Object: sb} }
	expiredRV := watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version: 10 (12)").ErrStatus}

	tests := []struct {
		name string
		args []string
		// gets are the replies to the GETs of each sandbox, in turn (nil: not found); the last
		// one repeats.
		gets map[string][]*sandboxv1alpha1.Sandbox
		// watches are the replies to the watches, in turn; after them a watch sees nothing.
		watches []fakeWatch
		wantOut string
		wantErr string
		// wantWatches are the field selectors of the watches and the resourceVersions they
		// started from.
		wantWatches []string
	}{
		{
			name:    "already running",
			args:    []string{"sb"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {running("sb", "10")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name: "becomes running",
			args: []string{"sb"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10")}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(pending("sb", "11")),
				modified(running("sb", "12")),
			}}},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name: "phase in any case",
			args: []string{"sb", "--for=rUNNING"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10")}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(running("sb", "12")),
			}}},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name: "events of other sandboxes are ignored",
			args: []string{"sb"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10")}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(failed("other", "11")),
				{Type: watch.Deleted, Object: running("other", "12")},
				modified(running("sb", "13")),
			}}},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name: "fails at once when the sandbox fails",
			args: []string{"sb", "--timeout=1h"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10")}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(failed("sb", "11")),
			}}},
			wantErr:     "error: sandbox \"sb\" failed: ImagePullFailed: image \"nope\" not found\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:    "already failed",
			args:    []string{"sb", "--timeout=1h"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {failed("sb", "10")}},
			wantErr: "error: sandbox \"sb\" failed: ImagePullFailed: image \"nope\" not found\n",
		},
		{
			name:    "waits for failed",
			args:    []string{"sb", "--for", "Failed"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {failed("sb", "10")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name: "expires while waiting for running",
			args: []string{"sb", "--timeout=1h"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10")}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(sandbox("sb", "uid-sb", "11", sandboxv1alpha1.PhaseExpired)),
			}}},
			wantErr:     "error: sandbox \"sb\" expired\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name: "deleted while waiting for running",
			args: []string{"sb", "--timeout=1h"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10")}},
			watches: []fakeWatch{{events: []watch.Event{
				{Type: watch.Deleted, Object: pending("sb", "11")},
			}}},
			wantErr:     "error: sandbox \"sb\" was deleted while waiting for phase Running\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:        "times out",
			args:        []string{"sb", "--timeout=200ms"},
			gets:        map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10")}},
			wantErr:     "error: timed out waiting for the condition on sandboxes/sb\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name: "times out with the reason of the sandbox last seen",
			args: []string{"sb", "--timeout=200ms"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10")}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(waiting("sb", "11", "PoolExhausted", `no idle pod in pool "python"`)),
			}}},
			wantErr:     "error: timed out waiting for the condition on sandboxes/sb: PoolExhausted: no idle pod in pool \"python\"\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:        "times out on a sandbox whose pool does not exist",
			args:        []string{"sb", "--timeout=200ms"},
			gets:        map[string][]*sandboxv1alpha1.Sandbox{"sb": {waiting("sb", "10", "PoolNotFound", `pool "nope" not found`)}},
			wantErr:     "error: timed out waiting for the condition on sandboxes/sb: PoolNotFound: pool \"nope\" not found\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:    "zero timeout says why",
			args:    []string{"sb", "--timeout=0"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {waiting("sb", "10", "PoolExhausted", `no idle pod in pool "python"`)}},
			wantErr: "error: condition not met for sandboxes/sb: PoolExhausted: no idle pod in pool \"python\"\n",
		},
		{
			name: "times out while polling, with the reason",
			args: []string{"sb", "--timeout=300ms"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10"), waiting("sb", "11", "PoolExhausted", "pool at poolMax")}},
			watches: []fakeWatch{
				{err: apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes"), "watch")},
			},
			wantErr:     "error: timed out waiting for the condition on sandboxes/sb: PoolExhausted: pool at poolMax\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:        "delete times out without a reason",
			args:        []string{"sb", "--for=delete", "--timeout=200ms"},
			gets:        map[string][]*sandboxv1alpha1.Sandbox{"sb": {waiting("sb", "10", "PoolExhausted", "x")}},
			wantErr:     "error: timed out waiting for the condition on sandboxes/sb\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:    "zero timeout checks once",
			args:    []string{"sb", "--timeout=0"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10")}},
			wantErr: "error: condition not met for sandboxes/sb\n",
		},
		{
			name: "polls when the server cannot watch",
			args: []string{"sb"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10"), pending("sb", "10"), running("sb", "11")}},
			watches: []fakeWatch{
				{err: apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes"), "watch")},
			},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name: "polls when the watch ends at once",
			args: []string{"sb"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10"), running("sb", "11")}},
			watches: []fakeWatch{
				{closed: true},
			},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name: "reads again when the watch ends",
			args: []string{"sb"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10"), pending("sb", "12")}},
			watches: []fakeWatch{
				{events: []watch.Event{modified(pending("sb", "11"))}, closed: true},
				{events: []watch.Event{modified(running("sb", "13"))}},
			},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10", "metadata.name=sb from 12"},
		},
		{
			name: "reads again when the resourceVersion is too old",
			args: []string{"sb"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {pending("sb", "10"), pending("sb", "20")}},
			watches: []fakeWatch{
				{events: []watch.Event{expiredRV}},
				{events: []watch.Event{modified(running("sb", "21"))}},
			},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10", "metadata.name=sb from 20"},
		},
		{
			name: "several sandboxes in turn",
			args: []string{"a", "b", "a"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"a": {running("a", "10")}, "b": {pending("b", "11")}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(running("b", "12")),
			}}},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/a condition met\nsandbox.sandbox.kube-sandbox.io/b condition met\n",
			wantWatches: []string{"metadata.name=b from 11"},
		},
		{
			name:    "output name",
			args:    []string{"sb", "-o", "name"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {running("sb", "10")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb\n",
		},
		{
			name:    "missing sandbox",
			args:    []string{"nope"},
			wantErr: "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n",
		},
		{
			name: "delete",
			args: []string{"sb", "--for=delete"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {running("sb", "10")}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(sandbox("sb", "uid-sb", "11", sandboxv1alpha1.PhaseTerminating)),
				{Type: watch.Deleted, Object: sandbox("sb", "uid-sb", "12", sandboxv1alpha1.PhaseTerminating)},
			}}},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:    "delete of a sandbox already gone",
			args:    []string{"nope", "--for=Delete"},
			wantOut: "sandbox.sandbox.kube-sandbox.io/nope condition met\n",
		},
		{
			name: "delete ends when a new sandbox takes the name",
			args: []string{"sb", "--for=delete"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {running("sb", "10")}},
			watches: []fakeWatch{{events: []watch.Event{
				{Type: watch.Added, Object: sandbox("sb", "uid-new", "12", sandboxv1alpha1.PhasePending)},
			}}},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:        "delete times out",
			args:        []string{"sb", "--for=delete", "--timeout=200ms"},
			gets:        map[string][]*sandboxv1alpha1.Sandbox{"sb": {running("sb", "10")}},
			wantErr:     "error: timed out waiting for the condition on sandboxes/sb\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name: "delete while polling",
			args: []string{"sb", "--for=delete"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {running("sb", "10"), running("sb", "10"), nil}},
			watches: []fakeWatch{
				{err: apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes"), "watch")},
			},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:    "phase it cannot wait for",
			args:    []string{"sb", "--for=Terminating"},
			wantErr: "error: invalid --for \"Terminating\": must be one of Pending, Running, Succeeded, Failed, Expired, TasksComplete, condition=TYPE[=STATUS] or delete\nSee 'wait -h' for help and examples\n",
		},
		{
			name:    "condition syntax of kubectl wait",
			args:    []string{"sb", "--for=condition=Ready"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {withCondition(running("sb", "10"), "Ready", metav1.ConditionTrue, "", "")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name: "condition with a status, in any case",
			args: []string{"sb", "--for=Condition=tasksfailed=false"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {withTask(pending("sb", "10"))}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(withCondition(withTask(running("sb", "11")), "TasksFailed", metav1.ConditionFalse, "NoTaskFailed", "")),
			}}},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
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
			name: "tasks complete",
			args: []string{"sb", "--for=TasksComplete"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {withTask(running("sb", "10"))}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(withCondition(withTask(running("sb", "11")), "TasksComplete", metav1.ConditionFalse, "TasksRunning", "2 of 3 tasks running")),
				modified(withCondition(withTask(sandbox("sb", "uid-sb", "12", sandboxv1alpha1.PhaseSucceeded)), "TasksComplete", metav1.ConditionTrue, "AllSucceeded", "")),
			}}},
			wantOut:     "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:    "tasks complete in any case, some failed",
			args:    []string{"sb", "--for=taskscomplete"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {withCondition(withTask(failed("sb", "10")), "TasksComplete", metav1.ConditionTrue, "SomeFailed", "")}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name:    "tasks complete of a sandbox that cannot run",
			args:    []string{"sb", "--for=TasksComplete", "--timeout=1h"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {withTask(failed("sb", "10"))}},
			wantErr: "error: sandbox \"sb\" failed: ImagePullFailed: image \"nope\" not found\n",
		},
		{
			name:    "tasks complete of a sandbox without a task",
			args:    []string{"sb", "--for=TasksComplete", "--timeout=1h"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {running("sb", "10")}},
			wantErr: "error: sandbox \"sb\" runs no task (it has no spec.taskTemplate): its tasks never complete\n",
		},
		{
			name:        "tasks complete times out with the reason",
			args:        []string{"sb", "--for=TasksComplete", "--timeout=200ms"},
			gets:        map[string][]*sandboxv1alpha1.Sandbox{"sb": {withCondition(withTask(running("sb", "10")), "TasksComplete", metav1.ConditionFalse, "TasksRunning", "2 of 3 tasks running")}},
			wantErr:     "error: timed out waiting for the condition on sandboxes/sb: TasksRunning: 2 of 3 tasks running\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name: "deleted while waiting for tasks",
			args: []string{"sb", "--for=TasksComplete", "--timeout=1h"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {withTask(running("sb", "10"))}},
			watches: []fakeWatch{{events: []watch.Event{
				{Type: watch.Deleted, Object: withTask(running("sb", "11"))},
			}}},
			wantErr:     "error: sandbox \"sb\" was deleted while waiting for condition TasksComplete=True\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:    "succeeded",
			args:    []string{"sb", "--for=succeeded"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {withTask(sandbox("sb", "uid-sb", "10", sandboxv1alpha1.PhaseSucceeded))}},
			wantOut: "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
		},
		{
			name: "succeeded fails at once when a task fails",
			args: []string{"sb", "--for=Succeeded", "--timeout=1h"},
			gets: map[string][]*sandboxv1alpha1.Sandbox{"sb": {withTask(running("sb", "10"))}},
			watches: []fakeWatch{{events: []watch.Event{
				modified(withCondition(withTask(sandbox("sb", "uid-sb", "11", sandboxv1alpha1.PhaseFailed)), "TasksFailed", metav1.ConditionTrue, "TaskFailed", "replica 2 exited 1")),
			}}},
			wantErr:     "error: sandbox \"sb\" failed: TaskFailed: replica 2 exited 1\n",
			wantWatches: []string{"metadata.name=sb from 10"},
		},
		{
			name:    "running fails at once when the tasks have ended",
			args:    []string{"sb", "--timeout=1h"},
			gets:    map[string][]*sandboxv1alpha1.Sandbox{"sb": {withTask(sandbox("sb", "uid-sb", "10", sandboxv1alpha1.PhaseSucceeded))}},
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
			f := cmdtesting.NewTestFactory()
			gets := map[string]int{}
			f.Clientset.PrependReactor("get", "sandboxes", func(action clienttesting.Action) (bool, runtime.Object, error) {
				name := action.(clienttesting.GetAction).GetName()
				replies := tt.gets[name]
				i := min(gets[name], len(replies)-1)
				gets[name]++
				if i < 0 || replies[i] == nil {
					return true, nil, apierrors.NewNotFound(sandboxv1alpha1.Resource("sandboxes"), name)
				}
				return true, replies[i].DeepCopy(), nil
			})
			var watches []string
			f.Clientset.PrependWatchReactor("sandboxes", func(action clienttesting.Action) (bool, watch.Interface, error) {
				restrictions := action.(clienttesting.WatchAction).GetWatchRestrictions()
				i := len(watches)
				watches = append(watches, restrictions.Fields.String()+" from "+restrictions.ResourceVersion)
				w := watch.NewRaceFreeFake()
				if i >= len(tt.watches) {
					return true, w, nil
				}
				if tt.watches[i].err != nil {
					return true, nil, tt.watches[i].err
				}
				for _, e := range tt.watches[i].events {
					w.Action(e.Type, e.Object.DeepCopyObject())
				}
				if tt.watches[i].closed {
					w.Stop()
				}
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
			if diff := cmp.Diff(tt.wantWatches, watches); diff != "" {
				t.Errorf("watches (-want +got):\n%s", diff)
			}
		})
	}
}

// watchServer serves one sandbox. The first GET replies with first. A watch, if allowed,
// streams then as events and stays open until the client leaves; if denied, the GETs of the
// polling that follows reply with then, one each, the last repeating.
type watchServer struct {
	first       *sandboxv1alpha1.Sandbox
	then        []*sandboxv1alpha1.Sandbox
	watchDenied bool

	mu       sync.Mutex
	requests []string
}

func (s *watchServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, req.Method+" "+req.URL.Path+"?"+req.URL.RawQuery)
	served := len(s.requests)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	encode := func(sb *sandboxv1alpha1.Sandbox) *sandboxv1alpha1.Sandbox {
		sb = sb.DeepCopy()
		sb.APIVersion, sb.Kind = "sandbox.kube-sandbox.io/v1alpha1", "Sandbox"
		return sb
	}
	if req.URL.Query().Get("watch") != "true" {
		sb := s.first
		if served > 2 && len(s.then) > 0 {
			// Polling, after the first GET and the denied watch.
			sb = s.then[min(served-3, len(s.then)-1)]
		}
		_ = json.NewEncoder(w).Encode(encode(sb))
		return
	}
	if s.watchDenied {
		status := apierrors.NewMethodNotSupported(sandboxv1alpha1.Resource("sandboxes"), "watch").Status()
		status.APIVersion, status.Kind = "v1", "Status"
		w.WriteHeader(http.StatusMethodNotAllowed)
		_ = json.NewEncoder(w).Encode(status)
		return
	}
	enc := json.NewEncoder(w)
	for _, sb := range s.then {
		_ = enc.Encode(metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Object: encode(sb)}})
	}
	w.(http.Flusher).Flush()
	<-req.Context().Done()
}

// TestWaitOverHTTP runs wait against an HTTP server, to check the watch request the real
// client makes and its fallback to polling.
func TestWaitOverHTTP(t *testing.T) {
	const (
		getPath   = "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes/sb?"
		watchPath = "GET /apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/test/sandboxes?fieldSelector=metadata.name%3Dsb&resourceVersion=10&watch=true"
	)
	pending := sandbox("sb", "uid-sb", "10", sandboxv1alpha1.PhasePending)
	running := sandbox("sb", "uid-sb", "11", sandboxv1alpha1.PhaseRunning)
	tests := []struct {
		name         string
		server       *watchServer
		wantOut      string
		wantErr      string
		wantRequests []string
	}{
		{
			name:         "watch",
			server:       &watchServer{first: pending, then: []*sandboxv1alpha1.Sandbox{pending, running}},
			wantOut:      "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantRequests: []string{getPath, watchPath},
		},
		{
			name:         "failure seen by the watch",
			server:       &watchServer{first: pending, then: []*sandboxv1alpha1.Sandbox{failed("sb", "11")}},
			wantErr:      "error: sandbox \"sb\" failed: ImagePullFailed: image \"nope\" not found\n",
			wantRequests: []string{getPath, watchPath},
		},
		{
			name:         "polling where the server cannot watch",
			server:       &watchServer{first: pending, then: []*sandboxv1alpha1.Sandbox{pending, running}, watchDenied: true},
			wantOut:      "sandbox.sandbox.kube-sandbox.io/sb condition met\n",
			wantRequests: []string{getPath, watchPath, getPath, getPath},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.server)
			defer srv.Close()
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			cmd := NewCmdWait(cmdtesting.NewServerFactory(srv.URL), streams)
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
			tt.server.mu.Lock()
			defer tt.server.mu.Unlock()
			if diff := cmp.Diff(tt.wantRequests, tt.server.requests); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
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
