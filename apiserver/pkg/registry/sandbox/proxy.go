package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/registry/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// ProxyREST implements the proxy subresource: /sandboxes/NAME/proxy/PORT/PATH reaches HTTP
// and WebSocket servers in the sandbox pod.
type ProxyREST struct {
	Access
}

var _ rest.Connecter = &ProxyREST{}

// New implements rest.Storage.
func (r *ProxyREST) New() runtime.Object { return &sandboxv1alpha1.SandboxProxyOptions{} }

// Destroy implements rest.Storage.
func (r *ProxyREST) Destroy() {}

// NewConnectOptions implements rest.Connecter; PORT/PATH is the rest of the URL.
func (r *ProxyREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxProxyOptions{}, true, "path"
}

// ConnectMethods implements rest.Connecter.
func (r *ProxyREST) ConnectMethods() []string {
	return []string{"GET", "HEAD", "PUT", "POST", "PATCH", "DELETE", "OPTIONS"}
}

// Connect implements rest.Connecter.
func (r *ProxyREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	proxyOpts, ok := opts.(*sandboxv1alpha1.SandboxProxyOptions)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", opts))
	}
	portStr, path, _ := strings.Cut(strings.TrimPrefix(proxyOpts.Path, "/"), "/")
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the proxy path must start with a port number (1-65535): %q", portStr))
	}
	if port == controlv1alpha1.ExecdPort {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("port %d is sandbox-execd's; use the exec and files subresources", port))
	}
	ep, err := r.open(ctx, name, proxyOpts.Replica)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(ep.Host)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		q.Del("path")
		q.Del("replica")
		location := &url.URL{
			Scheme:   "http",
			Host:     net.JoinHostPort(host, strconv.Itoa(port)),
			Path:     "/" + path,
			RawQuery: q.Encode(),
		}
		// The proxy handler sends the request's own query string, not the location's.
		req.URL.RawQuery = location.RawQuery
		h := proxy.NewUpgradeAwareHandler(location, r.Transport, false, false, proxy.NewErrorResponder(responder))
		h.UseLocationHost = true
		stripCallerCredentials(h).ServeHTTP(w, req)
	}), nil
}
