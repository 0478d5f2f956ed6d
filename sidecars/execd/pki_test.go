package execd

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// Client identities of the tests: the two components, a certificate of the kube-sandbox CA
// for nobody execd knows, and one of another CA.
const (
	asAPIServer  = execdapi.APIServerIdentity
	asController = execdapi.ControllerIdentity
	asSomeone    = "kube-sandbox:someone-else"
	asStranger   = "stranger" // a certificate from another CA
	asNobody     = "nobody"   // no certificate at all
)

// testPKI is a real kube-sandbox CA for the tests, made once: what the controller makes.
type testPKI struct {
	ca, other *pki.CA
	pem       []byte
	pool      *x509.CertPool

	mu    sync.Mutex
	certs map[string]tls.Certificate
}

var testCA = sync.OnceValue(func() *testPKI {
	now := time.Now()
	ca, err := pki.NewCA("test-ca", now, time.Hour)
	if err != nil {
		panic(err)
	}
	other, err := pki.NewCA("other-ca", now, time.Hour)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &testPKI{ca: ca, other: other, pem: pki.EncodeCerts(ca.Cert), pool: pool, certs: map[string]tls.Certificate{}}
})

// client is the client certificate of identity.
func (p *testPKI) client(identity string) (tls.Certificate, bool) {
	if identity == asNobody {
		return tls.Certificate{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.certs[identity]; ok {
		return c, true
	}
	ca, cn := p.ca, identity
	if identity == asStranger {
		ca, cn = p.other, asAPIServer
	}
	key, err := pki.GenerateKey()
	if err != nil {
		panic(err)
	}
	cert, err := ca.Issue(pki.Leaf{CommonName: cn, ClientAuth: true, Lifetime: time.Hour}, &key.PublicKey, time.Now())
	if err != nil {
		panic(err)
	}
	c := tls.Certificate{Certificate: [][]byte{cert.Raw, ca.Cert.Raw}, PrivateKey: key, Leaf: cert}
	p.certs[identity] = c
	return c, true
}

// clientTLS is a client configuration presenting identity's certificate. It does not verify
// the server: an uncertified execd serves a self-signed certificate (TestIdentity verifies).
func clientTLS(_ testing.TB, identity string) *tls.Config {
	cfg := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}} //nolint:gosec
	if c, ok := testCA().client(identity); ok {
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

// httpClient is an HTTP client of execd as identity. As sandbox-apiserver, it names the
// sandbox its requests are for (nameSandbox).
func httpClient(t testing.TB, identity string) *http.Client {
	return &http.Client{Transport: nameSandbox(&http.Transport{TLSClientConfig: clientTLS(t, identity)})}
}

// nameSandbox names testSandbox in the requests of rt that name none, as sandbox-apiserver
// names the sandbox of every request it sends.
func nameSandbox(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Header.Get(execdapi.SandboxUIDHeader) == "" {
			req = req.Clone(req.Context())
			req.Header.Set(execdapi.SandboxUIDHeader, testSandbox.UID)
		}
		return rt.RoundTrip(req)
	})
}

// restConfigFor is a client-go configuration reaching execd at baseURL as identity.
func restConfigFor(baseURL, identity string) *rest.Config {
	cfg := &rest.Config{Host: baseURL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, WrapTransport: nameSandbox}
	if c, ok := testCA().client(identity); ok {
		cfg.TLSClientConfig.CertData = pki.EncodeCerts(c.Leaf)
		keyPEM, err := pki.EncodeKey(c.PrivateKey.(crypto.Signer))
		if err != nil {
			panic(err)
		}
		cfg.TLSClientConfig.KeyData = keyPEM
	}
	return cfg
}

// newTestIdentity is an execd identity trusting the test CA, kept in memory.
func newTestIdentity(t testing.TB) *ServerIdentity {
	t.Helper()
	id, err := NewServerIdentity("", testCA().pool)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// serveTLS serves h over TLS as execd does (client certificates required).
func serveTLS(t testing.TB, h http.Handler, id *ServerIdentity) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	// Not StartTLS: it would add a certificate of its own, which Go serves instead of
	// GetCertificate's to clients that send no server name.
	srv.Listener = tls.NewListener(srv.Listener, id.TLSConfig())
	srv.Start()
	srv.URL = "https://" + srv.Listener.Addr().String()
	t.Cleanup(srv.Close)
	return srv
}

// testSandbox is the sandbox the tests' execd belongs to.
var testSandbox = &Sandbox{UID: "sandbox-uid-1", Namespace: "ns", Name: "demo"}

// execURL returns the exec URL for running command with the given streams on the execd at
// baseURL.
func execURL(baseURL string, command []string, streams remotecommand.Options) (*url.URL, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, err
	}
	u = u.JoinPath(execdapi.ExecPath)
	q := url.Values{}
	for _, arg := range command {
		q.Add(execdapi.ExecCommandParam, arg)
	}
	for param, on := range map[string]bool{
		remotecommand.ExecStdinParam:  streams.Stdin,
		remotecommand.ExecStdoutParam: streams.Stdout,
		remotecommand.ExecStderrParam: streams.Stderr,
		remotecommand.ExecTTYParam:    streams.TTY,
	} {
		if on {
			q.Set(param, "1")
		}
	}
	u.RawQuery = q.Encode()
	return u, nil
}
