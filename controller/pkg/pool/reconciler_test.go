package pool

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/admission"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/controller/apis/pki"
	"github.com/kube-sandbox/kube-sandbox/controller/pkg/index"
)

func newReconciler(t *testing.T, clock *clocktesting.FakeClock, objs ...client.Object) (*Reconciler, client.Client) {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := controlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&controlv1alpha1.Pool{}).
		WithObjects(objs...)
	for _, f := range index.Fields() {
		b = b.WithIndex(f.Object, f.Name, f.Extract)
	}
	c := b.Build()
	ca, err := pki.NewCA("test-ca", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	authority := pki.NewAuthority(nil)
	authority.Set(ca, nil)
	return &Reconciler{Client: c, Recorder: events.NewFakeRecorder(100), ExecdImage: "kube-sandbox:v1", Clock: clock, Authority: authority}, c
}

// TestReconcileFillsAndPacesStatusCounts: an empty pool creates its buffer, and no Secret; the
// counts of its status are written at most once per statusCountsInterval, at a deadline, while
// a change of conditions is written at once.
func TestReconcileFillsAndPacesStatusCounts(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	pool := testPool(2, 2, 0, 10)
	pool.Spec.Template = corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python"}}}}
	r, c := newReconciler(t, clock, pool)
	ctx := t.Context()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "py"}}
	get := func() *controlv1alpha1.Pool {
		p := &controlv1alpha1.Pool{}
		if err := c.Get(ctx, req.NamespacedName, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pods := func() []corev1.Pod {
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace("ns")); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := len(pods()); n != 2 {
		t.Fatalf("pods after the first reconcile = %d, want 2 (bufferMin)", n)
	}
	if secrets := (&corev1.SecretList{}); c.List(ctx, secrets) != nil || len(secrets.Items) != 0 {
		t.Errorf("secrets = %v, want none: a pool pod holds nothing that opens another", secrets.Items)
	}
	if p := get(); p.Status.Total != 2 || p.Status.Available != 0 {
		t.Errorf("status = %+v, want 2 starting pods", p.Status)
	}

	markReady := func(name string) {
		t.Helper()
		p := &corev1.Pod{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: name}, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	// One pod becomes ready right after the last write: only counts change (the pool is still
	// filling), so the write waits for its deadline.
	list := pods()
	markReady(list[0].Name)
	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := get().Status.Available; got != 0 {
		t.Errorf("available = %d right after a write, want the change held back", got)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > statusCountsInterval {
		t.Errorf("RequeueAfter = %v, want the deadline of the held-back counts (at most %v)", res.RequeueAfter, statusCountsInterval)
	}
	clock.Step(statusCountsInterval)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := get().Status.Available; got != 1 {
		t.Errorf("available = %d after the deadline, want 1", got)
	}

	// The second becomes ready at once after that write: the pool turns Ready, a change of
	// condition, written at once.
	markReady(list[1].Name)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	p := get()
	if c := meta.FindStatusCondition(p.Status.Conditions, controlv1alpha1.PoolConditionReady); p.Status.Available != 2 || c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("status = %+v, want 2 available and Ready written at once", p.Status)
	}
}

// TestReconcileHoldsTemplatesToPodSecurity: a Pool whose template needs more than the platform
// level makes no pods (and lets its idle ones go), whoever wrote it, unless it says podSecurity
// Namespace, which only users who may create pods can set.
func TestReconcileHoldsTemplatesToPodSecurity(t *testing.T) {
	privileged := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sandbox", Image: "python",
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}}
	tests := []struct {
		name        string
		podSecurity controlv1alpha1.PodSecurity
		nsLabels    map[string]string
		wantPods    int
		wantReason  string
	}{
		{name: "Platform: refused", wantReason: controlv1alpha1.ReasonTemplateRefused},
		{name: "Namespace: made", podSecurity: controlv1alpha1.PodSecurityNamespace, wantPods: 2, wantReason: controlv1alpha1.ReasonBufferFilling},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pool := testPool(2, 2, 0, 10)
			pool.Generation = 1
			pool.Spec.Template = privileged
			pool.Spec.PodSecurity = tc.podSecurity
			// An idle pod made before (an older controller, or a namespace level since changed).
			idle := buildPod(pool, "old", "kube-sandbox:v1", nil, nil, "")
			idle.Name = "py-old"
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: tc.nsLabels}}
			r, c := newReconciler(t, clocktesting.NewFakeClock(time.Now()), pool, ns, idle)
			lv, _ := admission.ParseLevel("baseline")
			r.Checker, _ = admission.NewChecker(lv)
			if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "py"}}); err != nil {
				t.Fatal(err)
			}
			list := &corev1.PodList{}
			_ = c.List(t.Context(), list, client.InNamespace("ns"))
			var fresh int
			for _, p := range list.Items {
				if p.Name != "py-old" {
					fresh++
				}
			}
			if fresh != tc.wantPods {
				t.Errorf("%d new pods, want %d", fresh, tc.wantPods)
			}
			got := &controlv1alpha1.Pool{}
			_ = c.Get(t.Context(), types.NamespacedName{Namespace: "ns", Name: "py"}, got)
			cond := meta.FindStatusCondition(got.Status.Conditions, controlv1alpha1.PoolConditionReady)
			if cond == nil || cond.Reason != tc.wantReason {
				t.Fatalf("Ready condition %+v, want reason %s", cond, tc.wantReason)
			}
			if tc.wantReason == controlv1alpha1.ReasonTemplateRefused {
				if !strings.Contains(cond.Message, "spec.template.spec.containers[0].securityContext.privileged") || cond.ObservedGeneration != 1 {
					t.Errorf("message %q (generation %d): want the field", cond.Message, cond.ObservedGeneration)
				}
				for _, p := range list.Items {
					if p.Name == "py-old" {
						t.Error("the idle pod of a refused template is still there")
					}
				}
			}
		})
	}
}
