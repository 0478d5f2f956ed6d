// Package kill implements `kubectl sandbox kill`.
package kill

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/exec"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// defaultSignal is the server's default, as kill(1)'s: a process may clean up.
const defaultSignal = "TERM"

var (
	killLong = cmdutil.LongDesc(`
		Send a signal to a process of a sandbox.

		The process is one started with 'kubectl sandbox exec --detach' (see 'kubectl sandbox
		ps' for their IDs), in the first replica unless --replica is given. The signal (TERM
		unless --signal names another, such as INT, HUP or KILL, with or without SIG) reaches
		the process's whole group: what it started too. With --grace-period N the group is
		sent KILL N seconds later if the process still runs (0: at once). kill prints the
		process as the server then saw it; one that ended keeps its status and output, in
		'kubectl sandbox ps' and 'kubectl sandbox logs --process', while the replica's
		container runs. Pausing a sandbox ends all its processes; resume starts none again.`)

	killExample = cmdutil.Examples(`
		# Stop process p-6c3r2 of sandbox my-sandbox with TERM
		kubectl sandbox kill my-sandbox p-6c3r2

		# Interrupt a process of the second replica, and kill it if it still runs 10 seconds later
		kubectl sandbox kill workers p-6c3r2 --replica 1 --signal INT --grace-period 10

		# Kill a process at once
		kubectl sandbox kill my-sandbox p-6c3r2 --signal KILL`)
)

// KillOptions are the inputs of `kubectl sandbox kill`.
type KillOptions struct {
	Name    string
	Process string
	Replica int32
	Signal  string
	// GracePeriod is the seconds before KILL follows; -1: it does not.
	GracePeriod int64
	Output      string

	Namespace string
	Sandboxes *sandboxclient.Client

	genericiooptions.IOStreams
}

// NewKillOptions returns KillOptions sending TERM and no KILL after it.
func NewKillOptions(streams genericiooptions.IOStreams) *KillOptions {
	return &KillOptions{Signal: defaultSignal, GracePeriod: -1, IOStreams: streams}
}

// NewCmdKill returns the `kill` command.
func NewCmdKill(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewKillOptions(streams)
	cmd := &cobra.Command{
		Use:                   "kill NAME ID [--replica=N] [--signal=TERM] [--grace-period=N]",
		DisableFlagsInUseLine: true,
		Short:                 "Send a signal to a process of a sandbox",
		Long:                  killLong,
		Example:               killExample,
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
	cmd.Flags().StringVar(&o.Signal, "signal", o.Signal, "Signal to send, by name: TERM, INT, HUP, KILL, ... (with or without SIG).")
	cmd.Flags().Int64Var(&o.GracePeriod, "grace-period", o.GracePeriod, "Send KILL this many seconds later if the process still runs (0: at once); -1: do not.")
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Print the process in this format. One of: (json, yaml, name). Default: a message.")
	return cmd
}

// Complete takes the name and ID, the namespace and the client.
func (o *KillOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) != 2 {
		return cmdutil.UsageErrorf(cmd, "kill takes a sandbox NAME and a process ID, got %q", args)
	}
	o.Name, o.Process = args[0], args[1]
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	o.Sandboxes, err = cmdutil.Client(f)
	return err
}

// Validate checks the flags; the server judges the signal's name.
func (o *KillOptions) Validate() error {
	if o.Replica < 0 {
		return fmt.Errorf("--replica must not be negative, got %d", o.Replica)
	}
	if o.GracePeriod < -1 {
		return fmt.Errorf("--grace-period must be -1 (no KILL) or more, got %d", o.GracePeriod)
	}
	if strings.TrimSpace(o.Signal) == "" {
		return fmt.Errorf("--signal must name a signal, such as %s", defaultSignal)
	}
	switch o.Output {
	case "", "json", "yaml", "name":
	default:
		return fmt.Errorf("unknown output format %q; use one of: json, yaml, name", o.Output)
	}
	return nil
}

// Run signals the process (POST sandboxes/NAME/processes/ID/signal) and prints what the server
// answered.
func (o *KillOptions) Run(ctx context.Context) error {
	sig := sandboxv1alpha1.SandboxProcessSignal{Signal: o.Signal}
	if o.GracePeriod >= 0 {
		grace := o.GracePeriod
		sig.GracePeriodSeconds = &grace
	}
	out, err := o.Sandboxes.SignalProcess(ctx, o.Name, o.Replica, o.Process, sig)
	if err != nil {
		return err
	}
	if o.Output != "" {
		return exec.PrintProcess(out, o.Output, o.Out)
	}
	_, err = fmt.Fprintf(o.Out, "process %s of sandbox %q signalled (%s): %s\n", out.Name, o.Name, o.Signal, describe(&out.Status))
	return err
}

// describe is the process's phase and how it ended, if it has.
func describe(s *sandboxv1alpha1.SandboxProcessStatus) string {
	d := string(s.Phase)
	switch {
	case s.ExitCode != nil:
		d += fmt.Sprintf(", exit code %d", *s.ExitCode)
	case s.Signal != "":
		d += ", signal " + s.Signal
	}
	return d
}
