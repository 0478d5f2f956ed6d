// Package exec implements `kubectl sandbox exec`.
package exec

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/term"
)

// defaultReadyTimeout is how long exec waits for the replica to be ready, as kubectl exec waits
// for a pod to be running: long enough for a sandbox just created from a cold template.
const defaultReadyTimeout = time.Minute

var (
	execLong = cmdutil.LongDesc(`
		Execute a command in a sandbox.

		The command runs in the sandbox container of one replica (the first unless --replica is
		given), with its standard output and error streamed back. If the sandbox was just
		created, exec waits for the replica to be ready (see --pod-running-timeout). When the
		command exits with a non-zero code, kubectl sandbox exits with the same code.

		With --detach the command is started as a process of the replica that outlives this
		connection (the sandbox's processes subresource), and exec prints its ID at once, or
		with -o the process. 'kubectl sandbox ps' lists the processes, 'kubectl sandbox logs
		--process ID' prints a process's output, 'kubectl sandbox attach' joins it and
		'kubectl sandbox kill' signals it. With -t a detached process runs on a terminal of its
		own, and with -i its stdin stays open for the clients that attach. A process lives as
		long as the replica's container: pausing a sandbox ends its processes, and resume
		starts none again.`)

	execExample = cmdutil.Examples(`
		# Run 'date' in sandbox my-sandbox
		kubectl sandbox exec my-sandbox -- date

		# Open an interactive shell in sandbox my-sandbox
		kubectl sandbox exec my-sandbox -it -- sh

		# Pipe a script to python in the second replica of sandbox workers
		kubectl sandbox exec workers --replica 1 -i -- python - < script.py

		# Commands whose flags look like ours must follow -- (do not quote the whole command)
		kubectl sandbox exec my-sandbox -- ls -t /usr

		# Start a web server that keeps running after exec returns, and print its ID
		kubectl sandbox exec my-sandbox --detach -- python3 -m http.server 8000

		# Start a shell on a terminal of its own, to attach to later
		kubectl sandbox exec my-sandbox --detach -it -- bash`)
)

// ExecOptions are the inputs of `kubectl sandbox exec`.
type ExecOptions struct {
	Name              string
	Command           []string
	Replica           int32
	Stdin             bool
	TTY               bool
	Quiet             bool
	PodRunningTimeout time.Duration
	Env               []string
	WorkingDir        string
	Timeout           time.Duration
	// Detach starts the command as a process of the replica and returns its ID.
	Detach bool
	// Output is how a detached process is printed: its ID, or one of outputFormats.
	Output string

	Namespace string
	Client    clientset.Interface
	Config    *rest.Config
	Sandboxes *sandboxclient.Client
	Executor  sandboxclient.RemoteExecutor

	genericiooptions.IOStreams
}

// NewExecOptions returns ExecOptions with kubectl's defaults and the real executor.
func NewExecOptions(streams genericiooptions.IOStreams) *ExecOptions {
	return &ExecOptions{
		PodRunningTimeout: defaultReadyTimeout,
		Executor:          sandboxclient.DefaultRemoteExecutor{},
		IOStreams:         streams,
	}
}

// NewCmdExec returns the `exec` command running commands through executor.
func NewCmdExec(f cmdutil.Factory, streams genericiooptions.IOStreams, executor sandboxclient.RemoteExecutor) *cobra.Command {
	o := NewExecOptions(streams)
	if executor != nil {
		o.Executor = executor
	}
	cmd := &cobra.Command{
		Use:                   "exec NAME [--replica=N] [-i] [-t] [--detach [-o json|yaml|name]] -- COMMAND [ARG...]",
		DisableFlagsInUseLine: true,
		Short:                 "Execute a command in a sandbox",
		Long:                  execLong,
		Example:               execExample,
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
	cmd.Flags().BoolVarP(&o.Stdin, "stdin", "i", o.Stdin, "Pass stdin to the command.")
	cmd.Flags().BoolVarP(&o.TTY, "tty", "t", o.TTY, "Run the command in a terminal (needs -i and a terminal as stdin).")
	cmd.Flags().BoolVarP(&o.Quiet, "quiet", "q", o.Quiet, "Only print output from the remote command.")
	cmd.Flags().Int32Var(&o.Replica, "replica", o.Replica, "Index of the replica to run the command in.")
	cmd.Flags().StringArrayVarP(&o.Env, "env", "e", o.Env, "Environment variable NAME=VALUE for the command (repeatable).")
	cmd.Flags().StringVarP(&o.WorkingDir, "workdir", "w", o.WorkingDir, "Absolute directory to run the command in (default: the container's).")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "Kill the command, and everything it started, after this long (whole seconds; 0: no limit).")
	cmd.Flags().BoolVarP(&o.Detach, "detach", "d", o.Detach, "Start the command as a process that outlives exec, and print its ID.")
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "With --detach, print the process in this format. One of: (json, yaml, name). Default: its ID.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().DurationVar(&o.PodRunningTimeout, "pod-running-timeout", o.PodRunningTimeout, "How long to wait for the replica to be ready (like 5s, 2m, or 3h, higher than zero).")
	return cmd
}

// Complete takes the name and command from the command line and the clients from the factory.
func (o *ExecOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	if len(args) > 0 && dash != 0 {
		o.Name = args[0]
	}
	switch {
	case dash == 0 || dash == 1:
		o.Command = args[dash:]
	case dash > 1:
		return cmdutil.UsageErrorf(cmd, "exec takes one NAME before --, got %q", args[:dash])
	case len(args) > 1:
		return cmdutil.UsageErrorf(cmd, "put the command after --, as in: exec %s -- %s", args[0], strings.Join(args[1:], " "))
	}

	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	if o.Config, err = f.ToRESTConfig(); err != nil {
		return err
	}
	if o.Client, err = f.SandboxClient(); err != nil {
		return err
	}
	o.Sandboxes, err = sandboxclient.NewWithClientset(o.Config, o.Namespace, o.Client)
	return err
}

// Validate checks the options.
func (o *ExecOptions) Validate() error {
	if o.Name == "" {
		return errors.New("sandbox NAME is required")
	}
	if len(o.Command) == 0 {
		return errors.New("you must specify at least one command for the sandbox, after --")
	}
	if o.Replica < 0 {
		return fmt.Errorf("--replica must not be negative, got %d", o.Replica)
	}
	for _, kv := range o.Env {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return fmt.Errorf("--env %q: want NAME=VALUE", kv)
		}
	}
	if o.WorkingDir != "" && !path.IsAbs(o.WorkingDir) {
		return fmt.Errorf("--workdir %q: want an absolute path", o.WorkingDir)
	}
	if o.Timeout < 0 || o.Timeout%time.Second != 0 {
		return fmt.Errorf("--timeout must be a non-negative whole number of seconds, got %s", o.Timeout)
	}
	if o.PodRunningTimeout <= 0 {
		return fmt.Errorf("--pod-running-timeout must be higher than zero, got %s", o.PodRunningTimeout)
	}
	if o.Output != "" {
		if !o.Detach {
			return errors.New("--output is for --detach: an attached command prints its own output")
		}
		if !slices.Contains(outputFormats, o.Output) {
			return fmt.Errorf("unknown output format %q; use one of: %s", o.Output, strings.Join(outputFormats, ", "))
		}
	}
	if o.Out == nil || o.ErrOut == nil {
		return errors.New("both output and error output must be provided")
	}
	return nil
}

// Run waits for the replica to be ready and runs the command in it, or with Detach starts it
// as a process of the replica and returns. A command that exits non-zero comes back as a
// k8s.io/utils/exec.ExitError carrying its code.
func (o *ExecOptions) Run(ctx context.Context) error {
	if err := o.waitForReplica(ctx); err != nil {
		return err
	}
	if o.Detach {
		return o.runDetached(ctx)
	}

	stdin, stdout, stderr := o.In, o.Out, o.ErrOut
	tty := o.setupTTY()
	if !o.Stdin {
		// No stream is opened for stdin unless asked for.
		stdin = nil
	}
	if tty {
		// A terminal merges the command's stderr into stdout.
		stderr = nil
	}

	c := o.Sandboxes.WithExecutor(o.Executor)
	opts := sandboxclient.ExecOptions{
		Command:    o.Command,
		Replica:    o.Replica,
		Env:        o.Env,
		WorkingDir: o.WorkingDir,
		Timeout:    o.Timeout,
		Stdin:      stdin,
		Stdout:     stdout,
		Stderr:     stderr,
	}
	if !tty {
		return c.Exec(ctx, o.Name, opts)
	}
	return term.TTY{In: o.In, Out: o.Out}.Run(ctx, func(sizes remotecommand.TerminalSizeQueue) error {
		opts.TTY, opts.TerminalSizes = true, sizes
		return c.Exec(ctx, o.Name, opts)
	})
}

// setupTTY reports whether the session gets a terminal: only with -i -t and a terminal as
// stdin, as kubectl exec decides.
func (o *ExecOptions) setupTTY() bool {
	return term.Wanted(o.TTY, o.Stdin, o.In, o.ErrOut, o.Quiet)
}

// waitForReplica returns once the replica can take commands, and fails early, with the reason,
// if it never will.
func (o *ExecOptions) waitForReplica(ctx context.Context) error {
	return sandboxclient.WaitForReplica(ctx, o.Client, o.Namespace, o.Name, o.Replica, o.PodRunningTimeout, "exec into")
}
