#!/usr/bin/env bash
# Cross-checks weft eval's time to first token and inter-token latency with NVIDIA AIPerf (PyPI
# `aiperf`, pinned in requirements-eval.txt) on one workload against the same running server:
#   tools/scripts/eval_aiperf.sh URL MODEL_DIR PROMPT GEN CONCURRENCY REQUESTS OUT_DIR
# weft eval runs the case with --case PROMPT,GEN,CONCURRENCY --requests REQUESTS; AIPerf runs
# synthetic prompts of PROMPT tokens (its tokenizer: MODEL_DIR's tokenizer.json), exactly GEN
# output tokens (ignore_eos, server token counts), CONCURRENCY in flight, REQUESTS requests after
# a warm-up. They alternate twice (weft, aiperf, weft, aiperf) so that drift of the machine falls
# on both. Prints both medians per round and writes OUT_DIR/compare.json; exit 1 when the TTFT or
# ITL medians of the pooled rounds differ by more than 10%.
# Environment: WEFT (default build/bin/weft), AIPERF (default: aiperf on PATH), PYTHON.
set -euo pipefail
[ $# -eq 7 ] || { sed -n '2,12p' "$0"; exit 2; }
url=$1 model=$2 P=$3 G=$4 C=$5 N=$6 out=$7
weft=${WEFT:-build/bin/weft}
aiperf=${AIPERF:-aiperf}
py=${PYTHON:-python3}
mkdir -p "$out"
name=$(curl -s "$url/v1/models" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

for round in 1 2; do
    "$weft" eval run --url "$url" --model "$model" --no-gates --case "$P,$G,$C" --requests "$N" \
        -o "$out/weft-$round.json" 2> "$out/weft-$round.log" || true
    "$aiperf" profile --model "$name" --url "$url" --endpoint-type completions --streaming \
        --tokenizer "$model" --isl "$P" --isl-stddev 0 --osl "$G" --osl-stddev 0 \
        --extra-inputs ignore_eos:true --concurrency "$C" --request-count "$N" \
        --warmup-request-count "$C" --use-server-token-count --ui-type none \
        --artifact-dir "$out/aiperf-$round" > "$out/aiperf-$round.log" 2>&1
done

"$py" - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows, weft_t, weft_i, aip_t, aip_i = [], [], [], [], []
for r in (1, 2):
    w = json.load(open(f"{out}/weft-{r}.json"))
    case = w["cases"][0]
    wt = case["samples"]["ttft_s"]
    wi = case["samples"]["itl_s"]
    weft_t += wt
    weft_i += wi
    a = json.load(open(f"{out}/aiperf-{r}/profile_export_aiperf.json"))
    aip_t.append(a["time_to_first_token"]["p50"] / 1e3)
    aip_i.append(a["inter_token_latency"]["p50"] / 1e3)
    rows.append({"round": r, "case": case["name"],
                 "weft_ttft_p50_ms": 1e3 * statistics.median(wt),
                 "weft_itl_p50_ms": 1e3 * statistics.median(wi),
                 "aiperf_ttft_p50_ms": a["time_to_first_token"]["p50"],
                 "aiperf_itl_p50_ms": a["inter_token_latency"]["p50"],
                 "aiperf_requests": a["request_count"]["avg"],
                 "weft_tokens_per_event": case.get("tokens_per_event")})
summary = {
    "weft_ttft_p50_ms": 1e3 * statistics.median(weft_t),
    "weft_itl_p50_ms": 1e3 * statistics.median(weft_i),
    # AIPerf's per-round medians, averaged (its per-request samples are in its own export)
    "aiperf_ttft_p50_ms": 1e3 * statistics.mean(aip_t),
    "aiperf_itl_p50_ms": 1e3 * statistics.mean(aip_i),
}
summary["ttft_diff"] = summary["weft_ttft_p50_ms"] / summary["aiperf_ttft_p50_ms"] - 1
summary["itl_diff"] = summary["weft_itl_p50_ms"] / summary["aiperf_itl_p50_ms"] - 1
json.dump({"rounds": rows, "summary": summary}, open(f"{out}/compare.json", "w"), indent=2)
for r in rows:
    print("round %d %s: TTFT p50 weft %.3f ms, aiperf %.3f ms; ITL p50 weft %.4f ms, aiperf %.4f ms"
          % (r["round"], r["case"], r["weft_ttft_p50_ms"], r["aiperf_ttft_p50_ms"],
             r["weft_itl_p50_ms"], r["aiperf_itl_p50_ms"]))
print("pooled: TTFT %+.1f%%, ITL %+.1f%% (weft relative to aiperf)"
      % (100 * summary["ttft_diff"], 100 * summary["itl_diff"]))
sys.exit(0 if abs(summary["ttft_diff"]) <= 0.10 and abs(summary["itl_diff"]) <= 0.10 else 1)
PY
