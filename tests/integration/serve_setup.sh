# Sourced by tests/integration/test_serve_*.sh: builds the stories260K candidate the serve tests
# run against. Expects $1 = the build directory. Sets WEFT_BIN, WEFT_PY, SERVE_TMP,
# WEFT_SERVE_LOCK (no chat template), WEFT_SERVE_CHAT_LOCK (a copy of the model whose
# tokenizer_config.json carries a small chat template) and WEFT_SERVE_BATCH_LOCK (the serving
# candidate manifests/serve-cpu.yaml, continuous batching), and removes SERVE_TMP on exit.
set -euo pipefail
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export WEFT_BIN=$build/bin/weft
export WEFT_SHARED_DIR=${WEFT_SHARED_DIR:-$root/../shared}
export WEFT_MODEL_MIRROR=$WEFT_SHARED_DIR/models
export WEFT_PLUGIN_PATH=
WEFT_PY=${WEFT_PYTHON:-}
if [ -z "$WEFT_PY" ]; then
  for cand in "$build/venv/bin/python" "$root/build/venv/bin/python"; do
    if [ -x "$cand" ]; then WEFT_PY=$cand; break; fi
  done
fi
if [ -z "$WEFT_PY" ] || ! "$WEFT_PY" -c "import openai, pytest" 2>/dev/null; then
  echo "serve tests need the Python venv from tools/scripts/requirements.txt (set WEFT_PYTHON," \
       "or run tools/scripts/test.sh which creates build/venv)" >&2
  exit 1
fi
export WEFT_PY
SERVE_TMP=$(mktemp -d)
export SERVE_TMP
trap 'rm -rf "$SERVE_TMP"' EXIT

dir=$SERVE_TMP/cache/models/stories260k
WEFT_CACHE=$SERVE_TMP/cache "$WEFT_BIN" pull stories260k >/dev/null 2>&1
"$WEFT_BIN" convert llama2c "$dir/stories260K.bin" "$dir/tok512.bin" "$dir" >/dev/null
WEFT_CACHE=$SERVE_TMP/cache "$WEFT_BIN" candidate freeze "$root/manifests/baseline-cpu.yaml" \
  -o "$SERVE_TMP/base.lock" >/dev/null
# The serving candidate (continuous batching, paged kv, prefix cache) when the tree has it.
WEFT_SERVE_BATCH_LOCK=
if [ -f "$root/manifests/serve-cpu.yaml" ]; then
  WEFT_CACHE=$SERVE_TMP/cache "$WEFT_BIN" candidate freeze "$root/manifests/serve-cpu.yaml" \
    -o "$SERVE_TMP/serve-cpu.lock" >/dev/null
  WEFT_SERVE_BATCH_LOCK=$SERVE_TMP/serve-cpu.lock
fi
export WEFT_SERVE_BATCH_LOCK
# The chat copy: same weights, a template in tokenizer_config.json, its own lock (the lock pins
# every model file's hash, so the edited file needs a lock of its own).
mkdir -p "$SERVE_TMP/chatcache/models"
cp -r "$SERVE_TMP/cache/models/stories260k" "$SERVE_TMP/chatcache/models/"
"$WEFT_PY" - "$SERVE_TMP/chatcache/models/stories260k/tokenizer_config.json" <<'PY'
import json, sys
path = sys.argv[1]
cfg = json.load(open(path))
cfg["chat_template"] = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n"
    "{% elif m['role'] == 'user' %}User: {{ m['content'] }}\n"
    "{% else %}Assistant: {{ m['content'] }}{{ eos_token }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")
json.dump(cfg, open(path, "w"), indent=2)
PY
WEFT_CACHE=$SERVE_TMP/chatcache "$WEFT_BIN" candidate freeze "$root/manifests/baseline-cpu.yaml" \
  -o "$SERVE_TMP/chat.lock" >/dev/null
export WEFT_SERVE_LOCK=$SERVE_TMP/base.lock WEFT_SERVE_CHAT_LOCK=$SERVE_TMP/chat.lock
export WEFT_SERVE_MODEL_DIR=$SERVE_TMP/cache/models/stories260k
export WEFT_REFERENCE_DIR=$WEFT_SHARED_DIR/reference
