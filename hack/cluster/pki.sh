#!/usr/bin/env bash
# pki.sh: creates the throwaway PKI of the local cluster under $PKI (_output/cluster/pki) and the
# kubeconfigs that use it: $ADMIN_KUBECONFIG (_output/kubeconfig, client cert in system:masters),
# $RUN/admin-token.kubeconfig (bearer token from $PKI/tokens.csv) and one kubeconfig per component
# in $RUN. Idempotent: a key/cert is (re)made only when missing or when its subject/SANs changed;
# a new CA re-issues everything signed by it. Never use these keys outside this machine.
set -euo pipefail
# shellcheck source=hack/lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
LOG_PREFIX=${LOG_PREFIX:-pki}

mkdir -p "$PKI" "$RUN"
chmod 700 "$PKI"
cd "$PKI"
DAYS=3650
made=0

# spec_changed NAME SPEC: true when NAME.crt is missing or was made from another spec.
spec_changed() { [ ! -s "$1.crt" ] || [ ! -s "$1.key" ] || [ "$(cat "$1.spec" 2>/dev/null)" != "$2" ]; }

mkca() { # name cn
	local spec="ca|$2"
	spec_changed "$1" "$spec" || return 0
	openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"
	openssl req -x509 -new -key "$1.key" -sha256 -days $DAYS -subj "/CN=$2" -out "$1.crt" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
	echo "$spec" >"$1.spec"
	# everything this CA signed must be re-issued
	local s
	for s in ./*.spec; do
		if grep -q "^signed-by:$1|" "$s"; then rm -f "${s%.spec}.crt"; fi
	done
	made=$((made + 1))
}

mkcert() { # name ca subject extendedKeyUsage [subjectAltNames]
	local n=$1 ca=$2 subj=$3 eku=$4 sans=${5:-} spec
	spec="signed-by:$ca|$subj|$eku|$sans"
	spec_changed "$n" "$spec" || return 0
	openssl ecparam -name prime256v1 -genkey -noout -out "$n.key"
	openssl req -new -key "$n.key" -subj "$subj" -out "$n.csr" 2>/dev/null
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$eku"
		[ -z "$sans" ] || echo "subjectAltName=$sans"
	} >"$n.ext"
	openssl x509 -req -in "$n.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days $DAYS -sha256 \
		-extfile "$n.ext" -out "$n.crt" 2>/dev/null
	rm -f "$n.csr" "$n.ext"
	echo "$spec" >"$n.spec"
	made=$((made + 1))
}

mkca ca kubernetes-ca
mkca front-proxy-ca front-proxy-ca

mkcert apiserver ca "/CN=kube-apiserver" serverAuth \
	"DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:$HOST_IP"
mkcert admin ca "/O=system:masters/CN=kube-sandbox-admin" clientAuth
mkcert apiserver-kubelet-client ca "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
mkcert controller-manager ca "/CN=system:kube-controller-manager" clientAuth
mkcert scheduler ca "/CN=system:kube-scheduler" clientAuth
mkcert kubelet-client ca "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
mkcert kubelet-serving ca "/O=system:nodes/CN=system:node:$NODE_NAME" serverAuth \
	"DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$HOST_IP"
# serving cert of our aggregated API server (Service kube-sandbox-system/sandbox-apiserver; it may
# also run as a host process on $HOST_IP). The APIService carries ca.crt as caBundle.
mkcert sandbox-apiserver ca "/CN=sandbox-apiserver" serverAuth \
	"DNS:sandbox-apiserver.kube-sandbox-system.svc,DNS:sandbox-apiserver.kube-sandbox-system.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$HOST_IP"
# the aggregator authenticates to aggregated API servers with this cert (requestheader auth)
mkcert front-proxy-client front-proxy-ca "/CN=front-proxy-client" clientAuth
# serving cert of the cluster's OCI registry (a host process on $REGISTRY); containerd and the
# components verify it with ca.crt
mkcert registry ca "/CN=kube-sandbox-registry" serverAuth "IP:$HOST_IP,IP:127.0.0.1,DNS:localhost"

if [ ! -s sa.key ] || [ ! -s sa.pub ]; then
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	made=$((made + 1))
fi
if [ ! -s tokens.csv ]; then
	echo "$(openssl rand -hex 24),kube-sandbox-admin,kube-sandbox-admin,system:masters" >tokens.csv
	made=$((made + 1))
fi
# The registry's one user, $REGISTRY_USER: a random password made once and kept (what was pushed
# stays pullable, the Secret kube-sandbox-registry keeps working), and its bcrypt htpasswd file,
# made again when it no longer matches the password (htpasswd reads the password from stdin,
# never from its command line).
if [ ! -s "$REGISTRY_PASSWORD_FILE" ]; then
	(umask 077 && openssl rand -hex 24 | tr -d '\n' >"$REGISTRY_PASSWORD_FILE")
	made=$((made + 1))
fi
if ! htpasswd -v -i registry.htpasswd "$REGISTRY_USER" <"$REGISTRY_PASSWORD_FILE" >/dev/null 2>&1; then
	(umask 077 && htpasswd -n -i -B "$REGISTRY_USER" <"$REGISTRY_PASSWORD_FILE" | grep . >registry.htpasswd.tmp)
	mv registry.htpasswd.tmp registry.htpasswd
	made=$((made + 1))
fi
chmod 600 ./*.key tokens.csv "$REGISTRY_PASSWORD_FILE" registry.htpasswd

# kubeconfigs (cheap: rendered every time so they follow the PKI and $APISERVER_URL)
mkkubeconfig "$ADMIN_KUBECONFIG" kube-sandbox-admin "$PKI/admin.crt" "$PKI/admin.key"
TOKEN=$(cut -d, -f1 tokens.csv) mkkubeconfig "$RUN/admin-token.kubeconfig" kube-sandbox-admin
mkkubeconfig "$RUN/controller-manager.kubeconfig" system:kube-controller-manager "$PKI/controller-manager.crt" "$PKI/controller-manager.key"
mkkubeconfig "$RUN/scheduler.kubeconfig" system:kube-scheduler "$PKI/scheduler.crt" "$PKI/scheduler.key"
mkkubeconfig "$RUN/kubelet.kubeconfig" "system:node:$NODE_NAME" "$PKI/kubelet-client.crt" "$PKI/kubelet-client.key"

if [ $made -gt 0 ]; then log "PKI: made $made key(s)/cert(s) in $PKI"; else log "PKI up to date in $PKI"; fi
