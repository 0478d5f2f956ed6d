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
# stage is the step under way, for the summary a failure ends with: CI shows only the output's
# last lines, so the cause must come after the cluster's shutdown, not before it.
stage=build
stop() {
	local rc=$?
	set +e # the summary is best effort
	if [ $started = 1 ] && [ "${E2E_KEEP_CLUSTER:-0}" != 1 ]; then
		log "stopping the cluster this run started (log: $OUT/down.log)"
		"$ROOT/hack/cluster/down.sh" >"$OUT/down.log" 2>&1 || { tail -5 "$OUT/down.log"; log "down.sh failed"; }
	fi
	if [ "$rc" != 0 ]; then
		case $stage in
		up)
			echo "---- make up failed: the last lines of $OUT/up.log ----"
			tail -40 "$OUT/up.log"
			;;
		test)
			echo "---- the failed tests (whole log: $OUT/e2e.log) ----"
			grep -E -A12 -- '^\s*--- FAIL' "$OUT/e2e.log" | head -150
			grep -E '^(FAIL|ok|panic:)' "$OUT/e2e.log"
			;;
		esac
		log "end-to-end tests failed at the $stage step"
	fi
	exit "$rc"
}
trap stop EXIT

make -s build
# On a cluster that is already up, up.sh keeps it and installs what was just built.
stage=up
"$ROOT/hack/up.sh" 2>&1 | tee "$OUT/up.log"

stage=test
log "go test ./test/e2e"
KUBECONFIG=$ADMIN_KUBECONFIG KUBE_SANDBOX_BIN=$BIN SANDBOX_IMAGE_PYTHON=$SANDBOX_IMAGE_PYTHON \
	go test -tags e2e -count=1 -timeout 30m -v ./test/e2e/... 2>&1 | tee "$OUT/e2e.log"
