package sandboxpod

import (
	"encoding/json"
	"hash/fnv"
	"strconv"

	"k8s.io/apimachinery/pkg/util/rand"

	controlv1alpha1 "github.com/kube-sandbox/kube-sandbox/controller/apis/control/v1alpha1"
)

// PoolRevision is the revision of a pool's pods: a short hash of its template's JSON, its
// podSecurity and InjectionVersion, safe as a label value (as pod-template-hash is for
// ReplicaSets). Equal pools have equal revisions whichever process computes them, so the
// controller of sandboxes and that of pools agree on which pods are current; a controller that
// wires pods differently replaces its predecessor's idle pods, and so does a pool whose
// podSecurity changed. runtimeClass is the platform's default (DefaultRuntimeClass): when the
// template names no class, a change of the default replaces the idle pods made under the old
// one; "" leaves the revisions of pools as they were before the platform had a default.
func PoolRevision(pool *controlv1alpha1.Pool, runtimeClass string) string {
	data, err := json.Marshal(&pool.Spec.Template)
	if err != nil {
		// A PodTemplateSpec always marshals; be safe anyway.
		return "invalid"
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(InjectionVersion))
	_, _ = h.Write([]byte(pool.Spec.PodSecurity))
	_, _ = h.Write(data)
	if rc := pool.Spec.Template.Spec.RuntimeClassName; runtimeClass != "" && (rc == nil || *rc == "") {
		_, _ = h.Write([]byte("\x00runtimeClass=" + runtimeClass))
	}
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}
