package integration

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned/scheme"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

// poolNamespace is a namespace with a simulated node (see framework.SimulatedNode).
func poolNamespace(t *testing.T, withExecd bool) (string, *framework.SimulatedNode) {
	t.Helper()
	ns := newNamespace(t)
	ctx, cancel := context.WithCancel(suiteCtx)
	t.Cleanup(cancel)
	node, err := framework.StartSimulatedNode(ctx, cp, ns, withExecd)
	if err != nil {
		t.Fatal(err)
	}
	return ns, node
}

func newPool(ns, name string, bufferMin, bufferMax, poolMax int32) *controlv1alpha1.Pool {
	return &controlv1alpha1.Pool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: controlv1alpha1.PoolSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "sandbox", Image: "python:3.11"}},
			}},
			CapacitySpec: controlv1alpha1.CapacitySpec{BufferMin: bufferMin, BufferMax: bufferMax, PoolMax: poolMax},
		},
	}
}

func pooledSandbox(name, pool string) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: sandboxv1alpha1.SandboxSpec{
			PoolRef: &sandboxv1alpha1.SandboxPoolReference{Name: pool},
			Env:     []corev1.EnvVar{{Name: "GREETING", Value: "hi"}},
		},
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(suiteCtx, 50*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func getPool(ctx context.Context, ns, name string) (*controlv1alpha1.Pool, error) {
	p := &controlv1alpha1.Pool{}
	return p, kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)
}

func waitPoolAvailable(t *testing.T, ns, name string, available int32) {
	t.Helper()
	waitFor(t, fmt.Sprintf("pool %s with %d available", name, available), time.Minute, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, ns, name)
		return err == nil && p.Status.Available == available && p.Status.Total == p.Status.Allocated+available, nil
	})
}

func waitSandboxPhase(t *testing.T, ns, name string, phase sandboxv1alpha1.SandboxPhase) *sandboxv1alpha1.Sandbox {
	t.Helper()
	var sbx *sandboxv1alpha1.Sandbox
	waitFor(t, fmt.Sprintf("sandbox %s %s", name, phase), time.Minute, func(ctx context.Context) (bool, error) {
		var err error
		sbx, err = sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && sbx.Status.Phase == phase, nil
	})
	return sbx
}

func execOutput(t *testing.T, ns, name string, cmd ...string) string {
	t.Helper()
	cfg := userConfig("admin-token")
	u := sandboxes.SandboxV1alpha1().RESTClient().Post().Namespace(ns).Resource("sandboxes").Name(name).SubResource("exec").
		VersionedParams(&sandboxv1alpha1.SandboxExecOptions{Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	exec, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(suiteCtx, 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		t.Fatalf("exec %v in %s: %v (stderr %q)", cmd, name, err, errOut.String())
	}
	return out.String()
}

func readyReason(sbx *sandboxv1alpha1.Sandbox) string {
	if c := meta.FindStatusCondition(sbx.Status.Conditions, "Ready"); c != nil {
		return c.Reason
	}
	return ""
}

// TestPoolAllocateExecRecycle: the pool fills its buffer; a pooled sandbox gets a warm pod,
// whose execd took the sandbox's env and token; deleting the sandbox deletes the pod and the
// pool refills.
func TestPoolAllocateExecRecycle(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	if err := kube.Create(ctx, newPool(ns, "py", 2, 2, 10)); err != nil {
		t.Fatal(err)
	}
	waitPoolAvailable(t, ns, "py", 2)

	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, pooledSandbox("fast", "py"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sbx := waitSandboxPhase(t, ns, "fast", sandboxv1alpha1.PhaseRunning)
	podName := sbx.Status.Pods[0].Name
	if got := execOutput(t, ns, "fast", "sh", "-c", `echo "$GREETING $SANDBOX_NAME $SANDBOX_NAMESPACE"`); got != "hi fast "+ns+"\n" {
		t.Errorf("exec output = %q, want the sandbox's env and identity", got)
	}
	pod := &corev1.Pod{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: podName}, pod); err != nil {
		t.Fatal(err)
	}
	if pod.Labels[controlv1alpha1.LabelBatchSandbox] != "fast" || pod.Labels[controlv1alpha1.LabelPool] != "py" {
		t.Errorf("allocated pod labels = %v", pod.Labels)
	}
	waitFor(t, "the pool refilled around the allocated pod", 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, ns, "py")
		return err == nil && p.Status.Available == 2 && p.Status.Allocated == 1 && p.Status.Total == 3, nil
	})

	if err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Delete(ctx, "fast", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the allocated pod deleted", 30*time.Second, func(ctx context.Context) (bool, error) {
		err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: podName}, &corev1.Pod{})
		return apierrors.IsNotFound(err), nil
	})
	waitFor(t, "the pool without allocations", 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, ns, "py")
		return err == nil && p.Status.Allocated == 0 && p.Status.Available == 2, nil
	})
}

// TestPoolRefusesModeChanges: poolRef is immutable and xor template, in the aggregated API (422
// with field paths) and in the CRD (CEL).
func TestPoolRefusesModeChanges(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, pooledSandbox("p", "py"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patches := map[string]string{
		"another pool":  `{"spec":{"poolRef":{"name":"other"}}}`,
		"no pool":       `{"spec":{"poolRef":null}}`,
		"template too":  `{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"busybox"}]}}}}`,
		"valueFrom env": `{"spec":{"env":[{"name":"X","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}]}}`,
	}
	for name, patch := range patches {
		t.Run(name, func(t *testing.T) {
			_, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Patch(ctx, "p", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if !apierrors.IsInvalid(err) {
				t.Errorf("aggregated API: got %v, want 422 Invalid", err)
			}
			bs := &controlv1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}
			err = kube.Patch(ctx, bs, client.RawPatch(types.MergePatchType, []byte(patch)))
			if !apierrors.IsInvalid(err) {
				t.Errorf("CRD: got %v, want 422 Invalid", err)
			}
		})
	}
	sbx, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "p", metav1.GetOptions{})
	if err != nil || sbx.Spec.PoolRef == nil || sbx.Spec.PoolRef.Name != "py" || sbx.Spec.Template != nil {
		t.Errorf("after refused patches: %+v, %v", sbx.Spec, err)
	}
	both := pooledSandbox("both", "py")
	both.Spec.Template = sandbox("x").Spec.Template
	_, err = sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, both, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template") {
		t.Errorf("create with poolRef and template: got %v, want 422 on spec.template", err)
	}
}

// TestPoolConditions: a missing pool gives PoolNotFound until it exists; an exhausted pool
// gives PoolExhausted and grows up to poolMax.
func TestPoolConditions(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, pooledSandbox("early", "later"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "PoolNotFound", 30*time.Second, func(ctx context.Context) (bool, error) {
		sbx, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "early", metav1.GetOptions{})
		return err == nil && readyReason(sbx) == controlv1alpha1.ReasonPoolNotFound && sbx.Status.Phase == sandboxv1alpha1.PhasePending, nil
	})
	// bufferMin 0: the pool makes pods only for sandboxes that wait (and poolMin).
	if err := kube.Create(ctx, newPool(ns, "later", 0, 0, 2)); err != nil {
		t.Fatal(err)
	}
	waitSandboxPhase(t, ns, "early", sandboxv1alpha1.PhaseRunning)

	for _, name := range []string{"second", "third"} {
		if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, pooledSandbox(name, "later"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// poolMax 2: one of them gets the second pod, the other waits and says why.
	var waiting string
	waitFor(t, "one Running and one PoolExhausted", 30*time.Second, func(ctx context.Context) (bool, error) {
		list, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running, exhausted := 0, 0
		for _, s := range list.Items {
			switch {
			case s.Name == "early":
			case s.Status.Phase == sandboxv1alpha1.PhaseRunning:
				running++
			case readyReason(&s) == controlv1alpha1.ReasonPoolExhausted && s.Status.Phase == sandboxv1alpha1.PhasePending:
				exhausted++
				waiting = s.Name
			}
		}
		return running == 1 && exhausted == 1, nil
	})
	// Counts may reach the status up to a second late (see the pool controller).
	waitFor(t, "the pool at poolMax", 10*time.Second, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, ns, "later")
		return err == nil && p.Status.Total == 2 && p.Status.Allocated == 2, nil
	})
	// A pod comes free: the waiting sandbox gets the replacement.
	if err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Delete(ctx, "early", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSandboxPhase(t, ns, waiting, sandboxv1alpha1.PhaseRunning)
}

// TestPoolLostPodReplaced: an allocated pod that is deleted is replaced from the pool.
func TestPoolLostPodReplaced(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	if err := kube.Create(ctx, newPool(ns, "py", 3, 3, 10)); err != nil {
		t.Fatal(err)
	}
	waitPoolAvailable(t, ns, "py", 3)
	s := pooledSandbox("multi", "py")
	s.Spec.Replicas = ptr.To[int32](2)
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sbx := waitSandboxPhase(t, ns, "multi", sandboxv1alpha1.PhaseRunning)
	lost := sbx.Status.Pods[1].Name
	if err := kube.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lost}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replica 1 on another pod", 30*time.Second, func(ctx context.Context) (bool, error) {
		sbx, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "multi", metav1.GetOptions{})
		return err == nil && sbx.Status.Ready == 2 && len(sbx.Status.Pods) == 2 && sbx.Status.Pods[1].Name != lost, nil
	})
	list := &corev1.EventList{}
	if err := kube.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range list.Items {
		if e.Reason == controlv1alpha1.ReasonPodLost && strings.Contains(e.Message, lost) {
			found = true
		}
	}
	if !found {
		t.Errorf("no PodLost event naming %s", lost)
	}
}

// TestPoolRollingUpdate: a template change replaces idle pods only; the allocated one keeps
// its revision.
func TestPoolRollingUpdate(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	pool := newPool(ns, "py", 4, 4, 10)
	if err := kube.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	waitPoolAvailable(t, ns, "py", 4)
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, pooledSandbox("keep", "py"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sbx := waitSandboxPhase(t, ns, "keep", sandboxv1alpha1.PhaseRunning)
	waitPoolAvailable(t, ns, "py", 4)
	allocated := &corev1.Pod{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: sbx.Status.Pods[0].Name}, allocated); err != nil {
		t.Fatal(err)
	}
	oldRevision := allocated.Labels[controlv1alpha1.LabelPoolRevision]

	patch := `{"spec":{"template":{"metadata":{"labels":{"v":"2"}}}}}`
	if err := kube.Patch(ctx, &controlv1alpha1.Pool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "py"}},
		client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	var newRevision string
	waitFor(t, "the rollout", time.Minute, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, ns, "py")
		if err != nil || p.Status.Revision == oldRevision {
			return false, nil
		}
		newRevision = p.Status.Revision
		c := meta.FindStatusCondition(p.Status.Conditions, controlv1alpha1.PoolConditionProgressing)
		return p.Status.Updated == 4 && p.Status.Available == 4 && c != nil && c.Status == metav1.ConditionFalse, nil
	})
	got := &corev1.Pod{}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(allocated), got); err != nil || got.UID != allocated.UID ||
		got.Labels[controlv1alpha1.LabelPoolRevision] != oldRevision {
		t.Errorf("the allocated pod was touched: %v, labels %v", err, got.Labels)
	}
	pods := &corev1.PodList{}
	if err := kube.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{controlv1alpha1.LabelPool: "py"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if _, alloc := p.Labels[controlv1alpha1.LabelBatchSandbox]; !alloc && p.DeletionTimestamp == nil &&
			(p.Labels[controlv1alpha1.LabelPoolRevision] != newRevision || p.Labels["v"] != "2") {
			t.Errorf("idle pod %s of revision %s after the rollout", p.Name, p.Labels[controlv1alpha1.LabelPoolRevision])
		}
	}
}

// TestPoolRestartDuringAllocations: the controller restarts while 40 sandboxes are being
// allocated; every sandbox ends with its own pod, and no pod is given to two.
func TestPoolRestartDuringAllocations(t *testing.T) {
	ctx := context.Background()
	ns, _ := poolNamespace(t, true)
	if err := kube.Create(ctx, newPool(ns, "py", 45, 45, 100)); err != nil {
		t.Fatal(err)
	}
	waitPoolAvailable(t, ns, "py", 45)

	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, pooledSandbox(fmt.Sprintf("s%d", i), "py"), metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		})
		if i == n/2 {
			stopController()
			if err := startController(); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	owner := map[string]string{}
	waitFor(t, "every sandbox Running", 2*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, s := range list.Items {
			if s.Status.Phase == sandboxv1alpha1.PhaseRunning {
				running++
			}
		}
		return running == n, nil
	})
	list, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		if len(s.Status.Pods) != 1 {
			t.Errorf("sandbox %s has pods %+v", s.Name, s.Status.Pods)
			continue
		}
		name := s.Status.Pods[0].Name
		if prev, ok := owner[name]; ok {
			t.Errorf("pod %s given to %s and %s", name, prev, s.Name)
		}
		owner[name] = s.Name
		pod := &corev1.Pod{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil ||
			pod.Labels[controlv1alpha1.LabelBatchSandbox] != s.Name {
			t.Errorf("pod %s of sandbox %s: %v, labels %v", name, s.Name, err, pod.Labels)
		}
	}
	// Each sandbox's execd holds that sandbox's token: exec works on all of them.
	for _, s := range list.Items[:5] {
		if got := execOutput(t, ns, s.Name, "sh", "-c", "echo $SANDBOX_NAME"); got != s.Name+"\n" {
			t.Errorf("exec in %s printed %q", s.Name, got)
		}
	}
}

// TestPoolScaleNoStorm: a pool of 1000 pods on a simulated node fills without deleting a pod,
// shrinks by deleting exactly the surplus, and then stays still.
func TestPoolScaleNoStorm(t *testing.T) {
	ctx := context.Background()
	ns, node := poolNamespace(t, false)
	const n = 1000
	start := time.Now()
	if err := kube.Create(ctx, newPool(ns, "big", n, n, n)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "1000 pods available", 5*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, ns, "big")
		return err == nil && p.Status.Available == n, nil
	})
	t.Logf("1000 pods ready in %v; %d created, %d deleted", time.Since(start).Round(time.Millisecond), node.Created.Load(), node.Deleted.Load())
	if c, d := node.Created.Load(), node.Deleted.Load(); c != n || d != 0 {
		t.Errorf("filling: %d pods created and %d deleted, want %d and 0", c, d, n)
	}

	patch := `{"spec":{"capacitySpec":{"bufferMin":400,"bufferMax":600}}}`
	if err := kube.Patch(ctx, &controlv1alpha1.Pool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big"}},
		client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "600 pods", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, ns, "big")
		return err == nil && p.Status.Total == 600 && node.Deleted.Load() == 400, nil
	})
	time.Sleep(3 * time.Second) // anything a storm would do, it does now
	if c, d := node.Created.Load(), node.Deleted.Load(); c != n || d != 400 {
		t.Errorf("after scaling down: %d created and %d deleted, want %d and 400", c, d, n)
	}
}

// TestPoolStorm: 500 pooled sandboxes created at 50/s against a pool of 200, each deleted a
// second after its create. The pool replaces what it gave away and creates at most one pod
// more for each sandbox that was deleted while it waited (no create/delete storm, OpenSandbox
// #1423), no pod goes to two sandboxes, and nothing is left afterwards:
// no BatchSandbox, no pod but the 200 idle ones, no Secret.
func TestPoolStorm(t *testing.T) {
	ctx := context.Background()
	ns, node := poolNamespace(t, true)
	const idle, n, rate = 200, 500, 50
	if err := kube.Create(ctx, newPool(ns, "storm", idle, idle, idle+n)); err != nil {
		t.Fatal(err)
	}
	waitPoolAvailable(t, ns, "storm", idle)
	created0, deleted0 := node.Created.Load(), node.Deleted.Load()

	// Every sandbox each pod was ever labelled with, from a watch of the pods.
	var mu sync.Mutex
	owners := map[string]map[string]bool{}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wc, err := client.NewWithWatch(cp.Config(framework.AdminToken), client.Options{Scheme: framework.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(wctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && pod.Labels[controlv1alpha1.LabelBatchSandbox] != "" {
				mu.Lock()
				if owners[pod.Name] == nil {
					owners[pod.Name] = map[string]bool{}
				}
				owners[pod.Name][pod.Labels[controlv1alpha1.LabelBatchSandbox]] = true
				mu.Unlock()
			}
		}
	}()

	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)
	var wg sync.WaitGroup
	var failures []string
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for i := range n {
		<-tick.C
		wg.Go(func() {
			name := fmt.Sprintf("storm-%d", i)
			_, err := api.Create(ctx, pooledSandbox(name, "storm"), metav1.CreateOptions{})
			if err == nil {
				time.Sleep(time.Second)
				err = api.Delete(ctx, name, metav1.DeleteOptions{})
			}
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: %v", name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d creates or deletes failed, the first: %s", len(failures), failures[0])
	}
	waitFor(t, "no BatchSandbox left", 2*time.Minute, func(ctx context.Context) (bool, error) {
		var list controlv1alpha1.BatchSandboxList
		return kube.List(ctx, &list, client.InNamespace(ns)) == nil && len(list.Items) == 0, nil
	})
	waitFor(t, "the pool whole again", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := getPool(ctx, ns, "storm")
		return err == nil && p.Status.Available == idle && p.Status.Total == idle, nil
	})
	time.Sleep(3 * time.Second) // anything a storm would still do, it does now

	stopWatch()
	mu.Lock()
	allocated := int64(len(owners))
	for pod, o := range owners {
		if len(o) > 1 {
			t.Errorf("pod %s was given to %d sandboxes: %v", pod, len(o), o)
		}
	}
	mu.Unlock()
	created, deleted := node.Created.Load()-created0, node.Deleted.Load()-deleted0
	// A sandbox deleted before it got a pod may have made the pool create one for it (it
	// waited: demand), which the pool then deletes as surplus: at most one pod each. A storm
	// creates and deletes pods beyond that.
	unserved := int64(n) - allocated
	t.Logf("%d pods allocated (%d sandboxes deleted before they got one), %d created and %d deleted by the pool", allocated, unserved, created, deleted)
	if allocated == 0 || created < allocated || created > allocated+unserved || deleted != created {
		t.Errorf("the pool created %d and deleted %d pods for %d allocated and %d sandboxes never served: want allocated ≤ created ≤ allocated+unserved, and deleted = created", created, deleted, allocated, unserved)
	}
	var pods corev1.PodList
	if err := kube.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != idle {
		t.Errorf("%d pods left, want the %d idle ones", len(pods.Items), idle)
	}
	for _, p := range pods.Items {
		if p.Labels[controlv1alpha1.LabelBatchSandbox] != "" || p.DeletionTimestamp != nil {
			t.Errorf("pod %s left over: labels %v, deleting %v", p.Name, p.Labels, p.DeletionTimestamp != nil)
		}
	}
	var secrets corev1.SecretList
	if err := kube.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d Secrets left in the namespace", len(secrets.Items))
	}
}
