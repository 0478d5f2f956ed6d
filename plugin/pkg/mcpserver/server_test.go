package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/client-go/rest"

	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
)

// connect serves the tools on a client of the stand-in sandbox API server and returns an MCP
// client session over in-memory transports.
func connect(t *testing.T, token string, o Options) (*mcp.ClientSession, *sandboxserver.Server) {
	t.Helper()
	srv := sandboxserver.New(t, cmdtesting.Namespace, "sb")
	c, err := sandboxclient.New(&rest.Config{Host: srv.URL, BearerToken: token}, cmdtesting.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	serverT, clientT := mcp.NewInMemoryTransports()
	ss, err := New(c, o).Connect(ctx, serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, clientT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, srv
}

// call calls a tool and decodes its structured result into out; it returns the result.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", tool, err)
	}
	if out != nil && !res.IsError {
		data, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", tool, data, err)
		}
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsHaveSchemasAndDescriptions(t *testing.T) {
	cs, _ := connect(t, sandboxserver.UserToken, DefaultOptions())
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"create_sandbox", "list_sandboxes", "delete_sandbox", "renew_sandbox", "run_command",
		"start_process", "list_processes", "read_process_output", "kill_process",
		"read_file", "write_file", "list_files", "run_code", "sandbox_stats", "show_network", "allow_egress"}
	got := map[string]*mcp.Tool{}
	for _, tool := range list.Tools {
		got[tool.Name] = tool
	}
	for _, name := range want {
		tool, ok := got[name]
		if !ok {
			t.Errorf("no tool %s", name)
			continue
		}
		if len(tool.Description) < 40 {
			t.Errorf("%s: description %q is too short to act on", name, tool.Description)
		}
		schema, _ := json.Marshal(tool.InputSchema)
		if !strings.Contains(string(schema), `"type":"object"`) {
			t.Errorf("%s: input schema %s", name, schema)
		}
	}
	if len(list.Tools) != len(want) {
		t.Errorf("%d tools, want %d", len(list.Tools), len(want))
	}
}

func TestFiles(t *testing.T) {
	o := DefaultOptions()
	o.MaxOutputBytes = 1024
	cs, _ := connect(t, sandboxserver.UserToken, o)

	var written WriteFileOutput
	if res := call(t, cs, "write_file", map[string]any{"name": "sb", "path": "/work/hello.txt", "content": "hello\n"}, &written); res.IsError {
		t.Fatalf("write_file: %s", text(res))
	}
	if written.Bytes != 6 {
		t.Errorf("wrote %d bytes, want 6", written.Bytes)
	}
	var read ReadFileOutput
	if res := call(t, cs, "read_file", map[string]any{"name": "sb", "path": "/work/hello.txt"}, &read); res.IsError {
		t.Fatalf("read_file: %s", text(res))
	}
	if read.Content.Text != "hello\n" || read.Content.Binary || read.Content.Truncated {
		t.Errorf("read %+v, want the text whole", read.Content)
	}

	// Binary contents: marked, then whole in base64.
	if res := call(t, cs, "write_file", map[string]any{"name": "sb", "path": "/work/b.bin", "content": "AP/+AQ==", "encoding": "base64", "mode": "0600"}, nil); res.IsError {
		t.Fatalf("write_file base64: %s", text(res))
	}
	read = ReadFileOutput{}
	call(t, cs, "read_file", map[string]any{"name": "sb", "path": "/work/b.bin"}, &read)
	if !read.Content.Binary || read.Content.Text != "" || read.Base64 != "" {
		t.Errorf("binary file read as %+v", read)
	}
	read = ReadFileOutput{}
	call(t, cs, "read_file", map[string]any{"name": "sb", "path": "/work/b.bin", "encoding": "base64"}, &read)
	if read.Base64 != "AP/+AQ==" {
		t.Errorf("base64 %q, want AP/+AQ==", read.Base64)
	}

	// A file over the cap is cut with a note.
	big := strings.Repeat("x", 3000)
	call(t, cs, "write_file", map[string]any{"name": "sb", "path": "/work/big.txt", "content": big}, nil)
	read = ReadFileOutput{}
	call(t, cs, "read_file", map[string]any{"name": "sb", "path": "/work/big.txt"}, &read)
	if !read.Content.Truncated || len(read.Content.Text) != 1024 || read.Content.Note == "" {
		t.Errorf("big file: truncated %v, %d bytes, note %q", read.Content.Truncated, len(read.Content.Text), read.Content.Note)
	}

	var list ListFilesOutput
	if res := call(t, cs, "list_files", map[string]any{"name": "sb", "path": "/work"}, &list); res.IsError {
		t.Fatalf("list_files: %s", text(res))
	}
	var names []string
	for _, e := range list.Entries {
		names = append(names, e.Path)
	}
	if strings.Join(names, ",") != "b.bin,big.txt,hello.txt" {
		t.Errorf("listed %v", names)
	}

	if res := call(t, cs, "write_file", map[string]any{"name": "sb", "path": "/work/x", "content": "%%", "encoding": "base64"}, nil); !res.IsError {
		t.Error("bad base64 was written")
	}
	if res := call(t, cs, "write_file", map[string]any{"name": "sb", "path": "/work/x", "content": "x", "mode": "rwx"}, nil); !res.IsError {
		t.Error("a bad mode was accepted")
	}
}

func TestErrorsNameTheFailure(t *testing.T) {
	cs, _ := connect(t, sandboxserver.UserToken, DefaultOptions())
	res := call(t, cs, "read_file", map[string]any{"name": "ghost", "path": "/etc/hostname"}, nil)
	if !res.IsError || !strings.Contains(text(res), "NotFound") || !strings.Contains(text(res), "ghost") {
		t.Errorf("missing sandbox: error %v %q, want a NotFound naming it", res.IsError, text(res))
	}

	cs, _ = connect(t, "not-the-token", DefaultOptions())
	res = call(t, cs, "list_sandboxes", map[string]any{}, nil)
	if !res.IsError || !strings.Contains(text(res), "Unauthorized") {
		t.Errorf("bad credentials: error %v %q, want Unauthorized", res.IsError, text(res))
	}

	// Arguments that do not match the schema never reach the API.
	cs, srv := connect(t, sandboxserver.UserToken, DefaultOptions())
	srv.Requests()
	res = call(t, cs, "run_command", map[string]any{"name": "sb", "command": 42}, nil)
	if !res.IsError {
		t.Error("a command that is a number was accepted")
	}
	if reqs := srv.Requests(); len(reqs) != 0 {
		t.Errorf("bad arguments reached the API: %v", reqs)
	}
}

func TestCreateNeedsAPoolOrImage(t *testing.T) {
	cs, srv := connect(t, sandboxserver.UserToken, DefaultOptions())
	srv.Requests()
	res := call(t, cs, "create_sandbox", map[string]any{}, nil)
	if !res.IsError || !strings.Contains(text(res), "--pool") {
		t.Errorf("create without a pool: %q", text(res))
	}
	if reqs := srv.Requests(); len(reqs) != 0 {
		t.Errorf("requests sent: %v", reqs)
	}
}

func TestProcesses(t *testing.T) {
	cs, srv := connect(t, sandboxserver.UserToken, DefaultOptions())
	var p ProcessOutput
	if res := call(t, cs, "start_process", map[string]any{"name": "sb", "command": "python3 -m http.server 8000"}, &p); res.IsError {
		t.Fatalf("start_process: %s", text(res))
	}
	if p.ID == "" || strings.Join(p.Command, " ") != "sh -c python3 -m http.server 8000" {
		t.Errorf("started %+v", p)
	}
	srv.SetProcessLog("sb", 0, p.ID, strings.Repeat("line\n", 20000))
	var out ProcessLogOutput
	if res := call(t, cs, "read_process_output", map[string]any{"name": "sb", "id": p.ID}, &out); res.IsError {
		t.Fatalf("read_process_output: %s", text(res))
	}
	if out.Process.ID != p.ID || !out.Output.Truncated || !strings.HasSuffix(out.Output.Text, "line\n") || out.Output.Bytes != 100000 {
		t.Errorf("output: process %s, truncated %v, %d of %d bytes", out.Process.ID, out.Output.Truncated, len(out.Output.Text), out.Output.Bytes)
	}
	var list ProcessesOutput
	call(t, cs, "list_processes", map[string]any{"name": "sb"}, &list)
	if len(list.Processes) != 1 || list.Processes[0].ID != p.ID {
		t.Errorf("listed %+v", list.Processes)
	}
	var killed ProcessOutput
	if res := call(t, cs, "kill_process", map[string]any{"name": "sb", "id": p.ID, "signal": "KILL"}, &killed); res.IsError {
		t.Fatalf("kill_process: %s", text(res))
	}
}
