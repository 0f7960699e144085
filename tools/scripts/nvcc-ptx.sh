#!/usr/bin/env bash
# The cuda backend's kernels (plugins/backends/cuda/kernels/core.cu) built by nvcc into PTX, for
# the backend option kernel_ptx: the backend then loads these modules (the driver JIT-compiles
# them for the device) instead of compiling core.cu with NVRTC, so the two compilers' code can
# be measured against each other (for the same source NVRTC gives the attention kernels more
# registers: docs/DESIGN.md, "Register counts are NVRTC's").
#
#   tools/scripts/nvcc-ptx.sh OUTDIR [ARCH] [SET...]
#
# ARCH: the nvcc -arch value (default sm_90a, the H200's). SET: TA:TW[:FLAGS], the activation
# and weight dtype codes (1 f32, 2 f16, 3 bf16) and a comma-separated subset of trace, pdle
# (the backend's pdl_early, on by default), l1 (its pdl_l1), nsa (norm_sum_all), pm
# (attn_push_merge), cvt (bf16_cvt), rs (attn_rope_sums) and ablateN, as the backend's build
# would define them; default "3:3:pdle 3:3" (bf16 models, with and without pdl_early). A module
# whose file is absent is compiled by NVRTC as usual. Files are named as cuda_kernels.c load_ptx
# (module_flags) looks them up, the flags in that order whatever order SET gives:
# core_ta<TA>_tw<TW>[_trace][_pdle][_l1][_nsa][_pm][_cvt][_rs][_ablate<N>].ptx; e.g.
# 3:3:pdle,pm,cvt,rs for fast-cuda-async-smem-loop-nl-ex. The sets compile in parallel.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,18p' "$0"; exit 2; }
out=$1
arch=${2:-sm_90a}
shift $(($# >= 2 ? 2 : 1))
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(3:3:pdle 3:3)
root=$(cd "$(dirname "$0")/../.." && pwd)
src=$root/plugins/backends/cuda/kernels/core.cu
# NVCC, else nvcc on PATH, else the toolkit's default place
nvcc=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}
[ -x "$nvcc" ] || { echo "nvcc-ptx.sh: no nvcc (set NVCC, or put it on PATH)" >&2; exit 1; }
mkdir -p "$out"
pids=()
for set in "${sets[@]}"; do
  IFS=: read -r ta tw flags <<< "$set"
  case "$ta$tw" in [123][123]) ;; *) echo "nvcc-ptx.sh: set '$set': TA and TW are 1, 2 or 3" >&2; exit 2 ;; esac
  defs=(-DWEFT_TA="$ta" -DWEFT_TW="$tw")
  trace= pdle= l1= nsa= pm= cvt= rs= abl=
  IFS=, read -r -a fl <<< "${flags:-}"
  for f in "${fl[@]}"; do
    case "$f" in
      trace) trace=_trace; defs+=(-DWEFT_TRACE) ;;
      pdle) pdle=_pdle; defs+=(-DWEFT_PDL_EARLY) ;;
      l1) l1=_l1; defs+=(-DWEFT_PDL_L1) ;;
      nsa) nsa=_nsa; defs+=(-DWEFT_NORM_SUM_ALL) ;;
      pm) pm=_pm; defs+=(-DWEFT_PUSH_MERGE) ;;
      cvt) cvt=_cvt; defs+=(-DWEFT_BF16_CVT) ;;
      rs) rs=_rs; defs+=(-DWEFT_ROPE_SUMS) ;;
      ablate[1-9] | ablate1[0-5]) abl=_$f; defs+=(-DWEFT_ABLATE="${f#ablate}") ;;
      "") ;;
      *) echo "nvcc-ptx.sh: set '$set': unknown flag '$f' (trace, pdle, l1, nsa, pm, cvt, rs, ablate1-15)" >&2; exit 2 ;;
    esac
  done
  name=$out/core_ta${ta}_tw${tw}$trace$pdle$l1$nsa$pm$cvt$rs$abl.ptx
  # -w: the host preprocessor's note that core.cu redefines INFINITY (NVRTC has no math.h)
  "$nvcc" -std=c++17 -ptx -arch="$arch" -w "${defs[@]}" -I"$root/plugins/sdk/kernels" "$src" \
    -o "$name" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
[ $rc = 0 ] || { echo "nvcc-ptx.sh: a set failed to compile" >&2; exit 1; }
ls -l "$out"/core_ta*.ptx
