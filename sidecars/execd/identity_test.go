package execd

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// serverKey is the public key an execd presents in a handshake.
func serverKey(t *testing.T, baseURL string) crypto.PublicKey {
	t.Helper()
	u, _ := url.Parse(baseURL)
	conn, err := tls.Dial("tcp", u.Host, clientTLS(t, asController))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].PublicKey
}

// podCertificate is what the controller issues for a pod's execd.
func podCertificate(t *testing.T, ca *pki.CA, pub crypto.PublicKey, uid string, leaf pki.Leaf) string {
	t.Helper()
	if leaf.CommonName == "" {
		leaf = pki.Leaf{CommonName: "pod:ns/p", DNSNames: []string{execdapi.PodServerName(uid)}, ServerAuth: true, Lifetime: time.Hour}
	}
	cert, err := ca.Issue(leaf, pub, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return string(pki.EncodeCerts(cert, ca.Cert))
}

func putCertificate(t *testing.T, baseURL, identity, chain string) (int, string) {
	t.Helper()
	body, _ := json.Marshal(execdapi.CertificateRequest{CertificateChain: chain})
	req, _ := http.NewRequestWithContext(testContext(t), http.MethodPut, baseURL+execdapi.IdentityPath, bytes.NewReader(body))
	resp, err := httpClient(t, identity).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// verifiedHandshake connects as sandbox-apiserver does: verifying the server as the execd of
// the pod with uid.
func verifiedHandshake(t *testing.T, baseURL, uid string) error {
	t.Helper()
	u, _ := url.Parse(baseURL)
	cfg := clientTLS(t, asAPIServer)
	cfg.InsecureSkipVerify = false
	cfg.RootCAs = testCA().pool
	cfg.ServerName = execdapi.PodServerName(uid)
	conn, err := tls.Dial("tcp", u.Host, cfg)
	if err == nil {
		_ = conn.Close()
	}
	return err
}

// TestIdentity: execd hands its projected token to the controller only, takes the certificate
// issued for its own key only, and serves it from then on.
func TestIdentity(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("projected-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := newTestIdentity(t)
	h, err := NewHandler(HandlerConfig{Executor: NewExecutor(nil), IdentityTokenFile: tokenFile}, id)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveTLS(t, h, id)

	t.Run("token for the controller only", func(t *testing.T) {
		for identity, want := range map[string]int{asController: http.StatusOK, asAPIServer: http.StatusForbidden, asSomeone: http.StatusForbidden} {
			req, _ := http.NewRequestWithContext(testContext(t), http.MethodGet, srv.URL+execdapi.IdentityPath, nil)
			resp, err := httpClient(t, identity).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s: status %d, want %d", identity, resp.StatusCode, want)
			}
			var got execdapi.IdentityResponse
			if want == http.StatusOK && (json.Unmarshal(data, &got) != nil || got.PodToken != "projected-token") {
				t.Errorf("identity answer %q, want the token without its newline", data)
			}
			if want != http.StatusOK && strings.Contains(string(data), "projected-token") {
				t.Errorf("%s sees the token: %q", identity, data)
			}
		}
	})

	uid := "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
	pub := serverKey(t, srv.URL)
	if err := verifiedHandshake(t, srv.URL, uid); err == nil {
		t.Fatal("an uncertified execd passed verification")
	}
	other, _ := pki.GenerateKey()
	refused := []struct {
		name, chain, want string
	}{
		{"another key's certificate", podCertificate(t, testCA().ca, &other.PublicKey, uid, pki.Leaf{}), "not for this execd's key"},
		{"a client certificate", podCertificate(t, testCA().ca, pub, uid, pki.Leaf{CommonName: "x", DNSNames: []string{execdapi.PodServerName(uid)}, ClientAuth: true, Lifetime: time.Hour}), "does not verify"},
		{"another CA's certificate", podCertificate(t, testCA().other, pub, uid, pki.Leaf{}), "does not verify"},
		{"not a pod's name", podCertificate(t, testCA().ca, pub, uid, pki.Leaf{CommonName: "x", DNSNames: []string{"example.com"}, ServerAuth: true, Lifetime: time.Hour}), "not a server name of this server"},
		{"no certificate", "", "no certificate"},
	}
	for _, tt := range refused {
		t.Run("refuses "+tt.name, func(t *testing.T) {
			if code, body := putCertificate(t, srv.URL, asController, tt.chain); code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
				t.Errorf("status %d %q, want 400 saying %q", code, body, tt.want)
			}
			if id.Certified() {
				t.Error("certified by a refused certificate")
			}
		})
	}
	good := podCertificate(t, testCA().ca, pub, uid, pki.Leaf{})
	if code, _ := putCertificate(t, srv.URL, asAPIServer, good); code != http.StatusForbidden {
		t.Errorf("sandbox-apiserver may certify: %d", code)
	}
	code, body := putCertificate(t, srv.URL, asController, good)
	if code != http.StatusOK || !strings.Contains(body, execdapi.PodServerName(uid)) {
		t.Fatalf("certify: %d %q", code, body)
	}
	if !id.Certified() {
		t.Error("not certified")
	}
	if err := verifiedHandshake(t, srv.URL, uid); err != nil {
		t.Errorf("verified as its pod: %v", err)
	}
	if err := verifiedHandshake(t, srv.URL, "0f1e2d3c-aaaa-bbbb-cccc-000000000002"); err == nil {
		t.Error("verified as another pod")
	}
}

// TestIdentityKeptAcrossRestarts: a restarted container finds its key and certificate in the
// state directory.
func TestIdentityKeptAcrossRestarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	first, err := NewServerIdentity(dir, testCA().pool)
	if err != nil {
		t.Fatal(err)
	}
	uid := "0f1e2d3c-aaaa-bbbb-cccc-000000000003"
	chain := podCertificate(t, testCA().ca, &first.key.PublicKey, uid, pki.Leaf{})
	if _, err := first.install([]byte(chain), time.Now()); err != nil {
		t.Fatal(err)
	}
	second, err := NewServerIdentity(dir, testCA().pool)
	if err != nil {
		t.Fatal(err)
	}
	if !second.key.PublicKey.Equal(&first.key.PublicKey) || !second.Certified() {
		t.Errorf("restarted identity: same key %v, certified %v; want both", second.key.PublicKey.Equal(&first.key.PublicKey), second.Certified())
	}
	if st, err := os.Stat(filepath.Join(dir, stateKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	// A state directory whose certificate belongs to another key: the key stays, the
	// certificate is ignored.
	if err := os.WriteFile(filepath.Join(dir, stateCertFile), []byte(podCertificate(t, testCA().ca, testCA().ca.Cert.PublicKey, uid, pki.Leaf{})), 0o600); err != nil {
		t.Fatal(err)
	}
	third, err := NewServerIdentity(dir, testCA().pool)
	if err != nil {
		t.Fatal(err)
	}
	if third.Certified() || !third.key.PublicKey.Equal(&first.key.PublicKey) {
		t.Errorf("with a foreign certificate: certified %v, same key %v; want uncertified with the same key", third.Certified(), third.key.PublicKey.Equal(&first.key.PublicKey))
	}
}
