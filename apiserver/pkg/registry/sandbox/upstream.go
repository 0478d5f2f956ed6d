package sandbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/sandboxconn"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// callerHeaders name the caller or carry its credentials; none of them reaches a sandbox.
var callerHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Forwarded", "X-Real-Ip"}

// callerHeaderPrefixes: the aggregator's identity headers (X-Remote-User, -Group, -Extra-*),
// impersonation, and what proxies say about the client (X-Forwarded-For, -Host, -Proto...).
var callerHeaderPrefixes = []string{"Impersonate-", "X-Remote-", "X-Forwarded-"}

// stripCallerHeaders removes what names the caller from h, whatever case its keys are in (a
// hand-made request may not canonicalize them).
func stripCallerHeaders(h http.Header) {
	for k := range h {
		ck := http.CanonicalHeaderKey(k)
		drop := false
		for _, name := range callerHeaders {
			drop = drop || ck == name
		}
		for _, p := range callerHeaderPrefixes {
			drop = drop || strings.HasPrefix(ck, p)
		}
		if drop {
			delete(h, k)
		}
	}
}

// toPod prepares a request for the execd of ep: its context names the pod the transport dials
// and verifies, and the caller's headers are gone.
func toPod(req *http.Request, ep *sandboxconn.Endpoint) *http.Request {
	req = req.WithContext(execdclient.WithTarget(req.Context(), ep.Target))
	stripCallerHeaders(req.Header)
	return req
}

// rewriteTo is the Rewrite of a reverse proxy to location on the execd of ep: execd learns
// which sandbox the request is for. It is set on the outgoing request, after the proxy removed
// the hop-by-hop headers, so that a caller cannot have it removed (Connection: <name>).
func rewriteTo(location *url.URL, ep *sandboxconn.Endpoint) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		pr.Out.URL = location
		pr.Out.Host = ""
		pr.Out.Header.Set(execdapi.SandboxUIDHeader, string(ep.Sandbox.UID))
	}
}

// upstreamError turns a failure to reach a sandbox's execd into the error its caller sees.
func upstreamError(ep *sandboxconn.Endpoint, err error) error {
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var certInvalid x509.CertificateInvalidError
	var netErr net.Error
	var recordErr tls.RecordHeaderError
	switch {
	case errors.Is(err, execdclient.ErrNoTrust), errors.Is(err, sandboxconn.ErrNoCertificate):
		return apierrors.NewServiceUnavailable("sandbox-apiserver cannot reach sandbox pods yet: " + err.Error())
	case errors.As(err, &unknownAuthority), errors.As(err, &hostname), errors.As(err, &certInvalid), errors.As(err, &recordErr):
		// Not (yet) certified for this pod, or not the pod at all: nothing goes there.
		return apierrors.NewServiceUnavailable(fmt.Sprintf("the execd of pod %s did not prove to be that pod's: %v", ep.Pod, err))
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return apierrors.NewTimeoutError(fmt.Sprintf("pod %s did not answer in time", ep.Pod), 0)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusBadGateway, Reason: metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("cannot reach the execd of pod %s: %v", ep.Pod, err),
	}}
}
