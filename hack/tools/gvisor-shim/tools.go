//go:build tools

// Package tools pins containerd-shim-runsc-v1, gVisor's containerd shim, for the local
// cluster's runsc runtime (hack/build-cluster.sh). It is older than runsc (../gvisor): the last
// shims built on containerd 1.x's shim library. Later ones answer containerd with the bootstrap
// JSON of containerd 2, which the local cluster's containerd 1.6 cannot read. The shim drives
// runsc through its command line (create, start, exec, wait, kill, delete), which both speak.
// Not runsc of this commit: its sentry reads goroutine IDs at offsets that today's Go runtime
// has moved, and panics.
package tools

import _ "gvisor.dev/gvisor/shim"
