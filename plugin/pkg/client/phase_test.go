package client

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
)

func TestPhase(t *testing.T) {
	deleted := metav1.NewTime(time.Now())
	tests := []struct {
		name string
		sb   sandboxv1alpha1.Sandbox
		want sandboxv1alpha1.SandboxPhase
	}{
		{name: "not reported yet is pending", want: sandboxv1alpha1.PhasePending},
		{name: "as reported", sb: sandboxv1alpha1.Sandbox{Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning}},
			want: sandboxv1alpha1.PhaseRunning},
		{name: "terminating as the server says", sb: sandboxv1alpha1.Sandbox{Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseTerminating}},
			want: sandboxv1alpha1.PhaseTerminating},
		{
			// The server would say Terminating; the plugin does not second-guess it.
			name: "nothing derived from the deletion timestamp",
			sb: sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleted},
				Status: sandboxv1alpha1.SandboxStatus{Phase: sandboxv1alpha1.PhaseRunning}},
			want: sandboxv1alpha1.PhaseRunning,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Phase(&tt.sb); got != tt.want {
				t.Errorf("Phase() = %s, want %s", got, tt.want)
			}
		})
	}
}
