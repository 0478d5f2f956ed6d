// Package pki is kube-sandbox's certificate authority: a CA in a Secret of sandbox-controller's
// namespace, bootstrapped and rotated by the controller (controller/pkg/certrotation) or
// provided by cert-manager, which issues the client certificates of sandbox-apiserver and
// sandbox-controller, sandbox-apiserver's and sandbox-node's serving certificates, and the
// serving certificate of every sandbox pod's execd, bound to the pod's UID
// (execdapi.PodServerName). Every component that holds or checks one of them imports it, and
// the names of its Secrets and their keys are here.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Keys of the Secrets this package reads and writes: the usual kubernetes.io/tls layout, as
// cert-manager writes it too, and a previous key pair while the CA rotates.
const (
	SecretCertKey = "tls.crt"
	SecretKeyKey  = "tls.key"
	// SecretCAKey holds the CA certificates to trust (the bundle): the current CA, and the
	// previous one until it expires.
	SecretCAKey = "ca.crt"
	// SecretPreviousCertKey and SecretPreviousKeyKey: in the CA Secret, the previous CA; in a
	// component's Secret, its client certificate of the previous CA, for pods that trust only
	// that one.
	SecretPreviousCertKey = "previous.crt"
	SecretPreviousKeyKey  = "previous.key"
)

// backdate: certificates are valid from a little before they were made, so that a clock a
// moment behind does not refuse them.
const backdate = 5 * time.Minute

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA makes a self-signed CA valid from now for lifetime.
func NewCA(commonName string, now time.Time, lifetime time.Duration) (*CA, error) {
	key, err := GenerateKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"kube-sandbox"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Leaf says what a certificate is for.
type Leaf struct {
	CommonName string
	DNSNames   []string
	ServerAuth bool
	ClientAuth bool
	// Lifetime from now; capped by the CA's own expiry.
	Lifetime time.Duration
}

// Issue signs a certificate of leaf for pub and returns it.
func (ca *CA) Issue(leaf Leaf, pub crypto.PublicKey, now time.Time) (*x509.Certificate, error) {
	if !leaf.ServerAuth && !leaf.ClientAuth {
		return nil, errors.New("a certificate must be for server or client authentication")
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leaf.Lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: leaf.CommonName, Organization: []string{"kube-sandbox"}},
		DNSNames:       leaf.DNSNames,
		NotBefore:      now.Add(-backdate),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		AuthorityKeyId: ca.Cert.SubjectKeyId,
	}
	if leaf.ServerAuth {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if leaf.ClientAuth {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", leaf.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

// GenerateKey makes a P-256 key: small certificates and fast handshakes, and what Go's TLS
// stack prefers.
func GenerateKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func keyID(pub *ecdsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(der)
	return sum[:20]
}

// EncodeCerts returns the certificates as PEM.
func EncodeCerts(certs ...*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: certutil.CertificateBlockType, Bytes: c.Raw})
	}
	return b.Bytes()
}

// EncodeKey returns a private key as PEM.
func EncodeKey(key crypto.Signer) ([]byte, error) {
	return keyutil.MarshalPrivateKeyToPEM(key)
}

// ParseCA reads a CA from PEM: the first certificate of certPEM and its key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key of type %T cannot sign", key)
	}
	ca := &CA{Cert: certs[0], Key: signer}
	if !ca.Cert.IsCA {
		return nil, fmt.Errorf("certificate %q is not a CA", ca.Cert.Subject.CommonName)
	}
	if !PublicKeysEqual(ca.Cert.PublicKey, signer.Public()) {
		return nil, fmt.Errorf("the key does not belong to CA certificate %q", ca.Cert.Subject.CommonName)
	}
	return ca, nil
}

// ParseKeyPair reads a leaf certificate (and its chain) and its key from PEM.
func ParseKeyPair(certPEM, keyPEM []byte) ([]*x509.Certificate, crypto.Signer, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, nil, err
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("key of type %T cannot sign", key)
	}
	if !PublicKeysEqual(certs[0].PublicKey, signer.Public()) {
		return nil, nil, errors.New("the key does not belong to the certificate")
	}
	return certs, signer, nil
}

func PublicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// RenewalDue is when a certificate valid from notBefore to notAfter should be replaced: once
// two thirds of its life have passed, as the kubelet renews its own.
func RenewalDue(notBefore, notAfter time.Time) time.Time {
	return notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)
}
