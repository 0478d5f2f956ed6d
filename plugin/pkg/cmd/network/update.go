package network

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/yaml"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client/netpolicy"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// defaultWaitTimeout is how long --wait waits by default. A change is in force within a second
// in running pods; pods that are still starting take longer.
const defaultWaitTimeout = 60 * time.Second

const waitHelp = `With --wait, the command returns once every pod of the sandbox enforces the change
(EgressReady True for the new generation), and fails at once if a pod refused it;
--timeout bounds the wait (zero checks once, negative waits without limit).`

var (
	setLong = cmdutil.LongDesc(`
		Replace the network policy of a sandbox with the one in a file, or set its default
		action.

		The file (YAML or JSON; - for standard input) holds the policy itself, as
		'kubectl sandbox network show NAME -o yaml' prints it: defaultAction (Allow or Deny,
		Deny when absent) and egress, the rules, each with action (Allow or Deny), to, and
		optionally ports (port, endPort, protocol TCP or UDP). It is checked before it is
		sent. --default-action changes only what no rule matches, keeping the rules.`) + "\n\n" + waitHelp

	setExample = cmdutil.Examples(`
		# Replace the policy of sandbox my-sandbox with the one in policy.yaml
		kubectl sandbox network set my-sandbox -f policy.yaml

		# Allow what no rule denies
		kubectl sandbox network set my-sandbox --default-action Allow

		# Set a policy from standard input and wait until the pods enforce it
		cat <<EOF | kubectl sandbox network set my-sandbox -f - --wait
		defaultAction: Deny
		egress:
		- action: Allow
		  to: pypi.org
		  ports:
		  - port: 443
		EOF`)

	allowLong = cmdutil.LongDesc(`
		Add rules that allow TARGET: at the end of the rules, or before them with --first.
		The first rule that matches decides, so an earlier Deny rule for the same target
		wins; the command warns about that, and about rules the policy has already, which it
		does not add again.

		A sandbox without a policy of its own gets one: default Deny and the new rules. It
		replaces the pool's or the platform's policy.`) + "\n\n" + netpolicy.TargetSyntax + "\n\n" + waitHelp

	allowExample = cmdutil.Examples(`
		# Let sandbox my-sandbox install from PyPI
		kubectl sandbox network allow my-sandbox pypi.org:443 '*.pythonhosted.org:443'

		# Allow a network on TCP ports 8080 to 8090, and an IPv6 host on port 443
		kubectl sandbox network allow my-sandbox 10.20.0.0/16:8080-8090 '[2001:db8::1]:443'

		# Allow an exception before a Deny rule, and wait until it is in force
		kubectl sandbox network allow my-sandbox --first api.internal.example.com:443 --wait`)

	denyLong = cmdutil.LongDesc(`
		Add rules that deny TARGET: at the end of the rules, or before them with --first.
		Rules at the end only matter when the default action is Allow; to carve an
		exception out of an Allow rule (such as one for *.example.com), add the Deny rule
		with --first.`) + "\n\n" + netpolicy.TargetSyntax + "\n\n" + waitHelp

	denyExample = cmdutil.Examples(`
		# Allow everything except one network: set the default, then deny the network
		kubectl sandbox network set my-sandbox --default-action Allow
		kubectl sandbox network deny my-sandbox 192.168.0.0/16

		# Deny one host that a wildcard rule allows
		kubectl sandbox network deny my-sandbox --first secrets.example.com`)

	removeLong = cmdutil.LongDesc(`
		Remove rules from the network policy of a sandbox. RULE is a rule's number, as
		'kubectl sandbox network NAME' shows it, or a TARGET: without ports it removes every
		rule for that target, with ports only the rules with exactly those ports, whether
		they allow or deny. A RULE that matches nothing is an error, and nothing is removed.`) + "\n\n" + waitHelp

	removeExample = cmdutil.Examples(`
		# Remove every rule for pypi.org
		kubectl sandbox network remove my-sandbox pypi.org

		# Remove the rule for pypi.org port 443 only, and rule 3
		kubectl sandbox network remove my-sandbox pypi.org:443 3`)

	denyAllLong = cmdutil.LongDesc(`
		Deny all outbound traffic of a sandbox: remove every rule and set the default action
		to Deny. Unlike 'reset', the sandbox keeps a policy of its own, so its pool's policy
		no longer applies.`) + "\n\n" + waitHelp

	denyAllExample = cmdutil.Examples(`
		# Cut sandbox my-sandbox off, and wait until its pods enforce it
		kubectl sandbox network deny-all my-sandbox --wait`)

	resetLong = cmdutil.LongDesc(`
		Remove the network policy of a sandbox's own (spec.networkPolicy): its pool's policy
		applies again, or for a sandbox made from an image, the platform's default, which
		denies everything.`) + "\n\n" + waitHelp

	resetExample = cmdutil.Examples(`
		# Let sandbox my-sandbox follow its pool's policy again
		kubectl sandbox network reset my-sandbox`)
)

// UpdateOptions are what the subcommands that change a policy share: the sandbox, the change,
// and --wait.
type UpdateOptions struct {
	Name    string
	Wait    bool
	Timeout time.Duration
	// Edit computes the new policy from the one read.
	Edit netpolicy.Edit

	Namespace string
	Sandboxes *sandboxclient.Client

	genericiooptions.IOStreams
}

// NewUpdateOptions returns UpdateOptions with the default --timeout.
func NewUpdateOptions(streams genericiooptions.IOStreams) *UpdateOptions {
	return &UpdateOptions{Timeout: defaultWaitTimeout, IOStreams: streams}
}

func (o *UpdateOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.Wait, "wait", o.Wait, "Wait until every pod of the sandbox enforces the new policy (EgressReady True for its generation).")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "With --wait: how long to wait (like 30s or 5m). Zero checks once; negative waits without limit.")
}

// Complete takes the sandbox name (the first argument), the namespace and the client.
func (o *UpdateOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
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

// newUpdateCommand returns a subcommand that changes a policy: complete reads the arguments after
// NAME (and the subcommand's flags) and sets o.Edit.
func newUpdateCommand(f cmdutil.Factory, o *UpdateOptions, cmd *cobra.Command, complete func(cmd *cobra.Command, args []string) error) *cobra.Command {
	cmd.DisableFlagsInUseLine = true
	cmd.ValidArgsFunction = cmdutil.SandboxNameCompletion(f, true)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := o.Complete(f, cmd, args); err != nil {
			return err
		}
		if err := complete(cmd, args[1:]); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
	o.addFlags(cmd)
	return cmd
}

// NewCmdAllow returns `network allow`.
func NewCmdAllow(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmdAdd(f, NewUpdateOptions(streams), netpolicy.ActionAllow, &cobra.Command{
		Use:     "allow NAME TARGET[:PORTS]... [--first] [--wait [--timeout=DURATION]]",
		Short:   "Add rules that allow destinations to a sandbox's network policy",
		Long:    allowLong,
		Example: allowExample,
	})
}

// NewCmdDeny returns `network deny`.
func NewCmdDeny(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmdAdd(f, NewUpdateOptions(streams), netpolicy.ActionDeny, &cobra.Command{
		Use:     "deny NAME TARGET[:PORTS]... [--first] [--wait [--timeout=DURATION]]",
		Short:   "Add rules that deny destinations to a sandbox's network policy",
		Long:    denyLong,
		Example: denyExample,
	})
}

func newCmdAdd(f cmdutil.Factory, o *UpdateOptions, action string, cmd *cobra.Command) *cobra.Command {
	var first bool
	cmd = newUpdateCommand(f, o, cmd, func(cmd *cobra.Command, targets []string) error {
		if len(targets) == 0 {
			return cmdutil.UsageErrorf(cmd, "at least one TARGET is required after NAME")
		}
		rules, err := netpolicy.ParseRules(targets, action)
		if err != nil {
			return cmdutil.UsageErrorf(cmd, "invalid target %s", err)
		}
		o.Edit = netpolicy.AddRules(rules, first)
		return nil
	})
	cmd.Flags().BoolVar(&first, "first", false, "Put the new rules before the others, so that they match first.")
	return cmd
}

// NewCmdRemove returns `network remove`.
func NewCmdRemove(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewUpdateOptions(streams)
	return newUpdateCommand(f, o, &cobra.Command{
		Use:     "remove NAME RULE... [--wait [--timeout=DURATION]]",
		Short:   "Remove rules from a sandbox's network policy",
		Long:    removeLong,
		Example: removeExample,
	}, func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmdutil.UsageErrorf(cmd, "at least one RULE (a rule number or a TARGET) is required after NAME")
		}
		selectors, err := netpolicy.ParseSelectors(args)
		if err != nil {
			return cmdutil.UsageErrorf(cmd, "invalid rule %s", err)
		}
		o.Edit = netpolicy.RemoveRules(selectors)
		return nil
	})
}

// NewCmdDenyAll returns `network deny-all`.
func NewCmdDenyAll(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewUpdateOptions(streams)
	return newUpdateCommand(f, o, &cobra.Command{
		Use:     "deny-all NAME [--wait [--timeout=DURATION]]",
		Short:   "Deny all outbound traffic of a sandbox",
		Long:    denyAllLong,
		Example: denyAllExample,
	}, func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return cmdutil.UsageErrorf(cmd, "deny-all takes one NAME, got %q", append([]string{o.Name}, args...))
		}
		o.Edit = netpolicy.DenyAll()
		return nil
	})
}

// NewCmdReset returns `network reset`.
func NewCmdReset(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewUpdateOptions(streams)
	return newUpdateCommand(f, o, &cobra.Command{
		Use:     "reset NAME [--wait [--timeout=DURATION]]",
		Short:   "Remove a sandbox's own network policy, so that its pool's or the platform's applies",
		Long:    resetLong,
		Example: resetExample,
	}, func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return cmdutil.UsageErrorf(cmd, "reset takes one NAME, got %q", append([]string{o.Name}, args...))
		}
		o.Edit = netpolicy.Reset()
		return nil
	})
}

// SetOptions are the inputs of `network set`.
type SetOptions struct {
	*UpdateOptions
	Filename      string
	DefaultAction string
}

// NewCmdSet returns `network set`.
func NewCmdSet(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &SetOptions{UpdateOptions: NewUpdateOptions(streams)}
	cmd := newUpdateCommand(f, o.UpdateOptions, &cobra.Command{
		Use:     "set NAME (-f FILE | --default-action=Allow|Deny) [--wait [--timeout=DURATION]]",
		Short:   "Replace a sandbox's network policy, or set its default action",
		Long:    setLong,
		Example: setExample,
	}, func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return cmdutil.UsageErrorf(cmd, "set takes one NAME, got %q; give the policy with -f or --default-action", append([]string{o.Name}, args...))
		}
		return o.Validate(cmd)
	})
	cmd.Flags().StringVarP(&o.Filename, "filename", "f", o.Filename, "File holding the policy, in YAML or JSON; - for standard input.")
	cmd.Flags().StringVar(&o.DefaultAction, "default-action", o.DefaultAction, "What no rule matches: Allow or Deny. Keeps the rules.")
	_ = cmd.RegisterFlagCompletionFunc("default-action", cobra.FixedCompletions([]string{netpolicy.ActionAllow, netpolicy.ActionDeny}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// Validate reads and checks the policy, or the default action, before anything is sent.
func (o *SetOptions) Validate(cmd *cobra.Command) error {
	switch {
	case o.Filename != "" && o.DefaultAction != "":
		return cmdutil.UsageErrorf(cmd, "-f and --default-action cannot be used together: a file sets the default action too")
	case o.DefaultAction != "":
		action, err := netpolicy.ParseDefaultAction(o.DefaultAction)
		if err != nil {
			return cmdutil.UsageErrorf(cmd, "invalid --default-action %q: %s", o.DefaultAction, err)
		}
		o.Edit = netpolicy.SetDefaultAction(action)
		return nil
	case o.Filename == "":
		return cmdutil.UsageErrorf(cmd, "one of -f and --default-action is required")
	}
	p, err := o.readPolicy()
	if err != nil {
		return err
	}
	o.Edit = netpolicy.SetPolicy(p)
	return nil
}

// readPolicy reads and validates the policy in -f.
func (o *SetOptions) readPolicy() (*sandboxv1alpha1.SandboxNetworkPolicy, error) {
	name := o.Filename
	var data []byte
	var err error
	if o.Filename == "-" {
		name = "standard input"
		data, err = io.ReadAll(o.In)
	} else {
		data, err = os.ReadFile(o.Filename)
	}
	if err != nil {
		return nil, fmt.Errorf("read the policy: %w", err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("invalid policy in %s: %w", name, err)
	}
	if doc == nil {
		return nil, fmt.Errorf("%s holds no policy; to remove the sandbox's own policy, use 'kubectl sandbox network reset %s'", name, o.Name)
	}
	p := &sandboxv1alpha1.SandboxNetworkPolicy{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		return nil, fmt.Errorf("invalid policy in %s: %w (the file holds the policy itself, with defaultAction and egress, as 'kubectl sandbox network show NAME -o yaml' prints it)", name, err)
	}
	if err := netpolicy.CheckRuleCount(p); err != nil {
		return nil, fmt.Errorf("invalid policy in %s: %w", name, err)
	}
	if errs := netpolicy.ValidatePolicy(p, nil); len(errs) > 0 {
		msgs := make([]string, 0, len(errs))
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		return nil, fmt.Errorf("invalid policy in %s: %s", name, strings.Join(msgs, "; "))
	}
	return p, nil
}

// Run applies the edit (sandboxclient.UpdateNetworkPolicy: a conditional merge patch, tried
// again on a conflict) and with --wait waits until the pods enforce the result.
func (o *UpdateOptions) Run(ctx context.Context) error {
	c := o.Sandboxes
	result, changed, warnings, err := c.UpdateNetworkPolicy(ctx, o.Name, o.Edit)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(o.ErrOut, "Warning: %s\n", w)
	}
	verb := "unchanged"
	if changed {
		verb = "updated"
	}
	fmt.Fprintf(o.Out, "%s/%s network policy %s (%s)\n", cmdutil.SandboxKind, o.Name, verb, netpolicy.Summary(result.Spec.NetworkPolicy))
	if !o.Wait {
		return nil
	}
	sb, err := o.waitInForce(ctx, c, result)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "%s/%s network policy in force (generation %d)\n", cmdutil.SandboxKind, o.Name, sandboxclient.ObservedGeneration(sb, meta.FindStatusCondition(sb.Status.Conditions, ConditionEgressReady)))
	return nil
}

// waitInForce waits until the pods enforce sb's policy, for --timeout: zero checks once,
// negative waits without limit.
func (o *UpdateOptions) waitInForce(ctx context.Context, c *sandboxclient.Client, sb *sandboxv1alpha1.Sandbox) (*sandboxv1alpha1.Sandbox, error) {
	if o.Timeout == 0 {
		if done, err := sandboxclient.PolicyInForce(sb, sb.Generation); done || err != nil {
			return sb, err
		}
		return nil, fmt.Errorf("the network policy of sandbox %q (generation %d) is not in force yet%s", o.Name, sb.Generation, sandboxclient.NotInForceReason(sb, sb.Generation))
	}
	waitCtx, cancel := watchtools.ContextWithOptionalTimeout(ctx, max(o.Timeout, 0))
	defer cancel()
	return c.WaitNetworkPolicy(waitCtx, sb)
}
