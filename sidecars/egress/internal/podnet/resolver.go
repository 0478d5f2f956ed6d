package podnet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
)

// DefaultNamespace is the containerd namespace of the CRI plugin's containers.
const DefaultNamespace = "k8s.io"

// The labels the CRI plugin puts on a pod's sandbox (its pause container).
const (
	labelPodUID    = "io.kubernetes.pod.uid"
	labelCRIKind   = "io.cri-containerd.kind"
	criKindSandbox = "sandbox"
)

var (
	// ErrNotFound: containerd has no sandbox for the pod (yet: the kubelet has not created
	// it, or it is on another node).
	ErrNotFound = errors.New("no pod sandbox in containerd")
	// ErrNoNetNS: the pod's sandbox has no network namespace of its own (a hostNetwork pod).
	ErrNoNetNS = errors.New("the pod sandbox has no network namespace of its own")
)

// Resolver finds pods' network namespaces through containerd.
type Resolver struct {
	Client *containerd.Client
	// Namespace is the containerd namespace of the CRI plugin's containers; ""
	// is DefaultNamespace.
	Namespace string
}

// sandbox is a candidate sandbox container of a pod: its spec, and the status of its task
// ("": it has none).
type sandbox struct {
	id      string
	created time.Time
	status  containerd.ProcessStatus
	pid     uint32
	spec    []byte
}

// NetNSPath is the path of the network namespace of the pod with UID podUID: the one in the
// OCI spec of its sandbox container (/var/run/netns/cni-...). A pod has more than one
// sandbox when the kubelet has recreated it, the old ones' tasks having exited: the one
// whose task runs is taken, else the newest. No sandbox is ErrNotFound; a sandbox that has
// no namespace of its own is ErrNoNetNS. The namespace of a sandbox whose task has exited
// may already be gone.
func (r *Resolver) NetNSPath(ctx context.Context, podUID string) (string, error) {
	chosen, err := r.sandbox(ctx, podUID)
	if err != nil {
		return "", err
	}
	path, err := netNSFromSpec(chosen.spec)
	if err != nil {
		return "", fmt.Errorf("podnet: sandbox %s of pod %s: %w", chosen.id, podUID, err)
	}
	return path, nil
}

// NetNS is a path that opens the pod's network namespace from the node agent's mount
// namespace: /proc/PID/ns/net of its sandbox's running task (the agent shares the node's PID
// namespace), which needs no view of the runtime's netns bind mounts, and so no mount
// propagation into the agent's container (a node whose / is a private mount has none); else
// NetNSPath's.
func (r *Resolver) NetNS(ctx context.Context, podUID string) (string, error) {
	chosen, err := r.sandbox(ctx, podUID)
	if err != nil {
		return "", err
	}
	path, err := netNSFromSpec(chosen.spec)
	if err != nil {
		return "", fmt.Errorf("podnet: sandbox %s of pod %s: %w", chosen.id, podUID, err)
	}
	if chosen.status == containerd.Running && chosen.pid > 0 {
		return fmt.Sprintf("/proc/%d/ns/net", chosen.pid), nil
	}
	return path, nil
}

// sandbox is the pod's current sandbox container (see NetNSPath).
func (r *Resolver) sandbox(ctx context.Context, podUID string) (*sandbox, error) {
	if r.Client == nil {
		return nil, errors.New("podnet: Resolver has no containerd client")
	}
	if podUID == "" {
		return nil, errors.New("podnet: empty pod UID")
	}
	ns := r.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	ctx = namespaces.WithNamespace(ctx, ns)
	// The filter narrows the list on the daemon's side; the labels are checked here again.
	filter := fmt.Sprintf("labels.%q==%q,labels.%q==%q", labelPodUID, podUID, labelCRIKind, criKindSandbox)
	ctrs, err := r.Client.Containers(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("podnet: list the sandboxes of pod %s: %w", podUID, err)
	}
	var cands []sandbox
	for _, ctr := range ctrs {
		info, err := ctr.Info(ctx, containerd.WithoutRefreshedMetadata)
		if err != nil {
			return nil, fmt.Errorf("podnet: sandbox %s: %w", ctr.ID(), err)
		}
		if info.Labels[labelPodUID] != podUID || info.Labels[labelCRIKind] != criKindSandbox {
			continue
		}
		status, pid, err := taskStatus(ctx, r.Client, ctr.ID())
		if err != nil {
			return nil, fmt.Errorf("podnet: task of sandbox %s: %w", ctr.ID(), err)
		}
		s := sandbox{id: info.ID, created: info.CreatedAt, status: status, pid: pid}
		if info.Spec != nil {
			s.spec = info.Spec.GetValue()
		}
		cands = append(cands, s)
	}
	chosen := pick(cands)
	if chosen == nil {
		return nil, fmt.Errorf("podnet: pod %s in containerd namespace %s: %w", podUID, ns, ErrNotFound)
	}
	return chosen, nil
}

// taskStatus is the status and PID of ctr's task, "" if it has none. One Get of the task
// service, which asks the task's shim once: ctr.Task and then task.Status would ask it twice,
// and a runsc shim answers each by running runsc (tens of milliseconds, on every claim of a
// gVisor pod).
func taskStatus(ctx context.Context, c *containerd.Client, id string) (containerd.ProcessStatus, uint32, error) {
	r, err := c.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: id})
	if err != nil {
		if err = errgrpc.ToNative(err); errdefs.IsNotFound(err) {
			return "", 0, nil
		}
		return "", 0, err
	}
	if r.Process == nil {
		return "", 0, nil
	}
	return containerd.ProcessStatus(strings.ToLower(r.Process.Status.String())), r.Process.Pid, nil
}

// liveness ranks a task's status: running first, then a task that exists and has not
// exited (created and not yet started, or paused: its namespace is there), then the rest
// (exited, unknown, no task).
func liveness(s containerd.ProcessStatus) int {
	switch s {
	case containerd.Running:
		return 2
	case containerd.Created, containerd.Paused, containerd.Pausing:
		return 1
	default:
		return 0
	}
}

// pick is the pod's current sandbox among cands: the most alive (see liveness), the newest
// of those; nil if there are none.
func pick(cands []sandbox) *sandbox {
	if len(cands) == 0 {
		return nil
	}
	s := slices.MaxFunc(cands, func(a, b sandbox) int {
		return cmp.Or(
			cmp.Compare(liveness(a.status), liveness(b.status)),
			a.created.Compare(b.created),
			cmp.Compare(a.id, b.id), // only so that the choice does not depend on the order
		)
	})
	return &s
}

// netNSFromSpec is the path of the network namespace in an OCI runtime spec (JSON).
func netNSFromSpec(data []byte) (string, error) {
	if len(data) == 0 {
		return "", errors.New("no OCI spec")
	}
	var spec struct {
		Linux *struct {
			Namespaces []struct {
				Type string `json:"type"`
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return "", fmt.Errorf("decode its OCI spec: %w", err)
	}
	if spec.Linux == nil {
		return "", fmt.Errorf("no linux section in its OCI spec: %w", ErrNoNetNS)
	}
	for _, n := range spec.Linux.Namespaces {
		if n.Type != "network" {
			continue
		}
		if n.Path == "" {
			// The runtime makes one for it, which only its task's /proc entry names; the CRI
			// plugin never does this.
			return "", fmt.Errorf("its network namespace has no path: %w", ErrNoNetNS)
		}
		return n.Path, nil
	}
	return "", fmt.Errorf("no network namespace in its OCI spec (host network): %w", ErrNoNetNS)
}
