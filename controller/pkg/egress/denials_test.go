package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/reference"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
	"github.com/kube-sandbox/kube-sandbox/sidecars/node/nodeapi"
)

func TestDenialEvents(t *testing.T) {
	many := map[string]int{}
	for i := range 12 {
		many["n"+strconv.Itoa(i)+".example"] = i + 1
	}
	tests := []struct {
		name string
		in   egressapi.Denials
		want []string // action: note
	}{
		{"nothing", egressapi.Denials{}, nil},
		{"most denied first", egressapi.Denials{Names: map[string]int{"a.example": 1, "b.example": 3}}, []string{
			"Resolve b.example: the network policy denied the DNS name b.example (3 queries)",
			"Resolve a.example: the network policy denied the DNS name a.example (1 queries)",
		}},
		{"beyond the listed", egressapi.Denials{Names: many, Others: 4}, []string{
			"Resolve n11.example", "Resolve n10.example", "Resolve n9.example", "Resolve n8.example", "Resolve n7.example",
			"Resolve n6.example", "Resolve n5.example", "Resolve n4.example", "Resolve n3.example", "Resolve n2.example",
			"Resolve: the network policy denied 7 queries for other names",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range DenialEvents(tc.in) {
				if strings.Contains(tc.name, "beyond") && e.Action != "Resolve" {
					got = append(got, e.Action)
					continue
				}
				got = append(got, e.Action+": "+e.Note)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDenialWatcher(t *testing.T) {
	var polls atomic.Int32
	a := testAuthority(t)
	host, port := egressServer(t, a, nodeapi.ServerName, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != egressapi.PodDenialsPath("u") {
			http.Error(w, "unexpected path "+r.URL.Path, http.StatusNotFound)
			return
		}
		if polls.Add(1) == 1 {
			_ = json.NewEncoder(w).Encode(egressapi.Denials{Names: map[string]int{"evil.example": 2}})
			return
		}
		<-r.Context().Done() // nothing more to say: the poll waits
	}))
	rec := &refRecorder{events: make(chan recorded, 10)}
	w := NewDenialWatcher(a, rec)
	w.Port = port
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Start(ctx); close(done) }()
	for started := false; !started; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		started = w.ctx != nil
		w.mu.Unlock()
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}, Status: corev1.PodStatus{PodIP: "10.244.0.9", HostIP: host}}
	bs := &controlv1alpha1.BatchSandbox{ObjectMeta: metav1.ObjectMeta{Name: "sbx", Namespace: "ns", UID: "sbx-uid", ResourceVersion: "7"}}
	w.Watch(pod, bs)
	w.Watch(pod, bs) // one watch per pod
	select {
	case e := <-rec.events:
		if !strings.Contains(e.text, controlv1alpha1.ReasonDeniedName) || !strings.Contains(e.text, "evil.example (2 queries)") {
			t.Errorf("event %q", e.text)
		}
		// About the Sandbox, which users see, not the BatchSandbox.
		want := corev1.ObjectReference{APIVersion: "sandbox.kube-sandbox.io/v1alpha1", Kind: "Sandbox",
			Namespace: "ns", Name: "sbx", UID: "sbx-uid", ResourceVersion: "7"}
		if e.err != nil {
			t.Errorf("event %q: no reference to its object: %v", e.text, e.err)
		} else if diff := cmp.Diff(want, *e.regarding); diff != "" {
			t.Errorf("event %q regards (-want +got):\n%s", e.text, diff)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	time.Sleep(100 * time.Millisecond)
	if n := polls.Load(); n != 2 {
		t.Errorf("%d polls, want 2 (the answer, then a waiting one)", n)
	}
	w.Forget(pod.UID)
	cancel()
	<-done
}

// refRecorder keeps each Event's text ("type reason note", as events.FakeRecorder writes it) and
// the reference the events API would record as its regarding object.
type refRecorder struct{ events chan recorded }

type recorded struct {
	text      string
	regarding *corev1.ObjectReference
	err       error
}

var _ events.EventRecorder = &refRecorder{}

func (r *refRecorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	// No scheme: the regarding object must name its kind itself, as the manager's scheme does
	// not know Sandboxes.
	ref, err := reference.GetReference(nil, regarding)
	r.events <- recorded{text: eventtype + " " + reason + " " + fmt.Sprintf(note, args...), regarding: ref, err: err}
}
