#!/usr/bin/env bash
# up.sh: brings up the local single-node Kubernetes cluster of kube-sandbox from binaries built by
# hack/build-cluster.sh and images built by hack/images/build.sh (no Docker):
#   etcd, kube-apiserver (RBAC + Node authz, aggregation), kube-controller-manager, kube-scheduler,
#   our own containerd (own socket/root/state under $RUN), kubelet, CNI bridge $POD_BRIDGE, and
#   the cluster's OCI registry for sandbox snapshots (CNCF distribution) on https://$REGISTRY:
#   TLS from the cluster CA, basic auth for $REGISTRY_USER (password made once in $PKI), storage
#   in $REGISTRY_DATA (kept; garbage-collected here before the registry starts), and containerd
#   pulls from it with those credentials (pods need no imagePullSecrets).
# The node IP / apiserver address is $HOST_IP on the port-less bridge $HOST_BRIDGE; pods get
# $POD_CIDR with a default route via $POD_GW, as in real clusters: the CNI bridge plugin with
# isGateway, isDefaultGateway and ipMasq (iptables nat CNI-* chains masquerade what leaves
# $POD_CIDR), and net.ipv4.ip_forward=1 (the value before is kept in $IP_FORWARD_SAVED, down.sh
# restores it). Every tarball in $IMAGES is imported into containerd, and a
# MutatingAdmissionPolicy forces imagePullPolicy: Never on every image but the registry's
# (IfNotPresent).
# Admin kubeconfig: _output/kubeconfig. PIDs in $RUN/pids, logs in $RUN/logs. Stop: down.sh.
#   - already up (all processes alive, /readyz answers) with the configuration this script would
#     start it with (rendered conf/ files, pod bridge address): says so and exits 0;
#   - already up with another configuration (an older checkout, other POD_CIDR or MAX_PODS):
#     runs down.sh, then comes up with the new one (etcd data is kept; pods start again);
#   - stale state of a crashed or killed run (PID files, bridges, mounts, containers): runs
#     down.sh first, then comes up.
# Env: ETCD_UNSAFE_NO_FSYNC (default true: throwaway data), UP_TIMEOUT (default 120 s per step),
# and from hack/lib/common.sh POD_CIDR, MAX_PODS and the other addresses and names.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib/common.sh
source "$HERE/../lib/common.sh"
LOG_PREFIX=up
export _t0
need_root
case $KUBE_CGROUP_ROOT in /*/* | / | "" | *[!a-zA-Z0-9/_-]*) die "KUBE_CGROUP_ROOT must look like /name (got '$KUBE_CGROUP_ROOT')" ;; esac
ETCD_UNSAFE_NO_FSYNC=${ETCD_UNSAFE_NO_FSYNC:-true}
UP_TIMEOUT=${UP_TIMEOUT:-120}
ADMIN=(--cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key")
export KUBECONFIG=$ADMIN_KUBECONFIG

mkdir -p "$OUT/cluster"
exec 9>"$OUT/cluster/.lock"
flock -w 300 9 || die "another up.sh/down.sh holds $OUT/cluster/.lock"
export KSB_CLUSTER_LOCKED=1 # down.sh, when we call it, must not wait for our own lock

ensure_packages "${CLUSTER_PACKAGES[@]}"

# --- binaries ------------------------------------------------------------------------------
missing=()
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet runsc containerd-shim-runsc-v1 registry; do
	[ -x "$CBIN/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "missing in $CBIN: ${missing[*]}: running hack/build-cluster.sh (cold: ~15 min)"
	"$ROOT/hack/build-cluster.sh"
fi
# iptables: the bridge plugin's ipMasq runs it (from containerd's PATH, which is ours)
for b in containerd ctr runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback kubectl iptables; do
	command -v "$b" >/dev/null || die "missing $b"
done

# --- configuration ---------------------------------------------------------------------------
p=${POD_GW%.*}
export CBIN RUN PKI HOST_IP CONTAINERD_SOCK PAUSE_IMAGE KUBE_CGROUP_ROOT CNI_NETWORK POD_BRIDGE POD_CIDR POD_GW MAX_PODS
# The registry's password (pki.sh makes it the first time; read again after it ran), for
# containerd's node-level credentials. Only render's envsubst sees it in its environment.
REGISTRY_PASSWORD=$(cat "$REGISTRY_PASSWORD_FILE" 2>/dev/null || true)
export POD_RANGE_START=${POD_RANGE_START:-$p.10}
# The kubelet sets its open-files limit to maxOpenFiles (default 1000000), which fails without
# CAP_SYS_RESOURCE when the hard limit is lower: ask for the hard limit we have.
KUBELET_MAX_OPEN_FILES=$(ulimit -Hn)
[ "$KUBELET_MAX_OPEN_FILES" != unlimited ] || KUBELET_MAX_OPEN_FILES=1000000
export KUBELET_MAX_OPEN_FILES
# No DNS service runs in this cluster. Without clusterDNS the kubelet falls back to the host's
# resolv.conf for every pod anyway, but records a MissingClusterDNS Warning each time it syncs a
# pod (a pool allocation included): name the host's resolver instead (loopback ones excepted,
# they do not exist in a pod's network namespace).
CLUSTER_DNS=$(awk '$1 == "nameserver" && $2 !~ /^127\./ && $2 != "::1" {print $2; exit}' /etc/resolv.conf 2>/dev/null || true)
export CLUSTER_DNS
render() { # TEMPLATE OUT: substitute only our variables (${NAME}) in a hack/cluster/conf template
	# (readable by root only: containerd's holds the registry's password)
	mkdir -p "$(dirname "$2")"
	(umask 077 && export REGISTRY REGISTRY_PORT REGISTRY_DATA REGISTRY_USER REGISTRY_PASSWORD && envsubst '${CBIN} ${RUN} ${PKI} ${HOST_IP} ${CONTAINERD_SOCK} ${PAUSE_IMAGE} ${KUBE_CGROUP_ROOT} ${CNI_NETWORK} ${POD_BRIDGE} ${POD_CIDR} ${POD_GW} ${POD_RANGE_START} ${MAX_PODS} ${KUBELET_MAX_OPEN_FILES} ${CLUSTER_DNS} ${REGISTRY} ${REGISTRY_PORT} ${REGISTRY_DATA} ${REGISTRY_USER} ${REGISTRY_PASSWORD}' \
		<"$HERE/conf/$1" >"$2.tmp")
	mv "$2.tmp" "$2"
}
# Configuration files and what they are rendered to, as TEMPLATE:PATH-BELOW-$RUN.
CONFIGS=(containerd.toml:containerd/config.toml runsc.toml:containerd/runsc.toml kubelet.yaml:kubelet.yaml "10-kube-sandbox.conflist:cni/net.d/10-$CNI_NETWORK.conflist" admission.yaml:admission.yaml
	"registry-hosts.toml:containerd/certs.d/$REGISTRY/hosts.toml" registry.yaml:registry.yaml no-pull-policy.yaml:no-pull-policy.yaml)
# config_drift prints what the running cluster was started with and up.sh would now start
# differently (an older checkout, another POD_CIDR or MAX_PODS); nothing when it is current.
config_drift() {
	local c tmp have
	tmp=$(mktemp -d)
	for c in "${CONFIGS[@]}"; do
		render "${c%%:*}" "$tmp/conf"
		cmp -s "$tmp/conf" "$RUN/${c#*:}" || printf '%s ' "${c%%:*}"
	done
	rm -rf "$tmp"
	have=$(ip -o -4 addr show dev "$POD_BRIDGE" 2>/dev/null | awk '{print $4}' | tr '\n' ' ')
	[ "$have" = "$POD_GW/${POD_CIDR#*/} " ] || printf '%s ' "$POD_BRIDGE address ${have:-none} (want $POD_GW/${POD_CIDR#*/})"
	return 0
}
# ip2int A.B.C.D: the address as a number.
ip2int() {
	local IFS=. a b c d
	read -r a b c d <<<"$1"
	echo $(((a << 24) + (b << 16) + (c << 8) + d))
}
# host-local hands out $POD_RANGE_START up to the last address below the broadcast address.
pod_addresses=$(($(ip2int "${POD_CIDR%/*}") + (1 << (32 - ${POD_CIDR#*/})) - 1 - $(ip2int "$POD_RANGE_START")))
[ "$pod_addresses" -ge "$MAX_PODS" ] ||
	log "WARNING: POD_CIDR $POD_CIDR has $pod_addresses pod addresses from $POD_RANGE_START, fewer than MAX_PODS=$MAX_PODS: pods past them fail to get a network"

# enable_ip_forward: pods' traffic beyond the node is forwarded (their default route is $POD_GW).
# Records the value before in $IP_FORWARD_SAVED for down.sh, unless a record is there already (a
# crashed run's: it holds the value from before that run, still the one to restore).
enable_ip_forward() {
	local f=/proc/sys/net/ipv4/ip_forward
	mkdir -p "$RUN"
	[ -f "$IP_FORWARD_SAVED" ] || cat "$f" >"$IP_FORWARD_SAVED"
	if [ "$(cat "$f")" != 1 ]; then
		echo 1 >"$f"
		log "net.ipv4.ip_forward=1 (was $(cat "$IP_FORWARD_SAVED"); down.sh restores it)"
	fi
	# Forwarded pod traffic goes only to this cluster's own bridges (ksb*: the node, the pods,
	# the "outside" hosts the end-to-end tests make), never off the machine: a sandbox whose
	# policy allowed a real address must not reach it from here.
	iptables -w 5 -C FORWARD -i "$POD_BRIDGE" ! -o ksb+ -m comment --comment "$FORWARD_GUARD" -j DROP 2>/dev/null ||
		iptables -w 5 -I FORWARD -i "$POD_BRIDGE" ! -o ksb+ -m comment --comment "$FORWARD_GUARD" -j DROP
}

# enlarge_neigh_table: the kernel's ARP table is one for all network namespaces, and its default
# hard limit (net.ipv4.neigh.default.gc_thresh3, 1024) is what a node with a few hundred pods
# reaches: each pod's namespace holds entries for the gateway and for the pods it talks to
# (sandbox-apiserver and the controller are pods, and reach every sandbox), and theirs one per
# sandbox. Past it the kernel logs "neighbor table overflow" and new connections fail with "no
# route to host" (seen at 330 pods). Raises the three thresholds (never lowers them), as large
# nodes do; the values before are kept in $NEIGH_SAVED for down.sh.
NEIGH_THRESH=(16384 32768 65536)
enlarge_neigh_table() {
	local i f cur
	mkdir -p "$RUN"
	if [ ! -f "$NEIGH_SAVED" ]; then
		for i in 1 2 3; do cat "/proc/sys/net/ipv4/neigh/default/gc_thresh$i"; done | paste -sd' ' >"$NEIGH_SAVED"
	fi
	for i in 1 2 3; do
		f=/proc/sys/net/ipv4/neigh/default/gc_thresh$i
		cur=$(cat "$f")
		[ "$cur" -ge "${NEIGH_THRESH[$((i - 1))]}" ] || echo "${NEIGH_THRESH[$((i - 1))]}" >"$f"
	done
}

# --- already up? stale? ----------------------------------------------------------------------
apiserver_ready() { curl -sf -m 2 "${ADMIN[@]}" "$APISERVER_URL/readyz" >/dev/null 2>&1; }
all_alive() {
	local c
	for c in "${CLUSTER_COMPONENTS[@]}"; do pid_of "$c" >/dev/null || return 1; done
}
if all_alive; then
	drift=$(config_drift)
	if [ -n "$drift" ]; then
		# down.sh below stops it like stale state; etcd keeps the objects, so pods start again.
		log "up, but started with another configuration (changed: $drift): restarting it with this one"
	else
		for _ in 1 2 3 4 5; do
			if apiserver_ready; then
				log "already up: ${CLUSTER_COMPONENTS[*]} running, $APISERVER_URL/readyz ok"
				enable_ip_forward # in case something turned it off since
				enlarge_neigh_table
				log "export KUBECONFIG=$ADMIN_KUBECONFIG"
				exit 0
			fi
			sleep 1
		done
		log "all processes alive but $APISERVER_URL/readyz does not answer: restarting"
	fi
fi

stale=()
for f in "$RUN"/pids/*.pid; do [ -e "$f" ] && stale+=("pid file $(basename "$f")"); done
for l in "$HOST_BRIDGE" "$POD_BRIDGE"; do ip link show "$l" >/dev/null 2>&1 && stale+=("bridge $l"); done
n=$(cluster_mounts | wc -l); [ "$n" = 0 ] || stale+=("$n mounts under $RUN")
n=$(cluster_netns | wc -l); [ "$n" = 0 ] || stale+=("$n pod netns")
n=$(cluster_pod_pids | wc -l); [ "$n" = 0 ] || stale+=("$n pod processes")
n=$(cluster_shims | wc -l); [ "$n" = 0 ] || stale+=("$n containerd shims")
n=$(cluster_nat_chains | wc -l); [ "$n" = 0 ] || stale+=("$n pod nat chains CNI-*")
if [ ${#stale[@]} -gt 0 ]; then
	log "stale state from an earlier run ($(
		IFS=,
		echo "${stale[*]}"
	)): running down.sh first"
	"$HERE/down.sh" 2>&1 | sed 's/^/  /'
fi

# refuse to start over processes we do not own
busy=$(ss -Hltn 2>/dev/null | awk '{print $4}' | grep -E "^(127\.0\.0\.1|$HOST_IP|0\.0\.0\.0|\*|\[::\]):(2379|2380|2381|$APISERVER_PORT|$REGISTRY_PORT|10248|10250|10257|10259)$" || true)
[ -z "$busy" ] || die "ports already in use by processes not started by up.sh: $(echo "$busy" | tr "\n" " ")"

mkdir -p "$RUN"/{pids,logs} "$RUN"/containerd/imported "$RUN"/cni/{net.d,ipam} "$RUN"/pod-logs "$RUN"/kubelet "$RUN"/kcm-flexvolume

# --- helpers -----------------------------------------------------------------------------------
start() { # NAME CMD...: own session (survives this shell), PID file, log (previous run's kept as .prev)
	local n=$1
	shift
	[ -f "$RUN/logs/$n.log" ] && mv -f "$RUN/logs/$n.log" "$RUN/logs/$n.log.prev"
	setsid "$@" >"$RUN/logs/$n.log" 2>&1 </dev/null 9>&- &
	echo $! >"$RUN/pids/$n.pid"
	log "started $n (pid $!)"
}
fail() { # NAME MSG: show the component's log tail and give up (state stays for inspection)
	echo "---- last lines of $RUN/logs/$1.log ----" >&2
	tail -25 "$RUN/logs/$1.log" >&2 || true
	die "$2 (state left for inspection: hack/cluster/down.sh cleans it up, up.sh does too)"
}
waitfor() { # NAME WHAT CMD...: poll CMD until it succeeds; NAME's process must stay alive
	local n=$1 what=$2 s i
	shift 2
	s=$(date +%s.%N)
	for ((i = 0; i < UP_TIMEOUT * 5; i++)); do
		if "$@" >/dev/null 2>&1; then
			log "$what ready after $(elapsed "$s")s"
			return 0
		fi
		pid_of "$n" >/dev/null || fail "$n" "$n exited"
		sleep 0.2
	done
	fail "$n" "$what not ready after ${UP_TIMEOUT}s"
}

# --- network: host-only node IP on a port-less bridge; pod bridge; forwarding ----------------
ip link add "$HOST_BRIDGE" type bridge
ip addr add "$HOST_IP/32" dev "$HOST_BRIDGE"
ip link set "$HOST_BRIDGE" up
ip link add "$POD_BRIDGE" type bridge
ip addr add "$POD_GW/${POD_CIDR#*/}" dev "$POD_BRIDGE"
ip link set "$POD_BRIDGE" up
log "bridges $HOST_BRIDGE ($HOST_IP/32) and $POD_BRIDGE ($POD_GW/${POD_CIDR#*/}) up"
# Pods' default route is $POD_GW: the node forwards what leaves $POD_CIDR, masqueraded by the
# bridge plugin's ipMasq (per pod a nat chain CNI-<hash>, made on pod add, removed on delete).
enable_ip_forward
enlarge_neigh_table
log "ARP table thresholds ${NEIGH_THRESH[*]} (were $(cat "$NEIGH_SAVED"); down.sh restores them)"
[ "$(iptables -w 5 -S FORWARD 2>/dev/null | awk '$1 == "-P" {print $3}')" != DROP ] ||
	log "WARNING: the iptables filter FORWARD policy is DROP: pods reach the node, but nothing beyond it"

# --- PKI, kubeconfigs, configs ---------------------------------------------------------------
LOG_PREFIX=up "$HERE/pki.sh"
REGISTRY_PASSWORD=$(cat "$REGISTRY_PASSWORD_FILE")
for c in "${CONFIGS[@]}"; do render "${c%%:*}" "$RUN/${c#*:}"; done

# pods live in $KUBE_CGROUP_ROOT/kubepods: the kubelet wants the root to exist in every hierarchy
for h in $(cgroup_hierarchies); do
	d=$h$KUBE_CGROUP_ROOT
	mkdir -p "$d"
	if [ -f "$d/cpuset.cpus" ] && [ -z "$(cat "$d/cpuset.cpus")" ]; then
		cat "$h/cpuset.cpus" >"$d/cpuset.cpus"
		cat "$h/cpuset.mems" >"$d/cpuset.mems"
	fi
done

# --- etcd and containerd ---------------------------------------------------------------------
start etcd "$CBIN/etcd" --name "$NODE_NAME" --data-dir "$RUN/etcd-data" \
	--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
	--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
	--initial-cluster "$NODE_NAME=http://127.0.0.1:2380" --listen-metrics-urls http://127.0.0.1:2381 \
	--quota-backend-bytes=4294967296 --unsafe-no-fsync="$ETCD_UNSAFE_NO_FSYNC"
# containerd finds its shims on its PATH: containerd-shim-runsc-v1 is in $CBIN.
start containerd env PATH="$CBIN:$PATH" containerd --config "$RUN/containerd/config.toml"

# --- the registry: offline garbage collection, then the registry itself ------------------------
# With an empty environment: the registry takes REGISTRY_* variables for overrides of its
# configuration (ours, REGISTRY_PORT and the like, are not meant for it), and traces go nowhere.
REGISTRY_ENV=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin OTEL_TRACES_EXPORTER=none)
mkdir -p "$REGISTRY_DATA"
# Blobs that only deleted manifests (those of deleted sandboxes' snapshots) referenced, and
# untagged manifests, are removed while the registry is down. It fails on a registry that has
# never held a repository, so it runs once there is one.
if [ -d "$REGISTRY_DATA/docker/registry/v2/repositories" ]; then
	gc_t0=$(date +%s.%N)
	if "${REGISTRY_ENV[@]}" "$CBIN/registry" garbage-collect --delete-untagged "$RUN/registry.yaml" >"$RUN/logs/registry-gc.log" 2>&1; then
		log "registry garbage collection in $(elapsed "$gc_t0")s: $(grep -oE '[0-9]+ blobs marked, [0-9]+ blobs and [0-9]+ manifests eligible for deletion' "$RUN/logs/registry-gc.log" | tail -1)"
	else
		log "WARNING: registry garbage collection failed (see $RUN/logs/registry-gc.log): $(tail -c 300 "$RUN/logs/registry-gc.log")"
	fi
fi
start registry "${REGISTRY_ENV[@]}" "$CBIN/registry" serve "$RUN/registry.yaml"
waitfor etcd etcd sh -c 'curl -sf -m 1 http://127.0.0.1:2381/health | grep -q "\"health\":\"true\""'

# --- kube-apiserver ----------------------------------------------------------------------------
start kube-apiserver "$CBIN/kube-apiserver" \
	--etcd-servers=http://127.0.0.1:2379 \
	--bind-address="$HOST_IP" --secure-port="$APISERVER_PORT" --advertise-address="$HOST_IP" \
	--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
	--client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true \
	--admission-control-config-file="$RUN/admission.yaml" \
	--service-cluster-ip-range=10.96.0.0/16 \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
	--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types=InternalIP,Hostname \
	--requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
	--requestheader-extra-headers-prefix=X-Remote-Extra- --requestheader-group-headers=X-Remote-Group \
	--requestheader-username-headers=X-Remote-User \
	--proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
	--enable-aggregator-routing=true --profiling=false

# --- images: the pause image now (every pod needs it), the others in the background ------------
waitfor containerd containerd ctr -a "$CONTAINERD_SOCK" version
CTR=(ctr -a "$CONTAINERD_SOCK" -n k8s.io)
images_t0=$(date +%s.%N)
have=" $("${CTR[@]}" images ls -q | tr '\n' ' ') "
import_one() { # TARBALL: import it unless containerd has its refs from this very tarball already
	local t=$1 name st refs r fresh=1
	name=$(basename "$t" .tar)
	st="$(stat -c '%s %Y' "$t")"
	refs=$(tar -xOf "$t" manifest.json | grep -oE '"RepoTags":\["[^]]*' | sed 's/"RepoTags":\[//; s/"//g; s/,/ /g')
	for r in $refs; do case $have in *" $r "*) ;; *) fresh=0 ;; esac; done
	if [ $fresh = 1 ] && [ "$(cat "$RUN/containerd/imported/$name" 2>/dev/null)" = "$st" ]; then
		echo "kept $name ($refs)"
		return 0
	fi
	"${CTR[@]}" images import "$t" >/dev/null || { echo "FAILED ctr images import $t"; return 1; }
	echo "$st" >"$RUN/containerd/imported/$name"
	echo "imported $name ($refs)"
}
pause_tars=() other_tars=()
for t in "$IMAGES"/*.tar; do
	[ -f "$t" ] || continue
	if tar -xOf "$t" manifest.json | grep -qF "\"$PAUSE_IMAGE\""; then pause_tars+=("$t"); else other_tars+=("$t"); fi
done
[ ${#pause_tars[@]} -gt 0 ] || log "WARNING: no tarball in $IMAGES holds $PAUSE_IMAGE (run hack/images/build.sh): no pod can start"
: >"$RUN/logs/images.log"
for t in "${pause_tars[@]}"; do import_one "$t" >>"$RUN/logs/images.log" 2>&1 || fail images "cannot import $t"; done
(
	exec 9>&-
	for t in "${other_tars[@]}"; do import_one "$t" || exit 1; done
	echo "took $(elapsed "$images_t0")s"
) >>"$RUN/logs/images.log" 2>&1 &
images_pid=$!

# the registry answers an authenticated /v2/ over TLS verified with the cluster CA (curl reads
# the credentials from stdin, not from its command line)
registry_ready() {
	curl -sf -m 2 --cacert "$PKI/ca.crt" -K - "https://$REGISTRY/v2/" <<<"user = \"$REGISTRY_USER:$REGISTRY_PASSWORD\""
}
waitfor registry "registry https://$REGISTRY" registry_ready
waitfor kube-apiserver "kube-apiserver $APISERVER_URL" curl -sf -m 2 "${ADMIN[@]}" "$APISERVER_URL/readyz"

# --- controller-manager, scheduler -------------------------------------------------------------
# Client rates above the defaults (controller-manager 20/30, scheduler 50/100): hundreds of pool
# pods are scheduled, garbage-collected and deleted at once in benchmarks.
CM=$RUN/controller-manager.kubeconfig
start kube-controller-manager "$CBIN/kube-controller-manager" \
	--kubeconfig="$CM" --authentication-kubeconfig="$CM" --authorization-kubeconfig="$CM" \
	--bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false --use-service-account-credentials=true \
	--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
	--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
	--allocate-node-cidrs=false --flex-volume-plugin-dir="$RUN/kcm-flexvolume" --profiling=false \
	--kube-api-qps=100 --kube-api-burst=200
SC=$RUN/scheduler.kubeconfig
start kube-scheduler "$CBIN/kube-scheduler" \
	--kubeconfig="$SC" --authentication-kubeconfig="$SC" --authorization-kubeconfig="$SC" \
	--bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false \
	--kube-api-qps=100 --kube-api-burst=200

# every container gets imagePullPolicy: Never, but those of images in our registry IfNotPresent
kubectl apply -f "$RUN/no-pull-policy.yaml" >/dev/null || fail kube-apiserver "cannot apply no-pull-policy.yaml"

# --- kubelet ---------------------------------------------------------------------------------
kubelet_started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
start kubelet "$CBIN/kubelet" --config="$RUN/kubelet.yaml" --kubeconfig="$RUN/kubelet.kubeconfig" \
	--root-dir="$RUN/kubelet" --cert-dir="$RUN/kubelet/pki" --volume-plugin-dir="$RUN/kubelet/volume-plugins" \
	--hostname-override="$NODE_NAME" --node-ip="$HOST_IP" --v=1

waitfor kube-controller-manager kube-controller-manager curl -skf -m 1 https://127.0.0.1:10257/healthz
waitfor kube-scheduler kube-scheduler curl -skf -m 1 https://127.0.0.1:10259/healthz
# a Node object kept in etcd from an earlier run still says Ready: require a fresh heartbeat
node_ready() {
	local out
	curl -sf -m 1 http://127.0.0.1:10248/healthz >/dev/null || return 1
	out=$(kubectl get node "$NODE_NAME" -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status} {.lastHeartbeatTime}{end}') || return 1
	[ "${out%% *}" = True ] && [[ ! "${out#* }" < "$kubelet_started" ]]
}
waitfor kubelet "node $NODE_NAME" node_ready
waitfor kube-controller-manager "serviceaccount default/default" kubectl -n default get serviceaccount default
# policy_active: a server-side dry run shows the policy at work. It runs as sandbox-controller:
# only that user's pods may name the registry's images once kube-sandbox is installed (the
# ValidatingAdmissionPolicy kube-sandbox-snapshot-images, which etcd keeps from an earlier
# install), and in system:masters, since its RBAC may not be installed yet.
policy_active() {
	[ "$(kubectl create --dry-run=server --as=system:serviceaccount:kube-sandbox-system:sandbox-controller --as-group=system:masters \
		-o 'jsonpath={.spec.containers[*].imagePullPolicy}' -f - <<YAML 2>/dev/null
apiVersion: v1
kind: Pod
metadata: {name: ksb-policy-probe, namespace: default}
spec:
  containers:
  - {name: c, image: $SANDBOX_IMAGE_BUSYBOX, imagePullPolicy: Always}
  - {name: r, image: $REGISTRY/$REGISTRY_REPOSITORY/probe:1, imagePullPolicy: Always}
YAML
	)" = "Never IfNotPresent" ]
}
waitfor kube-apiserver "imagePullPolicy policy (Never; IfNotPresent for $REGISTRY)" policy_active
wait "$images_pid" || fail images "importing images into containerd failed"
log "images: $(grep -c ^imported "$RUN/logs/images.log") imported, $(grep -c ^kept "$RUN/logs/images.log") already present (in $(sed -n 's/^took //p' "$RUN/logs/images.log"))"

log "cluster up in $(elapsed)s: node $NODE_NAME Ready, apiserver $APISERVER_URL, registry https://$REGISTRY"
log "export KUBECONFIG=$ADMIN_KUBECONFIG"
