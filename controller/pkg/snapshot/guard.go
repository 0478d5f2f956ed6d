package snapshot

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// DefaultPolicyConfigMap is the ConfigMap (in sandbox-controller's namespace) from which the
	// ValidatingAdmissionPolicy PolicyName reads the snapshot registry, key PolicyRegistryKey.
	DefaultPolicyConfigMap = "kube-sandbox-snapshot-images"
	// PolicyName is the ValidatingAdmissionPolicy of artifacts/pause that refuses every pod
	// naming an image of the registry but sandbox-controller's.
	PolicyName = "kube-sandbox-snapshot-images"
	// PolicyRegistryKey is the ConfigMap's key that names the registry (host:port).
	PolicyRegistryKey = "registry"
)

// guardedFor is how long a check that found the registry guarded is trusted: the ConfigMap is
// read at most once in this long, while sandboxes start to pause.
const guardedFor = 30 * time.Second

// PolicyGuard tells whether the snapshots of Registry will be kept to their sandboxes' pods.
// The nodes pull from the registry with credentials of their own, so any pod naming a snapshot
// would get it; the policy PolicyName refuses such pods, for the registry its ConfigMap names.
// A sandbox does not start to pause unless that is this registry: a policy that names none, or
// another, would guard nothing.
type PolicyGuard struct {
	// Reader reads the ConfigMap (uncached: it is read only when a pause starts).
	Reader client.Reader
	// Namespace holds the ConfigMap DefaultPolicyConfigMap.
	Namespace string
	Registry  Registry

	mu       sync.Mutex
	lastGood time.Time
	now      func() time.Time
}

// Guarded returns nil when the policy's ConfigMap names this registry, and otherwise an error
// that says what to fix.
func (g *PolicyGuard) Guarded(ctx context.Context) error {
	now := time.Now
	if g.now != nil {
		now = g.now
	}
	g.mu.Lock()
	fresh := !g.lastGood.IsZero() && now().Sub(g.lastGood) < guardedFor
	g.mu.Unlock()
	if fresh {
		return nil
	}
	name := DefaultPolicyConfigMap
	cm := &corev1.ConfigMap{}
	err := g.Reader.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("the ConfigMap %s/%s, from which the ValidatingAdmissionPolicy %s reads the snapshot registry, does not exist: "+
			"without it any pod could run this sandbox's snapshots (install artifacts/pause, with its registry set to %s)", g.Namespace, name, PolicyName, g.Registry.Host)
	case err != nil:
		return fmt.Errorf("read the ConfigMap %s/%s of the ValidatingAdmissionPolicy %s: %w", g.Namespace, name, PolicyName, err)
	}
	if got := cm.Data[PolicyRegistryKey]; !strings.EqualFold(got, g.Registry.Host) {
		return fmt.Errorf("the ConfigMap %s/%s names the registry %q for the ValidatingAdmissionPolicy %s, not this one, %q: "+
			"the policy would not keep this sandbox's snapshots to its own pods (set its key %s to %s)", g.Namespace, name, got, PolicyName, g.Registry.Host, PolicyRegistryKey, g.Registry.Host)
	}
	g.mu.Lock()
	g.lastGood = now()
	g.mu.Unlock()
	return nil
}
