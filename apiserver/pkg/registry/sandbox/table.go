package sandbox

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

var tableColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the sandbox"},
	{Name: "Phase", Type: "string", Description: "Pending, Running, Succeeded, Failed, Expired or Terminating"},
	{Name: "Ready", Type: "string", Description: "Ready replicas of the desired replicas"},
	{Name: "Pool", Type: "string", Description: "Warm pool the pods come from; <none> for a pod template"},
	{Name: "Expires", Type: "string", Description: "Time until the sandbox expires; <none> if it never does"},
	{Name: "Age", Type: "string", Description: "Time since creation"},
	{Name: "Image", Type: "string", Priority: 1, Description: "Image of the sandbox container"},
	{Name: "Pod", Type: "string", Priority: 1, Description: "Pod of the first replica"},
	{Name: "Node", Type: "string", Priority: 1, Description: "Node of the first replica"},
	{Name: "Egress", Type: "string", Priority: 1, Description: "Outbound network policy: default (none of the sandbox's own: the pool's or the platform's applies), deny-all, allow-all, or the default action and the number of rules, like \"deny, 2 rules\""},
	{Name: "Tasks", Type: "string", Priority: 1, Description: "Replicas whose task succeeded of the desired replicas, and how many failed, like \"7/10 (2 failed)\"; <none> for a sandbox without a task"},
}

// tableConvertor prints sandboxes server-side, so that kubectl get shows the same columns to
// every client.
type tableConvertor struct {
	clock clock.PassiveClock
}

// ConvertToTable implements rest.TableConvertor.
func (c tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: tableColumns}
	if to, ok := opts.(*metav1.TableOptions); ok && to.NoHeaders {
		table.ColumnDefinitions = nil
	}
	if m, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
		table.Continue = m.GetContinue()
		table.RemainingItemCount = m.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}

	var items []sandboxv1alpha1.Sandbox
	switch t := obj.(type) {
	case *sandboxv1alpha1.Sandbox:
		items = []sandboxv1alpha1.Sandbox{*t}
	case *sandboxv1alpha1.SandboxList:
		items = t.Items
	default:
		return nil, fmt.Errorf("cannot print %T as a sandbox table", obj)
	}
	table.Rows = tableRows(items, c.now())
	return table, nil
}

// SandboxTable is the table this server answers for the sandboxes at now, with every row's
// object set: stand-ins for the server in clients' tests (the kubectl plugin's) print what
// kubectl get prints, from this code rather than a copy of it.
func SandboxTable(items []sandboxv1alpha1.Sandbox, now time.Time) *metav1.Table {
	return &metav1.Table{ColumnDefinitions: tableColumns, Rows: tableRows(items, now)}
}

// tableRows are the rows of items, measured against one now so that a list's ages agree.
func tableRows(items []sandboxv1alpha1.Sandbox, now time.Time) []metav1.TableRow {
	var rows []metav1.TableRow
	for i := range items {
		rows = append(rows, tableRow(&items[i], now))
	}
	return rows
}

func (c tableConvertor) now() time.Time {
	if c.clock == nil {
		return time.Now()
	}
	return c.clock.Now()
}

func tableRow(sbx *sandboxv1alpha1.Sandbox, now time.Time) metav1.TableRow {
	desired := int32(1)
	if sbx.Spec.Replicas != nil {
		desired = *sbx.Spec.Replicas
	}
	phase := string(sbx.Status.Phase)
	if phase == "" {
		phase = string(sandboxv1alpha1.PhasePending)
	}
	pod, node, image, expires := "<none>", "<none>", "<none>", "<none>"
	if len(sbx.Status.Pods) > 0 {
		pod = sbx.Status.Pods[0].Name
		if sbx.Status.Pods[0].NodeName != "" {
			node = sbx.Status.Pods[0].NodeName
		}
	}
	if e := sbx.Status.ExpiresAt; e != nil {
		if left := e.Sub(now); left > 0 {
			expires = duration.HumanDuration(left)
		} else {
			expires = "expired"
		}
	}
	if t := sbx.Spec.Template; t != nil && len(t.Spec.Containers) > 0 {
		image = t.Spec.Containers[0].Image
	}
	pool := "<none>"
	if sbx.Spec.PoolRef != nil {
		pool = sbx.Spec.PoolRef.Name
	}
	return metav1.TableRow{
		Object: runtime.RawExtension{Object: sbx},
		Cells: []interface{}{
			sbx.Name,
			phase,
			fmt.Sprintf("%d/%d", sbx.Status.Ready, desired),
			pool,
			expires,
			age(sbx.CreationTimestamp, now),
			image, pod, node,
			sbx.Spec.NetworkPolicy.Summary(),
			tasks(sbx, desired),
		},
	}
}

// tasks is the TASKS cell: succeeded/desired, with the failed ones when there are any, so that
// a batch's progress and its failures show in one short column.
func tasks(sbx *sandboxv1alpha1.Sandbox, desired int32) string {
	if sbx.Spec.TaskTemplate == nil {
		return "<none>"
	}
	s := fmt.Sprintf("%d/%d", sbx.Status.TaskSucceeded, desired)
	if sbx.Status.TaskFailed > 0 {
		s += fmt.Sprintf(" (%d failed)", sbx.Status.TaskFailed)
	}
	return s
}

func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}
