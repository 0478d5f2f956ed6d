package sandboxconn

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kube-sandbox/kube-sandbox/apiserver/internal/apitesting"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdclient"
)

const (
	testNS   = "ns"
	testName = "demo"
)

// world is what the kube-apiserver holds for one sandbox with two replicas, replica 0 ready.
type world struct {
	bs  *controlv1alpha1.BatchSandbox
	pod *corev1.Pod
}

func readyWorld() world {
	return world{
		bs: &controlv1alpha1.BatchSandbox{
			ObjectMeta: metav1.ObjectMeta{Name: testName, Namespace: testNS, UID: "bs-uid"},
			Spec:       controlv1alpha1.BatchSandboxSpec{Replicas: ptr.To[int32](2)},
			Status: controlv1alpha1.BatchSandboxStatus{
				Phase: controlv1alpha1.PhasePending,
				Pods: []controlv1alpha1.SandboxPodStatus{
					{Replica: 0, Name: "demo-abc", IP: "10.0.0.7", Ready: true},
				},
			},
		},
		pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:      "demo-abc",
				Namespace: testNS,
				UID:       "pod-uid",
				Labels:    map[string]string{controlv1alpha1.LabelBatchSandbox: testName, controlv1alpha1.LabelReplica: "0"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: controlv1alpha1.SchemeGroupVersion.String(), Kind: "BatchSandbox",
					Name: testName, UID: "bs-uid", Controller: ptr.To(true)}},
			},
			Status: corev1.PodStatus{
				Phase: corev1.PodRunning,
				PodIP: "10.0.0.7",
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
					{Type: corev1.PodReady, Status: corev1.ConditionTrue},
				},
			},
		},
	}
}

func newResolver(t *testing.T, w world) *KubeResolver {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := controlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s)
	if w.bs != nil {
		b = b.WithObjects(w.bs)
	}
	if w.pod != nil {
		b = b.WithObjects(w.pod)
	}
	return &KubeResolver{Client: b.Build()}
}

func TestResolve(t *testing.T) {
	notReady := &apitesting.APIErr{Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable}
	tests := []struct {
		name    string
		modify  func(*world)
		replica int32
		want    *Endpoint
		wantErr *apitesting.APIErr
		// wantMessage are substrings of the error message.
		wantMessage []string
	}{
		{
			name: "ready",
			want: &Endpoint{Target: execdclient.Target{PodIP: "10.0.0.7", PodUID: "pod-uid"}, Pod: "demo-abc"},
		},
		{
			name: "IPv6 pod",
			modify: func(w *world) {
				w.pod.Status.PodIP = "fd00::7"
			},
			want: &Endpoint{Target: execdclient.Target{PodIP: "fd00::7", PodUID: "pod-uid"}, Pod: "demo-abc"},
		},
		{
			name: "second replica",
			modify: func(w *world) {
				w.bs.Status.Pods = []controlv1alpha1.SandboxPodStatus{{Replica: 0, Name: "other"}, {Replica: 1, Name: "demo-abc", Ready: true}}
			},
			replica: 1,
			want:    &Endpoint{Target: execdclient.Target{PodIP: "10.0.0.7", PodUID: "pod-uid"}, Pod: "demo-abc"},
		},
		{
			name:    "unset replicas mean one",
			modify:  func(w *world) { w.bs.Spec.Replicas = nil },
			replica: 0,
			want:    &Endpoint{Target: execdclient.Target{PodIP: "10.0.0.7", PodUID: "pod-uid"}, Pod: "demo-abc"},
		},
		{
			name:        "not ready in the status (not certified or allocated yet)",
			modify:      func(w *world) { w.bs.Status.Pods[0].Ready = false },
			wantErr:     notReady,
			wantMessage: []string{"is not ready", "pod demo-abc of replica 0 is being set up"},
		},
		{
			name:        "pod controlled by another sandbox of the same name",
			modify:      func(w *world) { w.pod.OwnerReferences[0].UID = "older-bs-uid" },
			wantErr:     notReady,
			wantMessage: []string{"is not ready", "no longer belongs to the sandbox"},
		},
		{
			name:        "missing BatchSandbox",
			modify:      func(w *world) { w.bs = nil },
			wantErr:     &apitesting.APIErr{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: testName},
			wantMessage: []string{`sandboxes.sandbox.kube-sandbox.io "demo" not found`},
		},
		{
			name: "being deleted",
			modify: func(w *world) {
				w.bs.Finalizers = []string{"example.com/keep"}
				w.bs.DeletionTimestamp = ptr.To(metav1.NewTime(time.Unix(1700000000, 0)))
			},
			wantErr:     &apitesting.APIErr{Code: http.StatusConflict, Reason: metav1.StatusReasonConflict, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: testName},
			wantMessage: []string{"being deleted"},
		},
		{
			name:        "replica equal to replicas",
			replica:     2,
			wantErr:     &apitesting.APIErr{Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest},
			wantMessage: []string{`sandbox "demo" has 2 replica(s); replica 2 does not exist`},
		},
		{
			name:        "replica of a sandbox scaled to zero",
			modify:      func(w *world) { w.bs.Spec.Replicas = ptr.To[int32](0) },
			replica:     0,
			wantErr:     &apitesting.APIErr{Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest},
			wantMessage: []string{"replica 0 does not exist"},
		},
		{
			name:        "negative replica",
			replica:     -1,
			wantErr:     &apitesting.APIErr{Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest},
			wantMessage: []string{"replica -1 does not exist"},
		},
		{
			name:        "no pod in the status",
			modify:      func(w *world) { w.bs.Status.Pods = nil },
			wantErr:     notReady,
			wantMessage: []string{`sandbox "demo" is not ready`, "replica 0 has no pod yet (phase Pending)"},
		},
		{
			name: "a paused sandbox",
			modify: func(w *world) {
				w.bs.Spec.Paused = true
				w.bs.Status = controlv1alpha1.BatchSandboxStatus{Phase: controlv1alpha1.PhasePaused}
			},
			wantErr:     &apitesting.APIErr{Code: http.StatusConflict, Reason: metav1.StatusReasonConflict, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
			wantMessage: []string{"the sandbox is paused (phase Paused): resume it"},
		},
		{
			name: "no phase in the status reads Pending",
			modify: func(w *world) {
				w.bs.Status = controlv1alpha1.BatchSandboxStatus{}
			},
			wantErr:     notReady,
			wantMessage: []string{"is not ready", "(phase Pending)"},
		},
		{
			name:        "pod only for another replica",
			replica:     1,
			wantErr:     notReady,
			wantMessage: []string{"is not ready", "replica 1 has no pod yet"},
		},
		{
			name:        "pod missing",
			modify:      func(w *world) { w.pod = nil },
			wantErr:     notReady,
			wantMessage: []string{"is not ready", "pod demo-abc of replica 0 is gone"},
		},
		{
			name: "pod not ready",
			modify: func(w *world) {
				w.pod.Status.Conditions[1].Status = corev1.ConditionFalse
			},
			wantErr:     notReady,
			wantMessage: []string{"is not ready", "pod demo-abc of replica 0 is Running and not ready"},
		},
		{
			name: "pod without a Ready condition",
			modify: func(w *world) {
				w.pod.Status.Conditions = w.pod.Status.Conditions[:1]
			},
			wantErr:     notReady,
			wantMessage: []string{"is not ready"},
		},
		{
			name:        "pod without an IP",
			modify:      func(w *world) { w.pod.Status.PodIP = "" },
			wantErr:     notReady,
			wantMessage: []string{"is not ready", "pod demo-abc"},
		},
		{
			name: "pod labelled for another sandbox",
			modify: func(w *world) {
				w.pod.Labels[controlv1alpha1.LabelBatchSandbox] = "other"
			},
			wantErr:     notReady,
			wantMessage: []string{"is not ready", "pod demo-abc no longer belongs to the sandbox"},
		},
		{
			name: "pod without the sandbox label",
			modify: func(w *world) {
				delete(w.pod.Labels, controlv1alpha1.LabelBatchSandbox)
			},
			wantErr:     notReady,
			wantMessage: []string{"is not ready", "no longer belongs to the sandbox"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := readyWorld()
			if tt.modify != nil {
				tt.modify(&w)
			}
			got, err := newResolver(t, w).Resolve(context.Background(), testNS, testName, tt.replica)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Resolve() error: %v", err)
				}
				if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Endpoint{}, "Sandbox")); diff != "" {
					t.Errorf("Resolve() (-want +got):\n%s", diff)
				}
				// The BatchSandbox as read, for auto-renew.
				if got.Sandbox == nil || got.Sandbox.Namespace != testNS || got.Sandbox.Name != testName {
					t.Errorf("Resolve().Sandbox = %+v, want the BatchSandbox %s/%s", got.Sandbox, testNS, testName)
				}
				return
			}
			if err == nil {
				t.Fatalf("Resolve() = %+v, want an error", got)
			}
			if diff := cmp.Diff(*tt.wantErr, apitesting.APIErrOf(t, err)); diff != "" {
				t.Errorf("Resolve() error %v (-want +got):\n%s", err, diff)
			}
			for _, s := range tt.wantMessage {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q does not contain %q", err.Error(), s)
				}
			}
		})
	}
}

func TestResolveOtherNamespace(t *testing.T) {
	_, err := newResolver(t, readyWorld()).Resolve(context.Background(), "other", testName, 0)
	if !apierrors.IsNotFound(err) {
		t.Fatalf("Resolve() in another namespace: %v, want NotFound", err)
	}
}
