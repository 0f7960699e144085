#!/usr/bin/env bash
# GPU call 1 of the fusion work (docs/perf/fuse.md): op tests, the GEMV microbenchmark, and
# op-class profiles and decode speed of the synthetic bf16 Llama-3.2-1B and Qwen3-0.6B with
# cuBLASLt only (gemv_max_tokens 0, the old baseline) and with the GEMV path. Run from the bundle.
set -u
B=$(pwd)
export WEFT_PLUGIN_PATH=$B/lib/weft/plugins LD_LIBRARY_PATH=$B/lib WEFT_CACHE=/tmp/wc
export WEFT_TEST_PLUGIN_DIR=$B/lib/weft/plugins
O=${OUT:-/tmp/out}
M=/tmp/m
mkdir -p "$O" "$M"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv
for c in Llama-3.2-1B Qwen3-0.6B; do
  bin/weft synth "configs/$c.json" "$M/$c" --dtype bf16 --seed 1 >/dev/null &
done
tests/test_cuda_ops >"$O/cuda_ops.log" 2>&1
echo "test_cuda_ops rc=$?"; grep -E "FAILED|PASSED|differ|rel err" "$O/cuda_ops.log" | grep -vE " 0 of " | tail -n 40
tests/cuda_gemv_bench 4251 all >"$O/gemv_bench.log" 2>&1
echo "gemv_bench rc=$?"; cat "$O/gemv_bench.log"
wait
for c in Llama-3.2-1B Qwen3-0.6B; do
  for cand in cublas gemv; do
    echo "### $c $cand"
    bin/weft bench decode --candidate "cand/$cand.yaml" --model "$M/$c" --prompt 128 --gen 256 \
      --repeats 3 2>&1 | grep -E "tokens/s|ms/token|prefill|error"
    bin/weft bench decode --candidate "cand/$cand.yaml" --model "$M/$c" --prompt 128 --gen 64 \
      --repeats 1 --profile 2>&1 | sed -n '/time per op class/,$p'
  done
done 2>&1 | tee "$O/decode.log"
