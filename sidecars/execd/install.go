package execd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// InstallBinary copies the executable at src to dst with mode 0755,
// creating dst's directory. It writes a temporary file in dst's directory
// and renames it into place, so dst is either the old file or the complete
// new one, never a partial copy.
func InstallBinary(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening %s: %w", src, err)
	}
	defer func() { _ = in.Close() }()

	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	// Same directory, so the rename stays on one filesystem and is atomic.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating temporary file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		return fmt.Errorf("copying %s to %s: %w", src, tmp.Name(), err)
	}
	// Chmod on the open file is not subject to the umask.
	if err := tmp.Chmod(0o755); err != nil {
		return fmt.Errorf("making %s executable: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("installing %s: %w", dst, err)
	}
	return nil
}
