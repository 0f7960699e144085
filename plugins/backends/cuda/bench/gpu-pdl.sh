#!/usr/bin/env bash
# GPU call of the programmatic-dependent-launch work (docs/perf/pdl.md), run from a bundle made by
#   tools/scripts/gpu-bundle.sh DIR --shared   plus cand/ = manifests/*.yaml and
#   cand/fast-cuda-all-nopdl.yaml (the same candidate with backend option pdl: false),
#   cfg/ = models/configs/*.json, tok/ = the shared qwen3-tokenizer's json files, and this script.
#   ./gpu-pdl.sh [full|quick]   full: op tests, GEMV microbenchmark, decode speed pdl on/off on
#   three configs, greedy identity (pdl on vs off; fused vs unfused; graph vs eager), parity.
set -u
B=$(cd "$(dirname "$0")" && pwd)
cd "$B"
mode=${1:-full}
export WEFT_PLUGIN_PATH=$B/lib/weft/plugins LD_LIBRARY_PATH=$B/lib WEFT_CACHE=/tmp/wc
export WEFT_TEST_PLUGIN_DIR=$B/lib/weft/plugins WEFT_SHARED_DIR=$B/shared WEFT_EXEC_MANIFESTS=$B/cand
O=${OUT:-/tmp/out}
M=/tmp/m
mkdir -p "$O" "$M"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date -u
CFGS="Llama-3.2-1B Qwen3-0.6B Qwen3-8B"
for c in $CFGS; do
  bin/weft synth "cfg/$c.json" "$M/$c" --dtype bf16 --seed 1 >/dev/null 2>>"$O/synth.err" &
done
timeout 60 tests/test_cuda_ops >"$O/cuda_ops.log" 2>&1
echo "test_cuda_ops rc=$?"; grep -E "pdl|FAILED|PASSED|DIFFER|op failed" "$O/cuda_ops.log" | tail -n 8
timeout 60 tests/cuda_gemv_bench 4251 all 1 >"$O/gemv.log" 2>&1
echo "gemv_bench rc=$?"; cat "$O/gemv.log"
wait
ls -d $M/* | tr '\n' ' '; echo
# decode speed, pdl on (default) and off, interleaved
for c in $CFGS; do
  for cand in fast-cuda-all fast-cuda-all-nopdl; do
    printf '%-13s %-20s ' "$c" "$cand"
    timeout 90 bin/weft bench decode --candidate "cand/$cand.yaml" --model "$M/$c" --prompt 128 \
      --gen 256 --repeats 3 >"$O/b.tmp" 2>&1
    grep -E "ms/token|error" "$O/b.tmp" | tr -s ' ' | tr '\n' ' '
    grep -ciE "eager|capture failed" "$O/b.tmp" | sed 's/^/ eager-warnings=/'
    [ "$mode" = quick ] && break
  done
done 2>&1 | tee "$O/bench.log"
# greedy identity, pdl on vs off (and the unfused eager baseline): 128 tokens, text through the
# Qwen3 tokenizer copied into the synthetic checkpoints (tok/, ids below every config's vocab)
for c in $CFGS; do
  cp tok/tokenizer*.json "$M/$c/"
  cands="fast-cuda-all fast-cuda-all-nopdl baseline-cuda"
  [ "$c" = Qwen3-8B ] && cands="fast-cuda-all fast-cuda-all-nopdl"
  for cand in $cands; do
    txt=$(timeout 90 bin/weft run --candidate "cand/$cand.yaml" --model "$M/$c" --temperature 0 \
      --max-tokens 128 --ignore-eos "The quick brown fox jumps over the lazy dog" 2>&1)
    echo "$(printf '%s' "$txt" | md5sum | cut -c1-12) $c $cand ${#txt} chars: $(printf '%s' "$txt" | tr '\n' ' ' | cut -c45-100)"
  done
done 2>&1 | tee "$O/identity.log"
bin/weft convert llama2c shared/models/stories260K/stories260K.bin \
  shared/models/stories260K/tok512.bin "$M/stories" >/dev/null
for cand in fast-cuda-all baseline-cuda; do
  timeout 60 bin/weft eval parity --manifest "cand/$cand.yaml" --model "$M/stories" \
    --reference shared/reference/stories260K/reference.safetensors --max-rel 1e-3 2>&1 | tail -n 2
done 2>&1 | tee -a "$O/identity.log"
WEFT_FUSE_CUDA_MODELS=stories,$M/Qwen3-0.6B WEFT_FUSE_PROMPT=128 timeout 120 tests/test_fuse \
  >"$O/fuse.log" 2>&1
echo "test_fuse rc=$?"; grep -E "cuda |FAIL|PASSED" "$O/fuse.log" | tail -n 10
WEFT_EXEC_MODELS=$M/Qwen3-0.6B timeout 120 tests/test_exec >"$O/exec.log" 2>&1
echo "test_exec rc=$?"; grep -E "FAIL|PASSED|OK|SKIP" "$O/exec.log" | tail -n 10
rm -f "$O/b.tmp"; [ -s "$O/synth.err" ] || rm -f "$O/synth.err"
