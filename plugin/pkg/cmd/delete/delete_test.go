package delete

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clienttesting "k8s.io/client-go/testing"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

func sb(name string, uid types.UID) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cmdtesting.Namespace, UID: uid}}
}

// How the fake server deletes: at once, once the wait watches (as a controller releasing pods),
// never, or by letting a new sandbox of the same name take the old one's place.
const (
	deleteAtOnce = iota
	deleteLater
	deleteNever
	deleteReplaced
)

func TestDelete(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		behavior int
		wantOut  string
		wantErr  string
		// wantGone lists the sandboxes that must be gone, wantKept those that must remain.
		wantGone []string
		wantKept []string
		// wantGets is the number of GETs: one before each delete.
		wantGets int
		// wantWatch says that the wait must watch: its list shows a sandbox still there.
		wantWatch bool
	}{
		{
			name:     "delete and wait",
			args:     []string{"a"},
			wantOut:  "sandbox.sandbox.kube-sandbox.io \"a\" deleted from test namespace\n",
			wantGone: []string{"a"},
			wantKept: []string{"b"},
			wantGets: 1,
		},
		{
			name:      "waits until the server has removed it",
			args:      []string{"a"},
			behavior:  deleteLater,
			wantOut:   "sandbox.sandbox.kube-sandbox.io \"a\" deleted from test namespace\n",
			wantGone:  []string{"a"},
			wantGets:  1,
			wantWatch: true,
		},
		{
			name:     "no wait",
			args:     []string{"a", "--wait=false"},
			behavior: deleteNever,
			wantOut:  "sandbox.sandbox.kube-sandbox.io \"a\" deleted from test namespace\n",
			wantKept: []string{"a"},
			wantGets: 1,
		},
		{
			name:      "times out",
			args:      []string{"a", "--timeout=300ms"},
			behavior:  deleteNever,
			wantOut:   "sandbox.sandbox.kube-sandbox.io \"a\" deleted from test namespace\n",
			wantErr:   "error: timed out after 300ms waiting for the deletion of sandbox.sandbox.kube-sandbox.io [\"a\"]\n",
			wantKept:  []string{"a"},
			wantGets:  1,
			wantWatch: true,
		},
		{
			name:      "times out naming only the sandboxes still there",
			args:      []string{"b", "a", "--timeout=300ms"},
			behavior:  deleteNever,
			wantOut:   "sandbox.sandbox.kube-sandbox.io \"b\" deleted from test namespace\nsandbox.sandbox.kube-sandbox.io \"a\" deleted from test namespace\n",
			wantErr:   "error: timed out after 300ms waiting for the deletion of sandbox.sandbox.kube-sandbox.io [\"a\"]\n",
			wantGone:  []string{"b"},
			wantKept:  []string{"a"},
			wantGets:  2,
			wantWatch: true,
		},
		{
			name:     "a new sandbox of the same name ends the wait",
			args:     []string{"a"},
			behavior: deleteReplaced,
			wantOut:  "sandbox.sandbox.kube-sandbox.io \"a\" deleted from test namespace\n",
			wantKept: []string{"a"},
			wantGets: 1,
		},
		{
			name:     "not found",
			args:     []string{"nope"},
			wantErr:  "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n",
			wantGets: 1,
		},
		{
			name:     "a missing sandbox does not stop the others",
			args:     []string{"nope", "a", "b"},
			wantOut:  "sandbox.sandbox.kube-sandbox.io \"a\" deleted from test namespace\nsandbox.sandbox.kube-sandbox.io \"b\" deleted from test namespace\n",
			wantErr:  "Error from server (NotFound): sandboxes.sandbox.kube-sandbox.io \"nope\" not found\n",
			wantGone: []string{"a", "b"},
			wantGets: 3,
		},
		{
			name:     "ignore not found",
			args:     []string{"nope", "a", "--ignore-not-found"},
			wantOut:  "sandbox.sandbox.kube-sandbox.io \"a\" deleted from test namespace\n",
			wantGone: []string{"a"},
			wantGets: 2,
		},
		{
			name:    "no name",
			args:    nil,
			wantErr: "error: at least one sandbox NAME is required\nSee 'delete -h' for help and examples\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := cmdtesting.NewTestFactory(sb("a", "uid-a"), sb("b", "uid-b"))
			tracker := f.Clientset.Tracker()
			var mu sync.Mutex
			gets, watches := 0, 0
			var removedLater atomic.Bool
			f.Clientset.PrependReactor("get", "sandboxes", func(clienttesting.Action) (bool, runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				gets++
				return false, nil, nil
			})
			f.Clientset.PrependReactor("delete", "sandboxes", func(action clienttesting.Action) (bool, runtime.Object, error) {
				name := action.(clienttesting.DeleteAction).GetName()
				if name != "a" {
					return false, nil, nil
				}
				switch tt.behavior {
				case deleteLater, deleteNever:
					// A finalizer holds it.
					return true, nil, nil
				case deleteReplaced:
					if err := tracker.Update(cmdtesting.SandboxesResource, sb("a", "uid-a2"), cmdtesting.Namespace); err != nil {
						t.Errorf("replace a: %v", err)
					}
					return true, nil, nil
				}
				return false, nil, nil
			})
			var removal sync.WaitGroup
			f.Clientset.PrependWatchReactor("sandboxes", func(action clienttesting.Action) (bool, watch.Interface, error) {
				w, err := tracker.Watch(cmdtesting.SandboxesResource, action.GetNamespace())
				mu.Lock()
				defer mu.Unlock()
				watches++
				if err == nil && tt.behavior == deleteLater && watches == 1 {
					// The controller releases the pods a while after the delete.
					removal.Go(func() {
						time.Sleep(100 * time.Millisecond)
						removedLater.Store(true)
						if err := tracker.Delete(cmdtesting.SandboxesResource, cmdtesting.Namespace, "a"); err != nil {
							t.Errorf("remove a: %v", err)
						}
					})
				}
				return true, w, err
			})

			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			cmd := NewCmdDelete(f, streams)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			cmd.SetArgs(tt.args)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := cmd.ExecuteContext(ctx)
			if tt.behavior == deleteLater && !removedLater.Load() {
				t.Error("returned before the sandbox was removed")
			}
			removal.Wait()

			var msg bytes.Buffer
			if err != nil {
				cmdutil.PrintError(&msg, err)
			}
			if msg.String() != tt.wantErr {
				t.Errorf("error %q, want %q", msg.String(), tt.wantErr)
			}
			if got := out.String(); got != tt.wantOut {
				t.Errorf("output %q, want %q", got, tt.wantOut)
			}
			for _, name := range tt.wantGone {
				if _, err := tracker.Get(cmdtesting.SandboxesResource, cmdtesting.Namespace, name); err == nil {
					t.Errorf("sandbox %s still exists", name)
				}
			}
			for _, name := range tt.wantKept {
				if _, err := tracker.Get(cmdtesting.SandboxesResource, cmdtesting.Namespace, name); err != nil {
					t.Errorf("sandbox %s is gone: %v", name, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if gets != tt.wantGets {
				t.Errorf("%d GETs, want %d", gets, tt.wantGets)
			}
			if tt.wantWatch && watches == 0 {
				t.Error("the wait did not watch")
			}
		})
	}
}
