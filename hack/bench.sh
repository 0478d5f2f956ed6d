#!/usr/bin/env bash
# bench.sh (make bench): benchmarks on the real local cluster, brought up (make up) when it is
# not; prints a markdown table (also saved to _output/bench.md). Figures, not assertions.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=bench
need_root
cd "$ROOT"
"$ROOT/hack/up.sh" >/dev/null
# The egress rows run `kubectl sandbox` itself: the plugin just built comes first on PATH.
export PATH="$BIN:$PATH"
log "running test/bench (exec round trips, exec throughput, files vs kubectl cp, warm pools)"
KUBECONFIG=$ADMIN_KUBECONFIG go run ./test/bench "$@" | tee "$OUT/bench.md"
