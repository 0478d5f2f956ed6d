// Package snapshotter is sandbox-snapshotter, the node agent (a DaemonSet) that commits a
// sandbox container's writable layer into an OCI image and pushes it to the snapshot registry,
// so that a paused sandbox can come back from it on any node. sandbox-controller is its only
// client; the wire contract is package snapshotterapi.
//
// A snapshot is what nerdctl's commit does, through containerd's API only (containers,
// images, content, snapshots, diff and leases services, all of which a containerd 1.6 daemon
// serves): find the CRI container of the pod by its labels, diff its active snapshot against
// its parent into a gzip layer in the content store, write a config and a manifest that put
// the layer on top of the container's image, and push them with containerd's registry client,
// the manifest last, so that the tag names either the whole snapshot or nothing. Everything it
// writes to containerd is held by a lease it deletes at the end: the node keeps nothing.
package snapshotter
