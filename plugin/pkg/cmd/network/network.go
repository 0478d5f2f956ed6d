// Package network implements `kubectl sandbox network`: show and change a sandbox's outbound
// network policy (spec.networkPolicy).
package network

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client/netpolicy"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// ConditionEgressReady is the condition that tells whether a sandbox's pods enforce its current
// policy.
const ConditionEgressReady = sandboxv1alpha1.ConditionEgressReady

// reasonPolicyFailed is EgressReady's reason when a pod refused or failed to apply the policy.
const reasonPolicyFailed = sandboxv1alpha1.ReasonPolicyFailed

// Output formats of show besides the description.
const (
	outputYAML = "yaml"
	outputJSON = "json"
)

var (
	networkLong = cmdutil.LongDesc(`
		Show or change the outbound network policy of a sandbox: what code in it may reach.

		A policy (spec.networkPolicy) is a list of Allow and Deny rules, of which the first
		that matches a connection or DNS lookup decides, and a default action, Deny unless
		set to Allow, for what no rule matches. A denied name does not resolve in the
		sandbox. Without a policy of its own, a sandbox follows its pool's policy, or the
		platform's default, which denies everything; a policy of its own replaces that
		one. Whatever the policy, the platform keeps the sandbox from the cluster's pods,
		services and nodes and from cloud metadata addresses, and exec, cp and port-forward
		keep working.

		'kubectl sandbox network NAME' shows the policy, its numbered rules, and the
		condition EgressReady, which tells whether the pods enforce it: "pending" while they
		have not confirmed the sandbox's latest generation. The subcommands change it, each
		as one update that is retried if the sandbox changed meanwhile; with --wait they
		return once the pods enforce the change. (For a sandbox named like a subcommand, use
		'network show NAME'.)`) + "\n\n" + netpolicy.TargetSyntax

	networkExample = cmdutil.Examples(`
		# Show the policy of sandbox my-sandbox and whether its pods enforce it
		kubectl sandbox network my-sandbox

		# Let it reach PyPI over HTTPS, and wait until its pods enforce that
		kubectl sandbox network allow my-sandbox pypi.org:443 '*.pythonhosted.org:443' --wait

		# Keep it from one host that a later rule or the default would allow
		kubectl sandbox network deny my-sandbox --first internal.example.com

		# Remove the rules for pypi.org, and rule 2 as 'network my-sandbox' numbers them
		kubectl sandbox network remove my-sandbox pypi.org 2

		# netpolicy.Edit the policy as YAML and put it back
		kubectl sandbox network show my-sandbox -o yaml > policy.yaml
		kubectl sandbox network set my-sandbox -f policy.yaml

		# Deny everything, or go back to the pool's or the platform's policy
		kubectl sandbox network deny-all my-sandbox
		kubectl sandbox network reset my-sandbox`)

	showLong = cmdutil.LongDesc(`
		Show the outbound network policy of a sandbox: its default action, its rules in the
		order they are matched, and the condition EgressReady, which tells whether the pods
		enforce the policy. EgressReady shows as "pending" while its observed generation is
		older than the sandbox's generation.

		With -o yaml or -o json, print only the policy (null when the sandbox has none of
		its own), in the form 'kubectl sandbox network set -f' reads.`)

	showExample = cmdutil.Examples(`
		# Show the policy of sandbox my-sandbox
		kubectl sandbox network show my-sandbox

		# Print it as YAML, to edit and give to 'network set -f'
		kubectl sandbox network show my-sandbox -o yaml`)
)

// ShowOptions are the inputs of `kubectl sandbox network [show] NAME`.
type ShowOptions struct {
	Name   string
	Output string

	Namespace string
	Sandboxes *sandboxclient.Client

	genericiooptions.IOStreams
}

// NewShowOptions returns ShowOptions printing the description.
func NewShowOptions(streams genericiooptions.IOStreams) *ShowOptions {
	return &ShowOptions{IOStreams: streams}
}

// NewCmdNetwork returns the `network` command, which shows a sandbox's policy; its subcommands
// change it.
func NewCmdNetwork(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewShowOptions(streams)
	cmd := &cobra.Command{
		Use:                   "network NAME [-o yaml|json]",
		DisableFlagsInUseLine: true,
		Short:                 "Show or change the outbound network policy of a sandbox",
		Long:                  networkLong,
		Example:               networkExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		// NAME is not a subcommand: cobra is not to refuse it as an unknown one.
		Args:                       cobra.ArbitraryArgs,
		SuggestionsMinimumDistance: 2,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				// Not a subcommand (cobra would have run it), so most likely a mistyped one.
				msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
				switch s := cmd.SuggestionsFor(args[0]); len(s) {
				case 0:
				case 1:
					msg += fmt.Sprintf("; did you mean %q?", s[0])
				default:
					msg += fmt.Sprintf("; did you mean one of %q?", s)
				}
				return cmdutil.UsageErrorf(cmd, "%s", msg)
			}
			return o.complete(f, cmd, args)
		},
	}
	o.addFlags(cmd)
	cmd.AddCommand(
		newCmdShow(f, NewShowOptions(streams)),
		NewCmdSet(f, streams),
		NewCmdAllow(f, streams),
		NewCmdDeny(f, streams),
		NewCmdRemove(f, streams),
		NewCmdDenyAll(f, streams),
		NewCmdReset(f, streams),
	)
	return cmd
}

func newCmdShow(f cmdutil.Factory, o *ShowOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   "show NAME [-o yaml|json]",
		DisableFlagsInUseLine: true,
		Short:                 "Show the network policy of a sandbox",
		Long:                  showLong,
		Example:               showExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return cmdutil.UsageErrorf(cmd, "show takes one NAME, got %q", args)
			}
			return o.complete(f, cmd, args)
		},
	}
	o.addFlags(cmd)
	return cmd
}

func (o *ShowOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Output format: yaml or json prints only the policy. Default: a description.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputYAML, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
}

// complete runs Complete, Validate and Run.
func (o *ShowOptions) complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if err := o.Complete(f, cmd, args); err != nil {
		return err
	}
	if err := o.Validate(cmd); err != nil {
		return err
	}
	return o.Run(cmd.Context())
}

// Complete takes the name, namespace and client.
func (o *ShowOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return cmdutil.UsageErrorf(cmd, "sandbox NAME is required")
	}
	o.Name = args[0]
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	o.Sandboxes, err = cmdutil.Client(f)
	return err
}

// Validate checks -o.
func (o *ShowOptions) Validate(cmd *cobra.Command) error {
	switch o.Output {
	case "", outputYAML, outputJSON:
		return nil
	}
	return cmdutil.UsageErrorf(cmd, "unknown output format %q; use yaml or json, or none for a description", o.Output)
}

// Run reads the sandbox and prints its policy.
func (o *ShowOptions) Run(ctx context.Context) error {
	_, sb, err := o.Sandboxes.NetworkPolicy(ctx, o.Name)
	if err != nil {
		return err
	}
	switch o.Output {
	case outputYAML:
		data, err := yaml.Marshal(sb.Spec.NetworkPolicy)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(data)
		return err
	case outputJSON:
		data, err := json.MarshalIndent(sb.Spec.NetworkPolicy, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.Out, "%s\n", data)
		return err
	}
	return Describe(o.Out, sb)
}

// Describe writes a sandbox's policy and EgressReady condition for people.
func Describe(w io.Writer, sb *sandboxv1alpha1.Sandbox) error {
	var b strings.Builder
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-22s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	line("Name", "%s", sb.Name)
	line("Namespace", "%s", sb.Namespace)
	line("Generation", "%d", sb.Generation)
	p := sb.Spec.NetworkPolicy
	switch {
	case p == nil && sb.Spec.PoolRef != nil:
		line("Policy", "none of its own: the policy of pool %s applies", sb.Spec.PoolRef.Name)
	case p == nil:
		line("Policy", "none of its own: the platform's default applies")
	default:
		line("Policy", "its own (spec.networkPolicy)")
		line("Default action", "%s", netpolicy.DefaultAction(p))
		if len(p.Egress) == 0 {
			line("Rules", "none")
		} else {
			line("Rules", "%d, first match wins", len(p.Egress))
			tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "  #\tACTION\tTO\tPORTS")
			for i, r := range p.Egress {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", i+1, r.Action, r.To, netpolicy.FormatPorts(r.Ports))
			}
			_ = tw.Flush()
		}
	}

	c := meta.FindStatusCondition(sb.Status.Conditions, ConditionEgressReady)
	if c == nil {
		line(ConditionEgressReady, "<none>: not reported yet")
	} else {
		observed := sandboxclient.ObservedGeneration(sb, c)
		if observed < sb.Generation {
			line(ConditionEgressReady, "pending: %s for generation %d, the sandbox is at generation %d", c.Status, observed, sb.Generation)
		} else {
			line(ConditionEgressReady, "%s", c.Status)
		}
		if c.Reason != "" {
			line("  Reason", "%s", c.Reason)
		}
		if c.Message != "" {
			line("  Message", "%s", c.Message)
		}
		line("  Observed generation", "%d", observed)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
