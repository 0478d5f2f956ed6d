// Package tasks implements `kubectl sandbox tasks`.
package tasks

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

// Output formats.
const (
	outputTable = ""
	outputJSON  = "json"
	outputYAML  = "yaml"
)

var (
	tasksLong = cmdutil.LongDesc(`
		Display the task of each replica of a sandbox.

		A sandbox created with a task ('kubectl sandbox create --task') runs it in each replica.
		This prints the server's table of its tasks (the sandbox's tasks subresource), one row
		per replica: the phase of its task (Pending, Running, Succeeded, Failed, or Unknown
		while the pod cannot be reached), the exit code of its last attempt, the number of
		attempts, how long it ran (or has been running), the pod that runs or ran it, and the
		reason of its last error, such as Error (a non-zero exit), DeadlineExceeded
		(--task-timeout) or BackoffLimitExceeded. Use -o json or -o yaml for
		the sandbox's status.tasks as the API has it, and 'kubectl sandbox logs' for a task's
		output.`)

	tasksExample = cmdutil.Examples(`
		# Show the tasks of the replicas of sandbox eval
		kubectl sandbox tasks eval

		# Print the exit codes of the tasks of sandbox eval
		kubectl sandbox tasks eval -o json | jq '.[].exitCode'`)
)

// TasksOptions are the inputs of `kubectl sandbox tasks`.
type TasksOptions struct {
	Name      string
	Output    string
	NoHeaders bool

	Namespace string
	Client    clientset.Interface

	genericiooptions.IOStreams
}

// NewTasksOptions returns TasksOptions printing a table.
func NewTasksOptions(streams genericiooptions.IOStreams) *TasksOptions {
	return &TasksOptions{IOStreams: streams}
}

// NewCmdTasks returns the `tasks` command.
func NewCmdTasks(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmdTasks(f, NewTasksOptions(streams))
}

func newCmdTasks(f cmdutil.Factory, o *TasksOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   "tasks NAME [-o json|yaml] [--no-headers]",
		DisableFlagsInUseLine: true,
		Short:                 "Display the task of each replica of a sandbox",
		Long:                  tasksLong,
		Example:               tasksExample,
		ValidArgsFunction:     cmdutil.SandboxNameCompletion(f, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f, cmd, args); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", o.Output, "Output format. One of: (json, yaml). Default: a table.")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputJSON, outputYAML}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().BoolVar(&o.NoHeaders, "no-headers", o.NoHeaders, "Don't print headers in table output.")
	return cmd
}

// Complete takes the name, output format, namespace and client.
func (o *TasksOptions) Complete(f cmdutil.Factory, cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return cmdutil.UsageErrorf(cmd, "sandbox NAME is required")
	case 1:
		o.Name = args[0]
	default:
		return cmdutil.UsageErrorf(cmd, "tasks takes one NAME, got %q", args)
	}
	switch o.Output {
	case outputTable, outputJSON, outputYAML:
	default:
		return cmdutil.UsageErrorf(cmd, "unknown output format %q; use one of: %s, %s", o.Output, outputJSON, outputYAML)
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

// Run reads the tasks subresource of the sandbox and prints it: the server's table, or the
// sandbox's status.tasks for -o json and -o yaml. Both are GETs of sandboxes/NAME/tasks, so
// that `get sandboxes/tasks` is the one right either needs.
func (o *TasksOptions) Run(ctx context.Context) error {
	if o.Output == outputTable {
		table, err := o.table(ctx)
		if err != nil {
			return err
		}
		printer := printers.NewTablePrinter(printers.PrintOptions{NoHeaders: o.NoHeaders})
		return printer.PrintObj(table, o.Out)
	}
	sb := &sandboxv1alpha1.Sandbox{}
	if err := o.request().Do(ctx).Into(sb); err != nil {
		return err
	}
	tasks := sb.Status.Tasks
	if tasks == nil {
		// A list, also before the first task has a status.
		tasks = []sandboxv1alpha1.SandboxTaskStatus{}
	}
	if o.Output == outputJSON {
		data, err := json.MarshalIndent(tasks, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.Out, "%s\n", data)
		return err
	}
	data, err := yaml.Marshal(tasks)
	if err != nil {
		return err
	}
	_, err = o.Out.Write(data)
	return err
}

func (o *TasksOptions) request() *rest.Request {
	return o.Client.SandboxV1alpha1().RESTClient().Get().
		Namespace(o.Namespace).
		Resource("sandboxes").
		Name(o.Name).
		SubResource("tasks")
}

// table asks for the server's table of the sandbox's tasks. The rows' objects are not needed
// (the sandbox's metadata in every row), so none are asked for.
func (o *TasksOptions) table(ctx context.Context) (*metav1.Table, error) {
	return cmdutil.ServerTable(ctx, o.request(), "tasks", metav1.IncludeNone)
}
