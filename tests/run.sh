#!/usr/bin/env bash
# Runs Weir's whole test suite: the README's test command.
#
# Installs what the build needs when it is missing (libclang for RocksDB's
# bindings; the wasm32-wasip2 target comes from rust-toolchain.toml), then
# runs every test of the workspace in the release profile (one profile for
# tests, benches and the demo, so wasmtime and RocksDB are built once), and
# the example operators' native unit tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
cargo test --release --workspace "$@"
# The example operators' own unit tests (native, through weir-sdk's harness).
cargo test --release --manifest-path udfs/Cargo.toml --target-dir udfs/target "$@"
