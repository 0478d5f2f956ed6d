package execd

import (
	"crypto/rand"
	"encoding/hex"
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

	"k8s.io/klog/v2"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/httpjson"
)

const (
	// DefaultMaxUploadBytes is serve's default --max-upload-bytes: large
	// enough for datasets and binaries, small enough that one request cannot
	// quietly fill the sandbox's disk.
	DefaultMaxUploadBytes = 1 << 30

	// defaultFileMode and defaultDirMode are what uploads and mkdir get
	// without a mode parameter: what a shell with umask 022 creates.
	defaultFileMode = 0o644
	defaultDirMode  = 0o755

	// tempNameMaxBase bounds the part of the target name copied into a temp
	// file's name, so that ".NAME.tmp-XXXXXXXX" stays within NAME_MAX (255)
	// for any valid NAME.
	tempNameMaxBase = 200
)

// Files operations, which are also the endpoint label of their metrics.
const (
	opDownload = "files:download"
	opList     = "files:list"
	opStat     = "files:stat"
	opUpload   = "files:upload"
	opMkdir    = "files:mkdir"
	opDelete   = "files:delete"
	opMove     = "files:move"
	opWatch    = "files:watch"
	opUnknown  = "files:unknown"
)

// statusError is a files API failure with the HTTP status and reason it is
// reported with.
type statusError struct {
	code   int
	reason metav1.StatusReason
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &statusError{http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &statusError{http.StatusConflict, metav1.StatusReasonConflict, fmt.Sprintf(format, args...)}
}

// pathEscapes returns the error os.Root reports for a path leaving the root.
// The os package does not export it, so it is captured from a lookup that
// must fail that way; the lookup touches nothing.
var pathEscapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot("/")
	if err != nil {
		return nil
	}
	defer func() { _ = r.Close() }()
	_, err = r.Lstat("..")
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return nil
})

func isPathEscape(err error) bool {
	sentinel := pathEscapes()
	if sentinel != nil && errors.Is(err, sentinel) {
		return true
	}
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent"
}

// fsError maps a filesystem error to the API status it is reported with.
func fsError(err error) error {
	var se *statusError
	if errors.As(err, &se) {
		return se
	}
	st := &statusError{http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error()}
	switch {
	case isPathEscape(err), errors.Is(err, syscall.ELOOP):
		// Symlinks that leave the root or loop are refused as the client's
		// mistake, like a ".." in the path.
		st.code, st.reason = http.StatusBadRequest, metav1.StatusReasonBadRequest
	case errors.Is(err, fs.ErrNotExist):
		st.code, st.reason = http.StatusNotFound, metav1.StatusReasonNotFound
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EBUSY):
		st.code, st.reason = http.StatusConflict, metav1.StatusReasonConflict
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		st.code, st.reason = http.StatusForbidden, metav1.StatusReasonForbidden
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EXDEV):
		st.code, st.reason = http.StatusBadRequest, metav1.StatusReasonBadRequest
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		st.code, st.reason = http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge
	}
	return st
}

func writeStatus(w http.ResponseWriter, err error) {
	st := fsError(err).(*statusError)
	httpjson.Write(w, st.code, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  st.msg,
		Reason:   st.reason,
		Code:     int32(st.code),
	})
}

// filesOperation names what a files request does, from its method and query
// alone, so that even refused requests are counted under it.
func filesOperation(req *http.Request) string {
	q := req.URL.Query()
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		if q.Get(StatParam) != "" {
			return opStat
		}
		if req.Method == http.MethodGet && q.Get(execdapi.WatchParam) != "" {
			return opWatch
		}
		return opDownload // or opList, decided once the path is opened
	case http.MethodPut:
		if q.Get(TypeParam) == "dir" {
			return opMkdir
		}
		return opUpload
	case http.MethodDelete:
		return opDelete
	case http.MethodPost:
		return opMove
	}
	return opUnknown
}

// filesRequestPath turns the URL path after FilesPath into a path relative
// to the files root: "." for the root itself. ".." components are refused
// outright rather than cleaned away: a client sending them is confused or
// probing, and a cleaned path could name a file it did not mean.
func filesRequestPath(urlPath string) (string, error) {
	p, ok := strings.CutPrefix(urlPath, strings.TrimSuffix(FilesPath, "/"))
	if !ok || (p != "" && p[0] != '/') {
		return "", badRequest("path %q is not under %s", urlPath, FilesPath)
	}
	return cleanRelPath(p)
}

func cleanRelPath(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", badRequest("path contains a NUL byte")
	}
	var parts []string
	for part := range strings.SplitSeq(p, "/") {
		switch part {
		case "", ".":
		case "..":
			return "", badRequest("path %q contains \"..\": paths are relative to the files root and may not leave it", p)
		default:
			parts = append(parts, part)
		}
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

func queryBool(req *http.Request, name string) (bool, error) {
	v := req.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("parameter %s=%q is not a boolean", name, v)
	}
	return b, nil
}

// queryInt parses an integer parameter in [lo, hi], or returns def when it
// is absent.
func queryInt(req *http.Request, name string, def, lo, hi int64) (int64, error) {
	v := req.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("parameter %s=%q is not an integer between %d and %d", name, v, lo, hi)
	}
	return n, nil
}

func queryMode(req *http.Request, def fs.FileMode) (fs.FileMode, error) {
	v := req.URL.Query().Get(ModeParam)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 8, 32)
	// Permission bits only: setuid and setgid files are not something a
	// file upload should produce.
	if err != nil || n > 0o777 {
		return 0, badRequest("parameter %s=%q is not an octal permission between 0 and 0777", ModeParam, v)
	}
	return fs.FileMode(n), nil
}

// serveFiles serves the files API. Every path is resolved through os.Root,
// so neither ".." nor symlinks can reach outside the files root.
func (h *Handler) serveFiles(w http.ResponseWriter, req *http.Request) {
	op := filesOperation(req)
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		h.metrics.requests.WithLabelValues(op, rec.codeLabel()).Inc()
		if op == opDownload && (rec.code == http.StatusOK || rec.code == http.StatusPartialContent) {
			h.metrics.downloaded.Add(float64(rec.written))
		}
	}()
	w = rec

	if _, code, msg := h.sandboxOf(req); code != 0 {
		reason := metav1.StatusReasonForbidden
		if code == http.StatusConflict {
			reason = metav1.StatusReasonConflict
		}
		writeStatus(w, &statusError{code, reason, msg})
		return
	}
	if h.filesRoot == nil {
		writeStatus(w, &statusError{http.StatusNotFound, metav1.StatusReasonNotFound, "the files API is disabled"})
		return
	}
	name, err := filesRequestPath(req.URL.Path)
	if err != nil {
		writeStatus(w, err)
		return
	}
	klog.V(4).InfoS("Files request", "operation", op, "path", name, "remoteAddr", req.RemoteAddr)

	switch op {
	case opStat:
		err = h.serveStat(w, req, name)
	case opDownload:
		err = h.serveGet(w, req, name, &op)
	case opWatch:
		err = h.serveWatch(w, req, name)
	case opUpload:
		err = h.serveUpload(w, req, name)
	case opMkdir:
		err = h.serveMkdir(w, req, name)
	case opDelete:
		err = h.serveDelete(w, req, name)
	case opMove:
		err = h.serveMove(w, req, name)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT, DELETE, POST")
		err = &statusError{http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
			fmt.Sprintf("method %s is not allowed on %s", req.Method, FilesPath)}
	}
	if err != nil {
		if st := fsError(err).(*statusError); st.code == http.StatusInternalServerError {
			klog.ErrorS(err, "Files request failed", "operation", op, "path", name)
		}
		writeStatus(w, err)
	}
}

// fileInfo describes the entry at name (relative to r) without following a
// final symlink; p is the Path reported.
func fileInfo(r *os.Root, name, p string) (FileInfo, error) {
	fi, err := r.Lstat(name)
	if err != nil {
		return FileInfo{}, err
	}
	return describe(r, name, p, fi), nil
}

func describe(r *os.Root, name, p string, fi fs.FileInfo) FileInfo {
	info := FileInfo{
		Name:    fi.Name(),
		Path:    p,
		Size:    fi.Size(),
		Mode:    octalMode(fi.Mode()),
		ModTime: metav1.NewTime(fi.ModTime()),
	}
	if name == "." {
		info.Name = ""
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		info.Type = FileTypeFile
	case m.IsDir():
		info.Type = FileTypeDir
	case m&fs.ModeSymlink != 0:
		info.Type = FileTypeSymlink
		// Best effort: a link removed since Lstat simply has no target.
		info.LinkTarget, _ = r.Readlink(name)
	default:
		info.Type = FileTypeOther
	}
	return info
}

// octalMode renders the Unix permission bits, with setuid, setgid and
// sticky, as ls and chmod spell them.
func octalMode(m fs.FileMode) string {
	bits := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return fmt.Sprintf("%04o", bits)
}

func (h *Handler) serveStat(w http.ResponseWriter, req *http.Request, name string) error {
	if _, err := queryBool(req, StatParam); err != nil {
		return err
	}
	info, err := fileInfo(h.filesRoot, name, name)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, &info)
	return nil
}

// serveGet streams a regular file or lists a directory; op is updated to
// say which.
func (h *Handler) serveGet(w http.ResponseWriter, req *http.Request, name string, op *string) error {
	// O_NONBLOCK: opening a FIFO would otherwise wait for a writer. It does
	// not affect reading regular files.
	f, err := h.filesRoot.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", name, err)
	}
	switch {
	case fi.IsDir():
		*op = opList
		_ = f.Close()
		return h.serveList(w, req, name)
	case !fi.Mode().IsRegular():
		return badRequest("%s is not a regular file or directory", name)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(FileModeHeader, octalMode(fi.Mode()))
	// The name is empty so that ServeContent does not guess a type from it;
	// it handles Range, If-Modified-Since and Last-Modified.
	http.ServeContent(w, req, "", fi.ModTime(), f)
	return nil
}

func (h *Handler) serveUpload(w http.ResponseWriter, req *http.Request, name string) error {
	if name == "." {
		return badRequest("cannot upload over the files root")
	}
	if t := req.URL.Query().Get(TypeParam); t != "" && t != "file" {
		return badRequest("parameter %s=%q is neither \"file\" nor \"dir\"", TypeParam, t)
	}
	mode, err := queryMode(req, defaultFileMode)
	if err != nil {
		return err
	}
	mkdirs, err := queryBool(req, MkdirsParam)
	if err != nil {
		return err
	}
	limit, err := queryInt(req, MaxBytesParam, 0, 1, 1<<62)
	if err != nil {
		return err
	}
	if h.maxUploadBytes > 0 && (limit == 0 || h.maxUploadBytes < limit) {
		limit = h.maxUploadBytes
	}
	if limit > 0 && req.ContentLength > limit {
		return tooLarge(limit)
	}

	dir := path.Dir(name)
	if mkdirs {
		if err := h.filesRoot.MkdirAll(dir, defaultDirMode); err != nil {
			return err
		}
	}
	existed := true
	if fi, err := h.filesRoot.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		existed = false
	} else if err != nil {
		return err
	} else if fi.IsDir() {
		return conflict("%s is a directory", name)
	}

	tmp, err := h.writeTemp(req, dir, path.Base(name), mode, limit)
	if err != nil {
		return err
	}
	if err := h.filesRoot.Rename(tmp, name); err != nil {
		_ = h.filesRoot.Remove(tmp)
		return err
	}
	syncDir(h.filesRoot, dir)
	info, err := fileInfo(h.filesRoot, name, name)
	if err != nil {
		return err
	}
	code := http.StatusCreated
	if existed {
		code = http.StatusOK
	}
	httpjson.Write(w, code, &info)
	return nil
}

func tooLarge(limit int64) error {
	return &statusError{http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
		fmt.Sprintf("upload exceeds the limit of %d bytes", limit)}
}

// writeTemp streams the request body into a new temp file next to the
// target, so the rename into place is atomic; it returns the temp file's
// name, or removes it on failure.
func (h *Handler) writeTemp(req *http.Request, dir, base string, mode fs.FileMode, limit int64) (_ string, err error) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	if len(base) > tempNameMaxBase {
		base = base[:tempNameMaxBase]
	}
	tmpName := path.Join(dir, "."+base+".tmp-"+hex.EncodeToString(rnd[:]))
	// 0600 until complete: nobody reads a half-written file through it.
	f, err := h.filesRoot.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if err != nil {
			_ = h.filesRoot.Remove(tmpName)
		}
	}()

	var body io.Reader = req.Body
	if limit > 0 {
		// One byte more than allowed tells an oversized body from one that
		// is exactly at the limit.
		body = io.LimitReader(req.Body, limit+1)
	}
	n, err := io.Copy(f, onlyReader{body})
	h.metrics.uploaded.Add(float64(n))
	if err != nil {
		return "", fmt.Errorf("receiving upload: %w", err)
	}
	if limit > 0 && n > limit {
		return "", tooLarge(limit)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("syncing upload: %w", err)
	}
	// Chmod on the descriptor: immune to the umask and to the path being
	// swapped for a symlink meanwhile.
	if err := f.Chmod(mode); err != nil {
		return "", fmt.Errorf("setting upload mode: %w", err)
	}
	cf := f
	f = nil
	if err := cf.Close(); err != nil {
		return "", fmt.Errorf("closing upload: %w", err)
	}
	return tmpName, nil
}

// onlyReader hides other methods (WriterTo) of a reader, so that io.Copy
// uses a fixed-size buffer.
type onlyReader struct{ io.Reader }

// syncDir makes a rename durable. Failing to is not worth failing a
// request over: the data itself is synced.
func syncDir(r *os.Root, dir string) {
	d, err := r.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}

func (h *Handler) serveMkdir(w http.ResponseWriter, req *http.Request, name string) error {
	mode, err := queryMode(req, defaultDirMode)
	if err != nil {
		return err
	}
	mkdirs, err := queryBool(req, MkdirsParam)
	if err != nil {
		return err
	}
	if fi, err := h.filesRoot.Lstat(name); err == nil {
		if !fi.IsDir() {
			return conflict("%s exists and is not a directory", name)
		}
		// Idempotent, like replacing a file with PUT.
		info := describe(h.filesRoot, name, name, fi)
		httpjson.Write(w, http.StatusOK, &info)
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if mkdirs {
		err = h.filesRoot.MkdirAll(name, defaultDirMode)
	} else {
		err = h.filesRoot.Mkdir(name, mode)
	}
	if err != nil {
		return err
	}
	// Mkdir's mode is filtered by the umask; the client asked for mode.
	if err := h.filesRoot.Chmod(name, mode); err != nil {
		return err
	}
	info, err := fileInfo(h.filesRoot, name, name)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusCreated, &info)
	return nil
}

func (h *Handler) serveDelete(w http.ResponseWriter, req *http.Request, name string) error {
	recursive, err := queryBool(req, RecursiveParam)
	if err != nil {
		return err
	}
	if name == "." {
		return badRequest("refusing to delete the files root")
	}
	// RemoveAll succeeds on a missing path; the API reports it.
	if _, err := h.filesRoot.Lstat(name); err != nil {
		return err
	}
	if recursive {
		err = h.filesRoot.RemoveAll(name)
	} else {
		err = h.filesRoot.Remove(name)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) serveMove(w http.ResponseWriter, req *http.Request, name string) error {
	destParam := req.URL.Query().Get(MoveToParam)
	if destParam == "" {
		return badRequest("parameter %s is required", MoveToParam)
	}
	dest, err := cleanRelPath(destParam)
	if err != nil {
		return err
	}
	overwrite, err := queryBool(req, OverwriteParam)
	if err != nil {
		return err
	}
	if name == "." || dest == "." {
		return badRequest("cannot move the files root or over it")
	}
	if _, err := h.filesRoot.Lstat(name); err != nil {
		return err
	}
	// Check, then rename: os.Root has no RENAME_NOREPLACE, so a destination
	// created in between is replaced. Clients racing on one name get one of
	// their files, never a mix.
	if !overwrite {
		if _, err := h.filesRoot.Lstat(dest); err == nil {
			return conflict("%s exists; set %s=true to replace it", dest, OverwriteParam)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := h.filesRoot.Rename(name, dest); err != nil {
		return err
	}
	info, err := fileInfo(h.filesRoot, dest, dest)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, &info)
	return nil
}
