package jupyter

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const python = "/usr/bin/python3"

func startKernel(t testing.TB) *Kernel {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s: %v", python, err)
	}
	t0 := time.Now()
	k, err := Start(context.Background(), Config{Python: python, StateDir: t.TempDir(), Env: os.Environ()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %v (pid %d, %+v)", time.Since(t0), k.PID(), k.Info())
	t.Cleanup(func() { k.Close() })
	return k
}

// run executes code and returns the outputs and reply, failing on error.
func run(t *testing.T, k *Kernel, code string) ([]Output, *Reply) {
	t.Helper()
	var outs []Output
	r, err := k.Execute(context.Background(), code, func(o Output) { outs = append(outs, o) })
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return outs, r
}

func result(t *testing.T, k *Kernel, code string) string {
	t.Helper()
	outs, r := run(t, k, code)
	if r.Status != "ok" {
		t.Fatalf("Execute(%q): reply %+v, outputs %+v", code, r, outs)
	}
	for _, o := range outs {
		if o.Type == Result {
			if o.ExecutionCount != r.ExecutionCount || o.ExecutionCount == 0 {
				t.Errorf("result execution count %d, reply %d", o.ExecutionCount, r.ExecutionCount)
			}
			return o.Text
		}
	}
	t.Fatalf("Execute(%q): no result in %+v", code, outs)
	return ""
}

func TestStatePersists(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	if info := k.Info(); info.Language != "python" || info.ProtocolVersion == "" {
		t.Errorf("Info = %+v", info)
	}
	run(t, k, "x = 41")
	if got := result(t, k, "x + 1"); got != "42" {
		t.Errorf("x + 1 = %q, want 42", got)
	}
	run(t, k, "import os; os.chdir('/tmp')")
	if got := result(t, k, "os.getcwd()"); got != "'/tmp'" {
		t.Errorf("os.getcwd() = %q, want '/tmp'", got)
	}
}

func TestStdoutStderr(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	outs, r := run(t, k, `print("a"); import sys; print("b", file=sys.stderr)`)
	if r.Status != "ok" {
		t.Fatalf("reply %+v", r)
	}
	want := []Output{{Type: Stdout, Text: "a\n"}, {Type: Stderr, Text: "b\n"}}
	if len(outs) != 2 || outs[0].Type != want[0].Type || outs[0].Text != want[0].Text ||
		outs[1].Type != want[1].Type || outs[1].Text != want[1].Text {
		t.Errorf("outputs %+v, want %+v", outs, want)
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	outs, r := run(t, k, "1/0")
	if r.Status != "error" || r.Error == nil || r.Error.Name != "ZeroDivisionError" {
		t.Fatalf("reply %+v", r)
	}
	if len(outs) != 1 || outs[0].Type != Error || outs[0].Error.Name != "ZeroDivisionError" ||
		len(outs[0].Error.Traceback) == 0 {
		t.Fatalf("outputs %+v", outs)
	}
	tb := StripANSI(strings.Join(outs[0].Error.Traceback, "\n"))
	if !strings.Contains(tb, "ZeroDivisionError") || strings.Contains(tb, "\x1b[") {
		t.Errorf("stripped traceback %q", tb)
	}
	if got := result(t, k, "2 * 21"); got != "42" {
		t.Errorf("after error: %q", got)
	}
}

func TestPlot(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	outs, r := run(t, k, "import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()")
	if r.Status != "ok" {
		t.Fatalf("reply %+v, outputs %+v", r, outs)
	}
	for _, o := range outs {
		if o.Type == Display && o.Data["image/png"] != "" {
			png, err := base64.StdEncoding.DecodeString(strings.TrimSpace(o.Data["image/png"]))
			if err != nil {
				t.Fatalf("image/png: %v", err)
			}
			if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
				t.Fatalf("image/png is not a PNG: %q", png[:min(len(png), 16)])
			}
			return
		}
	}
	t.Fatalf("no image/png display in %+v", outs)
}

func TestJSONData(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	outs, _ := run(t, k, "from IPython.display import JSON, display; display(JSON({'a': [1, 2]}))")
	if len(outs) != 1 || outs[0].Type != Display || outs[0].Data["application/json"] != `{"a":[1,2]}` {
		t.Fatalf("outputs %+v", outs)
	}
}

func TestInterrupt(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	run(t, k, "x = 7")
	var outs []Output
	var mu sync.Mutex
	started := make(chan struct{})
	type res struct {
		r   *Reply
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := k.Execute(context.Background(), "import time; print('go', flush=True); time.sleep(60)", func(o Output) {
			mu.Lock()
			outs = append(outs, o)
			mu.Unlock()
			if o.Type == Stdout {
				close(started)
			}
		})
		done <- res{r, err}
	}()
	<-started
	if err := k.Interrupt(); err != nil {
		t.Fatal(err)
	}
	rs := <-done
	if rs.err != nil || rs.r.Status != "error" || rs.r.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("interrupted Execute: %+v, %v", rs.r, rs.err)
	}
	if got := result(t, k, "x"); got != "7" {
		t.Errorf("x after interrupt = %q", got)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	run(t, k, "y = 'kept'")
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := k.Execute(ctx, "import time; print('go', flush=True); time.sleep(60)", func(o Output) {
			if o.Type == Stdout {
				close(started)
			}
		})
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Execute: %v", err)
	}
	if got := result(t, k, "y"); got != "'kept'" {
		t.Errorf("y after cancel = %q", got)
	}
}

func TestBusy(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := k.Execute(context.Background(), "import time; print('go', flush=True); time.sleep(60)", func(o Output) {
			if o.Type == Stdout {
				close(started)
			}
		})
		errc <- err
	}()
	<-started
	if _, err := k.Execute(context.Background(), "1", nil); !errors.Is(err, ErrBusy) {
		t.Errorf("concurrent Execute: %v, want ErrBusy", err)
	}
	k.Interrupt()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestKernelKilled(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := k.Execute(context.Background(), "import time; print('go', flush=True); time.sleep(60)", func(o Output) {
			if o.Type == Stdout {
				close(started)
			}
		})
		errc <- err
	}()
	<-started
	if err := syscall.Kill(k.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	if !errors.Is(err, ErrKernelDied) || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Execute on killed kernel: %v", err)
	}
	<-k.Done()
	if !errors.Is(k.Err(), ErrKernelDied) {
		t.Errorf("Err = %v", k.Err())
	}
	if _, err := k.Execute(context.Background(), "1", nil); !errors.Is(err, ErrKernelDied) {
		t.Errorf("Execute after death: %v", err)
	}
}

func TestStartError(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "python")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho '/usr/bin/python: No module named ipykernel_launcher' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	_, err := Start(context.Background(), Config{Python: script, StateDir: state})
	var se *StartError
	if !errors.As(err, &se) || !strings.Contains(se.Stderr, "No module named ipykernel") || !errors.Is(err, ErrKernelDied) {
		t.Fatalf("Start: %v (%#v)", err, se)
	}
	t.Logf("error: %v", err)
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("state dir not cleaned: %v", ents)
	}
	// A real interpreter without ipykernel, if PATH has one: Python "" looks up python3 on Env's PATH.
	if p, err := exec.LookPath("python3"); err == nil && exec.Command(p, "-c", "import ipykernel").Run() != nil {
		_, err := Start(context.Background(), Config{StateDir: state, Env: os.Environ()})
		if !errors.As(err, &se) || !strings.Contains(se.Stderr, "No module named ipykernel") {
			t.Errorf("Start with %s: %v", p, err)
		}
		t.Logf("error with %s: %v", p, err)
	}
}

func TestStartTimeout(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "python")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Config{Python: script, StateDir: t.TempDir(), StartTimeout: 200 * time.Millisecond})
	var se *StartError
	if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start: %v", err)
	}
}

func TestStdin(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	outs, r := run(t, k, "input('name? ')")
	if r.Status != "error" || r.Error.Name != "StdinNotImplementedError" {
		t.Fatalf("reply %+v, outputs %+v", r, outs)
	}
}

// TestClose is not parallel: it counts goroutines.
func TestClose(t *testing.T) {
	base := runtime.NumGoroutine()
	state := t.TempDir()
	k, err := Start(context.Background(), Config{Python: python, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(state); len(ents) == 0 {
		t.Errorf("state dir empty while running")
	}
	t0 := time.Now()
	if got := result(t, k, "1+1"); got != "2" {
		t.Errorf("1+1 = %q", got)
	}
	t.Logf("Execute(1+1) round trip: %v", time.Since(t0))
	pid := k.PID()
	errc := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		_, err := k.Execute(context.Background(), "import time; print('go', flush=True); time.sleep(60)", func(o Output) {
			if o.Type == Stdout {
				close(started)
			}
		})
		errc <- err
	}()
	<-started
	t0 = time.Now()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close (busy kernel) took %v", time.Since(t0))
	if err := <-errc; !errors.Is(err, ErrClosed) && !errors.Is(err, ErrKernelDied) {
		t.Errorf("Execute during Close: %v", err)
	}
	k.Close() // idempotent
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("state dir not cleaned: %v", ents)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kernel pid %d still there: %v", pid, err)
	}
	// zmq4 ends some goroutines asynchronously after Close; give them a bounded moment.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

func BenchmarkExecute(b *testing.B) {
	k := startKernel(b)
	for b.Loop() {
		if _, err := k.Execute(context.Background(), "1+1", nil); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCloseIdle(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	pid := k.PID()
	t0 := time.Now()
	k.Close()
	t.Logf("Close (idle kernel, shutdown_request) took %v, exit: %v", time.Since(t0), k.Err())
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kernel pid %d still there: %v", pid, err)
	}
}

func TestDecodeBadSignature(t *testing.T) {
	key := []byte("k")
	frames, err := encode(key, "s", "id", "status", map[string]string{"execution_state": "idle"})
	if err != nil {
		t.Fatal(err)
	}
	frames = append([][]byte{[]byte("topic")}, frames...)
	if m, err := decode(key, frames); err != nil || m.Header.MsgID != "id" {
		t.Fatalf("decode: %+v, %v", m, err)
	}
	if _, err := decode([]byte("other"), frames); !errors.Is(err, errBadSignature) {
		t.Fatalf("decode with wrong key: %v", err)
	}
}
