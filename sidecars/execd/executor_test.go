package execd

import (
	"context"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// TestExecutorEnds covers how sessions end that the SPDY tests cannot
// trigger: ServeExec never passes a timeout, and a background process that
// keeps the output open needs a session that otherwise succeeds.
func TestExecutorEnds(t *testing.T) {
	tests := []struct {
		name     string
		cmd      []string
		timeout  time.Duration
		wantCode int
		// within bounds how long the session may take.
		within time.Duration
	}{
		{
			name:     "timeout kills the process group",
			cmd:      []string{"sh", "-c", "sleep 1000 & echo $!; wait"},
			timeout:  300 * time.Millisecond,
			wantCode: 128 + int(syscall.SIGKILL),
			within:   5 * time.Second,
		},
		{
			name:   "background process holding stdout does not hold the session",
			cmd:    []string{"sh", "-c", "sleep 1000 & echo $!"},
			within: defaultOutputDrainTimeout + 3*time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out lockedBuffer
			e := NewExecutor(nil)
			start := time.Now()
			err := e.ExecInContainer(context.Background(), "", "", "", tt.cmd, nil, nopWriteCloser{&out}, nil, false, nil, tt.timeout)
			elapsed := time.Since(start)
			e.Wait()

			pid, perr := strconv.Atoi(strings.TrimSpace(out.String()))
			if perr != nil {
				t.Fatalf("background pid %q: %v", out.String(), perr)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			if got := exitCode(err); got != tt.wantCode {
				t.Errorf("exit code = %d (err %v), want %d", got, err, tt.wantCode)
			}
			if elapsed > tt.within {
				t.Errorf("session took %v, want at most %v", elapsed, tt.within)
			}
			if tt.timeout > 0 {
				waitGone(t, pid)
			}
		})
	}
}
