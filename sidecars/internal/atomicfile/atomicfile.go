// Package atomicfile writes a file so that a reader, or a restart, sees either the old
// content or the new one, never part of it.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data, readable by its owner only (0600): it writes a temporary
// file in the same directory and renames it over path. The directory must exist.
func Write(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
