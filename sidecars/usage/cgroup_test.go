package usage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const testPod = "/kube-sandbox/kubepods/burstable/pod0a1b"

// writeFiles writes files (path relative to root → content) below root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// v2Pod is a cgroup v2 pod's files as a 6.x kernel has them.
func v2Pod() map[string]string {
	return map[string]string{
		"cgroup.controllers":         "cpuset cpu io memory hugetlb pids rdma misc\n",
		testPod + "/cpu.stat":        "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n",
		testPod + "/memory.current":  "300000000\n",
		testPod + "/memory.stat":     "anon 200000000\nfile 90000000\nshmem 5000000\ninactive_file 60000000\nactive_file 30000000\n",
		testPod + "/memory.max":      "536870912\n",
		testPod + "/memory.peak":     "400000000\n",
		testPod + "/memory.events":   "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
		testPod + "/pids.current":    "12\n",
		testPod + "/cgroup.procs":    "",
		testPod + "/sandbox/dummy":   "",
		testPod + "/memory.swap.max": "max\n",
	}
}

// v1Pod is a cgroup v1 pod's files (memory, cpuacct and pids hierarchies), with a container
// cgroup below it whose process the OOM killer ended.
func v1Pod() map[string]string {
	return map[string]string{
		"memory/memory.usage_in_bytes":                "1",
		"cpuacct/cpuacct.usage":                       "1",
		"memory" + testPod + "/memory.usage_in_bytes": "300000000\n",
		"memory" + testPod + "/memory.stat": "cache 95000000\nrss 1000\nshmem 1\ninactive_file 1\n" +
			"total_cache 95000000\ntotal_rss 200000000\ntotal_shmem 5000000\ntotal_inactive_file 60000000\n",
		"memory" + testPod + "/memory.limit_in_bytes":          "536870912\n",
		"memory" + testPod + "/memory.max_usage_in_bytes":      "400000000\n",
		"memory" + testPod + "/memory.oom_control":             "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
		"memory" + testPod + "/ctr-a/memory.oom_control":       "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"memory" + testPod + "/ctr-b/memory.oom_control":       "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
		"memory" + testPod + "/ctr-b/inner/memory.oom_control": "oom_kill 1\n",
		"cpuacct" + testPod + "/cpuacct.usage":                 "2500000000\n",
		"pids" + testPod + "/pids.current":                     "12\n",
	}
}

func u64(v uint64) *uint64 { return &v }

func TestCgroupsRead(t *testing.T) {
	full := &nodeapi.MemoryStats{WorkingSetBytes: 240000000, RSSBytes: 205000000, UsageBytes: 300000000,
		LimitBytes: 536870912, PeakBytes: 400000000}
	tests := []struct {
		name       string
		files      map[string]string
		change     map[string]string // written over files
		remove     []string
		wantCPU    *nodeapi.CPUStats
		wantMemory func(m nodeapi.MemoryStats) *nodeapi.MemoryStats
		wantProcs  *uint64
		wantErrs   map[string]string // figure → part of its error
		wantGone   bool
		wantV      string
	}{
		{
			name: "v2", files: v2Pod(), wantV: "v2",
			wantCPU:    &nodeapi.CPUStats{UsageCoreNanoSeconds: 2500000000},
			wantMemory: func(m nodeapi.MemoryStats) *nodeapi.MemoryStats { m.OOMKills = 1; return &m },
			wantProcs:  u64(12),
		},
		{
			name: "v2 without a limit, on a kernel without memory.peak", files: v2Pod(), wantV: "v2",
			change:  map[string]string{testPod + "/memory.max": "max\n"},
			remove:  []string{testPod + "/memory.peak"},
			wantCPU: &nodeapi.CPUStats{UsageCoreNanoSeconds: 2500000000},
			wantMemory: func(m nodeapi.MemoryStats) *nodeapi.MemoryStats {
				m.OOMKills, m.LimitBytes, m.PeakBytes = 1, 0, 0
				return &m
			},
			wantProcs: u64(12),
		},
		{
			name: "v2 with more inactive file pages than usage: a working set of 0", files: v2Pod(), wantV: "v2",
			change:  map[string]string{testPod + "/memory.stat": "anon 1\nshmem 2\ninactive_file 400000000\n"},
			wantCPU: &nodeapi.CPUStats{UsageCoreNanoSeconds: 2500000000},
			wantMemory: func(m nodeapi.MemoryStats) *nodeapi.MemoryStats {
				m.OOMKills, m.WorkingSetBytes, m.RSSBytes = 1, 0, 3
				return &m
			},
			wantProcs: u64(12),
		},
		{
			name: "v2: a figure that does not read leaves the others", files: v2Pod(), wantV: "v2",
			change:    map[string]string{testPod + "/memory.stat": "anon 1\n", testPod + "/cpu.stat": "usage_usec lots\n"},
			remove:    []string{testPod + "/pids.current"},
			wantErrs:  map[string]string{"cpu": "cpu.stat has no usage_usec", "memory": "memory.stat has no shmem", "processes": "no such file"},
			wantProcs: nil,
		},
		{
			name: "v2: the pod's cgroup is gone", files: map[string]string{"cgroup.controllers": "memory\n"}, wantV: "v2",
			wantErrs: map[string]string{"cpu": "no such file", "memory": "no such file", "processes": "no such file"},
			wantGone: true,
		},
		{
			name: "v1: kills summed over the pod's cgroups", files: v1Pod(), wantV: "v1",
			wantCPU:    &nodeapi.CPUStats{UsageCoreNanoSeconds: 2500000000},
			wantMemory: func(m nodeapi.MemoryStats) *nodeapi.MemoryStats { m.OOMKills = 4; return &m },
			wantProcs:  u64(12),
		},
		{
			name: "v1 without a limit", files: v1Pod(), wantV: "v1",
			change:  map[string]string{"memory" + testPod + "/memory.limit_in_bytes": "9223372036854771712\n"},
			wantCPU: &nodeapi.CPUStats{UsageCoreNanoSeconds: 2500000000},
			wantMemory: func(m nodeapi.MemoryStats) *nodeapi.MemoryStats {
				m.OOMKills, m.LimitBytes = 4, 0
				return &m
			},
			wantProcs: u64(12),
		},
		{
			name: "v1 with cpu and cpuacct mounted together", wantV: "v1",
			files: func() map[string]string {
				f := v1Pod()
				delete(f, "cpuacct/cpuacct.usage")
				delete(f, "cpuacct"+testPod+"/cpuacct.usage")
				f["cpu,cpuacct"+testPod+"/cpuacct.usage"] = "7\n"
				return f
			}(),
			wantCPU:    &nodeapi.CPUStats{UsageCoreNanoSeconds: 7},
			wantMemory: func(m nodeapi.MemoryStats) *nodeapi.MemoryStats { m.OOMKills = 4; return &m },
			wantProcs:  u64(12),
		},
		{
			name: "v1 without a pids hierarchy", wantV: "v1",
			files: func() map[string]string {
				f := v1Pod()
				delete(f, "pids"+testPod+"/pids.current")
				return f
			}(),
			wantCPU:    &nodeapi.CPUStats{UsageCoreNanoSeconds: 2500000000},
			wantMemory: func(m nodeapi.MemoryStats) *nodeapi.MemoryStats { m.OOMKills = 4; return &m },
			wantErrs:   map[string]string{"processes": "no pids hierarchy"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tt.files)
			writeFiles(t, root, tt.change)
			for _, p := range tt.remove {
				if err := os.Remove(filepath.Join(root, p)); err != nil {
					t.Fatal(err)
				}
			}
			c, err := OpenCgroups(root)
			if err != nil {
				t.Fatal(err)
			}
			if c.Version() != tt.wantV {
				t.Errorf("version %s, want %s", c.Version(), tt.wantV)
			}
			f := c.Read(testPod)
			var wantMemory *nodeapi.MemoryStats
			if tt.wantMemory != nil {
				wantMemory = tt.wantMemory(*full)
			}
			if diff := cmp.Diff(tt.wantCPU, f.cpu); diff != "" {
				t.Errorf("cpu (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantMemory, f.memory); diff != "" {
				t.Errorf("memory (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantProcs, f.processes); diff != "" {
				t.Errorf("processes (-want +got):\n%s", diff)
			}
			if len(f.errs) != len(tt.wantErrs) {
				t.Errorf("errors %v, want %v", f.errs, tt.wantErrs)
			}
			for figure, want := range tt.wantErrs {
				if err := f.errs[figure]; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error of %s: %v, want one with %q", figure, err, want)
				}
			}
			if f.gone != tt.wantGone {
				t.Errorf("gone %v, want %v", f.gone, tt.wantGone)
			}
		})
	}
}

func TestOpenCgroupsNoMount(t *testing.T) {
	if _, err := OpenCgroups(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no cgroup mount") {
		t.Errorf("OpenCgroups of an empty directory: %v", err)
	}
}

// TestOOMKillsV1Bound: a pod with more cgroups than the walk's bound has no memory figure.
func TestOOMKillsV1Bound(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{"memory.oom_control": "oom_kill 0\n"}
	for i := range maxOOMCgroups {
		files[filepath.Join("c"+string(rune('a'+i%26))+string(rune('a'+i/26)), "memory.oom_control")] = "oom_kill 1\n"
	}
	writeFiles(t, root, files)
	if _, err := oomKillsV1(root); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("oomKillsV1 of %d cgroups: %v, want an error", maxOOMCgroups+1, err)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		parse   func([]byte) (uint64, error)
		in      string
		want    uint64
		wantErr bool
	}{
		{"a count", parseUint, "42\n", 42, false},
		{"a count with spaces", parseUint, " 42 \n", 42, false},
		{"empty", parseUint, "", 0, true},
		{"negative", parseUint, "-1\n", 0, true},
		{"not a number", parseUint, "max\n", 0, true},
		{"a limit", parseMax, "536870912\n", 536870912, false},
		{"no limit", parseMax, "max\n", 0, false},
		{"a bad limit", parseMax, "lots\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.parse([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("got %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseKeyed(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]uint64
	}{
		{"cpu.stat", "usage_usec 10\nuser_usec 7\nsystem_usec 3\n", map[string]uint64{"usage_usec": 10, "user_usec": 7, "system_usec": 3}},
		{"no newline at the end", "oom_kill 2", map[string]uint64{"oom_kill": 2}},
		{"lines of another form are left out", "a 1\nb\nc x\n\nd -1\ne 2 3\nf 4\n", map[string]uint64{"a": 1, "f": 4}},
		{"empty", "", map[string]uint64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, parseKeyed([]byte(tt.in))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
