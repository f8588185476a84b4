#!/usr/bin/env bash
# Runs Weir's whole test suite: the README's test command.
#
# Installs what the build needs when it is missing (libclang for RocksDB's
# bindings; the wasm32-wasip2 target comes from rust-toolchain.toml), then
# runs every test of the workspace in the release profile (one profile for
# tests, benches and the demo, so wasmtime and RocksDB are built once).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
exec cargo test --release --workspace "$@"
