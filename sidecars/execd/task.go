package execd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/internal/reaper"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/atomicfile"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/httpjson"
)

// The task runner: execdapi.TaskPath and execdapi.TaskLogPath (task_log.go).
//
// A pod runs one task. Its attempts run one after the other in a goroutine the runner owns
// (run), each as preStart, the command, postStop. Every change of the task's state is
// persisted (TaskStateDir/task.json) before anyone sees it, and pushed to the watch streams
// from a short history, so that a watcher sees every generation in order unless it falls far
// behind.
//
// When execd stops (StopSessions), the running attempt is killed with its process group and
// its state stays Running on disk: the container is going, and if it comes back, the restarted
// execd records the attempt as failed (ContainerRestarted) and retries it per the task's
// policy. Hooks do not run on the way out.

const (
	// taskStateFile, in the task state directory, holds the TaskRequest and the TaskState.
	taskStateFile = "task.json"

	// maxTaskRequestBytes caps the body of a PUT: an argv, an env and two hooks; a megabyte
	// leaves room for large envs, as for claims.
	maxTaskRequestBytes = 1 << 20

	// defaultTaskRetryBackoff and maxTaskRetryBackoff: a retry waits the first, doubled per
	// retry, at most the second. A task that fails at once then costs a few processes a
	// minute, and one that failed for a passing reason (a server not up yet) is not kept
	// waiting long.
	defaultTaskRetryBackoff = time.Second
	maxTaskRetryBackoff     = 10 * time.Second

	// defaultTaskHookTimeout bounds a hook whose request gives no timeout (the contract's 30 s).
	defaultTaskHookTimeout = 30 * time.Second

	// taskStopGrace is how long a timed-out attempt, a timed-out hook or the attempt of an
	// execd that stops has between SIGTERM and SIGKILL: enough to flush and exit, short
	// against the pod's termination grace period, in which execd must stop as a whole.
	taskStopGrace = 3 * time.Second

	// taskHistory is how many states the runner keeps for its watchers. A task changes a few
	// times per attempt, and a watcher writes each change at once, so only a watcher stuck
	// for many attempts misses one; it then gets the newest states, as Generation allows.
	taskHistory = 64

	// maxTaskMessageLine bounds the last line of output a failed attempt's message quotes:
	// the message is meant for a status field, not for the log.
	maxTaskMessageLine = 128
)

// taskResults are the values of the result label of sandbox_execd_task_attempts_total: how
// attempts ended.
var taskResults = []string{
	string(execdapi.TaskSucceeded), execdapi.TaskReasonError, execdapi.TaskReasonDeadlineExceeded,
	execdapi.TaskReasonPreStartFailed, execdapi.TaskReasonStartFailed, execdapi.TaskReasonContainerRestarted,
}

// taskConfig configures a taskRunner; see HandlerConfig.
type taskConfig struct {
	stateDir     string
	logDir       string
	heartbeat    time.Duration
	retryBackoff time.Duration
	maxLogBytes  int64
}

// persistedTask is the content of taskStateFile.
type persistedTask struct {
	Request execdapi.TaskRequest `json:"request"`
	// Env holds the NAME=VALUE entries the sandbox added when the task started (a claim's
	// env), so that a restarted execd retries with them before the sandbox claims it again.
	Env   []string           `json:"env,omitempty"`
	State execdapi.TaskState `json:"state"`
	// Waiting: the attempt of State has ended and the next one waits for its backoff.
	Waiting bool `json:"waiting,omitempty"`
}

// firstAttempt is the number of the task's first attempt in this pod.
func (t *persistedTask) firstAttempt() int32 {
	return max(t.Request.FirstAttempt, 1)
}

// retryLeft reports whether the attempt of t.State may be followed by another.
func (t *persistedTask) retryLeft() bool {
	return t.Request.RestartOnFailure && t.State.Attempt-t.firstAttempt() < t.Request.Retries
}

// taskRunner runs the pod's task and keeps its state.
type taskRunner struct {
	cfg      taskConfig
	reaper   *reaper.Reaper
	now      func() time.Time
	attempts *prometheus.CounterVec

	// ctx ends when execd stops; run and every process it started end with it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	stopped bool
	task    *persistedTask // nil until a PUT
	// history holds the latest states, oldest first; changed is closed at the next change.
	history []execdapi.TaskState
	changed chan struct{}
	// log is the log of the latest attempt this execd started; nil before the first.
	log *attemptLog
}

// newTaskRunner loads the task a previous execd of this container left, if any, and
// resumes it: an attempt that was running died with the container.
func newTaskRunner(cfg taskConfig, r *reaper.Reaper, now func() time.Time, attempts *prometheus.CounterVec) (*taskRunner, error) {
	if cfg.logDir == "" {
		return nil, errors.New("tasks need a log directory")
	}
	if cfg.heartbeat <= 0 {
		cfg.heartbeat = execdapi.TaskHeartbeat
	}
	if cfg.retryBackoff <= 0 {
		cfg.retryBackoff = defaultTaskRetryBackoff
	}
	if cfg.maxLogBytes <= 0 {
		cfg.maxLogBytes = execdapi.MaxTaskLogBytes
	}
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("task state directory: %w", err)
	}
	if err := os.MkdirAll(cfg.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("task log directory: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := &taskRunner{cfg: cfg, reaper: r, now: now, attempts: attempts, ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	t, err := tr.load()
	if err != nil {
		// Not fatal: execd without its task still serves exec and files, and the
		// controller learns from the empty state that the task is gone.
		klog.ErrorS(err, "Ignoring the unreadable task state", "file", tr.stateFile())
	}
	if t == nil {
		return tr, nil
	}
	tr.task = t
	tr.history = []execdapi.TaskState{t.State}
	if t.State.Phase != execdapi.TaskRunning {
		klog.InfoS("Serving the task kept from before the container restarted", "task", t.State.ID, "phase", t.State.Phase)
		return tr, nil
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !t.Waiting {
		// The container restarted under the attempt: its processes are gone.
		n := t.State.Attempt
		appendTaskLogNote(taskLogPath(cfg.logDir, n), "the container restarted while the attempt ran")
		tr.endAttemptLocked(attemptOutcome{
			reason:  execdapi.TaskReasonContainerRestarted,
			message: fmt.Sprintf("the container restarted while attempt %d ran", n),
		})
		klog.InfoS("The task's attempt died with the container", "task", t.State.ID, "attempt", n, "retry", !t.State.Final())
	}
	if t.State.Phase == execdapi.TaskRunning {
		tr.wg.Go(func() { tr.run(true) })
	}
	return tr, nil
}

func (tr *taskRunner) stateFile() string { return filepath.Join(tr.cfg.stateDir, taskStateFile) }

// load reads taskStateFile; nil when there is none.
func (tr *taskRunner) load() (*persistedTask, error) {
	data, err := os.ReadFile(tr.stateFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t := &persistedTask{}
	if err := json.Unmarshal(data, t); err != nil {
		return nil, fmt.Errorf("decode %s: %w", taskStateFile, err)
	}
	if t.State.ID == "" || t.State.ID != t.Request.ID {
		return nil, fmt.Errorf("%s holds no task", taskStateFile)
	}
	if err := validateTaskRequest(&t.Request); err != nil {
		return nil, fmt.Errorf("%s holds an invalid task: %w", taskStateFile, err)
	}
	return t, nil
}

// stop kills the running attempt, if any, and waits until run returned. The task's state
// stays as it is (see the top of this file).
func (tr *taskRunner) stop() {
	tr.mu.Lock()
	tr.stopped = true
	tr.mu.Unlock()
	tr.cancel()
	tr.wg.Wait()
}

// current is the task's state (TaskNone before a PUT) and a channel closed at its next change.
func (tr *taskRunner) current() (execdapi.TaskState, <-chan struct{}) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.task == nil {
		return execdapi.TaskState{}, tr.changed
	}
	return tr.task.State, tr.changed
}

// since returns the states after generation gen, oldest first, and a channel closed at the
// next change.
func (tr *taskRunner) since(gen int64) ([]execdapi.TaskState, <-chan struct{}) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	i, _ := slices.BinarySearchFunc(tr.history, gen+1, func(s execdapi.TaskState, g int64) int {
		return int(s.Generation - g)
	})
	return slices.Clone(tr.history[i:]), tr.changed
}

// sandboxUID is the sandbox of the task, "" before a PUT.
func (tr *taskRunner) sandboxUID() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.task == nil {
		return ""
	}
	return tr.task.Request.SandboxUID
}

// commitLocked makes the change to tr.task.State that the caller made: a new generation,
// persisted, then published.
func (tr *taskRunner) commitLocked() error {
	tr.task.State.Generation++
	err := tr.persistLocked()
	tr.history = append(tr.history, tr.task.State)
	if len(tr.history) > taskHistory {
		tr.history = slices.Delete(tr.history, 0, len(tr.history)-taskHistory)
	}
	close(tr.changed)
	tr.changed = make(chan struct{})
	return err
}

func (tr *taskRunner) persistLocked() error {
	data, err := json.Marshal(tr.task)
	if err == nil {
		err = atomicfile.Write(tr.stateFile(), data)
	}
	if err != nil {
		// The state in memory still holds while execd runs; a restart would find an older one.
		klog.ErrorS(err, "Persisting the task's state failed", "task", tr.task.State.ID, "generation", tr.task.State.Generation)
		return fmt.Errorf("persist the task's state: %w", err)
	}
	return nil
}

// start starts the task of req, with the sandbox's env, unless the pod has one. It returns
// the state to answer, or the status code and error.
func (tr *taskRunner) start(req *execdapi.TaskRequest, env []string) (execdapi.TaskState, int, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.stopped {
		return execdapi.TaskState{}, http.StatusServiceUnavailable, errors.New("sandbox-execd is shutting down")
	}
	if t := tr.task; t != nil {
		if t.Request.ID != req.ID {
			return execdapi.TaskState{}, http.StatusConflict, fmt.Errorf("the pod runs task %q already", t.Request.ID)
		}
		klog.V(4).InfoS("Repeated task start", "task", req.ID)
		return t.State, http.StatusOK, nil
	}
	now := tr.now()
	t := &persistedTask{Request: *req, Env: env}
	t.State = execdapi.TaskState{ID: req.ID, Phase: execdapi.TaskRunning, Attempt: t.firstAttempt(), StartTime: &now}
	if err := tr.persistNew(t); err != nil {
		return execdapi.TaskState{}, http.StatusInternalServerError, err
	}
	tr.log = openAttemptLog(tr.cfg.logDir, t.State.Attempt, tr.cfg.maxLogBytes)
	tr.history = append(tr.history, t.State)
	close(tr.changed)
	tr.changed = make(chan struct{})
	tr.wg.Go(func() { tr.run(false) })
	// argv[0] only: arguments and env values may carry secrets.
	klog.InfoS("Started the task", "task", req.ID, "command", req.Command[0], "attempt", t.State.Attempt,
		"restartOnFailure", req.RestartOnFailure, "retries", req.Retries)
	return t.State, http.StatusOK, nil
}

// persistNew persists t as the task: only a task on disk may start, or a restarted execd
// would not know it ran.
func (tr *taskRunner) persistNew(t *persistedTask) error {
	t.State.Generation = 1
	tr.task = t
	if err := tr.persistLocked(); err != nil {
		tr.task = nil
		return err
	}
	return nil
}

// run makes the task's attempts until one succeeds, none is left or execd stops. With
// waitFirst it starts with the backoff before the next attempt.
func (tr *taskRunner) run(waitFirst bool) {
	for {
		if waitFirst && !tr.beginNextAttempt() {
			return
		}
		waitFirst = true
		out := tr.runAttempt()
		if tr.ctx.Err() != nil {
			return // see stop
		}
		tr.mu.Lock()
		tr.endAttemptLocked(out)
		final := tr.task.State.Final()
		tr.mu.Unlock()
		if final {
			return
		}
	}
}

// retryBackoff is the wait before the retry after attempt (a number of this pod's).
func (tr *taskRunner) retryBackoff(t *persistedTask) time.Duration {
	d := tr.cfg.retryBackoff
	for i := t.firstAttempt(); i < t.State.Attempt && d < maxTaskRetryBackoff; i++ {
		d *= 2
	}
	return min(d, maxTaskRetryBackoff)
}

// beginNextAttempt waits for the backoff and makes the next attempt the current one; false
// when execd stopped meanwhile.
func (tr *taskRunner) beginNextAttempt() bool {
	tr.mu.Lock()
	wait := tr.retryBackoff(tr.task)
	tr.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-tr.ctx.Done():
		return false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	t := tr.task
	n := t.State.Attempt + 1
	pruneTaskLogs(tr.cfg.logDir, n-1)
	tr.log = openAttemptLog(tr.cfg.logDir, n, tr.cfg.maxLogBytes)
	t.State.Attempt = n
	t.Waiting = false
	_ = tr.commitLocked()
	klog.V(2).InfoS("Retrying the task", "task", t.State.ID, "attempt", n, "backoff", wait)
	return true
}

// attemptOutcome is how an attempt ended: reason "" for success.
type attemptOutcome struct {
	exitCode *int32
	reason   string
	message  string
}

// endAttemptLocked records how the current attempt ended, and whether another follows.
func (tr *taskRunner) endAttemptLocked(out attemptOutcome) {
	t := tr.task
	s := &t.State
	s.ExitCode = out.exitCode
	result := out.reason
	if out.reason == "" {
		result = string(execdapi.TaskSucceeded)
		s.Phase, s.Reason, s.Message = execdapi.TaskSucceeded, "", ""
	} else {
		s.Reason, s.Message = out.reason, out.message
		if t.retryLeft() {
			t.Waiting = true
		} else {
			s.Phase = execdapi.TaskFailed
		}
	}
	if s.Final() {
		now := tr.now()
		s.FinishTime = &now
	}
	tr.attempts.WithLabelValues(result).Inc()
	_ = tr.commitLocked()
	// Not the message: it may quote the task's output.
	keys := []any{"task", s.ID, "attempt", s.Attempt, "result", result, "phase", s.Phase}
	if s.ExitCode != nil {
		keys = append(keys, "exitCode", *s.ExitCode)
	}
	klog.InfoS("Task attempt ended", keys...)
}

// runAttempt runs preStart, the command and postStop of the current attempt.
func (tr *taskRunner) runAttempt() attemptOutcome {
	tr.mu.Lock()
	t, log := tr.task, tr.log
	req := t.Request
	env := taskEnviron(t.Env, req.Env)
	tr.mu.Unlock()
	defer log.end()

	var out attemptOutcome
	if len(req.PreStart) > 0 {
		res := tr.runProcess(req.PreStart, env, req.WorkingDir, hookTimeout(req.PreStartTimeoutSeconds), log)
		if !res.succeeded() && !res.stopped {
			out = attemptOutcome{reason: execdapi.TaskReasonPreStartFailed, message: "preStart " + res.String()}
			log.note("preStart %s; the command does not run", res)
		}
	}
	if out.reason == "" && tr.ctx.Err() == nil {
		last := &lastLine{}
		argv := slices.Concat(req.Command, req.Args)
		res := tr.runProcess(argv, env, req.WorkingDir, secondsDuration(req.TimeoutSeconds), io.MultiWriter(log, last))
		out = commandOutcome(argv[0], res, last.String(), req.TimeoutSeconds)
		if res.startErr != nil || res.timedOut {
			log.note("%s", out.message)
		}
	}
	if len(req.PostStop) > 0 && tr.ctx.Err() == nil {
		res := tr.runProcess(req.PostStop, env, req.WorkingDir, hookTimeout(req.PostStopTimeoutSeconds), log)
		log.note("postStop %s", res)
	}
	return out
}

// commandOutcome is how an attempt whose command ran (or did not start) ended.
func commandOutcome(name string, res procResult, lastLine string, timeoutSeconds int64) attemptOutcome {
	switch {
	case res.startErr != nil:
		out := attemptOutcome{reason: execdapi.TaskReasonStartFailed, message: fmt.Sprintf("starting %q: %v", name, res.startErr)}
		// As a shell reports a command it cannot run (and an exec does): 127 or 126.
		if code, ok := startFailureCode(res.startErr); ok {
			out.exitCode = ptrInt32(code)
		}
		return out
	case res.timedOut:
		return attemptOutcome{exitCode: res.exitCode(), reason: execdapi.TaskReasonDeadlineExceeded,
			message: fmt.Sprintf("the attempt ran longer than timeoutSeconds (%d)", timeoutSeconds)}
	case res.succeeded():
		return attemptOutcome{exitCode: ptrInt32(0)}
	}
	out := attemptOutcome{exitCode: res.exitCode(), reason: execdapi.TaskReasonError, message: res.String()}
	if lastLine != "" {
		out.message += ": " + lastLine
	}
	return out
}

func hookTimeout(seconds int64) time.Duration {
	if seconds <= 0 {
		return defaultTaskHookTimeout
	}
	return secondsDuration(seconds)
}

// secondsDuration is n seconds; 0 (no limit) for n past what a Duration holds, centuries.
func secondsDuration(n int64) time.Duration {
	if n <= 0 || n > math.MaxInt64/int64(time.Second) {
		return 0
	}
	return time.Duration(n) * time.Second
}

func ptrInt32(n int) *int32 {
	v := int32(n)
	return &v
}

// taskEnviron is the environment of a task's processes: what an exec gets (execd's own but
// the client CA, then the sandbox's env), then the task's own. Later entries win in os/exec.
func taskEnviron(sandboxEnv []string, taskEnv []execdapi.EnvVar) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, execdapi.EnvClientCA+"=")
	})
	env = append(env, sandboxEnv...)
	for _, e := range taskEnv {
		env = append(env, e.Name+"="+e.Value)
	}
	return env
}

// procResult is how one process of a task ended.
type procResult struct {
	// startErr: it did not start.
	startErr error
	// code is the exit code, 128+signal for a signal; signal is that signal.
	code   int
	signal syscall.Signal
	// timedOut: killed for its timeout; stopped: killed because execd stops.
	timedOut, stopped bool
	// waitErr: its status could not be collected.
	waitErr error
	timeout time.Duration
}

func (r procResult) succeeded() bool {
	return r.startErr == nil && r.waitErr == nil && !r.timedOut && r.code == 0
}

// exitCode is the exit code to report, nil if there is none.
func (r procResult) exitCode() *int32 {
	if r.startErr != nil || r.waitErr != nil {
		return nil
	}
	return ptrInt32(r.code)
}

// String says how it ended, as a message continues: "exited with exit code 3".
func (r procResult) String() string {
	switch {
	case r.startErr != nil:
		return fmt.Sprintf("could not start: %v", r.startErr)
	case r.timedOut:
		return fmt.Sprintf("ran longer than %s and was killed", r.timeout)
	case r.waitErr != nil:
		return fmt.Sprintf("could not be waited for: %v", r.waitErr)
	case r.signal != 0:
		return fmt.Sprintf("exit code %d (killed by signal %d: %v)", r.code, int(r.signal), r.signal)
	}
	return fmt.Sprintf("exit code %d", r.code)
}

// runProcess runs argv to its end, as an exec runs: in a process group of its own, with env,
// in dir ("": execd's), without stdin, its stdout and stderr on one pipe to out (interleaved
// as written). Past timeout (0: none), or when execd stops, its group gets SIGTERM, then
// SIGKILL after taskStopGrace. Whatever it left in its group is killed when it exits: the
// attempt's processes end with it, as a container's do, so that a retry runs alone.
func (tr *taskRunner) runProcess(argv, env []string, dir string, timeout time.Duration, out io.Writer) procResult {
	pr, pw, err := os.Pipe()
	if err != nil {
		return procResult{startErr: fmt.Errorf("making the output pipe: %w", err)}
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Env, c.Dir = env, dir
	c.Stdout, c.Stderr = pw, pw // stdin: /dev/null
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pid, err := tr.reaper.Start(func() (int, error) {
		if err := c.Start(); err != nil {
			return 0, err
		}
		return c.Process.Pid, nil
	})
	// Only the child may hold the write end, or the copy never sees the end of output.
	_ = pw.Close()
	if err != nil {
		_ = pr.Close()
		return procResult{startErr: err}
	}
	klog.V(4).InfoS("Started a task process", "command", argv[0], "pid", pid)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(out, pr)
	}()
	waitDone := make(chan error, 1)
	go func() { waitDone <- c.Wait() }()

	res := procResult{timeout: timeout}
	var deadline <-chan time.Time
	if timeout > 0 {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	var waitErr error
	select {
	case waitErr = <-waitDone:
	case <-deadline:
		res.timedOut = true
		waitErr = stopTaskProcess(pid, waitDone)
	case <-tr.ctx.Done():
		res.stopped = true
		waitErr = stopTaskProcess(pid, waitDone)
	}
	// Release only after Wait collected the status, see reaper.Start.
	tr.reaper.Release(pid)
	signalTaskGroup(pid, unix.SIGKILL)

	// Output ends with the group. A process that left it (setsid) may hold the pipe open:
	// the attempt ends all the same, after a short drain.
	drain := time.NewTimer(defaultOutputDrainTimeout)
	select {
	case <-copied:
	case <-drain.C:
		klog.V(4).InfoS("Task output still open after its process group ended, closing it", "pid", pid)
	}
	drain.Stop()
	_ = pr.Close()
	<-copied

	var ee *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &ee):
		res.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.signal = ws.Signal()
			res.code = 128 + int(res.signal)
		}
	default:
		res.waitErr = waitErr
	}
	klog.V(4).InfoS("Task process ended", "pid", pid, "result", res.String())
	return res
}

// stopTaskProcess stops the process group led by pid: SIGTERM, SIGKILL after taskStopGrace.
// It returns the leader's Wait error.
func stopTaskProcess(pid int, waitDone <-chan error) error {
	signalTaskGroup(pid, unix.SIGTERM)
	grace := time.NewTimer(taskStopGrace)
	defer grace.Stop()
	select {
	case err := <-waitDone:
		return err
	case <-grace.C:
	}
	signalTaskGroup(pid, unix.SIGKILL)
	return <-waitDone
}

// signalTaskGroup signals the process group led by pid. The group's id is not reused while a
// member lives, so signalling it right after the leader was collected is safe.
func signalTaskGroup(pgid int, sig unix.Signal) {
	if err := unix.Kill(-pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		klog.ErrorS(err, "Signalling a task's process group failed", "pgid", pgid, "signal", sig.String())
	}
}

// lastLine keeps the last non-empty line written to it, if it is short (maxTaskMessageLine).
// Only the copy of one process's output writes to it, and it is read once that copy ended.
type lastLine struct {
	line    []byte // the last complete non-empty line; nil if it was long
	partial []byte // what follows the last newline
	long    bool   // partial is past the bound
}

func (l *lastLine) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.add(p)
			break
		}
		l.add(p[:i])
		switch {
		case l.long:
			l.line = nil
		case len(bytes.TrimSpace(l.partial)) > 0:
			l.line = bytes.Clone(l.partial)
		}
		l.partial, l.long = l.partial[:0], false
		p = p[i+1:]
	}
	return n, nil
}

func (l *lastLine) add(p []byte) {
	if l.long {
		return
	}
	if len(l.partial)+len(p) > maxTaskMessageLine {
		l.long, l.partial = true, l.partial[:0]
		return
	}
	l.partial = append(l.partial, p...)
}

// String is the last line, printable, or "".
func (l *lastLine) String() string {
	line := l.line
	if l.long {
		line = nil
	} else if len(bytes.TrimSpace(l.partial)) > 0 {
		line = l.partial
	}
	s := strings.ToValidUTF8(string(line), "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// HTTP.

// taskClaim returns the claim a task request is served under, or answers why it is refused:
// 404 when tasks are disabled; 409 when execd belongs to no sandbox, to another than the
// request names, or its task to another; 400 when the request names none.
func (h *Handler) taskClaim(w http.ResponseWriter, req *http.Request) (*claim, bool) {
	if h.tasks == nil {
		http.Error(w, "sandbox-execd runs no tasks here: it has no task state or log directory (a pod made before tasks existed?)", http.StatusNotFound)
		return nil, false
	}
	c, code, msg := h.namedSandbox(req)
	if c == nil {
		http.Error(w, msg, code)
		return nil, false
	}
	if uid := h.tasks.sandboxUID(); uid != "" && uid != c.sandboxUID {
		http.Error(w, fmt.Sprintf("the pod's task belongs to sandbox %s, not to %s", uid, c.sandboxUID), http.StatusConflict)
		return nil, false
	}
	return c, true
}

// serveTaskStart serves PUT execdapi.TaskPath (sandbox-controller only):
//
//	200 the task's state: started now, or a repeated request (same ID)
//	400 a malformed body or a request that fails validation; a request naming no sandbox
//	404 tasks are disabled (no state or log directory)
//	409 the pod has another task, or execd belongs to no sandbox or another one
//	413 a body over maxTaskRequestBytes
//	500 the state could not be persisted; nothing started
//	503 execd is shutting down
func (h *Handler) serveTaskStart(w http.ResponseWriter, req *http.Request) {
	if !h.allow(w, req, execdapi.ControllerIdentity) {
		return
	}
	c, ok := h.taskClaim(w, req)
	if !ok {
		return
	}
	tr := &execdapi.TaskRequest{}
	if code, err := decodeJSONBody(w, req, maxTaskRequestBytes, tr, "a JSON task"); err != nil {
		http.Error(w, "invalid task: "+err.Error(), code)
		return
	}
	if err := validateTaskRequest(tr); err != nil {
		// The messages name fields and env names, never values.
		klog.InfoS("Rejected an invalid task", "remoteAddr", req.RemoteAddr, "err", err)
		http.Error(w, "invalid task: "+err.Error(), http.StatusBadRequest)
		return
	}
	if tr.SandboxUID != c.sandboxUID {
		http.Error(w, fmt.Sprintf("the task is for sandbox %s; sandbox-execd belongs to %s", tr.SandboxUID, c.sandboxUID), http.StatusConflict)
		return
	}
	state, code, err := h.tasks.start(tr, c.env)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	httpjson.Write(w, http.StatusOK, &state)
}

// serveTask serves GET execdapi.TaskPath (sandbox-controller only): the state, or with
// watch=true a stream of them.
func (h *Handler) serveTask(w http.ResponseWriter, req *http.Request) {
	if !h.allow(w, req, execdapi.ControllerIdentity) {
		return
	}
	if _, ok := h.taskClaim(w, req); !ok {
		return
	}
	watch, err := queryBool(req, execdapi.TaskWatchParam)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if watch {
		h.serveTaskWatch(w, req)
		return
	}
	state, _ := h.tasks.current()
	httpjson.Write(w, http.StatusOK, &state)
}

// serveTaskWatch streams the task's state: the current one, then every change, one JSON
// document a line, and a bare newline after each heartbeat without one. It ends when the
// client goes or execd stops its sessions.
func (h *Handler) serveTaskWatch(w http.ResponseWriter, req *http.Request) {
	ctx, done, ok := h.beginSession(req)
	if !ok {
		http.Error(w, "sandbox-execd is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer done()
	w.Header().Set("Content-Type", execdapi.TaskWatchContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(line []byte) bool {
		if _, err := w.Write(line); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	encode := func(s execdapi.TaskState) bool {
		data, err := json.Marshal(&s)
		if err != nil {
			return false
		}
		return send(append(data, '\n'))
	}

	state, changed := h.tasks.current()
	if !encode(state) {
		return
	}
	last := state.Generation
	heartbeat := time.NewTimer(h.tasks.cfg.heartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if !send([]byte("\n")) {
				return
			}
		case <-changed:
			var states []execdapi.TaskState
			states, changed = h.tasks.since(last)
			for _, s := range states {
				if !encode(s) {
					return
				}
				last = s.Generation
			}
		}
		heartbeat.Reset(h.tasks.cfg.heartbeat)
	}
}

// beginSession registers a streaming response that StopSessions must end: its context ends
// when the client goes or execd stops; call done when it returned. ok is false once execd
// stops.
func (h *Handler) beginSession(req *http.Request) (ctx context.Context, done func(), ok bool) {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return nil, nil, false
	}
	h.sessions.Add(1)
	h.mu.Unlock()
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(h.sessionsCtx, cancel)
	return ctx, func() {
		stop()
		cancel()
		h.sessions.Done()
	}, true
}

// decodeJSONBody decodes one JSON object of at most limit bytes from the body into v (what
// names it in errors: "a JSON claim"); on error it also returns the status code to answer
// with. Claims and tasks use it.
func decodeJSONBody(w http.ResponseWriter, req *http.Request, limit int64, v any, what string) (int, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, limit))
	err := dec.Decode(v)
	if err == nil {
		// One object and nothing after it, or the body is not what the client meant.
		if _, tokErr := dec.Token(); !errors.Is(tokErr, io.EOF) {
			err = errors.New("unexpected data after the JSON object")
			if tokErr != nil {
				err = tokErr
			}
		}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("the body exceeds %d bytes", limit)
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, fmt.Errorf("the body is empty, want %s", what)
	default:
		return http.StatusBadRequest, fmt.Errorf("the body is not %s: %w", what, err)
	}
}

// validateTaskRequest reports every problem with a task at once. Its messages never include
// env values or arguments.
func validateTaskRequest(tr *execdapi.TaskRequest) error {
	var errs []error
	for _, f := range []struct{ field, value string }{{"id", tr.ID}, {"sandboxUID", tr.SandboxUID}} {
		switch {
		case f.value == "":
			errs = append(errs, fmt.Errorf("%s is required", f.field))
		case strings.ContainsFunc(f.value, invalidNameRune):
			// Both end up in logs.
			errs = append(errs, fmt.Errorf("%s contains whitespace or control characters", f.field))
		}
	}
	if len(tr.Command) == 0 || tr.Command[0] == "" {
		errs = append(errs, errors.New("command is required: command[0] is the executable"))
	}
	for _, argv := range []struct {
		field string
		args  []string
	}{{"command", tr.Command}, {"args", tr.Args}, {"preStart", tr.PreStart}, {"postStop", tr.PostStop}} {
		for i, arg := range argv.args {
			if strings.ContainsRune(arg, 0) {
				errs = append(errs, fmt.Errorf("%s[%d] contains a NUL byte", argv.field, i))
			}
		}
	}
	for _, hook := range []struct {
		field string
		argv  []string
	}{{"preStart", tr.PreStart}, {"postStop", tr.PostStop}} {
		if len(hook.argv) > 0 && hook.argv[0] == "" {
			errs = append(errs, fmt.Errorf("%s[0], the executable, is empty", hook.field))
		}
	}
	for i, e := range tr.Env {
		switch {
		case e.Name == "":
			errs = append(errs, fmt.Errorf("env[%d]: the name is empty", i))
		case strings.ContainsAny(e.Name, "=\x00"):
			errs = append(errs, fmt.Errorf("env[%d]: the name %q contains '=' or a NUL byte", i, e.Name))
		default:
			if why, reserved := execdapi.ReservedEnv(e.Name); reserved {
				errs = append(errs, fmt.Errorf("env[%d]: %s may not be set: %s", i, e.Name, why))
			}
		}
		if strings.ContainsRune(e.Value, 0) {
			errs = append(errs, fmt.Errorf("env[%d]: the value of %q contains a NUL byte", i, e.Name))
		}
	}
	if tr.WorkingDir != "" && !path.IsAbs(tr.WorkingDir) {
		errs = append(errs, fmt.Errorf("workingDir %q is not an absolute path", tr.WorkingDir))
	}
	for _, n := range []struct {
		field string
		value int64
	}{
		{"timeoutSeconds", tr.TimeoutSeconds}, {"retries", int64(tr.Retries)}, {"firstAttempt", int64(tr.FirstAttempt)},
		{"preStartTimeoutSeconds", tr.PreStartTimeoutSeconds}, {"postStopTimeoutSeconds", tr.PostStopTimeoutSeconds},
	} {
		if n.value < 0 {
			errs = append(errs, fmt.Errorf("%s %d is negative", n.field, n.value))
		}
	}
	return errors.Join(errs...)
}
