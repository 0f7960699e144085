#!/usr/bin/env bash
# GPU call of fuse.rope-attention (docs/perf/fuse-rope-attention.md), run from a bundle made by
#   tools/scripts/gpu-bundle.sh DIR --shared   plus cand/ = manifests/*.yaml, cfg/ =
#   models/configs/*.json, tools/ncu-kernels.py and this script.
#   ./gpu-rope-attn.sh   op tests (bit identity), greedy identity over 256 steps (test_persistent:
#   fast-cuda-all, which has the technique, against baseline-cuda), decode speed of fast-cuda-all
#   with and without the technique on three configs, an ncu profile of one step, then test_fuse
#   and test_kv_paged_cuda while time remains.
set -u
B=$(cd "$(dirname "$0")" && pwd)
cd "$B"
export WEFT_PLUGIN_PATH=$B/lib/weft/plugins LD_LIBRARY_PATH=$B/lib WEFT_CACHE=/tmp/wc
export WEFT_TEST_PLUGIN_DIR=$B/lib/weft/plugins WEFT_SHARED_DIR=$B/shared WEFT_EXEC_MANIFESTS=$B/cand
O=${OUT:-/tmp/out}
M=/tmp/m
L=/tmp/logs
BUDGET=${BUDGET:-200}
mkdir -p "$O" "$M" "$L"
left() { echo $((BUDGET - SECONDS)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u
# the candidate without the technique
sed 's/ *fuse.rope-attention, //' cand/fast-cuda-all.yaml > cand/fast-cuda-all-nora.yaml
grep -n "techniques" -A1 cand/fast-cuda-all-nora.yaml | tr '\n' ' '; echo
for c in Qwen3-0.6B Llama-3.2-1B Qwen3-8B; do
  bin/weft synth "cfg/$c.json" "$M/$c" --dtype bf16 --seed 1 >/dev/null 2>>"$L/synth.err" &
  eval "pid_${c//[.-]/_}=$!"
done
tests/test_fuse_rope_attention >"$L/pass.log" 2>&1; echo "test_fuse_rope_attention rc=$?"
timeout 60 tests/test_cuda_ops >"$L/cuda_ops.log" 2>&1
echo "test_cuda_ops rc=$? $(grep -cE '^\[       OK \]' "$L/cuda_ops.log") ok; $(grep -E 'FAILED|ERROR|differ|DIFFER' "$L/cuda_ops.log" | grep -v ' 0 of ' | head -n 4 | tr '\n' ' ')"
grep -E "rope_attention.*(rel err|identical)" "$L/cuda_ops.log" | awk 'NR%6==1' | cut -c1-150 | head -n 12
wait "$pid_Qwen3_0_6B" "$pid_Llama_3_2_1B"
# smoke: one short run first, so a failure costs little
WEFT_LOG=info timeout 30 bin/weft bench decode --candidate cand/fast-cuda-all.yaml \
  --model "$M/Qwen3-0.6B" --prompt 128 --gen 32 --repeats 1 >"$L/smoke.log" 2>&1
smoke=$?
echo "smoke rc=$smoke: $(grep -E 'ms/token|error|rope-attention' "$L/smoke.log" | cut -c1-200 | tr '\n' ' ')"
if [ $smoke -eq 0 ]; then
  WEFT_EXEC_MODELS=$M/Qwen3-0.6B:$M/Llama-3.2-1B timeout 90 tests/test_persistent >"$L/persistent.log" 2>&1
  echo "test_persistent rc=$?"; grep -E "persistent on|FAIL|ERROR|OK \]|equal|replays its" "$L/persistent.log" | cut -c1-200 | head -n 14
fi
bench() { # model candidate timeout
  WEFT_LOG=info timeout "$3" bin/weft bench decode --candidate "cand/$2.yaml" --model "$M/$1" \
    --prompt 128 --gen 256 --repeats 3 >"$L/b-$1-$2.log" 2>&1
  printf '%-13s %-22s %s\n' "$1" "$2" "$(grep -E 'ms/token|tok/s|error' "$L/b-$1-$2.log" | tr -s ' ' | tr '\n' ' ' | cut -c1-300)"
}
for c in Qwen3-0.6B Llama-3.2-1B; do
  for cand in fast-cuda-all fast-cuda-all-nora; do
    [ $smoke -ne 0 ] && [ "$cand" = fast-cuda-all ] && continue
    [ "$(left)" -gt 30 ] && bench "$c" "$cand" 40
  done
done 2>&1 | tee "$L/bench.log"
wait
for cand in fast-cuda-all fast-cuda-all-nora; do
  [ $smoke -ne 0 ] && [ "$cand" = fast-cuda-all ] && continue
  [ "$(left)" -gt 40 ] && bench Qwen3-8B "$cand" 60
done 2>&1 | tee -a "$L/bench.log"
if [ "${NCU:-1}" = 1 ] && [ "$(left)" -gt 50 ] && command -v ncu >/dev/null; then
  for cand in fast-cuda-all fast-cuda-all-nora; do
    [ "$(left)" -gt 35 ] || continue
    timeout 60 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      --csv -c 1500 --log-file "$L/ncu-$cand.csv" bin/weft bench decode --candidate "cand/$cand.yaml" \
      --model "$M/Qwen3-0.6B" --prompt 128 --gen 8 --repeats 1 >"$L/ncu-$cand.out" 2>&1
    echo "ncu $cand rc=$?"; python3 tools/ncu-kernels.py "$L/ncu-$cand.csv" 2>&1 | head -n 14
  done
fi
if [ "${SLOW:-1}" = 1 ] && [ "$(left)" -gt 30 ]; then
  WEFT_FUSE_CUDA_MODELS=stories,$M/Qwen3-0.6B WEFT_FUSE_PROMPT=128 timeout $(( $(left) - 8 )) \
    tests/test_fuse >"$L/fuse.log" 2>&1
  echo "test_fuse rc=$?"; grep -E "rope-attention|FAIL|ERROR|OK \]|DIFFERS" "$L/fuse.log" | cut -c1-200 | head -n 12
fi
if [ "${SLOW:-1}" = 1 ] && [ "$(left)" -gt 15 ]; then
  timeout $(( $(left) - 3 )) tests/test_kv_paged_cuda >"$L/kvp.log" 2>&1
  echo "test_kv_paged_cuda rc=$?"; grep -E "FAIL|ERROR|OK \]" "$L/kvp.log" | head -n 6
fi
tar czf "$O/logs.tgz" -C /tmp logs
echo "elapsed ${SECONDS}s"
