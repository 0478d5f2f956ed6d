package sandbox

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

var contextColumns = []metav1.TableColumnDefinition{
	{Name: "ID", Type: "string", Format: "name", Description: "ID of the context in its replica's pod (metadata.name)."},
	{Name: "Replica", Type: "integer", Description: "Index of the replica it runs in."},
	{Name: "Language", Type: "string", Description: "Its interpreter's language and version."},
	{Name: "Phase", Type: "string", Description: "Idle, Busy or Dead."},
	{Name: "Runs", Type: "integer", Description: "How many runs it has had (its execution count)."},
	{Name: "Last Run", Type: "string", Description: "Time since its latest run began."},
	{Name: "Age", Type: "string", Description: "Time since it was made."},
	{Name: "PID", Type: "integer", Priority: 1, Description: "Its interpreter's process ID in the sandbox's container."},
	{Name: "Pod", Type: "string", Priority: 1, Description: "Pod it runs in."},
	{Name: "Message", Type: "string", Priority: 1, Description: "Why a Dead context ended."},
}

// ContextsTable is the table the contexts subresource answers for items at now, with each
// row's object the context it shows, for clients' tests as ProcessesTable is.
func ContextsTable(items []sandboxv1alpha1.SandboxCodeContext, now time.Time) *metav1.Table {
	rows := make([]metav1.TableRow, 0, len(items))
	for i := range items {
		c := &items[i]
		lang := c.Spec.Language
		if v := c.Status.LanguageVersion; v != "" {
			lang += " " + v
		}
		lastRun := none
		if t := c.Status.LastRunTime; t != nil {
			lastRun = duration.HumanDuration(now.Sub(t.Time))
		}
		age := none
		if !c.CreationTimestamp.IsZero() {
			age = duration.HumanDuration(now.Sub(c.CreationTimestamp.Time))
		}
		rows = append(rows, metav1.TableRow{
			Object: runtime.RawExtension{Object: c},
			Cells: []any{c.Name, int64(c.Spec.Replica), orNone(lang), orNone(string(c.Status.Phase)), int64(c.Status.ExecutionCount),
				lastRun, age, int64(c.Status.PID), orNone(c.Status.Pod), orNone(c.Status.Message)},
		})
	}
	return &metav1.Table{ColumnDefinitions: contextColumns, Rows: rows}
}
