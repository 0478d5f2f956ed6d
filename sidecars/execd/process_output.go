package execd

import (
	"bytes"
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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// A process's output: its log (LogDir/process-<id>.log, written and rotated by the task log's
// writer, attemptLog), a TTY's replay ring, and the queues of the attached clients.

const (
	// outputReadBuffer is the most one read of a process's output takes.
	outputReadBuffer = 32 << 10
	// attachQueueChunks bounds what an attached client may fall behind: that many reads of
	// output (at most 2 MiB, mostly far less). A client further behind is detached rather than
	// slow down the process, whose output would otherwise back up.
	attachQueueChunks = 64
)

func processLogPath(dir, id string) string {
	return filepath.Join(dir, processFilePrefix+id+".log")
}

// openProcessLog starts the log of a process. If the file cannot be made, the output is
// dropped (the log answers 410): the process runs all the same.
func openProcessLog(dir, id string, maxBytes int64) *attemptLog {
	l := &attemptLog{path: processLogPath(dir, id), half: max(maxBytes/2, 1), changed: make(chan struct{})}
	_ = os.Remove(l.path + rotatedSuffix)
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		klog.ErrorS(err, "Creating a process log failed; its output is dropped", "file", l.path)
	}
	l.f = f
	return l
}

// removeProcessLogs removes a process's log and its older half.
func removeProcessLogs(path string) {
	for _, p := range []string{path, path + rotatedSuffix} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			klog.ErrorS(err, "Removing a process log failed", "file", p)
		}
	}
}

// removeStaleProcessLogs removes the logs an earlier execd of the container left: their
// processes died with it, and nobody reads them.
func removeStaleProcessLogs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		klog.ErrorS(err, "Listing the process logs failed", "dir", dir)
		return
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, processFilePrefix) && (strings.HasSuffix(name, ".log") || strings.HasSuffix(name, ".log"+rotatedSuffix)) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				klog.ErrorS(err, "Removing a stale process log failed", "file", name)
			}
		}
	}
}

// segmentStart is the offset, in all the output the log was given, of the first byte of its
// segment n. attemptLog rotates a file only once it holds exactly half the bound (a write
// never goes past it), so every segment before the current one holds exactly that.
func (l *attemptLog) segmentStart(n int) int64 {
	return int64(n) * l.half
}

// keptBytes is what the log keeps on disk.
func (l *attemptLog) keptBytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.segment > 0 {
		return l.size + l.half
	}
	return l.size
}

func (l *attemptLog) hasEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// ringBuffer keeps the last size bytes written to it. It holds up to twice that, so that
// dropping the oldest bytes costs a copy only every size bytes.
type ringBuffer struct {
	size int
	data []byte
}

func newRingBuffer(size int) *ringBuffer { return &ringBuffer{size: size} }

func (r *ringBuffer) write(p []byte) {
	if len(p) >= r.size {
		r.data = append(r.data[:0], p[len(p)-r.size:]...)
		return
	}
	if len(r.data)+len(p) > 2*r.size {
		keep := r.size - len(p)
		r.data = r.data[:copy(r.data, r.data[len(r.data)-keep:])]
	}
	r.data = append(r.data, p...)
}

// bytes is a copy of the last size bytes.
func (r *ringBuffer) bytes() []byte {
	d := r.data
	if len(d) > r.size {
		d = d[len(d)-r.size:]
	}
	return bytes.Clone(d)
}

// outputChunk is one read of a process's output.
type outputChunk struct {
	stderr bool
	data   []byte // never changed once sent
}

// subscriber is an attached client's queue. The process closes ch when the output ends, or
// when the client fell behind (overflowed); both under the process's mu.
type subscriber struct {
	ch         chan outputChunk
	overflowed bool
}

// copyOutput copies one stream of the process's output until it ends.
func (p *process) copyOutput(src outputSource) {
	buf := make([]byte, outputReadBuffer)
	for {
		n, err := src.f.Read(buf)
		if n > 0 {
			p.emit(src.stderr, bytes.Clone(buf[:n]))
		}
		// A pty reports EIO once the terminal side is closed everywhere: the end of output.
		if err != nil {
			return
		}
	}
}

// emit hands one read of output to the log, the replay ring and every attached client. It
// never waits for a client.
func (p *process) emit(stderr bool, data []byte) {
	_, _ = p.log.Write(data)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ring != nil {
		p.ring.write(data)
	}
	for s := range p.subs {
		select {
		case s.ch <- outputChunk{stderr: stderr, data: data}:
		default:
			s.overflowed = true
			close(s.ch)
			delete(p.subs, s)
		}
	}
}

// subscribe attaches a client: it gets a TTY's replay, and every later output on its queue.
// Both come under the same lock as the output, so that nothing is lost or repeated between
// them. sub is nil when the output has ended.
func (p *process) subscribe() (sub *subscriber, replay []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ring != nil {
		replay = p.ring.bytes()
	}
	if p.outputEnded {
		return nil, replay
	}
	sub = &subscriber{ch: make(chan outputChunk, attachQueueChunks)}
	p.subs[sub] = struct{}{}
	return sub, replay
}

func (p *process) unsubscribe(s *subscriber) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.subs[s]; ok {
		delete(p.subs, s)
		close(s.ch)
	}
}

func (p *process) overflowed(s *subscriber) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return s.overflowed
}

// endOutputLocked ends every attached client's queue: the output is complete.
func (p *process) endOutputLocked() {
	p.outputEnded = true
	for s := range p.subs {
		close(s.ch)
		delete(p.subs, s)
	}
}

// processLogOptions are the parameters of a log request.
type processLogOptions struct {
	follow     bool
	tailLines  int64 // -1: all
	limitBytes int64 // 0: no limit
	offset     int64 // -1: none
}

func parseProcessLogOptions(req *http.Request) (processLogOptions, error) {
	var o processLogOptions
	var err error
	if o.follow, err = queryBool(req, execdapi.ProcessLogFollowParam); err != nil {
		return o, err
	}
	// As pods/log: tailLines from 0, limitBytes from 1.
	if o.tailLines, err = queryInt(req, execdapi.ProcessLogTailLinesParam, -1, 0, math.MaxInt64); err != nil {
		return o, err
	}
	if o.limitBytes, err = queryInt(req, execdapi.ProcessLogLimitBytesParam, 0, 1, math.MaxInt64); err != nil {
		return o, err
	}
	if o.offset, err = queryInt(req, execdapi.ProcessLogOffsetParam, -1, 0, math.MaxInt64); err != nil {
		return o, err
	}
	if o.offset >= 0 && o.tailLines >= 0 {
		return o, fmt.Errorf("parameters %s and %s exclude each other", execdapi.ProcessLogOffsetParam, execdapi.ProcessLogTailLinesParam)
	}
	return o, nil
}

// serveProcessLog serves GET execdapi.ProcessLogPath: the process's output from offset, or
// its last tailLines, or all that is kept; at most limitBytes. With follow=true it streams
// new output, through rotations, until the output has ended and all is sent, the client
// goes, execd stops its sessions, or the client fell a rotation behind.
func (h *Handler) serveProcessLog(w http.ResponseWriter, req *http.Request) {
	if _, ok := h.processesOf(w, req); !ok {
		return
	}
	p := h.processOf(w, req)
	if p == nil {
		return
	}
	opts, err := parseProcessLogOptions(req)
	if err != nil {
		writeProcessError(w, processError(http.StatusBadRequest, err.Error()))
		return
	}
	l := p.log
	if l == nil {
		writeProcessError(w, processError(http.StatusGone, fmt.Sprintf("the output of process %s died with the container", p.id)))
		return
	}
	// Read before the files are opened: if the output had ended then, the files are complete.
	complete := !opts.follow || l.hasEnded()
	segs, err := (&logSource{path: l.path, live: l}).open()
	if errors.Is(err, fs.ErrNotExist) {
		writeProcessError(w, processError(http.StatusGone, fmt.Sprintf("the output of process %s is gone", p.id)))
		return
	}
	if err != nil {
		klog.ErrorS(err, "Opening a process log failed", "file", l.path)
		writeProcessError(w, apierrors.NewInternalError(fmt.Errorf("opening the log: %w", err)))
		return
	}
	defer closeSegments(segs)
	last := segs[len(segs)-1]
	oldest, end := l.segmentStart(segs[0].n), l.segmentStart(last.n)+last.size
	from := oldest
	switch {
	case opts.offset > end:
		writeProcessError(w, processError(http.StatusBadRequest,
			fmt.Sprintf("offset %d is past the end of the output of process %s (%d)", opts.offset, p.id, end)))
		return
	case opts.offset >= 0:
		// What was dropped cannot be sent: the answer starts later, and says so.
		from = max(opts.offset, oldest)
	case opts.tailLines >= 0:
		i, off, err := tailStart(segs, opts.tailLines)
		if err != nil {
			klog.ErrorS(err, "Reading a process log failed", "file", l.path)
			writeProcessError(w, apierrors.NewInternalError(fmt.Errorf("reading the log: %w", err)))
			return
		}
		from = l.segmentStart(segs[i].n) + off
	}
	to := end
	if opts.limitBytes > 0 {
		to = min(end, from+opts.limitBytes)
	}

	ctx := req.Context()
	if !complete {
		sctx, done, ok := h.beginSession(req)
		if !ok {
			writeProcessError(w, apierrors.NewServiceUnavailable("sandbox-execd is shutting down"))
			return
		}
		defer done()
		ctx = sctx
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set(execdapi.ProcessLogOffsetHeader, strconv.FormatInt(from, 10))
	if complete {
		w.Header().Set(execdapi.ProcessLogNextOffsetHeader, strconv.FormatInt(to, 10))
	}
	w.WriteHeader(http.StatusOK)
	out := &logWriter{w: w, rc: http.NewResponseController(w), limited: opts.limitBytes > 0, left: opts.limitBytes}
	// The headers go at once: a client bounds the wait for them, and a follow of a quiet
	// process may have nothing to send for a long time.
	if out.rc.Flush() != nil {
		return
	}

	buf := make([]byte, logCopyBuffer)
	for _, s := range segs {
		start := l.segmentStart(s.n)
		lo, hi := max(start, from), min(start+s.size, to)
		if lo >= hi {
			continue
		}
		if _, err := io.CopyBuffer(out, io.NewSectionReader(s.f, lo-start, hi-lo), buf); err != nil {
			return
		}
	}
	if complete || to < end {
		return
	}

	// Following: read the current file on from where the answer got, then wait for more; a
	// rotation means the file is complete, and the next one holds what follows.
	cur, pos := last, last.size
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
		n, err := io.CopyBuffer(out, io.NewSectionReader(cur.f, pos, math.MaxInt64-pos), buf)
		pos += n
		if err != nil {
			return
		}
		if cur.n < segment {
			next, err := l.openAfter(cur.n)
			if err != nil {
				return
			}
			if next.n != cur.n+1 {
				// The client fell more than a rotation behind: what lay between is gone.
				// Ending here keeps its count of bytes right; resuming at its offset shows
				// the gap.
				_ = next.f.Close()
				return
			}
			if opened != nil {
				_ = opened.Close()
			}
			opened, cur, pos = next.f, next, 0
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
