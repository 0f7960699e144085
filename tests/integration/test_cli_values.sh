#!/usr/bin/env bash
# Option values on the command line: every numeric option of every command parses its whole
# value (tools/cli.c) and a bad one is refused with exit code 2 and a message that names the
# command and the option ("weft <cmd>: <option>: expected ..."), before anything is loaded or
# run. Then the same options with good values do their work (parity passes, limits and synth
# answer), so the parsers do not refuse what they should take.
set -euo pipefail
build=${1:?usage: test_cli_values.sh BUILD_DIR}
weft="$build/bin/weft"
shared=${WEFT_SHARED_DIR:-$(pwd)/../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$weft" convert llama2c "$shared/models/stories260K/stories260K.bin" \
    "$shared/models/stories260K/tok512.bin" "$tmp/s" > /dev/null
ref="$shared/reference/stories260K/reference.safetensors"
cfg=models/configs/Qwen3-0.6B.json
[ -f "$cfg" ] || { echo "missing $cfg"; exit 1; }

fails=0
# refused CMD OPTION VALUE [OTHER ARGS...]: the value is refused, naming the command and option.
refused() {
    local cmd=$1 opt=$2 val=$3
    shift 3
    local rc=0
    # shellcheck disable=SC2086
    "$weft" $cmd "$@" "$opt" "$val" > "$tmp/out" 2> "$tmp/err" || rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q "^weft $cmd: $opt: expected" "$tmp/err"; then
        echo "FAIL: weft $cmd ... $opt '$val': rc $rc (expected 2), stderr:"
        sed 's/^/    /' "$tmp/err"
        fails=$((fails + 1))
    fi
}

for v in -1 " 5" 5x "" +5 0x10 4294967296; do
    refused run --max-tokens "$v" --model "$tmp/s"
done
for v in nan inf -1 1e40 "" 1,5; do
    refused run --temperature "$v" --model "$tmp/s"
done
refused run --top-p 0 --model "$tmp/s"
refused run --top-p 1.5 --model "$tmp/s"
refused run --min-p 2 --model "$tmp/s"
refused run --repetition-penalty 0 --model "$tmp/s"
refused run --seed 18446744073709551616 --model "$tmp/s"
refused run --seed " -1" --model "$tmp/s"
refused "bench decode" --gen abc --model "$tmp/s"
refused "bench prefill" --prompt 1e3 --model "$tmp/s"
refused "candidate graph" --tokens -2 manifests/baseline-cpu.yaml

u=http://127.0.0.1:9
refused "bench serve" --requests 0 --url $u
refused "bench serve" --max-tokens "" --url $u
refused "bench serve" --engine-repeats 0 --url $u
refused "bench serve" --stream-fraction 2 --url $u
refused "bench serve" --stream-fraction -0.5 --url $u
refused "bench serve" --concurrency 0 --url $u
refused "bench serve" --concurrency 4,x --url $u
refused "bench serve" --concurrency , --url $u
refused "bench serve" --concurrency 1,2,3,4,5,6,7,8,9 --url $u

refused synth --layers 0 "$cfg" "$tmp/synth"
refused synth --shard-gb 1.5 "$cfg" "$tmp/synth"
refused synth --seed -1 "$cfg" "$tmp/synth"

lock="$tmp/none.lock"
refused serve --port 65536 "$lock"
refused serve --threads 0 "$lock"
refused serve --max-body-bytes 12 "$lock"
refused serve --shutdown-timeout "" "$lock"
refused serve --shutdown-timeout inf "$lock"
refused serve --shutdown-timeout 1e9 "$lock"

p=(--manifest manifests/baseline-cpu.yaml --model "$tmp/s" --reference "$ref")
refused "eval parity" --max-rel abc "${p[@]}"
refused "eval parity" --max-mean-kl -1 "${p[@]}"
refused "eval parity" --threads -3 "${p[@]}"
refused "eval parity" --prompt-len 0 "${p[@]}"
refused "eval probe" --threads abc --backend cpu
refused "eval probe" --threads 0 --backend cpu
refused "eval limits" --context " 1" --model "$tmp/s"
refused "eval limits" --batch 0 --model "$tmp/s"
refused "eval limits" --prompt "" --model "$tmp/s"
refused "eval limits" --kv-bytes 9 --model "$tmp/s"
refused "eval run" --seed 1.5 --lock "$lock"
refused "eval run" --startup-timeout -1 --lock "$lock"
refused "eval run" --requests 0 --lock "$lock"

refused "bench prefill" --prompt 4294967295 --model "$tmp/s"

# Lengths whose sum passes 32 bits are refused at once, before a prompt is built (the sum once
# wrapped to a small number, and a 4-billion-token prompt was allocated and filled first).
for a in "--prompt 4294967295" "--gen 4294967295" "--prompt 4294967295 --concurrency 2" \
         "--arrival 4294967295 --concurrency 2"; do
    rc=0
    # shellcheck disable=SC2086
    timeout 20 "$weft" bench decode --model "$tmp/s" $a --repeats 1 > "$tmp/out" 2> "$tmp/err" ||
        rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q "exceed max_model_len" "$tmp/err"; then
        echo "FAIL: weft bench decode $a: rc $rc (expected 2), stderr:"
        sed 's/^/    /' "$tmp/err"
        fails=$((fails + 1))
    fi
done

# WEFT_LOG: a value that is no level is named once, at the start (it used to be ignored).
WEFT_LOG=debgu "$weft" plugins list > /dev/null 2> "$tmp/err"
grep -q "WEFT_LOG 'debgu': expected error, warn, info or debug" "$tmp/err" ||
    { echo "FAIL: WEFT_LOG=debgu was not named:"; cat "$tmp/err"; fails=$((fails + 1)); }
for lv in error warn WARNING info debug; do
    WEFT_LOG=$lv "$weft" plugins list > /dev/null 2> "$tmp/err"
    if grep -q "WEFT_LOG" "$tmp/err"; then
        echo "FAIL: WEFT_LOG=$lv refused:"; cat "$tmp/err"; fails=$((fails + 1))
    fi
done

[ "$fails" -eq 0 ] || { echo "$fails refusal(s) wrong"; exit 1; }

# Good values are taken and used.
out=$("$weft" run --model "$tmp/s" --temperature 0 --top-p 1 --min-p 0 --repetition-penalty 1 \
    --max-tokens 8 --seed 3 --threads 1 "Once upon a time")
case "$out" in
"Once upon a time, there was a"*) ;;
*) echo "weft run with good values printed: $out"; exit 1 ;;
esac
"$weft" eval parity "${p[@]}" --max-rel 1e-3 --max-mean-kl 1e-6 --threads 1 --prompt-len 1 \
    > "$tmp/parity" || { cat "$tmp/parity"; exit 1; }
grep -q "^PASS" "$tmp/parity" || { cat "$tmp/parity"; exit 1; }
# ... and a bound the candidate misses fails the check (so the value reached it).
if "$weft" eval parity "${p[@]}" --max-rel 1e-9 > "$tmp/parity" 2>&1; then
    echo "parity passed --max-rel 1e-9:"; cat "$tmp/parity"; exit 1
fi
grep -q "FAIL: relative difference .* > 1.000e-09" "$tmp/parity" || { cat "$tmp/parity"; exit 1; }

cat > "$tmp/probe.json" <<'JSON'
{"arch": "x86_64", "backend": "cpu", "device": "test", "date": "2026-12-05T00:00:00Z",
 "copy_bytes": 1073741824, "copy_bytes_per_s": 1e10, "gemm_f32_flops": 1e11}
JSON
"$weft" eval limits --model "$tmp/s" --probe "$tmp/probe.json" --context 64 --prompt 32 \
    --batch 2 --dtype-bytes 4 --kv-bytes 2 --json > "$tmp/limits"
python3 - "$tmp/limits" <<'EOF'
import json, sys
l = json.load(open(sys.argv[1]))
assert (l["context"], l["prompt"], l["batch"]) == (64, 32, 2), l
EOF
"$weft" synth "$cfg" "$tmp/synth" --layers 1 --seed 7 --shard-gb 1 --dtype bf16 > /dev/null
python3 - "$tmp/synth/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["num_hidden_layers"] == 1, c["num_hidden_layers"]
EOF
echo "cli values: all refusals named their option; good values taken"
