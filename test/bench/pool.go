package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

var (
	poolSize      = flag.Int("pool-size", 210, "idle pods the benchmark pool keeps (bufferMin = bufferMax)")
	warmRuns      = flag.Int("warm-runs", 200, "pooled sandboxes per warm phase (sequential, then concurrent)")
	concurrency   = flag.Int("concurrency", 20, "sandboxes created at once in the concurrent warm phase (20: the figure the speed goals name)")
	coldRuns      = flag.Int("cold-runs", 10, "direct-mode sandboxes for the cold baseline")
	batchReplicas = flag.Int("batch-replicas", 100, "replicas of the pooled batch")
	idleSeconds   = flag.Int("idle-seconds", 60, "how long the idle sandboxes are watched")
	metricsURL    = flag.String("controller-metrics", "", "sandbox-controller's metrics endpoint (default: :8080/metrics of the pod that holds the leader lease)")
)

// poolBench measures warm allocation: sandboxes from a pool against direct-mode (cold) ones,
// a pooled batch, and what idle sandboxes cost the controller.
type poolBench struct {
	*bench
	ns   string
	pool string
	// policy, if set, is the networkPolicy of the pooled sandboxes made.
	policy *sandboxv1alpha1.SandboxNetworkPolicy
}

// benchPolicy is a policy of the size an agent's sandbox has: a few names, a wildcard, some
// addresses with ports.
func benchPolicy() *sandboxv1alpha1.SandboxNetworkPolicy {
	p := &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny"}
	for _, to := range []string{"pypi.org", "*.pythonhosted.org", "github.com", "*.githubusercontent.com", "api.openai.com", "198.51.100.0/24"} {
		p.Egress = append(p.Egress, sandboxv1alpha1.SandboxEgressRule{Action: "Allow", To: to, Ports: []sandboxv1alpha1.SandboxEgressPort{{Port: 443}}})
	}
	for i := range 4 {
		p.Egress = append(p.Egress, sandboxv1alpha1.SandboxEgressRule{Action: "Deny", To: fmt.Sprintf("203.0.113.%d", i)})
	}
	return p
}

func (b *bench) pools(ctx context.Context) error {
	pb := &poolBench{bench: b, ns: fmt.Sprintf("bench-pool-%d", time.Now().Unix()), pool: "warm"}
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pb.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() {
		_ = b.kube.CoreV1().Namespaces().Delete(context.Background(), pb.ns, metav1.DeleteOptions{})
	}()
	if *only == "pause" {
		// Direct mode only: no pool of idle pods loading the node.
		return pb.pause(ctx)
	}
	if err := pb.createPool(ctx); err != nil {
		return err
	}
	if *only == "tasks" {
		return pb.tasks(ctx)
	}
	if *only == "burst" {
		return pb.bursts(ctx)
	}
	if *only == "batch" {
		return pb.batch(ctx)
	}
	printIdleMemory(*poolSize)

	fmt.Printf("\n## Warm pools\n\nPool of %d idle pods (%s) in namespace %s; create → first successful exec (`true`, WebSocket) per sandbox. Between phases the pool refills completely.\n\n", *poolSize, *image, pb.ns)
	fmt.Println("| measurement | p50 | p90 | p99 | max |")
	fmt.Println("|---|---|---|---|---|")

	seq, names, err := pb.sequential(ctx)
	if err != nil {
		return err
	}
	if *only == "sequential" {
		return pb.deleteAll(ctx, names)
	}
	fmt.Println("\n| measurement | p50 | p90 | p99 | max |")
	fmt.Println("|---|---|---|---|---|")
	if err := pb.deleteAll(ctx, names); err != nil {
		return err
	}
	if err := pb.waitPoolFull(ctx); err != nil {
		return err
	}
	// The same with a policy of the sandbox's own: pushed to the pod's node agent before
	// the claim. The rows above use the platform's default (also pushed, but smaller).
	pb.policy = benchPolicy()
	withPolicy, _, names, err := pb.warm(ctx, "pol", 1)
	pb.policy = nil
	if err != nil {
		return fmt.Errorf("sequential warm with a policy: %w", err)
	}
	printRow(fmt.Sprintf("warm, sequential, own policy of %d rules (%d)", len(benchPolicy().Egress), len(withPolicy)), withPolicy)
	if err := pb.deleteAll(ctx, names); err != nil {
		return err
	}
	if err := pb.waitPoolFull(ctx); err != nil {
		return err
	}
	cpuBefore := sampleCPU()
	conc, concPhases, names, err := pb.warm(ctx, "conc", *concurrency)
	if err != nil {
		return fmt.Errorf("concurrent warm: %w", err)
	}
	cpuAfter := sampleCPU()
	printRow(fmt.Sprintf("warm, %d at once (%d)", *concurrency, len(conc)), conc)
	printBreakdown(concPhases)
	defer printCPU(fmt.Sprintf("warm, %d at once", *concurrency), cpuBefore, cpuAfter)
	var concCPU cpuTotals
	concCPU.add(cpuBefore, cpuAfter)
	defer concCPU.print(fmt.Sprintf("%d sandboxes, %d at a time", len(conc), *concurrency), len(conc))
	cold, err := pb.cold(ctx)
	if err != nil {
		return fmt.Errorf("cold baseline: %w", err)
	}
	printRow(fmt.Sprintf("cold (direct mode, a pod per sandbox) (%d)", len(cold)), cold)
	fmt.Printf("\nRatio warm/cold at p50: sequential %.3f, %d at once %.3f. Own policy / platform default, sequential, at p50: %.3f.\n", float64(quantile(seq, 0.5))/float64(quantile(cold, 0.5)),
		*concurrency, float64(quantile(conc, 0.5))/float64(quantile(cold, 0.5)), float64(quantile(withPolicy, 0.5))/float64(quantile(seq, 0.5)))

	if err := pb.waitPoolFull(ctx); err != nil {
		return err
	}
	if err := pb.idle(ctx, len(names)); err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	if err := pb.deleteAll(ctx, names); err != nil {
		return err
	}
	if err := pb.bursts(ctx); err != nil {
		return fmt.Errorf("bursts: %w", err)
	}
	if err := pb.waitPoolFull(ctx); err != nil {
		return err
	}
	if err := pb.batch(ctx); err != nil {
		return err
	}
	if err := pb.deleteAll(ctx, []string{"batch"}); err != nil {
		return err
	}
	if err := pb.waitPoolFull(ctx); err != nil {
		return err
	}
	if err := pb.tasks(ctx); err != nil {
		return err
	}
	// The batch's 100 pods go first: pause is measured on a quiet node.
	if err := pb.waitPoolFull(ctx); err != nil {
		return err
	}
	if err := pb.waitNoPodsGoing(ctx); err != nil {
		return err
	}
	if err := pb.pause(ctx); err != nil {
		fmt.Printf("\n## Pause and resume\n\nskipped: %v\n", err)
	}
	return nil
}

// phaseParts are the parts of a createToExec, for the rows that say where its time went.
var phaseParts = []struct {
	name string
	of   func(phases) time.Duration
}{
	{"create (API call)", func(p phases) time.Duration { return p.create }},
	{"created → Running (watch)", func(p phases) time.Duration { return p.running }},
	{"first exec", func(p phases) time.Duration { return p.exec }},
}

// sequential is the one-at-a-time phase: *warmRuns pooled sandboxes, each created once the one
// before has run its first exec, with the phases of each and what they cost the kube-apiserver.
// It returns the times and the sandboxes' names (kept, for the caller to delete).
func (pb *poolBench) sequential(ctx context.Context) ([]time.Duration, []string, error) {
	costBefore, costErr := pb.apiRequests(ctx)
	seq, seqPhases, names, err := pb.warm(ctx, "seq", 1)
	if err != nil {
		return nil, nil, fmt.Errorf("sequential warm: %w", err)
	}
	costAfter, err := pb.apiRequests(ctx)
	if costErr == nil {
		costErr = err
	}
	printRow(fmt.Sprintf("warm, sequential (%d)", len(seq)), seq)
	printBreakdown(seqPhases)
	if costErr != nil {
		fmt.Printf("\nAPI cost: skipped: %v\n", costErr)
	} else {
		printAPICost(costBefore, costAfter, len(seq))
	}
	return seq, names, nil
}

// printBreakdown prints where the time of createToExec went.
func printBreakdown(ph []phases) {
	for _, part := range phaseParts {
		var d []time.Duration
		for _, p := range ph {
			d = append(d, part.of(p))
		}
		printRow("  of which "+part.name, d)
	}
}

func printRow(what string, d []time.Duration) {
	fmt.Printf("| %s | %s | %s | %s | %s |\n", what, ms(quantile(d, 0.5)), ms(quantile(d, 0.9)), ms(quantile(d, 0.99)), ms(quantile(d, 1)))
}

func (pb *poolBench) dyn() (dynamic.Interface, error) { return dynamic.NewForConfig(pb.cfg) }

var poolGVR = controlv1alpha1.SchemeGroupVersion.WithResource("pools")

func (pb *poolBench) createPool(ctx context.Context) error {
	// Room for the largest phase's sandboxes (the warm runs kept, or the batch and the tasks)
	// besides the idle pods, which the pool refills before the next phase.
	if err := pb.applyPool(ctx, "", *poolSize, *poolSize+max(*warmRuns, *batchReplicas)+10); err != nil {
		return err
	}
	start := time.Now()
	if err := pb.waitPoolFull(ctx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: pool of %d filled in %v\n", *poolSize, time.Since(start).Round(time.Second))
	return nil
}

// applyPool creates pb.pool: idle pods of the benchmark's image (under runtimeClass, unless
// empty), at most poolMax pods in all.
func (pb *poolBench) applyPool(ctx context.Context, runtimeClass string, idle, poolMax int) error {
	pool := &controlv1alpha1.Pool{
		TypeMeta:   metav1.TypeMeta{APIVersion: controlv1alpha1.SchemeGroupVersion.String(), Kind: "Pool"},
		ObjectMeta: metav1.ObjectMeta{Name: pb.pool, Namespace: pb.ns},
		Spec: controlv1alpha1.PoolSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "sandbox", Image: *image, ImagePullPolicy: corev1.PullNever,
			}}}},
			CapacitySpec: controlv1alpha1.CapacitySpec{BufferMin: int32(idle), BufferMax: int32(idle), PoolMax: int32(poolMax)},
		},
	}
	if runtimeClass != "" {
		pool.Spec.Template.Spec.RuntimeClassName = &runtimeClass
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pool)
	if err != nil {
		return err
	}
	d, err := pb.dyn()
	if err != nil {
		return err
	}
	_, err = d.Resource(poolGVR).Namespace(pb.ns).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	return err
}

// waitPoolFull waits until the pool has all its idle pods ready and no pod of the namespace is
// starting or terminating, so that a phase starts on a quiet node.
// settled reports whether every pod runs and is ready, and none is being deleted. (A pod that
// runs but is not ready yet still changes: an idle phase would count its readiness as work.)
func settled(pods []corev1.Pod) bool {
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(&p) {
			return false
		}
	}
	return true
}

// waitNoPodsGoing waits until no pod of the namespace is being deleted.
func (pb *poolBench) waitNoPodsGoing(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := pb.kube.CoreV1().Pods(pb.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return false, nil
			}
		}
		return true, nil
	})
}

func (pb *poolBench) waitPoolFull(ctx context.Context) error {
	d, err := pb.dyn()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		obj, err := d.Resource(poolGVR).Namespace(pb.ns).Get(ctx, pb.pool, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pool := &controlv1alpha1.Pool{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, pool); err != nil {
			return err
		}
		if pool.Status.Available == int32(*poolSize) {
			pods, err := pb.kube.CoreV1().Pods(pb.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if settled(pods.Items) {
				time.Sleep(2 * time.Second) // the last kubelet work settles
				return nil
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("pool %s/%s not full after 10m", pb.ns, pb.pool)
}

// phases of createToExec, for the breakdown of the sequential run.
type phases struct{ create, running, exec time.Duration }

// createToExec creates a sandbox, watches it until Running, and runs `true` in it: the time a
// client waits from asking for a sandbox to having run something in it.
func (pb *poolBench) createToExec(ctx context.Context, sbx *sandboxv1alpha1.Sandbox) (time.Duration, phases, error) {
	c := pb.sandboxes.SandboxV1alpha1().Sandboxes(pb.ns)
	start := time.Now()
	created, err := c.Create(ctx, sbx, metav1.CreateOptions{})
	if err != nil {
		return 0, phases{}, err
	}
	tCreated := time.Now()
	if created.Status.Phase != sandboxv1alpha1.PhaseRunning {
		rv := created.ResourceVersion
		w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", sbx.Name).String(),
			ResourceVersion: rv})
		if err != nil {
			return 0, phases{}, err
		}
		timeout := time.After(5 * time.Minute)
	loop:
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					// Ended by the server (a proxy's timeout, a stream reset under load): as
					// any client that must not miss the event, watch again from the last
					// resourceVersion seen.
					w.Stop()
					if w, err = c.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", sbx.Name).String(),
						ResourceVersion: rv}); err != nil {
						return 0, phases{}, fmt.Errorf("watch of %s again: %w", sbx.Name, err)
					}
					continue
				}
				s, ok := ev.Object.(*sandboxv1alpha1.Sandbox)
				if ok {
					rv = s.ResourceVersion
				}
				if ok && ev.Type == watch.Modified && s.Status.Phase == sandboxv1alpha1.PhaseRunning {
					break loop
				}
			case <-timeout:
				w.Stop()
				return 0, phases{}, fmt.Errorf("sandbox %s not Running after 5m", sbx.Name)
			}
		}
		w.Stop()
	}
	tRunning := time.Now()
	if err := pb.execIn(ctx, sbx.Name, "true"); err != nil {
		return 0, phases{}, err
	}
	return time.Since(start), phases{create: tCreated.Sub(start), running: tRunning.Sub(tCreated), exec: time.Since(tRunning)}, nil
}

// direct is a direct-mode sandbox: a pod of its own, from the benchmark's image on the node.
func direct(name string) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sandboxv1alpha1.SandboxSpec{Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "sandbox", Image: *image, ImagePullPolicy: corev1.PullNever}},
		}}},
	}
}

func (pb *poolBench) pooled(name string) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: pb.pool}, NetworkPolicy: pb.policy},
	}
}

// warm creates *warmRuns pooled sandboxes, workers at a time, and keeps them.
func (pb *poolBench) warm(ctx context.Context, prefix string, workers int) ([]time.Duration, []phases, []string, error) {
	var (
		mu        sync.Mutex
		breakdown []phases
		out       []time.Duration
		names     []string
		next      atomic.Int64
		first     error
		wg        sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= *warmRuns {
					return
				}
				name := fmt.Sprintf("%s-%d", prefix, i)
				d, ph, err := pb.createToExec(ctx, pb.pooled(name))
				mu.Lock()
				breakdown = append(breakdown, ph)
				names = append(names, name)
				if err != nil && first == nil {
					first = err
				}
				out = append(out, d)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return out, breakdown, names, first
}

// cold is the baseline: direct-mode sandboxes, each its own new pod, one after another.
func (pb *poolBench) cold(ctx context.Context) ([]time.Duration, error) {
	var out []time.Duration
	for i := range *coldRuns {
		name := fmt.Sprintf("cold-%d", i)
		d, _, err := pb.createToExec(ctx, direct(name))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
		if err := pb.deleteAll(ctx, []string{name}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (pb *poolBench) deleteAll(ctx context.Context, names []string) error {
	c := pb.sandboxes.SandboxV1alpha1().Sandboxes(pb.ns)
	for _, n := range names {
		if err := c.Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		list, err := c.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		left := 0
		gone := map[string]bool{}
		for _, n := range names {
			gone[n] = true
		}
		for _, s := range list.Items {
			if gone[s.Name] {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("sandboxes not deleted after 5m")
}

// controllerMetrics reads reconcile counts per controller and API requests per verb.
func controllerMetrics(ctx context.Context) (map[string]float64, error) {
	if *metricsURL == "" {
		return nil, fmt.Errorf("no controller metrics endpoint: -controller-metrics is empty and the leader was not found")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out := map[string]float64{}
	err = scanSamples(resp.Body, func(name, labels string, v float64) {
		switch {
		case name == "controller_runtime_reconcile_total":
			out["reconcile "+label(labels, "controller")] += v
		case name == "rest_client_requests_total" && label(labels, "method") != "GET":
			out["writes"] += v
		case strings.HasPrefix(name, "kube_sandbox_claim_stage_seconds_"):
			// The end of each stage of the reconciles that allocated, since their start.
			out["stage "+label(labels, "stage")+" "+strings.TrimPrefix(name, "kube_sandbox_claim_stage_seconds_")] += v
		case strings.HasPrefix(name, "workqueue_queue_duration_seconds_") || strings.HasPrefix(name, "workqueue_work_duration_seconds_"):
			// How long a sandbox waited in the workqueue, and how long its reconciles took.
			if label(labels, "name") == "batchsandbox" {
				out[strings.TrimSuffix(strings.TrimPrefix(name, "workqueue_"), "_duration_seconds_"+suffix(name))+" "+suffix(name)] += v
			}
		}
	})
	return out, err
}

// suffix is what follows a histogram's name in a sample's: sum, count or bucket.
func suffix(name string) string { return name[strings.LastIndexByte(name, '_')+1:] }

// stageMeans tells, from two readings of controllerMetrics, the mean time a sandbox waited in
// the controller's workqueue, its reconciles' mean, and the mean end of each stage of the
// reconciles that allocated (since their start), in ms; "" when there was none.
func stageMeans(before, after map[string]float64) string {
	mean := func(key string) (float64, bool) {
		n := after[key+" count"] - before[key+" count"]
		if n <= 0 {
			return 0, false
		}
		return 1000 * (after[key+" sum"] - before[key+" sum"]) / n, true
	}
	var parts []string
	for _, k := range []struct{ key, what string }{
		{"queue", "in the workqueue"}, {"work", "a reconcile"},
		{"stage list", "listed"}, {"stage allocate", "patched"}, {"stage policy", "policy"}, {"stage claim", "claimed"}, {"stage status", "status written"},
	} {
		if m, ok := mean(k.key); ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", k.what, m))
		}
	}
	return strings.Join(parts, ", ")
}

func label(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// idle watches n running sandboxes for *idleSeconds: reconciles and API writes of the
// controller (from its metrics; the writes include its leader-election lease renewals), and
// changes to the namespace's sandboxes, pools and pods (from watches: every write to them).
func (pb *poolBench) idle(ctx context.Context, n int) error {
	before, err := controllerMetrics(ctx)
	if err != nil {
		return fmt.Errorf("controller metrics at %s: %w", *metricsURL, err)
	}
	var (
		changesMu sync.Mutex
		changes   = map[string]int{}
	)
	wctx, cancel := context.WithTimeout(ctx, time.Duration(*idleSeconds)*time.Second)
	defer cancel()
	d, err := pb.dyn()
	if err != nil {
		return err
	}
	watches := []func() (watch.Interface, error){
		func() (watch.Interface, error) {
			list, err := pb.kube.CoreV1().Pods(pb.ns).List(wctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return nil, err
			}
			return pb.kube.CoreV1().Pods(pb.ns).Watch(wctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		},
		func() (watch.Interface, error) {
			return d.Resource(controlv1alpha1.SchemeGroupVersion.WithResource("batchsandboxes")).Namespace(pb.ns).Watch(wctx, metav1.ListOptions{})
		},
		func() (watch.Interface, error) {
			return d.Resource(poolGVR).Namespace(pb.ns).Watch(wctx, metav1.ListOptions{})
		},
	}
	var wg sync.WaitGroup
	for i, start := range watches {
		kind := []string{"pods", "batchsandboxes", "pools"}[i]
		w, err := start()
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer w.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					// The dynamic client's watch opens with the objects that exist (ADDED);
					// only pods are watched with the typed client, from the list's version.
					if ev.Type != watch.Bookmark && (ev.Type != watch.Added || kind == "pods") {
						changesMu.Lock()
						changes[kind+" "+string(ev.Type)]++
						changesMu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	after, err := controllerMetrics(ctx)
	if err != nil {
		return err
	}
	secs := float64(*idleSeconds)
	fmt.Printf("\n%d idle pooled sandboxes (and %d idle pool pods) watched for %d s:\n\n", n, *poolSize, *idleSeconds)
	fmt.Println("| measurement | per second |")
	fmt.Println("|---|---|")
	for _, k := range []string{"reconcile batchsandbox", "reconcile pool"} {
		fmt.Printf("| %ss | %.3f |\n", k, (after[k]-before[k])/secs)
	}
	fmt.Printf("| API writes by the controller (leader-election lease renewals included) | %.3f |\n", (after["writes"]-before["writes"])/secs)
	total, detail := 0, []string{}
	for k, v := range changes {
		total += v
		detail = append(detail, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(detail)
	fmt.Printf("| changes to the namespace's pods, sandboxes and pools (%s) | %.3f |\n", strings.Join(detail, ", "), float64(total)/secs)
	return nil
}

// batch creates one pooled sandbox of *batchReplicas replicas and waits until all are ready.
func (pb *poolBench) batch(ctx context.Context) error {
	sbx := pb.pooled("batch")
	sbx.Spec.Replicas = ptr.To(int32(*batchReplicas))
	c := pb.sandboxes.SandboxV1alpha1().Sandboxes(pb.ns)
	cpuBefore := sampleCPU()
	start := time.Now()
	created, err := c.Create(ctx, sbx, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "batch").String(), ResourceVersion: created.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	timeout := time.After(5 * time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed")
			}
			if s, ok := ev.Object.(*sandboxv1alpha1.Sandbox); ok && s.Status.Ready == int32(*batchReplicas) {
				fmt.Printf("\n| pooled batch | replicas | create → all Ready |\n|---|---|---|\n| one Sandbox | %d | %s |\n", *batchReplicas, ms(time.Since(start)))
				printCPU(fmt.Sprintf("the %d-replica sandbox's create → all Ready", *batchReplicas), cpuBefore, sampleCPU())
				return nil
			}
		case <-timeout:
			return fmt.Errorf("batch not ready after 5m")
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
