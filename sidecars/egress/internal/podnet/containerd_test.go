package podnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/containerdtest"
)

// privateContainerd is a containerd of the test's own (containerdtest.Start).
func privateContainerd(t *testing.T) *containerd.Client {
	requireRoot(t)
	return containerdtest.Start(t, DefaultNamespace)
}

// withNetNS sets the path of the spec's network namespace, as the CRI plugin does for a
// pod's sandbox; "" removes the namespace, as for a hostNetwork pod.
func withNetNS(path string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		kept := s.Linux.Namespaces[:0]
		for _, n := range s.Linux.Namespaces {
			if n.Type == "network" {
				if path == "" {
					continue
				}
				n.Path = path
			}
			kept = append(kept, n)
		}
		s.Linux.Namespaces = kept
		return nil
	}
}

// removeNewRuntimeDirs removes, at cleanup, the directories of /run/containerd that the
// shims and runc of the private containerd's tasks make when the machine has no containerd
// of its own: the shim's socket directory is fixed, whatever the state directory. Only
// those that were not there before and are empty by then.
func removeNewRuntimeDirs(t *testing.T) {
	dirs := []string{"/run/containerd", "/run/containerd/s", "/run/containerd/runc", "/run/containerd/runc/" + DefaultNamespace}
	var created []string
	for _, d := range dirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			created = append(created, d)
		}
	}
	t.Cleanup(func() {
		for _, d := range slices.Backward(created) {
			_ = os.Remove(d) // fails if not empty
		}
	})
}

// withCgroup puts a task in a cgroup of its own at the top, which runc removes with the
// task: the default, /<containerd namespace>/<id>, leaves the namespace's behind.
func withCgroup(id string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Linux.CgroupsPath = fmt.Sprintf("/podnet-test-%d-%s", os.Getpid(), id)
		return nil
	}
}

func sandboxLabels(uid string) map[string]string {
	return map[string]string{labelPodUID: uid, labelCRIKind: criKindSandbox, "io.kubernetes.pod.name": "sb", "io.kubernetes.pod.namespace": "team-a"}
}

// newContainer creates a container without a snapshot; opts set its spec. It is deleted
// at cleanup, its task with it.
func newContainer(ctx context.Context, t *testing.T, client *containerd.Client, id string, labels map[string]string, opts ...oci.SpecOpts) containerd.Container {
	t.Helper()
	ctr, err := client.NewContainer(ctx, id, containerd.WithContainerLabels(labels), containerd.WithNewSpec(opts...))
	if err != nil {
		t.Fatalf("container %s: %v", id, err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		if task, err := ctr.Task(ctx, nil); err == nil {
			if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil {
				t.Errorf("delete the task of %s: %v", id, err)
			}
		}
		if err := ctr.Delete(ctx); err != nil {
			t.Errorf("delete container %s: %v", id, err)
		}
	})
	return ctr
}

// busyboxRoot is a root filesystem of a static busybox, if the machine has one.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("needs a busybox binary to run tasks")
	}
	if out, _ := exec.Command("ldd", bin).CombinedOutput(); !bytes.Contains(out, []byte("not a dynamic executable")) && !bytes.Contains(out, []byte("statically linked")) {
		t.Skipf("needs a static busybox to run tasks (ldd: %s)", out)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(root, "bin", "busybox"), os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestNetNSPathAgainstContainerd finds sandboxes in a private containerd: containers
// labelled as the CRI plugin labels a pod's sandbox, with and without tasks.
func TestNetNSPathAgainstContainerd(t *testing.T) {
	client := privateContainerd(t)
	ctx := namespaces.WithNamespace(t.Context(), DefaultNamespace)
	r := &Resolver{Client: client} // the namespace by default

	const uidA, uidHost = "0d6f3c1e-8a2b-4c5d-9e7f-1a2b3c4d5e6f", "5b1e9c7a-3d2f-4e8a-b6c4-9f0e1d2c3b4a"
	newContainer(ctx, t, client, "a-1", sandboxLabels(uidA), withNetNS("/var/run/netns/cni-a-1"))
	newContainer(ctx, t, client, "a-2", sandboxLabels(uidA), withNetNS("/var/run/netns/cni-a-2"))
	// Decoys, newer: the pod's application container, and another pod's sandbox.
	app := sandboxLabels(uidA)
	app[labelCRIKind] = "container"
	newContainer(ctx, t, client, "a-app", app, withNetNS("/var/run/netns/cni-wrong"))
	newContainer(ctx, t, client, "b-1", sandboxLabels("another-uid"), withNetNS("/var/run/netns/cni-b-1"))
	newContainer(ctx, t, client, "host-1", sandboxLabels(uidHost), withNetNS(""))
	// The same pod in another containerd namespace.
	other := namespaces.WithNamespace(t.Context(), "moby")
	newContainer(other, t, client, "a-other", sandboxLabels(uidA), withNetNS("/var/run/netns/cni-wrong"))

	t.Run("the newest sandbox, none running", func(t *testing.T) {
		got, err := r.NetNSPath(t.Context(), uidA)
		if err != nil || got != "/var/run/netns/cni-a-2" {
			t.Errorf("NetNSPath: %q, %v; want a-2's", got, err)
		}
	})
	t.Run("no sandbox", func(t *testing.T) {
		for name, r := range map[string]*Resolver{"k8s.io": r, "another namespace": {Client: client, Namespace: "kube-other"}} {
			if got, err := r.NetNSPath(t.Context(), "f00df00d-0000-4000-8000-000000000000"); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: NetNSPath: %q, %v; want ErrNotFound", name, got, err)
			}
		}
	})
	t.Run("host network", func(t *testing.T) {
		if got, err := r.NetNSPath(t.Context(), uidHost); !errors.Is(err, ErrNoNetNS) {
			t.Errorf("NetNSPath: %q, %v; want ErrNoNetNS", got, err)
		}
	})

	t.Run("the running sandbox over a newer exited one", func(t *testing.T) {
		root := busyboxRoot(t)
		removeNewRuntimeDirs(t)
		// The running sandbox's namespace is a real pod's, for runc to join and HostLinkAt to
		// read. Its path is the test's open handle, so nothing is mounted.
		n := newPodNet(t, true, "eth0")
		const uid = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
		running := newContainer(ctx, t, client, "c-running", sandboxLabels(uid), withNetNS(nsPath(n.pod)),
			oci.WithRootFSPath(root), withCgroup("c-running"), oci.WithProcessArgs("/bin/busybox", "sleep", "3600"))
		task, err := running.NewTask(ctx, cio.NullIO)
		if err != nil {
			t.Skipf("cannot run tasks here: %v", err)
		}
		if err := task.Start(ctx); err != nil {
			t.Skipf("cannot run tasks here: %v", err)
		}
		// Its task joins its namespace too, so it must be one.
		exited := newContainer(ctx, t, client, "c-exited", sandboxLabels(uid), withNetNS(nsPath(newNS(t))),
			oci.WithRootFSPath(root), withCgroup("c-exited"), oci.WithProcessArgs("/bin/busybox", "true"))
		task2, err := exited.NewTask(ctx, cio.NullIO)
		if err != nil {
			t.Fatal(err)
		}
		statusC, err := task2.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := task2.Start(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case st := <-statusC:
			if st.ExitCode() != 0 {
				t.Fatalf("the exited sandbox's task: %+v", st)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the exited sandbox's task did not exit")
		}
		newContainer(ctx, t, client, "c-none", sandboxLabels(uid), withNetNS("/var/run/netns/cni-c-none"))

		path, err := r.NetNSPath(t.Context(), uid)
		if err != nil || path != nsPath(n.pod) {
			t.Fatalf("NetNSPath: %q, %v; want the running one's %s", path, err, nsPath(n.pod))
		}
		// The node agent's way in: through the running task's process.
		if got, err := r.NetNS(t.Context(), uid); err != nil || got != fmt.Sprintf("/proc/%d/ns/net", task.Pid()) {
			t.Errorf("NetNS: %q, %v; want /proc/%d/ns/net", got, err, task.Pid())
		}
		// And from there to the host side, as the node agent goes.
		var l *Link
		if err := inNS(n.node, func() (err error) { l, err = HostLinkAt(path); return err }); err != nil {
			t.Fatalf("HostLinkAt: %v", err)
		}
		if l.Name != hostVeth || l.Bridge != bridge {
			t.Errorf("HostLinkAt: %+v, want %s on %s", l, hostVeth, bridge)
		}

		// Once it has exited too, the newest of all.
		if err := task.Kill(ctx, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		poll(t, "the running task has exited", func() (bool, error) {
			st, err := task.Status(ctx)
			return err == nil && st.Status == containerd.Stopped, err
		})
		if path, err := r.NetNSPath(t.Context(), uid); err != nil || path != "/var/run/netns/cni-c-none" {
			t.Errorf("NetNSPath after it exited: %q, %v; want c-none's", path, err)
		}
	})
}
