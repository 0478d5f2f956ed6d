//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
)

// clientPool makes a namespace with a warm pool "python" of one pod and returns the namespace.
func clientPool(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t)
	applyPool(t, ns, "python", 1, 2, 4)
	waitPoolFull(t, ns, "python", 1, 0, 3*time.Minute)
	return ns
}

// TestGoClient runs the agent loop and every family of calls of the Go client library against
// the real cluster: create from a pool, files, run, code, processes, proxy, renew, egress, and
// its typed errors (not found, forbidden by RBAC, conflict).
func TestGoClient(t *testing.T) {
	ns := clientPool(t)
	c, err := sandboxclient.NewFromKubeconfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	c = c.InNamespace(ns)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	sb, err := c.Create(ctx, sandboxclient.CreateOptions{Pool: "python", Timeout: 10 * time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), sb.Name) })
	if !strings.HasPrefix(sb.Name, sandboxclient.DefaultGenerateName) || sb.Status.ExpiresAt == nil {
		t.Errorf("created %s expiring at %v", sb.Name, sb.Status.ExpiresAt)
	}

	// The agent loop: write a file, run it, read what it wrote.
	files := c.Files(sb.Name)
	if err := files.WriteFile(ctx, "/tmp/agent/main.py", []byte("open('/tmp/agent/out.txt','w').write(str(6*7))\nprint('done')\n"), 0); err != nil {
		t.Fatalf("write: %v", err)
	}
	res, err := c.Run(ctx, sb.Name, "python3", "/tmp/agent/main.py")
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "done\n" {
		t.Fatalf("run: %v, %+v", err, res)
	}
	out, _, err := files.ReadFile(ctx, "/tmp/agent/out.txt", 0)
	if err != nil || string(out) != "42" {
		t.Fatalf("read: %q, %v", out, err)
	}
	entries, err := files.ReadDir(ctx, "/tmp/agent")
	if err != nil || len(entries) != 2 {
		t.Errorf("list: %v, %v", entries, err)
	}
	if err := files.Remove(ctx, "/tmp/agent", true); err != nil {
		t.Errorf("remove: %v", err)
	}
	if _, _, err := files.ReadFile(ctx, "/tmp/agent/out.txt", 0); !sandboxclient.IsNotFound(err) {
		t.Errorf("read after remove: %v, want not found", err)
	}

	// A failing command is a result, not an error.
	res, err = c.Run(ctx, sb.Name, "sh", "-c", "echo oops >&2; exit 3")
	if err != nil || res.ExitCode != 3 || string(res.Stderr) != "oops\n" {
		t.Errorf("failing command: %v, %+v", err, res)
	}

	// Code contexts keep their state.
	if _, err := c.RunCode(ctx, sb.Name, sandboxclient.RunCodeOptions{Code: "x = 20"}); err != nil {
		t.Fatalf("run code: %v", err)
	}
	exec, err := c.RunCode(ctx, sb.Name, sandboxclient.RunCodeOptions{Code: "print('x is', x)\nx + 22"})
	if err != nil || exec.Stdout != "x is 20\n" || exec.Text() != "42" || exec.End == nil || exec.End.Status != "ok" {
		t.Errorf("run code: %v, %+v", err, exec)
	}
	exec, err = c.RunCode(ctx, sb.Name, sandboxclient.RunCodeOptions{Code: "1/0"})
	if err != nil || exec.Error == nil || exec.Error.Name != "ZeroDivisionError" {
		t.Errorf("raising code: %v, %+v", err, exec)
	}

	// A background server, reached through the proxy.
	p, err := c.StartProcess(ctx, sb.Name, sandboxclient.ProcessCommand("cd /tmp && exec python3 -u -m http.server 8000"))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	hc, err := c.ProxyClient(sb.Name, 0, 8000)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server in the sandbox", time.Minute, func() (bool, string) {
		resp, err := hc.Get("http://sandbox/")
		if err != nil {
			return false, err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == 200 && strings.Contains(string(body), "Directory listing"), resp.Status
	})
	log, err := c.ProcessLog(ctx, sb.Name, 0, p.Name, 0)
	if err != nil || !strings.Contains(string(log), "GET / HTTP") {
		t.Errorf("process log %q, %v", log, err)
	}
	if _, err := c.SignalProcess(ctx, sb.Name, 0, p.Name, sandboxv1alpha1.SandboxProcessSignal{Signal: "KILL"}); err != nil {
		t.Errorf("kill: %v", err)
	}
	list, err := c.ListProcesses(ctx, sb.Name, nil)
	if err != nil || len(list.Items) != 1 {
		t.Errorf("processes: %v, %v", list, err)
	}

	// Renew, and egress.
	renewed, err := c.Renew(ctx, sb.Name, sandboxclient.RenewOptions{Extend: 20 * time.Minute})
	if err != nil || renewed.Status.ExpiresAt == nil || !renewed.Status.ExpiresAt.After(sb.Status.ExpiresAt.Time) {
		t.Errorf("renew: %v, %v", err, renewed.Status.ExpiresAt)
	}
	enforced, err := c.Allow(ctx, sb.Name, "example.com:443")
	if err != nil {
		t.Fatalf("allow: %v", err)
	}
	if p := enforced.Spec.NetworkPolicy; p == nil || len(p.Egress) != 1 || p.Egress[0].To != "example.com" {
		t.Errorf("policy after allow: %+v", p)
	}

	// Typed errors.
	if _, err := c.Get(ctx, "ghost"); !errors.Is(err, sandboxclient.ErrNotFound) {
		t.Errorf("get ghost: %v, want ErrNotFound", err)
	}
	if _, err := c.Run(ctx, "ghost", "true"); !sandboxclient.IsNotFound(err) {
		t.Errorf("run in ghost: %v, want not found", err)
	}
	mustKubectl(t, "-n", ns, "create", "rolebinding", "viewer", "--clusterrole=view", "--user=vic")
	config := c.RESTConfig()
	config.Impersonate = rest.ImpersonationConfig{UserName: "vic"}
	viewer, err := sandboxclient.New(config, ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := viewer.Get(ctx, sb.Name); err != nil {
		t.Errorf("viewer get: %v", err)
	}
	if _, err := viewer.Run(ctx, sb.Name, "true"); !errors.Is(err, sandboxclient.ErrForbidden) {
		t.Errorf("viewer run: %v, want ErrForbidden", err)
	}
	if _, err := viewer.Create(ctx, sandboxclient.CreateOptions{Pool: "python"}); !sandboxclient.IsForbidden(err) {
		t.Errorf("viewer create: %v, want forbidden", err)
	}
	direct, err := c.Create(ctx, sandboxclient.CreateOptions{Pool: "python", DryRun: true})
	if err != nil || direct.Spec.TimeoutSeconds != nil {
		t.Fatalf("dry run: %v", err)
	}
	if _, err := c.Create(ctx, sandboxclient.CreateOptions{Pool: "python", Image: pythonImage}); err == nil {
		t.Error("a pool and an image were accepted")
	}

	if err := c.Delete(ctx, sb.Name); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := c.Delete(ctx, sb.Name); err != nil {
		t.Errorf("delete again: %v", err)
	}
	if _, err := c.Wait(ctx, sb.Name, func(sb *sandboxv1alpha1.Sandbox) (bool, error) { return sb == nil, nil }); err != nil {
		t.Errorf("wait until deleted: %v", err)
	}
	if _, err := c.Get(ctx, sb.Name); !sandboxclient.IsNotFound(err) {
		t.Errorf("get after delete: %v", err)
	}
}

// mcpServer starts `kubectl sandbox mcp --transport http` and returns its URL; the process is
// stopped when the test ends.
func mcpServer(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "kubectl-sandbox"), append([]string{"mcp", "--transport", "http", "--listen", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`at (http://\S+/mcp),`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("the MCP server did not say where it listens")
	}
	return ""
}

// mcpCall calls a tool; it fails the test on a protocol error and returns the result and its
// structured content decoded into out.
func mcpCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		return res
	}
	data, _ := json.Marshal(res.StructuredContent)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: %s: %v", tool, data, err)
		}
	}
	return res
}

func mcpText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCP drives `kubectl sandbox mcp` with the MCP SDK's own client over stdio and over
// streamable HTTP, as an agent would: the whole loop, and RBAC denials as tool errors.
func TestMCP(t *testing.T) {
	ns := clientPool(t)
	mustKubectl(t, "-n", ns, "create", "rolebinding", "viewer", "--clusterrole=view", "--user=vic")
	kubeconfig := os.Getenv("KUBECONFIG")
	base := []string{"-n", ns, "--pool", "python", "--kubeconfig", kubeconfig, "--sandbox-timeout", "10m"}

	transports := map[string]func(args ...string) mcp.Transport{
		"stdio": func(args ...string) mcp.Transport {
			return &mcp.CommandTransport{Command: exec.Command(filepath.Join(binDir, "kubectl-sandbox"), append([]string{"mcp"}, args...)...)}
		},
		"http": func(args ...string) mcp.Transport {
			return &mcp.StreamableClientTransport{Endpoint: mcpServer(t, args...)}
		},
	}
	for _, name := range []string{"stdio", "http"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "v0"}, nil)
			cs, err := client.Connect(ctx, transports[name](base...), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cs.Close() }()
			if got := cs.InitializeResult().ServerInfo.Name; got != "kube-sandbox" {
				t.Errorf("server %q", got)
			}

			var sb struct {
				Name, Pool, ExpiresAt string
				Ready                 bool
			}
			if res := mcpCall(t, cs, "create_sandbox", map[string]any{}, &sb); res.IsError {
				t.Fatalf("create_sandbox: %s", mcpText(res))
			}
			t.Cleanup(func() { kubectl(t, "-n", ns, "delete", "sandbox", sb.Name, "--wait=false") })
			if !sb.Ready || sb.Pool != "python" || sb.ExpiresAt == "" {
				t.Errorf("created %+v: want ready, from the default pool, expiring", sb)
			}
			if l := mustKubectl(t, "-n", ns, "get", "sandbox", sb.Name, "-o", "jsonpath={.metadata.labels}"); !strings.Contains(l, `"sandbox.kube-sandbox.io/created-by":"mcp"`) {
				t.Errorf("labels %s", l)
			}

			if res := mcpCall(t, cs, "write_file", map[string]any{"name": sb.Name, "path": "/tmp/main.py", "content": "import sys\nprint(6*7, flush=True)\nsys.stdout.buffer.write(bytes(range(256)))\n"}, nil); res.IsError {
				t.Fatalf("write_file: %s", mcpText(res))
			}
			var run struct {
				ExitCode int `json:"exit_code"`
				Stdout   struct {
					Text   string
					Binary bool
				}
				Stderr struct{ Text string }
			}
			mcpCall(t, cs, "run_command", map[string]any{"name": sb.Name, "command": "python3 /tmp/main.py | head -c 3"}, &run)
			if run.ExitCode != 0 || run.Stdout.Text != "42\n" {
				t.Errorf("run_command: %+v", run)
			}
			mcpCall(t, cs, "run_command", map[string]any{"name": sb.Name, "command": "python3 /tmp/main.py"}, &run)
			if !run.Stdout.Binary || run.Stdout.Text != "" {
				t.Errorf("binary output: %+v, want marked, not pasted", run)
			}
			mcpCall(t, cs, "run_command", map[string]any{"name": sb.Name, "command": "exit 7"}, &run)
			if run.ExitCode != 7 {
				t.Errorf("exit code %d, want 7", run.ExitCode)
			}

			var code struct {
				Stdout struct{ Text string }
				Result string
			}
			mcpCall(t, cs, "run_code", map[string]any{"name": sb.Name, "code": "y = 5"}, nil)
			mcpCall(t, cs, "run_code", map[string]any{"name": sb.Name, "code": "print('y', y)\ny * 2"}, &code)
			if code.Stdout.Text != "y 5\n" || code.Result != "10" {
				t.Errorf("run_code: %+v", code)
			}

			var p struct{ ID, Phase string }
			mcpCall(t, cs, "start_process", map[string]any{"name": sb.Name, "command": "for i in 1 2 3; do echo tick $i; done; sleep 300"}, &p)
			var po struct {
				Output struct{ Text string }
			}
			waitFor(t, "the process's output", 30*time.Second, func() (bool, string) {
				mcpCall(t, cs, "read_process_output", map[string]any{"name": sb.Name, "id": p.ID}, &po)
				return strings.Contains(po.Output.Text, "tick 3"), po.Output.Text
			})
			var killed struct{ Phase string }
			if res := mcpCall(t, cs, "kill_process", map[string]any{"name": sb.Name, "id": p.ID, "signal": "KILL"}, &killed); res.IsError {
				t.Errorf("kill_process: %s", mcpText(res))
			}

			var network struct {
				Own      bool
				Rules    []string
				Enforced bool
			}
			if res := mcpCall(t, cs, "allow_egress", map[string]any{"name": sb.Name, "targets": []string{"example.com:443"}}, &network); res.IsError {
				t.Fatalf("allow_egress: %s", mcpText(res))
			}
			if !network.Own || !network.Enforced || len(network.Rules) != 1 {
				t.Errorf("allow_egress: %+v", network)
			}

			var listed struct{ Sandboxes []struct{ Name string } }
			mcpCall(t, cs, "list_sandboxes", map[string]any{}, &listed)
			if len(listed.Sandboxes) != 1 || listed.Sandboxes[0].Name != sb.Name {
				t.Errorf("list_sandboxes: %+v", listed)
			}
			if res := mcpCall(t, cs, "read_file", map[string]any{"name": "ghost", "path": "/etc/hostname"}, nil); !res.IsError || !strings.Contains(mcpText(res), "NotFound") {
				t.Errorf("missing sandbox: %s", mcpText(res))
			}
			if res := mcpCall(t, cs, "delete_sandbox", map[string]any{"name": sb.Name}, nil); res.IsError {
				t.Errorf("delete_sandbox: %s", mcpText(res))
			}
			if phase := kubectl(t, "-n", ns, "get", "sandbox", sb.Name, "-o", "jsonpath={.status.phase}"); phase.code == 0 && phase.stdout != "Terminating" {
				t.Errorf("after delete_sandbox: phase %q", phase.stdout)
			}

			// The server acts as its kubeconfig's identity: a viewer may list, not create or
			// exec, and the error names the verb and the resource.
			viewer, err := client.Connect(ctx, transports[name](append(base, "--as", "vic")...), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = viewer.Close() }()
			if res := mcpCall(t, viewer, "list_sandboxes", map[string]any{"all": true}, nil); res.IsError {
				t.Errorf("viewer list: %s", mcpText(res))
			}
			res := mcpCall(t, viewer, "create_sandbox", map[string]any{}, nil)
			if msg := mcpText(res); !res.IsError || !strings.Contains(msg, "Forbidden") || !strings.Contains(msg, `cannot create resource "sandboxes"`) {
				t.Errorf("viewer create: %s", msg)
			}
		})
	}
}
