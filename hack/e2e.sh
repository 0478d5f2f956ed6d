#!/usr/bin/env bash
# e2e.sh (make test-e2e): end-to-end tests on the real local cluster. Brings the cluster up
# (make up) when it is not, installs the kube-sandbox just built, runs test/e2e, and stops
# the cluster again if it started it (E2E_KEEP_CLUSTER=1 keeps it).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=e2e
need_root
cd "$ROOT"

started=0
if ! KUBECONFIG=$ADMIN_KUBECONFIG kubectl get --raw /readyz >/dev/null 2>&1; then
	started=1
fi
stop() {
	if [ $started = 1 ] && [ "${E2E_KEEP_CLUSTER:-0}" != 1 ]; then
		log "stopping the cluster this run started"
		"$ROOT/hack/cluster/down.sh" | sed 's/^/  /'
	fi
}
trap stop EXIT

make -s build
# On a cluster that is already up, up.sh keeps it and installs what was just built.
"$ROOT/hack/up.sh"

log "go test ./test/e2e"
set +e
KUBECONFIG=$ADMIN_KUBECONFIG KUBE_SANDBOX_BIN=$BIN SANDBOX_IMAGE_PYTHON=$SANDBOX_IMAGE_PYTHON \
	go test -tags e2e -count=1 -timeout 30m -v ./test/e2e/... 2>&1 | tee "$OUT/e2e.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || die "end-to-end tests failed (log: $OUT/e2e.log)"
