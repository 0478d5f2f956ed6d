package execd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// EgressWait is what a sandbox pod's first init container waits for before anything of the
// sandbox runs: the node agent saying the pod's egress filter is in force and proven.
type EgressWait struct {
	// NodeAddr is the node's address (the downward API's status.hostIP).
	NodeAddr string
	// Port overrides nodeapi.WaitPort (tests).
	Port int
	// PodUID is the pod's UID (metadata.uid).
	PodUID string
	// Revision is the policy the pod starts with; the controller may push a newer one first.
	Revision string
	// CA is the kube-sandbox CA's PEM: the agent's certificate is verified against it, so
	// that nothing but the node agent can say "go".
	CA []byte
}

// Wait asks until the agent answers that the filter is in force, or ctx ends. It never gives
// up on its own: a pod whose filter is not in force must not start, and its sandbox says why
// (the agent down, the node's datapath unverified).
func (w *EgressWait) Wait(ctx context.Context) error {
	if w.NodeAddr == "" || w.PodUID == "" {
		return errors.New("the node's address and the pod's UID are required (downward API status.hostIP and metadata.uid)")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(w.CA) {
		return errors.New("no kube-sandbox CA certificate to verify the node agent with")
	}
	port := w.Port
	if port == 0 {
		port = nodeapi.WaitPort
	}
	client := &http.Client{
		// One wait is at most egressapi.MaxWait on the agent's side.
		Timeout: egressapi.MaxWait + 10*time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13, ServerName: nodeapi.ServerName, RootCAs: roots},
			DialContext:     (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		},
	}
	u := (&url.URL{Scheme: "https", Host: net.JoinHostPort(w.NodeAddr, strconv.Itoa(port)), Path: egressapi.WaitPath(w.PodUID),
		RawQuery: url.Values{"revision": {w.Revision}}.Encode()}).String()
	start := time.Now()
	last := ""
	backoff := wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 2 * time.Second}
	for {
		msg, ok := w.ask(ctx, client, u)
		if ok {
			klog.InfoS("The pod's egress filter is in force", "after", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if msg != last {
			// Once per change of reason: kubectl logs -c shows why the pod waits.
			klog.InfoS("Waiting for the node agent to put the pod's egress filter in force", "node", w.NodeAddr, "reason", msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pod's egress filter is not in force: %s", last)
		case <-time.After(backoff.Step()):
		}
	}
}

func (w *EgressWait) ask(ctx context.Context, client *http.Client, u string) (string, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err.Error(), false
	}
	resp, err := client.Do(req)
	if err != nil {
		return "sandbox-node does not answer: " + err.Error(), false
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK {
		return "", true
	}
	return fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body))), false
}
