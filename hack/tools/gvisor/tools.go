//go:build tools

// Package tools pins runsc, gVisor's OCI runtime (the go branch of gvisor.dev/gvisor, which
// builds with the go command), for the local cluster's gvisor RuntimeClass
// (hack/build-cluster.sh). Its containerd shim comes from ../gvisor-shim.
package tools

import _ "gvisor.dev/gvisor/runsc"
