#!/bin/sh
# Kept for old command lines: the benchmark is bench_tokenizer.py (see its header).
#   tests/bench/bench_tokenizer.sh BUILD_DIR [SECONDS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: bench_tokenizer.sh BUILD_DIR [SECONDS]}
exec /usr/bin/python3 "$here/bench_tokenizer.py" "$build" --seconds "${2:-2}"
