#!/usr/bin/env bash
# Builds weft with the cuda backend on this machine (nvcc and the CUDA libraries are here; no
# GPU is needed to build) and packs a portable bundle that runs on a machine with only the CUDA
# driver and runtime libraries:
#   <out>/bin/weft, <out>/lib/libweft.so*, <out>/lib/weft/plugins/<bundle>/ (libraries and
#   manifests), <out>/lib/{libyaml,libmicrohttpd,libcmocka} (what a stock CUDA image lacks),
#   <out>/tests/ (unit tests and tools), all with $ORIGIN-relative rpaths.
# On the GPU machine: export WEFT_PLUGIN_PATH=<out>/lib/weft/plugins; <out>/bin/weft ...
#   tools/scripts/gpu-bundle.sh [OUT [--shared]]   (default .gpu, which .gitignore ignores)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.gpu}
build=${WEFT_GPU_BUILD:-build-gpu}
cmake -S . -B "$build" -DWEFT_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)"
rm -rf "$out"
cmake --install "$build" --prefix "$out" >/dev/null
libdir=$(ls -d "$out"/lib* | head -n1)
if [ "$libdir" != "$out/lib" ]; then mv "$libdir" "$out/lib"; fi
for l in libyaml-0.so.2 libmicrohttpd.so.12 libcmocka.so.0; do
  cp -L "/usr/lib/$(gcc -dumpmachine)/$l" "$out/lib/"
done
patchelf --set-rpath '$ORIGIN/../lib' "$out/bin/weft"
patchelf --set-rpath '$ORIGIN' "$out"/lib/libweft.so.*.*.*
mkdir -p "$out/tests"
# the tests, and the benchmark tools built beside the CLI (weft-prefix-bench, ...)
for t in "$build"/tests/* "$build"/bin/weft-*; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  cp "$t" "$out/tests/"
  patchelf --set-rpath '$ORIGIN/../lib' "$out/tests/$(basename "$t")"
done
# fakes and other test-only bundles built outside the plugin dir
[ -d "$build/tests/fakes" ] && cp -a "$build/tests/fakes" "$out/tests/"
# --shared: the references and models the GPU checks need (../shared does not travel)
if [ "${2:-}" = "--shared" ]; then
  sh=${WEFT_SHARED_DIR:-../shared}
  mkdir -p "$out/shared/models" "$out/shared/reference"
  cp -a "$sh/models/stories260K" "$out/shared/models/"
  cp -a "$sh/reference/"* "$out/shared/reference/"
fi
du -sh "$out"
