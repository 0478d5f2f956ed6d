package execdapi

import (
	"fmt"
	"io/fs"
	"net/url"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The files API: execd's view of the sandbox's filesystem. sandbox-apiserver serves it to users
// as the files subresource of sandboxes, its listings and stats as the kinds SandboxFileList
// and SandboxFileInfo of the sandbox API group.
const (
	// FilesPath prefixes the files API; what follows it is the file's path,
	// always relative to execd's files root ("/files/" itself is the root).
	FilesPath = "/files/"
	// MetricsPath serves Prometheus metrics to the kube-sandbox components: counters carry
	// no file names or contents.
	MetricsPath = "/metrics"

	// FileListKind and the FileInfo types are the JSON shapes of GET responses.
	FileListKind = "FileList"

	// Query parameters of the files API.
	//
	// GET: StatParam=true returns the entry itself (a symlink is not
	// followed) instead of a file's contents or a directory's listing;
	// LimitParam, ContinueParam and DepthParam page and deepen listings.
	StatParam     = "stat"
	LimitParam    = "limit"
	ContinueParam = "continue"
	DepthParam    = "depth"
	// PUT: TypeParam ("file", the default, or "dir"), ModeParam (octal
	// permission bits), MkdirsParam=true creates missing parents, and
	// MaxBytesParam caps the upload below execd's own --max-upload-bytes.
	TypeParam     = "type"
	ModeParam     = "mode"
	MkdirsParam   = "mkdirs"
	MaxBytesParam = "maxBytes"
	// DELETE: RecursiveParam=true removes a whole tree.
	RecursiveParam = "recursive"
	// POST: MoveToParam names the destination of a rename within the root;
	// OverwriteParam=true allows replacing an existing destination.
	MoveToParam    = "moveTo"
	OverwriteParam = "overwrite"

	// FileModeHeader carries a downloaded file's permission bits in octal.
	FileModeHeader = "X-Sandbox-File-Mode"

	// DefaultListLimit bounds a listing page when the client sets no limit;
	// MaxListLimit bounds what a client may ask for, so that a page (and the
	// stat results execd holds for it) stays a few megabytes at most.
	DefaultListLimit = 1000
	MaxListLimit     = 10000
	// MaxListDepth bounds recursive listings: execd keeps the sorted names of
	// one directory per level in memory.
	MaxListDepth = 10
)

// FileType is the type of a FileInfo.
type FileType string

const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
	// FileTypeOther covers devices, FIFOs and sockets, which execd neither
	// reads nor writes.
	FileTypeOther FileType = "other"
)

// FileInfo describes one directory entry. Symlinks are described, never
// followed.
type FileInfo struct {
	// Name is the entry's base name ("" for the root).
	Name string `json:"name"`
	// Path is relative to the listed directory in a FileList, and relative
	// to the files root for a stat or upload response.
	Path string   `json:"path"`
	Type FileType `json:"type"`
	Size int64    `json:"size"`
	// Mode is the permission bits (with setuid, setgid and sticky) in
	// octal, e.g. "0644".
	Mode    string      `json:"mode"`
	ModTime metav1.Time `json:"modTime"`
	// LinkTarget is a symlink's target as stored, not resolved.
	LinkTarget string `json:"linkTarget,omitempty"`
}

// FileList is a page of a directory listing, entries in depth-first order
// with each directory's entries sorted by name.
type FileList struct {
	Kind  string     `json:"kind"`
	Items []FileInfo `json:"items"`
	// Continue, when set, is an opaque token: pass it as the continue
	// parameter to get the next page.
	Continue string `json:"continue,omitempty"`
}

// FilesURL returns the files API URL of filePath (relative to the files
// root; a leading "/" is ignored) on the execd at baseURL.
func FilesURL(baseURL, filePath string, query url.Values) (*url.URL, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, err
	}
	// Not JoinPath: it would clean "..", hiding from execd what the caller
	// asked for; execd refuses such paths itself.
	u.Path = strings.TrimSuffix(u.Path, "/") + FilesPath + strings.TrimLeft(filePath, "/")
	u.RawPath = ""
	u.RawQuery = query.Encode()
	return u, nil
}

// FileMode parses Mode, the octal permission bits.
func (fi *FileInfo) FileMode() (fs.FileMode, error) {
	return ParseMode(fi.Mode)
}

// ParseMode parses octal permission bits such as "0644".
func ParseMode(s string) (fs.FileMode, error) {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, fmt.Errorf("invalid file mode %q", s)
	}
	return fs.FileMode(n) & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), nil
}
