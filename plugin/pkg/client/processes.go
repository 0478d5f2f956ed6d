package client

import (
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
)

// StartProcess starts a process that outlives the call (spec.command, args, env, tty, stdin,
// timeoutSeconds, replica) and returns it with its ID as its name, at once.
func (c *Client) StartProcess(ctx context.Context, name string, spec sandboxv1alpha1.SandboxProcessSpec) (*sandboxv1alpha1.SandboxProcess, error) {
	out := &sandboxv1alpha1.SandboxProcess{}
	err := c.subresource("POST", name, "processes").
		Body(&sandboxv1alpha1.SandboxProcess{Spec: spec}).
		Do(ctx).Into(out)
	return out, wrap(err)
}

// ListProcesses lists the processes of every replica of the sandbox, or of one when replica
// is not nil.
func (c *Client) ListProcesses(ctx context.Context, name string, replica *int32) (*sandboxv1alpha1.SandboxProcessList, error) {
	out := &sandboxv1alpha1.SandboxProcessList{}
	err := withReplica(c.subresource("GET", name, "processes"), replica).Do(ctx).Into(out)
	return out, wrap(err)
}

// GetProcess reads process id of a replica: Running, or Exited with its exit code or signal, or
// Lost.
func (c *Client) GetProcess(ctx context.Context, name string, replica int32, id string) (*sandboxv1alpha1.SandboxProcess, error) {
	out := &sandboxv1alpha1.SandboxProcess{}
	err := withReplica(c.subresource("GET", name, "processes", id), nonZero(replica)).Do(ctx).Into(out)
	return out, wrap(err)
}

// SignalProcess sends a signal ("TERM" when empty, "KILL", "INT"...) to the process's group;
// with gracePeriodSeconds, KILL follows that much later if it still runs.
func (c *Client) SignalProcess(ctx context.Context, name string, replica int32, id string, sig sandboxv1alpha1.SandboxProcessSignal) (*sandboxv1alpha1.SandboxProcess, error) {
	out := &sandboxv1alpha1.SandboxProcess{}
	err := withReplica(c.subresource("POST", name, "processes", id, "signal"), nonZero(replica)).
		Body(&sig).Do(ctx).Into(out)
	return out, wrap(err)
}

// Log opens the log of a task or, with opts.Process, of a process (follow, tail, offset,
// limit). The caller closes it.
func (c *Client) Log(ctx context.Context, name string, opts sandboxv1alpha1.SandboxLogOptions) (io.ReadCloser, error) {
	body, err := c.subresource("GET", name, "log").
		VersionedParams(&opts, scheme.ParameterCodec).
		Stream(ctx)
	return body, wrap(err)
}

// ProcessLog returns up to limit bytes (all that is kept when limit is 0) of a process's output.
func (c *Client) ProcessLog(ctx context.Context, name string, replica int32, id string, limit int64) ([]byte, error) {
	opts := sandboxv1alpha1.SandboxLogOptions{Replica: replica, Process: id}
	if limit > 0 {
		opts.LimitBytes = &limit
	}
	body, err := c.Log(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	data, err := io.ReadAll(body)
	if err != nil {
		return data, fmt.Errorf("read the log of process %s: %w", id, err)
	}
	return data, nil
}

// AttachOptions join a running process: its output from now on (a terminal's last screen
// first) to Stdout and Stderr, Stdin to its input. A nil stream is not opened.
type AttachOptions struct {
	Process        string
	Replica        int32
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	TerminalSizes  remotecommand.TerminalSizeQueue
}

// Attach streams until the process ends or ctx does; leaving does not stop the process.
func (c *Client) Attach(ctx context.Context, name string, o AttachOptions) error {
	stderr := o.Stderr
	if o.TTY {
		stderr = nil
	}
	u := c.subresource("POST", name, "attach").
		VersionedParams(&sandboxv1alpha1.SandboxAttachOptions{
			Process: o.Process,
			Replica: o.Replica,
			Stdin:   o.Stdin != nil,
			Stdout:  o.Stdout != nil,
			Stderr:  stderr != nil,
			TTY:     o.TTY,
		}, scheme.ParameterCodec).URL()
	return wrap(c.executor.ExecuteWithContext(ctx, u, c.config, o.Stdin, o.Stdout, stderr, o.TTY, o.TerminalSizes))
}

// ProcessCommand is the spec of a process running command, split into command and args as the
// API keeps them; a single string runs under sh -c.
func ProcessCommand(command ...string) sandboxv1alpha1.SandboxProcessSpec {
	if len(command) == 1 && strings.ContainsAny(command[0], " \t\n|&;<>()$`\"'*?") {
		return sandboxv1alpha1.SandboxProcessSpec{Command: []string{"sh", "-c", command[0]}}
	}
	return sandboxv1alpha1.SandboxProcessSpec{Command: command}
}

// withReplica adds ?replica= when replica is set.
func withReplica(req *rest.Request, replica *int32) *rest.Request {
	if replica == nil {
		return req
	}
	return req.VersionedParams(&sandboxv1alpha1.SandboxProcessOptions{Replica: replica}, scheme.ParameterCodec)
}

// nonZero is a pointer to replica, nil for 0 (the server's default).
func nonZero(replica int32) *int32 {
	if replica == 0 {
		return nil
	}
	return &replica
}
