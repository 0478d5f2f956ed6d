// Command bench measures kube-sandbox against Kubernetes' own paths on the same pod, in one
// run, and prints a markdown table of figures and ratios. hack/bench.sh (make bench) runs it
// on the local cluster. Nothing here asserts a time: the figures are for people to read.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
)

var (
	image     = flag.String("image", "kube-sandbox.local/sandbox-python:3.11", "sandbox image (needs sh, head, cat and tar)")
	namespace = flag.String("namespace", "default", "namespace of the benchmark sandbox")
	runs      = flag.Int("runs", 200, "exec round trips per path")
	streamMB  = flag.Int("stream-mb", 1024, "MiB streamed through exec per path")
	fileMB    = flag.Int("file-mb", 200, "MiB uploaded and downloaded per path")
	only      = flag.String("only", "", "run one part: exec, processes, clients, egress, gvisor, stats, pools, sequential (the pools' one-at-a-time phase and its API cost), burst (N at once, with the timeline), batch (a 100-replica pooled sandbox), tasks, pause, or scale (not part of all: its own control plane and simulated nodes, no cluster; make bench-scale) (default: all)")
	gvisor    = flag.String("gvisor-runtime-class", "gvisor", "RuntimeClass of the gVisor rows (each the same in gVisor and in runc); empty, or a class the cluster does not have: skip them")
)

func main() {
	flag.Parse()
	if *scaleComponent != "" {
		if err := runComponent(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", *scaleComponent, err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	run := run
	if *only == "scale" {
		run = runScale
	}
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	cfg       *rest.Config
	kube      kubernetes.Interface
	sandboxes sandboxclient.Interface
	name, pod string
}

func run(ctx context.Context) error {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	b := &bench{cfg: cfg, name: fmt.Sprintf("bench-%d", time.Now().Unix())}
	if b.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if b.sandboxes, err = sandboxclient.NewForConfig(cfg); err != nil {
		return err
	}
	if *metricsURL == "" {
		if u, err := b.leaderMetricsURL(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "bench: the controller's metrics: %v\n", err)
		} else {
			*metricsURL = u
		}
	}
	if *only == "pools" || *only == "sequential" || *only == "tasks" || *only == "pause" || *only == "burst" || *only == "batch" {
		return b.pools(ctx)
	}
	if *only == "egress" {
		return b.egress(ctx)
	}
	if *only == "gvisor" {
		return b.gVisorRows(ctx)
	}
	if *only == "clients" {
		return b.clients(ctx)
	}
	if *only == "stats" {
		return b.stats(ctx)
	}
	if err := b.createSandbox(ctx, ""); err != nil {
		return err
	}
	defer func() {
		_ = b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Delete(context.Background(), b.name, metav1.DeleteOptions{})
	}()

	fmt.Printf("# kube-sandbox benchmark\n\nOne sandbox (%s, pod %s); each row measures both paths on that same pod in this run.\n", *image, b.pod)
	if *only != "processes" {
		fmt.Println("\n| measurement | kube-sandbox | Kubernetes | ratio (ours/theirs) |")
		fmt.Println("|---|---|---|---|")
		if _, err := b.execRows(ctx, "", "websocket", "spdy"); err != nil {
			return err
		}
	}

	if *only != "processes" {
		if err := b.files(ctx); err != nil {
			fmt.Printf("| files vs kubectl cp | skipped: %v | | |\n", err)
		}
	}
	if *only == "exec" {
		return nil
	}
	if err := b.processes(ctx); err != nil {
		fmt.Printf("\n## Processes and code contexts\n\nskipped: %v\n", err)
	}
	if *only == "processes" {
		return nil
	}
	if err := b.clients(ctx); err != nil {
		fmt.Printf("\n## Clients\n\nskipped: %v\n", err)
	}
	if err := b.egress(ctx); err != nil {
		fmt.Printf("\n## Egress\n\nskipped: %v\n", err)
	}
	if *gvisor != "" {
		if err := b.gVisorRows(ctx); err != nil {
			fmt.Printf("\n## gVisor against runc\n\nskipped: %v\n", err)
		}
	}
	// The exec sandbox goes first: the pool phases want a quiet node.
	_ = b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Delete(ctx, b.name, metav1.DeleteOptions{})
	if err := b.stats(ctx); err != nil {
		fmt.Printf("\n## Usage figures (stats)\n\nskipped: %v\n", err)
	}
	return b.pools(ctx)
}

// createSandbox creates the sandbox b.name (of runtimeClass, unless empty) and waits until it
// runs.
func (b *bench) createSandbox(ctx context.Context, runtimeClass string) error {
	sbx := &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: b.name},
		Spec: sandboxv1alpha1.SandboxSpec{Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "sandbox", Image: *image}},
		}}},
	}
	if runtimeClass != "" {
		sbx.Spec.Template.Spec.RuntimeClassName = &runtimeClass
	}
	if _, err := b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Create(ctx, sbx, metav1.CreateOptions{}); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		s, err := b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Get(ctx, b.name, metav1.GetOptions{})
		if err == nil && s.Status.Phase == sandboxv1alpha1.PhaseRunning && len(s.Status.Pods) > 0 {
			b.pod = s.Status.Pods[0].Name
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("sandbox %s not Running after 2m", b.name)
}

// execRows prints the exec rows (round trips over each of protos, then stdout throughput over
// WebSocket), ours against pods/exec on b's pod, each named with prefix, and returns our
// throughput.
func (b *bench) execRows(ctx context.Context, prefix string, protos ...string) (float64, error) {
	for _, proto := range protos {
		ours, err := b.roundTrips(ctx, proto, b.sandboxExecURL)
		if err != nil {
			return 0, fmt.Errorf("sandboxes/exec %s: %w", proto, err)
		}
		theirs, err := b.roundTrips(ctx, proto, b.podExecURL)
		if err != nil {
			return 0, fmt.Errorf("pods/exec %s: %w", proto, err)
		}
		for _, q := range []float64{0.5, 0.99} {
			o, t := quantile(ours, q), quantile(theirs, q)
			fmt.Printf("| %sexec `true` round trip, %s, p%d (%d runs) | %s | %s | %.2f |\n", prefix, proto, int(q*100), *runs, ms(o), ms(t), float64(o)/float64(t))
		}
	}
	ours, err := b.stream(ctx, b.sandboxExecURL)
	if err != nil {
		return 0, fmt.Errorf("sandboxes/exec stream: %w", err)
	}
	theirs, err := b.stream(ctx, b.podExecURL)
	if err != nil {
		return 0, fmt.Errorf("pods/exec stream: %w", err)
	}
	fmt.Printf("| %sexec stdout throughput, %d MiB, websocket | %.0f MiB/s | %.0f MiB/s | %.2f |\n", prefix, *streamMB, ours, theirs, ours/theirs)
	return ours, nil
}

func (b *bench) sandboxExecURL(cmd []string) *url.URL {
	return b.sandboxes.SandboxV1alpha1().RESTClient().Post().Namespace(*namespace).Resource("sandboxes").Name(b.name).
		SubResource("exec").VersionedParams(&sandboxv1alpha1.SandboxExecOptions{Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
}

func (b *bench) podExecURL(cmd []string) *url.URL {
	return b.kube.CoreV1().RESTClient().Post().Namespace(*namespace).Resource("pods").Name(b.pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "sandbox", Command: cmd, Stdout: true, Stderr: true}, kscheme.ParameterCodec).URL()
}

func (b *bench) executor(proto string, u *url.URL) (remotecommand.Executor, error) {
	if proto == "spdy" {
		return remotecommand.NewSPDYExecutor(b.cfg, "POST", u)
	}
	return remotecommand.NewWebSocketExecutor(b.cfg, "GET", u.String())
}

// roundTrips runs `true` *runs times and returns the latencies, after a few warm-up runs.
func (b *bench) roundTrips(ctx context.Context, proto string, target func([]string) *url.URL) ([]time.Duration, error) {
	var out []time.Duration
	for i := -5; i < *runs; i++ {
		exec, err := b.executor(proto, target([]string{"true"}))
		if err != nil {
			return nil, err
		}
		start := time.Now()
		if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
			return nil, err
		}
		if i >= 0 {
			out = append(out, time.Since(start))
		}
	}
	return out, nil
}

// stream reads *streamMB MiB of stdout and returns MiB/s.
func (b *bench) stream(ctx context.Context, target func([]string) *url.URL) (float64, error) {
	cmd := []string{"head", "-c", fmt.Sprint(*streamMB << 20), "/dev/zero"}
	exec, err := b.executor("websocket", target(cmd))
	if err != nil {
		return 0, err
	}
	cw := &countWriter{}
	start := time.Now()
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: cw, Stderr: io.Discard}); err != nil {
		return 0, err
	}
	if cw.n != int64(*streamMB)<<20 {
		return 0, fmt.Errorf("received %d bytes, want %d", cw.n, int64(*streamMB)<<20)
	}
	return float64(*streamMB) / time.Since(start).Seconds(), nil
}

// files compares the files subresource with kubectl cp (tar through pods/exec), both ways.
func (b *bench) files(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "kube-sandbox-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "payload")
	data := make([]byte, *fileMB<<20)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(b.cfg)
	if err != nil {
		return err
	}
	filesURL := func(p string) string {
		return strings.TrimRight(b.cfg.Host, "/") + fmt.Sprintf("/apis/sandbox.kube-sandbox.io/v1alpha1/namespaces/%s/sandboxes/%s/files/%s", *namespace, b.name, p)
	}
	mbps := func(d time.Duration) float64 { return float64(*fileMB) / d.Seconds() }

	f, err := os.Open(src)
	if err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, filesURL("tmp/bench-files"), f)
	req.ContentLength = int64(len(data))
	start := time.Now()
	resp, err := hc.Do(req)
	f.Close()
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("upload: %s", resp.Status)
	}
	upOurs := time.Since(start)

	start = time.Now()
	resp, err = hc.Get(filesURL("tmp/bench-files"))
	if err != nil {
		return err
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 || n != int64(len(data)) {
		return fmt.Errorf("download: %s, %d bytes", resp.Status, n)
	}
	downOurs := time.Since(start)

	kubectl := func(args ...string) (time.Duration, error) {
		c := exec.CommandContext(ctx, "kubectl", args...)
		var errb bytes.Buffer
		c.Stderr = &errb
		start := time.Now()
		if err := c.Run(); err != nil {
			return 0, fmt.Errorf("kubectl %v: %v: %s", args, err, errb.String())
		}
		return time.Since(start), nil
	}
	target := fmt.Sprintf("%s/%s:/tmp/bench-cp", *namespace, b.pod)
	upTheirs, err := kubectl("cp", "-c", "sandbox", src, target)
	if err != nil {
		return err
	}
	downTheirs, err := kubectl("cp", "-c", "sandbox", target, filepath.Join(dir, "back"))
	if err != nil {
		return err
	}
	fmt.Printf("| upload %d MiB: files vs kubectl cp | %.0f MiB/s | %.0f MiB/s | %.2f |\n", *fileMB, mbps(upOurs), mbps(upTheirs), mbps(upOurs)/mbps(upTheirs))
	fmt.Printf("| download %d MiB: files vs kubectl cp | %.0f MiB/s | %.0f MiB/s | %.2f |\n", *fileMB, mbps(downOurs), mbps(downTheirs), mbps(downOurs)/mbps(downTheirs))
	return nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func quantile(d []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// leaderMetricsURL is the metrics endpoint of the sandbox-controller pod that holds the lease:
// the one that reconciles.
func (b *bench) leaderMetricsURL(ctx context.Context) (string, error) {
	lease, err := b.kube.CoordinationV1().Leases("kube-sandbox-system").Get(ctx, "sandbox-controller.control.kube-sandbox.io", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("no leader holds the lease")
	}
	podName, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	pod, err := b.kube.CoreV1().Pods("kube-sandbox-system").Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pod.Status.PodIP == "" {
		return "", fmt.Errorf("pod %s has no IP", podName)
	}
	return "http://" + net.JoinHostPort(pod.Status.PodIP, "8080") + "/metrics", nil
}
