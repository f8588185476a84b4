#!/usr/bin/env bash
# The Kafka demo: starts a local broker speaking the Kafka protocol (tansu,
# built into the tool folder by tests/setup.sh), then runs three jobs with
# `weir run`: the King James Bible into topic `lines`; word count from
# `lines` to `word-counts`, at-least-once; `word-counts` into a file. Prints
# the 10 most frequent words. The broker (in memory) stops with the script.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
echo "weir: building the example operators (udfs/, wasm32-wasip2)..." >&2
cargo build --release --target wasm32-wasip2 --manifest-path udfs/Cargo.toml --target-dir udfs/target
echo "weir: building weir..." >&2
cargo build --release --workspace --bin weir
BIN="${CARGO_TARGET_DIR:-target}/release/weir"
TANSU="${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/tansu-0.6.0/bin/tansu"

PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
BROKER="tcp://127.0.0.1:$PORT"
WORK="$(mktemp -d)"
# tansu reads a `.env` of its working directory: start it in an empty one.
(cd "$WORK" && exec "$TANSU" broker --listener-url "$BROKER" --advertised-listener-url "$BROKER" \
    --storage-engine memory://tansu/ >"$WORK/tansu.log" 2>&1) &
TANSU_PID=$!
trap 'kill "$TANSU_PID" 2>/dev/null; wait "$TANSU_PID" 2>/dev/null; rm -rf "$WORK"' EXIT
echo "weir: Kafka broker (tansu) on 127.0.0.1:$PORT" >&2
for _ in $(seq 1 100); do
    if "$TANSU" topic list --broker "$BROKER" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$TANSU_PID" 2>/dev/null; then cat "$WORK/tansu.log" >&2; exit 1; fi
    sleep 0.2
done
"$TANSU" topic create --broker "$BROKER" --partitions 4 lines >/dev/null
"$TANSU" topic create --broker "$BROKER" --partitions 4 word-counts >/dev/null

SERVERS="127.0.0.1:$PORT"
echo "weir: 1/3 the Bible into topic lines" >&2
"$BIN" run udfs/jobs/kafka/lines.toml --set "sink.lines.bootstrap_servers=$SERVERS"
echo "weir: 2/3 word count, topic lines -> topic word-counts" >&2
"$BIN" run udfs/jobs/kafka/word-count.toml \
    --set "source.lines.bootstrap_servers=$SERVERS" --set "sink.counts.bootstrap_servers=$SERVERS" "$@"
echo "weir: 3/3 topic word-counts into a file" >&2
"$BIN" run udfs/jobs/kafka/show.toml --set "source.counts.bootstrap_servers=$SERVERS"
OUT=udfs/jobs/out/kafka-word-counts.txt
echo >&2
echo "weir: the 10 most frequent words (from topic word-counts, via $OUT):" >&2
sort -t "$(printf '\t')" -k2,2nr "$OUT" | awk 'NR <= 10'
