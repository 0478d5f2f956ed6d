package nodefilter

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// syncAll does the Syncs of pods to m as one group, as Sync does with those that wait for mu
// together, and returns each pod's result.
func syncAll(t *testing.T, f *Filter, pods []Pod, m *egressapi.Matcher) []*syncReq {
	t.Helper()
	reqs := make([]*syncReq, len(pods))
	for i, p := range pods {
		want, err := buildPod(p, m, f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = &syncReq{want: want, done: make(chan struct{})}
	}
	f.mu.Lock()
	f.syncGroup(reqs)
	f.mu.Unlock()
	for _, r := range reqs {
		select {
		case <-r.done:
		default:
			t.Fatalf("pod %s: not done by its group", r.want.pod.UID)
		}
	}
	return reqs
}

// holds checks that the kernel holds each pod's filter for m exactly: a Sync changes nothing.
func holds(t *testing.T, f *Filter, pods []Pod, m *egressapi.Matcher) {
	t.Helper()
	for _, p := range pods {
		if changed, err := f.Sync(p, m); err != nil || changed {
			t.Errorf("pod %s: a Sync again changed %v (want false), err %v", p.UID, changed, err)
		}
	}
	got, err := f.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(pods) {
		t.Errorf("the filter holds %d pods, want %d", len(got), len(pods))
	}
}

// TestSyncGroup: Syncs done together go in as few transactions as keep each batch planned
// against what its transaction applies to, and leave the kernel as Syncs one at a time would.
func TestSyncGroup(t *testing.T) {
	requireRoot(t)
	f, pods, denyAll, own := benchFilter(t, 24)

	t.Run("claims of distinct pods go in one transaction", func(t *testing.T) {
		before := f.transactions
		for _, r := range syncAll(t, f, pods, own) {
			if r.err != nil || !r.changed {
				t.Errorf("pod %s: changed %v, err %v", r.want.pod.UID, r.changed, r.err)
			}
		}
		if n := f.transactions - before; n != 1 {
			t.Errorf("%d transactions for %d pods, want 1", n, len(pods))
		}
		holds(t, f, pods, own)
	})

	t.Run("a batch that changes shared objects goes first, alone", func(t *testing.T) {
		// The tables gone (another program deleted them): the first pod's batch makes them
		// and the shared chains and maps again; the others' are planned after, on top.
		f.mu.Lock()
		f.nft.DelTable(f.inet)
		f.nft.DelTable(f.netdev)
		err := f.nft.Flush()
		f.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		before := f.transactions
		for _, r := range syncAll(t, f, pods, denyAll) {
			if r.err != nil || !r.changed {
				t.Errorf("pod %s: changed %v, err %v", r.want.pod.UID, r.changed, r.err)
			}
		}
		if n := f.transactions - before; n != 2 {
			t.Errorf("%d transactions, want 2 (the shared objects with one pod, then the other pods)", n)
		}
		holds(t, f, pods, denyAll)
	})

	t.Run("a refused pod fails alone", func(t *testing.T) {
		refused := pods[5].UID
		f.refuse = func(uid string) error {
			if uid == refused {
				return errors.New("refused")
			}
			return nil
		}
		defer func() { f.refuse = nil }()
		for _, r := range syncAll(t, f, pods, own) {
			switch {
			case r.want.pod.UID == refused && (r.err == nil || r.changed):
				t.Errorf("refused pod %s: changed %v, err %v; want an error", refused, r.changed, r.err)
			case r.want.pod.UID != refused && (r.err != nil || !r.changed):
				t.Errorf("pod %s: changed %v, err %v", r.want.pod.UID, r.changed, r.err)
			}
		}
		f.refuse = nil
		others := slices.DeleteFunc(slices.Clone(pods), func(p Pod) bool { return p.UID == refused })
		for _, p := range others {
			if changed, err := f.Sync(p, own); err != nil || changed {
				t.Errorf("pod %s: a Sync again changed %v, err %v", p.UID, changed, err)
			}
		}
		// The refused pod kept what it had.
		if changed, err := f.Sync(pods[5], denyAll); err != nil || changed {
			t.Errorf("refused pod: a Sync of what it had changed %v, err %v", changed, err)
		}
	})

	t.Run("pods that share an interface or an address wait for the next round", func(t *testing.T) {
		moved := pods[3]
		moved.UID = "uid-new-on-veth3" // pods[3]'s interface, given to a new pod
		for _, p := range pods[2:4] {
			if _, err := f.Sync(p, denyAll); err != nil {
				t.Fatal(err)
			}
		}
		before := f.transactions
		reqs := syncAll(t, f, []Pod{pods[2], pods[3], moved}, own)
		for _, r := range reqs {
			if r.err != nil {
				t.Errorf("pod %s: %v", r.want.pod.UID, r.err)
			}
		}
		if n := f.transactions - before; n != 2 {
			t.Errorf("%d transactions, want 2: the new pod on veth3 planned after the old one's", n)
		}
		// The new pod holds the interface and the addresses, as if it had come alone after.
		if changed, err := f.Sync(moved, own); err != nil || changed {
			t.Errorf("new pod on veth3: a Sync again changed %v, err %v", changed, err)
		}
	})
}

// TestSyncConcurrentClaims: Syncs from many goroutines at once (the agent's workers) each end
// with their own pod's filter in force.
func TestSyncConcurrentClaims(t *testing.T) {
	requireRoot(t)
	f, pods, denyAll, own := benchFilter(t, 32)
	for round, m := range []*egressapi.Matcher{own, denyAll, own} {
		var wg sync.WaitGroup
		errs := make(chan error, len(pods))
		for _, p := range pods {
			wg.Go(func() {
				if changed, err := f.Sync(p, m); err != nil || !changed {
					errs <- fmt.Errorf("round %d, pod %s: changed %v, err %v", round, p.UID, changed, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		holds(t, f, pods, m)
	}
}

// TestFailedTransactionLeavesNothing: a transaction that fails while it is being queued sends
// nothing, then or later. The nftables connection keeps what was queued until its next Flush,
// which would send it inside the next pod's transaction; transact starts that one on a new
// connection.
func TestFailedTransactionLeavesNothing(t *testing.T) {
	requireRoot(t)
	f, pods, denyAll, own := benchFilter(t, 2)
	leak := &nftables.Table{Name: "leaked", Family: nftables.TableFamilyINet}
	// An anonymous set cannot take elements: queueing fails after the table is queued.
	bad := newBatch()
	bad.addTables = append(bad.addTables, leak)
	bad.addElems = append(bad.addElems, elemOp{set: &nftables.Set{Table: f.inet, Name: "__set0", Anonymous: true}})

	f.mu.Lock()
	err := f.apply([]plannedSync{{b: bad}})
	f.mu.Unlock()
	if !errors.Is(err, errQueue) {
		t.Fatalf("apply of a batch that cannot be queued: %v, want errQueue", err)
	}
	// The next transaction (a claim) and a learned name go through, alone.
	if changed, err := f.Sync(pods[0], own); err != nil || !changed {
		t.Fatalf("sync after the failure: changed %v, err %v", changed, err)
	}
	if err := f.Learn(pods[0].UID, "pypi.org", []netip.Addr{netip.MustParseAddr("10.99.0.1")}, time.Minute); err != nil {
		t.Fatalf("learn after the failure: %v", err)
	}
	f.mu.Lock()
	have, err := f.findTable(leak)
	reopened := f.reopened
	f.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if have != nil {
		t.Errorf("table %s exists: the failed transaction's queued part was sent with a later one", leak.Name)
	}
	if reopened != 1 {
		t.Errorf("the connection was opened again %d times, want 1", reopened)
	}
	// Both pods hold what they were given: the claim's policy, and deny-all.
	for i, m := range []*egressapi.Matcher{own, denyAll} {
		if changed, err := f.Sync(pods[i], m); err != nil || changed {
			t.Errorf("pod %s: a Sync again changed %v (want false), err %v", pods[i].UID, changed, err)
		}
	}
}
