package sandbox

import (
	"context"
	"fmt"
	"math"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// unknown stands for a figure the node agent could not give, as kubectl prints one.
const unknown = "<unknown>"

// The figures print as kubectl top prints a pod's: CPU in millicores, bytes in Mi. The
// columns that can be <unknown> are strings; kubectl sorts by the object's fields anyway.
var statsColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the sandbox."},
	{Name: "Replica", Type: "integer", Description: "Index of the replica."},
	{Name: "CPU(cores)", Type: "string", Description: "CPU used over the window, in millicores (1000m: one core)."},
	{Name: "Memory(bytes)", Type: "string", Description: "Working set: what the kernel OOM-kills and the kubelet evicts by."},
	{Name: "Disk(bytes)", Type: "string", Description: "What the sandbox wrote to its root filesystem (its writable layer) and its disk-backed emptyDir volumes hold."},
	{Name: "Net-In", Type: "string", Description: "Bytes the sandbox received since its pod started."},
	{Name: "Net-Out", Type: "string", Description: "Bytes the sandbox sent since its pod started."},
	{Name: "Processes", Type: "string", Description: "Tasks in the pod's cgroup (under gVisor, the sentry's and gofer's threads)."},
	{Name: "Mem-Limit", Type: "string", Priority: 1, Description: "Memory limit of the pod; <none> without one."},
	{Name: "OOM-Kills", Type: "string", Priority: 1, Description: "Processes the kernel's OOM killer ended in the pod since it started."},
	{Name: "Denied", Type: "string", Priority: 1, Description: "New outbound connections the egress policy refused since the pod started."},
	{Name: "Node", Type: "string", Priority: 1, Description: "Node the replica runs on."},
	{Name: "Window", Type: "string", Priority: 1, Description: "Span the CPU rate is over."},
	{Name: "Message", Type: "string", Priority: 1, Description: "Why figures are missing: the reason (NoPod, NodeUnavailable, NotSampled, Partial) and what happened."},
}

// statsTableConvertor prints the figures server-side, so that `kubectl sandbox top`, kubectl
// get sandboxstats and every other client show the same columns.
type statsTableConvertor struct{}

// ConvertToTable implements rest.TableConvertor: a row per replica of each sandbox.
func (statsTableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	var items []sandboxv1alpha1.SandboxStats
	switch o := obj.(type) {
	case *sandboxv1alpha1.SandboxStats:
		items = []sandboxv1alpha1.SandboxStats{*o}
	case *sandboxv1alpha1.SandboxStatsList:
		items = o.Items
	default:
		return nil, fmt.Errorf("cannot print %T as a table of stats", obj)
	}
	table := StatsTable(items)
	if to, ok := opts.(*metav1.TableOptions); ok && to.NoHeaders {
		table.ColumnDefinitions = nil
	}
	return table, nil
}

// StatsTable is the table the stats subresource and sandboxstats answer for items, with each
// row's object the SandboxStats of its sandbox: stand-ins for the server in clients' tests (the
// kubectl plugin's) print what `kubectl sandbox top` prints from this code rather than a copy.
func StatsTable(items []sandboxv1alpha1.SandboxStats) *metav1.Table {
	rows := []metav1.TableRow{}
	for i := range items {
		s := &items[i]
		for _, rs := range s.Replicas {
			rows = append(rows, metav1.TableRow{
				// A replica has no metadata of its own: the row names its sandbox, which the
				// generic server turns into what includeObject asks for.
				Object: runtime.RawExtension{Object: s},
				Cells:  statsCells(s.Name, &rs),
			})
		}
	}
	return &metav1.Table{ColumnDefinitions: statsColumns, Rows: rows}
}

func statsCells(name string, rs *sandboxv1alpha1.SandboxReplicaStats) []any {
	cpu, memory, disk, in, out, procs := unknown, unknown, unknown, unknown, unknown, unknown
	limit, ooms, denied := unknown, unknown, unknown
	// Without a window there is no rate yet: the pod was read once.
	if rs.CPU != nil && rs.Window.Duration > 0 {
		cpu = fmt.Sprintf("%dm", rs.CPU.UsageNanoCores/1_000_000)
	}
	if m := rs.Memory; m != nil {
		memory, ooms, limit = bytesCell(m.WorkingSetBytes), strconv.FormatInt(m.OOMKills, 10), none
		if m.LimitBytes > 0 {
			limit = bytesCell(m.LimitBytes)
		}
	}
	if d := rs.Disk; d != nil {
		disk = bytesCell(addSaturating(d.WritableLayerBytes, d.EmptyDirBytes))
	}
	if n := rs.Network; n != nil {
		in, out, denied = bytesCell(n.RxBytes), bytesCell(n.TxBytes), strconv.FormatInt(n.ConnectionsDenied, 10)
	}
	if rs.Processes != nil {
		procs = strconv.FormatInt(*rs.Processes, 10)
	}
	window := none
	if !rs.Timestamp.IsZero() {
		window = duration.HumanDuration(rs.Window.Duration)
	}
	message := none
	if rs.Reason != "" {
		message = rs.Reason
		if rs.Message != "" {
			message += ": " + rs.Message
		}
	}
	return []any{name, int64(rs.Replica), cpu, memory, disk, in, out, procs, limit, ooms, denied, orNone(rs.Node), window, message}
}

// addSaturating adds two figures, which the server may have saturated at the int64 maximum.
func addSaturating(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// bytesCell is n in Mi, as kubectl top prints memory; below a Mi, in Ki or bytes, so that a
// sandbox that wrote or sent a little does not read as nothing.
func bytesCell(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatInt(n>>20, 10) + "Mi"
	case n >= 1<<10:
		return strconv.FormatInt(n>>10, 10) + "Ki"
	}
	return strconv.FormatInt(n, 10)
}
