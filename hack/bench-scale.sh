#!/usr/bin/env bash
# bench-scale.sh (make bench-scale): kube-sandbox at scale on its own control plane (a real etcd
# and kube-apiserver) with simulated nodes; no cluster needed. Prints a markdown table (also
# saved to _output/bench-scale.md). Figures, not assertions; it fails only when the storm phase
# finds a pod given twice or something leaked. Flags pass through, e.g.
#   make bench-scale ARGS='-scale-sandboxes 2000 -scale-profile _output/profiles'
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=bench-scale
cd "$ROOT"
"$ROOT/hack/build-cluster.sh" kube-apiserver etcd
# Thousands of execd servers and watches in one process.
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)"
log "running test/bench -only scale"
go run ./test/bench -only scale "$@" | tee "$OUT/bench-scale.md"
