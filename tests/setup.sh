#!/usr/bin/env bash
# Installs the system packages Weir's build needs, if missing:
# libclang (rust-rocksdb generates its bindings with bindgen at build time).
set -euo pipefail
if ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
    echo "weir: installing libclang-dev (needed to build RocksDB bindings)" >&2
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libclang-dev >/dev/null
fi
# The toolchain, its components and the wasm32-wasip2 target, from
# rust-toolchain.toml (a no-op when present; needed where RUSTUP_AUTO_INSTALL=0).
rustup toolchain install >/dev/null
