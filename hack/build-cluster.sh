#!/usr/bin/env bash
# build-cluster.sh: builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
# (k8s.io/kubernetes $KUBE_VERSION), etcd, gVisor's runsc and containerd-shim-runsc-v1 (the
# local cluster's gvisor RuntimeClass) and the CNCF distribution registry (the local cluster's
# OCI registry, for sandbox snapshots) from the Go module proxy into _output/cluster/bin.
# The sources are pinned by the separate tools modules under hack/tools/ (never the root go.mod).
# A binary is rebuilt only when its tools module changed, so a warm run costs nothing.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=build-cluster

mkdir -p "$CBIN"
# stamp MODULE FLAGS [PREPARE]: what a binary is built from: its tools module, its link flags,
# the build command and how its sources are prepared (contents, not paths). Other edits of this
# script rebuild nothing.
stamp() {
	{
		cat "$ROOT/hack/tools/$1/go.mod" "$ROOT/hack/tools/$1/go.sum"
		echo "$2"
		declare -f build
		[ -z "${3:-}" ] || declare -f "$3"
	} | sha256sum | cut -c1-16
}

maj=$(echo "${KUBE_VERSION#v}" | cut -d. -f1); min=$(echo "${KUBE_VERSION#v}" | cut -d. -f2)
ld=""
# kubectl and the components refuse to talk about versions without a stamped version.
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=$maj -X $p.gitMinor=$min -X $p.gitTreeState=clean"
	ld="$ld -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=2026-01-01T00:00:00Z"
done

build() { # module binary package [ldflags [prepare]]: prepare prints another directory to build in
	local mod=$1 bin=$2 pkg=$3 flags=${4-$ld} prepare=${5-} dir=$ROOT/hack/tools/$1 s st
	st=$(stamp "$mod" "$flags" "$prepare")
	if [ -x "$CBIN/$bin" ] && [ "$(cat "$CBIN/.$bin.stamp" 2>/dev/null)" = "$st" ]; then
		return 0
	fi
	s=$(date +%s.%N)
	log "building $bin (cold: kube-apiserver ~10 min, the others 1-3 min each on 2 cores)"
	[ -z "$prepare" ] || dir=$($prepare)
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $flags" -o "$CBIN/$bin.tmp" "$pkg")
	mv "$CBIN/$bin.tmp" "$CBIN/$bin"
	echo "$st" >"$CBIN/.$bin.stamp"
	log "built $bin in $(elapsed "$s")s"
}

# shim_vendor: the packages of the gVisor shim vendored into a copy of its tools module, with one
# line of the shim changed. The shim sets its daemon's oom_score_adj to -999, which takes
# CAP_SYS_RESOURCE, and gives up without it; root on these machines lacks it (containerd.toml's
# restrict_oom_score_adj is there for the same reason). Changed, the shim keeps the score it
# inherited when the kernel refuses the lower one. Prints the directory to build in.
shim_vendor() {
	local dir=$OUT/cluster/gvisor-shim f=vendor/gvisor.dev/gvisor/pkg/shim/service.go
	rm -rf "$dir" && mkdir -p "$dir"
	cp "$ROOT"/hack/tools/gvisor-shim/{go.mod,go.sum,tools.go} "$dir/"
	(cd "$dir" && go mod vendor) >&2
	sed -i '/SetScore(cmd.Process.Pid)/s/; err != nil {/; err != nil \&\& !os.IsPermission(err) {/' "$dir/$f"
	grep -q 'SetScore(cmd.Process.Pid); err != nil && !os.IsPermission(err)' "$dir/$f" ||
		die "the gVisor shim changed: $f has no SetScore line to relax"
	echo "$dir"
}

targets=("${@:-kube-apiserver kube-controller-manager kube-scheduler kubelet etcd runsc containerd-shim-runsc-v1 registry}")
# gVisor's version, as runsc --version prints it: the pseudo-version pinned in its module.
gvisor=$(awk 'NF >= 2 && $(NF-1) == "gvisor.dev/gvisor" {print $NF}' "$ROOT/hack/tools/gvisor/go.mod")
# The registry's version, as registry --version prints it: the one pinned in its module.
distribution=$(awk 'NF >= 2 && $(NF-1) == "github.com/distribution/distribution/v3" {print $NF}' "$ROOT/hack/tools/registry/go.mod")
for t in ${targets[@]}; do
	case $t in
	etcd) build etcd etcd . ;;
	runsc) build gvisor runsc gvisor.dev/gvisor/runsc "-X gvisor.dev/gvisor/runsc/version.version=$gvisor" ;;
	containerd-shim-runsc-v1) build gvisor-shim containerd-shim-runsc-v1 gvisor.dev/gvisor/shim "" shim_vendor ;;
	kube-*|kubelet) build k8s "$t" "k8s.io/kubernetes/cmd/$t" ;;
	registry) build registry registry github.com/distribution/distribution/v3/cmd/registry "-X github.com/distribution/distribution/v3/version.version=$distribution" ;;
	*) die "unknown target $t" ;;
	esac
done
