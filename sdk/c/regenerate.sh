#!/usr/bin/env bash
# Regenerates the committed C bindings in sdk/c/bindings/ from wit/operator.wit,
# world window-operator (maintainers only; see REGENERATE.md).
#
#   sdk/c/regenerate.sh           rewrite sdk/c/bindings/
#   sdk/c/regenerate.sh --check   exit 1 if sdk/c/bindings/ is not what the WIT generates
#
# Needs wit-bindgen 0.60.0 at ${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/wit-bindgen/bin
# (sdk/c/install-tools.sh --wit-bindgen builds it, ~18 minutes).

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
wit_bindgen="${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/wit-bindgen/bin/wit-bindgen"
version="0.60.0"

if ! "$wit_bindgen" --version 2>/dev/null | grep -q "$version"; then
    echo "regenerate.sh: needs wit-bindgen $version at $wit_bindgen: run $here/install-tools.sh --wit-bindgen" >&2
    exit 1
fi

out="$here/bindings"
if [ "${1:-}" = "--check" ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi

# The command (run from the repository root):
if ! log=$(cd "$repo" && "$wit_bindgen" c wit/operator.wit --world window-operator \
    --rename-world operator --out-dir "$out" 2>&1); then
    echo "$log" >&2
    exit 1
fi

if [ "${1:-}" = "--check" ]; then
    if diff -r "$out" "$here/bindings" >/dev/null; then
        echo "sdk/c/bindings/ is up to date with wit/operator.wit"
    else
        echo "sdk/c/bindings/ is stale: run sdk/c/regenerate.sh" >&2
        exit 1
    fi
fi
