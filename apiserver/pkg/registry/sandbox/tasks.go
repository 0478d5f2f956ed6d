package sandbox

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

// TasksREST implements the tasks subresource: GET sandboxes/NAME/tasks answers the sandbox,
// and asked for a Table (Accept: application/json;as=Table;v=v1;g=meta.k8s.io) it answers one
// row per replica's task, so that every client prints the same columns, as kubectl get does
// for sandboxes.
//
// It answers the Sandbox itself rather than a kind of its own, as pods/status and
// pods/ephemeralcontainers answer the Pod: the tasks are the sandbox's status.tasks, with no
// identity, resourceVersion or lifecycle of their own, so a SandboxTaskList would only copy
// that field under a new schema for clients to learn, version and convert. A table, though,
// has one set of columns per endpoint; sandboxes' are the sandbox's, so the per-replica view
// needs an endpoint of its own, and a read-only subresource of the sandbox is the one a
// Kubernetes client expects (a GET, authorized as get on sandboxes/tasks, which the view role
// grants as it grants sandboxes/log).
type TasksREST struct {
	store *REST
}

var (
	_ rest.Storage        = &TasksREST{}
	_ rest.Getter         = &TasksREST{}
	_ rest.TableConvertor = &TasksREST{}
)

// NewTasksREST returns the tasks subresource of store.
func NewTasksREST(store *REST) *TasksREST { return &TasksREST{store: store} }

// New implements rest.Storage.
func (r *TasksREST) New() runtime.Object { return &sandboxv1alpha1.Sandbox{} }

// Destroy implements rest.Storage.
func (r *TasksREST) Destroy() {}

// Get implements rest.Getter. A sandbox without a task has no tasks to show: a 400, as the
// log subresource answers for it, rather than a table of replicas whose tasks never come.
func (r *TasksREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.store.Get(ctx, name, options)
	if err != nil {
		return nil, err
	}
	sbx, ok := obj.(*sandboxv1alpha1.Sandbox)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("not a Sandbox: %T", obj))
	}
	if err := RequireTask(sbx); err != nil {
		return nil, err
	}
	return sbx, nil
}

// ConvertToTable implements rest.TableConvertor: a row per replica of the sandbox, its
// durations measured against the server's clock.
func (r *TasksREST) ConvertToTable(_ context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	sbx, ok := obj.(*sandboxv1alpha1.Sandbox)
	if !ok {
		return nil, fmt.Errorf("cannot print %T as a table of tasks", obj)
	}
	table := TasksTable(sbx, r.store.now())
	table.ResourceVersion = sbx.ResourceVersion
	if to, ok := opts.(*metav1.TableOptions); ok && to.NoHeaders {
		table.ColumnDefinitions = nil
	}
	return table, nil
}

// RequireTask is nil for a sandbox that runs a task, and the 400 the tasks subresource
// answers for one that does not.
func RequireTask(sbx *sandboxv1alpha1.Sandbox) *apierrors.StatusError {
	if sbx.Spec.TaskTemplate != nil {
		return nil
	}
	return apierrors.NewBadRequest(fmt.Sprintf("sandbox %q runs no task (it has no spec.taskTemplate)", sbx.Name))
}
