package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// The labels the CRI plugin puts on the containers of a pod (the kubelet's names), by which
// a request's pod and container are found.
const (
	labelPodUID        = "io.kubernetes.pod.uid"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodName       = "io.kubernetes.pod.name"
	labelContainerName = "io.kubernetes.container.name"
	// labelCRIKind is "container" for an application container, "sandbox" for the pod's
	// pause container.
	labelCRIKind     = "io.cri-containerd.kind"
	criKindContainer = "container"
)

const (
	// leaseExpiry bounds how long what a snapshot writes to containerd outlives an agent
	// that died before deleting its lease: long enough for the diff and push of a layer of
	// the largest size allowed over a slow link, short enough not to fill the node's disk
	// with the leftovers of crash loops.
	leaseExpiry = 4 * time.Hour
	// progressInterval is how often a snapshot reports its bytes: often enough for a
	// progress bar, seldom enough not to be the stream's bulk.
	progressInterval = time.Second
	// cleanupTimeout bounds deleting the lease after a snapshot, done even when the
	// client has gone.
	cleanupTimeout = 10 * time.Second
)

// Committer commits containers' writable layers through containerd and pushes them.
type Committer struct {
	client    *containerd.Client
	namespace string
	registry  *Registry
	// requireRunningTask: only a container whose task runs is the pod's current one (a
	// restarted container leaves its old one behind). Tests commit containers without a task.
	requireRunningTask bool
	// progressInterval is progressInterval, shorter in tests.
	progressInterval time.Duration
	// thawed, once ThawLeftoversInBackground started, is closed when what an interrupted
	// snapshot left frozen is thawed: no snapshot starts before (its freeze would be thawed
	// under it).
	thawed chan struct{}
}

// NewCommitter commits the containers of containerd namespace ns through client, to registry.
func NewCommitter(client *containerd.Client, ns string, registry *Registry) *Committer {
	return &Committer{client: client, namespace: ns, registry: registry, requireRunningTask: true, progressInterval: progressInterval}
}

// Container is a CRI container found for a request.
type Container struct {
	ID          string
	Snapshotter string
	SnapshotKey string
	// Image is the name of its image in containerd.
	Image string
}

// candidate is a container of the pod and name asked for, and the status of its task
// ("": it has none).
type candidate struct {
	info   containers.Container
	status containerd.ProcessStatus
}

// Find is the container of req: the one of the pod (UID, namespace and name all match) and
// container name whose task runs. Several may match after restarts: the others' tasks have
// exited. None running is ContainerNotFound.
func (c *Committer) Find(ctx context.Context, req *nodeapi.SnapshotRequest) (*Container, error) {
	if c.thawed != nil {
		select {
		case <-c.thawed:
		default:
			return nil, fmt.Errorf("%w: containers an interrupted snapshot left frozen are not thawed yet (containerd does not answer)", errdefs.ErrUnavailable)
		}
	}
	ctx = namespaces.WithNamespace(ctx, c.namespace)
	// The filter narrows the list on the daemon's side; matches checks every label here.
	filter := fmt.Sprintf("labels.%q==%q,labels.%q==%q", labelPodUID, req.PodUID, labelContainerName, req.Container)
	list, err := c.client.ContainerService().List(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var cands []candidate
	for _, info := range list {
		if !matches(info.Labels, req) {
			continue
		}
		cand := candidate{info: info}
		ctr, err := c.client.LoadContainer(ctx, info.ID)
		if err == nil {
			cand.status, err = taskStatus(ctx, ctr)
		}
		if err != nil {
			if errdefs.IsNotFound(err) {
				continue // gone since the list
			}
			return nil, fmt.Errorf("container %s: %w", info.ID, err)
		}
		cands = append(cands, cand)
	}
	chosen, err := pick(cands, c.requireRunningTask)
	if err != nil {
		return nil, withReason(nodeapi.ReasonContainerNotFound,
			fmt.Errorf("container %q of pod %s/%s (%s): %w", req.Container, req.Namespace, req.Pod, req.PodUID, err))
	}
	return &Container{ID: chosen.ID, Snapshotter: chosen.Snapshotter, SnapshotKey: chosen.SnapshotKey, Image: chosen.Image}, nil
}

func matches(l map[string]string, req *nodeapi.SnapshotRequest) bool {
	return l[labelPodUID] == req.PodUID && l[labelPodNamespace] == req.Namespace && l[labelPodName] == req.Pod &&
		l[labelContainerName] == req.Container && l[labelCRIKind] == criKindContainer
}

// taskStatus is the status of ctr's task, "" if it has none.
func taskStatus(ctx context.Context, ctr containerd.Container) (containerd.ProcessStatus, error) {
	task, err := ctr.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	st, err := task.Status(ctx)
	if errdefs.IsNotFound(err) {
		return "", nil
	}
	return st.Status, err
}

// pick chooses among the containers of a pod and name: the one whose task runs (the newest,
// should there be two), or, unless requireRunning, the newest of all.
func pick(cands []candidate, requireRunning bool) (*containers.Container, error) {
	var chosen *containers.Container
	for i := range cands {
		if requireRunning && cands[i].status != containerd.Running {
			continue
		}
		if chosen == nil || cands[i].info.CreatedAt.After(chosen.CreatedAt) {
			chosen = &cands[i].info
		}
	}
	switch {
	case chosen != nil:
		if chosen.SnapshotKey == "" || chosen.Snapshotter == "" {
			return nil, errors.New("it has no snapshot")
		}
		return chosen, nil
	case len(cands) == 0:
		return nil, errors.New("no such container on this node")
	default:
		return nil, fmt.Errorf("none of its %d containers on this node is running", len(cands))
	}
}

// Snapshot commits ctr's writable layer as a layer on top of its image, pushes the image to
// image, and reports Progress events through progress. The container's task is frozen while
// its layer is committed (containerd's task Pause: the cgroup freezer under runc, runsc pause
// under gVisor), so that the snapshot is one moment of its filesystem, not a file written
// half-way through the diff; it is thawed once the layer is in the content store, before the
// push. maxBytes bounds the layer, compressed. Nothing is left in containerd: what it writes is held by a lease that
// is gone when it returns.
func (c *Committer) Snapshot(ctx context.Context, ctr *Container, image reference.NamedTagged, maxBytes int64, progress func(nodeapi.Event)) (*nodeapi.Result, error) {
	ctx = namespaces.WithNamespace(ctx, c.namespace)
	ctx, done, err := c.client.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(leaseExpiry))
	if err != nil {
		return nil, fmt.Errorf("take a lease: %w", err)
	}
	defer func() {
		// Even when the client has gone: the lease is all that keeps the content.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := done(cctx); err != nil {
			klog.ErrorS(err, "Deleting a snapshot's lease; it expires by itself", "container", ctr.ID, "expiry", leaseExpiry)
		}
	}()

	base, err := c.baseImage(ctx, ctr.Image)
	if err != nil {
		return nil, err
	}
	progress(nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StageCommitting})
	thaw, err := c.freeze(ctx, ctr)
	if err != nil {
		return nil, err
	}
	layer, err := c.diff(ctx, ctr, maxBytes, progress)
	thaw()
	if err != nil {
		return nil, err
	}
	created := time.Now().UTC()
	built, err := buildImage(base, layer, created, fmt.Sprintf("sandbox-node: writable layer of container %s", ctr.ID))
	if err != nil {
		return nil, fmt.Errorf("build the image: %w", err)
	}
	cs := c.client.ContentStore()
	if err := content.WriteBlob(ctx, cs, "kube-sandbox-snapshot-config-"+built.ConfigDesc.Digest.Encoded(),
		bytes.NewReader(built.Config), built.ConfigDesc); err != nil {
		return nil, fmt.Errorf("write the config: %w", err)
	}
	if err := content.WriteBlob(ctx, cs, "kube-sandbox-snapshot-manifest-"+built.ManifestDesc.Digest.Encoded(),
		bytes.NewReader(built.Manifest), built.ManifestDesc, content.WithLabels(built.manifestLabels())); err != nil {
		return nil, fmt.Errorf("write the manifest: %w", err)
	}

	pushing := &throttle{progress: progress, interval: c.progressInterval, stage: nodeapi.StagePushing, total: built.Size}
	pushing.report(0, true)
	if err := c.registry.push(ctx, cs, image, built.ManifestDesc, func(n int64) { pushing.report(n, false) }); err != nil {
		return nil, fmt.Errorf("push %s: %w", image, err)
	}
	pushing.report(0, true)
	rememberSource(ctx, cs, image.String(), append([]ocispec.Descriptor{built.ConfigDesc}, built.Layers...))
	return &nodeapi.Result{
		Image:     image.String(),
		Digest:    built.ManifestDesc.Digest.String(),
		LayerSize: layer.Blob.Size,
		Size:      built.Size,
		BaseImage: base.Name,
		Created:   created,
	}, nil
}

// FrozenLabel marks, on a containerd container, that sandbox-node froze its task for a
// snapshot. It is set before the task is paused and cleared once it is resumed, so that an
// agent killed in between thaws the container when it starts again (ThawLeftovers) rather than
// leaving a sandbox frozen for good.
const FrozenLabel = "sandbox.kube-sandbox.io/frozen-by-sandbox-node"

// freeze pauses the container's task, if it has a running one, and returns what thaws it. A
// task that cannot be paused fails the snapshot: an inconsistent one is worse than none, and
// the sandbox keeps running.
func (c *Committer) freeze(ctx context.Context, ctr *Container) (func(), error) {
	cont, err := c.client.LoadContainer(ctx, ctr.ID)
	if err != nil {
		return nil, fmt.Errorf("load container %s: %w", ctr.ID, err)
	}
	task, err := cont.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return func() {}, nil // nothing runs: nothing writes
	}
	if err != nil {
		return nil, fmt.Errorf("the task of container %s: %w", ctr.ID, err)
	}
	if st, err := task.Status(ctx); err != nil || st.Status != containerd.Running {
		return func() {}, nil
	}
	if _, err := cont.SetLabels(ctx, map[string]string{FrozenLabel: time.Now().UTC().Format(time.RFC3339)}); err != nil {
		return nil, fmt.Errorf("mark container %s frozen: %w", ctr.ID, err)
	}
	if err := task.Pause(ctx); err != nil {
		c.unmark(ctx, cont)
		return nil, fmt.Errorf("freeze container %s for a consistent snapshot: %w", ctr.ID, err)
	}
	start := time.Now()
	return func() {
		// Even when the client has gone: a frozen sandbox would stay frozen.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := task.Resume(cctx); err != nil {
			klog.ErrorS(err, "Thawing a container after its snapshot; the next start of sandbox-node thaws it", "container", ctr.ID)
			return
		}
		c.unmark(cctx, cont)
		klog.V(4).InfoS("Thawed a container after committing its layer", "container", ctr.ID, "frozen", time.Since(start))
	}, nil
}

func (c *Committer) unmark(ctx context.Context, cont containerd.Container) {
	if _, err := cont.SetLabels(ctx, map[string]string{FrozenLabel: ""}); err != nil {
		klog.ErrorS(err, "Clearing a container's frozen mark", "container", cont.ID())
	}
}

// ThawLeftovers resumes every container that a snapshot froze and did not thaw (sandbox-node
// was killed in between), and returns how many it thawed. A container that was marked but
// whose task is not paused (it was thawed, then the agent died before clearing the mark) is
// only unmarked.
func (c *Committer) ThawLeftovers(ctx context.Context) (int, error) {
	ctx = namespaces.WithNamespace(ctx, c.namespace)
	// Only the CRI's containers: their labels are the kubelet's and ours. A pod's own labels
	// land on its sandbox (pause) container, where a user could set FrozenLabel.
	list, err := c.client.Containers(ctx, fmt.Sprintf("labels.%q,labels.%q==%s", FrozenLabel, labelCRIKind, criKindContainer))
	if err != nil {
		return 0, fmt.Errorf("list frozen containers: %w", err)
	}
	thawed := 0
	var errs []error
	for _, cont := range list {
		task, err := cont.Task(ctx, nil)
		switch {
		case errdefs.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("the task of container %s: %w", cont.ID(), err))
			continue
		default:
			if st, err := task.Status(ctx); err == nil && st.Status == containerd.Paused {
				if err := task.Resume(ctx); err != nil {
					errs = append(errs, fmt.Errorf("thaw container %s: %w", cont.ID(), err))
					continue
				}
				thawed++
				klog.InfoS("Thawed a container that an interrupted snapshot left frozen", "container", cont.ID())
			}
		}
		c.unmark(ctx, cont)
	}
	return thawed, errors.Join(errs...)
}

// thawBackoff paces ThawLeftoversInBackground's attempts while containerd does not answer.
var thawBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Cap: 30 * time.Second, Steps: math.MaxInt32}

// ThawLeftoversInBackground runs ThawLeftovers until it succeeds (containerd may not answer
// when the agent starts), or ctx ends. Until then Find refuses snapshots as unavailable, which
// the controller retries.
func (c *Committer) ThawLeftoversInBackground(ctx context.Context) {
	c.thawed = make(chan struct{})
	go func() {
		_ = wait.ExponentialBackoffWithContext(ctx, thawBackoff, func(ctx context.Context) (bool, error) {
			n, err := c.ThawLeftovers(ctx)
			if err != nil {
				klog.ErrorS(err, "Thawing containers an interrupted snapshot left frozen; will retry", "thawed", n)
				return false, nil
			}
			close(c.thawed)
			return true, nil
		})
	}()
}

// baseImage reads the image name's manifest for the node's platform and its config.
func (c *Committer) baseImage(ctx context.Context, name string) (*baseImage, error) {
	if name == "" {
		return nil, errors.New("the container names no image")
	}
	img, err := c.client.ImageService().Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("the container's image %q: %w", name, err)
	}
	cs := c.client.ContentStore()
	m, err := images.Manifest(ctx, cs, img.Target, platforms.Default())
	if err != nil {
		return nil, fmt.Errorf("the manifest of %q for %s: %w", name, platforms.DefaultString(), err)
	}
	if m.Config.Size > maxConfigBytes {
		return nil, fmt.Errorf("the config of %q is %d bytes, more than %d", name, m.Config.Size, maxConfigBytes)
	}
	cfg, err := content.ReadBlob(ctx, cs, m.Config)
	if err != nil {
		return nil, fmt.Errorf("the config of %q: %w", name, err)
	}
	return &baseImage{Name: name, Digest: img.Target.Digest, Manifest: m, Config: cfg}, nil
}

// diff has containerd's diff service write the difference between ctr's snapshot and its
// parent into the content store, as an OCI gzip layer, and reports the bytes written as it
// goes. A layer past maxBytes is SnapshotTooLarge, as soon as it gets there.
func (c *Committer) diff(ctx context.Context, ctr *Container, maxBytes int64, progress func(nodeapi.Event)) (newLayer, error) {
	// The ingest ref is how the writer's progress is read while the daemon writes.
	ref := "kube-sandbox-snapshot-" + ctr.ID + "-" + randomSuffix()
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		desc ocispec.Descriptor
		err  error
	}
	results := make(chan result, 1)
	go func() {
		sn := c.client.SnapshotService(ctr.Snapshotter)
		desc, err := rootfs.CreateDiff(dctx, ctr.SnapshotKey, sn, c.client.DiffService(),
			diff.WithMediaType(ocispec.MediaTypeImageLayerGzip), diff.WithReference(ref))
		results <- result{desc, err}
	}()

	tooLarge := func(n int64) error {
		return withReason(nodeapi.ReasonSnapshotTooLarge,
			fmt.Errorf("the writable layer of container %s is more than %d bytes compressed (%d so far)", ctr.ID, maxBytes, n))
	}
	tick := time.NewTicker(c.progressInterval)
	defer tick.Stop()
	cs := c.client.ContentStore()
	for {
		select {
		case r := <-results:
			if r.err != nil {
				if errdefs.IsNotFound(r.err) {
					return newLayer{}, withReason(nodeapi.ReasonContainerNotFound, fmt.Errorf("diff container %s: %w", ctr.ID, r.err))
				}
				return newLayer{}, fmt.Errorf("diff container %s: %w", ctr.ID, r.err)
			}
			if r.desc.Size > maxBytes {
				return newLayer{}, tooLarge(r.desc.Size)
			}
			info, err := cs.Info(ctx, r.desc.Digest)
			if err != nil {
				return newLayer{}, fmt.Errorf("the new layer: %w", err)
			}
			diffID, err := digest.Parse(info.Labels[labels.LabelUncompressed])
			if err != nil {
				return newLayer{}, fmt.Errorf("the diff service gave the layer no valid %s label: %w", labels.LabelUncompressed, err)
			}
			progress(nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StageCommitting, Bytes: r.desc.Size, Total: r.desc.Size})
			return newLayer{Blob: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: r.desc.Digest, Size: r.desc.Size}, DiffID: diffID}, nil
		case <-tick.C:
			st, err := cs.Status(ctx, ref)
			if err != nil {
				continue // not started, or just committed
			}
			if st.Offset > maxBytes {
				cancel()
				<-results
				return newLayer{}, tooLarge(st.Offset)
			}
			progress(nodeapi.Event{Type: nodeapi.EventProgress, Stage: nodeapi.StageCommitting, Bytes: st.Offset})
		}
	}
}

// throttle reports a stage's progress at most once an interval, and always when forced. Its
// methods may be called from several goroutines (blobs upload in parallel), each with the
// count as it saw it: the highest is the one reported.
type throttle struct {
	progress func(nodeapi.Event)
	interval time.Duration
	stage    string
	total    int64

	mu   sync.Mutex
	last time.Time
	max  int64
}

func (t *throttle) report(n int64, force bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.max = max(t.max, n)
	if now := time.Now(); force || now.Sub(t.last) >= t.interval {
		t.last = now
		t.progress(nodeapi.Event{Type: nodeapi.EventProgress, Stage: t.stage, Bytes: t.max, Total: t.total})
	}
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Healthy tells whether containerd answers.
func (c *Committer) Healthy(ctx context.Context) error {
	serving, err := c.client.IsServing(ctx)
	if err != nil {
		return err
	}
	if !serving {
		return errors.New("not serving")
	}
	return nil
}
