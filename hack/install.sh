#!/usr/bin/env bash
# install.sh: installs (or updates) kube-sandbox on the running local cluster, the way a user
# installs it on any cluster: kubectl apply -k artifacts/local (the base plus local images and
# host networking). A new kube-sandbox image is imported into containerd first, and the
# components restart when it changed. Waits until they are Available and the APIService
# answers.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=install
need_root
export KUBECONFIG=$ADMIN_KUBECONFIG
CTR=(ctr -a "$CONTAINERD_SOCK" -n k8s.io)
NS=kube-sandbox-system
TIMEOUT=${INSTALL_TIMEOUT:-120s}

"$ROOT/hack/images/build.sh" kube-sandbox | sed 's/^/  /'
digest() { "${CTR[@]}" images ls 2>/dev/null | awk -v r="$KUBE_SANDBOX_IMAGE" '$1 == r {print $3}'; }
before=$(digest)
"${CTR[@]}" images import "$IMAGES/kube-sandbox.tar" >/dev/null
after=$(digest)
log "image $KUBE_SANDBOX_IMAGE ${after:0:19}$([ "$before" = "$after" ] && echo ' (unchanged)')"

log "kubectl apply --server-side -k artifacts/local"
kubectl apply --server-side --force-conflicts -k "$ROOT/artifacts/local" >"$RUN/logs/install.log"
kubectl wait --for=condition=Established crd/batchsandboxes.control.kube-sandbox.io crd/pools.control.kube-sandbox.io \
	--timeout="$TIMEOUT" >/dev/null
if [ -n "$before" ] && [ "$before" != "$after" ]; then
	log "image changed: restarting the components"
	kubectl -n "$NS" rollout restart deployment/sandbox-apiserver deployment/sandbox-controller >/dev/null
fi
for d in sandbox-apiserver sandbox-controller; do
	kubectl -n "$NS" rollout status "deployment/$d" --timeout="$TIMEOUT" >/dev/null ||
		{ kubectl -n "$NS" describe "deployment/$d" | tail -20; die "$d is not available"; }
	log "$d available"
done
kubectl wait --for=condition=Available apiservice/v1alpha1.sandbox.kube-sandbox.io --timeout="$TIMEOUT" >/dev/null ||
	{ kubectl get apiservice v1alpha1.sandbox.kube-sandbox.io -o yaml | tail -15; die "the APIService is not available"; }
# Discovery of the new group can lag the APIService's condition by a moment.
for _ in $(seq 1 50); do kubectl get sandboxes -A >/dev/null 2>&1 && break; sleep 0.2; done
log "APIService v1alpha1.sandbox.kube-sandbox.io available"
