package egress

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

// TestAddPodHandler: another part of the agent hears of the pods the enforcer watches, the
// ones listed before it asked first, with their labels, and of their deletion.
func TestAddPodHandler(t *testing.T) {
	labels := map[string]string{egressapi.PodLabel: "true", "control.kube-sandbox.io/batchsandbox": "sbx"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p", Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "node1"},
	}
	kube := fake.NewClientset(pod)
	n := newTestNode(t, t.TempDir())
	if err := n.AddPodHandler(cache.ResourceEventHandlerFuncs{}); err == nil {
		t.Error("AddPodHandler before WatchPods: no error")
	}
	if err := n.WatchPods(t.Context(), kube, "node1"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]map[string]string{}
	if err := n.AddPodHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			mu.Lock()
			defer mu.Unlock()
			p := obj.(*corev1.Pod)
			seen[string(p.UID)] = p.Labels
		},
		DeleteFunc: func(obj any) {
			mu.Lock()
			defer mu.Unlock()
			if p, ok := obj.(*corev1.Pod); ok {
				delete(seen, string(p.UID))
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	check := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return cond(), nil
		}); err != nil {
			t.Fatalf("%s: %v (seen %v)", what, err, seen)
		}
	}
	check("the pod listed before, with its labels", func() bool { return seen["uid-p"]["control.kube-sandbox.io/batchsandbox"] == "sbx" })
	if err := kube.CoreV1().Pods("ns").Delete(t.Context(), "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	check("the pod deleted", func() bool { _, ok := seen["uid-p"]; return !ok })
}
