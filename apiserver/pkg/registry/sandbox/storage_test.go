package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	sandboxv1alpha1 "github.com/kube-sandbox/kube-sandbox/apiserver/apis/sandbox/v1alpha1"
	"github.com/kube-sandbox/kube-sandbox/apiserver/internal/apitesting"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// newREST returns the sandboxes storage over a fake kube-apiserver holding objs.
func newREST(t *testing.T, objs ...client.Object) (*REST, client.WithWatch) {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := controlv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	backend := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return crdPlural(c.Get(ctx, key, obj, opts...))
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			return crdPlural(c.List(ctx, list, opts...))
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return crdPlural(c.Create(ctx, obj, opts...))
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return crdPlural(c.Update(ctx, obj, opts...))
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return crdPlural(c.Delete(ctx, obj, opts...))
		},
	}).Build()
	return NewREST(backend, Limits{}, testingclock.NewFakePassiveClock(time.Unix(1700000000, 0)), nil), backend
}

// crdPlural puts the CRD's plural into an error of the fake client. The fake names resources
// by guessing the plural of the kind, "batchsandboxs"; kube-apiserver uses the CRD's,
// "batchsandboxes", and that is what translateError recognizes.
func crdPlural(err error) error {
	var statusErr *apierrors.StatusError
	if !errors.As(err, &statusErr) || statusErr.ErrStatus.Details == nil || statusErr.ErrStatus.Details.Kind != "batchsandboxs" {
		return err
	}
	out := &apierrors.StatusError{ErrStatus: *statusErr.ErrStatus.DeepCopy()}
	out.ErrStatus.Details.Kind = "batchsandboxes"
	out.ErrStatus.Message = strings.ReplaceAll(out.ErrStatus.Message, "batchsandboxs.", "batchsandboxes.")
	return out
}

func nsContext(ns string) context.Context {
	return genericapirequest.WithNamespace(context.Background(), ns)
}

func batchSandbox(ns, name string, lbls map[string]string) *controlv1alpha1.BatchSandbox {
	return &controlv1alpha1.BatchSandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls},
		Spec: controlv1alpha1.BatchSandboxSpec{
			Replicas: ptr.To[int32](1),
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "python:3.11"}},
			}},
		},
	}
}

// storedBatchSandboxes lists the names of the BatchSandboxes in every namespace.
func storedBatchSandboxes(t *testing.T, backend client.Client) []string {
	t.Helper()
	list := &controlv1alpha1.BatchSandboxList{}
	if err := backend.List(context.Background(), list); err != nil {
		t.Fatalf("list batchsandboxes: %v", err)
	}
	var names []string
	for _, bs := range list.Items {
		names = append(names, bs.Namespace+"/"+bs.Name)
	}
	sort.Strings(names)
	return names
}

func TestCreate(t *testing.T) {
	withoutReplicas := func() *sandboxv1alpha1.Sandbox {
		sbx := validSandbox()
		sbx.Namespace = ""
		sbx.Spec.Replicas = nil
		return sbx
	}
	errRefused := apierrors.NewForbidden(sandboxResource, "demo", errors.New("admission says no"))
	tests := []struct {
		name      string
		namespace string
		obj       runtime.Object
		options   *metav1.CreateOptions
		validate  rest.ValidateObjectFunc
		// wantErr is nil for success.
		wantErr    *apitesting.APIErr
		wantStored []string
	}{
		{
			name:       "stores a BatchSandbox with defaults",
			namespace:  "ns",
			obj:        withoutReplicas(),
			wantStored: []string{"ns/demo"},
		},
		{
			name:      "namespace of the object matches the request",
			namespace: "ns",
			obj: func() runtime.Object {
				sbx := withoutReplicas()
				sbx.Namespace = "ns"
				return sbx
			}(),
			wantStored: []string{"ns/demo"},
		},
		{
			name:      "a resourceVersion from the caller is dropped",
			namespace: "ns",
			obj: func() runtime.Object {
				sbx := withoutReplicas()
				sbx.ResourceVersion = "99"
				return sbx
			}(),
			wantStored: []string{"ns/demo"},
		},
		{
			name:      "status from the caller is dropped",
			namespace: "ns",
			obj: func() runtime.Object {
				sbx := withoutReplicas()
				sbx.Status = sandboxv1alpha1.SandboxStatus{
					Phase:     sandboxv1alpha1.PhaseRunning,
					Ready:     1,
					ExpiresAt: ptr.To(metav1.NewTime(time.Unix(1800000000, 0))),
				}
				return sbx
			}(),
			wantStored: []string{"ns/demo"},
		},
		{
			name:      "createValidation sees the defaulted sandbox",
			namespace: "ns",
			obj:       withoutReplicas(),
			validate: func(_ context.Context, obj runtime.Object) error {
				sbx := obj.(*sandboxv1alpha1.Sandbox)
				if sbx.Namespace != "ns" || sbx.Spec.Replicas == nil || *sbx.Spec.Replicas != 1 {
					return errors.New("not defaulted")
				}
				return nil
			},
			wantStored: []string{"ns/demo"},
		},
		{
			name:      "mismatched namespace",
			namespace: "ns",
			obj: func() runtime.Object {
				sbx := withoutReplicas()
				sbx.Namespace = "other"
				return sbx
			}(),
			wantErr: &apitesting.APIErr{Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest},
		},
		{
			name:    "no namespace on the request",
			obj:     withoutReplicas(),
			wantErr: &apitesting.APIErr{Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest},
		},
		{
			name:      "not a sandbox",
			namespace: "ns",
			obj:       &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "demo"}},
			wantErr:   &apitesting.APIErr{Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest},
		},
		{
			name:      "invalid",
			namespace: "ns",
			obj: func() runtime.Object {
				sbx := withoutReplicas()
				sbx.Spec.Template = nil
				return sbx
			}(),
			wantErr: &apitesting.APIErr{Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Group: "sandbox.kube-sandbox.io", Kind: "Sandbox", Name: "demo"},
		},
		{
			name:      "createValidation refuses",
			namespace: "ns",
			obj:       withoutReplicas(),
			validate:  func(context.Context, runtime.Object) error { return errRefused },
			wantErr:   &apitesting.APIErr{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
		},
		{
			// The fake client honours dry-run (it returns before storing), so this is tested
			// here as well as in the integration tests.
			name:      "dry run stores nothing",
			namespace: "ns",
			obj:       withoutReplicas(),
			options:   &metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, backend := newREST(t)
			ctx := context.Background()
			if tt.namespace != "" {
				ctx = nsContext(tt.namespace)
			}
			out, err := r.Create(ctx, tt.obj, tt.validate, tt.options)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Create() = %v, want error %+v", out, *tt.wantErr)
				}
				if diff := cmp.Diff(*tt.wantErr, apitesting.APIErrOf(t, err)); diff != "" {
					t.Errorf("Create() error %v (-want +got):\n%s", err, diff)
				}
			} else {
				if err != nil {
					t.Fatalf("Create() error: %v", err)
				}
				want := &sandboxv1alpha1.Sandbox{
					TypeMeta: sandboxTypeMeta,
					// The finalizer comes with the creation, saving the controller a write.
					ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns", Labels: map[string]string{"team": "a"},
						Finalizers: []string{controlv1alpha1.FinalizerPods}},
					Spec: validSandbox().Spec, // with replicas 1
				}
				if diff := cmp.Diff(want, out, cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion")); diff != "" {
					t.Errorf("Create() returned (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tt.wantStored, storedBatchSandboxes(t, backend)); diff != "" {
				t.Fatalf("stored BatchSandboxes (-want +got):\n%s", diff)
			}
			if len(tt.wantStored) == 0 {
				return
			}
			stored := &controlv1alpha1.BatchSandbox{}
			if err := backend.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "demo"}, stored); err != nil {
				t.Fatalf("get the BatchSandbox: %v", err)
			}
			wantSpec := controlv1alpha1.BatchSandboxSpec{
				Replicas:   ptr.To[int32](1),
				Template:   validSandbox().Spec.Template,
				Entrypoint: validSandbox().Spec.Entrypoint,
				Env:        validSandbox().Spec.Env,
			}
			if diff := cmp.Diff(wantSpec, stored.Spec); diff != "" {
				t.Errorf("stored spec (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]string{"team": "a"}, stored.Labels); diff != "" {
				t.Errorf("stored labels (-want +got):\n%s", diff)
			}
			if out.(*sandboxv1alpha1.Sandbox).ResourceVersion != stored.ResourceVersion {
				t.Errorf("Create() returned resourceVersion %q, stored %q", out.(*sandboxv1alpha1.Sandbox).ResourceVersion, stored.ResourceVersion)
			}
		})
	}
}

func TestCreateTwice(t *testing.T) {
	r, _ := newREST(t)
	ctx := nsContext("ns")
	if _, err := r.Create(ctx, validSandbox(), nil, &metav1.CreateOptions{}); err != nil {
		t.Fatalf("first Create() error: %v", err)
	}
	_, err := r.Create(ctx, validSandbox(), nil, &metav1.CreateOptions{})
	want := apitesting.APIErr{Code: http.StatusConflict, Reason: metav1.StatusReasonAlreadyExists, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"}
	if diff := cmp.Diff(want, apitesting.APIErrOf(t, err)); diff != "" {
		t.Errorf("second Create() error %v (-want +got):\n%s", err, diff)
	}
	if msg := err.Error(); !strings.Contains(msg, `sandboxes.sandbox.kube-sandbox.io "demo" already exists`) || strings.Contains(msg, "batchsandboxes") {
		t.Errorf("second Create() message %q, want it to name the sandbox only", msg)
	}
}

func TestCreateGenerateName(t *testing.T) {
	r, backend := newREST(t)
	sbx := validSandbox()
	sbx.Name = ""
	sbx.GenerateName = "gen-"
	out, err := r.Create(nsContext("ns"), sbx, nil, &metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create() with generateName: %v", err)
	}
	got := out.(*sandboxv1alpha1.Sandbox)
	if !strings.HasPrefix(got.Name, "gen-") || len(got.Name) <= len("gen-") {
		t.Errorf("generated name %q, want gen-<suffix>", got.Name)
	}
	if diff := cmp.Diff([]string{"ns/" + got.Name}, storedBatchSandboxes(t, backend)); diff != "" {
		t.Errorf("stored BatchSandboxes (-want +got):\n%s", diff)
	}
}

func TestCreateExpiry(t *testing.T) {
	r, backend := newREST(t)
	sbx := validSandbox()
	sbx.Spec.TimeoutSeconds = ptr.To[int64](3600)
	out, err := r.Create(nsContext("ns"), sbx, nil, &metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create() error: %v", err)
	}
	// newREST's clock stands at 1700000000.
	want := ptr.To(metav1.NewTime(time.Unix(1700000000+3600, 0)))
	if diff := cmp.Diff(want, out.(*sandboxv1alpha1.Sandbox).Status.ExpiresAt); diff != "" {
		t.Errorf("returned status.expiresAt (-want +got):\n%s", diff)
	}
	stored := &controlv1alpha1.BatchSandbox{}
	if err := backend.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "demo"}, stored); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, stored.Spec.ExpireTime); diff != "" {
		t.Errorf("stored spec.expireTime (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ptr.To[int64](3600), stored.Spec.TimeoutSeconds); diff != "" {
		t.Errorf("stored spec.timeoutSeconds (-want +got):\n%s", diff)
	}
}

func TestGet(t *testing.T) {
	stored := batchSandbox("ns", "demo", map[string]string{"team": "a"})
	stored.Status = controlv1alpha1.BatchSandboxStatus{
		Phase: controlv1alpha1.PhaseRunning,
		Ready: 1,
		Pods:  []controlv1alpha1.SandboxPodStatus{{Replica: 0, Name: "demo-0", IP: "10.0.0.1", Ready: true}},
	}
	tests := []struct {
		name      string
		namespace string
		get       string
		wantErr   *apitesting.APIErr
	}{
		{name: "found", namespace: "ns", get: "demo"},
		{
			name: "missing", namespace: "ns", get: "nope",
			wantErr: &apitesting.APIErr{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "nope"},
		},
		{
			name: "in another namespace", namespace: "other", get: "demo",
			wantErr: &apitesting.APIErr{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, backend := newREST(t, stored.DeepCopy())
			out, err := r.Get(nsContext(tt.namespace), tt.get, &metav1.GetOptions{})
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Get() = %v, want an error", out)
				}
				if diff := cmp.Diff(*tt.wantErr, apitesting.APIErrOf(t, err)); diff != "" {
					t.Errorf("Get() error %v (-want +got):\n%s", err, diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Get() error: %v", err)
			}
			bs := &controlv1alpha1.BatchSandbox{}
			if err := backend.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "demo"}, bs); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(fromBatchSandbox(bs), out); diff != "" {
				t.Errorf("Get() (-want +got):\n%s", diff)
			}
			sbx := out.(*sandboxv1alpha1.Sandbox)
			if sbx.Status.Phase != sandboxv1alpha1.PhaseRunning || len(sbx.Status.Pods) != 1 || sbx.TypeMeta != sandboxTypeMeta {
				t.Errorf("Get() = %+v, want a running Sandbox with its pod", sbx)
			}
		})
	}
}

func TestList(t *testing.T) {
	objs := []client.Object{
		batchSandbox("ns", "a", map[string]string{"team": "a"}),
		batchSandbox("ns", "b", map[string]string{"team": "b"}),
		batchSandbox("ns", "c", map[string]string{"team": "a", "tier": "gpu"}),
		batchSandbox("other", "d", map[string]string{"team": "a"}),
	}
	tests := []struct {
		name    string
		options *metainternalversion.ListOptions
		want    []string
	}{
		{name: "nil options", want: []string{"a", "b", "c"}},
		{name: "no selector", options: &metainternalversion.ListOptions{}, want: []string{"a", "b", "c"}},
		{
			name:    "label selector",
			options: &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"team": "a"})},
			want:    []string{"a", "c"},
		},
		{
			name:    "label selector of two labels",
			options: &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"team": "a", "tier": "gpu"})},
			want:    []string{"c"},
		},
		{
			name:    "label selector matching nothing",
			options: &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"team": "z"})},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newREST(t, objs...)
			out, err := r.List(nsContext("ns"), tt.options)
			if err != nil {
				t.Fatalf("List() error: %v", err)
			}
			list, ok := out.(*sandboxv1alpha1.SandboxList)
			if !ok {
				t.Fatalf("List() = %T, want *SandboxList", out)
			}
			var names []string
			for _, sbx := range list.Items {
				if sbx.TypeMeta != sandboxTypeMeta || sbx.Namespace != "ns" || sbx.Spec.Template == nil {
					t.Errorf("item %s/%s is not a converted Sandbox: %+v", sbx.Namespace, sbx.Name, sbx)
				}
				names = append(names, sbx.Name)
			}
			sort.Strings(names)
			if diff := cmp.Diff(tt.want, names); diff != "" {
				t.Errorf("List() names (-want +got):\n%s", diff)
			}
			if list.Items == nil {
				t.Errorf("List() items are nil; an empty list must encode as [] (items is required)")
			}
		})
	}
}

func TestWatch(t *testing.T) {
	r, backend := newREST(t)
	w, err := r.Watch(nsContext("ns"), &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatalf("Watch() error: %v", err)
	}
	defer w.Stop()
	if err := backend.Create(context.Background(), batchSandbox("ns", "demo", nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		sbx, ok := ev.Object.(*sandboxv1alpha1.Sandbox)
		if ev.Type != watch.Added || !ok {
			t.Fatalf("got event %s %T, want ADDED *Sandbox", ev.Type, ev.Object)
		}
		if sbx.Name != "demo" || sbx.TypeMeta != sandboxTypeMeta {
			t.Errorf("event object = %+v, want the Sandbox demo", sbx)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
}

func TestDelete(t *testing.T) {
	withFinalizer := batchSandbox("ns", "demo", nil)
	withFinalizer.Finalizers = []string{"example.com/keep"}
	errRefused := apierrors.NewForbidden(sandboxResource, "demo", errors.New("admission says no"))
	tests := []struct {
		name     string
		stored   *controlv1alpha1.BatchSandbox
		delete   string
		options  *metav1.DeleteOptions
		validate rest.ValidateObjectFunc
		wantErr  *apitesting.APIErr
		// wantDeleted is the second return value of Delete.
		wantDeleted bool
		// wantRemaining: the BatchSandboxes left, and whether "demo" is being deleted.
		wantRemaining   []string
		wantTerminating bool
	}{
		{
			name:        "deletes",
			stored:      batchSandbox("ns", "demo", nil),
			delete:      "demo",
			wantDeleted: true,
		},
		{
			name:        "nil options",
			stored:      batchSandbox("ns", "demo", nil),
			delete:      "demo",
			options:     nil,
			wantDeleted: true,
		},
		{
			name:          "missing",
			stored:        batchSandbox("ns", "demo", nil),
			delete:        "nope",
			wantErr:       &apitesting.APIErr{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "nope"},
			wantRemaining: []string{"ns/demo"},
		},
		{
			name:            "finalizers hold it",
			stored:          withFinalizer,
			delete:          "demo",
			wantDeleted:     false,
			wantRemaining:   []string{"ns/demo"},
			wantTerminating: true,
		},
		{
			name:          "deleteValidation refuses",
			stored:        batchSandbox("ns", "demo", nil),
			delete:        "demo",
			validate:      func(context.Context, runtime.Object) error { return errRefused },
			wantErr:       &apitesting.APIErr{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
			wantRemaining: []string{"ns/demo"},
		},
		{
			name:          "stale resourceVersion precondition",
			stored:        batchSandbox("ns", "demo", nil),
			delete:        "demo",
			options:       &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: ptr.To("12345")}},
			wantErr:       &apitesting.APIErr{Code: http.StatusConflict, Reason: metav1.StatusReasonConflict, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "demo"},
			wantRemaining: []string{"ns/demo"},
		},
		{
			// The fake client honours dry-run on delete too.
			name:          "dry run deletes nothing",
			stored:        batchSandbox("ns", "demo", nil),
			delete:        "demo",
			options:       &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
			wantDeleted:   true,
			wantRemaining: []string{"ns/demo"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, backend := newREST(t, tt.stored.DeepCopy())
			before := &controlv1alpha1.BatchSandbox{}
			if err := backend.Get(context.Background(), client.ObjectKeyFromObject(tt.stored), before); err != nil {
				t.Fatal(err)
			}
			out, deleted, err := r.Delete(nsContext("ns"), tt.delete, tt.validate, tt.options)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Delete() = %v, want an error", out)
				}
				if diff := cmp.Diff(*tt.wantErr, apitesting.APIErrOf(t, err)); diff != "" {
					t.Errorf("Delete() error %v (-want +got):\n%s", err, diff)
				}
			} else {
				if err != nil {
					t.Fatalf("Delete() error: %v", err)
				}
				if deleted != tt.wantDeleted {
					t.Errorf("Delete() deleted = %v, want %v", deleted, tt.wantDeleted)
				}
				// The caller gets the sandbox as it was before the delete.
				if diff := cmp.Diff(fromBatchSandbox(before), out); diff != "" {
					t.Errorf("Delete() returned (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tt.wantRemaining, storedBatchSandboxes(t, backend)); diff != "" {
				t.Errorf("BatchSandboxes left (-want +got):\n%s", diff)
			}
			if len(tt.wantRemaining) == 0 {
				return
			}
			after := &controlv1alpha1.BatchSandbox{}
			if err := backend.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "demo"}, after); err != nil {
				t.Fatal(err)
			}
			if got := after.DeletionTimestamp != nil; got != tt.wantTerminating {
				t.Errorf("BatchSandbox being deleted = %v, want %v", got, tt.wantTerminating)
			}
		})
	}
}

func TestDeleteCollection(t *testing.T) {
	held := batchSandbox("ns", "held", map[string]string{"team": "a"})
	held.Finalizers = []string{"example.com/keep"}
	stored := func() []client.Object {
		return []client.Object{
			batchSandbox("ns", "a", map[string]string{"team": "a"}),
			batchSandbox("ns", "b", map[string]string{"team": "b"}),
			batchSandbox("ns", "c", map[string]string{"team": "a"}),
			held.DeepCopy(),
			batchSandbox("other", "d", map[string]string{"team": "a"}),
		}
	}
	teamA := &metainternalversion.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"team": "a"})}
	refuseC := func(_ context.Context, obj runtime.Object) error {
		if obj.(*sandboxv1alpha1.Sandbox).Name == "c" {
			return apierrors.NewForbidden(sandboxResource, "c", errors.New("admission says no"))
		}
		return nil
	}
	tests := []struct {
		name     string
		list     *metainternalversion.ListOptions
		options  *metav1.DeleteOptions
		validate rest.ValidateObjectFunc
		wantErr  *apitesting.APIErr
		// wantReturned: the sandboxes returned; wantRemaining: the BatchSandboxes left.
		wantReturned  []string
		wantRemaining []string
	}{
		{
			name:          "the namespace's selected sandboxes",
			list:          teamA,
			wantReturned:  []string{"a", "c", "held"},
			wantRemaining: []string{"ns/b", "ns/held", "other/d"},
		},
		{
			name:          "nil options: all of the namespace",
			wantReturned:  []string{"a", "b", "c", "held"},
			wantRemaining: []string{"ns/held", "other/d"},
		},
		{
			name:          "dry run deletes nothing",
			list:          teamA,
			options:       &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}},
			wantReturned:  []string{"a", "c", "held"},
			wantRemaining: []string{"ns/a", "ns/b", "ns/c", "ns/held", "other/d"},
		},
		{
			name:          "a refusal stops it",
			list:          teamA,
			validate:      refuseC,
			wantErr:       &apitesting.APIErr{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Group: "sandbox.kube-sandbox.io", Kind: "sandboxes", Name: "c"},
			wantRemaining: []string{"ns/b", "ns/c", "ns/held", "other/d"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, backend := newREST(t, stored()...)
			out, err := r.DeleteCollection(nsContext("ns"), tt.validate, tt.options, tt.list)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("DeleteCollection() = %v, want an error", out)
				}
				if diff := cmp.Diff(*tt.wantErr, apitesting.APIErrOf(t, err)); diff != "" {
					t.Errorf("DeleteCollection() error %v (-want +got):\n%s", err, diff)
				}
			} else {
				if err != nil {
					t.Fatalf("DeleteCollection() error: %v", err)
				}
				list, ok := out.(*sandboxv1alpha1.SandboxList)
				if !ok {
					t.Fatalf("DeleteCollection() = %T, want *SandboxList", out)
				}
				var names []string
				for _, sbx := range list.Items {
					names = append(names, sbx.Name)
				}
				sort.Strings(names)
				if diff := cmp.Diff(tt.wantReturned, names); diff != "" {
					t.Errorf("DeleteCollection() returned (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tt.wantRemaining, storedBatchSandboxes(t, backend)); diff != "" {
				t.Errorf("BatchSandboxes left (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDeleteCollectionPages: a deletecollection reads page after page, following the
// kube-apiserver's continue tokens, and a limit of its own deletes one page.
func TestDeleteCollectionPages(t *testing.T) {
	defer func(n int64) { deleteCollectionPageSize = n }(deleteCollectionPageSize)
	deleteCollectionPageSize = 2
	names := []string{"a", "b", "c", "d", "e"}
	build := func() (*REST, client.WithWatch, *int) {
		var objs []client.Object
		for _, n := range names {
			objs = append(objs, batchSandbox("ns", n, nil))
		}
		// a stays, terminating: a list from the start again would return it again.
		objs[0].SetFinalizers([]string{"example.com/keep"})
		lists := 0
		s := runtime.NewScheme()
		if err := controlv1alpha1.AddToScheme(s); err != nil {
			t.Fatal(err)
		}
		// The fake client ignores limit and continue; this pages as the kube-apiserver does,
		// the continue token being the last name of the page.
		backend := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				lists++
				o := (&client.ListOptions{}).ApplyOptions(opts)
				if err := c.List(ctx, list, opts...); err != nil || o.Limit == 0 {
					return err
				}
				bl := list.(*controlv1alpha1.BatchSandboxList)
				sort.Slice(bl.Items, func(i, j int) bool { return bl.Items[i].Name < bl.Items[j].Name })
				var page []controlv1alpha1.BatchSandbox
				for _, bs := range bl.Items {
					if bs.Name > o.Continue {
						page = append(page, bs)
					}
				}
				bl.Continue = ""
				if int64(len(page)) > o.Limit {
					page = page[:o.Limit]
					bl.Continue = page[len(page)-1].Name
				}
				bl.Items = page
				return nil
			},
		}).Build()
		return NewREST(backend, Limits{}, testingclock.NewFakePassiveClock(time.Unix(1700000000, 0)), nil), backend, &lists
	}
	returned := func(out runtime.Object) []string {
		var got []string
		for _, sbx := range out.(*sandboxv1alpha1.SandboxList).Items {
			got = append(got, sbx.Name)
		}
		return got
	}

	r, backend, lists := build()
	out, err := r.DeleteCollection(nsContext("ns"), nil, nil, nil)
	if err != nil {
		t.Fatalf("DeleteCollection(): %v", err)
	}
	if diff := cmp.Diff(names, returned(out)); diff != "" {
		t.Errorf("DeleteCollection() returned (-want +got):\n%s", diff)
	}
	if out.(*sandboxv1alpha1.SandboxList).Continue != "" {
		t.Errorf("DeleteCollection() of every page returned a continue token")
	}
	if *lists != 3 {
		t.Errorf("%d lists for %d sandboxes in pages of 2, want 3", *lists, len(names))
	}
	if diff := cmp.Diff([]string{"ns/a"}, storedBatchSandboxes(t, backend)); diff != "" {
		t.Errorf("BatchSandboxes left (-want +got):\n%s", diff)
	}

	r, backend, _ = build()
	out, err = r.DeleteCollection(nsContext("ns"), nil, nil, &metainternalversion.ListOptions{Limit: 2})
	if err != nil {
		t.Fatalf("DeleteCollection(limit 2): %v", err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, returned(out)); diff != "" {
		t.Errorf("DeleteCollection(limit 2) returned (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ns/a", "ns/c", "ns/d", "ns/e"}, storedBatchSandboxes(t, backend)); diff != "" {
		t.Errorf("BatchSandboxes left (-want +got):\n%s", diff)
	}
}

func TestDeleteConflictNamesSandboxes(t *testing.T) {
	r, _ := newREST(t, batchSandbox("ns", "demo", nil))
	_, _, err := r.Delete(nsContext("ns"), "demo", nil, &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: ptr.To("12345")}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("Delete() error = %v, want Conflict", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, `Operation cannot be fulfilled on sandboxes.sandbox.kube-sandbox.io "demo": `) {
		t.Errorf("Delete() message %q, want it to name the sandbox", msg)
	}
}

func TestRESTMetadata(t *testing.T) {
	r := NewREST(nil, Limits{}, nil, nil)
	type metadata struct {
		New, NewList    runtime.Object
		NamespaceScoped bool
		Singular        string
		ShortNames      []string
		Categories      []string
	}
	want := metadata{
		New:             &sandboxv1alpha1.Sandbox{},
		NewList:         &sandboxv1alpha1.SandboxList{},
		NamespaceScoped: true,
		Singular:        "sandbox",
		ShortNames:      []string{"sbx"},
		Categories:      []string{"kube-sandbox"},
	}
	got := metadata{r.New(), r.NewList(), r.NamespaceScoped(), r.GetSingularName(), r.ShortNames(), r.Categories()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("REST metadata (-want +got):\n%s", diff)
	}
}

// TestUpdatePaused: spec.paused reaches the BatchSandbox; with PauseStopsExpiry a resume moves
// the expiry forward by the time the sandbox was Paused, and without it keeps it.
func TestUpdatePaused(t *testing.T) {
	now := time.Unix(1700000000, 0)
	expiry := metav1.NewTime(now.Add(time.Hour))
	for _, stops := range []bool{false, true} {
		t.Run(fmt.Sprintf("pause-stops-expiry=%v", stops), func(t *testing.T) {
			bs := batchSandbox("ns", "s", nil)
			bs.Spec.ExpireTime = &expiry
			r, backend := newREST(t, bs)
			r.limits.PauseStopsExpiry = stops
			ctx := genericapirequest.WithUser(nsContext("ns"), &user.DefaultInfo{Name: "alice"})
			set := func(paused bool) *controlv1alpha1.BatchSandbox {
				t.Helper()
				obj, err := r.Get(ctx, "s", &metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				sbx := obj.(*sandboxv1alpha1.Sandbox)
				sbx.Spec.Paused = paused
				if _, _, err := r.Update(ctx, "s", rest.DefaultUpdatedObjectInfo(sbx), nil, nil, false, &metav1.UpdateOptions{}); err != nil {
					t.Fatalf("update paused=%v: %v", paused, err)
				}
				got := &controlv1alpha1.BatchSandbox{}
				if err := backend.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "s"}, got); err != nil {
					t.Fatal(err)
				}
				if got.Spec.Paused != paused {
					t.Fatalf("the BatchSandbox has paused=%v, want %v", got.Spec.Paused, paused)
				}
				return got
			}
			paused := set(true)
			// The controller: Paused for the last 10 minutes.
			paused.Status.Phase = controlv1alpha1.PhasePaused
			paused.Status.Conditions = []metav1.Condition{{Type: controlv1alpha1.ConditionPaused, Status: metav1.ConditionTrue,
				Reason: controlv1alpha1.ReasonPaused, LastTransitionTime: metav1.NewTime(now.Add(-10 * time.Minute))}}
			if err := backend.Update(context.Background(), paused); err != nil {
				t.Fatal(err)
			}
			resumed := set(false)
			want := expiry.Time
			if stops {
				want = want.Add(10 * time.Minute)
			}
			if !resumed.Spec.ExpireTime.Time.Equal(want) {
				t.Errorf("expiry after the resume = %s, want %s", resumed.Spec.ExpireTime.Time, want)
			}
		})
	}
}
