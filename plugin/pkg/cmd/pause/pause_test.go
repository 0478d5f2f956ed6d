package pause

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	sandboxclient "github.com/kube-sandbox/kube-sandbox/plugin/pkg/client"
	cmdtesting "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing"
	cmdutil "github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/util"
)

func sandbox(paused bool, phase sandboxv1alpha1.SandboxPhase) *sandboxv1alpha1.Sandbox {
	return &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: cmdtesting.Namespace, ResourceVersion: "1"},
		Spec: sandboxv1alpha1.SandboxSpec{Paused: paused}, Status: sandboxv1alpha1.SandboxStatus{Phase: phase}}
}

// TestPauseAndResume: each sets spec.paused with an update (the verb RBAC authorizes them by),
// and changes nothing when it is set already.
func TestPauseAndResume(t *testing.T) {
	tests := []struct {
		name       string
		stored     *sandboxv1alpha1.Sandbox
		cmd        func(f *cmdtesting.TestFactory, s genericiooptions.IOStreams) (*Options, error)
		wantPaused bool
		wantVerbs  []string
		wantOut    string
	}{
		{name: "pause", stored: sandbox(false, sandboxv1alpha1.PhaseRunning), wantPaused: true,
			cmd:       run(true),
			wantVerbs: []string{"get", "update"}, wantOut: "sandbox/demo paused\n"},
		{name: "pause a paused one", stored: sandbox(true, sandboxv1alpha1.PhasePaused), wantPaused: true,
			cmd:       run(true),
			wantVerbs: []string{"get"}, wantOut: "sandbox/demo paused already\n"},
		{name: "resume", stored: sandbox(true, sandboxv1alpha1.PhasePaused), wantPaused: false,
			cmd:       run(false),
			wantVerbs: []string{"get", "update"}, wantOut: "sandbox/demo resumed\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := cmdtesting.NewTestFactory(tc.stored)
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			if _, err := tc.cmd(f, streams); err != nil {
				t.Fatalf("Run: %v", err)
			}
			actions := f.Clientset.Actions()
			got, err := f.Clientset.SandboxV1alpha1().Sandboxes(cmdtesting.Namespace).Get(context.Background(), "demo", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Spec.Paused != tc.wantPaused {
				t.Errorf("spec.paused = %v, want %v", got.Spec.Paused, tc.wantPaused)
			}
			var verbs []string
			for _, a := range actions {
				verbs = append(verbs, a.GetVerb())
			}
			if strings.Join(verbs, ",") != strings.Join(tc.wantVerbs, ",") {
				t.Errorf("requests %v, want %v", verbs, tc.wantVerbs)
			}
			if out.String() != tc.wantOut {
				t.Errorf("output %q, want %q", out.String(), tc.wantOut)
			}
		})
	}
}

func run(paused bool) func(f *cmdtesting.TestFactory, s genericiooptions.IOStreams) (*Options, error) {
	return func(f *cmdtesting.TestFactory, s genericiooptions.IOStreams) (*Options, error) {
		sandboxes, err := cmdutil.Client(f)
		if err != nil {
			return nil, err
		}
		o := &Options{Name: "demo", Paused: paused, Namespace: cmdtesting.Namespace, Sandboxes: sandboxes, IOStreams: s}
		return o, o.Run(context.Background())
	}
}

// TestReached: the wait ends at the phase, and fails at once where the phase cannot come.
func TestReached(t *testing.T) {
	notSupported := sandbox(true, sandboxv1alpha1.PhaseRunning)
	notSupported.Status.Conditions = []metav1.Condition{{Type: sandboxv1alpha1.ConditionPaused, Status: metav1.ConditionFalse,
		Reason: sandboxv1alpha1.ReasonPauseNotSupported, Message: "tasks"}}
	tests := []struct {
		name     string
		sb       *sandboxv1alpha1.Sandbox
		want     sandboxv1alpha1.SandboxPhase
		wantDone bool
		wantErr  string
	}{
		{name: "paused", sb: sandbox(true, sandboxv1alpha1.PhasePaused), want: sandboxv1alpha1.PhasePaused, wantDone: true},
		{name: "still pausing", sb: sandbox(true, sandboxv1alpha1.PhasePausing), want: sandboxv1alpha1.PhasePaused},
		{name: "resuming", sb: sandbox(false, sandboxv1alpha1.PhaseResuming), want: sandboxv1alpha1.PhaseRunning},
		{name: "failed", sb: sandbox(false, sandboxv1alpha1.PhaseFailed), want: sandboxv1alpha1.PhaseRunning, wantErr: "is Failed"},
		{name: "deleted", want: sandboxv1alpha1.PhaseRunning, wantErr: "deleted"},
		{name: "cannot pause", sb: notSupported, want: sandboxv1alpha1.PhasePaused, wantErr: "cannot pause"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done, err := sandboxclient.Reached(tc.sb, tc.want)
			if done != tc.wantDone || (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Reached() = %v, %v; want %v, error containing %q", done, err, tc.wantDone, tc.wantErr)
			}
		})
	}
}

// TestPauseWait: --wait follows the watch until the controller says Paused.
func TestPauseWait(t *testing.T) {
	f := cmdtesting.NewTestFactory(sandbox(false, sandboxv1alpha1.PhaseRunning))
	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	go func() {
		// The controller: Pausing, then Paused, once the update is in.
		for range 100 {
			time.Sleep(20 * time.Millisecond)
			for _, a := range f.Clientset.Actions() {
				if a.GetVerb() == "update" {
					for _, phase := range []sandboxv1alpha1.SandboxPhase{sandboxv1alpha1.PhasePausing, sandboxv1alpha1.PhasePaused} {
						sb := sandbox(true, phase)
						_ = f.Clientset.Tracker().Update(cmdtesting.SandboxesResource, sb, sb.Namespace)
					}
					return
				}
			}
		}
	}()
	sandboxes, err := cmdutil.Client(f)
	if err != nil {
		t.Fatal(err)
	}
	o := &Options{Name: "demo", Paused: true, Wait: true, Timeout: 10 * time.Second, Namespace: cmdtesting.Namespace, Sandboxes: sandboxes, IOStreams: streams}
	if err := o.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(out.String(), "sandbox/demo Paused in") {
		t.Errorf("output %q, want it to say Paused", out.String())
	}
}
