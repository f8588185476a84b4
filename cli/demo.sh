#!/usr/bin/env bash
# Builds Weir and the example operators, then runs the word-count demo over
# the bundled King James Bible (public domain) on the embedded local cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the build needs (libclang, the toolchain); not the test tools.
bash tests/setup.sh --build-only
echo "weir: building the demo's operators (udfs/tokenize, udfs/word-count; wasm32-wasip2)..." >&2
# Only the two the job uses: the test suite builds the other examples.
cargo build --release --target wasm32-wasip2 --manifest-path udfs/Cargo.toml --target-dir udfs/target \
    -p tokenize -p word-count
echo "weir: building weir..." >&2
# With --workspace (not -p weir-cli) wasmtime and RocksDB get the same
# features as in the test suite's build (tests/run.sh): built once for both.
cargo build --release --workspace --bin weir
BIN="${CARGO_TARGET_DIR:-target}/release/weir"
"$BIN" run udfs/jobs/word-count.toml "$@"
OUT=udfs/jobs/out/word-counts.txt
echo >&2
echo "weir: the 10 most frequent words (from $OUT):" >&2
# `sort | head` under pipefail: head closing the pipe early would make sort
# exit 141, so take the first lines in awk, which reads all of its input.
sort -t "$(printf '\t')" -k2,2nr "$OUT" | awk 'NR <= 10'
