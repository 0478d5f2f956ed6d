package pki

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

const (
	// clientCertLifetime of the controller's own client certificates, which live in its memory
	// only and are made again long before they expire.
	clientCertLifetime = 24 * time.Hour
	// podCertLifetime: a pod's serving certificate names its UID, which no other pod ever has,
	// so it is worthless once the pod is gone; it lives as long as the pod may, which is as
	// long as the CA that issued it.
	podCertLifetime = 100 * 365 * 24 * time.Hour
)

// ErrNotReady is returned until the Authority has a CA.
var ErrNotReady = errors.New("the kube-sandbox CA is not loaded yet")

// Authority is the kube-sandbox CA as this process holds it: it signs pod certificates, gives
// the controller its client certificates for execd (GetClientCertificate), and tells what
// execd must trust (Bundle) and what clients trust (RootCAs). The Reconciler keeps it current.
type Authority struct {
	clock clock.PassiveClock

	mu       sync.RWMutex
	current  *CA
	previous *CA
	bundle   []byte
	pool     *x509.CertPool
	// clients are the controller's client certificates, one per CA, made on first use.
	clients map[*CA]*tls.Certificate

	readyOnce sync.Once
	ready     chan struct{}
}

// NewAuthority returns an Authority without a CA; clk nil: the real clock.
func NewAuthority(clk clock.PassiveClock) *Authority {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Authority{clock: clk, ready: make(chan struct{})}
}

// Set makes current the CA that signs, and previous (nil: none) one that is still trusted.
func (a *Authority) Set(current, previous *CA) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current != nil && a.current.Cert.Equal(current.Cert) &&
		(a.previous == nil) == (previous == nil) && (previous == nil || a.previous.Cert.Equal(previous.Cert)) {
		return
	}
	a.current, a.previous = current, previous
	a.pool = x509.NewCertPool()
	certs := []*x509.Certificate{current.Cert}
	if previous != nil {
		certs = append(certs, previous.Cert)
	}
	for _, c := range certs {
		a.pool.AddCert(c)
	}
	a.bundle = EncodeCerts(certs...)
	a.clients = map[*CA]*tls.Certificate{}
	a.readyOnce.Do(func() { close(a.ready) })
}

// Wait blocks until the Authority has a CA or ctx ends.
func (a *Authority) Wait(ctx context.Context) error {
	select {
	case <-a.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotReady, context.Cause(ctx))
	}
}

// Bundle is the PEM of the CA certificates to trust: what execd gets as EnvClientCA.
func (a *Authority) Bundle() ([]byte, error) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.current == nil {
		return nil, ErrNotReady
	}
	return a.bundle, nil
}

// RootCAs implements execdclient.Credentials: pod certificates chain to these.
func (a *Authority) RootCAs() *x509.CertPool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.pool
}

// GetClientCertificate implements execdclient.Credentials: the controller's client certificate
// from the CA the server asks for (a pod made before the CA rotated trusts only the previous).
func (a *Authority) GetClientCertificate(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.current == nil {
		return nil, ErrNotReady
	}
	var first *tls.Certificate
	for _, ca := range []*CA{a.current, a.previous} {
		if ca == nil {
			continue
		}
		c, err := a.clientCertificate(ca)
		if err != nil {
			return nil, err
		}
		if first == nil {
			first = c
		}
		if cri == nil || cri.SupportsCertificate(c) == nil {
			return c, nil
		}
	}
	// None fits: the handshake fails on the server's side, which says why.
	return first, nil
}

func (a *Authority) clientCertificate(ca *CA) (*tls.Certificate, error) {
	now := a.clock.Now()
	if c, ok := a.clients[ca]; ok && now.Before(RenewalDue(c.Leaf.NotBefore, c.Leaf.NotAfter)) {
		return c, nil
	}
	key, err := GenerateKey()
	if err != nil {
		return nil, err
	}
	cert, err := ca.Issue(Leaf{CommonName: execdapi.ControllerIdentity, ClientAuth: true, Lifetime: clientCertLifetime}, &key.PublicKey, now)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{cert.Raw, ca.Cert.Raw}, PrivateKey: key, Leaf: cert}
	a.clients[ca] = c
	return c, nil
}

// IssuePodCertificate signs the serving certificate of the execd of a pod, for pub, the key
// execd proved it holds: the name execdapi.PodServerName(podUID) and, for people, the pod's
// namespace and name. It returns the certificate and its chain as PEM.
func (a *Authority) IssuePodCertificate(pub crypto.PublicKey, podUID, namespace, name string) ([]byte, *x509.Certificate, error) {
	return a.IssueServerCertificate(pub, execdapi.PodServerName(podUID), namespace, name)
}

// IssueServerCertificate is IssuePodCertificate for a server whose DNS name is dnsName, held
// by the pod namespace/name.
func (a *Authority) IssueServerCertificate(pub crypto.PublicKey, dnsName, namespace, name string) ([]byte, *x509.Certificate, error) {
	a.mu.RLock()
	ca := a.current
	a.mu.RUnlock()
	if ca == nil {
		return nil, nil, ErrNotReady
	}
	cert, err := ca.Issue(Leaf{
		CommonName: "pod:" + namespace + "/" + name,
		DNSNames:   []string{dnsName},
		ServerAuth: true,
		Lifetime:   podCertLifetime,
	}, pub, a.clock.Now())
	if err != nil {
		return nil, nil, err
	}
	return EncodeCerts(cert, ca.Cert), cert, nil
}
