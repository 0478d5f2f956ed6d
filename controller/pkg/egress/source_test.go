package egress

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kube-sandbox/kube-sandbox/sidecars/egress/egressapi"
)

func TestSourceFailsClosed(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	rec := events.NewFakeRecorder(10)
	s := &Source{Reader: c, Namespace: "kube-sandbox-system", Recorder: rec}

	p, _, err := s.Current(ctx)
	if err != nil || p.DefaultPolicy.EffectiveDefault() != egressapi.ActionDeny || len(p.AlwaysDeny) == 0 {
		t.Fatalf("without a ConfigMap: %+v (%v), want the built-in deny-all", p, err)
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: DefaultConfigMap, Namespace: "kube-sandbox-system"},
		Data: map[string]string{KeyDefaultPolicy: "defaultAction: Allow\n"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := s.Current(ctx); p.DefaultPolicy.EffectiveDefault() != egressapi.ActionAllow {
		t.Fatalf("the ConfigMap's default is not used: %+v", p.DefaultPolicy)
	}

	cm.Data[KeyAlwaysDeny] = "- example.com\n" // names are not ranges
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if p, _, _ := s.Current(ctx); p.DefaultPolicy.EffectiveDefault() != egressapi.ActionAllow || len(p.AlwaysDeny) != len(builtinAlwaysDeny) {
			t.Fatalf("an invalid ConfigMap replaced the last valid policy: %+v", p)
		}
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, ReasonInvalidPolicy) || !strings.Contains(e, "data.alwaysDeny[0]") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no Event for the invalid ConfigMap")
	}
	select {
	case e := <-rec.Events:
		t.Errorf("a second Event for the same version: %q", e)
	default:
	}
	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := s.Current(ctx); p.DefaultPolicy.EffectiveDefault() != egressapi.ActionDeny {
		t.Errorf("after the ConfigMap was deleted: %+v", p.DefaultPolicy)
	}
}
