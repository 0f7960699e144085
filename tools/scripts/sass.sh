#!/usr/bin/env bash
# The cuda backend's kernels (plugins/backends/cuda/kernels/core.cu) as machine code (SASS), on a
# build machine without a GPU. cuobjdump (with nvdisasm) disassembles what nvcc, or NVRTC (the
# backend's own compiler, through build/tests/cuda_nvrtc_check), builds for sm_90a.
#
#   tools/scripts/sass.sh dump KERNEL [DEFINE...]     the kernel's SASS (nvcc) on stdout
#   tools/scripts/sass.sh res [DEFINE...]             registers and stack of every kernel (nvcc)
#   tools/scripts/sass.sh diff REV [DEFINE...]        which kernels' SASS (nvcc) differs between
#                                                     core.cu at git revision REV and the tree
#   tools/scripts/sass.sh diff-nvrtc REV [SET...]     the same with NVRTC's cubins: REV's own
#                                                     cuda_nvrtc_check built in a worktree, the
#                                                     tree's from build/ (configured with cuda)
#
# DEFINE: e.g. -DWEFT_TRACE or -DWEFT_PUSH_MERGE, added to the bf16 module's -DWEFT_TA=3
# -DWEFT_TW=3 -DWEFT_PDL_EARLY (the shipped candidates' module). SET: a comma-separated define
# set as cuda_nvrtc_check takes it (default: that bf16 module's). The diff modes are the check
# that a change behind a new module define (or a pure refactor) leaves the default kernels'
# machine code as it was: they exit 1 and name the kernels whose code changed. nvcc and NVRTC
# compile the bf16 module differently (docs/DESIGN.md, "Register counts are NVRTC's"), so
# diff-nvrtc is the exact check and diff the quick one.
# This toolkit ships nvcc and ptxas but not cuobjdump or nvdisasm: they come from PyPI
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into build/sass-venv on first use.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=${1:-}
[ -n "$mode" ] || { sed -n '2,23p' "$0"; exit 2; }
shift
venv=$root/build/sass-venv
tools_ver=13.2.51
bin() { echo "$venv/lib/python3"*/site-packages/nvidia/cu13/bin; }
if [ ! -x "$(bin)/cuobjdump" ] || [ ! -x "$(bin)/nvdisasm" ]; then
  python3 -m venv "$venv" >/dev/null
  "$venv/bin/pip" install -q "nvidia-cuda-cuobjdump==$tools_ver" "nvidia-cuda-nvdisasm==$tools_ver"
fi
export PATH=$(bin):$PATH
nvcc=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# cubin SRC OUT DEFINE...: core.cu (SRC) built as the backend's bf16 module for sm_90a
cubin() {
  local src=$1 out=$2
  shift 2
  "$nvcc" -std=c++17 -cubin -arch=sm_90a -w -DWEFT_TA=3 -DWEFT_TW=3 -DWEFT_PDL_EARLY "$@" \
    -I"$root/plugins/sdk/kernels" "$src" -o "$out"
}
# per-kernel SASS files of a cubin into DIR (addresses and encodings kept: any change shows)
split_sass() {
  mkdir -p "$2"
  cuobjdump -sass "$1" | awk -v d="$2" '
    /Function : / { f = d "/" $3; next }
    f != "" && NF { print > f }'
}
# compare REV OLD.cubin NEW.cubin LABEL: each kernel's SASS; 1 (and the kernels named) if any differ
compare() {
  split_sass "$2" "$tmp/old"
  split_sass "$3" "$tmp/new"
  local n
  n=$(ls "$tmp/new" | wc -l)
  if ! diff -rq "$tmp/old" "$tmp/new" > "$tmp/d"; then
    sed -e "s|^Files $tmp/old/\([^ ]*\) and .*|changed: \1|" \
        -e "s|^Only in $tmp/old: |only at $1: |" -e "s|^Only in $tmp/new: |only in the tree: |" \
        "$tmp/d"
    echo "sass.sh ($4): kernels differ between $1 and the tree ($n kernels in the tree)"
    return 1
  fi
  echo "sass.sh ($4): all $n kernels' SASS identical between $1 and the tree"
}

src=$root/plugins/backends/cuda/kernels/core.cu
case "$mode" in
  dump)
    [ $# -ge 1 ] || { echo "sass.sh dump KERNEL [DEFINE...]" >&2; exit 2; }
    k=$1
    shift
    cubin "$src" "$tmp/core.cubin" "$@"
    cuobjdump -sass -fun "$k" "$tmp/core.cubin"
    ;;
  res)
    cubin "$src" "$tmp/core.cubin" "$@"
    cuobjdump -res-usage "$tmp/core.cubin" | awk '
      /Function / { sub(":", "", $2); name = $2; next }
      name != "" && /REG:/ { print name, $1, $2; name = "" }' | sort
    ;;
  diff)
    [ $# -ge 1 ] || { echo "sass.sh diff REV [DEFINE...]" >&2; exit 2; }
    rev=$1
    shift
    git -C "$root" show "$rev:plugins/backends/cuda/kernels/core.cu" > "$tmp/old.cu"
    cp "$src" "$tmp/new.cu"
    cubin "$tmp/old.cu" "$tmp/old.cubin" "$@" &
    old_pid=$!
    cubin "$tmp/new.cu" "$tmp/new.cubin" "$@"
    wait "$old_pid"
    compare "$rev" "$tmp/old.cubin" "$tmp/new.cubin" "nvcc"
    ;;
  diff-nvrtc)
    [ $# -ge 1 ] || { echo "sass.sh diff-nvrtc REV [SET...]" >&2; exit 2; }
    rev=$1
    shift
    sets=("$@")
    [ ${#sets[@]} -gt 0 ] || sets=(-DWEFT_TA=3,-DWEFT_TW=3,-DWEFT_PDL_EARLY)
    check=$root/build/tests/cuda_nvrtc_check
    [ -x "$check" ] || { echo "sass.sh: no $check (configure build/ with -DWEFT_CUDA=ON)" >&2; exit 1; }
    git -C "$root" worktree add -q --detach "$tmp/wt" "$rev"
    trap 'git -C "$root" worktree remove --force "$tmp/wt" 2>/dev/null; rm -rf "$tmp"' EXIT
    cmake -S "$tmp/wt" -B "$tmp/wt/build" -DWEFT_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$tmp/wt/build" --target cuda_nvrtc_check -j2 >/dev/null
    rc=0
    for set in "${sets[@]}"; do
      WEFT_NVRTC_CUBIN=$tmp/old.cubin "$tmp/wt/build/tests/cuda_nvrtc_check" core.cu sm_90a "$set" \
        >/dev/null
      WEFT_NVRTC_CUBIN=$tmp/new.cubin "$check" core.cu sm_90a "$set" >/dev/null
      rm -rf "$tmp/old" "$tmp/new"
      compare "$rev" "$tmp/old.cubin" "$tmp/new.cubin" "NVRTC $set" || rc=1
    done
    exit $rc
    ;;
  *)
    echo "sass.sh: unknown mode '$mode' (dump, diff, res)" >&2
    exit 2
    ;;
esac
