// Package top implements `kubectl sandbox top`.
package top

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// Output formats.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// The values of --sort-by, and the columns of the server's table each sorts by.
const (
	sortByCPU    = "cpu"
	sortByMemory = "memory"

	cpuColumn    = "CPU(cores)"
	memoryColumn = "MEMORY(bytes)"
)

var sortColumns = map[string]string{sortByCPU: cpuColumn, sortByMemory: memoryColumn}

var (
	topLong = cmdutil.LongDesc(`
		Display what sandboxes use: CPU, memory, disk, network and processes, a row per
		replica.

		The figures come from each replica's node, not from inside the sandbox, whose code
		could forge them: the kube-sandbox node agent reads the pod's cgroup, its writable
		layer and emptyDir volumes, its network interface and the egress filter's verdicts
		about every 10 seconds. CPU is the rate over the window between two reads; the rest
		is as of the last read. Under gVisor the figures include the sandbox's sentry and
		gofer (the user-space kernel that runs its code), which is what the sandbox costs
		the node, and PROCESSES counts their threads on the node rather than the processes
		in the sandbox.

		The columns: NAME is the sandbox (NAMESPACE comes first with -A); REPLICA its index;
		CPU(cores) the cores used over the window (1000m is one core); MEMORY(bytes) the
		working set, by which the kubelet evicts and the kernel OOM-kills; DISK(bytes) what
		the sandbox wrote to its root filesystem and its disk-backed emptyDir volumes; NET-IN
		and NET-OUT the bytes its pod's interface received and sent since the pod started;
		PROCESSES the tasks in its pod's cgroup. -o wide adds MEM-LIMIT (the pod's memory
		limit), OOM-KILLS (the processes the kernel's OOM killer ended), DENIED (the new
		outbound connections its egress policy refused), NODE, WINDOW (the span the CPU rate
		is over) and MESSAGE (why a replica has no figures: no pod now, a node agent that did
		not answer, or a pod not read yet; its figures show <unknown>).

		--sort-by=cpu or --sort-by=memory orders the rows, largest first, as 'kubectl top'
		does; <unknown> comes last. Use -o json or -o yaml for the SandboxStats (of a named
		sandbox) or the SandboxStatsList as the API has them.

		RBAC: a named sandbox needs get on sandboxes/stats; the sandboxes of a namespace need
		list on sandboxstats there, and -A needs it in every namespace (API group
		sandbox.kube-sandbox.io).`)

	topExample = cmdutil.Examples(`
		# Show what the sandboxes of the current namespace use
		kubectl sandbox top

		# Show the replicas of sandbox eval, the busiest first
		kubectl sandbox top eval --sort-by=cpu

		# Show the sandboxes labeled team=ml in all namespaces, with memory limits, OOM kills and nodes
		kubectl sandbox top -A -l team=ml -o wide

		# Print each replica's memory working set in bytes
		kubectl sandbox top my-sandbox -o json | jq '.replicas[] | {replica, bytes: .memory.workingSetBytes}'`)
)

// TopOptions are the inputs of `kubectl sandbox top`.
type TopOptions struct {
	// Name is the sandbox whose figures to show; empty for every sandbox selected.
	Name          string
	AllNamespaces bool
	LabelSelector string
	// SortBy is cpu, memory, or empty for the server's order.
	SortBy    string
	Output    string
	NoHeaders bool

	Namespace string
	Sandboxes *sandboxclient.Client

	genericiooptions.IOStreams
}

// NewTopOptions returns TopOptions printing the table of the current namespace's sandboxes.
func NewTopOptions(streams genericiooptions.IOStreams) *TopOptions {
	return &TopOptions{IOStreams: streams}
}

// NewCmdTop returns the `top` command.
func NewCmdTop(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewTopOptions(streams)
	cmd := &cobra.Command{
		Use:                   "top [NAME] [-A] [-l SELECTOR] [--sort-by=cpu|memory] [-o wide|json|yaml] [--no-headers]",
		DisableFlagsInUseLine: true,
		Short:                 "Display the CPU, memory, disk and network sandboxes use",
		Long:                  topLong,
		Example:               topExample,
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
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", o.AllNamespaces, "Show the sandboxes of all namespaces. The namespace of the current context is ignored even if set with --namespace.")
	cmd.Flags().StringVarP(&o.LabelSelector, "selector", "l", o.LabelSelector, "Label selector of the sandboxes to show, supports '=', '==', '!=', 'in', 'notin' (e.g. -l key1=value1,key2=value2).")
	cmd.Flags().StringVar(&o.SortBy, "sort-by", o.SortBy, "Order the rows by cpu or memory, largest first.")
	_ = cmd.RegisterFlagCompletionFunc("sort-by", cobra.FixedCompletions([]string{sortByCPU, sortByMemory}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Output format. One of: (json, yaml, wide). Default: a table.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputJSON, outputYAML, outputWide}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().BoolVar(&o.NoHeaders, "no-headers", o.NoHeaders, "Don't print headers in table output.")
	return cmd
}

// Complete takes the name, the namespace and the client.
func (o *TopOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
	case 1:
		o.Name = args[0]
	default:
		return cmdutil.UsageErrorf(cmd, "top takes at most one NAME, got %q", args)
	}
	var err error
	if o.Namespace, _, err = f.Namespace(); err != nil {
		return err
	}
	o.Sandboxes, err = cmdutil.Client(f)
	return err
}

// Validate checks the flags and their combination with a name.
func (o *TopOptions) Validate(cmd *cobra.Command) error {
	switch o.Output {
	case outputTable, outputWide, outputJSON, outputYAML:
	default:
		return cmdutil.UsageErrorf(cmd, "unknown output format %q; use one of: %s, %s, %s", o.Output, outputJSON, outputYAML, outputWide)
	}
	if _, ok := sortColumns[o.SortBy]; o.SortBy != "" && !ok {
		return cmdutil.UsageErrorf(cmd, "--sort-by must be %s or %s, got %q", sortByCPU, sortByMemory, o.SortBy)
	}
	switch {
	case o.SortBy != "" && (o.Output == outputJSON || o.Output == outputYAML):
		return cmdutil.UsageErrorf(cmd, "--sort-by orders the table's rows; -o %s prints the objects in the server's order", o.Output)
	case o.Name != "" && o.AllNamespaces:
		return cmdutil.UsageErrorf(cmd, "a sandbox cannot be retrieved by name across all namespaces")
	case o.Name != "" && o.LabelSelector != "":
		return cmdutil.UsageErrorf(cmd, "a selector cannot be used with a name")
	}
	return nil
}

// Run prints the server's table of the figures, sorted when asked, or the objects for -o json
// and -o yaml.
func (o *TopOptions) Run(ctx context.Context) error {
	if o.Output == outputJSON || o.Output == outputYAML {
		return o.printObjects(ctx)
	}
	// The printer takes the NAMESPACE column of -A from each row's object, which only
	// includeObject=Metadata brings; without -A the objects would be bytes for nothing.
	include := metav1.IncludeNone
	if o.AllNamespaces {
		include = metav1.IncludeMetadata
	}
	table, err := cmdutil.ServerTable(ctx, o.request(), "sandbox stats", include)
	if err != nil {
		return err
	}
	if len(table.Rows) == 0 {
		if o.Name == "" {
			o.printNoneFound(o.ErrOut)
		}
		return nil
	}
	if o.SortBy != "" {
		if err := sortRows(table, sortColumns[o.SortBy]); err != nil {
			return err
		}
	}
	return o.printTable(table)
}

// printTable prints the table as kubectl prints a server's, but for the header, which keeps
// the units in lower case as 'kubectl top' writes them (CPU(cores), MEMORY(bytes)): the
// table printer would upper-case the names whole. The header goes into the tabwriter the
// printer then writes the rows to, so that both line up.
func (o *TopOptions) printTable(table *metav1.Table) error {
	w := printers.GetNewTabWriter(o.Out)
	wide := o.Output == outputWide
	if !o.NoHeaders {
		var headers []string
		if o.AllNamespaces {
			headers = append(headers, "NAMESPACE")
		}
		for _, c := range table.ColumnDefinitions {
			if c.Priority == 0 || wide {
				headers = append(headers, header(c.Name))
			}
		}
		if _, err := fmt.Fprintln(w, strings.Join(headers, "\t")); err != nil {
			return err
		}
	}
	printer := printers.NewTablePrinter(printers.PrintOptions{NoHeaders: true, Wide: wide, WithNamespace: o.AllNamespaces})
	if err := printer.PrintObj(table, w); err != nil {
		return err
	}
	return w.Flush()
}

// header is a column's name upper-cased but for a unit in parentheses: "Memory(bytes)" is
// "MEMORY(bytes)".
func header(name string) string {
	head, unit, _ := strings.Cut(name, "(")
	if unit != "" {
		unit = "(" + unit
	}
	return strings.ToUpper(head) + unit
}

// request is the GET of a named sandbox's stats subresource, or of the sandboxstats the flags
// select.
func (o *TopOptions) request() *rest.Request {
	if o.Name != "" {
		return o.Sandboxes.StatsRequest(o.Name)
	}
	return o.Sandboxes.ListStatsRequest(sandboxclient.ListStatsOptions{AllNamespaces: o.AllNamespaces, LabelSelector: o.LabelSelector})
}

func (o *TopOptions) printObjects(ctx context.Context) error {
	var obj runtime.Object
	if o.Name != "" {
		stats, err := o.Sandboxes.Stats(ctx, o.Name)
		if err != nil {
			return err
		}
		// The client's decoder drops the kinds, which the printers need.
		stats.SetGroupVersionKind(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxStats"))
		obj = stats
	} else {
		list, err := o.Sandboxes.ListStats(ctx, sandboxclient.ListStatsOptions{AllNamespaces: o.AllNamespaces, LabelSelector: o.LabelSelector})
		if err != nil {
			return err
		}
		list.SetGroupVersionKind(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxStatsList"))
		for i := range list.Items {
			list.Items[i].SetGroupVersionKind(sandboxv1alpha1.SchemeGroupVersion.WithKind("SandboxStats"))
		}
		obj = list
	}
	if o.Output == outputJSON {
		return (&printers.JSONPrinter{}).PrintObj(obj, o.Out)
	}
	return (&printers.YAMLPrinter{}).PrintObj(obj, o.Out)
}

func (o *TopOptions) printNoneFound(w io.Writer) {
	if o.AllNamespaces {
		fmt.Fprintln(w, "No resources found")
		return
	}
	fmt.Fprintf(w, "No resources found in %s namespace.\n", o.Namespace)
}

// sortRows orders the table's rows by the quantity in column, largest first, as kubectl top
// orders pods. A cell that is no quantity (<unknown>: a replica without figures) goes last;
// rows that compare equal keep the server's order (by namespace, name and replica).
func sortRows(table *metav1.Table, column string) error {
	col := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool {
		return strings.EqualFold(c.Name, column)
	})
	if col < 0 {
		return fmt.Errorf("the server's table of sandbox stats has no column %s to sort by", column)
	}
	type keyed struct {
		row metav1.TableRow
		q   resource.Quantity
		ok  bool
	}
	rows := make([]keyed, len(table.Rows))
	for i, row := range table.Rows {
		rows[i].row = row
		if col < len(row.Cells) {
			rows[i].q, rows[i].ok = quantity(row.Cells[col])
		}
	}
	slices.SortStableFunc(rows, func(a, b keyed) int {
		switch {
		case a.ok && b.ok:
			return b.q.Cmp(a.q)
		case a.ok:
			return -1
		case b.ok:
			return 1
		}
		return 0
	})
	for i := range rows {
		table.Rows[i] = rows[i].row
	}
	return nil
}

// quantity is a cell as a resource.Quantity: "998m", "203Mi", or a number, as a table
// decoded from JSON has it.
func quantity(cell any) (resource.Quantity, bool) {
	switch v := cell.(type) {
	case string:
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		return q, err == nil
	case int64:
		return *resource.NewQuantity(v, resource.DecimalSI), true
	case float64:
		return *resource.NewMilliQuantity(int64(v*1000), resource.DecimalSI), true
	}
	return resource.Quantity{}, false
}
