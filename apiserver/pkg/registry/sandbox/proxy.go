package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// ProxyREST implements the proxy subresource: /sandboxes/NAME/proxy/[REPLICA:]PORT/PATH reaches
// HTTP and WebSocket servers in the sandbox pod, through its execd (which reaches them on
// loopback), with the query as the caller sent it.
type ProxyREST struct {
	Access
}

var _ rest.Connecter = &ProxyREST{}

// New implements rest.Storage.
func (r *ProxyREST) New() runtime.Object { return &sandboxv1alpha1.SandboxProxyOptions{} }

// Destroy implements rest.Storage.
func (r *ProxyREST) Destroy() {}

// NewConnectOptions implements rest.Connecter; [REPLICA:]PORT/PATH is the rest of the URL.
func (r *ProxyREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &sandboxv1alpha1.SandboxProxyOptions{}, true, "path"
}

// ConnectMethods implements rest.Connecter.
func (r *ProxyREST) ConnectMethods() []string {
	return []string{"GET", "HEAD", "PUT", "POST", "PATCH", "DELETE", "OPTIONS"}
}

// ParseProxyTarget reads the [REPLICA:]PORT that starts a proxy path.
func ParseProxyTarget(first string) (replica int32, port int, err error) {
	replicaStr, portStr, hasReplica := strings.Cut(first, ":")
	if !hasReplica {
		portStr, replicaStr = replicaStr, "0"
	}
	r, rerr := strconv.ParseInt(replicaStr, 10, 32)
	if rerr != nil || r < 0 {
		return 0, 0, fmt.Errorf("the proxy path must start with [REPLICA:]PORT, REPLICA a replica's index: %q", first)
	}
	port, err = strconv.Atoi(portStr)
	if err != nil {
		return 0, 0, fmt.Errorf("the proxy path must start with [REPLICA:]PORT, PORT a port number (1-65535): %q", first)
	}
	if err := execdapi.ValidatePort(port); err != nil {
		return 0, 0, err
	}
	return int32(r), port, nil
}

// Connect implements rest.Connecter.
func (r *ProxyREST) Connect(ctx context.Context, name string, opts runtime.Object, responder rest.Responder) (http.Handler, error) {
	proxyOpts, ok := opts.(*sandboxv1alpha1.SandboxProxyOptions)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", opts))
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(proxyOpts.Path, "/"), "/")
	replica, port, err := ParseProxyTarget(first)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	ep, err := r.open(ctx, name, replica)
	if err != nil {
		return nil, err
	}
	transport, err := r.ProxyTransport.Current()
	if err != nil {
		return nil, upstreamError(ep, err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The path as the caller escaped it, so that the sandbox's server gets what was sent.
		rawPath := proxiedPath(req.URL.EscapedPath(), name, first)
		path, err := url.PathUnescape(rawPath)
		if err != nil {
			responder.Error(apierrors.NewBadRequest("invalid path: " + err.Error()))
			return
		}
		location := execdclient.URL(ep.Target, "", req.URL.RawQuery)
		location.Path = execdapi.ProxyPath + strconv.Itoa(port) + path
		location.RawPath = execdapi.ProxyPath + strconv.Itoa(port) + rawPath
		rp := &httputil.ReverseProxy{
			// Rewrite, not Director: no X-Forwarded-* headers, hop-by-hop headers removed
			// (but those of an upgrade, which passes through).
			Rewrite:       rewriteTo(location, ep),
			Transport:     transport,
			FlushInterval: -1,
			ErrorHandler: func(_ http.ResponseWriter, _ *http.Request, err error) {
				responder.Error(upstreamError(ep, err))
			},
		}
		rp.ServeHTTP(w, toPod(req, ep))
	}), nil
}

// proxiedPath is what follows .../sandboxes/NAME/proxy/FIRST in an escaped request path, "/"
// at least.
func proxiedPath(escaped, name, first string) string {
	marker := "/sandboxes/" + name + "/proxy/"
	i := strings.Index(escaped, marker)
	if i < 0 {
		return "/"
	}
	rest := escaped[i+len(marker):]
	if unescaped, err := url.PathUnescape(rest); err == nil && strings.HasPrefix(unescaped, first) {
		// FIRST itself may have been escaped (":" as %3A).
		_, after, found := strings.Cut(rest, "/")
		if !found {
			return "/"
		}
		return "/" + after
	}
	return "/"
}
