package usage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// blocks is what du counts of path: its blocks, in bytes.
func blocks(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(fi.Sys().(*syscall.Stat_t).Blocks) * 512
}

func TestEmptyDirBytes(t *testing.T) {
	const uid = "0a1b-2c3d"
	mib := bytes.Repeat([]byte("x"), 1<<20)
	tests := []struct {
		name string
		// setup makes the pod's emptyDirs in dir (kubernetes.io~empty-dir) and returns the
		// paths whose blocks count.
		setup      func(t *testing.T, dir string) []string
		maxEntries int
		want       func(t *testing.T, counted []string) uint64
		wantErr    string
	}{
		{
			name: "no emptyDir",
			setup: func(t *testing.T, dir string) []string {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				return nil
			},
		},
		{
			name: "files, a directory, a hard link once, a symbolic link not followed",
			setup: func(t *testing.T, dir string) []string {
				vol := filepath.Join(dir, "work")
				mkdir(t, filepath.Join(vol, "sub", "deeper"))
				write(t, filepath.Join(vol, "a"), mib)
				write(t, filepath.Join(vol, "sub", "deeper", "b"), mib[:4096])
				if err := os.Link(filepath.Join(vol, "a"), filepath.Join(vol, "sub", "a-again")); err != nil {
					t.Fatal(err)
				}
				outside := t.TempDir()
				write(t, filepath.Join(outside, "big"), bytes.Repeat(mib, 4))
				if err := os.Symlink(outside, filepath.Join(vol, "out")); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(outside, "big"), filepath.Join(vol, "big")); err != nil {
					t.Fatal(err)
				}
				// Not a volume: left out.
				write(t, filepath.Join(dir, "stray-file"), mib)
				return []string{vol, filepath.Join(vol, "a"), filepath.Join(vol, "sub"), filepath.Join(vol, "sub", "deeper"),
					filepath.Join(vol, "sub", "deeper", "b"), filepath.Join(vol, "out"), filepath.Join(vol, "big")}
			},
		},
		{
			name: "a volume that is a symbolic link is not entered",
			setup: func(t *testing.T, dir string) []string {
				outside := t.TempDir()
				write(t, filepath.Join(outside, "big"), mib)
				mkdir(t, dir)
				if err := os.Symlink(outside, filepath.Join(dir, "linked")); err != nil {
					t.Fatal(err)
				}
				return nil
			},
		},
		{
			name: "more entries than the bound",
			setup: func(t *testing.T, dir string) []string {
				for _, n := range []string{"a", "b", "c", "d"} {
					write(t, filepath.Join(dir, "work", n), nil)
				}
				return nil
			},
			maxEntries: 3,
			wantErr:    "too many entries",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "pods", uid, "volumes", emptyDirPlugin)
			mkdir(t, dir)
			counted := tt.setup(t, dir)
			limit := tt.maxEntries
			if limit == 0 {
				limit = DefaultMaxEmptyDirEntries
			}
			got, err := emptyDirBytes(root, uid, limit)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("emptyDirBytes = %d, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want uint64
			for _, p := range counted {
				want += blocks(t, p)
			}
			if got != want {
				t.Errorf("emptyDirBytes = %d, want %d", got, want)
			}
		})
	}
}

// TestEmptyDirBytesMemory: a volume of medium Memory (tmpfs) is the pod's memory, not disk.
func TestEmptyDirBytesMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "pods", "u", "volumes", emptyDirPlugin)
	mem := filepath.Join(dir, "mem")
	mkdir(t, mem)
	if err := unix.Mount("tmpfs", mem, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mem, unix.MNT_DETACH) })
	write(t, filepath.Join(mem, "a"), bytes.Repeat([]byte("x"), 1<<20))
	if got, err := emptyDirBytes(root, "u", DefaultMaxEmptyDirEntries); err != nil || got != 0 {
		t.Errorf("emptyDirBytes of a tmpfs volume = %d, %v; want 0", got, err)
	}
}

func TestEmptyDirBytesBadUID(t *testing.T) {
	for _, uid := range []string{"", ".", "..", "../x", "a/b"} {
		if _, err := emptyDirBytes(t.TempDir(), uid, 10); err == nil {
			t.Errorf("emptyDirBytes of pod %q: no error", uid)
		}
	}
}

func TestEmptyDirBytesDepth(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "pods", "u", "volumes", emptyDirPlugin, "v")
	for range maxEmptyDirDepth + 1 {
		p = filepath.Join(p, "d")
	}
	mkdir(t, p)
	if _, err := emptyDirBytes(root, "u", DefaultMaxEmptyDirEntries); !errors.Is(err, ErrTooManyEntries) {
		t.Errorf("emptyDirBytes of directories nested too deep: %v, want ErrTooManyEntries", err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p string, data []byte) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
