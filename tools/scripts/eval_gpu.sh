#!/usr/bin/env bash
# weft eval's full suite against the cuda baseline on the GPU machine, for docs/perf/: run from the
# repository root there, with the bundle of tools/scripts/gpu-bundle.sh .gpu --shared carried in.
#   tools/scripts/eval_gpu.sh            writes $OUT (or /tmp/weft-eval-gpu): eval-gpu.json (the
#                                        result), eval-gpu.html (its report), the lock, the log
# The probe is docs/perf/probe-h200.json unless PROBE names another. When the machine's Python
# has aiperf (tools/scripts/requirements-eval.txt), the AIPerf cross-check of one case follows.
set -euo pipefail
B=$(pwd)/.gpu
out=${OUT:-/tmp/weft-eval-gpu}
mkdir -p "$out"
export WEFT_PLUGIN_PATH=$B/lib/weft/plugins LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
export WEFT_CACHE=${WEFT_CACHE:-/tmp/weft-cache}
W=$B/bin/weft
S=$B/shared
M=$WEFT_CACHE/models/stories260k
mkdir -p "$M"
"$W" convert llama2c "$S/models/stories260K/stories260K.bin" "$S/models/stories260K/tok512.bin" \
    "$M" > /dev/null
"$W" candidate freeze manifests/baseline-cuda.yaml -o "$out/baseline-cuda.lock"
probe=${PROBE:-docs/perf/probe-h200.json}
set +e
"$W" eval run --lock "$out/baseline-cuda.lock" --probe "$probe" \
    --reference "$S/reference/stories260K/reference.safetensors" -o "$out/eval-gpu.json" \
    2> "$out/eval-gpu.log"
rc=$?
set -e
tail -n 30 "$out/eval-gpu.log"
"$W" eval report "$out/eval-gpu.json" -o "$out/eval-gpu.html"
if python3 -c "import aiperf" 2> /dev/null; then
    "$W" serve "$out/baseline-cuda.lock" --port 18800 > "$out/serve-aiperf.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf http://127.0.0.1:18800/health > /dev/null && break; sleep 0.2; done
    WEFT=$W tools/scripts/eval_aiperf.sh http://127.0.0.1:18800 "$M" 128 256 1 100 \
        "$out/aiperf-c1" || true
    WEFT=$W tools/scripts/eval_aiperf.sh http://127.0.0.1:18800 "$M" 128 256 8 100 \
        "$out/aiperf-c8" || true
    kill "$pid"
    wait "$pid" || true
else
    echo "aiperf is not installed here: no cross-check (pip install -r tools/scripts/requirements-eval.txt)"
fi
exit $rc
