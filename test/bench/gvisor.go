package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// gvisorRuns is how many pooled sandboxes of each runtime the create → first exec rows make.
const gvisorRuns = 10

// computeProbe runs in a sandbox and times, inside it (so that exec's own cost is not in the
// figures): a CPU-bound Python loop, writing and reading small files, and fork+exec of a
// short command. It prints JSON of the seconds each took.
const computeProbe = `
import json, os, shutil, subprocess, sys, tempfile, time
files, forks = int(sys.argv[1]), int(sys.argv[2])
t = time.perf_counter(); x = 0
for i in range(5000000): x += i * i
cpu = time.perf_counter() - t
d = tempfile.mkdtemp(dir="/tmp")
t = time.perf_counter()
for i in range(files):
    with open("%s/%d" % (d, i), "w") as f: f.write("x" * 100)
for i in range(files):
    with open("%s/%d" % (d, i)) as f: f.read()
io = time.perf_counter() - t
shutil.rmtree(d)
t = time.perf_counter()
for i in range(forks): subprocess.run(["true"], check=True)
fork = time.perf_counter() - t
print(json.dumps({"cpu": cpu, "files": io, "fork": fork}))
`

type computeResult struct {
	CPU   float64 `json:"cpu"`
	Files float64 `json:"files"`
	Fork  float64 `json:"fork"`
}

// gVisorRows measures gVisor against runc in one run, each row the same thing in a sandbox of
// each: pooled create → first exec, the exec round trip, DNS through the node's proxy, TCP
// connects and an HTTP download to an outside host, a CPU-bound loop, small files, and
// fork+exec.
func (b *bench) gVisorRows(ctx context.Context) error {
	if _, err := b.kube.NodeV1().RuntimeClasses().Get(ctx, *gvisor, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("RuntimeClass %s: %w", *gvisor, err)
	}
	host, stop, err := b.outsideResolver(ctx)
	if err != nil {
		return err
	}
	defer stop()

	runc, gv := *b, *b
	runc.name, gv.name = b.name+"-rt-runc", b.name+"-rt-gvisor"
	for _, s := range []struct {
		b     *bench
		class string
	}{{&runc, ""}, {&gv, *gvisor}} {
		if _, err := b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Create(ctx, egressSandbox(s.b.name, host, s.class), metav1.CreateOptions{}); err != nil {
			return err
		}
		defer func() {
			_ = b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Delete(context.Background(), s.b.name, metav1.DeleteOptions{})
		}()
	}
	for _, s := range []*bench{&runc, &gv} {
		pod, err := b.waitEgressReady(ctx, s.name)
		if err != nil {
			return err
		}
		s.pod = pod
	}

	fmt.Printf("\n## gVisor against runc\n\nThe same in a sandbox of the RuntimeClass %s and in one of the node's default runtime (runc), in this run; network rows against an outside host (a network namespace behind the node) that both sandboxes' policies allow, DNS through the node agent's proxy.\n\n", *gvisor)
	fmt.Println("| measurement | gVisor | runc | ratio (gVisor/runc) |")
	fmt.Println("|---|---|---|---|")

	if err := b.pooledByRuntime(ctx); err != nil {
		fmt.Printf("| pooled create → first exec | skipped: %v | | |\n", err)
	}
	g, err := gv.roundTrips(ctx, "websocket", gv.sandboxExecURL)
	if err != nil {
		return fmt.Errorf("exec in gVisor: %w", err)
	}
	r, err := runc.roundTrips(ctx, "websocket", runc.sandboxExecURL)
	if err != nil {
		return fmt.Errorf("exec in runc: %w", err)
	}
	for _, q := range []float64{0.5, 0.99} {
		fmt.Printf("| exec `true` round trip, websocket, p%.0f (%d runs) | %s | %s | %.2f |\n", q*100, *runs, ms(quantile(g, q)), ms(quantile(r, q)), float64(quantile(g, q))/float64(quantile(r, q)))
	}

	gNet, err := runProbe(ctx, append([]string{"sandbox", "-n", *namespace, "exec", gv.name, "--"}, egressProbeArgs(host)...))
	if err != nil {
		return fmt.Errorf("network probe in gVisor: %w", err)
	}
	rNet, err := runProbe(ctx, append([]string{"sandbox", "-n", *namespace, "exec", runc.name, "--"}, egressProbeArgs(host)...))
	if err != nil {
		return fmt.Errorf("network probe in runc: %w", err)
	}
	for _, q := range []float64{0.5, 0.99} {
		o, t := quantile(durations(gNet.DNS), q), quantile(durations(rNet.DNS), q)
		fmt.Printf("| DNS lookup through the node's proxy, p%.0f (%d runs) | %s | %s | %.2f |\n", q*100, *egressRuns, us(o), us(t), float64(o)/float64(t))
	}
	for _, q := range []float64{0.5, 0.99} {
		o, t := quantile(durations(gNet.TCP), q), quantile(durations(rNet.TCP), q)
		fmt.Printf("| TCP connect, p%.0f (%d runs) | %s | %s | %.2f |\n", q*100, *egressRuns, us(o), us(t), float64(o)/float64(t))
	}
	fmt.Printf("| HTTP download, %d MiB | %.0f MB/s | %.0f MB/s | %.2f |\n", *egressHTTPMB, gNet.HTTP, rNet.HTTP, gNet.HTTP/rNet.HTTP)

	const files, forks = 10000, 50
	gc, err := runCompute(ctx, gv.name, files, forks)
	if err != nil {
		return fmt.Errorf("compute probe in gVisor: %w", err)
	}
	rc, err := runCompute(ctx, runc.name, files, forks)
	if err != nil {
		return fmt.Errorf("compute probe in runc: %w", err)
	}
	secs := func(s float64) string { return fmt.Sprintf("%.3f s", s) }
	fmt.Printf("| CPU-bound Python loop (5M iterations) | %s | %s | %.2f |\n", secs(gc.CPU), secs(rc.CPU), gc.CPU/rc.CPU)
	fmt.Printf("| %d small files written, then read | %s | %s | %.2f |\n", files, secs(gc.Files), secs(rc.Files), gc.Files/rc.Files)
	fmt.Printf("| %d fork+exec of `true` | %s | %s | %.2f |\n", forks, secs(gc.Fork), secs(rc.Fork), gc.Fork/rc.Fork)
	return nil
}

func runCompute(ctx context.Context, sandbox string, files, forks int) (*computeResult, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "kubectl", "sandbox", "-n", *namespace, "exec", sandbox, "--",
		"python3", "-c", computeProbe, fmt.Sprint(files), fmt.Sprint(forks))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(errOut.String()))
	}
	r := &computeResult{}
	if err := json.Unmarshal(out.Bytes(), r); err != nil {
		return nil, fmt.Errorf("%v: %s", err, out.String())
	}
	return r, nil
}

// waitEgressReady waits until the sandbox runs with its policy in force and returns its pod.
func (b *bench) waitEgressReady(ctx context.Context, name string) (string, error) {
	var pod string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || s.Status.Phase != sandboxv1alpha1.PhaseRunning || len(s.Status.Pods) == 0 {
			return false, nil
		}
		for _, c := range s.Status.Conditions {
			if c.Type == "EgressReady" && c.Status == metav1.ConditionTrue && c.ObservedGeneration == s.Generation {
				pod = s.Status.Pods[0].Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("sandbox %s not Running with its policy in force: %w", name, err)
	}
	return pod, nil
}

// pooledByRuntime prints pooled create → first exec from a pool of each runtime, the two
// pools' sandboxes made in turn, one at a time.
func (b *bench) pooledByRuntime(ctx context.Context) error {
	ns := fmt.Sprintf("bench-runtime-%d", time.Now().Unix())
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() { _ = b.kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }()
	pbs := map[string]*poolBench{"runc": {bench: b, ns: ns, pool: "runc"}, "gvisor": {bench: b, ns: ns, pool: "gvisor"}}
	for name, pb := range pbs {
		rc := ""
		if name == "gvisor" {
			rc = *gvisor
		}
		if err := pb.createSmallPool(ctx, rc, gvisorRuns); err != nil {
			return fmt.Errorf("pool %s: %w", name, err)
		}
	}
	times := map[string][]time.Duration{}
	parts := map[string][]phases{}
	for i := range gvisorRuns {
		for _, name := range []string{"runc", "gvisor"} {
			// Each on a quiet node: the refill of the pod the last claim took (a gVisor pod's
			// start costs the node a second of CPU) has settled.
			for _, pb := range pbs {
				if err := pb.waitAvailable(ctx, gvisorRuns); err != nil {
					return err
				}
			}
			if err := pbs[name].waitNoPodsStarting(ctx); err != nil {
				return err
			}
			d, ph, err := pbs[name].createToExec(ctx, pbs[name].pooled(fmt.Sprintf("%s-%d", name, i)))
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			times[name] = append(times[name], d)
			parts[name] = append(parts[name], ph)
		}
	}
	for _, q := range []float64{0.5, 0.9} {
		g, r := quantile(times["gvisor"], q), quantile(times["runc"], q)
		fmt.Printf("| pooled create → first exec, p%.0f (%d each, one at a time on a quiet node) | %s | %s | %.2f |\n", q*100, gvisorRuns, ms(g), ms(r), float64(g)/float64(r))
	}
	for _, part := range phaseParts {
		var g, r []time.Duration
		for i := range parts["gvisor"] {
			g, r = append(g, part.of(parts["gvisor"][i])), append(r, part.of(parts["runc"][i]))
		}
		gq, rq := quantile(g, 0.5), quantile(r, 0.5)
		fmt.Printf("| of which %s, p50 | %s | %s | %.2f |\n", part.name, ms(gq), ms(rq), float64(gq)/float64(max(rq, time.Microsecond)))
	}
	return nil
}

// waitNoPodsStarting waits until every pod of the namespace runs and is ready, and none is
// being deleted.
func (pb *poolBench) waitNoPodsStarting(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := pb.kube.CoreV1().Pods(pb.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return settled(pods.Items), nil
	})
}

// createSmallPool creates pb.pool of n idle pods of the benchmark's image (under runtimeClass,
// unless empty) and waits until all are available.
func (pb *poolBench) createSmallPool(ctx context.Context, runtimeClass string, n int) error {
	if err := pb.applyPool(ctx, runtimeClass, n, 2*n+2); err != nil {
		return err
	}
	return pb.waitAvailable(ctx, n)
}

// waitAvailable waits until pb.pool has n idle pods available.
func (pb *poolBench) waitAvailable(ctx context.Context, n int) error {
	d, err := pb.dyn()
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		obj, err := d.Resource(poolGVR).Namespace(pb.ns).Get(ctx, pb.pool, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		p := &controlv1alpha1.Pool{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, p); err != nil {
			return false, err
		}
		return p.Status.Available == int32(n), nil
	})
}
