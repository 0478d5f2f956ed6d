package snapshot

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

// Runner takes snapshots in the background, one per pod at most, so that a reconcile never
// waits for one: it starts a Job and returns, and Notify brings the sandbox back when the
// job's stage changes or it ends. Jobs live in memory only: a controller that restarts
// mid-pause starts them again (the agent pushes the same tag anew), which loses nothing, as
// the pod is deleted only after its snapshot is in the sandbox's status.
type Runner struct {
	Agent Agent
	// Notify is called (from the job's goroutine) with the sandbox of a job that changed.
	Notify func(types.NamespacedName)

	mu      sync.Mutex
	ctx     context.Context
	jobs    map[types.UID]*Job
	started chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// Job is a snapshot of one pod, as far as it got.
type Job struct {
	Sandbox types.NamespacedName
	Replica int32
	PodUID  types.UID
	Request nodeapi.SnapshotRequest
	Started time.Time
	// Stage is the last Progress stage seen ("" before the first).
	Stage string
	Bytes int64
	// Done: Result or Err is set, at Finished.
	Done     bool
	Finished time.Time
	Result   *nodeapi.Result
	Err      error
}

func (r *Runner) init() {
	r.once.Do(func() {
		r.jobs = map[types.UID]*Job{}
		r.started = make(chan struct{})
	})
}

// Start implements manager.Runnable: jobs run under ctx, on the leader, and stop with it.
func (r *Runner) Start(ctx context.Context) error {
	r.init()
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	close(r.started)
	<-ctx.Done()
	r.wg.Wait()
	return nil
}

// Started is closed once the Runner runs.
func (r *Runner) Started() <-chan struct{} {
	r.init()
	return r.started
}

// ErrNotStarted: the Runner has not been started (the manager is not the leader yet).
var ErrNotStarted = errors.New("the snapshot runner is not started")

// Ensure returns the job of the pod, starting it if there is none. nodeIP is where the pod's
// agent listens.
func (r *Runner) Ensure(sandbox types.NamespacedName, replica int32, podUID types.UID, nodeIP string, req nodeapi.SnapshotRequest) (Job, error) {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[podUID]; ok {
		return *j, nil
	}
	if r.ctx == nil {
		return Job{}, ErrNotStarted
	}
	if r.ctx.Err() != nil {
		return Job{}, r.ctx.Err()
	}
	j := &Job{Sandbox: sandbox, Replica: replica, PodUID: podUID, Request: req, Started: time.Now()}
	r.jobs[podUID] = j
	ctx := r.ctx
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		res, err := r.Agent.Snapshot(ctx, nodeIP, &req, func(ev nodeapi.Event) {
			r.mu.Lock()
			changed := ev.Stage != j.Stage
			j.Stage, j.Bytes = ev.Stage, ev.Bytes
			r.mu.Unlock()
			if changed {
				r.notify(sandbox)
			}
		})
		r.mu.Lock()
		j.Done, j.Finished, j.Result, j.Err = true, time.Now(), res, err
		r.mu.Unlock()
		if err != nil {
			klog.V(2).InfoS("snapshot failed", "sandbox", sandbox, "replica", replica, "pod", req.Pod, "err", err)
		} else {
			klog.V(2).InfoS("snapshot pushed", "sandbox", sandbox, "replica", replica, "pod", req.Pod, "image", res.Image,
				"digest", res.Digest, "layerSize", res.LayerSize, "duration", time.Since(j.Started))
		}
		r.notify(sandbox)
	}()
	return *j, nil
}

func (r *Runner) notify(sandbox types.NamespacedName) {
	if r.Notify != nil {
		r.Notify(sandbox)
	}
}

// Busy tells whether a job of the sandbox is still running: a push that ends after the
// sandbox's snapshots were deleted would leave one behind.
func (r *Runner) Busy(sandbox types.NamespacedName) bool {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range r.jobs {
		if j.Sandbox == sandbox && !j.Done {
			return true
		}
	}
	return false
}

// ForgetSandbox drops the jobs of a sandbox that is gone.
func (r *Runner) ForgetSandbox(sandbox types.NamespacedName) {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, j := range r.jobs {
		if j.Sandbox == sandbox {
			delete(r.jobs, uid)
		}
	}
}

// Forget drops the job of a pod: the next Ensure starts anew. A job still running goes on,
// and its end is ignored.
func (r *Runner) Forget(podUID types.UID) {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs, podUID)
}
