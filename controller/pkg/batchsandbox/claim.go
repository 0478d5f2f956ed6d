package batchsandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-sandbox/kube-sandbox/controller/pkg/jsonclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// Claimer gives the execd of a pod to its sandbox (see execdapi.ClaimPath).
type Claimer interface {
	// Claim claims the pod's execd, verified as that pod's. An error of type *ClaimRejected
	// means execd refused the claim as it is; other errors are worth a retry.
	Claim(ctx context.Context, pod *corev1.Pod, req *execdapi.ClaimRequest) (*execdapi.ClaimResponse, error)
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

// HTTPClaimer claims execd over the pod network with mutual TLS (package execdclient).
type HTTPClaimer struct {
	Client *http.Client
	// Port overrides execdapi.Port (tests).
	Port int
}

var _ Claimer = &HTTPClaimer{}

// NewHTTPClaimer returns a claimer presenting and trusting creds, with its own connection
// pool: claims are small, many and to many pods.
func NewHTTPClaimer(creds execdclient.Credentials) *HTTPClaimer {
	return &HTTPClaimer{Client: &http.Client{
		Transport: execdclient.NewTransport(creds, execdclient.Options{ResponseHeaderTimeout: claimTimeout}),
		Timeout:   claimTimeout,
	}}
}

// Claim implements Claimer.
func (c *HTTPClaimer) Claim(ctx context.Context, pod *corev1.Pod, req *execdapi.ClaimRequest) (*execdapi.ClaimResponse, error) {
	if pod.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	target := execdclient.Target{PodIP: pod.Status.PodIP, PodUID: string(pod.UID), Port: c.Port}
	out := &execdapi.ClaimResponse{}
	err := jsonclient.Do(execdclient.WithTarget(ctx, target), c.Client, http.MethodPost,
		execdclient.URL(target, execdapi.ClaimPath, "").String(), req, out)
	var se *jsonclient.StatusError
	if errors.As(err, &se) && se.Refused() {
		return nil, &ClaimRejected{Pod: pod.Name, StatusCode: se.Code, Message: se.Message}
	}
	if err != nil {
		return nil, fmt.Errorf("claim execd of pod %s: %w", pod.Name, err)
	}
	return out, nil
}
