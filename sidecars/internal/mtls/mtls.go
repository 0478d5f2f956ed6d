// Package mtls holds what every sidecar's mutual-TLS port needs to know of a request: who the
// verified client is. The TLS layer verifies the certificate; handlers decide by this name.
package mtls

import "net/http"

// ClientIdentity is the common name of the verified client certificate of req, "" without
// one (plain HTTP, or a TLS connection whose client sent no certificate).
func ClientIdentity(req *http.Request) string {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return ""
	}
	return req.TLS.VerifiedChains[0][0].Subject.CommonName
}
