package usage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

const (
	// DefaultMaxEmptyDirEntries bounds the walk of one pod's emptyDir volumes, every sample: a
	// sandbox that keeps more files than this there gets no disk figure (and an error that
	// says why) rather than costing the node a walk of millions of entries every
	// nodeapi.SampleInterval.
	DefaultMaxEmptyDirEntries = 200_000
	// maxEmptyDirDepth bounds the directories open at once in the walk (one descriptor each).
	maxEmptyDirDepth = 128
	// emptyDirPlugin is the kubelet's directory of a pod's emptyDir volumes.
	emptyDirPlugin = "kubernetes.io~empty-dir"
)

// ErrTooManyEntries: the pod's emptyDirs hold more than the walk's bound.
var ErrTooManyEntries = errors.New("too many entries to measure")

// emptyDirBytes is the disk used by the pod's disk-backed emptyDir volumes, which the
// kubelet keeps at <kubeletRootDir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>: the
// blocks of every file and directory (st_blocks, as du counts them), a file of several hard
// links once. The sandbox writes in these directories, so the walk trusts nothing in them: it
// opens each directory relative to its parent's descriptor, without following symbolic links
// (a directory swapped for a link meanwhile is not entered), stays on the volume's
// filesystem, and stops at maxEntries. A volume on tmpfs (medium Memory: its pages are the
// pod's memory, charged to its cgroup) or hugetlbfs is no disk, and is left out. A pod
// without emptyDirs uses 0.
func emptyDirBytes(kubeletRootDir, uid string, maxEntries int) (uint64, error) {
	if uid == "" || filepath.Base(uid) != uid || uid == "." || uid == ".." {
		return 0, fmt.Errorf("pod UID %q is not a directory name", uid)
	}
	dir := filepath.Join(kubeletRootDir, "pods", uid, "volumes", emptyDirPlugin)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, nil
		}
		return 0, fmt.Errorf("open %s: %w", dir, err)
	}
	volumes := os.NewFile(uintptr(fd), dir)
	defer func() { _ = volumes.Close() }()
	names, err := volumes.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", dir, err)
	}
	w := &walk{left: maxEntries, seen: map[[2]uint64]bool{}}
	for _, name := range names {
		vfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				continue // torn down meanwhile, or not a volume
			}
			return 0, fmt.Errorf("open volume %s: %w", name, err)
		}
		var fsst unix.Statfs_t
		var st unix.Stat_t
		if err := unix.Fstatfs(vfd, &fsst); err != nil {
			_ = unix.Close(vfd)
			return 0, fmt.Errorf("statfs volume %s: %w", name, err)
		}
		if fsst.Type == unix.TMPFS_MAGIC || fsst.Type == unix.HUGETLBFS_MAGIC {
			_ = unix.Close(vfd)
			continue
		}
		if err := unix.Fstat(vfd, &st); err != nil {
			_ = unix.Close(vfd)
			return 0, fmt.Errorf("stat volume %s: %w", name, err)
		}
		w.dev = st.Dev
		w.count(&st)
		if err := w.dir(vfd, 0); err != nil { // closes vfd
			return 0, fmt.Errorf("volume %s: %w", name, err)
		}
	}
	return w.bytes, nil
}

// walk is the state of one emptyDirBytes.
type walk struct {
	dev   uint64
	left  int
	bytes uint64
	// seen are the (device, inode) of files of more than one link counted already.
	seen map[[2]uint64]bool
}

func (w *walk) count(st *unix.Stat_t) {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if w.seen[key] {
			return
		}
		w.seen[key] = true
	}
	if st.Blocks > 0 {
		w.bytes += uint64(st.Blocks) * 512
	}
}

// dir counts what the directory open at fd holds, and closes fd.
func (w *walk) dir(fd int, depth int) error {
	f := os.NewFile(uintptr(fd), "")
	defer func() { _ = f.Close() }()
	if depth >= maxEmptyDirDepth {
		return fmt.Errorf("directories nested deeper than %d: %w", maxEmptyDirDepth, ErrTooManyEntries)
	}
	for {
		// In batches: a directory of many entries is never all in memory at once.
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			if w.left--; w.left < 0 {
				return ErrTooManyEntries
			}
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // removed since the listing
				}
				return fmt.Errorf("stat %s: %w", name, err)
			}
			w.count(&st)
			if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != w.dev {
				continue
			}
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
					continue // removed, or swapped for something else, since the stat
				}
				return fmt.Errorf("open %s: %w", name, err)
			}
			if err := w.dir(sub, depth+1); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
