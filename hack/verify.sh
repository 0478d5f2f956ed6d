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

log "import rules"
# Which part may import which (test/layout): the plugin never the controller, no sidecar
# another's implementation, the shared packages neither binary.
go test -count=1 ./test/layout/ >/dev/null || { go test -count=1 ./test/layout/ || true; fail=1; }

log "go mod tidy"
for m in . hack/tools/k8s hack/tools/etcd hack/tools/codegen hack/tools/gvisor hack/tools/gvisor-shim hack/tools/registry; do
	(cd "$m" && go mod tidy -diff >/dev/null) || { echo "go.mod/go.sum of $m are not tidy: run go mod tidy there"; fail=1; }
done

log "manifests"
# Every kustomization renders; the cert-manager overlay's patches still hit what they mean to.
for k in artifacts/base artifacts/local artifacts/cert-manager; do
	kubectl kustomize "$k" >/dev/null || { echo "$k does not render"; fail=1; }
done
cm=$(kubectl kustomize artifacts/cert-manager 2>/dev/null || true)
grep -q -- '- --manage-pki=false' <<<"$cm" && ! grep -q -- '--manage-pki=true' <<<"$cm" &&
	grep -q 'cert-manager.io/inject-ca-from: kube-sandbox-system/sandbox-apiserver-tls' <<<"$cm" ||
	{ echo "artifacts/cert-manager no longer turns off the controller's PKI or injects the APIService's caBundle"; fail=1; }
# The gVisor-default component, on the base, gives both components the same flag.
mkdir -p "$ROOT/_output"
gv=$(mktemp -d "$ROOT/_output/verify-gvisor.XXXXXX")
printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s]\ncomponents: [%s]\n' \
	"$(realpath --relative-to="$gv" "$ROOT/artifacts/base")" "$(realpath --relative-to="$gv" "$ROOT/artifacts/gvisor-default")" >"$gv/kustomization.yaml"
[ "$(kubectl kustomize "$gv" 2>/dev/null | grep -c -- '- --default-runtime-class=gvisor')" = 2 ] ||
	{ echo "artifacts/gvisor-default does not give sandbox-apiserver and sandbox-controller --default-runtime-class=gvisor"; fail=1; }
rm -rf "$gv"

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
