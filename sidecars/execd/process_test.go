package execd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	clientremotecommand "k8s.io/client-go/tools/remotecommand"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// processServer is an execd of a pod made for testSandbox, with processes.
type processServer struct {
	srv              *httptest.Server
	h                *Handler
	stateDir, logDir string
}

// startProcessServer serves a Handler whose processes keep their records in stateDir and
// their output in logDir (fresh ones when ""); pc, when set, replaces the manager's limits.
func startProcessServer(t *testing.T, stateDir, logDir string, pc *processConfig) *processServer {
	t.Helper()
	if stateDir == "" {
		stateDir = filepath.Join(t.TempDir(), "state")
	}
	if logDir == "" {
		logDir = t.TempDir()
	}
	h, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil), Sandbox: testSandbox, StreamIdleTimeout: time.Minute,
		TaskStateDir: stateDir, TaskLogDir: logDir}, newTestIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	if pc != nil {
		h.processes.stop()
		cfg := *pc
		cfg.stateDir, cfg.logDir = stateDir, logDir
		if h.processes, err = newProcessManager(cfg, nil, func() time.Time { return time.Now().UTC() }); err != nil {
			t.Fatal(err)
		}
	}
	s := &processServer{h: h, stateDir: stateDir, logDir: logDir}
	s.srv = serveTLS(t, h, h.identity)
	// Also stops what a test left running.
	t.Cleanup(h.StopSessions)
	return s
}

// do sends a request as identity and returns the status, the headers and the body. body is
// sent as is if it is a string, as JSON otherwise.
func (s *processServer) do(t *testing.T, identity, method, path string, body any) (int, http.Header, string) {
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
	resp, err := httpClient(t, identity).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

// start starts pr, which must be accepted.
func (s *processServer) start(t *testing.T, pr execdapi.ProcessRequest) execdapi.ProcessState {
	t.Helper()
	code, header, body := s.do(t, asAPIServer, http.MethodPost, execdapi.ProcessesPath, pr)
	if code != http.StatusCreated {
		t.Fatalf("start %q: status %d (%s), want 201", pr.Command, code, body)
	}
	st := decodeProcess(t, body)
	if loc := header.Get("Location"); loc != execdapi.ProcessPath(st.ID) {
		t.Errorf("Location = %q, want %q", loc, execdapi.ProcessPath(st.ID))
	}
	return st
}

func (s *processServer) get(t *testing.T, id string) execdapi.ProcessState {
	t.Helper()
	code, _, body := s.do(t, asAPIServer, http.MethodGet, execdapi.ProcessPath(id), nil)
	if code != http.StatusOK {
		t.Fatalf("GET process %s: status %d (%s), want 200", id, code, body)
	}
	return decodeProcess(t, body)
}

func (s *processServer) list(t *testing.T) []execdapi.ProcessState {
	t.Helper()
	code, _, body := s.do(t, asAPIServer, http.MethodGet, execdapi.ProcessesPath, nil)
	if code != http.StatusOK {
		t.Fatalf("list: status %d (%s), want 200", code, body)
	}
	var l execdapi.ProcessList
	if err := json.Unmarshal([]byte(body), &l); err != nil || l.Kind != execdapi.ProcessListKind {
		t.Fatalf("decode list %q: %v", body, err)
	}
	return l.Items
}

// waitEnded waits until the process's state is final and returns it.
func (s *processServer) waitEnded(t *testing.T, id string) execdapi.ProcessState {
	t.Helper()
	p := s.h.processes.lookup(id)
	if p == nil {
		t.Fatalf("no process %s", id)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("process %s did not end", id)
	}
	return s.get(t, id)
}

func (s *processServer) signal(t *testing.T, id string, sr any) (int, string) {
	t.Helper()
	code, _, body := s.do(t, asAPIServer, http.MethodPost, execdapi.ProcessSignalPath(id), sr)
	return code, body
}

func (s *processServer) log(t *testing.T, id, query string) (int, http.Header, string) {
	t.Helper()
	return s.do(t, asAPIServer, http.MethodGet, execdapi.ProcessLogPath(id)+"?"+query, nil)
}

// follow starts a follow of the process's log and returns the answer.
func (s *processServer) follow(t *testing.T, ctx context.Context, id, query string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL+execdapi.ProcessLogPath(id)+"?follow=true&"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient(t, asAPIServer).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("follow: %d %s", resp.StatusCode, data)
	}
	return resp
}

func decodeProcess(t *testing.T, body string) execdapi.ProcessState {
	t.Helper()
	var st execdapi.ProcessState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("decode process %q: %v", body, err)
	}
	return st
}

// decodeError is the Status of an error answer.
func decodeError(t *testing.T, body string) (reason, message string) {
	t.Helper()
	var st struct {
		Kind    string `json:"kind"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Kind != "Status" {
		t.Fatalf("error answer %q is not a Status (%v)", body, err)
	}
	return st.Reason, st.Message
}

func command(argv ...string) execdapi.ProcessRequest {
	return execdapi.ProcessRequest{Command: argv}
}

// syncBuffer is a buffer whose readers wait for what they expect to be written.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{})} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	close(b.changed)
	b.changed = make(chan struct{})
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the buffer holds want and returns what it holds.
func (b *syncBuffer) waitFor(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		b.mu.Lock()
		got, changed := b.buf.String(), b.changed
		b.mu.Unlock()
		if strings.Contains(got, want) {
			return got
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("waiting for %q, got %q", want, got)
		}
	}
}

// waitForMatch waits until the buffer holds a match of re and returns its submatches.
func (b *syncBuffer) waitForMatch(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		b.mu.Lock()
		got, changed := b.buf.String(), b.changed
		b.mu.Unlock()
		if m := re.FindStringSubmatch(got); m != nil {
			return m
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("waiting for %s, got %q", re, got)
		}
	}
}

// attachment is a client attached to a process.
type attachment struct {
	stdin          *io.PipeWriter // nil without stdin
	stdout, stderr *syncBuffer
	cancel         context.CancelFunc
	done           chan error // how the stream ended
}

type attachOptions struct {
	stdin, tty, websocket bool
	sizes                 clientremotecommand.TerminalSizeQueue
}

// attach attaches to the process id with client-go's executor, as sandbox-apiserver will.
func (s *processServer) attach(t *testing.T, id string, o attachOptions) *attachment {
	t.Helper()
	q := url.Values{}
	q.Set(remotecommand.ExecStdoutParam, "1")
	if !o.tty {
		q.Set(remotecommand.ExecStderrParam, "1")
	}
	if o.stdin {
		q.Set(remotecommand.ExecStdinParam, "1")
	}
	if o.tty {
		q.Set(remotecommand.ExecTTYParam, "1")
	}
	u, err := url.Parse(s.srv.URL + execdapi.ProcessAttachPath(id) + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	config := restConfigFor(s.srv.URL, asAPIServer)
	var exec clientremotecommand.Executor
	if o.websocket {
		exec, err = clientremotecommand.NewWebSocketExecutorForProtocols(config, http.MethodGet, u.String(), remotecommand.StreamProtocolV4Name)
	} else {
		exec, err = clientremotecommand.NewSPDYExecutor(config, http.MethodPost, u)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	a := &attachment{stdout: newSyncBuffer(), stderr: newSyncBuffer(), cancel: cancel, done: make(chan error, 1)}
	opts := clientremotecommand.StreamOptions{Stdout: a.stdout, Tty: o.tty, TerminalSizeQueue: o.sizes}
	if !o.tty {
		opts.Stderr = a.stderr
	}
	if o.stdin {
		r, w := io.Pipe()
		opts.Stdin, a.stdin = r, w
	}
	go func() { a.done <- exec.StreamWithContext(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if a.stdin != nil {
			_ = a.stdin.Close()
		}
	})
	return a
}

// send writes input to the attached client's stdin.
func (a *attachment) send(t *testing.T, input string) {
	t.Helper()
	if _, err := io.WriteString(a.stdin, input); err != nil {
		t.Fatalf("send %q: %v", input, err)
	}
}

// detach ends the client's stream and waits until it ended.
func (a *attachment) detach(t *testing.T) {
	t.Helper()
	a.cancel()
	a.wait(t)
}

func (a *attachment) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-a.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the attached stream did not end")
	}
	return nil
}

// waitExit waits until pid has exited (a zombie has), on its pidfd.
func waitExit(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatalf("pidfd of %d: %v", pid, err)
	}
	defer func() { _ = unix.Close(fd) }()
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 30_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("process %d did not exit (%v)", pid, err)
		}
		return
	}
}

func TestProcessLifecycle(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	st := s.start(t, command("sh", "-c", `echo hi; sleep 30 & echo "$!"; wait`))
	if !regexp.MustCompile(`^p-[a-z2-7]{8}$`).MatchString(st.ID) {
		t.Errorf("ID %q does not look like p-xxxxxxxx", st.ID)
	}
	if st.Phase != execdapi.ProcessRunning || st.PID <= 0 || st.StartTime.IsZero() || st.EndTime != nil {
		t.Errorf("started: %+v, want Running with a PID and a start time", st)
	}
	if got := s.list(t); len(got) != 1 || got[0].ID != st.ID || got[0].Phase != execdapi.ProcessRunning {
		t.Errorf("list = %+v, want the one process, Running", got)
	}

	// The output arrives while the process runs; the background sleep's PID is its second line.
	resp := s.follow(t, testContext(t), st.ID, "")
	r := bufio.NewReader(resp.Body)
	out := readUntil(t, r, "\n")
	out += readUntil(t, r, "\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "hi" {
		t.Fatalf("output %q, want hi and a PID", out)
	}
	child, err := strconv.Atoi(lines[1])
	if err != nil {
		t.Fatal(err)
	}
	if code, _, body := s.log(t, st.ID, ""); code != http.StatusOK || body != out {
		t.Errorf("log: %d %q, want %q", code, body, out)
	}

	code, body := s.signal(t, st.ID, execdapi.ProcessSignalRequest{}) // TERM by default
	if code != http.StatusOK {
		t.Fatalf("signal: %d %s", code, body)
	}
	end := s.waitEnded(t, st.ID)
	if end.Phase != execdapi.ProcessExited || end.Signal != "TERM" || end.ExitCode != nil || end.EndTime == nil ||
		end.Reason != execdapi.ProcessReasonError {
		t.Errorf("after TERM: %+v, want Exited by signal TERM", end)
	}
	// The signal went to the group: the background child is gone too.
	waitExit(t, child)
	// The follow ends with the output.
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("the follow went on with %q, %v", rest, err)
	}
	if code, _, body := s.log(t, st.ID, ""); code != http.StatusOK || body != out {
		t.Errorf("log after the end: %d %q, want %q", code, body, out)
	}
	if _, err := os.Stat(s.h.processes.recordPath(st.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record of the ended process is still there (%v)", err)
	}
}

func TestProcessEnd(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	dir := t.TempDir()
	tests := []struct {
		name        string
		req         execdapi.ProcessRequest
		wantCode    *int32
		wantSignal  string
		wantReason  string
		wantMessage string
		wantOutput  string
		// anyOrder: the lines of two streams, which may come in any order.
		anyOrder bool
	}{
		{name: "exit code", req: command("sh", "-c", "exit 3"), wantCode: ptrInt32(3), wantReason: execdapi.ProcessReasonError, wantMessage: "exit code 3"},
		{name: "success", req: command("true"), wantCode: ptrInt32(0), wantReason: execdapi.ProcessReasonCompleted},
		{name: "killed", req: command("sh", "-c", "kill -KILL $$"), wantSignal: "KILL", wantReason: execdapi.ProcessReasonError, wantMessage: "killed by signal KILL"},
		{
			name:       "stdout and stderr",
			req:        command("sh", "-c", "echo out; echo err >&2"),
			wantCode:   ptrInt32(0),
			wantReason: execdapi.ProcessReasonCompleted,
			wantOutput: "err\nout\n",
			anyOrder:   true,
		},
		{
			name: "env and working directory",
			req: execdapi.ProcessRequest{Command: []string{"sh", "-c", `echo "$A $B"; pwd`}, WorkingDir: dir,
				Env: []execdapi.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}, {Name: "A", Value: "3"}}},
			wantCode:   ptrInt32(0),
			wantReason: execdapi.ProcessReasonCompleted,
			wantOutput: "3 2\n" + dir + "\n",
		},
		{
			name:       "stdin is /dev/null without stdin",
			req:        command("sh", "-c", "cat; echo eof"),
			wantCode:   ptrInt32(0),
			wantReason: execdapi.ProcessReasonCompleted,
			wantOutput: "eof\n",
		},
		{
			name:       "a TTY",
			req:        execdapi.ProcessRequest{Command: []string{"sh", "-c", "tty >/dev/null && stty size"}, TTY: true},
			wantCode:   ptrInt32(0),
			wantReason: execdapi.ProcessReasonCompleted,
			wantOutput: "24 80\r\n",
		},
		{
			name:       "a TTY's size",
			req:        execdapi.ProcessRequest{Command: []string{"stty", "size"}, TTY: true, TerminalSize: &execdapi.TerminalSize{Width: 123, Height: 45}},
			wantCode:   ptrInt32(0),
			wantReason: execdapi.ProcessReasonCompleted,
			wantOutput: "45 123\r\n",
		},
		{
			name:        "timeout",
			req:         execdapi.ProcessRequest{Command: []string{"sleep", "30"}, TimeoutSeconds: 1},
			wantSignal:  "TERM",
			wantReason:  execdapi.ProcessReasonDeadlineExceeded,
			wantMessage: "ran longer than timeoutSeconds (1) and was stopped",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := s.waitEnded(t, s.start(t, tt.req).ID)
			if st.Phase != execdapi.ProcessExited || st.EndTime == nil || st.EndTime.Before(st.StartTime) {
				t.Errorf("state %+v, want Exited with an end time", st)
			}
			if diff := cmp.Diff(tt.wantCode, st.ExitCode); diff != "" {
				t.Errorf("exit code (-want +got):\n%s", diff)
			}
			if st.Signal != tt.wantSignal || st.Reason != tt.wantReason || st.Message != tt.wantMessage {
				t.Errorf("signal, reason, message = %q, %q, %q; want %q, %q, %q", st.Signal, st.Reason, st.Message, tt.wantSignal, tt.wantReason, tt.wantMessage)
			}
			if tt.wantOutput != "" {
				code, _, body := s.log(t, st.ID, "")
				if tt.anyOrder {
					lines := strings.SplitAfter(body, "\n")
					slices.Sort(lines)
					body = strings.Join(lines, "")
				}
				if code != http.StatusOK || body != tt.wantOutput {
					t.Errorf("log: %d %q, want %q", code, body, tt.wantOutput)
				}
			}
		})
	}
}

func TestProcessSignalGracePeriod(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	// Ignored signals stay ignored in the children: the whole group ignores TERM.
	st := s.start(t, command("sh", "-c", `trap "" TERM; echo ready; sleep 30`))
	readUntil(t, bufio.NewReader(s.follow(t, testContext(t), st.ID, "").Body), "ready\n")
	grace := int64(0)
	if code, body := s.signal(t, st.ID, execdapi.ProcessSignalRequest{Signal: "SIGTERM", GracePeriodSeconds: &grace}); code != http.StatusOK {
		t.Fatalf("signal: %d %s", code, body)
	}
	if end := s.waitEnded(t, st.ID); end.Signal != "KILL" {
		t.Errorf("after TERM and no grace: %+v, want killed by KILL", end)
	}
	if code, body := s.signal(t, st.ID, execdapi.ProcessSignalRequest{}); code != http.StatusGone {
		t.Errorf("signal of an ended process: %d %s, want 410", code, body)
	}
}

func TestProcessLogFollow(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	st := s.start(t, command("sh", "-c", `echo one; cat "$0"; echo three`, fifo))
	resp := s.follow(t, testContext(t), st.ID, "")
	if got := resp.Header.Get(execdapi.ProcessLogOffsetHeader); got != "0" {
		t.Errorf("offset header %q, want 0", got)
	}
	if got := resp.Header.Get(execdapi.ProcessLogNextOffsetHeader); got != "" {
		t.Errorf("a follow of a running process has a next offset %q", got)
	}
	r := bufio.NewReader(resp.Body)
	readUntil(t, r, "one\n")
	// cat opens the FIFO once "one" is out: this open waits for it.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "two\n"); err != nil {
		t.Fatal(err)
	}
	readUntil(t, r, "two\n")
	_ = w.Close()
	readUntil(t, r, "three\n")
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("after the end: %q, %v; want the end of the answer", rest, err)
	}
	s.waitEnded(t, st.ID)

	// A follow that starts late, with an offset, from there to the end.
	resp = s.follow(t, testContext(t), st.ID, "offset=4")
	if body, _ := io.ReadAll(resp.Body); string(body) != "two\nthree\n" {
		t.Errorf("a follow from offset 4 of an ended process: %q", body)
	}
	if got := resp.Header.Get(execdapi.ProcessLogNextOffsetHeader); got != "14" {
		t.Errorf("a follow of an ended process: next offset %q, want 14", got)
	}
}

func TestProcessLogOffsets(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	st := s.waitEnded(t, s.start(t, command("sh", "-c", numbered(1, 10))).ID)
	all := numberedLines(1, 10) // 9 bytes a line
	tests := []struct {
		query      string
		wantCode   int
		want       string
		wantOffset string
		wantNext   string
	}{
		{query: "", wantCode: http.StatusOK, want: all, wantOffset: "0", wantNext: "90"},
		{query: "limitBytes=20", wantCode: http.StatusOK, want: all[:20], wantOffset: "0", wantNext: "20"},
		{query: "offset=20", wantCode: http.StatusOK, want: all[20:], wantOffset: "20", wantNext: "90"},
		{query: "offset=20&limitBytes=5", wantCode: http.StatusOK, want: all[20:25], wantOffset: "20", wantNext: "25"},
		{query: "offset=90", wantCode: http.StatusOK, want: "", wantOffset: "90", wantNext: "90"},
		{query: "tailLines=2", wantCode: http.StatusOK, want: numberedLines(9, 10), wantOffset: "72", wantNext: "90"},
		{query: "tailLines=2&limitBytes=4", wantCode: http.StatusOK, want: "line", wantOffset: "72", wantNext: "76"},
		{query: "tailLines=0", wantCode: http.StatusOK, want: "", wantOffset: "90", wantNext: "90"},
		{query: "offset=91", wantCode: http.StatusBadRequest},
		{query: "offset=1&tailLines=1", wantCode: http.StatusBadRequest},
		{query: "offset=-1", wantCode: http.StatusBadRequest},
		{query: "limitBytes=0", wantCode: http.StatusBadRequest},
		{query: "follow=maybe", wantCode: http.StatusBadRequest},
	}
	for _, tt := range tests {
		code, header, body := s.log(t, st.ID, tt.query)
		if code != tt.wantCode {
			t.Errorf("log?%s: %d %q, want %d", tt.query, code, body, tt.wantCode)
			continue
		}
		if code != http.StatusOK {
			if reason, _ := decodeError(t, body); reason != "BadRequest" {
				t.Errorf("log?%s: reason %q, want BadRequest", tt.query, reason)
			}
			continue
		}
		if body != tt.want || header.Get(execdapi.ProcessLogOffsetHeader) != tt.wantOffset || header.Get(execdapi.ProcessLogNextOffsetHeader) != tt.wantNext {
			t.Errorf("log?%s: %q, offsets %s..%s; want %q, %s..%s", tt.query, body, header.Get(execdapi.ProcessLogOffsetHeader),
				header.Get(execdapi.ProcessLogNextOffsetHeader), tt.want, tt.wantOffset, tt.wantNext)
		}
	}

	// Resuming at each answer's next offset reads it all, in pieces.
	var got strings.Builder
	for next := "0"; ; {
		_, header, body := s.log(t, st.ID, "limitBytes=7&offset="+next)
		got.WriteString(body)
		if body == "" {
			break
		}
		next = header.Get(execdapi.ProcessLogNextOffsetHeader)
	}
	if got.String() != all {
		t.Errorf("resumed reads: %q, want %q", got.String(), all)
	}
}

// TestProcessLogRotation: a process's log keeps its newest output, and offsets still count
// from its first byte.
func TestProcessLogRotation(t *testing.T) {
	const maxBytes = 1000
	s := startProcessServer(t, "", "", &processConfig{maxLogBytes: maxBytes})
	st := s.waitEnded(t, s.start(t, command("sh", "-c", numbered(1, 400))).ID)
	all := numberedLines(1, 400) // 3600 bytes: 7 segments of 500, the last with 100
	kept := len(all) - len(all)%(maxBytes/2) - maxBytes/2
	tests := []struct {
		query      string
		want       string
		wantOffset int
	}{
		{query: "", want: all[kept:], wantOffset: kept},
		// What was dropped cannot come: the answer starts at the oldest byte kept.
		{query: "offset=100", want: all[kept:], wantOffset: kept},
		{query: "offset=3333", want: all[3333:], wantOffset: 3333},
		{query: "offset=3100&limitBytes=450", want: all[3100:3550], wantOffset: 3100},
		{query: "tailLines=3", want: numberedLines(398, 400), wantOffset: len(all) - 27},
		{query: "tailLines=1000", want: all[kept:], wantOffset: kept},
	}
	for _, tt := range tests {
		code, header, body := s.log(t, st.ID, tt.query)
		if code != http.StatusOK || body != tt.want || header.Get(execdapi.ProcessLogOffsetHeader) != strconv.Itoa(tt.wantOffset) ||
			header.Get(execdapi.ProcessLogNextOffsetHeader) != strconv.Itoa(tt.wantOffset+len(tt.want)) {
			t.Errorf("log?%s: %d, %d bytes at %s..%s; want %d bytes at %d", tt.query, code, len(body),
				header.Get(execdapi.ProcessLogOffsetHeader), header.Get(execdapi.ProcessLogNextOffsetHeader), len(tt.want), tt.wantOffset)
		}
	}
	for _, suffix := range []string{"", rotatedSuffix} {
		if fi, err := os.Stat(processLogPath(s.logDir, st.ID) + suffix); err != nil || fi.Size() > maxBytes/2 {
			t.Errorf("log file %q: %v, want at most %d bytes", suffix, err, maxBytes/2)
		}
	}
}

// TestProcessLogFollowRotation: a follower that keeps up gets every byte through rotations.
func TestProcessLogFollowRotation(t *testing.T) {
	s := startProcessServer(t, "", "", &processConfig{maxLogBytes: 100})
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Each line is written when the test asks for it: the follower is never behind by more
	// than a line.
	st := s.start(t, command("sh", "-c", `while read -r n; do echo "line-$n"; done < "$0"`, fifo))
	r := bufio.NewReader(s.follow(t, testContext(t), st.ID, "offset=0").Body)
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 40 {
		line := fmt.Sprintf("line-%03d\n", i)
		want.WriteString(line)
		if _, err := fmt.Fprintf(w, "%03d\n", i); err != nil {
			t.Fatal(err)
		}
		readUntil(t, r, line)
	}
	_ = w.Close()
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("after the end: %q, %v", rest, err)
	}
	if p := s.h.processes.lookup(st.ID); p.log.keptBytes() > 100 {
		t.Errorf("the log keeps %d bytes, want at most 100", p.log.keptBytes())
	}
}

func TestProcessAttach(t *testing.T) {
	for _, websocket := range []bool{false, true} {
		t.Run(fmt.Sprintf("websocket=%v", websocket), func(t *testing.T) {
			s := startProcessServer(t, "", "", nil)
			st := s.start(t, execdapi.ProcessRequest{Stdin: true,
				Command: []string{"sh", "-c", `while read -r line; do echo "got $line"; echo "err $line" >&2; done`}})
			a := s.attach(t, st.ID, attachOptions{stdin: true, websocket: websocket})
			b := s.attach(t, st.ID, attachOptions{stdin: true, websocket: websocket})
			// A client sees the answer to its own input only once it is attached.
			a.send(t, "ping-a\n")
			a.stdout.waitFor(t, "got ping-a\n")
			b.send(t, "ping-b\n")
			b.stdout.waitFor(t, "got ping-b\n")

			// Both see all output, stdout and stderr apart; input comes from either.
			a.send(t, "x\n")
			b.send(t, "y\n")
			for _, c := range []*attachment{a, b} {
				c.stdout.waitFor(t, "got x\n")
				c.stdout.waitFor(t, "got y\n")
				c.stderr.waitFor(t, "err y\n")
				if out := c.stdout.String(); strings.Contains(out, "err") {
					t.Errorf("stdout %q has stderr's output", out)
				}
			}

			// A client that detaches leaves the process running, and the others attached.
			a.detach(t)
			b.send(t, "after\n")
			b.stdout.waitFor(t, "got after\n")
			if got := s.get(t, st.ID); got.Phase != execdapi.ProcessRunning {
				t.Errorf("after a detach: %+v, want Running", got)
			}
			if strings.Contains(a.stdout.String(), "after") {
				t.Errorf("a detached client got %q", a.stdout.String())
			}

			// When the process ends, the stream ends, with success.
			if code, body := s.signal(t, st.ID, execdapi.ProcessSignalRequest{Signal: "KILL"}); code != http.StatusOK {
				t.Fatalf("signal: %d %s", code, body)
			}
			if err := b.wait(t); err != nil {
				t.Errorf("the attached stream ended with %v, want success", err)
			}
			s.waitEnded(t, st.ID)
			// The log has it all.
			_, _, log := s.log(t, st.ID, "")
			for _, line := range []string{"got ping-a", "got x", "err y", "got after"} {
				if !strings.Contains(log, line+"\n") {
					t.Errorf("log %q lacks %q", log, line)
				}
			}
		})
	}
}

func TestProcessStdinOnce(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	st := s.start(t, execdapi.ProcessRequest{Command: []string{"sh", "-c", "cat; echo eof"}, Stdin: true, StdinOnce: true})
	a := s.attach(t, st.ID, attachOptions{stdin: true})
	a.send(t, "hello\n")
	a.stdout.waitFor(t, "hello\n")
	// The end of the client's input is the end of the process's.
	_ = a.stdin.Close()
	a.stdout.waitFor(t, "eof\n")
	if end := s.waitEnded(t, st.ID); end.ExitCode == nil || *end.ExitCode != 0 {
		t.Errorf("state %+v, want exit code 0", end)
	}
}

func TestProcessTTYReplay(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	st := s.start(t, execdapi.ProcessRequest{Command: []string{"sh", "-c", "echo earlier-output; exec sh"}, TTY: true, Stdin: true})
	readUntil(t, bufio.NewReader(s.follow(t, testContext(t), st.ID, "").Body), "earlier-output")

	// The first client gets what the process wrote before it attached, then types.
	sizes := make(chan clientremotecommand.TerminalSize, 1)
	first := s.attach(t, st.ID, attachOptions{stdin: true, tty: true, sizes: sizeChannel(sizes)})
	first.stdout.waitFor(t, "earlier-output")
	first.send(t, "echo typed-$((6*7))\n")
	first.stdout.waitFor(t, "typed-42")

	// A resize from the attached client resizes the terminal. The resize and the input
	// travel on streams of their own, so the input is repeated until it sees the resize.
	sizes <- clientremotecommand.TerminalSize{Width: 100, Height: 40}
	sized := false
	for i := 0; i < 50 && !sized; i++ {
		marker := fmt.Sprintf("size-%d:", i)
		first.send(t, "echo "+marker+"$(stty size)\n")
		sized = first.stdout.waitForMatch(t, regexp.MustCompile(marker+`(\d+ \d+)`))[1] == "40 100"
	}
	if !sized {
		t.Errorf("the terminal was not resized: %q", first.stdout.String())
	}
	close(sizes)
	first.detach(t)

	// A second client sees the screen again: all that came before, and the shell runs on.
	second := s.attach(t, st.ID, attachOptions{stdin: true, tty: true})
	second.stdout.waitFor(t, "earlier-output")
	second.stdout.waitFor(t, "typed-42")
	second.send(t, "echo still-$((1+1))\n")
	second.stdout.waitFor(t, "still-2")
	second.send(t, "exit 5\n")
	if err := second.wait(t); err != nil {
		t.Errorf("the attached stream ended with %v, want success", err)
	}
	if end := s.waitEnded(t, st.ID); end.ExitCode == nil || *end.ExitCode != 5 {
		t.Errorf("state %+v, want exit code 5", end)
	}
}

// sizeChannel is a TerminalSizeQueue fed by a channel.
type sizeChannel chan clientremotecommand.TerminalSize

func (c sizeChannel) Next() *clientremotecommand.TerminalSize {
	s, ok := <-c
	if !ok {
		return nil
	}
	return &s
}

func TestProcessLimit(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	var ids []string
	for range execdapi.MaxProcesses {
		ids = append(ids, s.start(t, command("sleep", "30")).ID)
	}
	code, _, body := s.do(t, asAPIServer, http.MethodPost, execdapi.ProcessesPath, command("sleep", "30"))
	if code != http.StatusTooManyRequests {
		t.Fatalf("process %d: %d %s, want 429", execdapi.MaxProcesses+1, code, body)
	}
	if reason, msg := decodeError(t, body); reason != "TooManyRequests" || !strings.Contains(msg, "64 processes run") {
		t.Errorf("429: %q %q", reason, msg)
	}
	// Once one ended, another may start.
	if code, body := s.signal(t, ids[0], execdapi.ProcessSignalRequest{Signal: "KILL"}); code != http.StatusOK {
		t.Fatalf("signal: %d %s", code, body)
	}
	s.waitEnded(t, ids[0])
	s.start(t, command("true"))
}

func TestProcessErrors(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	ended := s.waitEnded(t, s.start(t, command("true")).ID)
	running := s.start(t, command("sleep", "30"))
	const unknown = "p-aaaaaaaa"
	tests := []struct {
		name       string
		identity   string
		method     string
		path       string
		body       any
		wantCode   int
		wantReason string
		wantIn     string // in the message
	}{
		{name: "unknown process", method: http.MethodGet, path: execdapi.ProcessPath(unknown), wantCode: http.StatusNotFound, wantReason: "NotFound"},
		{name: "log of an unknown process", method: http.MethodGet, path: execdapi.ProcessLogPath(unknown), wantCode: http.StatusNotFound, wantReason: "NotFound"},
		{name: "signal of an unknown process", method: http.MethodPost, path: execdapi.ProcessSignalPath(unknown), wantCode: http.StatusNotFound, wantReason: "NotFound"},
		{name: "attach to an unknown process", method: http.MethodPost, path: execdapi.ProcessAttachPath(unknown) + "?output=1", wantCode: http.StatusNotFound, wantReason: "NotFound"},
		{name: "attach to an ended process", method: http.MethodPost, path: execdapi.ProcessAttachPath(ended.ID) + "?output=1", wantCode: http.StatusGone, wantReason: "Gone", wantIn: "has ended"},
		{name: "stdin to an ended process", method: http.MethodPost, path: execdapi.ProcessAttachPath(ended.ID) + "?input=1", wantCode: http.StatusGone, wantReason: "Gone"},
		{name: "signal to an ended process", method: http.MethodPost, path: execdapi.ProcessSignalPath(ended.ID), body: execdapi.ProcessSignalRequest{}, wantCode: http.StatusGone, wantReason: "Gone"},
		{name: "attach with stdin to a process without", method: http.MethodPost, path: execdapi.ProcessAttachPath(running.ID) + "?output=1&input=1", wantCode: http.StatusBadRequest, wantIn: "without stdin"},
		{name: "attach with a TTY to a process without", method: http.MethodPost, path: execdapi.ProcessAttachPath(running.ID) + "?output=1&tty=1", wantCode: http.StatusBadRequest, wantIn: "no TTY"},
		{name: "attach without streams", method: http.MethodPost, path: execdapi.ProcessAttachPath(running.ID), wantCode: http.StatusBadRequest},
		{name: "unknown signal", method: http.MethodPost, path: execdapi.ProcessSignalPath(running.ID), body: execdapi.ProcessSignalRequest{Signal: "FOO"}, wantCode: http.StatusUnprocessableEntity, wantIn: `unknown signal "FOO"`},
		{name: "negative grace period", method: http.MethodPost, path: execdapi.ProcessSignalPath(running.ID), body: `{"gracePeriodSeconds": -1}`, wantCode: http.StatusUnprocessableEntity},
		{name: "malformed signal request", method: http.MethodPost, path: execdapi.ProcessSignalPath(running.ID), body: `{"signal":`, wantCode: http.StatusBadRequest},
		{name: "malformed start", method: http.MethodPost, path: execdapi.ProcessesPath, body: `{"command": "sh"}`, wantCode: http.StatusBadRequest},
		{name: "empty start", method: http.MethodPost, path: execdapi.ProcessesPath, body: "", wantCode: http.StatusBadRequest},
		{name: "no command", method: http.MethodPost, path: execdapi.ProcessesPath, body: execdapi.ProcessRequest{}, wantCode: http.StatusUnprocessableEntity, wantReason: "Invalid", wantIn: "command[0]"},
		{
			name: "invalid fields", method: http.MethodPost, path: execdapi.ProcessesPath,
			body: execdapi.ProcessRequest{Command: []string{"true"}, WorkingDir: "tmp", StdinOnce: true, TimeoutSeconds: -1,
				Env: []execdapi.EnvVar{{Name: "A=B"}, {Name: execdapi.EnvSandboxUID}}, TerminalSize: &execdapi.TerminalSize{Width: 1, Height: 1}},
			wantCode: http.StatusUnprocessableEntity, wantReason: "Invalid", wantIn: "workingDir",
		},
		{name: "a command that does not exist", method: http.MethodPost, path: execdapi.ProcessesPath, body: command("/no/such/command"), wantCode: http.StatusUnprocessableEntity, wantIn: "/no/such/command"},
		{name: "a working directory that does not exist", method: http.MethodPost, path: execdapi.ProcessesPath, body: execdapi.ProcessRequest{Command: []string{"true"}, WorkingDir: "/no/such/dir"}, wantCode: http.StatusUnprocessableEntity},
		{name: "the controller may not start processes", identity: asController, method: http.MethodPost, path: execdapi.ProcessesPath, body: command("true"), wantCode: http.StatusForbidden, wantReason: "Forbidden"},
		{name: "the controller may not list processes", identity: asController, method: http.MethodGet, path: execdapi.ProcessesPath, wantCode: http.StatusForbidden},
		{name: "the controller may not attach", identity: asController, method: http.MethodPost, path: execdapi.ProcessAttachPath(running.ID) + "?output=1", wantCode: http.StatusForbidden},
		{name: "nor may another identity", identity: asSomeone, method: http.MethodGet, path: execdapi.ProcessLogPath(running.ID), wantCode: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			identity := tt.identity
			if identity == "" {
				identity = asAPIServer
			}
			code, _, body := s.do(t, identity, tt.method, tt.path, tt.body)
			if code != tt.wantCode {
				t.Fatalf("%d %s, want %d", code, body, tt.wantCode)
			}
			reason, msg := decodeError(t, body)
			if tt.wantReason != "" && reason != tt.wantReason {
				t.Errorf("reason %q, want %q (%s)", reason, tt.wantReason, msg)
			}
			if !strings.Contains(msg, tt.wantIn) {
				t.Errorf("message %q lacks %q", msg, tt.wantIn)
			}
		})
	}
	// Nothing of the refused starts runs.
	if got := s.list(t); len(got) != 2 {
		t.Errorf("list after refused starts: %+v, want the two processes", got)
	}
	if got := s.get(t, running.ID); got.Phase != execdapi.ProcessRunning {
		t.Errorf("after refused requests: %+v, want Running", got)
	}
}

// TestProcessNeedsItsSandbox: processes serve the sandbox execd belongs to, named in the
// header, or for an attach (which the apiserver may send without the caller's headers) in the
// query; and nothing at all where processes are disabled.
func TestProcessNeedsItsSandbox(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(t, asAPIServer)}}
	do := func(t *testing.T, srv *httptest.Server, path string, header http.Header) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		resp, err := plain.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	named := http.Header{execdapi.SandboxUIDHeader: {testSandbox.UID}}
	other := http.Header{execdapi.SandboxUIDHeader: {"another-sandbox"}}
	const unknown = "p-aaaaaaaa"
	tests := []struct {
		name     string
		path     string
		header   http.Header
		wantCode int
	}{
		{name: "named in the header", path: execdapi.ProcessesPath, header: named, wantCode: http.StatusOK},
		{name: "named nowhere", path: execdapi.ProcessesPath, header: http.Header{}, wantCode: http.StatusBadRequest},
		{name: "another sandbox", path: execdapi.ProcessesPath, header: other, wantCode: http.StatusConflict},
		{name: "the query names it for an attach only", path: execdapi.ProcessesPath + "?sandboxUID=" + testSandbox.UID, header: http.Header{}, wantCode: http.StatusBadRequest},
		{name: "an attach named in the query", path: execdapi.ProcessAttachPath(unknown) + "?output=1&sandboxUID=" + testSandbox.UID, header: http.Header{}, wantCode: http.StatusNotFound},
		{name: "an attach naming another in the query", path: execdapi.ProcessAttachPath(unknown) + "?output=1&sandboxUID=x", header: http.Header{}, wantCode: http.StatusConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := do(t, s.srv, tt.path, tt.header); code != tt.wantCode {
				t.Errorf("%d %s, want %d", code, body, tt.wantCode)
			}
		})
	}

	t.Run("disabled", func(t *testing.T) {
		srv, _ := startServer(t) // no task directories
		code, body := do(t, srv, execdapi.ProcessesPath, named)
		if code != http.StatusNotFound || !strings.Contains(body, "runs no processes") {
			t.Errorf("%d %s, want 404", code, body)
		}
	})
}

func TestProcessLostAfterRestart(t *testing.T) {
	first := startProcessServer(t, "", "", nil)
	running := first.start(t, execdapi.ProcessRequest{Command: []string{"sleep", "30"}, TTY: true})
	exited := first.waitEnded(t, first.start(t, command("true")).ID)
	// The container stops: its processes die with it, their records stay.
	first.h.StopSessions()
	waitExit(t, running.PID)
	if _, err := os.Stat(first.h.processes.recordPath(running.ID)); err != nil {
		t.Fatalf("the record of the running process: %v", err)
	}
	// Left over by the container: a log, and half a record.
	stale := processLogPath(first.logDir, "p-bbbbbbbb")
	if err := os.WriteFile(stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(first.stateDir, ".process-p-bbbbbbbb.json.tmp-1"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The directory is the task's too: its files are not the processes'.
	foreign := filepath.Join(first.stateDir, "unrelated.json")
	if err := os.WriteFile(foreign, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}

	second := startProcessServer(t, first.stateDir, first.logDir, nil)
	got := second.list(t)
	if len(got) != 1 {
		t.Fatalf("after the restart: %+v, want the one process that ran", got)
	}
	lost := got[0]
	if lost.ID != running.ID || lost.Phase != execdapi.ProcessLost || lost.Reason != execdapi.ProcessReasonContainerRestarted ||
		lost.EndTime == nil || lost.PID != running.PID || !lost.TTY || !cmp.Equal(lost.Command, running.Command) {
		t.Errorf("after the restart: %+v, want %s Lost (ContainerRestarted)", lost, running.ID)
	}
	if code, _, body := second.do(t, asAPIServer, http.MethodGet, execdapi.ProcessPath(exited.ID), nil); code != http.StatusNotFound {
		t.Errorf("the process that had exited: %d %s, want 404", code, body)
	}
	for _, r := range []struct {
		method, path string
	}{
		{http.MethodGet, execdapi.ProcessLogPath(running.ID)},
		{http.MethodPost, execdapi.ProcessSignalPath(running.ID)},
		{http.MethodPost, execdapi.ProcessAttachPath(running.ID) + "?output=1&tty=1"},
	} {
		if code, _, body := second.do(t, asAPIServer, r.method, r.path, nil); code != http.StatusGone {
			t.Errorf("%s %s of a Lost process: %d %s, want 410", r.method, r.path, code, body)
		}
	}
	// The records were read once; the stale files are gone.
	entries, err := os.ReadDir(first.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), processFilePrefix) {
			t.Errorf("state file %s is left", e.Name())
		}
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale log is left (%v)", err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a file that is not a process record: %v, want it kept", err)
	}
	// A third execd knows nothing of the Lost one: its record was read.
	second.h.StopSessions()
	third := startProcessServer(t, first.stateDir, first.logDir, nil)
	if got := third.list(t); len(got) != 0 {
		t.Errorf("after a second restart: %+v, want none", got)
	}
}

func TestProcessRetention(t *testing.T) {
	s := startProcessServer(t, "", "", &processConfig{maxEnded: 2, maxLogBytes: 1000, maxEndedLogBytes: 1000})
	var ids []string
	for i := range 3 {
		ids = append(ids, s.waitEnded(t, s.start(t, command("echo", strconv.Itoa(i))).ID).ID)
	}
	var got []string
	for _, p := range s.list(t) {
		got = append(got, p.ID)
	}
	// The oldest goes first.
	if diff := cmp.Diff(ids[1:], got); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(processLogPath(s.logDir, ids[0])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dropped process's log is left (%v)", err)
	}
	if code, _, _ := s.log(t, ids[0], ""); code != http.StatusNotFound {
		t.Errorf("log of a dropped process: %d, want 404", code)
	}

	// Output counts too: 600 bytes and 600 bytes are more than the 1000 kept.
	big := s.waitEnded(t, s.start(t, command("sh", "-c", "head -c 600 /dev/zero")).ID)
	bigger := s.waitEnded(t, s.start(t, command("sh", "-c", "head -c 600 /dev/zero")).ID)
	got = nil
	for _, p := range s.list(t) {
		got = append(got, p.ID)
	}
	if diff := cmp.Diff([]string{bigger.ID}, got); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(processLogPath(s.logDir, big.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dropped process's log is left (%v)", err)
	}
}

// TestProcessesStopWithExecd: when execd stops, its processes are stopped, and new ones are
// refused.
func TestProcessesStopWithExecd(t *testing.T) {
	s := startProcessServer(t, "", "", nil)
	st := s.start(t, command("sh", "-c", "sleep 30 & wait"))
	a := s.attach(t, st.ID, attachOptions{})
	s.h.StopSessions()
	waitExit(t, st.PID)
	a.wait(t)
	if _, serr := s.h.processes.start(&execdapi.ProcessRequest{Command: []string{"true"}}, nil); serr == nil || serr.Status().Code != http.StatusServiceUnavailable {
		t.Errorf("start after the stop: %v, want 503", serr)
	}
}

func TestRingBuffer(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{name: "empty", want: ""},
		{name: "under the size", writes: []string{"ab", "c"}, want: "abc"},
		{name: "exactly the size", writes: []string{"abcd", "ef"}, want: "cdef"},
		{name: "a write larger than the size", writes: []string{"ab", "0123456789"}, want: "6789"},
		{name: "many small writes", writes: strings.Split("abcdefghijklmnopqrstuvwxyz", ""), want: "wxyz"},
		{name: "across a compaction", writes: []string{"abc", "def", "gh", "i"}, want: "fghi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRingBuffer(4)
			for _, w := range tt.writes {
				r.write([]byte(w))
				if len(r.data) > 2*r.size {
					t.Fatalf("holds %d bytes, want at most %d", len(r.data), 2*r.size)
				}
			}
			if got := string(r.bytes()); got != tt.want {
				t.Errorf("bytes = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestShortenCommand(t *testing.T) {
	tests := []struct {
		argv []string
		want []string
	}{
		{argv: []string{"sh", "-c", "true"}, want: []string{"sh", "-c", "true"}},
		{argv: []string{"sh", "-c", "0123456789"}, want: []string{"sh", "-c", "012345", "..."}},
		{argv: []string{"0123456789ab", "x"}, want: []string{"0123456789", "..."}},
		{argv: []string{"0123456789", "x"}, want: []string{"0123456789", "..."}},
	}
	for _, tt := range tests {
		if got := shortenCommand(tt.argv, 10); !cmp.Equal(got, tt.want) {
			t.Errorf("shortenCommand(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for name, want := range map[string]syscall.Signal{
		"": syscall.SIGTERM, "TERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "int": syscall.SIGINT, "SigHup": syscall.SIGHUP,
	} {
		if got, err := parseSignal(name); err != nil || got != want {
			t.Errorf("parseSignal(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	for _, name := range []string{"FOO", "SIG", "9"} {
		if _, err := parseSignal(name); err == nil {
			t.Errorf("parseSignal(%q) succeeded", name)
		}
	}
}

func TestValidProcessID(t *testing.T) {
	for id, want := range map[string]bool{
		"p-abcdefgh": true, "p-a2345677": true, "p-abcdefg": false, "p-abcdefghi": false, "p-ABCDEFGH": false,
		"p-abcdefg1": false, "x-abcdefgh": false, "p-../../x": false, "": false,
	} {
		if got := validProcessID(id); got != want {
			t.Errorf("validProcessID(%q) = %v, want %v", id, got, want)
		}
	}
}
