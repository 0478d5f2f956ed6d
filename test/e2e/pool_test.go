//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Labels of pool pods (controller/apis/control/v1alpha1).
const (
	labelPool         = "control.kube-sandbox.io/pool"
	labelPoolRevision = "control.kube-sandbox.io/pool-revision"
	labelBatchSandbox = "control.kube-sandbox.io/batchsandbox"
	labelReplica      = "control.kube-sandbox.io/replica"
)

// controllerSelector selects the sandbox-controller pod (artifacts/base/controller.yaml).
const (
	controllerNamespace = "kube-sandbox-system"
	controllerSelector  = "app.kubernetes.io/name=sandbox-controller"
)

type condition struct {
	Type, Status, Reason, Message string
	ObservedGeneration            int64
}

func findCondition(conds []condition, typ string) condition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return condition{}
}

type poolObject struct {
	Metadata struct {
		Generation int64
	}
	Status struct {
		ObservedGeneration                   int64
		Revision                             string
		Total, Allocated, Available, Updated int32
		Conditions                           []condition
	}
}

func (p poolObject) String() string {
	ready, prog := findCondition(p.Status.Conditions, "Ready"), findCondition(p.Status.Conditions, "Progressing")
	return fmt.Sprintf("generation %d observed %d revision %s total %d allocated %d available %d updated %d Ready=%s/%s (%s) Progressing=%s/%s",
		p.Metadata.Generation, p.Status.ObservedGeneration, p.Status.Revision, p.Status.Total, p.Status.Allocated,
		p.Status.Available, p.Status.Updated, ready.Status, ready.Reason, ready.Message, prog.Status, prog.Reason)
}

type sandboxPod struct {
	Replica   int32
	Name      string
	RuntimeID string
	Ready     bool
}

type sandboxObject struct {
	Metadata struct {
		Generation int64
		UID        string
	}
	Spec struct {
		PoolRef *struct{ Name string }
	}
	Status struct {
		Phase           string
		Replicas, Ready int32
		Pods            []sandboxPod
		Conditions      []condition
	}
}

func (s sandboxObject) pod(replica int32) sandboxPod {
	for _, p := range s.Status.Pods {
		if p.Replica == replica {
			return p
		}
	}
	return sandboxPod{}
}

func (s sandboxObject) String() string {
	ready := findCondition(s.Status.Conditions, "Ready")
	return fmt.Sprintf("phase %s ready %d/%d pods %+v Ready=%s/%s (%s)", s.Status.Phase, s.Status.Ready, s.Status.Replicas,
		s.Status.Pods, ready.Status, ready.Reason, ready.Message)
}

type podObject struct {
	Metadata struct {
		Name, UID         string
		Labels            map[string]string
		Annotations       map[string]string
		DeletionTimestamp *string
		OwnerReferences   []struct {
			Kind, Name string
			Controller *bool
		}
	}
	Status struct {
		Phase      string
		PodIP      string
		Conditions []condition
	}
}

func (p podObject) ready() bool {
	return p.Metadata.DeletionTimestamp == nil && findCondition(p.Status.Conditions, "Ready").Status == "True"
}

func (p podObject) controller() string {
	for _, o := range p.Metadata.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return o.Kind + "/" + o.Name
		}
	}
	return ""
}

// getJSON reads an object (or list) with kubectl get -o json.
func getJSON(t *testing.T, into any, args ...string) {
	t.Helper()
	out := mustKubectl(t, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), into); err != nil {
		t.Fatalf("kubectl %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func getPool(t *testing.T, ns, name string) poolObject {
	t.Helper()
	var p poolObject
	getJSON(t, &p, "-n", ns, "get", "pool", name)
	return p
}

func getSandbox(t *testing.T, ns, name string) sandboxObject {
	t.Helper()
	var s sandboxObject
	getJSON(t, &s, "-n", ns, "get", "sandbox", name)
	return s
}

func getPod(t *testing.T, ns, name string) podObject {
	t.Helper()
	var p podObject
	getJSON(t, &p, "-n", ns, "get", "pod", name)
	return p
}

// poolPods lists the pods labelled with the pool, idle and allocated, without those being
// deleted.
func poolPods(t *testing.T, ns, pool string) (idle, allocated []podObject) {
	t.Helper()
	var list struct{ Items []podObject }
	getJSON(t, &list, "-n", ns, "get", "pods", "-l", labelPool+"="+pool)
	for _, p := range list.Items {
		switch {
		case p.Metadata.DeletionTimestamp != nil:
		case p.Metadata.Labels[labelBatchSandbox] != "":
			allocated = append(allocated, p)
		default:
			idle = append(idle, p)
		}
	}
	return idle, allocated
}

func podNames(pods []podObject) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Metadata.Name)
	}
	sort.Strings(out)
	return out
}

// applyPool creates (or changes) a Pool of the Python image, as artifacts/samples/pool-python.yaml.
func applyPool(t *testing.T, ns, name string, bufferMin, bufferMax, poolMax int) {
	t.Helper()
	applyPoolIn(t, ns, name, "", bufferMin, bufferMax, poolMax)
}

// applyPoolIn is applyPool with a RuntimeClass ("": the node's default runtime).
func applyPoolIn(t *testing.T, ns, name, runtimeClass string, bufferMin, bufferMax, poolMax int) {
	t.Helper()
	rc := ""
	if runtimeClass != "" {
		rc = "\n      runtimeClassName: " + runtimeClass
	}
	manifest := fmt.Sprintf(`apiVersion: control.kube-sandbox.io/v1alpha1
kind: Pool
metadata: {name: %s}
spec:
  capacitySpec: {bufferMin: %d, bufferMax: %d, poolMin: 0, poolMax: %d}
  updateStrategy: {maxUnavailable: 1}
  recycleStrategy: Delete
  template:
    spec:%s
      containers:
      - name: sandbox
        image: %s
        imagePullPolicy: Never
        resources:
          requests: {cpu: 10m, memory: 32Mi}
          limits: {memory: 512Mi}
`, name, bufferMin, bufferMax, poolMax, rc, pythonImage)
	r := run(t, []byte(manifest), "kubectl", "-n", ns, "apply", "-f", "-")
	if r.code != 0 {
		t.Fatalf("kubectl apply pool %s: exit %d: %s%s", name, r.code, r.stdout, r.stderr)
	}
}

func waitPool(t *testing.T, ns, name, what string, timeout time.Duration, cond func(p poolObject) bool) poolObject {
	t.Helper()
	var p poolObject
	waitFor(t, "pool "+name+": "+what, timeout, func() (bool, string) {
		p = getPool(t, ns, name)
		return cond(p), p.String()
	})
	return p
}

// waitPoolFull waits until the pool holds exactly bufferMin ready idle pods and says Ready.
func waitPoolFull(t *testing.T, ns, name string, bufferMin, allocated int32, timeout time.Duration) poolObject {
	t.Helper()
	return waitPool(t, ns, name, fmt.Sprintf("%d available, %d allocated, Ready", bufferMin, allocated), timeout, func(p poolObject) bool {
		return p.Status.Available == bufferMin && p.Status.Total == bufferMin+allocated && p.Status.Allocated == allocated &&
			findCondition(p.Status.Conditions, "Ready").Status == "True"
	})
}

func sandboxCmd(t *testing.T, ns string, args ...string) result {
	t.Helper()
	return run(t, nil, "kubectl", append([]string{"sandbox", "-n", ns}, args...)...)
}

func mustSandboxCmd(t *testing.T, ns string, args ...string) string {
	t.Helper()
	r := sandboxCmd(t, ns, args...)
	if r.code != 0 {
		t.Fatalf("kubectl sandbox %s: exit %d: %s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func waitSandboxRunning(t *testing.T, ns string, timeout time.Duration, names ...string) {
	t.Helper()
	args := append(append([]string{"wait"}, names...), "--for=Running", "--timeout="+timeout.String())
	if r := sandboxCmd(t, ns, args...); r.code != 0 {
		var states []string
		for _, n := range names {
			states = append(states, n+": "+kubectl(t, "-n", ns, "get", "sandbox", n, "-o", "jsonpath={.status}").stdout)
		}
		t.Fatalf("kubectl sandbox wait %v: exit %d: %s%s\n%s\nevents:\n%s", names, r.code, r.stdout, r.stderr,
			strings.Join(states, "\n"), kubectl(t, "-n", ns, "get", "events", "--sort-by=.lastTimestamp").stdout)
	}
}

func waitSandbox(t *testing.T, ns, name, what string, timeout time.Duration, cond func(s sandboxObject) bool) sandboxObject {
	t.Helper()
	var s sandboxObject
	waitFor(t, "sandbox "+name+": "+what, timeout, func() (bool, string) {
		s = getSandbox(t, ns, name)
		return cond(s), s.String()
	})
	return s
}

// tableCells reads a kubectl table: for the row whose NAME is name, each column's cell (empty
// cells included, which splitting on spaces would lose).
func tableCells(t *testing.T, out, name string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("not a table with rows:\n%s", out)
	}
	header := lines[0]
	type column struct {
		name  string
		start int
	}
	var cols []column
	for i := 0; i < len(header); {
		if header[i] == ' ' {
			i++
			continue
		}
		j := i
		for j < len(header) && header[j] != ' ' {
			j++
		}
		cols = append(cols, column{header[i:j], i})
		i = j
	}
	for _, row := range lines[1:] {
		if f := strings.Fields(row); len(f) == 0 || f[0] != name {
			continue
		}
		cells := map[string]string{}
		for k, c := range cols {
			if c.start >= len(row) {
				cells[c.name] = ""
				continue
			}
			end := len(row)
			if k+1 < len(cols) && cols[k+1].start < end {
				end = cols[k+1].start
			}
			cells[c.name] = strings.TrimSpace(row[c.start:end])
		}
		return cells
	}
	t.Fatalf("no row %q in:\n%s", name, out)
	return nil
}

// TestPoolFillAllocateRecycle: a pool fills its buffer, a sandbox is given one of its warm pods
// with its env, and the pod is deleted with the sandbox while the pool keeps its buffer.
func TestPoolFillAllocateRecycle(t *testing.T) {
	ns := newNamespace(t)
	applyPool(t, ns, "py", 2, 2, 5)
	p := waitPoolFull(t, ns, "py", 2, 0, 2*time.Minute)
	if findCondition(p.Status.Conditions, "Progressing").Status != "False" || p.Status.Updated != 2 || p.Status.Revision == "" {
		t.Errorf("a full pool of one revision: %s", p)
	}

	out := mustKubectl(t, "-n", ns, "get", "pools")
	if h := strings.Fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(h, " ") != "NAME AVAILABLE ALLOCATED TOTAL MAX AGE" {
		t.Errorf("kubectl get pools columns %v:\n%s", h, out)
	}
	if c := tableCells(t, out, "py"); c["AVAILABLE"] != "2" || c["ALLOCATED"] != "0" || c["TOTAL"] != "2" || c["MAX"] != "5" {
		t.Errorf("kubectl get pools, want AVAILABLE 2 ALLOCATED 0 TOTAL 2 MAX 5:\n%s", out)
	}
	out = mustKubectl(t, "-n", ns, "get", "sbxpool", "-o", "wide")
	if c := tableCells(t, out, "py"); c["BUFFER"] != "2" || c["UPDATED"] != "2" || c["REVISION"] != p.Status.Revision {
		t.Errorf("kubectl get sbxpool -o wide, want BUFFER 2 UPDATED 2 REVISION %s:\n%s", p.Status.Revision, out)
	}
	warm, _ := poolPods(t, ns, "py")
	for _, pod := range warm {
		if pod.Metadata.Labels[labelPoolRevision] != p.Status.Revision || pod.controller() != "Pool/py" {
			t.Errorf("idle pod %s: labels %v controller %s, want revision %s and Pool/py", pod.Metadata.Name, pod.Metadata.Labels, pod.controller(), p.Status.Revision)
		}
	}

	mustSandboxCmd(t, ns, "create", "x", "--pool", "py", "--env", "GREETING=hi")
	waitSandboxRunning(t, ns, 90*time.Second, "x")
	r := sandboxCmd(t, ns, "exec", "x", "--", "sh", "-c", "echo $GREETING $SANDBOX_NAME $SANDBOX_NAMESPACE")
	if want := "hi x " + ns + "\n"; r.code != 0 || r.stdout != want {
		t.Errorf("exec echo: exit %d stdout %q stderr %q, want %q", r.code, r.stdout, r.stderr, want)
	}

	s := getSandbox(t, ns, "x")
	podName := s.pod(0).Name
	if podName == "" || s.Status.Ready != 1 {
		t.Fatalf("sandbox status: %s", s)
	}
	if !slices.Contains(podNames(warm), podName) {
		t.Errorf("sandbox x got pod %s, not one of the warm pods %v", podName, podNames(warm))
	}
	pod := getPod(t, ns, podName)
	wantLabels := map[string]string{labelPool: "py", labelPoolRevision: p.Status.Revision, labelBatchSandbox: "x", labelReplica: "0"}
	for k, v := range wantLabels {
		if pod.Metadata.Labels[k] != v {
			t.Errorf("allocated pod %s: label %s=%q, want %q (labels %v)", podName, k, pod.Metadata.Labels[k], v, pod.Metadata.Labels)
		}
	}
	if c := pod.controller(); c != "BatchSandbox/x" {
		t.Errorf("allocated pod %s is controlled by %q, want BatchSandbox/x", podName, c)
	}
	if out := mustKubectl(t, "-n", ns, "get", "sandboxes"); tableCells(t, out, "x")["POOL"] != "py" {
		t.Errorf("kubectl get sandboxes, want POOL py:\n%s", out)
	}
	// The pool counts the pod it gave away and refills its buffer.
	waitPoolFull(t, ns, "py", 2, 1, 90*time.Second)
	waitFor(t, "kubectl get pools to show ALLOCATED 1", 30*time.Second, func() (bool, string) {
		out := mustKubectl(t, "-n", ns, "get", "pools")
		c := tableCells(t, out, "py")
		return c["ALLOCATED"] == "1" && c["AVAILABLE"] == "2" && c["TOTAL"] == "3", out
	})

	mustKubectl(t, "-n", ns, "delete", "sandbox", "x")
	waitFor(t, "the allocated pod to be deleted", 60*time.Second, func() (bool, string) {
		r := kubectl(t, "-n", ns, "get", "pod", podName, "-o", "jsonpath={.metadata.deletionTimestamp} {.metadata.labels}")
		return r.code != 0 && strings.Contains(r.stderr, "NotFound"), r.stdout + r.stderr
	})
	waitPoolFull(t, ns, "py", 2, 0, 90*time.Second)
	idle, allocated := poolPods(t, ns, "py")
	if len(idle) != 2 || len(allocated) != 0 || slices.Contains(podNames(idle), podName) {
		t.Errorf("after the delete: idle pods %v, allocated %v; the recycled pod %s must not come back", podNames(idle), podNames(allocated), podName)
	}
	out = mustKubectl(t, "-n", ns, "get", "pools")
	if c := tableCells(t, out, "py"); c["ALLOCATED"] != "0" || c["AVAILABLE"] != "2" || c["TOTAL"] != "2" {
		t.Errorf("kubectl get pools after the delete, want ALLOCATED 0 AVAILABLE 2 TOTAL 2:\n%s", out)
	}
}

// TestPoolLostPodReplaced: a replica whose pod is deleted gets another pod of the pool, an
// Event says so, and exec reaches the new pod.
func TestPoolLostPodReplaced(t *testing.T) {
	ns := newNamespace(t)
	applyPool(t, ns, "py", 2, 2, 6)
	waitPoolFull(t, ns, "py", 2, 0, 2*time.Minute)
	mustSandboxCmd(t, ns, "create", "w", "--pool", "py", "--replicas", "2")
	waitSandboxRunning(t, ns, 90*time.Second, "w")
	before := getSandbox(t, ns, "w")
	lost, kept := before.pod(1), before.pod(0)
	if lost.Name == "" || kept.Name == "" || lost.Name == kept.Name {
		t.Fatalf("sandbox w: %s", before)
	}
	// Let the pool refill, so that the replacement is a warm pod.
	waitPoolFull(t, ns, "py", 2, 2, 90*time.Second)

	mustKubectl(t, "-n", ns, "delete", "pod", lost.Name, "--wait=false")
	start := time.Now()
	after := waitSandbox(t, ns, "w", "replica 1 on another pod, 2/2 ready", 60*time.Second, func(s sandboxObject) bool {
		p := s.pod(1)
		return p.Name != "" && p.Name != lost.Name && p.Ready && s.Status.Ready == 2 && s.Status.Phase == "Running"
	})
	t.Logf("replica 1 on pod %s %.2fs after its pod %s was deleted", after.pod(1).Name, time.Since(start).Seconds(), lost.Name)
	if p := after.pod(0); p.Name != kept.Name || p.RuntimeID != kept.RuntimeID {
		t.Errorf("replica 0 changed from %+v to %+v", kept, p)
	}
	if p := after.pod(1); p.RuntimeID == "" || p.RuntimeID == lost.RuntimeID {
		t.Errorf("replica 1 runtime ID %q, want a new one (was %q)", p.RuntimeID, lost.RuntimeID)
	}
	replacement := getPod(t, ns, after.pod(1).Name)
	if l := replacement.Metadata.Labels; l[labelBatchSandbox] != "w" || l[labelReplica] != "1" || l[labelPool] != "py" {
		t.Errorf("replacement pod %s labels %v", replacement.Metadata.Name, l)
	}

	waitFor(t, "a PodLost event naming "+lost.Name, 30*time.Second, func() (bool, string) {
		out := mustKubectl(t, "-n", ns, "get", "events", "--field-selector", "reason=PodLost",
			"-o", `jsonpath={range .items[*]}{.involvedObject.kind}/{.involvedObject.name}: {.message}{"\n"}{end}`)
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "Sandbox/w: ") && strings.Contains(l, lost.Name) {
				return true, out
			}
		}
		return false, out
	})

	r := sandboxCmd(t, ns, "exec", "w", "--replica", "1", "--", "sh", "-c", "echo $SANDBOX_NAME $(cat /etc/hostname)")
	if want := "w " + replacement.Metadata.Name + "\n"; r.code != 0 || r.stdout != want {
		t.Errorf("exec --replica 1: exit %d stdout %q stderr %q, want %q", r.code, r.stdout, r.stderr, want)
	}
	r = sandboxCmd(t, ns, "exec", "w", "--replica", "0", "--", "cat", "/etc/hostname")
	if want := kept.Name + "\n"; r.code != 0 || r.stdout != want {
		t.Errorf("exec --replica 0: exit %d stdout %q stderr %q, want %q", r.code, r.stdout, r.stderr, want)
	}
}

// TestPoolRefusesPoolRefChange: a sandbox keeps its pool, through the aggregated API (422 with
// the field path) and on the BatchSandbox (the CRD's CEL rule).
func TestPoolRefusesPoolRefChange(t *testing.T) {
	ns := newNamespace(t)
	applyPool(t, ns, "py", 1, 1, 3)
	applyPool(t, ns, "other", 0, 0, 1)
	mustSandboxCmd(t, ns, "create", "x", "--pool", "py")
	waitSandboxRunning(t, ns, 2*time.Minute, "x")
	before := getSandbox(t, ns, "x")

	r := kubectl(t, "-n", ns, "patch", "sandbox", "x", "--type", "merge", "-p", `{"spec":{"poolRef":{"name":"other"}}}`)
	if r.code == 0 || !strings.Contains(r.stderr, "is invalid") || !strings.Contains(r.stderr, "spec.poolRef") {
		t.Errorf("patch sandbox poolRef: exit %d stdout %q stderr %q, want 422 Invalid naming spec.poolRef", r.code, r.stdout, r.stderr)
	}
	t.Logf("patch sandbox poolRef refused: %s", strings.TrimSpace(r.stderr))
	r = kubectl(t, "-n", ns, "patch", "sandbox", "x", "--type", "json", "-p", `[{"op":"remove","path":"/spec/poolRef"}]`)
	if r.code == 0 || !strings.Contains(r.stderr, "is invalid") {
		t.Errorf("patch sandbox, poolRef removed: exit %d stdout %q stderr %q, want 422 Invalid", r.code, r.stdout, r.stderr)
	}
	t.Logf("patch sandbox, poolRef removed refused: %s", strings.TrimSpace(r.stderr))
	r = kubectl(t, "-n", ns, "patch", "batchsandbox", "x", "--type", "merge", "-p", `{"spec":{"poolRef":{"name":"other"}}}`)
	if r.code == 0 || !strings.Contains(r.stderr, "is invalid") || !strings.Contains(r.stderr, "poolRef is immutable") {
		t.Errorf("patch batchsandbox poolRef: exit %d stdout %q stderr %q, want the CEL rule's message", r.code, r.stdout, r.stderr)
	}
	t.Logf("patch batchsandbox poolRef refused: %s", strings.TrimSpace(r.stderr))

	after := getSandbox(t, ns, "x")
	if after.Spec.PoolRef == nil || after.Spec.PoolRef.Name != "py" || after.Metadata.Generation != before.Metadata.Generation {
		t.Errorf("sandbox changed: poolRef %+v generation %d (was %d)", after.Spec.PoolRef, after.Metadata.Generation, before.Metadata.Generation)
	}
	if bs := mustKubectl(t, "-n", ns, "get", "batchsandbox", "x", "-o", "jsonpath={.spec.poolRef.name}"); bs != "py" {
		t.Errorf("batchsandbox poolRef %q, want py", bs)
	}
	if after.pod(0).Name != before.pod(0).Name || after.Status.Phase != "Running" {
		t.Errorf("sandbox status changed: %s (was %s)", after, before)
	}
	if r := sandboxCmd(t, ns, "exec", "x", "--", "true"); r.code != 0 {
		t.Errorf("exec after the refused patches: exit %d: %s", r.code, r.stderr)
	}
	if _, allocated := poolPods(t, ns, "other"); len(allocated) != 0 {
		t.Errorf("pool other gave pods away: %v", podNames(allocated))
	}
}

// TestPoolRollingUpdate: a template change replaces the idle pods, within the budget, and
// leaves the allocated pod alone.
func TestPoolRollingUpdate(t *testing.T) {
	ns := newNamespace(t)
	applyPool(t, ns, "py", 3, 3, 6)
	waitPoolFull(t, ns, "py", 3, 0, 2*time.Minute)
	mustSandboxCmd(t, ns, "create", "s", "--pool", "py")
	waitSandboxRunning(t, ns, 90*time.Second, "s")
	podName := getSandbox(t, ns, "s").pod(0).Name
	allocatedPod := getPod(t, ns, podName)
	oldRevision := allocatedPod.Metadata.Labels[labelPoolRevision]
	p := waitPoolFull(t, ns, "py", 3, 1, 90*time.Second)
	if oldRevision == "" || p.Status.Revision != oldRevision {
		t.Fatalf("allocated pod revision %q, pool %s", oldRevision, p)
	}

	mustKubectl(t, "-n", ns, "patch", "pool", "py", "--type", "merge", "-p",
		`{"spec":{"template":{"metadata":{"labels":{"rollout":"two"}},"spec":{"containers":[{"name":"sandbox","image":"`+pythonImage+
			`","imagePullPolicy":"Never","env":[{"name":"ROLLOUT","value":"two"}],"resources":{"requests":{"cpu":"10m","memory":"32Mi"},"limits":{"memory":"512Mi"}}}]}}}}`)
	start := time.Now()
	sawProgressing := false
	p = waitPool(t, ns, "py", "every idle pod of the new revision", 3*time.Minute, func(p poolObject) bool {
		if findCondition(p.Status.Conditions, "Progressing").Status == "True" {
			sawProgressing = true
		}
		if p.Status.Revision == oldRevision || p.Status.ObservedGeneration != p.Metadata.Generation ||
			p.Status.Updated != 3 || p.Status.Available != 3 || p.Status.Allocated != 1 ||
			findCondition(p.Status.Conditions, "Progressing").Status != "False" || findCondition(p.Status.Conditions, "Ready").Status != "True" {
			return false
		}
		idle, _ := poolPods(t, ns, "py")
		for _, pod := range idle {
			if pod.Metadata.Labels[labelPoolRevision] != p.Status.Revision || !pod.ready() {
				return false
			}
		}
		return len(idle) == 3
	})
	t.Logf("rolled to revision %s in %.1fs (Progressing True seen: %v)", p.Status.Revision, time.Since(start).Seconds(), sawProgressing)
	if c := findCondition(p.Status.Conditions, "Progressing"); c.Reason != "UpToDate" {
		t.Errorf("Progressing %+v, want reason UpToDate", c)
	}
	idle, allocated := poolPods(t, ns, "py")
	for _, pod := range idle {
		if pod.Metadata.Labels["rollout"] != "two" {
			t.Errorf("idle pod %s lacks the new template's label: %v", pod.Metadata.Name, pod.Metadata.Labels)
		}
	}
	if len(allocated) != 1 {
		t.Fatalf("allocated pods %v, want only %s", podNames(allocated), podName)
	}
	now := allocated[0]
	if now.Metadata.Name != podName || now.Metadata.UID != allocatedPod.Metadata.UID || now.Metadata.Labels[labelPoolRevision] != oldRevision ||
		now.Metadata.Labels["rollout"] != "" || !now.ready() {
		t.Errorf("the allocated pod was touched: now %s uid %s labels %v ready %v; was %s uid %s revision %s",
			now.Metadata.Name, now.Metadata.UID, now.Metadata.Labels, now.ready(), podName, allocatedPod.Metadata.UID, oldRevision)
	}
	s := getSandbox(t, ns, "s")
	if s.pod(0).Name != podName || s.Status.Phase != "Running" {
		t.Errorf("sandbox s: %s, want Running on %s", s, podName)
	}
	r := sandboxCmd(t, ns, "exec", "s", "--", "sh", "-c", "echo ok $ROLLOUT")
	if r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("exec in the sandbox of the old revision: exit %d stdout %q stderr %q, want \"ok\\n\"", r.code, r.stdout, r.stderr)
	}
	// A sandbox made now gets a pod of the new template.
	mustSandboxCmd(t, ns, "create", "n", "--pool", "py")
	waitSandboxRunning(t, ns, 90*time.Second, "n")
	r = sandboxCmd(t, ns, "exec", "n", "--", "sh", "-c", "echo ok $ROLLOUT")
	if r.code != 0 || r.stdout != "ok two\n" {
		t.Errorf("exec in a sandbox of the new revision: exit %d stdout %q stderr %q, want \"ok two\\n\"", r.code, r.stdout, r.stderr)
	}
}

// TestPoolConditions: a sandbox says why it has no pod (PoolNotFound, PoolExhausted) and gets
// one once there is.
func TestPoolConditions(t *testing.T) {
	ns := newNamespace(t)
	mustSandboxCmd(t, ns, "create", "early", "--pool", "late")
	s := waitSandbox(t, ns, "early", "Pending with PoolNotFound", 30*time.Second, func(s sandboxObject) bool {
		c := findCondition(s.Status.Conditions, "Ready")
		return s.Status.Phase == "Pending" && c.Status == "False" && c.Reason == "PoolNotFound"
	})
	if c := findCondition(s.Status.Conditions, "Ready"); !strings.Contains(c.Message, `"late"`) {
		t.Errorf("PoolNotFound message %q does not name the pool", c.Message)
	}
	if r := sandboxCmd(t, ns, "wait", "early", "--timeout=1s"); r.code == 0 || !strings.Contains(r.stdout+r.stderr, "PoolNotFound") {
		t.Errorf("kubectl sandbox wait: exit %d %s%s, want the reason PoolNotFound", r.code, r.stdout, r.stderr)
	}
	if r := sandboxCmd(t, ns, "exec", "early", "--pod-running-timeout=2s", "--", "true"); r.code == 0 || !strings.Contains(r.stderr, "PoolNotFound") {
		t.Errorf("kubectl sandbox exec: exit %d %s%s, want the reason PoolNotFound", r.code, r.stdout, r.stderr)
	}
	if out := mustKubectl(t, "-n", ns, "get", "events", "--field-selector", "reason=PoolNotFound", "-o", "name"); out == "" {
		t.Error("no PoolNotFound event")
	}

	applyPool(t, ns, "late", 1, 1, 2)
	waitSandboxRunning(t, ns, 2*time.Minute, "early")
	if r := sandboxCmd(t, ns, "exec", "early", "--", "echo", "ok"); r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("exec: exit %d %q %q", r.code, r.stdout, r.stderr)
	}

	applyPool(t, ns, "tiny", 1, 1, 1)
	waitPoolFull(t, ns, "tiny", 1, 0, 2*time.Minute)
	mustSandboxCmd(t, ns, "create", "a", "--pool", "tiny")
	waitSandboxRunning(t, ns, 90*time.Second, "a")
	mustSandboxCmd(t, ns, "create", "b", "--pool", "tiny")
	s = waitSandbox(t, ns, "b", "Pending with PoolExhausted", 30*time.Second, func(s sandboxObject) bool {
		c := findCondition(s.Status.Conditions, "Ready")
		return s.Status.Phase == "Pending" && c.Status == "False" && c.Reason == "PoolExhausted"
	})
	if c := findCondition(s.Status.Conditions, "Ready"); !strings.Contains(c.Message, `"tiny"`) {
		t.Errorf("PoolExhausted message %q does not name the pool", c.Message)
	}
	waitPool(t, ns, "tiny", "Ready PoolMaxReached", 30*time.Second, func(p poolObject) bool {
		c := findCondition(p.Status.Conditions, "Ready")
		return p.Status.Allocated == 1 && p.Status.Total == 1 && c.Reason == "PoolMaxReached"
	})
	if idle, allocated := poolPods(t, ns, "tiny"); len(idle)+len(allocated) != 1 {
		t.Errorf("pool tiny (poolMax 1) has pods %v %v", podNames(idle), podNames(allocated))
	}
	// Long enough for the first read to answer on a busy node (a wait that ends before any
	// read did can name no reason); b stays PoolExhausted however long.
	if r := sandboxCmd(t, ns, "wait", "b", "--timeout=5s"); r.code == 0 || !strings.Contains(r.stdout+r.stderr, "PoolExhausted") {
		t.Errorf("kubectl sandbox wait: exit %d %s%s, want the reason PoolExhausted", r.code, r.stdout, r.stderr)
	}

	// Room in the pool again: b gets the next pod.
	mustKubectl(t, "-n", ns, "delete", "sandbox", "a")
	waitSandboxRunning(t, ns, 2*time.Minute, "b")
	if r := sandboxCmd(t, ns, "exec", "b", "--", "echo", "ok"); r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("exec: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// runDetached runs a command like run, but may be called from any goroutine.
func runDetached(name string, args ...string) result {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		r.code = exitErr.ExitCode()
	case err != nil:
		r.code, r.stderr = -1, err.Error()
	}
	return r
}

// TestPoolControllerRestartDuringAllocations: the controller is killed while ten sandboxes are
// being allocated; the allocations recorded on the pods survive, and no pod is given twice.
func TestPoolControllerRestartDuringAllocations(t *testing.T) {
	ns := newNamespace(t)
	applyPool(t, ns, "py", 12, 12, 30)
	waitPoolFull(t, ns, "py", 12, 0, 3*time.Minute)
	controllers := strings.Fields(mustKubectl(t, "-n", controllerNamespace, "get", "pods", "-l", controllerSelector, "-o", "jsonpath={.items[*].metadata.uid}"))
	if len(controllers) == 0 {
		t.Fatalf("no controller pod with labels %s in %s", controllerSelector, controllerNamespace)
	}

	t.Cleanup(func() {
		// The tests after this one need the controller back.
		if r := kubectl(t, "-n", controllerNamespace, "rollout", "status", "deploy/sandbox-controller", "--timeout=3m"); r.code != 0 {
			t.Errorf("the controller did not come back: %s%s", r.stdout, r.stderr)
		}
		if t.Failed() {
			t.Logf("controller logs:\n%s", kubectl(t, "-n", controllerNamespace, "logs", "deploy/sandbox-controller", "--tail=200").stdout)
		}
	})

	const n = 10
	names := make([]string, n)
	results := make([]result, n)
	var deleted result
	var wg sync.WaitGroup
	var deletedAt time.Time
	startLine, firstCreated := make(chan struct{}), make(chan struct{})
	var once sync.Once
	for i := range n {
		names[i] = fmt.Sprintf("s%d", i)
		wg.Go(func() {
			<-startLine
			// Spread over a second, so that the controller goes in the middle of the burst.
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
			results[i] = runDetached("kubectl", "sandbox", "-n", ns, "create", names[i], "--pool", "py")
			once.Do(func() { close(firstCreated) })
		})
	}
	wg.Go(func() {
		<-firstCreated
		deleted = runDetached("kubectl", "-n", controllerNamespace, "delete", "pod", "-l", controllerSelector, "--wait=false")
		deletedAt = time.Now()
	})
	close(startLine)
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("kubectl sandbox create %s: exit %d: %s%s", names[i], r.code, r.stdout, r.stderr)
		}
	}
	if deleted.code != 0 {
		t.Fatalf("deleting the controller pod: exit %d: %s%s", deleted.code, deleted.stdout, deleted.stderr)
	}
	t.Logf("%s", strings.TrimSpace(deleted.stdout))
	if t.Failed() {
		t.FailNow()
	}

	waitSandboxRunning(t, ns, 3*time.Minute, names...)
	t.Logf("all %d sandboxes Running %.1fs after the controller pod was deleted", n, time.Since(deletedAt).Seconds())
	now := strings.Fields(mustKubectl(t, "-n", controllerNamespace, "get", "pods", "-l", controllerSelector, "-o", "jsonpath={.items[*].metadata.uid}"))
	for _, uid := range now {
		if slices.Contains(controllers, uid) {
			t.Errorf("controller pod %s is still there: it was not restarted", uid)
		}
	}

	owner := map[string]string{}
	allocatedBefore := 0
	for _, name := range names {
		s := getSandbox(t, ns, name)
		p := s.pod(0)
		if len(s.Status.Pods) != 1 || p.Name == "" || !p.Ready {
			t.Errorf("sandbox %s: %s, want one ready pod", name, s)
			continue
		}
		if other, ok := owner[p.Name]; ok {
			t.Errorf("pod %s is in the status of both %s and %s", p.Name, other, name)
		}
		owner[p.Name] = name
		pod := getPod(t, ns, p.Name)
		if pod.Metadata.Labels[labelBatchSandbox] != name || pod.Metadata.Labels[labelReplica] != "0" || pod.controller() != "BatchSandbox/"+name || !pod.ready() {
			t.Errorf("pod %s of sandbox %s: labels %v controller %s ready %v", p.Name, name, pod.Metadata.Labels, pod.controller(), pod.ready())
		}
		if at, err := time.Parse(time.RFC3339Nano, pod.Metadata.Annotations["control.kube-sandbox.io/allocated-at"]); err != nil {
			t.Errorf("pod %s: allocated-at: %v", p.Name, err)
		} else if at.Before(deletedAt) {
			allocatedBefore++
		}
		r := sandboxCmd(t, ns, "exec", name, "--", "sh", "-c", "echo $SANDBOX_NAME $(cat /etc/hostname)")
		if want := name + " " + p.Name + "\n"; r.code != 0 || r.stdout != want {
			t.Errorf("exec in %s: exit %d stdout %q stderr %q, want %q", name, r.code, r.stdout, r.stderr, want)
		}
	}
	t.Logf("%d sandboxes were allocated before the controller pod was deleted, %d after", allocatedBefore, n-allocatedBefore)
	// No pod is allocated that no sandbox lists (a second pod of a replica is released).
	waitFor(t, "exactly the 10 listed pods allocated", 60*time.Second, func() (bool, string) {
		_, allocated := poolPods(t, ns, "py")
		names := podNames(allocated)
		if len(names) != n {
			return false, fmt.Sprintf("allocated pods %v", names)
		}
		for _, name := range names {
			if _, ok := owner[name]; !ok {
				return false, fmt.Sprintf("allocated pods %v; %s is no sandbox's", names, name)
			}
		}
		return true, ""
	})
	waitPool(t, ns, "py", "10 allocated", 60*time.Second, func(p poolObject) bool { return p.Status.Allocated == n })
}
