package egress

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/internal/firewall"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// testServer is a sandbox-egress whose filter lives in a fresh network namespace (root only).
func testServer(t *testing.T) *server {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the filter runs in a fresh network namespace")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err) // the thread stays locked and is discarded
	}
	runtime.UnlockOSThread()
	_ = orig.Close()
	t.Cleanup(func() { _ = ns.Close() })
	fw, err := firewall.New(firewall.Options{NetNS: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fw.Close() })
	o := &Options{StateDir: t.TempDir(), ResolvConf: filepath.Join(t.TempDir(), "missing")}
	return &server{podUID: "pod-a", fw: fw, o: o, metrics: newMetrics(fw), dnsReady: make(chan struct{}), denials: newDenials()}
}

func put(t *testing.T, s *server, identity string, cfg any) *httptest.ResponseRecorder {
	t.Helper()
	body, _ := json.Marshal(cfg)
	req := httptest.NewRequest(http.MethodPut, egressapi.PolicyPath, bytes.NewReader(body))
	req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: identity}}}}}
	w := httptest.NewRecorder()
	s.controlMux().ServeHTTP(w, req)
	return w
}

func cfgFor(pod string, rules ...egressapi.Rule) egressapi.Config {
	c := egressapi.Config{PodUID: pod, DefaultAction: egressapi.ActionDeny, Rules: rules,
		Sandbox: &egressapi.SandboxRef{Namespace: "ns", Name: "sbx", UID: "u"}, Generation: 2}
	c.Revision = c.Hash()
	return c
}

func TestServePolicy(t *testing.T) {
	s := testServer(t)
	good := cfgFor("pod-a", egressapi.Rule{Action: egressapi.ActionAllow, To: "pypi.org"})
	badRevision := good
	badRevision.Revision = "0000"
	invalid := cfgFor("pod-a", egressapi.Rule{Action: egressapi.ActionAllow, To: "*.com"})

	tests := []struct {
		name     string
		identity string
		cfg      any
		want     int
	}{
		{"sandbox-apiserver may not set a policy", execdapi.APIServerIdentity, good, http.StatusForbidden},
		{"another pod's Config", execdapi.ControllerIdentity, cfgFor("pod-b"), http.StatusConflict},
		{"a revision that does not match", execdapi.ControllerIdentity, badRevision, http.StatusBadRequest},
		{"not a Config", execdapi.ControllerIdentity, map[string]string{"rules": "all"}, http.StatusBadRequest},
		{"an invalid rule", execdapi.ControllerIdentity, invalid, http.StatusUnprocessableEntity},
		{"applied", execdapi.ControllerIdentity, good, http.StatusOK},
		{"again: nothing to do", execdapi.ControllerIdentity, good, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := put(t, s, tc.identity, tc.cfg)
			if w.Code != tc.want {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tc.want)
			}
			if w.Code != http.StatusOK {
				if s.cfg != nil && s.cfg.Revision != good.Revision {
					t.Errorf("a refused Config was applied: %s", s.cfg.Revision)
				}
				return
			}
			st := egressapi.Status{}
			if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st.PodUID != "pod-a" || st.Revision != good.Revision || st.Generation != 2 {
				t.Errorf("status %+v (%v)", st, err)
			}
		})
	}
	if s.lastErr != nil {
		t.Errorf("an invalid Config made the pod unready: %v", s.lastErr)
	}

	// A restarted sidecar starts from what it applied last, not from its environment.
	t.Setenv(egressapi.EnvConfig, `{"defaultAction":"Allow"}`)
	start, err := s.o.startConfig("pod-a")
	if err != nil || start.Revision != good.Revision {
		t.Fatalf("start config %+v (%v), want the saved revision %s", start, err, good.Revision)
	}
	if start, err := s.o.startConfig("pod-b"); err != nil || start.DefaultAction != egressapi.ActionAllow {
		t.Errorf("another pod's saved state was used: %+v (%v)", start, err)
	}
}

func TestServeIdentity(t *testing.T) {
	id, err := execd.NewServerIdentityFor("", x509.NewCertPool(), func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("the-egress-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &server{podUID: "pod-a", identity: id, o: &Options{IdentityToken: tokenFile}}
	do := func(method, identity string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, egressapi.IdentityPath, bytes.NewReader(body))
		req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: identity}}}}}
		w := httptest.NewRecorder()
		s.controlMux().ServeHTTP(w, req)
		return w
	}
	if w := do(http.MethodGet, execdapi.APIServerIdentity, nil); w.Code != http.StatusForbidden {
		t.Errorf("sandbox-apiserver read the egress token: %d", w.Code)
	}
	w := do(http.MethodGet, execdapi.ControllerIdentity, nil)
	var resp execdapi.IdentityResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); w.Code != http.StatusOK || err != nil || resp.PodToken != "the-egress-token" {
		t.Errorf("GET: %d %s", w.Code, w.Body)
	}
	body, _ := json.Marshal(execdapi.CertificateRequest{CertificateChain: "not a certificate"})
	if w := do(http.MethodPut, execdapi.ControllerIdentity, body); w.Code != http.StatusBadRequest {
		t.Errorf("PUT of garbage: %d %s", w.Code, w.Body)
	}
	if id.Certified() {
		t.Error("certified by garbage")
	}
}
