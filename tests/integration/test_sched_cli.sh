#!/usr/bin/env bash
# The scheduling techniques end to end through the CLI, on stories260K converted from the shared
# checkpoint: the three bundles pass `weft plugins check`; manifests/serve-cpu.yaml (sched.preempt
# + kv.paged + kv.prefix-cache) gives the greedy continuation the baseline gives, also frozen to
# a lock; `weft bench decode --concurrency` reports an aggregate speed, with as many decode tokens
# per step as requests in flight under sched.continuous and one under the serial default; the
# arrival mode reports latencies; --max-model-len replaces the manifest's; bad bench options
# are refused with a message.
set -euo pipefail
build=${1:?usage: test_sched_cli.sh BUILD_DIR}
weft="$build/bin/weft"
shared=${WEFT_SHARED_DIR:-$(pwd)/../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for t in sched.continuous sched.chunked-prefill sched.preempt; do
    "$weft" plugins check "$build/lib/weft/plugins/$t" > "$tmp/check" ||
        { cat "$tmp/check"; exit 1; }
    grep -q "descriptor matches, create/destroy ok" "$tmp/check" || { cat "$tmp/check"; exit 1; }
done

"$weft" convert llama2c "$shared/models/stories260K/stories260K.bin" \
    "$shared/models/stories260K/tok512.bin" "$tmp/stories260k" > /dev/null

expected="Once upon a time, there was a little girl named Lily."
out=$("$weft" run --candidate manifests/serve-cpu.yaml --model "$tmp/stories260k" \
    --temperature 0 --max-tokens 20 "Once upon a time")
case "$out" in
"$expected"*) ;;
*) echo "serve-cpu printed: $out"; echo "expected it to start with: $expected"; exit 1 ;;
esac

# The same candidate frozen (the model path made absolute so the lock can pin its files).
sed "s|^model: .*|model: $tmp/stories260k|" manifests/serve-cpu.yaml > "$tmp/serve.yaml"
"$weft" candidate freeze "$tmp/serve.yaml" -o "$tmp/serve.lock" > /dev/null
out2=$("$weft" run --candidate "$tmp/serve.lock" --temperature 0 --max-tokens 20 \
    "Once upon a time")
[ "$out" = "$out2" ] || { echo "the lock gave: $out2"; exit 1; }

cand() { # cand NAME TECHNIQUES
    sed "s|^techniques:.*|techniques: [$2]|; /^  - /d" "$tmp/serve.yaml" > "$tmp/$1.yaml"
}
cand cont "sched.continuous"
cand serial ""
grep -q '^techniques: \[sched.continuous\]$' "$tmp/cont.yaml"
grep -q '^techniques: \[\]$' "$tmp/serial.yaml"

json=$("$weft" bench decode --candidate "$tmp/cont.yaml" --concurrency 6 --prompt 8 --gen 24 \
    --repeats 1 --json)
grep -q '"scheduler":"sched.continuous"' <<<"$json" || { echo "bench printed: $json"; exit 1; }
grep -q '"tokens_per_s":{"median":[0-9.]\+' <<<"$json" || { echo "bench printed: $json"; exit 1; }
# 6 requests decode together: 24 tokens each (the first comes with the prefill step).
grep -q '"steps_per_repeat":24.0,' <<<"$json" || { echo "bench printed: $json"; exit 1; }
json=$("$weft" bench decode --candidate "$tmp/serial.yaml" --concurrency 6 --prompt 8 --gen 24 \
    --repeats 1 --json)
grep -q '"scheduler":"serial (default)"' <<<"$json" || { echo "bench printed: $json"; exit 1; }
grep -q '"steps_per_repeat":144.0,' <<<"$json" || { echo "bench printed: $json"; exit 1; }

text=$("$weft" bench decode --candidate "$tmp/serve.yaml" --concurrency 4 --prompt 8 --gen 200 \
    --arrival 100 --repeats 2 --window 4)
grep -q 'arrival ITL  p50 [0-9.]\+ ms  p99 [0-9.]\+ ms' <<<"$text" || { echo "$text"; exit 1; }
# 100 prompt tokens in chunks of 1 + 1 per decoding stream (4): 20 steps.
grep -q '20.0 steps per arrival' <<<"$text" || { echo "$text"; exit 1; }

# The serial scheduler cannot run streams together: the arrival mode says so.
if "$weft" bench decode --candidate "$tmp/serial.yaml" --concurrency 3 --prompt 4 --gen 40 \
    --arrival 20 --repeats 1 2> "$tmp/err" > /dev/null; then
    echo "--arrival with the serial scheduler succeeded"; exit 1
fi
grep -q 'batching' "$tmp/err" || { cat "$tmp/err"; exit 1; }
if "$weft" bench decode --arrival 10 2> "$tmp/err"; then echo "--arrival alone accepted"; exit 1; fi
grep -q -- '--arrival needs --concurrency' "$tmp/err"
if "$weft" bench decode --concurrency x 2> "$tmp/err"; then echo "--concurrency x accepted"; exit 1; fi
grep -q -- '--concurrency' "$tmp/err"

# --max-model-len replaces the manifest's serving.max_model_len (512 in serve-cpu.yaml): the
# result names it, a run that does not fit it is refused, and so is a value below 2.
json=$("$weft" bench decode --candidate "$tmp/serve.yaml" --max-model-len 40 --prompt 8 --gen 24 \
    --repeats 1 --json)
grep -q '"max_model_len":40,' <<<"$json" || { echo "bench printed: $json"; exit 1; }
text=$("$weft" bench decode --candidate "$tmp/serve.yaml" --prompt 8 --gen 24 --repeats 1)
grep -q 'max_model_len 512,' <<<"$text" || { echo "$text"; exit 1; }
if "$weft" bench decode --candidate "$tmp/serve.yaml" --max-model-len 16 --prompt 8 --gen 24 \
    2> "$tmp/err" > /dev/null; then echo "a run past --max-model-len accepted"; exit 1; fi
grep -q 'exceed max_model_len 16' "$tmp/err" || { cat "$tmp/err"; exit 1; }
if "$weft" bench decode --candidate "$tmp/serve.yaml" --max-model-len 1 2> "$tmp/err" \
    > /dev/null; then echo "--max-model-len 1 accepted"; exit 1; fi
grep -q 'max_model_len: expected at least 2, got 1' "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo ok
