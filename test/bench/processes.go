package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
)

// processRuns bounds the runs of each process row: a started process is kept (up to
// MaxEndedProcesses) with its log, so the rows start a few hundred at most.
const processRuns = 50

// processes prints the rows of background processes and code contexts, each against an exec
// on the same sandbox in this run: start → ID against exec of `true`; start → first output
// byte and attach → first byte against exec of `echo` to its first byte; log follow
// throughput against exec's stdout; 100 processes started at once against 100 execs at once;
// a run-code round trip on a warm context against exec of `python3 -c` on the same code.
func (b *bench) processes(ctx context.Context) error {
	n := min(*runs, processRuns)
	fmt.Printf("\n## Processes and code contexts\n\nThe same sandbox; each row against an exec (WebSocket) in this run, %d runs each.\n\n", n)
	fmt.Println("| measurement | process / context | exec | ratio (process/exec) |")
	fmt.Println("|---|---|---|---|")
	row := func(what string, ours, theirs []time.Duration) {
		for _, q := range []float64{0.5, 0.99} {
			o, t := quantile(ours, q), quantile(theirs, q)
			fmt.Printf("| %s, p%d | %s | %s | %.2f |\n", what, int(q*100), ms(o), ms(t), float64(o)/float64(t))
		}
	}

	// start → ID: the answer of a start, which does not wait for the process.
	var starts, execs []time.Duration
	for i := -3; i < n; i++ {
		start := time.Now()
		if _, err := b.startProcess(ctx, sandboxv1alpha1.SandboxProcessSpec{Command: []string{"true"}}); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		d := time.Since(start)
		e, err := b.execFirstByte(ctx, []string{"true"}, false)
		if err != nil {
			return err
		}
		if i >= 0 {
			starts, execs = append(starts, d), append(execs, e)
		}
	}
	row("start → ID returned (exec: `true` round trip)", starts, execs)

	// start → first output byte, read with a log follow.
	var firsts []time.Duration
	execs = execs[:0]
	for i := -3; i < n; i++ {
		start := time.Now()
		p, err := b.startProcess(ctx, sandboxv1alpha1.SandboxProcessSpec{Command: []string{"echo", "x"}})
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		if err := b.readLog(ctx, p.Name, map[string]string{"follow": "true", "limitBytes": "1"}, io.Discard); err != nil {
			return fmt.Errorf("log of %s: %w", p.Name, err)
		}
		d := time.Since(start)
		e, err := b.execFirstByte(ctx, []string{"echo", "x"}, true)
		if err != nil {
			return err
		}
		if i >= 0 {
			firsts, execs = append(firsts, d), append(execs, e)
		}
	}
	row("start → first output byte, log follow (exec: `echo` → first byte)", firsts, execs)

	// attach → first byte: a terminal's replay comes at once.
	tty, err := b.startProcess(ctx, sandboxv1alpha1.SandboxProcessSpec{Command: []string{"sh", "-c", "echo ready; exec sleep 3600"}, TTY: true})
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer func() { _ = b.signalProcess(context.Background(), tty.Name, "KILL") }()
	var attaches []time.Duration
	execs = execs[:0]
	for i := -3; i < n; i++ {
		d, err := b.attachFirstByte(ctx, tty.Name)
		if err != nil {
			return fmt.Errorf("attach: %w", err)
		}
		e, err := b.execFirstByte(ctx, []string{"echo", "x"}, true)
		if err != nil {
			return err
		}
		if i >= 0 {
			attaches, execs = append(attaches, d), append(execs, e)
		}
	}
	row("attach → first byte, TTY replay (exec: `echo` → first byte)", attaches, execs)

	// Log follow throughput. The log keeps a process's last 256 KiB and does not slow the
	// process down; a follow that falls more than a rotation (128 KiB) behind ends there, so
	// that its client resumes with offsetBytes and sees the gap. A writer at a set rate (64
	// KiB at a time, for 2 s, from 1 s after the follow is in) shows up to which rate a
	// follow keeps up.
	execRate, err := b.stream(ctx, b.sandboxExecURL)
	if err != nil {
		return err
	}
	for _, rate := range []int{1, 4, 16, 64} {
		writer := fmt.Sprintf(`import sys, time
chunk = b"x" * 65536
time.sleep(1)
start = time.monotonic()
for i in range(%d * 2 * 16):
    sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
    time.sleep(max(0.0, start + (i + 1) / (%d * 16) - time.monotonic()))
`, rate, rate)
		p, err := b.startProcess(ctx, sandboxv1alpha1.SandboxProcessSpec{Command: []string{"python3", "-c", writer}})
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		fw, cw := &firstByteWriter{}, &countWriter{}
		if err := b.readLog(ctx, p.Name, map[string]string{"follow": "true"}, io.MultiWriter(fw, cw)); err != nil {
			return fmt.Errorf("follow: %w", err)
		}
		if fw.at.IsZero() {
			return errors.New("a follow of a writing process got nothing")
		}
		written := float64(rate * 2 << 20)
		follow := float64(cw.n) / (1 << 20) / time.Since(fw.at).Seconds()
		fmt.Printf("| log follow throughput, a process writing %d MiB/s for 2 s (%.1f%% of it arrived) | %.0f MiB/s | %.0f MiB/s | %.2f |\n",
			rate, 100*float64(cw.n)/written, follow, execRate, follow/execRate)
	}

	// 100 at once: at most MaxProcesses run at once, so a start refused with 429 waits for
	// one of the others to end and tries again (counted).
	const burst = 100
	var refused atomic.Int64
	burstOf := func(one func() error) (time.Duration, error) {
		var wg sync.WaitGroup
		errs := make(chan error, burst)
		start := time.Now()
		for range burst {
			wg.Go(func() { errs <- one() })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	}
	ours, err := burstOf(func() error {
		for {
			_, err := b.startProcess(ctx, sandboxv1alpha1.SandboxProcessSpec{Command: []string{"true"}})
			if !apierrors.IsTooManyRequests(err) {
				return err
			}
			refused.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	})
	if err != nil {
		return fmt.Errorf("100 starts: %w", err)
	}
	theirs, err := burstOf(func() error { _, err := b.execFirstByte(ctx, []string{"true"}, false); return err })
	if err != nil {
		return fmt.Errorf("100 execs: %w", err)
	}
	fmt.Printf("| %d processes started at once, all IDs returned (%d starts refused with 429 and retried) | %s | %s | %.2f |\n",
		burst, refused.Load(), ms(ours), ms(theirs), float64(ours)/float64(theirs))

	// run-code on a warm context against python3 -c.
	code := "sum(i * i for i in range(1000))"
	var runsCode []time.Duration
	execs = execs[:0]
	for i := -3; i < n; i++ {
		start := time.Now()
		if err := b.runCode(ctx, code); err != nil {
			return fmt.Errorf("run-code: %w", err)
		}
		d := time.Since(start)
		e, err := b.execFirstByte(ctx, []string{"python3", "-c", "print(" + code + ")"}, false)
		if err != nil {
			return err
		}
		if i >= 0 {
			runsCode, execs = append(runsCode, d), append(execs, e)
		}
	}
	row("run-code round trip, warm context (exec: `python3 -c` of the same code)", runsCode, execs)
	return nil
}

func (b *bench) sandboxREST() rest.Interface { return b.sandboxes.SandboxV1alpha1().RESTClient() }

func (b *bench) startProcess(ctx context.Context, spec sandboxv1alpha1.SandboxProcessSpec) (*sandboxv1alpha1.SandboxProcess, error) {
	out := &sandboxv1alpha1.SandboxProcess{}
	err := b.sandboxREST().Post().Namespace(*namespace).Resource("sandboxes").Name(b.name).SubResource("processes").
		Body(&sandboxv1alpha1.SandboxProcess{Spec: spec}).Do(ctx).Into(out)
	return out, err
}

func (b *bench) signalProcess(ctx context.Context, id, signal string) error {
	return b.sandboxREST().Post().Namespace(*namespace).Resource("sandboxes").Name(b.name).SubResource("processes", id, "signal").
		Body(&sandboxv1alpha1.SandboxProcessSignal{Signal: signal}).Do(ctx).Error()
}

// readLog copies the log of process id, read with params, to w until it ends.
func (b *bench) readLog(ctx context.Context, id string, params map[string]string, w io.Writer) error {
	req := b.sandboxREST().Get().Namespace(*namespace).Resource("sandboxes").Name(b.name).SubResource("log").Param("process", id)
	for k, v := range params {
		req = req.Param(k, v)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	_, err = io.Copy(w, body)
	return err
}

// firstByteWriter records when the first byte arrives, and cancels the stream then.
type firstByteWriter struct {
	once   sync.Once
	at     time.Time
	cancel context.CancelFunc
}

func (w *firstByteWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		w.once.Do(func() {
			w.at = time.Now()
			if w.cancel != nil {
				w.cancel()
			}
		})
	}
	return len(p), nil
}

// execFirstByte runs cmd with sandboxes/exec over WebSocket: the time to its first byte of
// stdout if first, else to its end.
func (b *bench) execFirstByte(ctx context.Context, cmd []string, first bool) (time.Duration, error) {
	exec, err := b.executor("websocket", b.sandboxExecURL(cmd))
	if err != nil {
		return 0, err
	}
	w := &firstByteWriter{}
	start := time.Now()
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: w, Stderr: io.Discard}); err != nil {
		return 0, fmt.Errorf("exec %v: %w", cmd, err)
	}
	if !first {
		return time.Since(start), nil
	}
	if w.at.IsZero() {
		return 0, fmt.Errorf("exec %v printed nothing", cmd)
	}
	return w.at.Sub(start), nil
}

// attachFirstByte attaches to process id over WebSocket and detaches at its first byte.
func (b *bench) attachFirstByte(ctx context.Context, id string) (time.Duration, error) {
	u := b.sandboxREST().Post().Namespace(*namespace).Resource("sandboxes").Name(b.name).SubResource("attach").
		VersionedParams(&sandboxv1alpha1.SandboxAttachOptions{Process: id, Stdout: true, TTY: true}, scheme.ParameterCodec).URL()
	exec, err := b.executor("websocket", u)
	if err != nil {
		return 0, err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &firstByteWriter{cancel: cancel}
	start := time.Now()
	err = exec.StreamWithContext(actx, remotecommand.StreamOptions{Stdout: w, Tty: true})
	if w.at.IsZero() {
		return 0, fmt.Errorf("no byte from the attach: %v", err)
	}
	return w.at.Sub(start), nil
}

// runCode runs code in the default context and reads its events to the end.
func (b *bench) runCode(ctx context.Context, code string) error {
	body, err := b.sandboxREST().Post().Namespace(*namespace).Resource("sandboxes").Name(b.name).
		SubResource("contexts", sandboxv1alpha1.DefaultCodeContext, "run").
		Body(&sandboxv1alpha1.SandboxCodeRun{Code: code}).Stream(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	sc := bufio.NewScanner(body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"type":"end"`) {
			if !strings.Contains(sc.Text(), `"status":"ok"`) {
				return fmt.Errorf("the run ended with %s", sc.Text())
			}
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the run's answer ended without its end event")
}
