//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
)

// TestAPIServerRollingRestart: while sandbox-apiserver's two replicas restart one after the
// other, no request fails: creates, reads and deletes of sandboxes, short execs, and an exec
// stream that was open when the restart began (it drains within the grace period).
func TestAPIServerRollingRestart(t *testing.T) {
	ns := newNamespace(t)
	createRunningSandbox(t, ns, "load")

	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		counts   = map[string]int{}
	)
	record := func(what string, r result) {
		mu.Lock()
		defer mu.Unlock()
		counts[what]++
		if r.code != 0 {
			failures = append(failures, fmt.Sprintf("%s at %s: exit %d: %s", what, time.Now().Format("15:04:05.000"), r.code, strings.TrimSpace(r.stderr)))
		}
	}
	// A Fatal below must not leave the load running: it would log after the test is over,
	// which panics the whole suite.
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
	})
	// A stream open across the restart.
	var long result
	wg.Go(func() { long = sandboxCmd(t, ns, "exec", "load", "--", "sh", "-c", "sleep 12; echo done") })
	time.Sleep(time.Second)
	wg.Go(func() {
		for !stop.Load() {
			record("exec", sandboxCmd(t, ns, "exec", "load", "--", "true"))
		}
	})
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			name := fmt.Sprintf("churn-%d", i)
			// No replicas: a sandbox that costs the node nothing, and every write on the API.
			manifest := fmt.Sprintf(`{"apiVersion":"sandbox.kube-sandbox.io/v1alpha1","kind":"Sandbox","metadata":{"name":%q},"spec":{"replicas":0,"template":{"spec":{"containers":[{"name":"sandbox","image":%q}]}}}}`, name, pythonImage)
			record("create", run(t, []byte(manifest), "kubectl", "-n", ns, "create", "-f", "-"))
			record("get", kubectl(t, "-n", ns, "get", "sandbox", name))
			record("delete", kubectl(t, "-n", ns, "delete", "sandbox", name, "--wait=false"))
		}
	})
	time.Sleep(2 * time.Second)
	start := time.Now()
	mustKubectl(t, "-n", "kube-sandbox-system", "rollout", "restart", "deployment/sandbox-apiserver")
	mustKubectl(t, "-n", "kube-sandbox-system", "rollout", "status", "deployment/sandbox-apiserver", "--timeout=3m")
	t.Logf("rollout of sandbox-apiserver done in %.1fs", time.Since(start).Seconds())
	// The load goes on until the old pods are gone: they drain while it runs.
	waitFor(t, "the old sandbox-apiserver pods gone", 2*time.Minute, func() (bool, string) {
		out := kubectl(t, "-n", "kube-sandbox-system", "get", "pods", "-l", "app.kubernetes.io/name=sandbox-apiserver", "-o", "name").stdout
		return len(strings.Fields(out)) == 2, out
	})
	t.Logf("old pods gone %.1fs after the restart began", time.Since(start).Seconds())
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	t.Logf("requests during the restart: %v", counts)
	if long.code != 0 || strings.TrimSpace(long.stdout) != "done" {
		t.Errorf("the exec stream open across the restart: exit %d, stdout %q, stderr %q", long.code, long.stdout, long.stderr)
	}
	if counts["exec"] == 0 || counts["create"] == 0 {
		t.Fatalf("no load ran: %v", counts)
	}
	for _, f := range failures {
		t.Error(f)
	}
}

// TestControllerRollingRestart: a rolling restart of sandbox-controller starts the new pod
// first; the old one hands its lease over as it stops and the new one takes it. Sandboxes
// created meanwhile all get a pod of the pool, none the same.
func TestControllerRollingRestart(t *testing.T) {
	ns := newNamespace(t)
	applyPool(t, ns, "py", 8, 8, 30)
	waitPoolFull(t, ns, "py", 8, 0, 3*time.Minute)
	t.Cleanup(func() {
		if r := kubectl(t, "-n", controllerNamespace, "rollout", "status", "deploy/sandbox-controller", "--timeout=3m"); r.code != 0 {
			t.Errorf("the controller did not come back: %s%s", r.stdout, r.stderr)
		}
	})
	// Every change of the lease, as it happens.
	lease := exec.Command("kubectl", "-n", controllerNamespace, "get", "lease", "sandbox-controller.control.kube-sandbox.io", "-w",
		"-o", `jsonpath={.spec.holderIdentity}{" "}{.spec.renewTime}{" "}{.spec.acquireTime}{"\n"}`)
	var leaseOut syncBuffer
	lease.Stdout = &leaseOut
	if err := lease.Start(); err != nil {
		t.Fatal(err)
	}
	var names []string
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // its Errorf must come before the test is over, whatever ends it
	wg.Go(func() {
		for i := range 6 {
			name := fmt.Sprintf("during-%d", i)
			names = append(names, name)
			if r := runDetached("kubectl", "sandbox", "-n", ns, "create", name, "--pool", "py"); r.code != 0 {
				t.Errorf("create %s: exit %d: %s", name, r.code, r.stderr)
			}
			time.Sleep(700 * time.Millisecond)
		}
	})
	time.Sleep(time.Second)
	mustKubectl(t, "-n", controllerNamespace, "rollout", "restart", "deploy/sandbox-controller")
	mustKubectl(t, "-n", controllerNamespace, "rollout", "status", "deploy/sandbox-controller", "--timeout=3m")
	wg.Wait()
	waitSandboxRunning(t, ns, 2*time.Minute, names...)
	waitFor(t, "the old controller pod gone", 2*time.Minute, func() (bool, string) {
		out := kubectl(t, "-n", controllerNamespace, "get", "pods", "-l", controllerSelector, "-o", "name").stdout
		return len(strings.Fields(out)) == 1, out
	})
	// The new leader tries for the lease every retry period (2 s) and may take it only after
	// the old pod is gone: wait for the take-over rather than a fixed time.
	var gap time.Duration
	var holder string
	waitFor(t, "the new leader to take the lease", 30*time.Second, func() (bool, string) {
		var ok bool
		gap, holder, ok = takeOver(leaseOut.String())
		return ok, leaseOut.String()
	})
	_ = lease.Process.Kill()
	_ = lease.Wait()

	t.Logf("lease released by the old leader and taken by %s %.3fs later", holder, gap.Seconds())
	owners := map[string]string{}
	for _, name := range names {
		s := getSandbox(t, ns, name)
		pod := s.pod(0).Name
		if prev, ok := owners[pod]; ok {
			t.Errorf("pod %s given to %s and %s", pod, prev, name)
		}
		owners[pod] = name
		if p := getPod(t, ns, pod); p.Metadata.Labels["control.kube-sandbox.io/batchsandbox"] != name {
			t.Errorf("pod %s of %s is labelled for %q", pod, name, p.Metadata.Labels["control.kube-sandbox.io/batchsandbox"])
		}
	}
}

// takeOver reads the lease's changes (holder, renewTime, acquireTime per line, the holder
// empty once released) and returns the first hand-over: from the release (its renewTime) to
// the next holder's acquireTime.
func takeOver(changes string) (time.Duration, string, bool) {
	var released time.Time
	seenHolder := false
	for _, line := range strings.Split(strings.TrimSpace(changes), "\n") {
		f := strings.Fields(line)
		holder := ""
		if len(f) == 3 {
			holder, f = f[0], f[1:]
		}
		if len(f) != 2 {
			continue
		}
		renew, err1 := time.Parse(time.RFC3339Nano, f[0])
		acquire, err2 := time.Parse(time.RFC3339Nano, f[1])
		if err1 != nil || err2 != nil {
			continue
		}
		switch {
		case holder != "" && !released.IsZero():
			return acquire.Sub(released), holder, true
		case holder != "":
			seenHolder = true
		case seenHolder:
			released = renew
		}
	}
	return 0, "", false
}

// syncBuffer is a bytes.Buffer that a command writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestReadsAcrossReplicas: a read right after a write sees it, whichever of sandbox-apiserver's
// two replicas each request reaches (the aggregator picks one per request). Each round creates
// a sandbox of no replicas, then at once waits for it as `kubectl sandbox wait` does (a watch
// of the one sandbox, whose start must hold it) and lists it by label.
func TestReadsAcrossReplicas(t *testing.T) {
	ns := newNamespace(t)
	ready := mustKubectl(t, "-n", "kube-sandbox-system", "get", "deployment", "sandbox-apiserver", "-o", "jsonpath={.status.readyReplicas}")
	if strings.TrimSpace(ready) != "2" {
		t.Fatalf("sandbox-apiserver has %q ready replicas, want the 2 of the manifests", ready)
	}
	c, err := sandboxclient.NewFromKubeconfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	api := c.Clientset().SandboxV1alpha1().Sandboxes(ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range 40 {
		name := fmt.Sprintf("cross-%d", i)
		sb := &sandboxv1alpha1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"round": fmt.Sprint(i)}},
			Spec: sandboxv1alpha1.SandboxSpec{
				Replicas: ptr.To[int32](0),
				Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: pythonImage}}}},
			},
		}
		if _, err := api.Create(ctx, sb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := sandboxclient.WaitForSandbox(ctx, c.Clientset(), ns, name, func(s *sandboxv1alpha1.Sandbox) (bool, error) {
			if s == nil {
				return false, fmt.Errorf("round %d: the watch right after the create starts without %s", i, name)
			}
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		list, err := api.List(ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("round=%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 || list.Items[0].Name != name {
			t.Fatalf("round %d: the list of round=%d right after the create holds %d sandboxes", i, i, len(list.Items))
		}
		if err := api.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
