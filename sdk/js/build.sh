#!/usr/bin/env bash
# Builds a JavaScript (or TypeScript) Weir operator into a Wasm component.
#
#   sdk/js/build.sh PROJECT_DIR OUT.wasm
#
# PROJECT_DIR holds the operator's entry module: `index.js` or `index.ts`
# (or the file named by "main" in PROJECT_DIR/package.json), which exports
# `operator` (what the SDK's keyed()/map()/flatMap()/filter()/operator()
# return) and imports the SDK by a relative path.
#
# Steps, all with the pinned toolchain of sdk/js/tools (installed with
# `npm ci` into ${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/js when missing
# or out of date; never globally):
#   1. write a wrapper entry that imports the four host interfaces of
#      wit/operator.wit (every state function by name, with the batched
#      `value-get-many` / `value-set-many` of contract 0.1.3), binds them
#      for the SDK, re-exports `operator` and
#      exports `migration` (the entry's own `migration` if it exports one,
#      else `operator.migrateState`, else one keeping every stored value),
#      `two-input`, `processing-time` and `window-function` (the entry's
#      own, else the operator object's `windowFunction`: the user's
#      aggregate()/processWindow() function, kind `none` for the others);
#   2. bundle wrapper + entry + SDK into one ES module with rolldown
#      (weir:* and wasi:* stay imports);
#   3. componentize it for the world `window-operator` (contract 0.1.3).
#
# Environment:
#   WEIR_JS_BACKEND   quickjs (default: componentize-qjs; ~1.9 MB, fast
#                     host calls) or starlingmonkey (componentize-js;
#                     ~12 MB, full Web APIs, 3.5x slower on word count and
#                     needs job.limits.memory_mb = 256). See README.md.
#   WEIR_WIT_DIR      the contract's WIT folder (default: ../../wit from here).
#   WEIR_TOOLS_DIR    where toolchains live (default: ~/.cache/weir/tools).
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 PROJECT_DIR OUT.wasm" >&2
    exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
project="$(cd "$1" && pwd)"
out="$2"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
wit="${WEIR_WIT_DIR:-$here/../../wit}"
wit="$(cd "$wit" && pwd)"
tools="${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/js"
backend="${WEIR_JS_BACKEND:-quickjs}"

command -v node >/dev/null || {
    echo "error: node (>= 18) is required: apt-get install nodejs npm" >&2
    exit 1
}

# 1. The pinned toolchain, reinstalled when the lockfile changes.
"$here/install-tools.sh" "$tools"

# 2. The entry module.
entry=""
if [ -f "$project/package.json" ]; then
    entry="$(node -e 'const p=require(process.argv[1]); process.stdout.write(p.main||"")' "$project/package.json")"
fi
if [ -z "$entry" ]; then
    for candidate in index.js index.mjs index.ts; do
        if [ -f "$project/$candidate" ]; then entry="$candidate"; break; fi
    done
fi
if [ -z "$entry" ] || [ ! -f "$project/$entry" ]; then
    echo "error: no entry module in $project (index.js, index.ts, or \"main\" in package.json)" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

case "$backend" in
    starlingmonkey | sm) backend_tag=sm ;;
    quickjs | qjs) backend_tag=qjs ;;
    *)
        echo "error: WEIR_JS_BACKEND must be starlingmonkey or quickjs, got '$backend'" >&2
        exit 1
        ;;
esac

# The package name and version become the operator's defaults (as Cargo's do in Rust).
pkg='{}'
if [ -f "$project/package.json" ]; then
    pkg="$(node -e 'const p=require(process.argv[1]); process.stdout.write(JSON.stringify({name:p.name,version:p.version}))' "$project/package.json")"
fi

# The contract's version, as the WIT states it: the host interfaces are
# imported at that version.
contract_version="$(sed -n 's/^package weir:operator@\([0-9.]*\);$/\1/p' "$wit/operator.wit")"
if [ -z "$contract_version" ]; then
    echo "build.sh: no 'package weir:operator@X.Y.Z;' line in $wit/operator.wit" >&2
    exit 1
fi

cat >"$work/wrapper.js" <<EOF
// Every state call the SDK makes, by name, so that each componentizer binds
// it; value-get-many and value-set-many (contract 0.1.3) read and write a
// keyed batch's value state in one call per state.
import {
  valueGet, valueSet, listGet, listAdd, mapGet, mapPut, mapRemove, mapEntries, clear,
  valueGetMany, valueSetMany,
} from 'weir:operator/state@$contract_version';
import * as timers from 'weir:operator/timers@$contract_version';
import * as log from 'weir:operator/log@$contract_version';
import * as metrics from 'weir:operator/metrics@$contract_version';
import * as user from $(node -e 'process.stdout.write(JSON.stringify(process.argv[1]))' "$project/$entry");
const state = {
  valueGet, valueSet, listGet, listAdd, mapGet, mapPut, mapRemove, mapEntries, clear,
  valueGetMany, valueSetMany,
};
globalThis.__weirHost = { backend: '$backend_tag', state, timers, log, metrics, package: $pkg };
export const operator = user.operator;
// The SDK's adapters implement migrate-state on the operator object; an
// operator written by hand (or with an SDK copy from before migrations)
// keeps every stored value as it is.
// Two inputs and processing-time timers (contract 0.1.2): the SDK's
// operators implement both; one written by hand gets input 0 only and no
// processing-time timers (it cannot register any without this export).
const op = user.operator;
export const twoInput = user.twoInput ?? {
  processInput: typeof op.processInput === 'function'
    ? (input, records) => op.processInput(input, records)
    : (input, records) => {
        if (input === 0) return op.process(records);
        throw new Error(\`this operator has one input, but a batch arrived on input \${input}\`);
      },
};
export const processingTime = user.processingTime ?? {
  onProcessingTimer: typeof op.onProcessingTimer === 'function'
    ? (key, time) => op.onProcessingTimer(key, time)
    : () => ({ main: { timestamps: new BigInt64Array(0), keyLens: new Int32Array(0), valueLens: new Uint32Array(0), data: new Uint8Array(0) }, side: [] }),
};
// Window functions (contract 0.1.3): aggregate() and processWindow() set
// \`windowFunction\`; every other operator's (and one written by hand) has
// kind none and refuses the window calls.
const notWindow = (call) => () => {
  throw \`window-function.\${call}: this module is not a window function (its window-function kind is none)\`;
};
export const windowFunction = user.windowFunction ?? op.windowFunction ?? {
  kind: () => 'none',
  add: notWindow('add'),
  merge: notWindow('merge'),
  getResult: notWindow('get-result'),
  processWindow: notWindow('process-window'),
};
export const migration = user.migration ?? {
  migrateState: typeof user.operator.migrateState === 'function'
    ? (name, fromVersion, old) => user.operator.migrateState(name, fromVersion, old)
    : (name, fromVersion, old) => old,
};
EOF

"$tools/node_modules/.bin/rolldown" "$work/wrapper.js" \
    --file "$work/bundle.js" --format esm --platform neutral \
    --external "weir:operator/state@$contract_version,weir:operator/timers@$contract_version,weir:operator/log@$contract_version,weir:operator/metrics@$contract_version" \
    >"$work/rolldown.log" 2>&1 || {
    cat "$work/rolldown.log" >&2
    exit 1
}

# 3. Componentize.
mkdir -p "$(dirname "$out")"
if [ "$backend_tag" = sm ]; then
    # wasi:http is not linked by the host; fetch-event is an http export.
    node "$tools/node_modules/@bytecodealliance/componentize-js/src/cli.js" "$work/bundle.js" \
        --wit "$wit" --world-name window-operator --disable http fetch-event -o "$out"
else
    # --sync: plain (non-async) component ABI, which wasmtime 48 runs.
    "$tools/node_modules/.bin/componentize-qjs" --wit "$wit" --js "$work/bundle.js" \
        --world window-operator --sync -o "$out" >/dev/null
fi
echo "built $out ($(wc -c <"$out") bytes, $backend)"
