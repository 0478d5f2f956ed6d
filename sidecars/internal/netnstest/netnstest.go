// Package netnstest makes network namespaces for tests of code that programs the kernel's
// network (nodefilter's rules, podnet's links and probes): fresh namespaces held by file
// descriptors, never mounted under /run/netns, so that nothing next to a running kubelet
// sees them.
package netnstest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs in fresh network namespaces")
	}
}

// New makes a fresh network namespace with its loopback up, and leaves the calling thread
// where it was. Nothing is mounted in /run/netns (no "ip netns add"): the handle keeps the
// namespace alive, and closing it (at cleanup) frees it.
func New(t testing.TB) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("get namespace: %v", err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("new namespace: %v", err)
	}
	if err := netns.Set(orig); err != nil {
		// Stay locked: the goroutine ends (Fatal) and the runtime discards its thread, which is
		// in the wrong namespace.
		t.Fatalf("back to the original namespace: %v", err)
	}
	runtime.UnlockOSThread()
	t.Cleanup(func() { ns.Close() })

	// No duplicate address detection on the interfaces to come, link-local addresses
	// included: IPv6 is usable as soon as a link is up.
	for _, conf := range []string{"all", "default"} {
		Sysctl(t, ns, "net/ipv6/conf/"+conf+"/accept_dad", "0")
	}
	h := Handle(t, ns)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatalf("lo: %v", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		t.Fatalf("lo up: %v", err)
	}
	return ns
}

// In runs fn on an OS thread switched into ns. The goroutine ends with its thread locked,
// so the runtime throws the thread away instead of letting other goroutines run in ns. Sockets
// fn makes stay in ns and can be used from anywhere.
func In(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Handle is a netlink handle in ns, closed at cleanup.
func Handle(t testing.TB, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// Sysctl writes a /proc/sys file as seen from ns (net.* files are per namespace).
func Sysctl(t testing.TB, ns netns.NsHandle, path, value string) {
	t.Helper()
	if err := In(ns, func() error { return os.WriteFile("/proc/sys/"+path, []byte(value), 0o644) }); err != nil {
		t.Fatalf("sysctl %s=%s: %v", path, value, err)
	}
}

// ReadSysctl reads a /proc/sys file as seen from ns.
func ReadSysctl(t testing.TB, ns netns.NsHandle, path string) (string, error) {
	t.Helper()
	var out string
	err := In(ns, func() error {
		b, err := os.ReadFile("/proc/sys/" + path)
		out = strings.TrimSpace(string(b))
		return err
	})
	return out, err
}
