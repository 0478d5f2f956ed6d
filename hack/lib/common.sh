# Sourced by the hack/ scripts: paths and small helpers shared by all of them.
# Everything the local cluster builds or writes lives below _output/ (git-ignored).

ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
OUT=${OUT:-$ROOT/_output}
BIN=${BIN:-$OUT/bin}                 # our binaries (kubectl-sandbox, sandbox-*)
CBIN=${CBIN:-$OUT/cluster/bin}       # Kubernetes and etcd binaries built from the tools modules
RUN=${RUN:-$OUT/cluster/run}         # state of the running cluster: pids, logs, etcd data, kubelet dir
PKI=${PKI:-$OUT/cluster/pki}
IMAGES=${IMAGES:-$OUT/images}        # docker-archive tarballs imported into containerd
KUBE_VERSION=${KUBE_VERSION:-v1.37.2}

# Host-only node address on a port-less bridge (this kernel has no dummy interface driver),
# and the pod bridge. Pods get no default route: they reach the host and each other only.
HOST_IP=${HOST_IP:-10.250.0.1}
HOST_BRIDGE=${HOST_BRIDGE:-ksbhost0}
POD_BRIDGE=${POD_BRIDGE:-ksbbr0}
POD_CIDR=${POD_CIDR:-10.244.0.0/24}
POD_GW=${POD_GW:-10.244.0.1}
APISERVER_PORT=${APISERVER_PORT:-6443}
NODE_NAME=${NODE_NAME:-node1}

_t0=${_t0:-$(date +%s.%N)}
elapsed() { printf '%.1f' "$(echo "$(date +%s.%N) - ${1:-$_t0}" | bc)"; }
log() { printf '[%s %5ss] %s\n' "${LOG_PREFIX:-hack}" "$(elapsed)" "$*"; }
die() { printf '[%s] ERROR: %s\n' "${LOG_PREFIX:-hack}" "$*" >&2; exit 1; }

# need_root exits unless we can manage bridges, mounts and containerd.
need_root() { [ "$(id -u)" = 0 ] || die "the local cluster needs root (bridges, mounts, containerd)"; }

# ensure_packages installs the Debian packages the local cluster needs, once.
ensure_packages() {
	local missing=() p
	for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing Debian packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null || die "apt-get update failed"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
}

CLUSTER_PACKAGES=(containerd runc containernetworking-plugins busybox-static debootstrap iptables conntrack bc openssl curl gettext-base)
