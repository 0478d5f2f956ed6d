#!/usr/bin/env bash
# up.sh (make up): a real single-node Kubernetes on this machine with kube-sandbox installed.
# Installs missing Debian packages, builds Kubernetes, etcd, gVisor and the OCI registry (cached in
# _output), builds the images (busybox and Python sandboxes, our components), starts the cluster, installs
# kube-sandbox from artifacts/ and the sample pool artifacts/samples/pool-python.yaml, and waits
# until it is Ready. Run as root. Safe to run again: a
# running cluster is kept.
# Env: SAMPLE_POOL=0 skips the sample pools; POOL_TIMEOUT (default 180s) bounds the wait for each.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=up
need_root
SAMPLE_POOL=${SAMPLE_POOL:-1}
POOL_TIMEOUT=${POOL_TIMEOUT:-180s}
ensure_packages "${CLUSTER_PACKAGES[@]}"

log "Kubernetes $KUBE_VERSION, etcd, gVisor and registry binaries"
"$ROOT/hack/build-cluster.sh"
log "images"
"$ROOT/hack/images/build.sh" | sed 's/^/  /'
log "cluster"
"$ROOT/hack/cluster/up.sh" | sed 's/^/  /'
log "kube-sandbox"
"$ROOT/hack/install.sh" | sed 's/^/  /'

sample_pool() { # NAME FILE: apply a sample pool of artifacts/samples and wait until it is Ready
	local name=$1 file=$2 pool=(-n default "pool/$1")
	log "sample pool default/$name ($file)"
	# The sample names the default image; a SANDBOX_IMAGE_PYTHON of another name replaces it.
	sed "s|image: kube-sandbox.local/sandbox-python:3.11\$|image: $SANDBOX_IMAGE_PYTHON|" "$ROOT/$file" |
		kubectl apply --server-side --force-conflicts -f - | sed 's/^/  /' ||
		die "cannot apply $file"
	if ! kubectl wait --for=condition=Ready "${pool[@]}" --timeout="$POOL_TIMEOUT" >/dev/null; then
		{
			echo "---- kubectl describe pool $name ----"
			kubectl describe "${pool[@]}" || true
			echo "---- its pods ----"
			kubectl -n default get pods -l "control.kube-sandbox.io/pool=$name" -o wide || true
			echo "---- last lines of the sandbox-controller's log ----"
			kubectl -n kube-sandbox-system logs deployment/sandbox-controller --tail=20 || true
		} >&2
		die "pool default/$name is not Ready after $POOL_TIMEOUT (details above; SAMPLE_POOL=0 skips the sample pools)"
	fi
	log "pool default/$name Ready"
}
if [ "$SAMPLE_POOL" != 0 ]; then
	export KUBECONFIG=$ADMIN_KUBECONFIG
	sample_pool python artifacts/samples/pool-python.yaml
	sample_pool python-gvisor artifacts/samples/pool-python-gvisor.yaml
fi

cat <<TXT

kube-sandbox is up ($(elapsed)s). Try:

  export KUBECONFIG=$ADMIN_KUBECONFIG PATH=$BIN:\$PATH
  kubectl sandbox create demo --image $SANDBOX_IMAGE_PYTHON
  kubectl wait --for=jsonpath='{.status.phase}'=Running sandbox/demo
  kubectl sandbox exec demo -- python3 -c 'print(6*7)'
  kubectl sandbox exec -it demo -- bash
  kubectl sandbox exec demo --detach -- python3 -m http.server 8000   # prints its process ID
  kubectl sandbox ps demo
  kubectl sandbox run-code demo -- 'x = 6 * 7'
  kubectl sandbox run-code demo -- 'x'                                  # the context kept x
  kubectl get sandboxes
  kubectl sandbox delete demo
TXT
if [ "$SAMPLE_POOL" != 0 ]; then
	cat <<TXT

A sandbox from the warm pool default/python (artifacts/samples/pool-python.yaml), with an
outbound policy (without one, a sandbox reaches nothing: the platform's default denies all):

  kubectl get pools
  kubectl sandbox create fast --pool python --allow pypi.org --allow '*.pythonhosted.org'
  kubectl sandbox exec fast -- python3 -c 'print(6*7)'
  kubectl sandbox network fast
  kubectl get sandboxes -o wide
  kubectl sandbox delete fast

The same in gVisor (a user-space kernel between the sandbox and the node's; same policy):

  kubectl sandbox create isolated --pool python-gvisor --allow pypi.org
  kubectl sandbox exec isolated -- python3 -c 'import os; print(os.uname().release)'
  kubectl sandbox delete isolated
TXT
fi
cat <<TXT

Images on the node: $SANDBOX_IMAGE_PYTHON, $SANDBOX_IMAGE_BUSYBOX.
The cluster's registry: https://$REGISTRY (pods pull from it without pull secrets).
Stop everything with: make down
TXT
