package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	certutil "k8s.io/client-go/util/cert"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

var start = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestIssue(t *testing.T) {
	ca, err := NewCA("ca", start, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := GenerateKey()
	cert, err := ca.Issue(Leaf{CommonName: "x", DNSNames: []string{"a.example"}, ServerAuth: true, ClientAuth: true, Lifetime: 48 * time.Hour}, &key.PublicKey, start)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("NotAfter %v, want capped at the CA's %v", cert.NotAfter, ca.Cert.NotAfter)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "a.example", CurrentTime: start, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("verify for %v: %v", usage, err)
		}
	}
	if _, err := ca.Issue(Leaf{CommonName: "x", Lifetime: time.Hour}, &key.PublicKey, start); err == nil {
		t.Error("a certificate for nothing was issued")
	}
}

func TestParse(t *testing.T) {
	ca, _ := NewCA("ca", start, time.Hour)
	other, _ := NewCA("other", start, time.Hour)
	keyPEM, _ := EncodeKey(ca.Key)
	otherKeyPEM, _ := EncodeKey(other.Key)
	if got, err := ParseCA(EncodeCerts(ca.Cert), keyPEM); err != nil || !got.Cert.Equal(ca.Cert) {
		t.Errorf("ParseCA: %v", err)
	}
	if _, err := ParseCA(EncodeCerts(ca.Cert), otherKeyPEM); err == nil {
		t.Error("ParseCA took another CA's key")
	}
	key, _ := GenerateKey()
	leaf, _ := ca.Issue(Leaf{CommonName: "leaf", ClientAuth: true, Lifetime: time.Hour}, &key.PublicKey, start)
	leafKey, _ := EncodeKey(key)
	if _, err := ParseCA(EncodeCerts(leaf), leafKey); err == nil {
		t.Error("ParseCA took a leaf certificate")
	}
	if certs, _, err := ParseKeyPair(EncodeCerts(leaf, ca.Cert), leafKey); err != nil || len(certs) != 2 {
		t.Errorf("ParseKeyPair: %v", err)
	}
	if _, _, err := ParseKeyPair(EncodeCerts(leaf), keyPEM); err == nil {
		t.Error("ParseKeyPair took another key")
	}
}

func TestAuthority(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(start)
	a := NewAuthority(clk)
	if _, err := a.Bundle(); err == nil {
		t.Error("Bundle() before a CA")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := a.Wait(ctx); err == nil {
		t.Error("Wait() returned before a CA")
	}
	current, _ := NewCA("current", start, 10*time.Hour)
	previous, _ := NewCA("previous", start.Add(-time.Hour), 10*time.Hour)
	a.Set(current, previous)
	if err := a.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	bundle, _ := a.Bundle()
	certs, _ := certutil.ParseCertsPEM(bundle)
	if len(certs) != 2 || !certs[0].Equal(current.Cert) || !certs[1].Equal(previous.Cert) {
		t.Errorf("bundle holds %d certificates, want the current CA then the previous", len(certs))
	}

	// A server that trusts only one of them gets a client certificate of that one.
	for name, ca := range map[string]*CA{"current": current, "previous": previous} {
		cri := &tls.CertificateRequestInfo{AcceptableCAs: [][]byte{ca.Cert.RawSubject}, Version: tls.VersionTLS13,
			SignatureSchemes: []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256}}
		c, err := a.GetClientCertificate(cri)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Leaf.CheckSignatureFrom(ca.Cert); err != nil || c.Leaf.Subject.CommonName != execdapi.ControllerIdentity {
			t.Errorf("a server trusting the %s CA got %q, not from it: %v", name, c.Leaf.Subject.CommonName, err)
		}
	}

	key, _ := GenerateKey()
	chain, cert, err := a.IssuePodCertificate(&key.PublicKey, "0f1e-uid", "ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{execdapi.PodServerName("0f1e-uid")}, cert.DNSNames); diff != "" {
		t.Errorf("pod certificate names (-want +got):\n%s", diff)
	}
	if parsed, _ := certutil.ParseCertsPEM(chain); len(parsed) != 2 || !parsed[1].Equal(current.Cert) {
		t.Error("the pod's chain does not end with the current CA")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: a.RootCAs(), DNSName: execdapi.PodServerName("0f1e-uid"), CurrentTime: start}); err != nil {
		t.Errorf("pod certificate does not verify for its pod: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: a.RootCAs(), DNSName: execdapi.PodServerName("other-uid"), CurrentTime: start}); err == nil {
		t.Error("pod certificate verifies for another pod")
	}
}
