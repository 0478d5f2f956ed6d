package pki

import "time"

// Defaults of the names and lifetimes of the kube-sandbox PKI.
const (
	DefaultCASecret         = "kube-sandbox-ca"
	DefaultAPIServerSecret  = "sandbox-apiserver-tls"
	DefaultAPIServerService = "sandbox-apiserver"
	DefaultAPIService       = "v1alpha1.sandbox.kube-sandbox.io"
	// DefaultCALifetime: the CA's certificate is in every sandbox pod's spec, so it changes
	// rarely; it is replaced when a fifth of its life is left, and trusted next to its
	// successor until it expires.
	DefaultCALifetime = 10 * 365 * 24 * time.Hour
	// DefaultCertificateLifetime of sandbox-apiserver's certificate, renewed when a third of
	// its life is left.
	DefaultCertificateLifetime = 30 * 24 * time.Hour

	// DefaultNodeSecret is sandbox-node's Secret (the node agent).
	DefaultNodeSecret = "sandbox-node-tls"
	// NodeIdentity is the common name of sandbox-node's certificate.
	NodeIdentity = "kube-sandbox:sandbox-node"
)
