/* Internal state of the cuda backend plugin, shared by its files: the device, the primary
 * context, the compute stream, the arena, cuBLASLt, and the NVRTC module cache. */
#ifndef WEFT_CUDA_INTERNAL_H
#define WEFT_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/plugin.h"

#define CUDA_NAME "cuda"
/* Default of option gemv_max_tokens: past 4 rows cuBLASLt was faster at every decode shape
 * measured (docs/perf/fuse.md); at or below it the measured rule of cuda_ops.c decides. */
#define CUDA_GEMV_MAX_TOKENS 4

/* A block of device memory inside an arena chunk. */
typedef struct cuda_block {
    uint64_t off, bytes;
    int used;
} cuda_block;

typedef struct cuda_chunk {
    CUdeviceptr base;
    uint64_t bytes;
    cuda_block *blocks;
    size_t n_blocks, cap_blocks;
} cuda_chunk;

/* A compiled module of core.cu for one (activation dtype, weight dtype) pair. */
typedef struct cuda_module {
    uint32_t ta, tw;
    CUmodule mod;
} cuda_module;

typedef struct cuda_backend {
    const weft_host_services *host;
    int ordinal;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    int cc_major, cc_minor, sm_count;
    char name[128];
    char arch[32];
    /* arena */
    cuda_chunk *chunks;
    size_t n_chunks;
    uint64_t arena_fixed; /* option arena_mb in bytes: one chunk up front; 0 = grow */
    uint64_t allocated;
    /* pinned staging ring for per-step host metadata (row -> slot, logit rows) */
    uint8_t *stage;
    CUdeviceptr stage_dev;
    uint64_t stage_bytes, stage_off;
    /* cuBLASLt */
    cublasLtHandle_t lt;
    CUdeviceptr lt_ws;
    size_t lt_ws_bytes;
    /* NVRTC */
    cuda_module modules[16];
    size_t n_modules;
    void *ops; /* cuda_ops.c's state */
    /* option gemv_max_tokens: linear and lm_head nodes with at most this many rows may use the
     * GEMV kernel instead of cuBLASLt (0 = always cuBLASLt), where it measured faster; option
     * gemv_force: wherever it fits, without the measured rule (tests, benchmarks) */
    int gemv_max_tokens, gemv_force;
    /* option pdl (on a device of compute capability 9.0 or newer): launch the kernels of
     * core.cu with programmatic stream serialization (docs/perf/pdl.md); option pdl_early: the
     * modules are compiled with WEFT_PDL_EARLY (each kernel triggers its dependents' launch
     * before its own griddepcontrol.wait, docs/perf/batch1.md); option pdl_l1: compiled with
     * WEFT_PDL_L1 (each kernel drops its SM's L1 lines right after its wait, core.cu pdl_enter) */
    int pdl, pdl_early, pdl_l1;
    /* option smem_carveout: every core.cu kernel's preferred shared memory share in percent, or
     * -1 for the driver's choice (cuda_kernels.c set_carveout) */
    int smem_carveout;
    /* option gemv_xsmem: which GEMV kernels read x from a shared-memory copy (1 the plain
     * ones, 2 gate|up + SwiGLU; cuda_ops.c gemv_xs_bytes) */
    int gemv_xsmem;
    /* option gemv_stage: KiB of weights a block of the staged T = 1 GEMV copies into shared
     * memory before its wait (cuda_ops.c gemv_st_bytes), 0 = the register form */
    int gemv_stage;
    /* option gemv_loop: blocks an SM of the looped T = 1 GEMV (core.cu gemv_loop; cuda_ops.c
     * gemv_lp_grid), 0 = one block per row group */
    int gemv_loop;
    /* option gemv_head_rows: plain T = 1 products of more rows than this (the LM heads) run one
     * 8-warp block per row group, x read through L1 (weft_gemv_1), neither looped nor with x in
     * shared memory (option gemv_stage's staged form, where set, still comes first); 0 = every
     * product as the other options say */
    int gemv_head_rows;
    int gemv_split_1024, gemv_split_2048; /* GEMV warps a row at K <= 1024, <= 2048 (0: rule) */
    /* option gemv_loop_warps: warps a block of the looped GEMVs with x in shared memory (8, 16,
     * 24, 32: core.cu weft_gemv_lp_xs_1, weft_gemv_lp_xs_w<warps>_1), so x is copied once for
     * that many warps' rows */
    int gemv_loop_warps;
    /* option gemv_x_async: the looped 8-warp GEMVs with x in shared memory copy it there by
     * cp.async (core.cu gemv_x_shared's ASYNC form, kernels weft_gemv_lp_xa_1 and
     * weft_gemv_swiglu_lp_xa_1) */
    int gemv_x_async;
    /* options gemv_l2_rest (KiB), gemv_l2_sm, gemv_l2_first: the looped plain product launched
     * right after the fused attention (the o projection) loads that much of each block's rows
     * past its first group into L2 before its wait; with gemv_l2_sm none from an SM a live
     * attention block shares; with gemv_l2_first such an SM's blocks issue even their first
     * batch of weights after the wait (core.cu gemv_loop, weft_sm_attn) */
    int gemv_l2_rest, gemv_l2_sm, gemv_l2_first;
    /* option gemv_l2_delay: those L2 loads held back this many half microseconds after the
     * block starts (0-15) */
    int gemv_l2_delay;
    /* option gemv_l2_join: the same L2 loads (KiB a block) from the looped product launched
     * right after the fused add + RMSNorm join (the next layer's q|k|v projection) */
    int gemv_l2_join;
    /* options join_l2 (KiB a block, 0 = off) and join_l2_blocks: at one row the standalone
     * add + RMSNorm join runs join_l2_blocks more blocks that, once past their wait, load
     * join_l2 KiB of each block's rows of the looped product reading its output into L2, from
     * the block's second group on (core.cu weft_add_rmsnorm_bl, cuda_ops.c join_pull_plan) */
    int join_l2, join_l2_blocks;
    /* 1 after the fused attention's launch, 2 after the add + RMSNorm join's, cleared by every
     * other launch: the next looped product takes the gemv_l2_* bits */
    int l2_after;
    /* option attn_cp: what weft_rope_attention copies into shared memory by cp.async (1 the
     * RoPE stage's constants, before the wait; 2 the q|k|v rows, after it; core.cu
     * rope_attention_body) */
    int attn_cp;
    /* option attn_mc4_from: from a KV-length bucket of this many positions the fused
     * attention's _mc forms run as _mc4 (four blocks an SM); 0 = never */
    int attn_mc4_from;
    /* option attn_bucket_min: the fused attention's grid spans at least this many positions
     * (a function of the KV-length bucket, so a capture stays valid for its whole bucket) */
    int attn_bucket_min;
    /* option attn_dead_exit: the fused attention's splits with no position exit after their
     * wait instead of waiting at the cluster merge's barriers */
    int attn_dead_exit;
    /* option attn_push_merge: the fused attention's cluster merge by pushes into the merging
     * block's shared memory (core.cu, WEFT_PUSH_MERGE: a module of its own); 2: the pushing
     * splits leave right after their pushes */
    int attn_push_merge;
    /* option bf16_cvt: bf16 rounding by cvt.rn.bf16.f32 (core.cu, WEFT_BF16_CVT: a module of its
     * own) */
    int bf16_cvt;
    /* option attn_rope_sums: the fused attention's qk-norm sums taken by its RoPE threads
     * (core.cu, WEFT_ROPE_SUMS: a module of its own) */
    int attn_rope_sums;
    /* option gemv_nl_defer: fuse.norm_linear's one-row product, on an SM where a live block of
     * the fused attention runs, issues its first weights only after its wait */
    int gemv_nl_defer;
    /* option attn_hd: nodes whose heads are 64 or 128 dims, all rotated, take the fused
     * attention's cluster form compiled for that head size (core.cu, rope_attention_body's HD) */
    int attn_hd;
    /* option attn_qsplit: the fused attention splits each kv head's query heads over this
     * many blocks (1, 2, 4; a divisor of the model's G is taken) */
    int attn_qsplit;
    /* option attn_cluster_policy: the cluster scheduling policy of the clustered launches (the
     * fused attention's): 0 the driver's default, 1 spread (a cluster's blocks on distinct
     * SMs), 2 load balancing (CU_CLUSTER_SCHEDULING_POLICY_*) */
    int attn_cluster_policy;
    /* option attn_smem_min (KiB, 0 = off): the fused attention's dynamic shared memory at least
     * this much, so that at most (the SM's shared memory / it) of its blocks share an SM */
    int attn_smem_min;
    /* option gemv_nl_smem_min (KiB, 0 = off): fuse.norm_linear's one-row kernels' dynamic
     * shared memory at least this (placement only; their grid is sized for it) */
    int gemv_nl_smem_min;
    /* option gemv_o_smem_min (KiB, 0 = off): the unlooped _xs product launched right after the
     * fused attention asks for at least this much dynamic shared memory a block (placement only,
     * as gemv_nl_smem_min) */
    int gemv_o_smem_min;
    /* option norm_sum_all: core.cu block_sum's last step by every warp (WEFT_NORM_SUM_ALL) */
    int norm_sum_all;
    /* weft_copy_words of modules[0] (cb_copy's small copies from pinned memory), looked up at
     * the first such copy after a module is loaded; NULL before */
    CUfunction f_copy_words;
    /* option prefill_tc: prefill steps of f16/bf16 models attend on tensor cores (core.cu
     * weft_attention_tc, cuda_ops.c attention_kernels) instead of weft_attention */
    int prefill_tc;
    /* option kernel_ptx: a folder of nvcc-built PTX modules loaded instead of NVRTC's
     * (cuda_kernels.c load_ptx); empty: NVRTC only */
    char kernel_ptx[512];
    /* option ablate (profiling only): kernel classes compiled to do no work (core.cu
     * WEFT_ABLATE: 1 the fused attention, 2 the fused add + RMSNorm, 4 the GEMVs) */
    int ablate;
    /* option trace: modules compiled with WEFT_TRACE; the names of the kernels launched during
     * the latest stream capture, in order (cuda_trace.c) */
    int trace, trace_capturing;
    char (*trace_names)[48];
    size_t trace_n, trace_cap;
    /* user op ids of the fused ops this backend implements (0 = not registered) */
    uint32_t op_linear_swiglu, op_qkv_rope;
} cuda_backend;

/* option trace (cuda_trace.c): note a launch; print the last replay of the captured graph */
void cuda_trace_launch(cuda_backend *b, const char *name);
void cuda_trace_report(cuda_backend *b);

/* Error helper: fills err (may be NULL) and returns code. */
weft_status cuda_fail(weft_error *err, weft_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks a driver API result; on failure fills err naming the call and what it was doing. */
weft_status cuda_check(CUresult r, const char *call, const char *what, weft_error *err);

/* kernels (cuda_kernels.c) */
weft_status cuda_kernel_get(cuda_backend *b, uint32_t ta, uint32_t tw, const char *name,
                            CUfunction *out, weft_error *err);
/* cuda_launch_ex with the grid's z dimension cut into thread-block clusters of cz blocks
 * (compute capability 9.0+; cz <= 8), and programmatic dependent launch where the option is on */
weft_status cuda_launch_cluster(cuda_backend *b, CUfunction f, const char *name, unsigned gx,
                                unsigned gy, unsigned gz, unsigned block, unsigned smem,
                                unsigned cz, void **args, weft_error *err);
weft_status cuda_launch(cuda_backend *b, CUfunction f, const char *name, unsigned gx,
                        unsigned gy, unsigned block, void **args, weft_error *err);
/* The general launch: a (gx, gy, gz) grid, smem bytes of dynamic shared memory; with pdl (and
 * b->pdl) as a programmatic dependent launch, which only kernels of core.cu may be (each waits
 * for its predecessor with griddepcontrol.wait before touching its data). cuda_launch is this
 * with gz = 1, no dynamic shared memory and pdl = 1. */
weft_status cuda_launch_ex(cuda_backend *b, CUfunction f, const char *name, unsigned gx,
                           unsigned gy, unsigned gz, unsigned block, unsigned smem, int pdl,
                           void **args, weft_error *err);
void cuda_kernels_fini(cuda_backend *b);

/* memory (cuda_backend.c) */
weft_status cuda_arena_alloc(cuda_backend *b, uint64_t bytes, CUdeviceptr *out, weft_error *err);
void cuda_arena_free(cuda_backend *b, CUdeviceptr p);
/* Copies n bytes of host data into the staging ring and on to the device (async on the
 * stream); *dev receives the device address, valid for this step. */
weft_status cuda_stage(cuda_backend *b, const void *src, uint64_t n, CUdeviceptr *dev,
                       weft_error *err);

/* probe (cuda_probe.c) */
weft_status cuda_probe(void *st, weft_probe_result *out, weft_error *err);

/* ops (cuda_ops.c) */
void cuda_ops_fini(cuda_backend *b);
weft_status cuda_register_ops(void *st, const weft_ops_service *ops, weft_error *err);
weft_status cuda_gemm(cuda_backend *b, CUdeviceptr x, uint32_t tx, CUdeviceptr w, uint32_t tw,
                      CUdeviceptr bias, CUdeviceptr y, uint32_t ty, int T, int N, int K,
                      weft_error *err);

/* GEMV (cuda_ops.c): y (T,N) = x (T,K) w (N,K)^T [+ bias] for T <= 8 with the kernel of
 * core.cu; dt is the dtype of x, w and bias; y is f32 when out_f32, else dt. split = warps per
 * output row (1, 2, 4 or 8; 0 = cuda_gemv_split(b, K)). Returns WEFT_ERR_UNSUPPORTED when the
 * shapes or alignment do not suit the kernel (the caller then uses cuda_gemm). */
int cuda_gemv_split(const cuda_backend *b, int K); /* b may be NULL: the default rule */
int cuda_gemv_fits(uint32_t dt, CUdeviceptr x, CUdeviceptr w, int T, int K);
weft_status cuda_gemv(cuda_backend *b, CUdeviceptr x, CUdeviceptr w, CUdeviceptr bias,
                      CUdeviceptr y, int out_f32, uint32_t dt, int T, int N, int K, int split,
                      weft_error *err);
/* The linear product the ops use: GEMV when T <= gemv_max_tokens and it fits, else cuBLASLt. */
weft_status cuda_linear(cuda_backend *b, CUdeviceptr x, uint32_t tx, CUdeviceptr w, uint32_t tw,
                        CUdeviceptr bias, CUdeviceptr y, uint32_t ty, int T, int N, int K,
                        weft_error *err);

#endif
