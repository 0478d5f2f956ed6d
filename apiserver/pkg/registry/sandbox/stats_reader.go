package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeclient"
)

const (
	// StatsTimeout bounds the wait for the node agents of one answer. An agent answers from
	// its last sample (nodeapi.SampleInterval) and reads nothing of the node to do so, so a
	// healthy one answers in milliseconds; a node that is down must not hold `kubectl
	// sandbox top` for longer than a person waits for it, and its replicas say
	// NodeUnavailable instead.
	StatsTimeout = 2 * time.Second
	// maxNodeCalls bounds the node agents asked at once: a list of every namespace asks every
	// node with a sandbox once, and a large cluster has thousands. 64 in flight ask 1,000
	// nodes in a few round trips, well within StatsTimeout.
	maxNodeCalls = 64
	// maxAgentMessage bounds what of an agent's error answer reaches a replica's message.
	maxAgentMessage = 200
)

// NodeStats reads the usage figures of the node agents (nodeclient.Stats), at a node's
// address: the seam of the stats tests.
type NodeStats interface {
	// List reads the figures of every sandbox pod of the node.
	List(ctx context.Context, hostIP string) (*nodeapi.StatsList, error)
	// Pod reads those of one pod; nodeclient.IsNotFound for a pod the agent has no figures of.
	Pod(ctx context.Context, hostIP, uid string) (*nodeapi.PodStats, error)
}

var _ NodeStats = &nodeclient.Stats{}

// StatsReader answers what sandboxes use, for the stats subresource and the sandboxstats
// resource: the replicas and their pods from the informer caches, the figures from the node
// agents of the pods' nodes, one request per node whatever the number of sandboxes, all
// nodes at once. A node whose agent does not answer costs its replicas their figures
// (NodeUnavailable), never the answer.
//
// Reading the figures is no use of a sandbox: it does not renew one with autoRenew, or a
// `kubectl sandbox top` left running would keep every sandbox it shows alive.
type StatsReader struct {
	// Reader reads BatchSandboxes: the cache first, and for a get the kube-apiserver when
	// the cache does not hold the sandbox yet (CacheFirst).
	Reader client.Reader
	// Pods reads the pods of sandboxes, from the cache only: a pod too new to be in the
	// cache has no figures yet either, and a list must cost no request per row.
	Pods client.Reader
	// Nodes reads the node agents.
	Nodes NodeStats
	// Clock stamps each answer's creationTimestamp; nil: the real clock.
	Clock clock.PassiveClock
	// Timeout bounds the wait for the node agents; 0: StatsTimeout.
	Timeout time.Duration
}

// get is the SandboxStats of the sandbox namespace/name; for a missing one, a 404 of
// resource: sandboxes for the subresource, sandboxstats for the resource, as the client
// asked.
func (s *StatsReader) get(ctx context.Context, namespace, name string, resource schema.GroupResource) (*sandboxv1alpha1.SandboxStats, error) {
	bs := &controlv1alpha1.BatchSandbox{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, bs); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(resource, name)
		}
		return nil, apierrors.NewInternalError(fmt.Errorf("get batchsandbox: %w", err))
	}
	out, err := s.gather(ctx, []*controlv1alpha1.BatchSandbox{bs})
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

// statsWant is a replica whose figures are to be read from its node's agent.
type statsWant struct {
	pod *corev1.Pod
	out *sandboxv1alpha1.SandboxReplicaStats
}

// gather makes the SandboxStats of each of sandboxes, in their order.
func (s *StatsReader) gather(ctx context.Context, sandboxes []*controlv1alpha1.BatchSandbox) ([]sandboxv1alpha1.SandboxStats, error) {
	now := metav1.NewTime(s.now())
	out := make([]sandboxv1alpha1.SandboxStats, len(sandboxes))
	// The replicas to read, by the address of their node's agent.
	byHost := map[string][]statsWant{}
	for i, bs := range sandboxes {
		replicas := replicaIndexes(bs)
		out[i] = sandboxv1alpha1.SandboxStats{
			ObjectMeta: metav1.ObjectMeta{Name: bs.Name, Namespace: bs.Namespace, Labels: maps.Clone(bs.Labels), CreationTimestamp: now},
			Replicas:   make([]sandboxv1alpha1.SandboxReplicaStats, len(replicas)),
		}
		for j, replica := range replicas {
			rs := &out[i].Replicas[j]
			rs.Replica = replica
			pod, why, err := s.podOf(ctx, bs, replica)
			if err != nil {
				return nil, err
			}
			if pod == nil {
				rs.Reason, rs.Message = sandboxv1alpha1.StatsReasonNoPod, why
				continue
			}
			rs.Pod, rs.Node = pod.Name, pod.Spec.NodeName
			if pod.Status.HostIP == "" {
				// Scheduled or not, nothing runs it yet: there is no agent to ask.
				rs.Reason = sandboxv1alpha1.StatsReasonNotSampled
				rs.Message = fmt.Sprintf("pod %s has not started on a node yet (%s)", pod.Name, cmp.Or(string(pod.Status.Phase), string(corev1.PodPending)))
				continue
			}
			byHost[pod.Status.HostIP] = append(byHost[pod.Status.HostIP], statsWant{pod: pod, out: rs})
		}
	}
	s.fetch(ctx, byHost)
	return out, nil
}

// replicaIndexes are the replicas of bs: those of its spec, and any its status still has a
// pod for beyond them (being scaled down), whose pods still cost their nodes.
func replicaIndexes(bs *controlv1alpha1.BatchSandbox) []int32 {
	desired := ptr.Deref(bs.Spec.Replicas, 1)
	indexes := make([]int32, 0, desired)
	for i := range desired {
		indexes = append(indexes, i)
	}
	for _, p := range bs.Status.Pods {
		if p.Replica >= desired && !slices.Contains(indexes, p.Replica) {
			indexes = append(indexes, p.Replica)
		}
	}
	slices.Sort(indexes)
	return indexes
}

// podOf is the pod of a replica, as the other subresources find it (sandboxconn's
// resolver): the one the sandbox's status names, if it still belongs to the sandbox. Without
// one, why says why, for the replica's NoPod message.
func (s *StatsReader) podOf(ctx context.Context, bs *controlv1alpha1.BatchSandbox, replica int32) (pod *corev1.Pod, why string, err error) {
	name := ""
	for _, p := range bs.Status.Pods {
		if p.Replica == replica {
			name = p.Name
		}
	}
	phase := cmp.Or(string(bs.Status.Phase), string(controlv1alpha1.PhasePending))
	switch {
	case name == "" && bs.Spec.Paused:
		return nil, fmt.Sprintf("the sandbox is paused (phase %s)", phase), nil
	case name == "":
		return nil, fmt.Sprintf("replica %d has no pod yet (phase %s)", replica, phase), nil
	}
	pod = &corev1.Pod{}
	// Read only: the cache's own copy spares a copy of every pod of a list.
	if err := s.Pods.Get(ctx, client.ObjectKey{Namespace: bs.Namespace, Name: name}, pod, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("pod %s of replica %d is gone and is being replaced", name, replica), nil
		}
		return nil, "", apierrors.NewInternalError(fmt.Errorf("get pod: %w", err))
	}
	// The pod's label is the record of ownership; a pod that lost it serves another sandbox
	// (or none), and its figures are not this one's.
	if pod.Labels[controlv1alpha1.LabelBatchSandbox] != bs.Name || !metav1.IsControlledBy(pod, bs) {
		return nil, fmt.Sprintf("pod %s no longer belongs to the sandbox", name), nil
	}
	return pod, "", nil
}

// fetch asks the agent of each node of byHost, all at once (at most maxNodeCalls in flight),
// within the timeout, and fills in each replica's figures or why it has none. Each call
// writes only the replicas of its own node.
func (s *StatsReader) fetch(ctx context.Context, byHost map[string][]statsWant) {
	if len(byHost) == 0 {
		return
	}
	timeout := cmp.Or(s.Timeout, StatsTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	slots := make(chan struct{}, maxNodeCalls)
	var wg sync.WaitGroup
	for host, wants := range byHost {
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-ctx.Done():
				fillStats(wants, nil, "", ctx.Err(), timeout)
				return
			}
			figures, node, err := s.readNode(ctx, host, wants)
			if err != nil {
				klog.FromContext(ctx).V(2).Info("A node agent did not answer for stats", "node", nodeOf(wants, node), "host", host, "err", err)
			}
			fillStats(wants, figures, node, err, timeout)
		})
	}
	wg.Wait()
}

// readNode reads the figures of the pods of wants on the node at host, by pod UID: the one
// pod's when there is one (the usual GET of one sandbox's stats), which costs the agent no
// list of its node; the node's list otherwise. node is the agent's name of its node, when it
// said.
func (s *StatsReader) readNode(ctx context.Context, host string, wants []statsWant) (map[string]*nodeapi.PodStats, string, error) {
	if len(wants) == 1 {
		uid := string(wants[0].pod.UID)
		ps, err := s.Nodes.Pod(ctx, host, uid)
		switch {
		case nodeclient.IsNotFound(err):
			return map[string]*nodeapi.PodStats{}, "", nil
		case err != nil:
			return nil, "", err
		}
		return map[string]*nodeapi.PodStats{ps.PodUID: ps}, "", nil
	}
	list, err := s.Nodes.List(ctx, host)
	if err != nil {
		return nil, "", err
	}
	figures := make(map[string]*nodeapi.PodStats, len(list.Items))
	for i := range list.Items {
		figures[list.Items[i].PodUID] = &list.Items[i]
	}
	return figures, list.Node, nil
}

// fillStats writes the answer of one node into its replicas: err for all of them, or each
// pod's figures, joined by the pod's UID.
func fillStats(wants []statsWant, figures map[string]*nodeapi.PodStats, node string, err error, timeout time.Duration) {
	for _, w := range wants {
		rs := w.out
		if rs.Node == "" {
			rs.Node = node
		}
		if err != nil {
			rs.Reason, rs.Message = sandboxv1alpha1.StatsReasonNodeUnavailable, agentMessage(rs.Node, err, timeout)
			continue
		}
		ps, ok := figures[string(w.pod.UID)]
		if !ok {
			rs.Reason = sandboxv1alpha1.StatsReasonNotSampled
			rs.Message = fmt.Sprintf("%s has no figures of pod %s yet", agentName(rs.Node), w.pod.Name)
			continue
		}
		replicaFigures(rs, ps)
	}
}

// replicaFigures converts the agent's figures of a pod into rs. The agent counts in uint64;
// the API's integers are int64 (as the JSON of every Kubernetes API is), so a figure past
// what int64 holds stays at its maximum rather than turning negative.
func replicaFigures(rs *sandboxv1alpha1.SandboxReplicaStats, ps *nodeapi.PodStats) {
	rs.Timestamp = metav1.NewTime(ps.Timestamp)
	// Milliseconds, as metrics.k8s.io answers a window: the nanoseconds of two reads are noise.
	rs.Window = metav1.Duration{Duration: ps.Window.Round(time.Millisecond)}
	if c := ps.CPU; c != nil {
		rs.CPU = &sandboxv1alpha1.SandboxCPUStats{UsageNanoCores: saturate(c.UsageNanoCores), UsageCoreNanoSeconds: saturate(c.UsageCoreNanoSeconds)}
	}
	if m := ps.Memory; m != nil {
		rs.Memory = &sandboxv1alpha1.SandboxMemoryStats{
			WorkingSetBytes: saturate(m.WorkingSetBytes), RSSBytes: saturate(m.RSSBytes), UsageBytes: saturate(m.UsageBytes),
			LimitBytes: saturate(m.LimitBytes), PeakBytes: saturate(m.PeakBytes), OOMKills: saturate(m.OOMKills),
		}
	}
	if d := ps.Disk; d != nil {
		rs.Disk = &sandboxv1alpha1.SandboxDiskStats{WritableLayerBytes: saturate(d.WritableLayerBytes), EmptyDirBytes: saturate(d.EmptyDirBytes)}
	}
	if n := ps.Network; n != nil {
		rs.Network = &sandboxv1alpha1.SandboxNetworkStats{
			RxBytes: saturate(n.RxBytes), TxBytes: saturate(n.TxBytes), RxPackets: saturate(n.RxPackets), TxPackets: saturate(n.TxPackets),
			ConnectionsAllowed: saturate(n.ConnectionsAllowed), ConnectionsDenied: saturate(n.ConnectionsDenied),
		}
	}
	if ps.Processes != nil {
		rs.Processes = ptr.To(saturate(*ps.Processes))
	}
	if len(ps.Errors) > 0 {
		// In a fixed order, so that the same figures always read the same.
		figures := slices.Sorted(maps.Keys(ps.Errors))
		msgs := make([]string, 0, len(figures))
		for _, f := range figures {
			msgs = append(msgs, f+": "+ps.Errors[f])
		}
		rs.Reason, rs.Message = sandboxv1alpha1.StatsReasonPartial, "not read: "+strings.Join(msgs, "; ")
	}
}

func saturate(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

// agentMessage says why the agent of node did not answer, for a person: what failed, without
// the URL or the node's address, which a user who may read stats need not see (nor may
// read otherwise), and with no more of the agent's own answer than maxAgentMessage.
func agentMessage(node string, err error, timeout time.Duration) string {
	who := agentName(node)
	var statusErr *nodeclient.StatusError
	var opErr *net.OpError
	var urlErr *url.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &opErr) && opErr.Timeout()):
		return fmt.Sprintf("%s did not answer within %s", who, timeout)
	case errors.As(err, &statusErr):
		msg := statusErr.Message
		if r := []rune(msg); len(r) > maxAgentMessage {
			msg = string(r[:maxAgentMessage]) + "..."
		}
		return fmt.Sprintf("%s answered %d %s: %s", who, statusErr.Code, http.StatusText(statusErr.Code), msg)
	case errors.As(err, &opErr):
		// "dial tcp 10.0.0.1:9446: connect: connection refused" without the addresses.
		return fmt.Sprintf("%s: %s: %v", who, opErr.Op, opErr.Err)
	case errors.As(err, &urlErr):
		return fmt.Sprintf("%s: %v", who, urlErr.Err)
	}
	return fmt.Sprintf("%s: %v", who, err)
}

func agentName(node string) string {
	if node == "" {
		return "sandbox-node"
	}
	return "sandbox-node on node " + node
}

// nodeOf names the node of wants, for logs.
func nodeOf(wants []statsWant, node string) string {
	for _, w := range wants {
		if w.out.Node != "" {
			return w.out.Node
		}
	}
	return node
}

func (s *StatsReader) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}
