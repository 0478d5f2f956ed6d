package execdapi

// IdentityResponse answers GET IdentityPath: what proves to sandbox-controller which pod this
// execd runs in. The controller asks over the TLS connection whose (self-signed) server key it
// is about to certify, so the token and the key come from the same execd.
type IdentityResponse struct {
	// PodToken is the service account token the kubelet projected into the pod, for
	// IdentityAudience and bound to the pod: a TokenReview names the pod and its UID.
	PodToken string `json:"podToken"`
}

// CertificateRequest is the body of PUT IdentityPath: the serving certificate the controller
// issued for execd's key, for the name PodServerName(pod UID), and the certificates between it
// and the kube-sandbox CA, all PEM. execd refuses (400) a certificate for another key, one
// that is not for server authentication, or one that is not valid now.
type CertificateRequest struct {
	CertificateChain string `json:"certificateChain"`
}

// CertificateResponse answers a CertificateRequest that execd took.
type CertificateResponse struct {
	// ServerName is the DNS name of the certificate execd now serves.
	ServerName string `json:"serverName"`
	// NotAfter is when it expires, RFC 3339.
	NotAfter string `json:"notAfter"`
}
