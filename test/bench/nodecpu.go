package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc's CPU times (100 on Linux everywhere we run).
const clockTicks = 100

// cpuSample is the node's CPU time so far: all cores together (from /proc/stat) and per
// process, by pid, with its command name. The benchmark runs on the node of the local
// cluster, so the difference of two samples says where a phase's CPU went.
type cpuSample struct {
	at          time.Time
	busy, total uint64
	procs       map[int]procCPU
}

type procCPU struct {
	comm  string
	ticks uint64
}

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now(), procs: map[int]procCPU{}}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			s.total += n
			if i != 3 && i != 4 { // idle and iowait
				s.busy += n
			}
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: fields 14 and 15, counted after the ")".
		text := string(data)
		open, end := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
		if open < 0 || end < open {
			continue
		}
		rest := strings.Fields(text[end+1:])
		if len(rest) < 13 {
			continue
		}
		u, _ := strconv.ParseUint(rest[11], 10, 64)
		st, _ := strconv.ParseUint(rest[12], 10, 64)
		s.procs[pid] = procCPU{comm: text[open+1 : end], ticks: u + st}
	}
	return s
}

// printCPU prints where the node's CPU went between two samples: the cores busy, and the
// processes that used most, by command name (processes that started within the phase count
// whole, those that ended within it not at all).
func printCPU(what string, before, after cpuSample) {
	secs := after.at.Sub(before.at).Seconds()
	if secs <= 0 || after.total <= before.total {
		return
	}
	cores := float64(after.total-before.total) / clockTicks / secs
	busy := float64(after.busy-before.busy) / clockTicks / secs
	byComm := map[string]float64{}
	for pid, p := range after.procs {
		d := p.ticks
		if b, ok := before.procs[pid]; ok && b.comm == p.comm {
			d -= min(b.ticks, d)
		}
		byComm[p.comm] += float64(d) / clockTicks / secs
	}
	type use struct {
		comm  string
		cores float64
	}
	var uses []use
	for c, v := range byComm {
		uses = append(uses, use{c, v})
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].cores > uses[j].cores })
	var top []string
	for _, u := range uses[:min(len(uses), 8)] {
		top = append(top, fmt.Sprintf("%s %.2f", u.comm, u.cores))
	}
	fmt.Printf("\nNode CPU during %s (%.1f s): %.2f of %.0f cores busy (%.0f%%); by process, in cores: %s.\n",
		what, secs, busy, cores, 100*busy/cores, strings.Join(top, ", "))
}
