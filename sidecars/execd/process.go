package execd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/internal/reaper"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/atomicfile"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/httpjson"
)

// The process manager: execdapi.ProcessesPath (the contract), its output and attach in
// process_output.go.
//
// Each process has a supervisor goroutine the manager owns: it waits for the process, kills
// its group past the timeout or when execd stops, drains its output and publishes its end.
// The output copiers feed the log (a rotated file, as a task attempt's), the replay ring of a
// TTY and every attached client.
//
// A running process has a record in the state directory, written before it starts and removed
// when it ends, so that the execd of a restarted container learns which processes died with
// the old one. The state directory is a small tmpfs (execdapi.StateVolume) in which every file
// takes a page, so only running processes have records, and each is kept far below a page.
// When execd stops, its processes are killed and their records stay: they died with the
// container, and the next execd reports them Lost.

const (
	// processFilePrefix starts the names of the processes' records and logs, which share the
	// task's directories: "process-<id>.json" and "process-<id>.log".
	processFilePrefix = "process-"
	processRecordExt  = ".json"

	// maxProcessRequestBytes caps the body of a start: an argv and an env, as for a task.
	maxProcessRequestBytes = 1 << 20
	// maxProcessSignalBytes caps the body of a signal request: two fields.
	maxProcessSignalBytes = 4 << 10
	// maxRecordedCommandBytes bounds the argv a record keeps, which only a Lost process
	// shows: a record stays well within one page of the state tmpfs.
	maxRecordedCommandBytes = 1 << 10
	// maxProcessRecordBytes is the largest record a restarted execd reads; larger files are
	// not execd's.
	maxProcessRecordBytes = 16 << 10

	// processStopGrace is how long a timed-out process, or one of an execd that stops, has
	// between SIGTERM and SIGKILL: enough to flush and exit, short against the pod's
	// termination grace period, within which execd must stop as a whole.
	processStopGrace = 3 * time.Second

	// maxGracePeriodSeconds bounds the grace period of a signal: a program that needs more
	// than a day to stop is not going to, and the bound keeps far from what a time.Duration
	// holds.
	maxGracePeriodSeconds = 24 * 3600

	// processIDBytes of randomness make an ID: 40 bits, 8 base32 characters.
	processIDBytes = 5

	// The terminal size of a TTY process whose request names none: a terminal's classic
	// size, rather than the 0x0 that programs take for no terminal at all.
	defaultTerminalWidth  = 80
	defaultTerminalHeight = 24
)

// processIDEncoding writes IDs in lower case, as Kubernetes names are.
var processIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// processConfig configures a processManager; zero values take the execdapi limits.
type processConfig struct {
	stateDir, logDir string
	maxRunning       int
	maxEnded         int
	maxLogBytes      int64
	maxEndedLogBytes int64
	replayBytes      int
}

// processManager runs the processes of execdapi.ProcessesPath.
type processManager struct {
	cfg    processConfig
	reaper *reaper.Reaper
	now    func() time.Time

	// ctx ends when execd stops: every process is then stopped. wg counts the goroutines the
	// manager owns (supervisors, kill timers, stdin copies of attached clients).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards the fields below; take it before a process's mu, never after.
	mu      sync.Mutex
	stopped bool
	procs   map[string]*process
	running int
	// ended holds the processes that ended, in the order they did; endedBytes is the
	// output they keep.
	ended      []*process
	endedBytes int64
}

// process is one process of the manager.
type process struct {
	id        string
	pid       int
	tty       bool
	stdinOnce bool
	// log is its output; nil for a Lost process, whose output died with the container.
	log *attemptLog
	// exited is closed once its leader has exited and its group may no longer be signalled;
	// done once its state is final and its output complete.
	exited, done chan struct{}

	mu    sync.Mutex
	state execdapi.ProcessState
	// reaped: the leader's status is about to be collected, after which its group's ID may
	// be reused by another; nothing signals the group any more.
	reaped bool
	// stdin is where input goes (the pipe's write end, or the terminal); nil when there is
	// none or it was closed. stdinClosed: StdinOnce closed it.
	stdin       *os.File
	stdinClosed bool
	// ptmx is a TTY's terminal, for resizes; nil once the process ended.
	ptmx *os.File
	// ring keeps a TTY's latest output for replays.
	ring *ringBuffer
	// subs are the attached clients; outputEnded once the output is complete.
	subs        map[*subscriber]struct{}
	outputEnded bool
	// keptBytes is the output on disk once it ended, for MaxEndedProcessLogBytes.
	keptBytes int64
}

func (p *process) snapshot() execdapi.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.state
	s.Command = slices.Clone(s.Command)
	return s
}

// newHandlerProcesses is the process manager of a Handler: processes keep their records next
// to the task's state and their output next to its logs, so that they run where tasks do;
// nil when tasks are disabled.
func newHandlerProcesses(cfg HandlerConfig) (*processManager, error) {
	if cfg.TaskStateDir == "" || cfg.TaskLogDir == "" {
		return nil, nil
	}
	return newProcessManager(processConfig{stateDir: cfg.TaskStateDir, logDir: cfg.TaskLogDir}, cfg.Reaper,
		func() time.Time { return cfg.Clock.Now().UTC() })
}

// newProcessManager makes the manager's directories, reports the processes an earlier execd of
// this container left running as Lost, and drops the output it left.
func newProcessManager(cfg processConfig, r *reaper.Reaper, now func() time.Time) (*processManager, error) {
	if cfg.stateDir == "" || cfg.logDir == "" {
		return nil, errors.New("processes need a state and a log directory")
	}
	if cfg.maxRunning <= 0 {
		cfg.maxRunning = execdapi.MaxProcesses
	}
	if cfg.maxEnded <= 0 {
		cfg.maxEnded = execdapi.MaxEndedProcesses
	}
	if cfg.maxLogBytes <= 0 {
		cfg.maxLogBytes = execdapi.MaxProcessLogBytes
	}
	if cfg.maxEndedLogBytes <= 0 {
		cfg.maxEndedLogBytes = execdapi.MaxEndedProcessLogBytes
	}
	if cfg.replayBytes <= 0 {
		cfg.replayBytes = execdapi.ProcessReplayBytes
	}
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("process state directory: %w", err)
	}
	if err := os.MkdirAll(cfg.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("process log directory: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &processManager{cfg: cfg, reaper: r, now: now, ctx: ctx, cancel: cancel, procs: map[string]*process{}}
	removeStaleProcessLogs(cfg.logDir)
	m.load()
	return m, nil
}

// load reads the records an earlier execd of this container left: each is a process that ran
// when the container stopped, now Lost. The records are removed once read: the processes are
// known from then on, in memory, until dropped as ended processes are.
func (m *processManager) load() {
	entries, err := os.ReadDir(m.cfg.stateDir)
	if err != nil {
		klog.ErrorS(err, "Listing the process records failed", "dir", m.cfg.stateDir)
		return
	}
	now := m.now()
	var lost []*process
	for _, e := range entries {
		name := e.Name()
		file := filepath.Join(m.cfg.stateDir, name)
		if strings.HasPrefix(name, "."+processFilePrefix) {
			// A temporary file of a write the container's end interrupted.
			_ = os.Remove(file)
			continue
		}
		// The directory is the task's too: only the process records are the manager's.
		id, isRecord := strings.CutPrefix(name, processFilePrefix)
		id, hasExt := strings.CutSuffix(id, processRecordExt)
		if !isRecord || !hasExt || !e.Type().IsRegular() {
			continue
		}
		st, err := readProcessRecord(file, id)
		if err != nil {
			klog.ErrorS(err, "Dropping an unreadable process record", "file", file)
		} else {
			if st.Phase == execdapi.ProcessRunning {
				st.Phase = execdapi.ProcessLost
				st.Reason = execdapi.ProcessReasonContainerRestarted
				st.Message = "the container restarted while the process ran; its output is gone"
				st.EndTime = &now
			}
			// reaped: its PID is no longer its own; nothing may signal it.
			p := &process{id: id, pid: st.PID, tty: st.TTY, state: st, outputEnded: true, reaped: true,
				exited: make(chan struct{}), done: make(chan struct{})}
			close(p.exited)
			close(p.done)
			lost = append(lost, p)
		}
		if err := os.Remove(file); err != nil {
			klog.ErrorS(err, "Removing a process record failed", "file", file)
		}
	}
	slices.SortFunc(lost, func(a, b *process) int {
		if c := a.state.StartTime.Compare(b.state.StartTime); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range lost {
		m.procs[p.id] = p
		m.ended = append(m.ended, p)
		klog.InfoS("A process died with the container", "process", p.id, "pid", p.pid)
	}
	m.evictLocked()
}

func readProcessRecord(file, id string) (execdapi.ProcessState, error) {
	var st execdapi.ProcessState
	f, err := os.Open(file)
	if err != nil {
		return st, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxProcessRecordBytes+1))
	if err != nil {
		return st, err
	}
	if len(data) > maxProcessRecordBytes {
		return st, fmt.Errorf("the record is larger than %d bytes", maxProcessRecordBytes)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, fmt.Errorf("decode: %w", err)
	}
	if st.ID != id || !validProcessID(id) {
		return st, fmt.Errorf("the record holds process %q", st.ID)
	}
	return st, nil
}

func validProcessID(id string) bool {
	rest, ok := strings.CutPrefix(id, "p-")
	if !ok || len(rest) != processIDEncoding.EncodedLen(processIDBytes) {
		return false
	}
	_, err := processIDEncoding.DecodeString(rest)
	return err == nil
}

// stop refuses new processes, stops the running ones (SIGTERM to each group, SIGKILL after
// processStopGrace) and waits until the manager's goroutines returned. Their records stay.
// A nil manager has nothing to stop.
func (m *processManager) stop() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
}

// goOwned runs fn in a goroutine the manager waits for in stop; false, without running it,
// once the manager stopped.
func (m *processManager) goOwned(fn func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return false
	}
	m.wg.Go(fn)
	return true
}

func (m *processManager) lookup(id string) *process {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.procs[id]
}

// list is the state of every process, oldest first.
func (m *processManager) list() []execdapi.ProcessState {
	m.mu.Lock()
	out := make([]execdapi.ProcessState, 0, len(m.procs))
	for _, p := range m.procs {
		out = append(out, p.snapshot())
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b execdapi.ProcessState) int {
		if c := a.StartTime.Compare(b.StartTime); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// newIDLocked is an ID no process of the manager has.
func (m *processManager) newIDLocked() (string, error) {
	b := make([]byte, processIDBytes)
	for {
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		if id := "p-" + processIDEncoding.EncodeToString(b); m.procs[id] == nil {
			return id, nil
		}
	}
}

func (m *processManager) recordPath(id string) string {
	return filepath.Join(m.cfg.stateDir, processFilePrefix+id+processRecordExt)
}

// persist writes the record of a running process.
func (m *processManager) persist(st execdapi.ProcessState) error {
	st.Command = shortenCommand(st.Command, maxRecordedCommandBytes)
	data, err := json.Marshal(&st)
	if err == nil {
		err = atomicfile.Write(m.recordPath(st.ID), data)
	}
	return err
}

func (m *processManager) removeRecord(id string) {
	if err := os.Remove(m.recordPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		// A restarted execd would report the process Lost, though it exited.
		klog.ErrorS(err, "Removing a process record failed", "process", id)
	}
}

// shortenCommand is argv cut to about limit bytes: the arguments that fit, then "...".
func shortenCommand(argv []string, limit int) []string {
	out := make([]string, 0, len(argv))
	left := limit
	for _, arg := range argv {
		if len(arg) > left {
			if left > 0 {
				out = append(out, strings.ToValidUTF8(arg[:left], ""))
			}
			return append(out, "...")
		}
		out = append(out, arg)
		left -= len(arg)
	}
	return out
}

// outputSource is one stream of a process's output, as execd reads it.
type outputSource struct {
	f      *os.File
	stderr bool
}

// start starts a process of req with env (the sandbox's, then the request's). It answers at
// once, with the process's state.
func (m *processManager) start(req *execdapi.ProcessRequest, env []string) (execdapi.ProcessState, *apierrors.StatusError) {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return execdapi.ProcessState{}, apierrors.NewServiceUnavailable("sandbox-execd is shutting down")
	}
	if m.running >= m.cfg.maxRunning {
		n := m.running
		m.mu.Unlock()
		return execdapi.ProcessState{}, apierrors.NewTooManyRequests(fmt.Sprintf(
			"%d processes run in the sandbox, the most it may run at once: wait for one to end, or signal one", n), 0)
	}
	id, err := m.newIDLocked()
	if err != nil {
		m.mu.Unlock()
		return execdapi.ProcessState{}, apierrors.NewInternalError(fmt.Errorf("making a process ID: %w", err))
	}
	// The slot and the supervisor are held from now on, so that neither the limit nor stop
	// can miss the process.
	m.running++
	m.wg.Add(1)
	m.mu.Unlock()

	p, c, outputs, serr := m.launch(id, req, env)
	if serr != nil {
		m.mu.Lock()
		m.running--
		m.mu.Unlock()
		m.wg.Done()
		return execdapi.ProcessState{}, serr
	}
	m.mu.Lock()
	m.procs[id] = p
	m.mu.Unlock()
	st := p.snapshot()
	go m.supervise(p, c, outputs, secondsDuration(req.TimeoutSeconds))
	// argv[0] only: arguments may carry secrets.
	klog.V(2).InfoS("Started a process", "process", id, "command", req.Command[0], "pid", p.pid, "tty", req.TTY, "stdin", req.Stdin)
	return st, nil
}

// launch records and starts the process, as an exec starts its command: in a process group
// of its own, or with a TTY in a session of its own on a new pseudo-terminal.
func (m *processManager) launch(id string, req *execdapi.ProcessRequest, env []string) (*process, *exec.Cmd, []outputSource, *apierrors.StatusError) {
	st := execdapi.ProcessState{
		ID: id, Command: slices.Clone(req.Command), WorkingDir: req.WorkingDir, TTY: req.TTY, Stdin: req.Stdin,
		StdinOnce: req.StdinOnce, TimeoutSeconds: req.TimeoutSeconds, Phase: execdapi.ProcessRunning, StartTime: m.now(),
	}
	// Only a process on disk may start, or a restarted execd would not know it ran.
	if err := m.persist(st); err != nil {
		klog.ErrorS(err, "Recording a process failed", "process", id)
		return nil, nil, nil, apierrors.NewInternalError(fmt.Errorf("recording the process: %w", err))
	}
	p := &process{id: id, tty: req.TTY, stdinOnce: req.StdinOnce, exited: make(chan struct{}), done: make(chan struct{}),
		subs: map[*subscriber]struct{}{}}
	c := exec.Command(req.Command[0], req.Command[1:]...)
	SessionOptions{Env: env, Dir: req.WorkingDir}.apply(c)

	var childEnds, ours []*os.File
	closeAll := func(files []*os.File) {
		for _, f := range files {
			_ = f.Close()
		}
	}
	fail := func(err error) (*process, *exec.Cmd, []outputSource, *apierrors.StatusError) {
		closeAll(childEnds)
		closeAll(ours)
		m.removeRecord(id)
		return nil, nil, nil, apierrors.NewInternalError(err)
	}
	var outputs []outputSource
	if req.TTY {
		ptmx, tty, err := openPTY()
		if err != nil {
			return fail(fmt.Errorf("allocating a terminal: %w", err))
		}
		childEnds, ours = append(childEnds, tty), append(ours, ptmx)
		size := pty.Winsize{Cols: defaultTerminalWidth, Rows: defaultTerminalHeight}
		if s := req.TerminalSize; s != nil {
			size = pty.Winsize{Cols: s.Width, Rows: s.Height}
		}
		if err := setWinsize(ptmx, &size); err != nil {
			return fail(fmt.Errorf("setting the terminal size: %w", err))
		}
		c.Stdin, c.Stdout, c.Stderr = tty, tty, tty
		// As for an exec with a TTY: job control and ^C work, and the session's ID is the
		// group's, which signals reach.
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		outputs = append(outputs, outputSource{f: ptmx})
		p.ptmx = ptmx
		p.ring = newRingBuffer(m.cfg.replayBytes)
		if req.Stdin {
			p.stdin = ptmx
		}
	} else {
		if req.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(fmt.Errorf("making the stdin pipe: %w", err))
			}
			childEnds, ours = append(childEnds, r), append(ours, w)
			c.Stdin, p.stdin = r, w
		}
		for _, stderr := range []bool{false, true} {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(fmt.Errorf("making an output pipe: %w", err))
			}
			childEnds, ours = append(childEnds, w), append(ours, r)
			if stderr {
				c.Stderr = w
			} else {
				c.Stdout = w
			}
			outputs = append(outputs, outputSource{f: r, stderr: stderr})
		}
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}

	p.log = openProcessLog(m.cfg.logDir, id, m.cfg.maxLogBytes)
	pid, err := m.reaper.Start(func() (int, error) {
		if err := c.Start(); err != nil {
			return 0, err
		}
		return c.Process.Pid, nil
	})
	// Only the child may hold its ends, or the output never ends and stdin never closes.
	closeAll(childEnds)
	childEnds = nil
	if err != nil {
		p.log.end()
		removeProcessLogs(p.log.path)
		closeAll(ours)
		ours = nil
		m.removeRecord(id)
		if _, ok := startFailureCode(err); ok {
			// Missing, not executable, or no such working directory: the request's fault.
			return nil, nil, nil, processError(http.StatusUnprocessableEntity, fmt.Sprintf("starting %q: %v", req.Command[0], err))
		}
		klog.ErrorS(err, "Starting a process failed", "process", id, "command", req.Command[0])
		return nil, nil, nil, apierrors.NewInternalError(fmt.Errorf("starting %q: %w", req.Command[0], err))
	}
	p.pid = pid
	st.PID = pid
	p.state = st
	if err := m.persist(st); err != nil {
		// The record without the PID says as much: the process is Lost if the container
		// restarts.
		klog.ErrorS(err, "Recording a process's PID failed", "process", id)
	}
	return p, c, outputs, nil
}

// supervise waits for the process and publishes its end. It stops the process past timeout
// (0: none) or when execd stops. It owns one count of m.wg.
func (m *processManager) supervise(p *process, c *exec.Cmd, outputs []outputSource, timeout time.Duration) {
	defer m.wg.Done()
	var copies sync.WaitGroup
	for _, o := range outputs {
		copies.Go(func() { p.copyOutput(o) })
	}
	copiesDone := make(chan struct{})
	go func() { copies.Wait(); close(copiesDone) }()
	waitDone := make(chan error, 1)
	go func() { waitDone <- p.wait(c) }()

	var deadline <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	var waitErr error
	timedOut, stopping := false, false
	select {
	case waitErr = <-waitDone:
	case <-deadline:
		timedOut = true
		klog.V(2).InfoS("A process ran past its timeout, stopping it", "process", p.id, "timeout", timeout)
		waitErr = p.stop(waitDone)
	case <-m.ctx.Done():
		stopping = true
		waitErr = p.stop(waitDone)
	}
	// Release only after Wait collected the status, see reaper.Start.
	m.reaper.Release(p.pid)
	p.closeStdinPipe()

	// Output ends with the group. A process that left it (setsid) may hold the output open:
	// the process ends all the same, after a short drain.
	drain := time.NewTimer(defaultOutputDrainTimeout)
	select {
	case <-copiesDone:
	case <-drain.C:
		klog.V(4).InfoS("Process output still open after its group ended, closing it", "process", p.id)
	}
	drain.Stop()
	for _, o := range outputs {
		_ = o.f.Close()
	}
	<-copiesDone
	p.log.end()
	m.finish(p, endState(p.snapshot(), c.ProcessState, waitErr, timedOut, m.now()), stopping)
}

// wait collects the leader's status. Before it does, while the exited leader still holds its
// PID (and so its group's ID), it kills what the process left in its group, and ends
// signalling: once the status is collected, the ID may be another's.
func (p *process) wait(c *exec.Cmd) error {
	var info unix.Siginfo
	var err error = unix.EINTR
	for errors.Is(err, unix.EINTR) {
		err = unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
	}
	if err != nil {
		klog.ErrorS(err, "Waiting for a process failed", "process", p.id, "pid", p.pid)
	}
	p.mu.Lock()
	// Whatever it left in its group ends with it, as a container's processes end with it.
	signalProcessGroup(p.pid, unix.SIGKILL)
	p.reaped = true
	close(p.exited)
	p.mu.Unlock()
	return c.Wait()
}

// signal sends sig to the process's group; false when the process has exited.
func (p *process) signal(sig unix.Signal) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return false
	}
	signalProcessGroup(p.pid, sig)
	return true
}

// stop stops the process: SIGTERM to its group, SIGKILL after processStopGrace. It returns
// the leader's Wait error.
func (p *process) stop(waitDone <-chan error) error {
	p.signal(unix.SIGTERM)
	grace := time.NewTimer(processStopGrace)
	defer grace.Stop()
	select {
	case err := <-waitDone:
		return err
	case <-grace.C:
	}
	p.signal(unix.SIGKILL)
	return <-waitDone
}

func signalProcessGroup(pgid int, sig unix.Signal) {
	if err := unix.Kill(-pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		klog.ErrorS(err, "Signalling a process's group failed", "pgid", pgid, "signal", sig.String())
	}
}

// closeStdinPipe closes the write end of a pipe stdin once the process exited: attached
// clients' input has nowhere to go. A terminal closes with the output.
func (p *process) closeStdinPipe() {
	p.mu.Lock()
	w := p.stdin
	p.stdin = nil
	p.mu.Unlock()
	if w != nil && !p.tty {
		_ = w.Close()
	}
}

// closeStdin ends the process's input for StdinOnce: a pipe closes, a terminal gets the end
// of input (^D).
func (p *process) closeStdin() {
	p.mu.Lock()
	w := p.stdin
	p.stdin = nil
	p.stdinClosed = true
	p.mu.Unlock()
	if w == nil {
		return
	}
	if p.tty {
		_ = sendEOF(w)
		return
	}
	_ = w.Close()
}

// writeStdin passes an attached client's input on; false when it has nowhere to go.
func (p *process) writeStdin(data []byte) bool {
	p.mu.Lock()
	w := p.stdin
	p.mu.Unlock()
	if w == nil {
		return false
	}
	// Unlocked: a process that does not read its input blocks this writer only. Once the
	// file is closed, the write fails.
	_, err := w.Write(data)
	return err == nil
}

// resize resizes a TTY's terminal.
func (p *process) resize(s remotecommand.TerminalSize) {
	p.mu.Lock()
	f := p.ptmx
	p.mu.Unlock()
	if f == nil || s.Width == 0 || s.Height == 0 {
		return
	}
	if err := setWinsize(f, &pty.Winsize{Cols: s.Width, Rows: s.Height}); err != nil {
		klog.V(4).InfoS("Resizing a process's terminal failed", "process", p.id, "err", err)
	}
}

// endState is st once the process ended.
func endState(st execdapi.ProcessState, ps *os.ProcessState, waitErr error, timedOut bool, now time.Time) execdapi.ProcessState {
	st.Phase = execdapi.ProcessExited
	st.EndTime = &now
	st.Reason, st.Message = execdapi.ProcessReasonError, ""
	ws, ok := syscall.WaitStatus(0), false
	if ps != nil {
		ws, ok = ps.Sys().(syscall.WaitStatus)
	}
	switch {
	case !ok:
		st.Message = fmt.Sprintf("its exit status could not be collected: %v", waitErr)
	case ws.Signaled():
		st.Signal = signalName(ws.Signal())
		st.Message = "killed by signal " + st.Signal
	default:
		st.ExitCode = ptrInt32(ws.ExitStatus())
		if *st.ExitCode == 0 {
			st.Reason = execdapi.ProcessReasonCompleted
		} else {
			st.Message = fmt.Sprintf("exit code %d", *st.ExitCode)
		}
	}
	if timedOut {
		st.Reason = execdapi.ProcessReasonDeadlineExceeded
		st.Message = fmt.Sprintf("ran longer than timeoutSeconds (%d) and was stopped", st.TimeoutSeconds)
	}
	return st
}

// signalName is "TERM" for SIGTERM.
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return strings.TrimPrefix(name, "SIG")
	}
	return fmt.Sprintf("%d", int(sig))
}

// parseSignal reads a signal's name, with or without "SIG", in any case.
func parseSignal(name string) (unix.Signal, error) {
	if name == "" {
		name = execdapi.DefaultProcessSignal
	}
	full := strings.ToUpper(name)
	if !strings.HasPrefix(full, "SIG") {
		full = "SIG" + full
	}
	sig := unix.SignalNum(full)
	if sig == 0 {
		return 0, fmt.Errorf("unknown signal %q: want a name such as TERM, INT, HUP or KILL", name)
	}
	return sig, nil
}

// finish publishes the end of a process and drops the oldest ended processes past the
// limits. When execd stops, the record stays: the next execd reports the process Lost.
func (m *processManager) finish(p *process, st execdapi.ProcessState, stopping bool) {
	kept := p.log.keptBytes()
	m.mu.Lock()
	p.mu.Lock()
	p.state = st
	p.ptmx = nil
	p.keptBytes = kept
	p.endOutputLocked()
	p.mu.Unlock()
	m.running--
	m.ended = append(m.ended, p)
	m.endedBytes += kept
	dropped := m.evictLocked()
	m.mu.Unlock()
	if !stopping {
		m.removeRecord(p.id)
	}
	for _, d := range dropped {
		if d.log != nil {
			removeProcessLogs(d.log.path)
		}
	}
	close(p.done)
	keys := []any{"process", p.id, "pid", p.pid, "reason", st.Reason}
	if st.ExitCode != nil {
		keys = append(keys, "exitCode", *st.ExitCode)
	}
	if st.Signal != "" {
		keys = append(keys, "signal", st.Signal)
	}
	klog.V(2).InfoS("A process ended", keys...)
}

// evictLocked drops the oldest ended processes while more are kept than the limits allow,
// and returns them.
func (m *processManager) evictLocked() []*process {
	var dropped []*process
	for len(m.ended) > 0 && (len(m.ended) > m.cfg.maxEnded || m.endedBytes > m.cfg.maxEndedLogBytes) {
		d := m.ended[0]
		m.ended = slices.Delete(m.ended, 0, 1)
		m.endedBytes -= d.keptBytes
		delete(m.procs, d.id)
		dropped = append(dropped, d)
		klog.V(4).InfoS("Dropped an ended process", "process", d.id)
	}
	return dropped
}

// signalAfter sends SIGKILL to p's group after d, unless it exited before.
func (m *processManager) signalAfter(p *process, d time.Duration) {
	m.goOwned(func() {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-p.exited:
		case <-m.ctx.Done():
		case <-timer.C:
			if p.signal(unix.SIGKILL) {
				klog.V(2).InfoS("A process outlived its grace period, killed it", "process", p.id, "grace", d)
			}
		}
	})
}

// HTTP.

// processError is an error answer with code and msg.
func processError(code int, msg string) *apierrors.StatusError {
	reason := metav1.StatusReasonUnknown
	switch code {
	case http.StatusBadRequest:
		reason = metav1.StatusReasonBadRequest
	case http.StatusForbidden:
		reason = metav1.StatusReasonForbidden
	case http.StatusNotFound:
		reason = metav1.StatusReasonNotFound
	case http.StatusConflict:
		reason = metav1.StatusReasonConflict
	case http.StatusGone:
		reason = metav1.StatusReasonGone
	case http.StatusRequestEntityTooLarge:
		reason = metav1.StatusReasonRequestEntityTooLarge
	case http.StatusUnprocessableEntity:
		reason = metav1.StatusReasonInvalid
	case http.StatusTooManyRequests:
		reason = metav1.StatusReasonTooManyRequests
	case http.StatusServiceUnavailable:
		reason = metav1.StatusReasonServiceUnavailable
	case http.StatusInternalServerError:
		reason = metav1.StatusReasonInternalError
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg}}
}

// writeProcessError answers with err as a metav1.Status, as the files API does.
func writeProcessError(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	httpjson.Write(w, int(st.Code), &st)
}

var processesResource = schema.GroupResource{Resource: "processes"}

// registerProcessRoutes adds the endpoints of execdapi.ProcessesPath to the mux.
func (h *Handler) registerProcessRoutes() {
	one := execdapi.ProcessesPath + "/{id}"
	h.mux.HandleFunc("POST "+execdapi.ProcessesPath, h.metrics.instrument("process:start", h.serveProcessStart))
	h.mux.HandleFunc("GET "+execdapi.ProcessesPath, h.metrics.instrument("process:list", h.serveProcessList))
	h.mux.HandleFunc("GET "+one, h.metrics.instrument("process:get", h.serveProcessGet))
	h.mux.HandleFunc("POST "+one+"/"+execdapi.ProcessSignalSubpath, h.metrics.instrument("process:signal", h.serveProcessSignal))
	h.mux.HandleFunc("GET "+one+"/"+execdapi.ProcessLogSubpath, h.metrics.instrument("process:log", h.serveProcessLog))
	// GET for websocket clients, POST for SPDY ones, as for exec.
	attach := h.metrics.instrument("process:attach", h.serveProcessAttach)
	h.mux.HandleFunc("GET "+one+"/"+execdapi.ProcessAttachSubpath, attach)
	h.mux.HandleFunc("POST "+one+"/"+execdapi.ProcessAttachSubpath, attach)
}

// processesOf returns the claim a process request is served under, or answers why it is
// refused: as for an exec (only sandbox-apiserver, for the sandbox execd belongs to), and 404
// when processes are disabled.
func (h *Handler) processesOf(w http.ResponseWriter, req *http.Request) (*claim, bool) {
	c, code, msg := h.sandboxOf(req)
	if c == nil {
		writeProcessError(w, processError(code, msg))
		return nil, false
	}
	if h.processes == nil {
		writeProcessError(w, processError(http.StatusNotFound,
			"sandbox-execd runs no processes here: it has no state or log directory (a pod made before processes existed?)"))
		return nil, false
	}
	return c, true
}

// processOf is the process the request's path names, or answers 404.
func (h *Handler) processOf(w http.ResponseWriter, req *http.Request) *process {
	id := req.PathValue("id")
	p := h.processes.lookup(id)
	if p == nil {
		writeProcessError(w, apierrors.NewNotFound(processesResource, id))
	}
	return p
}

// serveProcessStart serves POST execdapi.ProcessesPath.
func (h *Handler) serveProcessStart(w http.ResponseWriter, req *http.Request) {
	c, ok := h.processesOf(w, req)
	if !ok {
		return
	}
	pr := &execdapi.ProcessRequest{}
	if code, err := decodeJSONBody(w, req, maxProcessRequestBytes, pr, "a JSON process"); err != nil {
		writeProcessError(w, processError(code, "invalid process: "+err.Error()))
		return
	}
	if errs := execdapi.ValidateProcessRequest(pr, nil); len(errs) > 0 {
		// The messages name fields and env names, never values.
		klog.V(2).InfoS("Rejected an invalid process", "remoteAddr", req.RemoteAddr, "err", errs.ToAggregate())
		serr := apierrors.NewInvalid(schema.GroupKind{Kind: "Process"}, "", errs)
		serr.ErrStatus.Message = "invalid process: " + errs.ToAggregate().Error()
		writeProcessError(w, serr)
		return
	}
	env := slices.Clone(c.env)
	for _, e := range pr.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	st, serr := h.processes.start(pr, env)
	if serr != nil {
		writeProcessError(w, serr)
		return
	}
	w.Header().Set("Location", execdapi.ProcessPath(st.ID))
	httpjson.Write(w, http.StatusCreated, &st)
}

// serveProcessList serves GET execdapi.ProcessesPath.
func (h *Handler) serveProcessList(w http.ResponseWriter, req *http.Request) {
	if _, ok := h.processesOf(w, req); !ok {
		return
	}
	httpjson.Write(w, http.StatusOK, &execdapi.ProcessList{Kind: execdapi.ProcessListKind, Items: h.processes.list()})
}

// serveProcessGet serves GET execdapi.ProcessPath.
func (h *Handler) serveProcessGet(w http.ResponseWriter, req *http.Request) {
	if _, ok := h.processesOf(w, req); !ok {
		return
	}
	if p := h.processOf(w, req); p != nil {
		st := p.snapshot()
		httpjson.Write(w, http.StatusOK, &st)
	}
}

// serveProcessSignal serves POST execdapi.ProcessSignalPath: the signal goes to the process's
// group; with a grace period, SIGKILL follows if the process outlives it.
func (h *Handler) serveProcessSignal(w http.ResponseWriter, req *http.Request) {
	if _, ok := h.processesOf(w, req); !ok {
		return
	}
	p := h.processOf(w, req)
	if p == nil {
		return
	}
	sr := &execdapi.ProcessSignalRequest{}
	if code, err := decodeOptionalJSONBody(w, req, maxProcessSignalBytes, sr, "a JSON signal request"); err != nil {
		writeProcessError(w, processError(code, "invalid signal request: "+err.Error()))
		return
	}
	sig, err := parseSignal(sr.Signal)
	if err != nil {
		writeProcessError(w, processError(http.StatusUnprocessableEntity, "invalid signal request: signal: "+err.Error()))
		return
	}
	var grace time.Duration
	if g := sr.GracePeriodSeconds; g != nil {
		if *g < 0 || *g > maxGracePeriodSeconds {
			writeProcessError(w, processError(http.StatusUnprocessableEntity,
				fmt.Sprintf("invalid signal request: gracePeriodSeconds %d is not between 0 and %d", *g, maxGracePeriodSeconds)))
			return
		}
		grace = time.Duration(*g) * time.Second
	}
	if !p.signal(sig) {
		writeProcessError(w, processError(http.StatusGone, fmt.Sprintf("process %s has ended: there is nothing to signal", p.id)))
		return
	}
	klog.V(2).InfoS("Signalled a process", "process", p.id, "signal", signalName(sig), "remoteAddr", req.RemoteAddr)
	if sr.GracePeriodSeconds != nil && sig != unix.SIGKILL {
		h.processes.signalAfter(p, grace)
	}
	st := p.snapshot()
	httpjson.Write(w, http.StatusOK, &st)
}

// decodeOptionalJSONBody is decodeJSONBody for a body that may also be empty: v keeps its
// zero value then.
func decodeOptionalJSONBody(w http.ResponseWriter, req *http.Request, limit int64, v any, what string) (int, error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, req.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("the body exceeds %d bytes", limit)
	case err != nil:
		return http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
	case len(bytes.TrimSpace(data)) == 0:
		return 0, nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return http.StatusBadRequest, fmt.Errorf("the body is not %s: %w", what, err)
	}
	return 0, nil
}

// serveProcessAttach serves GET and POST execdapi.ProcessAttachPath: the kubelet's attach
// protocol, as exec speaks it.
func (h *Handler) serveProcessAttach(w http.ResponseWriter, req *http.Request) {
	if _, ok := h.processesOf(w, req); !ok {
		return
	}
	p := h.processOf(w, req)
	if p == nil {
		return
	}
	opts, err := remotecommand.NewOptions(req)
	if err != nil {
		writeProcessError(w, processError(http.StatusBadRequest, err.Error()))
		return
	}
	st := p.snapshot()
	switch {
	case st.Ended():
		writeProcessError(w, processError(http.StatusGone, fmt.Sprintf("process %s has ended (%s): there is nothing to attach to; its log keeps its output", p.id, st.Phase)))
		return
	case opts.TTY && !st.TTY:
		writeProcessError(w, processError(http.StatusBadRequest, fmt.Sprintf("process %s has no TTY: attach without one", p.id)))
		return
	case opts.Stdin && !st.Stdin:
		writeProcessError(w, processError(http.StatusBadRequest, fmt.Sprintf("process %s was started without stdin: attach without it", p.id)))
		return
	case opts.Stdin && p.stdinIsClosed():
		writeProcessError(w, processError(http.StatusConflict, fmt.Sprintf("the stdin of process %s was closed (stdinOnce): attach without it", p.id)))
		return
	}

	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		writeProcessError(w, apierrors.NewServiceUnavailable("sandbox-execd is shutting down"))
		return
	}
	h.sessions.Add(1)
	h.mu.Unlock()
	defer h.sessions.Done()

	// As for an exec: the session ends when the client goes away or execd shuts down; the
	// process runs on.
	ctx, cancel := context.WithCancelCause(req.Context())
	defer cancel(nil)
	stop := context.AfterFunc(h.sessionsCtx, func() { cancel(errors.New("sandbox-execd is shutting down")) })
	defer stop()
	watched := &disconnectWatcher{ResponseWriter: w, cancel: cancel}
	klog.V(4).InfoS("Attach request", "process", p.id, "tty", opts.TTY, "stdin", opts.Stdin, "remoteAddr", req.RemoteAddr)
	remotecommand.ServeAttach(watched, req.WithContext(ctx), processAttacher{m: h.processes, p: p, opts: *opts}, "", "", "",
		opts, h.streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (p *process) stdinIsClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdinClosed
}

// isProcessAttachPath reports whether path is a process's attach endpoint: like an exec, it
// may name its sandbox in the query (execdapi.ExecSandboxUIDParam).
func isProcessAttachPath(path string) bool {
	_, ok := execdapi.ProcessAttachID(path)
	return ok
}

// processAttacher attaches one client to a process. It implements remotecommand.Attacher.
type processAttacher struct {
	m    *processManager
	p    *process
	opts remotecommand.Options
}

var _ remotecommand.Attacher = processAttacher{}

// AttachContainer streams the process's output to the client, from a TTY's replay on, and
// the client's input and resizes to the process, until the process's output ends (success),
// the client goes, or the client falls too far behind (an error). The pod, uid and container
// names mean nothing here.
func (a processAttacher) AttachContainer(ctx context.Context, _, _, _ string, in io.Reader, out, errw io.WriteCloser, _ bool, resize <-chan remotecommand.TerminalSize) error {
	// Over websockets every channel comes, asked for or not (see requestedStreams).
	if !a.opts.Stdin {
		in = nil
	}
	if !a.opts.Stdout {
		out = nil
	}
	if !a.opts.Stderr {
		errw = nil
	}
	defer closeIfSet(out)
	defer closeIfSet(errw)
	p := a.p

	sub, replay := p.subscribe()
	if sub != nil {
		defer p.unsubscribe(sub)
	}
	if in != nil {
		a.m.goOwned(func() { p.copyStdin(in) })
	}
	stopResize := make(chan struct{})
	resizeDone := make(chan struct{})
	go func() {
		defer close(resizeDone)
		for {
			select {
			case <-stopResize:
				return
			case s, ok := <-resize: // nil: no resizes
				if !ok {
					return
				}
				if p.tty {
					p.resize(s)
				}
			}
		}
	}()
	defer func() {
		close(stopResize)
		<-resizeDone
	}()

	if len(replay) > 0 && out != nil {
		if _, err := out.Write(replay); err != nil {
			return nil // the client went away
		}
	}
	if sub == nil {
		return nil // the output ended meanwhile
	}
	for {
		select {
		case c, ok := <-sub.ch:
			if !ok {
				if p.overflowed(sub) {
					klog.V(2).InfoS("Detached a client that fell behind a process's output", "process", p.id)
					return fmt.Errorf("the client fell more than %d writes behind the output of process %s and was detached; the process runs on", attachQueueChunks, p.id)
				}
				return nil
			}
			w := out
			if c.stderr {
				w = errw
			}
			if w == nil {
				continue
			}
			if _, err := w.Write(c.data); err != nil {
				return nil // the client went away
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// copyStdin passes an attached client's input to the process until either ends. With
// StdinOnce, the end of the first client's input ends the process's.
func (p *process) copyStdin(in io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 && !p.writeStdin(buf[:n]) {
			break
		}
		if err != nil {
			break
		}
	}
	if p.stdinOnce {
		p.closeStdin()
	}
}
