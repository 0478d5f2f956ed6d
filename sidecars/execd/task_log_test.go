package execd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// numbered is a shell loop printing "line-NNN" for from..to.
func numbered(from, to int) string {
	return fmt.Sprintf(`i=%d; while [ $i -le %d ]; do printf 'line-%%03d\n' $i; i=$((i+1)); done`, from, to)
}

func numberedLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line-%03d\n", i)
	}
	return b.String()
}

func TestTaskLog(t *testing.T) {
	s := startTaskServer(t, HandlerConfig{}, false)
	if code, body := s.log(t, ""); code != http.StatusNotFound || !strings.Contains(body, "no task") {
		t.Errorf("log before a task: %d %q, want 404", code, body)
	}
	s.put(t, newTask("t", "sh", "-c", "seq 1 10; printf end"))
	s.waitFinal(t)
	all := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\nend"
	tests := []struct {
		query    string
		wantCode int
		want     string
	}{
		{query: "", wantCode: http.StatusOK, want: all},
		{query: "tailLines=3", wantCode: http.StatusOK, want: "9\n10\nend"},
		{query: "tailLines=1", wantCode: http.StatusOK, want: "end"},
		{query: "tailLines=0", wantCode: http.StatusOK, want: ""},
		{query: "tailLines=100", wantCode: http.StatusOK, want: all},
		{query: "limitBytes=5", wantCode: http.StatusOK, want: "1\n2\n3"},
		{query: "tailLines=2&limitBytes=4", wantCode: http.StatusOK, want: "10\ne"},
		{query: "limitBytes=1000", wantCode: http.StatusOK, want: all},
		// The attempt has ended: follow returns what there is.
		{query: "follow=true&tailLines=1", wantCode: http.StatusOK, want: "end"},
		{query: "previous=true", wantCode: http.StatusNotFound},
		{query: "tailLines=-1", wantCode: http.StatusBadRequest},
		{query: "tailLines=x", wantCode: http.StatusBadRequest},
		{query: "limitBytes=0", wantCode: http.StatusBadRequest},
		{query: "follow=maybe", wantCode: http.StatusBadRequest},
		{query: "previous=2", wantCode: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			code, body := s.log(t, tt.query)
			if code != tt.wantCode || code == http.StatusOK && body != tt.want {
				t.Errorf("%d %q, want %d %q", code, body, tt.wantCode, tt.want)
			}
		})
	}
}

func TestTaskLogPrevious(t *testing.T) {
	s := startTaskServer(t, HandlerConfig{}, false)
	tr := newTask("t", counting(filepath.Join(t.TempDir(), "counter"), "exit 1")...)
	tr.RestartOnFailure, tr.Retries, tr.FirstAttempt = true, 2, 4
	s.put(t, tr)
	if got := s.waitFinal(t); got.Attempt != 6 {
		t.Fatalf("final state %+v, want attempt 6", got)
	}
	for query, want := range map[string]string{"": "run-3\n", "previous=true": "run-2\n", "previous=false": "run-3\n"} {
		if code, body := s.log(t, query); code != http.StatusOK || body != want {
			t.Errorf("log?%s: %d %q, want %q", query, code, body, want)
		}
	}
}

// follow starts a follow of the log and returns its body.
func (s *taskServer) follow(t *testing.T, ctx context.Context, query string) io.ReadCloser {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL+execdapi.TaskLogPath+"?follow=true&"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient(t, asAPIServer).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp.Body
}

// readUntil reads r until what it read ends with suffix, and returns it all.
func readUntil(t *testing.T, r *bufio.Reader, suffix string) string {
	t.Helper()
	var got strings.Builder
	for !strings.HasSuffix(got.String(), suffix) {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("read %q, then %v; want it to end with %q", got.String(), err, suffix)
		}
		got.WriteByte(b)
	}
	return got.String()
}

func TestTaskLogFollow(t *testing.T) {
	s := startTaskServer(t, HandlerConfig{}, false)
	gate := filepath.Join(t.TempDir(), "go")
	tr := newTask("t", "sh", "-c", `echo before; while [ ! -e "$0" ]; do sleep 0.02; done; echo after`, gate)
	tr.PostStop = []string{"echo", "post"}
	s.put(t, tr)
	r := bufio.NewReader(s.follow(t, testContext(t), ""))
	if got := readUntil(t, r, "before\n"); got != "before\n" {
		t.Errorf("followed %q first", got)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Until the attempt has ended, postStop included; then the stream ends.
	rest, err := io.ReadAll(r)
	if want := "after\npost\nsandbox-execd: postStop exit code 0\n"; err != nil || string(rest) != want {
		t.Errorf("followed %q (%v) after the gate, want %q", rest, err, want)
	}

	t.Run("StopSessions ends a follow of a quiet task", func(t *testing.T) {
		s := startTaskServer(t, HandlerConfig{}, false)
		s.put(t, newTask("t", "sleep", "1000"))
		// follow returns with the headers, which must come before any output.
		body := s.follow(t, testContext(t), "")
		s.h.StopSessions()
		if rest, err := io.ReadAll(body); err != nil || len(rest) != 0 {
			t.Errorf("the follow ended with %q, %v; want its end, empty", rest, err)
		}
	})
}

func TestTaskLogRotation(t *testing.T) {
	const maxBytes = 1000 // rotates past 500 bytes: 55 lines and a bit
	t.Run("the newest output is kept", func(t *testing.T) {
		s := startTaskServer(t, HandlerConfig{TaskMaxLogBytes: maxBytes}, false)
		s.put(t, newTask("t", "sh", "-c", numbered(1, 300)))
		s.waitFinal(t)
		full := numberedLines(1, 300)
		code, body := s.log(t, "")
		if code != http.StatusOK || !strings.HasSuffix(full, body) || len(body) > maxBytes || len(body) <= maxBytes/2 {
			t.Fatalf("log: %d, %d bytes %q; want the last bytes of the output, at most %d", code, len(body), body, maxBytes)
		}
		for _, suffix := range []string{"", rotatedSuffix} {
			if fi, err := os.Stat(taskLogPath(s.logDir, 1) + suffix); err != nil || fi.Size() > maxBytes/2 {
				t.Errorf("log file %q: %v, want at most %d bytes", suffix, err, maxBytes/2)
			}
		}
		if _, tail := s.log(t, "tailLines=3"); tail != numberedLines(298, 300) {
			t.Errorf("tailLines=3: %q", tail)
		}
		// 2700 bytes in files of 500: the log keeps bytes 2000 to 2700, from the middle of
		// line 223 on, the current file from the middle of line 278.
		if _, tail := s.log(t, "tailLines=77"); tail != numberedLines(224, 300) {
			t.Errorf("tailLines=77, across both files: %q", tail)
		}
		if _, tail := s.log(t, "tailLines=80"); tail != body {
			t.Errorf("tailLines=80, more than are kept: %q, want all that is", tail)
		}
	})
	t.Run("a follow goes on through a rotation", func(t *testing.T) {
		s := startTaskServer(t, HandlerConfig{TaskMaxLogBytes: maxBytes}, false)
		gate := filepath.Join(t.TempDir(), "go")
		// 40 lines of 9 bytes, then 40 more: the log rotates in the second half.
		s.put(t, newTask("t", "sh", "-c", numbered(1, 40)+`; while [ ! -e "$0" ]; do sleep 0.02; done; `+numbered(41, 80), gate))
		r := bufio.NewReader(s.follow(t, testContext(t), ""))
		got := readUntil(t, r, "line-040\n")
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(r)
		if got += string(rest); err != nil || got != numberedLines(1, 80) {
			t.Errorf("followed %q (%v), want all 80 lines", got, err)
		}
		if _, err := os.Stat(taskLogPath(s.logDir, 1) + rotatedSuffix); err != nil {
			t.Errorf("the log did not rotate: %v", err)
		}
	})
}

func TestTailStart(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		n     int64
		want  string
	}{
		{name: "last line", files: []string{"a\nb\n", "c\nd\n"}, n: 1, want: "d\n"},
		{name: "across files", files: []string{"a\nb", "\nc\nd\n"}, n: 3, want: "b\nc\nd\n"},
		{name: "a line split by the rotation", files: []string{"a\nb", "b\nc\n"}, n: 2, want: "bb\nc\n"},
		{name: "no final newline", files: []string{"a\n", "b\nc"}, n: 1, want: "c"},
		{name: "more lines than there are", files: []string{"a\n", "b\n"}, n: 10, want: "a\nb\n"},
		{name: "exactly all", files: []string{"a\n", "b\n"}, n: 2, want: "a\nb\n"},
		{name: "none", files: []string{"a\n", "b\n"}, n: 0, want: ""},
		{name: "an empty current file", files: []string{"a\nb\n", ""}, n: 1, want: "b\n"},
		{name: "one file", files: []string{"a\n\nb\n"}, n: 2, want: "\nb\n"},
		{name: "long lines past the buffer", files: []string{strings.Repeat("x", 3*logCopyBuffer) + "\n", strings.Repeat("y", logCopyBuffer+7) + "\n"}, n: 1,
			want: strings.Repeat("y", logCopyBuffer+7) + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var segs []logSegment
			for i, content := range tt.files {
				p := filepath.Join(t.TempDir(), fmt.Sprint(i))
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				f, err := os.Open(p)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = f.Close() })
				segs = append(segs, logSegment{f: f, size: int64(len(content))})
			}
			i, off, err := tailStart(segs, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			got := tt.files[i][off:] + strings.Join(tt.files[i+1:], "")
			if got != tt.want {
				t.Errorf("tail from file %d offset %d: %q, want %q", i, off, got, tt.want)
			}
		})
	}
}
