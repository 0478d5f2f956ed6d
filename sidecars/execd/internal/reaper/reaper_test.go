package reaper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const helperEnv = "REAPER_TEST_HELPER_MODE"

// TestReaper runs the scenario in a child test process, because becoming a
// subreaper (the stand-in for PID 1) is a process-wide change.
func TestReaper(t *testing.T) {
	tests := []struct {
		name string
		mode string
	}{
		{name: "reaper collects orphans and leaves exit codes to Wait", mode: "reap"},
		// The control proves the zombie check can fail: without a reaper the
		// orphans stay zombies.
		{name: "without reaper orphans stay zombies", mode: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestReaperHelper$", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"="+tt.mode)
			out, err := cmd.CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("--- PASS: TestReaperHelper")) {
				t.Fatalf("helper failed: %v\n%s", err, out)
			}
		})
	}
}

func TestReaperHelper(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process for TestReaper")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a child subreaper: %v", err)
	}
	var r *Reaper
	if mode == "reap" {
		r = New()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); r.Run(ctx) }()
		defer func() { cancel(); <-done }()
	}

	const orphans = 20
	for i := range 2 * orphans {
		code := i%5 + 1
		// Half the children exit at once (the race between fork and
		// tracking), half leave an orphan behind that exits a bit later.
		script := fmt.Sprintf("exit %d", code)
		if i%2 == 0 {
			script = fmt.Sprintf("sleep 0.2 & exit %d", code)
		}
		cmd := exec.Command("sh", "-c", script)
		pid, err := r.Start(func() (int, error) {
			if err := cmd.Start(); err != nil {
				return 0, err
			}
			return cmd.Process.Pid, nil
		})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		if i%3 == 0 {
			// A zombie that its owner has not waited for yet is what a
			// careless reaper would steal.
			time.Sleep(20 * time.Millisecond)
		}
		err = cmd.Wait()
		r.Release(pid)
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != code {
			t.Fatalf("child %d: Wait returned %v, want exit status %d (status stolen?)", i, err, code)
		}
	}

	// Give the orphans time to finish sleeping, then count zombies.
	deadline := time.Now().Add(5 * time.Second)
	zombies := -1
	for time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
		zombies = zombieChildren(t)
		if mode == "reap" && zombies == 0 {
			return
		}
		if mode == "none" && zombies == orphans {
			return
		}
	}
	t.Fatalf("mode %s: %d zombie children remain", mode, zombies)
}

// zombieChildren counts this process's children that have exited but were
// not waited for.
func zombieChildren(t *testing.T) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	n := 0
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // the process went away
		}
		// Fields after the parenthesized command name: state ppid ...
		rest := data[bytes.LastIndexByte(data, ')')+1:]
		fields := bytes.Fields(rest)
		if len(fields) >= 2 && string(fields[0]) == "Z" && string(fields[1]) == self {
			n++
		}
	}
	return n
}
