// Package execdclient reaches the execd of a sandbox pod the way execdapi describes: HTTP/1.1
// over mutual TLS, with a client certificate of the kube-sandbox CA, verifying that the server
// is the execd of the very pod meant (its certificate names execdapi.PodServerName of the pod's
// UID). sandbox-apiserver and sandbox-controller use it.
//
// A URL of this package names the pod, not its IP: its host is PodServerName(uid). The
// transport dials the IP of the Target in the request's context, which must name the same pod,
// and never resolves the name: a request without a Target fails.
package execdclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// Credentials are what a component presents to execd and what it trusts.
type Credentials interface {
	// GetClientCertificate picks the client certificate for a handshake (tls.Config's).
	GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error)
	// RootCAs are the CAs that issue pod certificates; nil until they are known.
	RootCAs() *x509.CertPool
}

// Target is the pod a request is for.
type Target struct {
	// PodIP is where its execd listens.
	PodIP string
	// PodUID is what its certificate must name.
	PodUID string
	// Port overrides execdapi.Port (tests).
	Port int
}

func (t Target) port() int {
	if t.Port != 0 {
		return t.Port
	}
	return execdapi.Port
}

type targetKey struct{}

// WithTarget returns a context whose requests go to t.
func WithTarget(ctx context.Context, t Target) context.Context {
	return context.WithValue(ctx, targetKey{}, t)
}

// TargetFrom returns the Target of ctx.
func TargetFrom(ctx context.Context) (Target, bool) {
	t, ok := ctx.Value(targetKey{}).(Target)
	return t, ok
}

// URL is the URL of path (and rawQuery, as it is) on the execd of t.
func URL(t Target, path, rawQuery string) *url.URL {
	return &url.URL{
		Scheme:   "https",
		Host:     net.JoinHostPort(execdapi.PodServerName(t.PodUID), strconv.Itoa(t.port())),
		Path:     path,
		RawQuery: rawQuery,
	}
}

// ErrNoTarget: a request reached the transport without a Target for its pod.
var ErrNoTarget = errors.New("no pod target for this execd request")

// dialTimeout bounds connecting to a pod: it is on the cluster network, a few hops away at most.
const dialTimeout = 5 * time.Second

var dialer = &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}

// dialPod dials the Target of ctx, after checking that it is the pod addr names.
func dialPod(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	uid, ok := execdapi.PodUIDFromServerName(host)
	if !ok {
		return nil, fmt.Errorf("server address %q does not name a pod", addr)
	}
	t, ok := TargetFrom(ctx)
	if !ok {
		return nil, ErrNoTarget
	}
	if t.PodUID != uid || strconv.Itoa(t.port()) != port {
		return nil, fmt.Errorf("server address %q is not that of the request's pod %s", addr, t.PodUID)
	}
	return dialer.DialContext(ctx, network, net.JoinHostPort(t.PodIP, port))
}

// Options tune a Transport.
type Options struct {
	// ResponseHeaderTimeout bounds the wait for the response headers after the request was
	// written (0: none), so that a sandbox that never answers cannot pin a request.
	ResponseHeaderTimeout time.Duration
	// MaxIdleConnsPerHost (per pod); 0: 2.
	MaxIdleConnsPerHost int
}

// Transport is an http.RoundTripper to execd. Its http.Transport is remade when the trusted CAs
// change (the CA rotated); Current gives the one to use now, for the upgrade paths that need
// an *http.Transport.
type Transport struct {
	creds Credentials
	opts  Options

	mu      sync.Mutex
	roots   *x509.CertPool
	current *http.Transport
}

// NewTransport returns a Transport presenting and trusting creds.
func NewTransport(creds Credentials, opts Options) *Transport {
	return &Transport{creds: creds, opts: opts}
}

var _ http.RoundTripper = &Transport{}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tr, err := t.Current()
	if err != nil {
		return nil, err
	}
	return tr.RoundTrip(req)
}

// ErrNoTrust: the CAs of pod certificates are not known yet.
var ErrNoTrust = errors.New("the kube-sandbox CA is not known yet")

// Current is the http.Transport for the CAs trusted now.
func (t *Transport) Current() (*http.Transport, error) {
	roots := t.creds.RootCAs()
	if roots == nil {
		return nil, ErrNoTrust
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.current != nil && t.roots == roots {
		return t.current, nil
	}
	if t.current != nil {
		t.current.CloseIdleConnections()
	}
	perHost := t.opts.MaxIdleConnsPerHost
	if perHost == 0 {
		perHost = 2
	}
	t.roots = roots
	t.current = &http.Transport{
		// Pod IPs, never through a proxy from the environment.
		Proxy:                 nil,
		DialContext:           dialPod,
		TLSClientConfig:       ClientTLSConfig(t.creds, roots),
		TLSHandshakeTimeout:   dialTimeout,
		ResponseHeaderTimeout: t.opts.ResponseHeaderTimeout,
		MaxIdleConnsPerHost:   perHost,
		IdleConnTimeout:       90 * time.Second,
		// execd speaks HTTP/1.1 only: SPDY and WebSocket upgrades do not exist in HTTP/2.
		ForceAttemptHTTP2: false,
	}
	return t.current, nil
}

// ClientTLSConfig verifies servers against roots and the server name (PodServerName of the
// URL's pod), and presents creds' client certificate.
func ClientTLSConfig(creds Credentials, roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		RootCAs:              roots,
		GetClientCertificate: creds.GetClientCertificate,
		MinVersion:           tls.VersionTLS13,
		NextProtos:           []string{"http/1.1"},
	}
}

// Probe reports whether the execd of t presents a valid certificate for its pod, with one TLS
// handshake and nothing else.
func Probe(ctx context.Context, creds Credentials, t Target) error {
	roots := creds.RootCAs()
	if roots == nil {
		return ErrNoTrust
	}
	ctx, cancel := context.WithTimeout(WithTarget(ctx, t), dialTimeout)
	defer cancel()
	conn, err := dialPod(ctx, "tcp", net.JoinHostPort(execdapi.PodServerName(t.PodUID), strconv.Itoa(t.port())))
	if err != nil {
		return err
	}
	cfg := ClientTLSConfig(creds, roots)
	cfg.ServerName = execdapi.PodServerName(t.PodUID)
	tc := tls.Client(conn, cfg)
	defer func() { _ = tc.Close() }()
	return tc.HandshakeContext(ctx)
}

// DialUnverified opens a TLS connection to the execd at podIP without verifying its certificate,
// presenting creds' client certificate, and returns it with the server's leaf certificate. Only
// certification uses it: the key it sees is the one it is about to certify, once the pod
// proved its identity over this very connection.
func DialUnverified(ctx context.Context, creds Credentials, podIP string, port int) (*tls.Conn, *x509.Certificate, error) {
	if port == 0 {
		port = execdapi.Port
	}
	conn, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(podIP, strconv.Itoa(port)))
	if err != nil {
		return nil, nil, err
	}
	cfg := ClientTLSConfig(creds, nil)
	// The server's certificate is what is being certified; the TokenReview of what it sends
	// over this connection decides whether it is the pod meant.
	cfg.InsecureSkipVerify = true //nolint:gosec
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	peers := tc.ConnectionState().PeerCertificates
	if len(peers) == 0 {
		_ = tc.Close()
		return nil, nil, errors.New("execd presented no certificate")
	}
	return tc, peers[0], nil
}
