// Package get implements `kubectl sandbox get` and `kubectl sandbox list`.
package get

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/network"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// Output formats printed as a table by this command rather than by PrintFlags.
const (
	outputTable = ""
	outputWide  = "wide"
)

var (
	getLong = cmdutil.LongDesc(`
		Display one or many sandboxes.

		Prints a table of the sandboxes' phase, ready replicas, pool, time until expiry and
		age, the columns 'kubectl get sandboxes' shows; -o wide adds the image, the pod and
		node of the first replica, and a summary of the outbound network policy (see
		'kubectl sandbox network'). Use -o json, -o yaml or -o name for other formats, and
		-l to filter by label.`)

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
	// Now is the clock AGE and EXPIRES are measured with.
	Now func() time.Time

	genericiooptions.IOStreams
}

// NewGetOptions returns GetOptions with kubectl's defaults.
func NewGetOptions(streams genericiooptions.IOStreams) *GetOptions {
	return &GetOptions{
		PrintFlags: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme.Scheme),
		Now:        time.Now,
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

// Run fetches the sandboxes and prints them. Named sandboxes that do not exist are reported after
// the ones that do, as kubectl does.
func (o *GetOptions) Run(ctx context.Context) error {
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
	if err := o.print(items); err != nil {
		return err
	}
	return utilerrors.NewAggregate(errs)
}

func (o *GetOptions) print(items []sandboxv1alpha1.Sandbox) error {
	// Objects from a typed client carry no apiVersion and kind; the printers need them.
	gvk := sandboxv1alpha1.SchemeGroupVersion.WithKind("Sandbox")
	for i := range items {
		items[i].SetGroupVersionKind(gvk)
	}

	if o.PrintObj != nil {
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

	if len(items) == 0 {
		if len(o.Names) == 0 {
			o.printNoneFound(o.ErrOut)
		}
		return nil
	}
	printer := printers.NewTablePrinter(printers.PrintOptions{
		Wide:          *o.PrintFlags.OutputFormat == outputWide,
		WithNamespace: o.AllNamespaces,
		NoHeaders:     o.NoHeaders,
		ShowLabels:    o.ShowLabels,
	})
	return printer.PrintObj(Table(items, o.Now()), o.Out)
}

func (o *GetOptions) printNoneFound(w io.Writer) {
	if o.AllNamespaces {
		fmt.Fprintln(w, "No resources found")
		return
	}
	fmt.Fprintf(w, "No resources found in %s namespace.\n", o.Namespace)
}

// Table is the table of sandboxes kubectl would print, with the columns of the server's table
// (what 'kubectl get sandboxes' shows): NAME, PHASE, READY, POOL, EXPIRES and AGE, plus IMAGE,
// POD, NODE and EGRESS in wide output.
func Table(items []sandboxv1alpha1.Sandbox, now time.Time) *metav1.Table {
	table := &metav1.Table{
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Name", Type: "string", Format: "name", Description: "Name of the sandbox."},
			{Name: "Phase", Type: "string", Description: "Pending, Running, Failed, Expired or Terminating."},
			{Name: "Ready", Type: "string", Description: "Ready replicas of the desired replicas."},
			{Name: "Pool", Type: "string", Description: "Warm pool the pods come from; <none> for a pod template."},
			{Name: "Expires", Type: "string", Description: "Time until the sandbox expires; <none> if it never does."},
			{Name: "Age", Type: "string", Description: "Time since the sandbox was created."},
			{Name: "Image", Type: "string", Priority: 1, Description: "Image of the sandbox container."},
			{Name: "Pod", Type: "string", Priority: 1, Description: "Pod of the first replica."},
			{Name: "Node", Type: "string", Priority: 1, Description: "Node of the first replica."},
			{Name: "Egress", Type: "string", Priority: 1, Description: "Outbound network policy: default (none of the sandbox's own), deny-all, allow-all, or the default action and the number of rules, like \"deny, 2 rules\"."},
		},
	}
	for i := range items {
		sb := &items[i]
		pod, node := firstPod(sb)
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []any{
				sb.Name, phase(sb), ready(sb), pool(sb), expires(sb, now), age(sb.CreationTimestamp, now),
				image(sb), pod, node, network.Summary(sb.Spec.NetworkPolicy),
			},
			Object: runtime.RawExtension{Object: sb},
		})
	}
	return table
}

// phase is the phase as the server's table shows it: Pending until the controller has set one,
// Terminating once deleted unless it is being deleted because it expired.
func phase(sb *sandboxv1alpha1.Sandbox) string {
	switch {
	case sb.DeletionTimestamp != nil && sb.Status.Phase != sandboxv1alpha1.PhaseExpired:
		return string(sandboxv1alpha1.PhaseTerminating)
	case sb.Status.Phase == "":
		return string(sandboxv1alpha1.PhasePending)
	}
	return string(sb.Status.Phase)
}

func ready(sb *sandboxv1alpha1.Sandbox) string {
	desired := int32(1)
	if sb.Spec.Replicas != nil {
		desired = *sb.Spec.Replicas
	}
	return fmt.Sprintf("%d/%d", sb.Status.Ready, desired)
}

// pool is the warm pool of the sandbox's pods; <none> for a sandbox made from its own template.
func pool(sb *sandboxv1alpha1.Sandbox) string {
	if sb.Spec.PoolRef == nil {
		return "<none>"
	}
	return sb.Spec.PoolRef.Name
}

// expires is the time left until the sandbox expires.
func expires(sb *sandboxv1alpha1.Sandbox, now time.Time) string {
	if sb.Status.ExpiresAt == nil {
		return "<none>"
	}
	left := sb.Status.ExpiresAt.Sub(now)
	if left <= 0 {
		return "expired"
	}
	return duration.HumanDuration(left)
}

func age(created metav1.Time, now time.Time) string {
	if created.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(created.Time))
}

func image(sb *sandboxv1alpha1.Sandbox) string {
	if t := sb.Spec.Template; t != nil && len(t.Spec.Containers) > 0 && t.Spec.Containers[0].Image != "" {
		return t.Spec.Containers[0].Image
	}
	return "<none>"
}

// firstPod is the pod and node of the replica with the lowest index, "<none>" standing for what
// is not known yet.
func firstPod(sb *sandboxv1alpha1.Sandbox) (pod, node string) {
	pod, node = "<none>", "<none>"
	if len(sb.Status.Pods) == 0 {
		return pod, node
	}
	first := slices.MinFunc(sb.Status.Pods, func(a, b sandboxv1alpha1.SandboxPodStatus) int { return cmp.Compare(a.Replica, b.Replica) })
	if first.Name != "" {
		pod = first.Name
	}
	if first.NodeName != "" {
		node = first.NodeName
	}
	return pod, node
}
