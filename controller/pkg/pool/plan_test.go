package pool

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func testPool(bufferMin, bufferMax, poolMin, poolMax int32) *controlv1alpha1.Pool {
	return &controlv1alpha1.Pool{
		ObjectMeta: metav1.ObjectMeta{Name: "py", Namespace: "ns"},
		Spec: controlv1alpha1.PoolSpec{CapacitySpec: controlv1alpha1.CapacitySpec{
			BufferMin: bufferMin, BufferMax: bufferMax, PoolMin: poolMin, PoolMax: poolMax,
		}},
	}
}

// pods makes n pods of a revision, named prefix-0..n-1, created a minute apart (prefix-0
// oldest).
func pods(prefix, revision string, n int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("%s-%d", prefix, i),
			Labels:            map[string]string{controlv1alpha1.LabelPoolRevision: revision},
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(i) * time.Minute)),
		}})
	}
	return out
}

func names(ps []*corev1.Pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestPlan(t *testing.T) {
	now := t0.Add(time.Hour)
	tests := []struct {
		name        string
		pool        *controlv1alpha1.Pool
		obs         observed
		maxStarting int32
		wantCreate  int32
		wantDelete  []string
		wantPaced   time.Duration
	}{
		{
			name: "empty pool fills to bufferMin",
			pool: testPool(3, 5, 0, 10), maxStarting: 10,
			wantCreate: 3,
		},
		{
			name: "pods starting count toward the buffer",
			pool: testPool(3, 5, 0, 10), maxStarting: 10,
			obs:        observed{idleStarting: pods("s", "r1", 2)},
			wantCreate: 1,
		},
		{
			name: "pods just created and not yet in the cache count toward the buffer",
			pool: testPool(3, 5, 0, 10), maxStarting: 10,
			obs:        observed{pendingCreates: 3},
			wantCreate: 0,
		},
		{
			name: "no more than maxStarting pods start at once",
			pool: testPool(50, 60, 0, 100), maxStarting: 10,
			obs:        observed{idleStarting: pods("s", "r1", 4)},
			wantCreate: 6,
		},
		{
			name: "never above poolMax",
			pool: testPool(5, 5, 0, 6), maxStarting: 10,
			obs:        observed{allocated: 4, idleReady: pods("i", "r1", 1)},
			wantCreate: 1,
		},
		{
			name: "poolMin holds even with the buffer full",
			pool: testPool(1, 2, 5, 10), maxStarting: 10,
			obs:        observed{idleReady: pods("i", "r1", 2)},
			wantCreate: 3,
		},
		{
			name: "waiting sandboxes grow the buffer beyond bufferMin",
			pool: testPool(2, 2, 0, 10), maxStarting: 10,
			obs:        observed{allocated: 3, demand: 4},
			wantCreate: 6,
		},
		{
			name: "a refill right after an allocation waits for the refill delay",
			pool: testPool(2, 4, 0, 10), maxStarting: 10,
			obs:       observed{allocated: 1, idleReady: pods("i", "r1", 1), lastAllocation: now.Add(-300 * time.Millisecond)},
			wantPaced: 700 * time.Millisecond,
		},
		{
			name: "a refill after the refill delay goes ahead",
			pool: testPool(2, 4, 0, 10), maxStarting: 10,
			obs:        observed{allocated: 1, idleReady: pods("i", "r1", 1), lastAllocation: now.Add(-2 * time.Second)},
			wantCreate: 1,
		},
		{
			name: "waiting sandboxes are not paced",
			pool: testPool(2, 4, 0, 10), maxStarting: 10,
			obs:        observed{allocated: 1, demand: 1, lastAllocation: now.Add(-10 * time.Millisecond)},
			wantCreate: 3,
		},
		{
			name: "surplus idle pods go, the youngest first",
			pool: testPool(1, 2, 0, 10), maxStarting: 10,
			obs:        observed{idleReady: pods("i", "r1", 4)},
			wantDelete: []string{"i-3", "i-2"},
		},
		{
			name: "no scale-down while an idle pod is starting (no create/delete storm)",
			pool: testPool(1, 2, 0, 10), maxStarting: 10,
			obs: observed{idleReady: pods("i", "r1", 4), idleStarting: pods("s", "r1", 1)},
		},
		{
			name: "no scale-down while a created pod is not in the cache yet",
			pool: testPool(1, 2, 0, 10), maxStarting: 10,
			obs: observed{idleReady: pods("i", "r1", 4), pendingCreates: 1},
		},
		{
			name: "scale-down stops at poolMin",
			pool: testPool(0, 0, 3, 10), maxStarting: 10,
			obs:        observed{allocated: 1, idleReady: pods("i", "r1", 4)},
			wantDelete: []string{"i-3", "i-2"},
		},
		{
			name: "failed idle pods go and are replaced",
			pool: testPool(2, 2, 0, 10), maxStarting: 10,
			obs:        observed{idleReady: pods("i", "r1", 1), failed: pods("f", "r1", 1)},
			wantCreate: 1, wantDelete: []string{"f-0"},
		},
		{
			name: "rolling update: old ready pods replaced within maxUnavailable (25% of 8 = 2), oldest first",
			pool: testPool(8, 8, 0, 20), maxStarting: 10,
			obs:        observed{idleReady: pods("old", "r0", 8)},
			wantCreate: 2, wantDelete: []string{"old-0", "old-1"},
		},
		{
			name: "rolling update: starting new pods use the budget up",
			pool: testPool(8, 8, 0, 20), maxStarting: 10,
			obs: observed{idleReady: pods("old", "r0", 6), idleStarting: pods("new", "r1", 2)},
		},
		{
			name: "rolling update: terminating idle pods use the budget up",
			pool: testPool(8, 8, 0, 20), maxStarting: 10,
			// 7 idle of 8 (the terminating one no longer counts), one more going: two to create.
			obs:        observed{idleReady: append(pods("old", "r0", 6), pods("new", "r1", 1)...), idleTerminating: 1},
			wantCreate: 2, wantDelete: []string{"old-0"},
		},
		{
			name: "rolling update: old pods still starting go at once, outside the budget",
			pool: testPool(2, 2, 0, 20), maxStarting: 10,
			obs:        observed{idleReady: pods("new", "r1", 2), idleStarting: pods("old", "r0", 2)},
			wantDelete: []string{"old-0", "old-1"},
		},
		{
			name: "scale-down prefers old revisions",
			pool: testPool(0, 1, 0, 20), maxStarting: 10,
			obs:        observed{idleReady: append(pods("new", "r1", 1), pods("old", "r0", 1)...)},
			wantDelete: []string{"old-0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.obs.revision == "" {
				tt.obs.revision = "r1"
			}
			got := plan(&tt.obs, tt.pool, tt.maxStarting, time.Second, now)
			if got.create != tt.wantCreate {
				t.Errorf("create = %d, want %d", got.create, tt.wantCreate)
			}
			if diff := cmp.Diff(tt.wantDelete, names(got.delete)); diff != "" {
				t.Errorf("delete (-want +got):\n%s", diff)
			}
			if got.pacedFor != tt.wantPaced {
				t.Errorf("pacedFor = %v, want %v", got.pacedFor, tt.wantPaced)
			}
		})
	}
}

func TestMaxUnavailable(t *testing.T) {
	tests := []struct {
		name      string
		value     *intstr.IntOrString
		bufferMax int32
		want      int32
	}{
		{name: "default 25% rounds up", bufferMax: 5, want: 2},
		{name: "percentage", value: ptrTo(intstr.FromString("50%")), bufferMax: 10, want: 5},
		{name: "number", value: ptrTo(intstr.FromInt32(3)), bufferMax: 10, want: 3},
		{name: "at least one", value: ptrTo(intstr.FromInt32(0)), bufferMax: 10, want: 1},
		{name: "at least one with an empty buffer", bufferMax: 0, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPool(0, tt.bufferMax, 0, 10)
			p.Spec.UpdateStrategy.MaxUnavailable = tt.value
			if got := maxUnavailable(p); got != tt.want {
				t.Errorf("maxUnavailable() = %d, want %d", got, tt.want)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }
