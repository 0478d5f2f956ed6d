#!/usr/bin/env bash
# build.sh [IMAGE...]: builds the local cluster's container images as docker-archive tarballs in
# $IMAGES (_output/images), without Docker or a registry; hack/cluster/up.sh imports them into our
# containerd. IMAGE is one of: pause busybox python kube-sandbox (default: all).
# An image is rebuilt only when its inputs changed (content stamp next to the tarball), so a warm
# run is instant. The python rootfs is debootstrapped once (needs root, a few minutes) and cached
# in $CACHE (_output/cache). kube-sandbox:dev is skipped until _output/bin holds our binaries.
set -euo pipefail
# shellcheck source=hack/lib/common.sh
source "$(dirname "$0")/../lib/common.sh"
LOG_PREFIX=images

# Image refs. They are defined once, in hack/lib/common.sh, because manifests and tests use them.
readonly IMG_PAUSE=$PAUSE_IMAGE                # registry.k8s.io/pause:3.10
readonly IMG_BUSYBOX=$SANDBOX_IMAGE_BUSYBOX    # kube-sandbox.local/sandbox-busybox:latest
readonly IMG_PYTHON=$SANDBOX_IMAGE_PYTHON      # kube-sandbox.local/sandbox-python:3.11
readonly IMG_KUBE_SANDBOX=$KUBE_SANDBOX_IMAGE  # kube-sandbox.local/kube-sandbox:dev
readonly SANDBOX_BINARIES=(sandbox-apiserver sandbox-controller sandbox-execd sandbox-node)
readonly PY_SUITE=bookworm PY_VARIANT=minbase PY_INCLUDE=python3
# ipykernel and matplotlib: code contexts (sandboxes/contexts) run Jupyter kernels, and plots
# come back as PNG. apt installs them in the debootstrapped root: debootstrap's own resolver
# configures their dependencies in an order that fails.
readonly PY_PACKAGES="python3-ipykernel python3-matplotlib"

MKIMAGE=$ROOT/hack/images/mkimage.sh
BUSYBOX=${BUSYBOX:-/bin/busybox}
mkdir -p "$IMAGES" "$CACHE"
WORK=$(mktemp -d "$OUT/.images-build.XXXXXX")
cleanup() {
	# debootstrap mounts proc/sys inside its target; never rm -rf across a mount
	local m
	for m in $(awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m" 2>/dev/null || true; done
	if awk -v w="$WORK/" 'index($2, w) == 1 {f=1} END {exit !f}' /proc/mounts; then
		echo "[images] WARNING: mounts left under $WORK, not removing it" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT

# stamp WORDS...: hash of strings, file contents and function bodies (prefix fn: for functions).
stamp() {
	local a
	for a in "$@"; do
		case $a in
		fn:*) declare -f "${a#fn:}" ;;
		file:*) sha256sum "${a#file:}" ;;
		*) echo "$a" ;;
		esac
	done | sha256sum | cut -c1-32
}
# up_to_date NAME STAMP: the tarball exists and was made from the same inputs.
up_to_date() { [ -s "$IMAGES/$1.tar" ] && [ "$(cat "$IMAGES/.$1.stamp" 2>/dev/null)" = "$2" ]; }
done_image() { echo "$2" >"$IMAGES/.$1.stamp"; }

# --- rootfs builders -------------------------------------------------------------------------
busybox_rootfs() { # DIR: busybox-static with every applet linked in /bin, root and nobody users
	local d=$1 a
	mkdir -p "$d"/{bin,sbin,etc,root,tmp,var/tmp,usr/bin,usr/sbin,usr/local/bin,home,proc,sys,dev}
	cp "$BUSYBOX" "$d/bin/busybox"
	chmod 755 "$d/bin/busybox"
	for a in $("$d/bin/busybox" --list); do
		[ "$a" = busybox ] || ln -sf busybox "$d/bin/$a"
	done
	ln -sf /bin/busybox "$d/usr/bin/env"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$d/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$d/etc/group"
	chmod 755 "$d" "$d"/{bin,sbin,etc,usr,usr/bin,usr/sbin,usr/local,usr/local/bin,home,var}
	chmod 700 "$d/root"
	chmod 1777 "$d/tmp" "$d/var/tmp"
	chmod 644 "$d/etc/passwd" "$d/etc/group"
}

# debian_mirror prints the URI of the machine's main Debian suite from its apt configuration.
debian_mirror() {
	local suite=$1 f uri=""
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		uri=$(awk -v s="$suite" 'BEGIN {RS=""; FS="\n"}
			{ t=""; u=""; su=""
			  for (i = 1; i <= NF; i++) {
				if ($i ~ /^Types:/) t=$i
				if ($i ~ /^URIs:/) { u=$i; sub(/^URIs:[ \t]*/, "", u); split(u, uu, /[ \t]+/); u=uu[1] }
				if ($i ~ /^Suites:/) su=" " $i " "
			  }
			  if (t ~ /[ \t]deb([ \t]|$)/ && su ~ ("[ \t]" s "[ \t]") && u != "") { print u; exit } }' "$f")
		[ -z "$uri" ] || break
	done
	if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
		uri=$(awk -v s="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) == s) { print $i; exit } }' /etc/apt/sources.list)
	fi
	[ -n "$uri" ] || die "no Debian mirror for suite $suite in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list"
	echo "$uri"
}

# python_rootfs_tar: the cached debootstrap rootfs tarball, made once (needs root).
python_rootfs_clean() { # DIR: drop what a container image does not need
	local d=$1
	rm -rf "$d"/var/cache/apt/* "$d"/var/lib/apt/lists/* "$d"/var/cache/debconf/*-old "$d"/var/lib/dpkg/*-old \
		"$d"/usr/share/doc/* "$d"/usr/share/man/* "$d"/usr/share/info/* "$d"/usr/share/locale/* \
		"$d"/usr/share/lintian "$d"/usr/share/linda "$d"/var/log/* "$d"/tmp/* "$d"/var/tmp/* \
		"$d"/etc/hostname "$d"/etc/resolv.conf "$d"/etc/machine-id "$d"/root/.bash_history
	find "$d" -xdev -name __pycache__ -type d -prune -exec rm -rf {} +
	: >"$d/etc/machine-id"
}
python_rootfs_tar() {
	local tarball=$CACHE/rootfs-$PY_SUITE-$PY_VARIANT-python3.tar st mirror d s
	st=$(stamp "$PY_SUITE" "$PY_VARIANT" "$PY_INCLUDE" "$PY_PACKAGES" fn:python_rootfs_clean)
	if [ -s "$tarball" ] && [ "$(cat "$tarball.stamp" 2>/dev/null)" = "$st" ]; then
		echo "$tarball"
		return 0
	fi
	need_root
	ensure_packages debootstrap
	mirror=$(debian_mirror "$PY_SUITE")
	d=$WORK/python-rootfs
	s=$(date +%s.%N)
	log "debootstrap $PY_SUITE --variant=$PY_VARIANT --include=$PY_INCLUDE from $mirror (once; a few minutes)" >&2
	if ! debootstrap --variant="$PY_VARIANT" --include="$PY_INCLUDE" --components=main "$PY_SUITE" "$d" "$mirror" \
		>"$WORK/debootstrap.log" 2>&1; then
		tail -30 "$WORK/debootstrap.log" >&2
		[ -f "$d/debootstrap/debootstrap.log" ] && tail -30 "$d/debootstrap/debootstrap.log" >&2
		die "debootstrap failed"
	fi
	log "apt-get install $PY_PACKAGES in the rootfs" >&2
	# shellcheck disable=SC2086 # a list of packages
	if ! chroot "$d" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $PY_PACKAGES \
		>"$WORK/apt.log" 2>&1; then
		tail -30 "$WORK/apt.log" >&2
		die "installing $PY_PACKAGES in the python rootfs failed"
	fi
	chroot "$d" python3 -c 'import ipykernel, matplotlib' || die "no ipykernel or matplotlib in the python rootfs"
	python_rootfs_clean "$d"
	"$d/usr/bin/python3" --version >/dev/null 2>&1 || chroot "$d" python3 --version >/dev/null || die "no python3 in rootfs"
	tar --sort=name --numeric-owner --xattrs -C "$d" --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* \
		-cf "$tarball.tmp" .
	mv "$tarball.tmp" "$tarball"
	echo "$st" >"$tarball.stamp"
	log "python rootfs cached in $tarball ($(du -m "$tarball" | cut -f1) MiB) after $(elapsed "$s")s" >&2
	echo "$tarball"
}

# --- images ----------------------------------------------------------------------------------
image_pause() {
	local st bin=$WORK/pause-rootfs
	st=$(stamp "$IMG_PAUSE" "$(go version)" "file:$ROOT/hack/images/pause/main.go" "file:$MKIMAGE" fn:image_pause)
	up_to_date pause "$st" && { log "pause: up to date ($IMG_PAUSE)"; return 0; }
	mkdir -p "$bin"
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$bin/pause" ./hack/images/pause)
	"$MKIMAGE" "$IMAGES/pause.tar" "$IMG_PAUSE" "$bin" null '["/pause"]' | sed 's/^/  /'
	done_image pause "$st"
	log "pause: built $IMG_PAUSE"
}

image_busybox() {
	local st
	st=$(stamp "$IMG_BUSYBOX" "file:$BUSYBOX" "file:$MKIMAGE" fn:busybox_rootfs fn:image_busybox)
	up_to_date busybox "$st" && { log "busybox: up to date ($IMG_BUSYBOX)"; return 0; }
	busybox_rootfs "$WORK/busybox-rootfs"
	"$MKIMAGE" "$IMAGES/busybox.tar" "$IMG_BUSYBOX" "$WORK/busybox-rootfs" '["sh"]' | sed 's/^/  /'
	done_image busybox "$st"
	log "busybox: built $IMG_BUSYBOX"
}

image_python() {
	local st tarball
	tarball=$(python_rootfs_tar)
	st=$(stamp "$IMG_PYTHON" "$(cat "$tarball.stamp")" "$(stat -c '%s %Y' "$tarball")" "file:$MKIMAGE" fn:image_python)
	up_to_date python "$st" && { log "python: up to date ($IMG_PYTHON)"; return 0; }
	"$MKIMAGE" "$IMAGES/python.tar" "$IMG_PYTHON" "$tarball" '["python3"]' | sed 's/^/  /'
	done_image python "$st"
	log "python: built $IMG_PYTHON"
}

image_kube_sandbox() {
	local st b missing=() files=()
	for b in "${SANDBOX_BINARIES[@]}"; do
		if [ -x "$BIN/$b" ]; then files+=("file:$BIN/$b"); else missing+=("$b"); fi
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "kube-sandbox: SKIP $IMG_KUBE_SANDBOX (not built yet in $BIN: ${missing[*]}; run make build first)"
		return 0
	fi
	st=$(stamp "$IMG_KUBE_SANDBOX" "${files[@]}" "file:$BUSYBOX" "file:$MKIMAGE" fn:busybox_rootfs fn:image_kube_sandbox)
	up_to_date kube-sandbox "$st" && { log "kube-sandbox: up to date ($IMG_KUBE_SANDBOX)"; return 0; }
	busybox_rootfs "$WORK/kube-sandbox-rootfs"
	for b in "${SANDBOX_BINARIES[@]}"; do install -m 0755 "$BIN/$b" "$WORK/kube-sandbox-rootfs/usr/local/bin/$b"; done
	"$MKIMAGE" "$IMAGES/kube-sandbox.tar" "$IMG_KUBE_SANDBOX" "$WORK/kube-sandbox-rootfs" '["sh"]' | sed 's/^/  /'
	done_image kube-sandbox "$st"
	log "kube-sandbox: built $IMG_KUBE_SANDBOX"
}

[ -x "$BUSYBOX" ] || { ensure_packages busybox-static; }
for img in "${@:-pause busybox python kube-sandbox}"; do
	for i in $img; do
		case $i in
		pause) image_pause ;;
		busybox) image_busybox ;;
		python) image_python ;;
		kube-sandbox) image_kube_sandbox ;;
		*) die "unknown image $i (pause busybox python kube-sandbox)" ;;
		esac
	done
done
log "images in $IMAGES: $(cd "$IMAGES" && ls -- *.tar 2>/dev/null | tr '\n' ' ')"
