package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

// tasksTableAccept asks for a meta.k8s.io/v1 Table, as kubectl and the plugin do.
const tasksTableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// tasksTable GETs the tasks subresource of a sandbox as a Table; include is includeObject
// ("" for the server's default).
func tasksTable(ctx context.Context, c sandboxclient.Interface, ns, name string, include metav1.IncludeObjectPolicy) (*metav1.Table, error) {
	req := c.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxes").Name(name).SubResource("tasks").
		SetHeader("Accept", tasksTableAccept)
	if include != "" {
		req = req.Param("includeObject", string(include))
	}
	result := req.Do(ctx)
	// Error, not Raw's error: it is the server's Status when there is one.
	if err := result.Error(); err != nil {
		return nil, err
	}
	data, err := result.Raw()
	if err != nil {
		return nil, err
	}
	table := &metav1.Table{}
	if err := utiljson.Unmarshal(data, table); err != nil {
		return nil, fmt.Errorf("decode %s: %w", data, err)
	}
	if table.Kind != "Table" {
		return nil, fmt.Errorf("not a Table: %s", data)
	}
	return table, nil
}

// tasksObject GETs the tasks subresource of a sandbox as plain JSON.
func tasksObject(ctx context.Context, c sandboxclient.Interface, ns, name string) (*sandboxv1alpha1.Sandbox, error) {
	sbx := &sandboxv1alpha1.Sandbox{}
	err := c.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxes").Name(name).SubResource("tasks").Do(ctx).Into(sbx)
	return sbx, err
}

// TestTasksSubresource: GET sandboxes/NAME/tasks, through the aggregator, answers the
// sandbox as JSON and, asked for a Table, a row per replica's task built by sandbox-apiserver;
// a sandbox without a task is a 400. It is authorized as get on sandboxes/tasks: get on
// sandboxes alone is a 403, and the view role of artifacts/ grants it.
func TestTasksSubresource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, _ := poolNamespace(t, true)
	s := taskSandbox("tbl", 2, "sh", "-c", `exit "$CODE"`)
	s.Spec.TaskTemplate.Env = []sandboxv1alpha1.SandboxTaskEnvVar{{Name: "CODE", Value: "0"}}
	s.Spec.ShardTaskPatches = []runtime.RawExtension{
		{Raw: []byte(`{"env":[{"name":"CODE","value":"0"}]}`)},
		{Raw: []byte(`{"env":[{"name":"CODE","value":"3"}]}`)},
	}
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, sandbox("plain"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := waitTasksComplete(t, ns, "tbl", time.Minute)

	table, err := tasksTable(ctx, sandboxes, ns, "tbl", "")
	if err != nil {
		t.Fatalf("table of tasks: %v", err)
	}
	var columns []string
	for _, c := range table.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	if diff := cmp.Diff([]string{"Replica", "Phase", "Exit", "Attempts", "Duration", "Pod", "Reason"}, columns); diff != "" {
		t.Errorf("columns (-want +got):\n%s", diff)
	}
	if len(table.Rows) != 2 {
		t.Fatalf("%d rows, want 2: %+v", len(table.Rows), table.Rows)
	}
	want := [][]any{
		{int64(0), "Succeeded", "0", int64(1), "", "tbl-0", "<none>"},
		{int64(1), "Failed", "3", int64(1), "", "tbl-1", "Error"},
	}
	for i, row := range table.Rows {
		cells := append([]any(nil), row.Cells...)
		if len(cells) != 7 {
			t.Fatalf("row %d: %v", i, cells)
		}
		// The duration of an ended task is its own (a second or so); it has one.
		if d, ok := cells[4].(string); !ok || d == "" || d == "<none>" {
			t.Errorf("row %d: duration %v", i, cells[4])
		}
		cells[4] = ""
		if diff := cmp.Diff(want[i], cells); diff != "" {
			t.Errorf("row %d (-want +got):\n%s", i, diff)
		}
		// includeObject=Metadata, the default: every row names its sandbox.
		m := &metav1.PartialObjectMetadata{}
		if err := utiljson.Unmarshal(row.Object.Raw, m); err != nil || m.Kind != "PartialObjectMetadata" || m.Name != "tbl" || m.Namespace != ns {
			t.Errorf("row %d: object %s (%v), want the metadata of the sandbox", i, row.Object.Raw, err)
		}
	}
	none, err := tasksTable(ctx, sandboxes, ns, "tbl", metav1.IncludeNone)
	if err != nil {
		t.Fatalf("table of tasks without objects: %v", err)
	}
	if len(none.Rows) != 2 || none.Rows[0].Object.Raw != nil {
		t.Errorf("includeObject=None: rows %+v", none.Rows)
	}

	obj, err := tasksObject(ctx, sandboxes, ns, "tbl")
	if err != nil {
		t.Fatalf("tasks as JSON: %v", err)
	}
	if obj.Name != "tbl" || obj.Namespace != ns {
		t.Errorf("tasks as JSON: %s/%s, want the sandbox %s/tbl", obj.Namespace, obj.Name, ns)
	}
	if diff := cmp.Diff(done.Status.Tasks, obj.Status.Tasks); diff != "" {
		t.Errorf("status.tasks of the subresource (-sandbox +tasks):\n%s", diff)
	}

	if _, err := tasksTable(ctx, sandboxes, ns, "plain", ""); !apierrors.IsBadRequest(err) {
		t.Errorf("tasks of a sandbox without a task: %v, want 400", err)
	}
	if _, err := tasksObject(ctx, sandboxes, ns, "nope"); !apierrors.IsNotFound(err) {
		t.Errorf("tasks of a missing sandbox: %v, want 404", err)
	}

	// Alice may get sandboxes, not their tasks: the kube-apiserver refuses before the request
	// reaches sandbox-apiserver.
	alice := sandboxClientFor(t, framework.AliceToken)
	grant(t, ns, "alice", []string{"sandboxes"}, []string{"get"})
	if _, err := alice.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "tbl", metav1.GetOptions{}); err != nil {
		t.Fatalf("alice gets the sandbox: %v", err)
	}
	if _, err := tasksTable(ctx, alice, ns, "tbl", ""); !apierrors.IsForbidden(err) {
		t.Errorf("alice's table of tasks: %v, want 403", err)
	}
	if _, err := tasksObject(ctx, alice, ns, "tbl"); !apierrors.IsForbidden(err) {
		t.Errorf("alice's tasks as JSON: %v, want 403", err)
	}

	// Bob has the view role of artifacts/ in the namespace, as the built-in view role
	// aggregates it.
	if err := framework.ApplyManifest(ctx, kube, "artifacts/base/rbac-users.yaml"); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bob-view", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kube-sandbox-view"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}}}
	if err := kube.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	bob := sandboxClientFor(t, framework.BobToken)
	// RBAC is read from an informer in the kube-apiserver: the binding takes a moment.
	waitFor(t, "bob's view role", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := tasksTable(ctx, bob, ns, "tbl", "")
		return err == nil, nil
	})
	if _, err := tasksObject(ctx, bob, ns, "tbl"); err != nil {
		t.Errorf("bob's tasks as JSON: %v", err)
	}
}
