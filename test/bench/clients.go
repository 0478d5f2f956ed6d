package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/remotecommand"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	client "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
)

var (
	clientPool = flag.String("client-pool", "python", "warm pool of the client rows (Go library, Python SDK, kubectl sandbox), in -namespace; absent: skip them")
	clientRuns = flag.Int("client-runs", 10, "pooled create → first exec runs per client")
	mcpRuns    = flag.Int("mcp-runs", 50, "MCP tool calls and direct execs, each")
)

// clients compares what the clients add: the Go library against the raw clientset path, the
// Python SDK against the library and against `kubectl sandbox`, an MCP tool call against a
// direct exec. Runs of the two sides alternate, so that both see the same pool and node.
func (b *bench) clients(ctx context.Context) error {
	if _, err := b.sandboxes.SandboxV1alpha1().RESTClient().Get().AbsPath("/apis/control.kube-sandbox.io/v1alpha1/namespaces", *namespace, "pools", *clientPool).DoRaw(ctx); err != nil {
		return fmt.Errorf("pool %s/%s: %w", *namespace, *clientPool, err)
	}
	c, err := client.New(b.cfg, *namespace)
	if err != nil {
		return err
	}
	fmt.Printf("\n## Clients\n\nPooled sandboxes of pool %s; %d runs a side, alternating.\n\n", *clientPool, *clientRuns)
	fmt.Println("| measurement | client | baseline | ratio (client/baseline) |")
	fmt.Println("|---|---|---|---|")

	var raw, lib []time.Duration
	for i := 0; i < *clientRuns; i++ {
		if err := b.waitPoolAvailable(ctx); err != nil {
			return err
		}
		d, err := b.rawCreateExec(ctx)
		if err != nil {
			return fmt.Errorf("raw path: %w", err)
		}
		raw = append(raw, d)
		if err := b.waitPoolAvailable(ctx); err != nil {
			return err
		}
		d, err = libCreateExec(ctx, c)
		if err != nil {
			return fmt.Errorf("Go library: %w", err)
		}
		lib = append(lib, d)
	}
	for _, q := range []float64{0.5, 0.9} {
		l, r := quantile(lib, q), quantile(raw, q)
		fmt.Printf("| pooled create → first exec, p%d: Go library vs raw clientset | %s | %s | %.2f |\n", int(q*100), ms(l), ms(r), float64(l)/float64(r))
	}

	py, err := pythonCreateExec(ctx, *clientRuns)
	if err != nil {
		fmt.Printf("| pooled create → first exec: Python SDK | skipped: %v | | |\n", err)
	} else {
		var kubectl []time.Duration
		for i := 0; i < *clientRuns; i++ {
			if err := b.waitPoolAvailable(ctx); err != nil {
				return err
			}
			d, err := kubectlCreateExec(ctx)
			if err != nil {
				return fmt.Errorf("kubectl sandbox: %w", err)
			}
			kubectl = append(kubectl, d)
		}
		p, l, k := quantile(py, 0.5), quantile(lib, 0.5), quantile(kubectl, 0.5)
		fmt.Printf("| pooled create → first exec, p50: Python SDK vs Go library | %s | %s | %.2f |\n", ms(p), ms(l), float64(p)/float64(l))
		fmt.Printf("| pooled create → first exec, p50: Python SDK vs `kubectl sandbox create` + `exec` (processes) | %s | %s | %.2f |\n", ms(p), ms(k), float64(p)/float64(k))
	}

	if err := b.mcpRows(ctx, c); err != nil {
		fmt.Printf("| MCP tool call | skipped: %v | | |\n", err)
	}
	return nil
}

// rawCreateExec is the path the bench takes without the library: the generated clientset's
// create, a watch until Ready, and client-go's WebSocket executor on the exec URL.
func (b *bench) rawCreateExec(ctx context.Context) (time.Duration, error) {
	sandboxes := b.sandboxes.SandboxV1alpha1().Sandboxes(*namespace)
	start := time.Now()
	sb, err := sandboxes.Create(ctx, &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-raw-"},
		Spec:       sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: *clientPool}},
	}, metav1.CreateOptions{})
	if err != nil {
		return 0, err
	}
	defer func() { _ = sandboxes.Delete(context.Background(), sb.Name, metav1.DeleteOptions{}) }()
	if !meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1alpha1.ConditionReady) {
		w, err := sandboxes.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + sb.Name, ResourceVersion: sb.ResourceVersion})
		if err != nil {
			return 0, err
		}
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*sandboxv1alpha1.Sandbox); ok && meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1alpha1.ConditionReady) {
				break
			}
		}
		w.Stop()
	}
	u := b.sandboxes.SandboxV1alpha1().RESTClient().Post().Namespace(*namespace).Resource("sandboxes").Name(sb.Name).
		SubResource("exec").VersionedParams(&sandboxv1alpha1.SandboxExecOptions{Command: []string{"true"}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	e, err := remotecommand.NewWebSocketExecutor(b.cfg, "GET", u.String())
	if err != nil {
		return 0, err
	}
	if err := e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func libCreateExec(ctx context.Context, c *client.Client) (time.Duration, error) {
	start := time.Now()
	sb, err := c.Create(ctx, client.CreateOptions{Pool: *clientPool, GenerateName: "bench-lib-", Wait: true})
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Delete(context.Background(), sb.Name) }()
	if _, err := c.Run(ctx, sb.Name, "true"); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// pythonCreateExec runs the Python SDK's create → exec n times in one interpreter (Debian's,
// with sdk/python on its path) and reads each duration it measured.
func pythonCreateExec(ctx context.Context, n int) ([]time.Duration, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	script := `
import sys, time
from kubernetes import client, config
from kube_sandbox import Sandbox
config.load_kube_config()
pools = client.CustomObjectsApi()
n, pool, ns = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for _ in range(n):
    # As for the other clients: a pod waits in the pool before each run, untimed.
    while pools.get_namespaced_custom_object("control.kube-sandbox.io", "v1alpha1", ns, "pools", pool).get("status", {}).get("available", 0) < 1:
        time.sleep(0.05)
    start = time.monotonic()
    sb = Sandbox.create(pool=pool, namespace=ns)
    sb.exec(["true"])
    print(time.monotonic() - start, flush=True)
    sb.delete()
`
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", script, strconv.Itoa(n), *clientPool, *namespace)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "sdk", "python"))
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("%v: %s", err, lastLine(string(ee.Stderr)))
		}
		return nil, err
	}
	var ds []time.Duration
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		s, err := strconv.ParseFloat(strings.TrimSpace(sc.Text()), 64)
		if err != nil {
			return nil, fmt.Errorf("python printed %q", sc.Text())
		}
		ds = append(ds, time.Duration(s*float64(time.Second)))
	}
	if len(ds) != n {
		return nil, fmt.Errorf("python measured %d runs, want %d", len(ds), n)
	}
	return ds, nil
}

// kubectlCreateExec is a person's path: `kubectl sandbox create --pool` (which waits until the
// sandbox is ready) and `kubectl sandbox exec -- true`, two processes.
func kubectlCreateExec(ctx context.Context) (time.Duration, error) {
	name := fmt.Sprintf("bench-kubectl-%d", time.Now().UnixNano()%1e9)
	start := time.Now()
	if out, err := exec.CommandContext(ctx, "kubectl", "sandbox", "-n", *namespace, "create", name, "--pool", *clientPool).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("create: %v: %s", err, out)
	}
	defer func() { _ = exec.Command("kubectl", "sandbox", "-n", *namespace, "delete", name, "--wait=false").Run() }()
	if out, err := exec.CommandContext(ctx, "kubectl", "sandbox", "-n", *namespace, "exec", name, "--", "true").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("exec: %v: %s", err, out)
	}
	return time.Since(start), nil
}

// mcpRows: run_command `true` through `kubectl sandbox mcp` over stdio, against the same
// command (sh -c true, as the tool runs it) exec'd directly by the library.
func (b *bench) mcpRows(ctx context.Context, c *client.Client) error {
	sb, err := c.Create(ctx, client.CreateOptions{Pool: *clientPool, GenerateName: "bench-mcp-", Wait: true})
	if err != nil {
		return err
	}
	defer func() { _ = c.Delete(context.Background(), sb.Name) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v0"}, nil).Connect(ctx,
		&mcp.CommandTransport{Command: exec.Command("kubectl", "sandbox", "mcp", "-n", *namespace)}, nil)
	if err != nil {
		return err
	}
	defer func() { _ = cs.Close() }()
	var viaMCP, direct []time.Duration
	for i := -3; i < *mcpRuns; i++ {
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"name": sb.Name, "command": "true"}})
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("run_command: %v", res.Content)
		}
		d := time.Since(start)
		start = time.Now()
		if _, err := c.Run(ctx, sb.Name, "sh", "-c", "true"); err != nil {
			return err
		}
		if i >= 0 {
			viaMCP, direct = append(viaMCP, d), append(direct, time.Since(start))
		}
	}
	m, d := quantile(viaMCP, 0.5), quantile(direct, 0.5)
	fmt.Printf("| MCP run_command `true` (stdio) vs direct exec, p50 (%d each) | %s | %s | %.2f (+%s) |\n", *mcpRuns, ms(m), ms(d), float64(m)/float64(d), ms(m-d))
	return nil
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// waitPoolAvailable returns once the pool has an idle pod, so that each measured create is
// served from the pool rather than waiting for it to refill.
func (b *bench) waitPoolAvailable(ctx context.Context) error {
	for {
		var pool struct {
			Status struct {
				Available int32 `json:"available"`
			} `json:"status"`
		}
		raw, err := b.sandboxes.SandboxV1alpha1().RESTClient().Get().AbsPath("/apis/control.kube-sandbox.io/v1alpha1/namespaces", *namespace, "pools", *clientPool).DoRaw(ctx)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &pool); err != nil {
			return err
		}
		if pool.Status.Available > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
