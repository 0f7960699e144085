#!/usr/bin/env bash
# The scheduler figures of docs/perf/sched.md on the CPU backend with stories260K (512-token
# context): aggregate throughput at concurrency 1, 8, 32, 64 (prompt 128, 128 out) for the serial
# baseline and each scheduling technique, and the inter-token latency of 8 decoding streams
# while a 448-token prompt arrives (the 8k-token arrival of TECHNIQUES.md scaled to this model's
# context) for several chunk sizes. Prints one JSON object per run.
#   usage: tools/scripts/bench_sched.sh BUILD_DIR [MODEL_DIR]
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
for c in "baseline:" "continuous:sched.continuous" "chunked:sched.chunked-prefill" \
    "preempt:sched.preempt" \
    "serve-cpu:{name: sched.preempt, options: {chunk_tokens: 1, chunk_per_decode: 1}}, kv.paged, kv.prefix-cache"; do
    m=$(cand "${c%%:*}" "${c#*:}")
    for n in 1 8 32 64; do
        "$weft" bench decode --candidate "$m" --concurrency "$n" --prompt 128 --gen 128 \
            --repeats "$repeats" --json
    done
done
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
