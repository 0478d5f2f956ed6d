package usage

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// Pod is a sandbox pod of the node that serves a sandbox: what the sampler reads, and the
// labels of its series.
type Pod struct {
	UID, Namespace, Name string
	// Sandbox is the name of the BatchSandbox the pod serves; Replica its replica index.
	Sandbox string
	Replica int32
	// Containers are the containerd IDs of the pod's containers (init containers too) as its
	// status names them, comma-separated (a string keeps Pod comparable): the writable layers
	// are read by ID, which costs containerd a lookup, where a list by label costs it a scan of
	// every container of the node. Empty: not known yet, and the layers are found by a list.
	Containers string
}

// Reader reads one pod's figures: the seam between the sampler and the node.
type Reader interface {
	// Read reads the pod's figures now; each one it cannot read is nil, with an error in
	// Errors. Timestamp is when the CPU counter was read. Safe for concurrent use.
	Read(ctx context.Context, p Pod) *nodeapi.PodStats
	// Forget drops what the reader keeps of a pod that is gone.
	Forget(uid string)
}

// Runtime is what the node's container runtime says of a pod (Containerd).
type Runtime interface {
	// PodCgroup is the pod's cgroup, a path in each cgroup hierarchy.
	PodCgroup(ctx context.Context, uid string) (string, error)
	// WritableLayers is what the pod's containers wrote to their root filesystems.
	// containers are the pod's container IDs (Pod.Containers); empty: find them.
	WritableLayers(ctx context.Context, uid, containers string) (uint64, error)
}

// Network is what the egress enforcer knows of a pod's network (egress.Node).
type Network interface {
	// Traffic reads the pod's interface counters and the enforcer's counters.
	Traffic(uid string) (egress.Traffic, error)
	// Counters reads the enforcer's counters alone, for every scrape.
	Counters(uid string) (egress.PodCounters, error)
}

// NodeReader reads a pod's figures on the node: its cgroup, its containers' writable layers
// in containerd, its emptyDir directories, and its network from the egress enforcer.
type NodeReader struct {
	Cgroups *Cgroups
	Runtime Runtime
	Network Network
	// KubeletRootDir is the kubelet's --root-dir as the agent sees it (its pods directory).
	KubeletRootDir string
	// MaxEmptyDirEntries bounds the walk of a pod's emptyDirs; 0: DefaultMaxEmptyDirEntries.
	MaxEmptyDirEntries int
	// now is time.Now but in tests.
	now func() time.Time

	mu sync.Mutex
	// cgroups caches each pod's cgroup, which is the pod's for its life: the runtime is asked
	// once, and again only once the cgroup is not there.
	cgroups map[string]string
}

var _ Reader = &NodeReader{}

// Read implements Reader.
func (r *NodeReader) Read(ctx context.Context, p Pod) *nodeapi.PodStats {
	st := &nodeapi.PodStats{PodUID: p.UID, Namespace: p.Namespace, Pod: p.Name, Sandbox: p.Sandbox, Replica: p.Replica}
	errs := map[string]string{}
	now := time.Now
	if r.now != nil {
		now = r.now
	}

	if path, err := r.podCgroup(ctx, p.UID); err != nil {
		msg := "find the pod's cgroup: " + err.Error()
		errs[nodeapi.FigureCPU], errs[nodeapi.FigureMemory], errs[nodeapi.FigureProcesses] = msg, msg, msg
		st.Timestamp = now()
	} else {
		st.Timestamp = now()
		f := r.Cgroups.Read(path)
		st.CPU, st.Memory, st.Processes = f.cpu, f.memory, f.processes
		for figure, err := range f.errs {
			errs[figure] = err.Error()
		}
		if f.gone {
			r.forgetCgroup(p.UID)
		}
	}

	layers, err := r.Runtime.WritableLayers(ctx, p.UID, p.Containers)
	maxEntries := r.MaxEmptyDirEntries
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEmptyDirEntries
	}
	emptyDirs, edErr := emptyDirBytes(r.KubeletRootDir, p.UID, maxEntries)
	// One figure: a disk figure with a part missing would read as that part being empty.
	if err := errors.Join(err, edErr); err != nil {
		errs[nodeapi.FigureDisk] = err.Error()
	} else {
		st.Disk = &nodeapi.DiskStats{WritableLayerBytes: layers, EmptyDirBytes: emptyDirs}
	}

	if tr, err := r.Network.Traffic(p.UID); err != nil {
		errs[nodeapi.FigureNetwork] = err.Error()
	} else {
		st.Network = &nodeapi.NetworkStats{RxBytes: tr.RxBytes, TxBytes: tr.TxBytes, RxPackets: tr.RxPackets, TxPackets: tr.TxPackets,
			ConnectionsAllowed: tr.ConnectionsAllowed, ConnectionsDenied: tr.ConnectionsDenied}
	}
	if len(errs) > 0 {
		st.Errors = errs
		klog.V(4).InfoS("Some figures of a pod could not be read", "pod", klog.KRef(p.Namespace, p.Name), "errors", errs)
	}
	return st
}

// Forget implements Reader.
func (r *NodeReader) Forget(uid string) { r.forgetCgroup(uid) }

func (r *NodeReader) podCgroup(ctx context.Context, uid string) (string, error) {
	r.mu.Lock()
	path, ok := r.cgroups[uid]
	r.mu.Unlock()
	if ok {
		return path, nil
	}
	path, err := r.Runtime.PodCgroup(ctx, uid)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cgroups == nil {
		r.cgroups = map[string]string{}
	}
	r.cgroups[uid] = path
	return path, nil
}

func (r *NodeReader) forgetCgroup(uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cgroups, uid)
}
