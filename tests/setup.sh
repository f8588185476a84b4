#!/usr/bin/env bash
# Installs what Weir's build and tests need, if missing. For the build:
# the toolchain and its wasm32-wasip2 target (from rust-toolchain.toml),
# libclang (rust-rocksdb generates its bindings with bindgen at build
# time) and clang (.cargo/config.toml compiles RocksDB's C++ with it, about
# a quarter less CPU than g++); that is all `--build-only` installs (the
# demo, cli/demo.sh). For the tests, also: Debian's prometheus (the server
# and promtool: the monitoring test scrapes the daemons with the real server,
# tests/all/cluster/observe.rs), Debian's chromium (the web UI test drives
# it headless, tests/all/cluster/ui.rs; no browser is downloaded by any
# tool), Debian's nats-server (the NATS connector tests), DuckDB for Python
# (the Nexmark oracle, into the tool folder) and the tansu Kafka broker
# (built from its crate into the tool folder, about 10 minutes once).
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
if ! command -v clang++ >/dev/null; then
    # RocksDB's C++ is most of a cold build; clang++ compiles it with about
    # a quarter less CPU than g++ (.cargo/config.toml picks it when present).
    echo "weir: installing clang (compiles RocksDB's C++ faster than g++)" >&2
    apt_install --no-install-recommends clang
fi
# The toolchain, its components and the wasm32-wasip2 target, from
# rust-toolchain.toml (a no-op when present; needed where RUSTUP_AUTO_INSTALL=0).
rustup toolchain install >/dev/null
case "${1:-}" in
    --build-only) exit 0 ;;
    "") ;;
    *) echo "tests/setup.sh: unknown argument \`$1\` (expected nothing or --build-only)" >&2; exit 2 ;;
esac
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
if ! command -v nats-server >/dev/null; then
    # From Debian, like every service the tests run: the only registries
    # reachable here are Debian's, crates.io, PyPI and npm, and NATS ships
    # its server through none of the others. Debian's 2.9 has JetStream
    # (`-js`), its de-duplication window and ordered consumers: what the
    # NATS connectors use (tests/all/nats.rs starts one per test).
    echo "weir: installing nats-server (the NATS JetStream connector tests run the real server)" >&2
    apt_install --no-install-recommends nats-server
    if command -v systemctl >/dev/null && systemctl is-active --quiet nats-server 2>/dev/null; then
        $SUDO systemctl disable --now nats-server >/dev/null 2>&1 || true
    fi
fi
# DuckDB for Python, the Nexmark oracle (tests/all/nexmark.rs runs
# udfs/jobs/nexmark/oracle.py with it): one wheel from PyPI, about 45 s and
# 70 MB, kept in the tool folder outside the clone.
DUCKDB_DIR="${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/duckdb-2.0.1"
if [ ! -d "$DUCKDB_DIR/duckdb" ]; then
    echo "weir: installing DuckDB 2.0.1 for Python into $DUCKDB_DIR (the Nexmark oracle)" >&2
    rm -rf "$DUCKDB_DIR.tmp"
    python3 -m pip install -q --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
        --target "$DUCKDB_DIR.tmp" duckdb==2.0.1
    rm -rf "$DUCKDB_DIR" && mv "$DUCKDB_DIR.tmp" "$DUCKDB_DIR"
fi
# tansu, a broker speaking the Kafka protocol (the Kafka connector tests
# and the Kafka demo run it): no Kafka broker ships through Debian, PyPI or
# npm, and tansu is a Rust crate, so it is built once from crates.io into
# the tool folder (about 10 minutes on two cores; `--locked`: the versions
# its authors tested), with its in-memory storage engine only.
TANSU_DIR="${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/tansu-0.6.0"
if [ ! -x "$TANSU_DIR/bin/tansu" ]; then
    echo "weir: building the tansu Kafka broker 0.6.0 into $TANSU_DIR (once; the Kafka tests run it)" >&2
    rm -rf "$TANSU_DIR.tmp"
    CARGO_PROFILE_RELEASE_DEBUG=false cargo install --quiet --locked tansu@0.6.0 \
        --no-default-features --features dynostore \
        --root "$TANSU_DIR.tmp" --target-dir "$TANSU_DIR.build"
    rm -rf "$TANSU_DIR" "$TANSU_DIR.build" && mv "$TANSU_DIR.tmp" "$TANSU_DIR"
fi
