package usage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/containerdtest"
)

const testSnapshotter = "overlayfs"

// newSnapshot prepares an active snapshot of no parent and writes size bytes into it, as a
// container's program would into its root filesystem.
func newSnapshot(ctx context.Context, t *testing.T, client *containerd.Client, key string, size int) {
	t.Helper()
	mounts, err := client.SnapshotService(testSnapshotter).Prepare(ctx, key, "")
	if err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	if err := mount.All(mounts, target); err != nil {
		t.Fatalf("mount the snapshot: %v", err)
	}
	defer func() {
		if err := mount.UnmountAll(target, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	if err := os.WriteFile(filepath.Join(target, "written"), bytes.Repeat([]byte("x"), size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newCRIContainer makes a container labelled as the CRI plugin labels a pod's, with an OCI spec
// of cgroupsPath and, for size >= 0, a snapshot that size was written to. No task.
func newCRIContainer(ctx context.Context, t *testing.T, client *containerd.Client, id, uid, kind, name, cgroupsPath string, size int) {
	t.Helper()
	labels := map[string]string{labelPodUID: uid, labelCRIKind: kind, "io.kubernetes.pod.namespace": "team-a"}
	if name != "" {
		labels[labelContainerName] = name
	}
	opts := []containerd.NewContainerOpts{containerd.WithContainerLabels(labels),
		containerd.WithSpec(&oci.Spec{Version: specs.Version, Linux: &specs.Linux{CgroupsPath: cgroupsPath}})}
	if size >= 0 {
		newSnapshot(ctx, t, client, id, size)
		opts = append(opts, containerd.WithSnapshotter(testSnapshotter), containerd.WithSnapshot(id))
	}
	if _, err := client.NewContainer(ctx, id, opts...); err != nil {
		t.Fatal(err)
	}
	// CreatedAt orders the containers: a pause, so that the next one is newer.
	time.Sleep(10 * time.Millisecond)
}

// TestContainerdAgainstContainerd: a pod's cgroup from its newest sandbox's spec, and its
// containers' writable layers (the newest of each name), in a containerd of the test's own.
func TestContainerdAgainstContainerd(t *testing.T) {
	client := containerdtest.Start(t, "k8s.io")
	ctx := t.Context()
	// Until the containers refer to the snapshots: containerd collects what nothing refers to.
	lctx, done, err := client.WithLease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const pod, other = "11111111-aaaa", "22222222-bbbb"
	newCRIContainer(lctx, t, client, "sb-old", pod, criKindSandbox, "", "/kube-sandbox/kubepods/burstable/pod"+pod+"/sb-old", -1)
	newCRIContainer(lctx, t, client, "sb-new", pod, criKindSandbox, "", "/kube-sandbox/kubepods/burstable/pod"+pod+"/sb-new", -1)
	newCRIContainer(lctx, t, client, "sb-other", other, criKindSandbox, "", "kubepods-besteffort-pod22222222_bbbb.slice:cri-containerd:sb-other", -1)
	newCRIContainer(lctx, t, client, "init", pod, criKindContainer, "install", "", 4<<10)
	newCRIContainer(lctx, t, client, "sandbox-before-restart", pod, criKindContainer, "sandbox", "", 8<<20)
	newCRIContainer(lctx, t, client, "sandbox", pod, criKindContainer, "sandbox", "", 1<<20)
	newCRIContainer(lctx, t, client, "other-sandbox", other, criKindContainer, "sandbox", "", 2<<20)
	if err := done(ctx); err != nil {
		t.Fatal(err)
	}

	c := &Containerd{Client: client, Namespace: "k8s.io"}
	for uid, want := range map[string]string{
		pod:   "/kube-sandbox/kubepods/burstable/pod" + pod,
		other: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod22222222_bbbb.slice",
	} {
		if got, err := c.PodCgroup(ctx, uid); err != nil || got != want {
			t.Errorf("PodCgroup(%s) = %q, %v; want %q", uid, got, err, want)
		}
	}
	if _, err := c.PodCgroup(ctx, "33333333-cccc"); !errors.Is(err, ErrNotFound) {
		t.Errorf("PodCgroup of a pod containerd does not have: %v, want ErrNotFound", err)
	}

	usage := func(key string) uint64 {
		u, err := client.SnapshotService(testSnapshotter).Usage(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return uint64(u.Size)
	}
	// By a list (no IDs from the pod's status), and by the IDs the status names.
	for _, ids := range []string{"", "init,sandbox"} {
		got, err := c.WritableLayers(ctx, pod, ids)
		if err != nil {
			t.Fatal(err)
		}
		// The current sandbox container and the init container; not the one the kubelet
		// restarted, nor the other pod's.
		if want := usage("sandbox") + usage("init"); got != want {
			t.Errorf("WritableLayers(ids %q) = %d, want %d (the sandbox's and the init container's)", ids, got, want)
		}
		if got < 1<<20+4<<10 || got >= 8<<20 {
			t.Errorf("WritableLayers(ids %q) = %d, want about 1 MiB", ids, got)
		}
	}
	// A container gone since the status named it holds nothing; one of another pod is refused.
	if got, err := c.WritableLayers(ctx, pod, "sandbox,gone"); err != nil || got != usage("sandbox") {
		t.Errorf("WritableLayers with a gone container = %d, %v; want the sandbox's %d", got, err, usage("sandbox"))
	}
	if _, err := c.WritableLayers(ctx, pod, "sandbox,other-sandbox"); err == nil || !strings.Contains(err.Error(), "not of pod") {
		t.Errorf("WritableLayers with another pod's container: %v, want a refusal", err)
	}
	if got, err := c.WritableLayers(ctx, "33333333-cccc", ""); err != nil || got != 0 {
		t.Errorf("WritableLayers of a pod without containers = %d, %v; want 0", got, err)
	}
	if _, err := (&Containerd{Client: client}).PodCgroup(ctx, ""); err == nil || !strings.Contains(err.Error(), "no pod UID") {
		t.Errorf("PodCgroup without a UID: %v", err)
	}
}
