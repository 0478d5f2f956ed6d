// Package certrotation keeps the kube-sandbox CA and the certificates of sandbox-apiserver and
// sandbox-node in their Secrets: it makes the CA when there is none, renews each certificate
// before it expires, rotates the CA (trusting the previous one until it expires), and puts the
// CA bundle into the APIService. The CA itself, and what it issues, is package
// github.com/kube-sandbox/kube-sandbox/controller/apis/pki.
package certrotation

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// caCommonName is the stem of the CA's name; newCA adds the time it was made.
const caCommonName = "kube-sandbox-ca"

// newCA makes a kube-sandbox CA named for the time it was made (as Kubernetes names its
// self-signed CAs): a TLS server names the CAs it trusts, and a client picks its certificate by
// its issuer's name, so the CA that signs and the previous one must not share a name.
func newCA(now time.Time, lifetime time.Duration) (*pki.CA, error) {
	return pki.NewCA(fmt.Sprintf("%s@%d", caCommonName, now.Unix()), now, lifetime)
}

// Reconciler keeps the kube-sandbox PKI in the namespace Namespace: the CA Secret, the
// Authority of this process, and, when it manages them, sandbox-apiserver's Secret and the
// caBundle of the APIService. Everything is driven by watches of those objects and by the
// deadline of the next renewal; nothing polls.
type Reconciler struct {
	Client    client.Client
	Recorder  events.EventRecorder
	Authority *pki.Authority
	Namespace string
	// CASecret holds the CA (tls.crt, tls.key; previous.crt and previous.key while it
	// rotates).
	CASecret string
	// APIServerSecret is sandbox-apiserver's certificate (serving and client, with both
	// usages) and the CA bundle (ca.crt).
	APIServerSecret string
	// APIServerService is the Service in front of sandbox-apiserver: its DNS names go into
	// the serving certificate, as the aggregator verifies them.
	APIServerService string
	// NodeSecret is sandbox-node's serving certificate (for nodeapi.ServerName) and the CA
	// bundle (ca.crt) it verifies clients with; "": none.
	NodeSecret string
	// APIService gets the CA bundle as its caBundle; "" leaves APIServices alone.
	APIService string
	// Manage: the controller makes and rotates the CA and keeps the apiserver's Secret and
	// the APIService current. Without it (cert-manager), it only reads the CA Secret.
	Manage bool
	// CALifetime and CertificateLifetime; 0: the defaults.
	CALifetime, CertificateLifetime time.Duration
	// Clock; nil: the real clock.
	Clock clock.PassiveClock
}

var _ reconcile.Reconciler = &Reconciler{}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Reconciler) caLifetime() time.Duration {
	if r.CALifetime > 0 {
		return r.CALifetime
	}
	return pki.DefaultCALifetime
}

func (r *Reconciler) certLifetime() time.Duration {
	if r.CertificateLifetime > 0 {
		return r.CertificateLifetime
	}
	return pki.DefaultCertificateLifetime
}

// request is the one key every event maps to: the PKI is reconciled as a whole.
func (r *Reconciler) request() reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: r.Namespace, Name: r.CASecret}}
}

// SetupWithManager registers the reconciler. The manager's cache must hold the Secrets of
// Namespace (and may hold no others: the controller has no rights on them).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toPKI := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{r.request()}
	})
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		switch o.(type) {
		case *corev1.Secret:
			return o.GetNamespace() == r.Namespace && (o.GetName() == r.CASecret || o.GetName() == r.APIServerSecret ||
				r.NodeSecret != "" && o.GetName() == r.NodeSecret)
		case *apiregistrationv1.APIService:
			return r.APIService != "" && o.GetName() == r.APIService
		}
		return false
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("pki").
		WatchesRawSource(startupSource(r.request())).
		Watches(&corev1.Secret{}, toPKI, builder.WithPredicates(ours))
	if r.Manage && r.APIService != "" {
		b = b.Watches(&apiregistrationv1.APIService{}, toPKI, builder.WithPredicates(ours))
	}
	return b.Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	current, previous, err := r.ensureCA(ctx)
	if err != nil || current == nil {
		return reconcile.Result{}, err
	}
	r.Authority.Set(current, previous)
	now := r.now()
	next := renewalAt(current, r.caLifetime())
	if previous != nil && previous.Cert.NotAfter.Before(next) {
		next = previous.Cert.NotAfter
	}
	if r.Manage {
		due, err := r.ensureAPIServerSecret(ctx, current, previous)
		if err != nil {
			return reconcile.Result{}, err
		}
		if due.Before(next) {
			next = due
		}
		if r.NodeSecret != "" {
			due, err := r.ensureNodeSecret(ctx, current, previous)
			if err != nil {
				return reconcile.Result{}, err
			}
			if due.Before(next) {
				next = due
			}
		}
		if err := r.ensureAPIService(ctx); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: max(next.Sub(now), time.Second)}, nil
}

// renewalAt is when a CA is replaced: once four fifths of its lifetime have passed.
func renewalAt(ca *pki.CA, lifetime time.Duration) time.Time {
	life := ca.Cert.NotAfter.Sub(ca.Cert.NotBefore)
	if lifetime < life {
		life = lifetime
	}
	return ca.Cert.NotAfter.Add(-life / 5)
}

// ensureCA reads the CA Secret and, when managing, makes it or rotates it. It returns nil
// CAs (and no error) when there is nothing to use yet: the watch brings the Secret.
func (r *Reconciler) ensureCA(ctx context.Context) (current, previous *pki.CA, err error) {
	logger := log.FromContext(ctx)
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: r.Namespace, Name: r.CASecret}
	err = r.Client.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		if !r.Manage {
			logger.Info("waiting for the pki.CA Secret (provided by cert-manager or an administrator)", "secret", key)
			return nil, nil, nil
		}
		ca, err := newCA(r.now(), r.caLifetime())
		if err != nil {
			return nil, nil, err
		}
		secret, err = caSecret(key, ca, nil)
		if err != nil {
			return nil, nil, err
		}
		if err := r.Client.Create(ctx, secret); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil, nil, fmt.Errorf("pki.CA Secret %s appeared meanwhile: reading it again", key)
			}
			return nil, nil, fmt.Errorf("create pki.CA Secret: %w", err)
		}
		logger.Info("created the kube-sandbox pki.CA", "secret", key, "notAfter", ca.Cert.NotAfter)
		return ca, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("get pki.CA Secret: %w", err)
	}

	current, err = pki.ParseCA(secret.Data[pki.SecretCertKey], secret.Data[pki.SecretKeyKey])
	if err != nil {
		// Never overwritten: it may be someone's CA. Nothing signs until it is fixed.
		r.event(secret, "InvalidCA", "the pki.CA Secret %s does not hold a pki.CA and its key: %v", key, err)
		return nil, nil, nil
	}
	if len(secret.Data[pki.SecretPreviousCertKey]) > 0 {
		if previous, err = pki.ParseCA(secret.Data[pki.SecretPreviousCertKey], secret.Data[pki.SecretPreviousKeyKey]); err != nil {
			logger.Error(err, "ignoring the previous pki.CA of the pki.CA Secret", "secret", key)
			previous = nil
		}
	}
	now := r.now()
	if previous != nil && !now.Before(previous.Cert.NotAfter) {
		previous = nil
	}
	if !r.Manage {
		return current, previous, nil
	}
	changed := previous == nil && len(secret.Data[pki.SecretPreviousCertKey]) > 0
	if !now.Before(renewalAt(current, r.caLifetime())) {
		next, err := newCA(now, r.caLifetime())
		if err != nil {
			return nil, nil, err
		}
		logger.Info("rotating the kube-sandbox CA: the new one signs, the old one is trusted until it expires",
			"secret", key, "oldNotAfter", current.Cert.NotAfter, "newNotAfter", next.Cert.NotAfter)
		current, previous, changed = next, current, true
	}
	if !changed && bytes.Equal(secret.Data[pki.SecretCAKey], bundleOf(current, previous)) {
		return current, previous, nil
	}
	updated, err := caSecret(key, current, previous)
	if err != nil {
		return nil, nil, err
	}
	secret.Data = updated.Data
	if err := r.Client.Update(ctx, secret); err != nil {
		return nil, nil, fmt.Errorf("update pki.CA Secret: %w", err)
	}
	return current, previous, nil
}

func bundleOf(current, previous *pki.CA) []byte {
	if previous == nil {
		return pki.EncodeCerts(current.Cert)
	}
	return pki.EncodeCerts(current.Cert, previous.Cert)
}

func caSecret(key client.ObjectKey, current, previous *pki.CA) (*corev1.Secret, error) {
	keyPEM, err := pki.EncodeKey(current.Key)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{"app.kubernetes.io/part-of": "kube-sandbox"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			pki.SecretCertKey: pki.EncodeCerts(current.Cert),
			pki.SecretKeyKey:  keyPEM,
			pki.SecretCAKey:   bundleOf(current, previous),
		},
	}
	if previous != nil {
		prevKey, err := pki.EncodeKey(previous.Key)
		if err != nil {
			return nil, err
		}
		s.Data[pki.SecretPreviousCertKey] = pki.EncodeCerts(previous.Cert)
		s.Data[pki.SecretPreviousKeyKey] = prevKey
	}
	return s, nil
}

// apiServerDNSNames are the names the aggregator (and admission webhooks) verify.
func (r *Reconciler) apiServerDNSNames() []string {
	svc, ns := r.APIServerService, r.Namespace
	return []string{svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local", svc + "." + ns, svc}
}

// ensureAPIServerSecret keeps sandbox-apiserver's certificate (from the current CA; and a
// client certificate from the previous one while it is trusted) and the bundle current. It
// returns when the certificate is due for renewal.
func (r *Reconciler) ensureAPIServerSecret(ctx context.Context, current, previous *pki.CA) (time.Time, error) {
	leaf := pki.Leaf{CommonName: execdapi.APIServerIdentity, DNSNames: r.apiServerDNSNames(),
		ServerAuth: true, ClientAuth: true, Lifetime: r.certLifetime()}
	// Only for pods that trust only the previous CA: a client certificate.
	previousLeaf := &pki.Leaf{CommonName: execdapi.APIServerIdentity, ClientAuth: true, Lifetime: r.certLifetime()}
	return r.ensureSecret(ctx, r.APIServerSecret, "sandbox-apiserver", leaf, previousLeaf, current, previous)
}

// ensureNodeSecret keeps sandbox-node's serving certificate and the bundle it
// verifies the controller's client certificates with.
func (r *Reconciler) ensureNodeSecret(ctx context.Context, current, previous *pki.CA) (time.Time, error) {
	leaf := pki.Leaf{CommonName: pki.NodeIdentity, DNSNames: []string{nodeapi.ServerName}, ServerAuth: true, Lifetime: r.certLifetime()}
	return r.ensureSecret(ctx, r.NodeSecret, "sandbox-node", leaf, nil, current, previous)
}

// ensureSecret keeps a component's Secret: leaf from the current CA, previousLeaf (if any)
// from the previous one while it is trusted, and the bundle. It returns when the certificate is
// due for renewal.
func (r *Reconciler) ensureSecret(ctx context.Context, name, component string, leaf pki.Leaf, previousLeaf *pki.Leaf, current, previous *pki.CA) (time.Time, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: r.Namespace, Name: name}
	err := r.Client.Get(ctx, key, secret)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, fmt.Errorf("get %s: %w", key, err)
	}
	now := r.now()
	data := map[string][]byte{}
	due := now.Add(r.certLifetime())
	fresh := func(certKey, keyKey string, ca *pki.CA, leaf pki.Leaf) error {
		if certs, _, err := pki.ParseKeyPair(secret.Data[certKey], secret.Data[keyKey]); err == nil &&
			issuedBy(certs[0], ca) && slices.Equal(certs[0].DNSNames, leaf.DNSNames) &&
			certs[0].Subject.CommonName == leaf.CommonName && now.Before(pki.RenewalDue(certs[0].NotBefore, certs[0].NotAfter)) {
			data[certKey], data[keyKey] = secret.Data[certKey], secret.Data[keyKey]
			if d := pki.RenewalDue(certs[0].NotBefore, certs[0].NotAfter); d.Before(due) {
				due = d
			}
			return nil
		}
		k, err := pki.GenerateKey()
		if err != nil {
			return err
		}
		cert, err := ca.Issue(leaf, &k.PublicKey, now)
		if err != nil {
			return err
		}
		keyPEM, err := pki.EncodeKey(k)
		if err != nil {
			return err
		}
		data[certKey], data[keyKey] = pki.EncodeCerts(cert, ca.Cert), keyPEM
		if d := pki.RenewalDue(cert.NotBefore, cert.NotAfter); d.Before(due) {
			due = d
		}
		return nil
	}
	if err := fresh(pki.SecretCertKey, pki.SecretKeyKey, current, leaf); err != nil {
		return time.Time{}, err
	}
	if previous != nil && previousLeaf != nil {
		if err := fresh(pki.SecretPreviousCertKey, pki.SecretPreviousKeyKey, previous, *previousLeaf); err != nil {
			return time.Time{}, err
		}
	}
	data[pki.SecretCAKey] = bundleOf(current, previous)
	if exists && maps.EqualFunc(secret.Data, data, bytes.Equal) {
		return due, nil
	}
	secret.Data = data
	secret.Type = corev1.SecretTypeTLS
	if !exists {
		secret.ObjectMeta = metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{"app.kubernetes.io/part-of": "kube-sandbox"}}
		if err := r.Client.Create(ctx, secret); err != nil {
			return time.Time{}, fmt.Errorf("create %s: %w", key, err)
		}
	} else if err := r.Client.Update(ctx, secret); err != nil {
		return time.Time{}, fmt.Errorf("update %s: %w", key, err)
	}
	log.FromContext(ctx).Info("issued a certificate", "component", component, "secret", key, "renewAt", due)
	return due, nil
}

func issuedBy(cert *x509.Certificate, ca *pki.CA) bool {
	return cert.CheckSignatureFrom(ca.Cert) == nil
}

// ensureAPIService gives the APIService the CA bundle, so that the aggregator verifies
// sandbox-apiserver's certificate.
func (r *Reconciler) ensureAPIService(ctx context.Context) error {
	if r.APIService == "" {
		return nil
	}
	bundle, err := r.Authority.Bundle()
	if err != nil {
		return err
	}
	svc := &apiregistrationv1.APIService{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: r.APIService}, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the watch brings it when it is created
		}
		return fmt.Errorf("get APIService %s: %w", r.APIService, err)
	}
	if bytes.Equal(svc.Spec.CABundle, bundle) && !svc.Spec.InsecureSkipTLSVerify {
		return nil
	}
	patch := client.MergeFrom(svc.DeepCopy())
	svc.Spec.CABundle = bundle
	svc.Spec.InsecureSkipTLSVerify = false
	if err := r.Client.Patch(ctx, svc, patch); err != nil {
		return fmt.Errorf("set the caBundle of APIService %s: %w", r.APIService, err)
	}
	log.FromContext(ctx).Info("set the caBundle of the APIService", "apiservice", r.APIService)
	return nil
}

func (r *Reconciler) event(obj client.Object, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	log.Log.Error(errors.New(msg), "kube-sandbox PKI", "reason", reason)
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, "LoadCA", "%s", msg)
	}
}

// startupSource enqueues req once when the controller starts, so that a cluster without any of
// the watched objects yet gets its CA.
func startupSource(req reconcile.Request) source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(req)
		return nil
	})
}
