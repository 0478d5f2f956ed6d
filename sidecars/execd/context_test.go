package execd

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// The contexts tests run real kernels: Debian's python3 with ipykernel and matplotlib
// (python3-ipykernel, python3-matplotlib), which CI installs.
const testPython = "/usr/bin/python3"

// startContextServer serves a Handler with code contexts whose kernels run python.
func startContextServer(t *testing.T, python string) *processServer {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("the contexts tests need %s with ipykernel (Debian's python3-ipykernel): %v", python, err)
	}
	h, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil), Sandbox: testSandbox, StreamIdleTimeout: time.Minute,
		ContextDir: filepath.Join(t.TempDir(), "ctx"), ContextPython: python}, newTestIdentity(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &processServer{h: h}
	s.srv = serveTLS(t, h, h.identity)
	t.Cleanup(h.StopSessions)
	return s
}

// runStream is the answer to a run, read event by event.
type runStream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func (s *processServer) startRun(t *testing.T, id string, rr execdapi.RunRequest) *runStream {
	t.Helper()
	data, _ := json.Marshal(rr)
	req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, s.srv.URL+execdapi.ContextRunPath(id), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient(t, asAPIServer).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		t.Fatalf("run in %s: status %d (%s), want 200", id, resp.StatusCode, b.String())
	}
	if ct := resp.Header.Get("Content-Type"); ct != execdapi.RunContentType {
		t.Errorf("Content-Type = %q, want %q", ct, execdapi.RunContentType)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, execdapi.MaxRunEventBytes+1)
	return &runStream{resp: resp, sc: sc}
}

// next is the next event; ok is false once the stream ended.
func (r *runStream) next(t *testing.T) (execdapi.RunEvent, bool) {
	t.Helper()
	if !r.sc.Scan() {
		return execdapi.RunEvent{}, false
	}
	ev := execdapi.RunEvent{}
	if err := json.Unmarshal(r.sc.Bytes(), &ev); err != nil {
		t.Fatalf("event %q: %v", r.sc.Text(), err)
	}
	return ev, true
}

// all reads the rest of the stream, which must end with RunEnd.
func (r *runStream) all(t *testing.T) (events []execdapi.RunEvent, end execdapi.RunEvent) {
	t.Helper()
	for {
		ev, ok := r.next(t)
		if !ok {
			t.Fatalf("the run ended without its end event; got %+v", events)
		}
		if ev.Type == execdapi.RunEnd {
			if more, ok := r.next(t); ok {
				t.Errorf("an event after the end: %+v", more)
			}
			return events, ev
		}
		events = append(events, ev)
	}
}

func (s *processServer) run(t *testing.T, id, code string) ([]execdapi.RunEvent, execdapi.RunEvent) {
	t.Helper()
	return s.startRun(t, id, execdapi.RunRequest{Code: code}).all(t)
}

func TestContexts(t *testing.T) {
	s := startContextServer(t, testPython)

	// The default context is made by its first run, and keeps its state.
	if _, end := s.run(t, execdapi.DefaultContext, "x = 41"); end.Status != execdapi.RunStatusOK || end.ExecutionCount != 1 {
		t.Fatalf("first run ended %+v, want ok and execution count 1", end)
	}
	events, end := s.run(t, execdapi.DefaultContext, "import os; os.chdir('/tmp'); print('out'); import sys; print('err', file=sys.stderr); x + 1")
	want := []execdapi.RunEvent{{Type: execdapi.RunStdout, Text: "out\n"}, {Type: execdapi.RunStderr, Text: "err\n"}}
	if len(events) != 3 || !reflect.DeepEqual(events[:2], want) ||
		events[2].Type != execdapi.RunResult || events[2].Text != "42" || events[2].Data["text/plain"] != "42" || events[2].ExecutionCount != 2 {
		t.Errorf("events %+v, want stdout, stderr, then the result 42", events)
	}
	if end.Status != execdapi.RunStatusOK || end.ExecutionCount != 2 {
		t.Errorf("end %+v", end)
	}
	if events, _ := s.run(t, execdapi.DefaultContext, "os.getcwd()"); len(events) != 1 || events[0].Text != "'/tmp'" {
		t.Errorf("the working directory did not persist: %+v", events)
	}

	// An exception: its name, value and traceback, without colours.
	events, end = s.run(t, execdapi.DefaultContext, "def f():\n    return 1/0\nf()")
	if len(events) != 1 || events[0].Type != execdapi.RunError || events[0].Error.Name != "ZeroDivisionError" ||
		!strings.Contains(strings.Join(events[0].Error.Traceback, "\n"), "return 1/0") ||
		strings.Contains(strings.Join(events[0].Error.Traceback, ""), "\x1b[") {
		t.Errorf("events of an exception %+v", events)
	}
	if end.Status != execdapi.RunStatusError || end.Error == nil || end.Error.Name != "ZeroDivisionError" {
		t.Errorf("end of an exception %+v", end)
	}

	// A plot comes as a PNG.
	events, _ = s.run(t, execdapi.DefaultContext, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
	var png []byte
	for _, ev := range events {
		if ev.Type == execdapi.RunDisplay && ev.Data["image/png"] != "" {
			png, _ = base64.StdEncoding.DecodeString(ev.Data["image/png"])
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("no PNG display in %+v", events)
	}

	// An interrupt stops the run, and the context keeps its state.
	r := s.startRun(t, execdapi.DefaultContext, execdapi.RunRequest{Code: "print('go', flush=True)\nimport time\ntime.sleep(600)"})
	if ev, ok := r.next(t); !ok || ev.Type != execdapi.RunStdout || ev.Text != "go\n" {
		t.Fatalf("first event %+v, want go", ev)
	}
	// Busy: another run is refused.
	if code, _, body := s.do(t, asAPIServer, http.MethodPost, execdapi.ContextRunPath(execdapi.DefaultContext), execdapi.RunRequest{Code: "1"}); code != http.StatusConflict {
		t.Errorf("run while busy: %d (%s), want 409", code, body)
	}
	if code, _, body := s.do(t, asAPIServer, http.MethodGet, execdapi.ContextPath(execdapi.DefaultContext), nil); code != http.StatusOK || !strings.Contains(body, `"phase":"Busy"`) {
		t.Errorf("GET while busy: %d %s", code, body)
	}
	if code, _, body := s.do(t, asAPIServer, http.MethodPost, execdapi.ContextInterruptPath(execdapi.DefaultContext), nil); code != http.StatusOK {
		t.Fatalf("interrupt: %d (%s)", code, body)
	}
	events, end = r.all(t)
	if end.Reason != execdapi.RunReasonInterrupted || end.Status != execdapi.RunStatusError || end.Error == nil || end.Error.Name != "KeyboardInterrupt" {
		t.Errorf("end of an interrupted run %+v (events %+v)", end, events)
	}
	if events, _ := s.run(t, execdapi.DefaultContext, "x"); len(events) != 1 || events[0].Text != "41" {
		t.Errorf("after the interrupt, x is %+v, want 41", events)
	}
	if code, _, _ := s.do(t, asAPIServer, http.MethodPost, execdapi.ContextInterruptPath(execdapi.DefaultContext), nil); code != http.StatusConflict {
		t.Errorf("interrupt with nothing running: %d, want 409", code)
	}

	// A timeout interrupts too.
	_, end = s.startRun(t, execdapi.DefaultContext, execdapi.RunRequest{Code: "import time; time.sleep(600)", TimeoutSeconds: 1}).all(t)
	if end.Reason != execdapi.RunReasonDeadlineExceeded {
		t.Errorf("end of a run past its timeout %+v", end)
	}

	// Contexts are separate; IDs are unique; the list has them oldest first.
	code, _, body := s.do(t, asAPIServer, http.MethodPost, execdapi.ContextsPath, execdapi.ContextRequest{ID: "other", WorkingDir: "/"})
	if code != http.StatusCreated || !strings.Contains(body, `"phase":"Idle"`) {
		t.Fatalf("make other: %d %s", code, body)
	}
	if code, _, _ := s.do(t, asAPIServer, http.MethodPost, execdapi.ContextsPath, execdapi.ContextRequest{ID: "other"}); code != http.StatusConflict {
		t.Errorf("make other again: %d, want 409", code)
	}
	if events, _ := s.run(t, "other", "'x' in globals()"); len(events) != 1 || events[0].Text != "False" {
		t.Errorf("other sees default's x: %+v", events)
	}
	code, _, body = s.do(t, asAPIServer, http.MethodGet, execdapi.ContextsPath, nil)
	list := execdapi.ContextList{}
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil || len(list.Items) != 2 ||
		list.Items[0].ID != execdapi.DefaultContext || list.Items[1].ID != "other" || list.Items[0].ExecutionCount < 7 || list.Items[1].LanguageVersion == "" {
		t.Errorf("list: %d %s", code, body)
	}

	// Deleted: gone, and its kernel with it.
	pid := list.Items[1].PID
	if code, _, body := s.do(t, asAPIServer, http.MethodDelete, execdapi.ContextPath("other"), nil); code != http.StatusOK || !strings.Contains(body, `"phase":"Dead"`) {
		t.Errorf("delete: %d %s", code, body)
	}
	if code, _, _ := s.do(t, asAPIServer, http.MethodPost, execdapi.ContextRunPath("other"), execdapi.RunRequest{Code: "1"}); code != http.StatusNotFound {
		t.Errorf("run in a deleted context: %d, want 404", code)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the deleted context's kernel %d still runs", pid)
	}

	// Bad input changes nothing.
	for _, tc := range []struct {
		path string
		body any
		want int
	}{
		{execdapi.ContextsPath, execdapi.ContextRequest{Language: "ruby"}, http.StatusUnprocessableEntity},
		{execdapi.ContextsPath, execdapi.ContextRequest{ID: "Not_A_Label"}, http.StatusUnprocessableEntity},
		{execdapi.ContextsPath, execdapi.ContextRequest{WorkingDir: "relative"}, http.StatusUnprocessableEntity},
		{execdapi.ContextsPath, execdapi.ContextRequest{WorkingDir: "/no/such/dir"}, http.StatusUnprocessableEntity},
		{execdapi.ContextsPath, "{", http.StatusBadRequest},
		{execdapi.ContextRunPath(execdapi.DefaultContext), execdapi.RunRequest{Code: " "}, http.StatusUnprocessableEntity},
		{execdapi.ContextRunPath(execdapi.DefaultContext), execdapi.RunRequest{Code: "1", TimeoutSeconds: -1}, http.StatusUnprocessableEntity},
		{execdapi.ContextRunPath("nope"), execdapi.RunRequest{Code: "1"}, http.StatusNotFound},
	} {
		if code, _, body := s.do(t, asAPIServer, http.MethodPost, tc.path, tc.body); code != tc.want {
			t.Errorf("POST %s %v: %d (%s), want %d", tc.path, tc.body, code, body, tc.want)
		}
	}
	if code, _, _ := s.do(t, asController, http.MethodGet, execdapi.ContextsPath, nil); code != http.StatusForbidden {
		t.Errorf("the controller listed contexts: %d, want 403", code)
	}
	if _, body := s.h.contexts.list(), ""; len(s.h.contexts.list()) != 1 {
		t.Errorf("contexts after bad input: %+v %s", s.h.contexts.list(), body)
	}
}

// TestContextKernelDies: a killed kernel makes its context Dead, and its run says so.
func TestContextKernelDies(t *testing.T) {
	s := startContextServer(t, testPython)
	r := s.startRun(t, execdapi.DefaultContext, execdapi.RunRequest{Code: "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(600)"})
	ev, ok := r.next(t)
	if !ok || ev.Type != execdapi.RunStdout {
		t.Fatalf("first event %+v", ev)
	}
	c := s.h.contexts.lookup(execdapi.DefaultContext)
	if err := syscall.Kill(c.kernel.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, end := r.all(t)
	if end.Reason != execdapi.RunReasonKernelDied {
		t.Errorf("end %+v, want KernelDied", end)
	}
	if st := c.snapshot(); st.Phase != execdapi.ContextDead || st.Message == "" {
		t.Errorf("after its kernel died, the context is %+v", st)
	}
	if code, _, body := s.do(t, asAPIServer, http.MethodPost, execdapi.ContextRunPath(execdapi.DefaultContext), execdapi.RunRequest{Code: "1"}); code != http.StatusGone {
		t.Errorf("run in a dead context: %d (%s), want 410", code, body)
	}
}

// TestContextNoKernel: an image without ipykernel gets a 422 that says so.
func TestContextNoKernel(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"No module named ipykernel_launcher\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startContextServer(t, fake)
	code, _, body := s.do(t, asAPIServer, http.MethodPost, execdapi.ContextRunPath(execdapi.DefaultContext), execdapi.RunRequest{Code: "1"})
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "No module named ipykernel_launcher") || !strings.Contains(body, "ipykernel in the sandbox") {
		t.Errorf("run without a kernel: %d %s", code, body)
	}
	if n := len(s.h.contexts.list()); n != 0 {
		t.Errorf("%d contexts after a failed start", n)
	}
}
