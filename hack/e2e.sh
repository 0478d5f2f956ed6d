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
# diagnostics keeps what the cluster's parts said, before a shutdown takes it away: each pod of
# kube-sandbox-system (and the container before its last restart) and the cluster's processes.
diagnostics() {
	local d=$OUT/diagnostics
	rm -rf "$d" && mkdir -p "$d"
	cp "$RUN"/logs/*.log "$d/" 2>/dev/null
	local pod
	for pod in $(KUBECONFIG=$ADMIN_KUBECONFIG kubectl -n kube-sandbox-system get pods -o name 2>/dev/null); do
		KUBECONFIG=$ADMIN_KUBECONFIG kubectl -n kube-sandbox-system logs "$pod" --all-containers --timestamps >"$d/${pod#pod/}.log" 2>&1
		KUBECONFIG=$ADMIN_KUBECONFIG kubectl -n kube-sandbox-system logs "$pod" --all-containers --timestamps --previous >"$d/${pod#pod/}.previous.log" 2>/dev/null ||
			rm -f "$d/${pod#pod/}.previous.log"
	done
	KUBECONFIG=$ADMIN_KUBECONFIG kubectl get events -A --sort-by=.lastTimestamp >"$d/events.txt" 2>&1
}

# failed_tests prints the output of each failed top-level test: from its "=== RUN" to its
# "--- FAIL", with the lines of its subtests and of its paused and continued runs (go test -v
# interleaves parallel tests' output under "=== NAME" and "=== CONT" lines).
failed_tests() {
	awk '
	/^=== (RUN|NAME|CONT|PAUSE)/ { split($3, n, "/"); cur = n[1] }
	/^--- FAIL: / { split($3, n, "/"); failed[n[1]] = 1 }
	/^(FAIL|ok|PASS)/ { cur = "" }
	cur != "" { out[cur] = out[cur] $0 "\n"; if (++lines[cur] > 80) { sub(/^[^\n]*\n/, "", out[cur]) } }
	END { for (t in failed) if (t in out) printf "%s", out[t] }
	' "$1"
}

stop() {
	local rc=$?
	set +e # the summary is best effort
	if [ "$rc" != 0 ] && [ $stage = test ]; then
		diagnostics
	fi
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
			echo "---- the components' errors (all they logged: $OUT/diagnostics) ----"
			# klog's error lines, and panics, of kube-sandbox's pods: the cause of a failure
			# is often there rather than in the test's own words.
			grep -hE '^[0-9T:.Z-]+ (E[0-9]{4} |panic:)' "$OUT"/diagnostics/sandbox-*.log 2>/dev/null | grep -v 'Error on socket receive' | sort | tail -40 | cut -c1-400
			# k8s.io/apiserver traces a request that took long, step by step: the kube-apiserver's
			# and sandbox-apiserver's say where a timed-out one waited.
			echo "---- slow requests, as the API servers traced them ----"
			grep -h 'Trace\[' "$OUT"/diagnostics/*.log 2>/dev/null | tail -40 | cut -c1-400
			echo "---- the failed tests (whole log: $OUT/e2e.log) ----"
			failed_tests "$OUT/e2e.log" | tail -200 | cut -c1-600
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
	go test -tags e2e -count=1 -timeout 40m -v ./test/e2e/... 2>&1 | tee "$OUT/e2e.log"
