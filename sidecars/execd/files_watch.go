package execd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// serveWatch streams the changes of the directory name (GET with
// execdapi.WatchParam) until the client goes, execd stops its sessions, the
// directory goes or the watch overflows.
//
// inotify resolves the paths it is given itself, following symlinks, outside
// os.Root. So every directory is opened through os.Root first, refusing a
// final symlink (openDir), and inotify is handed /proc/self/fd/N: the
// magic link names the very directory opened, whatever the sandbox does to
// the path meanwhile. N then stays reserved while the directory is watched,
// so that inotify's path for it names no other directory: see addDir.
func (h *Handler) serveWatch(w http.ResponseWriter, req *http.Request, name string) error {
	recursive, err := queryBool(req, RecursiveParam)
	if err != nil {
		return err
	}
	if _, err := queryBool(req, execdapi.WatchParam); err != nil {
		return err
	}
	fi, err := h.filesRoot.Lstat(name)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return badRequest("%s is a symlink: watches do not follow symlinks", name)
	case !fi.IsDir():
		return badRequest("%s is not a directory: only directories are watched", name)
	}
	slots := h.watchSlots
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		return &statusError{http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			fmt.Sprintf("too many watches: sandbox-execd serves at most %d at a time", execdapi.MaxFileWatches)}
	}
	ctx, done, ok := h.beginSession(req)
	if !ok {
		return &statusError{http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "sandbox-execd is shutting down"}
	}
	defer done()

	fw, err := newFileWatch(h.filesRoot, name, recursive)
	if err != nil {
		return err
	}
	defer fw.close()
	// The top directory must be watched before the answer says 200.
	if err := fw.addDir("."); err != nil {
		if errors.Is(err, errWatchOverflow) {
			return &statusError{http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "cannot watch: " + err.Error()}
		}
		return err
	}
	if recursive {
		fw.addTree(".", false)
	}

	w.Header().Set("Content-Type", execdapi.FileWatchContentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return nil
	}
	klog.V(4).InfoS("Watching files", "path", name, "recursive", recursive, "remoteAddr", req.RemoteAddr)

	var wg sync.WaitGroup
	readCtx, stopReading := context.WithCancel(ctx)
	wg.Go(func() { fw.read(readCtx) })
	defer func() {
		stopReading()
		wg.Wait()
	}()
	fw.write(ctx, w, rc, execdapi.FileWatchHeartbeat)
	return nil
}

// errWatchOverflow is a watch past its bounds.
var errWatchOverflow = errors.New("too many directories to watch")

// fileWatch is one watch: the inotify instance, the directories it watches
// and the queue of events for the client. The reading goroutine owns the
// directories; the queue is shared with the writing one.
//
// Its paths go through the files root, not an os.Root of the watched
// directory: one would hold the directory, and the kernel reports a
// directory deleted (IN_DELETE_SELF) only once nothing holds it. A symlink
// swapped in for base since is refused (openDir), and one above it still
// resolves inside the files root.
type fileWatch struct {
	root      *os.Root
	base      string
	recursive bool
	watcher   *fsnotify.Watcher

	// dirs are the watched directories by path relative to root, with the
	// descriptor reserving the number in the path inotify was given for it;
	// byWatchPath maps that path back. placeholder is what the reserved
	// numbers refer to.
	dirs map[string]*os.File
	// subdirs are the entries reported as directories since the watch
	// began, watched or not: a directory removed before its own watch was
	// in place is still said to be one.
	subdirs     map[string]struct{}
	byWatchPath map[string]string
	placeholder int

	mu       sync.Mutex
	queue    []execdapi.FileEvent
	ended    bool // no event comes after those queued
	overflow bool // the last event to send is FileOverflow
	notify   chan struct{}
}

func newFileWatch(root *os.Root, base string, recursive bool) (*fileWatch, error) {
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			return nil, &statusError{http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "cannot watch: " + err.Error()}
		}
		return nil, fmt.Errorf("inotify: %w", err)
	}
	placeholder, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		_ = watcher.Close()
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &fileWatch{
		root: root, base: base, recursive: recursive, watcher: watcher,
		dirs: map[string]*os.File{}, subdirs: map[string]struct{}{}, byWatchPath: map[string]string{}, placeholder: placeholder,
		notify: make(chan struct{}, 1),
	}, nil
}

func (fw *fileWatch) close() {
	_ = fw.watcher.Close()
	for _, f := range fw.dirs {
		_ = f.Close()
	}
	fw.dirs = nil
	_ = unix.Close(fw.placeholder)
}

func watchPath(f *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
}

// addDir watches the directory rel, which must be one (not a symlink to
// one).
func (fw *fileWatch) addDir(rel string) error {
	if _, ok := fw.dirs[rel]; ok {
		return nil
	}
	if len(fw.dirs) >= execdapi.MaxWatchedDirs {
		return errWatchOverflow
	}
	f, err := fw.openDir(rel)
	if err != nil {
		return err
	}
	wp := watchPath(f)
	if err := fw.watcher.Add(wp); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.ENOSPC) {
			// The user's inotify watches are used up.
			return fmt.Errorf("%w: %v", errWatchOverflow, err)
		}
		return err
	}
	// The descriptor must not hold the directory (see fileWatch), but its
	// number must stay taken: fsnotify knows the watch by wp. Dup3 does both
	// at once.
	if err := unix.Dup3(fw.placeholder, int(f.Fd()), unix.O_CLOEXEC); err != nil {
		_ = fw.watcher.Remove(wp)
		_ = f.Close()
		return fmt.Errorf("dup3: %w", err)
	}
	fw.dirs[rel] = f
	fw.byWatchPath[wp] = rel
	return nil
}

// openDir opens the directory rel, refusing a symlink: os.Root follows a
// final symlink (inside the root) whatever the flags, so the path must still
// name, unfollowed, what was opened.
func (fw *fileWatch) openDir(rel string) (*os.File, error) {
	p := path.Join(fw.base, rel)
	f, err := fw.root.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	li, err := fw.root.Lstat(p)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !os.SameFile(fi, li) {
		_ = f.Close()
		return nil, badRequest("%s is a symlink or was replaced: watches do not follow symlinks", p)
	}
	return f, nil
}

// addTree watches the subdirectories of the watched directory rel, never
// through symlinks. With report, the entries found are reported created:
// those of a new directory may have been made before it was watched.
func (fw *fileWatch) addTree(rel string, report bool) {
	if _, ok := fw.dirs[rel]; !ok {
		return
	}
	d, err := fw.openDir(rel)
	if err != nil {
		return // gone or replaced since: its parent's events tell
	}
	defer func() { _ = d.Close() }()
	for {
		entries, err := d.ReadDir(readdirChunk)
		for _, e := range entries {
			p := path.Join(rel, e.Name())
			isDir := e.Type().IsDir()
			if isDir && len(fw.subdirs) < execdapi.MaxWatchedDirs {
				fw.subdirs[p] = struct{}{}
			}
			if report {
				fw.push(execdapi.FileEvent{Type: execdapi.FileCreated, Path: p, Dir: isDir})
			}
			if !isDir {
				continue
			}
			if err := fw.addDir(p); err != nil {
				if errors.Is(err, errWatchOverflow) {
					fw.end(true)
					return
				}
				continue // gone or replaced since it was read
			}
			fw.addTree(p, report)
		}
		if err != nil || len(entries) == 0 {
			return
		}
	}
}

// dropTree stops watching rel and the directories below it.
func (fw *fileWatch) dropTree(rel string) {
	for p, f := range fw.dirs {
		if p == rel || strings.HasPrefix(p, rel+"/") {
			wp := watchPath(f)
			_ = fw.watcher.Remove(wp)
			delete(fw.byWatchPath, wp)
			delete(fw.dirs, p)
			_ = f.Close()
		}
	}
	for p := range fw.subdirs {
		if p == rel || strings.HasPrefix(p, rel+"/") {
			delete(fw.subdirs, p)
		}
	}
}

// read turns inotify's events into the queue's until ctx ends or the
// watch ends.
func (fw *fileWatch) read(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-fw.watcher.Errors:
			if !ok {
				fw.end(false)
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				fw.end(true)
				return
			}
			klog.ErrorS(err, "Watching files failed")
			fw.end(true)
			return
		case ev, ok := <-fw.watcher.Events:
			if !ok {
				fw.end(false)
				return
			}
			if !fw.handle(ev) {
				return
			}
		}
	}
}

// handle queues what ev means to the client; false when the watch ended.
func (fw *fileWatch) handle(ev fsnotify.Event) bool {
	if rel, ok := fw.byWatchPath[ev.Name]; ok {
		// An event of a watched directory itself: its parent reports it,
		// unless it is the top one, which ends the watch.
		if rel != "." {
			return true
		}
		switch {
		case ev.Has(fsnotify.Remove):
			fw.push(execdapi.FileEvent{Type: execdapi.FileRemoved, Path: ".", Dir: true})
		case ev.Has(fsnotify.Rename):
			fw.push(execdapi.FileEvent{Type: execdapi.FileRenamed, Path: ".", Dir: true})
		default:
			return true
		}
		fw.end(false)
		return false
	}
	dir, base := path.Split(ev.Name)
	rel, ok := fw.byWatchPath[strings.TrimSuffix(dir, "/")]
	if !ok || base == "" {
		return true // a directory dropped since
	}
	p := path.Join(rel, base)
	switch {
	case ev.Has(fsnotify.Create):
		fi, err := fw.root.Lstat(path.Join(fw.base, p))
		isDir := err == nil && fi.IsDir()
		if isDir && len(fw.subdirs) < execdapi.MaxWatchedDirs {
			fw.subdirs[p] = struct{}{}
		}
		fw.push(execdapi.FileEvent{Type: execdapi.FileCreated, Path: p, Dir: isDir})
		if isDir && fw.recursive {
			if err := fw.addDir(p); errors.Is(err, errWatchOverflow) {
				fw.end(true)
				return false
			} else if err == nil {
				fw.addTree(p, true)
			}
		}
	case ev.Has(fsnotify.Write):
		fw.push(execdapi.FileEvent{Type: execdapi.FileWritten, Path: p})
	case ev.Has(fsnotify.Remove), ev.Has(fsnotify.Rename):
		t := execdapi.FileRemoved
		if ev.Has(fsnotify.Rename) {
			t = execdapi.FileRenamed
		}
		_, watched := fw.dirs[p]
		_, known := fw.subdirs[p]
		isDir := watched || known
		fw.dropTree(p)
		fw.push(execdapi.FileEvent{Type: t, Path: p, Dir: isDir})
	}
	fw.mu.Lock()
	ended := fw.ended
	fw.mu.Unlock()
	return !ended
}

// push queues ev for the client. A write to a path whose last queued event
// is already a write is not queued again; a full queue overflows.
func (fw *fileWatch) push(ev execdapi.FileEvent) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.ended {
		return
	}
	if n := len(fw.queue); ev.Type == execdapi.FileWritten && n > 0 && fw.queue[n-1] == ev {
		return
	}
	if len(fw.queue) >= execdapi.FileWatchQueue {
		fw.ended, fw.overflow = true, true
	} else {
		fw.queue = append(fw.queue, ev)
	}
	fw.signal()
}

// end ends the watch after the queued events, with an overflow if set.
func (fw *fileWatch) end(overflow bool) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if !fw.ended {
		fw.ended, fw.overflow = true, overflow
	}
	fw.signal()
}

func (fw *fileWatch) signal() {
	select {
	case fw.notify <- struct{}{}:
	default:
	}
}

// write sends the queued events, one JSON line each and flushed, and a
// bare newline after heartbeat without one, until ctx ends or the watch
// ended and its events are sent.
func (fw *fileWatch) write(ctx context.Context, w io.Writer, rc *http.ResponseController, heartbeat time.Duration) {
	send := func(line []byte) bool {
		if _, err := w.Write(line); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	timer := time.NewTimer(heartbeat)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			if !send([]byte("\n")) {
				return
			}
		case <-fw.notify:
			fw.mu.Lock()
			batch := fw.queue
			fw.queue = nil
			ended, overflow := fw.ended, fw.overflow
			fw.mu.Unlock()
			if overflow {
				// What came before the overflow is of no use without what
				// was lost: the client lists again.
				batch = []execdapi.FileEvent{{Type: execdapi.FileOverflow}}
			}
			var buf []byte
			for _, ev := range batch {
				data, err := json.Marshal(&ev)
				if err != nil {
					return
				}
				buf = append(append(buf, data...), '\n')
			}
			if len(buf) > 0 && !send(buf) {
				return
			}
			if ended {
				return
			}
		}
		timer.Reset(heartbeat)
	}
}
