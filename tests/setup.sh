#!/usr/bin/env bash
# Installs the system packages Weir's build and tests need, if missing:
# libclang (rust-rocksdb generates its bindings with bindgen at build time)
# and Debian's prometheus (the server and promtool: the monitoring test
# scrapes the daemons with the real server, tests/all/cluster/observe.rs)
# and Debian's chromium (the web UI test drives it headless,
# tests/all/cluster/ui.rs; no browser is downloaded by any tool).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
updated=""
apt_install() {
    if [ -z "$updated" ]; then
        $SUDO apt-get update -qq
        updated=1
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}
if ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
    echo "weir: installing libclang-dev (needed to build RocksDB bindings)" >&2
    apt_install libclang-dev
fi
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    echo "weir: installing prometheus (the monitoring test runs the real server)" >&2
    apt_install --no-install-recommends prometheus
    # The package's own service is not what the test runs: where an init
    # system started it, stop it again (the test starts its own, on a free
    # port, in a temporary directory).
    if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
        $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
fi
if ! [ -x /usr/bin/chromium ]; then
    echo "weir: installing chromium (the web UI test runs it headless)" >&2
    apt_install --no-install-recommends chromium
fi
# The toolchain, its components and the wasm32-wasip2 target, from
# rust-toolchain.toml (a no-op when present; needed where RUSTUP_AUTO_INSTALL=0).
rustup toolchain install >/dev/null
