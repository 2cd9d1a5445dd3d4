#!/bin/sh
# Encode throughput: k3 tokenizer vs the tiktoken npm package (WASM) on the same text, same run,
# one core each (taskset when available). Not a timed test.
#   tests/bench/bench_tokenizer.sh BUILD_DIR [SECONDS]
set -eu
build=$(cd "${1:?usage: bench_tokenizer.sh BUILD_DIR [SECONDS]}" && pwd)
secs=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
tokdir="$here/../tokenizer"
work="$build/testdata/tokenizer-bench"
mkdir -p "$work"
sh "$tokdir/setup.sh"
[ -f "$work/vocab/specials.json" ] || /usr/bin/python3 "$tokdir/make_vocab.py" "$tokdir/node_modules" "$work/vocab"
/usr/bin/python3 "$tokdir/make_big_text.py" "$work/big.txt" >/dev/null
pin=""
command -v taskset >/dev/null 2>&1 && pin="taskset -c 0"
ours=$($pin "$build/bin/bench_tokenizer" "$work/vocab" "$work/big.txt" "$secs")
ref=$(cd "$tokdir" && $pin node tiktoken_ref.cjs bench "$work/big.txt" "$secs")
echo "text: $work/big.txt ($(wc -c <"$work/big.txt") bytes, mixed code, prose and multilingual corpus)"
echo "k3-tokenizer:      $ours"
echo "tiktoken npm WASM: $ref"
a=$(echo "$ours" | awk '{print $2}')
b=$(echo "$ref" | awk '{print $2}')
awk -v a="$a" -v b="$b" 'BEGIN { printf "ratio: %.1fx (k3 %.1f MB/s vs npm %.2f MB/s)\n", a / b, a, b }'
