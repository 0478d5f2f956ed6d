package execdapi

import (
	"fmt"
	"io/fs"
	"net/url"
	"strconv"
	"strings"
	"time"

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
	// GET: WatchParam=true on a directory streams its changes as FileEvents
	// (FileWatchContentType) instead of listing it; RecursiveParam=true
	// includes its subdirectories.
	WatchParam = "watch"
	// PUT: TypeParam ("file", the default, or "dir"), ModeParam (octal
	// permission bits), MkdirsParam=true creates missing parents, and
	// MaxBytesParam caps the upload below execd's own --max-upload-bytes.
	TypeParam     = "type"
	ModeParam     = "mode"
	MkdirsParam   = "mkdirs"
	MaxBytesParam = "maxBytes"
	// DELETE: RecursiveParam=true removes a whole tree; GET with WatchParam:
	// watch subdirectories too.
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

// File watches: GET DIR?watch=true[&recursive=true].
const (
	// FileWatchContentType is the media type of a watch stream: one FileEvent
	// a line, and a bare newline every FileWatchHeartbeat without events.
	FileWatchContentType = "application/x-ndjson"
	// FileWatchHeartbeat keeps proxies and load balancers on the way from
	// closing an idle stream; they commonly do so after 30 to 60 s.
	FileWatchHeartbeat = 15 * time.Second
	// MaxFileWatches bounds the concurrent watches of one execd: each holds an
	// inotify instance, of which a user has 128 by default. The next is
	// answered 429.
	MaxFileWatches = 16
	// FileWatchQueue bounds the events one watch holds for a slow client;
	// past it the watch overflows.
	FileWatchQueue = 1024
	// MaxWatchedDirs bounds the directories one recursive watch watches: each
	// is an inotify watch and an open descriptor. Past it the watch overflows.
	MaxWatchedDirs = 4096
)

// FileEventType is the type of a FileEvent.
type FileEventType string

const (
	// FileCreated: an entry appeared, created or renamed to its path. The
	// entries of a directory that appears in a recursive watch are reported
	// created too, possibly twice.
	FileCreated FileEventType = "Created"
	// FileWritten: a file's contents changed. Writes to one path that the
	// client has not been sent yet are sent once.
	FileWritten FileEventType = "Written"
	// FileRemoved: an entry was removed. Path "." is the watched directory
	// itself, and ends the stream.
	FileRemoved FileEventType = "Removed"
	// FileRenamed: an entry was renamed away from its path; its new path, if
	// in the watch, comes as FileCreated. Path "." is the watched directory
	// itself, and ends the stream.
	FileRenamed FileEventType = "Renamed"
	// FileOverflow: events were lost (a full queue, the kernel's, or too
	// many directories). It is the last event: list the directory again and
	// start another watch.
	FileOverflow FileEventType = "Overflow"
)

// FileEvent is one line of a watch stream.
type FileEvent struct {
	Type FileEventType `json:"type"`
	// Path is relative to the watched directory; empty for FileOverflow.
	Path string `json:"path,omitempty"`
	// Dir is true for a directory: always known for FileCreated, and for
	// FileRemoved and FileRenamed in a recursive watch.
	Dir bool `json:"dir"`
}

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
