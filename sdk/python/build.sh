#!/usr/bin/env bash
# Builds a Python operator project into a Weir component.
#
#   sdk/python/build.sh PROJECT_DIR OUT.wasm [MODULE]
#
# MODULE (default `app`) is the module in PROJECT_DIR that binds `Operator =
# weir_sdk.export(...)`. Installs the pinned componentize-py
# (requirements.txt) into ${WEIR_TOOLS_DIR:-~/.cache/weir/tools}/python/venv
# first if it is missing or another version, writes the module that
# componentize-py builds, TMP/weir_component.py:
#
#   import MODULE
#   from weir_sdk.operator import component_exports_window
#   Operator, Migration, TwoInput, ProcessingTime, WindowFunction = \
#       component_exports_window(MODULE)
#
# (the world `window-operator` exports `migration`, `two-input`,
# `processing-time` and `window-function` too, which componentize-py takes
# from those top-level names: component_exports_window binds them to the
# `Operator` class, which implements them all, so MODULE binds `Operator`
# alone; an operator's `window-function` says kind `none`), then runs
# exactly:
#
#   componentize-py -d WIT_DIR -w window-operator \
#       componentize weir_component -p TMP -p PROJECT_DIR -p SDK_DIR -o OUT.wasm
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

case $module in
    "" | [0-9]* | *[!A-Za-z0-9_]*)
        echo "error: MODULE must be a Python module name, got \`$module\`" >&2
        exit 1
        ;;
    weir_component)
        echo "error: the module cannot be called weir_component (build.sh writes that one)" >&2
        exit 1
        ;;
esac
if [ -e "$project/weir_component.py" ]; then
    echo "error: $project/weir_component.py would hide the module build.sh writes: rename it" >&2
    exit 1
fi

if [ ! -f "$project/$module.py" ]; then
    echo "error: $project/$module.py not found (the module that binds Operator = weir_sdk.export(...))" >&2
    exit 1
fi

if [ "$("$venv/bin/componentize-py" --version 2>/dev/null)" != "componentize-py $pin" ]; then
    echo "installing componentize-py $pin into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r "$sdk/requirements.txt"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/weir_component.py" <<EOF
"""The module componentize-py builds, written by weir_sdk's build.sh."""

import $module
from weir_sdk.operator import component_exports_window

Operator, Migration, TwoInput, ProcessingTime, WindowFunction = component_exports_window($module)
EOF

mkdir -p "$(dirname "$out")"
"$venv/bin/componentize-py" -d "$wit" -w window-operator \
    componentize weir_component -p "$tmp" -p "$project" -p "$sdk" -o "$out"
