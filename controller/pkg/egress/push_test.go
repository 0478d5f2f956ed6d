package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

type noCreds struct{}

func (noCreds) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return &tls.Certificate{}, nil
}
func (noCreds) RootCAs() *x509.CertPool { return nil }

// fakeEgress answers PUT /v1/policy as sandbox-egress does, for pod podUID.
func fakeEgress(t *testing.T, podUID string, answer func(cfg *egressapi.Config) (int, any)) (*Pusher, *corev1.Pod, *atomic.Int32) {
	t.Helper()
	var puts atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != egressapi.PolicyPath {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		puts.Add(1)
		cfg := &egressapi.Config{}
		if err := json.NewDecoder(r.Body).Decode(cfg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		code, body := answer(cfg)
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p := NewPusher(noCreds{})
	p.Port, _ = strconv.Atoi(port)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "pod-uid"}, Status: corev1.PodStatus{PodIP: host}}
	return p, pod, &puts
}

func config(rules ...egressapi.Rule) *egressapi.Config {
	cfg := &egressapi.Config{PodUID: "pod-uid", DefaultAction: egressapi.ActionDeny, Rules: rules}
	cfg.Revision = cfg.Hash()
	return cfg
}

func TestPusherEnsure(t *testing.T) {
	ok := func(cfg *egressapi.Config) (int, any) {
		return http.StatusOK, egressapi.Status{PodUID: cfg.PodUID, Revision: cfg.Revision}
	}
	t.Run("one push per revision", func(t *testing.T) {
		p, pod, puts := fakeEgress(t, "pod-uid", ok)
		a, b := config(), config(egressapi.Rule{Action: egressapi.ActionAllow, To: "pypi.org"})
		for _, cfg := range []*egressapi.Config{a, a, b, b, a} {
			if err := p.Ensure(context.Background(), pod, cfg); err != nil {
				t.Fatal(err)
			}
		}
		if n := puts.Load(); n != 3 {
			t.Errorf("%d pushes, want 3 (a, b, a again)", n)
		}
		p.Forget(pod.UID)
		if err := p.Ensure(context.Background(), pod, a); err != nil || puts.Load() != 4 {
			t.Errorf("after Forget: %v, %d pushes", err, puts.Load())
		}
		// A restarted sidecar gets the policy again.
		pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: egressapi.ContainerName, RestartCount: 1}}
		if err := p.Ensure(context.Background(), pod, a); err != nil || puts.Load() != 5 {
			t.Errorf("after a restart of sandbox-egress: %v, %d pushes", err, puts.Load())
		}
	})
	t.Run("an answer for another pod is not a confirmation", func(t *testing.T) {
		p, pod, _ := fakeEgress(t, "pod-uid", func(cfg *egressapi.Config) (int, any) {
			return http.StatusOK, egressapi.Status{PodUID: "another-pod", Revision: cfg.Revision}
		})
		if err := p.Ensure(context.Background(), pod, config()); err == nil {
			t.Fatal("no error")
		}
		if p.Applied(pod, config().Revision) {
			t.Error("remembered as applied")
		}
	})
	t.Run("a refusal is Rejected", func(t *testing.T) {
		p, pod, _ := fakeEgress(t, "pod-uid", func(*egressapi.Config) (int, any) { return http.StatusUnprocessableEntity, "bad rule" })
		var rejected *Rejected
		if err := p.Ensure(context.Background(), pod, config()); !errors.As(err, &rejected) || rejected.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("err = %v, want Rejected 422", err)
		}
	})
	t.Run("a pod without an IP", func(t *testing.T) {
		p := NewPusher(noCreds{})
		if err := p.Ensure(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, config()); err == nil {
			t.Fatal("no error")
		}
	})
}
