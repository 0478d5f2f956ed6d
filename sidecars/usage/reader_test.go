package usage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

func TestNodeReader(t *testing.T) {
	const uid = "0a1b"
	pod := Pod{UID: uid, Namespace: "team-a", Name: "sbx-abc", Sandbox: "sbx", Replica: 2}
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	traffic := egress.Traffic{RxBytes: 1, TxBytes: 2, RxPackets: 3, TxPackets: 4,
		PodCounters: egress.PodCounters{ConnectionsAllowed: 5, ConnectionsDenied: 6, ConnectionsSpoofed: 7, DNSAllowed: 8}}
	full := func() nodeapi.PodStats {
		return nodeapi.PodStats{PodUID: uid, Namespace: "team-a", Pod: "sbx-abc", Sandbox: "sbx", Replica: 2, Timestamp: at,
			CPU: &nodeapi.CPUStats{UsageCoreNanoSeconds: 2500000000},
			Memory: &nodeapi.MemoryStats{WorkingSetBytes: 240000000, RSSBytes: 205000000, UsageBytes: 300000000,
				LimitBytes: 536870912, PeakBytes: 400000000, OOMKills: 1},
			Disk:      &nodeapi.DiskStats{WritableLayerBytes: 1 << 20},
			Network:   &nodeapi.NetworkStats{RxBytes: 1, TxBytes: 2, RxPackets: 3, TxPackets: 4, ConnectionsAllowed: 5, ConnectionsDenied: 6},
			Processes: u64(12),
		}
	}
	tests := []struct {
		name string
		// modify the node before the read
		modify   func(t *testing.T, r *NodeReader, rt *fakeRuntime, nw *fakeNetwork, cgroupRoot string)
		want     func() nodeapi.PodStats
		wantErrs map[string]string
	}{
		{name: "every figure", want: full},
		{
			name: "no sandbox in containerd: no cgroup figures, the others stand",
			modify: func(_ *testing.T, _ *NodeReader, rt *fakeRuntime, _ *fakeNetwork, _ string) {
				delete(rt.cgroups, uid)
			},
			want: func() nodeapi.PodStats {
				s := full()
				s.CPU, s.Memory, s.Processes = nil, nil, nil
				return s
			},
			wantErrs: map[string]string{"cpu": "not in containerd", "memory": "not in containerd", "processes": "not in containerd"},
		},
		{
			name: "the writable layer unknown: no disk figure",
			modify: func(_ *testing.T, _ *NodeReader, rt *fakeRuntime, _ *fakeNetwork, _ string) {
				rt.layersErr = errors.New("containerd is down")
			},
			want:     func() nodeapi.PodStats { s := full(); s.Disk = nil; return s },
			wantErrs: map[string]string{"disk": "containerd is down"},
		},
		{
			name: "too many files in an emptyDir: no disk figure",
			modify: func(t *testing.T, r *NodeReader, _ *fakeRuntime, _ *fakeNetwork, _ string) {
				for _, n := range []string{"a", "b", "c"} {
					write(t, filepath.Join(r.KubeletRootDir, "pods", uid, "volumes", emptyDirPlugin, "v", n), nil)
				}
				r.MaxEmptyDirEntries = 2
			},
			want:     func() nodeapi.PodStats { s := full(); s.Disk = nil; return s },
			wantErrs: map[string]string{"disk": "too many entries"},
		},
		{
			name: "the pod's interface not found: no network figure",
			modify: func(_ *testing.T, _ *NodeReader, _ *fakeRuntime, nw *fakeNetwork, _ string) {
				nw.err = errors.New("the interface of pod 0a1b is not known yet")
			},
			want:     func() nodeapi.PodStats { s := full(); s.Network = nil; return s },
			wantErrs: map[string]string{"network": "not known yet"},
		},
		{
			name: "memory.stat unreadable: no memory figure",
			modify: func(t *testing.T, _ *NodeReader, _ *fakeRuntime, _ *fakeNetwork, root string) {
				if err := os.Remove(filepath.Join(root, testPod, "memory.stat")); err != nil {
					t.Fatal(err)
				}
			},
			want:     func() nodeapi.PodStats { s := full(); s.Memory = nil; return s },
			wantErrs: map[string]string{"memory": "memory.stat"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, v2Pod())
			cg, err := OpenCgroups(root)
			if err != nil {
				t.Fatal(err)
			}
			rt := &fakeRuntime{cgroups: map[string]string{uid: testPod}, layers: map[string]uint64{uid: 1 << 20}}
			nw := &fakeNetwork{traffic: map[string]egress.Traffic{uid: traffic}}
			r := &NodeReader{Cgroups: cg, Runtime: rt, Network: nw, KubeletRootDir: t.TempDir(), now: func() time.Time { return at }}
			if tt.modify != nil {
				tt.modify(t, r, rt, nw, root)
			}
			got := r.Read(t.Context(), pod)
			errs := got.Errors
			got.Errors = nil
			if diff := cmp.Diff(tt.want(), *got); diff != "" {
				t.Errorf("Read (-want +got):\n%s", diff)
			}
			if len(errs) != len(tt.wantErrs) {
				t.Errorf("errors %v, want %v", errs, tt.wantErrs)
			}
			for figure, want := range tt.wantErrs {
				if !strings.Contains(errs[figure], want) {
					t.Errorf("error of %s: %q, want one with %q", figure, errs[figure], want)
				}
			}
		})
	}
}

// TestNodeReaderCgroupCache: a pod's cgroup is asked of containerd once, and again once it is
// not there (the pod's sandbox remade elsewhere, or a cache of another pod's).
func TestNodeReaderCgroupCache(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, v2Pod())
	cg, _ := OpenCgroups(root)
	rt := &fakeRuntime{cgroups: map[string]string{"u": "/elsewhere"}}
	r := &NodeReader{Cgroups: cg, Runtime: rt, Network: &fakeNetwork{traffic: map[string]egress.Traffic{}}, KubeletRootDir: t.TempDir()}
	p := Pod{UID: "u"}
	if st := r.Read(t.Context(), p); st.CPU != nil {
		t.Fatalf("cpu of a cgroup that is not there: %+v", st.CPU)
	}
	rt.mu.Lock()
	rt.cgroups["u"] = testPod
	rt.mu.Unlock()
	for range 3 {
		if st := r.Read(t.Context(), p); st.CPU == nil {
			t.Fatalf("no cpu: %v", st.Errors)
		}
	}
	if got := rt.lookupCount(); got != 2 {
		t.Errorf("%d look-ups of the pod's cgroup, want 2 (the one gone, then the one found)", got)
	}
	r.Forget("u")
	r.Read(t.Context(), p)
	if got := rt.lookupCount(); got != 3 {
		t.Errorf("%d look-ups after Forget, want 3", got)
	}
}
