package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// informerFeed plays the BatchSandbox informer: each change goes to its store, then to the
// cache's handler, in that order, as client-go's informers deliver them. resourceVersions
// count up from 100.
type informerFeed struct {
	t     *testing.T
	cache *WatchCache
	store toolscache.Store
	clock *testingclock.FakeClock
	rv    uint64
}

// newFeed returns a cache that has synced with an informer whose first list held objs, and
// serves. Its clock never moves unless a test steps it, so no wait ends by timing out.
func newFeed(t *testing.T, ringSize, maxPending int, objs ...*controlv1alpha1.BatchSandbox) *informerFeed {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1700000000, 0))
	f := &informerFeed{t: t, cache: newWatchCache(clk, ringSize, maxPending), store: toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), clock: clk, rv: 100}
	f.cache.store = f.store
	var items []interface{}
	var listed []*controlv1alpha1.BatchSandbox
	for _, bs := range objs {
		bs = f.stamp(bs)
		items = append(items, bs)
		listed = append(listed, bs)
	}
	// The list's resourceVersion is past its objects'.
	if err := f.store.Replace(items, f.nextRV()); err != nil {
		t.Fatal(err)
	}
	for _, bs := range listed {
		f.cache.OnAdd(bs, true)
	}
	f.cache.catchUp()
	if !f.serving() {
		t.Fatal("the cache does not serve after it caught up with the informer's list")
	}
	return f
}

func (f *informerFeed) serving() bool {
	f.cache.mu.Lock()
	defer f.cache.mu.Unlock()
	return f.cache.ready
}

func (f *informerFeed) nextRV() string {
	f.rv++
	return strconv.FormatUint(f.rv, 10)
}

func (f *informerFeed) stamp(bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.BatchSandbox {
	bs = bs.DeepCopy()
	bs.ResourceVersion = f.nextRV()
	if bs.UID == "" {
		bs.UID = types.UID("uid-" + bs.Namespace + "-" + bs.Name)
	}
	return bs
}

func (f *informerFeed) create(bs *controlv1alpha1.BatchSandbox) *controlv1alpha1.BatchSandbox {
	f.t.Helper()
	bs = f.stamp(bs)
	if err := f.store.Add(bs); err != nil {
		f.t.Fatal(err)
	}
	f.cache.OnAdd(bs, false)
	return bs
}

func (f *informerFeed) update(old *controlv1alpha1.BatchSandbox, change func(*controlv1alpha1.BatchSandbox)) *controlv1alpha1.BatchSandbox {
	f.t.Helper()
	bs := old.DeepCopy()
	change(bs)
	bs.ResourceVersion = f.nextRV()
	if err := f.store.Update(bs); err != nil {
		f.t.Fatal(err)
	}
	f.cache.OnUpdate(old, bs)
	return bs
}

func (f *informerFeed) remove(bs *controlv1alpha1.BatchSandbox) {
	f.t.Helper()
	final := bs.DeepCopy()
	final.ResourceVersion = f.nextRV()
	if err := f.store.Delete(final); err != nil {
		f.t.Fatal(err)
	}
	f.cache.OnDelete(final)
}

func (f *informerFeed) cacheRV() string {
	f.cache.mu.Lock()
	defer f.cache.mu.Unlock()
	return strconv.FormatUint(f.cache.rv, 10)
}

// waitForWaiter returns once a request waits on the cache's clock: what it waits for has not
// happened yet.
func (f *informerFeed) waitForWaiter() {
	f.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.clock.HasWaiters(), nil
	}); err != nil {
		f.t.Fatal("no request waits on the cache")
	}
}

func labelled(ns, name string, lbls map[string]string, phase controlv1alpha1.SandboxPhase) *controlv1alpha1.BatchSandbox {
	bs := batchSandbox(ns, name, lbls)
	bs.Status.Phase = phase
	return bs
}

// describeEvent is an event as the tests compare it.
func describeEvent(ev watch.Event) string {
	switch o := ev.Object.(type) {
	case *sandboxv1alpha1.Sandbox:
		if ev.Type == watch.Bookmark {
			return fmt.Sprintf("BOOKMARK %s %v", o.ResourceVersion, o.Annotations)
		}
		return fmt.Sprintf("%s %s/%s %s", ev.Type, o.Namespace, o.Name, o.ResourceVersion)
	case *metav1.Status:
		return fmt.Sprintf("%s %d %s", ev.Type, o.Code, o.Reason)
	}
	return fmt.Sprintf("%s %T", ev.Type, ev.Object)
}

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event in 10s")
	}
	return watch.Event{}
}

func nextN(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	var got []string
	for range n {
		got = append(got, describeEvent(next(t, w)))
	}
	return got
}

func expectEnd(t *testing.T, w watch.Interface) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if ok {
			t.Fatalf("got %s, want the watch to end", describeEvent(ev))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end in 10s")
	}
}

func mustWatch(ctx context.Context, t *testing.T, c *WatchCache, opts *metainternalversion.ListOptions) watch.Interface {
	t.Helper()
	w, served, err := c.watch(ctx, opts)
	if err != nil || !served {
		t.Fatalf("watch(%+v) = served %v, %v; want a watch from the cache", opts, served, err)
	}
	t.Cleanup(w.Stop)
	return w
}

func TestWatchCacheList(t *testing.T) {
	f := newFeed(t, 100, 100,
		labelled("ns", "b", map[string]string{"team": "a"}, controlv1alpha1.PhaseRunning),
		labelled("ns", "a", map[string]string{"team": "b"}, controlv1alpha1.PhasePending),
		labelled("other", "c", map[string]string{"team": "a"}, controlv1alpha1.PhaseRunning),
	)
	d := f.create(labelled("ns", "d", map[string]string{"team": "a"}, controlv1alpha1.PhasePending))
	// Terminating is the Sandbox's phase, which the field selector sees.
	f.update(d, func(bs *controlv1alpha1.BatchSandbox) { bs.DeletionTimestamp = ptr.To(metav1.Now()) })

	tests := []struct {
		name string
		ns   string
		opts *metainternalversion.ListOptions
		want []string
	}{
		{name: "nil options", ns: "ns", want: []string{"ns/a", "ns/b", "ns/d"}},
		{name: "every namespace, sorted", opts: &metainternalversion.ListOptions{}, want: []string{"ns/a", "ns/b", "ns/d", "other/c"}},
		{name: "label selector", ns: "ns", opts: &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"team": "a"})}, want: []string{"ns/b", "ns/d"}},
		{name: "metadata.name", opts: &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "c")}, want: []string{"other/c"}},
		{name: "metadata.namespace", opts: &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.namespace", "other")}, want: []string{"other/c"}},
		{name: "status.phase", opts: &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.phase", "Running")}, want: []string{"ns/b", "other/c"}},
		{name: "status.phase Terminating", opts: &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.phase", "Terminating")}, want: []string{"ns/d"}},
		{name: "limit is ignored", ns: "ns", opts: &metainternalversion.ListOptions{Limit: 1}, want: []string{"ns/a", "ns/b", "ns/d"}},
		{name: "resourceVersion 0", ns: "ns", opts: &metainternalversion.ListOptions{ResourceVersion: "0"}, want: []string{"ns/a", "ns/b", "ns/d"}},
		{name: "resourceVersion reached", ns: "ns", opts: &metainternalversion.ListOptions{ResourceVersion: "101", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, want: []string{"ns/a", "ns/b", "ns/d"}},
		{name: "nothing selected", ns: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, served, err := f.cache.list(nsContext(tt.ns), tt.opts)
			if err != nil || !served {
				t.Fatalf("list() = served %v, %v", served, err)
			}
			var got []string
			for _, s := range list.Items {
				if s.TypeMeta != sandboxTypeMeta || s.Spec.Template == nil {
					t.Errorf("item %s/%s is not a converted Sandbox", s.Namespace, s.Name)
				}
				got = append(got, s.Namespace+"/"+s.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("list() (-want +got):\n%s", diff)
			}
			if list.Items == nil {
				t.Error("list() items are nil; an empty list must encode as []")
			}
			if list.ResourceVersion != f.cacheRV() || list.Continue != "" {
				t.Errorf("list() resourceVersion %q continue %q, want %q and none", list.ResourceVersion, list.Continue, f.cacheRV())
			}
		})
	}
}

// TestWatchCacheListFromBackend: what the cache does not answer goes to the kube-apiserver.
func TestWatchCacheListFromBackend(t *testing.T) {
	f := newFeed(t, 100, 100)
	for name, opts := range map[string]*metainternalversion.ListOptions{
		"continue": {Continue: "token"},
		"exact":    {ResourceVersion: "101", ResourceVersionMatch: metav1.ResourceVersionMatchExact},
	} {
		if _, served, err := f.cache.list(nsContext("ns"), opts); served || err != nil {
			t.Errorf("%s: list() = served %v, %v; want it left to the backend", name, served, err)
		}
	}
	var nilCache *WatchCache
	if _, served, _ := nilCache.list(nsContext("ns"), nil); served {
		t.Error("a nil cache served a list")
	}
	notSynced := newWatchCache(testingclock.NewFakeClock(time.Now()), 10, 10)
	if _, served, _ := notSynced.list(nsContext("ns"), nil); served {
		t.Error("a cache that has not synced served a list")
	}
	if _, served, _ := notSynced.watch(nsContext("ns"), nil); served {
		t.Error("a cache that has not synced served a watch")
	}
	if _, _, err := f.cache.list(nsContext("ns"), &metainternalversion.ListOptions{ResourceVersion: "x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("list of resourceVersion x: %v, want BadRequest", err)
	}
}

// TestWatchCacheListWaitsForResourceVersion: a list not older than N waits for the cache to
// reach N, and goes to the backend if it does not within freshTimeout.
func TestWatchCacheListWaitsForResourceVersion(t *testing.T) {
	f := newFeed(t, 100, 100)
	type result struct {
		list   *sandboxv1alpha1.SandboxList
		served bool
	}
	done := make(chan result, 1)
	go func() {
		l, served, _ := f.cache.list(nsContext("ns"), &metainternalversion.ListOptions{ResourceVersion: "102"})
		done <- result{l, served}
	}()
	f.waitForWaiter()
	f.create(batchSandbox("ns", "a", nil)) // 102
	r := <-done
	if !r.served || len(r.list.Items) != 1 || r.list.ResourceVersion != "102" {
		t.Fatalf("list at 102 = served %v %+v, want a from the cache at 102", r.served, r.list)
	}

	go func() {
		l, served, _ := f.cache.list(nsContext("ns"), &metainternalversion.ListOptions{ResourceVersion: "200"})
		done <- result{l, served}
	}()
	f.waitForWaiter()
	f.clock.Step(freshTimeout)
	if r := <-done; r.served {
		t.Errorf("list at 200, never reached: served from the cache, want the backend")
	}
}

func TestWatchCacheWatchStart(t *testing.T) {
	// The feed lists at 101; a, b are 102 and 103 before the watch, x and c 104 and 105 after.
	tests := []struct {
		name string
		opts *metainternalversion.ListOptions
		want []string
	}{
		{
			name: "resourceVersion unset",
			opts: &metainternalversion.ListOptions{},
			want: []string{"ADDED ns/a 102", "ADDED ns/b 103", "ADDED ns/c 105"},
		},
		{
			name: "resourceVersion 0",
			opts: &metainternalversion.ListOptions{ResourceVersion: "0"},
			want: []string{"ADDED ns/a 102", "ADDED ns/b 103", "ADDED ns/c 105"},
		},
		{
			name: "resourceVersion in the ring",
			opts: &metainternalversion.ListOptions{ResourceVersion: "102"},
			want: []string{"ADDED ns/b 103", "ADDED ns/c 105"},
		},
		{
			name: "resourceVersion where the ring starts",
			opts: &metainternalversion.ListOptions{ResourceVersion: "101"},
			want: []string{"ADDED ns/a 102", "ADDED ns/b 103", "ADDED ns/c 105"},
		},
		{
			name: "sendInitialEvents=false from a resourceVersion",
			opts: &metainternalversion.ListOptions{ResourceVersion: "102", SendInitialEvents: ptr.To(false), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
			want: []string{"ADDED ns/b 103", "ADDED ns/c 105"},
		},
		{
			name: "sendInitialEvents=false without a resourceVersion: from now on",
			opts: &metainternalversion.ListOptions{SendInitialEvents: ptr.To(false), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
			want: []string{"ADDED ns/c 105"},
		},
		{
			name: "sendInitialEvents without bookmarks",
			opts: &metainternalversion.ListOptions{SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
			want: []string{"ADDED ns/a 102", "ADDED ns/b 103", "ADDED ns/c 105"},
		},
		{
			name: "sendInitialEvents with bookmarks",
			opts: &metainternalversion.ListOptions{SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true},
			want: []string{"ADDED ns/a 102", "ADDED ns/b 103", "BOOKMARK 103 map[k8s.io/initial-events-end:true]", "ADDED ns/c 105"},
		},
		{
			name: "sendInitialEvents from a resourceVersion",
			opts: &metainternalversion.ListOptions{ResourceVersion: "102", SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true},
			want: []string{"ADDED ns/a 102", "ADDED ns/b 103", "BOOKMARK 103 map[k8s.io/initial-events-end:true]", "ADDED ns/c 105"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFeed(t, 100, 100)
			f.create(batchSandbox("ns", "a", nil))
			f.create(batchSandbox("ns", "b", nil))
			w := mustWatch(nsContext("ns"), t, f.cache, tt.opts)
			f.create(batchSandbox("other", "x", nil))
			f.create(batchSandbox("ns", "c", nil))
			got := nextN(t, w, len(tt.want))
			// Initial events come in no particular order.
			sortInitial(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// sortInitial sorts the ADDED events a watch starts with, which come in the cache's map order,
// up to the first event of another type, or else all but the last (a change after them).
func sortInitial(events []string) {
	end := len(events) - 1
	for i, e := range events {
		if !strings.HasPrefix(e, "ADDED") {
			end = i
			break
		}
	}
	sort.Strings(events[:end])
}

// TestWatchCacheWatchTooOld: a watch from before the ring's oldest event gets 410 Gone, as
// its only event, as from the kube-apiserver.
func TestWatchCacheWatchTooOld(t *testing.T) {
	f := newFeed(t, 2, 100) // listed at 101
	for _, name := range []string{"a", "b", "c", "d"} {
		f.create(batchSandbox("ns", name, nil)) // 102..105; the ring keeps c and d
	}
	w := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "102"})
	ev := next(t, w)
	status, ok := ev.Object.(*metav1.Status)
	if ev.Type != watch.Error || !ok || !apierrors.IsResourceExpired(apierrors.FromObject(status)) || status.Code != 410 {
		t.Fatalf("got %s, want ERROR 410 Expired", describeEvent(ev))
	}
	expectEnd(t, w)

	// From the version before the ring's oldest event: all of the ring.
	w = mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "103"})
	if diff := cmp.Diff([]string{"ADDED ns/c 104", "ADDED ns/d 105"}, nextN(t, w, 2)); diff != "" {
		t.Errorf("events from 103 (-want +got):\n%s", diff)
	}
}

// TestWatchCacheWatchTooNew: a watch from a resourceVersion the cache has not reached waits
// for it while the cache moves, then gets what follows; once the cache has not moved for
// quietGap, the kube-apiserver serves it (a version from one of its lists, or one it answers
// with its own 504).
func TestWatchCacheWatchTooNew(t *testing.T) {
	f := newFeed(t, 100, 100) // listed at 101
	started := make(chan watch.Interface, 1)
	go func() {
		w, _, _ := f.cache.watch(nsContext("ns"), &metainternalversion.ListOptions{ResourceVersion: "102"})
		started <- w
	}()
	f.waitForWaiter()
	f.create(batchSandbox("ns", "a", nil)) // 102
	w := <-started
	t.Cleanup(w.Stop)
	f.create(batchSandbox("ns", "b", nil))
	if got := describeEvent(next(t, w)); got != "ADDED ns/b 103" {
		t.Errorf("first event %q, want ADDED ns/b 103: what follows 102", got)
	}

	served := make(chan bool, 1)
	go func() {
		_, ok, _ := f.cache.watch(nsContext("ns"), &metainternalversion.ListOptions{ResourceVersion: "200"})
		served <- ok
	}()
	f.waitForWaiter()
	f.clock.Step(quietGap)
	if <-served {
		t.Error("a watch from 200, which the quiet cache did not reach, was served from the cache; want the kube-apiserver")
	}

	// A quiet cache sends it there at once.
	f.clock.Step(time.Minute)
	if _, ok, _ := f.cache.watch(nsContext("ns"), &metainternalversion.ListOptions{ResourceVersion: "300"}); ok {
		t.Error("a watch from 300 was served from a quiet cache; want the kube-apiserver")
	}
}

// TestWatchCacheSelectorTransitions: a sandbox that comes into a watch's selection is ADDED,
// one that leaves it DELETED (as it was, at the change's resourceVersion), one that stays
// MODIFIED, as the kube-apiserver's cacher sends them.
func TestWatchCacheSelectorTransitions(t *testing.T) {
	f := newFeed(t, 100, 100)
	w := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{
		ResourceVersion: "0", LabelSelector: labels.SelectorFromSet(labels.Set{"team": "a"}),
	})
	relabel := func(team string) func(*controlv1alpha1.BatchSandbox) {
		return func(bs *controlv1alpha1.BatchSandbox) {
			bs.Labels = map[string]string{"team": team, "other": bs.Labels["other"]}
		}
	}
	s := f.create(batchSandbox("ns", "s", map[string]string{"team": "b"})) // 102: not selected
	s = f.update(s, relabel("a"))                                          // 103: in
	s = f.update(s, func(bs *controlv1alpha1.BatchSandbox) { bs.Labels["other"] = "x" })
	s = f.update(s, relabel("b")) // 105: out
	f.update(s, relabel("c"))     // 106: still out
	f.create(batchSandbox("ns", "t", map[string]string{"team": "a"}))
	want := []string{"ADDED ns/s 103", "MODIFIED ns/s 104", "DELETED ns/s 105", "ADDED ns/t 107"}
	var got []string
	var deleted *sandboxv1alpha1.Sandbox
	for range want {
		ev := next(t, w)
		got = append(got, describeEvent(ev))
		if ev.Type == watch.Deleted {
			deleted = ev.Object.(*sandboxv1alpha1.Sandbox)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if deleted != nil && deleted.Labels["team"] != "a" {
		t.Errorf("the DELETED sandbox has labels %v, want those it had in the selection", deleted.Labels)
	}
}

// TestWatchCacheDelete: a deletion reaches the watchers that selected the sandbox, at the
// deletion's resourceVersion, and leaves the lists.
func TestWatchCacheDelete(t *testing.T) {
	f := newFeed(t, 100, 100, batchSandbox("ns", "a", map[string]string{"team": "a"})) // 101, listed at 102
	selected := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{
		ResourceVersion: "102", LabelSelector: labels.SelectorFromSet(labels.Set{"team": "a"}),
	})
	other := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{
		ResourceVersion: "102", LabelSelector: labels.SelectorFromSet(labels.Set{"team": "b"}),
	})
	obj, _, _ := f.store.GetByKey("ns/a")
	f.remove(obj.(*controlv1alpha1.BatchSandbox))                     // 103
	f.create(batchSandbox("ns", "b", map[string]string{"team": "b"})) // 104
	if got := describeEvent(next(t, selected)); got != "DELETED ns/a 103" {
		t.Errorf("watch of team=a: %s, want DELETED ns/a 103", got)
	}
	if got := describeEvent(next(t, other)); got != "ADDED ns/b 104" {
		t.Errorf("watch of team=b: %s, want ADDED ns/b 104 and nothing of a", got)
	}
	l, _, err := f.cache.list(nsContext("ns"), nil)
	if err != nil || !cmp.Equal(itemNames(l.Items), []string{"b"}) {
		t.Errorf("list() after the delete = %v, %v; want [b]", l, err)
	}
}

// TestWatchCacheSlowWatcher: a watcher that does not read is closed once its queue is full,
// and another, which reads, gets every event meanwhile.
func TestWatchCacheSlowWatcher(t *testing.T) {
	const maxPending = 5
	f := newFeed(t, 1000, maxPending)
	slow := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "0"})
	fast := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "0"})
	// Enough to fill the slow watcher's result channel, then its queue.
	n := resultBuffer + maxPending + 10
	for i := range n {
		bs := f.create(batchSandbox("ns", fmt.Sprintf("s%03d", i), nil))
		if got, want := describeEvent(next(t, fast)), "ADDED ns/"+bs.Name+" "+bs.ResourceVersion; got != want {
			t.Fatalf("fast watcher got %q, want %q", got, want)
		}
	}
	received := 0
	for range slow.ResultChan() {
		received++
	}
	if received >= n {
		t.Errorf("the slow watcher got all %d events; want it closed before", n)
	}
	f.cache.mu.Lock()
	_, slowKept := f.cache.watchers[slow.(*cacheWatcher)]
	_, fastKept := f.cache.watchers[fast.(*cacheWatcher)]
	f.cache.mu.Unlock()
	if slowKept || !fastKept {
		t.Errorf("watchers kept: slow %v, fast %v; want only the fast one", slowKept, fastKept)
	}
}

// TestWatchCacheStop: Stop, or the end of the watch's request, frees the watcher.
func TestWatchCacheStop(t *testing.T) {
	f := newFeed(t, 100, 100, batchSandbox("ns", "a", nil))
	stopped := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "0"})
	stopped.Stop()
	ctx, cancel := context.WithCancel(nsContext("ns"))
	ended := mustWatch(ctx, t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "0"})
	cancel()
	for _, w := range []watch.Interface{stopped, ended} {
		for range w.ResultChan() {
		}
	}
	// The goroutine forgets the watcher before it closes the channel.
	f.cache.mu.Lock()
	defer f.cache.mu.Unlock()
	if len(f.cache.watchers) != 0 {
		t.Errorf("%d watchers left after Stop and the end of the request", len(f.cache.watchers))
	}
}

// TestWatchCacheBookmarks: every minute, a watcher that allows bookmarks gets one with the
// cache's resourceVersion; the others get none.
func TestWatchCacheBookmarks(t *testing.T) {
	f := newFeed(t, 100, 100)
	with := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "101", AllowWatchBookmarks: true})
	without := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "101"})
	f.create(batchSandbox("other", "x", nil)) // 102, selected by neither
	f.cache.sendBookmarks()
	f.create(batchSandbox("ns", "a", nil))
	if diff := cmp.Diff([]string{"BOOKMARK 102 map[]", "ADDED ns/a 103"}, nextN(t, with, 2)); diff != "" {
		t.Errorf("with bookmarks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ADDED ns/a 103"}, nextN(t, without, 1)); diff != "" {
		t.Errorf("without bookmarks (-want +got):\n%s", diff)
	}
}

// TestWatchCacheReadYourWrites: a list without a resourceVersion waits until the cache has
// seen every write this server made before it, and no longer: the clock never moves, so only
// the event ends the wait.
func TestWatchCacheReadYourWrites(t *testing.T) {
	f := newFeed(t, 100, 100, batchSandbox("ns", "d", nil)) // d at 101, listed at 102
	lists := make(chan []string, 1)
	list := func() {
		l, served, err := f.cache.list(nsContext("ns"), &metainternalversion.ListOptions{})
		if err != nil || !served {
			t.Errorf("list() = served %v, %v", served, err)
		}
		var names []string
		for _, s := range l.Items {
			names = append(names, s.Name+"="+string(s.Status.Phase))
		}
		lists <- names
	}

	// A create that the kube-apiserver has answered, at 103, but the informer has not delivered.
	f.cache.wrote("103")
	go list()
	f.waitForWaiter()
	f.create(batchSandbox("ns", "a", nil))
	if diff := cmp.Diff([]string{"a=", "d="}, <-lists); diff != "" {
		t.Errorf("list after the create (-want +got):\n%s", diff)
	}

	// A delete: its answer names no resourceVersion; the object terminating is its effect.
	d := &controlv1alpha1.BatchSandbox{}
	obj, _, _ := f.store.GetByKey("ns/d")
	d = obj.(*controlv1alpha1.BatchSandbox)
	done := f.cache.deleting(d)
	done(true)
	go list()
	f.waitForWaiter()
	f.update(d, func(bs *controlv1alpha1.BatchSandbox) { bs.DeletionTimestamp = ptr.To(metav1.Now()) })
	if diff := cmp.Diff([]string{"a=", "d=Terminating"}, <-lists); diff != "" {
		t.Errorf("list after the delete (-want +got):\n%s", diff)
	}

	// A delete that failed is not waited for.
	a, _, _ := f.store.GetByKey("ns/a")
	f.cache.deleting(a.(*controlv1alpha1.BatchSandbox))(false)
	list()
	<-lists

	// A watch without a resourceVersion waits too.
	f.cache.wrote("105")
	started := make(chan watch.Interface, 1)
	go func() {
		w, _, _ := f.cache.watch(nsContext("ns"), &metainternalversion.ListOptions{})
		started <- w
	}()
	f.waitForWaiter()
	f.create(batchSandbox("ns", "b", nil)) // 105
	w := <-started
	t.Cleanup(w.Stop)
	got := nextN(t, w, 3)
	sort.Strings(got)
	if diff := cmp.Diff([]string{"ADDED ns/a 103", "ADDED ns/b 105", "ADDED ns/d 104"}, got); diff != "" {
		t.Errorf("watch after the create (-want +got):\n%s", diff)
	}
}

// TestWatchCacheTombstone: a deletion the informer found when it relisted reaches the
// watchers; the cache serves again once it has caught up, with a ring that starts there.
func TestWatchCacheTombstone(t *testing.T) {
	f := newFeed(t, 100, 100, batchSandbox("ns", "a", nil), batchSandbox("ns", "b", nil)) // 101, 102, listed at 103
	w := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "103"})
	f.create(batchSandbox("ns", "c", nil)) // 104

	// The informer relists at 110: a was deleted meanwhile.
	obj, _, _ := f.store.GetByKey("ns/a")
	if err := f.store.Delete(obj); err != nil {
		t.Fatal(err)
	}
	f.rv = 110
	f.store.Bookmark("110")
	f.cache.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/a", Obj: obj})
	if diff := cmp.Diff([]string{"ADDED ns/c 104", "DELETED ns/a 104"}, nextN(t, w, 2)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if _, served, _ := f.cache.list(nsContext("ns"), nil); served {
		t.Error("the cache served a list in the middle of a relist")
	}

	f.cache.catchUp()
	l, served, err := f.cache.list(nsContext("ns"), nil)
	if err != nil || !served {
		t.Fatalf("list() after catching up = served %v, %v", served, err)
	}
	if got := itemNames(l.Items); !cmp.Equal(got, []string{"b", "c"}) || l.ResourceVersion != "110" {
		t.Errorf("list() = %v at %s, want [b c] at 110", got, l.ResourceVersion)
	}
	tooOld := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "104"})
	if ev := next(t, tooOld); !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Errorf("watch from before the relist: %s, want 410 Expired", describeEvent(ev))
	}
	fromNow := mustWatch(nsContext("ns"), t, f.cache, &metainternalversion.ListOptions{ResourceVersion: "110"})
	f.create(batchSandbox("ns", "d", nil)) // 111
	if got := describeEvent(next(t, fromNow)); got != "ADDED ns/d 111" {
		t.Errorf("watch from the relist: %s, want ADDED ns/d 111", got)
	}
	// The watch from before still gets what happens.
	if got := describeEvent(next(t, w)); got != "ADDED ns/d 111" {
		t.Errorf("watch opened before the relist: %s, want ADDED ns/d 111", got)
	}
}

func itemNames(items []sandboxv1alpha1.Sandbox) []string {
	var out []string
	for _, i := range items {
		out = append(out, i.Name)
	}
	return out
}

// TestWatchCacheRun: run makes the cache serve once the informer has synced, and a request
// for a resourceVersion that only a bookmark brought the informer to is served at once.
func TestWatchCacheRun(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1700000000, 0))
	c := newWatchCache(clk, 100, 100)
	c.store = toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	bs := batchSandbox("ns", "a", nil)
	bs.ResourceVersion = "5"
	if err := c.store.Replace([]interface{}{bs}, "7"); err != nil {
		t.Fatal(err)
	}
	c.OnAdd(bs, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced := make(chan struct{})
	close(synced)
	go c.run(ctx, synced)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, served, _ := c.list(nsContext("ns"), &metainternalversion.ListOptions{ResourceVersion: "0"})
		return served, nil
	}); err != nil {
		t.Fatal("the cache never served")
	}
	// The kube-apiserver bookmarked the informer at 50: nothing happened to BatchSandboxes.
	c.store.Bookmark("50")
	l, served, err := c.list(nsContext("ns"), &metainternalversion.ListOptions{ResourceVersion: "50"})
	if err != nil || !served || l.ResourceVersion != "50" {
		t.Errorf("list at 50 = served %v %v, %v; want it from the cache at 50", served, l, err)
	}
}

// TestRESTWithCache: the storage lists from the cache, and a list after a write through it
// waits for the write's event.
func TestRESTWithCache(t *testing.T) {
	r, backend := newREST(t)
	// An informer that has listed nothing, at no resourceVersion: the fake backend's start at 1.
	clk := testingclock.NewFakeClock(time.Unix(1700000000, 0))
	f := &informerFeed{t: t, cache: newWatchCache(clk, 100, 100), store: toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), clock: clk}
	f.cache.store = f.store
	f.cache.catchUp()
	r.WithCache(f.cache)
	ctx := nsContext("ns")

	created, err := r.Create(ctx, validSandbox(), nil, &metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lists := make(chan []string, 1)
	list := func() {
		out, err := r.List(ctx, &metainternalversion.ListOptions{})
		if err != nil {
			t.Errorf("List() error: %v", err)
		}
		lists <- itemNames(out.(*sandboxv1alpha1.SandboxList).Items)
	}
	go list()
	f.waitForWaiter()
	// The informer delivers the create, at the resourceVersion the backend gave it.
	bs := &controlv1alpha1.BatchSandbox{}
	if err := backend.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: created.(*sandboxv1alpha1.Sandbox).Name}, bs); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Add(bs); err != nil {
		t.Fatal(err)
	}
	f.cache.OnAdd(bs, false)
	if got := <-lists; !cmp.Equal(got, []string{bs.Name}) {
		t.Errorf("List() after the create = %v, want [%s]", got, bs.Name)
	}
	// The fake backend gives objects no UID, which a delete is recorded by; the kube-apiserver does.
	old := bs.DeepCopy()
	bs.UID = "uid-1"
	if err := backend.Update(context.Background(), bs); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Update(bs); err != nil {
		t.Fatal(err)
	}
	f.cache.OnUpdate(old, bs)

	// Served from the cache: a sandbox only the cache holds is listed.
	f.rv = 1000
	f.create(batchSandbox("ns", "only-cached", nil))
	list()
	if got := <-lists; !cmp.Equal(got, []string{bs.Name, "only-cached"}) {
		t.Errorf("List() = %v, want the cache's [%s only-cached]", got, bs.Name)
	}

	// A delete: the next list waits until the cache has seen it. The sandbox has the
	// controller's finalizer, so the delete marks it terminating.
	if _, _, err := r.Delete(ctx, bs.Name, nil, &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	go list()
	f.waitForWaiter()
	f.update(bs, func(bs *controlv1alpha1.BatchSandbox) { bs.DeletionTimestamp = ptr.To(metav1.Now()) })
	if got := <-lists; !cmp.Equal(got, []string{bs.Name, "only-cached"}) {
		t.Errorf("List() after the delete = %v, want [%s only-cached]", got, bs.Name)
	}
	out, err := r.List(ctx, &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.phase", "Terminating")})
	if err != nil || len(out.(*sandboxv1alpha1.SandboxList).Items) != 1 {
		t.Errorf("List() of Terminating sandboxes = %v, %v; want the one deleted", out, err)
	}
}

// currentReader plays the kube-apiserver for mostRecent: the BatchSandboxes it holds now, by
// namespace/name and resourceVersion, and its current resourceVersion.
type currentReader struct {
	mu      sync.Mutex
	objects map[string]string            // namespace/name → resourceVersion
	labels  map[string]map[string]string // namespace/name → labels
	rv      string
	err     error
	reads   int
	// compared counts the lists of metadata that compare the cache (no limit).
	compared int
}

func (r *currentReader) set(rv string, objects map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rv, r.objects = rv, objects
}

func (r *currentReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads
}

func (r *currentReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	if r.err != nil {
		return r.err
	}
	if _, ok := obj.(*metav1.PartialObjectMetadata); !ok {
		return fmt.Errorf("read a %T, want metadata alone", obj)
	}
	rv, ok := r.objects[key.String()]
	if !ok {
		return apierrors.NewNotFound(controlv1alpha1.Resource("batchsandboxes"), key.Name)
	}
	obj.SetResourceVersion(rv)
	return nil
}

func (r *currentReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	if r.err != nil {
		return r.err
	}
	l, ok := list.(*metav1.PartialObjectMetadataList)
	if !ok {
		return fmt.Errorf("listed a %T, want metadata alone", list)
	}
	l.ResourceVersion = r.rv
	o := (&client.ListOptions{}).ApplyOptions(opts)
	switch o.Limit {
	case 1:
		return nil
	case 0:
		// The comparison: every BatchSandbox of the namespace and labels, by key as etcd has them.
		r.compared++
		keys := slices.Sorted(maps.Keys(r.objects))
		for _, key := range keys {
			ns, name, _ := strings.Cut(key, "/")
			if o.Namespace != "" && ns != o.Namespace || o.LabelSelector != nil && !o.LabelSelector.Matches(labels.Set(r.labels[key])) {
				continue
			}
			m := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: r.objects[key], Labels: r.labels[key]}}
			l.Items = append(l.Items, m)
		}
		return nil
	}
	return fmt.Errorf("listed with limit %d, want 1 or none", o.Limit)
}

type listResult struct {
	names  []string
	rv     string
	served bool
	err    error
}

func listAsync(ctx context.Context, c *WatchCache, opts *metainternalversion.ListOptions) <-chan listResult {
	done := make(chan listResult, 1)
	go func() {
		l, served, err := c.list(ctx, opts)
		r := listResult{served: served, err: err}
		if l != nil {
			r.rv = l.ResourceVersion
			for _, s := range l.Items {
				r.names = append(r.names, s.Namespace+"/"+s.Name)
			}
		}
		done <- r
	}()
	return done
}

// TestWatchCacheMostRecent: a read without a resourceVersion shows what the kube-apiserver
// holds as it begins, whoever wrote it (another replica of this server, the controller): the
// cache waits until it shows that, or the kube-apiserver answers.
func TestWatchCacheMostRecent(t *testing.T) {
	byName := &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "x")}

	t.Run("one sandbox, written elsewhere, not in the cache yet", func(t *testing.T) {
		f := newFeed(t, 100, 100, batchSandbox("ns", "a", nil)) // 101, listed at 102
		cur := &currentReader{}
		f.cache.current = cur
		cur.set("500", map[string]string{"ns/x": "103"})
		done := listAsync(nsContext("ns"), f.cache, byName)
		f.waitForWaiter()
		f.create(batchSandbox("ns", "x", nil)) // 103
		r := <-done
		if !r.served || r.err != nil || !slices.Equal(r.names, []string{"ns/x"}) {
			t.Fatalf("list of x = %+v, want x from the cache", r)
		}
	})

	t.Run("one sandbox, deleted elsewhere, still in the cache", func(t *testing.T) {
		f := newFeed(t, 100, 100, batchSandbox("ns", "x", nil)) // 101, listed at 102
		cur := &currentReader{}
		f.cache.current = cur
		cur.set("500", nil)
		done := listAsync(nsContext("ns"), f.cache, byName)
		f.waitForWaiter()
		obj, _, _ := f.store.GetByKey("ns/x")
		f.remove(obj.(*controlv1alpha1.BatchSandbox))
		r := <-done
		if !r.served || r.err != nil || len(r.names) != 0 {
			t.Fatalf("list of x = %+v, want none from the cache", r)
		}
	})

	t.Run("the whole namespace while sandboxes change", func(t *testing.T) {
		f := newFeed(t, 100, 100)                 // listed at 101
		f.create(batchSandbox("other", "o", nil)) // 102: the cache moves now
		cur := &currentReader{}
		f.cache.current = cur
		cur.set("104", nil)
		done := listAsync(nsContext("ns"), f.cache, nil)
		f.waitForWaiter()
		f.create(batchSandbox("ns", "x", nil)) // 103
		f.create(batchSandbox("ns", "y", nil)) // 104
		r := <-done
		if !r.served || r.err != nil || !slices.Equal(r.names, []string{"ns/x", "ns/y"}) || r.rv != "104" {
			t.Fatalf("list = %+v, want x and y from the cache at 104", r)
		}
	})

	t.Run("the whole namespace while the cache stops moving", func(t *testing.T) {
		f := newFeed(t, 100, 100)
		f.create(batchSandbox("ns", "x", nil)) // 102
		cur := &currentReader{}
		f.cache.current = cur
		cur.set("900", nil)
		done := listAsync(nsContext("ns"), f.cache, nil)
		f.waitForWaiter()
		f.clock.Step(quietGap)
		if r := <-done; r.served {
			t.Fatalf("list = %+v, want it left to the kube-apiserver", r)
		}
	})

	t.Run("the whole namespace of a quiet cache", func(t *testing.T) {
		f := newFeed(t, 100, 100, batchSandbox("ns", "x", nil))
		f.clock.Step(time.Minute)
		cur := &currentReader{}
		f.cache.current = cur
		cur.set("900", nil)
		// At once: no waiting on the clock.
		if r := <-listAsync(nsContext("ns"), f.cache, nil); r.served {
			t.Fatalf("list = %+v, want it left to the kube-apiserver", r)
		}
		// A cache already there answers.
		cur.set(f.cacheRV(), nil)
		if r := <-listAsync(nsContext("ns"), f.cache, nil); !r.served || !slices.Equal(r.names, []string{"ns/x"}) {
			t.Fatalf("list = %+v, want x from the cache", r)
		}
	})

	t.Run("a quiet cache that holds what the kube-apiserver has answers", func(t *testing.T) {
		f := newFeed(t, 100, 100, batchSandbox("ns", "x", map[string]string{"team": "a"}),
			batchSandbox("ns", "y", map[string]string{"team": "b"}), batchSandbox("other", "z", nil)) // 101-103, listed at 104
		f.clock.Step(time.Minute)
		cur := &currentReader{}
		f.cache.current = cur
		// etcd moved on with other resources; the sandboxes did not.
		same := map[string]string{"ns/x": "101", "ns/y": "102", "other/z": "103"}
		lbls := map[string]map[string]string{"ns/x": {"team": "a"}, "ns/y": {"team": "b"}}
		cur.set("900", same)
		cur.labels = lbls
		if r := <-listAsync(nsContext("ns"), f.cache, nil); !r.served || r.err != nil || !slices.Equal(r.names, []string{"ns/x", "ns/y"}) || r.rv != "104" {
			t.Fatalf("list = %+v, want x and y from the cache at its own resourceVersion 104", r)
		}
		if r := <-listAsync(context.Background(), f.cache, nil); !r.served || !slices.Equal(r.names, []string{"ns/x", "ns/y", "other/z"}) {
			t.Fatalf("list of every namespace = %+v, want x, y and z from the cache", r)
		}
		if cur.compared != 2 {
			t.Errorf("%d comparisons, want 2", cur.compared)
		}

		// Differences: changed, deleted, created elsewhere, and a label changed elsewhere.
		for what, current := range map[string]map[string]string{
			"changed": {"ns/x": "200", "ns/y": "102", "other/z": "103"},
			"deleted": {"ns/y": "102", "other/z": "103"},
			"created": {"ns/w": "201", "ns/x": "101", "ns/y": "102", "other/z": "103"},
		} {
			cur.set("900", current)
			if r := <-listAsync(nsContext("ns"), f.cache, nil); r.served {
				t.Errorf("%s elsewhere: list = %+v, want it left to the kube-apiserver", what, r)
			}
		}
		cur.set("900", same)
		cur.labels = map[string]map[string]string{"ns/x": {"team": "a"}, "ns/y": {"team": "a"}}
		teamA := &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"team": "a"})}
		if r := <-listAsync(nsContext("ns"), f.cache, teamA); r.served {
			t.Errorf("a label changed elsewhere: list = %+v, want it left to the kube-apiserver", r)
		}
		// Only what the selection covers is compared: y's labels matter no more to team b's.
		cur.labels = lbls
		cur.objects = map[string]string{"ns/x": "101", "ns/y": "300", "other/z": "103"}
		if r := <-listAsync(nsContext("ns"), f.cache, teamA); !r.served || !slices.Equal(r.names, []string{"ns/x"}) {
			t.Errorf("team a, with y changed elsewhere: list = %+v, want x from the cache", r)
		}

		// A watch from what is current starts from the cache too.
		cur.set("900", same)
		w, served, err := f.cache.watch(nsContext("ns"), &metainternalversion.ListOptions{
			SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		})
		if !served || err != nil {
			t.Fatalf("watch: served %v, err %v; want it from the cache", served, err)
		}
		t.Cleanup(w.Stop)
		want := []string{"ADDED ns/x 101", "ADDED ns/y 102", "BOOKMARK 104 map[k8s.io/initial-events-end:true]"}
		if diff := cmp.Diff(want, nextN(t, w, 3)); diff != "" {
			t.Errorf("initial events (-want +got):\n%s", diff)
		}
	})

	t.Run("a watch of one sandbox starts from what is current", func(t *testing.T) {
		f := newFeed(t, 100, 100) // listed at 101
		cur := &currentReader{}
		f.cache.current = cur
		cur.set("500", map[string]string{"ns/x": "102"})
		started := make(chan watch.Interface, 1)
		go func() {
			w, _, _ := f.cache.watch(nsContext("ns"), &metainternalversion.ListOptions{
				FieldSelector:     fields.OneTermEqualSelector("metadata.name", "x"),
				SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
				ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			})
			started <- w
		}()
		f.waitForWaiter()
		f.create(batchSandbox("ns", "x", nil)) // 102
		w := <-started
		if w == nil {
			t.Fatal("the watch was left to the kube-apiserver")
		}
		t.Cleanup(w.Stop)
		want := []string{"ADDED ns/x 102", "BOOKMARK 102 map[k8s.io/initial-events-end:true]"}
		if diff := cmp.Diff(want, nextN(t, w, 2)); diff != "" {
			t.Errorf("initial events (-want +got):\n%s", diff)
		}
	})

	t.Run("the kube-apiserver unreachable, and resourceVersions that ask nothing", func(t *testing.T) {
		f := newFeed(t, 100, 100, batchSandbox("ns", "x", nil))
		cur := &currentReader{err: errors.New("connection refused")}
		f.cache.current = cur
		if r := <-listAsync(nsContext("ns"), f.cache, nil); r.served {
			t.Errorf("list = %+v, want it left to the kube-apiserver", r)
		}
		if _, served, _ := f.cache.watch(nsContext("ns"), byName); served {
			t.Error("watch served, want it left to the kube-apiserver")
		}
		reads := cur.count()
		for _, rv := range []string{"0", f.cacheRV()} {
			if r := <-listAsync(nsContext("ns"), f.cache, &metainternalversion.ListOptions{ResourceVersion: rv}); !r.served {
				t.Errorf("list at %q = %+v, want it from the cache", rv, r)
			}
		}
		if cur.count() != reads {
			t.Errorf("lists with a resourceVersion read the kube-apiserver %d times", cur.count()-reads)
		}
	})
}
