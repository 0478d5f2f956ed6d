package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// maxDescriptionBytes bounds the listing or description this server reads from execd to turn
// into a typed object: a page of at most execdapi.MaxListLimit entries is a few megabytes. A
// sandbox that sends more gets a 502, not this server's memory.
const maxDescriptionBytes = 32 << 20

// FilesREST implements the files subresource: /sandboxes/NAME/files/PATH, streamed to and
// from execd in the sandbox pod, which resolves every path inside the sandbox's root. Listings
// and descriptions become the typed SandboxFileList and SandboxFile.
type FilesREST struct {
	Access
	// MaxUploadBytes bounds an upload; 0: execd's own limit only.
	MaxUploadBytes int64
}

var _ rest.Connecter = &FilesREST{}

// New implements rest.Storage.
func (r *FilesREST) New() runtime.Object { return &sandboxv1alpha1.SandboxFilesOptions{} }

// Destroy implements rest.Storage.
func (r *FilesREST) Destroy() {}

// NewConnectOptions implements rest.Connecter; the file path is the rest of the URL.
func (r *FilesREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxFilesOptions{}, true, "path"
}

// ConnectMethods implements rest.Connecter.
func (r *FilesREST) ConnectMethods() []string {
	return []string{"GET", "HEAD", "PUT", "POST", "DELETE"}
}

// Connect implements rest.Connecter.
func (r *FilesREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	fileOpts, ok := opts.(*sandboxv1alpha1.SandboxFilesOptions)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", opts))
	}
	ep, err := r.open(ctx, name, fileOpts.Replica)
	if err != nil {
		return nil, err
	}
	transport, err := r.Transport.Current()
	if err != nil {
		return nil, upstreamError(ep, err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// execd's parameters as they came; the upload limit is this server's.
		q := req.URL.Query()
		if r.MaxUploadBytes > 0 {
			q.Set(execdapi.MaxBytesParam, strconv.FormatInt(r.MaxUploadBytes, 10))
			if req.ContentLength > r.MaxUploadBytes {
				responder.Error(apierrors.NewRequestEntityTooLargeError(
					fmt.Sprintf("the upload is %d bytes; the limit is %d", req.ContentLength, r.MaxUploadBytes)))
				return
			}
		}
		location := execdclient.URL(ep.Target, execdapi.FilesPath+strings.TrimPrefix(fileOpts.Path, "/"), q.Encode())
		kind := DescribedKind(req)
		rp := &httputil.ReverseProxy{
			// Rewrite, not Director: no X-Forwarded-* headers, hop-by-hop headers removed.
			Rewrite:   rewriteTo(location, ep),
			Transport: transport,
			// Each write flushed: a watch's events (execdapi.WatchParam) go out as they
			// come, and nothing holds a whole answer. Contents are copied in 32 KiB
			// writes, so a download pays little for it.
			FlushInterval: -1,
			ModifyResponse: func(resp *http.Response) error {
				return TypedDescription(resp, kind)
			},
			ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
				responder.Error(upstreamError(ep, err))
			},
		}
		rp.ServeHTTP(w, toPod(req, ep))
	}), nil
}

// DescribedKind is what a successful JSON answer of execd to req describes: a listing for a
// GET without stat, an entry otherwise.
func DescribedKind(req *http.Request) string {
	if (req.Method == http.MethodGet || req.Method == http.MethodHead) && req.URL.Query().Get(execdapi.StatParam) == "" {
		return "SandboxFileList"
	}
	return "SandboxFile"
}

// TypedDescription replaces execd's JSON description of files in a successful answer with the
// typed kind of the sandbox API group. File contents, watch streams (execdapi.FileEvent lines
// of execdapi.FileWatchContentType) and errors pass as they came.
func TypedDescription(resp *http.Response, kind string) error {
	if resp.StatusCode < 200 || resp.StatusCode > 299 || resp.Request.Method == http.MethodHead {
		return nil
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" || resp.Header.Get(execdapi.FileModeHeader) != "" {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDescriptionBytes+1))
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if len(data) > maxDescriptionBytes {
		return fmt.Errorf("the sandbox sent a description of more than %d bytes", maxDescriptionBytes)
	}
	var out any
	if kind == "SandboxFileList" {
		in := execdapi.FileList{}
		if err := json.Unmarshal(data, &in); err != nil || in.Kind != execdapi.FileListKind {
			return fmt.Errorf("the sandbox sent a listing that is not one: %v", err)
		}
		list := &sandboxv1alpha1.SandboxFileList{Items: make([]sandboxv1alpha1.SandboxFile, 0, len(in.Items))}
		list.APIVersion, list.Kind = sandboxv1alpha1.SchemeGroupVersion.String(), kind
		list.Continue = in.Continue
		for i := range in.Items {
			list.Items = append(list.Items, sandboxFile(&in.Items[i]))
		}
		out = list
	} else {
		in := execdapi.FileInfo{}
		if err := json.Unmarshal(data, &in); err != nil {
			return fmt.Errorf("the sandbox sent a description that is not one: %v", err)
		}
		f := sandboxFile(&in)
		f.APIVersion, f.Kind = sandboxv1alpha1.SchemeGroupVersion.String(), kind
		out = &f
	}
	typed, err := json.Marshal(out)
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(typed))
	resp.ContentLength = int64(len(typed))
	resp.Header.Set("Content-Length", strconv.Itoa(len(typed)))
	resp.Header.Set("Content-Type", "application/json")
	return nil
}

func sandboxFile(in *execdapi.FileInfo) sandboxv1alpha1.SandboxFile {
	return sandboxv1alpha1.SandboxFile{
		Name: in.Name, Path: in.Path, Type: sandboxv1alpha1.SandboxFileType(in.Type), Size: in.Size,
		Mode: in.Mode, ModTime: in.ModTime, LinkTarget: in.LinkTarget,
	}
}
