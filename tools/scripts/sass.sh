#!/usr/bin/env bash
# The cuda backend's kernels (plugins/backends/cuda/kernels/core.cu) as machine code (SASS), on a
# build machine without a GPU: nvcc builds the module for sm_90a with the defines the backend
# would pass, and cuobjdump (with nvdisasm) disassembles it.
#
#   tools/scripts/sass.sh dump KERNEL [DEFINE...]       the kernel's SASS on stdout
#   tools/scripts/sass.sh diff REV [DEFINE...]          which kernels' SASS differs between
#                                                       core.cu at git revision REV and the tree
#   tools/scripts/sass.sh res [DEFINE...]               registers and stack of every kernel
#
# DEFINE: e.g. -DWEFT_TRACE or -DWEFT_PUSH_MERGE, added to the bf16 module's -DWEFT_TA=3
# -DWEFT_TW=3 -DWEFT_PDL_EARLY (the shipped candidates' module). `diff` is the check that a
# change behind a new module define (or a pure refactor) leaves the default kernels' machine code
# as it was: it exits 1 and names the kernels whose code changed.
# This toolkit ships nvcc and ptxas but not cuobjdump or nvdisasm: they come from PyPI
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into build/sass-venv on first use. nvcc's code
# can differ from NVRTC's (the backend's compiler) in registers; the instruction sequences it
# shows are the same front end's.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=${1:-}
[ -n "$mode" ] || { sed -n '2,19p' "$0"; exit 2; }
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
    split_sass "$tmp/old.cubin" "$tmp/old"
    split_sass "$tmp/new.cubin" "$tmp/new"
    n=$(ls "$tmp/new" | wc -l)
    if ! diff -rq "$tmp/old" "$tmp/new" > "$tmp/d"; then
      sed -e "s|^Files $tmp/old/\([^ ]*\) and .*|changed: \1|" \
          -e "s|^Only in $tmp/old: |only at $rev: |" -e "s|^Only in $tmp/new: |only in the tree: |" \
          "$tmp/d"
      echo "sass.sh: kernels differ between $rev and the tree ($n kernels in the tree)"
      exit 1
    fi
    echo "sass.sh: all $n kernels' SASS identical between $rev and the tree"
    ;;
  *)
    echo "sass.sh: unknown mode '$mode' (dump, diff, res)" >&2
    exit 2
    ;;
esac
