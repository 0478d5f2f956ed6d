// Package node is sandbox-node, kube-sandbox's node agent (a DaemonSet on the node's
// network). It serves sandbox-controller and sandbox-apiserver on one mutual-TLS port (the
// wire contract is package nodeapi, and egressapi for egress), and does three things:
//
//   - egress: each sandbox pod's outbound policy, enforced from the node's network namespace
//     (package egress), and the wait port where each sandbox pod's first init container learns
//     that its filter is in force;
//   - snapshots: it commits a sandbox container's writable layer into an OCI image and pushes
//     it to the snapshot registry, so that a paused sandbox can come back from it on any node;
//   - usage: it reads what each pod that serves a sandbox uses of the node (package usage:
//     its cgroup, its writable layers and emptyDirs, its interface and filter) every
//     nodeapi.SampleInterval, and answers nodeapi.StatsPath from the last reads, to
//     sandbox-apiserver (the stats subresource) and sandbox-controller; the same figures are
//     Prometheus series on the metrics port, for scrapers the kube-apiserver authenticates
//     and authorizes.
//
// Snapshots and egress policies are sandbox-controller's alone; usage figures are both
// components'.
//
// A snapshot is what nerdctl's commit does, through containerd's API only (containers,
// images, content, snapshots, diff and leases services, all of which a containerd 1.6 daemon
// serves): find the CRI container of the pod by its labels, diff its active snapshot against
// its parent into a gzip layer in the content store, write a config and a manifest that put
// the layer on top of the container's image, and push them with containerd's registry client,
// the manifest last, so that the tag names either the whole snapshot or nothing. Everything it
// writes to containerd is held by a lease it deletes at the end: the node keeps nothing.
package node
