package execd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// The task log (see execdapi): LogDir/task-<attempt>.log. A log moves to a ".1" file past half
// its bound, replacing the ".1" before, so an attempt keeps at most the bound and always its
// newest output. Readers never hold more than a copy buffer of it.

// rotatedSuffix names the older half of an attempt's log.
const rotatedSuffix = ".1"

// logCopyBuffer is what a reader of a log holds in memory: one chunk at a time.
const logCopyBuffer = 32 << 10

func taskLogPath(dir string, attempt int32) string {
	return filepath.Join(dir, fmt.Sprintf("task-%d.log", attempt))
}

// taskLogAttempt is the attempt of a log file's name (with or without rotatedSuffix).
func taskLogAttempt(name string) (int32, bool) {
	name = strings.TrimSuffix(name, rotatedSuffix)
	num, ok := strings.CutPrefix(name, "task-")
	if !ok {
		return 0, false
	}
	num, ok = strings.CutSuffix(num, ".log")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 32)
	return int32(n), err == nil
}

// pruneTaskLogs removes the logs of attempts before keep: with the one about to start, the
// last two attempts' logs stay.
func pruneTaskLogs(dir string, keep int32) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		klog.ErrorS(err, "Listing the task logs failed", "dir", dir)
		return
	}
	for _, e := range entries {
		if n, ok := taskLogAttempt(e.Name()); ok && n < keep {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				klog.ErrorS(err, "Removing an old task log failed", "file", e.Name())
			}
		}
	}
}

// appendTaskLogNote adds a line of execd's to the log of an attempt that no longer runs.
func appendTaskLogNote(path, msg string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return // no log to add to
	}
	_, _ = fmt.Fprintf(f, "sandbox-execd: %s\n", msg)
	_ = f.Close()
}

// attemptLog is the log of an attempt this execd runs: the writer, and what its followers
// wait on.
type attemptLog struct {
	attempt int32
	path    string
	// half is the size past which the log rotates.
	half int64

	mu sync.Mutex
	f  *os.File // nil once ended, or if it could not be written
	// size of the current file; segment counts its rotations: the ".1" file holds segment-1.
	size    int64
	segment int
	ended   bool
	// changed is closed at the next write, rotation or end.
	changed chan struct{}
}

// openAttemptLog starts the log of an attempt. If the file cannot be made, the output is
// dropped (and the log serves 404): the task runs all the same.
func openAttemptLog(dir string, attempt int32, maxBytes int64) *attemptLog {
	l := &attemptLog{attempt: attempt, path: taskLogPath(dir, attempt), half: max(maxBytes/2, 1), changed: make(chan struct{})}
	_ = os.Remove(l.path + rotatedSuffix)
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		klog.ErrorS(err, "Creating the task log failed; the attempt's output is dropped", "file", l.path)
	}
	l.f = f
	return l
}

// Write never fails: a process whose output execd cannot keep must not block on it.
func (l *attemptLog) Write(p []byte) (int, error) {
	n := len(p)
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(p) > 0 && l.f != nil {
		if l.size >= l.half {
			l.rotateLocked()
			continue
		}
		chunk := p[:min(int64(len(p)), l.half-l.size)]
		w, err := l.f.Write(chunk)
		l.size += int64(w)
		p = p[len(chunk):]
		if err != nil {
			klog.ErrorS(err, "Writing the task log failed; the rest of the attempt's output is dropped", "file", l.path)
			_ = l.f.Close()
			l.f = nil
		}
	}
	l.notifyLocked()
	return n, nil
}

func (l *attemptLog) rotateLocked() {
	_ = l.f.Close()
	l.f = nil
	if err := os.Rename(l.path, l.path+rotatedSuffix); err != nil {
		klog.ErrorS(err, "Rotating the task log failed; the rest of the attempt's output is dropped", "file", l.path)
		return
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		klog.ErrorS(err, "Creating the task log failed; the rest of the attempt's output is dropped", "file", l.path)
		return
	}
	l.f, l.size = f, 0
	l.segment++
}

func (l *attemptLog) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// note writes a line of execd's own.
func (l *attemptLog) note(format string, args ...any) {
	_, _ = l.Write([]byte("sandbox-execd: " + fmt.Sprintf(format, args...) + "\n"))
}

// end closes the log: the attempt has ended, and followers finish.
func (l *attemptLog) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
	l.ended = true
	l.notifyLocked()
}

// logSegment is one open file of a log, as a reader sees it.
type logSegment struct {
	f    *os.File
	size int64 // when opened
	n    int   // its segment number (live logs only)
}

// logSource is the log of one attempt.
type logSource struct {
	path string
	// live is its writer while this execd has it; nil for an attempt of an earlier execd,
	// whose files no longer change.
	live *attemptLog
}

var (
	errNoTask            = errors.New("the pod has no task yet")
	errNoPreviousAttempt = errors.New("the task has no previous attempt in this pod")
)

// logOf is the log of the task's current (or last) attempt, or of the one before.
func (tr *taskRunner) logOf(previous bool) (*logSource, int32, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.task == nil {
		return nil, 0, errNoTask
	}
	n := tr.task.State.Attempt
	if previous {
		n--
		if n < tr.task.firstAttempt() {
			return nil, 0, errNoPreviousAttempt
		}
	}
	src := &logSource{path: taskLogPath(tr.cfg.logDir, n)}
	if tr.log != nil && tr.log.attempt == n {
		src.live = tr.log
	}
	return src, n, nil
}

// open opens the files of the log, older first. For a live log it holds the writer's lock, so
// that no rotation falls between the two.
func (s *logSource) open() ([]logSegment, error) {
	base := 0
	if s.live != nil {
		s.live.mu.Lock()
		defer s.live.mu.Unlock()
		base = s.live.segment
	}
	var segs []logSegment
	for i, p := range []string{s.path + rotatedSuffix, s.path} {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var fi os.FileInfo
		if err == nil {
			if fi, err = f.Stat(); err != nil {
				_ = f.Close()
			}
		}
		if err != nil {
			closeSegments(segs)
			return nil, err
		}
		segs = append(segs, logSegment{f: f, size: fi.Size(), n: base - 1 + i})
	}
	if len(segs) == 0 {
		return nil, fs.ErrNotExist
	}
	return segs, nil
}

func closeSegments(segs []logSegment) {
	for _, s := range segs {
		_ = s.f.Close()
	}
}

// tailStart is where the last n lines of segs, as one text, begin: the index of a segment and
// the offset in it. A newline at the very end ends the last line; it does not start another.
func tailStart(segs []logSegment, n int64) (int, int64, error) {
	last := len(segs) - 1
	if n == 0 {
		return last, segs[last].size, nil
	}
	buf := make([]byte, logCopyBuffer)
	atEnd := true
	var lines int64
	for i := last; i >= 0; i-- {
		end := segs[i].size
		for end > 0 {
			start := max(0, end-int64(len(buf)))
			chunk := buf[:end-start]
			if _, err := segs[i].f.ReadAt(chunk, start); err != nil && !errors.Is(err, io.EOF) {
				return 0, 0, err
			}
			for j := len(chunk) - 1; j >= 0; j-- {
				if chunk[j] == '\n' && !atEnd {
					if lines++; lines == n {
						return i, start + int64(j) + 1, nil
					}
				}
				atEnd = false
			}
			end = start
		}
	}
	return 0, 0, nil
}

// taskLogOptions are the parameters of a log request.
type taskLogOptions struct {
	follow, previous bool
	tailLines        int64 // -1: all
	limitBytes       int64 // 0: no limit
}

func parseTaskLogOptions(req *http.Request) (taskLogOptions, error) {
	var o taskLogOptions
	var err error
	if o.follow, err = queryBool(req, execdapi.TaskLogFollowParam); err != nil {
		return o, err
	}
	if o.previous, err = queryBool(req, execdapi.TaskLogPreviousParam); err != nil {
		return o, err
	}
	// As pods/log: tailLines from 0, limitBytes from 1.
	if o.tailLines, err = queryInt(req, execdapi.TaskLogTailLinesParam, -1, 0, math.MaxInt64); err != nil {
		return o, err
	}
	if o.limitBytes, err = queryInt(req, execdapi.TaskLogLimitBytesParam, 0, 1, math.MaxInt64); err != nil {
		return o, err
	}
	return o, nil
}

// errLogLimit: the answer reached limitBytes.
var errLogLimit = errors.New("limitBytes reached")

// logWriter writes the answer: at most left bytes (if limited), flushed after every write, so
// that a follower sees output as it comes.
type logWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	limited bool
	left    int64
}

func (lw *logWriter) Write(p []byte) (int, error) {
	var err error
	if lw.limited && int64(len(p)) >= lw.left {
		p, err = p[:lw.left], errLogLimit
	}
	n, werr := lw.w.Write(p)
	lw.left -= int64(n)
	if werr != nil {
		return n, werr
	}
	if ferr := lw.rc.Flush(); ferr != nil {
		return n, ferr
	}
	return n, err
}

// serveTaskLog serves GET execdapi.TaskLogPath (sandbox-apiserver and sandbox-controller):
// the log of the task's current attempt, or of the one before (previous=true), its ".1" file
// then the current one; tailLines from the end across both, at most limitBytes. With
// follow=true it streams the attempt's new output, through rotations, until the attempt has
// ended and all is sent, or the client goes, or execd stops its sessions.
//
//	200 the log, text/plain
//	400 a malformed parameter; a request naming no sandbox
//	404 tasks are disabled; no task yet; no previous attempt; its log is gone
//	409 execd belongs to no sandbox, or to another one
func (h *Handler) serveTaskLog(w http.ResponseWriter, req *http.Request) {
	if !h.allow(w, req, execdapi.APIServerIdentity, execdapi.ControllerIdentity) {
		return
	}
	if _, ok := h.taskClaim(w, req); !ok {
		return
	}
	opts, err := parseTaskLogOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	src, attempt, err := h.tasks.logOf(opts.previous)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	segs, err := src.open()
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, fmt.Sprintf("the log of attempt %d is gone", attempt), http.StatusNotFound)
		return
	}
	if err != nil {
		klog.ErrorS(err, "Opening the task log failed", "file", src.path)
		http.Error(w, "opening the log: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer closeSegments(segs)
	first, offset := 0, int64(0)
	if opts.tailLines >= 0 {
		if first, offset, err = tailStart(segs, opts.tailLines); err != nil {
			klog.ErrorS(err, "Reading the task log failed", "file", src.path)
			http.Error(w, "reading the log: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}

	ctx := req.Context()
	if opts.follow && src.live != nil {
		sctx, done, ok := h.beginSession(req)
		if !ok {
			http.Error(w, "sandbox-execd is shutting down", http.StatusServiceUnavailable)
			return
		}
		defer done()
		ctx = sctx
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	out := &logWriter{w: w, rc: http.NewResponseController(w), limited: opts.limitBytes > 0, left: opts.limitBytes}
	// The headers go at once: a client (sandbox-apiserver's proxy) bounds the wait for them,
	// and a follow of a quiet task may have nothing to send for a long time.
	if out.rc.Flush() != nil {
		return
	}

	buf := make([]byte, logCopyBuffer)
	copyFrom := func(f *os.File) error {
		_, err := io.CopyBuffer(out, struct{ io.Reader }{f}, buf) // no WriterTo: chunks, each flushed
		return err
	}
	if _, err := segs[first].f.Seek(offset, io.SeekStart); err != nil {
		return
	}
	for _, s := range segs[first : len(segs)-1] {
		if copyFrom(s.f) != nil {
			return
		}
	}
	cur := segs[len(segs)-1]
	if copyFrom(cur.f) != nil || !opts.follow || src.live == nil {
		return
	}
	// Following: read the current file to its end, then wait for more; a rotation means the
	// file is complete, and the next one holds what follows.
	l := src.live
	var opened *os.File // the segment opened while following, if any
	defer func() {
		if opened != nil {
			_ = opened.Close()
		}
	}()
	for {
		l.mu.Lock()
		segment, ended, changed := l.segment, l.ended, l.changed
		l.mu.Unlock()
		// What was written before the state above was read is in the file now.
		if copyFrom(cur.f) != nil {
			return
		}
		if cur.n < segment {
			next, err := l.openAfter(cur.n)
			if err != nil {
				return
			}
			if opened != nil {
				_ = opened.Close()
			}
			opened, cur = next.f, next
			continue
		}
		if ended {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// openAfter opens the segment after n, or the oldest one kept if a reader fell behind by
// more than a rotation (what lay between is gone).
func (l *attemptLog) openAfter(n int) (logSegment, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, next := l.path, l.segment
	if n+1 < l.segment {
		p, next = l.path+rotatedSuffix, l.segment-1
	}
	f, err := os.Open(p)
	if err != nil {
		return logSegment{}, err
	}
	return logSegment{f: f, n: next}, nil
}
