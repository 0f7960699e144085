#!/usr/bin/env bash
# The quick start: install what is missing, build, pull the default model (stories260k), convert
# it to the Hugging Face layout, freeze the CPU baseline candidate and generate text.
#   tools/scripts/quickstart.sh ["prompt"]
# WEFT_MODEL_MIRROR (a URL or a folder) replaces the Hugging Face hub as the model source.
set -euo pipefail
cd "$(dirname "$0")/../.."
prompt=${1:-"Once upon a time"}
tools/scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
weft=build/bin/weft
cache=${WEFT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}
$weft pull stories260k
$weft convert llama2c "$cache/models/stories260k/stories260K.bin" \
  "$cache/models/stories260k/tok512.bin" "$cache/models/stories260k"
$weft plugins list
$weft candidate freeze manifests/baseline-cpu.yaml -o manifests/frozen/baseline-cpu.lock
$weft candidate check manifests/frozen/baseline-cpu.lock
$weft run --candidate manifests/frozen/baseline-cpu.lock --max-tokens 128 "$prompt"
