// Package files is a client of the files subresource of sandboxes: listing, stat, download and
// upload of files in a sandbox, streamed over plain HTTP requests on the kubeconfig's
// credentials.
package files

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

var filesResource = sandboxv1alpha1.Resource("sandboxes/files")

// Client reaches the files of one replica of one sandbox.
type Client struct {
	// HTTP carries the kubeconfig's credentials and TLS settings.
	HTTP *http.Client
	// Base is the URL of the sandbox's files subresource, without a trailing slash.
	Base *url.URL
	// Replica is the index of the replica; the server's default (the first) when zero.
	Replica int32
	// Sandbox is the sandbox's name, for error messages.
	Sandbox string
}

// NewClient returns a Client for the sandbox namespace/name on config's server.
func NewClient(config *rest.Config, namespace, name string, replica int32) (*Client, error) {
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("create HTTP client: %w", err)
	}
	base, err := SubresourceURL(config, namespace, name, "files")
	if err != nil {
		return nil, err
	}
	return &Client{HTTP: httpClient, Base: base, Replica: replica, Sandbox: name}, nil
}

// SubresourceURL is the URL of a subresource of the sandbox namespace/name on config's server,
// keeping any path prefix of the server's URL.
func SubresourceURL(config *rest.Config, namespace, name, subresource string) (*url.URL, error) {
	server, _, err := rest.DefaultServerUrlFor(config)
	if err != nil {
		return nil, fmt.Errorf("parse server URL: %w", err)
	}
	return AppendPath(server, "apis", sandboxv1alpha1.GroupName, sandboxv1alpha1.SchemeGroupVersion.Version,
		"namespaces", namespace, "sandboxes", name, subresource), nil
}

// AppendPath returns a copy of u with the segments appended, each escaped on its own so that a
// "/", "?" or "%" in one stays part of it.
func AppendPath(u *url.URL, segments ...string) *url.URL {
	out := *u
	p := strings.TrimSuffix(u.Path, "/")
	raw := strings.TrimSuffix(u.EscapedPath(), "/")
	for _, s := range segments {
		p += "/" + s
		raw += "/" + url.PathEscape(s)
	}
	out.Path, out.RawPath = p, raw
	out.RawQuery = ""
	return &out
}

// url is the URL of p, a slash-separated path relative to the sandbox root.
func (c *Client) url(p string, query url.Values) string {
	var segments []string
	for s := range strings.SplitSeq(p, "/") {
		if s != "" && s != "." {
			segments = append(segments, s)
		}
	}
	u := AppendPath(c.Base, segments...)
	if len(segments) == 0 {
		// The root itself: files/ rather than files.
		u.Path += "/"
		u.RawPath += "/"
	}
	if query == nil {
		query = url.Values{}
	}
	if c.Replica != 0 {
		query.Set("replica", strconv.Itoa(int(c.Replica)))
	}
	u.RawQuery = query.Encode()
	return u.String()
}

func (c *Client) do(ctx context.Context, method, p string, query url.Values, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(p, query), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, */*")
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer func() { _ = resp.Body.Close() }()
		return nil, c.responseError(resp, method, p)
	}
	return resp, nil
}

// maxErrorBody bounds how much of an error reply is read: a Status is small, and anything else
// is only quoted.
const maxErrorBody = 64 << 10

// responseError turns a failed reply into an API error: the server's Status when it sent one,
// as client-go does, else a generic error for the code.
func (c *Client) responseError(resp *http.Response, method, p string) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		var status metav1.Status
		if err := json.Unmarshal(data, &status); err == nil && status.Kind == "Status" && status.Status == metav1.StatusFailure {
			if status.Code == 0 {
				status.Code = int32(resp.StatusCode)
			}
			return &apierrors.StatusError{ErrStatus: status}
		}
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, method, filesResource, c.Sandbox+":"+p,
		string(bytes.TrimSpace(data)), 0, true)
}

// Stat describes the entry at p without following a final symlink.
func (c *Client) Stat(ctx context.Context, p string) (*sandboxv1alpha1.SandboxFile, error) {
	resp, err := c.do(ctx, http.MethodGet, p, url.Values{"stat": {"true"}}, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	fi := &sandboxv1alpha1.SandboxFile{}
	if err := json.NewDecoder(resp.Body).Decode(fi); err != nil {
		return nil, fmt.Errorf("decode stat of %s: %w", p, err)
	}
	return fi, nil
}

// List calls fn for each entry of the directory dir down to depth levels, page by page of at
// most limit entries (the server's default when 0), until the last page or fn's first error.
// Item paths are relative to dir.
func (c *Client) List(ctx context.Context, dir string, depth, limit int, fn func(*sandboxv1alpha1.SandboxFile) error) error {
	query := url.Values{}
	if depth > 0 {
		query.Set("depth", strconv.Itoa(depth))
	}
	if limit > 0 {
		query.Set("limit", strconv.Itoa(limit))
	}
	for {
		list, err := c.listPage(ctx, dir, query)
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
		query.Set("continue", list.Continue)
	}
}

func (c *Client) listPage(ctx context.Context, dir string, query url.Values) (*sandboxv1alpha1.SandboxFileList, error) {
	resp, err := c.do(ctx, http.MethodGet, dir, query, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return nil, fmt.Errorf("%s:%s: %w", c.Sandbox, dir, ErrNotADirectory)
	}
	list := &sandboxv1alpha1.SandboxFileList{}
	if err := json.NewDecoder(resp.Body).Decode(list); err != nil {
		return nil, fmt.Errorf("decode listing of %s: %w", dir, err)
	}
	if list.Kind != "SandboxFileList" {
		return nil, fmt.Errorf("%s:%s: %w", c.Sandbox, dir, ErrNotADirectory)
	}
	return list, nil
}

// ErrNotADirectory is returned by List for a file.
var ErrNotADirectory = errors.New("not a directory")

// ErrNotAFile is returned by Download for a directory.
var ErrNotAFile = errors.New("not a regular file")

// Download opens the contents of the regular file p and returns its permission bits (0 if the
// server sent none). The caller closes the reader.
func (c *Client) Download(ctx context.Context, p string) (io.ReadCloser, fs.FileMode, error) {
	resp, err := c.do(ctx, http.MethodGet, p, nil, nil)
	if err != nil {
		return nil, 0, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" && resp.Header.Get(execdapi.FileModeHeader) == "" {
		// A directory's listing, not a file's contents.
		_ = resp.Body.Close()
		return nil, 0, fmt.Errorf("%s:%s: %w", c.Sandbox, p, ErrNotAFile)
	}
	var mode fs.FileMode
	if h := resp.Header.Get(execdapi.FileModeHeader); h != "" {
		if mode, err = execdapi.ParseMode(h); err != nil {
			_ = resp.Body.Close()
			return nil, 0, fmt.Errorf("download %s: %w", p, err)
		}
	}
	return resp.Body, mode, nil
}

// Upload writes the contents of r to the file p, creating missing parent directories when
// mkdirs is set. mode is sent unless it is nil, letting the server pick its default.
func (c *Client) Upload(ctx context.Context, p string, r io.Reader, mode *fs.FileMode, mkdirs bool) error {
	query := url.Values{}
	if mode != nil {
		query.Set("mode", fmt.Sprintf("%04o", mode.Perm()))
	}
	if mkdirs {
		query.Set("mkdirs", "true")
	}
	// Wrapped so that net/http streams r rather than treating it specially (an *os.File's
	// ReadFrom path, or a known length that stdin would not honour).
	resp, err := c.do(ctx, http.MethodPut, p, query, io.NopCloser(r))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

// Mkdir creates the directory p and its missing parents; an existing directory is fine.
func (c *Client) Mkdir(ctx context.Context, p string, mode *fs.FileMode) error {
	query := url.Values{"type": {"dir"}, "mkdirs": {"true"}}
	if mode != nil {
		query.Set("mode", fmt.Sprintf("%04o", mode.Perm()))
	}
	resp, err := c.do(ctx, http.MethodPut, p, query, nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}
