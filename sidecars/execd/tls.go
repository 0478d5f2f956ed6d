package execd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/atomicfile"
)

// Files of the state directory.
const (
	stateKeyFile  = "tls.key"
	stateCertFile = "tls.crt"
)

// ServerIdentity is what execd proves to its clients: its key, made when the pod's first
// container started and kept in the state directory so that a restarted container has it
// still, and the certificate sandbox-controller issued for it. Until then it serves a
// self-signed certificate that only the controller, which certifies it, accepts to talk to.
type ServerIdentity struct {
	key       *ecdsa.PrivateKey
	stateDir  string
	clientCAs *x509.CertPool
	// isServerName says whether a certificate's DNS name is one this server may serve.
	isServerName func(string) bool

	mu        sync.RWMutex
	cert      *tls.Certificate
	certified *x509.Certificate // nil until certified
}

// NewServerIdentity loads execd's key and certificate from stateDir ("": keep them in memory
// only), or makes a key; clientCAs are the CAs whose clients it accepts, and whose certificate
// for it it serves once certified.
func NewServerIdentity(stateDir string, clientCAs *x509.CertPool) (*ServerIdentity, error) {
	if clientCAs == nil {
		return nil, errors.New("no client CA: only clients with a certificate of the kube-sandbox CA are accepted")
	}
	return newServerIdentity(stateDir, clientCAs, isPodServerName, time.Now())
}

func isPodServerName(name string) bool {
	_, ok := execdapi.PodUIDFromServerName(name)
	return ok
}

// newServerIdentity loads the key and certificate from stateDir ("": keep them in memory only),
// or makes a key.
func newServerIdentity(stateDir string, clientCAs *x509.CertPool, isServerName func(string) bool, now time.Time) (*ServerIdentity, error) {
	id := &ServerIdentity{stateDir: stateDir, clientCAs: clientCAs, isServerName: isServerName}
	if stateDir != "" {
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return nil, fmt.Errorf("state directory: %w", err)
		}
		if data, err := os.ReadFile(filepath.Join(stateDir, stateKeyFile)); err == nil {
			if block, _ := pem.Decode(data); block != nil {
				if key, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
					id.key = key
				}
			}
			if id.key == nil {
				klog.InfoS("Ignoring an unreadable key in the state directory; making a new one", "dir", stateDir)
			}
		}
	}
	if id.key == nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		id.key = key
		if stateDir != "" {
			der, err := x509.MarshalECPrivateKey(key)
			if err != nil {
				return nil, err
			}
			if err := atomicfile.Write(filepath.Join(stateDir, stateKeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err != nil {
				return nil, fmt.Errorf("keep the key: %w", err)
			}
		}
	}
	if stateDir != "" {
		if chain, err := os.ReadFile(filepath.Join(stateDir, stateCertFile)); err == nil {
			if _, err := id.install(chain, now); err != nil {
				klog.InfoS("Ignoring the certificate in the state directory", "err", err)
			} else {
				klog.InfoS("Serving the certificate kept from before the container restarted", "serverName", id.certified.DNSNames)
			}
		}
	}
	if id.cert == nil {
		cert, err := selfSigned(id.key, now)
		if err != nil {
			return nil, err
		}
		id.cert = cert
	}
	return id, nil
}

// selfSigned is the certificate execd serves until it is certified; nobody but the
// controller, which does not verify it, talks to execd over it.
func selfSigned(key *ecdsa.PrivateKey, now time.Time) (*tls.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sandbox-execd (not certified yet)"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// getCertificate implements tls.Config's GetCertificate.
func (id *ServerIdentity) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.cert, nil
}

// Certified reports whether the controller certified this execd.
func (id *ServerIdentity) Certified() bool {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.certified != nil
}

// Install is install at the current time.
func (id *ServerIdentity) Install(chainPEM []byte) (*x509.Certificate, error) {
	return id.install(chainPEM, time.Now())
}

// install checks a certificate chain (PEM) for execd's key and serves it: the leaf must be
// for this key, for server authentication, for a pod's server name, valid now, and chain to
// the kube-sandbox CA. It keeps it in the state directory.
func (id *ServerIdentity) install(chainPEM []byte, now time.Time) (*x509.Certificate, error) {
	certs, err := parseCertificates(chainPEM)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	raw := make([][]byte, len(certs))
	for i, c := range certs {
		raw[i] = c.Raw
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate in the chain")
	}
	leaf := certs[0]
	if !id.key.PublicKey.Equal(leaf.PublicKey) {
		return nil, errors.New("the certificate is not for this execd's key")
	}
	if len(leaf.DNSNames) != 1 {
		return nil, fmt.Errorf("the certificate names %d DNS names, want one pod server name", len(leaf.DNSNames))
	}
	if !id.isServerName(leaf.DNSNames[0]) {
		return nil, fmt.Errorf("the certificate's name %q is not a server name of this server", leaf.DNSNames[0])
	}
	intermediates := x509.NewCertPool()
	for _, c := range certs[1:] {
		intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: id.clientCAs, Intermediates: intermediates, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSName: leaf.DNSNames[0],
	}); err != nil {
		return nil, fmt.Errorf("the certificate does not verify against the kube-sandbox CA: %w", err)
	}
	if id.stateDir != "" {
		if err := atomicfile.Write(filepath.Join(id.stateDir, stateCertFile), chainPEM); err != nil {
			return nil, fmt.Errorf("keep the certificate: %w", err)
		}
	}
	id.mu.Lock()
	id.cert = &tls.Certificate{Certificate: raw, PrivateKey: id.key, Leaf: leaf}
	id.certified = leaf
	id.mu.Unlock()
	return leaf, nil
}

// TLSConfig is the configuration of execd's port: it serves this identity and requires a client
// certificate of the client CAs from every client, so that nothing reaches a handler without
// one.
func (id *ServerIdentity) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		NextProtos:     []string{"http/1.1"},
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      id.clientCAs,
		GetCertificate: id.getCertificate,
	}
}

// ParseClientCAs parses the PEM certificates of the kube-sandbox CA (execdapi.EnvClientCA).
func ParseClientCAs(pemData []byte) (*x509.CertPool, error) {
	certs, err := parseCertificates(pemData)
	if err != nil {
		return nil, fmt.Errorf("parse client CA: %w", err)
	}
	if len(certs) == 0 {
		return nil, errors.New("no CA certificate in the client CA PEM")
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		if !c.IsCA {
			return nil, fmt.Errorf("client CA %q is not a CA certificate", c.Subject.CommonName)
		}
		pool.AddCert(c)
	}
	return pool, nil
}

// parseCertificates parses the CERTIFICATE blocks of pemData, in order, and skips others.
func parseCertificates(pemData []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := pemData; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return certs, nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
}
