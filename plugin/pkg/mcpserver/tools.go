package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client/netpolicy"
)

// add registers every tool.
func (t *tools) add(s *mcp.Server) {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}
	mcp.AddTool(s, &mcp.Tool{Name: "create_sandbox", Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false), DestructiveHint: ptr(false)},
		Description: "Create an isolated Linux sandbox and wait until it is ready. With no pool or image it comes from the server's default warm pool in milliseconds. It expires by itself (timeout_seconds, or the server's default); outbound network access follows its pool's policy unless allow is given."},
		t.createSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "list_sandboxes", Annotations: readOnly,
		Description: "List the sandboxes made by this server (all: every sandbox of the namespace), with their phase and expiry."},
		t.listSandboxes)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_sandbox", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
		Description: "Delete a sandbox and everything in it. Deleting one that is gone already succeeds."},
		t.deleteSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "renew_sandbox", Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(false)},
		Description: "Keep a sandbox alive longer: move its expiry to at least seconds from now (it never moves back)."},
		t.renewSandbox)
	mcp.AddTool(s, &mcp.Tool{Name: "run_command", Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false)},
		Description: "Run a shell command in a sandbox and wait for it to end; returns its exit code, stdout and stderr (long output is cut with a note, binary output is marked, not shown). For servers and other long-running commands use start_process."},
		t.runCommand)
	mcp.AddTool(s, &mcp.Tool{Name: "start_process", Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false)},
		Description: "Start a shell command in the background of a sandbox (a web server, a long job) and return its ID at once. Read its output with read_process_output, stop it with kill_process."},
		t.startProcess)
	mcp.AddTool(s, &mcp.Tool{Name: "list_processes", Annotations: readOnly,
		Description: "List a sandbox's background processes: running, or exited with their exit code."},
		t.listProcesses)
	mcp.AddTool(s, &mcp.Tool{Name: "read_process_output", Annotations: readOnly,
		Description: "Read a background process's state and its latest output (stdout and stderr interleaved; the end is kept when it is long)."},
		t.readProcessOutput)
	mcp.AddTool(s, &mcp.Tool{Name: "kill_process", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
		Description: "Send a signal (TERM by default; KILL, INT, HUP...) to a background process and its children."},
		t.killProcess)
	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Annotations: readOnly,
		Description: "Read a file of a sandbox. Text comes back as text; other contents are marked binary unless encoding is base64."},
		t.readFile)
	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(false)},
		Description: "Write a file in a sandbox (replacing it whole), creating missing directories. content is text, or base64 with encoding base64."},
		t.writeFile)
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Annotations: readOnly,
		Description: "List a directory of a sandbox: each entry's path, type, size, mode and modification time."},
		t.listFiles)
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false)},
		Description: "Run Python code in a sandbox's code context, a Jupyter kernel that keeps variables, imports and the working directory between runs, like a notebook. Returns stdout, stderr, the last expression's value, an exception with its traceback, and plots as images."},
		t.runCode)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_stats", Annotations: readOnly,
		Description: "Show what a sandbox uses, a line per replica: CPU in cores, memory working set and limit, disk written, network bytes in and out, processes, OOM kills and refused connections, read on its node about every 10 seconds (under gVisor, including the sandbox's kernel). Without a name, every sandbox of the namespace. A replica without figures says why (no pod now, its node did not answer, not read yet)."},
		t.sandboxStats)
	mcp.AddTool(s, &mcp.Tool{Name: "show_network", Annotations: readOnly,
		Description: "Show a sandbox's outbound network policy: its default action, its rules in order, and whether its node enforces it."},
		t.showNetwork)
	mcp.AddTool(s, &mcp.Tool{Name: "allow_egress", Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: ptr(false)},
		Description: "Allow a sandbox to reach more destinations, and wait until its node enforces it. Targets: a DNS name (example.com), a wildcard for subdomains (*.example.org), an IP or CIDR; :PORT or :LOW-HIGH limits the ports (TCP unless /UDP follows), as in example.com:443."},
		t.allowEgress)
}

// --- sandboxes -----------------------------------------------------------------------------

// NameInput names a sandbox.
type NameInput struct {
	Name string `json:"name" jsonschema:"the sandbox's name"`
}

// SandboxOutput is a sandbox as tools return it.
type SandboxOutput struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Phase     string `json:"phase"`
	Ready     bool   `json:"ready"`
	Pool      string `json:"pool,omitempty"`
	Image     string `json:"image,omitempty"`
	// ExpiresAt is RFC 3339; empty when it never expires.
	ExpiresAt string `json:"expiresAt,omitempty"`
	// Message says why it is not ready, when it is not.
	Message string `json:"message,omitempty"`
	// MadeHere: this server made it.
	MadeHere bool `json:"madeHere"`
}

func sandboxOutput(sb *sandboxv1alpha1.Sandbox) SandboxOutput {
	out := SandboxOutput{
		Name: sb.Name, Namespace: sb.Namespace, Phase: string(sandboxclient.Phase(sb)),
		Ready:    meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1alpha1.ConditionReady),
		MadeHere: sb.Labels[CreatedByLabel] == CreatedByValue,
	}
	if sb.Spec.PoolRef != nil {
		out.Pool = sb.Spec.PoolRef.Name
	}
	if sb.Spec.Template != nil && len(sb.Spec.Template.Spec.Containers) > 0 {
		out.Image = sb.Spec.Template.Spec.Containers[0].Image
	}
	if sb.Status.ExpiresAt != nil {
		out.ExpiresAt = sb.Status.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if !out.Ready {
		out.Message = sandboxclient.DescribeNotReady(sb)
	}
	return out
}

// CreateInput describes a sandbox to make.
type CreateInput struct {
	Pool           string            `json:"pool,omitempty" jsonschema:"the warm pool to take the sandbox from; the server's default pool when neither pool nor image is given"`
	Image          string            `json:"image,omitempty" jsonschema:"a container image to run the sandbox from instead of a pool (slower: a pod of its own)"`
	TimeoutSeconds int64             `json:"timeout_seconds,omitempty" jsonschema:"lifetime in seconds (at least 60); the server's default when 0"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for everything the sandbox runs"`
	Allow          []string          `json:"allow,omitempty" jsonschema:"outbound destinations to allow, denying all others: DNS names, *.wildcards, IPs or CIDRs, each with an optional :PORT"`
	Name           string            `json:"name,omitempty" jsonschema:"the sandbox's name; a generated one when empty"`
}

func (t *tools) createSandbox(ctx context.Context, _ *mcp.CallToolRequest, in CreateInput) (*mcp.CallToolResult, SandboxOutput, error) {
	o := sandboxclient.CreateOptions{
		Name: in.Name, GenerateName: "mcp-",
		Labels: map[string]string{CreatedByLabel: CreatedByValue},
		Pool:   in.Pool, Image: in.Image,
		Timeout: time.Duration(in.TimeoutSeconds) * time.Second,
		Allow:   in.Allow,
		Wait:    true,
	}
	if o.Pool == "" && o.Image == "" {
		if t.o.Pool == "" {
			return nil, SandboxOutput{}, fmt.Errorf("create_sandbox: give a pool or an image: this server has no default pool (kubectl sandbox mcp --pool)")
		}
		o.Pool = t.o.Pool
	}
	if o.Timeout == 0 {
		o.Timeout = t.o.Timeout
	}
	names := make([]string, 0, len(in.Env))
	for k := range in.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		o.Env = append(o.Env, corev1.EnvVar{Name: k, Value: in.Env[k]})
	}
	sb, err := t.c.Create(ctx, o)
	if err != nil {
		if sb != nil && sb.Name != "" {
			// Made, but not ready: say which, so that the agent can delete it.
			return nil, SandboxOutput{}, toolError(fmt.Sprintf("create_sandbox: sandbox %q was created but is not ready", sb.Name), err)
		}
		return nil, SandboxOutput{}, toolError("create_sandbox", err)
	}
	return nil, sandboxOutput(sb), nil
}

// ListInput selects sandboxes.
type ListInput struct {
	All bool `json:"all,omitempty" jsonschema:"list every sandbox of the namespace, not only those made by this server"`
}

// ListOutput is the sandboxes listed.
type ListOutput struct {
	Sandboxes []SandboxOutput `json:"sandboxes"`
}

func (t *tools) listSandboxes(ctx context.Context, _ *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, ListOutput, error) {
	opts := metav1.ListOptions{}
	if !in.All {
		opts.LabelSelector = labels.Set{CreatedByLabel: CreatedByValue}.String()
	}
	list, err := t.c.List(ctx, opts)
	if err != nil {
		return nil, ListOutput{}, toolError("list_sandboxes", err)
	}
	out := ListOutput{Sandboxes: []SandboxOutput{}}
	for i := range list.Items {
		out.Sandboxes = append(out.Sandboxes, sandboxOutput(&list.Items[i]))
	}
	return nil, out, nil
}

// DeleteOutput says what delete did.
type DeleteOutput struct {
	Deleted string `json:"deleted"`
}

func (t *tools) deleteSandbox(ctx context.Context, _ *mcp.CallToolRequest, in NameInput) (*mcp.CallToolResult, DeleteOutput, error) {
	if err := t.c.Delete(ctx, in.Name); err != nil {
		return nil, DeleteOutput{}, toolError("delete_sandbox", err)
	}
	return nil, DeleteOutput{Deleted: in.Name}, nil
}

// RenewInput extends a sandbox's life.
type RenewInput struct {
	Name    string `json:"name" jsonschema:"the sandbox's name"`
	Seconds int64  `json:"seconds" jsonschema:"how long from now it should live at least, in seconds (at least 60)"`
}

func (t *tools) renewSandbox(ctx context.Context, _ *mcp.CallToolRequest, in RenewInput) (*mcp.CallToolResult, SandboxOutput, error) {
	sb, err := t.c.Renew(ctx, in.Name, sandboxclient.RenewOptions{Extend: time.Duration(in.Seconds) * time.Second})
	if err != nil {
		return nil, SandboxOutput{}, toolError("renew_sandbox", err)
	}
	return nil, sandboxOutput(sb), nil
}

// --- commands and processes -----------------------------------------------------------------

// RunInput is a command to run to its end.
type RunInput struct {
	Name           string            `json:"name" jsonschema:"the sandbox's name"`
	Command        string            `json:"command" jsonschema:"a shell command line, run with sh -c"`
	TimeoutSeconds int64             `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds; the server's default when 0"`
	Workdir        string            `json:"workdir,omitempty" jsonschema:"absolute directory to run in"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for this command"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text for the command's standard input"`
}

// RunOutput is how a command ended and what it printed.
type RunOutput struct {
	ExitCode int    `json:"exit_code"`
	Stdout   Output `json:"stdout"`
	Stderr   Output `json:"stderr"`
}

func (t *tools) runCommand(ctx context.Context, _ *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, RunOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, RunOutput{}, fmt.Errorf("run_command: command is empty")
	}
	timeout := time.Duration(in.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = t.o.CommandTimeout
	}
	o := sandboxclient.ExecOptions{
		Command:    []string{"sh", "-c", in.Command},
		Env:        envList(in.Env),
		WorkingDir: in.Workdir,
		Timeout:    timeout.Round(time.Second),
	}
	if in.Stdin != "" {
		o.Stdin = strings.NewReader(in.Stdin)
	}
	res, err := t.c.RunWith(ctx, in.Name, o)
	if err != nil {
		return nil, RunOutput{}, toolError("run_command", err)
	}
	return nil, RunOutput{
		ExitCode: res.ExitCode,
		Stdout:   clip(res.Stdout, t.o.MaxOutputBytes, false),
		Stderr:   clip(res.Stderr, t.o.MaxOutputBytes, false),
	}, nil
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// StartInput is a command to start in the background.
type StartInput struct {
	Name    string            `json:"name" jsonschema:"the sandbox's name"`
	Command string            `json:"command" jsonschema:"a shell command line, run with sh -c"`
	Workdir string            `json:"workdir,omitempty" jsonschema:"absolute directory to run in"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"environment variables for this process"`
}

// ProcessOutput is a background process.
type ProcessOutput struct {
	ID       string   `json:"id"`
	Command  []string `json:"command"`
	Phase    string   `json:"phase"`
	ExitCode *int32   `json:"exit_code,omitempty"`
	Signal   string   `json:"signal,omitempty"`
}

func processOutput(p *sandboxv1alpha1.SandboxProcess) ProcessOutput {
	return ProcessOutput{ID: p.Name, Command: append(append([]string{}, p.Spec.Command...), p.Spec.Args...),
		Phase: string(p.Status.Phase), ExitCode: p.Status.ExitCode, Signal: p.Status.Signal}
}

func (t *tools) startProcess(ctx context.Context, _ *mcp.CallToolRequest, in StartInput) (*mcp.CallToolResult, ProcessOutput, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, ProcessOutput{}, fmt.Errorf("start_process: command is empty")
	}
	spec := sandboxv1alpha1.SandboxProcessSpec{Command: []string{"sh", "-c", in.Command}, WorkingDir: in.Workdir}
	for _, kv := range envList(in.Env) {
		k, v, _ := strings.Cut(kv, "=")
		spec.Env = append(spec.Env, sandboxv1alpha1.SandboxProcessEnvVar{Name: k, Value: v})
	}
	p, err := t.c.StartProcess(ctx, in.Name, spec)
	if err != nil {
		return nil, ProcessOutput{}, toolError("start_process", err)
	}
	return nil, processOutput(p), nil
}

// ProcessesOutput lists processes.
type ProcessesOutput struct {
	Processes []ProcessOutput `json:"processes"`
}

func (t *tools) listProcesses(ctx context.Context, _ *mcp.CallToolRequest, in NameInput) (*mcp.CallToolResult, ProcessesOutput, error) {
	list, err := t.c.ListProcesses(ctx, in.Name, nil)
	if err != nil {
		return nil, ProcessesOutput{}, toolError("list_processes", err)
	}
	out := ProcessesOutput{Processes: []ProcessOutput{}}
	for i := range list.Items {
		out.Processes = append(out.Processes, processOutput(&list.Items[i]))
	}
	return nil, out, nil
}

// ProcessInput names a process of a sandbox.
type ProcessInput struct {
	Name string `json:"name" jsonschema:"the sandbox's name"`
	ID   string `json:"id" jsonschema:"the process's ID, as start_process returned it"`
}

// ProcessLogOutput is a process and its latest output.
type ProcessLogOutput struct {
	Process ProcessOutput `json:"process"`
	Output  Output        `json:"output"`
}

func (t *tools) readProcessOutput(ctx context.Context, _ *mcp.CallToolRequest, in ProcessInput) (*mcp.CallToolResult, ProcessLogOutput, error) {
	p, err := t.c.GetProcess(ctx, in.Name, 0, in.ID)
	if err != nil {
		return nil, ProcessLogOutput{}, toolError("read_process_output", err)
	}
	log, err := t.c.ProcessLog(ctx, in.Name, 0, in.ID, 0)
	if err != nil {
		return nil, ProcessLogOutput{}, toolError("read_process_output", err)
	}
	return nil, ProcessLogOutput{Process: processOutput(p), Output: clip(log, t.o.MaxOutputBytes, true)}, nil
}

// KillInput signals a process.
type KillInput struct {
	Name   string `json:"name" jsonschema:"the sandbox's name"`
	ID     string `json:"id" jsonschema:"the process's ID"`
	Signal string `json:"signal,omitempty" jsonschema:"the signal's name: TERM (the default), KILL, INT, HUP..."`
}

func (t *tools) killProcess(ctx context.Context, _ *mcp.CallToolRequest, in KillInput) (*mcp.CallToolResult, ProcessOutput, error) {
	p, err := t.c.SignalProcess(ctx, in.Name, 0, in.ID, sandboxv1alpha1.SandboxProcessSignal{Signal: in.Signal})
	if err != nil {
		return nil, ProcessOutput{}, toolError("kill_process", err)
	}
	return nil, processOutput(p), nil
}

// --- files ---------------------------------------------------------------------------------

// ReadFileInput names a file.
type ReadFileInput struct {
	Name     string `json:"name" jsonschema:"the sandbox's name"`
	Path     string `json:"path" jsonschema:"the file's absolute path in the sandbox"`
	Encoding string `json:"encoding,omitempty" jsonschema:"text (the default: binary contents are marked, not shown) or base64"`
}

// ReadFileOutput is a file's contents.
type ReadFileOutput struct {
	Path    string `json:"path"`
	Content Output `json:"content"`
	// Base64 is the contents (up to the cap) with encoding base64.
	Base64 string `json:"base64,omitempty"`
}

func (t *tools) readFile(ctx context.Context, _ *mcp.CallToolRequest, in ReadFileInput) (*mcp.CallToolResult, ReadFileOutput, error) {
	if in.Encoding != "" && in.Encoding != "text" && in.Encoding != "base64" {
		return nil, ReadFileOutput{}, fmt.Errorf("read_file: encoding must be text or base64, not %q", in.Encoding)
	}
	data, truncated, err := t.c.Files(in.Name).ReadFile(ctx, in.Path, int64(t.o.MaxOutputBytes))
	if err != nil {
		return nil, ReadFileOutput{}, toolError("read_file", err)
	}
	out := ReadFileOutput{Path: in.Path}
	if in.Encoding == "base64" {
		out.Base64 = base64.StdEncoding.EncodeToString(data)
		out.Content = Output{Bytes: len(data), Truncated: truncated, Binary: true, Note: "the contents are in base64"}
		if truncated {
			out.Content.Note = fmt.Sprintf("the first %d bytes of the file are in base64; the rest was cut", len(data))
		}
		return nil, out, nil
	}
	out.Content = clip(data, t.o.MaxOutputBytes, false)
	if truncated {
		out.Content.Truncated = true
		out.Content.Note = fmt.Sprintf("file truncated: its first %d bytes are shown", len(out.Content.Text))
	}
	return nil, out, nil
}

// WriteFileInput is a file to write.
type WriteFileInput struct {
	Name     string `json:"name" jsonschema:"the sandbox's name"`
	Path     string `json:"path" jsonschema:"the file's absolute path in the sandbox"`
	Content  string `json:"content" jsonschema:"the contents: text, or base64 with encoding base64"`
	Encoding string `json:"encoding,omitempty" jsonschema:"text (the default) or base64"`
	Mode     string `json:"mode,omitempty" jsonschema:"permission bits in octal, like 0755; 0644 by default"`
}

// WriteFileOutput says what was written.
type WriteFileOutput struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

func (t *tools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in WriteFileInput) (*mcp.CallToolResult, WriteFileOutput, error) {
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, WriteFileOutput{}, fmt.Errorf("write_file: content is not base64: %v", err)
		}
	default:
		return nil, WriteFileOutput{}, fmt.Errorf("write_file: encoding must be text or base64, not %q", in.Encoding)
	}
	var mode fs.FileMode
	if in.Mode != "" {
		m, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || m > 0o7777 {
			return nil, WriteFileOutput{}, fmt.Errorf("write_file: mode must be octal permission bits like 0644, not %q", in.Mode)
		}
		mode = fs.FileMode(m)
	}
	if err := t.c.Files(in.Name).WriteFile(ctx, in.Path, data, mode); err != nil {
		return nil, WriteFileOutput{}, toolError("write_file", err)
	}
	return nil, WriteFileOutput{Path: in.Path, Bytes: len(data)}, nil
}

// ListFilesInput names a directory.
type ListFilesInput struct {
	Name  string `json:"name" jsonschema:"the sandbox's name"`
	Path  string `json:"path" jsonschema:"the directory's absolute path in the sandbox"`
	Depth int    `json:"depth,omitempty" jsonschema:"how many levels to list (1, the default: the directory's own entries)"`
}

// FileOutput is a directory entry.
type FileOutput struct {
	Path    string `json:"path"`
	Type    string `json:"type"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode"`
	ModTime string `json:"modTime,omitempty"`
}

// ListFilesOutput is a directory's entries.
type ListFilesOutput struct {
	Entries   []FileOutput `json:"entries"`
	Truncated bool         `json:"truncated,omitempty"`
}

// maxEntries caps a listing.
const maxEntries = 1000

func (t *tools) listFiles(ctx context.Context, _ *mcp.CallToolRequest, in ListFilesInput) (*mcp.CallToolResult, ListFilesOutput, error) {
	depth := max(in.Depth, 1)
	out := ListFilesOutput{Entries: []FileOutput{}}
	errFull := fmt.Errorf("full")
	err := t.c.Files(in.Name).List(ctx, in.Path, depth, 0, func(f *sandboxv1alpha1.SandboxFile) error {
		if len(out.Entries) == maxEntries {
			out.Truncated = true
			return errFull
		}
		e := FileOutput{Path: f.Path, Type: string(f.Type), Size: f.Size, Mode: f.Mode}
		if !f.ModTime.IsZero() {
			e.ModTime = f.ModTime.UTC().Format(time.RFC3339)
		}
		out.Entries = append(out.Entries, e)
		return nil
	})
	if err != nil && err != errFull {
		return nil, ListFilesOutput{}, toolError("list_files", err)
	}
	return nil, out, nil
}

// --- code ----------------------------------------------------------------------------------

// RunCodeInput is code to run in a context.
type RunCodeInput struct {
	Name           string `json:"name" jsonschema:"the sandbox's name"`
	Code           string `json:"code" jsonschema:"Python source to run"`
	Context        string `json:"context,omitempty" jsonschema:"the code context to run in (made on first use); default when empty"`
	TimeoutSeconds int64  `json:"timeout_seconds,omitempty" jsonschema:"interrupt the run after this many seconds; the context keeps its state"`
}

// CodeError is an exception the code raised.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback,omitempty"`
}

// RunCodeOutput is what a run made. Images (plots) come as image content beside it.
type RunCodeOutput struct {
	Stdout Output     `json:"stdout"`
	Stderr Output     `json:"stderr"`
	Result string     `json:"result,omitempty"`
	Error  *CodeError `json:"error,omitempty"`
	// Status is ok, error or aborted; Reason says why a run was aborted.
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Images int    `json:"images,omitempty"`
}

func (t *tools) runCode(ctx context.Context, _ *mcp.CallToolRequest, in RunCodeInput) (*mcp.CallToolResult, RunCodeOutput, error) {
	exec, err := t.c.RunCode(ctx, in.Name, sandboxclient.RunCodeOptions{
		Code: in.Code, Context: in.Context, Timeout: time.Duration(in.TimeoutSeconds) * time.Second,
	})
	if err != nil {
		return nil, RunCodeOutput{}, toolError("run_code", err)
	}
	out := RunCodeOutput{
		Stdout: clip([]byte(exec.Stdout), t.o.MaxOutputBytes, false),
		Stderr: clip([]byte(exec.Stderr), t.o.MaxOutputBytes, false),
		Result: exec.Text(),
	}
	if exec.End != nil {
		out.Status, out.Reason = exec.End.Status, exec.End.Reason
	}
	if e := exec.Error; e != nil {
		out.Error = &CodeError{Name: e.Name, Value: e.Value, Traceback: strings.Join(e.Traceback, "\n")}
	}
	var images []mcp.Content
	for _, r := range exec.Results {
		for _, mime := range []string{"image/png", "image/jpeg"} {
			if b64, ok := r.Data[mime]; ok {
				data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
				if err == nil && len(data) <= 4<<20 {
					images = append(images, &mcp.ImageContent{Data: data, MIMEType: mime})
				}
				break
			}
		}
	}
	out.Images = len(images)
	if len(images) == 0 {
		return nil, out, nil
	}
	text, err := json.Marshal(out)
	if err != nil {
		return nil, RunCodeOutput{}, err
	}
	return &mcp.CallToolResult{Content: append([]mcp.Content{&mcp.TextContent{Text: string(text)}}, images...)}, out, nil
}

// --- usage ---------------------------------------------------------------------------------

// StatsInput names a sandbox, or none for every sandbox of the namespace.
type StatsInput struct {
	Name string `json:"name,omitempty" jsonschema:"the sandbox's name; without it, every sandbox of the namespace"`
}

// ReplicaStatsOutput is what a replica uses. A figure the node could not give is left out,
// and Reason and Message say why.
type ReplicaStatsOutput struct {
	Sandbox string `json:"sandbox"`
	Replica int32  `json:"replica"`
	Node    string `json:"node,omitempty"`
	// CPUCores is the rate over the last window between two reads (0.5: half a core).
	CPUCores *float64 `json:"cpuCores,omitempty"`
	// MemoryBytes is the working set, by which the kernel OOM-kills; MemoryLimitBytes the
	// pod's limit, absent without one.
	MemoryBytes      *int64 `json:"memoryBytes,omitempty"`
	MemoryLimitBytes *int64 `json:"memoryLimitBytes,omitempty"`
	OOMKills         *int64 `json:"oomKills,omitempty"`
	// DiskBytes is what it wrote to its root filesystem and disk-backed emptyDir volumes.
	DiskBytes         *int64 `json:"diskBytes,omitempty"`
	NetInBytes        *int64 `json:"netInBytes,omitempty"`
	NetOutBytes       *int64 `json:"netOutBytes,omitempty"`
	ConnectionsDenied *int64 `json:"connectionsDenied,omitempty"`
	Processes         *int64 `json:"processes,omitempty"`
	Reason            string `json:"reason,omitempty"`
	Message           string `json:"message,omitempty"`
	// ReadAt is when the node read the figures, RFC 3339.
	ReadAt string `json:"readAt,omitempty"`
}

// StatsOutput is the replicas of the sandboxes asked for.
type StatsOutput struct {
	Replicas []ReplicaStatsOutput `json:"replicas"`
}

func replicaStatsOutput(sandbox string, rs *sandboxv1alpha1.SandboxReplicaStats) ReplicaStatsOutput {
	out := ReplicaStatsOutput{Sandbox: sandbox, Replica: rs.Replica, Node: rs.Node, Reason: rs.Reason, Message: rs.Message}
	if !rs.Timestamp.IsZero() {
		out.ReadAt = rs.Timestamp.UTC().Format(time.RFC3339)
	}
	// A pod read once has no window yet, so no rate: its usageNanoCores means nothing.
	if rs.CPU != nil && rs.Window.Duration > 0 {
		out.CPUCores = ptr(float64(rs.CPU.UsageNanoCores) / 1e9)
	}
	if m := rs.Memory; m != nil {
		out.MemoryBytes, out.OOMKills = ptr(m.WorkingSetBytes), ptr(m.OOMKills)
		if m.LimitBytes > 0 {
			out.MemoryLimitBytes = ptr(m.LimitBytes)
		}
	}
	if d := rs.Disk; d != nil {
		out.DiskBytes = ptr(d.WritableLayerBytes + d.EmptyDirBytes)
	}
	if n := rs.Network; n != nil {
		out.NetInBytes, out.NetOutBytes, out.ConnectionsDenied = ptr(n.RxBytes), ptr(n.TxBytes), ptr(n.ConnectionsDenied)
	}
	out.Processes = rs.Processes
	return out
}

// statsLine is a replica's figures in a line an agent reads at a glance:
// "web/0: cpu 0.998 cores, memory 203.0 MiB of 512.0 MiB, disk 12.0 MiB, net in 1.5 MiB out 300.0 KiB, 14 processes".
func statsLine(r ReplicaStatsOutput) string {
	var parts []string
	if r.CPUCores != nil {
		parts = append(parts, fmt.Sprintf("cpu %.3f cores", *r.CPUCores))
	}
	if r.MemoryBytes != nil {
		mem := "memory " + humanBytes(*r.MemoryBytes)
		if r.MemoryLimitBytes != nil {
			mem += " of " + humanBytes(*r.MemoryLimitBytes)
		}
		parts = append(parts, mem)
	}
	if r.DiskBytes != nil {
		parts = append(parts, "disk "+humanBytes(*r.DiskBytes))
	}
	if r.NetInBytes != nil && r.NetOutBytes != nil {
		parts = append(parts, fmt.Sprintf("net in %s out %s", humanBytes(*r.NetInBytes), humanBytes(*r.NetOutBytes)))
	}
	if r.Processes != nil {
		parts = append(parts, fmt.Sprintf("%d processes", *r.Processes))
	}
	// Only when they happened: they are what an agent must act on.
	if r.OOMKills != nil && *r.OOMKills > 0 {
		parts = append(parts, fmt.Sprintf("%d OOM kills", *r.OOMKills))
	}
	if r.ConnectionsDenied != nil && *r.ConnectionsDenied > 0 {
		parts = append(parts, fmt.Sprintf("%d connections denied", *r.ConnectionsDenied))
	}
	line := fmt.Sprintf("%s/%d: ", r.Sandbox, r.Replica)
	if len(parts) == 0 {
		line += "no figures"
	} else {
		line += strings.Join(parts, ", ")
	}
	if r.Reason != "" {
		why := r.Reason
		if r.Message != "" {
			why += ": " + r.Message
		}
		line += " (" + why + ")"
	}
	return line
}

// humanBytes is n in B, KiB, MiB or GiB, with one decimal above a KiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	value, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if value < unit {
			break
		}
		value, suffix = value/unit, s
	}
	return fmt.Sprintf("%.1f %s", value, suffix)
}

func (t *tools) sandboxStats(ctx context.Context, _ *mcp.CallToolRequest, in StatsInput) (*mcp.CallToolResult, StatsOutput, error) {
	var items []sandboxv1alpha1.SandboxStats
	if in.Name != "" {
		s, err := t.c.Stats(ctx, in.Name)
		if err != nil {
			return nil, StatsOutput{}, toolError("sandbox_stats", err)
		}
		items = []sandboxv1alpha1.SandboxStats{*s}
	} else {
		list, err := t.c.ListStats(ctx, sandboxclient.ListStatsOptions{})
		if err != nil {
			return nil, StatsOutput{}, toolError("sandbox_stats", err)
		}
		items = list.Items
	}
	out := StatsOutput{Replicas: []ReplicaStatsOutput{}}
	var lines []string
	for i := range items {
		for j := range items[i].Replicas {
			r := replicaStatsOutput(items[i].Name, &items[i].Replicas[j])
			out.Replicas = append(out.Replicas, r)
			lines = append(lines, statsLine(r))
		}
	}
	switch {
	case len(lines) > 0:
	case in.Name != "":
		lines = append(lines, fmt.Sprintf("sandbox %s has no replicas", in.Name))
	default:
		lines = append(lines, fmt.Sprintf("no sandboxes in namespace %s", t.c.Namespace()))
	}
	// The text is the lines, shorter for a model to read than the JSON, which is the
	// structured content.
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(lines, "\n")}}}, out, nil
}

// --- egress --------------------------------------------------------------------------------

// NetworkOutput is a sandbox's egress policy.
type NetworkOutput struct {
	// Own: the sandbox has a policy of its own; otherwise its pool's or the platform's applies.
	Own           bool     `json:"own"`
	DefaultAction string   `json:"defaultAction,omitempty"`
	Rules         []string `json:"rules"`
	Summary       string   `json:"summary"`
	// Enforced: the sandbox's nodes enforce its current policy (EgressReady).
	Enforced bool   `json:"enforced"`
	Message  string `json:"message,omitempty"`
}

func networkOutput(sb *sandboxv1alpha1.Sandbox) NetworkOutput {
	p := sb.Spec.NetworkPolicy
	out := NetworkOutput{Own: p != nil, Rules: []string{}, Summary: netpolicy.Summary(p)}
	if p != nil {
		out.DefaultAction = netpolicy.DefaultAction(p)
		for _, r := range p.Egress {
			out.Rules = append(out.Rules, netpolicy.FormatRule(r))
		}
	}
	if c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1alpha1.ConditionEgressReady); c != nil {
		out.Enforced = c.Status == metav1.ConditionTrue && sandboxclient.ObservedGeneration(sb, c) >= sb.Generation
		out.Message = strings.TrimPrefix(sandboxclient.NotInForceReason(sb, sb.Generation), ": ")
	}
	return out
}

func (t *tools) showNetwork(ctx context.Context, _ *mcp.CallToolRequest, in NameInput) (*mcp.CallToolResult, NetworkOutput, error) {
	_, sb, err := t.c.NetworkPolicy(ctx, in.Name)
	if err != nil {
		return nil, NetworkOutput{}, toolError("show_network", err)
	}
	return nil, networkOutput(sb), nil
}

// AllowInput adds egress targets.
type AllowInput struct {
	Name    string   `json:"name" jsonschema:"the sandbox's name"`
	Targets []string `json:"targets" jsonschema:"destinations to allow: example.com, *.example.org:443, 10.0.0.0/8, [2001:db8::1]:443"`
}

func (t *tools) allowEgress(ctx context.Context, _ *mcp.CallToolRequest, in AllowInput) (*mcp.CallToolResult, NetworkOutput, error) {
	if len(in.Targets) == 0 {
		return nil, NetworkOutput{}, fmt.Errorf("allow_egress: give at least one target")
	}
	sb, err := t.c.Allow(ctx, in.Name, in.Targets...)
	if err != nil {
		return nil, NetworkOutput{}, toolError("allow_egress", err)
	}
	return nil, networkOutput(sb), nil
}
