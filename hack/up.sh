#!/usr/bin/env bash
# up.sh (make up): a real single-node Kubernetes on this machine with kube-sandbox installed.
# Installs missing Debian packages, builds Kubernetes and etcd (cached in _output), builds the
# images (busybox and Python sandboxes, our components), starts the cluster and installs
# kube-sandbox from artifacts/. Run as root. Safe to run again: a running cluster is kept.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=up
need_root
ensure_packages "${CLUSTER_PACKAGES[@]}"

log "Kubernetes $KUBE_VERSION and etcd binaries"
"$ROOT/hack/build-cluster.sh"
log "images"
"$ROOT/hack/images/build.sh" | sed 's/^/  /'
log "cluster"
"$ROOT/hack/cluster/up.sh" | sed 's/^/  /'
log "kube-sandbox"
"$ROOT/hack/install.sh" | sed 's/^/  /'

cat <<TXT

kube-sandbox is up ($(elapsed)s). Try:

  export KUBECONFIG=$ADMIN_KUBECONFIG PATH=$BIN:\$PATH
  kubectl sandbox create demo --image $SANDBOX_IMAGE_PYTHON
  kubectl wait --for=jsonpath='{.status.phase}'=Running sandbox/demo
  kubectl sandbox exec demo -- python3 -c 'print(6*7)'
  kubectl sandbox exec -it demo -- bash
  kubectl get sandboxes
  kubectl sandbox delete demo

Images on the node: $SANDBOX_IMAGE_PYTHON, $SANDBOX_IMAGE_BUSYBOX.
Stop everything with: make down
TXT
