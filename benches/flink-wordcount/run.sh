#!/usr/bin/env bash
# Word count and keyed count in Weir and in Flink 2.3 (DataStream API), side
# by side on the same input, each pinned to the same cores (issue 11, item 5).
#
#   bash benches/flink-wordcount/run.sh [--no-build] [harness options]
#   bash benches/flink-wordcount/run.sh --rounds 3                  # everything, ~20 min
#   bash benches/flink-wordcount/run.sh --check-only                # the small-input check
#   bash benches/flink-wordcount/run.sh --workloads words --backends rocksdb --parallelism 1 --rounds 1
#
# 1. installs Flink 2.3.0 from the PyPI wheels into
#    ${WEIR_TOOLS_DIR:-~/.cache/weir/tools}/flink-2.3.0, once
#    (benches/flink-install.sh, shared with benches/nexmark/run.sh);
# 2. compiles benches/flink-wordcount/WordCount.java against its lib/ and
#    writes the launcher $target/flink-wordcount/classes/flink-wordcount;
# 3. builds `weir` and the example operators, `tokenize` and `word-count`
#    among them (release, as cli/demo.sh does; skipped with --no-build, then
#    they must exist);
# 4. runs benches/flink-wordcount/harness.py: makes the inputs under
#    $target/flink-wordcount/data, checks that both systems emit the same
#    updates on a small input, then alternates Weir (words.toml, keys.toml)
#    and Flink (WordCount.java) for --rounds rounds and prints the tables;
#    every run is in benches/flink-wordcount/results.csv, their output in
#    $target/flink-wordcount/runs.log.
#
# $target is ${CARGO_TARGET_DIR:-<repo>/target}. Needs python3 with pip (for
# the wheels), Java 17 (java, javac), taskset, /usr/bin/time (Debian `time`),
# cargo with the wasm32-wasip2 target. The Python registry must be reachable
# for the first run; nothing else is downloaded.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/benches/flink-wordcount
target=${CARGO_TARGET_DIR:-$root/target}

build=1
if [ "${1:-}" = "--no-build" ]; then
    build=0
    shift
fi

for tool in java javac taskset python3; do
    command -v "$tool" >/dev/null || { echo "run.sh: needs $tool" >&2; exit 1; }
done
if [ ! -x /usr/bin/time ]; then
    echo "run.sh: installing Debian's time (/usr/bin/time)" >&2
    apt-get install -y -qq time >/dev/null
fi

# Installs Flink once; sets FLINK_HOME and opens.
. "$root/benches/flink-install.sh"

work=$target/flink-wordcount
flink_launcher "$here/WordCount.java" "$work/classes" flink-wordcount
launcher=$work/classes/flink-wordcount

cd "$root"
if [ "$build" = 1 ]; then
    cargo build --release --workspace --bin weir
    cargo build --release --target wasm32-wasip2 --manifest-path udfs/Cargo.toml --target-dir udfs/target
fi
for f in "$target/release/weir" udfs/target/wasm32-wasip2/release/tokenize.wasm \
    udfs/target/wasm32-wasip2/release/word_count.wasm; do
    [ -f "$f" ] || { echo "run.sh: $f is missing (run without --no-build)" >&2; exit 1; }
done

exec python3 "$here/harness.py" --weir "$target/release/weir" --flink "$launcher" \
    --work "$work" --csv "$here/results.csv" "$@"
