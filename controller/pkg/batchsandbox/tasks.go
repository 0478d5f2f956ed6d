package batchsandbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/tasks"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

// TaskStarter starts a task in a pod's execd (execdclient.TaskClient).
type TaskStarter interface {
	Start(ctx context.Context, t execdclient.Target, req *execdapi.TaskRequest) (*execdapi.TaskState, error)
}

// TaskBatchWindow is how long a change of a task's state waits before its sandbox is
// reconciled: the changes of a window make one reconcile and one status write, so that 100
// replicas ending together do not make 100 writes.
const TaskBatchWindow = 250 * time.Millisecond

// taskEvents turns the Watcher's notifications into reconcile requests, each delayed by the
// batch window. The workqueue keeps one entry per sandbox, with the earliest time: every
// change inside the window joins the first one.
type taskEvents struct {
	ch     chan event.GenericEvent
	window time.Duration
}

func newTaskEvents(window time.Duration) *taskEvents {
	return &taskEvents{ch: make(chan event.GenericEvent, 1024), window: window}
}

// notify is the Watcher's Notify.
func (e *taskEvents) notify(sandbox types.NamespacedName) {
	e.ch <- event.GenericEvent{Object: &controlv1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: sandbox.Namespace, Name: sandbox.Name}}}
}

// handler enqueues after the window.
func (e *taskEvents) handler() handler.EventHandler {
	return handler.Funcs{
		GenericFunc: func(_ context.Context, ev event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ev.Object.GetNamespace(), Name: ev.Object.GetName()}}, e.window)
		},
	}
}

// taskResult is what reconcileTasks found: the status of every desired replica's task.
type taskResult struct {
	tasks []controlv1alpha1.TaskStatus
}

// reconcileTasks moves every replica's task along (planTasks): it opens a watch stream to each
// pod whose task may run, closes the others, starts the tasks of pods that are ready for them,
// and returns the status to record. claimed holds the runtime IDs of the certified (and, in
// pooled mode, claimed) containers. The error is worth a retry (a start that did not reach
// execd); the status is good all the same.
func (r *Reconciler) reconcileTasks(ctx context.Context, bs *controlv1alpha1.BatchSandbox, byReplica map[int32]*corev1.Pod, claimed map[int32]string) (*taskResult, error) {
	key := types.NamespacedName{Namespace: bs.Namespace, Name: bs.Name}
	if bs.Spec.TaskTemplate == nil || r.Tasks == nil {
		if r.Tasks != nil {
			r.Tasks.Sync(key, nil)
		}
		return nil, nil
	}
	now := r.now()
	uid := string(bs.UID)
	// What each pod's stream said last (nothing, for a pod with no stream open).
	contacts := make(map[types.UID]tasks.Contact, len(byReplica))
	for _, p := range byReplica {
		contacts[p.UID], _ = r.Tasks.Contact(p.UID)
	}
	plan := planTasks(bs, byReplica, claimed, contacts, now)
	for _, p := range plan.watch {
		r.Tasks.Ensure(p, key, uid)
	}
	res := &taskResult{tasks: plan.tasks}

	var (
		mu       sync.Mutex
		retryErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, parallelWrites)
	)
	starter := r.taskStarter()
	for _, s := range plan.starts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			req := tasks.Request(s.task, uid, s.replica, string(s.pod.UID), s.prev)
			target := execdclient.Target{PodIP: s.pod.Status.PodIP, PodUID: string(s.pod.UID), Port: r.Tasks.Port}
			state, err := starter.Start(ctx, target, req)
			mu.Lock()
			defer mu.Unlock()
			var rejected *execdclient.TaskRejected
			switch {
			case err == nil:
				r.Tasks.Observe(s.pod.UID, *state)
				obs := s.obs
				obs.Contact, _ = r.Tasks.Contact(s.pod.UID)
				obs.Contact.Known, obs.Contact.State = true, *state
				st, _ := tasks.Next(s.prev, s.replica, uid, obs, tasks.PolicyOf(s.task), now)
				res.tasks[s.replica] = st
			case errors.As(err, &rejected):
				// execd will not run it as it is (a pod without tasks, another task): no retry.
				res.tasks[s.replica] = taskStartRejected(s, err, now)
			default:
				log.FromContext(ctx).V(2).Info("starting a task", "replica", s.replica, "pod", s.pod.Name, "err", err)
				if retryErr == nil {
					retryErr = fmt.Errorf("start the task of replica %d: %w", s.replica, err)
				}
			}
		})
	}
	wg.Wait()
	r.Tasks.Sync(key, plan.keep)
	sort.Slice(res.tasks, func(a, b int) bool { return res.tasks[a].Replica < res.tasks[b].Replica })
	return res, retryErr
}

// taskStarter is the TaskStarter, made once with the Authority's credentials unless given.
func (r *Reconciler) taskStarter() TaskStarter {
	if r.TaskStarter != nil {
		return r.TaskStarter
	}
	r.taskStarterOnce.Do(func() { r.defaultTaskStarter = execdclient.NewTaskClient(r.Authority) })
	return r.defaultTaskStarter
}

var _ ctrl.Object = &controlv1alpha1.BatchSandbox{}
