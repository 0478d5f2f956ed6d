package client

import (
	"context"
	"errors"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	clientset "github.com/kube-sandbox/kube-sandbox/apiserver/pkg/generated/clientset/versioned"
	"github.com/kube-sandbox/kube-sandbox/plugin/pkg/cmd/testing/sandboxserver"
)

func TestWaitForSandbox(t *testing.T) {
	running := func(sb *sandboxv1alpha1.Sandbox) (bool, error) {
		return sb != nil && sb.Status.Phase == sandboxv1alpha1.PhaseRunning, nil
	}
	gone := func(sb *sandboxv1alpha1.Sandbox) (bool, error) { return sb == nil, nil }
	errFailed := errors.New("failed")
	notFailed := func(sb *sandboxv1alpha1.Sandbox) (bool, error) {
		if sb != nil && sb.Status.Phase == sandboxv1alpha1.PhaseFailed {
			return false, errFailed
		}
		return false, nil
	}
	toPhase := func(p sandboxv1alpha1.SandboxPhase) func(*sandboxserver.Server) {
		return func(srv *sandboxserver.Server) {
			srv.Modify("sb", func(sb *sandboxv1alpha1.Sandbox) { sb.Status.Phase = p })
		}
	}
	tests := []struct {
		name string
		// phase is the sandbox's at the start; none without one.
		phase sandboxv1alpha1.SandboxPhase
		none  bool
		cond  SandboxCondition
		// then changes the sandbox once the wait watches; endFirst ends that first watch
		// instead and changes the sandbox on the next.
		then     func(*sandboxserver.Server)
		endFirst bool
		timeout  time.Duration
		wantErr  error
		// wantLast is the phase of the sandbox last seen; empty for none. anyLast: a deletion
		// right after the watch started may come before the wait has seen the sandbox.
		wantLast    sandboxv1alpha1.SandboxPhase
		anyLast     bool
		wantWatches int
	}{
		{name: "met as listed", phase: sandboxv1alpha1.PhaseRunning, cond: running, wantLast: sandboxv1alpha1.PhaseRunning, wantWatches: 1},
		{name: "met by a change", phase: sandboxv1alpha1.PhasePending, cond: running, then: toPhase(sandboxv1alpha1.PhaseRunning),
			wantLast: sandboxv1alpha1.PhaseRunning, wantWatches: 1},
		{name: "gone by a deletion", phase: sandboxv1alpha1.PhasePending, cond: gone, then: func(srv *sandboxserver.Server) { srv.Delete("sb") },
			anyLast: true, wantWatches: 1},
		{name: "never there", none: true, cond: gone, wantWatches: 1},
		{name: "the condition's error", phase: sandboxv1alpha1.PhasePending, cond: notFailed, then: toPhase(sandboxv1alpha1.PhaseFailed),
			wantErr: errFailed, wantLast: sandboxv1alpha1.PhaseFailed, wantWatches: 1},
		{name: "a watch the server ends is watched again", phase: sandboxv1alpha1.PhasePending, cond: running, then: toPhase(sandboxv1alpha1.PhaseRunning),
			endFirst: true, wantLast: sandboxv1alpha1.PhaseRunning, wantWatches: 2},
		{name: "times out with the sandbox last seen", phase: sandboxv1alpha1.PhasePending, cond: running, then: toPhase(sandboxv1alpha1.PhaseExpired),
			timeout: 300 * time.Millisecond, wantErr: context.DeadlineExceeded, wantLast: sandboxv1alpha1.PhaseExpired, wantWatches: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sandboxserver.New(t, "ns")
			srv.Add(&sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "other"}})
			if !tt.none {
				srv.Add(&sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "sb"}, Status: sandboxv1alpha1.SandboxStatus{Phase: tt.phase}})
			}
			var started atomic.Int32
			srv.WatchStarted = func() {
				switch n := started.Add(1); {
				case n == 1 && tt.endFirst:
					srv.EndWatches()
				case tt.then != nil && (n == 1 || (n == 2 && tt.endFirst)):
					// Another sandbox changes first: the wait is not about it.
					srv.Modify("other", func(sb *sandboxv1alpha1.Sandbox) { sb.Status.Phase = sandboxv1alpha1.PhaseFailed })
					tt.then(srv)
				}
			}
			client, err := clientset.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: sandboxserver.UserToken})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if tt.timeout > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tt.timeout)
			}
			defer cancel()

			last, err := WaitForSandbox(ctx, client, "ns", "sb", tt.cond)
			if !errors.Is(err, tt.wantErr) || (err != nil && tt.wantErr == nil) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			switch {
			case tt.anyLast:
			case tt.wantLast == "" && last != nil:
				t.Errorf("last seen %s (%s), want none", last.Name, last.Status.Phase)
			case tt.wantLast != "" && (last == nil || last.Name != "sb" || last.Status.Phase != tt.wantLast):
				t.Errorf("last seen %+v, want sb in phase %s", last, tt.wantLast)
			}
			watches := 0
			for _, r := range srv.Requests() {
				q, _ := url.ParseQuery(r.RawQuery)
				if q.Get("fieldSelector") != "metadata.name=sb" {
					t.Errorf("%s %s?%s is not for the one sandbox", r.Method, r.Path, r.RawQuery)
				}
				if q.Get("watch") == "true" {
					watches++
				}
			}
			if watches < tt.wantWatches {
				t.Errorf("%d watches, want at least %d", watches, tt.wantWatches)
			}
		})
	}
}
