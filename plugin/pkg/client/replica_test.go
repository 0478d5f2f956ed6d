package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
)

// replicaSandbox is sandbox sb of replicas pods in phase, the readyReplicas listed ready.
func replicaSandbox(replicas int32, phase sandboxv1alpha1.SandboxPhase, readyReplicas ...int32) *sandboxv1alpha1.Sandbox {
	return cmdtesting.Sandbox("sb", replicas, phase, readyReplicas...)
}

func TestReplicaReady(t *testing.T) {
	// As the server shows a sandbox being deleted, its pods still ready.
	deleting := replicaSandbox(1, sandboxv1alpha1.PhaseTerminating, 0)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	noPods := replicaSandbox(1, sandboxv1alpha1.PhaseRunning)
	noPods.Status.Pods = nil
	defaulted := replicaSandbox(1, sandboxv1alpha1.PhaseRunning, 0)
	defaulted.Spec.Replicas = nil
	paused := replicaSandbox(1, sandboxv1alpha1.PhasePaused)
	paused.Spec.Paused = true
	failed := replicaSandbox(1, sandboxv1alpha1.PhaseFailed)
	failed.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "ImagePullFailed", Message: `image "nope" not found`}}

	tests := []struct {
		name    string
		sb      *sandboxv1alpha1.Sandbox
		replica int32
		want    bool
		wantErr string
	}{
		{name: "ready replica", sb: replicaSandbox(2, sandboxv1alpha1.PhasePending, 1), replica: 1, want: true},
		{name: "other replica not ready", sb: replicaSandbox(2, sandboxv1alpha1.PhasePending, 1), replica: 0, want: false},
		{name: "running, a pod not ready for a moment", sb: replicaSandbox(2, sandboxv1alpha1.PhaseRunning, 0), replica: 1, want: false},
		{name: "running without pod list", sb: noPods, want: true},
		{name: "replicas default to one", sb: defaulted, replica: 1, wantErr: "has 1 replica(s)"},
		{name: "being deleted", sb: deleting, wantErr: "cannot read the log of sandbox \"sb\": it is being deleted"},
		{name: "paused", sb: paused, wantErr: "'kubectl sandbox resume sb' brings it back"},
		{name: "failed", sb: failed, wantErr: `phase Failed, ImagePullFailed: image "nope" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := client.ReplicaReady(tt.sb, tt.replica, "read the log of")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ReplicaReady = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestWaitForReplica(t *testing.T) {
	notReady := func(sb *sandboxv1alpha1.Sandbox) {
		sb.Status.Pods[0].Ready = false
		sb.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PodsNotReady", Message: "0/1 pods ready"}}
	}
	ready := func(sb *sandboxv1alpha1.Sandbox) { sb.Status.Pods[0].Ready, sb.Status.Conditions = true, nil }
	tests := []struct {
		name string
		// start changes the ready sandbox before the wait; none: no sandbox.
		start func(*sandboxv1alpha1.Sandbox)
		none  bool
		// then changes it once the wait watches.
		then    func(*sandboxv1alpha1.Sandbox)
		wantErr string
	}{
		{name: "ready at once"},
		{name: "ready after a change", start: notReady, then: ready},
		{name: "paused while waited for", start: notReady, then: func(sb *sandboxv1alpha1.Sandbox) { sb.Spec.Paused = true },
			wantErr: "cannot exec into sandbox \"sb\": it is paused"},
		{name: "times out with what it last showed", start: notReady,
			wantErr: `sandbox "sb" replica 0 is not ready after 300ms: phase Running, PodsNotReady: 0/1 pods ready`},
		{name: "not there", none: true, wantErr: `sandboxes.sandbox.kube-sandbox.io "sb" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sandboxserver.New(t, cmdtesting.Namespace)
			if !tt.none {
				sb := replicaSandbox(1, sandboxv1alpha1.PhaseRunning, 0)
				sb.Namespace = ""
				if tt.start != nil {
					tt.start(sb)
				}
				srv.Add(sb)
			}
			if tt.then != nil {
				srv.WatchStarted = func() { srv.Modify("sb", tt.then) }
			}
			cs, err := clientset.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: sandboxserver.UserToken})
			if err != nil {
				t.Fatal(err)
			}
			err = client.WaitForReplica(context.Background(), cs, cmdtesting.Namespace, "sb", 0, 300*time.Millisecond, "exec into")
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}
