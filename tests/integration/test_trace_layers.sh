#!/usr/bin/env bash
# tools/scripts/trace-layers.py on a real decode trace (the cuda backend's option trace, Qwen3-8B
# synthetic bf16 with fast-cuda-async-loop on the H200, 2026-12-01: tests/data/trace): it finds
# the 36 layers of 7 kernels after embed and the first norm, and each position's mean equals the
# mean awk computes from the raw lines at that position; a log that holds two traces is read
# from its last; logs without kernel lines or without a repeating layer are refused, naming
# the file.
set -euo pipefail
tool=tools/scripts/trace-layers.py
log=tests/data/trace/qwen3-8b-fast-cuda-async-loop.log
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 "$tool" "$log" --bytes-gbs 4251 --bytes "2:33.554432" > "$tmp/out"
grep -q "^254 kernels: 2 before the layers, 36 layers of 7, 0 after$" "$tmp/out" ||
    { cat "$tmp/out"; exit 1; }
for pos in 0 1 2 3 4 5 6; do
    want=$(awk -v p=$pos '$1 ~ /^[0-9]+$/ && $4 == "us" && $1 >= 2 && ($1 - 2) % 7 == p {
        s += $3; n++ } END { printf "%.2f", s / n }' "$log")
    got=$(awk -v p=$pos '$1 == p && $3 == "mean" { print $4 }' "$tmp/out")
    [ "$got" = "$want" ] || { echo "position $pos: mean $got, awk says $want"; cat "$tmp/out"; exit 1; }
done
# the o projection (position 2): 33.55 MB at 4,251 GB/s is 7.89 us
grep -q "bytes    7.89 us" "$tmp/out" || { cat "$tmp/out"; exit 1; }
grep -q "before: weft_embed 9.38, weft_rmsnorm 3.62" "$tmp/out" || { cat "$tmp/out"; exit 1; }

# two traces in one log: the second (here the first 100 kernels again) is the one summed
{ cat "$log"; awk '$1 ~ /^[0-9]+$/ && $4 == "us" && $1 < 100' "$log"; } > "$tmp/two.log"
python3 "$tool" "$tmp/two.log" > "$tmp/out2"
grep -q "^100 kernels: 2 before the layers, 14 layers of 7" "$tmp/out2" || { cat "$tmp/out2"; exit 1; }

# refusals
echo "no trace here" > "$tmp/none.log"
if python3 "$tool" "$tmp/none.log" 2> "$tmp/err"; then echo "accepted a log without a trace"; exit 1; fi
grep -q "none.log: no kernel lines" "$tmp/err" || { cat "$tmp/err"; exit 1; }
printf '     %d weft_k%d   1.00 us\n' 0 0 1 1 2 2 3 3 4 4 5 5 > "$tmp/flat.log"
if python3 "$tool" "$tmp/flat.log" 2> "$tmp/err"; then echo "accepted a trace without layers"; exit 1; fi
grep -q "flat.log: 6 kernels and no repeating layer" "$tmp/err" || { cat "$tmp/err"; exit 1; }
if python3 "$tool" "$log" --bogus 2> "$tmp/err"; then echo "accepted --bogus"; exit 1; fi
grep -q "unknown argument '--bogus'" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "trace-layers: ok"
