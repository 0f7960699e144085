#!/usr/bin/env bash
# The host's worker pool in the engine (ctest passes the build dir as $1): a random Llama of
# shapes large enough that fuse.swiglu's cpu kernel and kv.paged's cpu attention split their work
# over the `threads` host service (swiglu splits at F x K x T >= 65,536: here 1,024 x 256), with
# stories260K's tokenizer (512 ids) beside it. Greedy text with --threads 2 and 3 must equal
# --threads 1 for the fused candidate and the serving one (continuous batching, paged kv,
# prefix cache), since every task writes its own output rows in the single-thread order.
# stories260K itself never reaches the threshold, so the pool runs on no other test's model.
set -euo pipefail
build=$(cd "${1:?usage: test_threads_cli.sh BUILD_DIR}" && pwd)
weft="$build/bin/weft"
shared=${WEFT_SHARED_DIR:-$(pwd)/../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat > "$tmp/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
 "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 512, "max_position_embeddings": 512,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
JSON
"$weft" synth "$tmp/config.json" "$tmp/model" --seed 7 --dtype f32 > /dev/null || fail "synth"
"$weft" convert llama2c "$shared/models/stories260K/stories260K.bin" \
    "$shared/models/stories260K/tok512.bin" "$tmp/stories" > /dev/null || fail "convert"
cp "$tmp/stories/tokenizer.json" "$tmp/stories/tokenizer_config.json" "$tmp/model/"

for cand in fuse-all-cpu serve-cpu; do
    sed "s|^model: .*|model: $tmp/model|" "manifests/$cand.yaml" > "$tmp/$cand.yaml"
    one=$("$weft" run --candidate "$tmp/$cand.yaml" --temperature 0 --max-tokens 24 --threads 1 \
        "Once upon a time") || fail "$cand, 1 thread"
    [ -n "$one" ] || fail "$cand: no text"
    for t in 2 3; do
        got=$("$weft" run --candidate "$tmp/$cand.yaml" --temperature 0 --max-tokens 24 \
            --threads "$t" "Once upon a time") || fail "$cand, $t threads"
        [ "$got" = "$one" ] || fail "$cand: $t threads gave '$got', 1 thread '$one'"
    done
    echo "ok: $cand, threads 1 / 2 / 3 agree"
done
echo "threads: all passed"
