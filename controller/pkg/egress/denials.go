package egress

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/jsonclient"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxevents"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeclient"
)

// Backoff of a denial watch whose pod does not answer; after maxWatchFailures in a row the
// watch stops, and the next reconcile of the sandbox starts it again.
const (
	watchRetryMin    = time.Second
	watchRetryMax    = time.Minute
	maxWatchFailures = 6
	// maxEventNames is how many names one Event lists.
	maxEventNames = 10
)

// DenialWatcher turns the DNS names a sandbox's policy denied into Events on its Sandbox. It
// holds one long poll (egressapi.PodDenialsPath) per pod, to the node agent of the pod's node,
// which answers when there is something to say, at most every 30 s, so a sandbox at rest costs
// an idle connection and nothing else. It runs on the leader only.
type DenialWatcher struct {
	Recorder events.EventRecorder
	// Port overrides nodeapi.Port (tests).
	Port int

	client  *http.Client
	mu      sync.Mutex
	ctx     context.Context
	running map[types.UID]context.CancelFunc
}

var _ manager.LeaderElectionRunnable = &DenialWatcher{}

// NewDenialWatcher presents creds' client certificate (see NewPusher for the server's).
func NewDenialWatcher(creds execdclient.Credentials, recorder events.EventRecorder) *DenialWatcher {
	// The node agent answers a long poll within its maximum wait (5 min): no response timeout
	// but the poll's own.
	return &DenialWatcher{Recorder: recorder, client: &http.Client{Transport: nodeclient.NewTransport(creds, 0, maxIdlePerNode)}}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (w *DenialWatcher) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: watches run until ctx ends.
func (w *DenialWatcher) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	<-ctx.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cancel := range w.running {
		cancel()
	}
	w.running = nil
	return nil
}

// Watch makes sure the pod of bs is watched; a no-op if it is, or before Start.
func (w *DenialWatcher) Watch(pod *corev1.Pod, bs *controlv1alpha1.BatchSandbox) {
	if w == nil || pod.Status.HostIP == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil {
		return
	}
	if _, ok := w.running[pod.UID]; ok {
		return
	}
	if w.running == nil {
		w.running = map[types.UID]context.CancelFunc{}
	}
	ctx, cancel := context.WithCancel(w.ctx)
	w.running[pod.UID] = cancel
	// The Events' object: the Sandbox (users never see the BatchSandbox) as it was when the
	// watch started. The reference is part of the key the recorder folds repeats by, so a fixed
	// one keeps the denials of a name in one series however often the sandbox changes.
	go w.watch(ctx, pod.DeepCopy(), bs.Namespace+"/"+bs.Name, sandboxevents.SandboxRef(bs))
}

// Forget stops the watch of a pod that is gone.
func (w *DenialWatcher) Forget(uid types.UID) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if cancel, ok := w.running[uid]; ok {
		cancel()
		delete(w.running, uid)
	}
}

func (w *DenialWatcher) watch(ctx context.Context, pod *corev1.Pod, key string, sandbox runtime.Object) {
	uid := pod.UID
	logger := log.FromContext(ctx).WithValues("batchSandbox", key, "pod", pod.Name)
	defer func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.running != nil && ctx.Err() == nil {
			delete(w.running, uid)
		}
	}()
	// Each report starts the backoff anew: only polls that fail in a row count.
	backoff := wait.Backoff{Duration: watchRetryMin, Factor: 2, Cap: watchRetryMax, Steps: maxWatchFailures}
	var lastErr error
	for {
		err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
			d, err := w.poll(ctx, pod)
			if err != nil {
				lastErr = err
				return false, nil
			}
			// One Event series per name: the events API folds Events that differ only in
			// their note into one series that keeps the first note, so the name is in the
			// action too.
			for _, e := range DenialEvents(d) {
				w.Recorder.Eventf(sandbox, nil, corev1.EventTypeWarning, controlv1alpha1.ReasonDeniedName, e.Action, "%s", e.Note)
			}
			return true, nil
		})
		if err != nil {
			if ctx.Err() == nil {
				logger.V(4).Info("stopped watching denials", "err", lastErr)
			}
			return
		}
	}
}

func (w *DenialWatcher) poll(ctx context.Context, pod *corev1.Pod) (egressapi.Denials, error) {
	var d egressapi.Denials
	url, err := nodeURL(pod, w.Port, egressapi.PodDenialsPath(string(pod.UID)))
	if err != nil {
		return d, err
	}
	return d, jsonclient.Do(ctx, w.client, http.MethodGet, url, nil, &d)
}

// DenialEvent is one Event of a report.
type DenialEvent struct{ Action, Note string }

// maxActionLength is the events API's limit on an Event's action.
const maxActionLength = 128

// DenialEvents are the Events of a report: one per name, most denied first, at most
// maxEventNames, and one for the rest.
func DenialEvents(d egressapi.Denials) []DenialEvent {
	names := make([]string, 0, len(d.Names))
	for n := range d.Names {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if d.Names[names[i]] != d.Names[names[j]] {
			return d.Names[names[i]] > d.Names[names[j]]
		}
		return names[i] < names[j]
	})
	others := d.Others
	var out []DenialEvent
	for i, n := range names {
		if i >= maxEventNames {
			others += d.Names[n]
			continue
		}
		action := "Resolve " + n
		if len(action) > maxActionLength {
			action = action[:maxActionLength]
		}
		out = append(out, DenialEvent{Action: action, Note: fmt.Sprintf("the network policy denied the DNS name %s (%d queries)", n, d.Names[n])})
	}
	if others > 0 {
		out = append(out, DenialEvent{Action: "Resolve", Note: fmt.Sprintf("the network policy denied %d queries for other names", others)})
	}
	return out
}
