package sandbox

import (
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// maxCommandCell bounds the command a table shows: a row is a line of a terminal, and the
// whole argv is in the object.
const maxCommandCell = 60

var processColumns = []metav1.TableColumnDefinition{
	{Name: "ID", Type: "string", Format: "name", Description: "ID of the process in its replica's pod (metadata.name)."},
	{Name: "Replica", Type: "integer", Description: "Index of the replica it runs in."},
	{Name: "Phase", Type: "string", Description: "Running, Exited or Lost."},
	{Name: "Exit", Type: "string", Description: "Exit code, or the signal that killed it."},
	{Name: "PID", Type: "integer", Description: "Process ID in the sandbox's container."},
	{Name: "Duration", Type: "string", Description: "From its start to its end, or to now while it runs."},
	{Name: "Command", Type: "string", Description: "What it runs, shortened."},
	{Name: "TTY", Type: "boolean", Description: "Whether it runs on a terminal."},
	{Name: "Reason", Type: "string", Priority: 1, Description: "Why it ended."},
	{Name: "Pod", Type: "string", Priority: 1, Description: "Pod it runs in."},
}

// ProcessesTable is the table the processes subresource answers for items at now, with each
// row's object the process it shows: stand-ins for the server in clients' tests (the kubectl
// plugin's) print what `kubectl sandbox ps` prints from this code rather than a copy of it.
func ProcessesTable(items []sandboxv1alpha1.SandboxProcess, now time.Time) *metav1.Table {
	rows := make([]metav1.TableRow, 0, len(items))
	for i := range items {
		p := &items[i]
		rows = append(rows, metav1.TableRow{
			Object: runtime.RawExtension{Object: p},
			Cells: []any{p.Name, int64(p.Spec.Replica), orNone(string(p.Status.Phase)), processExit(&p.Status), int64(p.Status.PID),
				processDuration(&p.Status, now), commandCell(p.Spec.Command), p.Spec.TTY, orNone(p.Status.Reason), orNone(p.Status.Pod)},
		})
	}
	return &metav1.Table{ColumnDefinitions: processColumns, Rows: rows}
}

// processExit is the exit code, SIG and the name of the signal that killed it, or <none>.
func processExit(s *sandboxv1alpha1.SandboxProcessStatus) string {
	switch {
	case s.ExitCode != nil:
		return strconv.Itoa(int(*s.ExitCode))
	case s.Signal != "":
		return "SIG" + s.Signal
	}
	return none
}

// processDuration is end - start for a process that ended, now - start for one that runs;
// <none> without a start, or for an end without a time (a Lost process's is when it was
// found lost, not when it ended).
func processDuration(s *sandboxv1alpha1.SandboxProcessStatus, now time.Time) string {
	switch {
	case s.StartTime == nil:
		return none
	case s.Phase == sandboxv1alpha1.ProcessPhaseRunning:
		return duration.HumanDuration(now.Sub(s.StartTime.Time))
	case s.Phase == sandboxv1alpha1.ProcessPhaseExited && s.EndTime != nil:
		return duration.HumanDuration(s.EndTime.Sub(s.StartTime.Time))
	}
	return none
}

// commandCell is the argv as a line, cut to maxCommandCell characters.
func commandCell(argv []string) string {
	line := strings.Join(argv, " ")
	if r := []rune(line); len(r) > maxCommandCell {
		return string(r[:maxCommandCell-3]) + "..."
	}
	return orNone(line)
}
