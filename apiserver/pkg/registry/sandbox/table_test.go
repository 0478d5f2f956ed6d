package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// cellsByName returns the cells of row keyed by their column's name.
func cellsByName(t *testing.T, columns []metav1.TableColumnDefinition, row metav1.TableRow) map[string]interface{} {
	t.Helper()
	if len(row.Cells) != len(columns) {
		t.Fatalf("row has %d cells for %d columns: %v", len(row.Cells), len(columns), row.Cells)
	}
	out := map[string]interface{}{}
	for i, c := range columns {
		out[c.Name] = row.Cells[i]
	}
	return out
}

func TestConvertToTableRows(t *testing.T) {
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	tenDaysAgo := metav1.NewTime(now.Add(-10 * 24 * time.Hour))
	inAnHour := metav1.NewTime(now.Add(time.Hour))
	aMinuteAgo := metav1.NewTime(now.Add(-time.Minute))
	tests := []struct {
		name string
		sbx  *sandboxv1alpha1.Sandbox
		// want holds the cells of the named columns.
		want map[string]interface{}
	}{
		{
			name: "running with a pod",
			sbx: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns", CreationTimestamp: tenDaysAgo},
				Spec: sandboxv1alpha1.SandboxSpec{
					Replicas: ptr.To[int32](3),
					Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						Containers: []corev1.Container{{Name: "main", Image: "python:3.11"}, {Name: "side", Image: "busybox"}},
					}},
				},
				Status: sandboxv1alpha1.SandboxStatus{
					Phase:     sandboxv1alpha1.PhaseRunning,
					Ready:     2,
					ExpiresAt: &inAnHour,
					Pods: []sandboxv1alpha1.SandboxPodStatus{
						{Replica: 0, Name: "demo-0", IP: "10.0.0.1", NodeName: "node-a"},
						{Replica: 1, Name: "demo-1", IP: "10.0.0.2", NodeName: "node-b"},
					},
				},
			},
			want: map[string]interface{}{
				"Name": "demo", "Phase": "Running", "Ready": "2/3", "Age": "10d", "Expires": "60m",
				"Pod": "demo-0", "Node": "node-a", "Image": "python:3.11", "Egress": "default", "Tasks": "<none>",
			},
		},
		{
			name: "new: no phase, no replicas, no timestamp, no pods, no expiry",
			sbx: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "new"},
				Spec: sandboxv1alpha1.SandboxSpec{
					Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
						Containers: []corev1.Container{{Name: "main", Image: "alpine"}},
					}},
					NetworkPolicy: &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny", Egress: []sandboxv1alpha1.SandboxEgressRule{
						{Action: "Allow", To: "pypi.org", Ports: []sandboxv1alpha1.SandboxEgressPort{{Port: 443}}},
						{Action: "Allow", To: "*.pythonhosted.org"},
					}},
				},
			},
			want: map[string]interface{}{
				"Name": "new", "Phase": "Pending", "Ready": "0/1", "Age": "<unknown>", "Expires": "<none>",
				"Pod": "<none>", "Node": "<none>", "Image": "alpine", "Egress": "deny, 2 rules",
			},
		},
		{
			name: "pod not scheduled yet",
			sbx: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "starting", CreationTimestamp: aMinuteAgo},
				Spec:       sandboxv1alpha1.SandboxSpec{Replicas: ptr.To[int32](0)},
				Status: sandboxv1alpha1.SandboxStatus{
					Phase: sandboxv1alpha1.PhasePending,
					Pods:  []sandboxv1alpha1.SandboxPodStatus{{Replica: 0, Name: "starting-0"}},
				},
			},
			want: map[string]interface{}{
				"Name": "starting", "Phase": "Pending", "Ready": "0/0", "Age": "60s",
				"Pod": "starting-0", "Node": "<none>", "Image": "<none>",
			},
		},
		{
			name: "tasks done",
			sbx: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "batch", CreationTimestamp: aMinuteAgo},
				Spec: sandboxv1alpha1.SandboxSpec{
					Replicas:     ptr.To[int32](2),
					PoolRef:      &sandboxv1alpha1.SandboxPoolReference{Name: "python"},
					TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"true"}},
				},
				Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseSucceeded, TaskSucceeded: 2},
			},
			want: map[string]interface{}{
				"Name": "batch", "Phase": "Succeeded", "Ready": "0/2", "Pool": "python", "Age": "60s", "Tasks": "2/2",
			},
		},
		{
			name: "expired, template without containers",
			sbx: &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "odd"},
				Spec:       sandboxv1alpha1.SandboxSpec{Template: &corev1.PodTemplateSpec{}},
				Status:     sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseTerminating, ExpiresAt: &aMinuteAgo},
			},
			want: map[string]interface{}{
				"Name": "odd", "Phase": "Terminating", "Ready": "0/1", "Expires": "expired", "Image": "<none>",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := tableConvertor{clock: testingclock.NewFakePassiveClock(now)}
			table, err := tc.ConvertToTable(context.Background(), tt.sbx, nil)
			if err != nil {
				t.Fatalf("ConvertToTable() error: %v", err)
			}
			if len(table.Rows) != 1 {
				t.Fatalf("got %d rows, want 1", len(table.Rows))
			}
			cells := cellsByName(t, table.ColumnDefinitions, table.Rows[0])
			got := map[string]interface{}{}
			for col := range tt.want {
				c, ok := cells[col]
				if !ok {
					t.Errorf("no column %q in %v", col, cells)
				}
				got[col] = c
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("cells (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(runtime.Object(tt.sbx), table.Rows[0].Object.Object); diff != "" {
				t.Errorf("row object (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConvertToTable(t *testing.T) {
	sbx := func(name string) sandboxv1alpha1.Sandbox {
		return sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "5"}}
	}
	remaining := ptr.To[int64](3)
	tests := []struct {
		name        string
		obj         runtime.Object
		opts        runtime.Object
		wantHeaders bool
		wantNames   []string
		wantMeta    metav1.ListMeta
	}{
		{
			name:        "a sandbox",
			obj:         ptr.To(sbx("a")),
			wantHeaders: true,
			wantNames:   []string{"a"},
			wantMeta:    metav1.ListMeta{ResourceVersion: "5"},
		},
		{
			name: "a list",
			obj: &sandboxv1alpha1.SandboxList{
				ListMeta: metav1.ListMeta{ResourceVersion: "10", Continue: "next-page", RemainingItemCount: remaining},
				Items:    []sandboxv1alpha1.Sandbox{sbx("a"), sbx("b")},
			},
			opts:        &metav1.TableOptions{},
			wantHeaders: true,
			wantNames:   []string{"a", "b"},
			wantMeta:    metav1.ListMeta{ResourceVersion: "10", Continue: "next-page", RemainingItemCount: remaining},
		},
		{
			name:     "an empty list",
			obj:      &sandboxv1alpha1.SandboxList{ListMeta: metav1.ListMeta{ResourceVersion: "11"}},
			opts:     &metav1.TableOptions{NoHeaders: true},
			wantMeta: metav1.ListMeta{ResourceVersion: "11"},
		},
		{
			name:      "a list without headers",
			obj:       &sandboxv1alpha1.SandboxList{Items: []sandboxv1alpha1.Sandbox{sbx("a")}},
			opts:      &metav1.TableOptions{NoHeaders: true},
			wantNames: []string{"a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := tableConvertor{}.ConvertToTable(context.Background(), tt.obj, tt.opts)
			if err != nil {
				t.Fatalf("ConvertToTable() error: %v", err)
			}
			var wantColumns []metav1.TableColumnDefinition
			if tt.wantHeaders {
				wantColumns = tableColumns
			}
			if diff := cmp.Diff(wantColumns, table.ColumnDefinitions); diff != "" {
				t.Errorf("columns (-want +got):\n%s", diff)
			}
			var names []string
			for _, row := range table.Rows {
				names = append(names, cellsByName(t, tableColumns, row)["Name"].(string))
			}
			if diff := cmp.Diff(tt.wantNames, names); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantMeta, table.ListMeta); diff != "" {
				t.Errorf("list metadata (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConvertToTableWrongType(t *testing.T) {
	tests := []struct {
		name string
		obj  runtime.Object
	}{
		{name: "a pod", obj: &corev1.Pod{}},
		{name: "a pod list", obj: &corev1.PodList{}},
		{name: "exec options", obj: &sandboxv1alpha1.SandboxExecOptions{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := tableConvertor{}.ConvertToTable(context.Background(), tt.obj, nil)
			if err == nil {
				t.Errorf("ConvertToTable(%T) = %v, want an error", tt.obj, table)
			}
		})
	}
}

func TestConvertToTableEgress(t *testing.T) {
	rules := func(n int) []sandboxv1alpha1.SandboxEgressRule {
		var out []sandboxv1alpha1.SandboxEgressRule
		for range n {
			out = append(out, sandboxv1alpha1.SandboxEgressRule{Action: "Allow", To: "pypi.org"})
		}
		return out
	}
	tests := []struct {
		name   string
		policy *sandboxv1alpha1.SandboxNetworkPolicy
		want   string
	}{
		{name: "no policy of its own", want: "default"},
		{name: "empty policy denies all", policy: &sandboxv1alpha1.SandboxNetworkPolicy{}, want: "deny-all"},
		{name: "deny without rules", policy: &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny"}, want: "deny-all"},
		{name: "allow without rules", policy: &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Allow"}, want: "allow-all"},
		{name: "deny with one rule", policy: &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Deny", Egress: rules(1)}, want: "deny, 1 rule"},
		{name: "default deny with two rules", policy: &sandboxv1alpha1.SandboxNetworkPolicy{Egress: rules(2)}, want: "deny, 2 rules"},
		{name: "allow with rules", policy: &sandboxv1alpha1.SandboxNetworkPolicy{DefaultAction: "Allow", Egress: rules(12)}, want: "allow, 12 rules"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sbx := &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "sbx"},
				Spec:       sandboxv1alpha1.SandboxSpec{PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "python"}, NetworkPolicy: tt.policy},
			}
			table, err := tableConvertor{}.ConvertToTable(context.Background(), sbx, nil)
			if err != nil {
				t.Fatalf("ConvertToTable() error: %v", err)
			}
			if got := cellsByName(t, table.ColumnDefinitions, table.Rows[0])["Egress"]; got != tt.want {
				t.Errorf("Egress = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConvertToTableTasks(t *testing.T) {
	task := &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"python", "eval.py"}}
	tests := []struct {
		name     string
		replicas *int32
		task     *sandboxv1alpha1.SandboxTaskTemplate
		status   sandboxv1alpha1.SandboxStatus
		want     string
	}{
		{name: "no task", replicas: ptr.To[int32](3), status: sandboxv1alpha1.SandboxStatus{TaskSucceeded: 3}, want: "<none>"},
		{name: "none started, one replica by default", task: task, want: "0/1"},
		{name: "some succeeded, some running", replicas: ptr.To[int32](10), task: task,
			status: sandboxv1alpha1.SandboxStatus{TaskSucceeded: 7, TaskRunning: 3}, want: "7/10"},
		{name: "some failed", replicas: ptr.To[int32](10), task: task,
			status: sandboxv1alpha1.SandboxStatus{TaskSucceeded: 7, TaskFailed: 2, TaskUnknown: 1}, want: "7/10 (2 failed)"},
		{name: "all succeeded", replicas: ptr.To[int32](4), task: task,
			status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseSucceeded, TaskSucceeded: 4}, want: "4/4"},
		{name: "all failed", replicas: ptr.To[int32](2), task: task,
			status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseFailed, TaskFailed: 2}, want: "0/2 (2 failed)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sbx := &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "batch"},
				Spec:       sandboxv1alpha1.SandboxSpec{Replicas: tt.replicas, Template: &corev1.PodTemplateSpec{}, TaskTemplate: tt.task},
				Status:     tt.status,
			}
			table, err := tableConvertor{}.ConvertToTable(context.Background(), sbx, nil)
			if err != nil {
				t.Fatalf("ConvertToTable() error: %v", err)
			}
			if got := cellsByName(t, table.ColumnDefinitions, table.Rows[0])["Tasks"]; got != tt.want {
				t.Errorf("Tasks = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestWideColumns checks that the columns of -o wide only are the wide ones.
func TestWideColumns(t *testing.T) {
	wide := map[string]bool{"Image": true, "Pod": true, "Node": true, "Egress": true, "Tasks": true}
	for _, c := range tableColumns {
		want := int32(0)
		if wide[c.Name] {
			want = 1
		}
		if c.Priority != want {
			t.Errorf("%s has priority %d, want %d", c.Name, c.Priority, want)
		}
		delete(wide, c.Name)
	}
	for name := range wide {
		t.Errorf("no %s column", name)
	}
}
