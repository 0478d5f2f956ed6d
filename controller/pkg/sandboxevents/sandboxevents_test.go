package sandboxevents

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/reference"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

func testBatchSandbox() *controlv1alpha1.BatchSandbox {
	bs := &controlv1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{
		Name: "demo", Namespace: "team-a", UID: "demo-uid", ResourceVersion: "42", Generation: 3,
		Labels: map[string]string{"app": "x"},
	}}
	bs.SetGroupVersionKind(controlv1alpha1.SchemeGroupVersion.WithKind("BatchSandbox"))
	return bs
}

var wantRef = corev1.ObjectReference{
	APIVersion: "sandbox.kube-sandbox.io/v1alpha1", Kind: "Sandbox",
	Namespace: "team-a", Name: "demo", UID: "demo-uid", ResourceVersion: "42",
}

func TestSandboxRef(t *testing.T) {
	withBatchSandboxes := runtime.NewScheme()
	if err := controlv1alpha1.AddToScheme(withBatchSandboxes); err != nil {
		t.Fatal(err)
	}
	bs := testBatchSandbox()
	before := bs.DeepCopy()
	// Whatever scheme the recorder has (the manager's knows BatchSandboxes, none knows
	// Sandboxes), the reference is the TypeMeta's.
	for name, scheme := range map[string]*runtime.Scheme{"no scheme": nil, "scheme with BatchSandbox": withBatchSandboxes} {
		ref, err := reference.GetReference(scheme, SandboxRef(bs))
		if err != nil {
			t.Fatalf("%s: GetReference: %v", name, err)
		}
		if diff := cmp.Diff(wantRef, *ref); diff != "" {
			t.Errorf("%s: reference (-want +got):\n%s", name, diff)
		}
	}
	if diff := cmp.Diff(before, bs); diff != "" {
		t.Errorf("SandboxRef changed the BatchSandbox (-before +after):\n%s", diff)
	}
}

// TestSandboxRefEvent: the Event the events API gets regards the Sandbox and lives in the
// sandbox's namespace, where `kubectl describe sandbox` and `kubectl events --for` look.
func TestSandboxRefEvent(t *testing.T) {
	b := events.NewBroadcaster(nil)
	defer b.Shutdown()
	got := make(chan *eventsv1.Event, 1)
	stop, err := b.StartEventWatcher(func(obj runtime.Object) {
		if e, ok := obj.(*eventsv1.Event); ok {
			got <- e.DeepCopy()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	b.NewRecorder(runtime.NewScheme(), "sandbox-controller").
		Eventf(SandboxRef(testBatchSandbox()), nil, corev1.EventTypeNormal, "PodsReady", "Ready", "%d/%d replicas ready", 1, 1)
	select {
	case e := <-got:
		if diff := cmp.Diff(wantRef, e.Regarding); diff != "" {
			t.Errorf("regarding (-want +got):\n%s", diff)
		}
		if e.Namespace != "team-a" || e.Reason != "PodsReady" || e.Note != "1/1 replicas ready" {
			t.Errorf("event %s/%s reason %q note %q, want in team-a, PodsReady, 1/1 replicas ready", e.Namespace, e.Name, e.Reason, e.Note)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
}
