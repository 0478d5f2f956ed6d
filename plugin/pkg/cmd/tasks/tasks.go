// Package tasks implements `kubectl sandbox tasks`.
package tasks

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
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

// none stands for what is not known (yet), as kubectl prints it.
const none = "<none>"

var (
	tasksLong = cmdutil.LongDesc(`
		Display the task of each replica of a sandbox.

		A sandbox created with a task ('kubectl sandbox create --task') runs it in each replica.
		This prints one row per replica: the phase of its task (Pending, Running, Succeeded,
		Failed, or Unknown while the pod cannot be reached), the exit code of its last attempt,
		the number of attempts, how long it ran (or has been running), the pod that runs or ran
		it, and the reason of its last error, such as Error (a non-zero exit),
		DeadlineExceeded (--task-timeout) or BackoffLimitExceeded. Use -o json or -o yaml for
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
	// Now is the clock the duration of a running task is measured with.
	Now func() time.Time

	genericiooptions.IOStreams
}

// NewTasksOptions returns TasksOptions printing a table.
func NewTasksOptions(streams genericiooptions.IOStreams) *TasksOptions {
	return &TasksOptions{Now: time.Now, IOStreams: streams}
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

// Run reads the sandbox and prints its tasks.
func (o *TasksOptions) Run(ctx context.Context) error {
	sb, err := o.Client.SandboxV1alpha1().Sandboxes(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if sb.Spec.TaskTemplate == nil {
		return fmt.Errorf("sandbox %q runs no task (it has no spec.taskTemplate)", o.Name)
	}
	tasks := sb.Status.Tasks
	if tasks == nil {
		// A list, also before the first task has a status.
		tasks = []sandboxv1alpha1.SandboxTaskStatus{}
	}
	switch o.Output {
	case outputJSON:
		data, err := json.MarshalIndent(tasks, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.Out, "%s\n", data)
		return err
	case outputYAML:
		data, err := yaml.Marshal(tasks)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(data)
		return err
	}
	printer := printers.NewTablePrinter(printers.PrintOptions{NoHeaders: o.NoHeaders})
	return printer.PrintObj(Table(sb, o.Now()), o.Out)
}

// Table has a row for every replica of sb, by index: the task the status records for it, or
// a task still Pending where the status has none yet.
func Table(sb *sandboxv1alpha1.Sandbox, now time.Time) *metav1.Table {
	table := &metav1.Table{
		ColumnDefinitions: []metav1.TableColumnDefinition{
			{Name: "Replica", Type: "integer", Description: "Index of the replica."},
			{Name: "Phase", Type: "string", Description: "Pending, Running, Succeeded, Failed or Unknown."},
			{Name: "Exit", Type: "string", Description: "Exit code of the last attempt that exited."},
			{Name: "Attempts", Type: "integer", Description: "Attempts started, on every pod of the replica."},
			{Name: "Duration", Type: "string", Description: "From the start of the first attempt to the end of the task, or to now while it runs."},
			{Name: "Pod", Type: "string", Description: "Pod that runs or ran the current attempt."},
			{Name: "Reason", Type: "string", Description: "Reason of the last error."},
		},
	}
	replicas := int32(1)
	if sb.Spec.Replicas != nil {
		replicas = *sb.Spec.Replicas
	}
	byReplica := map[int32]sandboxv1alpha1.SandboxTaskStatus{}
	for _, t := range sb.Status.Tasks {
		byReplica[t.Replica] = t
	}
	// The replicas of the spec, and any the status still lists beyond them (scaled down).
	indexes := make([]int32, 0, replicas)
	for i := range replicas {
		indexes = append(indexes, i)
	}
	for r := range byReplica {
		if r >= replicas {
			indexes = append(indexes, r)
		}
	}
	slices.SortFunc(indexes, cmp.Compare)
	pods := map[int32]string{}
	for _, p := range sb.Status.Pods {
		pods[p.Replica] = p.Name
	}
	for _, r := range indexes {
		t, ok := byReplica[r]
		if !ok {
			t = sandboxv1alpha1.SandboxTaskStatus{Replica: r, Phase: sandboxv1alpha1.TaskPhasePending}
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			// The pod of the status's pods before the task has one: where it will run.
			Cells: []any{int64(r), orNone(t.Phase), exitCode(t), int64(t.Attempts), taskDuration(t, now), orNone(cmp.Or(t.Pod, pods[r])), orNone(t.Reason)},
		})
	}
	return table
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

func exitCode(t sandboxv1alpha1.SandboxTaskStatus) string {
	if t.ExitCode == nil {
		return none
	}
	return strconv.Itoa(int(*t.ExitCode))
}

// taskDuration is finish - start for a task that ended, now - start for one that has not;
// <none> before it started, or for an end without a recorded time.
func taskDuration(t sandboxv1alpha1.SandboxTaskStatus, now time.Time) string {
	switch {
	case t.StartTime == nil:
		return none
	case t.FinishTime != nil:
		return duration.HumanDuration(t.FinishTime.Sub(t.StartTime.Time))
	case sandboxv1alpha1.TaskPhaseFinal(t.Phase):
		return none
	}
	return duration.HumanDuration(now.Sub(t.StartTime.Time))
}
