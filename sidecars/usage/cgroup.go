package usage

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

const (
	// v1Unlimited: cgroup v1 says "no limit" with the largest page count the kernel keeps
	// (PAGE_COUNTER_MAX pages, 2^63 bytes less a page on 64-bit machines); any limit above
	// 2^62 bytes (4 EiB) is that, whatever the page size.
	v1Unlimited = 1 << 62
	// maxOOMCgroups bounds the walk of a pod's cgroups that sums cgroup v1's oom_kill counts
	// (which the kernel keeps per cgroup, not per subtree): a pod has its own, its sandbox's
	// and its containers' (a few), and nothing in the pod can make more (runc and runsc
	// make cgroups; the sandbox's code, with no write access to cgroupfs, cannot).
	maxOOMCgroups = 64
)

// Cgroups reads pods' cgroups in a mount of the node's cgroup filesystems (--cgroup-root):
// cgroup v2, where one hierarchy holds every controller, or cgroup v1, where each controller
// has its own (memory, cpuacct, pids). A pod's cgroup holds everything the pod costs the node:
// its containers' processes, and under gVisor the sandbox's sentry and gofers, which runsc puts
// in the pod's cgroup itself, so that what the sandbox's programs use shows there (as the
// sentry's) although no process of theirs runs on the node's kernel.
type Cgroups struct {
	root string
	// unified: cgroup v2 at root. Else the directories of the v1 hierarchies, "" for one
	// the node does not mount (its figures are then errors).
	unified               bool
	memory, cpuacct, pids string
}

// OpenCgroups finds the layout of the cgroup mount at root.
func OpenCgroups(root string) (*Cgroups, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return &Cgroups{root: root, unified: true}, nil
	}
	c := &Cgroups{
		root:    root,
		memory:  firstDir(root, "memory"),
		cpuacct: firstDir(root, "cpuacct", "cpu,cpuacct", "cpuacct,cpu"),
		pids:    firstDir(root, "pids"),
	}
	if c.memory == "" && c.cpuacct == "" && c.pids == "" {
		return nil, fmt.Errorf("%s is no cgroup mount: no cgroup.controllers (cgroup v2), and none of the memory, cpuacct and pids hierarchies of cgroup v1", root)
	}
	return c, nil
}

// firstDir is the first of names that is a directory under root, joined to it; "" if none.
func firstDir(root string, names ...string) string {
	for _, n := range names {
		p := filepath.Join(root, n)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return p
		}
	}
	return ""
}

// Version is "v2" or "v1", for the agent's log.
func (c *Cgroups) Version() string {
	if c.unified {
		return "v2"
	}
	return "v1"
}

// cgroupFigures are what a pod's cgroup says: each figure, or its error.
type cgroupFigures struct {
	cpu       *nodeapi.CPUStats
	memory    *nodeapi.MemoryStats
	processes *uint64
	errs      map[string]error
	// gone: the cgroup is not there (any more): the pod's cgroup is to be found again.
	gone bool
}

func (f *cgroupFigures) fail(figure string, err error) {
	if f.errs == nil {
		f.errs = map[string]error{}
	}
	f.errs[figure] = err
}

// Read reads the figures of the cgroup at pod, a path in each hierarchy
// ("/kube-sandbox/kubepods/burstable/pod<uid>").
func (c *Cgroups) Read(pod string) cgroupFigures {
	f := c.read(pod)
	if len(f.errs) > 0 {
		// A file missing from a cgroup that is there is the node's configuration (a
		// controller not enabled); a cgroup that is not there is to be found again.
		if _, err := os.Stat(c.dir(pod)); errors.Is(err, fs.ErrNotExist) {
			f.gone = true
		}
	}
	return f
}

// dir is the pod's directory in the first hierarchy the node has.
func (c *Cgroups) dir(pod string) string {
	if c.unified {
		return filepath.Join(c.root, pod)
	}
	for _, h := range []string{c.memory, c.cpuacct, c.pids} {
		if h != "" {
			return filepath.Join(h, pod)
		}
	}
	return ""
}

func (c *Cgroups) read(pod string) cgroupFigures {
	var f cgroupFigures
	if c.unified {
		dir := filepath.Join(c.root, pod)
		set(&f, nodeapi.FigureCPU, &f.cpu, func() (*nodeapi.CPUStats, error) { return readCPUv2(dir) })
		set(&f, nodeapi.FigureMemory, &f.memory, func() (*nodeapi.MemoryStats, error) { return readMemoryV2(dir) })
		set(&f, nodeapi.FigureProcesses, &f.processes, func() (*uint64, error) { return readUintFile(filepath.Join(dir, "pids.current")) })
		return f
	}
	set(&f, nodeapi.FigureCPU, &f.cpu, func() (*nodeapi.CPUStats, error) {
		if c.cpuacct == "" {
			return nil, errors.New("the node mounts no cpuacct hierarchy")
		}
		return readCPUv1(filepath.Join(c.cpuacct, pod))
	})
	set(&f, nodeapi.FigureMemory, &f.memory, func() (*nodeapi.MemoryStats, error) {
		if c.memory == "" {
			return nil, errors.New("the node mounts no memory hierarchy")
		}
		return readMemoryV1(filepath.Join(c.memory, pod))
	})
	set(&f, nodeapi.FigureProcesses, &f.processes, func() (*uint64, error) {
		if c.pids == "" {
			return nil, errors.New("the node mounts no pids hierarchy")
		}
		return readUintFile(filepath.Join(c.pids, pod, "pids.current"))
	})
	return f
}

func set[T any](f *cgroupFigures, figure string, dst **T, read func() (*T, error)) {
	v, err := read()
	if err != nil {
		f.fail(figure, err)
		return
	}
	*dst = v
}

// readCPUv2 reads cpu.stat's usage_usec, which the kernel keeps for every cgroup v2 cgroup,
// with or without the cpu controller.
func readCPUv2(dir string) (*nodeapi.CPUStats, error) {
	stat, err := readKeyedFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return nil, err
	}
	usec, err := need(stat, "cpu.stat", "usage_usec")
	if err != nil {
		return nil, err
	}
	return &nodeapi.CPUStats{UsageCoreNanoSeconds: usec * 1000}, nil
}

// readCPUv1 reads cpuacct.usage: nanoseconds, the cgroup's and its descendants'.
func readCPUv1(dir string) (*nodeapi.CPUStats, error) {
	ns, err := readUintFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return nil, err
	}
	return &nodeapi.CPUStats{UsageCoreNanoSeconds: *ns}, nil
}

// readMemoryV2 reads memory.current, memory.stat, memory.max, memory.peak (which kernels
// before 5.19 do not have: PeakBytes is then 0) and memory.events, whose oom_kill counts
// the kills in the cgroup and its descendants (unless the node mounts cgroup2 with
// memory_localevents).
func readMemoryV2(dir string) (*nodeapi.MemoryStats, error) {
	current, err := readUintFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return nil, err
	}
	stat, err := readKeyedFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return nil, err
	}
	anon, err1 := need(stat, "memory.stat", "anon")
	shmem, err2 := need(stat, "memory.stat", "shmem")
	inactiveFile, err3 := need(stat, "memory.stat", "inactive_file")
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "memory.max"))
	if err != nil {
		return nil, err
	}
	limit, err := parseMax(data)
	if err != nil {
		return nil, fmt.Errorf("memory.max: %w", err)
	}
	var peak uint64
	if p, err := readUintFile(filepath.Join(dir, "memory.peak")); err == nil {
		peak = *p
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	events, err := readKeyedFile(filepath.Join(dir, "memory.events"))
	if err != nil {
		return nil, err
	}
	return &nodeapi.MemoryStats{
		WorkingSetBytes: workingSet(*current, inactiveFile),
		RSSBytes:        anon + shmem,
		UsageBytes:      *current,
		LimitBytes:      limit,
		PeakBytes:       peak,
		// Absent before Linux 4.13, which counted no kills.
		OOMKills: events["oom_kill"],
	}, nil
}

// readMemoryV1 reads memory.usage_in_bytes, memory.stat's hierarchical (total_) counts,
// memory.limit_in_bytes, memory.max_usage_in_bytes, and the oom_kill counts of
// memory.oom_control, which v1 keeps in the cgroup of the killed process only: they are
// summed over the pod's cgroup and its descendants, as long as those exist (the runtime
// removes a container's cgroup when the container ends, and its count with it).
func readMemoryV1(dir string) (*nodeapi.MemoryStats, error) {
	usage, err := readUintFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return nil, err
	}
	stat, err := readKeyedFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return nil, err
	}
	// rss is v1's anonymous memory; shmem (tmpfs, and the sentry's memory file under gVisor)
	// is in its page cache.
	rss, err1 := need(stat, "memory.stat", "total_rss")
	shmem, err2 := need(stat, "memory.stat", "total_shmem")
	inactiveFile, err3 := need(stat, "memory.stat", "total_inactive_file")
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	limit, err := readUintFile(filepath.Join(dir, "memory.limit_in_bytes"))
	if err != nil {
		return nil, err
	}
	if *limit >= v1Unlimited {
		*limit = 0
	}
	peak, err := readUintFile(filepath.Join(dir, "memory.max_usage_in_bytes"))
	if err != nil {
		return nil, err
	}
	kills, err := oomKillsV1(dir)
	if err != nil {
		return nil, err
	}
	return &nodeapi.MemoryStats{
		WorkingSetBytes: workingSet(*usage, inactiveFile),
		RSSBytes:        rss + shmem,
		UsageBytes:      *usage,
		LimitBytes:      *limit,
		PeakBytes:       *peak,
		OOMKills:        kills,
	}, nil
}

// oomKillsV1 sums memory.oom_control's oom_kill over dir and its descendants (see
// readMemoryV1), breadth first, at most maxOOMCgroups of them.
func oomKillsV1(dir string) (uint64, error) {
	var sum uint64
	queue := []string{dir}
	for n := 0; len(queue) > 0; n++ {
		if n == maxOOMCgroups {
			return 0, fmt.Errorf("%s has more than %d cgroups", dir, maxOOMCgroups)
		}
		d := queue[0]
		queue = queue[1:]
		ctl, err := readKeyedFile(filepath.Join(d, "memory.oom_control"))
		if err != nil {
			if d != dir && errors.Is(err, fs.ErrNotExist) {
				continue // a container's cgroup, removed since the listing
			}
			return 0, err
		}
		sum += ctl["oom_kill"]
		entries, err := os.ReadDir(d)
		if err != nil {
			if d != dir && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return 0, err
		}
		for _, e := range entries {
			if e.IsDir() {
				queue = append(queue, filepath.Join(d, e.Name()))
			}
		}
	}
	return sum, nil
}

// workingSet is what the kubelet evicts by: the memory charged less the file pages the
// kernel would reclaim first; never below 0 (the two are not read at one instant).
func workingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile >= usage {
		return 0
	}
	return usage - inactiveFile
}

func readUintFile(path string) (*uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := parseUint(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return &v, nil
}

func readKeyedFile(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseKeyed(data), nil
}

// need is key of a keyed file, or an error that names it.
func need(m map[string]uint64, file, key string) (uint64, error) {
	v, ok := m[key]
	if !ok {
		return 0, fmt.Errorf("%s has no %s", file, key)
	}
	return v, nil
}

// parseUint parses a file of one unsigned number (memory.current, pids.current).
func parseUint(data []byte) (uint64, error) {
	s := string(bytes.TrimSpace(data))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a count", s)
	}
	return v, nil
}

// parseMax parses a cgroup v2 limit: a number, or "max" for none (0).
func parseMax(data []byte) (uint64, error) {
	if string(bytes.TrimSpace(data)) == "max" {
		return 0, nil
	}
	return parseUint(data)
}

// parseKeyed parses a flat keyed file ("key value" lines: cpu.stat, memory.stat,
// memory.events, memory.oom_control). Lines that are not a key and an unsigned number are
// left out rather than failing the file: a kernel may add keys of another form, and the
// callers say which keys they need.
func parseKeyed(data []byte) map[string]uint64 {
	out := map[string]uint64{}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		out[k] = n
	}
	return out
}
