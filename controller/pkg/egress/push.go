package egress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-sandbox/kube-sandbox/controller/pkg/jsonclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeclient"
)

// pushTimeout bounds one push: a small body, a ruleset sync and a probe on the node. The node
// agent itself gives up sooner (it waits at most 4 s for a pod it has not seen yet), so that
// the answer says why.
const pushTimeout = 6 * time.Second

// Rejected: the node agent refused the Config (4xx): retrying the same one will not help.
type Rejected struct {
	Pod        string
	StatusCode int
	Message    string
}

func (e *Rejected) Error() string {
	return fmt.Sprintf("sandbox-node refused the policy of pod %s (%d): %s", e.Pod, e.StatusCode, e.Message)
}

// NotEnforced: the node agent could not put the policy in force (5xx); Reason is its word for
// why (egressapi.ReasonUnverified, ReasonApplyFailed, ...), "" when it gave none.
type NotEnforced struct {
	Pod     string
	Reason  string
	Message string
}

func (e *NotEnforced) Error() string {
	return fmt.Sprintf("sandbox-node could not enforce the policy of pod %s: %s", e.Pod, e.Message)
}

// Pusher pushes Configs to the node agent of each pod's node, and remembers what each pod
// confirmed, so that a pod costs one push per change of its Config, however often it is
// reconciled.
type Pusher struct {
	client *http.Client
	// creds may say when it holds a CA (pki.Authority's Wait): a push waits for it.
	creds execdclient.Credentials
	// Port overrides nodeapi.Port (tests).
	Port int

	mu      sync.Mutex
	applied map[types.UID]string // pod UID -> the revision it confirmed
}

// NewPusher presents creds' client certificate (sandbox-controller's) to sandbox-node, and
// verifies that what answers is sandbox-node: a certificate of the kube-sandbox CA for
// nodeapi.ServerName (the agent listens on the node's address, which is no name). Nothing in
// a sandbox holds that key, nor could it be reached there: the agent is on the node.
func NewPusher(creds execdclient.Credentials) *Pusher {
	return &Pusher{creds: creds, client: &http.Client{Timeout: pushTimeout, Transport: nodeclient.NewTransport(creds, pushTimeout, maxIdlePerNode)}}
}

// caWaiter is credentials that can wait until they hold a CA (pki.Authority).
type caWaiter interface {
	Wait(ctx context.Context) error
}

// maxIdlePerNode: a node serves many pods, so keep a few connections to each.
const maxIdlePerNode = 8

// nodeURL is the URL of path on the node agent of pod's node.
func nodeURL(pod *corev1.Pod, port int, path string) (string, error) {
	if pod.Status.HostIP == "" {
		return "", fmt.Errorf("pod %s has no node address yet", pod.Name)
	}
	return nodeclient.URL(pod.Status.HostIP, port, path)
}

// Applied reports whether the pod confirmed the revision.
func (p *Pusher) Applied(pod *corev1.Pod, revision string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied[pod.UID] == revision
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
	p.applied[pod.UID] = st.Revision
	return nil
}

// Push sends cfg to the node agent of the pod's node and returns what it put in force.
func (p *Pusher) Push(ctx context.Context, pod *corev1.Pod, cfg *egressapi.Config) (*egressapi.Status, error) {
	url, err := nodeURL(pod, p.Port, egressapi.PodPolicyPath(string(pod.UID)))
	if err != nil {
		return nil, err
	}
	// A controller that has just started, or just become the leader, reconciles before its CA
	// is loaded: the push waits for it (within pushTimeout), as certification does, instead of
	// failing with a policy it never tried to push.
	if w, ok := p.creds.(caWaiter); ok {
		wctx, cancel := context.WithTimeout(ctx, pushTimeout)
		err := w.Wait(wctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("push the egress policy of pod %s: %w", pod.Name, err)
		}
	}
	st := &egressapi.Status{}
	err = jsonclient.Do(ctx, p.client, http.MethodPut, url, cfg, st)
	var se *jsonclient.StatusError
	switch {
	case errors.As(err, &se) && se.Code == http.StatusNotFound:
		// The agent has not seen the pod (yet): its informer is behind ours. Try again.
		return nil, &NotEnforced{Pod: pod.Name, Reason: egressapi.ReasonPodNotFound, Message: se.Message}
	case errors.As(err, &se) && se.Code >= 400 && se.Code < 500:
		return nil, &Rejected{Pod: pod.Name, StatusCode: se.Code, Message: se.Message}
	case errors.As(err, &se):
		reason, _, _ := strings.Cut(se.Message, ":")
		return nil, &NotEnforced{Pod: pod.Name, Reason: reason, Message: se.Message}
	case err != nil:
		return nil, fmt.Errorf("push the egress policy of pod %s to sandbox-node on %s: %w", pod.Name, pod.Status.HostIP, err)
	case st.PodUID != string(pod.UID) || st.Revision != cfg.Revision:
		return nil, errors.New("sandbox-node answered for another pod or revision of pod " + pod.Name)
	}
	return st, nil
}
