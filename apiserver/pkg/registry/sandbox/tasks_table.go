package sandbox

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// none stands for what is not known (yet), as kubectl prints it.
const none = "<none>"

var taskColumns = []metav1.TableColumnDefinition{
	{Name: "Replica", Type: "integer", Description: "Index of the replica."},
	{Name: "Phase", Type: "string", Description: "Pending, Running, Succeeded, Failed or Unknown."},
	{Name: "Exit", Type: "string", Description: "Exit code of the last attempt that exited."},
	{Name: "Attempts", Type: "integer", Description: "Attempts started, on every pod of the replica."},
	{Name: "Duration", Type: "string", Description: "From the start of the first attempt to the end of the task, or to now while it runs."},
	{Name: "Pod", Type: "string", Description: "Pod that runs or ran the current attempt."},
	{Name: "Reason", Type: "string", Description: "Reason of the last error."},
}

// TasksTable is the table the tasks subresource answers for sbx at now, with every row's
// object set to sbx: stand-ins for the server in clients' tests (the kubectl plugin's) print
// what `kubectl sandbox tasks` prints from this code rather than a copy of it.
func TasksTable(sbx *sandboxv1alpha1.Sandbox, now time.Time) *metav1.Table {
	return &metav1.Table{ColumnDefinitions: taskColumns, Rows: taskRows(sbx, now)}
}

// taskRows has a row for every replica of sbx, by index: the task the status records for it,
// or a task still Pending where the status has none yet. A sandbox without a task has none.
//
// Every row carries the sandbox as its object: the generic server turns it into what the
// request's includeObject asks for (its metadata by default), and a row's object must have
// metadata, since a replica's task has none of its own.
func taskRows(sbx *sandboxv1alpha1.Sandbox, now time.Time) []metav1.TableRow {
	if sbx.Spec.TaskTemplate == nil {
		return nil
	}
	replicas := ptr.Deref(sbx.Spec.Replicas, 1)
	byReplica := map[int32]sandboxv1alpha1.SandboxTaskStatus{}
	for _, t := range sbx.Status.Tasks {
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
	for _, p := range sbx.Status.Pods {
		pods[p.Replica] = p.Name
	}
	rows := make([]metav1.TableRow, 0, len(indexes))
	for _, r := range indexes {
		t, ok := byReplica[r]
		if !ok {
			t = sandboxv1alpha1.SandboxTaskStatus{Replica: r, Phase: sandboxv1alpha1.TaskPhasePending}
		}
		rows = append(rows, metav1.TableRow{
			Object: runtime.RawExtension{Object: sbx},
			// The pod of the status's pods before the task has one: where it will run.
			Cells: []any{int64(r), orNone(t.Phase), exitCode(t), int64(t.Attempts), taskDuration(t, now), orNone(cmp.Or(t.Pod, pods[r])), orNone(t.Reason)},
		})
	}
	return rows
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
