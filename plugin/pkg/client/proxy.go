package client

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
)

// NewTransport returns a transport to config's server with its credentials, limited to
// HTTP/1.1: an upgrade (WebSocket) cannot pass over HTTP/2, and the API server proxies it only
// over HTTP/1.1.
func NewTransport(config *rest.Config) (http.RoundTripper, error) {
	config = rest.CopyConfig(config)
	config.NextProtos = []string{"http/1.1"}
	rt, err := rest.TransportFor(config)
	if err != nil {
		return nil, fmt.Errorf("create transport: %w", err)
	}
	return rt, nil
}

// ProxyURL is the URL through the API server of path on port of a replica of sandbox name:
// .../sandboxes/NAME/proxy/[REPLICA:]PORT/PATH.
func (c *Client) ProxyURL(name string, replica int32, port uint16, path string) *url.URL {
	target := strconv.Itoa(int(port))
	if replica != 0 {
		target = strconv.Itoa(int(replica)) + ":" + target
	}
	u := c.subresource("GET", name, "proxy").URL()
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + target + "/" + strings.TrimPrefix(path, "/")
	return u
}

// ProxyTransport is an http.RoundTripper to port of a replica of sandbox name: a request's path
// and query are sent to that port, through the API server, with the client's credentials. The
// request's scheme and host are ignored, so "http://sandbox/healthz" reaches /healthz.
// WebSocket upgrades pass.
func (c *Client) ProxyTransport(name string, replica int32, port uint16) (http.RoundTripper, error) {
	rt, err := NewTransport(c.config)
	if err != nil {
		return nil, err
	}
	return &proxyTransport{next: rt, base: c.ProxyURL(name, replica, port, "")}, nil
}

// ProxyClient is an http.Client on ProxyTransport.
func (c *Client) ProxyClient(name string, replica int32, port uint16) (*http.Client, error) {
	rt, err := c.ProxyTransport(name, replica, port)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: rt}, nil
}

type proxyTransport struct {
	next http.RoundTripper
	base *url.URL
}

// RoundTrip implements http.RoundTripper: it sends a copy of req to the proxy URL.
func (t *proxyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	u := *t.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + strings.TrimPrefix(req.URL.Path, "/")
	u.RawPath = ""
	u.RawQuery = req.URL.RawQuery
	out.URL = &u
	out.Host = ""
	return t.next.RoundTrip(out)
}
