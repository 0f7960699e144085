#!/usr/bin/env bash
# GPU call 3 of the fusion work (docs/perf/fuse.md): decode speed of every fusion candidate,
# alone and combined, interleaved (rounds in alternating order, so drift of the machine between
# runs hits every candidate alike). Same bundle layout as gpu-fuse-2.sh.
set -u
B=$(pwd)
export WEFT_PLUGIN_PATH=$B/lib/weft/plugins LD_LIBRARY_PATH=$B/lib WEFT_CACHE=/tmp/wc
O=${OUT:-/tmp/out}
M=/tmp/m
mkdir -p "$O" "$M"
for c in Llama-3.2-1B Qwen3-0.6B; do
  bin/weft synth "configs/$c.json" "$M/$c" --dtype bf16 --seed 1 >/dev/null &
done
bin/weft convert llama2c shared/models/stories260K/stories260K.bin \
  shared/models/stories260K/tok512.bin "$M/stories" >/dev/null
wait
cands="cublas baseline-cuda fuse-rmsnorm-residual fuse-qkv-rope fuse-swiglu fuse-merged-projections fuse-all"
rev=$(echo $cands | tr ' ' '\n' | tac | tr '\n' ' ')
for round in 1 2; do
  list=$cands; [ $round = 2 ] && list=$rev
  for c in stories Llama-3.2-1B Qwen3-0.6B; do
    p=128; [ $c = stories ] && p=16
    for cand in $list; do
      printf '%s %-13s %-24s ' "$round" "$c" "$cand"
      bin/weft bench decode --candidate "cand/$cand.yaml" --model "$M/$c" --prompt $p --gen 256 \
        --repeats 3 2>&1 | grep -E "ms/token|error" | tr -s ' '
    done
  done
done 2>&1 | tee "$O/bench3.log"
