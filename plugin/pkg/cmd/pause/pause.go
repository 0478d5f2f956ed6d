// Package pause implements `kubectl sandbox pause` and `kubectl sandbox resume`.
package pause

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// defaultTimeout of --wait: a snapshot of a few hundred megabytes, or a pod pulling one.
const defaultTimeout = 5 * time.Minute

var (
	pauseLong = cmdutil.LongDesc(`
		Pause a sandbox: the filesystem of each replica is snapshotted into an image in the
		platform's snapshot registry, and its pod is deleted, so that an idle sandbox holds no
		node. 'kubectl sandbox resume' brings the same sandbox back.

		Kept: the sandbox container's files (apart from volumes and /proc, /sys, /dev), the
		name, labels, spec, network policy, and the identity exec, files and proxy use. Not
		kept: processes (those of 'exec --detach' too) and their output, code contexts
		('run-code') and memory; the entrypoint starts again on resume. A paused sandbox
		keeps its expiry (unless the platform runs with --pause-stops-expiry), and an expired
		or deleted one takes its snapshots with it.

		The sandbox is Pausing while the snapshots are taken, then Paused. If a snapshot
		fails, its pod is kept and the sandbox stays usable; the condition Paused says why
		(SnapshotFailed, RegistryUnavailable) and the snapshot is tried again. No pause starts
		while the platform's admission policy does not guard the registry's snapshots
		(SnapshotPolicyMissing). A sandbox that runs tasks cannot pause. Pausing needs the
		right to update sandboxes.

		With --wait the command returns once the sandbox is Paused.`)

	pauseExample = cmdutil.Examples(`
		# Pause sandbox my-sandbox
		kubectl sandbox pause my-sandbox

		# Pause it and wait until its pods are gone
		kubectl sandbox pause my-sandbox --wait`)

	resumeLong = cmdutil.LongDesc(`
		Resume a paused sandbox: each replica gets a new pod made from its snapshot (a pooled
		sandbox's from its pool's template, as pods of its own), with the sandbox's current
		spec and network policy. The files are as they were at the pause; processes start
		anew. Resuming a sandbox that is still pausing calls the pause off.

		The sandbox is Resuming until its pods are ready, then Running. While the registry
		does not answer, it stays Paused (condition Paused, reason RegistryUnavailable) and
		resumes once it does. Resuming needs the right to update sandboxes.

		With --wait the command returns once the sandbox is Running.`)

	resumeExample = cmdutil.Examples(`
		# Resume sandbox my-sandbox and wait until it runs again
		kubectl sandbox resume my-sandbox --wait`)
)

// Options are the inputs of `kubectl sandbox pause` and `resume`.
type Options struct {
	Name string
	// Paused is what the command sets spec.paused to.
	Paused  bool
	Wait    bool
	Timeout time.Duration

	Namespace string
	Sandboxes *sandboxclient.Client

	genericiooptions.IOStreams
}

// NewCmdPause returns the `pause` command.
func NewCmdPause(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{Paused: true, Timeout: defaultTimeout, IOStreams: streams}
	return newCmd(f, o, "pause", "Snapshot a sandbox's filesystem and free its pods", pauseLong, pauseExample)
}

// NewCmdResume returns the `resume` command.
func NewCmdResume(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{Paused: false, Timeout: defaultTimeout, IOStreams: streams}
	return newCmd(f, o, "resume", "Bring a paused sandbox back from its snapshots", resumeLong, resumeExample)
}

func newCmd(f cmdutil.Factory, o *Options, verb, short, long, example string) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   verb + " NAME [--wait]",
		DisableFlagsInUseLine: true,
		Short:                 short,
		Long:                  long,
		Example:               example,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.Wait, "wait", o.Wait, "Wait until the sandbox is Paused (pause) or Running (resume).")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long --wait waits; zero checks once, negative waits without limit.")
	return cmd
}

// Complete takes the name, the namespace and the client.
func (o *Options) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return cmdutil.UsageErrorf(cmd, "one sandbox NAME is required, got %q", args)
	}
	o.Name = args[0]
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	o.Sandboxes, err = cmdutil.Client(f)
	return err
}

func (o *Options) verb() string {
	if o.Paused {
		return "paused"
	}
	return "resumed"
}

// Run sets spec.paused with an update (the verb RBAC authorizes pause and resume by), and with
// --wait follows the sandbox until it is there.
func (o *Options) Run(ctx context.Context) error {
	changed, err := o.Sandboxes.SetPaused(ctx, o.Name, o.Paused)
	if err != nil {
		return err
	}
	if changed {
		_, _ = fmt.Fprintf(o.Out, "sandbox/%s %s\n", o.Name, o.verb())
	} else {
		_, _ = fmt.Fprintf(o.Out, "sandbox/%s %s already\n", o.Name, o.verb())
	}
	if !o.Wait {
		return nil
	}
	want := sandboxv1alpha1.PhaseRunning
	if o.Paused {
		want = sandboxv1alpha1.PhasePaused
	}
	waitCtx, cancel := ctx, context.CancelFunc(func() {})
	if o.Timeout >= 0 {
		waitCtx, cancel = context.WithTimeout(ctx, o.Timeout)
	}
	defer cancel()
	start := time.Now()
	last, err := o.Sandboxes.Wait(waitCtx, o.Name, func(sb *sandboxv1alpha1.Sandbox) (bool, error) {
		return sandboxclient.Reached(sb, want)
	})
	if err != nil {
		if waitCtx.Err() != nil && last != nil {
			return fmt.Errorf("timed out after %s waiting for sandbox %q to be %s: it is %s%s", o.Timeout, o.Name, want, sandboxclient.Phase(last), sandboxclient.Why(last))
		}
		return err
	}
	_, _ = fmt.Fprintf(o.Out, "sandbox/%s %s in %s\n", o.Name, want, time.Since(start).Round(10*time.Millisecond))
	return nil
}
