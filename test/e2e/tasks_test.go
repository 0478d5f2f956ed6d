//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

type taskObject struct {
	Replica    int32
	Phase      string
	Pod        string
	Attempts   int32
	ExitCode   *int32
	Reason     string
	Message    string
	StartTime  string
	FinishTime string
}

type taskSandboxObject struct {
	Status struct {
		Phase                                                            string
		TaskPending, TaskRunning, TaskSucceeded, TaskFailed, TaskUnknown int32
		Tasks                                                            []taskObject
		Conditions                                                       []condition
	}
}

func getTasks(t *testing.T, ns, name string) taskSandboxObject {
	t.Helper()
	var s taskSandboxObject
	getJSON(t, &s, "-n", ns, "get", "sandbox", name)
	return s
}

func (s taskSandboxObject) String() string {
	return fmt.Sprintf("phase %s pending %d running %d succeeded %d failed %d unknown %d tasks %+v", s.Status.Phase, s.Status.TaskPending,
		s.Status.TaskRunning, s.Status.TaskSucceeded, s.Status.TaskFailed, s.Status.TaskUnknown, s.Status.Tasks)
}

func waitTasksComplete(t *testing.T, ns, name string, timeout time.Duration) taskSandboxObject {
	t.Helper()
	if r := sandboxCmd(t, ns, "wait", name, "--for=TasksComplete", "--timeout="+timeout.String()); r.code != 0 {
		t.Fatalf("kubectl sandbox wait %s --for=TasksComplete: exit %d: %s%s\n%s\nevents:\n%s", name, r.code, r.stdout, r.stderr,
			getTasks(t, ns, name), kubectl(t, "-n", ns, "get", "events", "--sort-by=.lastTimestamp").stdout)
	}
	return getTasks(t, ns, name)
}

// TestTaskBatch: a 10-replica batch of a Python task with arguments per shard, on the real
// node: every task succeeds with its own output, `kubectl sandbox tasks` and `logs` show them.
func TestTaskBatch(t *testing.T) {
	ns := newNamespace(t)
	var patches []string
	for i := range 10 {
		patches = append(patches, fmt.Sprintf(`  - {args: ["%d"]}`, i))
	}
	manifest := fmt.Sprintf(`apiVersion: sandbox.kube-sandbox.io/v1alpha1
kind: Sandbox
metadata: {name: squares}
spec:
  replicas: 10
  template:
    spec:
      containers:
      - name: sandbox
        image: %s
        imagePullPolicy: Never
        resources:
          requests: {cpu: 10m, memory: 32Mi}
  taskTemplate:
    command: [python3, -c, "import sys, os; n = int(sys.argv[1]); print(f'{n} squared is {n*n}', flush=True); print('shard', os.environ['SHARD_NAME'], file=sys.stderr)"]
    env: [{name: SHARD_NAME, value: squares}]
  shardTaskPatches:
%s
`, pythonImage, strings.Join(patches, "\n"))
	if r := run(t, []byte(manifest), "kubectl", "-n", ns, "apply", "-f", "-"); r.code != 0 {
		t.Fatalf("kubectl apply: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	start := time.Now()
	s := waitTasksComplete(t, ns, "squares", 4*time.Minute)
	t.Logf("10 tasks complete %.1fs after the apply", time.Since(start).Seconds())
	if s.Status.Phase != "Succeeded" || s.Status.TaskSucceeded != 10 || len(s.Status.Tasks) != 10 {
		t.Fatalf("after the batch: %s", s)
	}
	for i, task := range s.Status.Tasks {
		if task.Phase != "Succeeded" || task.ExitCode == nil || *task.ExitCode != 0 || task.Attempts != 1 {
			t.Errorf("task %d: %+v", i, task)
		}
		r := sandboxCmd(t, ns, "logs", "squares", "--replica", fmt.Sprint(i))
		if r.code != 0 {
			t.Fatalf("kubectl sandbox logs squares --replica %d: exit %d: %s%s\n%s", i, r.code, r.stdout, r.stderr, podsReport(t, ns, "squares"))
		}
		got := r.stdout
		if want := fmt.Sprintf("%d squared is %d\nshard squares\n", i, i*i); got != want {
			t.Errorf("logs of replica %d = %q, want %q", i, got, want)
		}
	}
	out := mustSandboxCmd(t, ns, "tasks", "squares")
	if rows := strings.Count(strings.TrimSpace(out), "\n"); rows != 10 || strings.Count(out, "Succeeded") != 10 {
		t.Errorf("kubectl sandbox tasks:\n%s", out)
	}
	if c := tableCells(t, out, "3"); c["PHASE"] != "Succeeded" || c["EXIT"] != "0" {
		t.Errorf("row of replica 3: %v", c)
	}
	if got := mustSandboxCmd(t, ns, "logs", "squares", "--replica", "7", "--tail", "1"); got != "shard squares\n" {
		t.Errorf("tail of replica 7 = %q", got)
	}
}

// TestTaskRelease: a pooled batch with --release gives its pods back when its tasks end;
// `logs -f` follows a running task to its end.
func TestTaskRelease(t *testing.T) {
	ns := newNamespace(t)
	applyPool(t, ns, "py", 2, 2, 6)
	waitPoolFull(t, ns, "py", 2, 0, 3*time.Minute)
	mustSandboxCmd(t, ns, "create", "rel", "--pool", "py", "--replicas", "2", "--task", "--release", "--",
		"python3", "-c", "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(1)")
	waitFor(t, "a task running", 2*time.Minute, func() (bool, string) {
		s := getTasks(t, ns, "rel")
		return s.Status.TaskRunning > 0 || s.Status.TaskSucceeded > 0, s.String()
	})
	if got := mustSandboxCmd(t, ns, "logs", "rel", "-f"); got != "tick 0\ntick 1\ntick 2\n" {
		t.Errorf("logs -f = %q", got)
	}
	s := waitTasksComplete(t, ns, "rel", 2*time.Minute)
	if s.Status.Phase != "Succeeded" || s.Status.TaskSucceeded != 2 {
		t.Fatalf("after the batch: %s", s)
	}
	waitFor(t, "the pods released", time.Minute, func() (bool, string) {
		_, allocated := poolPods(t, ns, "py")
		return len(allocated) == 0, fmt.Sprint(podNames(allocated))
	})
	// The pool refills its buffer.
	waitPoolFull(t, ns, "py", 2, 0, 3*time.Minute)
	if s := getTasks(t, ns, "rel"); s.Status.Phase != "Succeeded" || len(s.Status.Tasks) != 2 {
		t.Errorf("after the release: %s", s)
	}
}

// TestTaskPodDeleted: a pod deleted during its task is replaced, and the task (OnFailure)
// runs again there; with Never it fails with PodLost.
func TestTaskPodDeleted(t *testing.T) {
	ns := newNamespace(t)
	mustSandboxCmd(t, ns, "create", "again", "--image", pythonImage, "--task", "--task-restart", "OnFailure", "--", "sleep", "8")
	mustSandboxCmd(t, ns, "create", "once", "--image", pythonImage, "--task", "--", "sleep", "60")
	for _, name := range []string{"again", "once"} {
		waitFor(t, name+" running", 2*time.Minute, func() (bool, string) {
			s := getTasks(t, ns, name)
			return s.Status.TaskRunning == 1, s.String()
		})
		mustKubectl(t, "-n", ns, "delete", "pod", name+"-0", "--wait=false")
	}
	again := waitTasksComplete(t, ns, "again", 3*time.Minute)
	if task := again.Status.Tasks[0]; again.Status.Phase != "Succeeded" || task.Attempts != 2 {
		t.Errorf("OnFailure after its pod was deleted: %s", again)
	}
	once := waitTasksComplete(t, ns, "once", 3*time.Minute)
	if task := once.Status.Tasks[0]; once.Status.Phase != "Failed" || task.Reason != "PodLost" {
		t.Errorf("Never after its pod was deleted: %s", once)
	}
}

// podsReport is what explains a replica that is not ready: the BatchSandbox's pods as its
// status lists them, each pod's readiness, containers and restarts as the kubelet reports them,
// and the namespace's Events.
func podsReport(t *testing.T, ns, name string) string {
	t.Helper()
	status := kubectl(t, "-n", ns, "get", "batchsandbox", name, "-o", "jsonpath={range .status.pods[*]}{.replica} {.name} ready={.ready} runtimeID={.runtimeID}{\"\\n\"}{end}").stdout
	pods := kubectl(t, "-n", ns, "get", "pods", "-o", "jsonpath={range .items[*]}{.metadata.name} deleting={.metadata.deletionTimestamp} "+
		"{range .status.conditions[*]}{.type}={.status}@{.lastTransitionTime} {end}"+
		"{range .status.initContainerStatuses[*]}{.name}:ready={.ready},restarts={.restartCount} {end}"+
		"{range .status.containerStatuses[*]}{.name}:ready={.ready},restarts={.restartCount},id={.containerID} {end}{\"\\n\"}{end}").stdout
	events := kubectl(t, "-n", ns, "get", "events", "--sort-by=.lastTimestamp").stdout
	return fmt.Sprintf("status.pods of batchsandbox %s:\n%s\npods:\n%s\nevents:\n%s", name, status, pods, events)
}
