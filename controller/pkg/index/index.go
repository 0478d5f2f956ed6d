// Package index registers the cache indexes the controllers share, so that the questions they
// ask on every reconcile and every pod event ("which sandboxes use this pool", "which pods
// does this sandbox have", "which idle pods can this pool give away") are indexed lookups, not
// scans of a namespace that copy every object they find.
package index

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-sandbox/kube-sandbox/controller/apis/control/sandboxpod"
	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

const (
	// PoolRef indexes BatchSandboxes by spec.poolRef.name.
	PoolRef = "spec.poolRef.name"
	// LackingPods indexes the pooled BatchSandboxes that have fewer pods than replicas (and are
	// not being deleted) by pool: those an idle pod that becomes ready is for. During a burst
	// they are the few sandboxes being allocated, of the thousands a pool may serve.
	LackingPods = "pool.lackingPods"
	// PoolExhausted indexes the pooled BatchSandboxes that found their pool without an idle
	// pod (their Ready condition says PoolExhausted; not being deleted) by pool: the demand
	// that makes a pool grow at once.
	PoolExhausted = "pool.exhausted"
	// SandboxPods indexes pods by their BatchSandbox (the LabelBatchSandbox label).
	SandboxPods = "metadata.labels.batchsandbox"
	// PoolPods indexes pods by their pool (the LabelPool label), idle or allocated. Read
	// through Pods.OfPool.
	PoolPods = "metadata.labels.pool"
	// IdlePods indexes the pods a pool can give away now by pool: controlled by a Pool, not
	// allocated (no LabelBatchSandbox) and ready. Read through Pods.Idle.
	IdlePods = "pool.idle"
)

// Field is a field index: Setup registers each of Fields with the manager's cache, and a unit
// test registers them with a fake client (fake.ClientBuilder.WithIndex), so that both answer
// client.MatchingFields alike.
type Field struct {
	Object  client.Object
	Name    string
	Extract client.IndexerFunc
}

// Fields are the field indexes of the controllers.
func Fields() []Field {
	return []Field{
		{Object: &controlv1alpha1.BatchSandbox{}, Name: PoolRef, Extract: sandboxIndex(poolRef)},
		{Object: &controlv1alpha1.BatchSandbox{}, Name: LackingPods, Extract: sandboxIndex(lackingPods)},
		{Object: &controlv1alpha1.BatchSandbox{}, Name: PoolExhausted, Extract: sandboxIndex(poolExhausted)},
		{Object: &corev1.Pod{}, Name: SandboxPods, Extract: podIndex(sandboxOfPod)},
		{Object: &corev1.Pod{}, Name: PoolPods, Extract: podIndex(poolOfPod)},
		{Object: &corev1.Pod{}, Name: IdlePods, Extract: podIndex(idlePoolOfPod)},
	}
}

// Setup registers the indexes with the manager's cache and returns the reader of pool pods
// over them. Call it once, before the controllers start.
func Setup(ctx context.Context, informers Informers) (*Pods, error) {
	pods, err := newPods(ctx, informers)
	if err != nil {
		return nil, err
	}
	for _, f := range Fields() {
		if pods.indexer != nil && (f.Name == IdlePods || f.Name == PoolPods) {
			// Pods reads its own indexes of the same pods: a second one would only cost.
			continue
		}
		if err := informers.IndexField(ctx, f.Object, f.Name, f.Extract); err != nil {
			return nil, fmt.Errorf("index %s: %w", f.Name, err)
		}
	}
	return pods, nil
}

// sandboxIndex and podIndex adapt a function of the typed object to a client.IndexerFunc; an
// empty key indexes nothing.
func sandboxIndex(key func(*controlv1alpha1.BatchSandbox) string) client.IndexerFunc {
	return func(obj client.Object) []string {
		bs, ok := obj.(*controlv1alpha1.BatchSandbox)
		if !ok {
			return nil
		}
		if k := key(bs); k != "" {
			return []string{k}
		}
		return nil
	}
}

func podIndex(key func(*corev1.Pod) string) client.IndexerFunc {
	return func(obj client.Object) []string {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return nil
		}
		if k := key(p); k != "" {
			return []string{k}
		}
		return nil
	}
}

func poolRef(bs *controlv1alpha1.BatchSandbox) string {
	if bs.Spec.PoolRef == nil {
		return ""
	}
	return bs.Spec.PoolRef.Name
}

func lackingPods(bs *controlv1alpha1.BatchSandbox) string {
	want := int32(1)
	if bs.Spec.Replicas != nil {
		want = *bs.Spec.Replicas
	}
	if bs.DeletionTimestamp != nil || bs.Status.Replicas >= want {
		return ""
	}
	return poolRef(bs)
}

func poolExhausted(bs *controlv1alpha1.BatchSandbox) string {
	if bs.DeletionTimestamp != nil || !Exhausted(bs) {
		return ""
	}
	return poolRef(bs)
}

// Exhausted reports whether a sandbox found its pool without an idle pod: its Ready condition
// says PoolExhausted.
func Exhausted(bs *controlv1alpha1.BatchSandbox) bool {
	c := meta.FindStatusCondition(bs.Status.Conditions, controlv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controlv1alpha1.ReasonPoolExhausted
}

func sandboxOfPod(p *corev1.Pod) string { return p.Labels[controlv1alpha1.LabelBatchSandbox] }

func poolOfPod(p *corev1.Pod) string { return p.Labels[controlv1alpha1.LabelPool] }

// idlePoolOfPod is the pool that controls an idle, ready pod. The key is the controller's
// name, not the pool label, which an allocated pod keeps (the pool counts it as allocated);
// callers still check the controller's UID, for a pod of an earlier pool of the same name.
func idlePoolOfPod(p *corev1.Pod) string {
	if _, allocated := p.Labels[controlv1alpha1.LabelBatchSandbox]; allocated || !sandboxpod.Ready(p) {
		return ""
	}
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil || ref.Kind != "Pool" {
		return ""
	}
	// By group, not version: pods outlive a change of the API's version.
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != controlv1alpha1.SchemeGroupVersion.Group {
		return ""
	}
	return ref.Name
}

// SandboxesOfPool lists the BatchSandboxes of namespace that use pool. They are the cache's
// own objects, not copies: callers only read them.
func SandboxesOfPool(ctx context.Context, c client.Reader, namespace, pool string) ([]controlv1alpha1.BatchSandbox, error) {
	return sandboxesBy(ctx, c, namespace, PoolRef, pool)
}

// SandboxesLackingPods lists the BatchSandboxes of namespace that use pool and have fewer pods
// than replicas (LackingPods), from the cache, read-only. It runs on every event of an idle
// pod that is ready: the index makes it a lookup of the few sandboxes being allocated, where a
// list of the pool's sandboxes would copy thousands each time.
func SandboxesLackingPods(ctx context.Context, c client.Reader, namespace, pool string) ([]controlv1alpha1.BatchSandbox, error) {
	return sandboxesBy(ctx, c, namespace, LackingPods, pool)
}

// SandboxesExhausted lists the BatchSandboxes of namespace that found pool without an idle pod
// (PoolExhausted), from the cache, read-only; a pool reconciles on every event of its pods.
func SandboxesExhausted(ctx context.Context, c client.Reader, namespace, pool string) ([]controlv1alpha1.BatchSandbox, error) {
	return sandboxesBy(ctx, c, namespace, PoolExhausted, pool)
}

func sandboxesBy(ctx context.Context, c client.Reader, namespace, field, value string) ([]controlv1alpha1.BatchSandbox, error) {
	list := &controlv1alpha1.BatchSandboxList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{field: value}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return list.Items, nil
}
