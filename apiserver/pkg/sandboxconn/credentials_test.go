package sandboxconn

import (
	"crypto/tls"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

type countingListener struct{ n int }

func (l *countingListener) Enqueue() { l.n++ }

func keyPairSecret(t *testing.T, current, previous *pki.CA) *corev1.Secret {
	t.Helper()
	issue := func(ca *pki.CA) ([]byte, []byte) {
		key, _ := pki.GenerateKey()
		cert, err := ca.Issue(pki.Leaf{CommonName: execdapi.APIServerIdentity, DNSNames: []string{"sandbox-apiserver.ns.svc"},
			ServerAuth: true, ClientAuth: true, Lifetime: time.Hour}, &key.PublicKey, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, _ := pki.EncodeKey(key)
		return pki.EncodeCerts(cert, ca.Cert), keyPEM
	}
	s := &corev1.Secret{Data: map[string][]byte{}}
	s.Data[pki.SecretCertKey], s.Data[pki.SecretKeyKey] = issue(current)
	s.Data[pki.SecretCAKey] = pki.EncodeCerts(current.Cert)
	if previous != nil {
		s.Data[pki.SecretPreviousCertKey], s.Data[pki.SecretPreviousKeyKey] = issue(previous)
		s.Data[pki.SecretCAKey] = pki.EncodeCerts(current.Cert, previous.Cert)
	}
	return s
}

func TestCredentials(t *testing.T) {
	c, err := NewCredentials("ns", "sandbox-apiserver-tls")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetClientCertificate(nil); err == nil || c.RootCAs() != nil {
		t.Error("credentials before the Secret was read")
	}
	selfSigned, _ := c.CurrentCertKeyContent()
	if len(selfSigned) == 0 {
		t.Fatal("no serving certificate before the Secret: the server could not start")
	}
	l := &countingListener{}
	c.AddListener(l)

	current, _ := pki.NewCA("current", time.Now(), time.Hour)
	previous, _ := pki.NewCA("previous", time.Now(), time.Hour)
	secret := keyPairSecret(t, current, previous)
	c.update(secret)
	if l.n != 1 {
		t.Errorf("listener told %d times, want once: the serving certificate changed", l.n)
	}
	served, _ := c.CurrentCertKeyContent()
	if string(served) != string(secret.Data[pki.SecretCertKey]) {
		t.Error("not serving the Secret's certificate")
	}
	for name, ca := range map[string]*pki.CA{"current": current, "previous": previous} {
		cert, err := c.GetClientCertificate(&tls.CertificateRequestInfo{AcceptableCAs: [][]byte{ca.Cert.RawSubject}, Version: tls.VersionTLS13,
			SignatureSchemes: []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256}})
		if err != nil || cert.Leaf.CheckSignatureFrom(ca.Cert) != nil {
			t.Errorf("a pod trusting the %s CA gets a certificate not from it (%v)", name, err)
		}
	}
	if c.RootCAs() == nil {
		t.Error("no roots")
	}
	// The same Secret again tells nobody and keeps the roots (execd connections stay); a
	// broken one is ignored and the last good kept.
	roots := c.RootCAs()
	c.update(secret.DeepCopy())
	if c.RootCAs() != roots {
		t.Error("the same CA bundle made new roots")
	}
	c.update(&corev1.Secret{Data: map[string][]byte{pki.SecretCertKey: []byte("junk")}})
	if l.n != 1 {
		t.Errorf("listener told %d times, want once", l.n)
	}
	if served, _ := c.CurrentCertKeyContent(); string(served) != string(secret.Data[pki.SecretCertKey]) {
		t.Error("a broken Secret replaced the good certificate")
	}
}
