package runcode

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

var (
	contextsLong = cmdutil.LongDesc(`
		List, make or delete the code contexts of a sandbox.

		A code context is a stateful Python interpreter (a Jupyter kernel) in one replica of a
		sandbox, which 'kubectl sandbox run-code' runs code in. Without flags this prints the
		server's table of the contexts of every replica (or with --replica of one): ID, replica,
		language, phase (Idle, Busy, or Dead when its interpreter ended, for example out of
		memory), how many runs it has had, and when it last ran; -o wide adds its PID, pod
		and why a Dead one ended. --create ID makes a context (the answer comes once its
		interpreter is up), --delete ID ends one and its interpreter with it.`)

	contextsExample = cmdutil.Examples(`
		# List the code contexts of sandbox my-sandbox
		kubectl sandbox contexts my-sandbox

		# Make a context for an analysis, run code in it, then end it
		kubectl sandbox contexts my-sandbox --create analysis
		kubectl sandbox run-code my-sandbox --context analysis -- 'import pandas'
		kubectl sandbox contexts my-sandbox --delete analysis`)
)

// ContextsOptions are the inputs of `kubectl sandbox contexts`.
type ContextsOptions struct {
	Name    string
	Replica *int32
	Create  string
	Delete  string
	// WorkingDir is a made context's.
	WorkingDir string
	Output     string
	NoHeaders  bool

	Namespace string
	Sandboxes *sandboxclient.Client

	genericiooptions.IOStreams
}

// NewCmdContexts returns the `contexts` command.
func NewCmdContexts(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &ContextsOptions{IOStreams: streams}
	var replica int32
	cmd := &cobra.Command{
		Use:                   "contexts NAME [--replica=N] [--create=ID [--workdir=DIR] | --delete=ID] [-o json|yaml|wide]",
		DisableFlagsInUseLine: true,
		Short:                 "List, make or delete the code contexts of a sandbox",
		Long:                  contextsLong,
		Example:               contextsExample,
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
	cmd.Flags().Int32Var(&replica, "replica", 0, "Index of the replica (default: every replica's for a list, the first for --create and --delete).")
	cmd.Flags().StringVar(&o.Create, "create", o.Create, "Make a context with this ID.")
	cmd.Flags().StringVar(&o.WorkingDir, "workdir", o.WorkingDir, "Absolute directory a made context starts in.")
	cmd.Flags().StringVar(&o.Delete, "delete", o.Delete, "Delete the context with this ID.")
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Output format. One of: (json, yaml, wide). Default: a table, or a message.")
	cmd.Flags().BoolVar(&o.NoHeaders, "no-headers", o.NoHeaders, "Don't print headers in table output.")
	return cmd
}

// Complete takes the name, checks the flags, and takes the namespace and client.
func (o *ContextsOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return cmdutil.UsageErrorf(cmd, "contexts takes one sandbox NAME, got %q", args)
	}
	o.Name = args[0]
	switch {
	case o.Create != "" && o.Delete != "":
		return cmdutil.UsageErrorf(cmd, "--create and --delete exclude each other")
	case o.WorkingDir != "" && o.Create == "":
		return cmdutil.UsageErrorf(cmd, "--workdir is for --create")
	case o.Replica != nil && *o.Replica < 0:
		return cmdutil.UsageErrorf(cmd, "--replica must not be negative, got %d", *o.Replica)
	}
	switch o.Output {
	case "", "wide", "json", "yaml":
	default:
		return cmdutil.UsageErrorf(cmd, "unknown output format %q; use one of: json, yaml, wide", o.Output)
	}
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	o.Sandboxes, err = cmdutil.Client(f)
	return err
}

// listRequest is the list of the contexts, for the server's table.
func (o *ContextsOptions) listRequest() *rest.Request {
	req := o.Sandboxes.Clientset().SandboxV1alpha1().RESTClient().Get().
		Namespace(o.Namespace).Resource("sandboxes").Name(o.Name).SubResource("contexts")
	if o.Replica != nil {
		req = req.VersionedParams(&sandboxv1alpha1.SandboxCodeContextOptions{Replica: o.Replica}, scheme.ParameterCodec)
	}
	return req
}

// Run lists, makes or deletes.
func (o *ContextsOptions) Run(ctx context.Context) error {
	var out *sandboxv1alpha1.SandboxCodeContext
	var err error
	what := ""
	switch {
	case o.Create != "":
		cc := &sandboxv1alpha1.SandboxCodeContext{ObjectMeta: metav1.ObjectMeta{Name: o.Create},
			Spec: sandboxv1alpha1.SandboxCodeContextSpec{WorkingDir: o.WorkingDir}}
		if o.Replica != nil {
			cc.Spec.Replica = *o.Replica
		}
		// A make takes spec.replica, not the query's.
		out, err = o.Sandboxes.CreateContext(ctx, o.Name, cc)
		what = "made"
	case o.Delete != "":
		replica := int32(0)
		if o.Replica != nil {
			replica = *o.Replica
		}
		out, err = o.Sandboxes.DeleteContext(ctx, o.Name, replica, o.Delete)
		what = "deleted"
	default:
		return o.list(ctx)
	}
	if err != nil {
		return err
	}
	if o.Output == "json" || o.Output == "yaml" {
		out.SetGroupVersionKind(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxCodeContext"))
		return printObject(out, o.Output, o)
	}
	_, err = fmt.Fprintf(o.Out, "code context %s of sandbox %q %s (replica %d, %s)\n", out.Name, o.Name, what, out.Spec.Replica, out.Status.Phase)
	return err
}

func (o *ContextsOptions) list(ctx context.Context) error {
	if o.Output == "" || o.Output == "wide" {
		table, err := cmdutil.ServerTable(ctx, o.listRequest(), "contexts", metav1.IncludeNone)
		if err != nil {
			return err
		}
		printer := printers.NewTablePrinter(printers.PrintOptions{NoHeaders: o.NoHeaders, Wide: o.Output == "wide"})
		return printer.PrintObj(table, o.Out)
	}
	list, err := o.Sandboxes.ListContexts(ctx, o.Name, o.Replica)
	if err != nil {
		return err
	}
	list.SetGroupVersionKind(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxCodeContextList"))
	for i := range list.Items {
		list.Items[i].SetGroupVersionKind(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxCodeContext"))
	}
	return printObject(list, o.Output, o)
}

// printObject prints obj as JSON or YAML.
func printObject(obj runtime.Object, output string, o *ContextsOptions) error {
	if output == "json" {
		return (&printers.JSONPrinter{}).PrintObj(obj, o.Out)
	}
	return (&printers.YAMLPrinter{}).PrintObj(obj, o.Out)
}
