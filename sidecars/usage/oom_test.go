package usage

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// sample is a read of a pod's OOM-kill count; subscribe: a subscription starts before it.
type sample struct {
	uid       string
	oom       uint64
	subscribe bool
}

// recordAll records the samples in order, at t0 plus a second each, and subscribes where one
// asks to; initial is the state the subscription got, reports what it got after.
func recordAll(t *testing.T, s *Sampler, samples []sample) (initial []string, reports []string) {
	t.Helper()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var ch <-chan nodeapi.OOMReport
	for i, smp := range samples {
		if smp.subscribe && ch == nil {
			var init []nodeapi.OOMReport
			var cancel func()
			init, ch, cancel = s.SubscribeOOMs()
			t.Cleanup(cancel)
			for _, r := range init {
				initial = append(initial, fmt.Sprintf("%s %d", r.PodUID, r.OOMKills))
			}
		}
		p := Pod{UID: smp.uid, Namespace: "ns", Name: "pod-" + smp.uid, Sandbox: "sbx"}
		s.Observe(p)
		st := fullStats(p, t0.Add(time.Duration(i)*time.Second), 0)
		st.Memory.OOMKills, st.Memory.LimitBytes, st.Memory.PeakBytes = smp.oom, 256<<20, 200<<20
		s.mu.RLock()
		state := s.pods[smp.uid]
		s.mu.RUnlock()
		if !s.record(state, st) {
			t.Fatalf("record of %s: false", smp.uid)
		}
	}
	for ch != nil {
		select {
		case r := <-ch:
			reports = append(reports, fmt.Sprintf("%s %d %d %d", r.PodUID, r.OOMKills, r.LimitBytes, r.PeakBytes))
		default:
			ch = nil
		}
	}
	return initial, reports
}

// TestSubscribeOOMs: the initial state names the pods with kills; after it, each sample whose
// count grew is a report, once, and nothing else is.
func TestSubscribeOOMs(t *testing.T) {
	tests := []struct {
		name        string
		samples     []sample
		wantInitial []string
		wantReports []string
	}{
		{
			name:        "no kill: nothing",
			samples:     []sample{{uid: "a", subscribe: true}, {uid: "a"}, {uid: "b"}},
			wantReports: nil,
		},
		{
			name:        "a process killed, then two more in one sample",
			samples:     []sample{{uid: "a", subscribe: true}, {uid: "a", oom: 1}, {uid: "a", oom: 1}, {uid: "a", oom: 3}},
			wantReports: []string{"a 1 268435456 209715200", "a 3 268435456 209715200"},
		},
		{
			name:        "kills before the subscription are its initial state, not reports",
			samples:     []sample{{uid: "a", oom: 2}, {uid: "b"}, {uid: "c", oom: 1}, {uid: "a", oom: 2, subscribe: true}, {uid: "c", oom: 2}},
			wantInitial: []string{"a 2", "c 1"},
			wantReports: []string{"c 2 268435456 209715200"},
		},
		{
			name:        "a pod's first sample with kills already (a kill before the first read) is news",
			samples:     []sample{{uid: "a", subscribe: true}, {uid: "b", oom: 1}},
			wantReports: []string{"b 1 268435456 209715200"},
		},
		{
			name:        "a cgroup v1 count that went back (the killed container's cgroup went) is no kill; the next is",
			samples:     []sample{{uid: "a", oom: 1, subscribe: true}, {uid: "a", oom: 0}, {uid: "a", oom: 1}},
			wantReports: []string{"a 1 268435456 209715200", "a 2 268435456 209715200"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSampler(newFakeReader(), time.Hour, 1)
			initial, reports := recordAll(t, s, tt.samples)
			if diff := cmp.Diff(tt.wantInitial, initial); diff != "" {
				t.Errorf("initial (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantReports, reports); diff != "" {
				t.Errorf("reports (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSubscribeOOMsDropsLaggard: a subscriber that reads nothing is dropped once its buffer is
// full, without holding up the sampling, and one that reads goes on; cancel is idempotent.
func TestSubscribeOOMsDropsLaggard(t *testing.T) {
	s := NewSampler(newFakeReader(), time.Hour, 1)
	_, lazy, cancelLazy := s.SubscribeOOMs()
	defer cancelLazy()
	_, keen, cancelKeen := s.SubscribeOOMs()
	n := oomSubscriberBuffer + 10
	finished := make(chan []uint64)
	go func() {
		// Each sample, then what the reading subscriber got of it: it keeps up.
		var got []uint64
		for i := 1; i <= n; i++ {
			recordAll(t, s, []sample{{uid: "a", oom: uint64(i)}})
			select {
			case r := <-keen:
				got = append(got, r.OOMKills)
			default:
			}
		}
		finished <- got
	}()
	var got []uint64
	select {
	case got = <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("sampling was held up by a subscriber")
	}
	left := 0
	for range lazy { // closed: dropped
		left++
	}
	if left != oomSubscriberBuffer {
		t.Errorf("the dropped subscriber had %d reports, want its buffer's %d", left, oomSubscriberBuffer)
	}
	cancelKeen()
	cancelKeen()
	if _, open := <-keen; open {
		t.Error("the reading subscriber's channel open after cancel")
	}
	if len(got) != n || got[n-1] != uint64(n) {
		t.Errorf("the reading subscriber got %d reports, want %d", len(got), n)
	}
}

// oomReader is a reader whose pods' OOM-kill counts the test sets.
type oomReader struct {
	mu   sync.Mutex
	ooms map[string]uint64
}

func (f *oomReader) Read(_ context.Context, p Pod) *nodeapi.PodStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := fullStats(p, time.Now(), 0)
	st.Memory.OOMKills = f.ooms[p.UID]
	return st
}

func (f *oomReader) Forget(string) {}

func (f *oomReader) set(uid string, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ooms[uid] = n
}

// TestSamplerReportsOOMs: a running sampler reports a kill at the sample that sees it.
func TestSamplerReportsOOMs(t *testing.T) {
	r := &oomReader{ooms: map[string]uint64{}}
	s := NewSampler(r, 10*time.Millisecond, 2)
	runSampler(t, s)
	initial, ch, cancel := s.SubscribeOOMs()
	defer cancel()
	if len(initial) != 0 {
		t.Fatalf("initial state %+v, want none", initial)
	}
	s.Observe(Pod{UID: "a", Namespace: "ns", Name: "pod-a", Sandbox: "sbx", Replica: 2})
	poll(t, "pod a read", func() bool { _, ok := s.Stats("a"); return ok })
	r.set("a", 1)
	select {
	case rep := <-ch:
		want := nodeapi.OOMReport{PodUID: "a", Namespace: "ns", Pod: "pod-a", Sandbox: "sbx", Replica: 2, OOMKills: 1}
		rep.Timestamp = time.Time{}
		if diff := cmp.Diff(want, rep); diff != "" {
			t.Errorf("report (-want +got):\n%s", diff)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report of the kill")
	}
	select {
	case rep := <-ch:
		t.Errorf("a report without a new kill: %+v", rep)
	case <-time.After(50 * time.Millisecond):
	}
}
