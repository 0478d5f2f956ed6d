#!/usr/bin/env bash
# mkimage.sh OUT.tar IMAGE_REF ROOTFS ['CMD_JSON' ['ENTRYPOINT_JSON']]
# Writes a single-layer image as a docker-archive tarball (`ctr images import` / `docker load`)
# without Docker or a registry. ROOTFS is a directory (archived with sorted names, fixed mtimes and
# root ownership, so equal content gives an equal digest) or an existing uncompressed .tar of a root
# filesystem (used as the layer as is). The tarball is written atomically.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 OUT.tar IMAGE_REF ROOTFS_DIR|ROOTFS.tar ['CMD_JSON' ['ENTRYPOINT_JSON']]" >&2; exit 2; }
out=$1 ref=$2 rootfs=$3 cmd=${4:-'["sh"]'} ep=${5:-null}
mkdir -p "$(dirname "$out")"
w=$(mktemp -d "$(dirname "$out")/.mkimage.XXXXXX")
trap 'rm -rf "$w"' EXIT

if [ -d "$rootfs" ]; then
	tar --sort=name --mtime='2000-01-01 00:00:00Z' --owner=0 --group=0 --numeric-owner \
		-C "$rootfs" -cf "$w/layer.tar" .
elif [ -f "$rootfs" ]; then
	ln "$rootfs" "$w/layer.tar" 2>/dev/null || cp "$rootfs" "$w/layer.tar"
else
	echo "mkimage: no such rootfs $rootfs" >&2
	exit 1
fi
layer=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
mkdir "$w/$layer"
mv "$w/layer.tar" "$w/$layer/layer.tar"

cat >"$w/config.json" <<JSON
{"architecture":"amd64","os":"linux","created":"2000-01-01T00:00:00Z","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Entrypoint":$ep,"Cmd":$cmd,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$layer"]},"history":[{"created":"2000-01-01T00:00:00Z","created_by":"hack/images/mkimage.sh"}]}
JSON
config=$(sha256sum "$w/config.json" | cut -d' ' -f1)
mv "$w/config.json" "$w/$config.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]\n' "$config" "$ref" "$layer" >"$w/manifest.json"
tar --owner=0 --group=0 --numeric-owner -C "$w" -cf "$w/image.tar" manifest.json "$config.json" "$layer"
mv "$w/image.tar" "$out"
echo "wrote $out ($ref, config sha256:${config:0:12}, $(du -m "$out" | cut -f1) MiB)"
