#!/usr/bin/env bash
# build-cluster.sh: builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
# (k8s.io/kubernetes $KUBE_VERSION) and etcd from the Go module proxy into _output/cluster/bin.
# The sources are pinned by the separate tools modules under hack/tools/ (never the root go.mod).
# A binary is rebuilt only when its tools module changed, so a warm run costs nothing.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=build-cluster

mkdir -p "$CBIN"
# The contents only, not the paths: the same script called by another path is the same build.
stamp() { cat "$ROOT/hack/tools/$1/go.mod" "$ROOT/hack/tools/$1/go.sum" "$ROOT/hack/build-cluster.sh" | sha256sum | cut -c1-16; }

maj=$(echo "${KUBE_VERSION#v}" | cut -d. -f1); min=$(echo "${KUBE_VERSION#v}" | cut -d. -f2)
ld=""
# kubectl and the components refuse to talk about versions without a stamped version.
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=$maj -X $p.gitMinor=$min -X $p.gitTreeState=clean"
	ld="$ld -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=2026-01-01T00:00:00Z"
done

build() { # module binary package
	local mod=$1 bin=$2 pkg=$3 s st
	st=$(stamp "$mod")
	if [ -x "$CBIN/$bin" ] && [ "$(cat "$CBIN/.$bin.stamp" 2>/dev/null)" = "$st" ]; then
		return 0
	fi
	s=$(date +%s.%N)
	log "building $bin (cold: kube-apiserver ~10 min, the others 1-3 min each on 2 cores)"
	(cd "$ROOT/hack/tools/$mod" && go build -trimpath -ldflags="-s -w $ld" -o "$CBIN/$bin.tmp" "$pkg")
	mv "$CBIN/$bin.tmp" "$CBIN/$bin"
	echo "$st" >"$CBIN/.$bin.stamp"
	log "built $bin in $(elapsed "$s")s"
}

targets=("${@:-kube-apiserver kube-controller-manager kube-scheduler kubelet etcd}")
for t in ${targets[@]}; do
	case $t in
	etcd) build etcd etcd . ;;
	kube-*|kubelet) build k8s "$t" "k8s.io/kubernetes/cmd/$t" ;;
	*) die "unknown target $t" ;;
	esac
done
