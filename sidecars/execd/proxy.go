package execd

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// DefaultProxyResponseHeaderTimeout bounds the wait for a local server's response headers:
// long enough for a slow first answer (a model loading, a build), short enough that a server
// that never answers does not hold the request forever.
const DefaultProxyResponseHeaderTimeout = 5 * time.Minute

// localProxy forwards the proxy endpoint to servers in the pod, on loopback: servers bound to
// 127.0.0.1 (as dev servers are by default) are reached as well as those on every address,
// and the traffic never leaves the pod's network namespace.
type localProxy struct {
	transport *http.Transport
}

func newLocalProxy(responseHeaderTimeout time.Duration) *localProxy {
	if responseHeaderTimeout <= 0 {
		responseHeaderTimeout = DefaultProxyResponseHeaderTimeout
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &localProxy{transport: &http.Transport{
		Proxy: nil,
		// The address is always loopback, whatever the sandbox's /etc/hosts says "localhost"
		// is: IPv4 first, then IPv6 for a server that listens on ::1 only.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", port))
			if err != nil && errors.Is(err, syscall.ECONNREFUSED) {
				if conn6, err6 := d.DialContext(ctx, "tcp", net.JoinHostPort("::1", port)); err6 == nil {
					return conn6, nil
				}
			}
			return conn, err
		},
		ResponseHeaderTimeout: responseHeaderTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}}
}

// serveProxy serves execdapi.ProxyPath + "PORT/PATH": the request as it came, with its query,
// to http://localhost:PORT/PATH. WebSocket and other upgrades pass through.
func (h *Handler) serveProxy(w http.ResponseWriter, req *http.Request) {
	if _, code, msg := h.sandboxOf(req); code != 0 {
		http.Error(w, msg, code)
		return
	}
	// The escaped path, so that what the client encoded reaches the server encoded.
	rest := strings.TrimPrefix(req.URL.EscapedPath(), execdapi.ProxyPath)
	portStr, rawPath, _ := strings.Cut(rest, "/")
	port, err := strconv.Atoi(portStr)
	if err == nil {
		err = execdapi.ValidatePort(port)
	} else {
		err = errors.New("the proxy path must start with a port number")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path, err := url.PathUnescape("/" + rawPath)
	if err != nil {
		http.Error(w, "invalid path: "+err.Error(), http.StatusBadRequest)
		return
	}
	host := net.JoinHostPort("localhost", strconv.Itoa(port))
	rp := &httputil.ReverseProxy{
		// Rewrite, not Director: no X-Forwarded-* headers are added, and hop-by-hop headers
		// are removed before it runs.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: host, Path: path, RawPath: "/" + rawPath, RawQuery: req.URL.RawQuery}
			pr.Out.Host = host
			pr.Out.Header.Del(execdapi.SandboxUIDHeader)
		},
		Transport:     h.proxy.transport,
		FlushInterval: -1, // stream: event streams and chunked answers go out as they come
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			klog.V(2).InfoS("Proxy to a local server failed", "port", port, "err", err)
			code := http.StatusBadGateway
			var netErr net.Error
			if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout() {
				code = http.StatusGatewayTimeout
			}
			http.Error(w, "no answer from port "+portStr+" in the sandbox: "+err.Error(), code)
		},
	}
	rp.ServeHTTP(w, req)
}
