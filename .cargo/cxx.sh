#!/bin/sh
# The host's C++ compiler for the cc crate (see config.toml beside this):
# clang++ when installed, else the system's c++.
if command -v clang++ >/dev/null 2>&1; then
    exec clang++ "$@"
fi
exec c++ "$@"
