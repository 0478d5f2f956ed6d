package snapshot

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestPolicyGuard(t *testing.T) {
	configMap := func(registry string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-sandbox-system", Name: DefaultPolicyConfigMap},
			Data: map[string]string{PolicyRegistryKey: registry}}
	}
	tests := []struct {
		name    string
		objects []client.Object
		getErr  error
		wantErr string
	}{
		{name: "names this registry", objects: []client.Object{configMap("10.250.0.1:5000")}},
		{name: "whatever the case", objects: []client.Object{configMap("Registry.Example:5000")}},
		{name: "no ConfigMap", wantErr: "does not exist"},
		{name: "no registry named", objects: []client.Object{configMap("")}, wantErr: `names the registry "" for the ValidatingAdmissionPolicy kube-sandbox-snapshot-images, not this one`},
		{name: "another registry", objects: []client.Object{configMap("10.250.0.1:5001")}, wantErr: `names the registry "10.250.0.1:5001"`},
		{name: "cannot read", getErr: errors.New("connection refused"), wantErr: "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := "10.250.0.1:5000"
			if tt.name == "whatever the case" {
				host = "registry.example:5000"
			}
			scheme := runtime.NewScheme()
			_ = corev1.AddToScheme(scheme)
			reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tt.objects...).
				WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if tt.getErr != nil {
						return tt.getErr
					}
					return c.Get(ctx, key, obj, opts...)
				}}).Build()
			g := &PolicyGuard{Reader: reader, Namespace: "kube-sandbox-system", Registry: Registry{Host: host}}
			err := g.Guarded(context.Background())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Guarded = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestPolicyGuardTrustsForAWhile: a check that passed is trusted for guardedFor, then made
// again; one that failed is made again at once.
func TestPolicyGuardTrustsForAWhile(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	gets := 0
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: DefaultPolicyConfigMap}, Data: map[string]string{PolicyRegistryKey: "r:5000"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cm).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	now := time.Unix(1000, 0)
	g := &PolicyGuard{Reader: c, Namespace: "ns", Registry: Registry{Host: "r:5000"}, now: func() time.Time { return now }}
	for range 3 {
		if err := g.Guarded(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if gets != 1 {
		t.Errorf("%d reads for three checks within %s, want 1", gets, guardedFor)
	}
	now = now.Add(guardedFor)
	cm.Data[PolicyRegistryKey] = "other:5000"
	if err := c.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	if err := g.Guarded(context.Background()); err == nil {
		t.Fatal("a changed ConfigMap was not read again after the trust ran out")
	}
	if err := g.Guarded(context.Background()); err == nil || gets != 3 {
		t.Errorf("a failed check: %v after %d reads, want it made again", err, gets)
	}
}
