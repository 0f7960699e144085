#!/usr/bin/env bash
# GPU call 2 of the fusion work (docs/perf/fuse.md), run from a bundle made by
#   tools/scripts/gpu-bundle.sh DIR --shared   (plus cand/ = manifests/{baseline-cuda,fuse-*}.yaml
#   and a cuBLASLt-only cand/cublas.yaml, configs/ = models/configs)
# 1. op tests; 2. greedy identity of every shipped fusion candidate against the cuda baseline
# (stories260K fp32, synthetic bf16 Llama-3.2-1B and Qwen3-0.6B, 256 tokens after 128);
# 3. decode speed of each technique alone and combined; 4. op-class profiles; 5. parity with the
# stored transformers references for the baseline (GEMV path) and the combined candidate.
set -u
B=$(pwd)
export WEFT_PLUGIN_PATH=$B/lib/weft/plugins LD_LIBRARY_PATH=$B/lib WEFT_CACHE=/tmp/wc
export WEFT_TEST_PLUGIN_DIR=$B/lib/weft/plugins WEFT_SHARED_DIR=$B/shared
O=${OUT:-/tmp/out}
M=/tmp/m
mkdir -p "$O" "$M"
for c in Llama-3.2-1B Qwen3-0.6B; do
  bin/weft synth "configs/$c.json" "$M/$c" --dtype bf16 --seed 1 >/dev/null &
done
tests/test_cuda_ops >"$O/cuda_ops.log" 2>&1
echo "test_cuda_ops rc=$?"; grep -E "FAILED|PASSED|differ" "$O/cuda_ops.log" | tail -n 30
wait
WEFT_FUSE_CUDA_MODELS=stories,$M/Llama-3.2-1B,$M/Qwen3-0.6B WEFT_FUSE_PROMPT=128 \
  tests/test_fuse >"$O/fuse_greedy.log" 2>&1
echo "test_fuse rc=$?"; grep -E "cuda |OK|FAIL|PASSED" "$O/fuse_greedy.log"
for c in Llama-3.2-1B Qwen3-0.6B; do
  for cand in cublas baseline-cuda fuse-rmsnorm-residual fuse-qkv-rope fuse-swiglu \
      fuse-merged-projections fuse-all; do
    printf '%-14s %-24s ' "$c" "$cand"
    bin/weft bench decode --candidate "cand/$cand.yaml" --model "$M/$c" --prompt 128 --gen 256 \
      --repeats 3 2>&1 | grep -E "ms/token|error" | tr -s ' '
  done
done 2>&1 | tee "$O/bench.log"
for c in Llama-3.2-1B Qwen3-0.6B; do
  for cand in baseline-cuda fuse-all; do
    echo "### profile $c $cand"
    bin/weft bench decode --candidate "cand/$cand.yaml" --model "$M/$c" --prompt 128 --gen 64 \
      --repeats 1 --profile 2>&1 | sed -n '/time per op class/,$p'
  done
done 2>&1 | tee "$O/profile.log"
R=../tests/data/reference
bin/weft convert llama2c shared/models/stories260K/stories260K.bin \
  shared/models/stories260K/tok512.bin "$M/stories" >/dev/null
for cand in baseline-cuda fuse-all; do
  bin/weft eval parity --manifest "cand/$cand.yaml" --model "$M/stories" \
    --reference shared/reference/stories260K/reference.safetensors --max-rel 1e-3 2>&1 | tail -n 2
  for m in tiny-qwen3 tiny-llama3 tiny-qwen2; do
    bin/weft eval parity --manifest "cand/$cand.yaml" --model "shared/reference/$m" \
      --reference "shared/reference/$m/reference.safetensors" --max-rel 1e-3 2>&1 | tail -n 2
  done
  for c in Llama-3.2-1B Qwen3-0.6B; do
    bin/weft eval parity --manifest "cand/$cand.yaml" --model "$M/$c" \
      --reference "$R/synth-$c/reference.safetensors" --max-mean-kl 1e-3 --no-greedy 2>&1 | tail -n 2
  done
done 2>&1 | tee "$O/parity.log"
