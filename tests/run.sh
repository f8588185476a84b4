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
# Formatting first: it takes a second and names the file.
cargo fmt --all -- --check
cargo fmt --manifest-path udfs/Cargo.toml --all -- --check
cargo test --release --workspace "$@"
# Lints in the release profile, so RocksDB's C++ is not built a second time.
cargo clippy --release --workspace --all-targets -- -D warnings
# The example operators' own unit tests (native, through weir-sdk's harness).
cargo test --release --manifest-path udfs/Cargo.toml --target-dir udfs/target "$@"
cargo clippy --release --manifest-path udfs/Cargo.toml --target-dir udfs/target --all-targets -- -D warnings
# The other SDKs' own unit tests and their examples' (plain python3, node
# and cc: no Wasm toolchain needed).
python3 -m unittest discover -s sdk/python/tests
for t in udfs/python/*/test_*.py; do (cd "$(dirname "$t")" && python3 -m unittest); done
# Files, not folders: Node 21 and later read a folder argument as a glob.
node --test sdk/js/test/*.test.js udfs/js/*/*.test.js
for d in udfs/c/*/src sdk/c/tests/*/src; do bash sdk/c/test.sh "$(dirname "$d")"; done
