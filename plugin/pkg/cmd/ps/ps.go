// Package ps implements `kubectl sandbox ps`.
package ps

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
)

// Output formats.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

var (
	psLong = cmdutil.LongDesc(fmt.Sprintf(`
		List the processes of a sandbox.

		A process is a command started with 'kubectl sandbox exec --detach': it runs in one
		replica and outlives the connection that started it. This prints the server's table of
		the sandbox's processes (its processes subresource), those of every replica, or with
		--replica of one, each replica's oldest first: the process's ID, its replica, its phase
		(Running, Exited, or Lost when the container restarted under it), its exit code or the
		signal that killed it, its PID, how long it ran (or has been running), its command and
		whether it has a terminal; -o wide adds why it ended and its pod. A replica that cannot
		be asked is left out, with a warning. Use -o json or -o yaml for the
		SandboxProcessList as the API has it.

		Processes live as long as the replica's container: pausing a sandbox ends them, and
		resume starts none again. An ended process stays listed, with its output
		('kubectl sandbox logs --process ID'), until newer ended processes push it out (the
		sandbox keeps the newest %d and at most %d MiB of their output), or the container
		ends.`, execdapi.MaxEndedProcesses, execdapi.MaxEndedProcessLogBytes>>20))

	psExample = cmdutil.Examples(`
		# List the processes of sandbox my-sandbox
		kubectl sandbox ps my-sandbox

		# List the processes of the second replica, with their pods
		kubectl sandbox ps workers --replica 1 -o wide

		# Print the IDs of the running processes
		kubectl sandbox ps my-sandbox -o json | jq -r '.items[] | select(.status.phase == "Running") | .metadata.name'`)
)

// PsOptions are the inputs of `kubectl sandbox ps`.
type PsOptions struct {
	Name string
	// Replica is the replica whose processes to list; nil: every replica's.
	Replica   *int32
	Output    string
	NoHeaders bool

	Namespace string
	Client    clientset.Interface

	genericiooptions.IOStreams
}

// NewPsOptions returns PsOptions printing a table of every replica's processes.
func NewPsOptions(streams genericiooptions.IOStreams) *PsOptions {
	return &PsOptions{IOStreams: streams}
}

// NewCmdPs returns the `ps` command.
func NewCmdPs(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewPsOptions(streams)
	var replica int32
	cmd := &cobra.Command{
		Use:                   "ps NAME [--replica=N] [-o json|yaml|wide] [--no-headers]",
		DisableFlagsInUseLine: true,
		Short:                 "List the processes of a sandbox",
		Long:                  psLong,
		Example:               psExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("replica") {
				o.Replica = &replica
			}
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().Int32Var(&replica, "replica", 0, "Index of the replica whose processes to list (default: every replica's).")
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Output format. One of: (json, yaml, wide). Default: a table.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputJSON, outputYAML, outputWide}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().BoolVar(&o.NoHeaders, "no-headers", o.NoHeaders, "Don't print headers in table output.")
	return cmd
}

// Complete takes the name, checks the flags, and takes the namespace and client.
func (o *PsOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return cmdutil.UsageErrorf(cmd, "sandbox NAME is required")
	case 1:
		o.Name = args[0]
	default:
		return cmdutil.UsageErrorf(cmd, "ps takes one NAME, got %q", args)
	}
	switch o.Output {
	case outputTable, outputWide, outputJSON, outputYAML:
	default:
		return cmdutil.UsageErrorf(cmd, "unknown output format %q; use one of: %s, %s, %s", o.Output, outputJSON, outputYAML, outputWide)
	}
	if o.Replica != nil && *o.Replica < 0 {
		return cmdutil.UsageErrorf(cmd, "--replica must not be negative, got %d", *o.Replica)
	}
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	if o.Client, err = f.SandboxClient(); err != nil {
		return err
	}
	return nil
}

// Run lists the processes: the server's table, or the SandboxProcessList for -o json and -o
// yaml.
func (o *PsOptions) Run(ctx context.Context) error {
	if o.Output == outputTable || o.Output == outputWide {
		table, err := cmdutil.ServerTable(ctx, o.request(), "processes", metav1.IncludeNone)
		if err != nil {
			return err
		}
		printer := printers.NewTablePrinter(printers.PrintOptions{NoHeaders: o.NoHeaders, Wide: o.Output == outputWide})
		return printer.PrintObj(table, o.Out)
	}
	list := &sandboxv1alpha1.SandboxProcessList{}
	if err := o.request().Do(ctx).Into(list); err != nil {
		return err
	}
	// The client's decoder drops the kinds, which the printers need.
	list.SetGroupVersionKind(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxProcessList"))
	for i := range list.Items {
		list.Items[i].SetGroupVersionKind(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxProcess"))
	}
	if o.Output == outputJSON {
		return (&printers.JSONPrinter{}).PrintObj(list, o.Out)
	}
	return (&printers.YAMLPrinter{}).PrintObj(list, o.Out)
}

func (o *PsOptions) request() *rest.Request {
	req := o.Client.SandboxV1alpha1().RESTClient().Get().
		Namespace(o.Namespace).
		Resource("sandboxes").
		Name(o.Name).
		SubResource("processes")
	if o.Replica != nil {
		req = req.VersionedParams(&sandboxv1alpha1.SandboxProcessOptions{Replica: o.Replica}, scheme.ParameterCodec)
	}
	return req
}
