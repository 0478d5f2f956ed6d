// Package reaper collects orphaned processes when sandbox-execd is PID 1 of a
// container.
//
// The kernel re-parents every orphan in a PID namespace to PID 1, and an
// orphan that exits stays a zombie until PID 1 waits for it. A user's
// entrypoint or exec session that daemonizes ("cmd &", double forks) would
// otherwise fill the process table with zombies.
//
// The difficulty is that execd also starts children of its own (the
// entrypoint, exec sessions) whose exit status os/exec must collect. A naive
// wait4(-1) loop would steal those statuses and make cmd.Wait fail with
// ECHILD, turning a user's "exit 3" into an internal error. So the reaper only
// peeks at exited children (waitid with WNOWAIT) and reaps a pid only when it
// is not one execd started itself.
package reaper

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Reaper reaps exited processes that execd did not start. A nil *Reaper is
// valid: Start then just starts the process and Release does nothing, which is
// what callers want when execd is not PID 1 and orphans are someone else's.
type Reaper struct {
	// mu is held while a tracked child is being forked and registered, and
	// while the reaper peeks and reaps. See Start for why both need it.
	mu      sync.Mutex
	tracked map[int]struct{}
	// kick asks Run for another pass; Release sends on it because a tracked
	// zombie may have been hiding other zombies (see reapLocked).
	kick chan struct{}
}

// New returns a Reaper. Call Run to start reaping.
func New() *Reaper {
	return &Reaper{
		tracked: map[int]struct{}{},
		kick:    make(chan struct{}, 1),
	}
}

// Start calls start, which must start exactly one child process and return
// its pid, and tracks that pid so the reaper leaves its exit status to the
// caller's Wait. The caller must call Release(pid) after Wait returns.
//
// Registering the pid after start returns would be racy: the child can exit
// between fork and registration, and a reaping pass in that window would see
// an untracked zombie and reap it, so the caller's Wait would fail with ECHILD.
// Holding mu across the fork closes that window: a reaping pass (which also
// holds mu) runs either entirely before the fork, when the child does not
// exist yet, or after the pid is tracked.
func (r *Reaper) Start(start func() (pid int, err error)) (int, error) {
	if r == nil {
		return start()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, err
	}
	r.tracked[pid] = struct{}{}
	return pid, nil
}

// Release stops tracking pid. Call it after the caller's Wait has collected
// the exit status; until then a reaping pass never touches pid.
func (r *Reaper) Release(pid int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.tracked, pid)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default: // a pass is already pending
	}
}

// Run reaps untracked exited children until ctx is cancelled. It must run in
// the process that is PID 1 (or a child subreaper), otherwise there is nothing
// to reap.
func (r *Reaper) Run(ctx context.Context) {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, unix.SIGCHLD)
	defer signal.Stop(sigchld)
	for {
		// Reap first: children may have exited before Notify was installed,
		// and SIGCHLDs coalesce, so a pass must not assume one exit per signal.
		r.reap()
		select {
		case <-ctx.Done():
			return
		case <-sigchld:
		case <-r.kick:
		}
	}
}

// reap is one pass; it returns how many processes it reaped.
func (r *Reaper) reap() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reapLocked()
}

func (r *Reaper) reapLocked() int {
	reaped := 0
	for {
		pid, err := peekExited()
		if err != nil {
			if !errors.Is(err, unix.ECHILD) {
				klog.ErrorS(err, "Peeking at exited children failed")
			}
			return reaped
		}
		if pid == 0 {
			return reaped // no child has exited
		}
		if _, ok := r.tracked[pid]; ok {
			// waitid(P_ALL) always reports the oldest exited child, so a
			// tracked zombie hides any zombie behind it. Its owner is blocked
			// in Wait and will collect it right away; Release then kicks Run
			// into another pass that sees past it.
			return reaped
		}
		var status unix.WaitStatus
		got, err := unix.Wait4(pid, &status, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || got != pid {
			klog.ErrorS(err, "Reaping orphaned process failed", "pid", pid)
			return reaped
		}
		reaped++
		klog.V(4).InfoS("Reaped orphaned process", "pid", pid, "exitStatus", status.ExitStatus(), "signal", status.Signal())
	}
}

// siginfoHead mirrors the start of the kernel's siginfo_t for SIGCHLD:
// x/sys/unix.Siginfo hides the union that holds si_pid. The union is
// pointer-aligned, which the embedded struct with a uintptr reproduces on
// both 32- and 64-bit architectures.
type siginfoHead struct {
	Signo int32
	Errno int32
	Code  int32
	Child struct {
		Pid int32
		Uid uint32
		_   uintptr
	}
}

// The kernel writes into a full unix.Siginfo; siginfoHead must fit inside it.
var _ [unsafe.Sizeof(unix.Siginfo{}) - unsafe.Sizeof(siginfoHead{})]byte

// peekExited returns the pid of an exited child without reaping it, 0 if no
// child has exited yet, or ECHILD if there are no children at all.
func peekExited() (int, error) {
	for {
		var info unix.Siginfo // zeroed, so si_pid stays 0 when nothing exited
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return int((*siginfoHead)(unsafe.Pointer(&info)).Child.Pid), nil
	}
}
