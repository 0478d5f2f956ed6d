// Package get implements `kubectl sandbox get` and `kubectl sandbox list`.
package get

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// Output formats printed as the server's table rather than by PrintFlags.
const (
	outputTable = ""
	outputWide  = "wide"
)

var (
	getLong = cmdutil.LongDesc(`
		Display one or many sandboxes.

		Prints the server's table of the sandboxes, the one 'kubectl get sandboxes' prints:
		their phase, ready replicas, pool, time until expiry and age; -o wide adds the image,
		the pod and node of the first replica, a summary of the outbound network policy (see
		'kubectl sandbox network') and the progress of their tasks. Use -o json, -o yaml or
		-o name for other formats, and -l to filter by label.`)

	getExample = cmdutil.Examples(`
		# List the sandboxes of the current namespace
		kubectl sandbox get

		# List sandboxes of all namespaces, with their images, pods and nodes
		kubectl sandbox get -A -o wide

		# Show one sandbox as YAML
		kubectl sandbox get my-sandbox -o yaml

		# Print the names of the sandboxes labeled team=ml
		kubectl sandbox get -l team=ml -o name`)

	listLong = cmdutil.LongDesc(`
		List sandboxes: 'kubectl sandbox get' without names.`)

	listExample = cmdutil.Examples(`
		# List the sandboxes of the current namespace
		kubectl sandbox list

		# List sandboxes of all namespaces as JSON
		kubectl sandbox list -A -o json`)
)

// GetOptions are the inputs of `kubectl sandbox get` and `list`.
type GetOptions struct {
	PrintFlags *genericclioptions.PrintFlags
	// PrintObj prints the -o formats other than the table; nil for the table.
	PrintObj printers.ResourcePrinterFunc

	Names         []string
	AllNamespaces bool
	LabelSelector string
	NoHeaders     bool
	ShowLabels    bool

	Namespace string
	Client    clientset.Interface

	genericiooptions.IOStreams
}

// NewGetOptions returns GetOptions with kubectl's defaults.
func NewGetOptions(streams genericiooptions.IOStreams) *GetOptions {
	return &GetOptions{
		PrintFlags: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme.Scheme),
		IOStreams:  streams,
	}
}

// NewCmdGet returns the `get` command.
func NewCmdGet(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmdGet(f, NewGetOptions(streams))
}

func newCmdGet(f cmdutil.Factory, o *GetOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   "get [NAME...] [-o wide|json|yaml|name] [-l SELECTOR] [-A]",
		DisableFlagsInUseLine: true,
		Short:                 "Display one or many sandboxes",
		Long:                  getLong,
		Example:               getExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, false),
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
	o.AddFlags(cmd)
	return cmd
}

// NewCmdList returns the `list` command: get without names.
func NewCmdList(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmdList(f, NewGetOptions(streams))
}

func newCmdList(f cmdutil.Factory, o *GetOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   "list [-o wide|json|yaml|name] [-l SELECTOR] [-A]",
		DisableFlagsInUseLine: true,
		// No "ls" alias: `kubectl sandbox ls` lists the files of a sandbox.
		Short:             "List sandboxes",
		Long:              listLong,
		Example:           listExample,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cmdutil.UsageErrorf(cmd, "list takes no arguments; use 'get NAME' for named sandboxes")
			}
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			if err := o.Validate(cmd); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.AddFlags(cmd)
	return cmd
}

// AddFlags binds the flags of get and list.
func (o *GetOptions) AddFlags(cmd *cobra.Command) {
	o.PrintFlags.AddFlags(cmd)
	formats := append([]string{outputWide}, o.PrintFlags.AllowedFormats()...)
	cmd.Flags().Lookup("output").Usage = fmt.Sprintf("Output format. One of: (%s). Default: a table.", strings.Join(formats, ", "))
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", o.AllNamespaces, "List sandboxes of all namespaces. The namespace of the current context is ignored even if set with --namespace.")
	cmd.Flags().StringVarP(&o.LabelSelector, "selector", "l", o.LabelSelector, "Label selector to filter on, supports '=', '==', '!=', 'in', 'notin' (e.g. -l key1=value1,key2=value2).")
	cmd.Flags().BoolVar(&o.NoHeaders, "no-headers", o.NoHeaders, "Don't print headers in table output.")
	cmd.Flags().BoolVar(&o.ShowLabels, "show-labels", o.ShowLabels, "Show all labels as the last column in table output.")
}

// Complete takes the names, namespace, client and printer.
func (o *GetOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	o.Names = args
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	if o.AllNamespaces {
		o.Namespace = metav1.NamespaceAll
	}
	if format := *o.PrintFlags.OutputFormat; format != outputTable && format != outputWide {
		printer, err := o.PrintFlags.ToPrinter()
		if err != nil {
			if genericclioptions.IsNoCompatiblePrinterError(err) {
				return cmdutil.UsageErrorf(cmd, "unknown output format %q; use one of: %s, %s", format, outputWide, strings.Join(o.PrintFlags.AllowedFormats(), ", "))
			}
			return err
		}
		o.PrintObj = printer.PrintObj
	}
	if o.Client, err = f.SandboxClient(); err != nil {
		return err
	}
	return nil
}

// Validate checks the combination of names and flags.
func (o *GetOptions) Validate(cmd *cobra.Command) error {
	if len(o.Names) > 0 && o.AllNamespaces {
		return cmdutil.UsageErrorf(cmd, "a sandbox cannot be retrieved by name across all namespaces")
	}
	if len(o.Names) > 0 && o.LabelSelector != "" {
		return cmdutil.UsageErrorf(cmd, "a selector cannot be used with names")
	}
	return nil
}

// Run fetches the sandboxes and prints them: the server's table, or the objects for the other
// formats. Named sandboxes that do not exist are reported after the ones that do, as kubectl
// does.
func (o *GetOptions) Run(ctx context.Context) error {
	if o.PrintObj == nil {
		return o.runTable(ctx)
	}
	sandboxes := o.Client.SandboxV1alpha1().Sandboxes(o.Namespace)
	var items []sandboxv1alpha1.Sandbox
	var errs []error
	if len(o.Names) == 0 {
		list, err := sandboxes.List(ctx, metav1.ListOptions{LabelSelector: o.LabelSelector})
		if err != nil {
			return err
		}
		items = list.Items
	} else {
		for _, name := range o.Names {
			sb, err := sandboxes.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			items = append(items, *sb)
		}
	}
	if err := o.printObjects(items); err != nil {
		return err
	}
	return utilerrors.NewAggregate(errs)
}

func (o *GetOptions) printObjects(items []sandboxv1alpha1.Sandbox) error {
	// Objects from a typed client carry no apiVersion and kind; the printers need them.
	gvk := sandboxv1alpha1.SchemeGroupVersion.WithKind("Sandbox")
	for i := range items {
		items[i].SetGroupVersionKind(gvk)
	}
	if *o.PrintFlags.OutputFormat == "name" {
		// The name printer takes one object at a time.
		for i := range items {
			if err := o.PrintObj(&items[i], o.Out); err != nil {
				return err
			}
		}
		return nil
	}
	if len(o.Names) > 0 && len(items) == 0 {
		return nil
	}
	var obj runtime.Object = &sandboxv1alpha1.SandboxList{Items: items}
	if len(o.Names) == 1 {
		obj = &items[0]
	}
	return o.PrintObj(obj, o.Out)
}

// runTable prints the server's table: of the list, or of each named sandbox in turn, their
// rows in one table so that the columns line up.
func (o *GetOptions) runTable(ctx context.Context) error {
	client := o.Client.SandboxV1alpha1().RESTClient()
	var table *metav1.Table
	var errs []error
	if len(o.Names) == 0 {
		t, err := getTable(ctx, client.Get().
			Namespace(o.Namespace).
			Resource("sandboxes").
			VersionedParams(&metav1.ListOptions{LabelSelector: o.LabelSelector}, scheme.ParameterCodec))
		if err != nil {
			return err
		}
		table = t
	} else {
		for _, name := range o.Names {
			t, err := getTable(ctx, client.Get().Namespace(o.Namespace).Resource("sandboxes").Name(name))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if table == nil {
				table = t
			} else {
				table.Rows = append(table.Rows, t.Rows...)
			}
		}
	}
	if table == nil || len(table.Rows) == 0 {
		if len(o.Names) == 0 {
			o.printNoneFound(o.ErrOut)
		}
		return utilerrors.NewAggregate(errs)
	}
	printer := printers.NewTablePrinter(printers.PrintOptions{
		Wide:          *o.PrintFlags.OutputFormat == outputWide,
		WithNamespace: o.AllNamespaces,
		NoHeaders:     o.NoHeaders,
		ShowLabels:    o.ShowLabels,
	})
	if err := printer.PrintObj(table, o.Out); err != nil {
		return err
	}
	return utilerrors.NewAggregate(errs)
}

// getTable sends req asking for the server's table. The rows carry the sandboxes' metadata
// (includeObject=Metadata, the server's default, as kubectl get asks for it): the printer takes
// the NAMESPACE column of --all-namespaces and the LABELS of --show-labels from it.
func getTable(ctx context.Context, req *rest.Request) (*metav1.Table, error) {
	return cmdutil.ServerTable(ctx, req, "sandboxes", metav1.IncludeMetadata)
}

func (o *GetOptions) printNoneFound(w io.Writer) {
	if o.AllNamespaces {
		fmt.Fprintln(w, "No resources found")
		return
	}
	fmt.Fprintf(w, "No resources found in %s namespace.\n", o.Namespace)
}
