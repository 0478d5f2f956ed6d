package sandboxpod

import (
	"encoding/json"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// TemplateRevision is the revision of a pool's template: a short hash of its JSON and of
// InjectionVersion, safe as a label value (as pod-template-hash is for ReplicaSets). Equal
// templates have equal revisions whichever process computes them, so the controller of
// sandboxes and that of pools agree on which pods are current; a controller that wires pods
// differently replaces its predecessor's idle pods.
func TemplateRevision(tmpl *corev1.PodTemplateSpec) string {
	data, err := json.Marshal(tmpl)
	if err != nil {
		// A PodTemplateSpec always marshals; be safe anyway.
		return "invalid"
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(InjectionVersion))
	_, _ = h.Write(data)
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}
