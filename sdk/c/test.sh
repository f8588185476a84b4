#!/usr/bin/env bash
# Runs a C operator project's native unit tests, without Wasm.
#
#   sdk/c/test.sh PROJECT_DIR
#
# Compiles PROJECT_DIR/src/*.c and PROJECT_DIR/test/*.c with weir.c and the
# native test host weir_test.c (see weir_test.h) using the host's C compiler
# (${WEIR_TEST_CC:-cc}; gcc or clang), with AddressSanitizer where it is
# available, and runs the result. Its last line is "N passed, N failed".

set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 PROJECT_DIR" >&2
    exit 2
fi
project=$1
sdk=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cc="${WEIR_TEST_CC:-cc}"

shopt -s nullglob
sources=("$project"/src/*.c)
tests=("$project"/test/*.c)
if [ ${#tests[@]} -eq 0 ]; then
    echo "test.sh: no tests in $project/test/" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

flags=(-std=c11 -g -O1 -Wall -Wextra -I "$sdk" -I "$sdk/bindings" -I "$project/src")
# AddressSanitizer catches the memory errors a Wasm sandbox would only trap on.
if echo 'int main(void){return 0;}' | "$cc" -x c - -fsanitize=address,undefined -o "$tmp/probe" 2>/dev/null; then
    # shellcheck disable=SC2054 # the comma belongs to the flag
    flags+=(-fsanitize=address,undefined -fno-omit-frame-pointer)
fi
"$cc" "${flags[@]}" -o "$tmp/test" "${sources[@]}" "${tests[@]}" "$sdk/weir.c" "$sdk/weir_test.c"
"$tmp/test"
