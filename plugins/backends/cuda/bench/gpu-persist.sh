#!/usr/bin/env bash
# GPU call of exec.persistent (docs/perf/persistent.md), run from a bundle made by
#   tools/scripts/gpu-bundle.sh DIR --shared   plus cand/ = manifests/*.yaml (and the option
#   variants written below), cfg/ = models/configs/*.json and this script.
#   ./gpu-persist.sh   op tests, greedy identity (test_persistent), decode speed fast-cuda-all
#   vs fast-cuda-persistent on three configs, then test_exec and test_fuse while time remains.
set -u
B=$(cd "$(dirname "$0")" && pwd)
cd "$B"
export WEFT_PLUGIN_PATH=$B/lib/weft/plugins LD_LIBRARY_PATH=$B/lib WEFT_CACHE=/tmp/wc
export WEFT_TEST_PLUGIN_DIR=$B/lib/weft/plugins WEFT_SHARED_DIR=$B/shared WEFT_EXEC_MANIFESTS=$B/cand
O=${OUT:-/tmp/out}
M=/tmp/m
L=/tmp/logs
BUDGET=${BUDGET:-160}
mkdir -p "$O" "$M" "$L"
left() { echo $((BUDGET - SECONDS)); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u
# option variants of the candidate
sed 's/exec.persistent, exec.device-sampling/{name: exec.persistent, options: {prefetch: false}}, exec.device-sampling/' \
  cand/fast-cuda-persistent.yaml > cand/fast-cuda-persistent-nopf.yaml
for c in Qwen3-0.6B Llama-3.2-1B Qwen3-8B; do
  bin/weft synth "cfg/$c.json" "$M/$c" --dtype bf16 --seed 1 >/dev/null 2>>"$L/synth.err" &
  eval "pid_${c//[.-]/_}=$!"
done
timeout 40 tests/test_cuda_ops >"$L/cuda_ops.log" 2>&1
echo "test_cuda_ops rc=$? $(grep -cE '^\[       OK \]' "$L/cuda_ops.log") ok; $(grep -E 'FAILED|ERROR' "$L/cuda_ops.log" | head -n 3 | tr '\n' ' ')"
wait "$pid_Qwen3_0_6B" "$pid_Llama_3_2_1B"
# smoke: one short persistent run first, so a failure costs little
WEFT_LOG=info timeout 25 bin/weft bench decode --candidate cand/fast-cuda-persistent.yaml \
  --model "$M/Qwen3-0.6B" --prompt 128 --gen 32 --repeats 1 >"$L/smoke.log" 2>&1
smoke=$?
echo "smoke rc=$smoke: $(grep -E 'ms/token|error|exec.persistent' "$L/smoke.log" | cut -c1-200 | tr '\n' ' ')"
sed 's/exec.persistent, exec.device-sampling/{name: exec.persistent, options: {blocks_per_sm: 2}}, exec.device-sampling/' \
  cand/fast-cuda-persistent.yaml > cand/fast-cuda-persistent-bps2.yaml
[ $smoke -eq 0 ] && WEFT_EXEC_MODELS=$M/Qwen3-0.6B:$M/Llama-3.2-1B timeout 60 tests/test_persistent >"$L/persistent.log" 2>&1
echo "test_persistent rc=$?"; grep -E "persistent on|FAIL|ERROR|OK \]|runs as one|replays its|persistent steps" "$L/persistent.log" | cut -c1-220 | head -n 20
bench() { # model candidate
  WEFT_LOG=info timeout "$3" bin/weft bench decode --candidate "cand/$2.yaml" --model "$M/$1" \
    --prompt 128 --gen 256 --repeats 3 >"$L/b-$1-$2.log" 2>&1
  printf '%-13s %-28s %s | %s\n' "$1" "$2" "$(grep -E 'ms/token|error' "$L/b-$1-$2.log" | tr -s ' ' | tr '\n' ' ')" \
    "$(grep -E 'replays its|runs as one' "$L/b-$1-$2.log" | head -n 1 | cut -c1-160)"
}
for c in Qwen3-0.6B Llama-3.2-1B; do
  for cand in fast-cuda-all fast-cuda-persistent fast-cuda-persistent-nopf fast-cuda-persistent-bps2; do
    [ $smoke -ne 0 ] && [ "$cand" != fast-cuda-all ] && continue
    [ "$cand" = fast-cuda-persistent-bps2 ] && [ "$c" != Qwen3-0.6B ] && continue
    [ "$(left)" -gt 30 ] && bench "$c" "$cand" 30
  done
done 2>&1 | tee "$L/bench.log"
wait
for cand in fast-cuda-all fast-cuda-persistent; do
  [ $smoke -ne 0 ] && [ "$cand" != fast-cuda-all ] && continue
  [ "$(left)" -gt 25 ] && bench Qwen3-8B "$cand" $(( $(left) / 2 ))
done 2>&1 | tee -a "$L/bench.log"
if [ "$(left)" -gt 20 ]; then
  WEFT_EXEC_MODELS=$M/Qwen3-0.6B timeout $(( $(left) - 5 )) tests/test_exec >"$L/exec.log" 2>&1
  echo "test_exec rc=$?"; grep -E "FAIL|ERROR|OK \]|SKIP" "$L/exec.log" | head -n 8
fi
if [ "$(left)" -gt 20 ]; then
  WEFT_FUSE_CUDA_MODELS=stories,$M/Qwen3-0.6B WEFT_FUSE_PROMPT=128 timeout $(( $(left) - 3 )) \
    tests/test_fuse >"$L/fuse.log" 2>&1
  echo "test_fuse rc=$?"; grep -E "FAIL|ERROR|OK \]" "$L/fuse.log" | head -n 8
fi
tar czf "$O/logs.tgz" -C /tmp logs
echo "elapsed ${SECONDS}s"
