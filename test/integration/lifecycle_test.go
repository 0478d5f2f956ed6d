package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/test/integration/framework"
)

func TestSandboxUpdateAndPatch(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)
	s, err := api.Create(ctx, sandbox("upd"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Mutable: labels and replicas, by update. The controller writes too (its finalizer), so
	// an update is read-modify-write with a retry on conflict, as any client does.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err = api.Get(ctx, "upd", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Labels["tier"] = "gold"
		s.Spec.Replicas = ptr.To[int32](2)
		s, err = api.Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	bs := &controlv1alpha1.BatchSandbox{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upd"}, bs); err != nil {
		t.Fatal(err)
	}
	if bs.Labels["tier"] != "gold" || ptr.Deref(bs.Spec.Replicas, 0) != 2 {
		t.Errorf("update not stored: labels %v replicas %v", bs.Labels, bs.Spec.Replicas)
	}

	// A stale resourceVersion is a conflict.
	stale := s.DeepCopy()
	stale.ResourceVersion = "1"
	_, err = api.Update(ctx, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) || strings.Contains(err.Error(), "batchsandboxes") {
		t.Errorf("update with a stale resourceVersion: got %v, want a Conflict about sandboxes", err)
	}

	patches := []struct {
		name      string
		pt        types.PatchType
		patch     string
		wantErr   func(error) bool
		wantField string
	}{
		{"merge patch of labels", types.MergePatchType, `{"metadata":{"labels":{"patched":"merge"}}}`, nil, ""},
		{"json patch of replicas", types.JSONPatchType, `[{"op":"replace","path":"/spec/replicas","value":1}]`, nil, ""},
		{"strategic merge patch of labels", types.StrategicMergePatchType, `{"metadata":{"labels":{"patched":"strategic"}}}`, nil, ""},
		{"template is immutable", types.MergePatchType, `{"spec":{"template":{"spec":{"containers":[{"name":"sandbox","image":"other"}]}}}}`, apierrors.IsInvalid, "spec.template"},
		{"entrypoint is immutable", types.MergePatchType, `{"spec":{"entrypoint":["sleep","1"]}}`, apierrors.IsInvalid, "spec.entrypoint"},
		{"timeoutSeconds is immutable", types.MergePatchType, `{"spec":{"timeoutSeconds":600}}`, apierrors.IsInvalid, "spec.timeoutSeconds"},
		{"invalid replicas", types.MergePatchType, `{"spec":{"replicas":-3}}`, apierrors.IsInvalid, "spec.replicas"},
	}
	for _, tt := range patches {
		t.Run(tt.name, func(t *testing.T) {
			before := &controlv1alpha1.BatchSandbox{}
			if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upd"}, before); err != nil {
				t.Fatal(err)
			}
			_, err := api.Patch(ctx, "upd", tt.pt, []byte(tt.patch), metav1.PatchOptions{})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("patch: %v", err)
				}
				return
			}
			if !tt.wantErr(err) {
				t.Fatalf("patch: got %v", err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("error %q does not name %s", err, tt.wantField)
			}
			after := &controlv1alpha1.BatchSandbox{}
			if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "upd"}, after); err != nil {
				t.Fatal(err)
			}
			// The controller may write status meanwhile; the spec is what must not change.
			if diff := cmp.Diff(before.Spec, after.Spec); diff != "" {
				t.Errorf("a refused patch changed the BatchSandbox spec (-before +after):\n%s", diff)
			}
		})
	}
	got, err := api.Get(ctx, "upd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["patched"] != "strategic" || ptr.Deref(got.Spec.Replicas, 0) != 1 {
		t.Errorf("after patches: labels %v replicas %v", got.Labels, got.Spec.Replicas)
	}

	// Server-side apply of a label.
	apply := fmt.Sprintf(`{"apiVersion":"sandbox.kube-sandbox.io/v1alpha1","kind":"Sandbox","metadata":{"name":"upd","namespace":%q,"labels":{"applied":"yes"}}}`, ns)
	if _, err := api.Patch(ctx, "upd", types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "it", Force: ptr.To(true)}); err != nil {
		t.Errorf("server-side apply: %v", err)
	} else if got, _ := api.Get(ctx, "upd", metav1.GetOptions{}); got.Labels["applied"] != "yes" {
		t.Errorf("apply did not set the label: %v", got.Labels)
	}

	// Dry-run changes nothing.
	if _, err := api.Patch(ctx, "upd", types.MergePatchType, []byte(`{"metadata":{"labels":{"dry":"run"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run patch: %v", err)
	}
	if got, _ := api.Get(ctx, "upd", metav1.GetOptions{}); got.Labels["dry"] != "" {
		t.Errorf("dry-run patch was stored")
	}
}

func TestSandboxStatusIsReadOnly(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)
	if _, err := api.Create(ctx, sandbox("st"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Writing status through the main resource is ignored...
	if _, err := api.Patch(ctx, "st", types.MergePatchType, []byte(`{"status":{"phase":"Running","ready":5}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch: %v", err)
	}
	got, err := api.Get(ctx, "st", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Ready == 5 {
		t.Errorf("a user wrote status: %+v", got.Status)
	}
	// ...and the status subresource can be read but not written.
	raw := sandboxes.SandboxV1alpha1().RESTClient()
	if err := raw.Get().Namespace(ns).Resource("sandboxes").Name("st").SubResource("status").Do(ctx).Error(); err != nil {
		t.Errorf("get status: %v", err)
	}
	err = raw.Patch(types.MergePatchType).Namespace(ns).Resource("sandboxes").Name("st").SubResource("status").Body([]byte(`{"status":{"ready":5}}`)).Do(ctx).Error()
	if !apierrors.IsMethodNotSupported(err) {
		t.Errorf("patch status: got %v, want 405 MethodNotSupported", err)
	}
}

func TestSandboxGenerateName(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	s := sandbox("")
	s.GenerateName = "gen-"
	got, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create with generateName: %v", err)
	}
	if !strings.HasPrefix(got.Name, "gen-") || len(got.Name) <= len("gen-") {
		t.Errorf("generated name %q", got.Name)
	}
}

func TestSandboxWatchAndSelectors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := newNamespace(t)
	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)
	first, err := api.Create(ctx, sandbox("w1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Watch from a resourceVersion: only what happened after it arrives, and only what the
	// label selector matches.
	w, err := api.Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion, LabelSelector: "team=b"})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	other := sandbox("w2")
	other.Labels = map[string]string{"team": "b"}
	if _, err := api.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		s, ok := ev.Object.(*sandboxv1alpha1.Sandbox)
		if ev.Type != watch.Added || !ok || s.Name != "w2" {
			t.Errorf("first event %s %#v, want ADDED Sandbox w2", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}

	// status.phase is a field selector, as for pods.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := api.List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending"})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 2, nil
	}); err != nil {
		ctx := context.Background()
		l, err := api.List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending"})
		all, _ := api.List(ctx, metav1.ListOptions{})
		var phases []string
		for _, s := range all.Items {
			phases = append(phases, s.Name+"="+string(s.Status.Phase))
		}
		bsl := &controlv1alpha1.BatchSandboxList{}
		bsErr := kube.List(ctx, bsl, client.InNamespace(ns), client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("status.phase", "Pending")})
		t.Fatalf("field selector status.phase=Pending: %v %v; all: %v; batchsandboxes selected directly: %d %v", itemNamesOf(l), err, phases, len(bsl.Items), bsErr)
	}
	l, err := api.List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Running"})
	if err != nil || len(l.Items) != 0 {
		t.Errorf("status.phase=Running: %v %v", itemNamesOf(l), err)
	}
	if _, err := api.List(ctx, metav1.ListOptions{FieldSelector: "spec.nope=1"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unknown field selector: got %v, want BadRequest", err)
	}
}

func itemNamesOf(l *sandboxv1alpha1.SandboxList) []string {
	if l == nil {
		return nil
	}
	return itemNames(l.Items)
}

func renew(ctx context.Context, ns, name string, r sandboxv1alpha1.SandboxRenewal) (*sandboxv1alpha1.Sandbox, error) {
	r.APIVersion, r.Kind = sandboxv1alpha1.SchemeGroupVersion.String(), "SandboxRenewal"
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out := &sandboxv1alpha1.Sandbox{}
	err = sandboxes.SandboxV1alpha1().RESTClient().Post().Namespace(ns).Resource("sandboxes").Name(name).SubResource("renew").
		Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Into(out)
	return out, err
}

func TestLifetimeAndRenew(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	api := sandboxes.SandboxV1alpha1().Sandboxes(ns)

	// timeoutSeconds bounds.
	for _, tt := range []struct {
		name    string
		timeout int64
	}{{"below the minimum", 59}, {"above the server maximum", int64(framework.MaxSandboxTimeout/time.Second) + 1}} {
		t.Run(tt.name, func(t *testing.T) {
			s := sandbox("bad-timeout")
			s.Spec.TimeoutSeconds = ptr.To(tt.timeout)
			_, err := api.Create(ctx, s, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.timeoutSeconds") {
				t.Errorf("got %v, want 422 on spec.timeoutSeconds", err)
			}
		})
	}

	s := sandbox("life")
	s.Spec.TimeoutSeconds = ptr.To[int64](600)
	created, err := api.Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Status.ExpiresAt == nil {
		t.Fatal("no status.expiresAt")
	}
	if d := time.Until(created.Status.ExpiresAt.Time); d < 590*time.Second || d > 601*time.Second {
		t.Errorf("expiresAt is %s away, want ~600s", d)
	}
	expires := created.Status.ExpiresAt.Time

	// Renew forward by extendSeconds; the same request again changes nothing; an earlier time
	// never moves it back.
	out, err := renew(ctx, ns, "life", sandboxv1alpha1.SandboxRenewal{ExtendSeconds: ptr.To[int64](1200)})
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if !out.Status.ExpiresAt.After(expires) {
		t.Errorf("renew did not move the expiry forward: %v -> %v", expires, out.Status.ExpiresAt)
	}
	later := *out.Status.ExpiresAt
	out, err = renew(ctx, ns, "life", sandboxv1alpha1.SandboxRenewal{ExpiresAt: &later})
	if err != nil || !out.Status.ExpiresAt.Equal(&later) {
		t.Errorf("renewing to the same time: %v, %v", out.Status.ExpiresAt, err)
	}
	sooner := metav1.NewTime(time.Now().Add(700 * time.Second))
	out, err = renew(ctx, ns, "life", sandboxv1alpha1.SandboxRenewal{ExpiresAt: &sooner})
	if err != nil || !out.Status.ExpiresAt.Equal(&later) {
		t.Errorf("renewing to an earlier time moved the expiry: %v, %v", out.Status.ExpiresAt, err)
	}

	// Bad renewals are typed.
	past := metav1.NewTime(time.Now().Add(-time.Minute))
	tooFar := metav1.NewTime(time.Now().Add(framework.MaxSandboxTimeout + time.Hour))
	for _, tt := range []struct {
		name    string
		sandbox string
		r       sandboxv1alpha1.SandboxRenewal
		want    func(error) bool
		wantMsg string
	}{
		{"a time in the past", "life", sandboxv1alpha1.SandboxRenewal{ExpiresAt: &past}, apierrors.IsInvalid, "expiresAt"},
		{"past the server maximum", "life", sandboxv1alpha1.SandboxRenewal{ExpiresAt: &tooFar}, apierrors.IsInvalid, "maximum"},
		{"both fields", "life", sandboxv1alpha1.SandboxRenewal{ExpiresAt: &later, ExtendSeconds: ptr.To[int64](60)}, apierrors.IsInvalid, "exactly one"},
		{"neither field", "life", sandboxv1alpha1.SandboxRenewal{}, apierrors.IsInvalid, "exactly one"},
		{"a missing sandbox", "nope", sandboxv1alpha1.SandboxRenewal{ExtendSeconds: ptr.To[int64](60)}, apierrors.IsNotFound, "nope"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := renew(ctx, ns, tt.sandbox, tt.r)
			if !tt.want(err) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("got %v", err)
			}
		})
	}

	// A sandbox without expiry has nothing to renew: 409.
	if _, err := api.Create(ctx, sandbox("forever"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := renew(ctx, ns, "forever", sandboxv1alpha1.SandboxRenewal{ExtendSeconds: ptr.To[int64](60)}); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "no expiry") {
		t.Errorf("renewing a sandbox without expiry: got %v, want 409", err)
	}
}

func TestConcurrentRenewsNeverMoveBack(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	s := sandbox("race")
	s.Spec.TimeoutSeconds = ptr.To[int64](600)
	if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			at := metav1.NewTime(base.Add(time.Duration(i) * time.Second))
			if _, err := renew(ctx, ns, "race", sandboxv1alpha1.SandboxRenewal{ExpiresAt: &at}); err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent renew: %v", err)
	}
	got, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Get(ctx, "race", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := base.Add((n - 1) * time.Second); !got.Status.ExpiresAt.Time.Equal(want) {
		t.Errorf("after %d concurrent renewals expiry is %v, want the latest requested %v", n, got.Status.ExpiresAt, want)
	}
}

// TestExpiry: the controller deletes a sandbox at its deadline, also when it was not running
// at the deadline. The deadlines are set on the BatchSandbox directly, since the API's
// minimum lifetime is a minute.
func TestExpiry(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	newExpiring := func(name string, in time.Duration) time.Time {
		t.Helper()
		s := sandbox(name)
		s.Spec.TimeoutSeconds = ptr.To[int64](600)
		if _, err := sandboxes.SandboxV1alpha1().Sandboxes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(in).Truncate(time.Second).Add(time.Second)
		patch := fmt.Sprintf(`{"spec":{"expireTime":%q}}`, deadline.UTC().Format(time.RFC3339))
		bs := &controlv1alpha1.BatchSandbox{}
		bs.Namespace, bs.Name = ns, name
		if err := kube.Patch(ctx, bs, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
		return deadline
	}
	gone := func(name string, deadline time.Time) time.Duration {
		t.Helper()
		waitGone(t, ns, name)
		return time.Since(deadline)
	}

	deadline := newExpiring("soon", 2*time.Second)
	late := gone("soon", deadline)
	t.Logf("deleted %.2fs after its deadline", late.Seconds())
	if late > 3*time.Second {
		t.Errorf("deleted %s after its deadline", late)
	}
	if late < 0 {
		t.Errorf("deleted %s before its deadline", -late)
	}
	events := &eventsList{}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return kube.List(ctx, &events.list, client.InNamespace(ns)) == nil && events.has(controlv1alpha1.ReasonExpired), nil
	}); err != nil {
		t.Errorf("no Expired event; events: %v", events.reasons())
	}

	// Across a restart: the controller is down at the deadline and acts when it is back.
	stopController()
	deadline = newExpiring("restart", 2*time.Second)
	time.Sleep(time.Until(deadline) + time.Second)
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "restart"}, &controlv1alpha1.BatchSandbox{}); err != nil {
		t.Fatalf("expired with no controller running: %v", err)
	}
	restarted := time.Now()
	if err := startController(); err != nil {
		t.Fatal(err)
	}
	gone("restart", deadline)
	t.Logf("deleted %.2fs after the controller restarted", time.Since(restarted).Seconds())
}
