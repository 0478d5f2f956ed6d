package certrotation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	certutil "k8s.io/client-go/util/cert"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

var start = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// pkiEnv is a Reconciler on a fake client that counts its writes.
type pkiEnv struct {
	t      *testing.T
	c      client.Client
	r      *Reconciler
	clock  *clocktesting.FakeClock
	writes []string
}

func newPKIEnv(t *testing.T, manage bool, objs ...client.Object) *pkiEnv {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = apiregistrationv1.AddToScheme(s)
	e := &pkiEnv{t: t, clock: clocktesting.NewFakeClock(start)}
	count := func(verb string, obj client.Object) {
		e.writes = append(e.writes, fmt.Sprintf("%s %T %s", verb, obj, obj.GetName()))
	}
	e.c = fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			count("patch", obj)
			return c.Patch(ctx, obj, p, opts...)
		},
	}).Build()
	e.r = &Reconciler{Client: e.c, Recorder: events.NewFakeRecorder(10), Authority: pki.NewAuthority(e.clock), Namespace: "ksb",
		CASecret: pki.DefaultCASecret, APIServerSecret: pki.DefaultAPIServerSecret, APIServerService: pki.DefaultAPIServerService,
		APIService: pki.DefaultAPIService, Manage: manage, CALifetime: 100 * time.Hour, CertificateLifetime: 30 * time.Hour, Clock: e.clock}
	return e
}

func (e *pkiEnv) reconcile() reconcile.Result {
	e.t.Helper()
	res, err := e.r.Reconcile(e.t.Context(), reconcile.Request{})
	if err != nil {
		e.t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (e *pkiEnv) secret(name string) *corev1.Secret {
	e.t.Helper()
	s := &corev1.Secret{}
	if err := e.c.Get(e.t.Context(), client.ObjectKey{Namespace: "ksb", Name: name}, s); err != nil {
		e.t.Fatalf("get secret %s: %v", name, err)
	}
	return s
}

func apiService() *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: pki.DefaultAPIService},
		Spec: apiregistrationv1.APIServiceSpec{Group: "sandbox.kube-sandbox.io", Version: "v1alpha1", InsecureSkipTLSVerify: true}}
}

func TestReconcileBootstrapsAndRotates(t *testing.T) {
	e := newPKIEnv(t, true, apiService())
	res := e.reconcile()
	if diff := cmp.Diff([]string{
		"create *v1.Secret kube-sandbox-ca", "create *v1.Secret sandbox-apiserver-tls", "patch *v1.APIService v1alpha1.sandbox.kube-sandbox.io",
	}, e.writes); diff != "" {
		t.Fatalf("writes of the bootstrap (-want +got):\n%s", diff)
	}
	caSecret := e.secret(pki.DefaultCASecret)
	ca, err := pki.ParseCA(caSecret.Data[pki.SecretCertKey], caSecret.Data[pki.SecretKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	// The next deadline: the apiserver's certificate at two thirds of its 30 h (from a little
	// before now: certificates are backdated).
	if res.RequeueAfter < 19*time.Hour || res.RequeueAfter > 20*time.Hour {
		t.Errorf("RequeueAfter = %v, want the renewal of sandbox-apiserver's certificate in 20h", res.RequeueAfter)
	}
	api := e.secret(pki.DefaultAPIServerSecret)
	certs, _, err := pki.ParseKeyPair(api.Data[pki.SecretCertKey], api.Data[pki.SecretKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, DNSName: "sandbox-apiserver.ksb.svc", CurrentTime: start}); err != nil {
		t.Errorf("sandbox-apiserver's certificate does not verify for its Service: %v", err)
	}
	if certs[0].Subject.CommonName != execdapi.APIServerIdentity {
		t.Errorf("identity %q", certs[0].Subject.CommonName)
	}
	svc := &apiregistrationv1.APIService{}
	_ = e.c.Get(t.Context(), client.ObjectKey{Name: pki.DefaultAPIService}, svc)
	if string(svc.Spec.CABundle) != string(pki.EncodeCerts(ca.Cert)) || svc.Spec.InsecureSkipTLSVerify {
		t.Errorf("APIService caBundle set: %v, insecure: %v; want the pki.CA and verification", len(svc.Spec.CABundle) > 0, svc.Spec.InsecureSkipTLSVerify)
	}

	// At rest, nothing is written.
	e.writes = nil
	e.reconcile()
	if len(e.writes) != 0 {
		t.Errorf("a second reconcile wrote %v", e.writes)
	}

	// 21 h later: the apiserver's certificate is renewed, the CA kept.
	e.clock.Step(21 * time.Hour)
	e.reconcile()
	if diff := cmp.Diff([]string{"update *v1.Secret sandbox-apiserver-tls"}, e.writes); diff != "" {
		t.Errorf("writes of a renewal (-want +got):\n%s", diff)
	}

	// 81 h after the start, the CA is four fifths through its life: a new one signs, the old is
	// trusted until it expires; sandbox-apiserver gets a client certificate of each.
	e.writes = nil
	e.clock.SetTime(start.Add(81 * time.Hour))
	e.reconcile()
	caSecret = e.secret(pki.DefaultCASecret)
	next, _ := pki.ParseCA(caSecret.Data[pki.SecretCertKey], caSecret.Data[pki.SecretKeyKey])
	prev, err := pki.ParseCA(caSecret.Data[pki.SecretPreviousCertKey], caSecret.Data[pki.SecretPreviousKeyKey])
	if err != nil || next.Cert.Equal(ca.Cert) || !prev.Cert.Equal(ca.Cert) {
		t.Fatalf("after rotation: a new pki.CA %v, the old one kept %v (%v)", !next.Cert.Equal(ca.Cert), prev != nil && prev.Cert.Equal(ca.Cert), err)
	}
	bundle, _ := certutil.ParseCertsPEM(caSecret.Data[pki.SecretCAKey])
	if len(bundle) != 2 {
		t.Errorf("bundle of %d CAs, want both", len(bundle))
	}
	api = e.secret(pki.DefaultAPIServerSecret)
	cur, _, _ := pki.ParseKeyPair(api.Data[pki.SecretCertKey], api.Data[pki.SecretKeyKey])
	old, _, err := pki.ParseKeyPair(api.Data[pki.SecretPreviousCertKey], api.Data[pki.SecretPreviousKeyKey])
	if err != nil || cur[0].CheckSignatureFrom(next.Cert) != nil || old[0].CheckSignatureFrom(ca.Cert) != nil {
		t.Errorf("sandbox-apiserver's certificates do not come from the new and the old CA: %v", err)
	}
	if got, _ := e.r.Authority.Bundle(); string(got) != string(caSecret.Data[pki.SecretCAKey]) {
		t.Error("the pki.Authority does not hold the new bundle")
	}
	// A pod made before the rotation trusts only the old CA, one made after only the new:
	// the controller's client certificate fits each (the CAs' names tell them apart).
	for name, trusted := range map[string]*pki.CA{"old": ca, "new": next} {
		if err := handshake(t, trusted, e.clock.Now(), e.r.Authority.GetClientCertificate); err != nil {
			t.Errorf("an execd trusting the %s pki.CA refuses the controller: %v", name, err)
		}
	}

	// Once the old CA expired, it is gone.
	e.clock.SetTime(start.Add(101 * time.Hour))
	e.reconcile()
	caSecret = e.secret(pki.DefaultCASecret)
	if len(caSecret.Data[pki.SecretPreviousCertKey]) != 0 {
		t.Error("the expired pki.CA is still kept")
	}
}

func TestReconcileUnmanaged(t *testing.T) {
	e := newPKIEnv(t, false, apiService())
	e.reconcile()
	if len(e.writes) != 0 {
		t.Fatalf("an unmanaged PKI wrote %v", e.writes)
	}
	if _, err := e.r.Authority.Bundle(); err == nil {
		t.Error("the pki.Authority has a pki.CA before the Secret exists")
	}
	// cert-manager's CA Secret appears.
	ca, _ := pki.NewCA("cert-manager-ca", start, 100*time.Hour)
	keyPEM, _ := pki.EncodeKey(ca.Key)
	if err := e.c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ksb", Name: pki.DefaultCASecret},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{pki.SecretCertKey: pki.EncodeCerts(ca.Cert), pki.SecretKeyKey: keyPEM, pki.SecretCAKey: pki.EncodeCerts(ca.Cert)}}); err != nil {
		t.Fatal(err)
	}
	e.writes = nil
	e.clock.SetTime(start.Add(99 * time.Hour)) // due for rotation, were it ours
	e.reconcile()
	if len(e.writes) != 0 {
		t.Errorf("an unmanaged PKI wrote %v", e.writes)
	}
	if b, err := e.r.Authority.Bundle(); err != nil || string(b) != string(pki.EncodeCerts(ca.Cert)) {
		t.Errorf("the pki.Authority does not use cert-manager's CA: %v", err)
	}
}

func TestReconcileKeepsAnInvalidCASecret(t *testing.T) {
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ksb", Name: pki.DefaultCASecret},
		Data: map[string][]byte{pki.SecretCertKey: []byte("not a certificate")}}
	e := newPKIEnv(t, true, broken)
	e.reconcile()
	if len(e.writes) != 0 {
		t.Errorf("wrote %v: a Secret that is not ours to fix was overwritten", e.writes)
	}
	if got := e.secret(pki.DefaultCASecret); string(got.Data[pki.SecretCertKey]) != "not a certificate" {
		t.Error("the invalid pki.CA Secret changed")
	}
}

// handshake runs a mutual TLS handshake between a server that trusts only ca for clients (as
// execd trusts the CA in its pod's spec) and a client whose certificate getCert picks, at now.
func handshake(t *testing.T, ca *pki.CA, now time.Time, getCert func(*tls.CertificateRequestInfo) (*tls.Certificate, error)) error {
	t.Helper()
	key, err := pki.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue(pki.Leaf{CommonName: "execd", DNSNames: []string{"execd"}, ServerAuth: true, Lifetime: time.Hour}, &key.PublicKey, now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	clock := func() time.Time { return now }
	serverConn, clientConn := net.Pipe()
	server := tls.Server(serverConn, &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: pool, Time: clock, MinVersion: tls.VersionTLS13,
	})
	client := tls.Client(clientConn, &tls.Config{
		InsecureSkipVerify: true, GetClientCertificate: getCert, Time: clock, MinVersion: tls.VersionTLS13, //nolint:gosec
	})
	done := make(chan error, 1)
	go func() {
		err := client.HandshakeContext(t.Context())
		if err == nil {
			// TLS 1.3: the server's verdict on the client's certificate comes with the first read.
			_, err = client.Read(make([]byte, 1))
		}
		done <- err
	}()
	serverErr := server.HandshakeContext(t.Context())
	if serverErr == nil {
		_, _ = server.Write([]byte("k"))
	}
	clientErr := <-done
	// The raw ends: a TLS close_notify would wait for a reader that is gone.
	_, _ = serverConn.Close(), clientConn.Close()
	if serverErr != nil {
		return serverErr
	}
	return clientErr
}

// TestReconcileNodeSecret: with NodeSecret, sandbox-node gets a serving
// certificate for nodeapi.ServerName from the CA, and the bundle to verify the
// controller with; nothing is written again at rest.
func TestReconcileNodeSecret(t *testing.T) {
	e := newPKIEnv(t, true, apiService())
	e.r.NodeSecret = pki.DefaultNodeSecret
	e.reconcile()
	if !slices.Contains(e.writes, "create *v1.Secret "+pki.DefaultNodeSecret) {
		t.Fatalf("writes %v: no %s", e.writes, pki.DefaultNodeSecret)
	}
	caSecret := e.secret(pki.DefaultCASecret)
	ca, err := pki.ParseCA(caSecret.Data[pki.SecretCertKey], caSecret.Data[pki.SecretKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	sec := e.secret(pki.DefaultNodeSecret)
	certs, _, err := pki.ParseKeyPair(sec.Data[pki.SecretCertKey], sec.Data[pki.SecretKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, DNSName: nodeapi.ServerName, CurrentTime: start,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("sandbox-node's certificate does not verify for %s: %v", nodeapi.ServerName, err)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, CurrentTime: start, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("sandbox-node's certificate is also a client certificate")
	}
	if string(sec.Data[pki.SecretCAKey]) != string(caSecret.Data[pki.SecretCAKey]) {
		t.Error("the Secret's ca.crt is not the pki.CA bundle")
	}
	e.writes = nil
	e.reconcile()
	if len(e.writes) != 0 {
		t.Errorf("a second reconcile wrote %v", e.writes)
	}
}
