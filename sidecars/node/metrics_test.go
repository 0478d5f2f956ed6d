package node

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// kubeAPIServer stands for the kube-apiserver's TokenReview and SubjectAccessReview: token
// "scraper-token" is user scraper, bound to kube-sandbox:metrics-reader; "other-token" is
// user other, bound to nothing.
type kubeAPIServer struct {
	*httptest.Server
	reviews, accessReviews atomic.Int32
}

func newKubeAPIServer(t *testing.T) *kubeAPIServer {
	k := &kubeAPIServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, req *http.Request) {
		k.reviews.Add(1)
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(req.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch tr.Spec.Token {
		case "scraper-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "scraper"}}
		case "other-token":
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "other"}}
		default:
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: false, Error: "invalid bearer token"}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&tr)
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, req *http.Request) {
		k.accessReviews.Add(1)
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(req.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		nr := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "scraper" && sar.Spec.ResourceAttributes == nil &&
			nr != nil && nr.Path == nodeapi.MetricsPath && nr.Verb == "get"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&sar)
	})
	k.Server = httptest.NewTLSServer(mux)
	t.Cleanup(k.Close)
	return k
}

// TestMetricsAuthentication: the metrics port serves its series over TLS to a scraper the
// kube-apiserver authenticates and allows get on /metrics, 401 without a token it accepts,
// 403 to a user it does not allow; the health port serves no metrics any more.
func TestMetricsAuthentication(t *testing.T) {
	k := newKubeAPIServer(t)
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: k.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := newMetricsAuth(kube)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	series := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_processes", Help: "test", ConstLabels: prometheus.Labels{"namespace": "ns", "sandbox": "sbx", "replica": "0"}})
	series.Set(3)
	reg.MustRegister(series)

	metricsAddr := make(chan net.Addr, 1)
	ts := startServer(t, &fakeEngine{}, func(s *server) {
		s.metricsListen, s.metrics, s.metricsAuth = "127.0.0.1:0", reg, auth
		s.metricsReady = func(a net.Addr) { metricsAddr <- a }
	})
	var url string
	select {
	case a := <-metricsAddr:
		url = "https://" + a.String() + nodeapi.MetricsPath
	case <-time.After(10 * time.Second):
		t.Fatal("the metrics port did not listen")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ts.serverCA.cert)
	// A scraper as Prometheus is: the agent's CA, its serving name, a bearer token and no
	// client certificate.
	scraper := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: nodeapi.ServerName}}}

	tests := []struct {
		name     string
		token    string
		wantCode int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the kube-apiserver does not accept", "forged", http.StatusUnauthorized},
		{"a user without the metrics-reader role", "other-token", http.StatusForbidden},
		{"a scraper with it", "scraper-token", http.StatusOK},
		{"the scraper again (both reviews cached)", "scraper-token", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := scraper.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status %s (%s), want %d", resp.Status, body, tt.wantCode)
			}
			if tt.wantCode == http.StatusOK && !strings.Contains(string(body), `sandbox_processes{namespace="ns",replica="0",sandbox="sbx"} 3`) {
				t.Errorf("no series in:\n%s", body)
			}
			if tt.wantCode != http.StatusOK && strings.Contains(string(body), "sandbox_") {
				t.Errorf("series in a refusal:\n%s", body)
			}
		})
	}
	if n := k.accessReviews.Load(); n != 2 {
		t.Errorf("%d SubjectAccessReviews, want 2 (other's, and scraper's once)", n)
	}

	t.Run("no metrics on the health port", func(t *testing.T) {
		resp, err := http.Get("http://" + ts.healthAddr + nodeapi.MetricsPath)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("status %s, want 404", resp.Status)
		}
	})
	t.Run("no metrics on the mutual-TLS port", func(t *testing.T) {
		resp, err := ts.client(t, execdapi.ControllerIdentity).Get("https://" + ts.addr + nodeapi.MetricsPath)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("status %s, want 404", resp.Status)
		}
	})
}
