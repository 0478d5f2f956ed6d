package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// Lists and watches of sandboxes are served from sandbox-apiserver's own cache of
// BatchSandboxes; these tests hold it to the semantics of the kube-apiserver's.

// TestSandboxWatchFromListResourceVersion: a watch from a list's resourceVersion gets what
// happens after the list, and nothing before it.
func TestSandboxWatchFromListResourceVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := newNamespace(t)
	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)
	if _, err := api.Create(ctx, sandbox("before"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if names := itemNames(list.Items); !slices.Equal(names, []string{"before"}) {
		t.Fatalf("list = %v, want [before]", names)
	}
	w, err := api.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch from %s: %v", list.ResourceVersion, err)
	}
	defer w.Stop()
	created, err := api.Create(ctx, sandbox("after"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The controller's status writes of "before" may come first; "after" must come ADDED,
	// and nothing may be the ADDED of "before" again.
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			s, isSandbox := ev.Object.(*sandboxv1alpha1.Sandbox)
			if !isSandbox {
				t.Fatalf("event %s %#v, want a Sandbox", ev.Type, ev.Object)
			}
			if ev.Type == watch.Added && s.Name == "before" {
				t.Fatalf("ADDED before at %s: it was in the list at %s", s.ResourceVersion, list.ResourceVersion)
			}
			if s.Name != "after" {
				continue
			}
			if ev.Type != watch.Added || s.UID != created.UID {
				t.Fatalf("first event of after: %s %s, want ADDED %s", ev.Type, s.UID, created.UID)
			}
			return
		case <-ctx.Done():
			t.Fatal("no event for the sandbox created after the list")
		}
	}
}

// TestSandboxListReadsYourWrites: a list right after a write through the API shows it, every
// time: kubectl creates, then lists, often within a millisecond.
func TestSandboxListReadsYourWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ns := newNamespace(t)
	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)
	for i := range 50 {
		name := fmt.Sprintf("ryw-%02d", i)
		if _, err := api.Create(ctx, sandbox(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// As kubectl get lists: in chunks of 500, without a resourceVersion.
		list, err := api.List(ctx, metav1.ListOptions{Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(itemNames(list.Items), name) {
			t.Fatalf("round %d: the list right after creating %s lacks it: %v", i, name, itemNames(list.Items))
		}
		if list.Continue != "" {
			t.Errorf("round %d: continue token %q for %d sandboxes", i, list.Continue, len(list.Items))
		}
	}

	// A delete too: the sandbox is gone or terminating in the next list (the controller's
	// finalizer holds it until its pods are gone).
	if err := api.Delete(ctx, "ryw-00", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if s.Name == "ryw-00" && s.DeletionTimestamp == nil {
			t.Errorf("the list right after deleting ryw-00 shows it not terminating: phase %s", s.Status.Phase)
		}
	}
}

// TestSandboxWatchTooOldResourceVersion: a watch from a resourceVersion the cache no longer
// reaches back to gets 410 Gone, as its only event, which makes clients relist.
func TestSandboxWatchTooOldResourceVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := newNamespace(t)
	// 1 is before any BatchSandbox this control plane made, and before the cache started.
	w, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended without an event")
		}
		if err := apierrors.FromObject(ev.Object); ev.Type != watch.Error || !apierrors.IsResourceExpired(err) {
			t.Fatalf("got %s %v, want ERROR 410 Expired", ev.Type, err)
		}
	case <-ctx.Done():
		t.Fatal("no event")
	}
}

// listOnly is a ListWatch whose reflector lists, then watches, instead of asking for a watch
// that starts with the list (client-go's watch-list, its default).
type listOnly struct{ *cache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// TestSandboxInformer: a client-go informer of sandboxes syncs and follows creates and deletes,
// with either way of starting: a watch that begins with the current sandboxes and a bookmark
// (sendInitialEvents), or a list, then a watch from its resourceVersion.
func TestSandboxInformer(t *testing.T) {
	for _, mode := range []string{"watch-list", "list-then-watch"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			ns := newNamespace(t)
			api := sandboxes.SandboxV1alpha1().Sandboxes(ns)
			if _, err := api.Create(ctx, sandbox("existing"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			lw := &cache.ListWatch{
				ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
					return api.List(ctx, opts)
				},
				WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
					return api.Watch(ctx, opts)
				},
			}
			var lister cache.ListerWatcher = lw
			if mode == "list-then-watch" {
				lister = listOnly{lw}
			}
			informer := cache.NewSharedIndexInformer(lister, &sandboxv1alpha1.Sandbox{}, 0, cache.Indexers{})
			added, deleted := make(chan string, 100), make(chan string, 100)
			if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc: func(obj interface{}) { added <- obj.(*sandboxv1alpha1.Sandbox).Name },
				DeleteFunc: func(obj interface{}) {
					if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
						obj = tomb.Obj
					}
					deleted <- obj.(*sandboxv1alpha1.Sandbox).Name
				},
			}); err != nil {
				t.Fatal(err)
			}
			go informer.RunWithContext(ctx)
			if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
				t.Fatal("the informer did not sync")
			}
			if keys := informer.GetStore().ListKeys(); !slices.Equal(keys, []string{ns + "/existing"}) {
				t.Errorf("synced informer holds %v, want [%s/existing]", keys, ns)
			}

			if _, err := api.Create(ctx, sandbox("new"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitForName(ctx, t, added, "new", "the informer's add of new")
			if err := api.Delete(ctx, "new", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitForName(ctx, t, deleted, "new", "the informer's delete of new (once the controller let it go)")
		})
	}
}

func waitForName(ctx context.Context, t *testing.T, names <-chan string, want, what string) {
	t.Helper()
	for {
		select {
		case name := <-names:
			if name == want {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no %s", what)
		}
	}
}

// TestSandboxReadsWritesMadeElsewhere: a read without a resourceVersion shows the latest
// write whoever made it. Here the writes are label patches of the BatchSandbox made straight
// at the kube-apiserver, as another replica of sandbox-apiserver or the controller makes them;
// each is read back at once, the way `kubectl sandbox wait` reads after a create: by name, by
// label over the namespace, and as the start of a watch of the one sandbox.
func TestSandboxReadsWritesMadeElsewhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ns := newNamespace(t)
	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)
	if _, err := api.Create(ctx, sandbox("shared"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	byName := fields.OneTermEqualSelector("metadata.name", "shared").String()
	for i := range 100 {
		round := fmt.Sprint(i)
		bs := &controlv1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}}
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"round":%q}}}`, round)))
		if err := kube.Patch(ctx, bs, patch); err != nil {
			t.Fatal(err)
		}

		one, err := api.List(ctx, metav1.ListOptions{FieldSelector: byName})
		if err != nil {
			t.Fatal(err)
		}
		if len(one.Items) != 1 || one.Items[0].Labels["round"] != round {
			t.Fatalf("round %s: the list by name right after the write shows %v", round, labelsOf(one.Items, "round"))
		}

		labelled, err := api.List(ctx, metav1.ListOptions{LabelSelector: "round=" + round})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(itemNames(labelled.Items), []string{"shared"}) {
			t.Fatalf("round %s: the list of round=%s right after the write shows %v", round, round, itemNames(labelled.Items))
		}

		w, err := api.Watch(ctx, metav1.ListOptions{
			FieldSelector: byName, SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ev, ok := <-w.ResultChan():
			s, isSandbox := ev.Object.(*sandboxv1alpha1.Sandbox)
			if !ok || ev.Type != watch.Added || !isSandbox || s.Labels["round"] != round {
				t.Fatalf("round %s: the watch's first event right after the write: %s %#v", round, ev.Type, ev.Object)
			}
		case <-ctx.Done():
			t.Fatal("no initial event")
		}
		w.Stop()
	}
}

func labelsOf(items []sandboxv1alpha1.Sandbox, key string) []string {
	var out []string
	for _, s := range items {
		out = append(out, s.Name+"="+s.Labels[key])
	}
	return out
}
