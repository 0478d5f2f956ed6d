// Package attach implements `kubectl sandbox attach`.
package attach

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/remotecommand"

	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/term"
)

var (
	attachLong = cmdutil.LongDesc(`
		Attach to a running process of a sandbox.

		The process is one started with 'kubectl sandbox exec --detach' (see 'kubectl sandbox
		ps' for their IDs), in the first replica unless --replica is given. attach streams its
		output from now on (a terminal's last screen first) until it exits, or until attach is
		interrupted: detaching leaves the process running, and any number of clients may be
		attached at once. -i passes stdin to a process started with -i, and -t with -i makes
		this terminal the process's, for one started with -t. The connection is the one exec
		uses, a WebSocket or, where that cannot pass, SPDY.

		A process lives as long as the replica's container: pausing a sandbox ends its
		processes, and resume starts none again. An ended process cannot be attached to; its
		output stays in 'kubectl sandbox logs --process ID'.`)

	attachExample = cmdutil.Examples(`
		# Start a shell on a terminal in sandbox my-sandbox, then attach to it
		kubectl sandbox exec my-sandbox --detach -it -- bash
		kubectl sandbox attach my-sandbox p-6c3r2 -it

		# Watch the output of a process of the second replica of sandbox workers
		kubectl sandbox attach workers p-6c3r2 --replica 1`)
)

// AttachOptions are the inputs of `kubectl sandbox attach`.
type AttachOptions struct {
	Name    string
	Process string
	Replica int32
	Stdin   bool
	TTY     bool
	Quiet   bool

	Namespace string
	Sandboxes *sandboxclient.Client
	Executor  sandboxclient.RemoteExecutor

	genericiooptions.IOStreams
}

// NewAttachOptions returns AttachOptions with the real executor.
func NewAttachOptions(streams genericiooptions.IOStreams) *AttachOptions {
	return &AttachOptions{Executor: sandboxclient.DefaultRemoteExecutor{}, IOStreams: streams}
}

// NewCmdAttach returns the `attach` command, streaming through executor (exec's).
func NewCmdAttach(f cmdutil.Factory, streams genericiooptions.IOStreams, executor sandboxclient.RemoteExecutor) *cobra.Command {
	o := NewAttachOptions(streams)
	if executor != nil {
		o.Executor = executor
	}
	cmd := &cobra.Command{
		Use:                   "attach NAME ID [--replica=N] [-i] [-t]",
		DisableFlagsInUseLine: true,
		Short:                 "Attach to a running process of a sandbox",
		Long:                  attachLong,
		Example:               attachExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().Int32Var(&o.Replica, "replica", o.Replica, "Index of the replica the process runs in.")
	cmd.Flags().BoolVarP(&o.Stdin, "stdin", "i", o.Stdin, "Pass stdin to the process (started with -i).")
	cmd.Flags().BoolVarP(&o.TTY, "tty", "t", o.TTY, "Be the process's terminal (needs -i, a terminal as stdin, and a process started with -t).")
	cmd.Flags().BoolVarP(&o.Quiet, "quiet", "q", o.Quiet, "Only print output from the process.")
	return cmd
}

// Complete takes the name and ID, the namespace and the client.
func (o *AttachOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) != 2 {
		return cmdutil.UsageErrorf(cmd, "attach takes a sandbox NAME and a process ID, got %q", args)
	}
	o.Name, o.Process = args[0], args[1]
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	o.Sandboxes, err = cmdutil.Client(f)
	return err
}

// Validate checks the options.
func (o *AttachOptions) Validate() error {
	if o.Replica < 0 {
		return fmt.Errorf("--replica must not be negative, got %d", o.Replica)
	}
	if o.Out == nil || o.ErrOut == nil {
		return errors.New("both output and error output must be provided")
	}
	return nil
}

// Run streams the process until it exits or ctx ends. The server refuses, before any upgrade,
// a process that has ended (410) and a terminal or stdin the process was not started with.
func (o *AttachOptions) Run(ctx context.Context) error {
	stdin, stdout, stderr := o.In, o.Out, o.ErrOut
	tty := o.setupTTY()
	if !o.Stdin {
		stdin = nil
	}
	if tty {
		// A terminal has one stream.
		stderr = nil
	}
	c := o.Sandboxes.WithExecutor(o.Executor)
	opts := sandboxclient.AttachOptions{
		Process: o.Process,
		Replica: o.Replica,
		Stdin:   stdin,
		Stdout:  stdout,
		Stderr:  stderr,
	}
	if !tty {
		return c.Attach(ctx, o.Name, opts)
	}
	if !o.Quiet {
		fmt.Fprintln(o.ErrOut, "If you don't see a command prompt, try pressing enter.")
	}
	return term.TTY{In: o.In, Out: o.Out}.Run(ctx, func(sizes remotecommand.TerminalSizeQueue) error {
		opts.TTY, opts.TerminalSizes = true, sizes
		return c.Attach(ctx, o.Name, opts)
	})
}

// setupTTY reports whether the session gets a terminal: only with -i -t and a terminal as
// stdin, as kubectl attach decides.
func (o *AttachOptions) setupTTY() bool {
	return term.Wanted(o.TTY, o.Stdin, o.In, o.ErrOut, o.Quiet)
}
