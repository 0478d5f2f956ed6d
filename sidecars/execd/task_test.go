package execd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// taskServer is an execd of a pod made for testSandbox, with tasks.
type taskServer struct {
	srv              *httptest.Server
	h                *Handler
	stateDir, logDir string
}

// startTaskServer serves a Handler of cfg; what cfg leaves empty is filled in: the executor,
// testSandbox (unless cfg.Sandbox is set or unclaimed), fresh task directories and a short
// retry backoff.
func startTaskServer(t *testing.T, cfg HandlerConfig, unclaimed bool) *taskServer {
	t.Helper()
	cfg.Executor = NewExecutor(nil)
	if cfg.Sandbox == nil && !unclaimed {
		cfg.Sandbox = testSandbox
	}
	if cfg.TaskStateDir == "" {
		cfg.TaskStateDir = filepath.Join(t.TempDir(), "task")
	}
	if cfg.TaskLogDir == "" {
		cfg.TaskLogDir = filepath.Join(t.TempDir(), "log")
	}
	if cfg.TaskRetryBackoff == 0 {
		cfg.TaskRetryBackoff = 10 * time.Millisecond
	}
	h, err := NewHandler(cfg, newTestIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &taskServer{h: h, stateDir: cfg.TaskStateDir, logDir: cfg.TaskLogDir}
	s.srv = serveTLS(t, h, h.identity)
	// Also kills what a test left running.
	t.Cleanup(h.StopSessions)
	return s
}

// do sends a request as identity and returns the status and the body. body is sent as is if
// it is a string, as JSON otherwise. Requests name testSandbox unless header names another.
func (s *taskServer) do(t *testing.T, identity, method, path string, header http.Header, body any) (int, string) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(testContext(t), method, s.srv.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := httpClient(t, identity).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// put starts tr, which must be accepted.
func (s *taskServer) put(t *testing.T, tr execdapi.TaskRequest) execdapi.TaskState {
	t.Helper()
	code, body := s.do(t, asController, http.MethodPut, execdapi.TaskPath, nil, tr)
	if code != http.StatusOK {
		t.Fatalf("PUT task: status %d (%s), want 200", code, body)
	}
	return decodeState(t, body)
}

func (s *taskServer) get(t *testing.T) execdapi.TaskState {
	t.Helper()
	code, body := s.do(t, asController, http.MethodGet, execdapi.TaskPath, nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET task: status %d (%s), want 200", code, body)
	}
	return decodeState(t, body)
}

func decodeState(t *testing.T, body string) execdapi.TaskState {
	t.Helper()
	var s execdapi.TaskState
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("decode state %q: %v", body, err)
	}
	return s
}

// log GETs the task's log with query, as sandbox-apiserver.
func (s *taskServer) log(t *testing.T, query string) (int, string) {
	t.Helper()
	return s.do(t, asAPIServer, http.MethodGet, execdapi.TaskLogPath+"?"+query, nil, nil)
}

// taskWatch is a watch stream, read line by line.
type taskWatch struct {
	contentType string
	lines       chan string // without the newline; "" is a heartbeat
	err         chan error  // how the stream ended
}

func (s *taskServer) watch(t *testing.T, ctx context.Context) *taskWatch {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL+execdapi.TaskPath+"?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient(t, asController).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		t.Fatalf("watch: status %d (%s)", resp.StatusCode, data)
	}
	w := &taskWatch{contentType: resp.Header.Get("Content-Type"), lines: make(chan string, 100), err: make(chan error, 1)}
	go func() {
		defer func() { _ = resp.Body.Close() }()
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				w.err <- err
				close(w.lines)
				return
			}
			w.lines <- strings.TrimSuffix(line, "\n")
		}
	}()
	return w
}

// next is the next line: a state, or heartbeat true.
func (w *taskWatch) next(t *testing.T) (state execdapi.TaskState, heartbeat bool) {
	t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			t.Fatalf("the watch ended: %v", <-w.err)
		}
		if line == "" {
			return execdapi.TaskState{}, true
		}
		return decodeState(t, line), false
	case <-time.After(30 * time.Second):
		t.Fatal("no line on the watch")
	}
	return execdapi.TaskState{}, false
}

// nextState skips heartbeats.
func (w *taskWatch) nextState(t *testing.T) execdapi.TaskState {
	t.Helper()
	for {
		if s, hb := w.next(t); !hb {
			return s
		}
	}
}

// waitFinal watches the task until it has ended and returns its final state.
func (s *taskServer) waitFinal(t *testing.T) execdapi.TaskState {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	w := s.watch(t, ctx)
	for {
		if st := w.nextState(t); st.Final() {
			return st
		}
	}
}

func newTask(id string, argv ...string) execdapi.TaskRequest {
	return execdapi.TaskRequest{ID: id, SandboxUID: testSandbox.UID, Command: argv}
}

// counting is a command that counts its runs in file, prints "run-N" and then runs script.
func counting(file, script string) []string {
	return []string{"sh", "-c", `n=$(cat "$0" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$0"; echo run-$n; ` + script, file}
}

func runs(t *testing.T, file string) int {
	t.Helper()
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("counter %q: %v", data, err)
	}
	return n
}

func int32p(n int32) *int32 { return &n }

// ignoreTimes leaves the times and generations out of a comparison of states.
var ignoreTimes = cmpopts.IgnoreFields(execdapi.TaskState{}, "StartTime", "FinishTime", "Generation")

func TestTaskSucceeds(t *testing.T) {
	s := startTaskServer(t, HandlerConfig{}, false)
	if got := s.get(t); got.Phase != execdapi.TaskNone || got.ID != "" || got.Generation != 0 {
		t.Errorf("state before a PUT = %+v, want none", got)
	}
	before := time.Now()
	started := s.put(t, newTask("t1", "sh", "-c", "echo hello; echo to stderr >&2"))
	if started.Phase != execdapi.TaskRunning || started.Attempt != 1 || started.StartTime == nil || started.Generation != 1 {
		t.Errorf("PUT answered %+v, want attempt 1 running since now, generation 1", started)
	}
	got := s.waitFinal(t)
	want := execdapi.TaskState{ID: "t1", Phase: execdapi.TaskSucceeded, Attempt: 1, ExitCode: int32p(0)}
	if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
		t.Errorf("final state (-want +got):\n%s", diff)
	}
	if got.StartTime == nil || got.FinishTime == nil || got.StartTime.Before(before.Add(-time.Second)) || got.FinishTime.Before(*got.StartTime) {
		t.Errorf("times: start %v, finish %v; want both, in order, from this test", got.StartTime, got.FinishTime)
	}
	if got.Generation <= started.Generation {
		t.Errorf("generation %d after the end, want more than %d", got.Generation, started.Generation)
	}
	if code, body := s.log(t, ""); code != http.StatusOK || body != "hello\nto stderr\n" {
		t.Errorf("log: %d %q, want stdout and stderr", code, body)
	}
	// What a restarted execd finds.
	data, err := os.ReadFile(filepath.Join(s.stateDir, taskStateFile))
	if err != nil {
		t.Fatal(err)
	}
	var kept persistedTask
	if err := json.Unmarshal(data, &kept); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, kept.State); diff != "" || kept.Request.ID != "t1" || kept.Request.Command[0] != "sh" {
		t.Errorf("persisted %s; state diff (-served +kept):\n%s", data, diff)
	}
}

func TestTaskFailures(t *testing.T) {
	long := strings.Repeat("x", maxTaskMessageLine+1)
	tests := []struct {
		name string
		req  func(dir string) execdapi.TaskRequest
		want execdapi.TaskState
		// wantLog is a substring of the log; notRun a file the command would have made.
		wantLog string
		notRun  bool
	}{
		{
			name: "non-zero exit",
			req: func(string) execdapi.TaskRequest {
				return newTask("t", "sh", "-c", "echo out; echo last words >&2; exit 3")
			},
			want:    execdapi.TaskState{Phase: execdapi.TaskFailed, ExitCode: int32p(3), Reason: execdapi.TaskReasonError, Message: "exit code 3: last words"},
			wantLog: "out\nlast words\n",
		},
		{
			name: "a long last line is left out",
			req: func(string) execdapi.TaskRequest {
				return newTask("t", "sh", "-c", "echo "+long+"; exit 1")
			},
			want: execdapi.TaskState{Phase: execdapi.TaskFailed, ExitCode: int32p(1), Reason: execdapi.TaskReasonError, Message: "exit code 1"},
		},
		{
			name: "killed by a signal",
			req: func(string) execdapi.TaskRequest {
				return newTask("t", "sh", "-c", "kill -KILL $$")
			},
			want: execdapi.TaskState{Phase: execdapi.TaskFailed, ExitCode: int32p(137), Reason: execdapi.TaskReasonError, Message: "exit code 137 (killed by signal 9: killed)"},
		},
		{
			name: "no such command",
			req: func(string) execdapi.TaskRequest {
				return newTask("t", "no-such-command-for-execd")
			},
			want: execdapi.TaskState{Phase: execdapi.TaskFailed, ExitCode: int32p(127), Reason: execdapi.TaskReasonStartFailed,
				Message: `starting "no-such-command-for-execd": exec: "no-such-command-for-execd": executable file not found in $PATH`},
			wantLog: "sandbox-execd: starting \"no-such-command-for-execd\"",
		},
		{
			name: "preStart fails",
			req: func(dir string) execdapi.TaskRequest {
				tr := newTask("t", "touch", filepath.Join(dir, "ran"))
				tr.PreStart = []string{"sh", "-c", "echo preparing; exit 2"}
				return tr
			},
			want:    execdapi.TaskState{Phase: execdapi.TaskFailed, Reason: execdapi.TaskReasonPreStartFailed, Message: "preStart exit code 2"},
			wantLog: "preparing\nsandbox-execd: preStart exit code 2; the command does not run\n",
			notRun:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startTaskServer(t, HandlerConfig{}, false)
			dir := t.TempDir()
			s.put(t, tt.req(dir))
			got := s.waitFinal(t)
			want := tt.want
			want.ID, want.Attempt = "t", 1
			if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
				t.Errorf("final state (-want +got):\n%s", diff)
			}
			if got.FinishTime == nil {
				t.Error("no finish time")
			}
			if code, body := s.log(t, ""); code != http.StatusOK || !strings.Contains(body, tt.wantLog) {
				t.Errorf("log: %d %q, want it to contain %q", code, body, tt.wantLog)
			}
			if _, err := os.Stat(filepath.Join(dir, "ran")); tt.notRun && err == nil {
				t.Error("the command ran")
			}
		})
	}
}

func TestTaskRetries(t *testing.T) {
	tests := []struct {
		name    string
		retries int32
		first   int32
		script  string // after counting
		want    execdapi.TaskState
		runs    int
		metrics []string
	}{
		{
			name: "retried exactly Retries times", retries: 2, first: 3, script: "exit 1",
			want: execdapi.TaskState{Phase: execdapi.TaskFailed, Attempt: 5, ExitCode: int32p(1), Reason: execdapi.TaskReasonError, Message: "exit code 1: run-3"},
			runs: 3, metrics: []string{`sandbox_execd_task_attempts_total{result="Error"} 3`, `sandbox_execd_task_attempts_total{result="Succeeded"} 0`},
		},
		{
			name: "FirstAttempt 0 is 1", retries: 1, script: "exit 1",
			want: execdapi.TaskState{Phase: execdapi.TaskFailed, Attempt: 2, ExitCode: int32p(1), Reason: execdapi.TaskReasonError, Message: "exit code 1: run-2"},
			runs: 2,
		},
		{
			name: "a retry that succeeds", retries: 3, first: 1, script: `[ $n -ge 2 ]`,
			want: execdapi.TaskState{Phase: execdapi.TaskSucceeded, Attempt: 2, ExitCode: int32p(0)},
			runs: 2, metrics: []string{`sandbox_execd_task_attempts_total{result="Error"} 1`, `sandbox_execd_task_attempts_total{result="Succeeded"} 1`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startTaskServer(t, HandlerConfig{}, false)
			counter := filepath.Join(t.TempDir(), "counter")
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			w := s.watch(t, ctx)
			w.nextState(t) // none yet

			tr := newTask("t", counting(counter, tt.script)...)
			tr.RestartOnFailure, tr.Retries, tr.FirstAttempt = true, tt.retries, tt.first
			s.put(t, tr)
			var attempts []int32
			var got execdapi.TaskState
			for !got.Final() {
				got = w.nextState(t)
				if !got.Final() && got.Phase != execdapi.TaskRunning {
					t.Fatalf("between attempts: %+v, want Running", got)
				}
				if len(attempts) == 0 || attempts[len(attempts)-1] != got.Attempt {
					attempts = append(attempts, got.Attempt)
				}
			}
			tt.want.ID = "t"
			if diff := cmp.Diff(tt.want, got, ignoreTimes); diff != "" {
				t.Errorf("final state (-want +got):\n%s", diff)
			}
			first := max(tt.first, 1)
			var wantAttempts []int32
			for n := first; n <= tt.want.Attempt; n++ {
				wantAttempts = append(wantAttempts, n)
			}
			if diff := cmp.Diff(wantAttempts, attempts); diff != "" {
				t.Errorf("attempts seen (-want +got):\n%s", diff)
			}
			if n := runs(t, counter); n != tt.runs {
				t.Errorf("the command ran %d times, want %d", n, tt.runs)
			}
			// The logs of the last two attempts only.
			if code, body := s.log(t, ""); code != http.StatusOK || !strings.Contains(body, "run-"+strconv.Itoa(tt.runs)+"\n") {
				t.Errorf("log: %d %q, want the last run's", code, body)
			}
			entries, _ := os.ReadDir(s.logDir)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			var wantNames []string
			for n := max(first, tt.want.Attempt-1); n <= tt.want.Attempt; n++ {
				wantNames = append(wantNames, "task-"+strconv.Itoa(int(n))+".log")
			}
			if diff := cmp.Diff(wantNames, names); diff != "" {
				t.Errorf("log files (-want +got):\n%s", diff)
			}
			_, metrics := s.do(t, asController, http.MethodGet, MetricsPath, nil, nil)
			for _, m := range tt.metrics {
				if !strings.Contains(metrics, m) {
					t.Errorf("metrics lack %q", m)
				}
			}
		})
	}
}

func TestTaskRetryBackoff(t *testing.T) {
	tr := &taskRunner{cfg: taskConfig{retryBackoff: time.Second}}
	task := &persistedTask{Request: execdapi.TaskRequest{FirstAttempt: 3}}
	var got []time.Duration
	for attempt := int32(3); attempt < 10; attempt++ {
		task.State.Attempt = attempt
		got = append(got, tr.retryBackoff(task))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backoffs (-want +got):\n%s", diff)
	}
}

// readPID waits for a pid a process wrote to file.
func readPID(t *testing.T, file string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, file)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // in case the test fails
	return pid
}

func TestTaskTimeout(t *testing.T) {
	s := startTaskServer(t, HandlerConfig{}, false)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The background sleep ignores SIGTERM: only the SIGKILL after the grace ends it.
	tr := newTask("t", "sh", "-c", `sh -c "trap '' TERM; exec sleep 1000" & echo $! > "$0"; wait`, pidFile)
	tr.TimeoutSeconds = 1
	s.put(t, tr)
	child := readPID(t, pidFile)
	got := s.waitFinal(t)
	if got.Phase != execdapi.TaskFailed || got.Reason != execdapi.TaskReasonDeadlineExceeded || got.ExitCode == nil || *got.ExitCode <= 128 {
		t.Errorf("final state %+v, want Failed, DeadlineExceeded, killed by a signal", got)
	}
	waitGone(t, child)
	if _, body := s.log(t, ""); !strings.Contains(body, "sandbox-execd: the attempt ran longer than timeoutSeconds (1)") {
		t.Errorf("log %q does not say why the attempt was killed", body)
	}
}

func TestTaskHooks(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		postStop string
		want     execdapi.TaskPhase
		wantLog  string
	}{
		{
			name: "around a success", script: "echo main", postStop: "echo post", want: execdapi.TaskSucceeded,
			wantLog: "pre\nmain\npost\nsandbox-execd: postStop exit code 0\n",
		},
		{
			name: "after a failure", script: "echo main; exit 4", postStop: "echo post", want: execdapi.TaskFailed,
			wantLog: "pre\nmain\npost\nsandbox-execd: postStop exit code 0\n",
		},
		{
			name: "a failing postStop changes nothing", script: "echo main", postStop: "echo post; exit 5", want: execdapi.TaskSucceeded,
			wantLog: "pre\nmain\npost\nsandbox-execd: postStop exit code 5\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startTaskServer(t, HandlerConfig{}, false)
			tr := newTask("t", "sh", "-c", tt.script)
			tr.PreStart = []string{"sh", "-c", "echo pre"}
			tr.PostStop = []string{"sh", "-c", tt.postStop}
			s.put(t, tr)
			if got := s.waitFinal(t); got.Phase != tt.want {
				t.Errorf("phase %s, want %s (%+v)", got.Phase, tt.want, got)
			}
			if code, body := s.log(t, ""); code != http.StatusOK || body != tt.wantLog {
				t.Errorf("log: %d %q, want %q", code, body, tt.wantLog)
			}
		})
	}
}

func TestTaskRequests(t *testing.T) {
	s := startTaskServer(t, HandlerConfig{}, false)
	counter := filepath.Join(t.TempDir(), "counter")
	tr := newTask("t1", counting(counter, "exec sleep 1000")...)
	first := s.put(t, tr)
	other := tr
	other.SandboxUID = "another-sandbox"
	otherHeader := http.Header{execdapi.SandboxUIDHeader: {"another-sandbox"}}

	tests := []struct {
		name     string
		identity string
		method   string
		path     string
		header   http.Header
		body     any
		want     int
	}{
		{name: "the same ID again", identity: asController, method: http.MethodPut, path: execdapi.TaskPath, body: tr, want: http.StatusOK},
		{name: "another ID", identity: asController, method: http.MethodPut, path: execdapi.TaskPath, body: newTask("t2", "true"), want: http.StatusConflict},
		{name: "another sandbox in the body", identity: asController, method: http.MethodPut, path: execdapi.TaskPath, body: other, want: http.StatusConflict},
		{name: "another sandbox in the header", identity: asController, method: http.MethodPut, path: execdapi.TaskPath, header: otherHeader, body: tr, want: http.StatusConflict},
		{name: "GET for another sandbox", identity: asController, method: http.MethodGet, path: execdapi.TaskPath, header: otherHeader, want: http.StatusConflict},
		{name: "log for another sandbox", identity: asAPIServer, method: http.MethodGet, path: execdapi.TaskLogPath, header: otherHeader, want: http.StatusConflict},
		{name: "an empty command", identity: asController, method: http.MethodPut, path: execdapi.TaskPath, body: newTask("t1", ""), want: http.StatusBadRequest},
		{name: "no command", identity: asController, method: http.MethodPut, path: execdapi.TaskPath, body: newTask("t1"), want: http.StatusBadRequest},
		{name: "no ID", identity: asController, method: http.MethodPut, path: execdapi.TaskPath, body: newTask("", "true"), want: http.StatusBadRequest},
		{name: "a reserved env name", identity: asController, method: http.MethodPut, path: execdapi.TaskPath,
			body: execdapi.TaskRequest{ID: "t1", SandboxUID: testSandbox.UID, Command: []string{"true"}, Env: []execdapi.EnvVar{{Name: execdapi.EnvSandboxUID}}}, want: http.StatusBadRequest},
		{name: "a relative working directory", identity: asController, method: http.MethodPut, path: execdapi.TaskPath,
			body: execdapi.TaskRequest{ID: "t1", SandboxUID: testSandbox.UID, Command: []string{"true"}, WorkingDir: "tmp"}, want: http.StatusBadRequest},
		{name: "bad JSON", identity: asController, method: http.MethodPut, path: execdapi.TaskPath, body: `{"id":`, want: http.StatusBadRequest},
		{name: "two JSON objects", identity: asController, method: http.MethodPut, path: execdapi.TaskPath, body: `{"id":"t1"}{}`, want: http.StatusBadRequest},
		{name: "a malformed watch", identity: asController, method: http.MethodGet, path: execdapi.TaskPath + "?watch=maybe", want: http.StatusBadRequest},
		{name: "sandbox-apiserver may not start tasks", identity: asAPIServer, method: http.MethodPut, path: execdapi.TaskPath, body: tr, want: http.StatusForbidden},
		{name: "sandbox-apiserver may not read the state", identity: asAPIServer, method: http.MethodGet, path: execdapi.TaskPath, want: http.StatusForbidden},
		{name: "sandbox-apiserver may read the log", identity: asAPIServer, method: http.MethodGet, path: execdapi.TaskLogPath, want: http.StatusOK},
		{name: "the controller may read the log", identity: asController, method: http.MethodGet, path: execdapi.TaskLogPath, want: http.StatusOK},
		{name: "nobody else may read the log", identity: asSomeone, method: http.MethodGet, path: execdapi.TaskLogPath, want: http.StatusForbidden},
		{name: "nobody else may start tasks", identity: asSomeone, method: http.MethodPut, path: execdapi.TaskPath, body: tr, want: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := s.do(t, tt.identity, tt.method, tt.path, tt.header, tt.body)
			if code != tt.want {
				t.Errorf("status %d (%s), want %d", code, body, tt.want)
			}
			if tt.want == http.StatusOK && tt.method == http.MethodPut {
				if got := decodeState(t, body); got.ID != first.ID || got.StartTime == nil || !got.StartTime.Equal(*first.StartTime) {
					t.Errorf("repeated PUT answered %+v, want the first task's state %+v", got, first)
				}
			}
		})
	}
	t.Run("a request naming no sandbox", func(t *testing.T) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, asController)}}
		req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, s.srv.URL+execdapi.TaskPath, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d, want 400", resp.StatusCode)
		}
	})
	waitFile(t, counter)
	if n := runs(t, counter); n != 1 {
		t.Errorf("the task ran %d times, want once", n)
	}
}

func TestTasksDisabled(t *testing.T) {
	h, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil), Sandbox: testSandbox}, newTestIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &taskServer{h: h, srv: serveTLS(t, h, h.identity)}
	for _, r := range []struct{ method, path, identity string }{
		{http.MethodPut, execdapi.TaskPath, asController},
		{http.MethodGet, execdapi.TaskPath, asController},
		{http.MethodGet, execdapi.TaskLogPath, asAPIServer},
	} {
		if code, body := s.do(t, r.identity, r.method, r.path, nil, newTask("t", "true")); code != http.StatusNotFound || !strings.Contains(body, "runs no tasks") {
			t.Errorf("%s %s: %d %q, want 404 saying tasks are disabled", r.method, r.path, code, body)
		}
	}
	if _, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil), TaskStateDir: t.TempDir()}, newTestIdentity(t)); err == nil {
		t.Error("a task state directory without a log directory was accepted")
	}
}

// TestTaskEnvironment: a task gets an exec's environment (without the client CA, with the
// claim's env), then its own, in its working directory.
func TestTaskEnvironment(t *testing.T) {
	t.Setenv(execdapi.EnvClientCA, "not for tasks")
	s := startTaskServer(t, HandlerConfig{}, true)
	tr := newTask("t", "sh", "-c", `printf '%s|%s|%s|%s|%s|%s' "${`+execdapi.EnvClientCA+`-unset}" "$FROM_CLAIM" "$`+execdapi.EnvSandboxName+`" "$OVERRIDDEN" "$FROM_TASK" "$(pwd)"`)
	if code, body := s.do(t, asController, http.MethodPut, execdapi.TaskPath, nil, tr); code != http.StatusConflict {
		t.Fatalf("a task in an unclaimed pod: %d %q, want 409", code, body)
	}
	cs := &claimServer{srv: s.srv, h: s.h}
	cr := newClaim(testSandbox.UID)
	cr.Env = []execdapi.EnvVar{{Name: "FROM_CLAIM", Value: "claim"}, {Name: "OVERRIDDEN", Value: "claim"}}
	cs.mustClaim(t, cr)
	dir := t.TempDir()
	tr.Env = []execdapi.EnvVar{{Name: "FROM_TASK", Value: "task"}, {Name: "OVERRIDDEN", Value: "task"}}
	tr.WorkingDir = dir
	s.put(t, tr)
	if got := s.waitFinal(t); got.Phase != execdapi.TaskSucceeded {
		t.Fatalf("final state %+v", got)
	}
	want := "unset|claim|box|task|task|" + dir
	if _, body := s.log(t, ""); body != want {
		t.Errorf("the task sees %q, want %q", body, want)
	}
}

// writeTaskState is what an execd left in dir before its container restarted.
func writeTaskState(t *testing.T, dir string, pt persistedTask) {
	t.Helper()
	data, err := json.Marshal(pt)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, taskStateFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTaskRecovery(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	running := func(restart bool, retries int32, argv ...string) persistedTask {
		return persistedTask{
			Request: execdapi.TaskRequest{ID: "t", SandboxUID: testSandbox.UID, Command: argv, RestartOnFailure: restart, Retries: retries},
			State:   execdapi.TaskState{ID: "t", Phase: execdapi.TaskRunning, Attempt: 1, StartTime: &start, Generation: 7},
		}
	}
	succeeded := running(false, 0, "true")
	succeeded.State.Phase, succeeded.State.ExitCode, succeeded.State.FinishTime = execdapi.TaskSucceeded, int32p(0), &start
	tests := []struct {
		name    string
		kept    persistedTask
		backoff time.Duration
		// final: wait for the end; otherwise the state right after NewHandler.
		final bool
		want  execdapi.TaskState
	}{
		{
			name: "no retry: failed", kept: running(false, 0, "true"),
			want: execdapi.TaskState{ID: "t", Phase: execdapi.TaskFailed, Attempt: 1, StartTime: &start, Reason: execdapi.TaskReasonContainerRestarted,
				Message: "the container restarted while attempt 1 ran", Generation: 8},
		},
		{
			name: "a retry left: waiting for it", kept: running(true, 1, "true"), backoff: time.Hour,
			want: execdapi.TaskState{ID: "t", Phase: execdapi.TaskRunning, Attempt: 1, StartTime: &start, Reason: execdapi.TaskReasonContainerRestarted,
				Message: "the container restarted while attempt 1 ran", Generation: 8},
		},
		{
			name: "a retry left: retried", kept: running(true, 1, "true"), final: true,
			want: execdapi.TaskState{ID: "t", Phase: execdapi.TaskSucceeded, Attempt: 2, StartTime: &start, ExitCode: int32p(0), Generation: 10},
		},
		{
			name: "a final state is served as it is", kept: succeeded,
			want: succeeded.State,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stateDir, logDir := filepath.Join(t.TempDir(), "task"), t.TempDir()
			writeTaskState(t, stateDir, tt.kept)
			if err := os.WriteFile(taskLogPath(logDir, 1), []byte("output\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s := startTaskServer(t, HandlerConfig{TaskStateDir: stateDir, TaskLogDir: logDir, TaskRetryBackoff: tt.backoff}, false)
			got := s.get(t)
			if tt.final {
				got = s.waitFinal(t)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(execdapi.TaskState{}, "FinishTime")); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
			if got.Final() != (got.FinishTime != nil) {
				t.Errorf("finish time %v in phase %s", got.FinishTime, got.Phase)
			}
			if tt.kept.State.Final() {
				return
			}
			wantLog := "output\nsandbox-execd: the container restarted while the attempt ran\n"
			query := ""
			if got.Attempt == 2 {
				query = "previous=true"
			}
			if _, body := s.log(t, query); body != wantLog {
				t.Errorf("log of the attempt that died: %q, want %q", body, wantLog)
			}
		})
	}
}

// TestTaskStop: when execd stops, the running attempt is killed and stays Running on disk; the
// next execd records it as ContainerRestarted.
func TestTaskStop(t *testing.T) {
	s := startTaskServer(t, HandlerConfig{}, false)
	pidFile := filepath.Join(t.TempDir(), "pid")
	s.put(t, newTask("t", "sh", "-c", `sleep 1000 & echo $! > "$0"; wait`, pidFile))
	child := readPID(t, pidFile)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	w := s.watch(t, ctx)
	w.nextState(t)

	s.h.StopSessions()
	waitGone(t, child)
	select {
	case <-w.err:
	case <-time.After(10 * time.Second):
		t.Error("the watch outlived StopSessions")
	}
	if code, body := s.do(t, asController, http.MethodPut, execdapi.TaskPath, nil, newTask("t", "true")); code != http.StatusServiceUnavailable {
		t.Errorf("PUT after the stop: %d %q, want 503", code, body)
	}

	next := startTaskServer(t, HandlerConfig{TaskStateDir: s.stateDir, TaskLogDir: s.logDir}, false)
	if got := next.get(t); got.Phase != execdapi.TaskFailed || got.Reason != execdapi.TaskReasonContainerRestarted {
		t.Errorf("after the restart: %+v, want Failed, ContainerRestarted", got)
	}
}

func TestTaskWatch(t *testing.T) {
	s := startTaskServer(t, HandlerConfig{TaskHeartbeat: 20 * time.Millisecond}, false)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	w := s.watch(t, ctx)
	if w.contentType != execdapi.TaskWatchContentType {
		t.Errorf("content type %q, want %q", w.contentType, execdapi.TaskWatchContentType)
	}
	if got, hb := w.next(t); hb || got.Phase != execdapi.TaskNone || got.Generation != 0 {
		t.Errorf("first line %+v (heartbeat %v), want the empty state at once", got, hb)
	}
	tr := newTask("t", "sh", "-c", "exit 3")
	tr.RestartOnFailure, tr.Retries = true, 1
	s.put(t, tr)

	type step struct {
		Generation int64
		Phase      execdapi.TaskPhase
		Attempt    int32
		Reason     string
	}
	var got []step
	heartbeats := 0
	for {
		st, hb := w.next(t)
		if hb {
			heartbeats++
			if len(got) > 0 && got[len(got)-1].Phase == execdapi.TaskFailed {
				break // a heartbeat after the end: nothing changes any more
			}
			continue
		}
		got = append(got, step{st.Generation, st.Phase, st.Attempt, st.Reason})
	}
	want := []step{
		{1, execdapi.TaskRunning, 1, ""},
		{2, execdapi.TaskRunning, 1, execdapi.TaskReasonError},
		{3, execdapi.TaskRunning, 2, execdapi.TaskReasonError},
		{4, execdapi.TaskFailed, 2, execdapi.TaskReasonError},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("states on the watch (-want +got):\n%s", diff)
	}

	// A watch that starts later begins with the state as it is.
	late := s.watch(t, ctx)
	if st, hb := late.next(t); hb || st.Generation != 4 || st.Phase != execdapi.TaskFailed {
		t.Errorf("first line of a later watch: %+v (heartbeat %v), want the final state", st, hb)
	}
	if _, hb := late.next(t); !hb {
		t.Error("no heartbeat on a watch without changes")
	}
	cancel()
}

// testCredentials are execdclient credentials of the test CA.
type testCredentials struct{ identity string }

func (c testCredentials) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, _ := testCA().client(c.identity)
	return &cert, nil
}

func (c testCredentials) RootCAs() *x509.CertPool { return testCA().pool }

// certifiedTarget certifies the execd at baseURL as the pod podUID's and returns its Target.
func certifiedTarget(t *testing.T, baseURL, podUID string) execdclient.Target {
	t.Helper()
	chain := podCertificate(t, testCA().ca, serverKey(t, baseURL), podUID, pki.Leaf{})
	if code, body := putCertificate(t, baseURL, asController, chain); code != http.StatusOK {
		t.Fatalf("certify: %d %q", code, body)
	}
	u, _ := url.Parse(baseURL)
	host, port, _ := net.SplitHostPort(u.Host)
	p, _ := strconv.Atoi(port)
	return execdclient.Target{PodIP: host, PodUID: podUID, Port: p}
}

func TestTaskClient(t *testing.T) {
	s := startTaskServer(t, HandlerConfig{TaskHeartbeat: time.Hour}, false)
	target := certifiedTarget(t, s.srv.URL, "0f1e2d3c-aaaa-bbbb-cccc-000000000009")
	c := execdclient.NewTaskClient(testCredentials{asController})
	ctx := testContext(t)

	gate := filepath.Join(t.TempDir(), "go")
	tr := newTask("t", "sh", "-c", `while [ ! -e "$0" ]; do sleep 0.02; done`, gate)
	started, err := c.Start(ctx, target, &tr)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.Start(ctx, target, &tr); err != nil || again.ID != "t" || !again.StartTime.Equal(*started.StartTime) {
		t.Errorf("repeated start: %+v, %v; want the first one's state", again, err)
	}
	other := newTask("other", "true")
	var rejected *execdclient.TaskRejected
	if _, err := c.Start(ctx, target, &other); !errors.As(err, &rejected) || rejected.StatusCode != http.StatusConflict {
		t.Errorf("another task: %v, want a TaskRejected 409", err)
	}

	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	states := make(chan execdapi.TaskState, 10)
	watched := make(chan error, 1)
	go func() {
		watched <- c.Watch(watchCtx, target, testSandbox.UID, func(st execdapi.TaskState) { states <- st })
	}()
	if st := <-states; st.Phase != execdapi.TaskRunning || st.Generation != started.Generation {
		t.Errorf("first state %+v, want the running task", st)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if st := <-states; st.Phase != execdapi.TaskSucceeded {
		t.Errorf("next state %+v, want Succeeded", st)
	}
	cancel()
	if err := <-watched; err != nil {
		t.Errorf("Watch returned %v when its context ended, want nil", err)
	}

	t.Run("idle", func(t *testing.T) {
		idle := &execdclient.TaskClient{Client: c.Client, Idle: 200 * time.Millisecond}
		var got []execdapi.TaskState
		err := idle.Watch(ctx, target, testSandbox.UID, func(st execdapi.TaskState) { got = append(got, st) })
		if !errors.Is(err, execdclient.ErrWatchIdle) || len(got) != 1 {
			t.Errorf("Watch of a silent stream: %v after %d states, want ErrWatchIdle after the first", err, len(got))
		}
	})
	t.Run("refused", func(t *testing.T) {
		err := c.Watch(ctx, target, "another-sandbox", func(execdapi.TaskState) {})
		if !errors.As(err, &rejected) || rejected.StatusCode != http.StatusConflict {
			t.Errorf("Watch for another sandbox: %v, want a TaskRejected 409", err)
		}
	})
	t.Run("stream ends", func(t *testing.T) {
		done := make(chan error, 1)
		first := make(chan struct{})
		go func() {
			done <- c.Watch(ctx, target, testSandbox.UID, func(execdapi.TaskState) {
				select {
				case first <- struct{}{}:
				default:
				}
			})
		}()
		<-first
		s.h.StopSessions()
		if err := <-done; err == nil {
			t.Error("Watch returned nil when execd ended the stream")
		}
	})
}

// TestTaskHistory: a watcher that falls behind gets every state it missed, in order, from the
// history, or the newest ones if it fell further behind than the history reaches.
func TestTaskHistory(t *testing.T) {
	tr, err := newTaskRunner(taskConfig{stateDir: t.TempDir(), logDir: t.TempDir()}, nil, time.Now, newMetrics().taskAttempts)
	if err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	if err := tr.persistNew(&persistedTask{Request: execdapi.TaskRequest{ID: "t"}, State: execdapi.TaskState{ID: "t"}}); err != nil {
		t.Fatal(err)
	}
	tr.history = append(tr.history, tr.task.State)
	for range 69 {
		_ = tr.commitLocked()
	}
	tr.mu.Unlock()
	generations := func(states []execdapi.TaskState) []int64 {
		var gens []int64
		for _, s := range states {
			gens = append(gens, s.Generation)
		}
		return gens
	}
	span := func(from, to int64) []int64 {
		var gens []int64
		for g := from; g <= to; g++ {
			gens = append(gens, g)
		}
		return gens
	}
	for _, tt := range []struct {
		since int64
		want  []int64
	}{
		{since: 68, want: []int64{69, 70}},
		{since: 70, want: nil},
		{since: 10, want: span(11, 70)},
		{since: 0, want: span(70-taskHistory+1, 70)},
	} {
		got, _ := tr.since(tt.since)
		if diff := cmp.Diff(tt.want, generations(got)); diff != "" {
			t.Errorf("since(%d) (-want +got):\n%s", tt.since, diff)
		}
	}
}

func TestLastLine(t *testing.T) {
	long := strings.Repeat("x", maxTaskMessageLine+1)
	for _, tt := range []struct {
		name   string
		writes []string
		want   string
	}{
		{name: "last of many", writes: []string{"a\nb\n", "c\n"}, want: "c"},
		{name: "split across writes", writes: []string{"fir", "st\nsec", "ond\n"}, want: "second"},
		{name: "without a final newline", writes: []string{"a\nb"}, want: "b"},
		{name: "blank lines after it", writes: []string{"a\n\n  \n"}, want: "a"},
		{name: "a long last line", writes: []string{"a\n" + long + "\n"}, want: ""},
		{name: "a long line before it", writes: []string{long + "\nb\n"}, want: "b"},
		{name: "control characters", writes: []string{"a\x1b[31mred\r\n"}, want: "a [31mred"},
		{name: "nothing", writes: nil, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := &lastLine{}
			for _, w := range tt.writes {
				_, _ = l.Write([]byte(w))
			}
			if got := l.String(); got != tt.want {
				t.Errorf("%q, want %q", got, tt.want)
			}
		})
	}
}

// TestServeTaskDirs: serve makes the task directories, or runs without tasks when the log
// directory cannot be made (a pod without the log volume).
func TestServeTaskDirs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state", taskStateSubdir)
	tests := []struct {
		name               string
		stateDir, logDir   string
		wantState, wantLog string
	}{
		{name: "both made", stateDir: state, logDir: filepath.Join(dir, "log"), wantState: state, wantLog: filepath.Join(dir, "log")},
		{name: "the log directory's parent is missing", stateDir: state, logDir: filepath.Join(dir, "missing", "log")},
		{name: "the log directory is a file", stateDir: state, logDir: file},
		{name: "no log directory", stateDir: state},
		{name: "no state directory", logDir: filepath.Join(dir, "log")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotState, gotLog := taskDirs(ServeConfig{TaskStateDir: tt.stateDir, TaskLogDir: tt.logDir})
			if gotState != tt.wantState || gotLog != tt.wantLog {
				t.Errorf("taskDirs = %q, %q; want %q, %q", gotState, gotLog, tt.wantState, tt.wantLog)
			}
			for _, d := range []string{gotState, gotLog} {
				if fi, err := os.Stat(d); d != "" && (err != nil || !fi.IsDir()) {
					t.Errorf("%s was not made: %v", d, err)
				}
			}
		})
	}
}
