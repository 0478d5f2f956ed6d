#!/usr/bin/env bash
# update-codegen.sh: regenerates everything generated in the tree (never edit those files by hand):
#   - deepcopy for both API packages (controller-gen object)
#   - the CRD manifests in artifacts/base/crds (controller-gen crd)
#   - OpenAPI definitions and model names for sandbox-apiserver (openapi-gen)
#   - the typed clientset of sandbox.kube-sandbox.io (client-gen)
# The generators are pinned by hack/tools/codegen/go.mod.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=codegen
cd "$ROOT"
MOD=github.com/kube-sandbox/kube-sandbox
BOILER=$ROOT/hack/boilerplate.go.txt
TOOLBIN=$OUT/tools/bin
mkdir -p "$TOOLBIN"
# Built once into _output (go build caches); run from the project root so the generators
# resolve our packages in the root module.
go -C "$ROOT/hack/tools/codegen" build -o "$TOOLBIN/" \
	sigs.k8s.io/controller-tools/cmd/controller-gen k8s.io/kube-openapi/cmd/openapi-gen k8s.io/code-generator/cmd/client-gen
tool() { "$TOOLBIN/$1" "${@:2}"; }

log "deepcopy"
tool controller-gen object:headerFile="$BOILER" paths="$ROOT/controller/apis/..." paths="$ROOT/apiserver/apis/..."

log "CRDs"
# maxDescLen=0: the embedded PodTemplateSpec would otherwise make the CRD several hundred KiB.
tool controller-gen crd:maxDescLen=0,generateEmbeddedObjectMeta=true paths="$ROOT/controller/apis/..." \
	output:crd:artifacts:config="$ROOT/artifacts/base/crds"

log "openapi"
tool openapi-gen --go-header-file "$BOILER" \
	--output-dir "$ROOT/apiserver/pkg/generated/openapi" --output-pkg "$MOD/apiserver/pkg/generated/openapi" \
	--output-file zz_generated.openapi.go --report-filename /dev/null \
	--output-model-name-file zz_generated.model_name.go \
	--readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 --readonly-pkg k8s.io/apimachinery/pkg/runtime \
	--readonly-pkg k8s.io/apimachinery/pkg/version --readonly-pkg k8s.io/apimachinery/pkg/api/resource \
	--readonly-pkg k8s.io/apimachinery/pkg/util/intstr --readonly-pkg k8s.io/api/core/v1 \
	k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/version \
	k8s.io/apimachinery/pkg/api/resource k8s.io/apimachinery/pkg/util/intstr k8s.io/api/core/v1 \
	"$MOD/apiserver/apis/sandbox/v1alpha1"

log "clientset"
rm -rf "$ROOT/apiserver/pkg/generated/clientset"
tool client-gen --go-header-file "$BOILER" --clientset-name versioned \
	--input-base "" --input "$MOD/apiserver/apis/sandbox/v1alpha1" \
	--output-dir "$ROOT/apiserver/pkg/generated/clientset" --output-pkg "$MOD/apiserver/pkg/generated/clientset"
log "done"
