#!/usr/bin/env bash
# The Nexmark queries in Weir, in Flink 2.3 and as native Rust loops, over
# one generated file, each pinned to the same cores (issue 16).
#
#   bash benches/nexmark/run.sh [harness options, e.g. --events 1000000 --parallelism 1,2]
#
# 1. installs Flink 2.3.0 from the PyPI wheels (`apache-flink-libraries`:
#    lib/ with the runtime and connectors; `apache-flink`: bin/ and conf/)
#    into ${WEIR_TOOLS_DIR:-~/.cache/weir/tools}/flink-2.3.0, once
#    (benches/flink-install.sh, shared with benches/flink-wordcount);
# 2. compiles benches/nexmark/flink/NexmarkSql.java against its lib/;
# 3. builds Weir and the Nexmark operators (release);
# 4. runs the harness `target/release/nexmark` (benches/src/bin/nexmark.rs)
#    with the Flink launcher, writing benches/nexmark/results.csv;
# 5. draws benches/nexmark/nexmark.png from that CSV (`nexmark-chart`).
#
# Needs python3 with pip (to fetch the wheels), Java 17 (java, javac),
# taskset, cargo. The Python and Debian registries must be reachable for
# the first run; nothing else is downloaded.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/benches/nexmark
target=${CARGO_TARGET_DIR:-$root/target}

# Installs Flink once (shared with benches/flink-wordcount/run.sh); sets
# FLINK_HOME and opens.
. "$root/benches/flink-install.sh"

flink_launcher "$here/flink/NexmarkSql.java" "$target/nexmark-flink" flink-nexmark
launcher=$target/nexmark-flink/flink-nexmark

cd "$root"
cargo build --release --workspace --features weir-benches/chart
cargo build --release --target wasm32-wasip2 --manifest-path udfs/Cargo.toml --target-dir udfs/target
"$target/release/nexmark" --flink "$launcher" --csv "$here/results.csv" "$@"
if [ -x "$target/release/nexmark-chart" ]; then
    "$target/release/nexmark-chart" "$here/results.csv" "$here/nexmark.png"
fi
