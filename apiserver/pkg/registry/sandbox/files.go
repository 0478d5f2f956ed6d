package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/registry/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// FilesREST implements the files subresource: /sandboxes/NAME/files/PATH, streamed to and
// from execd in the sandbox pod, which resolves every path inside the sandbox's root.
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
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// Everything but our own parameters goes to execd as it came.
		q := req.URL.Query()
		q.Del("path")
		q.Del("replica")
		q.Del("token")
		if r.MaxUploadBytes > 0 {
			q.Set("maxBytes", strconv.FormatInt(r.MaxUploadBytes, 10))
			if req.ContentLength > r.MaxUploadBytes {
				responder.Error(apierrors.NewRequestEntityTooLargeError(
					fmt.Sprintf("the upload is %d bytes; the limit is %d", req.ContentLength, r.MaxUploadBytes)))
				return
			}
		}
		location := ep.URL("/files/"+strings.TrimPrefix(fileOpts.Path, "/"), q)
		// The proxy handler sends the request's own query string, not the location's.
		req.URL.RawQuery = location.RawQuery
		h := proxy.NewUpgradeAwareHandler(location, r.Transport, false, false, proxy.NewErrorResponder(responder))
		stripCallerCredentials(h).ServeHTTP(w, req)
	}), nil
}
