#!/usr/bin/env bash
# smoke.sh: end-to-end check of the local cluster brought up by hack/cluster/up.sh: creates a
# busybox pod (image $SANDBOX_IMAGE_BUSYBOX) running busybox httpd, waits until it is Ready,
# `kubectl exec`s into it, fetches a page from its httpd from the host over the pod bridge, and
# deletes it. Prints "1 passed, 0 failed" on success; exits non-zero on failure.
# Env: KUBECONFIG (default _output/kubeconfig), SMOKE_NAMESPACE (default default).
set -euo pipefail
# shellcheck source=hack/lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
LOG_PREFIX=smoke
export KUBECONFIG=${KUBECONFIG:-$ADMIN_KUBECONFIG}
NS=${SMOKE_NAMESPACE:-default}
POD=ksb-smoke-$$
token=smoke-$RANDOM-$RANDOM
k() { kubectl -n "$NS" "$@"; }

finish() {
	local rc=$?
	if [ $rc != 0 ]; then
		echo "---- pod $NS/$POD ----" >&2
		k describe pod "$POD" 2>&1 | tail -25 >&2 || true
		k delete pod "$POD" --ignore-not-found --grace-period=0 --force >/dev/null 2>&1 || true
		echo "0 passed, 1 failed"
	fi
	exit $rc
}
trap finish EXIT
check() { # WHAT OK: fail with WHAT unless OK is true
	[ "$2" = true ] || { log "FAIL: $1"; exit 1; }
	log "ok: $1"
}

s=$(date +%s.%N)
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $POD, labels: {app: ksb-smoke}}
spec:
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  dnsPolicy: Default   # the local cluster has no cluster DNS
  containers:
  - name: web
    image: $SANDBOX_IMAGE_BUSYBOX
    command: ["sh", "-c", "trap 'exit 0' TERM; mkdir -p /www; echo $token > /www/index.html; httpd -p 8080 -h /www; sleep 3600 & wait"]
    ports: [{containerPort: 8080}]
YAML
# poll (rather than kubectl wait) to fail fast when the container cannot start at all
ready=false
for _ in $(seq 1 300); do
	st=$(k get pod "$POD" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.containerStatuses[0].state.waiting.reason}' 2>/dev/null || true)
	case $st in
	True*) ready=true; break ;;
	*ErrImageNeverPull* | *CreateContainerError* | *CreateContainerConfigError* | *CrashLoopBackOff* | *InvalidImageName*)
		check "pod Ready (container waiting: ${st#* })" false ;;
	esac
	sleep 0.2
done
[ "$ready" = true ] || check "pod Ready within 60s" false
check "pod Ready $(elapsed "$s")s after create" true
[ "$(k get pod "$POD" -o jsonpath='{.spec.containers[0].imagePullPolicy}')" = Never ] && pp=true || pp=false
check "imagePullPolicy forced to Never" "$pp"

out=$(k exec "$POD" -- sh -c 'echo "uid=$(id -u) host=$(hostname)"; cat /www/index.html')
log "exec: $(echo "$out" | head -1)"
[[ $out == *"host=$POD"* && $out == *$token* ]] && ex=true || ex=false
check "kubectl exec" "$ex"

ip=$(k get pod "$POD" -o jsonpath='{.status.podIP}')
body=""
for _ in $(seq 1 25); do
	body=$(curl -s -m 2 "http://$ip:8080/index.html" || true)
	[ "$body" = "$token" ] && break
	sleep 0.2
done
check "host -> pod http://$ip:8080 answered" "$([ "$body" = "$token" ] && echo true || echo false)"
# the pod's default route is the pod bridge's address: the node forwards (and masquerades) its
# traffic beyond the pod network, as in real clusters
routes=$(k exec "$POD" -- ip route 2>/dev/null || true)
check "pod has a default route via $POD_GW" "$([[ $routes == *"default via $POD_GW "* ]] && echo true || echo false)"

s=$(date +%s.%N)
k delete pod "$POD" --wait=true --timeout=60s >/dev/null
check "pod deleted in $(elapsed "$s")s" true
trap - EXIT
echo "1 passed, 0 failed"
