#!/usr/bin/env bash
# The scheduler figures of docs/perf/sched.md on the CPU backend with stories260K (512-token
# context): aggregate throughput at concurrency 1, 8, 32, 64 (prompt 128, 128 out) for the serial
# baseline and each scheduling technique, and the inter-token latency of 8 decoding streams
# while a 448-token prompt arrives (the 8k-token arrival of TECHNIQUES.md scaled to this model's
# context) for several chunk sizes, and throughput at concurrency 32 with the kv pool at a
# quarter of the need. Prints one JSON object per run.
#   usage: [SECTIONS="throughput arrival oversubscribed"] [REPEATS=5] [ARRIVALS=5]
#          [ARRIVAL_RUNS=1] tools/scripts/bench_sched.sh BUILD_DIR [MODEL_DIR]
set -euo pipefail
build=${1:?usage: bench_sched.sh BUILD_DIR [MODEL_DIR]}
weft="$build/bin/weft"
shared=${WEFT_SHARED_DIR:-$(pwd)/../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=${2:-$tmp/stories260k}
if [ ! -f "$model/config.json" ]; then
    "$weft" convert llama2c "$shared/models/stories260K/stories260K.bin" \
        "$shared/models/stories260K/tok512.bin" "$model" > /dev/null
fi
cand() { # cand NAME TECHNIQUES -> path of a candidate manifest
    cat > "$tmp/$1.yaml" <<YAML
format: 1
candidate: $1
model: $model
backend: {name: cpu, options: {threads: 1}}
model_plugin: llama
techniques: [$2]
serving: {max_model_len: 512, max_concurrency: 64, threads: 1}
YAML
    echo "$tmp/$1.yaml"
}
repeats=${REPEATS:-5}
sections=${SECTIONS:-throughput arrival oversubscribed}
if [[ " $sections " == *" throughput "* ]]; then
for c in "baseline:" "continuous:sched.continuous" "chunked:sched.chunked-prefill" \
    "preempt:sched.preempt" \
    "serve-cpu:{name: sched.preempt, options: {chunk_tokens: 1, chunk_per_decode: 1}}, kv.paged, kv.prefix-cache"; do
    m=$(cand "${c%%:*}" "${c#*:}")
    for n in 1 8 32 64; do
        "$weft" bench decode --candidate "$m" --concurrency "$n" --prompt 128 --gen 128 \
            --repeats "$repeats" --json
    done
done
fi
if [[ " $sections " == *" arrival "* ]]; then
for run in $(seq "${ARRIVAL_RUNS:-1}"); do
for c in "continuous:sched.continuous" \
    "chunk64:{name: sched.chunked-prefill, options: {chunk_tokens: 64}}" \
    "chunk32:{name: sched.chunked-prefill, options: {chunk_tokens: 32}}" \
    "chunk16:{name: sched.chunked-prefill, options: {chunk_tokens: 16}}" \
    "chunk8:{name: sched.chunked-prefill, options: {chunk_tokens: 8}}" \
    "perdecode1:{name: sched.chunked-prefill, options: {chunk_tokens: 1, chunk_per_decode: 1}}" \
    "serve-cpu:{name: sched.preempt, options: {chunk_tokens: 1, chunk_per_decode: 1}}, kv.paged, kv.prefix-cache"; do
    m=$(cand "${c%%:*}" "${c#*:}")
    "$weft" bench decode --candidate "$m" --concurrency 8 --prompt 16 --gen 490 --arrival 448 \
        --repeats "${ARRIVALS:-5}" --json
done
done
fi
# A quarter of what 32 requests of 128 + 128 tokens need at once: 32 x 256 / 4 = 2048 tokens.
if [[ " $sections " == *" oversubscribed "* ]]; then
for c in "continuous:sched.continuous" "chunked:sched.chunked-prefill" "preempt:sched.preempt" \
    "preempt-la0:{name: sched.preempt, options: {lookahead_tokens: 0}}" \
    "preempt-la64:{name: sched.preempt, options: {lookahead_tokens: 64}}" \
    "paged-continuous:sched.continuous, kv.paged" "paged-preempt:sched.preempt, kv.paged"; do
    m=$(cand "${c%%:*}" "${c#*:}")
    "$weft" bench decode --candidate "$m" --concurrency 32 --prompt 128 --gen 128 \
        --repeats "$repeats" --kv-tokens 2048 --json
done
fi
