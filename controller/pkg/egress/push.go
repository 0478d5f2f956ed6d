package egress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// pushTimeout bounds one push: a small body, and a ruleset sync in the pod's kernel.
const pushTimeout = 5 * time.Second

// Rejected: sandbox-egress refused the Config (4xx): retrying the same one will not help.
type Rejected struct {
	Pod        string
	StatusCode int
	Message    string
}

func (e *Rejected) Error() string {
	return fmt.Sprintf("sandbox-egress of pod %s refused the policy (%d): %s", e.Pod, e.StatusCode, e.Message)
}

// Pusher pushes Configs to the sandbox-egress of pods, and remembers what each pod confirmed,
// so that a pod costs one push per change of its Config, however often it is reconciled.
type Pusher struct {
	client *http.Client
	// Port overrides egressapi.ControlPort (tests).
	Port int

	mu      sync.Mutex
	applied map[types.UID]string // pod UID -> what it confirmed (appliedKey)
}

// appliedKey is what a pod confirmed: the revision, and the restarts of its sandbox-egress
// then. A restarted sidecar restores the last policy it applied; should that fail, it denies
// everything, and the next push (the restart count changed) mends it.
func appliedKey(pod *corev1.Pod, revision string) string {
	restarts := int32(0)
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name == egressapi.ContainerName {
			restarts = cs.RestartCount
		}
	}
	return revision + "/" + strconv.Itoa(int(restarts))
}

// NewPusher presents creds' client certificate (sandbox-controller's) to sandbox-egress, and
// verifies that what answers is the sandbox-egress of the pod meant: its certificate, issued
// by the controller (package identity) to the key that pod's egress container holds, names
// egressapi.ServerName(pod UID). Code in the sandbox, which shares the pod's network namespace
// and can bind the port while the sidecar is down, holds no such key.
func NewPusher(creds execdclient.Credentials) *Pusher {
	return &Pusher{client: &http.Client{
		Timeout: pushTimeout,
		Transport: execdclient.NewTransport(creds, execdclient.Options{
			ResponseHeaderTimeout: pushTimeout, MaxIdleConnsPerHost: 1, PodUIDFromServerName: egressapi.PodUIDFromServerName,
		}),
	}}
}

// request is a request to the sandbox-egress of pod.
func request(ctx context.Context, pod *corev1.Pod, port int, method, path string, body io.Reader) (*http.Request, error) {
	if port == 0 {
		port = egressapi.ControlPort
	}
	target := execdclient.Target{PodIP: pod.Status.PodIP, PodUID: string(pod.UID), Port: port}
	u := &url.URL{Scheme: "https", Host: net.JoinHostPort(egressapi.ServerName(string(pod.UID)), strconv.Itoa(port)), Path: path}
	return http.NewRequestWithContext(execdclient.WithTarget(ctx, target), method, u.String(), body)
}

// Applied reports whether the pod's current sandbox-egress confirmed the revision.
func (p *Pusher) Applied(pod *corev1.Pod, revision string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied[pod.UID] == appliedKey(pod, revision)
}

// Forget drops what is remembered of a pod that is gone.
func (p *Pusher) Forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.applied, uid)
}

// Ensure pushes cfg to the pod unless it confirmed that revision already.
func (p *Pusher) Ensure(ctx context.Context, pod *corev1.Pod, cfg *egressapi.Config) error {
	if p.Applied(pod, cfg.Revision) {
		return nil
	}
	st, err := p.Push(ctx, pod, cfg)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.applied == nil {
		p.applied = map[types.UID]string{}
	}
	p.applied[pod.UID] = appliedKey(pod, st.Revision)
	return nil
}

// Push sends cfg to the pod's sandbox-egress and returns what it applied.
func (p *Pusher) Push(ctx context.Context, pod *corev1.Pod, cfg *egressapi.Config) (*egressapi.Status, error) {
	if pod.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s has no IP yet", pod.Name)
	}
	body, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	req, err := request(ctx, pod, p.Port, http.MethodPut, egressapi.PolicyPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("push the egress policy to pod %s: %w", pod.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusOK:
		st := &egressapi.Status{}
		if err := json.Unmarshal(data, st); err != nil {
			return nil, fmt.Errorf("push the egress policy to pod %s: decode answer: %w", pod.Name, err)
		}
		if st.PodUID != string(pod.UID) || st.Revision != cfg.Revision {
			return nil, errors.New("the sandbox-egress of pod " + pod.Name + " answered for another pod or revision")
		}
		return st, nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, &Rejected{Pod: pod.Name, StatusCode: resp.StatusCode, Message: string(bytes.TrimSpace(data))}
	default:
		return nil, fmt.Errorf("push the egress policy to pod %s: %s: %s", pod.Name, resp.Status, bytes.TrimSpace(data))
	}
}
