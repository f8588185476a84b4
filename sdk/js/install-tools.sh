#!/usr/bin/env bash
# Installs the JS SDK's pinned toolchain (sdk/js/tools/package-lock.json)
# with `npm ci` into DIR (default ${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/js).
# Does nothing when DIR already holds this exact lockfile's install.
#
#   sdk/js/install-tools.sh [DIR]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${1:-${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/js}"
lock="$here/tools/package-lock.json"

command -v npm >/dev/null || {
    echo "error: npm is required to install the JS toolchain: apt-get install nodejs npm" >&2
    exit 1
}

if [ -f "$tools/.weir-installed" ] && cmp -s "$lock" "$tools/.weir-installed"; then
    exit 0
fi

echo "installing the JS toolchain (componentize-js, componentize-qjs, jco, rolldown) into $tools ..." >&2
mkdir -p "$tools"
rm -f "$tools/.weir-installed"
cp "$here/tools/package.json" "$lock" "$tools/"
(cd "$tools" && npm ci --no-audit --no-fund --loglevel=error >&2)
cp "$lock" "$tools/.weir-installed"
