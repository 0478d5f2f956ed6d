package integration

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// taskSandbox is a direct-mode sandbox of n replicas that runs cmd as its task.
func taskSandbox(name string, n int32, cmd ...string) *sandboxv1alpha1.Sandbox {
	s := sandbox(name)
	s.Spec.Entrypoint = nil
	s.Spec.Replicas = ptr.To(n)
	s.Spec.TaskTemplate = &sandboxv1alpha1.SandboxTaskTemplate{Command: cmd}
	return s
}

func getSandbox(ctx context.Context, ns, name string) (*sandboxv1alpha1.Sandbox, error) {
	return sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
}

// waitTasksComplete waits for the condition TasksComplete and returns the sandbox then.
func waitTasksComplete(t *testing.T, ns, name string, timeout time.Duration) *sandboxv1alpha1.Sandbox {
	t.Helper()
	var sbx *sandboxv1alpha1.Sandbox
	if err := wait.PollUntilContextTimeout(suiteCtx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		sbx, err = getSandbox(ctx, ns, name)
		return err == nil && meta.IsStatusConditionTrue(sbx.Status.Conditions, controlv1alpha1.ConditionTasksComplete), nil
	}); err != nil {
		t.Fatalf("waiting for TasksComplete of %s: %v; status %+v", name, err, sbx.Status)
	}
	return sbx
}

func taskLog(t *testing.T, ns, name string, params map[string]string) string {
	t.Helper()
	req := sandboxes.SandboxV1alpha1().RESTClient().Get().Namespace(ns).Resource("sandboxes").Name(name).SubResource("log")
	for k, v := range params {
		req = req.Param(k, v)
	}
	ctx, cancel := context.WithTimeout(suiteCtx, time.Minute)
	defer cancel()
	rc, err := req.Stream(ctx)
	if err != nil {
		t.Fatalf("log of %s %v: %v", name, params, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("log of %s %v: %v", name, params, err)
	}
	return string(data)
}

// TestTaskBatch: 100 replicas of a 1 s task all end Succeeded, each with its record, and
// their ends make far fewer status writes than tasks: changes are batched.
func TestTaskBatch(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	const n = 100
	w, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, taskSandbox("batch", n, "sleep", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sbx := waitTasksComplete(t, ns, "batch", 3*time.Minute)
	if sbx.Status.Phase != sandboxv1alpha1.PhaseSucceeded || sbx.Status.TaskSucceeded != n || sbx.Status.TaskFailed+sbx.Status.TaskRunning+sbx.Status.TaskPending != 0 {
		t.Fatalf("after the batch: phase %s, counts %d/%d/%d/%d", sbx.Status.Phase, sbx.Status.TaskPending, sbx.Status.TaskRunning, sbx.Status.TaskSucceeded, sbx.Status.TaskFailed)
	}
	if len(sbx.Status.Tasks) != n {
		t.Fatalf("%d task records", len(sbx.Status.Tasks))
	}
	for i, task := range sbx.Status.Tasks {
		if task.Replica != int32(i) || task.Phase != "Succeeded" || task.ExitCode == nil || *task.ExitCode != 0 || task.Attempts != 1 ||
			task.StartTime == nil || task.FinishTime == nil || task.FinishTime.Before(task.StartTime) || task.Pod != fmt.Sprintf("batch-%d", i) {
			t.Errorf("task %d: %+v", i, task)
		}
	}
	if c := meta.FindStatusCondition(sbx.Status.Conditions, controlv1alpha1.ConditionTasksFailed); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("TasksFailed = %+v", c)
	}
	// Writes, from the creation to the end: pods becoming ready, tasks starting and
	// ending are each batched, so there are far fewer than one per task.
	modified := 0
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Modified {
				modified++
			}
		case <-time.After(time.Second):
			done = true
		}
	}
	t.Logf("%d writes of the sandbox for %d tasks", modified, n)
	if modified >= n {
		t.Errorf("%d writes of the sandbox for %d tasks: the status is not batched", modified, n)
	}
	// An Event tells that all have ended.
	waitFor(t, "the TasksSucceeded Event", 30*time.Second, func(ctx context.Context) (bool, error) {
		var evs corev1.EventList
		if err := kube.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == controlv1alpha1.ReasonTasksSucceeded && e.InvolvedObject.Name == "batch" && e.InvolvedObject.Kind == "Sandbox" {
				return true, nil
			}
		}
		return false, nil
	})
	// At rest: the streams are closed (every task ended) and nothing writes any more.
	time.Sleep(2 * time.Second)
	before, err := getSandbox(ctx, ns, "batch")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	after, err := getSandbox(ctx, ns, "batch")
	if err != nil {
		t.Fatal(err)
	}
	if before.ResourceVersion != after.ResourceVersion {
		t.Errorf("a batch at rest was written: resourceVersion %s → %s", before.ResourceVersion, after.ResourceVersion)
	}
}

// TestTaskRetriesPatchesAndLogs: shardPatches and shardTaskPatches by index; a failing task
// retried up to its backoffLimit; a task that fails once and then succeeds; the logs, with
// previous, tailLines and limitBytes; and the task fields immutable once started.
func TestTaskRetriesPatchesAndLogs(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	marker := filepath.Join(t.TempDir(), "tried")
	s := taskSandbox("retry", 3, "sh", "-c", `echo "shard $SHARD attempt"; echo second line; eval "$STEP"`)
	s.Spec.TaskTemplate.RestartPolicy = "OnFailure"
	s.Spec.TaskTemplate.BackoffLimit = ptr.To[int32](2)
	s.Spec.TaskTemplate.Env = []sandboxv1alpha1.SandboxTaskEnvVar{{Name: "SHARD", Value: "x"}, {Name: "STEP", Value: "exit 0"}}
	s.Spec.ShardTaskPatches = []runtime.RawExtension{
		{Raw: []byte(`{"env":[{"name":"SHARD","value":"0"},{"name":"STEP","value":"exit 3"}]}`)},
		{Raw: []byte(fmt.Sprintf(`{"env":[{"name":"SHARD","value":"1"},{"name":"STEP","value":"test -e %s || { touch %s; exit 1; }"}]}`, marker, marker))},
	}
	s.Spec.ShardPatches = []runtime.RawExtension{{}, {Raw: []byte(`{"metadata":{"labels":{"shard":"one"}}}`)}}
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sbx := waitTasksComplete(t, ns, "retry", 40*time.Second)
	if sbx.Status.Phase != sandboxv1alpha1.PhaseFailed || sbx.Status.TaskFailed != 1 || sbx.Status.TaskSucceeded != 2 {
		t.Fatalf("phase %s, %d failed, %d succeeded; tasks %+v", sbx.Status.Phase, sbx.Status.TaskFailed, sbx.Status.TaskSucceeded, sbx.Status.Tasks)
	}
	t0, t1, t2 := sbx.Status.Tasks[0], sbx.Status.Tasks[1], sbx.Status.Tasks[2]
	if t0.Phase != "Failed" || t0.Attempts != 3 || t0.ExitCode == nil || *t0.ExitCode != 3 || t0.Reason != controlv1alpha1.ReasonTaskBackoffLimit {
		t.Errorf("replica 0 (always exit 3, backoffLimit 2): %+v", t0)
	}
	if t1.Phase != "Succeeded" || t1.Attempts != 2 || *t1.ExitCode != 0 {
		t.Errorf("replica 1 (fails once): %+v", t1)
	}
	if t2.Phase != "Succeeded" || t2.Attempts != 1 {
		t.Errorf("replica 2 (the template): %+v", t2)
	}
	if c := meta.FindStatusCondition(sbx.Status.Conditions, controlv1alpha1.ConditionTasksFailed); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("TasksFailed = %+v", c)
	}
	// shardPatches[1] labelled replica 1's pod only.
	for i, want := range []string{"", "one", ""} {
		pod := &corev1.Pod{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "retry-" + strconv.Itoa(i)}, pod); err != nil {
			t.Fatal(err)
		}
		if pod.Labels["shard"] != want {
			t.Errorf("pod of replica %d: label shard=%q, want %q", i, pod.Labels["shard"], want)
		}
	}
	// Logs: the last attempt, the one before, the tail, a limit.
	if got := taskLog(t, ns, "retry", map[string]string{"replica": "0"}); got != "shard 0 attempt\nsecond line\n" {
		t.Errorf("log of replica 0 = %q", got)
	}
	if got := taskLog(t, ns, "retry", map[string]string{"replica": "0", "previous": "true"}); !strings.Contains(got, "shard 0 attempt") {
		t.Errorf("previous log of replica 0 = %q", got)
	}
	if got := taskLog(t, ns, "retry", map[string]string{"replica": "1", "tailLines": "1"}); got != "second line\n" {
		t.Errorf("tail of replica 1 = %q", got)
	}
	if got := taskLog(t, ns, "retry", map[string]string{"replica": "2", "limitBytes": "5"}); got != "shard" {
		t.Errorf("5 bytes of replica 2 = %q", got)
	}
	// The tasks have started: their fields stay as they are.
	sbx.Spec.TaskTemplate.Args = []string{"more"}
	_, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Update(ctx, sbx, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.taskTemplate") {
		t.Errorf("changing a started task: %v, want 422 on spec.taskTemplate", err)
	}
}

// TestTaskLogFollow: a follow streams the output as it comes and ends with the task.
func TestTaskLogFollow(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	s := taskSandbox("follow", 1, "sh", "-c", "for i in 1 2 3; do echo line-$i; sleep 1; done")
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task running", time.Minute, func(ctx context.Context) (bool, error) {
		sbx, err := getSandbox(ctx, ns, "follow")
		return err == nil && sbx.Status.TaskRunning == 1, nil
	})
	if got := taskLog(t, ns, "follow", map[string]string{"follow": "true"}); got != "line-1\nline-2\nline-3\n" {
		t.Errorf("followed log = %q", got)
	}
	sbx := waitTasksComplete(t, ns, "follow", time.Minute)
	if sbx.Status.TaskSucceeded != 1 {
		t.Errorf("tasks %+v", sbx.Status.Tasks)
	}
}

// TestTaskRelease: with Release, a pooled replica's pod goes once its task has ended, and
// the replica counts as done: no new pod, the record stays.
func TestTaskRelease(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	if err := kube.Create(ctx, newPool(ns, "py", 3, 3, 10)); err != nil {
		t.Fatal(err)
	}
	waitPoolAvailable(t, ns, "py", 3)
	s := pooledSandbox("release", "py")
	s.Spec.Replicas = ptr.To[int32](3)
	s.Spec.TaskTemplate = &sandboxv1alpha1.SandboxTaskTemplate{Command: []string{"sh", "-c", "echo $GREETING from $SANDBOX_NAME"}}
	s.Spec.TaskResourcePolicyWhenCompleted = "Release"
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sbx := waitTasksComplete(t, ns, "release", time.Minute)
	if sbx.Status.Phase != sandboxv1alpha1.PhaseSucceeded || sbx.Status.TaskSucceeded != 3 {
		t.Fatalf("phase %s tasks %+v", sbx.Status.Phase, sbx.Status.Tasks)
	}
	waitFor(t, "the pods released", time.Minute, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := kube.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{controlv1alpha1.LabelBatchSandbox: "release"}); err != nil {
			return false, err
		}
		return len(pods.Items) == 0, nil
	})
	// The pool refills its buffer; the sandbox keeps its record and asks for no pod.
	waitPoolAvailable(t, ns, "py", 3)
	sbx, err := getSandbox(ctx, ns, "release")
	if err != nil {
		t.Fatal(err)
	}
	if sbx.Status.Phase != sandboxv1alpha1.PhaseSucceeded || len(sbx.Status.Tasks) != 3 || len(sbx.Status.Pods) != 0 {
		t.Errorf("after release: phase %s, %d tasks, pods %+v", sbx.Status.Phase, len(sbx.Status.Tasks), sbx.Status.Pods)
	}
	if p, _ := getPool(ctx, ns, "py"); p.Status.Allocated != 0 {
		t.Errorf("the pool still counts %d allocated", p.Status.Allocated)
	}
}

// TestTaskControllerRestart: the controller stops in the middle of a batch; the tasks go on,
// and the next controller learns their state from execd: nothing is started twice.
func TestTaskControllerRestart(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	dir := t.TempDir()
	s := taskSandbox("restart", 5, "sh", "-c", fmt.Sprintf(`echo x >> %s/restart-$REPLICA; sleep 3`, dir))
	s.Spec.TaskTemplate.RestartPolicy = "OnFailure"
	var patches []runtime.RawExtension
	for i := range 5 {
		patches = append(patches, runtime.RawExtension{Raw: []byte(fmt.Sprintf(`{"env":[{"name":"REPLICA","value":"%d"}]}`, i))})
	}
	s.Spec.ShardTaskPatches = patches
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the tasks running", time.Minute, func(ctx context.Context) (bool, error) {
		sbx, err := getSandbox(ctx, ns, "restart")
		return err == nil && sbx.Status.TaskRunning == 5, nil
	})
	stopController()
	time.Sleep(4 * time.Second) // the tasks end while no controller runs
	if err := startController(); err != nil {
		t.Fatal(err)
	}
	sbx := waitTasksComplete(t, ns, "restart", time.Minute)
	if sbx.Status.TaskSucceeded != 5 {
		t.Fatalf("tasks %+v", sbx.Status.Tasks)
	}
	for i, task := range sbx.Status.Tasks {
		if task.Attempts != 1 {
			t.Errorf("task %d made %d attempts", i, task.Attempts)
		}
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("restart-%d", i)))
		if err != nil || string(data) != "x\n" {
			t.Errorf("replica %d ran %q times (%v): started again", i, data, err)
		}
	}
}

// TestTaskPodLost: a direct-mode pod deleted during its task is replaced, and the task is
// retried there (OnFailure) or fails with PodLost (Never).
func TestTaskPodLost(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	for _, policy := range []string{"OnFailure", "Never"} {
		name := strings.ToLower(policy)
		s := taskSandbox(name, 1, "sh", "-c", `test -e /tmp/kube-sandbox-it-`+ns+`-`+name+` && exit 0; touch /tmp/kube-sandbox-it-`+ns+`-`+name+`; sleep 60`)
		s.Spec.TaskTemplate.RestartPolicy = policy
		t.Cleanup(func() { _ = os.Remove("/tmp/kube-sandbox-it-" + ns + "-" + name) })
		if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var first string
		waitFor(t, "the task running", time.Minute, func(ctx context.Context) (bool, error) {
			sbx, err := getSandbox(ctx, ns, name)
			if err != nil || sbx.Status.TaskRunning != 1 {
				return false, nil
			}
			first = sbx.Status.Tasks[0].Pod
			return true, nil
		})
		pod := &corev1.Pod{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, pod); err != nil {
			t.Fatal(err)
		}
		if err := kube.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		sbx := waitTasksComplete(t, ns, name, time.Minute)
		task := sbx.Status.Tasks[0]
		switch policy {
		case "OnFailure":
			if task.Phase != "Succeeded" || task.Attempts != 2 {
				t.Errorf("OnFailure, pod lost: %+v", task)
			}
			newPod := &corev1.Pod{}
			if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: first}, newPod); err != nil || newPod.UID == pod.UID {
				t.Errorf("no replacement pod: %v", err)
			}
		case "Never":
			if task.Phase != "Failed" || task.Reason != controlv1alpha1.ReasonTaskPodLost {
				t.Errorf("Never, pod lost: %+v", task)
			}
		}
	}
}
