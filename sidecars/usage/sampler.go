package usage

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// oomSubscriberBuffer is how many reports a subscriber of OOM kills (SubscribeOOMs) may be
// behind before it is dropped: far more than the pods of a node whose counts grow in one
// sample, so only a subscriber that stopped reading is.
const oomSubscriberBuffer = 256

// DefaultWorkers is how many pods are read at once: a read is a few small files, two
// containerd calls and a walk of the pod's emptyDirs and writable layer, mostly waiting on
// the disk and on containerd; more at once would only take the node's cores from its
// sandboxes.
const DefaultWorkers = 4

// DefaultFirstRead is how long the node agent waits before it first reads a pod that has just
// begun to serve a sandbox, plus as much again at random: that moment is the claim and the
// sandbox's first exec, when a burst of sandboxes needs the node's CPU most; a read (two
// containerd calls and a walk of the writable layer) waits until it is over, and the reads of
// a burst spread out instead of coming together.
const DefaultFirstRead = 2 * time.Second

// Sampler reads the figures of every pod it is told of (Observe) every interval, and keeps
// the last: the usage endpoints and the metrics answer from it, so that an answer costs no
// read of the node. It reads a new pod FirstRead (and at most as much again) after it is
// observed, and each pod again interval after its last read, so the reads of many pods spread
// over the interval rather than coming all at once.
type Sampler struct {
	// FirstRead delays the first read of a new pod (see DefaultFirstRead); 0 reads it at once.
	// Set it before Run.
	FirstRead time.Duration

	reader   Reader
	interval time.Duration
	workers  int
	queue    workqueue.TypedDelayingInterface[string]

	mu   sync.RWMutex
	pods map[string]*podState
	// seq orders the pods by when they were observed serving their sandbox.
	seq uint64
	// oomSubs are the subscribers to OOM kills (SubscribeOOMs).
	oomSubs map[chan nodeapi.OOMReport]struct{}
}

// podState is what the sampler keeps of a pod. Guarded by Sampler.mu.
type podState struct {
	pod Pod
	seq uint64
	// last is the last sample, nil before the first.
	last *nodeapi.PodStats
	// cpu is the CPU counter of the last sample that had one, read at cpuAt.
	cpu     uint64
	cpuAt   time.Time
	haveCPU bool
	// oomRaw is the last OOM-kill count read; oomBase what earlier counts lost (cgroup v1's
	// counts go with the cgroup of the killed container), so that the count never goes back.
	oomRaw, oomBase uint64
}

// NewSampler makes a sampler of r; Run starts it. interval 0 is nodeapi.SampleInterval,
// workers 0 DefaultWorkers.
func NewSampler(r Reader, interval time.Duration, workers int) *Sampler {
	if interval <= 0 {
		interval = nodeapi.SampleInterval
	}
	if workers <= 0 {
		workers = DefaultWorkers
	}
	return &Sampler{
		reader: r, interval: interval, workers: workers,
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "usage"}),
		pods:  map[string]*podState{},
	}
}

// Run reads pods until ctx ends, and returns once its workers have stopped.
func (s *Sampler) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() {
			for s.sampleNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
}

func (s *Sampler) sampleNext(ctx context.Context) bool {
	uid, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	defer s.queue.Done(uid)
	s.mu.RLock()
	st := s.pods[uid]
	var pod Pod
	if st != nil {
		pod = st.pod
	}
	s.mu.RUnlock()
	if st == nil {
		return true // forgotten since it was queued
	}
	stats := s.reader.Read(ctx, pod)
	if s.record(st, stats) {
		s.queue.AddAfter(uid, s.interval)
	} else {
		// Forgotten while it was read: the reader may have kept something of it again.
		s.reader.Forget(uid)
	}
	return true
}

// record keeps stats as st's last sample, with the rate of its CPU counter since the sample
// before; false if st is not the pod's state any more (forgotten meanwhile).
func (s *Sampler) record(st *podState, stats *nodeapi.PodStats) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pods[stats.PodUID] != st {
		return false
	}
	if stats.CPU != nil {
		cur := stats.CPU.UsageCoreNanoSeconds
		// A counter that went back (never, for one cgroup) starts a new window.
		if st.haveCPU && cur >= st.cpu && stats.Timestamp.After(st.cpuAt) {
			stats.Window = stats.Timestamp.Sub(st.cpuAt)
			// Nanoseconds of CPU per second are billionths of a core.
			stats.CPU.UsageNanoCores = uint64(float64(cur-st.cpu) / stats.Window.Seconds())
		}
		st.cpu, st.cpuAt, st.haveCPU = cur, stats.Timestamp, true
	}
	grew := false
	if stats.Memory != nil {
		before := st.oomBase + st.oomRaw
		raw := stats.Memory.OOMKills
		if raw < st.oomRaw {
			st.oomBase += st.oomRaw - raw
		}
		st.oomRaw = raw
		stats.Memory.OOMKills = st.oomBase + raw
		grew = stats.Memory.OOMKills > before
	}
	st.last = stats
	if grew {
		s.publishOOMLocked(stats)
	}
	return true
}

// publishOOMLocked tells the subscribers of a pod whose count grew. It never waits: a
// subscriber that has no room left is dropped (its channel closed), so that no reader, slow
// or gone, holds up the sampling of the node; it subscribes again and gets the whole state.
func (s *Sampler) publishOOMLocked(stats *nodeapi.PodStats) {
	r, ok := nodeapi.OOMReportOf(stats)
	if !ok {
		return
	}
	for ch := range s.oomSubs {
		select {
		case ch <- r:
		default:
			klog.InfoS("Dropping a subscriber to OOM kills that fell behind", "buffer", oomSubscriberBuffer)
			delete(s.oomSubs, ch)
			close(ch)
		}
	}
}

// SubscribeOOMs is the node's OOM kills as events: initial holds the last sample of every pod
// whose count is above 0 (by namespace and pod name), and reports then gets a report at each
// sample whose count grew, from the sample after those of initial, so that none is missed or
// told twice. reports is closed by cancel, or when the subscriber fell behind (it was dropped:
// subscribe again). cancel may be called more than once.
func (s *Sampler) SubscribeOOMs() (initial []nodeapi.OOMReport, reports <-chan nodeapi.OOMReport, cancel func()) {
	ch := make(chan nodeapi.OOMReport, oomSubscriberBuffer)
	s.mu.Lock()
	for _, st := range s.pods {
		if r, ok := nodeapi.OOMReportOf(st.last); ok && r.OOMKills > 0 {
			initial = append(initial, r)
		}
	}
	if s.oomSubs == nil {
		s.oomSubs = map[chan nodeapi.OOMReport]struct{}{}
	}
	s.oomSubs[ch] = struct{}{}
	s.mu.Unlock()
	slices.SortFunc(initial, func(a, b nodeapi.OOMReport) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.PodUID, b.PodUID))
	})
	return initial, ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.oomSubs[ch]; ok {
			delete(s.oomSubs, ch)
			close(ch)
		}
	}
}

// Observe tells the sampler of a pod that serves a sandbox (again, or with other labels).
// A new pod is read after FirstRead.
func (s *Sampler) Observe(p Pod) {
	s.mu.Lock()
	st := s.pods[p.UID]
	isNew := st == nil
	switch {
	case isNew:
		s.seq++
		s.pods[p.UID] = &podState{pod: p, seq: s.seq}
	case st.pod != p:
		if st.pod.Sandbox != p.Sandbox || st.pod.Replica != p.Replica {
			// It serves another sandbox now: its series are that sandbox's, and newer than
			// those of any other pod of that sandbox and replica still on the node.
			s.seq++
			st.seq = s.seq
		}
		st.pod = p
		if st.last != nil {
			last := *st.last
			last.Namespace, last.Pod, last.Sandbox, last.Replica = p.Namespace, p.Name, p.Sandbox, p.Replica
			st.last = &last
		}
	}
	s.mu.Unlock()
	if isNew {
		klog.V(4).InfoS("Sampling a sandbox pod", "pod", klog.KRef(p.Namespace, p.Name), "sandbox", klog.KRef(p.Namespace, p.Sandbox), "replica", p.Replica)
		if s.FirstRead > 0 {
			s.queue.AddAfter(p.UID, s.FirstRead+rand.N(s.FirstRead))
		} else {
			s.queue.Add(p.UID)
		}
	}
}

// Forget drops a pod that is gone, or serves no sandbox any more: its figures and its series
// go.
func (s *Sampler) Forget(uid string) {
	s.mu.Lock()
	st := s.pods[uid]
	delete(s.pods, uid)
	s.mu.Unlock()
	if st != nil {
		klog.V(4).InfoS("No longer sampling a pod", "pod", klog.KRef(st.pod.Namespace, st.pod.Name))
		s.reader.Forget(uid)
	}
}

// Stats is the last sample of the pod; false for a pod the sampler does not know, or has
// not read yet.
func (s *Sampler) Stats(uid string) (nodeapi.PodStats, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.pods[uid]
	if st == nil || st.last == nil {
		return nodeapi.PodStats{}, false
	}
	return *st.last, true
}

// List is the last sample of every pod read so far, by namespace and pod name.
func (s *Sampler) List() []nodeapi.PodStats {
	s.mu.RLock()
	out := make([]nodeapi.PodStats, 0, len(s.pods))
	for _, st := range s.pods {
		if st.last != nil {
			out = append(out, *st.last)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b nodeapi.PodStats) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.PodUID, b.PodUID))
	})
	return out
}

// sampled is a pod's last sample, for the collector.
type sampled struct {
	seq   uint64
	stats *nodeapi.PodStats
}

// samples are the last samples of every pod read so far, the newest pods first.
func (s *Sampler) samples() []sampled {
	s.mu.RLock()
	out := make([]sampled, 0, len(s.pods))
	for _, st := range s.pods {
		if st.last != nil {
			out = append(out, sampled{seq: st.seq, stats: st.last})
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b sampled) int { return cmp.Compare(b.seq, a.seq) })
	return out
}
