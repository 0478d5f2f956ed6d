// Package jupyter runs Jupyter kernels (ipykernel) and drives them over the Jupyter messaging
// protocol, for sandbox-execd's stateful code contexts.
//
// # Protocol
//
// This is a client of the Jupyter wire protocol v5.3: every message is a ZeroMQ multipart
// message "<IDS|MSG>", HMAC-SHA256 signature, header, parent_header, metadata, content. Each
// kernel gets a fresh random key; every received message is verified and dropped (and counted)
// when its signature is wrong. The client connects a DEALER to shell and control and a SUB,
// subscribed to everything, to iopub; heartbeat and stdin are not used (execute requests set
// allow_stdin false, so input() fails at once with StdinNotImplementedError). ZeroMQ is
// github.com/go-zeromq/zmq4, pure Go, so execd stays a static CGO_ENABLED=0 binary. One reader
// goroutine per socket verifies messages and hands them to the request whose msg_id is their
// parent_header.msg_id; messages for nobody are dropped.
//
// # Transport
//
// The kernel uses the ipc transport: unix sockets StateDir/<id>-1 ... StateDir/<id>-5, names
// chosen by this package and written with the key into the connection file StateDir/<id>.json
// (0600). Nothing is raced: no TCP port is guessed, nothing is exposed on loopback, and the
// private StateDir guards the sockets. (ipykernel 6.17 does rewrite a connection file given
// with tcp ports 0, but that needs watching the file; ipc names are known up front.) Unix
// socket paths are limited to 107 bytes, so StateDir must be short; Start says so otherwise.
//
// # Readiness
//
// Start launches "python -m ipykernel_launcher -f FILE" in its own process group and dials the
// sockets, retrying every few milliseconds until the kernel has bound them. It then sends
// kernel_info_request on shell, resending every 100ms until both a kernel_info_reply arrived
// and a status message for one of the requests arrived on iopub: that proves the iopub
// subscription is live (the SUB "slow joiner" problem), so no output of the first Execute is
// lost. A kernel that exits first, or does not answer within StartTimeout, yields a *StartError
// with the tail of its stderr.
//
// # Interrupt and lifecycle
//
// ipykernel's default interrupt_mode is "signal": Interrupt sends SIGINT to the kernel's
// process group (as jupyter_client does), so the running cell and any child processes it waits
// for are interrupted; ipykernel ignores SIGINT while idle. The cell then ends with a
// KeyboardInterrupt error and the interpreter state is kept. Close sends shutdown_request on
// control, waits up to 2s, SIGKILLs the process group, closes the sockets, waits for every
// goroutine of the kernel and removes its files from StateDir.
package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
	"k8s.io/klog/v2"
)

var (
	// ErrBusy is returned by Execute when another Execute is running on the kernel.
	ErrBusy = errors.New("jupyter: kernel is busy")
	// ErrKernelDied is returned (wrapped with the exit status) when the kernel process has exited.
	ErrKernelDied = errors.New("jupyter: kernel died")
	// ErrClosed is returned by Execute when the kernel is being closed.
	ErrClosed = errors.New("jupyter: kernel closed")
)

// StartError is returned by Start when the kernel could not be started.
type StartError struct {
	Err    error
	Stderr string // the last 4 KiB of the kernel's stderr
}

func (e *StartError) Error() string {
	msg := "jupyter: kernel did not start: " + e.Err.Error()
	if s := strings.TrimSpace(e.Stderr); s != "" {
		lines := strings.Split(s, "\n")
		msg += ": " + lines[len(lines)-1]
	}
	return msg
}

func (e *StartError) Unwrap() error { return e.Err }

// Config says how to start a kernel.
type Config struct {
	// Python is the interpreter; "" means "python3" looked up on Env's PATH.
	Python string
	// Dir is the working directory of the kernel ("" = inherit).
	Dir string
	// Env is the whole environment of the kernel process (nil = inherit execd's). If it lacks
	// MPLBACKEND, ipykernel selects the inline matplotlib backend, so plt.show() displays PNGs.
	Env []string
	// StateDir is a private directory (created 0700 if missing) for the connection file and the
	// unix sockets; they are removed on Close.
	StateDir string
	// StartTimeout bounds the start, up to the kernel_info_reply (default 30s).
	StartTimeout time.Duration
}

// Kernel is a running Jupyter kernel.
type Kernel struct {
	key     []byte
	session string
	cmd     *exec.Cmd
	files   []string
	info    KernelInfo
	ready   bool // the handshake succeeded

	shell, control, iopub zmq4.Socket
	sockCancel            context.CancelFunc
	wg                    sync.WaitGroup // reader goroutines
	stderr                *tail
	stderrDone            chan struct{}

	done    chan struct{} // closed when the process has exited
	exitErr error         // set before done is closed

	closing   chan struct{}
	closeOnce sync.Once
	busy      atomic.Bool
	dropped   atomic.Int64

	mu      sync.Mutex
	pending map[string]*request
}

// request receives the messages whose parent is one of its msg_ids.
type request struct {
	ch   chan *message
	done chan struct{}
}

const (
	shutdownGrace  = 2 * time.Second
	interruptGrace = 10 * time.Second
	stderrTail     = 4096
)

// Start launches the kernel and returns once it answered a kernel_info_request and its iopub
// subscription is live. Errors are of type *StartError.
func Start(ctx context.Context, cfg Config) (*Kernel, error) {
	k, err := launch(cfg)
	if err != nil {
		return nil, &StartError{Err: err}
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := k.connect(ctx); err != nil {
		died := k.exited()
		_ = k.Close()
		if died && !errors.Is(err, ErrKernelDied) {
			err = fmt.Errorf("%w: %w", ErrKernelDied, k.exitErr)
		}
		return nil, &StartError{Err: err, Stderr: k.stderr.String()}
	}
	return k, nil
}

func launch(cfg Config) (*Kernel, error) {
	python, err := lookPython(cfg.Python, cfg.Env)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("jupyter: state dir: %w", err)
	}
	id := randomHex(4)
	base := filepath.Join(cfg.StateDir, id)
	if len(base)+2 > 107 {
		return nil, fmt.Errorf("jupyter: state dir %q too long for unix socket paths", cfg.StateDir)
	}
	k := &Kernel{
		key:        []byte(randomHex(32)),
		session:    randomHex(16),
		stderr:     &tail{max: stderrTail},
		stderrDone: make(chan struct{}),
		done:       make(chan struct{}),
		closing:    make(chan struct{}),
		pending:    make(map[string]*request),
	}
	conn := map[string]any{
		"transport": "ipc", "ip": base, "key": string(k.key), "signature_scheme": "hmac-sha256",
		"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5,
		"kernel_name": "python3",
	}
	cf := base + ".json"
	k.files = []string{cf}
	for i := 1; i <= 5; i++ {
		k.files = append(k.files, fmt.Sprintf("%s-%d", base, i))
	}
	b, _ := json.Marshal(conn)
	if err := os.WriteFile(cf, b, 0o600); err != nil {
		return nil, fmt.Errorf("jupyter: connection file: %w", err)
	}

	// stderr goes through our own pipe so that Wait returns when the kernel exits, even if
	// an orphaned child keeps the pipe open (it is killed with the group just after).
	pr, pw, err := os.Pipe()
	if err != nil {
		k.removeFiles()
		return nil, fmt.Errorf("jupyter: %w", err)
	}
	cmd := exec.Command(python, "-m", "ipykernel_launcher", "-f", cf,
		"--HistoryManager.enabled=False", "--IPKernelApp.quiet=True")
	cmd.Dir, cmd.Env, cmd.Stderr = cfg.Dir, cfg.Env, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		k.removeFiles()
		return nil, fmt.Errorf("jupyter: start %s: %w", python, err)
	}
	k.cmd = cmd
	go func() {
		defer close(k.stderrDone)
		defer pr.Close()
		_, _ = io.Copy(k.stderr, pr)
	}()
	go k.wait()
	return k, nil
}

// wait reaps the kernel process, kills what remains of its group and closes done.
func (k *Kernel) wait() {
	err := k.cmd.Wait()
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-k.stderrDone:
	case <-time.After(time.Second): // a child escaped the group and holds stderr
	}
	if err == nil {
		err = errors.New("exit status 0")
	}
	k.exitErr = err
	close(k.done)
}

func (k *Kernel) exited() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

// connect dials the sockets, starts the readers and waits for the kernel to be ready.
func (k *Kernel) connect(ctx context.Context) error {
	sctx, cancel := context.WithCancel(context.Background())
	k.sockCancel = cancel
	// Abort the dial retries when the kernel dies or ctx ends.
	stop := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Go(func() {
		select {
		case <-k.done:
		case <-ctx.Done():
		case <-stop:
			return
		}
		cancel()
	})
	err := k.dial(sctx)
	close(stop)
	watcher.Wait()
	if err == nil && sctx.Err() != nil {
		err = sctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("jupyter: connecting: %w", ctx.Err())
		}
		return err
	}
	for name, s := range map[string]zmq4.Socket{"shell": k.shell, "control": k.control, "iopub": k.iopub} {
		k.wg.Go(func() { k.read(name, s) })
	}
	if err := k.handshake(ctx); err != nil {
		return err
	}
	k.ready = true
	return nil
}

func (k *Kernel) dial(ctx context.Context) error {
	opts := []zmq4.Option{zmq4.WithDialerRetry(10 * time.Millisecond), zmq4.WithDialerMaxRetries(-1),
		zmq4.WithTimeout(5 * time.Second)}
	k.shell = zmq4.NewDealer(ctx, opts...)
	k.control = zmq4.NewDealer(ctx, opts...)
	k.iopub = zmq4.NewSub(ctx, opts...)
	for _, d := range []struct {
		s    zmq4.Socket
		port int
	}{{k.shell, 1}, {k.iopub, 2}, {k.control, 4}} {
		if err := d.s.Dial("ipc://" + k.files[d.port]); err != nil {
			return fmt.Errorf("jupyter: dial: %w", err)
		}
	}
	if err := k.iopub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return fmt.Errorf("jupyter: subscribe: %w", err)
	}
	return nil
}

// handshake sends kernel_info_request until both the reply and an iopub status for it arrived.
func (k *Kernel) handshake(ctx context.Context) error {
	req := &request{ch: make(chan *message, 16), done: make(chan struct{})}
	var ids []string
	defer func() { k.unregister(req, ids...) }()
	send := func() error {
		id := randomHex(16)
		ids = append(ids, id)
		k.register(req, id)
		return k.send(k.shell, id, "kernel_info_request", struct{}{})
	}
	if err := send(); err != nil {
		return err
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	gotReply, gotStatus := false, false
	for !gotReply || !gotStatus {
		select {
		case m := <-req.ch:
			switch {
			case m.channel == "iopub" && m.Header.MsgType == "status":
				gotStatus = true
			case m.channel == "shell" && m.Header.MsgType == "kernel_info_reply" && !gotReply:
				if err := k.parseInfo(m.Content); err != nil {
					return err
				}
				gotReply = true
			}
		case <-tick.C:
			if !gotStatus {
				if err := send(); err != nil {
					return err
				}
			}
		case <-k.done:
			return fmt.Errorf("%w: %w", ErrKernelDied, k.exitErr)
		case <-ctx.Done():
			return fmt.Errorf("jupyter: waiting for kernel_info_reply: %w", ctx.Err())
		}
	}
	return nil
}

func (k *Kernel) parseInfo(content []byte) error {
	var c struct {
		ProtocolVersion       string `json:"protocol_version"`
		Implementation        string `json:"implementation"`
		ImplementationVersion string `json:"implementation_version"`
		Banner                string `json:"banner"`
		LanguageInfo          struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"language_info"`
	}
	if err := json.Unmarshal(content, &c); err != nil {
		return fmt.Errorf("jupyter: bad kernel_info_reply: %w", err)
	}
	k.info = KernelInfo{ProtocolVersion: c.ProtocolVersion, Implementation: c.Implementation,
		ImplementationVersion: c.ImplementationVersion, Banner: c.Banner,
		Language: c.LanguageInfo.Name, LanguageVersion: c.LanguageInfo.Version}
	return nil
}

// read receives, verifies and dispatches the messages of one socket until it fails (the
// kernel closed its end, or Close closed the socket).
func (k *Kernel) read(channel string, s zmq4.Socket) {
	for {
		zm, err := s.Recv()
		if err != nil {
			klog.V(4).InfoS("jupyter: socket reader stopped", "channel", channel, "err", err)
			return
		}
		if zm.Type == zmq4.CmdMsg {
			continue
		}
		m, err := decode(k.key, zm.Frames)
		if err != nil {
			n := k.dropped.Add(1)
			klog.InfoS("jupyter: dropping message", "channel", channel, "err", err, "dropped", n)
			continue
		}
		m.channel = channel
		k.mu.Lock()
		req := k.pending[m.Parent.MsgID]
		k.mu.Unlock()
		if req == nil {
			continue
		}
		select {
		case req.ch <- m:
		case <-req.done:
		case <-k.closing:
		}
	}
}

func (k *Kernel) register(req *request, id string) {
	k.mu.Lock()
	k.pending[id] = req
	k.mu.Unlock()
}

func (k *Kernel) unregister(req *request, ids ...string) {
	k.mu.Lock()
	for _, id := range ids {
		delete(k.pending, id)
	}
	k.mu.Unlock()
	close(req.done)
}

func (k *Kernel) send(s zmq4.Socket, msgID, msgType string, content any) error {
	frames, err := encode(k.key, k.session, msgID, msgType, content)
	if err != nil {
		return err
	}
	if err := s.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		return fmt.Errorf("jupyter: send %s: %w", msgType, err)
	}
	return nil
}

// PID returns the process id of the kernel.
func (k *Kernel) PID() int { return k.cmd.Process.Pid }

// Info returns what the kernel said about itself in its kernel_info_reply.
func (k *Kernel) Info() KernelInfo { return k.info }

// Done is closed when the kernel process has exited, for whatever reason.
func (k *Kernel) Done() <-chan struct{} { return k.done }

// Err says, once Done is closed, why the kernel process ended (nil before).
func (k *Kernel) Err() error {
	if !k.exited() {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrKernelDied, k.exitErr)
}

// Dropped returns how many received messages were dropped as malformed or badly signed.
func (k *Kernel) Dropped() int64 { return k.dropped.Load() }

// Execute runs code and calls emit, in order, for each output of this request as it arrives
// on iopub, until the kernel is idle again and its execute_reply arrived. Only one Execute runs
// at a time: a concurrent call returns ErrBusy at once. If ctx ends first, Execute interrupts
// the kernel (resending SIGINT every second), waits up to 10s for the reply so the kernel is
// left idle and usable, and returns an error wrapping ctx.Err() (with the Reply if it came).
// If the kernel dies meanwhile, the error wraps ErrKernelDied and the exit status; if Close is
// called, ErrClosed.
func (k *Kernel) Execute(ctx context.Context, code string, emit func(Output)) (*Reply, error) {
	if !k.busy.CompareAndSwap(false, true) {
		return nil, ErrBusy
	}
	defer k.busy.Store(false)
	select {
	case <-k.closing:
		return nil, ErrClosed
	case <-k.done:
		return nil, k.Err()
	default:
	}
	id := randomHex(16)
	req := &request{ch: make(chan *message, 64), done: make(chan struct{})}
	k.register(req, id)
	defer k.unregister(req, id)
	err := k.send(k.shell, id, "execute_request", map[string]any{
		"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{},
		"allow_stdin": false, "stop_on_error": false, // true races in ipykernel 6: it can abort the next cell
	})
	if err != nil {
		return nil, err
	}
	var (
		reply    *Reply
		idle     bool
		ctxDone  = ctx.Done()
		ctxErr   error
		deadline <-chan time.Time
		resend   *time.Ticker
		resendC  <-chan time.Time
	)
	defer func() {
		if resend != nil {
			resend.Stop()
		}
	}()
	for reply == nil || !idle {
		select {
		case m := <-req.ch:
			if m.channel == "shell" && m.Header.MsgType == "execute_reply" {
				if reply, err = parseReply(m.Content); err != nil {
					return nil, err
				}
				continue
			}
			if m.channel != "iopub" {
				continue
			}
			if m.Header.MsgType == "status" {
				var st struct {
					State string `json:"execution_state"`
				}
				if json.Unmarshal(m.Content, &st) == nil && st.State == "idle" {
					idle = true
				}
				continue
			}
			out, ok, err := toOutput(m)
			if err != nil {
				klog.InfoS("jupyter: bad output message", "err", err)
			} else if ok && emit != nil {
				emit(out)
			}
		case <-ctxDone:
			ctxDone, ctxErr = nil, ctx.Err()
			_ = k.Interrupt()
			deadline = time.After(interruptGrace)
			resend = time.NewTicker(time.Second)
			resendC = resend.C
		case <-resendC:
			_ = k.Interrupt()
		case <-deadline:
			return reply, fmt.Errorf("jupyter: execution did not stop %v after interrupt: %w", interruptGrace, ctxErr)
		case <-k.done:
			return reply, k.Err()
		case <-k.closing:
			return reply, ErrClosed
		}
	}
	if ctxErr != nil {
		return reply, fmt.Errorf("jupyter: execution interrupted: %w", ctxErr)
	}
	return reply, nil
}

func parseReply(content []byte) (*Reply, error) {
	var c struct {
		Status         string `json:"status"`
		ExecutionCount int    `json:"execution_count"`
		errorContent
	}
	if err := json.Unmarshal(content, &c); err != nil {
		return nil, fmt.Errorf("jupyter: bad execute_reply: %w", err)
	}
	r := &Reply{Status: c.Status, ExecutionCount: c.ExecutionCount}
	if c.Status == "error" {
		r.Error = c.info()
	}
	return r, nil
}

// Interrupt interrupts the running execution without losing state, by sending SIGINT to the
// kernel's process group (ipykernel's "signal" interrupt_mode). It is harmless when idle.
func (k *Kernel) Interrupt() error {
	if k.exited() {
		return k.Err()
	}
	if err := syscall.Kill(-k.cmd.Process.Pid, syscall.SIGINT); err != nil {
		return fmt.Errorf("jupyter: interrupt: %w", err)
	}
	return nil
}

// Close shuts the kernel down: shutdown_request on control and up to 2s of grace if it is
// idle, then SIGKILL of its process group; it closes the sockets, waits for the reader goroutines and removes the
// kernel's files from StateDir. It is idempotent and safe concurrently with Execute, which
// then returns ErrClosed.
func (k *Kernel) Close() error {
	k.closeOnce.Do(func() {
		close(k.closing)
		// A busy kernel would only act on shutdown_request after its cell: kill it at once.
		if k.ready && !k.exited() && !k.busy.Load() {
			if err := k.send(k.control, randomHex(16), "shutdown_request", map[string]bool{"restart": false}); err == nil {
				select {
				case <-k.done:
				case <-time.After(shutdownGrace):
				}
			}
		}
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.done
		if k.sockCancel != nil {
			k.sockCancel()
		}
		for _, s := range []zmq4.Socket{k.shell, k.control, k.iopub} {
			if s != nil {
				_ = s.Close()
			}
		}
		k.wg.Wait()
		k.removeFiles()
	})
	return nil
}

func (k *Kernel) removeFiles() {
	for _, f := range k.files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			klog.InfoS("jupyter: cannot remove kernel file", "file", f, "err", err)
		}
	}
}

// lookPython resolves the interpreter: a name without a slash is searched on env's PATH.
func lookPython(python string, env []string) (string, error) {
	if python == "" {
		python = "python3"
	}
	if strings.Contains(python, "/") {
		return python, nil
	}
	path, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true
		}
	}
	if !found {
		return exec.LookPath(python)
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, python)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("jupyter: %s not found on PATH %q", python, path)
}
