package batchsandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/claimapi"
)

// Claimer gives the execd of an allocated pool pod to its sandbox (see claimapi).
type Claimer interface {
	// Claim presents poolToken to the pod's execd. An error of type *ClaimRejected means execd
	// refused the claim as it is; other errors are worth a retry.
	Claim(ctx context.Context, pod *corev1.Pod, poolToken string, req *claimapi.Request) (*claimapi.Response, error)
}

// ClaimRejected: execd answered with a client error; repeating the same claim will not help.
type ClaimRejected struct {
	Pod        string
	StatusCode int
	Message    string
}

func (e *ClaimRejected) Error() string {
	return fmt.Sprintf("execd of pod %s refused the allocation (%d): %s", e.Pod, e.StatusCode, e.Message)
}

// claimTimeout bounds one claim: execd answers at once unless the pod's network is gone.
const claimTimeout = 5 * time.Second

// HTTPClaimer claims execd over the pod network, at the pod IP and ExecdPort.
type HTTPClaimer struct {
	Client *http.Client
	// Port overrides ExecdPort (tests).
	Port int
}

var _ Claimer = &HTTPClaimer{}

// NewHTTPClaimer returns a claimer with its own connection pool: claims are small, many and to
// many pods.
func NewHTTPClaimer() *HTTPClaimer {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 2
	transport.Proxy = nil // pod IPs, never through a proxy
	return &HTTPClaimer{Client: &http.Client{Transport: transport, Timeout: claimTimeout}}
}

// Claim implements Claimer.
func (c *HTTPClaimer) Claim(ctx context.Context, pod *corev1.Pod, poolToken string, req *claimapi.Request) (*claimapi.Response, error) {
	if pod.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	port := c.Port
	if port == 0 {
		port = controlv1alpha1.ExecdPort
	}
	url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)) + claimapi.Path
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Authorization", "Bearer "+poolToken)
	resp, err := c.Client.Do(httpReq)
	if err != nil {
		return nil, fmt.Errorf("claim execd of pod %s: %w", pod.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusOK:
		out := &claimapi.Response{}
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("claim execd of pod %s: decode answer: %w", pod.Name, err)
		}
		return out, nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
		return nil, &ClaimRejected{Pod: pod.Name, StatusCode: resp.StatusCode, Message: string(bytes.TrimSpace(data))}
	default:
		return nil, fmt.Errorf("claim execd of pod %s: %s: %s", pod.Name, resp.Status, bytes.TrimSpace(data))
	}
}
