package identity

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// fakeReviewer answers TokenReviews as the kube-apiserver would for tokens it knows.
type fakeReviewer struct {
	mu      sync.Mutex
	tokens  map[string]authenticationv1.TokenReviewStatus
	reviews int
}

func (f *fakeReviewer) Review(_ context.Context, token string, audiences []string) (*authenticationv1.TokenReviewStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews++
	st, ok := f.tokens[token]
	if !ok || len(audiences) != 1 || audiences[0] != execdapi.IdentityAudience {
		return &authenticationv1.TokenReviewStatus{Error: "unknown token"}, nil
	}
	return &st, nil
}

func boundTo(ns, name, uid string) authenticationv1.TokenReviewStatus {
	return authenticationv1.TokenReviewStatus{
		Authenticated: true,
		Audiences:     []string{execdapi.IdentityAudience},
		User: authenticationv1.UserInfo{Username: "system:serviceaccount:" + ns + ":default", Extra: map[string]authenticationv1.ExtraValue{
			extraPodName: {name}, extraPodUID: {uid},
		}},
	}
}

// podExecd runs a real execd on loopback, as in a pod, with token as its projected token.
func podExecd(t *testing.T, authority *pki.Authority, token string) (*execd.ServerIdentity, int) {
	t.Helper()
	bundle, err := authority.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := execd.ParseClientCAs(bundle)
	if err != nil {
		t.Fatal(err)
	}
	id, err := execd.NewServerIdentity("", pool)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := execd.NewHandler(execd.HandlerConfig{Executor: execd.NewExecutor(nil), IdentityTokenFile: tokenFile}, id)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: id.TLSConfig()}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return id, l.Addr().(*net.TCPAddr).Port
}

func testAuthority(t *testing.T) *pki.Authority {
	t.Helper()
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a := pki.NewAuthority(nil)
	a.Set(ca, nil)
	return a
}

func pod(uid string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID("00000000-0000-0000-0000-" + uid)},
		Status:     corev1.PodStatus{PodIP: "127.0.0.1", ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: "containerd://c1"}}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
	}
}

func TestCertify(t *testing.T) {
	p := pod("000000000001")
	tests := []struct {
		name      string
		review    authenticationv1.TokenReviewStatus
		certified bool
	}{
		{name: "the pod's own token", review: boundTo("ns", "p", string(p.UID)), certified: true},
		{name: "another pod's token", review: boundTo("ns", "q", "00000000-0000-0000-0000-000000000009")},
		{name: "a token of another namespace", review: boundTo("other", "p", string(p.UID))},
		{name: "a token that does not authenticate", review: authenticationv1.TokenReviewStatus{Error: "expired"}},
		{name: "a token for another audience", review: func() authenticationv1.TokenReviewStatus {
			st := boundTo("ns", "p", string(p.UID))
			st.Audiences = []string{"https://kubernetes.default.svc"}
			return st
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			authority := testAuthority(t)
			id, port := podExecd(t, authority, "the-token")
			reviewer := &fakeReviewer{tokens: map[string]authenticationv1.TokenReviewStatus{"the-token": tc.review}}
			c := &Certifier{Authority: authority, Reviewer: reviewer, Port: port}
			err := c.Ensure(t.Context(), p)
			var notThePod *ErrNotThePod
			if tc.certified != (err == nil) || !tc.certified && !errors.As(err, &notThePod) {
				t.Fatalf("Ensure() = %v, want certified: %v (or ErrNotThePod)", err, tc.certified)
			}
			if id.Certified() != tc.certified {
				t.Errorf("execd certified: %v, want %v", id.Certified(), tc.certified)
			}
			probe := execdclient.Probe(t.Context(), authority, execdclient.Target{PodIP: "127.0.0.1", PodUID: string(p.UID), Port: port})
			if (probe == nil) != tc.certified {
				t.Errorf("a verifying handshake: %v, want success: %v", probe, tc.certified)
			}
			if !tc.certified {
				return
			}
			// Remembered: no second certification, and nothing asked of the kube-apiserver.
			if err := c.Ensure(t.Context(), p); err != nil || reviewer.reviews != 1 || !c.Certified(p) {
				t.Errorf("second Ensure() = %v after %d reviews, want none more", err, reviewer.reviews)
			}
			// A restarted controller finds it certified with one handshake, without a review.
			fresh := &Certifier{Authority: authority, Reviewer: reviewer, Port: port}
			if err := fresh.Ensure(t.Context(), p); err != nil || reviewer.reviews != 1 {
				t.Errorf("a fresh Certifier: %v after %d reviews, want it found certified without one", err, reviewer.reviews)
			}
			// Another pod at the same address is not this one.
			if err := execdclient.Probe(t.Context(), authority, execdclient.Target{PodIP: "127.0.0.1", PodUID: "00000000-0000-0000-0000-000000000002", Port: port}); err == nil {
				t.Error("the certificate verified for another pod")
			}
		})
	}
}

// TestEnsureConcurrent: concurrent calls for one pod certify it once.
func TestEnsureConcurrent(t *testing.T) {
	authority := testAuthority(t)
	p := pod("000000000003")
	_, port := podExecd(t, authority, "tok")
	reviewer := &fakeReviewer{tokens: map[string]authenticationv1.TokenReviewStatus{"tok": boundTo("ns", "p", string(p.UID))}}
	c := &Certifier{Authority: authority, Reviewer: reviewer, Port: port}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- c.Ensure(t.Context(), p) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if reviewer.reviews != 1 {
		t.Errorf("%d token reviews, want 1", reviewer.reviews)
	}
}

// TestTransportVerifiesThePod: requests through execdclient's transport reach the pod they
// name, and fail closed without one.
func TestTransportVerifiesThePod(t *testing.T) {
	authority := testAuthority(t)
	p := pod("000000000004")
	_, port := podExecd(t, authority, "tok")
	reviewer := &fakeReviewer{tokens: map[string]authenticationv1.TokenReviewStatus{"tok": boundTo("ns", "p", string(p.UID))}}
	if err := (&Certifier{Authority: authority, Reviewer: reviewer, Port: port}).Ensure(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: execdclient.NewTransport(authority, execdclient.Options{})}
	get := func(ctx context.Context, target execdclient.Target) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, execdclient.URL(target, execdapi.MetricsPath, "").String(), nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	good := execdclient.Target{PodIP: "127.0.0.1", PodUID: string(p.UID), Port: port}
	if err := get(execdclient.WithTarget(t.Context(), good), good); err != nil {
		t.Errorf("request to the certified pod: %v", err)
	}
	other := execdclient.Target{PodIP: "127.0.0.1", PodUID: "00000000-0000-0000-0000-000000000005", Port: port}
	if err := get(execdclient.WithTarget(t.Context(), other), other); err == nil {
		t.Error("a request for another pod at the same address went through")
	}
	if err := get(t.Context(), good); !errors.Is(err, execdclient.ErrNoTarget) {
		t.Errorf("a request without a target: %v, want ErrNoTarget", err)
	}
	if err := get(execdclient.WithTarget(t.Context(), other), good); err == nil {
		t.Error("a request whose URL and target name different pods went through")
	}
}

func TestControlledByUs(t *testing.T) {
	ref := func(apiVersion, kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "x", UID: "u", Controller: ptr.To(true)}}
	}
	for name, tc := range map[string]struct {
		refs []metav1.OwnerReference
		want bool
	}{
		"a sandbox's pod":            {refs: ref("control.kube-sandbox.io/v1alpha1", "BatchSandbox"), want: true},
		"a pool's pod":               {refs: ref("control.kube-sandbox.io/v1alpha1", "Pool"), want: true},
		"a ReplicaSet's pod":         {refs: ref("apps/v1", "ReplicaSet")},
		"a Pool of another group":    {refs: ref("example.com/v1", "Pool")},
		"a pod of its own, labelled": {},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: tc.refs}}
		if got := controlledByUs(pod); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}
