package main

// The scale benchmark (make bench-scale, or go run ./test/bench -only scale): one control plane
// (a real etcd and kube-apiserver, as the integration tests run them), sandbox-controller and
// sandbox-apiserver each in a process of its own, so that their memory and CPU can be read, and
// pods on simulated nodes: pool pods with a real execd each, which the controller certifies
// and claims over the network, and direct-mode pods that only become Ready. It needs no
// cluster, only the binaries hack/build-cluster.sh builds.

import (
	"bufio"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/manager"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

var (
	scaleSandboxes      = flag.Int("scale-sandboxes", 10000, "scale: sandboxes at rest and listed (the allocation phase's pooled ones, and direct-mode ones)")
	scalePool           = flag.Int("scale-pool", 2000, "scale: idle pods of the warm pool")
	scaleRate           = flag.Int("scale-rate", 100, "scale: pooled creates per second of the allocation phase")
	scaleAllocations    = flag.Int("scale-allocations", 1000, "scale: pooled sandboxes created at -scale-rate")
	scaleMaxStarting    = flag.Int("scale-pool-max-starting", 50, "scale: the controller's --pool-max-starting (its default, 10, suits the kubelet of one real node; simulated nodes start a pod in milliseconds)")
	scaleStreamRate     = flag.Int("scale-stream-rate", 20, "scale: pooled creates per second of the stream phase, each followed by an exec (0: no stream phase)")
	scaleStreamFor      = flag.Duration("scale-stream-for", time.Minute, "scale: how long the stream phase creates")
	scaleWatchers       = flag.Int("scale-watchers", 100, "scale: watchers of the fan-out phase")
	scaleStorm          = flag.Int("scale-storm", 500, "scale: sandboxes created and deleted at 50/s against a pool of 200 (0: no storm phase)")
	scaleProfile        = flag.String("scale-profile", "", "scale: a directory to write CPU profiles of the controller and sandbox-apiserver to, one per phase (go tool pprof reads them)")
	scaleProfileSeconds = flag.Int("scale-profile-seconds", 30, "scale: how much of each phase, from its start, a profile covers")

	// How the benchmark runs a component in a process of its own (not for people).
	scaleComponent = flag.String("scale-component", "", "internal: run this component (controller or apiserver) against -scale-dir and -scale-url")
	scaleDir       = flag.String("scale-dir", "", "internal")
	scaleURL       = flag.String("scale-url", "", "internal")
	scalePorts     = flag.String("scale-ports", "", "internal: the controller's metrics and pprof ports")
)

const (
	scalePoolNS   = "scale-pool"
	scaleDirectNS = "scale-direct"
	scaleFanoutNS = "scale-fanout"
	scaleStormNS  = "scale-storm"
)

// runComponent runs in the child process: one component until SIGTERM.
func runComponent() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cp := framework.AttachControlPlane(*scaleDir, *scaleURL)
	switch *scaleComponent {
	case "controller":
		metricsPort, pprofPort, _ := strings.Cut(*scalePorts, ",")
		stopController, err := framework.StartController(ctx, cp, func(o *manager.Options) {
			o.MetricsAddr = "127.0.0.1:" + metricsPort
			o.PprofAddr = "127.0.0.1:" + pprofPort
			// As in a cluster: what leader election costs at rest is part of the figures.
			o.LeaderElect = true
			o.LeaderElectionNS = framework.SystemNamespace
			o.PoolMaxStarting = int32(*scaleMaxStarting)
		})
		if err != nil {
			return err
		}
		fmt.Println("ready")
		<-ctx.Done()
		stopController()
		return nil
	case "apiserver":
		c, err := client.New(cp.Config(framework.AdminToken), client.Options{Scheme: framework.Scheme})
		if err != nil {
			return err
		}
		if err := framework.StartSandboxAPIServer(ctx, cp, c); err != nil {
			return err
		}
		fmt.Println("ready")
		<-ctx.Done()
		return nil
	}
	return fmt.Errorf("unknown component %q", *scaleComponent)
}

// component is a child process running one of ours.
type component struct {
	name string
	cmd  *exec.Cmd
	// pprof is the base URL of its /debug/pprof/.
	pprof string
}

func startComponent(ctx context.Context, cp *framework.ControlPlane, name string, extra ...string) (*component, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append([]string{"-scale-component=" + name, "-scale-dir=" + cp.Dir, "-scale-url=" + cp.URL}, extra...)
	cmd := exec.Command(self, args...)
	logFile, err := os.Create(filepath.Join(cp.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
			}
		}
		ready <- fmt.Errorf("%s exited before it was ready; its log: %s", name, logFile.Name())
	}()
	select {
	case err := <-ready:
		if err != nil {
			return nil, err
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s not ready after 2m; its log: %s", name, logFile.Name())
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
	return &component{name: name, cmd: cmd}, nil
}

func (c *component) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// usage is what /proc says of a process: resident memory now and at its peak, and CPU time.
type usage struct {
	rss, peak int64 // bytes
	cpu       time.Duration
}

func (c *component) usage() (usage, error) {
	var u usage
	pid := c.cmd.Process.Pid
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			u.rss = kb << 10
		case "VmHWM:":
			u.peak = kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	u.cpu = time.Duration(utime+stime) * time.Second / 100 // USER_HZ
	return u, nil
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

type scaleBench struct {
	*bench
	c                     client.Client
	cp                    *framework.ControlPlane
	controller, apiserver *component
	pprofPort             string
	rows                  [][4]string
	// node is the node's CPU by process at the last usages(): the kube-apiserver's and
	// etcd's share of a phase, next to ours. (Our components are this program too, by
	// name: "bench" less theirs is the benchmark's own.)
	node cpuSample
}

func (s *scaleBench) row(what, ours, baseline, ratio string) {
	s.rows = append(s.rows, [4]string{what, ours, baseline, ratio})
	fmt.Fprintf(os.Stderr, "scale: %s: %s %s %s\n", what, ours, baseline, ratio)
}

func runScale(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "kube-sandbox-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(os.Stderr, "scale: control plane in %s\n", dir)
	cp, err := framework.StartControlPlane(ctx, dir)
	if err != nil {
		return fmt.Errorf("control plane (hack/build-cluster.sh kube-apiserver etcd builds it): %w", err)
	}
	defer cp.Stop()
	// The simulated nodes' execd servers log every certificate: into a file, not the table.
	klogFile, err := os.Create(filepath.Join(dir, "simulated-nodes.log"))
	if err != nil {
		return err
	}
	defer klogFile.Close()
	klog.LogToStderr(false)
	klog.SetOutput(klogFile)
	ctrllog.SetLogger(klog.NewKlogr())
	cfg := cp.Config(framework.AdminToken)
	cfg.QPS, cfg.Burst = 2000, 4000
	s := &scaleBench{bench: &bench{cfg: cfg}, cp: cp}
	if s.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if s.sandboxes, err = sandboxclient.NewForConfig(cfg); err != nil {
		return err
	}
	if s.c, err = client.New(cfg, client.Options{Scheme: framework.Scheme}); err != nil {
		return err
	}
	for _, step := range []func(context.Context, client.Client) error{
		framework.InstallCRDs, framework.CreateSystemNamespace,
		func(ctx context.Context, c client.Client) error {
			return framework.ApplyManifest(ctx, c, "artifacts/base/admission-pools.yaml")
		},
	} {
		if err := step(ctx, s.c); err != nil {
			return err
		}
	}
	metricsPort, err := framework.FreePort()
	if err != nil {
		return err
	}
	pprofPort, err := framework.FreePort()
	if err != nil {
		return err
	}
	*metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	// The controller first: it makes sandbox-apiserver's certificate.
	if s.controller, err = startComponent(ctx, cp, "controller", fmt.Sprintf("-scale-ports=%d,%d", metricsPort, pprofPort),
		fmt.Sprintf("-scale-pool-max-starting=%d", *scaleMaxStarting)); err != nil {
		return err
	}
	defer s.controller.stop()
	s.controller.pprof = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", pprofPort)
	if s.apiserver, err = startComponent(ctx, cp, "apiserver"); err != nil {
		return err
	}
	defer s.apiserver.stop()
	for _, ns := range []string{scalePoolNS, scaleDirectNS, scaleFanoutNS, scaleStormNS} {
		if err := s.namespace(ctx, ns); err != nil {
			return err
		}
	}
	nodeCtx, stopNodes := context.WithCancel(ctx)
	defer stopNodes()
	poolNode, err := framework.StartSimulatedNode(nodeCtx, cp, scalePoolNS, true)
	if err != nil {
		return err
	}
	// A direct-mode replica is ready once the controller has certified its execd.
	if _, err := framework.StartSimulatedNode(nodeCtx, cp, scaleDirectNS, true); err != nil {
		return err
	}
	if _, err := framework.StartSimulatedNode(nodeCtx, cp, scaleFanoutNS, false); err != nil {
		return err
	}
	stormNode, err := framework.StartSimulatedNode(nodeCtx, cp, scaleStormNS, true)
	if err != nil {
		return err
	}

	fmt.Printf("# kube-sandbox at scale\n\nOne etcd and kube-apiserver; sandbox-controller and sandbox-apiserver in processes of their own; pods on simulated nodes (pool pods with a real execd each). %d sandboxes, a pool of %d idle pods. Baselines are the kube-apiserver serving the BatchSandboxes the sandboxes are stored in, in the same run.\n\n", *scaleSandboxes, *scalePool)
	phases := []struct {
		name string
		run  func(context.Context) error
	}{
		{"fill", func(ctx context.Context) error { return s.fill(ctx, poolNode) }},
		{"allocate", s.allocate},
		{"stream", s.stream},
		{"bulk", s.bulk},
		{"rest", s.rest},
		{"list", s.list},
		{"fanout", s.fanout},
		{"storm", func(ctx context.Context) error { return s.storm(ctx, stormNode) }},
	}
	for _, ph := range phases {
		if ph.name == "storm" && *scaleStorm == 0 {
			continue
		}
		stopProfiles := s.profile(ctx, ph.name)
		err := ph.run(ctx)
		stopProfiles()
		if err != nil {
			s.print()
			return fmt.Errorf("%s: %w", ph.name, err)
		}
	}
	s.print()
	return nil
}

// namespace creates ns with the default ServiceAccount that pods need (no
// kube-controller-manager runs here to make it).
func (s *scaleBench) namespace(ctx context.Context, ns string) error {
	if err := s.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	return s.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}})
}

func (s *scaleBench) print() {
	fmt.Println("| measurement | kube-sandbox | baseline | ratio (ours/baseline) |")
	fmt.Println("|---|---|---|---|")
	for _, r := range s.rows {
		fmt.Printf("| %s | %s | %s | %s |\n", r[0], r[1], r[2], r[3])
	}
}

// profile records CPU profiles of both components over the phase's first -scale-profile-seconds,
// when -scale-profile asks; stop waits for them.
func (s *scaleBench) profile(ctx context.Context, phase string) (stop func()) {
	if *scaleProfile == "" {
		return func() {}
	}
	if err := os.MkdirAll(*scaleProfile, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "scale: profiles: %v\n", err)
		return func() {}
	}
	apiserverPprof, err := s.apiserverPprof(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "scale: profiles: %v\n", err)
		return func() {}
	}
	var wg sync.WaitGroup
	for name, base := range map[string]string{"controller": s.controller.pprof, "apiserver": apiserverPprof, "kube-apiserver": s.cp.URL + "/debug/pprof"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := filepath.Join(*scaleProfile, phase+"-"+name+".pprof")
			if err := s.cpuProfile(ctx, base, path); err != nil {
				fmt.Fprintf(os.Stderr, "scale: profile of %s: %v\n", name, err)
			}
		}()
	}
	return wg.Wait
}

// apiserverPprof is sandbox-apiserver's /debug/pprof, on its own port (the aggregator proxies
// only its API), where the admin's token is authenticated and authorized by delegation.
func (s *scaleBench) apiserverPprof(ctx context.Context) (string, error) {
	svc, err := s.kube.CoreV1().Services(framework.SystemNamespace).Get(ctx, "sandbox-apiserver", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("https://127.0.0.1:%d/debug/pprof", svc.Spec.Ports[0].Port), nil
}

// cpuProfile writes a CPU profile of -scale-profile-seconds to path.
func (s *scaleBench) cpuProfile(ctx context.Context, base, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/profile?seconds=%d", base, *scaleProfileSeconds), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+framework.AdminToken)
	// Loopback, to certificates of CAs this process does not load (the kube-sandbox CA's,
	// the control plane's).
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	fmt.Fprintf(os.Stderr, "scale: wrote %s\n", path)
	return f.Close()
}

// waitBatchSandboxes waits until want(list) holds for the BatchSandboxes of ns.
func (s *scaleBench) waitBatchSandboxes(ctx context.Context, ns string, timeout time.Duration, want func([]controlv1alpha1.BatchSandbox) bool) error {
	// Every 2 s: a list of 10,000 is itself load on the machine the figures come from.
	return wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var list controlv1alpha1.BatchSandboxList
		if err := s.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		return want(list.Items), nil
	})
}

func (s *scaleBench) pool(ctx context.Context, ns, name string, idle, max int32) error {
	return s.c.Create(ctx, &controlv1alpha1.Pool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: controlv1alpha1.PoolSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "sandbox", Image: "python:3.11"}},
			}},
			CapacitySpec: controlv1alpha1.CapacitySpec{BufferMin: idle, BufferMax: idle, PoolMax: max},
		},
	})
}

func (s *scaleBench) waitPool(ctx context.Context, ns, name string, available int32, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p := &controlv1alpha1.Pool{}
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return false, nil
		}
		return p.Status.Available == available, nil
	})
}

// fill: a pool of -scale-pool idle pods, from nothing.
func (s *scaleBench) fill(ctx context.Context, node *framework.SimulatedNode) error {
	before, err := s.usages()
	if err != nil {
		return err
	}
	start := time.Now()
	n := int32(*scalePool)
	if err := s.pool(ctx, scalePoolNS, "big", n, n+int32(*scaleAllocations)); err != nil {
		return err
	}
	if err := s.waitPool(ctx, scalePoolNS, "big", n, 15*time.Minute); err != nil {
		return fmt.Errorf("pool of %d: %w", n, err)
	}
	took := time.Since(start)
	s.row(fmt.Sprintf("pool fill: %d idle pods, each certified and claimable (--pool-max-starting %d)", n, *scaleMaxStarting),
		fmt.Sprintf("%.0f pods/s (%.1f s)", float64(n)/took.Seconds(), took.Seconds()), "", "")
	s.row("pool fill: pods created / deleted", fmt.Sprintf("%d / %d", node.Created.Load(), node.Deleted.Load()), fmt.Sprintf("%d / 0", n), "")
	return s.cpuRow(before, took, "pool fill")
}

// cpuRow reports the components' CPU over a phase, in cores.
func (s *scaleBench) cpuRow(before map[string]usage, took time.Duration, phase string) error {
	prev := s.node
	after, err := s.usages()
	if err != nil {
		return err
	}
	ours := 0.0
	for _, name := range []string{"controller", "apiserver"} {
		c := (after[name].cpu - before[name].cpu).Seconds() / took.Seconds()
		ours += c
		s.row(fmt.Sprintf("%s: sandbox-%s CPU", phase, name), fmt.Sprintf("%.2f cores", c), "", "")
	}
	var node cpuTotals
	node.add(prev, s.node)
	if node.secs > 0 {
		busy := float64(s.node.busy-prev.busy) / clockTicks / node.secs
		s.row(fmt.Sprintf("%s: node CPU busy, and the kube-apiserver's, etcd's and the benchmark's own (simulated nodes, their execds, the clients)", phase),
			fmt.Sprintf("%.2f of %d cores; %.2f, %.2f, %.2f", busy, cores(), node.byComm["kube-apiserver"]/node.secs, node.byComm["etcd"]/node.secs, node.byComm["bench"]/node.secs-ours), "", "")
	}
	return nil
}

func (s *scaleBench) usages() (map[string]usage, error) {
	s.node = sampleCPU()
	out := map[string]usage{}
	for _, c := range []*component{s.controller, s.apiserver} {
		u, err := c.usage()
		if err != nil {
			return nil, err
		}
		out[c.name] = u
	}
	return out, nil
}

// readyTimes watches the sandboxes of ns and records when each first is Ready. Its watch is
// opened again from the last resourceVersion it saw whenever the server ends it, as a client
// that must not miss an event does; reopened counts those ends.
type readyTimes struct {
	mu       sync.Mutex
	ready    map[string]time.Time
	pods     map[string]string
	reopened int
}

func (s *scaleBench) watchReady(ctx context.Context, ns string) (*readyTimes, error) {
	api := s.sandboxes.SandboxV1alpha1().Sandboxes(ns)
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	rt := &readyTimes{ready: map[string]time.Time{}, pods: map[string]string{}}
	rv := list.ResourceVersion
	w, err := api.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					err := apierrors.FromObject(ev.Object)
					fmt.Fprintf(os.Stderr, "scale: watch of %s: %v\n", ns, err)
					if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
						// Too far behind for the server's history: what is Running now
						// counts as Ready now, and the watch goes on from the list.
						if l, err := api.List(ctx, metav1.ListOptions{}); err == nil {
							for i := range l.Items {
								rt.saw(&l.Items[i])
							}
							rv = l.ResourceVersion
						}
					}
					continue
				}
				if sbx, ok := ev.Object.(*sandboxv1alpha1.Sandbox); ok {
					rv = sbx.ResourceVersion
					rt.saw(sbx)
				}
			}
			w.Stop()
			if ctx.Err() != nil {
				return
			}
			rt.mu.Lock()
			rt.reopened++
			rt.mu.Unlock()
			for {
				if w, err = api.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}); err == nil || ctx.Err() != nil {
					break
				}
				fmt.Fprintf(os.Stderr, "scale: watch of %s again from %s: %v\n", ns, rv, err)
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				return
			}
		}
	}()
	return rt, nil
}

// saw records sbx's first Running.
func (rt *readyTimes) saw(sbx *sandboxv1alpha1.Sandbox) {
	if sbx.Status.Phase != sandboxv1alpha1.PhaseRunning {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, seen := rt.ready[sbx.Name]; !seen {
		rt.ready[sbx.Name] = time.Now()
		if len(sbx.Status.Pods) > 0 {
			rt.pods[sbx.Name] = sbx.Status.Pods[0].Name
		}
	}
}

func (rt *readyTimes) get(name string) (time.Time, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	t, ok := rt.ready[name]
	return t, ok
}

func pooled(name string) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "big"}},
	}
}

// paced creates n sandboxes at rate per second, each in a goroutine of its own, and returns
// when every create has returned, with the times they were sent.
func paced(ctx context.Context, n, rate int, create func(ctx context.Context, i int) error) (sent []time.Time, errs int) {
	sent = make([]time.Time, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < n; i++ {
		<-tick.C
		sent[i] = time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := create(ctx, i); err != nil {
				mu.Lock()
				errs++
				if errs <= 3 {
					fmt.Fprintf(os.Stderr, "scale: create %d: %v\n", i, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return sent, errs
}

// allocate: -scale-allocations pooled sandboxes at -scale-rate creates/s, create → Ready.
func (s *scaleBench) allocate(ctx context.Context) error {
	// The watch ends with this phase, not when the control plane stops under it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rt, err := s.watchReady(ctx, scalePoolNS)
	if err != nil {
		return err
	}
	n, rate := *scaleAllocations, *scaleRate
	before, err := s.usages()
	if err != nil {
		return err
	}
	metricsBefore, metricsErr := controllerMetrics(ctx)
	start := time.Now()
	api := s.sandboxes.SandboxV1alpha1().Sandboxes(scalePoolNS)
	sent, errs := paced(ctx, n, rate, func(ctx context.Context, i int) error {
		_, err := api.Create(ctx, pooled(fmt.Sprintf("alloc-%d", i)), metav1.CreateOptions{})
		return err
	})
	if errs > 0 {
		return fmt.Errorf("%d of %d creates failed", errs, n)
	}
	var lat []time.Duration
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		lat = lat[:0]
		for i := range n {
			t, ok := rt.get(fmt.Sprintf("alloc-%d", i))
			if !ok {
				return false, nil
			}
			lat = append(lat, t.Sub(sent[i]))
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("not all %d sandboxes Ready: %w", n, err)
	}
	took := time.Since(start)
	// No pod went to two sandboxes.
	owners := map[string]string{}
	for name, pod := range rt.pods {
		if other, dup := owners[pod]; dup {
			return fmt.Errorf("pod %s allocated to both %s and %s", pod, other, name)
		}
		owners[pod] = name
	}
	s.row(fmt.Sprintf("allocation at %d creates/s (%d pooled sandboxes): create → Ready p50 / p99 / max", rate, n),
		fmt.Sprintf("%s / %s / %s", ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), ms(quantile(lat, 1))), "", "")
	s.row("allocation: pods given to two sandboxes", fmt.Sprintf("0 of %d", len(owners)), "", "")
	if metricsAfter, err := controllerMetrics(ctx); err == nil && metricsErr == nil {
		s.row("allocation: where a claim's time went in the controller, means in ms (stages: their end since the reconcile's start)", stageMeans(metricsBefore, metricsAfter), "", "")
	}
	rt.mu.Lock()
	reopened := rt.reopened
	rt.mu.Unlock()
	s.row("allocation: times the server ended the client's watch of the sandboxes (it watched again from its last resourceVersion)", fmt.Sprintf("%d", reopened), "", "")
	return s.cpuRow(before, took, "allocation")
}

// stream: pooled creates at -scale-stream-rate for -scale-stream-for, each until its first
// successful exec (then deleted), against 20 such sandboxes one after another in the same run.
func (s *scaleBench) stream(ctx context.Context) error {
	rate := *scaleStreamRate
	if rate == 0 {
		return nil
	}
	pb := &poolBench{bench: s.bench, ns: scalePoolNS, pool: "big"}
	api := s.sandboxes.SandboxV1alpha1().Sandboxes(scalePoolNS)
	one := func(ctx context.Context, name string) (time.Duration, error) {
		d, _, err := pb.createToExec(ctx, pb.pooled(name))
		if err == nil {
			err = api.Delete(ctx, name, metav1.DeleteOptions{})
		}
		return d, err
	}
	var seq []time.Duration
	for i := range 20 {
		d, err := one(ctx, fmt.Sprintf("seq-%d", i))
		if err != nil {
			return err
		}
		seq = append(seq, d)
	}
	n := int(scaleStreamFor.Seconds()) * rate
	lat := make([]time.Duration, n)
	before, err := s.usages()
	if err != nil {
		return err
	}
	start := time.Now()
	if _, errs := paced(ctx, n, rate, func(ctx context.Context, i int) error {
		d, err := one(ctx, fmt.Sprintf("stream-%d", i))
		lat[i] = d
		return err
	}); errs > 0 {
		return fmt.Errorf("%d of %d sandboxes of the stream failed", errs, n)
	}
	took := time.Since(start)
	s.row(fmt.Sprintf("stream: %d pooled creates/s for %v, create → first exec p50 / p99 / max (baseline: 20 one after another, p50 / p99 / max)", rate, *scaleStreamFor),
		fmt.Sprintf("%s / %s / %s", ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), ms(quantile(lat, 1))),
		fmt.Sprintf("%s / %s / %s", ms(quantile(seq, 0.5)), ms(quantile(seq, 0.99)), ms(quantile(seq, 1))),
		fmt.Sprintf("%.2f / %.2f / %.2f", ratio(quantile(lat, 0.5), quantile(seq, 0.5)), ratio(quantile(lat, 0.99), quantile(seq, 0.99)), ratio(quantile(lat, 1), quantile(seq, 1))))
	return s.cpuRow(before, took, "stream")
}

// bulk: direct-mode sandboxes until there are -scale-sandboxes in all, as fast as they go.
func (s *scaleBench) bulk(ctx context.Context) error {
	n := *scaleSandboxes - *scaleAllocations
	if n <= 0 {
		return nil
	}
	before, err := s.usages()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := createDirect(ctx, s.sandboxes, scaleDirectNS, "bulk", 0, n, 50); err != nil {
		return err
	}
	if err := s.waitBatchSandboxes(ctx, scaleDirectNS, 15*time.Minute, func(items []controlv1alpha1.BatchSandbox) bool {
		ready := 0
		for _, bs := range items {
			if bs.Status.Ready == 1 {
				ready++
			}
		}
		return ready == n
	}); err != nil {
		return fmt.Errorf("%d direct-mode sandboxes not all Ready: %w", n, err)
	}
	took := time.Since(start)
	s.row(fmt.Sprintf("bulk: %d direct-mode sandboxes, 50 creates in flight, until all Ready", n),
		fmt.Sprintf("%.0f sandboxes/s (%.1f s)", float64(n)/took.Seconds(), took.Seconds()), "", "")
	return s.cpuRow(before, took, "bulk")
}

func directSandbox(name string) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sandboxv1alpha1.SandboxSpec{
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "sandbox", Image: "python:3.11"}},
			}},
		},
	}
}

// createDirect creates sandboxes prefix-from … prefix-(from+n-1) with inFlight creates at once.
func createDirect(ctx context.Context, api sandboxclient.Interface, ns, prefix string, from, n, inFlight int) error {
	next := make(chan int)
	errCh := make(chan error, inFlight)
	var wg sync.WaitGroup
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := api.SandboxV1alpha1().Sandboxes(ns).Create(ctx, directSandbox(fmt.Sprintf("%s-%d", prefix, i)), metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					select {
					case errCh <- err:
					default:
					}
					return
				}
			}
		}()
	}
	go func() {
		defer close(next)
		for i := from; i < from+n; i++ {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			case err := <-errCh:
				errCh <- err
				return
			}
		}
	}()
	wg.Wait()
	select {
	case err := <-errCh:
		return err
	default:
		return nil
	}
}

// rest: with every sandbox in place, what the system does on its own: memory, CPU, reconciles
// and writes.
func (s *scaleBench) rest(ctx context.Context) error {
	// Let what the bulk phase set going end (refills, the last status writes).
	if err := s.waitPool(ctx, scalePoolNS, "big", int32(*scalePool), 10*time.Minute); err != nil {
		return fmt.Errorf("pool not refilled: %w", err)
	}
	time.Sleep(10 * time.Second)
	const window = 60 * time.Second
	before, err := s.usages()
	if err != nil {
		return err
	}
	ctrlBefore, err := controllerMetrics(ctx)
	if err != nil {
		return err
	}
	apiBefore, err := s.apiRequests(ctx)
	if err != nil {
		return err
	}
	time.Sleep(window)
	after, err := s.usages()
	if err != nil {
		return err
	}
	ctrlAfter, err := controllerMetrics(ctx)
	if err != nil {
		return err
	}
	apiAfter, err := s.apiRequests(ctx)
	if err != nil {
		return err
	}
	for _, name := range []string{"controller", "apiserver"} {
		s.row(fmt.Sprintf("at rest: sandbox-%s RSS now / peak of the run (goal ≤ 300 MiB)", name),
			fmt.Sprintf("%s / %s", mib(after[name].rss), mib(after[name].peak)), "", "")
		s.row(fmt.Sprintf("at rest: sandbox-%s CPU", name),
			fmt.Sprintf("%.3f cores", (after[name].cpu-before[name].cpu).Seconds()/window.Seconds()), "", "")
	}
	var reconciles float64
	for k, v := range ctrlAfter {
		if strings.HasPrefix(k, "reconcile ") {
			reconciles += v - ctrlBefore[k]
		}
	}
	s.row(fmt.Sprintf("at rest over %v: reconciles/s", window), fmt.Sprintf("%.3f", reconciles/window.Seconds()), "", "")
	var writes, leaseWrites float64
	var others []string
	for k, v := range apiAfter {
		d := v - apiBefore[k]
		if d == 0 || !isWrite(k) || notStored(k) {
			continue
		}
		if strings.HasSuffix(k, " leases") {
			leaseWrites += d
			continue
		}
		writes += d
		others = append(others, fmt.Sprintf("%s %.0f", k, d))
	}
	sort.Strings(others)
	what := fmt.Sprintf("%.3f", writes/window.Seconds())
	if len(others) > 0 {
		what += " (" + strings.Join(others, ", ") + ")"
	}
	s.row(fmt.Sprintf("at rest over %v: API writes/s beyond leader election (leases: %.2f/s, all clients)", window, leaseWrites/window.Seconds()), what, "", "")
	return nil
}

// list: every sandbox, whole and in pages of 500, against the same list of BatchSandboxes
// from the kube-apiserver.
func (s *scaleBench) list(ctx context.Context) error {
	const runs = 20
	timeIt := func(f func() (int, error)) ([]time.Duration, int, error) {
		var d []time.Duration
		items := 0
		for range runs {
			start := time.Now()
			n, err := f()
			if err != nil {
				return nil, 0, err
			}
			d = append(d, time.Since(start))
			items = n
		}
		return d, items, nil
	}
	sbxPages := func(limit int64) func() (int, error) {
		return func() (int, error) {
			n := 0
			opts := metav1.ListOptions{Limit: limit}
			for {
				l, err := s.sandboxes.SandboxV1alpha1().Sandboxes("").List(ctx, opts)
				if err != nil {
					return 0, err
				}
				n += len(l.Items)
				if l.Continue == "" {
					return n, nil
				}
				opts.Continue = l.Continue
			}
		}
	}
	bsPages := func(limit int64) func() (int, error) {
		return func() (int, error) {
			n := 0
			opts := []client.ListOption{}
			if limit > 0 {
				opts = append(opts, client.Limit(limit))
			}
			for {
				var l controlv1alpha1.BatchSandboxList
				if err := s.c.List(ctx, &l, opts...); err != nil {
					return 0, err
				}
				n += len(l.Items)
				if l.Continue == "" {
					return n, nil
				}
				opts = []client.ListOption{client.Limit(limit), client.Continue(l.Continue)}
			}
		}
	}
	for _, c := range []struct {
		what  string
		limit int64
	}{{"whole", 0}, {"in pages of 500 (all pages)", 500}} {
		ours, n, err := timeIt(sbxPages(c.limit))
		if err != nil {
			return err
		}
		theirs, m, err := timeIt(bsPages(c.limit))
		if err != nil {
			return err
		}
		s.row(fmt.Sprintf("list %d sandboxes %s, p50 / p99 of %d (baseline: %d BatchSandboxes)", n, c.what, runs, m),
			fmt.Sprintf("%s / %s", ms(quantile(ours, 0.5)), ms(quantile(ours, 0.99))),
			fmt.Sprintf("%s / %s", ms(quantile(theirs, 0.5)), ms(quantile(theirs, 0.99))),
			fmt.Sprintf("%.2f / %.2f", ratio(quantile(ours, 0.5), quantile(theirs, 0.5)), ratio(quantile(ours, 0.99), quantile(theirs, 0.99))))
	}
	return nil
}

// notStored tells the creates that write nothing to etcd: reviews, which authentication and
// authorization delegation make (the profiles' requests to sandbox-apiserver, for one), and
// token requests.
func notStored(key string) bool {
	_, res, _ := strings.Cut(key, " ")
	return strings.HasSuffix(res, "reviews") || res == "serviceaccounts/token"
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// fanout: -scale-watchers watches of one namespace's sandboxes; 20 sandboxes created there one
// after another; from each create's start until each watcher has its event. The baseline is
// as many watches of the BatchSandboxes.
func (s *scaleBench) fanout(ctx context.Context) error {
	measure := func(open func(ctx context.Context) (watch.Interface, error), name func(watch.Event) string, create func(ctx context.Context, i int) error) ([]time.Duration, error) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		type seen struct {
			name string
			at   time.Time
		}
		events := make(chan seen, 1000)
		for range *scaleWatchers {
			w, err := open(wctx)
			if err != nil {
				return nil, err
			}
			go func() {
				defer w.Stop()
				for ev := range w.ResultChan() {
					if ev.Type == watch.Added {
						select {
						case events <- seen{name(ev), time.Now()}:
						case <-wctx.Done():
							return
						}
					}
				}
			}()
		}
		time.Sleep(2 * time.Second) // every watch open
		var lat []time.Duration
		for i := range 20 {
			start := time.Now()
			if err := create(ctx, i); err != nil {
				return nil, err
			}
			want := fmt.Sprintf("fanout-%d", i)
			deadline := time.After(time.Minute)
			for got := 0; got < *scaleWatchers; {
				select {
				case ev := <-events:
					if ev.name == want {
						lat = append(lat, ev.at.Sub(start))
						got++
					}
				case <-deadline:
					return nil, fmt.Errorf("%s reached %d of %d watchers", want, got, *scaleWatchers)
				}
			}
		}
		return lat, nil
	}
	ours, err := measure(func(ctx context.Context) (watch.Interface, error) {
		return s.sandboxes.SandboxV1alpha1().Sandboxes(scaleFanoutNS).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	}, func(ev watch.Event) string {
		if o, ok := ev.Object.(*sandboxv1alpha1.Sandbox); ok {
			return o.Name
		}
		return ""
	}, func(ctx context.Context, i int) error {
		_, err := s.sandboxes.SandboxV1alpha1().Sandboxes(scaleFanoutNS).Create(ctx, directSandbox(fmt.Sprintf("fanout-%d", i)), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	// The baseline: BatchSandboxes in a namespace of their own, written straight.
	const baseNS = "scale-fanout-baseline"
	if err := s.namespace(ctx, baseNS); err != nil {
		return err
	}
	wc, err := client.NewWithWatch(s.cfg, client.Options{Scheme: framework.Scheme})
	if err != nil {
		return err
	}
	theirs, err := measure(func(ctx context.Context) (watch.Interface, error) {
		return wc.Watch(ctx, &controlv1alpha1.BatchSandboxList{}, client.InNamespace(baseNS))
	}, func(ev watch.Event) string {
		if o, ok := ev.Object.(*controlv1alpha1.BatchSandbox); ok {
			return o.Name
		}
		return ""
	}, func(ctx context.Context, i int) error {
		// Not reconciled: the namespace has no node, so its pods stay Pending; the write is
		// what counts.
		return s.c.Create(ctx, &controlv1alpha1.BatchSandbox{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fanout-%d", i), Namespace: baseNS},
			Spec: controlv1alpha1.BatchSandboxSpec{
				Replicas: ptrInt32(1),
				Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "sandbox", Image: "python:3.11"}},
				}},
			},
		})
	})
	if err != nil {
		return err
	}
	s.row(fmt.Sprintf("watch fan-out: 20 creates to %d watchers, create start → event p50 / p99 / max", *scaleWatchers),
		fmt.Sprintf("%s / %s / %s", ms(quantile(ours, 0.5)), ms(quantile(ours, 0.99)), ms(quantile(ours, 1))),
		fmt.Sprintf("%s / %s / %s", ms(quantile(theirs, 0.5)), ms(quantile(theirs, 0.99)), ms(quantile(theirs, 1))),
		fmt.Sprintf("%.2f / %.2f / %.2f", ratio(quantile(ours, 0.5), quantile(theirs, 0.5)), ratio(quantile(ours, 0.99), quantile(theirs, 0.99)), ratio(quantile(ours, 1), quantile(theirs, 1))))
	return nil
}

func ptrInt32(i int32) *int32 { return &i }

// storm: -scale-storm pooled sandboxes created at 50/s against a pool of 200, each deleted a
// second after it was created. The pool must only replace what was given away (no
// create/delete storm), no pod may go to two sandboxes, and nothing may be left afterwards.
func (s *scaleBench) storm(ctx context.Context, node *framework.SimulatedNode) error {
	const idle, rate = 200, 50
	n := *scaleStorm
	var secretsBefore corev1.SecretList
	if err := s.c.List(ctx, &secretsBefore, client.InNamespace(scaleStormNS)); err != nil {
		return err
	}
	if err := s.pool(ctx, scaleStormNS, "big", idle, int32(idle+n)); err != nil {
		return err
	}
	if err := s.waitPool(ctx, scaleStormNS, "big", idle, 5*time.Minute); err != nil {
		return err
	}
	created0, deleted0 := node.Created.Load(), node.Deleted.Load()
	// Every sandbox each pod was ever labelled with.
	owners := map[string]map[string]bool{}
	var mu sync.Mutex
	w, err := s.kube.CoreV1().Pods(scaleStormNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if owner := pod.Labels[controlv1alpha1.LabelBatchSandbox]; owner != "" {
				mu.Lock()
				if owners[pod.Name] == nil {
					owners[pod.Name] = map[string]bool{}
				}
				owners[pod.Name][owner] = true
				mu.Unlock()
			}
		}
	}()
	api := s.sandboxes.SandboxV1alpha1().Sandboxes(scaleStormNS)
	start := time.Now()
	_, errs := paced(ctx, n, rate, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("storm-%d", i)
		if _, err := api.Create(ctx, pooled(name), metav1.CreateOptions{}); err != nil {
			return err
		}
		time.Sleep(time.Second)
		return api.Delete(ctx, name, metav1.DeleteOptions{})
	})
	if errs > 0 {
		return fmt.Errorf("%d of %d creates or deletes failed", errs, n)
	}
	if err := s.waitBatchSandboxes(ctx, scaleStormNS, 5*time.Minute, func(items []controlv1alpha1.BatchSandbox) bool { return len(items) == 0 }); err != nil {
		return fmt.Errorf("BatchSandboxes left: %w", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := &controlv1alpha1.Pool{}
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: scaleStormNS, Name: "big"}, p); err != nil {
			return false, nil
		}
		return p.Status.Available == idle && p.Status.Total == idle, nil
	}); err != nil {
		return fmt.Errorf("pool not back to %d idle pods: %w", idle, err)
	}
	took := time.Since(start)
	time.Sleep(5 * time.Second) // anything a storm would still do, it does now
	mu.Lock()
	allocated, twice := len(owners), 0
	for _, o := range owners {
		if len(o) > 1 {
			twice++
		}
	}
	mu.Unlock()
	created, deleted := node.Created.Load()-created0, node.Deleted.Load()-deleted0
	var pods corev1.PodList
	var secrets corev1.SecretList
	if err := s.c.List(ctx, &pods, client.InNamespace(scaleStormNS)); err != nil {
		return err
	}
	if err := s.c.List(ctx, &secrets, client.InNamespace(scaleStormNS)); err != nil {
		return err
	}
	leakedPods := 0
	for _, p := range pods.Items {
		if p.Labels[controlv1alpha1.LabelBatchSandbox] != "" || p.DeletionTimestamp != nil {
			leakedPods++
		}
	}
	s.row(fmt.Sprintf("storm: %d pooled creates and deletes at %d/s against a pool of %d, until the pool is whole again", n, rate, idle),
		fmt.Sprintf("%.1f s", took.Seconds()), "", "")
	// A sandbox deleted before it got a pod may have made the pool create one for it (it
	// waited), which the pool deletes as surplus afterwards: at most one each. A storm creates
	// and deletes beyond that.
	unserved := int64(n - allocated)
	s.row("storm: pods allocated (sandboxes deleted before they got one) / created / deleted by the pool (no storm: allocated ≤ created ≤ allocated + unserved, deleted = created)",
		fmt.Sprintf("%d (%d) / %d / %d", allocated, unserved, created, deleted), fmt.Sprintf("%d (%d) / ≤ %d / %d", allocated, unserved, int64(allocated)+unserved, created), "")
	s.row("storm: pods given to two sandboxes; left over: pods of a sandbox, pods in all, Secrets",
		fmt.Sprintf("%d; %d, %d, %d", twice, leakedPods, len(pods.Items), len(secrets.Items)),
		fmt.Sprintf("0; 0, %d, %d", idle, len(secretsBefore.Items)), "")
	if twice > 0 || leakedPods > 0 || len(pods.Items) != idle || len(secrets.Items) != len(secretsBefore.Items) ||
		created < int64(allocated) || created > int64(allocated)+unserved || deleted != created {
		return fmt.Errorf("the storm left the pool unsteady or leaked: see the rows above")
	}
	return nil
}
