package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"testing"
)

func TestClientIdentity(t *testing.T) {
	cert := func(cn string) *x509.Certificate { return &x509.Certificate{Subject: pkix.Name{CommonName: cn}} }
	for _, tc := range []struct {
		name string
		tls  *tls.ConnectionState
		want string
	}{
		{"plain HTTP", nil, ""},
		{"no client certificate", &tls.ConnectionState{}, ""},
		{"an empty chain", &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{}}}, ""},
		// Only a verified chain counts: a certificate the client sent but nobody verified is not an identity.
		{"unverified", &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert("sandbox-controller")}}, ""},
		{"verified leaf", &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert("sandbox-apiserver"), cert("kube-sandbox CA")}}}, "sandbox-apiserver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClientIdentity(&http.Request{TLS: tc.tls}); got != tc.want {
				t.Errorf("ClientIdentity = %q, want %q", got, tc.want)
			}
		})
	}
}
