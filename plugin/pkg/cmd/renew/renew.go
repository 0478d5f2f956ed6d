// Package renew implements `kubectl sandbox renew`.
package renew

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// minExtend is the least extension the API takes: extendSeconds must be positive.
const minExtend = time.Second

var (
	renewLong = cmdutil.LongDesc(`
		Move the expiry of a sandbox created with --timeout further out.

		With --for the sandbox expires that long from now, with --until at the given time.
		Expiry only moves forward: if the sandbox already expires later, it is left as it is.
		A sandbox without a timeout, or one that has already expired, cannot be renewed, and
		the server may cap how far ahead the expiry can be.`)

	renewExample = cmdutil.Examples(`
		# Keep sandbox my-sandbox for another 30 minutes from now
		kubectl sandbox renew my-sandbox --for 30m

		# Keep sandbox my-sandbox until a given time (RFC 3339)
		kubectl sandbox renew my-sandbox --until 2026-12-01T10:00:00Z`)
)

// RenewOptions are the inputs of `kubectl sandbox renew`.
type RenewOptions struct {
	Name  string
	For   time.Duration
	Until string

	// forSet is whether --for was given: --for=0s is an error, not the absence of --for.
	forSet bool
	// renewal is what to ask for, built by Validate.
	renewal sandboxclient.RenewOptions

	Namespace string
	Sandboxes *sandboxclient.Client
	// Now is the clock the time left until the new expiry is measured with.
	Now func() time.Time

	genericiooptions.IOStreams
}

// NewRenewOptions returns RenewOptions on the real clock.
func NewRenewOptions(streams genericiooptions.IOStreams) *RenewOptions {
	return &RenewOptions{Now: time.Now, IOStreams: streams}
}

// NewCmdRenew returns the `renew` command.
func NewCmdRenew(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmdRenew(f, NewRenewOptions(streams))
}

func newCmdRenew(f cmdutil.Factory, o *RenewOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   "renew NAME (--for=DURATION | --until=TIME)",
		DisableFlagsInUseLine: true,
		Short:                 "Move the expiry of a sandbox further out",
		Long:                  renewLong,
		Example:               renewExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			if err := o.Validate(cmd); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().DurationVar(&o.For, "for", o.For, "Expire this long from now (like 30m or 2h).")
	cmd.Flags().StringVar(&o.Until, "until", o.Until, "Expire at this time, in RFC 3339 (like 2026-12-01T10:00:00Z).")
	return cmd
}

// Complete takes the name from the command line and the namespace and client from the
// factory.
func (o *RenewOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return cmdutil.UsageErrorf(cmd, "sandbox NAME is required")
	case 1:
		o.Name = args[0]
	default:
		return cmdutil.UsageErrorf(cmd, "renew takes one NAME, got %q", args)
	}
	o.forSet = cmd.Flags().Changed("for")

	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	o.Sandboxes, err = cmdutil.Client(f)
	return err
}

// Validate checks that exactly one of --for and --until is given and builds the renewal from it.
func (o *RenewOptions) Validate(cmd *cobra.Command) error {
	renewal, err := o.request()
	if err != nil {
		return cmdutil.UsageErrorf(cmd, "%s", err)
	}
	o.renewal = renewal
	return nil
}

// request is the renewal to ask for: an extension from now for --for, an expiry for --until. A
// time in the past is left to the server to refuse, as it judges by its own clock.
func (o *RenewOptions) request() (sandboxclient.RenewOptions, error) {
	switch {
	case o.forSet && o.Until != "":
		return sandboxclient.RenewOptions{}, errors.New("--for and --until cannot be used together")
	case o.forSet:
		if _, err := cmdutil.WholeSeconds("for", o.For, minExtend); err != nil {
			return sandboxclient.RenewOptions{}, err
		}
		return sandboxclient.RenewOptions{Extend: o.For}, nil
	case o.Until != "":
		t, err := time.Parse(time.RFC3339, o.Until)
		if err != nil {
			return sandboxclient.RenewOptions{}, fmt.Errorf("invalid --until %q: must be a time in RFC 3339, like 2026-12-01T10:00:00Z", o.Until)
		}
		return sandboxclient.RenewOptions{Until: t}, nil
	default:
		return sandboxclient.RenewOptions{}, errors.New("one of --for and --until is required")
	}
}

// Run posts the renewal and reports the new expiry.
func (o *RenewOptions) Run(ctx context.Context) error {
	sb, err := o.Sandboxes.Renew(ctx, o.Name, o.renewal)
	if err != nil {
		return err
	}
	if sb.Status.ExpiresAt == nil {
		// Not what the API promises, but nothing to report beyond success.
		fmt.Fprintf(o.Out, "%s/%s renewed\n", cmdutil.SandboxKind, o.Name)
		return nil
	}
	expiresAt := sb.Status.ExpiresAt.Time
	left := max(expiresAt.Sub(o.Now()), 0)
	fmt.Fprintf(o.Out, "%s/%s renewed, expires at %s (in %s)\n", cmdutil.SandboxKind, o.Name,
		expiresAt.UTC().Format(time.RFC3339), duration.HumanDuration(left))
	return nil
}
