package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/test/e2e/outside"
)

var (
	egressRuns   = flag.Int("egress-runs", 300, "DNS lookups and TCP connects per path in the egress rows")
	egressHTTPMB = flag.Int("egress-http-mb", 256, "MiB fetched over HTTP per path in the egress rows")
)

// egressProbe runs in a pod: DNS round trips to a resolver (raw UDP queries, so that neither
// search domains nor caches get in the way), TCP connects, and one HTTP download; it prints
// JSON of the durations (seconds) and the download rate (MB/s).
const egressProbe = `
import json, socket, sys, time, urllib.request
resolver, name, host, port, url, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
def query(i):
    return bytes([i >> 8 & 255, i & 255, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]) + b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
dns = []
for i in range(runs):
    t = time.perf_counter(); s.sendto(query(i), (resolver, 53)); a = s.recv(512); dns.append(time.perf_counter() - t)
    assert (a[3] & 15) == 0 and ((a[6] << 8) | a[7]) > 0, "no answer for " + name
# Names asked once each: the sandbox's proxy has them in no cache, asks the upstream, and
# learns each answer's address (another each) into the node's filter before it replies.
cold = []
for i in range(runs):
    q = query(i).replace(b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")), b"".join(bytes([len(l)]) + l.encode() for l in ("n%d.%s" % (i, name)).split(".")))
    t = time.perf_counter(); s.sendto(q, (resolver, 53)); a = s.recv(512); cold.append(time.perf_counter() - t)
    assert (a[3] & 15) == 0 and ((a[6] << 8) | a[7]) > 0, "no answer for n%d.%s" % (i, name)
tcp = []
for i in range(runs):
    t = time.perf_counter(); c = socket.create_connection((host, port), timeout=2); tcp.append(time.perf_counter() - t); c.close()
t = time.perf_counter(); n = 0
with urllib.request.urlopen(url, timeout=60) as r:
    while True:
        b = r.read(1 << 20)
        if not b: break
        n += len(b)
http = n / (time.perf_counter() - t) / 1e6
print(json.dumps({"dns": dns, "dnsCold": cold, "tcp": tcp, "http": http, "bytes": n}))
`

type egressResult struct {
	DNS []float64 `json:"dns"`
	// DNSCold are lookups of names asked once each (egressProbe).
	DNSCold []float64 `json:"dnsCold"`
	TCP     []float64 `json:"tcp"`
	HTTP    float64   `json:"http"`
	Bytes   int64     `json:"bytes"`
}

func durations(s []float64) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, v := range s {
		out[i] = time.Duration(v * float64(time.Second))
	}
	return out
}

// egress measures what egress enforcement (the node agent's filter and DNS proxy) costs on the
// data path: from a sandbox whose policy allows an outside host, against a plain pod of the
// same image (without the node agent's label: no filter) on the same node, to the same host, in this run. The DNS rows compare the sandbox's lookups (any
// resolver it asks: the proxy answers, after asking the upstream) with the plain pod asking
// that upstream itself.
func (b *bench) egress(ctx context.Context) error {
	host, stop, err := b.outsideResolver(ctx)
	if err != nil {
		return err
	}
	defer stop()

	name := b.name + "-egress"
	if _, err := b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Create(ctx, egressSandbox(name, host, ""), metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() {
		_ = b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	}()
	plain := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: b.name + "-plain"},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "plain", Image: *image, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	if _, err := b.kube.CoreV1().Pods(*namespace).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() {
		_ = b.kube.CoreV1().Pods(*namespace).Delete(context.Background(), plain.Name, metav1.DeleteOptions{})
	}()
	if err := b.waitRunning(ctx, name, plain.Name); err != nil {
		return err
	}

	// Both ask the upstream; the sandbox's query is redirected to its proxy, which asks it.
	ours, err := runProbe(ctx, append([]string{"sandbox", "-n", *namespace, "exec", name, "--"}, egressProbeArgs(host)...))
	if err != nil {
		return fmt.Errorf("in the sandbox: %w", err)
	}
	theirs, err := runProbe(ctx, append([]string{"-n", *namespace, "exec", plain.Name, "--"}, egressProbeArgs(host)...))
	if err != nil {
		return fmt.Errorf("in the plain pod: %w", err)
	}
	fmt.Printf("\n## Egress\n\nA sandbox whose policy allows an outside host (a network namespace behind the node) against a plain pod of the same image that no policy filters, to the same host, %d runs each.\n\n", *egressRuns)
	fmt.Println("| measurement | sandbox (egress) | plain pod | ratio (ours/theirs) |")
	fmt.Println("|---|---|---|---|")
	for _, q := range []float64{0.5, 0.99} {
		o, t := quantile(durations(ours.DNS), q), quantile(durations(theirs.DNS), q)
		fmt.Printf("| DNS lookup p%.0f (through the proxy / straight to the upstream) | %s | %s | %.2f |\n", q*100, us(o), us(t), float64(o)/float64(t))
	}
	for _, q := range []float64{0.5, 0.99} {
		o, t := quantile(durations(ours.DNSCold), q), quantile(durations(theirs.DNSCold), q)
		fmt.Printf("| DNS lookup p%.0f, each name once (the proxy asks the upstream and learns the answer) | %s | %s | %.2f |\n", q*100, us(o), us(t), float64(o)/float64(t))
	}
	for _, q := range []float64{0.5, 0.99} {
		o, t := quantile(durations(ours.TCP), q), quantile(durations(theirs.TCP), q)
		fmt.Printf("| TCP connect p%.0f | %s | %s | %.2f |\n", q*100, us(o), us(t), float64(o)/float64(t))
	}
	fmt.Printf("| HTTP download, %d MiB | %.0f MB/s | %.0f MB/s | %.2f |\n", *egressHTTPMB, ours.HTTP, theirs.HTTP, ours.HTTP/theirs.HTTP)
	return nil
}

// startOutside starts an outside host (a network namespace behind the node) that serves
// *egressHTTPMB MiB over HTTP on port 80, accepts TCP on 9000 and resolves bench.test to itself
// (and nI.bench.test, for I below *egressRuns, to an address each).
func startOutside() (*outside.Network, *outside.Host, error) {
	net, err := outside.NewNetwork()
	if err != nil {
		return nil, nil, fmt.Errorf("outside network: %w", err)
	}
	host, err := net.NewHost("bench")
	if err == nil {
		body := bytes.Repeat([]byte("x"), 1<<20)
		err = host.StartHTTP(80, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			for range *egressHTTPMB {
				if _, err := w.Write(body); err != nil {
					return
				}
			}
		}))
	}
	if err == nil {
		err = host.StartTCP(9000)
	}
	if err == nil {
		zone := map[string][]netip.Addr{"bench.test.": {host.IP}}
		for i := range *egressRuns {
			// An address of the benchmarking range (RFC 2544) each: never connected to.
			zone[fmt.Sprintf("n%d.bench.test.", i)] = []netip.Addr{netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})}
		}
		err = host.StartDNS(zone)
	}
	if err != nil {
		_ = net.Close()
		return nil, nil, err
	}
	return net, host, nil
}

// outsideResolver starts the outside host (startOutside) and makes it the platform's DNS
// upstream; stop restores the upstreams and stops the host.
func (b *bench) outsideResolver(ctx context.Context) (host *outside.Host, stop func(), err error) {
	net, host, err := startOutside()
	if err != nil {
		return nil, nil, err
	}
	restore, err := b.setUpstreams(ctx, host.Addr(53))
	if err != nil {
		_ = net.Close()
		return nil, nil, err
	}
	return host, func() { restore(); _ = net.Close() }, nil
}

// egressSandbox is a direct-mode sandbox (under runtimeClass, unless empty) whose policy allows
// the outside host: its name, and its address on ports 80 and 9000.
func egressSandbox(name string, host *outside.Host, runtimeClass string) *sandboxv1alpha1.Sandbox {
	sbx := &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sandboxv1alpha1.SandboxSpec{
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: *image, ImagePullPolicy: corev1.PullNever}}}},
			NetworkPolicy: &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny", Egress: []sandboxv1alpha1.SandboxEgressRule{
				{Action: "Allow", To: "bench.test"},
				{Action: "Allow", To: "*.bench.test"},
				{Action: "Allow", To: host.IP.String(), Ports: []sandboxv1alpha1.SandboxEgressPort{{Port: 80}, {Port: 9000}}},
			}},
		},
	}
	if runtimeClass != "" {
		sbx.Spec.Template.Spec.RuntimeClassName = &runtimeClass
	}
	return sbx
}

// egressProbeArgs runs egressProbe against the outside host, asking it as the resolver.
func egressProbeArgs(host *outside.Host) []string {
	return []string{"python3", "-c", egressProbe, host.IP.String(), "bench.test", host.IP.String(), "9000",
		"http://" + host.IP.String() + "/", fmt.Sprint(*egressRuns)}
}

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

func runProbe(ctx context.Context, args []string) (*egressResult, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(errOut.String()))
	}
	r := &egressResult{}
	if err := json.Unmarshal(out.Bytes(), r); err != nil {
		return nil, fmt.Errorf("%v: %s", err, out.String())
	}
	return r, nil
}

// setUpstreams points the platform's DNS proxy at upstream and returns how to undo it.
func (b *bench) setUpstreams(ctx context.Context, upstream string) (func(), error) {
	cms := b.kube.CoreV1().ConfigMaps("kube-sandbox-system")
	cm, err := cms.Get(ctx, "kube-sandbox-egress", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	prev := cm.Data["dnsUpstreams"]
	patch := func(v string) error {
		data, _ := json.Marshal(map[string]any{"data": map[string]string{"dnsUpstreams": v}})
		_, err := cms.Patch(context.Background(), cm.Name, types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}
	if err := patch("- " + upstream + "\n"); err != nil {
		return nil, err
	}
	return func() { _ = patch(prev) }, nil
}

// waitRunning waits for the sandbox to run with its policy in force, and for the pod to run.
func (b *bench) waitRunning(ctx context.Context, sandbox, pod string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		s, err := b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace).Get(ctx, sandbox, metav1.GetOptions{})
		p, perr := b.kube.CoreV1().Pods(*namespace).Get(ctx, pod, metav1.GetOptions{})
		if err == nil && perr == nil && s.Status.Phase == sandboxv1alpha1.PhaseRunning && p.Status.Phase == corev1.PodRunning {
			for _, c := range s.Status.Conditions {
				if c.Type == "EgressReady" && c.Status == metav1.ConditionTrue && c.ObservedGeneration == s.Generation {
					return nil
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("sandbox %s (policy in force) and pod %s not Running after 2m", sandbox, pod)
}
