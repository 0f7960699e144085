#!/usr/bin/env bash
# End to end through the CLI: convert the shared stories260K llama2.c checkpoint, then
# `weft run` greedy from "Once upon a time" must print the continuation the reference README
# quotes for greedy decoding with the converted weights, `weft candidate graph` must print the
# decode graph and its hash, `weft bench decode` must report a speed, `--chat` must render the
# model's chat template, and bad options are refused with a message.
set -euo pipefail
build=${1:?usage: test_run_stories.sh BUILD_DIR}
weft="$build/bin/weft"
shared=${WEFT_SHARED_DIR:-$(pwd)/../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$weft" convert llama2c "$shared/models/stories260K/stories260K.bin" \
    "$shared/models/stories260K/tok512.bin" "$tmp/stories260k" > /dev/null

cat > "$tmp/cpu1.yaml" <<YAML
format: 1
candidate: cpu1
model: $tmp/stories260k
backend: {name: cpu, options: {threads: 1}}
model_plugin: llama
techniques: []
serving:
  max_model_len: 512
  max_concurrency: 1
  threads: 1
YAML

out=$("$weft" run --candidate "$tmp/cpu1.yaml" --temperature 0 --max-tokens 20 "Once upon a time")
expected="Once upon a time, there was a little girl named Lily."
case "$out" in
"$expected"*) ;;
*) echo "weft run printed: $out"; echo "expected it to start with: $expected"; exit 1 ;;
esac

# A continuation keeps its leading space: the prompt's tail primes the detokenizer.
out_once=$("$weft" run --candidate "$tmp/cpu1.yaml" --temperature 0 --max-tokens 3 "Once")
[ "$out_once" = "Once upon a time" ] || { echo "from 'Once': '$out_once'"; exit 1; }

# --model replaces the baseline manifest's model.
out2=$("$weft" run --model "$tmp/stories260k" --temperature 0 --max-tokens 20 "Once upon a time")
[ "$out" = "$out2" ] || { echo "--model gave: $out2"; exit 1; }

# A stop string ends the text right before it.
out3=$("$weft" run --candidate "$tmp/cpu1.yaml" --temperature 0 --max-tokens 40 --stop "Lily" \
    "Once upon a time")
[ "$out3" = "Once upon a time, there was a little girl named " ] ||
    { echo "with --stop: '$out3'"; exit 1; }

graph=$("$weft" candidate graph "$tmp/cpu1.yaml")
grep -q '^hash [0-9a-f]\{32\}$' <<<"$graph" || { echo "graph printed: $graph"; exit 1; }
grep -q '^  77 lm_head: lm_head(norm.y:f32\[1,64\], lm_head:f32\[512,64\]) -> out.logits:f32\[1,512\]  \[cpu\]$' \
    <<<"$graph" || { echo "graph printed: $graph"; exit 1; }

bench=$("$weft" bench decode --candidate "$tmp/cpu1.yaml" --gen 32 --repeats 2)
grep -q 'tokens/s   median [0-9.]\+' <<<"$bench" || { echo "bench printed: $bench"; exit 1; }

# max_model_len against the model's 512 trained positions: asked for explicitly beyond them it is
# refused with both numbers and the override; WEFT_ALLOW_LONG_MAX_MODEL_LEN=1 allows it; a
# candidate's serving default beyond them is lowered to them with a warning.
if "$weft" run --candidate "$tmp/cpu1.yaml" --max-model-len 1000 "x" 2> "$tmp/err"; then
    echo "--max-model-len 1000 on a 512-position model was accepted"; exit 1
fi
grep -q "max_model_len 1000 is beyond the 512 positions" "$tmp/err" &&
    grep -q "WEFT_ALLOW_LONG_MAX_MODEL_LEN=1" "$tmp/err" || { cat "$tmp/err"; exit 1; }
WEFT_ALLOW_LONG_MAX_MODEL_LEN=1 "$weft" run --candidate "$tmp/cpu1.yaml" --max-model-len 1000 \
    --max-tokens 2 "x" > /dev/null || { echo "the override was refused"; exit 1; }
sed 's/max_model_len: 512/max_model_len: 4096/' "$tmp/cpu1.yaml" > "$tmp/long.yaml"
json=$("$weft" bench decode --candidate "$tmp/long.yaml" --prompt 8 --gen 8 --repeats 1 --json \
    2> "$tmp/err")
grep -q '"max_model_len":512,' <<<"$json" || { echo "bench printed: $json"; exit 1; }
grep -q "serving.max_model_len 4096 is beyond the 512 positions .*; using 512" "$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
if "$weft" bench prefill --candidate "$tmp/cpu1.yaml" --repeats 1 2> "$tmp/err" > /dev/null; then
    echo "bench prefill's 1,024-token default ran on a 512-position model"; exit 1
fi
grep -q -- "--prompt 1024 needs max_model_len 1025" "$tmp/err" || { cat "$tmp/err"; exit 1; }
"$weft" bench prefill --candidate "$tmp/cpu1.yaml" --prompt 511 --repeats 1 > /dev/null ||
    { echo "bench prefill --prompt 511 refused"; exit 1; }

# --chat renders the model's chat template with the generation prompt: a copy of the model with
# a small template continues exactly as the plain prompt the template makes, and without a
# template --chat is refused naming the model.
cp -r "$tmp/stories260k" "$tmp/chat"
"${WEFT_PYTHON:-python3}" - "$tmp/chat/tokenizer_config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["chat_template"] = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }} said: "
                      "{{ m['content'] }}.{% endfor %}{% if add_generation_prompt %} Then{% endif %}")
json.dump(c, open(p, "w"))
PY
chat=$("$weft" run --model "$tmp/chat" --chat --temperature 0 --max-tokens 12 "Lily found a ball")
plain=$("$weft" run --model "$tmp/chat" --temperature 0 --max-tokens 12 \
    "user said: Lily found a ball. Then")
[ -n "$chat" ] && [ "$plain" = "user said: Lily found a ball. Then$chat" ] ||
    { echo "--chat printed '$chat'; the rendered prompt gave '$plain'"; exit 1; }
if "$weft" run --model "$tmp/stories260k" --chat "x" 2> "$tmp/err"; then
    echo "--chat without a template was accepted"; exit 1
fi
grep -q "$tmp/stories260k: no chat template" "$tmp/err" || { cat "$tmp/err"; exit 1; }
[ "$(grep -o "$tmp/stories260k" "$tmp/err" | wc -l)" = 1 ] ||
    { echo "the model's path is said more than once: $(cat "$tmp/err")"; exit 1; }

# Bad input is refused with a message, not a crash.
for bad in "--max-tokens 0" "--top-k x" "--frob" "--temperature"; do
    # shellcheck disable=SC2086
    if "$weft" run --candidate "$tmp/cpu1.yaml" $bad "x" 2> "$tmp/err"; then
        echo "weft run $bad was accepted"; exit 1
    fi
    [ -s "$tmp/err" ] || { echo "weft run $bad: no message"; exit 1; }
done
if "$weft" run --candidate "$tmp/cpu1.yaml" "one" "two" 2> "$tmp/err"; then
    echo "two prompts were accepted"; exit 1
fi
grep -q "one PROMPT expected" "$tmp/err" || { cat "$tmp/err"; exit 1; }
if "$weft" run --candidate "$tmp/cpu1.yaml" --top-p 2 "x" 2> "$tmp/err"; then
    echo "--top-p 2 was accepted"; exit 1
fi
grep -q -- '--top-p' "$tmp/err"
echo ok
