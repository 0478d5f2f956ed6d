// Package identity certifies the execd of every sandbox pod: it proves which pod answers at a
// pod IP, and gives that execd a serving certificate for its pod UID, so that
// sandbox-apiserver (and the controller's own claims) know they reached the pod they meant.
//
// Certification runs over one TLS connection to the pod: the controller reads the pod's
// projected service account token (GET execdapi.IdentityPath), a TokenReview names the pod it
// is bound to, which must be the pod meant, and the controller signs a certificate for the key
// that connection's handshake showed and hands it back (PUT). The token cannot be used
// anywhere else (its audience is execd's), and a pod that is gone has no valid token.
package identity

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/jsonclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// certifyTimeout bounds one certification: a few round trips to the pod and one TokenReview.
const certifyTimeout = 10 * time.Second

// Extra keys of a TokenReview's user for a token bound to a pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// TokenReviewer reviews a token (the kube-apiserver's TokenReview API).
type TokenReviewer interface {
	Review(ctx context.Context, token string, audiences []string) (*authenticationv1.TokenReviewStatus, error)
}

// ClientReviewer reviews tokens with the TokenReview API of the controller's client.
type ClientReviewer struct{ Client client.Client }

// Review implements TokenReviewer.
func (r ClientReviewer) Review(ctx context.Context, token string, audiences []string) (*authenticationv1.TokenReviewStatus, error) {
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences}}
	if err := r.Client.Create(ctx, tr); err != nil {
		return nil, fmt.Errorf("token review: %w", err)
	}
	return &tr.Status, nil
}

// ErrNotThePod: what answered at the pod's IP did not prove to be the pod.
type ErrNotThePod struct {
	Pod    string
	Reason string
}

func (e *ErrNotThePod) Error() string {
	return fmt.Sprintf("the server at the IP of pod %s did not prove to be that pod's: %s", e.Pod, e.Reason)
}

// Certifier certifies pods, and remembers which containers it certified (or found certified),
// so that a pod costs one certification however often it is asked for.
type Certifier struct {
	Authority *pki.Authority
	Reviewer  TokenReviewer
	// Port overrides execdapi.Port (tests).
	Port int

	mu        sync.Mutex
	certified map[types.UID]string // pod UID -> container ID
	inflight  map[types.UID]*call
}

type call struct {
	done chan struct{}
	err  error
}

// Certified reports whether the pod's current container was certified by this process.
func (c *Certifier) Certified(pod *corev1.Pod) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	rid := sandboxpod.RuntimeID(pod)
	return rid != "" && c.certified[pod.UID] == rid
}

// Forget drops what is remembered of a pod (it is gone).
func (c *Certifier) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.certified, uid)
}

// Ensure makes sure the pod's execd serves a certificate for it: at once if this process
// certified its current container; else after a handshake that verifies it (a restarted
// controller, or a restarted container that kept its identity), or after certifying it.
// Concurrent calls for one pod share the work. The pod must be running with an IP.
func (c *Certifier) Ensure(ctx context.Context, pod *corev1.Pod) error {
	if pod.Status.PodIP == "" {
		return fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	rid := sandboxpod.RuntimeID(pod)
	c.mu.Lock()
	if c.certified == nil {
		c.certified, c.inflight = map[types.UID]string{}, map[types.UID]*call{}
	}
	if rid != "" && c.certified[pod.UID] == rid {
		c.mu.Unlock()
		return nil
	}
	if cl, ok := c.inflight[pod.UID]; ok {
		c.mu.Unlock()
		select {
		case <-cl.done:
			return cl.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cl := &call{done: make(chan struct{})}
	c.inflight[pod.UID] = cl
	c.mu.Unlock()

	cl.err = c.ensure(ctx, pod)
	c.mu.Lock()
	delete(c.inflight, pod.UID)
	if cl.err == nil && rid != "" {
		c.certified[pod.UID] = rid
	}
	c.mu.Unlock()
	close(cl.done)
	return cl.err
}

func (c *Certifier) ensure(ctx context.Context, pod *corev1.Pod) error {
	if err := c.Authority.Wait(ctx); err != nil {
		return err
	}
	if err := c.probe(ctx, pod); err == nil {
		return nil
	}
	return c.Certify(ctx, pod)
}

func (c *Certifier) port() int {
	if c.Port == 0 {
		return execdapi.Port
	}
	return c.Port
}

// probe reports whether the server at the pod's IP presents a valid certificate for the pod,
// with one TLS handshake and nothing else.
func (c *Certifier) probe(ctx context.Context, pod *corev1.Pod) error {
	roots := c.Authority.RootCAs()
	if roots == nil {
		return execdclient.ErrNoTrust
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(c.port())))
	if err != nil {
		return err
	}
	cfg := execdclient.ClientTLSConfig(c.Authority, roots)
	cfg.ServerName = execdapi.PodServerName(string(pod.UID))
	tc := tls.Client(conn, cfg)
	defer func() { _ = tc.Close() }()
	return tc.HandshakeContext(ctx)
}

// probeTimeout bounds a probe: one TLS handshake with a pod.
const probeTimeout = 2 * time.Second

// Certify certifies the execd at the pod's IP for the pod, if it proves to be that pod.
func (c *Certifier) Certify(ctx context.Context, pod *corev1.Pod) error {
	logger := log.FromContext(ctx).WithValues("pod", client.ObjectKeyFromObject(pod))
	ctx, cancel := context.WithTimeout(ctx, certifyTimeout)
	defer cancel()
	conn, leaf, err := execdclient.DialUnverified(ctx, c.Authority, pod.Status.PodIP, c.port())
	if err != nil {
		return fmt.Errorf("connect to the server of pod %s on port %d: %w", pod.Name, c.port(), err)
	}
	defer func() { _ = conn.Close() }()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))

	body, err := roundTrip(rw, http.MethodGet, nil)
	if err != nil {
		return fmt.Errorf("read the identity of pod %s: %w", pod.Name, err)
	}
	var id execdapi.IdentityResponse
	if err := json.Unmarshal(body, &id); err != nil || id.PodToken == "" {
		return &ErrNotThePod{Pod: pod.Name, Reason: "it sent no pod token"}
	}
	if err := c.verify(ctx, pod, id.PodToken); err != nil {
		return err
	}
	chain, cert, err := c.Authority.IssueServerCertificate(leaf.PublicKey, execdapi.PodServerName(string(pod.UID)), pod.Namespace, pod.Name)
	if err != nil {
		return err
	}
	if _, err := roundTrip(rw, http.MethodPut, execdapi.CertificateRequest{CertificateChain: string(chain)}); err != nil {
		return fmt.Errorf("give pod %s its certificate: %w", pod.Name, err)
	}
	logger.V(4).Info("certified a server of a pod", "serverName", execdapi.PodServerName(string(pod.UID)), "notAfter", cert.NotAfter)
	return nil
}

// verify checks that token is bound to pod.
func (c *Certifier) verify(ctx context.Context, pod *corev1.Pod, token string) error {
	st, err := c.Reviewer.Review(ctx, token, []string{execdapi.IdentityAudience})
	if err != nil {
		return err
	}
	notThePod := func(why string, args ...any) error {
		return &ErrNotThePod{Pod: pod.Name, Reason: fmt.Sprintf(why, args...)}
	}
	switch {
	case !st.Authenticated:
		return notThePod("its token does not authenticate: %s", st.Error)
	case !slices.Contains(st.Audiences, execdapi.IdentityAudience):
		return notThePod("its token is not for audience %s", execdapi.IdentityAudience)
	case first(st.User.Extra[extraPodUID]) != string(pod.UID):
		return notThePod("its token is bound to pod %s (uid %s)", first(st.User.Extra[extraPodName]), first(st.User.Extra[extraPodUID]))
	case !strings.HasPrefix(st.User.Username, "system:serviceaccount:"+pod.Namespace+":"):
		return notThePod("its token belongs to %s, not to a service account of namespace %s", st.User.Username, pod.Namespace)
	}
	return nil
}

func first(v authenticationv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// roundTrip sends one request for execdapi.IdentityPath over rw, with in as its JSON body
// (nil: none), and returns the body of a 2xx answer (at most jsonclient.MaxAnswerBytes: a
// token or an acknowledgement).
func roundTrip(rw *bufio.ReadWriter, method string, in any) ([]byte, error) {
	req, err := jsonclient.NewRequest(context.Background(), method, "https://execd"+execdapi.IdentityPath, in)
	if err != nil {
		return nil, err
	}
	if err := req.Write(rw); err != nil {
		return nil, err
	}
	if err := rw.Flush(); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(rw.Reader, req)
	if err != nil {
		return nil, err
	}
	return jsonclient.Read(resp)
}
