#!/usr/bin/env bash
# Builds a C operator project into a Weir component.
#
#   sdk/c/build.sh PROJECT_DIR OUT.wasm
#
# Compiles PROJECT_DIR/src/*.c with this SDK (weir.c and the generated
# bindings beside this script) into a wasm32-wasi reactor core module, then
# wraps it into a component with the WASI preview1 reactor adapter. Tools
# come from sdk/c/install-tools.sh; each can be overridden:
#
#   WEIR_CC            the C compiler            (default clang-19)
#   WEIR_WASM_TOOLS    wasm-tools                (default $TOOLS/c/venv/bin/wasm-tools)
#   WEIR_WASI_ADAPTER  the reactor adapter       (default $TOOLS/c/wasi_snapshot_preview1.reactor.wasm)
#   WEIR_CFLAGS        extra compiler flags, appended after the defaults
#
# where $TOOLS is ${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}. `weir build`
# runs the same two commands (WEIR_BUILD_VERBOSE=1 prints them).

set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 PROJECT_DIR OUT.wasm" >&2
    exit 2
fi
project=$1
out=$2
sdk=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tools="${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/c"
cc="${WEIR_CC:-clang-19}"
wasm_tools="${WEIR_WASM_TOOLS:-$tools/venv/bin/wasm-tools}"
adapter="${WEIR_WASI_ADAPTER:-$tools/wasi_snapshot_preview1.reactor.wasm}"

missing=()
command -v "$cc" >/dev/null 2>&1 || missing+=("$cc")
[ -x "$wasm_tools" ] || missing+=("$wasm_tools")
[ -f "$adapter" ] || missing+=("$adapter")
if [ ${#missing[@]} -gt 0 ]; then
    echo "build.sh: missing ${missing[*]}; install the C toolchain with $sdk/install-tools.sh" >&2
    exit 1
fi

shopt -s nullglob
sources=("$project"/src/*.c)
if [ ${#sources[@]} -eq 0 ]; then
    echo "build.sh: no C sources in $project/src/" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --target=wasm32-wasi, not wasm32-wasip1: the same target (WASI preview 1),
# but Debian's wasi-libc installs its sysroot under the old triple's name
# (/usr/include/wasm32-wasi, /usr/lib/wasm32-wasi), where clang-19 looks
# only for this spelling.
# WEIR_BUILD_VERBOSE=1 prints each command.
run() {
    if [ -n "${WEIR_BUILD_VERBOSE:-}" ]; then echo "+ $*" >&2; fi
    "$@"
}
# shellcheck disable=SC2086 # WEIR_CFLAGS is a list of flags
run "$cc" --target=wasm32-wasi -mexec-model=reactor -O2 -Wl,--strip-debug \
    -I "$sdk" -I "$sdk/bindings" -I "$project/src" \
    ${WEIR_CFLAGS:-} \
    -o "$tmp/core.wasm" \
    "${sources[@]}" "$sdk/weir.c" "$sdk/bindings/operator.c" "$sdk/bindings/operator_component_type.o"
run "$wasm_tools" component new "$tmp/core.wasm" \
    --adapt "wasi_snapshot_preview1=$adapter" -o "$out"
