// Package containerdtest runs a private containerd for tests: the sidecars that speak to a
// node's containerd (the node agent's snapshots, podnet's pod lookup) test against a real one
// of their own, never the machine's.
package containerdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Start starts a containerd of its own, everything under a temporary directory
// (root, state, socket; no CRI plugin), and stops it when the test ends; its client
// defaults to namespace. It needs root (the
// overlayfs snapshotter mounts) and a containerd binary; the machine's own containerd is
// never touched.
func Start(t testing.TB, namespace string) *containerd.Client {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs a private containerd with the overlayfs snapshotter")
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Skip("needs a containerd binary on PATH")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc", filepath.Join(dir, "opt"))
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfgPath, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that a signal to the test's does not reach it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logf.Close()
		if t.Failed() {
			if data, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("containerd's log:\n%s", data)
			}
		}
	})

	client, err := containerd.New(sock, containerd.WithDefaultNamespace(namespace), containerd.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("containerd exited: %v", err)
		default:
		}
		ok, _ := client.IsServing(ctx)
		return ok, nil
	}); err != nil {
		t.Fatalf("containerd did not start: %v", err)
	}
	return client
}
