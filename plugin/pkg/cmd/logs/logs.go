// Package logs implements `kubectl sandbox logs`.
package logs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

var (
	logsLong = cmdutil.LongDesc(`
		Print the output of a sandbox's task, or of one of its processes.

		A sandbox created with a task ('kubectl sandbox create --task') runs it in each replica;
		this prints what the task of one replica (the first unless --replica is given) wrote to
		its standard output and error, interleaved as they came, from its current attempt, or
		with --previous from the attempt before (a task retried with --task-restart=OnFailure).
		With -f the output streams until the attempt ends. The log lives in the replica's pod:
		a sandbox created with --release deletes it with the pod once the task has ended.

		A replica whose pod is not ready yet (a sandbox just created, a pod being replaced or
		failing a readiness probe for a moment) is waited for, as kubectl logs waits for a pod,
		up to --pod-running-timeout.

		With --process ID it prints the output of a process started with 'kubectl sandbox exec
		--detach' (see 'kubectl sandbox ps') instead, in the replica it runs in: standard
		output and error interleaved (a terminal's one stream), with -f until the process
		exits. --offset-bytes starts at that byte of its output, counted from its first, so
		that a reader can resume where it stopped; a process whose output outgrew what the
		sandbox keeps starts later. A process's output lives as long as the replica's
		container: pausing a sandbox ends its processes and drops their output.`)

	logsExample = cmdutil.Examples(`
		# Print the output of the task of sandbox eval
		kubectl sandbox logs eval

		# Follow the output of the task of the third replica
		kubectl sandbox logs eval --replica 2 -f

		# Print the last 20 lines of the previous attempt, at most 1 MiB of them
		kubectl sandbox logs eval --previous --tail 20 --limit-bytes 1048576

		# Follow the output of process p-6c3r2 of sandbox my-sandbox
		kubectl sandbox logs my-sandbox --process p-6c3r2 -f

		# Print the output of a process from its 4096th byte on
		kubectl sandbox logs my-sandbox --process p-6c3r2 --offset-bytes 4096`)
)

// LogsOptions are the inputs of `kubectl sandbox logs`.
type LogsOptions struct {
	Name     string
	Replica  int32
	Follow   bool
	Previous bool
	// Tail is the number of lines from the end to print; -1: all, as kubectl logs'.
	Tail int64
	// LimitBytes bounds the bytes printed; 0: no bound, as kubectl logs'.
	LimitBytes int64
	// Process is the ID of a process whose output to print instead of the task's.
	Process string
	// OffsetBytes is the byte of a process's output to start at; -1: its first (or tail).
	OffsetBytes int64
	// PodRunningTimeout bounds the wait for a replica that is not ready.
	PodRunningTimeout time.Duration

	Namespace string
	Client    clientset.Interface
	Sandboxes *sandboxclient.Client

	genericiooptions.IOStreams
}

// defaultPodRunningTimeout is kubectl logs' own.
const defaultPodRunningTimeout = 20 * time.Second

// NewLogsOptions returns LogsOptions with kubectl logs' defaults: the whole log, a wait of 20 s
// for a replica that is not ready.
func NewLogsOptions(streams genericiooptions.IOStreams) *LogsOptions {
	return &LogsOptions{Tail: -1, OffsetBytes: -1, PodRunningTimeout: defaultPodRunningTimeout, IOStreams: streams}
}

// NewCmdLogs returns the `logs` command.
func NewCmdLogs(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewLogsOptions(streams)
	cmd := &cobra.Command{
		Use:                   "logs NAME [--replica=N] [--process=ID [--offset-bytes=N]] [-f] [-p] [--tail=N] [--limit-bytes=N]",
		DisableFlagsInUseLine: true,
		Short:                 "Print the output of a sandbox's task or process",
		Long:                  logsLong,
		Example:               logsExample,
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
	cmd.Flags().Int32Var(&o.Replica, "replica", o.Replica, "Index of the replica whose task's output to print.")
	cmd.Flags().BoolVarP(&o.Follow, "follow", "f", o.Follow, "Stream the output until the task's attempt ends.")
	cmd.Flags().BoolVarP(&o.Previous, "previous", "p", o.Previous, "Print the output of the previous attempt of the task, if there was one.")
	cmd.Flags().Int64Var(&o.Tail, "tail", o.Tail, "Lines of the end of the output to print; -1: all of it.")
	cmd.Flags().Int64Var(&o.LimitBytes, "limit-bytes", o.LimitBytes, "Bytes of output to print at most; 0: no limit.")
	cmd.Flags().StringVar(&o.Process, "process", o.Process, "ID of a process (see 'kubectl sandbox ps') whose output to print instead of the task's.")
	cmd.Flags().Int64Var(&o.OffsetBytes, "offset-bytes", o.OffsetBytes, "With --process, the byte of its output to start at; -1: from the first (or --tail).")
	cmd.Flags().DurationVar(&o.PodRunningTimeout, "pod-running-timeout", o.PodRunningTimeout, "How long to wait for a replica that is not ready (like 5s, 2m, or 3h, higher than zero).")
	return cmd
}

// Complete takes the name, the namespace and the clients.
func (o *LogsOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return cmdutil.UsageErrorf(cmd, "sandbox NAME is required")
	case 1:
		o.Name = args[0]
	default:
		return cmdutil.UsageErrorf(cmd, "logs takes one NAME, got %q", args)
	}
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	config, err := f.ToRESTConfig()
	if err != nil {
		return err
	}
	if o.Client, err = f.SandboxClient(); err != nil {
		return err
	}
	o.Sandboxes, err = sandboxclient.NewWithClientset(config, o.Namespace, o.Client)
	return err
}

// Validate checks the flags as kubectl logs checks its own.
func (o *LogsOptions) Validate() error {
	if o.Replica < 0 {
		return fmt.Errorf("--replica must not be negative, got %d", o.Replica)
	}
	if o.Tail < -1 {
		return fmt.Errorf("--tail must be -1 (all) or more, got %d", o.Tail)
	}
	if o.LimitBytes < 0 {
		return fmt.Errorf("--limit-bytes must be 0 (no limit) or more, got %d", o.LimitBytes)
	}
	if o.OffsetBytes < -1 {
		return fmt.Errorf("--offset-bytes must be -1 (from the first) or more, got %d", o.OffsetBytes)
	}
	if o.Process == "" && o.OffsetBytes >= 0 {
		return errors.New("--offset-bytes is for the output of a process: use it with --process")
	}
	if o.Process != "" && o.Previous {
		return errors.New("--previous is for a task's attempts: a process has one output")
	}
	if o.OffsetBytes >= 0 && o.Tail >= 0 {
		return errors.New("--offset-bytes and --tail exclude each other")
	}
	if o.PodRunningTimeout <= 0 {
		return fmt.Errorf("--pod-running-timeout must be higher than zero, got %s", o.PodRunningTimeout)
	}
	return nil
}

// options are the query of the log request.
func (o *LogsOptions) options() sandboxv1alpha1.SandboxLogOptions {
	opts := sandboxv1alpha1.SandboxLogOptions{Replica: o.Replica, Follow: o.Follow, Previous: o.Previous, Process: o.Process}
	if o.OffsetBytes >= 0 {
		offset := o.OffsetBytes
		opts.OffsetBytes = &offset
	}
	if o.Tail >= 0 {
		tail := o.Tail
		opts.TailLines = &tail
	}
	if o.LimitBytes > 0 {
		limit := o.LimitBytes
		opts.LimitBytes = &limit
	}
	return opts
}

// Run streams the log to the output until the server ends it, or ctx ends (an interrupted
// follow). A replica the server says is not ready (503) is waited for, then asked again: the
// log is asked for first because the server answers at once where no wait would help (a
// replica without a task, a pod released with its log).
func (o *LogsOptions) Run(ctx context.Context) error {
	stream, err := o.Sandboxes.Log(ctx, o.Name, o.options())
	if apierrors.IsServiceUnavailable(err) {
		if werr := sandboxclient.WaitForReplica(ctx, o.Client, o.Namespace, o.Name, o.Replica, o.PodRunningTimeout, "read the log of"); werr != nil {
			return fmt.Errorf("%w (%v)", err, werr)
		}
		stream, err = o.Sandboxes.Log(ctx, o.Name, o.options())
	}
	if err != nil {
		return err
	}
	defer func() { _ = stream.Close() }()
	if _, err := io.Copy(o.Out, stream); err != nil && ctx.Err() == nil {
		return fmt.Errorf("read the log of sandbox %q: %w", o.Name, err)
	}
	return nil
}
