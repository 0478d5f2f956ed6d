package main

// Bursts: sandboxes created at the same instant, each until its first successful exec, with
// the timeline of each one: the client's own times joined with the line the controller logs
// when it allocates (see controller/pkg/batchsandbox, "sandbox allocated"). The figures say
// where the time of N at once goes, and how much of it is waiting rather than work.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	burstSize   = flag.Int("burst-size", 20, "sandboxes created at the same instant in the burst phase")
	burstRounds = flag.Int("burst-rounds", 3, "bursts in the burst phase (the pool refills between them)")
)

// burstRun is one sandbox of a burst, as the client saw it.
type burstRun struct {
	name                              string
	start, created, running, execDone time.Time
	err                               error
	alloc                             *allocLine
}

// allocLine is the controller's "sandbox allocated" log line: when its reconcile started and
// how long after that each stage ended.
type allocLine struct {
	start                                 time.Time
	list, allocate, policy, claim, status time.Duration
	conflicts, replicas                   int
}

// burstStages are the parts of a burst sandbox's time, in order; each is the time between
// two points of its timeline (client's and controller's clocks are the same node's).
var burstStages = []struct {
	name string
	of   func(r burstRun) time.Duration
}{
	{"create call (client → sandbox-apiserver → BatchSandbox stored)", func(r burstRun) time.Duration { return r.created.Sub(r.start) }},
	{"stored → reconcile starts (watch delivery, workqueue)", func(r burstRun) time.Duration { return r.alloc.start.Sub(r.created) }},
	{"candidates listed", func(r burstRun) time.Duration { return r.alloc.list }},
	{"pod patched (allocation)", func(r burstRun) time.Duration { return r.alloc.allocate - r.alloc.list }},
	{"policy pushed to the node agent", func(r burstRun) time.Duration { return r.alloc.policy - r.alloc.allocate }},
	{"execd claimed", func(r burstRun) time.Duration { return r.alloc.claim - r.alloc.policy }},
	{"status written", func(r burstRun) time.Duration { return r.alloc.status - r.alloc.claim }},
	{"status written → client's watch sees Running", func(r burstRun) time.Duration {
		return r.running.Sub(r.alloc.start.Add(r.alloc.status))
	}},
	{"first exec (`true`)", func(r burstRun) time.Duration { return r.execDone.Sub(r.running) }},
}

// bursts runs -burst-rounds bursts of -burst-size pooled sandboxes and prints the latency of
// create → first exec, the timeline per stage, the last burst sandbox by sandbox, and the
// node's CPU per sandbox by process over the bursts.
func (pb *poolBench) bursts(ctx context.Context) error {
	since := metav1.NewTime(time.Now().Add(-time.Second))
	var all []burstRun
	var cpu cpuTotals
	for round := range *burstRounds {
		if err := pb.waitPoolFull(ctx); err != nil {
			return err
		}
		before := sampleCPU()
		runs := pb.burst(ctx, fmt.Sprintf("burst%d", round), *burstSize)
		cpu.add(before, sampleCPU())
		var names []string
		for _, r := range runs {
			names = append(names, r.name)
			if r.err != nil {
				return fmt.Errorf("burst %d: %s: %w", round, r.name, r.err)
			}
		}
		all = append(all, runs...)
		if err := pb.deleteAll(ctx, names); err != nil {
			return err
		}
	}
	lines, err := pb.allocLines(ctx, since)
	if err != nil {
		fmt.Printf("\nBurst timeline: skipped: the controller's log: %v\n", err)
	}
	joined, conflicts := 0, 0
	for i := range all {
		if l, ok := lines[pb.ns+"/"+all[i].name]; ok {
			all[i].alloc = l
			joined++
			conflicts += l.conflicts
		}
	}

	fmt.Printf("\n## %d at once\n\n%d bursts of %d pooled sandboxes created at the same instant (pool of %d idle pods, refilled between bursts); create → first successful exec.\n\n",
		*burstSize, *burstRounds, *burstSize, *poolSize)
	fmt.Println("| measurement | p50 | p90 | p99 | max |")
	fmt.Println("|---|---|---|---|---|")
	var total []time.Duration
	for _, r := range all {
		total = append(total, r.execDone.Sub(r.start))
	}
	printRow(fmt.Sprintf("%d at once: create → first exec (%d)", *burstSize, len(all)), total)
	if joined == len(all) {
		for _, st := range burstStages {
			var d []time.Duration
			for _, r := range all {
				d = append(d, st.of(r))
			}
			printRow("  of which "+st.name, d)
		}
	} else {
		fmt.Printf("\n%d of %d sandboxes have the controller's line (it logs at --v=2): no stage breakdown.\n", joined, len(all))
	}
	fmt.Printf("\nAllocation conflicts (an idle pod another claim took first) in the bursts: %d, for %d sandboxes.\n", conflicts, len(all))

	// The last burst, sandbox by sandbox, in ms from the burst's first create.
	last := all[len(all)-*burstSize:]
	if joined == len(all) {
		sort.Slice(last, func(a, b int) bool { return last[a].execDone.Before(last[b].execDone) })
		t0 := last[0].start
		for _, r := range last {
			if r.start.Before(t0) {
				t0 = r.start
			}
		}
		at := func(t time.Time) string { return fmt.Sprintf("%.0f", float64(t.Sub(t0).Microseconds())/1000) }
		fmt.Printf("\nThe last burst, sandbox by sandbox (ms since its first create; queued = reconcile start):\n\n")
		fmt.Println("| sandbox | sent | stored | queued until | listed | patched | policy | claimed | status | client sees Running | exec done | conflicts |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
		for _, r := range last {
			a := r.alloc
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", r.name, at(r.start), at(r.created), at(a.start),
				at(a.start.Add(a.list)), at(a.start.Add(a.allocate)), at(a.start.Add(a.policy)), at(a.start.Add(a.claim)), at(a.start.Add(a.status)),
				at(r.running), at(r.execDone), a.conflicts)
		}
	}
	cpu.print(fmt.Sprintf("the %d bursts", *burstRounds), len(all))
	return nil
}

// burst creates n pooled sandboxes at the same instant, each until its first exec.
func (pb *poolBench) burst(ctx context.Context, prefix string, n int) []burstRun {
	runs := make([]burstRun, n)
	var ready, wg sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(n)
	for i := range n {
		wg.Go(func() {
			r := &runs[i]
			r.name = fmt.Sprintf("%s-%d", prefix, i)
			ready.Done()
			<-gate
			r.start = time.Now()
			_, ph, err := pb.createToExec(ctx, pb.pooled(r.name))
			r.err = err
			r.created = r.start.Add(ph.create)
			r.running = r.created.Add(ph.running)
			r.execDone = r.running.Add(ph.exec)
		})
	}
	ready.Wait()
	close(gate)
	wg.Wait()
	return runs
}

// allocLineRE takes the key=value pairs of a klog text line (values quoted or bare).
var allocLineRE = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

// parseAllocLine reads a "sandbox allocated" line; ok is false for any other line.
func parseAllocLine(line string) (sandbox string, l *allocLine, ok bool) {
	if !strings.Contains(line, `"sandbox allocated"`) {
		return "", nil, false
	}
	kv := map[string]string{}
	for _, m := range allocLineRE.FindAllStringSubmatch(line, -1) {
		v := m[2]
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		kv[m[1]] = v
	}
	start, err := time.Parse(time.RFC3339Nano, kv["start"])
	if err != nil || kv["sandbox"] == "" {
		return "", nil, false
	}
	dur := func(k string) time.Duration {
		f, _ := strconv.ParseFloat(kv[k], 64)
		return time.Duration(f * float64(time.Millisecond))
	}
	l = &allocLine{start: start, list: dur("listMs"), allocate: dur("allocateMs"), policy: dur("policyMs"), claim: dur("claimMs"), status: dur("statusMs")}
	l.conflicts, _ = strconv.Atoi(kv["conflicts"])
	l.replicas, _ = strconv.Atoi(kv["replicas"])
	return kv["sandbox"], l, true
}

// allocLines reads the "sandbox allocated" lines the controller pods logged since, by sandbox
// (namespace/name). Every controller pod is read: the leader is the one that logs.
func (pb *poolBench) allocLines(ctx context.Context, since metav1.Time) (map[string]*allocLine, error) {
	pods, err := pb.kube.CoreV1().Pods("kube-sandbox-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandbox-controller"})
	if err != nil {
		return nil, err
	}
	out := map[string]*allocLine{}
	for _, p := range pods.Items {
		rc, err := pb.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &since}).Stream(ctx)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if name, l, ok := parseAllocLine(sc.Text()); ok {
				out[name] = l
			}
		}
		rc.Close()
	}
	return out, nil
}

// cpuTotals adds up the node's CPU over several windows, by process name.
type cpuTotals struct {
	secs   float64
	byComm map[string]float64 // CPU seconds
}

func (c *cpuTotals) add(before, after cpuSample) {
	if c.byComm == nil {
		c.byComm = map[string]float64{}
	}
	c.secs += after.at.Sub(before.at).Seconds()
	for pid, p := range after.procs {
		d := p.ticks
		if b, ok := before.procs[pid]; ok && b.comm == p.comm {
			d -= min(b.ticks, d)
		}
		c.byComm[p.comm] += float64(d) / clockTicks
	}
}

// components are the processes whose share of a sandbox's CPU the issue of speed names, by
// their command names (/proc truncates them to 15 characters).
var components = []struct{ label, comm string }{
	{"kube-apiserver", "kube-apiserver"},
	{"etcd", "etcd"},
	{"sandbox-apiserver", "sandbox-apiserv"},
	{"sandbox-controller", "sandbox-control"},
	{"execd (all pods)", "sandbox-execd"},
	{"node agent (egress enforcer)", "sandbox-node"},
	{"kubelet", "kubelet"},
	{"containerd", "containerd"},
	{"the benchmark (client)", "bench"},
}

// print prints CPU per sandbox by process, and the floor it sets: n sandboxes at once on C
// cores need at least n × (CPU per sandbox) ÷ C.
func (c *cpuTotals) print(what string, sandboxes int) {
	if sandboxes == 0 || c.secs == 0 {
		return
	}
	total := 0.0
	for _, v := range c.byComm {
		total += v
	}
	fmt.Printf("\nNode CPU per sandbox over %s (%.1f s, %d sandboxes; the pool's refills in those windows count too), ms by process:\n\n", what, c.secs, sandboxes)
	fmt.Println("| process | ms per sandbox | share |")
	fmt.Println("|---|---|---|")
	for _, comp := range components {
		v := c.byComm[comp.comm]
		fmt.Printf("| %s | %.1f | %.0f%% |\n", comp.label, 1000*v/float64(sandboxes), 100*v/total)
	}
	named := map[string]bool{}
	for _, comp := range components {
		named[comp.comm] = true
	}
	type other struct {
		comm string
		secs float64
	}
	var others []other
	for comm, v := range c.byComm {
		if !named[comm] {
			others = append(others, other{comm, v})
		}
	}
	sort.Slice(others, func(a, b int) bool { return others[a].secs > others[b].secs })
	for _, o := range others[:min(len(others), 6)] {
		fmt.Printf("| %s (other) | %.1f | %.0f%% |\n", o.comm, 1000*o.secs/float64(sandboxes), 100*o.secs/total)
	}
	fmt.Printf("| all processes | %.1f | 100%% |\n", 1000*total/float64(sandboxes))
	floor := total / float64(sandboxes) * float64(*burstSize) / float64(cores())
	fmt.Printf("\nFloor for %d at once on %d cores from this CPU alone: %.0f ms (what is above it is waiting, not work).\n", *burstSize, cores(), 1000*floor)
}

// cores is the node's CPU count: the benchmark runs on the local cluster's node.
func cores() int { return runtime.NumCPU() }
