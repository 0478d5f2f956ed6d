package sandboxconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
)

// Credentials are sandbox-apiserver's certificate and the kube-sandbox CA, from the Secret that
// sandbox-controller (or cert-manager) keeps current, watched so that a renewed certificate or
// a rotated CA is used at once. They are the client certificate sandbox-apiserver presents to
// execd (execdclient.Credentials), the CAs it verifies pods against, and its serving
// certificate (dynamiccertificates.CertKeyContentProvider), which the APIService's caBundle
// verifies.
type Credentials struct {
	namespace, name string

	mu sync.RWMutex
	// clients: the current certificate (from tls.crt), then the previous CA's client
	// certificate while pods that trust only it remain.
	clients []*tls.Certificate
	// roots are the CAs of pod certificates, parsed from bundle (ca.crt).
	roots     *x509.CertPool
	bundle    []byte
	servePEM  [2][]byte // certificate and key served
	listeners []dynamiccertificates.Listener
	loaded    bool

	synced chan struct{}
	once   sync.Once
}

var (
	_ dynamiccertificates.CertKeyContentProvider = &Credentials{}
)

// NewCredentials returns Credentials from the Secret namespace/name. Until it is read (Start)
// they serve a self-signed certificate, which the aggregator does not trust: the APIService
// is unavailable rather than unverified.
func NewCredentials(namespace, name string) (*Credentials, error) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("sandbox-apiserver (no certificate yet)", nil, nil)
	if err != nil {
		return nil, err
	}
	return &Credentials{namespace: namespace, name: name, servePEM: [2][]byte{certPEM, keyPEM}, synced: make(chan struct{})}, nil
}

// Start watches the Secret until ctx ends, and waits up to wait for the first read.
func (c *Credentials) Start(ctx context.Context, kube kubernetes.Interface, wait time.Duration) {
	lw := cache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "secrets", c.namespace,
		fields.OneTermEqualSelector("metadata.name", c.name))
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Secret{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.update(obj) },
			UpdateFunc: func(_, obj any) { c.update(obj) },
		},
	})
	go informer.RunWithContext(ctx)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-c.synced:
	case <-timer.C:
		klog.InfoS("No certificate for sandbox-apiserver yet; serving a self-signed one until it comes", "secret", c.namespace+"/"+c.name)
	case <-ctx.Done():
	}
}

func (c *Credentials) update(obj any) {
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	if err := c.load(secret); err != nil {
		klog.ErrorS(err, "Ignoring sandbox-apiserver's certificate Secret", "secret", c.namespace+"/"+c.name)
		return
	}
	c.once.Do(func() { close(c.synced) })
}

func (c *Credentials) load(secret *corev1.Secret) error {
	current, err := tls.X509KeyPair(secret.Data[pki.SecretCertKey], secret.Data[pki.SecretKeyKey])
	if err != nil {
		return fmt.Errorf("%s and %s: %w", pki.SecretCertKey, pki.SecretKeyKey, err)
	}
	clients := []*tls.Certificate{&current}
	if len(secret.Data[pki.SecretPreviousCertKey]) > 0 {
		if prev, err := tls.X509KeyPair(secret.Data[pki.SecretPreviousCertKey], secret.Data[pki.SecretPreviousKeyKey]); err == nil {
			clients = append(clients, &prev)
		}
	}
	c.mu.RLock()
	roots, bundle := c.roots, c.bundle
	c.mu.RUnlock()
	// The same bundle keeps the same pool: execdclient remakes its transport, and drops the
	// connections to every pod, when the pool changes.
	if roots == nil || !bytes.Equal(bundle, secret.Data[pki.SecretCAKey]) {
		caCerts, err := certutil.ParseCertsPEM(secret.Data[pki.SecretCAKey])
		if err != nil {
			return fmt.Errorf("%s: %w", pki.SecretCAKey, err)
		}
		roots = x509.NewCertPool()
		for _, ca := range caCerts {
			roots.AddCert(ca)
		}
		bundle = secret.Data[pki.SecretCAKey]
	}
	c.mu.Lock()
	changed := !c.loaded || string(c.servePEM[0]) != string(secret.Data[pki.SecretCertKey])
	c.clients, c.roots, c.bundle, c.loaded = clients, roots, bundle, true
	c.servePEM = [2][]byte{secret.Data[pki.SecretCertKey], secret.Data[pki.SecretKeyKey]}
	listeners := c.listeners
	c.mu.Unlock()
	if changed {
		klog.InfoS("Loaded sandbox-apiserver's certificate", "subject", current.Leaf.Subject.CommonName, "notAfter", current.Leaf.NotAfter)
		for _, l := range listeners {
			l.Enqueue()
		}
	}
	return nil
}

// ErrNoCertificate: the Secret has not been read (yet).
var ErrNoCertificate = errors.New("sandbox-apiserver has no client certificate for sandbox-execd yet (its Secret is missing or invalid)")

// GetClientCertificate implements execdclient.Credentials.
func (c *Credentials) GetClientCertificate(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.clients) == 0 {
		return nil, ErrNoCertificate
	}
	for _, cert := range c.clients {
		if cri == nil || cri.SupportsCertificate(cert) == nil {
			return cert, nil
		}
	}
	return c.clients[0], nil
}

// RootCAs implements execdclient.Credentials.
func (c *Credentials) RootCAs() *x509.CertPool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.roots
}

// Name implements dynamiccertificates.CertKeyContentProvider.
func (c *Credentials) Name() string { return "secret/" + c.namespace + "/" + c.name }

// CurrentCertKeyContent implements dynamiccertificates.CertKeyContentProvider.
func (c *Credentials) CurrentCertKeyContent() ([]byte, []byte) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.servePEM[0], c.servePEM[1]
}

// AddListener implements dynamiccertificates.Notifier: the serving certificate controller
// reloads when the Secret changes.
func (c *Credentials) AddListener(l dynamiccertificates.Listener) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listeners = append(c.listeners, l)
}
