package execd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/httpjson"
)

const (
	// maxPodTokenBytes bounds the projected token execd reads: a JWT of a few kilobytes.
	maxPodTokenBytes = 64 << 10
	// maxCertificateRequestBytes bounds a CertificateRequest: a chain of two certificates.
	maxCertificateRequestBytes = 64 << 10
)

// serveIdentity answers GET execdapi.IdentityPath (sandbox-controller only) with the pod's
// projected token, over the connection whose server key the controller is about to certify.
func (h *Handler) serveIdentity(w http.ResponseWriter, req *http.Request) {
	if !h.allow(w, req, execdapi.ControllerIdentity) {
		return
	}
	if h.identityTokenFile == "" {
		http.Error(w, "sandbox-execd has no identity token file", http.StatusServiceUnavailable)
		return
	}
	token, err := readPodToken(h.identityTokenFile)
	if err != nil {
		// The kubelet writes the token before the container starts; without it the pod cannot
		// prove who it is, and stays uncertified.
		klog.ErrorS(err, "Reading the pod's identity token")
		http.Error(w, "the pod's identity token is not readable: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	httpjson.Write(w, http.StatusOK, &execdapi.IdentityResponse{PodToken: token})
}

func readPodToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxPodTokenBytes+1))
	if err != nil {
		return "", err
	}
	if len(data) > maxPodTokenBytes {
		return "", fmt.Errorf("longer than %d bytes", maxPodTokenBytes)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", errors.New("empty")
	}
	return token, nil
}

// serveCertificate takes PUT execdapi.IdentityPath (sandbox-controller only): the serving
// certificate the controller issued for execd's key. execd serves it from the next handshake on.
func (h *Handler) serveCertificate(w http.ResponseWriter, req *http.Request) {
	if !h.allow(w, req, execdapi.ControllerIdentity) {
		return
	}
	cr := &execdapi.CertificateRequest{}
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxCertificateRequestBytes))
	if err := dec.Decode(cr); err != nil {
		http.Error(w, "the body is not a certificate request: "+err.Error(), http.StatusBadRequest)
		return
	}
	leaf, err := h.identity.install([]byte(cr.CertificateChain), h.clock.Now())
	if err != nil {
		klog.InfoS("Refused a certificate", "err", err)
		http.Error(w, "refused the certificate: "+err.Error(), http.StatusBadRequest)
		return
	}
	klog.InfoS("Certified: serving the pod's own certificate", "serverName", leaf.DNSNames[0], "subject", leaf.Subject.CommonName, "notAfter", leaf.NotAfter)
	httpjson.Write(w, http.StatusOK, &execdapi.CertificateResponse{
		ServerName: leaf.DNSNames[0], NotAfter: leaf.NotAfter.UTC().Format(time.RFC3339),
	})
}
