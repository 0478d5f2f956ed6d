package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// runningTask starts, in the private containerd, a container whose task sleeps: busybox in a
// root of its own, under runc.
func runningTask(ctx context.Context, t *testing.T, client *containerd.Client, id string, labels map[string]string) (containerd.Container, containerd.Task) {
	t.Helper()
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("needs a static busybox at /bin/busybox: %v", err)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "busybox"), busybox, 0o755); err != nil {
		t.Fatal(err)
	}
	cont, err := client.NewContainer(ctx, id, containerd.WithRuntime("io.containerd.runc.v2", nil), containerd.WithContainerLabels(labels),
		containerd.WithNewSpec(oci.WithRootFSPath(root), oci.WithProcessArgs("/busybox", "sleep", "600")))
	if err != nil {
		t.Fatal(err)
	}
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		t.Fatalf("new task: %v", err)
	}
	t.Cleanup(func() {
		ctx := namespaces.WithNamespace(context.WithoutCancel(ctx), testNamespace)
		_, _ = task.Delete(ctx, containerd.WithProcessKill)
		_ = cont.Delete(ctx)
	})
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start task: %v", err)
	}
	return cont, task
}

func statusOf(ctx context.Context, t *testing.T, task containerd.Task) containerd.ProcessStatus {
	t.Helper()
	st, err := task.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.Status
}

// TestFreezeAndThawLeftovers: a snapshot freezes the container's task and marks it; thawing
// resumes and unmarks it; and a freeze whose agent died before the thaw (the mark left on a
// paused task) is undone by the next agent's ThawLeftovers, which leaves every other
// container, paused by someone else, running, or a pod's sandbox container labelled by its pod,
// as it is.
func TestFreezeAndThawLeftovers(t *testing.T) {
	client := privateContainerd(t)
	ctx := namespaces.WithNamespace(t.Context(), testNamespace)
	c := NewCommitter(client, testNamespace, nil)

	cont, task := runningTask(ctx, t, client, "sandbox", criLabels("uid-1", "ns", "pod", "sandbox"))
	thaw, err := c.freeze(ctx, &Container{ID: cont.ID()})
	if err != nil {
		t.Fatal(err)
	}
	if s := statusOf(ctx, t, task); s != containerd.Paused {
		t.Fatalf("frozen task: %s, want paused", s)
	}
	if labels, _ := cont.Labels(ctx); labels[FrozenLabel] == "" {
		t.Errorf("a frozen container carries no %s: %v", FrozenLabel, labels)
	}
	thaw()
	if s := statusOf(ctx, t, task); s != containerd.Running {
		t.Fatalf("thawed task: %s, want running", s)
	}
	if labels, _ := cont.Labels(ctx); labels[FrozenLabel] != "" {
		t.Errorf("a thawed container still carries %s", FrozenLabel)
	}

	// The agent dies while the task is frozen: the thaw never runs.
	if _, err := c.freeze(ctx, &Container{ID: cont.ID()}); err != nil {
		t.Fatal(err)
	}
	_, otherTask := runningTask(ctx, t, client, "paused-by-someone-else", criLabels("uid-2", "ns", "other", "sandbox"))
	if err := otherTask.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	_, runningOne := runningTask(ctx, t, client, "running", criLabels("uid-3", "ns", "running", "sandbox"))
	// A pod's own labels land on its CRI sandbox (pause) container: one that says it is frozen
	// is not ours to thaw.
	_, forged := runningTask(ctx, t, client, "forged", map[string]string{labelCRIKind: "sandbox", FrozenLabel: "set by a pod label"})
	if err := forged.Pause(ctx); err != nil {
		t.Fatal(err)
	}

	n, err := NewCommitter(client, testNamespace, nil).ThawLeftovers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("ThawLeftovers thawed %d containers, want 1", n)
	}
	if s := statusOf(ctx, t, task); s != containerd.Running {
		t.Errorf("the container the dead agent froze: %s, want running", s)
	}
	if labels, _ := cont.Labels(ctx); labels[FrozenLabel] != "" {
		t.Errorf("the thawed leftover still carries %s", FrozenLabel)
	}
	if s := statusOf(ctx, t, otherTask); s != containerd.Paused {
		t.Errorf("a container paused by someone else: %s, want it left paused", s)
	}
	if s := statusOf(ctx, t, forged); s != containerd.Paused {
		t.Errorf("a pod sandbox container labelled frozen by its pod: %s, want it left paused", s)
	}
	if s := statusOf(ctx, t, runningOne); s != containerd.Running {
		t.Errorf("a running container: %s", s)
	}
	// Nothing left to thaw.
	if n, err := c.ThawLeftovers(t.Context()); err != nil || n != 0 {
		t.Errorf("a second ThawLeftovers: %d, %v; want 0, nil", n, err)
	}
}

// TestThawLeftoversInBackground: no snapshot starts before the leftovers are thawed, which is
// retried while containerd does not answer (a socket nobody serves), and done once it does.
func TestThawLeftoversInBackground(t *testing.T) {
	dead, err := containerd.New(filepath.Join(t.TempDir(), "nobody.sock"), containerd.WithDefaultNamespace(testNamespace))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.Close() })
	c := NewCommitter(dead, testNamespace, nil)
	c.ThawLeftoversInBackground(t.Context())
	if _, err := c.Find(t.Context(), &nodeapi.SnapshotRequest{PodUID: "uid-1", Container: "sandbox"}); !errdefs.IsUnavailable(err) {
		t.Errorf("Find before the leftovers are thawed: %v, want unavailable", err)
	}
	select {
	case <-c.thawed:
		t.Fatal("the leftovers are thawed without containerd")
	case <-time.After(2 * thawBackoff.Duration):
	}

	live := NewCommitter(privateContainerd(t), testNamespace, nil)
	live.ThawLeftoversInBackground(t.Context())
	select {
	case <-live.thawed:
	case <-time.After(time.Minute):
		t.Fatal("the leftovers are not thawed with containerd answering")
	}
	if _, err := live.Find(t.Context(), &nodeapi.SnapshotRequest{PodUID: "uid-1", Container: "sandbox"}); errdefs.IsUnavailable(err) {
		t.Errorf("Find after the leftovers are thawed: %v", err)
	}
}
