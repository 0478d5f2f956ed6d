package batchsandbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/shard"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/sandboxevents"
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

// endedReplicas are the replicas whose task the recorded status says has ended: they get no
// new pod, and with Release they lose the one they have.
func endedReplicas(bs *controlv1alpha1.BatchSandbox) map[int32]bool {
	if bs.Spec.TaskTemplate == nil {
		return nil
	}
	out := map[int32]bool{}
	for _, t := range bs.Status.Tasks {
		if t.Phase.Final() {
			out[t.Replica] = true
		}
	}
	return out
}

// releases reports whether the pod of an ended replica goes.
func releases(bs *controlv1alpha1.BatchSandbox) bool {
	return bs.Spec.TaskTemplate != nil && bs.Spec.TaskResourcePolicyWhenCompleted == controlv1alpha1.TaskResourceRelease
}

func taskStatusOf(bs *controlv1alpha1.BatchSandbox, replica int32) *controlv1alpha1.TaskStatus {
	for i := range bs.Status.Tasks {
		if bs.Status.Tasks[i].Replica == replica {
			return &bs.Status.Tasks[i]
		}
	}
	return nil
}

// reconcileTasks moves every replica's task along (tasks.Next): it starts the tasks of pods
// that are ready for them, opens a watch stream to each pod whose task runs, closes the others,
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
	desired := replicas(bs)
	now := r.now()
	uid := string(bs.UID)
	keep := map[types.UID]bool{}
	res := &taskResult{tasks: make([]controlv1alpha1.TaskStatus, desired)}

	type start struct {
		replica int32
		pod     *corev1.Pod
		task    *controlv1alpha1.TaskTemplate
		obs     tasks.Observation
	}
	var starts []start
	for i := int32(0); i < desired; i++ {
		prev := taskStatusOf(bs, i)
		if prev != nil && prev.Phase.Final() {
			// Ended for good: nothing to apply a patch for, nothing to watch.
			res.tasks[i] = *prev
			continue
		}
		task, err := shard.TaskOf(bs, i)
		if err != nil {
			// sandbox-apiserver refuses such a patch; a BatchSandbox written directly may have it.
			t := metav1.NewTime(now)
			res.tasks[i] = controlv1alpha1.TaskStatus{Replica: i, Phase: controlv1alpha1.TaskFailed, Reason: controlv1alpha1.ReasonTaskStartFailed,
				Message: fmt.Sprintf("spec.shardTaskPatches[%d]: %v", i, err), FinishTime: &t}
			continue
		}
		obs := tasks.Observation{}
		p := byReplica[i]
		if p != nil && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			obs.Pod, obs.PodUID = p.Name, string(p.UID)
			rid, ok := claimed[i]
			obs.Usable = ok && rid != "" && rid == sandboxpod.RuntimeID(p)
			if obs.Usable || prev != nil && prev.PodUID == string(p.UID) {
				// A pod whose task may run: hear what it does.
				r.Tasks.Ensure(p, key, uid)
				keep[p.UID] = true
			}
			obs.Contact, _ = r.Tasks.Contact(p.UID)
		}
		st, act := tasks.Next(prev, i, uid, obs, tasks.PolicyOf(task), now)
		res.tasks[i] = st
		if act == tasks.Start {
			starts = append(starts, start{replica: i, pod: p, task: task, obs: obs})
		}
	}

	var (
		mu       sync.Mutex
		retryErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, parallelWrites)
	)
	starter := r.taskStarter()
	for _, s := range starts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			prev := taskStatusOf(bs, s.replica)
			req := tasks.Request(s.task, uid, s.replica, string(s.pod.UID), prev)
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
				st, _ := tasks.Next(prev, s.replica, uid, obs, tasks.PolicyOf(s.task), now)
				res.tasks[s.replica] = st
			case errors.As(err, &rejected):
				// execd will not run it as it is (a pod without tasks, another task): no retry.
				t := metav1.NewTime(now)
				res.tasks[s.replica] = controlv1alpha1.TaskStatus{Replica: s.replica, Phase: controlv1alpha1.TaskFailed,
					Pod: s.pod.Name, PodUID: string(s.pod.UID), Reason: controlv1alpha1.ReasonTaskStartFailed, Message: err.Error(), FinishTime: &t}
				if prev != nil {
					res.tasks[s.replica].Attempts, res.tasks[s.replica].StartTime = prev.Attempts, prev.StartTime
				}
			default:
				log.FromContext(ctx).V(2).Info("starting a task", "replica", s.replica, "pod", s.pod.Name, "err", err)
				if retryErr == nil {
					retryErr = fmt.Errorf("start the task of replica %d: %w", s.replica, err)
				}
			}
		})
	}
	wg.Wait()
	r.Tasks.Sync(key, keep)
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

// applyTasks puts the tasks' counters, conditions and phase into status, and records an
// Event when they have all ended.
func (r *Reconciler) applyTasks(bs *controlv1alpha1.BatchSandbox, status *controlv1alpha1.BatchSandboxStatus, tk *taskResult) {
	if tk == nil {
		for _, t := range []string{controlv1alpha1.ConditionTasksComplete, controlv1alpha1.ConditionTasksFailed} {
			meta.RemoveStatusCondition(&status.Conditions, t)
		}
		return
	}
	status.Tasks = tk.tasks
	c := tasks.Count(tk.tasks)
	status.TaskPending, status.TaskRunning, status.TaskSucceeded, status.TaskFailed, status.TaskUnknown = c.Pending, c.Running, c.Succeeded, c.Failed, c.Unknown
	desired := replicas(bs)
	complete, failed := tasks.Conditions(c, desired, bs.Generation)
	meta.SetStatusCondition(&status.Conditions, complete)
	meta.SetStatusCondition(&status.Conditions, failed)
	if complete.Status != metav1.ConditionTrue || desired == 0 {
		return
	}
	status.Phase = controlv1alpha1.PhaseSucceeded
	if c.Failed > 0 {
		status.Phase = controlv1alpha1.PhaseFailed
	}
	if prev := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionTasksComplete); prev == nil || prev.Status != metav1.ConditionTrue {
		if c.Failed > 0 {
			r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeWarning, controlv1alpha1.ReasonTaskFailed, "Complete", "%s", complete.Message)
		} else {
			r.Recorder.Eventf(sandboxevents.SandboxRef(bs), nil, corev1.EventTypeNormal, controlv1alpha1.ReasonTasksSucceeded, "Complete", "%s", complete.Message)
		}
	}
}

// releaseEnded deletes (direct mode) or releases (pooled) the pods of replicas whose ended task
// the status records, with Release, and drops them from byReplica.
func (r *Reconciler) releaseEnded(ctx context.Context, bs *controlv1alpha1.BatchSandbox, ended map[int32]bool, byReplica map[int32]*corev1.Pod) {
	if !releases(bs) {
		return
	}
	for i := range ended {
		p, ok := byReplica[i]
		if !ok {
			continue
		}
		r.release(ctx, bs, p, "its task ended (taskResourcePolicyWhenCompleted: Release)")
		delete(byReplica, i)
	}
}

var _ ctrl.Object = &controlv1alpha1.BatchSandbox{}
