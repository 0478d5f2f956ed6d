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
# and the pod bridge. Pods get a default route via $POD_GW (CNI bridge plugin, isGateway and
# isDefaultGateway): the node forwards their traffic (hack/cluster/up.sh turns on
# net.ipv4.ip_forward) and masquerades what leaves $POD_CIDR (ipMasq, iptables nat CNI-* chains).
HOST_IP=${HOST_IP:-10.250.0.1}
HOST_BRIDGE=${HOST_BRIDGE:-ksbhost0}
POD_BRIDGE=${POD_BRIDGE:-ksbbr0}
# A /22: about 1000 pod addresses (from .10 of the gateway's /24 up), so that warm pools and
# benchmarks with several hundred pods fit next to MAX_PODS.
POD_CIDR=${POD_CIDR:-10.244.0.0/22}
POD_GW=${POD_GW:-10.244.0.1}
# The kubelet's maxPods. The node's memory, and the host's PID limit (kernel.pid_max: each pod
# is a few dozen threads), bound the pods that really run before this does.
MAX_PODS=${MAX_PODS:-1000}
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

# apache2-utils: htpasswd, for the registry's bcrypt password file.
# What the unit tests need of the machine: real Jupyter kernels for execd's code contexts, and
# Debian's python3 with the Kubernetes client for the Python SDK (sdk/python).
TEST_PACKAGES=(python3-ipykernel python3-matplotlib python3-kubernetes python3-websocket python3-requests nodejs)
CLUSTER_PACKAGES=(containerd runc containernetworking-plugins busybox-static debootstrap iptables nftables conntrack bc openssl curl gettext-base apache2-utils)

# --- local cluster -----------------------------------------------------------------------------
# Images built by hack/images/build.sh (docker-archive tarballs in $IMAGES) and imported by
# hack/cluster/up.sh. Nothing else is pulled: an admission policy forces imagePullPolicy: Never
# on every image but those of the cluster's own registry ($REGISTRY, below).
export PAUSE_IMAGE=${PAUSE_IMAGE:-registry.k8s.io/pause:3.10}
export SANDBOX_IMAGE_BUSYBOX=${SANDBOX_IMAGE_BUSYBOX:-kube-sandbox.local/sandbox-busybox:latest}
export SANDBOX_IMAGE_PYTHON=${SANDBOX_IMAGE_PYTHON:-kube-sandbox.local/sandbox-python:3.11}
export KUBE_SANDBOX_IMAGE=${KUBE_SANDBOX_IMAGE:-kube-sandbox.local/kube-sandbox:dev}

CACHE=${CACHE:-$OUT/cache}                              # slow-to-make inputs (debootstrap rootfs)
ADMIN_KUBECONFIG=${ADMIN_KUBECONFIG:-$OUT/kubeconfig}   # client cert, group system:masters
APISERVER_URL=${APISERVER_URL:-https://$HOST_IP:$APISERVER_PORT}
CONTAINERD_SOCK=${CONTAINERD_SOCK:-$RUN/containerd/containerd.sock}   # our own containerd, never the system one
CNI_NETWORK=${CNI_NETWORK:-kube-sandbox}                # CNI network name (results cache: /var/lib/cni/results/<name>-*)
KUBE_CGROUP_ROOT=${KUBE_CGROUP_ROOT:-/kube-sandbox}     # kubelet cgroupRoot: pods live in $KUBE_CGROUP_ROOT/kubepods
# The cluster's OCI registry (CNCF distribution, a host process started by hack/cluster/up.sh),
# where sandbox snapshots go: https://$REGISTRY, serving cert from the cluster CA ($PKI/ca.crt),
# basic auth for $REGISTRY_USER with the password in $REGISTRY_PASSWORD_FILE (made once by
# hack/cluster/pki.sh, kept). Its storage, $REGISTRY_DATA, is kept across down.sh and up.sh,
# like etcd's data; up.sh garbage-collects it before it starts the registry. containerd pulls
# from it with these credentials: pods need no imagePullSecrets.
REGISTRY_PORT=${REGISTRY_PORT:-5000}
export REGISTRY=$HOST_IP:$REGISTRY_PORT
REGISTRY_USER=kube-sandbox
REGISTRY_REPOSITORY=${REGISTRY_REPOSITORY:-kube-sandbox/snapshots} # where sandbox snapshots go in it
REGISTRY_DATA=${REGISTRY_DATA:-$OUT/cluster/registry}
REGISTRY_PASSWORD_FILE=$PKI/registry.password                    # no trailing newline
# FORWARD_GUARD is the comment of up.sh's FORWARD rule that keeps pod traffic on the machine.
FORWARD_GUARD=kube-sandbox-local-guard
NEIGH_SAVED=${NEIGH_SAVED:-$RUN/neigh_gc_thresh.prev}     # net.ipv4.neigh.default.gc_thresh1..3 before up.sh raised them
IP_FORWARD_SAVED=${IP_FORWARD_SAVED:-$RUN/ip_forward.prev} # net.ipv4.ip_forward before up.sh set it; down.sh restores it
# Processes up.sh starts, in start order; down.sh stops them in reverse groups.
CLUSTER_COMPONENTS=(etcd containerd registry kube-apiserver kube-controller-manager kube-scheduler kubelet)

# pid_of NAME prints the PID recorded in $RUN/pids/NAME.pid if that process is alive and is ours
# (its command line mentions $OUT/: guards against PID reuse after a crash).
pid_of() {
	local f=$RUN/pids/$1.pid p
	[ -f "$f" ] || return 1
	p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] || return 1
	is_ours "$p" && echo "$p"
}
is_ours() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -qF "$OUT/"; }

# mkkubeconfig OUT USER CERT KEY [SERVER]    kubeconfig with an embedded client certificate
# TOKEN=... mkkubeconfig OUT USER            kubeconfig with a bearer token
mkkubeconfig() {
	local out=$1 user=$2 cert=${3:-} key=${4:-} server=${5:-$APISERVER_URL} cred tmp
	if [ -n "${TOKEN:-}" ]; then
		cred="    token: $TOKEN"
	else
		cred="    client-certificate-data: $(base64 -w0 "$cert")
    client-key-data: $(base64 -w0 "$key")"
	fi
	tmp=$(mktemp "$out.XXXXXX")
	chmod 600 "$tmp"
	cat >"$tmp" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: kube-sandbox-local
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $user
  user:
$cred
contexts:
- name: kube-sandbox-local
  context: {cluster: kube-sandbox-local, user: $user}
current-context: kube-sandbox-local
YAML
	mv "$tmp" "$out"
}

# --- what belongs to our local cluster (used by hack/cluster/up.sh and down.sh) ----------------
# cgroup_hierarchies: mount points of the cgroup hierarchies (v1 controllers, named, v2).
cgroup_hierarchies() { awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/mounts; }
# cluster_cgroup_dirs: our cgroup root ($KUBE_CGROUP_ROOT) in every hierarchy where it exists.
cluster_cgroup_dirs() {
	case $KUBE_CGROUP_ROOT in /|"") die "KUBE_CGROUP_ROOT must be a dedicated cgroup (not /)";; esac
	local h
	for h in $(cgroup_hierarchies); do
		[ -d "$h$KUBE_CGROUP_ROOT" ] && echo "$h$KUBE_CGROUP_ROOT"
	done
	return 0
}
# cluster_pod_pids: processes in our kubepods cgroups (containers started by our kubelet). The
# cgroups of pods that are going away vanish while find walks them (find then fails, and so
# would the pipeline, under pipefail, and a script under set -e): what could be read is the
# answer.
cluster_pod_pids() {
	local d
	for d in $(cluster_cgroup_dirs); do
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null || true
	done | sort -un
}
# cluster_shims: containerd shims serving our containerd (matched on their -address argument),
# one "PID NAMESPACE ID" line each.
cluster_shims() {
	local d c
	for d in /proc/[0-9]*; do
		c=$(tr '\0' ' ' 2>/dev/null <"$d/cmdline") || continue
		case "$c" in
		*containerd-shim*" -address $CONTAINERD_SOCK "*)
			# shellcheck disable=SC2086
			set -- $c
			local ns="" id=""
			while [ $# -gt 1 ]; do
				case $1 in -namespace) ns=$2 ;; -id) id=$2 ;; esac
				shift
			done
			echo "${d#/proc/} $ns $id"
			;;
		esac
	done
}
# shim_socket NAMESPACE ID: the socket containerd 1.6 gives the shim of task ID (hard-coded dir).
shim_socket() { echo "/run/containerd/s/$(printf '%s' "$CONTAINERD_SOCK/$1/$2" | sha256sum | cut -c1-64)"; }
# cluster_mounts: mounts below $RUN (container rootfs, shm, kubelet volumes), deepest first.
cluster_mounts() { awk -v r="$RUN/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r; }
# cluster_nat_chains: the CNI-* chains of the iptables nat table that the bridge plugin's ipMasq
# made for our pods, one name a line: CNI-<hex> chains whose rules send $POD_CIDR to ACCEPT and
# carry the plugin's comment name: "$CNI_NETWORK" (POSTROUTING -s <pod IP> jumps to each). The
# plugin removes a pod's chain when the pod is deleted; pods that were killed leave theirs.
cluster_nat_chains() {
	command -v iptables >/dev/null || return 0
	iptables -w 5 -t nat -S 2>/dev/null | awk -v cidr="$POD_CIDR" -v net="$CNI_NETWORK" '
		$1 == "-A" && $2 ~ /^CNI-[0-9a-f]+$/ && index($0, " -d " cidr " ") &&
			index($0, " --comment \"name: \\\"" net "\\\" ") {print $2}' | sort -u
}
# cluster_netns: CNI network namespaces of our pods: those recorded in our containerd's metadata
# and those that processes in our pod cgroups live in.
cluster_netns() {
	local db=$RUN/containerd/root/io.containerd.metadata.v1.bolt/meta.db p ino f
	{
		[ -f "$db" ] && grep -aoE '/var/run/netns/cni-[0-9a-f-]{36}' "$db" | sed 's#^/var/run/#/run/#'
		local inos=" "
		for p in $(cluster_pod_pids); do
			ino=$(stat -L -c %i "/proc/$p/ns/net" 2>/dev/null) && inos="$inos$ino "
		done
		if [ "$inos" != " " ]; then
			for f in /run/netns/cni-*; do
				[ -e "$f" ] || continue
				case $inos in *" $(stat -L -c %i "$f" 2>/dev/null) "*) echo "$f" ;; esac
			done
		fi
	} | sort -u | while read -r f; do [ -e "$f" ] && echo "$f"; done
	return 0
}
