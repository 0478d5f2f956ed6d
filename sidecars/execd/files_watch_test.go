package execd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// eventWait bounds the wait for one event: inotify delivers in
// milliseconds, so only a broken watch takes this long.
const eventWait = 20 * time.Second

// fileWatchStream is a running watch as a client sees it.
type fileWatchStream struct {
	events chan execdapi.FileEvent
	cancel context.CancelFunc
}

// watch starts a watch of the raw files path and query; it fails t unless
// the answer is 200 with the watch media type.
func (e *filesEnv) watch(t *testing.T, rawPath string) *fileWatchStream {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+rawPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != execdapi.FileWatchContentType {
		_ = resp.Body.Close()
		t.Fatalf("GET %s: %d %s, want 200 %s", rawPath, resp.StatusCode, resp.Header.Get("Content-Type"), execdapi.FileWatchContentType)
	}
	s := &fileWatchStream{events: make(chan execdapi.FileEvent, 4*execdapi.FileWatchQueue), cancel: cancel}
	go func() {
		defer close(s.events)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if len(sc.Bytes()) == 0 {
				continue // heartbeat
			}
			var ev execdapi.FileEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				ev = execdapi.FileEvent{Type: "invalid: " + execdapi.FileEventType(sc.Text())}
			}
			select {
			case s.events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

// until reads events until want, returning those before it; it fails t if
// the stream ends or stalls first.
func (s *fileWatchStream) until(t *testing.T, want execdapi.FileEvent) []execdapi.FileEvent {
	t.Helper()
	var seen []execdapi.FileEvent
	timeout := time.NewTimer(eventWait)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("stream ended waiting for %+v; got %+v", want, seen)
			}
			if ev == want {
				return seen
			}
			seen = append(seen, ev)
		case <-timeout.C:
			t.Fatalf("no %+v within %v; got %+v", want, eventWait, seen)
		}
	}
}

// ends reads the stream to its end, failing t if it stalls.
func (s *fileWatchStream) ends(t *testing.T) []execdapi.FileEvent {
	t.Helper()
	var seen []execdapi.FileEvent
	timeout := time.NewTimer(eventWait)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return seen
			}
			seen = append(seen, ev)
		case <-timeout.C:
			t.Fatalf("stream did not end within %v; got %+v", eventWait, seen)
		}
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestFilesWatch(t *testing.T) {
	env := startFilesServer(t, 0)
	env.write(t, "dir/old.txt", "old")
	env.write(t, "dir/gone.txt", "gone")
	s := env.watch(t, FilesPath+"dir?watch=true")
	dir := filepath.Join(env.root, "dir")

	mustDo(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644))
	s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "a.txt"})
	s.until(t, execdapi.FileEvent{Type: execdapi.FileWritten, Path: "a.txt"})

	f, err := os.OpenFile(filepath.Join(dir, "old.txt"), os.O_WRONLY|os.O_APPEND, 0)
	mustDo(t, err)
	_, err = f.WriteString("more")
	mustDo(t, err)
	mustDo(t, f.Close())
	s.until(t, execdapi.FileEvent{Type: execdapi.FileWritten, Path: "old.txt"})

	mustDo(t, os.Remove(filepath.Join(dir, "gone.txt")))
	s.until(t, execdapi.FileEvent{Type: execdapi.FileRemoved, Path: "gone.txt"})

	mustDo(t, os.Rename(filepath.Join(dir, "old.txt"), filepath.Join(dir, "new.txt")))
	s.until(t, execdapi.FileEvent{Type: execdapi.FileRenamed, Path: "old.txt"})
	s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "new.txt"})

	mustDo(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "sub", Dir: true})
	// Not recursive: sub's entries are not watched; the next event is the
	// marker's.
	mustDo(t, os.WriteFile(filepath.Join(dir, "sub", "x"), nil, 0o644))
	mustDo(t, os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644))
	for _, ev := range s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "marker"}) {
		t.Errorf("unexpected event %+v", ev)
	}
	// A directory seen created is still said to be one once it is gone,
	// though it was never watched.
	mustDo(t, os.RemoveAll(filepath.Join(dir, "sub")))
	s.until(t, execdapi.FileEvent{Type: execdapi.FileRemoved, Path: "sub", Dir: true})

	mustDo(t, os.RemoveAll(dir))
	got := s.ends(t)
	if len(got) == 0 || got[len(got)-1] != (execdapi.FileEvent{Type: execdapi.FileRemoved, Path: ".", Dir: true}) {
		t.Errorf("events after removing the watched directory %+v, want the last to be its removal", got)
	}
}

func TestFilesWatchRecursive(t *testing.T) {
	env := startFilesServer(t, 0)
	env.write(t, "a/b/old.txt", "old")
	s := env.watch(t, FilesPath+"?watch=true&recursive=true")

	env.write(t, "a/b/new.txt", "new")
	s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "a/b/new.txt"})

	mustDo(t, os.MkdirAll(filepath.Join(env.root, "a", "c", "d"), 0o755))
	s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "a/c", Dir: true})
	// Made before or after the new directory is watched, it is reported.
	s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "a/c/d", Dir: true})
	env.write(t, "a/c/d/f.txt", "f")
	s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "a/c/d/f.txt"})

	// A moved directory is watched under its new name only.
	mustDo(t, os.Rename(filepath.Join(env.root, "a", "c"), filepath.Join(env.root, "e")))
	s.until(t, execdapi.FileEvent{Type: execdapi.FileRenamed, Path: "a/c", Dir: true})
	s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "e", Dir: true})
	env.write(t, "e/d/g.txt", "g")
	for _, ev := range s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "e/d/g.txt"}) {
		if strings.HasPrefix(ev.Path, "a/c") {
			t.Errorf("event %+v under the old name", ev)
		}
	}

	mustDo(t, os.RemoveAll(filepath.Join(env.root, "a", "b")))
	s.until(t, execdapi.FileEvent{Type: execdapi.FileRemoved, Path: "a/b/old.txt"})
	s.until(t, execdapi.FileEvent{Type: execdapi.FileRemoved, Path: "a/b", Dir: true})
}

func TestFilesWatchSymlinks(t *testing.T) {
	env := startFilesServer(t, 0)
	env.symlink(t, "../outside", "out")
	env.symlink(t, env.outside, "out-abs")
	env.write(t, "dir/x", "x")
	env.symlink(t, "dir", "in-link")

	refused := []struct {
		name, path string
		wantCode   int
	}{
		{name: "symlink to outside", path: "out?watch=true", wantCode: http.StatusBadRequest},
		{name: "absolute symlink to outside", path: "out-abs?watch=true&recursive=true", wantCode: http.StatusBadRequest},
		{name: "through a symlink to outside", path: "out/sub?watch=true", wantCode: http.StatusBadRequest},
		{name: "symlink inside", path: "in-link?watch=true", wantCode: http.StatusBadRequest},
		{name: "dot dot", path: "../outside?watch=true", wantCode: http.StatusBadRequest},
		{name: "a file", path: "dir/x?watch=true", wantCode: http.StatusBadRequest},
		{name: "missing", path: "nope?watch=true", wantCode: http.StatusNotFound},
		{name: "bad recursive", path: "dir?watch=true&recursive=maybe", wantCode: http.StatusBadRequest},
	}
	mustDo(t, os.Mkdir(filepath.Join(env.outside, "sub"), 0o755))
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			r := env.do(t, http.MethodGet, FilesPath+tt.path, nil, nil)
			if r.code != tt.wantCode {
				t.Errorf("code %d, want %d: %s", r.code, tt.wantCode, r.body)
			}
			decodeStatus(t, r)
		})
	}

	t.Run("a symlink swapped in after the check is not watched", func(t *testing.T) {
		root, err := os.OpenRoot(env.root)
		mustDo(t, err)
		defer func() { _ = root.Close() }()
		fw, err := newFileWatch(root, "in-link", false)
		mustDo(t, err)
		defer fw.close()
		if err := fw.addDir("."); err == nil {
			t.Error("watching in-link, a symlink, succeeded")
		}
		fw.base = "out"
		if err := fw.addDir("sub"); err == nil {
			t.Error("watching out/sub, through a symlink to outside, succeeded")
		}
	})

	t.Run("recursive watch does not descend into symlinks", func(t *testing.T) {
		s := env.watch(t, FilesPath+"?watch=true&recursive=true")
		mustDo(t, os.WriteFile(filepath.Join(env.outside, "secret"), []byte("s"), 0o644))
		mustDo(t, os.WriteFile(filepath.Join(env.outside, "sub", "secret"), []byte("s"), 0o644))
		mustDo(t, os.WriteFile(filepath.Join(env.root, "dir", "y"), nil, 0o644))
		env.symlink(t, env.outside, "new-link")
		env.write(t, "marker", "")
		seen := s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "marker"})
		want := map[execdapi.FileEvent]bool{
			{Type: execdapi.FileCreated, Path: "dir/y"}:    true,
			{Type: execdapi.FileCreated, Path: "new-link"}: true,
		}
		for _, ev := range seen {
			if !want[ev] {
				t.Errorf("unexpected event %+v", ev)
			}
		}
	})
}

func TestFilesWatchOverflow(t *testing.T) {
	t.Run("too many directories", func(t *testing.T) {
		env := startFilesServer(t, 0)
		for i := range execdapi.MaxWatchedDirs {
			mustDo(t, os.MkdirAll(filepath.Join(env.root, fmt.Sprintf("d%d", i/64), fmt.Sprint(i%64)), 0o755))
		}
		got := env.watch(t, FilesPath+"?watch=true&recursive=true").ends(t)
		if len(got) != 1 || got[0].Type != execdapi.FileOverflow {
			t.Errorf("events %+v, want one Overflow", got)
		}
		// Without recursion the same tree is one directory.
		s := env.watch(t, FilesPath+"?watch=true")
		env.write(t, "marker", "")
		s.until(t, execdapi.FileEvent{Type: execdapi.FileCreated, Path: "marker"})
	})

	t.Run("full queue", func(t *testing.T) {
		fw := &fileWatch{notify: make(chan struct{}, 1)}
		for i := range execdapi.FileWatchQueue {
			fw.push(execdapi.FileEvent{Type: execdapi.FileCreated, Path: fmt.Sprint(i)})
		}
		if fw.ended {
			t.Fatalf("ended with %d events queued, the queue's size", len(fw.queue))
		}
		fw.push(execdapi.FileEvent{Type: execdapi.FileCreated, Path: "one too many"})
		if !fw.ended || !fw.overflow {
			t.Errorf("ended %v, overflow %v after a full queue; want both", fw.ended, fw.overflow)
		}
	})

	t.Run("repeated writes coalesce", func(t *testing.T) {
		fw := &fileWatch{notify: make(chan struct{}, 1)}
		w := execdapi.FileEvent{Type: execdapi.FileWritten, Path: "a"}
		for range 3 {
			fw.push(w)
		}
		fw.push(execdapi.FileEvent{Type: execdapi.FileWritten, Path: "b"})
		fw.push(w)
		want := []execdapi.FileEvent{w, {Type: execdapi.FileWritten, Path: "b"}, w}
		if fmt.Sprint(fw.queue) != fmt.Sprint(want) {
			t.Errorf("queue %+v, want %+v", fw.queue, want)
		}
	})
}

func TestFilesWatchLimit(t *testing.T) {
	env := startFilesServer(t, 0)
	var streams []*fileWatchStream
	for range execdapi.MaxFileWatches {
		streams = append(streams, env.watch(t, FilesPath+"?watch=true"))
	}
	r := env.do(t, http.MethodGet, FilesPath+"?watch=true", nil, nil)
	if r.code != http.StatusTooManyRequests {
		t.Fatalf("watch %d: code %d, want 429: %s", execdapi.MaxFileWatches+1, r.code, r.body)
	}
	if st := decodeStatus(t, r); st.Reason != "TooManyRequests" {
		t.Errorf("reason %q, want TooManyRequests", st.Reason)
	}
	// Listing is not a watch.
	if r := env.do(t, http.MethodGet, FilesPath, nil, nil); r.code != http.StatusOK {
		t.Errorf("list while watches are full: %d", r.code)
	}

	// A slot comes back when its client goes.
	streams[0].cancel()
	err := wait.PollUntilContextTimeout(testContext(t), 10*time.Millisecond, eventWait, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.srv.URL+FilesPath+"?watch=true", nil)
		if err != nil {
			return false, err
		}
		resp, err := env.client.Do(req)
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return true, nil
		case http.StatusTooManyRequests:
			return false, nil
		}
		return false, fmt.Errorf("watch after a client left: %d", resp.StatusCode)
	})
	if err != nil {
		t.Fatal(err)
	}
}
