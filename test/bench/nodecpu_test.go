package main

import (
	"testing"
	"time"
)

// TestSampleCPU: a process that burns CPU between two samples shows up in them, and the node's
// busy time moves forward.
func TestSampleCPU(t *testing.T) {
	before := sampleCPU()
	deadline := time.Now().Add(200 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	after := sampleCPU()
	if after.busy <= before.busy || after.total <= before.total {
		t.Fatalf("/proc/stat busy %d → %d, total %d → %d: want both to grow", before.busy, after.busy, before.total, after.total)
	}
	var ours uint64
	for pid, p := range after.procs {
		if b, ok := before.procs[pid]; ok && p.ticks > b.ticks && p.comm == b.comm {
			ours = max(ours, p.ticks-b.ticks)
		}
	}
	// 200 ms of CPU is 20 ticks; something (this test) used at least a few.
	if ours < 5 {
		t.Errorf("no process used 5 ticks of CPU between the samples (most: %d)", ours)
	}
}
