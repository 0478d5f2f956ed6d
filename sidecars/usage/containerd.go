package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
)

// The labels the CRI plugin puts on a pod's containers.
const (
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
	labelCRIKind       = "io.cri-containerd.kind"
	criKindSandbox     = "sandbox"
	criKindContainer   = "container"
)

// ErrNotFound: containerd has no container of that kind for the pod (yet, or any more).
var ErrNotFound = errors.New("not in containerd")

// Containerd reads what a pod is in containerd: the cgroup of its CRI sandbox, and the
// writable layers of its containers. Two List calls of the containers service, filtered by
// the pod's UID on the daemon's side, and one Usage call of the snapshotter per container; no
// call reaches a runtime shim (a runsc shim answers by running runsc).
type Containerd struct {
	Client *containerd.Client
	// Namespace is the CRI plugin's containerd namespace ("k8s.io").
	Namespace string
}

var _ Runtime = &Containerd{}

// PodCgroup is the pod's cgroup, from its sandbox container's spec (podCgroup). A pod whose
// sandbox the kubelet remade has more than one; all of them are in the one pod cgroup, and the
// newest is read.
func (c *Containerd) PodCgroup(ctx context.Context, uid string) (string, error) {
	ctrs, err := c.list(ctx, uid, criKindSandbox)
	if err != nil {
		return "", err
	}
	var newest *containers.Container
	for i := range ctrs {
		if newest == nil || ctrs[i].CreatedAt.After(newest.CreatedAt) {
			newest = &ctrs[i]
		}
	}
	if newest == nil {
		return "", fmt.Errorf("the sandbox of pod %s: %w", uid, ErrNotFound)
	}
	if newest.Spec == nil {
		return "", fmt.Errorf("sandbox %s of pod %s has no OCI spec", newest.ID, uid)
	}
	var spec struct {
		Linux *struct {
			CgroupsPath string `json:"cgroupsPath"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(newest.Spec.GetValue(), &spec); err != nil {
		return "", fmt.Errorf("decode the OCI spec of sandbox %s of pod %s: %w", newest.ID, uid, err)
	}
	if spec.Linux == nil || spec.Linux.CgroupsPath == "" {
		return "", fmt.Errorf("sandbox %s of pod %s has no cgroupsPath", newest.ID, uid)
	}
	return podCgroup(spec.Linux.CgroupsPath, uid)
}

// WritableLayers is the disk the pod's containers wrote to their root filesystems: the sum
// of the usage of their active snapshots, one container for each name. Init containers count
// too, as long as their layers are on the node's disk. The snapshotter measures a snapshot as
// du would, a walk of its directory.
//
// ids are the containers the pod's status names (Pod.Containers), the current one of each
// name: each is looked up by its ID, which containerd answers from its index, where a list
// by label is a scan of every container of the node, each read in full (at 200 sandboxes
// that scan was most of containerd's CPU). Without ids (a status not known yet), the pod's
// containers are listed, and of each name the newest taken: a container the kubelet restarted
// leaves the one before behind until it collects it, and its layer is the past's.
func (c *Containerd) WritableLayers(ctx context.Context, uid, ids string) (uint64, error) {
	var ctrs []containers.Container
	if ids != "" {
		if c.Client == nil {
			return 0, errors.New("no containerd client")
		}
		for _, id := range strings.Split(ids, ",") {
			ctr, err := c.Client.ContainerService().Get(c.ctx(ctx), id)
			if errdefs.IsNotFound(err) {
				continue // removed since the pod's status named it: it holds nothing
			}
			if err != nil {
				return 0, fmt.Errorf("get container %s of pod %s: %w", id, uid, err)
			}
			if ctr.Labels[labelPodUID] != uid {
				// An ID that is another pod's is never measured as this one's.
				return 0, fmt.Errorf("container %s is not of pod %s", id, uid)
			}
			ctrs = append(ctrs, ctr)
		}
	} else {
		all, err := c.list(ctx, uid, criKindContainer)
		if err != nil {
			return 0, err
		}
		newest := map[string]containers.Container{}
		for _, ctr := range all {
			name := ctr.Labels[labelContainerName]
			if have, ok := newest[name]; !ok || ctr.CreatedAt.After(have.CreatedAt) {
				newest[name] = ctr
			}
		}
		for _, ctr := range newest {
			ctrs = append(ctrs, ctr)
		}
	}
	var sum uint64
	for _, ctr := range ctrs {
		if ctr.Snapshotter == "" || ctr.SnapshotKey == "" {
			continue
		}
		u, err := c.Client.SnapshotService(ctr.Snapshotter).Usage(c.ctx(ctx), ctr.SnapshotKey)
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue // removed since: it holds nothing
			}
			return 0, fmt.Errorf("the usage of the snapshot of container %s of pod %s: %w", ctr.ID, uid, err)
		}
		if u.Size > 0 {
			sum += uint64(u.Size)
		}
	}
	return sum, nil
}

// list lists the pod's CRI containers of a kind. The filter narrows the list on the daemon's
// side; the labels are checked here again.
func (c *Containerd) list(ctx context.Context, uid, kind string) ([]containers.Container, error) {
	if c.Client == nil {
		return nil, errors.New("no containerd client")
	}
	if uid == "" {
		return nil, errors.New("no pod UID")
	}
	filter := fmt.Sprintf("labels.%q==%q,labels.%q==%q", labelPodUID, uid, labelCRIKind, kind)
	all, err := c.Client.ContainerService().List(c.ctx(ctx), filter)
	if err != nil {
		return nil, fmt.Errorf("list the %s containers of pod %s: %w", kind, uid, err)
	}
	out := all[:0]
	for _, ctr := range all {
		if ctr.Labels[labelPodUID] == uid && ctr.Labels[labelCRIKind] == kind {
			out = append(out, ctr)
		}
	}
	return out, nil
}

func (c *Containerd) ctx(ctx context.Context) context.Context {
	ns := c.Namespace
	if ns == "" {
		ns = "k8s.io"
	}
	return namespaces.WithNamespace(ctx, ns)
}
