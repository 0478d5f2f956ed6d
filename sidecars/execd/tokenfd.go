package execd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// init keeps main.main, and so the serve command, on the main thread, where serve re-executes
// the process (see canReexec). Only the sandbox-execd binary and tests import this package;
// for them, the main goroutine being locked to the main thread costs nothing.
func init() { runtime.LockOSThread() }

// tokenFDEnv names the file descriptor that holds the token after serve re-executed itself
// (see reexecWithTokenFD). execd sets it for itself; it carries a number, not the token.
const tokenFDEnv = "SANDBOX_EXECD_TOKEN_FD"

// maxTokenBytes bounds what serve reads from the token descriptor.
const maxTokenBytes = 64 << 10

// reexecWithTokenFD replaces the process image with a fresh start of the same executable,
// with the same arguments and PID, whose environment lacks the token: os.Unsetenv only
// changes the Go runtime's copy of the environment, while /proc/PID/environ keeps showing
// the one the process started with, readable by processes of the same user in the sandbox.
// The token travels in a memfd the new image inherits, named by tokenFDEnv; readTokenFD
// reads and closes it. The caller must have removed the token variable from the environment.
//
// It returns only if the re-exec failed; execd then carries on with the token it has.
func reexecWithTokenFD(token string) error {
	// No MFD_CLOEXEC: the new image must inherit it. Nothing else is started before the
	// exec, so no other child inherits it.
	fd, err := unix.MemfdCreate("sandbox-execd-token", 0)
	if err != nil {
		return fmt.Errorf("creating a memfd for the token: %w", err)
	}
	defer func() { _ = unix.Close(fd) }() // runs only when something failed
	for b := []byte(token); len(b) > 0; {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing the token to its memfd: %w", err)
		}
		b = b[n:]
	}
	env := append(os.Environ(), tokenFDEnv+"="+strconv.Itoa(fd))
	// /proc/self/exe is the executable this process runs even if its path changed since.
	if err := syscall.Exec("/proc/self/exe", os.Args, env); err != nil {
		return fmt.Errorf("re-executing %s: %w", os.Args[0], err)
	}
	return nil // not reached
}

// readTokenFD reads the token from the descriptor named by tokenFDEnv's value and closes it.
func readTokenFD(value string) (string, error) {
	fd, err := strconv.Atoi(value)
	if err != nil || fd < 0 {
		return "", fmt.Errorf("$%s=%q is not a file descriptor", tokenFDEnv, value)
	}
	f := os.NewFile(uintptr(fd), "token")
	defer func() { _ = f.Close() }()
	// From offset 0 whatever the descriptor's position: the writer left it at the end.
	b, err := io.ReadAll(io.NewSectionReader(f, 0, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading the token from file descriptor %d: %w", fd, err)
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("the token in file descriptor %d is longer than %d bytes", fd, maxTokenBytes)
	}
	return string(b), nil
}

// canReexec reports whether serve may re-execute the process, and why not.
func canReexec(cmd *cobra.Command) (bool, string) {
	// The new image parses os.Args afresh, which is not what cmd ran with when its arguments
	// were set otherwise (cobra's SetArgs, as in tests running the command in-process).
	if found, _, err := cmd.Root().Find(os.Args[1:]); err != nil || found != cmd {
		return false, "the command's arguments are not the process's"
	}
	// The kernel keeps per-thread state of the thread that calls execve only, such as the
	// parent-death signal (unshare --kill-child, bwrap --die-with-parent): exec from another
	// thread would drop it. This package's init keeps main.main on the main thread.
	runtime.LockOSThread() // until the exec, or for good: harmless on the main thread
	if unix.Gettid() != unix.Getpid() {
		runtime.UnlockOSThread()
		return false, "not on the main thread"
	}
	return true, ""
}
