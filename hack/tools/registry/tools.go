//go:build tools

// Package tools pins the CNCF distribution registry, the local cluster's OCI registry for
// sandbox snapshots (hack/build-cluster.sh builds its cmd/registry; hack/cluster/up.sh runs it).
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
