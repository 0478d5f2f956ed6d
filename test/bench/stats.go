package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

var (
	statsSandboxes = flag.Int("stats-sandboxes", 200, "sandboxes whose usage the stats part reads")
	statsTops      = flag.Int("stats-tops", 30, "tops of all of them (and lists, the baseline) per side")
	statsWindow    = flag.Duration("stats-window", 60*time.Second, "how long the node agent's CPU is measured, with idle pods and with sandboxes")
)

// tableAccept asks for the server's Table, as kubectl get and kubectl sandbox top do.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

// stats measures what usage figures cost at *statsSandboxes sandboxes: the node agent's CPU
// and memory with that many idle pool pods (which it filters but does not sample) against the
// same pods serving sandboxes (which it samples every nodeapi.SampleInterval), and a top of all
// of them (the sandboxstats Table of the namespace) against a list of the same sandboxes (the
// sandboxes Table): time, and requests to the kube-apiserver per top.
func (b *bench) stats(ctx context.Context) error {
	pb := &poolBench{bench: b, ns: fmt.Sprintf("bench-stats-%d", time.Now().Unix()), pool: "stats"}
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pb.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() {
		_ = b.kube.CoreV1().Namespaces().Delete(context.Background(), pb.ns, metav1.DeleteOptions{})
	}()
	saved := *poolSize
	*poolSize = *statsSandboxes
	defer func() { *poolSize = saved }()
	if err := pb.applyPool(ctx, "", *statsSandboxes, 2**statsSandboxes+10); err != nil {
		return err
	}
	start := time.Now()
	if err := pb.waitPoolFull(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: stats: pool of %d filled in %v\n", *statsSandboxes, time.Since(start).Round(time.Second))

	fmt.Printf("\n## Usage figures (stats)\n\n%d pods of %s in namespace %s on one node; the node agent samples the pods that serve sandboxes every %s.\n\n",
		*statsSandboxes, *image, pb.ns, nodeapi.SampleInterval)
	idle := agentCost(*statsWindow)

	// The same pods, now serving sandboxes.
	names := make([]string, *statsSandboxes)
	for i := range names {
		names[i] = fmt.Sprintf("s-%d", i)
	}
	c := b.sandboxes.SandboxV1alpha1().Sandboxes(pb.ns)
	for _, n := range names {
		if _, err := c.Create(ctx, pb.pooled(n), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s: %w", n, err)
		}
	}
	// Every sandbox Running and sampled: a top without a NotSampled or NoPod row.
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l := &sandboxv1alpha1.SandboxStatsList{}
		if err := b.sandboxes.SandboxV1alpha1().RESTClient().Get().Namespace(pb.ns).Resource("sandboxstats").Do(ctx).Into(l); err != nil {
			return false, nil
		}
		if len(l.Items) < len(names) {
			return false, nil
		}
		for _, s := range l.Items {
			for _, r := range s.Replicas {
				if r.CPU == nil || r.Window.Duration == 0 {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the %d sandboxes were not all sampled: %w", len(names), err)
	}
	busy := agentCost(*statsWindow)

	fmt.Println("| measurement | with sandboxes | baseline | ratio |")
	fmt.Println("|---|---|---|---|")
	perSample := func(busy, idle float64) float64 {
		return (busy - idle) * 1000 * nodeapi.SampleInterval.Seconds() / float64(*statsSandboxes)
	}
	fmt.Printf("| node agent CPU (%d pods; baseline: the same pods idle in the pool, not sampled) | %.1f ms/s | %.1f ms/s | %.2f |\n",
		*statsSandboxes, busy.agent*1000, idle.agent*1000, busy.agent/max(idle.agent, 1e-9))
	fmt.Printf("| node agent CPU per sandbox per sample (the difference) | %.3f ms | | |\n", perSample(busy.agent, idle.agent))
	fmt.Printf("| containerd CPU (it answers the agent's container lists and snapshot usage) | %.1f ms/s | %.1f ms/s | %.2f |\n",
		busy.containerd*1000, idle.containerd*1000, busy.containerd/max(idle.containerd, 1e-9))
	fmt.Printf("| containerd CPU per sandbox per sample (the difference) | %.3f ms | | |\n", perSample(busy.containerd, idle.containerd))
	fmt.Printf("| node agent RSS | %.1f MiB | %.1f MiB | %.2f |\n", busy.rssMiB, idle.rssMiB, busy.rssMiB/max(idle.rssMiB, 1e-9))

	top := func(ctx context.Context) error {
		_, err := b.sandboxes.SandboxV1alpha1().RESTClient().Get().Namespace(pb.ns).Resource("sandboxstats").
			SetHeader("Accept", tableAccept).DoRaw(ctx)
		return err
	}
	list := func(ctx context.Context) error {
		_, err := b.sandboxes.SandboxV1alpha1().RESTClient().Get().Namespace(pb.ns).Resource("sandboxes").
			SetHeader("Accept", tableAccept).DoRaw(ctx)
		return err
	}
	before, costErr := b.apiRequests(ctx)
	tops, err := timeEach(ctx, *statsTops, top)
	if err != nil {
		return fmt.Errorf("top: %w", err)
	}
	after, err := b.apiRequests(ctx)
	if costErr == nil {
		costErr = err
	}
	lists, err := timeEach(ctx, *statsTops, list)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	for _, q := range []float64{0.5, 0.99} {
		o, t := quantile(tops, q), quantile(lists, q)
		fmt.Printf("| top of all %d sandboxes (sandboxstats Table) vs list of them (sandboxes Table), p%d (%d each) | %s | %s | %.2f |\n",
			*statsSandboxes, int(q*100), *statsTops, ms(o), ms(t), float64(o)/float64(t))
	}
	if costErr != nil {
		fmt.Printf("\nRequests to the kube-apiserver per top: skipped: %v\n", costErr)
	} else {
		var total, sandboxReads float64
		var by []string
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				total += d
				by = append(by, fmt.Sprintf("%s %.0f", k, d))
				if strings.Contains(k, "sandboxes") || strings.HasPrefix(k, "list pods") {
					sandboxReads += d
				}
			}
		}
		sort.Strings(by)
		fmt.Printf("\nRequests to the kube-apiserver during the %d tops: %.2f per top of sandboxes, BatchSandboxes or pod lists (sandbox-apiserver answers from its caches); all requests the cluster made meanwhile, the kubelet's and controllers' included: %.0f (%s). Each top asks the node agent of each node once.\n",
			*statsTops, sandboxReads/float64(*statsTops), total, strings.Join(by, ", "))
	}
	return nil
}

// nodeCost is the CPU (cores, averaged over a window) of the node agent and of containerd,
// and the agent's resident memory (MiB).
type nodeCost struct{ agent, containerd, rssMiB float64 }

func agentCost(window time.Duration) nodeCost {
	before := sampleCPU()
	time.Sleep(window)
	after := sampleCPU()
	cores := func(comm string) float64 {
		var ticks uint64
		for pid, p := range after.procs {
			if p.comm != comm {
				continue
			}
			d := p.ticks
			if b, ok := before.procs[pid]; ok && b.comm == p.comm {
				d -= min(b.ticks, d)
			}
			ticks += d
		}
		return float64(ticks) / clockTicks / after.at.Sub(before.at).Seconds()
	}
	kib, _ := rssByCommand()
	return nodeCost{agent: cores("sandbox-node"), containerd: cores("containerd"), rssMiB: float64(kib["sandbox-node"]) / 1024}
}

// timeEach runs f n times, one after another, and returns each one's time.
func timeEach(ctx context.Context, n int, f func(context.Context) error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := f(ctx); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
