#!/usr/bin/env bash
# down.sh [--wipe]: stops the local cluster that hack/cluster/up.sh started and cleans up after it:
#   kubelet first; then every container of OUR containerd (ctr -a $CONTAINERD_SOCK), leftover
#   processes in our kubepods cgroups and shims of our socket; containerd; then the control plane
#   (scheduler, controller-manager, apiserver, etcd), the registry, and any other process with a
#   PID file in $RUN/pids. Unmounts our mounts and pod network namespaces, removes our empty pod cgroups,
#   deletes the bridges $HOST_BRIDGE and $POD_BRIDGE and the CNI IPAM state, removes the nat
#   CNI-* chains the bridge plugin's ipMasq left for pods that were killed (cluster_nat_chains:
#   only chains of $CNI_NETWORK for $POD_CIDR), and sets net.ipv4.ip_forward back to the value
#   up.sh recorded in $IP_FORWARD_SAVED (the bridge plugin, isGateway, turns it on as well).
#   --wipe  also removes $RUN (etcd data, containerd images, kubelet dir, logs) and the
#           registry's storage $REGISTRY_DATA (otherwise kept, like etcd's data).
# Processes are stopped by PID (PID files; pod cgroups; shims with our -address only).
# Idempotent: exits 0 when nothing is running.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/lib/common.sh
source "$HERE/../lib/common.sh"
LOG_PREFIX=down
WIPE=0
for a in "$@"; do
	case $a in
	--wipe) WIPE=1 ;;
	*) echo "usage: $0 [--wipe]" >&2; exit 2 ;;
	esac
done
need_root
case $KUBE_CGROUP_ROOT in /*/* | / | "" | *[!a-zA-Z0-9/_-]*) die "KUBE_CGROUP_ROOT must look like /name (got '$KUBE_CGROUP_ROOT')" ;; esac
if [ -z "${KSB_CLUSTER_LOCKED:-}" ]; then
	mkdir -p "$OUT/cluster"
	exec 9>"$OUT/cluster/.lock"
	flock -w 300 9 || die "another up.sh/down.sh holds $OUT/cluster/.lock"
fi

stop() { # NAME [TIMEOUT_S]: TERM, wait, KILL; only if the PID file names a live process of ours
	local n=$1 to=${2:-10} f=$RUN/pids/$1.pid p s i
	[ -f "$f" ] || return 0
	if p=$(pid_of "$n"); then
		s=$(date +%s.%N)
		kill -TERM "$p" 2>/dev/null || true
		for ((i = 0; i < to * 20; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
		if kill -0 "$p" 2>/dev/null; then
			log "$n (pid $p) did not stop in ${to}s: SIGKILL"
			kill -KILL "$p" 2>/dev/null || true
			for ((i = 0; i < 40; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
		fi
		log "stopped $n (pid $p) in $(elapsed "$s")s"
	else
		log "$n: stale PID file (process gone)"
	fi
	rm -f "$f"
}
stop_parallel() { # NAME...
	local n
	for n in "$@"; do stop "$n" & done
	wait
}
kill_pods() { # SIGKILL every process in our kubepods cgroups until they are empty
	local i p pids n=0
	for ((i = 0; i < 50; i++)); do
		pids=$(cluster_pod_pids)
		[ -n "$pids" ] || break
		for p in $pids; do kill -KILL "$p" 2>/dev/null && n=$((n + 1)); done
		sleep 0.1
	done
	[ $n = 0 ] || log "killed $n pod process(es) in $KUBE_CGROUP_ROOT/kubepods"
	[ -z "$(cluster_pod_pids)" ] || log "WARNING: processes remain in $KUBE_CGROUP_ROOT/kubepods: $(cluster_pod_pids | tr '\n' ' ')"
}

# 1. node: kubelet, then containers, shims and our containerd
stop kubelet
netns=$(cluster_netns) # before the pods die: some are only known through their processes
kill_pods
CTR=(ctr -a "$CONTAINERD_SOCK")
if pid_of containerd >/dev/null && [ -S "$CONTAINERD_SOCK" ] && timeout 5 "${CTR[@]}" version >/dev/null 2>&1; then
	for ns in $(timeout 10 "${CTR[@]}" namespaces ls -q 2>/dev/null); do
		tasks=$(timeout 10 "${CTR[@]}" -n "$ns" tasks ls -q 2>/dev/null || true)
		# shellcheck disable=SC2086
		[ -z "$tasks" ] || timeout 60 "${CTR[@]}" -n "$ns" tasks delete -f $tasks >/dev/null 2>&1 || true
		ctrs=$(timeout 10 "${CTR[@]}" -n "$ns" containers ls -q 2>/dev/null || true)
		# shellcheck disable=SC2086
		[ -z "$ctrs" ] || timeout 60 "${CTR[@]}" -n "$ns" containers delete $ctrs >/dev/null 2>&1 || true
		[ -z "$ctrs" ] || log "removed $(echo "$ctrs" | wc -w) container(s) in containerd namespace $ns"
	done
fi
kill_pods
shims=$(cluster_shims)
if [ -n "$shims" ]; then
	while read -r p ns id; do
		kill -KILL "$p" 2>/dev/null || true
		[ -z "$id" ] || rm -f "$(shim_socket "$ns" "$id")"
	done <<<"$shims"
	log "killed $(echo "$shims" | wc -l) containerd shim(s) of $CONTAINERD_SOCK"
fi
stop containerd
# sockets of shims that died without cleaning up (their task bundles are still there)
for b in "$RUN"/containerd/state/io.containerd.runtime.v2.task/*/*/; do
	[ -d "$b" ] || continue
	b=${b%/}
	rm -f "$(shim_socket "$(basename "$(dirname "$b")")" "$(basename "$b")")"
done

# 2. mounts (container rootfs, shm, kubelet volumes), pod netns, pod cgroups
mounts=$(cluster_mounts)
for m in $mounts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "WARNING: cannot unmount $m"; done
[ -z "$mounts" ] || log "unmounted $(echo "$mounts" | wc -l) mount(s) under $RUN"
netns=$(printf '%s\n%s\n' "$netns" "$(cluster_netns)" | sort -u | grep . || true)
for f in $netns; do
	umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null || true
	rm -f "$f"
done
[ -z "$netns" ] || log "removed $(echo "$netns" | wc -l) pod network namespace(s)"
# containerd's state dir and runc's state are ephemeral (normally on tmpfs): every task is gone now
if [ -z "$(cluster_mounts | grep -E "^$RUN/containerd/(state|runc)/" || true)" ]; then
	rm -rf "$RUN/containerd/state" "$RUN/containerd/runc"
fi
for d in $(cluster_cgroup_dirs); do
	find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
	[ ! -d "$d" ] || log "WARNING: cgroup $d not empty, kept"
done

# 3. control plane, then anything else up.sh or a test recorded in $RUN/pids
stop_parallel kube-scheduler kube-controller-manager kube-apiserver registry
stop etcd
for f in "$RUN"/pids/*.pid; do [ -e "$f" ] && stop "$(basename "$f" .pid)"; done

# 4. network and CNI state
for l in "$POD_BRIDGE" "$HOST_BRIDGE"; do
	if ip link show "$l" >/dev/null 2>&1; then
		ip link del "$l"
		log "deleted bridge $l"
	fi
done
rm -rf "$RUN/cni/ipam"
# ipMasq: the bridge plugin gives each pod a nat chain CNI-<hash> (ACCEPT to $POD_CIDR, MASQUERADE
# the rest) and a POSTROUTING rule -s <pod IP> -j CNI-<hash>; it removes both on pod delete, but
# pods that were killed (kill_pods above) leave theirs. Remove those of our network only.
chains=$(cluster_nat_chains)
if [ -n "$chains" ]; then
	n=0
	for c in $chains; do
		# the jumps to it first (by rule number, listed again after each delete)
		while r=$(iptables -w 5 -t nat -L POSTROUTING -n --line-numbers 2>/dev/null | awk -v c="$c" '$2 == c {print $1; exit}') && [ -n "$r" ]; do
			iptables -w 5 -t nat -D POSTROUTING "$r" || break
		done
		if iptables -w 5 -t nat -F "$c" && iptables -w 5 -t nat -X "$c"; then
			n=$((n + 1))
		else
			log "WARNING: cannot remove nat chain $c"
		fi
	done
	log "removed $n leftover nat chain(s) of the bridge plugin's ipMasq (CNI-*, $POD_CIDR)"
fi
while iptables -w 5 -D FORWARD -i "$POD_BRIDGE" ! -o ksb+ -m comment --comment "$FORWARD_GUARD" -j DROP 2>/dev/null; do
	log "removed the FORWARD guard of the pod bridge"
done
# sandbox-node's nftables tables (sidecars/egress/internal/nodefilter) outlive the agent, as
# they must while a node runs: a pod is denied until the agent is back. A cluster that is
# gone leaves them holding verdicts for pod addresses the next cluster hands out again, to
# its own sandbox-controller too, which then cannot reach the kube-apiserver to certify the
# agent that would clear them.
for t in "inet kube_sandbox_egress" "netdev kube_sandbox_ingress" "inet kube_sandbox_egress_probe" "netdev kube_sandbox_ingress_probe"; do
	# shellcheck disable=SC2086 # family and name are two words
	if nft list table $t >/dev/null 2>&1 && nft delete table $t; then
		log "removed sandbox-node's nftables table $t"
	fi
done
# IPv4 forwarding as it was before up.sh (which recorded it) turned it on
if [ -f "$IP_FORWARD_SAVED" ]; then
	prev=$(cat "$IP_FORWARD_SAVED" 2>/dev/null || true)
	case $prev in
	0 | 1)
		if [ "$(cat /proc/sys/net/ipv4/ip_forward)" != "$prev" ]; then
			echo "$prev" >/proc/sys/net/ipv4/ip_forward
			log "net.ipv4.ip_forward restored to $prev"
		fi
		;;
	*) log "WARNING: $IP_FORWARD_SAVED holds '$prev', not 0 or 1: net.ipv4.ip_forward left as it is" ;;
	esac
	rm -f "$IP_FORWARD_SAVED"
fi
# The ARP table's thresholds as they were before up.sh raised them
if [ -f "$NEIGH_SAVED" ]; then
	read -r -a prev <"$NEIGH_SAVED" || true
	if [ "${#prev[@]}" = 3 ] && [[ "${prev[*]}" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]]; then
		for i in 1 2 3; do echo "${prev[$((i - 1))]}" >"/proc/sys/net/ipv4/neigh/default/gc_thresh$i"; done
		log "ARP table thresholds restored to ${prev[*]}"
	else
		log "WARNING: $NEIGH_SAVED holds '${prev[*]}', not three numbers: the ARP table's thresholds left as they are"
	fi
	rm -f "$NEIGH_SAVED"
fi
# libcni's result cache is hard-coded to /var/lib/cni: remove the entries of our network only
for f in /var/lib/cni/results/"$CNI_NETWORK"-*; do
	[ -e "$f" ] || continue
	id=${f#/var/lib/cni/results/"$CNI_NETWORK"-}
	id=${id%-*}
	rm -f "$f" /var/lib/cni/results/cni-loopback-"$id"-*
done
# the kubelet links pod logs (kept in $RUN/pod-logs) from the hard-coded /var/log/containers
for l in /var/log/containers/*.log; do
	[ -L "$l" ] && case "$(readlink "$l")" in "$RUN"/*) rm -f "$l" ;; esac
done

# the kubelet's host-wide leftovers, unless another kubelet/kube-proxy runs here that needs them:
# its iptables chains (KUBE-FIREWALL & co), device-plugin socket, and the empty hard-coded dirs
if ! grep -qxE 'kubelet|kube-proxy' /proc/[0-9]*/comm 2>/dev/null; then
	n=0
	for ipt in iptables ip6tables; do
		command -v $ipt >/dev/null || continue
		for c in INPUT OUTPUT; do
			while $ipt -w 5 -t filter -D $c -j KUBE-FIREWALL 2>/dev/null; do n=$((n + 1)); done
		done
		for t in filter nat mangle; do
			for c in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
				if $ipt -w 5 -t $t -S $c >/dev/null 2>&1; then
					$ipt -w 5 -t $t -F $c 2>/dev/null && $ipt -w 5 -t $t -X $c 2>/dev/null && n=$((n + 1))
				fi
			done
		done
	done
	[ $n = 0 ] || log "removed the kubelet's iptables chains/rules ($n)"
	rm -f /var/lib/kubelet/device-plugins/kubelet.sock
	rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet /var/log/containers /var/lib/cni/results /var/lib/cni \
		/run/containerd/s /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd /run/netns 2>/dev/null || true
fi

if [ $WIPE = 1 ] && [ -d "$RUN" ]; then
	left=$(cluster_mounts)
	[ -z "$left" ] || die "mounts remain under $RUN, not wiping: $left"
	rm -rf "$RUN"
	log "wiped $RUN"
fi
if [ $WIPE = 1 ] && [ -d "$REGISTRY_DATA" ]; then
	rm -rf "$REGISTRY_DATA"
	log "wiped the registry's storage $REGISTRY_DATA"
fi
log "down"
