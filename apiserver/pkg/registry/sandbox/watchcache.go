package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// WatchCache serves lists and watches of sandboxes from this server's memory, as the
// kube-apiserver's cacher (k8s.io/apiserver/pkg/storage/cacher) serves built-in resources: one
// watch of BatchSandboxes (the informer's) feeds every client, where a watch passed through
// was one more watch at the kube-apiserver, each converting every object again, and each
// closed by the kube-apiserver when a burst made it fall behind.
//
// Under one mutex it holds the current sandboxes (each converted once per event and then
// shared, read-only, by every list and watcher), a ring of the last events for watches that
// resume from a resourceVersion, the highest resourceVersion it has seen, and the watchers.
// Each watcher has a queue and a goroutine of its own, so a slow client delays only itself; one
// that falls too far behind is closed and resumes from its last resourceVersion, which the ring
// serves.
//
// Consistency: the resourceVersions are the BatchSandboxes' (etcd's revisions), so they mean
// the same here and at the kube-apiserver. A list or a watch without a resourceVersion is "the
// most recent" of the API conventions, as the kube-apiserver's consistent reads from its cache
// are: it sees every write made before it began, through this server, through another replica
// of it or elsewhere (the controller's status). It asks the kube-apiserver what that is, one
// small read (see mostRecent), waits until the informer has delivered it, and goes to the
// kube-apiserver when the cache cannot show it soon. A list with resourceVersionMatch=Exact or
// a continue token goes to the kube-apiserver too.
type WatchCache struct {
	clock clock.WithTicker
	// current reads the kube-apiserver for what a read without a resourceVersion must see;
	// without it (tests of other things) such a read waits for this server's writes alone.
	current client.Reader
	// maxPending is how many events a watcher may have waiting before it is closed.
	maxPending int
	// store is the informer's store: what the cache checks itself against before it serves
	// (catchUp), and the resourceVersion of the informer's last bookmark.
	store toolscache.Store
	// kick asks run for a catchUp: the cache is not serving yet, or a request waits for a
	// resourceVersion beyond the last event, which a bookmark may have reached.
	kick chan struct{}

	mu sync.Mutex
	// objects by namespace and name.
	objects map[string]map[string]*sandboxv1alpha1.Sandbox
	count   int
	// rv is the highest resourceVersion the cache has seen: every change up to it is in
	// objects, and every change after ringStart is in the ring. advanced is when it last grew.
	rv        uint64
	advanced  time.Time
	ring      ring
	ringStart uint64
	// ready: the cache serves. It is not before it has caught up with the informer's first
	// list, nor after the informer relisted (a gap in the events, see apply) until it has
	// caught up again; requests go to the kube-apiserver meanwhile.
	ready    bool
	watchers map[*cacheWatcher]struct{}
	// writeMark is the highest resourceVersion of a write this server made; pendingDeletes
	// the deletes it made whose effect the cache has not seen yet (there is no resourceVersion
	// of a delete to wait for, see deleting). Requests without a resourceVersion wait for both.
	writeMark      uint64
	pendingDeletes map[types.UID]*pendingDelete
	deleteSeq      uint64
	// changed is closed, and replaced, whenever rv, ready or pendingDeletes change: what
	// waiters wait on.
	changed chan struct{}
}

// pendingDelete is a delete this server made of the object at ns/name, which it had read at
// resourceVersion rv.
type pendingDelete struct {
	ns, name string
	rv       uint64
	seq      uint64
	since    time.Time
}

const (
	// defaultRingSize keeps over half a minute of a 300 creates/s burst (a create is a few
	// events: the create, the controller's status writes), enough for a client that reconnects.
	defaultRingSize = 10000
	// defaultMaxPending is where a watcher is judged unresponsive: it is this far behind the
	// cache. Its client resumes from its last resourceVersion, in the ring if it was this close.
	defaultMaxPending = 10000
	// freshTimeout is how long a request waits for the cache to reach the resourceVersion it
	// needs: the kube-apiserver's watch cache waits as long (blockTimeout).
	freshTimeout = 3 * time.Second
	// tooLargeRetrySeconds is the Retry-After of a request whose wait for the cache ended with
	// its context, as the kube-apiserver's (resourceVersionTooHighRetrySeconds).
	tooLargeRetrySeconds = 1
	// bookmarkInterval: the kube-apiserver bookmarks watchers about every minute.
	bookmarkInterval = time.Minute
	// resultBuffer lets the watch handler write several events before it flushes.
	resultBuffer = 100
	// pendingDeleteTTL is a last resort for a delete whose effect the cache never recognizes:
	// reads that wait for it go to the kube-apiserver after freshTimeout meanwhile.
	pendingDeleteTTL = time.Minute
	// quietGap: a read that waits for the kube-apiserver's current resourceVersion gives up
	// when the informer has delivered nothing for this long. The resourceVersion is etcd's,
	// which every resource moves: while sandboxes change, the informer soon passes it; while
	// none does, only its next bookmark would, a minute away, so the read goes to the
	// kube-apiserver at once.
	quietGap = 250 * time.Millisecond
)

// errNotServing: the cache cannot answer; the request goes to the kube-apiserver.
var errNotServing = errors.New("the sandbox cache is not serving")

// NewWatchCache returns a cache that serves once Start has run and the informer has synced.
// current reads the kube-apiserver directly (not from a cache): what reads without a
// resourceVersion ask before they are answered.
func NewWatchCache(current client.Reader) *WatchCache {
	c := newWatchCache(clock.RealClock{}, defaultRingSize, defaultMaxPending)
	c.current = current
	return c
}

func newWatchCache(clk clock.WithTicker, ringSize, maxPending int) *WatchCache {
	return &WatchCache{
		clock:          clk,
		maxPending:     maxPending,
		kick:           make(chan struct{}, 1),
		objects:        map[string]map[string]*sandboxv1alpha1.Sandbox{},
		ring:           newRing(ringSize),
		watchers:       map[*cacheWatcher]struct{}{},
		pendingDeletes: map[types.UID]*pendingDelete{},
		changed:        make(chan struct{}),
	}
}

// Start feeds the cache from the BatchSandbox informer until ctx ends. It returns at once; the
// cache serves once its handler has seen the informer's first list.
func (c *WatchCache) Start(ctx context.Context, informer crcache.Informer) error {
	// controller-runtime's informers are client-go's: the cache needs the store behind them.
	sii, ok := informer.(toolscache.SharedIndexInformer)
	if !ok {
		return fmt.Errorf("the BatchSandbox informer is a %T, not a client-go SharedIndexInformer", informer)
	}
	c.store = sii.GetStore()
	reg, err := sii.AddEventHandler(c)
	if err != nil {
		return fmt.Errorf("watch cache: %w", err)
	}
	go c.run(ctx, reg.HasSyncedChecker().Done())
	return nil
}

// run makes the cache serve once its handler has synced, then keeps it caught up with the
// informer's bookmarks and bookmarks the watchers, until ctx ends.
func (c *WatchCache) run(ctx context.Context, synced <-chan struct{}) {
	select {
	case <-synced:
	case <-ctx.Done():
		return
	}
	c.catchUp()
	ticker := c.clock.NewTicker(bookmarkInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			c.stopServing()
			return
		case <-c.kick:
			c.catchUp()
		case <-ticker.C():
			c.catchUp()
			c.sendBookmarks()
			c.prunePendingDeletes()
		}
	}
}

// OnAdd implements toolscache.ResourceEventHandler.
func (c *WatchCache) OnAdd(obj interface{}, _ bool) {
	if bs, ok := obj.(*controlv1alpha1.BatchSandbox); ok {
		c.apply(watch.Added, bs, false)
	}
}

// OnUpdate implements toolscache.ResourceEventHandler.
func (c *WatchCache) OnUpdate(_, obj interface{}) {
	if bs, ok := obj.(*controlv1alpha1.BatchSandbox); ok {
		c.apply(watch.Modified, bs, false)
	}
}

// OnDelete implements toolscache.ResourceEventHandler. A tombstone is an object the informer
// found gone when it relisted: its last state is known, the resourceVersion of its deletion
// is not.
func (c *WatchCache) OnDelete(obj interface{}) {
	tombstone := false
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, tombstone = t.Obj, true
	}
	if bs, ok := obj.(*controlv1alpha1.BatchSandbox); ok {
		c.apply(watch.Deleted, bs, tombstone)
	}
}

// apply records one change of a BatchSandbox and sends it to the watchers.
//
// The informer's events come in resourceVersion order, except after a relist (its watch was
// too far behind): then it reports what changed while it was away in no order, and deletions
// as tombstones without their resourceVersion. Such a gap breaks the ring's order, so the cache
// stops serving (requests go to the kube-apiserver), forgets the ring, and serves again once
// it has caught up (catchUp): a watch that resumes from before then gets 410 Gone and relists,
// as after a relist of the kube-apiserver's own watch cache. The watchers still get every
// change.
func (c *WatchCache) apply(typ watch.EventType, bs *controlv1alpha1.BatchSandbox, tombstone bool) {
	// Converted once, outside the lock; shared by every list and watcher from here on, and
	// sharing bs's fields (the informer's object, which nothing writes).
	sbx := presentShared(bs)
	rv, err := strconv.ParseUint(sbx.ResourceVersion, 10, 64)
	if err != nil {
		// Never from a kube-apiserver; handled as a gap, which needs no order.
		rv = 0
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.objects[sbx.Namespace][sbx.Name]
	switch {
	case typ != watch.Deleted && prev != nil && prev.ResourceVersion == sbx.ResourceVersion:
		// A resync, or a relist that found the object unchanged: nothing happened.
		return
	case typ != watch.Deleted && prev == nil:
		typ = watch.Added
	case typ != watch.Deleted:
		typ = watch.Modified
	case prev == nil:
		// Gone already, or never seen.
		if c.resolveDeletesLocked() {
			c.broadcastLocked()
		}
		return
	}

	gap := tombstone || rv == 0 || rv <= c.rv
	if tombstone {
		// Shown with the cache's resourceVersion: no later than the deletion, and no client
		// resumes from it into a ring that still lacks the deletion (the ring starts anew).
		shown := *sbx
		shown.ResourceVersion = strconv.FormatUint(c.rv, 10)
		sbx = &shown
	}
	if !gap {
		c.rv = rv
		c.advanced = c.clock.Now()
	}
	if typ == watch.Deleted {
		delete(c.objects[sbx.Namespace], sbx.Name)
		if len(c.objects[sbx.Namespace]) == 0 {
			delete(c.objects, sbx.Namespace)
		}
		c.count--
	} else {
		if c.objects[sbx.Namespace] == nil {
			c.objects[sbx.Namespace] = map[string]*sandboxv1alpha1.Sandbox{}
		}
		c.objects[sbx.Namespace][sbx.Name] = sbx
		if prev == nil {
			c.count++
		}
	}

	e := cacheEvent{typ: typ, obj: sbx, prev: prev, rv: rv}
	if c.ready {
		if gap {
			klog.V(2).InfoS("Sandbox cache saw the BatchSandbox informer relist; serving from the kube-apiserver until it has caught up",
				"resourceVersion", c.rv, "event", sbx.ResourceVersion, "tombstone", tombstone)
			c.ready = false
			c.ring.reset()
		} else if dropped, ok := c.ring.push(e); ok {
			c.ringStart = dropped.rv
		}
	}
	c.dispatchLocked(e)
	c.resolveDeletesLocked()
	c.broadcastLocked()
	if !c.ready {
		c.kickRun()
	}
}

// catchUp checks the cache against the informer's store. If they hold the same objects at the
// same resourceVersions, the handler has been given every change the store had, so the cache
// may claim the store's resourceVersion, which bookmarks advance beyond the last event, and, if
// it was not serving, serve again, with a ring that starts there.
func (c *WatchCache) catchUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store == nil {
		return
	}
	// Read with the handler held off (c.mu): the store can only be ahead of the cache, never
	// behind, so a match is not a coincidence of the cache running ahead.
	storeRV := c.store.LastStoreSyncResourceVersion()
	items := c.store.List()
	if !c.agreesLocked(items) {
		// Events are on their way to the handler; it kicks again (or the next tick does).
		return
	}
	if s, err := strconv.ParseUint(storeRV, 10, 64); err == nil && s > c.rv {
		c.rv = s
		c.advanced = c.clock.Now()
	}
	if !c.ready {
		c.ready = true
		c.ring.reset()
		c.ringStart = c.rv
		klog.V(2).InfoS("Serving sandbox lists and watches from the cache", "resourceVersion", c.rv, "sandboxes", c.count)
	}
	c.resolveDeletesLocked()
	c.broadcastLocked()
}

func (c *WatchCache) agreesLocked(items []interface{}) bool {
	if len(items) != c.count {
		return false
	}
	for _, item := range items {
		obj, ok := item.(metav1.Object)
		if !ok {
			return false
		}
		cached := c.objects[obj.GetNamespace()][obj.GetName()]
		if cached == nil || cached.ResourceVersion != obj.GetResourceVersion() {
			return false
		}
	}
	return true
}

// stopServing ends every watch when the cache stops (the server shuts down).
func (c *WatchCache) stopServing() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready = false
	for w := range c.watchers {
		delete(c.watchers, w)
		w.close()
	}
	c.broadcastLocked()
}

func (c *WatchCache) kickRun() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *WatchCache) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// wrote records a write this server made, at the resourceVersion the kube-apiserver gave it:
// reads without a resourceVersion wait until the cache has seen it.
func (c *WatchCache) wrote(resourceVersion string) {
	if c == nil {
		return
	}
	rv, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rv > c.writeMark {
		c.writeMark = rv
	}
}

// deleting records a delete this server is about to make of bs; done says whether it was
// made. The DELETE's answer names no resourceVersion (a Status for an object gone at once; the
// controller-runtime client drops the body anyway), so the delete counts as seen when the cache
// sees the object terminating or gone. It is recorded before the delete is sent, so that its
// event cannot arrive first.
func (c *WatchCache) deleting(bs *controlv1alpha1.BatchSandbox) (done func(made bool)) {
	if c == nil || bs.UID == "" {
		return func(bool) {}
	}
	rv, _ := strconv.ParseUint(bs.ResourceVersion, 10, 64)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleteSeq++
	c.pendingDeletes[bs.UID] = &pendingDelete{ns: bs.Namespace, name: bs.Name, rv: rv, seq: c.deleteSeq, since: c.clock.Now()}
	// Seen already if the object is terminating (deleted before) or gone.
	c.resolveDeletesLocked()
	return func(made bool) {
		if made {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.pendingDeletes[bs.UID]; ok {
			delete(c.pendingDeletes, bs.UID)
			c.broadcastLocked()
		}
	}
}

// resolveDeletesLocked forgets the deletes whose effect the cache shows: the object
// terminating, or gone (or another in its place) once the cache is past the version deleted.
// It says whether it forgot any.
func (c *WatchCache) resolveDeletesLocked() bool {
	resolved := false
	for uid, p := range c.pendingDeletes {
		cur := c.objects[p.ns][p.name]
		if (cur != nil && cur.UID == uid && cur.DeletionTimestamp != nil) || ((cur == nil || cur.UID != uid) && c.rv >= p.rv) {
			delete(c.pendingDeletes, uid)
			resolved = true
		}
	}
	return resolved
}

func (c *WatchCache) prunePendingDeletes() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	pruned := false
	for uid, p := range c.pendingDeletes {
		if now.Sub(p.since) > pendingDeleteTTL {
			klog.V(2).InfoS("Sandbox cache never saw a delete made through this server", "sandbox", klog.KRef(p.ns, p.name), "uid", uid)
			delete(c.pendingDeletes, uid)
			pruned = true
		}
	}
	if pruned {
		c.broadcastLocked()
	}
}

// freshness is what a request needs the cache to have seen before it answers.
type freshness struct {
	rv        uint64
	deleteSeq uint64
	// asked: rv is the client's, not one of this server's writes, whose events will come; it
	// may be one the informer reached by a bookmark alone.
	asked bool
	// absent: the cache must not hold this sandbox (the kube-apiserver has none of the name).
	absent *types.NamespacedName
	// quiet: rv is a revision of etcd (the kube-apiserver's current one, or one a client had
	// from it), which the informer may not reach for a minute when no sandbox changes after
	// it; the request gives up once the cache has not moved for quietGap.
	quiet bool
}

// freshnessLocked is what a request with resourceVersion rvParam (parsed: rv) waits for: ""
// what mostRecent found, "0" nothing (the cache as it is), any other the client's version.
func (c *WatchCache) freshnessLocked(rvParam string, rv uint64, recent freshness) freshness {
	switch rvParam {
	case "":
		return recent
	case "0":
		return freshness{}
	}
	return freshness{rv: rv, asked: true, quiet: true}
}

// yourWritesLocked: every write this server made so far.
func (c *WatchCache) yourWritesLocked() freshness {
	return freshness{rv: c.writeMark, deleteSeq: c.deleteSeq}
}

// mostRecent is what a request without a resourceVersion must see: what the kube-apiserver
// holds as it begins, whoever wrote it. One small read there says what that is, in one of two
// ways:
//
//   - A request for one sandbox (a metadata.name field selector in a namespace, as clients
//     wait for one): the BatchSandbox's metadata. The cache must have reached its
//     resourceVersion, an event the informer will deliver, or, if there is none, lack it.
//   - Any other: a list of one BatchSandbox's metadata, whose resourceVersion is the
//     kube-apiserver's current one. The cache must reach that, which it does soon while
//     sandboxes change, or the request goes to the kube-apiserver (freshness.quiet).
//
// An error (the kube-apiserver unreachable) sends the request there too, to be answered as it
// would be.
func (c *WatchCache) mostRecent(ctx context.Context, sel selection) (freshness, error) {
	if c.current == nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.yourWritesLocked(), nil
	}
	gvk := controlv1alpha1.SchemeGroupVersion.WithKind("BatchSandbox")
	if name, ok := sel.field.RequiresExactMatch("metadata.name"); ok && sel.namespace != "" && name != "" {
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(gvk)
		err := c.current.Get(ctx, client.ObjectKey{Namespace: sel.namespace, Name: name}, meta)
		switch {
		case apierrors.IsNotFound(err):
			return freshness{absent: &types.NamespacedName{Namespace: sel.namespace, Name: name}}, nil
		case err != nil:
			return freshness{}, err
		}
		rv, err := strconv.ParseUint(meta.ResourceVersion, 10, 64)
		if err != nil {
			return freshness{}, fmt.Errorf("BatchSandbox %s/%s has resourceVersion %q: %w", sel.namespace, name, meta.ResourceVersion, err)
		}
		return freshness{rv: rv}, nil
	}
	list := batchSandboxMetadata()
	opts := []client.ListOption{client.Limit(1)}
	if sel.namespace != "" {
		opts = append(opts, client.InNamespace(sel.namespace))
	}
	if err := c.current.List(ctx, list, opts...); err != nil {
		return freshness{}, err
	}
	rv, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		return freshness{}, fmt.Errorf("a list of BatchSandboxes has resourceVersion %q: %w", list.ResourceVersion, err)
	}
	return freshness{rv: rv, quiet: true}, nil
}

// batchSandboxMetadata is a list of BatchSandboxes' metadata alone, to read into.
func batchSandboxMetadata() *metav1.PartialObjectMetadataList {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(controlv1alpha1.SchemeGroupVersion.WithKind("BatchSandboxList"))
	return list
}

// currentThoughQuietLocked tells, for a request that waitFreshLocked answered with err,
// whether the cache may answer it all the same: it asked for what is current (no
// resourceVersion), the cache stopped moving before it showed that (f.quiet), and it holds
// what the kube-apiserver has now of sel's namespace and labels, the same sandboxes each at
// the same resourceVersion. It asks with a list of their metadata (names and
// resourceVersions, not the objects), with c.mu released meanwhile; c.mu is held when it
// returns, either way, and on true the cache has not changed since the comparison.
//
// A quiet cache cannot show that it has reached etcd's current revision: the informer learns
// of later revisions only from a bookmark, about once a minute, and etcd's revision moves with
// every other resource. But if nothing it selects differs from what the kube-apiserver has,
// nothing selected changed since the cache's revision (a sandbox created, deleted, changed,
// or come into or gone out of the labels would differ), and the cache's answer is the
// kube-apiserver's, at the cache's revision. This costs the kube-apiserver the selection's
// metadata instead of its objects, and sandbox-apiserver no conversion.
func (c *WatchCache) currentThoughQuietLocked(ctx context.Context, err error, f freshness, rvParam string, sel selection) bool {
	if !errors.Is(err, errNotFresh) || !f.quiet || rvParam != "" || c.current == nil {
		return false
	}
	c.mu.Unlock()
	list := batchSandboxMetadata()
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel.label}}
	if sel.namespace != "" {
		opts = append(opts, client.InNamespace(sel.namespace))
	}
	err = c.current.List(ctx, list, opts...)
	c.mu.Lock()
	if err != nil || !c.ready {
		klog.V(4).InfoS("Comparing the sandbox cache with the kube-apiserver", "err", err)
		return false
	}
	compared := selection{namespace: sel.namespace, label: sel.label, field: fields.Everything()}
	n := 0
	for _, o := range c.snapshotLocked(sel.namespace) {
		if compared.matches(o) {
			n++
		}
	}
	if n != len(list.Items) {
		return false
	}
	for i := range list.Items {
		m := &list.Items[i]
		if o := c.objects[m.Namespace][m.Name]; o == nil || o.ResourceVersion != m.ResourceVersion {
			return false
		}
	}
	return true
}

func (c *WatchCache) freshLocked(f freshness) bool {
	if c.rv < f.rv {
		return false
	}
	if f.absent != nil && c.objects[f.absent.Namespace][f.absent.Name] != nil {
		return false
	}
	for _, p := range c.pendingDeletes {
		if p.seq <= f.deleteSeq {
			return false
		}
	}
	return true
}

// errNotFresh: the cache did not reach what the request needs within freshTimeout (or, for a
// quiet one, stopped moving first).
var errNotFresh = errors.New("the sandbox cache is behind")

// waitFreshLocked waits, with c.mu held (released while it waits), until the cache serves and
// is as fresh as f. It returns errNotServing, errNotFresh after freshTimeout (for f.quiet, as
// soon as the cache has not moved for quietGap), or the context's error.
func (c *WatchCache) waitFreshLocked(ctx context.Context, f freshness) error {
	var timeout <-chan time.Time
	for {
		if !c.ready {
			return errNotServing
		}
		if c.freshLocked(f) {
			return nil
		}
		var quiet clock.Timer
		if f.quiet {
			still := c.clock.Since(c.advanced)
			if still >= quietGap {
				return errNotFresh
			}
			quiet = c.clock.NewTimer(quietGap - still)
		}
		if timeout == nil {
			timer := c.clock.NewTimer(freshTimeout)
			defer timer.Stop()
			timeout = timer.C()
			if f.asked && f.rv > c.rv {
				// A bookmark may have brought the informer there already; one that comes
				// later counts at the next catchUp.
				c.kickRun()
			}
		}
		var quietC <-chan time.Time
		if quiet != nil {
			quietC = quiet.C()
		}
		changed := c.changed
		c.mu.Unlock()
		var err error
		select {
		case <-changed:
		case <-quietC:
			// Checked again above.
		case <-timeout:
			err = errNotFresh
		case <-ctx.Done():
			err = ctx.Err()
		}
		if quiet != nil {
			quiet.Stop()
		}
		c.mu.Lock()
		if err != nil {
			return err
		}
	}
}

// sendBookmarks tells every watcher that asked for bookmarks the cache's resourceVersion.
func (c *WatchCache) sendBookmarks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		return
	}
	for w := range c.watchers {
		if w.bookmarks {
			// Optional: a watcher too busy for one gets the next.
			w.enqueue(delivery{typ: watch.Bookmark, obj: bookmark(c.rv, false)}, c.maxPending)
		}
	}
}

func bookmark(rv uint64, initialEventsEnd bool) *sandboxv1alpha1.Sandbox {
	obj := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatUint(rv, 10)}}
	if initialEventsEnd {
		obj.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return obj
}

// list answers a list from the cache; served is false for a request the kube-apiserver answers.
//
// limit is ignored and no continue token is returned: the API conventions let a server return
// the whole collection whatever the limit, and clients follow continue only when it is set. A
// request that carries a continue token (from the kube-apiserver, before this cache) or asks
// for an Exact resourceVersion, which only etcd has, goes to the kube-apiserver, as does any
// request the cache cannot answer within freshTimeout.
func (c *WatchCache) list(ctx context.Context, opts *metainternalversion.ListOptions) (_ *sandboxv1alpha1.SandboxList, served bool, _ error) {
	if c == nil {
		return nil, false, nil
	}
	if opts == nil {
		opts = &metainternalversion.ListOptions{}
	}
	if opts.Continue != "" || opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
		return nil, false, nil
	}
	minRV, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return nil, true, err
	}
	sel := newSelection(ctx, opts)
	var recent freshness
	if opts.ResourceVersion == "" {
		if recent, err = c.mostRecent(ctx, sel); err != nil {
			klog.V(4).InfoS("Listing sandboxes from the kube-apiserver: it did not say what is current", "err", err)
			return nil, false, nil
		}
	}

	c.mu.Lock()
	f := c.freshnessLocked(opts.ResourceVersion, minRV, recent)
	if err := c.waitFreshLocked(ctx, f); err != nil && !c.currentThoughQuietLocked(ctx, err, f, opts.ResourceVersion, sel) {
		rv := c.rv
		c.mu.Unlock()
		switch {
		case errors.Is(err, errNotServing):
			return nil, false, nil
		case errors.Is(err, errNotFresh):
			klog.V(4).InfoS("Listing sandboxes from the kube-apiserver: the cache did not catch up in time", "resourceVersion", opts.ResourceVersion, "cache", rv, "needed", f.rv)
			return nil, false, nil
		}
		return nil, true, waitError(err)
	}
	objs := c.snapshotLocked(sel.namespace)
	rv := c.rv
	c.mu.Unlock()

	selected := objs[:0]
	for _, o := range objs {
		if sel.matches(o) {
			selected = append(selected, o)
		}
	}
	// Sorted as etcd lists them, by key; pointers, so that sorting moves no sandbox.
	sort.Slice(selected, func(i, j int) bool {
		a, b := selected[i], selected[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	out := &sandboxv1alpha1.SandboxList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10)}}
	out.Items = make([]sandboxv1alpha1.Sandbox, len(selected))
	for i, o := range selected {
		out.Items[i] = *o
	}
	return out, true, nil
}

// snapshotLocked copies the pointers of the sandboxes of namespace ("" for all); they are
// filtered and sorted outside the lock, where nobody changes them.
func (c *WatchCache) snapshotLocked(namespace string) []*sandboxv1alpha1.Sandbox {
	if namespace != "" {
		objs := make([]*sandboxv1alpha1.Sandbox, 0, len(c.objects[namespace]))
		for _, o := range c.objects[namespace] {
			objs = append(objs, o)
		}
		return objs
	}
	objs := make([]*sandboxv1alpha1.Sandbox, 0, c.count)
	for _, byName := range c.objects {
		for _, o := range byName {
			objs = append(objs, o)
		}
	}
	return objs
}

// watch answers a watch from the cache; served is false for one the kube-apiserver answers:
// one whose resourceVersion the cache has not reached in time (the kube-apiserver's answer to a
// version nobody has reached is its own 504). As in the kube-apiserver, once the request is
// understood, a resourceVersion too old is the watch's only event, an ERROR.
//
//   - sendInitialEvents=true, or resourceVersion "" or "0" without sendInitialEvents: an
//     ADDED for every sandbox selected, then the changes after; with allowWatchBookmarks and
//     sendInitialEvents, a BOOKMARK annotated k8s.io/initial-events-end between them. "" first
//     waits for what is current (mostRecent), "N" for the cache to reach N.
//   - resourceVersion "N" without sendInitialEvents (or with it false): the changes after N,
//     from the ring; 410 Gone if the ring no longer reaches back to N.
//   - sendInitialEvents=false with "" or "0": the changes from now on ("" after what is
//     current).
func (c *WatchCache) watch(ctx context.Context, opts *metainternalversion.ListOptions) (_ watch.Interface, served bool, _ error) {
	if c == nil {
		return nil, false, nil
	}
	if opts == nil {
		opts = &metainternalversion.ListOptions{}
	}
	requested, err := parseResourceVersion(opts.ResourceVersion)
	if err != nil {
		return nil, true, err
	}
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	legacy := opts.SendInitialEvents == nil && (opts.ResourceVersion == "" || opts.ResourceVersion == "0")
	sel := newSelection(ctx, opts)
	var recent freshness
	if opts.ResourceVersion == "" {
		if recent, err = c.mostRecent(ctx, sel); err != nil {
			klog.V(4).InfoS("Watching sandboxes at the kube-apiserver: it did not say what is current", "err", err)
			return nil, false, nil
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.freshnessLocked(opts.ResourceVersion, requested, recent)
	switch err := c.waitFreshLocked(ctx, f); {
	case errors.Is(err, errNotServing):
		return nil, false, nil
	case c.currentThoughQuietLocked(ctx, err, f, opts.ResourceVersion, sel):
		// The cache holds what the kube-apiserver has of the selection: it serves the watch.
	case errors.Is(err, errNotFresh):
		// The cache has not reached what is current, or the client's resourceVersion (one a
		// list by the kube-apiserver gave it, etcd's revision then): the kube-apiserver serves
		// the watch, and answers a resourceVersion it has not reached either.
		klog.V(4).InfoS("Watching sandboxes at the kube-apiserver: the cache did not catch up in time", "resourceVersion", opts.ResourceVersion, "cache", c.rv, "needed", f.rv)
		return nil, false, nil
	case err != nil:
		return nil, true, waitError(err)
	}

	// What the watcher is sent first, taken under the same lock as its registration: no
	// change is lost between the two, nor sent twice.
	var first []cacheEvent
	var end *sandboxv1alpha1.Sandbox
	switch {
	case initial || legacy:
		objs := c.snapshotLocked(sel.namespace)
		first = make([]cacheEvent, len(objs))
		for i, o := range objs {
			first[i] = cacheEvent{typ: watch.Added, obj: o}
		}
		if initial && opts.AllowWatchBookmarks {
			end = bookmark(c.rv, true)
		}
	case opts.ResourceVersion == "" || opts.ResourceVersion == "0":
		// sendInitialEvents=false: from now on.
	default:
		if requested < c.ringStart {
			return errorWatch(apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", requested, c.ringStart))), true, nil
		}
		first = c.ring.since(requested)
	}
	w := &cacheWatcher{
		cache:     c,
		sel:       sel,
		bookmarks: opts.AllowWatchBookmarks,
		result:    make(chan watch.Event, resultBuffer),
		done:      make(chan struct{}),
		signal:    make(chan struct{}, 1),
	}
	c.watchers[w] = struct{}{}
	go w.run(ctx, first, end)
	return w, true, nil
}

func parseResourceVersion(rv string) (uint64, error) {
	if rv == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: %v", rv, err))
	}
	return n, nil
}

// waitError is the answer to a request whose wait for the cache ended with its context.
func waitError(err error) error {
	return apierrors.NewTimeoutError(fmt.Sprintf("waiting for the sandbox cache: %v", err), tooLargeRetrySeconds)
}

// cacheEvent is a change of one sandbox, as the ring holds it.
type cacheEvent struct {
	typ watch.EventType
	// obj is the sandbox after the change; for a deletion, its last state, at the deletion's
	// resourceVersion. prev is the one before (nil for an addition), for selector transitions.
	obj, prev *sandboxv1alpha1.Sandbox
	rv        uint64
}

// ring holds the last events in resourceVersion order.
type ring struct {
	events []cacheEvent
	head   int
	n      int
}

func newRing(size int) ring {
	return ring{events: make([]cacheEvent, size)}
}

// push adds e and returns the oldest event if it made room for e.
func (r *ring) push(e cacheEvent) (dropped cacheEvent, ok bool) {
	if len(r.events) == 0 {
		return e, true
	}
	if r.n == len(r.events) {
		dropped, ok = r.events[r.head], true
		r.events[r.head] = e
		r.head = (r.head + 1) % len(r.events)
		return dropped, ok
	}
	r.events[(r.head+r.n)%len(r.events)] = e
	r.n++
	return cacheEvent{}, false
}

func (r *ring) at(i int) *cacheEvent { return &r.events[(r.head+i)%len(r.events)] }

// since copies the events after resourceVersion rv.
func (r *ring) since(rv uint64) []cacheEvent {
	first := sort.Search(r.n, func(i int) bool { return r.at(i).rv > rv })
	out := make([]cacheEvent, 0, r.n-first)
	for i := first; i < r.n; i++ {
		out = append(out, *r.at(i))
	}
	return out
}

func (r *ring) reset() {
	clear(r.events)
	r.head, r.n = 0, 0
}

// selection is what a watcher or list selects: a namespace ("" for all) and selectors on the
// sandbox as shown (status.phase is the Sandbox's, Terminating included).
type selection struct {
	namespace string
	label     labels.Selector
	field     fields.Selector
}

func newSelection(ctx context.Context, opts *metainternalversion.ListOptions) selection {
	s := selection{namespace: genericapirequest.NamespaceValue(ctx), label: labels.Everything(), field: fields.Everything()}
	if opts.LabelSelector != nil {
		s.label = opts.LabelSelector
	}
	if opts.FieldSelector != nil {
		s.field = opts.FieldSelector
	}
	return s
}

func (s selection) matches(sbx *sandboxv1alpha1.Sandbox) bool {
	if s.namespace != "" && sbx.Namespace != s.namespace {
		return false
	}
	if !s.label.Empty() && !s.label.Matches(labels.Set(sbx.Labels)) {
		return false
	}
	if !s.field.Empty() && !s.field.Matches(fields.Set{
		"metadata.name":      sbx.Name,
		"metadata.namespace": sbx.Namespace,
		"status.phase":       string(sbx.Status.Phase),
	}) {
		return false
	}
	return true
}

// deliver is what a watcher with this selection is sent of e, as the kube-apiserver's cacher
// decides it: a sandbox that comes into the selection is ADDED, one that leaves it DELETED (as
// it was, at the change's resourceVersion), one that stays MODIFIED.
func (s selection) deliver(e *cacheEvent) (delivery, bool) {
	if e.typ == watch.Deleted {
		last := e.prev
		if last == nil {
			last = e.obj
		}
		return delivery{typ: watch.Deleted, obj: e.obj}, s.matches(last)
	}
	now := s.matches(e.obj)
	before := e.prev != nil && s.matches(e.prev)
	switch {
	case now && before:
		return delivery{typ: watch.Modified, obj: e.obj}, true
	case now:
		return delivery{typ: watch.Added, obj: e.obj}, true
	case before:
		return delivery{typ: watch.Deleted, obj: e.prev, rv: e.obj.ResourceVersion}, true
	}
	return delivery{}, false
}

// delivery is one event for one watcher, its object still shared.
type delivery struct {
	typ watch.EventType
	obj *sandboxv1alpha1.Sandbox
	// rv, when set, replaces the object's resourceVersion.
	rv string
}

// event gives the watcher a copy of the sandbox's top level: the encoder sets apiVersion and
// kind on the object it writes, which on a shared object would race with the other watchers.
// What lies below (maps, slices) is only read.
func (d delivery) event() watch.Event {
	obj := *d.obj
	if d.rv != "" {
		obj.ResourceVersion = d.rv
	}
	return watch.Event{Type: d.typ, Object: &obj}
}

// cacheWatcher is one watch served from the cache.
type cacheWatcher struct {
	cache     *WatchCache
	sel       selection
	bookmarks bool

	result chan watch.Event
	// done is closed when the watcher stops: by its client (Stop), by its request ending, or
	// because it fell behind.
	done      chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	queue []delivery
	// signal tells run that the queue has events.
	signal chan struct{}
}

var _ watch.Interface = &cacheWatcher{}

// ResultChan implements watch.Interface.
func (w *cacheWatcher) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface: the cache forgets the watcher and its goroutine ends.
func (w *cacheWatcher) Stop() {
	w.cache.mu.Lock()
	delete(w.cache.watchers, w)
	w.cache.mu.Unlock()
	w.close()
}

func (w *cacheWatcher) close() {
	w.closeOnce.Do(func() { close(w.done) })
}

// dispatchLocked queues e for every watcher that selects it, never waiting for one: a watcher
// whose queue is full is closed, and its client resumes from the last event it got.
func (c *WatchCache) dispatchLocked(e cacheEvent) {
	for w := range c.watchers {
		d, ok := w.sel.deliver(&e)
		if !ok {
			continue
		}
		if !w.enqueue(d, c.maxPending) {
			klog.V(2).InfoS("Closing a sandbox watch that fell behind", "pending", c.maxPending, "namespace", w.sel.namespace,
				"labels", w.sel.label.String(), "fields", w.sel.field.String())
			delete(c.watchers, w)
			w.close()
		}
	}
}

func (w *cacheWatcher) enqueue(d delivery, limit int) bool {
	w.mu.Lock()
	if len(w.queue) >= limit {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, d)
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
	return true
}

// run sends first (what the watch starts with), the end-of-initial-events bookmark, then the
// queue, until the watcher stops or its request ends.
func (w *cacheWatcher) run(ctx context.Context, first []cacheEvent, end *sandboxv1alpha1.Sandbox) {
	defer close(w.result)
	defer w.Stop()
	for i := range first {
		if d, ok := w.sel.deliver(&first[i]); ok && !w.send(ctx, d.event()) {
			return
		}
	}
	first = nil
	if end != nil && !w.send(ctx, watch.Event{Type: watch.Bookmark, Object: end}) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.done:
			return
		case <-w.signal:
		}
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, d := range batch {
			if !w.send(ctx, d.event()) {
				return
			}
		}
	}
}

func (w *cacheWatcher) send(ctx context.Context, ev watch.Event) bool {
	select {
	case w.result <- ev:
		return true
	case <-w.done:
		return false
	case <-ctx.Done():
		return false
	}
}

// errorWatch is a watch whose only event is err, as the kube-apiserver answers a watch it
// understood but cannot serve.
func errorWatch(err error) watch.Interface {
	ch := make(chan watch.Event, 1)
	var status metav1.Status
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		status = s.Status()
	} else {
		status = apierrors.NewInternalError(err).Status()
	}
	ch <- watch.Event{Type: watch.Error, Object: &status}
	close(ch)
	return errWatcher{ch}
}

type errWatcher struct{ ch chan watch.Event }

// ResultChan implements watch.Interface.
func (w errWatcher) ResultChan() <-chan watch.Event { return w.ch }

// Stop implements watch.Interface.
func (errWatcher) Stop() {}

// RecordWrites returns c, whose writes of BatchSandboxes the cache counts as this server's
// (for the Renewer, which writes expiries outside the sandboxes storage).
func (c *WatchCache) RecordWrites(cl client.Client) client.Client {
	if c == nil {
		return cl
	}
	return writeRecorder{Client: cl, cache: c}
}

type writeRecorder struct {
	client.Client
	cache *WatchCache
}

// Update implements client.Writer.
func (r writeRecorder) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := r.Client.Update(ctx, obj, opts...); err != nil {
		return err
	}
	if len((&client.UpdateOptions{}).ApplyOptions(opts).DryRun) == 0 {
		r.record(obj)
	}
	return nil
}

// Patch implements client.Writer.
func (r writeRecorder) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := r.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	if len((&client.PatchOptions{}).ApplyOptions(opts).DryRun) == 0 {
		r.record(obj)
	}
	return nil
}

func (r writeRecorder) record(obj client.Object) {
	if _, ok := obj.(*controlv1alpha1.BatchSandbox); ok {
		r.cache.wrote(obj.GetResourceVersion())
	}
}
