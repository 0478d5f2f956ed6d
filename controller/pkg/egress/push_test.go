package egress

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// testAuthority is a kube-sandbox CA, as sandbox-controller holds it.
func testAuthority(t *testing.T) *pki.Authority {
	t.Helper()
	ca, err := pki.NewCA("kube-sandbox-ca@1", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a := pki.NewAuthority(nil)
	a.Set(ca, nil)
	return a
}

// egressServer serves h over TLS with a certificate the authority issued for serverName, as
// sandbox-node does with nodeapi.ServerName.
func egressServer(t *testing.T, a *pki.Authority, serverName string, h http.Handler) (ip string, port int) {
	t.Helper()
	key, err := pki.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	chain, _, err := a.IssueServerCertificate(key.Public(), serverName, "ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(chain, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ = strconv.Atoi(p)
	return host, port
}

// fakeEgress answers PUT PodPolicyPath as sandbox-node does, with a certificate for serverName.
func fakeEgress(t *testing.T, serverName string, answer func(cfg *egressapi.Config) (int, any)) (*Pusher, *corev1.Pod, *atomic.Int32) {
	t.Helper()
	var puts atomic.Int32
	a := testAuthority(t)
	ip, port := egressServer(t, a, serverName, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != egressapi.PodPolicyPath("pod-uid") {
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
		if msg, ok := body.(string); ok {
			// Refusals and failures are plain text, as http.Error writes them.
			http.Error(w, msg, code)
			return
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	}))
	p := NewPusher(a)
	p.Port = port
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "pod-uid"}, Status: corev1.PodStatus{PodIP: "10.244.0.9", HostIP: ip}}
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
		p, pod, puts := fakeEgress(t, nodeapi.ServerName, ok)
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
	})
	t.Run("an answer for another pod is not a confirmation", func(t *testing.T) {
		p, pod, _ := fakeEgress(t, nodeapi.ServerName, func(cfg *egressapi.Config) (int, any) {
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
		p, pod, _ := fakeEgress(t, nodeapi.ServerName, func(*egressapi.Config) (int, any) { return http.StatusUnprocessableEntity, "bad rule" })
		var rejected *Rejected
		if err := p.Ensure(context.Background(), pod, config()); !errors.As(err, &rejected) || rejected.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("err = %v, want Rejected 422", err)
		}
	})
	t.Run("a node agent that does not know the pod yet is asked again", func(t *testing.T) {
		p, pod, _ := fakeEgress(t, nodeapi.ServerName, func(*egressapi.Config) (int, any) { return http.StatusNotFound, "PodNotOnNode: no such pod" })
		var ne *NotEnforced
		if err := p.Ensure(context.Background(), pod, config()); !errors.As(err, &ne) || ne.Reason != egressapi.ReasonPodNotFound {
			t.Fatalf("err = %v, want NotEnforced %s", err, egressapi.ReasonPodNotFound)
		}
	})
	t.Run("a failure says the agent's reason", func(t *testing.T) {
		p, pod, _ := fakeEgress(t, nodeapi.ServerName, func(*egressapi.Config) (int, any) {
			return http.StatusInternalServerError, egressapi.ReasonUnverified + ": a probe never reached the filter"
		})
		var ne *NotEnforced
		if err := p.Ensure(context.Background(), pod, config()); !errors.As(err, &ne) || ne.Reason != egressapi.ReasonUnverified {
			t.Fatalf("err = %v, want NotEnforced %s", err, egressapi.ReasonUnverified)
		}
	})
	t.Run("a server with another name is not sandbox-node", func(t *testing.T) {
		p, pod, puts := fakeEgress(t, "sandbox-node.example", ok)
		if err := p.Ensure(context.Background(), pod, config()); err == nil || puts.Load() != 0 {
			t.Fatalf("err = %v after %d pushes, want a TLS error before any", err, puts.Load())
		}
	})
	t.Run("execd's certificate is not sandbox-node's", func(t *testing.T) {
		a := testAuthority(t)
		ip, port := egressServer(t, a, execdapi.PodServerName("pod-uid"), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			t.Error("a request reached a server with execd's certificate")
		}))
		p := NewPusher(a)
		p.Port = port
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "pod-uid"}, Status: corev1.PodStatus{HostIP: ip}}
		if err := p.Ensure(context.Background(), pod, config()); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("a push waits for the CA to be loaded", func(t *testing.T) {
		ca, err := pki.NewCA("kube-sandbox-ca@1", time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		loaded := pki.NewAuthority(nil)
		loaded.Set(ca, nil)
		ip, port := egressServer(t, loaded, nodeapi.ServerName, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cfg := &egressapi.Config{}
			_ = json.NewDecoder(r.Body).Decode(cfg)
			_ = json.NewEncoder(w).Encode(egressapi.Status{PodUID: cfg.PodUID, Revision: cfg.Revision})
		}))
		a := pki.NewAuthority(nil) // no CA yet, as a controller that has just started
		p := NewPusher(a)
		p.Port = port
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "pod-uid"}, Status: corev1.PodStatus{HostIP: ip}}
		done := make(chan error, 1)
		go func() { done <- p.Ensure(context.Background(), pod, config()) }()
		select {
		case err := <-done:
			t.Fatalf("the push ended (%v) before the CA was loaded", err)
		case <-time.After(100 * time.Millisecond):
		}
		a.Set(ca, nil)
		if err := <-done; err != nil {
			t.Fatalf("the push once the CA was loaded: %v", err)
		}
		// Without one in time: the wait's error, not a push.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if _, err := NewPusher(pki.NewAuthority(nil)).Push(ctx, pod, config()); !errors.Is(err, pki.ErrNotReady) {
			t.Fatalf("err = %v, want ErrNotReady", err)
		}
	})
	t.Run("a pod without a node address", func(t *testing.T) {
		p := NewPusher(testAuthority(t))
		if err := p.Ensure(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, config()); err == nil {
			t.Fatal("no error")
		}
	})
}
