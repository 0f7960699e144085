#!/usr/bin/env bash
# A light bundle for A/B calls: the bundle in BUNDLE (default .gpu, made by gpu-bundle.sh) with
# its cuda backend plugin rebuilt from commit REV, so the two differ only in the backend (its
# kernels included: core.cu is compiled into the plugin). The result has no tests or shared
# data (a few MB), so it travels beside the full bundle:
#   tools/scripts/gpu-base-bundle.sh REV [OUT [BUNDLE]]   (default OUT .gpu-base)
# then e.g. WEFT_AB_BUNDLES=".gpu-base .gpu" tools/scripts/gpu-check.sh ab on the GPU machine.
# Manifests naming backend options that REV does not know fail to load on OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:?usage: gpu-base-bundle.sh REV [OUT [BUNDLE]]}
out=${2:-.gpu-base}
bundle=${3:-.gpu}
[ -x "$bundle/bin/weft" ] || { echo "gpu-base-bundle: no bundle in $bundle (run gpu-bundle.sh)" >&2; exit 1; }
sha=$(git rev-parse --verify "$rev^{commit}")
wt=${WEFT_BASE_WORKTREE:-$(dirname "$PWD")/weft-base-$(echo "$sha" | cut -c1-12)}
[ -d "$wt" ] || git worktree add -q --detach "$wt" "$sha"
cmake -S "$wt" -B "$wt/build-gpu" -DWEFT_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$wt/build-gpu" -j"$(nproc)" --target plugin_cuda >/dev/null
so=$wt/build-gpu/lib/weft/plugins/cuda/libweft-cuda.so
dst=$out/lib/weft/plugins/cuda
rm -rf "$out"
mkdir -p "$out"
cp -a "$bundle/bin" "$bundle/lib" "$out/"
cp "$so" "$dst/libweft-cuda.so"
cp "$wt/plugins/backends/cuda/manifest.yaml" "$dst/manifest.yaml"
patchelf --set-rpath "$(patchelf --print-rpath "$bundle/lib/weft/plugins/cuda/libweft-cuda.so")" \
  "$dst/libweft-cuda.so"
echo "$out: $bundle with the cuda plugin of $(git log --oneline -1 "$sha")"
du -sh "$out"
