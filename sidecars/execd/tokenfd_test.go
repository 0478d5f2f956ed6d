package execd

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestServeTokenNotInEnviron runs serve as its own process: the token must not show in
// /proc/PID/environ (serve re-executes itself to drop it) while exec with it still works, and
// the descriptor that carried it must be closed.
func TestServeTokenNotInEnviron(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		tokenEnv string // "" for the default
		claim    bool
	}{
		{name: "default token variable"},
		{name: "custom token variable", tokenEnv: "MY_EXECD_TOKEN"},
		{name: "claimed afterwards", claim: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := freeAddr(t)
			args := []string{"serve", "--listen", addr}
			envName := TokenEnv
			if tt.tokenEnv != "" {
				args = append(args, "--token-env", tt.tokenEnv)
				envName = tt.tokenEnv
			}
			cmd := exec.Command(self, args...)
			cmd.Env = append(os.Environ(), runMainEnv+"=1", envName+"="+testToken)
			var output lockedBuffer
			cmd.Stdout, cmd.Stderr = &output, &output
			cmd.WaitDelay = 5 * time.Second
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			waitHealthy(t, addr)
			base := "http://" + addr
			pid := cmd.Process.Pid

			token := testToken
			if tt.claim {
				s := &claimServer{srv: &httptest.Server{URL: base}}
				s.mustClaim(t, newClaim("uid-1"))
				token = sandboxToken
			}
			res := execVia(testContext(t), base, execRequest{
				cmd:   []string{"sh", "-c", fmt.Sprintf(`echo "${%s-unset} ${%s-unset} $PPID"`, envName, tokenFDEnv)},
				token: token,
			})
			if want := fmt.Sprintf("unset unset %d\n", pid); res.err != nil || res.stdout != want {
				t.Errorf("exec: %q (err %v), want %q: no token variables, execd (still pid %d) as parent", res.stdout, res.err, want, pid)
			}

			environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range bytes.Split(environ, []byte{0}) {
				if bytes.Contains(kv, []byte(testToken)) || bytes.Contains(kv, []byte(sandboxToken)) {
					t.Errorf("/proc/%d/environ holds a token: %q", pid, kv)
				}
			}
			if !bytes.Contains(environ, []byte(runMainEnv+"=1")) {
				t.Errorf("/proc/%d/environ lost the rest of the environment", pid)
			}
			fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
			for _, fd := range fds {
				if target, _ := os.Readlink(fd); strings.Contains(target, "memfd:") {
					t.Errorf("execd still holds %s -> %s", fd, target)
				}
			}
			if out := output.String(); strings.Contains(out, testToken) || strings.Contains(out, "Could not re-execute") {
				t.Errorf("execd's output:\n%s", out)
			}
		})
	}
}

// TestServeTokenFD covers reading the token descriptor.
func TestServeTokenFD(t *testing.T) {
	tests := []struct {
		name    string
		content string
		// value is what $SANDBOX_EXECD_TOKEN_FD says, given a descriptor of the file.
		value   func(fd int) string
		wantErr string
	}{
		{name: "token", content: "abc", value: strconv.Itoa},
		{name: "empty", content: "", value: strconv.Itoa},
		{name: "not a number", value: func(int) string { return "three" }, wantErr: "not a file descriptor"},
		{name: "negative", value: func(int) string { return "-1" }, wantErr: "not a file descriptor"},
		{name: "too long", content: strings.Repeat("x", maxTokenBytes+1), value: strconv.Itoa, wantErr: "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.CreateTemp(t.TempDir(), "token")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			if _, err := f.WriteString(tt.content); err != nil {
				t.Fatal(err)
			}
			// readTokenFD closes the descriptor it reads: a copy of its own.
			fd, err := unix.Dup(int(f.Fd()))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			value := tt.value(fd)
			if value != strconv.Itoa(fd) {
				_ = unix.Close(fd) // readTokenFD cannot know it
			}
			got, err := readTokenFD(value)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.content {
				t.Fatalf("got %q, %v; want %q", got, err, tt.content)
			}
		})
	}
}

// TestServeReexecKeepsParentDeathSignal: serve re-executes itself from the main thread, so the
// parent-death signal a supervisor set (here unshare --kill-child) still ends it.
func TestServeReexecKeepsParentDeathSignal(t *testing.T) {
	cmd, addr, output, exited := startServeInPIDNamespace(t)
	// execd is the one to tell: exec'd commands see it as PID 1 of their namespace.
	if res := execVia(testContext(t), "http://"+addr, execRequest{cmd: []string{"sh", "-c", "echo $PPID"}, token: testToken}); res.stdout != "1\n" {
		t.Fatalf("exec: %q (%v), want execd as PID 1", res.stdout, res.err)
	}
	_ = cmd.Process.Kill() // unshare: the kernel must now kill execd
	<-exited
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + HealthzPath)
		if err != nil {
			break
		}
		_ = resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("execd outlived its parent; output:\n%s", output.String())
		}
	}
	if !strings.Contains(output.String(), "Serving exec sessions") || strings.Contains(output.String(), "Not re-executing") {
		t.Errorf("execd's output:\n%s", output.String())
	}
}
