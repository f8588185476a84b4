#!/usr/bin/env bash
# Builds a Python operator project into a Weir component.
#
#   sdk/python/build.sh PROJECT_DIR OUT.wasm [MODULE]
#
# MODULE (default `app`) is the module in PROJECT_DIR that binds `Operator =
# weir_sdk.export(...)`. Installs the pinned componentize-py
# (requirements.txt) into ${WEIR_TOOLS_DIR:-~/.cache/weir/tools}/python/venv
# first if it is missing or another version, then runs exactly:
#
#   componentize-py -d WIT_DIR -w stream-operator componentize MODULE \
#       -p PROJECT_DIR -p SDK_DIR -o OUT.wasm
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: $0 PROJECT_DIR OUT.wasm [MODULE]" >&2
    exit 2
fi
# Absolute paths (relative ones are taken from the current directory).
project=$(cd "$1" && pwd)
case $2 in /*) out=$2 ;; *) out=$PWD/$2 ;; esac
module=${3:-app}

sdk=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
wit=${WEIR_WIT_DIR:-$sdk/../../wit}
venv=${WEIR_TOOLS_DIR:-$HOME/.cache/weir/tools}/python/venv
pin=$(sed -n 's/^componentize-py==\([^ ]*\).*/\1/p' "$sdk/requirements.txt")

if [ ! -f "$project/$module.py" ]; then
    echo "error: $project/$module.py not found (the module that binds Operator = weir_sdk.export(...))" >&2
    exit 1
fi

if [ "$("$venv/bin/componentize-py" --version 2>/dev/null)" != "componentize-py $pin" ]; then
    echo "installing componentize-py $pin into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$sdk/requirements.txt"
fi

mkdir -p "$(dirname "$out")"
exec "$venv/bin/componentize-py" -d "$wit" -w stream-operator componentize "$module" \
    -p "$project" -p "$sdk" -o "$out"
