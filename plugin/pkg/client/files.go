package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	typedsandbox "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/typed/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// Files reaches the files of one replica of one sandbox.
type Files struct {
	// rest is a REST client of the group whose transport records the response headers a
	// request's context asks for (see NewFiles).
	rest      rest.Interface
	namespace string
	sandbox   string
	replica   int32
}

// NewFiles returns a Files for the replica (the server's default, the first, when zero) of
// the sandbox namespace/name on config's server.
func NewFiles(config *rest.Config, namespace, name string, replica int32) (*Files, error) {
	config = rest.CopyConfig(config)
	// rest.Request.Stream returns a response's body without its headers, and a download
	// needs two of them.
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper { return headerRecorder{rt} })
	if config.QPS == 0 && config.RateLimiter == nil {
		// A copy of a tree is a request per file and directory, which client-go's default of
		// 5 a second would make crawl; the server's priority and fairness bounds clients.
		config.QPS = -1
	}
	typed, err := typedsandbox.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("create sandbox REST client: %w", err)
	}
	return &Files{rest: typed.RESTClient(), namespace: namespace, sandbox: name, replica: replica}, nil
}

// ErrParentPath is returned for a path with a ".." element, which the server refuses and
// which the REST client would resolve on its own (path.Join), onto another URL.
var ErrParentPath = errors.New(`a path in a sandbox may not contain ".."`)

// request is a request of the files subresource for p, a slash-separated path relative to the
// sandbox's files root ("", "." or "/" for the root itself). The path is a suffix of the
// subresource, as kubectl's proxy paths are: SubResource refuses segments that a file name may
// well have, like "%", and the URL escapes each segment.
func (c *Files) request(verb, p string) (*rest.Request, error) {
	var segments []string
	for s := range strings.SplitSeq(p, "/") {
		switch s {
		case "", ".":
		case "..":
			return nil, fmt.Errorf("%s:%s: %w", c.sandbox, p, ErrParentPath)
		default:
			segments = append(segments, s)
		}
	}
	req := c.rest.Verb(verb).
		Namespace(c.namespace).
		Resource("sandboxes").
		Name(c.sandbox).
		SubResource("files").
		Suffix(segments...).
		SetHeader("Accept", "application/json, */*")
	if c.replica != 0 {
		req.Param("replica", strconv.Itoa(int(c.replica)))
	}
	return req, nil
}

// stream sends req and returns the body of a successful response and its headers; a failure
// is the server's Status, as the REST client decodes it.
func stream(ctx context.Context, req *rest.Request) (io.ReadCloser, http.Header, error) {
	ctx, headers := withResponseHeaders(ctx)
	body, err := req.Stream(ctx)
	if err != nil {
		return nil, nil, err
	}
	return body, headers.header, nil
}

// Stat describes the entry at p without following a final symlink.
func (c *Files) Stat(ctx context.Context, p string) (*sandboxv1alpha1.SandboxFile, error) {
	req, err := c.request(http.MethodGet, p)
	if err != nil {
		return nil, err
	}
	fi := &sandboxv1alpha1.SandboxFile{}
	if err := req.Param(execdapi.StatParam, "true").Do(ctx).Into(fi); err != nil {
		return nil, err
	}
	return fi, nil
}

// List calls fn for each entry of the directory dir down to depth levels, page by page of at
// most limit entries (the server's default when 0), until the last page or fn's first error.
// Item paths are relative to dir.
func (c *Files) List(ctx context.Context, dir string, depth, limit int, fn func(*sandboxv1alpha1.SandboxFile) error) error {
	token := ""
	for {
		list, err := c.listPage(ctx, dir, depth, limit, token)
		if err != nil {
			return err
		}
		for i := range list.Items {
			if err := fn(&list.Items[i]); err != nil {
				return err
			}
		}
		if list.Continue == "" {
			return nil
		}
		token = list.Continue
	}
}

func (c *Files) listPage(ctx context.Context, dir string, depth, limit int, token string) (*sandboxv1alpha1.SandboxFileList, error) {
	req, err := c.request(http.MethodGet, dir)
	if err != nil {
		return nil, err
	}
	if depth > 0 {
		req.Param(execdapi.DepthParam, strconv.Itoa(depth))
	}
	if limit > 0 {
		req.Param(execdapi.LimitParam, strconv.Itoa(limit))
	}
	if token != "" {
		req.Param(execdapi.ContinueParam, token)
	}
	// Streamed, not Do: the GET of a file is its contents, which are not read.
	body, header, err := stream(ctx, req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	if mt, _, _ := mime.ParseMediaType(header.Get("Content-Type")); mt != "application/json" {
		return nil, fmt.Errorf("%s:%s: %w", c.sandbox, dir, ErrNotADirectory)
	}
	list := &sandboxv1alpha1.SandboxFileList{}
	if err := json.NewDecoder(body).Decode(list); err != nil {
		return nil, fmt.Errorf("decode listing of %s: %w", dir, err)
	}
	if list.Kind != "SandboxFileList" {
		return nil, fmt.Errorf("%s:%s: %w", c.sandbox, dir, ErrNotADirectory)
	}
	return list, nil
}

// ErrWatchOverflow is returned by Watch after an execdapi.FileOverflow event: changes were
// lost, and the directory must be listed again.
var ErrWatchOverflow = errors.New("the watch overflowed: changes were lost; list the directory again")

// maxEventBytes bounds one line of a watch stream: an event is a path of at most PATH_MAX
// (4096) bytes, escaped, and a few fields.
const maxEventBytes = 64 << 10

// Watch calls fn for each change of the directory dir, and of its subdirectories with
// recursive, as the server streams them, until ctx ends (nil), the stream ends, fn fails or
// the watch overflows (ErrWatchOverflow, after fn saw the FileOverflow event). Heartbeats are
// skipped.
func (c *Files) Watch(ctx context.Context, dir string, recursive bool, fn func(*execdapi.FileEvent) error) error {
	req, err := c.request(http.MethodGet, dir)
	if err != nil {
		return err
	}
	req.Param(execdapi.WatchParam, "true")
	if recursive {
		req.Param(execdapi.RecursiveParam, "true")
	}
	body, header, err := stream(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() { _ = body.Close() }()
	if mt, _, _ := mime.ParseMediaType(header.Get("Content-Type")); mt != execdapi.FileWatchContentType {
		return fmt.Errorf("%s:%s: the server sent %q, not a watch stream", c.sandbox, dir, mt)
	}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), maxEventBytes)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		ev := &execdapi.FileEvent{}
		if err := json.Unmarshal(line, ev); err != nil {
			return fmt.Errorf("decode watch event of %s: %w", dir, err)
		}
		if ev.Type == "Heartbeat" {
			continue
		}
		if err := fn(ev); err != nil {
			return err
		}
		if ev.Type == execdapi.FileOverflow {
			return ErrWatchOverflow
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	return nil
}

// ErrNotADirectory is returned by List for a file.
var ErrNotADirectory = errors.New("not a directory")

// ErrNotAFile is returned by Download for a directory.
var ErrNotAFile = errors.New("not a regular file")

// Download opens the contents of the regular file p, streamed as the server sends them, and
// returns its permission bits (0 if the server sent none). The caller closes the reader.
func (c *Files) Download(ctx context.Context, p string) (io.ReadCloser, fs.FileMode, error) {
	req, err := c.request(http.MethodGet, p)
	if err != nil {
		return nil, 0, err
	}
	body, header, err := stream(ctx, req)
	if err != nil {
		return nil, 0, err
	}
	if mt, _, _ := mime.ParseMediaType(header.Get("Content-Type")); mt == "application/json" && header.Get(execdapi.FileModeHeader) == "" {
		// A directory's listing, not a file's contents.
		_ = body.Close()
		return nil, 0, fmt.Errorf("%s:%s: %w", c.sandbox, p, ErrNotAFile)
	}
	var mode fs.FileMode
	if h := header.Get(execdapi.FileModeHeader); h != "" {
		if mode, err = execdapi.ParseMode(h); err != nil {
			_ = body.Close()
			return nil, 0, fmt.Errorf("download %s: %w", p, err)
		}
	}
	return body, mode, nil
}

// Upload writes the contents of r to the file p, creating missing parent directories when
// mkdirs is set. mode is sent unless it is nil, letting the server pick its default.
func (c *Files) Upload(ctx context.Context, p string, r io.Reader, mode *fs.FileMode, mkdirs bool) error {
	req, err := c.request(http.MethodPut, p)
	if err != nil {
		return err
	}
	if mode != nil {
		req.Param(execdapi.ModeParam, fmt.Sprintf("%04o", mode.Perm()))
	}
	if mkdirs {
		req.Param(execdapi.MkdirsParam, "true")
	}
	// A reader, so that the REST client streams it (and never retries it: it cannot be
	// read again); wrapped so that net/http sends it as it comes rather than treating it
	// specially (an *os.File's ReadFrom path, or a known length that stdin would not honour).
	return req.
		SetHeader("Content-Type", "application/octet-stream").
		Body(io.NopCloser(r)).
		Do(ctx).
		Error()
}

// Mkdir creates the directory p and its missing parents; an existing directory is fine.
func (c *Files) Mkdir(ctx context.Context, p string, mode *fs.FileMode) error {
	req, err := c.request(http.MethodPut, p)
	if err != nil {
		return err
	}
	req.Param(execdapi.TypeParam, "dir").Param(execdapi.MkdirsParam, "true")
	if mode != nil {
		req.Param(execdapi.ModeParam, fmt.Sprintf("%04o", mode.Perm()))
	}
	return req.Do(ctx).Error()
}

// responseHeaders receives the headers of the response to the request whose context carries it.
type responseHeaders struct {
	header http.Header
}

type responseHeadersKey struct{}

// withResponseHeaders returns a context whose request's response headers land in the
// returned responseHeaders.
func withResponseHeaders(ctx context.Context) (context.Context, *responseHeaders) {
	h := &responseHeaders{}
	return context.WithValue(ctx, responseHeadersKey{}, h), h
}

// headerRecorder is the transport that records them. The REST client calls it in the goroutine
// of the request, before it returns the body.
type headerRecorder struct {
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if h, ok := req.Context().Value(responseHeadersKey{}).(*responseHeaders); ok && resp != nil {
		h.header = resp.Header
	}
	return resp, err
}

// Files is the files of the first replica of sandbox name.
func (c *Client) Files(name string) *Files {
	return c.FilesOf(name, 0)
}

// FilesOf is the files of a replica of sandbox name.
func (c *Client) FilesOf(name string, replica int32) *Files {
	f, err := NewFiles(c.config, c.namespace, name, replica)
	if err != nil {
		// NewFiles fails only for a configuration New has accepted already.
		panic(fmt.Sprintf("files client of a valid configuration: %v", err))
	}
	return f
}

// ReadFile returns the contents of the regular file p, up to limit bytes when limit > 0 (the
// rest is not read; truncated says there was more).
func (c *Files) ReadFile(ctx context.Context, p string, limit int64) (data []byte, truncated bool, err error) {
	body, _, err := c.Download(ctx, p)
	if err != nil {
		return nil, false, wrap(err)
	}
	defer func() { _ = body.Close() }()
	var r io.Reader = body
	if limit > 0 {
		r = io.LimitReader(body, limit+1)
	}
	data, err = io.ReadAll(r)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", p, err)
	}
	if limit > 0 && int64(len(data)) > limit {
		return data[:limit], true, nil
	}
	return data, false, nil
}

// WriteFile writes data to the file p (replacing it whole, as a rename does), creating its
// missing parent directories; mode 0 leaves the server's default (0644).
func (c *Files) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	var m *fs.FileMode
	if mode != 0 {
		m = &mode
	}
	return wrap(c.Upload(ctx, p, bytes.NewReader(data), m, true))
}

// ReadDir lists the directory dir, one level deep.
func (c *Files) ReadDir(ctx context.Context, dir string) ([]sandboxv1alpha1.SandboxFile, error) {
	var entries []sandboxv1alpha1.SandboxFile
	err := c.List(ctx, dir, 1, 0, func(f *sandboxv1alpha1.SandboxFile) error {
		entries = append(entries, *f)
		return nil
	})
	return entries, wrap(err)
}

// Remove removes the file or empty directory p; with recursive, a whole tree.
func (c *Files) Remove(ctx context.Context, p string, recursive bool) error {
	req, err := c.request(http.MethodDelete, p)
	if err != nil {
		return err
	}
	if recursive {
		req.Param(execdapi.RecursiveParam, "true")
	}
	return wrap(req.Do(ctx).Error())
}
