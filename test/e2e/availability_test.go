//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
