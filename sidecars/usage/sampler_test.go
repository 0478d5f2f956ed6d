package usage

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// fakeReader reads every figure of every pod, the same each time, and counts the reads.
type fakeReader struct {
	mu     sync.Mutex
	reads  map[string]int
	forgot map[string]int
}

func newFakeReader() *fakeReader {
	return &fakeReader{reads: map[string]int{}, forgot: map[string]int{}}
}

func (f *fakeReader) Read(_ context.Context, p Pod) *nodeapi.PodStats {
	f.mu.Lock()
	f.reads[p.UID]++
	f.mu.Unlock()
	return fullStats(p, time.Now(), 1e9)
}

func (f *fakeReader) Forget(uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot[uid]++
}

func (f *fakeReader) readCount(uid string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[uid]
}

// fullStats are figures of every kind, as a read that met no error makes them.
func fullStats(p Pod, at time.Time, cpu uint64) *nodeapi.PodStats {
	return &nodeapi.PodStats{PodUID: p.UID, Namespace: p.Namespace, Pod: p.Name, Sandbox: p.Sandbox, Replica: p.Replica, Timestamp: at,
		CPU:       &nodeapi.CPUStats{UsageCoreNanoSeconds: cpu},
		Memory:    &nodeapi.MemoryStats{WorkingSetBytes: 1, RSSBytes: 2, UsageBytes: 3},
		Disk:      &nodeapi.DiskStats{WritableLayerBytes: 4, EmptyDirBytes: 5},
		Network:   &nodeapi.NetworkStats{RxBytes: 6},
		Processes: u64(7),
	}
}

// TestRecord: the CPU rate is over the window since the last sample that had a CPU counter,
// and the OOM-kill count never goes back.
func TestRecord(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	type read struct {
		at     time.Duration // after t0
		cpu    *uint64       // nil: the CPU figure failed
		oom    uint64
		window time.Duration
		rate   uint64
		oomOut uint64
	}
	tests := []struct {
		name  string
		reads []read
	}{
		{
			name: "half a core, then a whole one",
			reads: []read{
				{at: 0, cpu: u64(1e9), window: 0, rate: 0},
				{at: 10 * time.Second, cpu: u64(6e9), window: 10 * time.Second, rate: 5e8},
				{at: 20 * time.Second, cpu: u64(16e9), window: 10 * time.Second, rate: 1e9},
			},
		},
		{
			name: "a failed CPU read: the next rate is over both windows",
			reads: []read{
				{at: 0, cpu: u64(0)},
				{at: 10 * time.Second, cpu: nil},
				{at: 20 * time.Second, cpu: u64(40e9), window: 20 * time.Second, rate: 2e9},
			},
		},
		{
			name: "a counter that went back starts again",
			reads: []read{
				{at: 0, cpu: u64(10e9)},
				{at: 10 * time.Second, cpu: u64(1e9), window: 0, rate: 0},
				{at: 20 * time.Second, cpu: u64(2e9), window: 10 * time.Second, rate: 1e8},
			},
		},
		{
			name: "OOM kills of a cgroup v1 container whose cgroup went",
			reads: []read{
				{at: 0, cpu: u64(0), oom: 2, oomOut: 2},
				{at: 10 * time.Second, cpu: u64(0), oom: 0, oomOut: 2, window: 10 * time.Second},
				{at: 20 * time.Second, cpu: u64(0), oom: 1, oomOut: 3, window: 10 * time.Second},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSampler(newFakeReader(), time.Hour, 1)
			p := Pod{UID: "u", Namespace: "ns", Name: "p", Sandbox: "sbx"}
			s.Observe(p)
			for i, r := range tt.reads {
				st := fullStats(p, t0.Add(r.at), 0)
				st.CPU = nil
				if r.cpu != nil {
					st.CPU = &nodeapi.CPUStats{UsageCoreNanoSeconds: *r.cpu}
				}
				st.Memory.OOMKills = r.oom
				s.mu.RLock()
				state := s.pods["u"]
				s.mu.RUnlock()
				if !s.record(state, st) {
					t.Fatal("record of a known pod: false")
				}
				got, _ := s.Stats("u")
				if got.Window != r.window {
					t.Errorf("read %d: window %s, want %s", i, got.Window, r.window)
				}
				if r.cpu != nil && got.CPU.UsageNanoCores != r.rate {
					t.Errorf("read %d: %d nanocores, want %d", i, got.CPU.UsageNanoCores, r.rate)
				}
				if got.Memory.OOMKills != r.oomOut {
					t.Errorf("read %d: %d OOM kills, want %d", i, got.Memory.OOMKills, r.oomOut)
				}
			}
		})
	}
}

func sandboxPod(uid, sandbox, replica string, phase corev1.PodPhase) *corev1.Pod {
	labels := map[string]string{"egress.kube-sandbox.io/filtered": "true"}
	if sandbox != "" {
		labels[controlv1alpha1.LabelBatchSandbox] = sandbox
	}
	if replica != "" {
		labels[controlv1alpha1.LabelReplica] = replica
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid), Labels: labels},
		Status: corev1.PodStatus{Phase: phase}}
}

// withContainers gives p an init container and a container with these IDs.
func withContainers(p *corev1.Pod, initID, id string) *corev1.Pod {
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "install", ContainerID: initID}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sandbox", ContainerID: id}}
	return p
}

func TestPodOf(t *testing.T) {
	tests := []struct {
		name   string
		pod    *corev1.Pod
		want   Pod
		wantOK bool
	}{
		{"a sandbox's", sandboxPod("u", "sbx", "1", corev1.PodRunning), Pod{UID: "u", Namespace: "ns", Name: "pod-u", Sandbox: "sbx", Replica: 1}, true},
		{"a sandbox's, pending", sandboxPod("u", "sbx", "0", corev1.PodPending), Pod{UID: "u", Namespace: "ns", Name: "pod-u", Sandbox: "sbx"}, true},
		{"an idle pool pod", sandboxPod("u", "", "", corev1.PodRunning), Pod{}, false},
		{"a sandbox's, without a replica", sandboxPod("u", "sbx", "", corev1.PodRunning), Pod{}, false},
		{"a sandbox's, with a bad replica", sandboxPod("u", "sbx", "-1", corev1.PodRunning), Pod{}, false},
		{"a sandbox's, ended", sandboxPod("u", "sbx", "0", corev1.PodFailed), Pod{}, false},
		{"a sandbox's, done", sandboxPod("u", "sbx", "0", corev1.PodSucceeded), Pod{}, false},
		{"a sandbox's, with its containers' IDs", withContainers(sandboxPod("u", "sbx", "0", corev1.PodRunning), "containerd://i1", "containerd://c1"),
			Pod{UID: "u", Namespace: "ns", Name: "pod-u", Sandbox: "sbx", Containers: "i1,c1"}, true},
		{"a sandbox's, a container not created yet", withContainers(sandboxPod("u", "sbx", "0", corev1.PodRunning), "containerd://i1", ""),
			Pod{UID: "u", Namespace: "ns", Name: "pod-u", Sandbox: "sbx"}, true},
		{"a sandbox's, another runtime's IDs", withContainers(sandboxPod("u", "sbx", "0", corev1.PodRunning), "cri-o://i1", "cri-o://c1"),
			Pod{UID: "u", Namespace: "ns", Name: "pod-u", Sandbox: "sbx"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := PodOf(tt.pod)
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("PodOf = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 2*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func runSampler(t *testing.T, s *Sampler) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the sampler did not stop")
		}
	})
}

// TestSamplerPods: a pod that serves a sandbox is read at once and then every interval; an
// idle pool pod is never read; a pod released to its pool, or deleted, is forgotten.
func TestSamplerPods(t *testing.T) {
	r := newFakeReader()
	s := NewSampler(r, 20*time.Millisecond, 2)
	runSampler(t, s)
	h := s.PodHandler()
	h.OnAdd(sandboxPod("a", "sbx", "0", corev1.PodRunning), true)
	h.OnAdd(sandboxPod("idle", "", "", corev1.PodRunning), true)
	poll(t, "pod a read at once", func() bool { _, ok := s.Stats("a"); return ok })
	poll(t, "pod a read again", func() bool { return r.readCount("a") >= 3 })
	if n := r.readCount("idle"); n != 0 {
		t.Errorf("the idle pool pod was read %d times", n)
	}
	if _, ok := s.Stats("idle"); ok {
		t.Error("the idle pool pod has figures")
	}

	// Claimed: read at once, as the sandbox's.
	h.OnUpdate(nil, sandboxPod("idle", "other", "1", corev1.PodRunning))
	poll(t, "the claimed pod read", func() bool { st, ok := s.Stats("idle"); return ok && st.Sandbox == "other" && st.Replica == 1 })
	want := []string{"a", "idle"}
	var got []string
	for _, st := range s.List() {
		got = append(got, st.PodUID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	// Released to its pool, and deleted.
	h.OnUpdate(nil, sandboxPod("idle", "", "", corev1.PodRunning))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/pod-a", Obj: sandboxPod("a", "sbx", "0", corev1.PodRunning)})
	if list := s.List(); len(list) != 0 {
		t.Errorf("List after the pods went: %+v", list)
	}
	before := r.readCount("a")
	time.Sleep(100 * time.Millisecond)
	if after := r.readCount("a"); after > before+1 { // one read may have been under way
		t.Errorf("pod a read %d more times after it went", after-before)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.forgot["a"] == 0 || r.forgot["idle"] == 0 {
		t.Errorf("the reader was told to forget %v, want a and idle", r.forgot)
	}
}

// TestFirstRead: a new pod waits FirstRead before its first read (it is not in the queue's
// ready items yet), and is read at once without one.
func TestFirstRead(t *testing.T) {
	for _, tc := range []struct {
		first     time.Duration
		wantReady int
	}{{0, 1}, {time.Hour, 0}} {
		s := NewSampler(newFakeReader(), time.Hour, 1)
		s.FirstRead = tc.first
		s.Observe(Pod{UID: "u", Namespace: "ns", Name: "p", Sandbox: "sbx"})
		if got := s.queue.Len(); got != tc.wantReady {
			t.Errorf("FirstRead %v: %d pods ready to be read, want %d", tc.first, got, tc.wantReady)
		}
		s.queue.ShutDown()
	}
}
