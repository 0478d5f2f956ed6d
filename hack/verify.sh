#!/usr/bin/env bash
# verify.sh: fails when the tree is not formatted, vetted, tidy, or when generated code is
# stale. Generated code is regenerated into the tree and compared with git.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=verify
cd "$ROOT"
fail=0

log "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '^hack/tools/') 2>&1 || true)
if [ -n "$unformatted" ]; then echo "not gofmt'ed:"; echo "$unformatted"; fail=1; fi

log "go vet"
go vet ./... || fail=1
go vet -tags e2e ./test/e2e/... || fail=1

log "go mod tidy"
for m in . hack/tools/k8s hack/tools/etcd hack/tools/codegen hack/tools/gvisor hack/tools/gvisor-shim; do
	(cd "$m" && go mod tidy -diff >/dev/null) || { echo "go.mod/go.sum of $m are not tidy: run go mod tidy there"; fail=1; }
done

log "generated code"
# Regenerate and compare with what was there (committed or not): stale means different.
generated=(apiserver/apis controller/apis apiserver/pkg/generated artifacts/base/crds)
snapshot() { find "${generated[@]}" -type f -print0 | sort -z | xargs -0 sha256sum; }
before=$(snapshot)
hack/update-codegen.sh >/dev/null
if [ "$before" != "$(snapshot)" ]; then
	echo "generated code was stale (now regenerated; commit it):"
	diff <(echo "$before") <(snapshot) | grep '^[<>]' | awk '{print $3}' | sort -u
	fail=1
fi

log "shell scripts"
for f in $(git ls-files 'hack/*.sh' 'hack/**/*.sh' '.ci/run'); do bash -n "$f" || fail=1; done

[ $fail = 0 ] && log "ok" || { log "FAILED"; exit 1; }
