#!/usr/bin/env bash
# Why a decode step's kernels stall: ncu's per-warp stall reasons of one launch of each named
# kernel inside a batch-1 decode (graph replay, the kernel in its place in the step). Runs on
# the GPU machine from the repository root with the bundle of gpu-bundle.sh in .gpu/.
#   tools/scripts/ncu-stalls.sh CONFIG CANDIDATE KERNEL[@N]...
# CONFIG: a models/configs name (random bf16 weights, made once under /tmp/weft-models).
# KERNEL@N skips N launches of it first (a kernel run several times a layer: N picks which);
# otherwise WEFT_NCU_SKIP (default 300: past the prefill and the first decode steps).
# The stall reasons: WEFT_NCU_CACHE is ncu's --cache-control (none: the caches as the step left
# them; all: flushed before the kernel); application replay, so every pass reruns the same step
# and finds the same caches (a kernel replay would find its own code and data warm).
set -uo pipefail
cfg=$1 cand=$2
shift 2
root=$(pwd)
export PATH=$root/.gpu/bin:$PATH WEFT_PLUGIN_PATH=$root/.gpu/lib/weft/plugins
export LD_LIBRARY_PATH=$root/.gpu/lib:${LD_LIBRARY_PATH:-}
M=/tmp/weft-models
mkdir -p "$M"
[ -d "$M/$cfg-bf16" ] || weft synth "models/configs/$cfg.json" "$M/$cfg-bf16" --dtype bf16 \
  --seed 1 >/dev/null || exit 1
bench=(weft bench decode --candidate "$cand" --model "$M/$cfg-bf16" --prompt 128 --gen 24
  --repeats 1)
# KERNEL[@N] -> $k and $skip
kernel_skip() {
  k=${1%@*} skip=${WEFT_NCU_SKIP:-300}
  if [ "$k" != "$1" ]; then skip=${1##*@}; fi
}
# WEFT_NCU_SOURCE=DIR: instead, one report per kernel with its warp-state samples per SASS
# instruction (kernel replay, caches as the step left them), written to DIR as KERNEL-N.ncu-rep
# and KERNEL-N.csv (ncu's source page) for tools/scripts/ncu-sass-stalls.py
if [ -n "${WEFT_NCU_SOURCE:-}" ]; then
  mkdir -p "$WEFT_NCU_SOURCE"
  for ks in "$@"; do
    kernel_skip "$ks"
    r=$WEFT_NCU_SOURCE/$k-$skip
    ncu --cache-control none --clock-control none --kernel-name "$k" \
      --launch-skip "$skip" --launch-count 1 --section SourceCounters \
      --section WarpStateStats --warp-sampling-interval 0 -f -o "$r" "${bench[@]}" \
      >"$r.log" 2>&1 || { tail -5 "$r.log"; continue; }
    ncu -i "$r.ncu-rep" --page source --print-source sass --csv >"$r.csv" 2>&1
    python3 "$root/tools/scripts/ncu-sass-stalls.py" "$r.csv" || head -5 "$r.csv"
  done
  exit 0
fi
for ks in "$@"; do
  kernel_skip "$ks"
  echo "=== $k ($cfg, $(basename "$cand"), cache-control ${WEFT_NCU_CACHE:-none})"
  ncu --cache-control "${WEFT_NCU_CACHE:-none}" --clock-control none --replay-mode application \
    --kernel-name "$k" --launch-skip "$skip" --launch-count 1 \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum,smsp__inst_executed.sum,smsp__cycles_active.avg,sm__cycles_elapsed.avg' \
    "${bench[@]}" 2>&1 |
    grep -E 'gpu__time|inst_executed|cycles_active|cycles_elapsed|stalled' |
    awk '{v=$NF; n=$1; if (n ~ /stalled/ && v+0 < 0.05) next; print}' | sed 's/_per_issue_active.ratio//'
done
