// Package snapshot is what sandbox-controller needs to pause and resume sandboxes: where a
// replica's snapshot goes in the registry (naming), the client of the node agent that takes it
// (sandbox-node, over mTLS), the registry client that deletes snapshots, and the Runner
// that takes snapshots in the background and reports their end as events.
package snapshot

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultRepositoryPrefix is where in the registry snapshots go, under which each sandbox has
// a repository of its own: PREFIX/NAMESPACE/NAME.
const DefaultRepositoryPrefix = "kube-sandbox/snapshots"

// Registry is the snapshot registry: host[:port] and the repository prefix.
type Registry struct {
	Host   string
	Prefix string
}

// Configured reports whether there is a registry at all.
func (r Registry) Configured() bool { return r.Host != "" }

// Repository of a sandbox's snapshots, with the registry's host: HOST/PREFIX/NAMESPACE/NAME.
// Namespaces and sandbox names are DNS labels, which repository path components accept.
func (r Registry) Repository(namespace, name string) string {
	prefix := strings.Trim(r.Prefix, "/")
	if prefix == "" {
		prefix = DefaultRepositoryPrefix
	}
	return r.Host + "/" + prefix + "/" + namespace + "/" + name
}

// RepositoryPath is Repository without the host, as the registry's API names it.
func (r Registry) RepositoryPath(namespace, name string) string {
	return strings.TrimPrefix(r.Repository(namespace, name), r.Host+"/")
}

// Tag of replica's snapshot taken from the pod podUID: the sandbox's UID first (TagPrefix),
// so that a sandbox deleted and made again under the same name never sees or deletes the
// other's snapshots, and what is left of a sandbox can be found by its UID; the pod's UID
// last, so that each pause of a replica pushes a tag of its own (a pod is snapshotted once:
// it is deleted after). A UID is 36 characters; a tag may have 128.
func Tag(sandboxUID types.UID, replica int32, podUID types.UID) string {
	return fmt.Sprintf("%sr%d-%s", TagPrefix(sandboxUID), replica, podUID)
}

// TagPrefix is what every tag of the sandbox's snapshots begins with.
func TagPrefix(sandboxUID types.UID) string {
	return "s-" + string(sandboxUID) + "-"
}

// ByDigest is the image reference of repository (HOST/PATH, maybe with a :TAG) at digest.
func ByDigest(image, digest string) string {
	repo := image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repo = image[:i]
	}
	return repo + "@" + digest
}
