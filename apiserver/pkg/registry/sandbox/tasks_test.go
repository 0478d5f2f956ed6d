package sandbox

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/internal/apitesting"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

func TestTasksTable(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(now.Add(d))) }
	task := &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"python3", "eval.py"}}
	tests := []struct {
		name     string
		replicas *int32
		task     *sandboxv1alpha1.SandboxTaskTemplate
		status   sandboxv1alpha1.SandboxStatus
		want     [][]any
	}{
		{
			name:     "a row per replica, by index",
			replicas: ptr.To[int32](4),
			task:     task,
			status: sandboxv1alpha1.SandboxStatus{
				// Replica 3 has no task status yet, but its pod is known: where it will run.
				Pods: []sandboxv1alpha1.SandboxPodStatus{{Replica: 3, Name: "python-x7k2p"}},
				Tasks: []sandboxv1alpha1.SandboxTaskStatus{
					{Replica: 2, Phase: "Running", Pod: "python-c3d4e", Attempts: 1, StartTime: at(-90 * time.Second)},
					{Replica: 0, Phase: "Succeeded", Pod: "python-a1b2c", Attempts: 1, ExitCode: ptr.To[int32](0),
						StartTime: at(-10 * time.Minute), FinishTime: at(-7 * time.Minute)},
					{Replica: 1, Phase: "Failed", Pod: "python-f9g8h", Attempts: 4, ExitCode: ptr.To[int32](137),
						StartTime: at(-2 * time.Hour), FinishTime: at(-time.Hour), Reason: "BackoffLimitExceeded", Message: "4 attempts failed"},
				},
			},
			want: [][]any{
				{int64(0), "Succeeded", "0", int64(1), "3m", "python-a1b2c", none},
				{int64(1), "Failed", "137", int64(4), "60m", "python-f9g8h", "BackoffLimitExceeded"},
				{int64(2), "Running", none, int64(1), "90s", "python-c3d4e", none},
				{int64(3), "Pending", none, int64(0), none, "python-x7k2p", none},
			},
		},
		{
			name: "before any task has a status",
			task: task,
			want: [][]any{{int64(0), "Pending", none, int64(0), none, none, none}},
		},
		{
			name:     "unknown while it runs: measured to now",
			replicas: ptr.To[int32](1),
			task:     task,
			status: sandboxv1alpha1.SandboxStatus{Tasks: []sandboxv1alpha1.SandboxTaskStatus{
				{Replica: 0, Phase: "Unknown", Pod: "p", Attempts: 2, ExitCode: ptr.To[int32](1), StartTime: at(-3 * time.Hour), Reason: "Error"},
			}},
			want: [][]any{{int64(0), "Unknown", "1", int64(2), "3h", "p", "Error"}},
		},
		{
			name:     "ended without a finish time",
			replicas: ptr.To[int32](1),
			task:     task,
			status: sandboxv1alpha1.SandboxStatus{Tasks: []sandboxv1alpha1.SandboxTaskStatus{
				{Replica: 0, Phase: "Failed", Attempts: 1, StartTime: at(-time.Minute), Reason: "PodLost"},
			}},
			want: [][]any{{int64(0), "Failed", none, int64(1), none, none, "PodLost"}},
		},
		{
			name:     "a record without a phase",
			replicas: ptr.To[int32](1),
			task:     task,
			status:   sandboxv1alpha1.SandboxStatus{Tasks: []sandboxv1alpha1.SandboxTaskStatus{{Replica: 0}}},
			want:     [][]any{{int64(0), none, none, int64(0), none, none, none}},
		},
		{
			name:     "scaled down: the replicas the status still lists",
			replicas: ptr.To[int32](1),
			task:     task,
			status: sandboxv1alpha1.SandboxStatus{Tasks: []sandboxv1alpha1.SandboxTaskStatus{
				{Replica: 2, Phase: "Succeeded", Attempts: 1, ExitCode: ptr.To[int32](0), StartTime: at(-2 * time.Second), FinishTime: at(-time.Second)},
			}},
			want: [][]any{
				{int64(0), "Pending", none, int64(0), none, none, none},
				{int64(2), "Succeeded", "0", int64(1), "1s", none, none},
			},
		},
		{
			name:     "no task",
			replicas: ptr.To[int32](3),
			status:   sandboxv1alpha1.SandboxStatus{Pods: []sandboxv1alpha1.SandboxPodStatus{{Replica: 0, Name: "p"}}},
		},
	}
	r := NewTasksREST(NewREST(nil, Limits{}, testingclock.NewFakePassiveClock(now), nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sbx := &sandboxv1alpha1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Name: "eval", Namespace: "ns", ResourceVersion: "7"},
				Spec:       sandboxv1alpha1.SandboxSpec{Replicas: tt.replicas, PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: "python"}, TaskTemplate: tt.task},
				Status:     tt.status,
			}
			table, err := r.ConvertToTable(context.Background(), sbx, &metav1.TableOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, c := range table.ColumnDefinitions {
				names = append(names, c.Name)
			}
			if diff := cmp.Diff([]string{"Replica", "Phase", "Exit", "Attempts", "Duration", "Pod", "Reason"}, names); diff != "" {
				t.Errorf("columns (-want +got):\n%s", diff)
			}
			if table.ResourceVersion != "7" {
				t.Errorf("resourceVersion %q, want the sandbox's", table.ResourceVersion)
			}
			var got [][]any
			for i, row := range table.Rows {
				got = append(got, row.Cells)
				// The generic server makes includeObject's answer from it.
				if row.Object.Object != sbx {
					t.Errorf("row %d: object %v, want the sandbox", i, row.Object.Object)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
			// What clients' tests are served is what the server answers.
			standIn := TasksTable(sbx, now)
			standIn.ResourceVersion = table.ResourceVersion
			if diff := cmp.Diff(table, standIn); diff != "" {
				t.Errorf("TasksTable differs from ConvertToTable (-convert +TasksTable):\n%s", diff)
			}
		})
	}
}

func TestTasksTableOptions(t *testing.T) {
	r := NewTasksREST(NewREST(nil, Limits{}, nil, nil))
	sbx := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "eval"}, Spec: sandboxv1alpha1.SandboxSpec{
		TaskTemplate: &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"true"}}}}
	// The later events of a watch as a table come without headers; the rows stay.
	table, err := r.ConvertToTable(context.Background(), sbx, &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	if table.ColumnDefinitions != nil || len(table.Rows) != 1 {
		t.Errorf("noHeaders: columns %v, %d rows; want none and 1", table.ColumnDefinitions, len(table.Rows))
	}
	if _, err := r.ConvertToTable(context.Background(), &sandboxv1alpha1.SandboxList{}, nil); err == nil {
		t.Error("a list converted to a table of tasks")
	}
}

func TestTasksGet(t *testing.T) {
	withTasks := taskSandbox(func(bs *controlv1alpha1.BatchSandbox) {
		bs.Status.Tasks = []controlv1alpha1.TaskStatus{{Replica: 0, Phase: controlv1alpha1.TaskSucceeded, Pod: "batch-0", Attempts: 1, ExitCode: ptr.To[int32](0)}}
	})
	withoutTask := taskSandbox(func(bs *controlv1alpha1.BatchSandbox) { bs.Name, bs.Spec.TaskTemplate = "shell", nil })
	tests := []struct {
		name    string
		get     string
		wantErr *apitesting.APIErr
		wantMsg string
	}{
		{name: "the sandbox", get: "batch"},
		{name: "a sandbox without a task", get: "shell",
			wantErr: &apitesting.APIErr{Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest},
			wantMsg: `sandbox "shell" runs no task (it has no spec.taskTemplate)`},
		{name: "missing", get: "nope",
			wantErr: &apitesting.APIErr{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "nope"},
			wantMsg: `sandboxes.sandbox.kube-sandbox.io "nope" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, _ := newREST(t, withTasks.DeepCopy(), withoutTask.DeepCopy())
			r := NewTasksREST(store)
			out, err := r.Get(nsContext("ns"), tt.get, &metav1.GetOptions{})
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Get() = %v, want an error", out)
				}
				if diff := cmp.Diff(*tt.wantErr, apitesting.APIErrOf(t, err)); diff != "" {
					t.Errorf("Get() error %v (-want +got):\n%s", err, diff)
				}
				if err.Error() != tt.wantMsg {
					t.Errorf("Get() error %q, want %q", err, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("Get() error: %v", err)
			}
			want, err := store.Get(nsContext("ns"), tt.get, &metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, out); diff != "" {
				t.Errorf("Get() (-sandbox +tasks):\n%s", diff)
			}
			if n := len(out.(*sandboxv1alpha1.Sandbox).Status.Tasks); n != 1 {
				t.Errorf("Get() has %d tasks, want 1", n)
			}
		})
	}
}
