/* Op implementations of the cuda backend: the builtin ops of weft/graph.h on f32, f16 and bf16
 * activations, plus the fused user ops the fuse.* techniques emit ("fuse.linear_swiglu",
 * "fuse.qkv_rope", "fuse.rope_attention", "fuse.linear_add_rmsnorm", "fuse.norm_linear").
 * Linear layers and the LM head take one of two paths: with few rows (decode) a
 * bandwidth-bound GEMV kernel of kernels/core.cu, with more rows cuBLASLt with the chosen
 * algorithm cached per shape; the crossover (option gemv_max_tokens) was set by measurement
 * (docs/perf/fuse.md). Everything else is a kernel of kernels/core.cu. Activations, weights
 * and the contiguous KV cache of a node share one 16-bit or 32-bit dtype per tensor role;
 * accepts() refuses other combinations at build time so an unsupported node is named before
 * any step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "weft/attention_tc.h"
#include "weft/sdk.h"

#define CK(call, what)                                                                           \
    do {                                                                                         \
        weft_status s_ = cuda_check((call), #call, what, err);                                   \
        if (s_) return s_;                                                                       \
    } while (0)
#define TRY(x)                                                                                   \
    do {                                                                                         \
        weft_status s_ = (x);                                                                    \
        if (s_) return s_;                                                                       \
    } while (0)

static const weft_tensor *tin(const weft_exec_ctx *c, const weft_node *n, uint32_t i) {
    return i < n->n_in && n->in[i] != WEFT_TENSOR_NONE ? &c->graph->tensors[n->in[i]] : NULL;
}
static CUdeviceptr din(const weft_exec_ctx *c, const weft_node *n, uint32_t i) {
    return i < n->n_in && n->in[i] != WEFT_TENSOR_NONE
               ? (CUdeviceptr)(uintptr_t)c->data[n->in[i]].ptr
               : 0;
}
static CUdeviceptr dout(const weft_exec_ctx *c, const weft_node *n, uint32_t i) {
    return (CUdeviceptr)(uintptr_t)c->data[n->out[i]].ptr;
}
static int is_float(uint32_t d) {
    return d == WEFT_DTYPE_F32 || d == WEFT_DTYPE_F16 || d == WEFT_DTYPE_BF16;
}
static int64_t cols_of(const weft_tensor *t) {
    int64_t c = 1;
    for (uint32_t i = 1; i < t->rank; i++) c *= t->shape[i];
    return t->rank >= 1 ? c : 0;
}
static int64_t numel(const weft_tensor *t) {
    int64_t n = 1;
    for (uint32_t i = 0; i < t->rank && i < WEFT_MAX_DIMS; i++) n *= t->shape[i];
    return t->rank ? n : 0;
}
static unsigned blocks_for(long n, unsigned block) { return (unsigned)((n + block - 1) / block); }

static weft_status kern(cuda_backend *b, uint32_t ta, uint32_t tw, const char *name,
                        CUfunction *f, weft_error *err) {
    CK(cuCtxSetCurrent(b->ctx), "making the context current");
    return cuda_kernel_get(b, ta, tw, name, f, err);
}

/* ---- cuBLASLt GEMM: row-major y (T,N) = x (T,K) w (N,K)^T [+ bias] ----------------------- */
typedef struct gemm_entry {
    int T, N, K;
    uint32_t tx, tw, ty;
    int bias;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, bl, c;
    cublasLtMatmulAlgo_t algo;
} gemm_entry;

/* Per-backend op state (cuda_backend.ops): the GEMM plan cache, rope tables, lm-head scratch. */
typedef struct rope_table {
    int64_t rot;
    float f[5];
    int64_t scaling;
    CUdeviceptr dev;
} rope_table;

typedef struct cuda_ops_state {
    gemm_entry *gemm;
    size_t gemm_n, gemm_cap;
    rope_table rope[32];
    size_t n_rope;
    CUdeviceptr head_scratch;
    uint64_t head_scratch_bytes;
    CUdeviceptr att_part; /* split-KV partials: (ATS_MAX_T, Hq, S, hd + 2) f32 */
    uint64_t att_part_bytes;
    CUdeviceptr atc_part; /* weft_attention_tc's partials (ATC_PART_MAX bytes), 0 until needed */
    CUdeviceptr ra_count; /* weft_rope_attention's arrival counter per KV head, 0 between steps */
    uint32_t ra_count_n;
    CUdeviceptr ln_count; /* weft_gemv_norm_*'s arrival counter, 0 between launches */
    CUdeviceptr mlp_bar;  /* weft_gemv_mlp_nlp_*'s grid barrier: a count (0 between launches)
                           * and a generation */
} cuda_ops_state;

/* Split-KV decode attention (kernels/core.cu weft_attention_split): used for steps of at most
 * ATS_MAX_T rows, head_dim a multiple of 32 up to 256 and at most 8 query heads per KV head;
 * larger steps (prefill) use the one-block-per-head kernel. ATS_THREADS per block: the body
 * spreads (head, position) scores and (head, 4 dims) sums over every thread, so more threads
 * shorten the block for any G (docs/perf/fuse-rope-attention.md). */
#define ATS_CHUNK 64
#define ATS_MAXG 8
#define ATS_CLUSTER 8 /* core.cu ATS_MAXS: the cluster merge's splits, the portable cluster size */
#define ATS_MAX_T 8
#define ATS_THREADS 256 /* core.cu's ATS_THREADS */

/* Dynamic shared memory of a split block in bytes (core.cu ATS_KST, ATS_KV_FLOATS and the
 * layouts there): K and V staged as stored (es: the activations' element size), then floats:
 * the unfused kernel's for ATS_MAXG heads; weft_rope_attention's for the layout's G heads
 * (core.cu, its layout comment), plus X and rs and, with option attn_cp, its cp.async areas. */
static unsigned ats_smem(int hd, int es, int fused, int cp, int G) {
    int floats = G * hd + G * ATS_CHUNK;
    if (fused) floats += (G + 1) * hd + 12;
    if (fused && cp) floats += 3 * hd + (G + 2) * hd;
    return (unsigned)(ATS_CHUNK * (2 * hd + 4) * es) + (unsigned)floats * (unsigned)sizeof(float);
}

static cuda_ops_state *ops_of(cuda_backend *b) {
    if (!b->ops) b->ops = calloc(1, sizeof(cuda_ops_state));
    return b->ops;
}

void cuda_ops_fini(cuda_backend *b) {
    cuda_ops_state *o = b->ops;
    if (!o) return;
    for (size_t i = 0; i < o->gemm_n; i++) {
        cublasLtMatmulDescDestroy(o->gemm[i].op);
        cublasLtMatrixLayoutDestroy(o->gemm[i].a);
        cublasLtMatrixLayoutDestroy(o->gemm[i].bl);
        cublasLtMatrixLayoutDestroy(o->gemm[i].c);
    }
    free(o->gemm);
    free(o);
    b->ops = NULL;
}

static cudaDataType_t cuda_type(uint32_t d) {
    return d == WEFT_DTYPE_F32 ? CUDA_R_32F : d == WEFT_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

weft_status cuda_gemm(cuda_backend *b, CUdeviceptr x, uint32_t tx, CUdeviceptr w, uint32_t tw,
                      CUdeviceptr bias, CUdeviceptr y, uint32_t ty, int T, int N, int K,
                      weft_error *err) {
    if (T == 0) return WEFT_OK;
    if (tx != tw)
        return cuda_fail(err, WEFT_ERR_UNSUPPORTED, "linear: activation dtype %u differs from "
                         "weight dtype %u (the cuda backend computes in the weights' dtype)", tx,
                         tw);
    int has_bias = bias != 0;
    cuda_ops_state *o = ops_of(b);
    if (!o) return cuda_fail(err, WEFT_ERR_NOMEM, "op state");
    gemm_entry *e = NULL;
    for (size_t i = 0; i < o->gemm_n; i++) {
        gemm_entry *g = &o->gemm[i];
        if (g->T == T && g->N == N && g->K == K && g->tx == tx && g->tw == tw && g->ty == ty &&
            g->bias == has_bias) {
            e = g;
            break;
        }
    }
    if (!e) {
        if (o->gemm_n == o->gemm_cap) {
            size_t cap = o->gemm_cap ? o->gemm_cap * 2 : 64;
            gemm_entry *ng = realloc(o->gemm, cap * sizeof(*ng));
            if (!ng) return cuda_fail(err, WEFT_ERR_NOMEM, "gemm cache");
            o->gemm = ng;
            o->gemm_cap = cap;
        }
        gemm_entry ne = {.T = T, .N = N, .K = K, .tx = tx, .tw = tw, .ty = ty, .bias = has_bias};
        cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
        cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
        /* every set-up call is checked; the first failure names itself */
        cublasStatus_t st = cublasLtMatmulDescCreate(&ne.op, ct, CUDA_R_32F);
        const char *call = "cublasLtMatmulDescCreate";
#define LT_STEP(x)                                                                                 \
    do {                                                                                           \
        if (st == CUBLAS_STATUS_SUCCESS) {                                                         \
            st = (x);                                                                              \
            call = #x;                                                                             \
        }                                                                                          \
    } while (0)
        LT_STEP(
            cublasLtMatmulDescSetAttribute(ne.op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
        LT_STEP(
            cublasLtMatmulDescSetAttribute(ne.op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
        if (has_bias) {
            cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
            cudaDataType_t bt = cuda_type(tw);
            LT_STEP(cublasLtMatmulDescSetAttribute(ne.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                                   sizeof(ep)));
            LT_STEP(cublasLtMatmulDescSetAttribute(ne.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                   sizeof(bt)));
        }
        /* column-major view: W (row-major N x K) is a K x N matrix with ld K, used transposed */
        LT_STEP(cublasLtMatrixLayoutCreate(&ne.a, cuda_type(tw), K, N, K));
        LT_STEP(cublasLtMatrixLayoutCreate(&ne.bl, cuda_type(tx), K, T, K));
        LT_STEP(cublasLtMatrixLayoutCreate(&ne.c, cuda_type(ty), N, T, N));
        cublasLtMatmulPreference_t pref = NULL;
        uint64_t ws = b->lt_ws_bytes;
        LT_STEP(cublasLtMatmulPreferenceCreate(&pref));
        LT_STEP(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ws, sizeof(ws)));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        LT_STEP(cublasLtMatmulAlgoGetHeuristic(b->lt, ne.op, ne.a, ne.bl, ne.c, ne.c, pref, 1, &res,
                                               &found));
#undef LT_STEP
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            if (ne.op) cublasLtMatmulDescDestroy(ne.op);
            if (ne.a) cublasLtMatrixLayoutDestroy(ne.a);
            if (ne.bl) cublasLtMatrixLayoutDestroy(ne.bl);
            if (ne.c) cublasLtMatrixLayoutDestroy(ne.c);
            if (st != CUBLAS_STATUS_SUCCESS)
                return cuda_fail(err, WEFT_ERR_DEVICE,
                                 "cuBLASLt set-up for linear T=%d N=%d K=%d failed in %.60s: "
                                 "status %d",
                                 T, N, K, call, (int)st);
            return cuda_fail(err, WEFT_ERR_UNSUPPORTED,
                             "cuBLASLt has no algorithm for linear "
                             "T=%d N=%d K=%d (dtypes %u,%u -> %u, bias %d)",
                             T, N, K, tx, tw, ty, has_bias);
        }
        ne.algo = res.algo;
        o->gemm[o->gemm_n++] = ne;
        e = &o->gemm[o->gemm_n - 1];
    }
    if (has_bias && cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                   sizeof(bias)) != CUBLAS_STATUS_SUCCESS)
        return cuda_fail(err, WEFT_ERR_DEVICE,
                         "cuBLASLt: setting the bias pointer of linear "
                         "T=%d N=%d K=%d failed",
                         T, N, K);
    float alpha = 1.f, beta = 0.f;
    cublasStatus_t st = cublasLtMatmul(b->lt, e->op, &alpha, (const void *)(uintptr_t)w, e->a,
                                       (const void *)(uintptr_t)x, e->bl, &beta,
                                       (void *)(uintptr_t)y, e->c, (void *)(uintptr_t)y, e->c,
                                       &e->algo, (void *)(uintptr_t)b->lt_ws, b->lt_ws_bytes,
                                       b->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return cuda_fail(err, WEFT_ERR_DEVICE, "cublasLtMatmul failed (status %d) for linear "
                         "T=%d N=%d K=%d", (int)st, T, N, K);
    return WEFT_OK;
}

/* ---- GEMV for small T ------------------------------------------------------------------ */
/* Warps per output row, by K alone, so merged and separate matrices reduce every row in the
 * same order (see core.cu). Measured on the H200 at T = 1 as kernel nodes of a replayed graph,
 * the way a decode step runs them (cuda_gemv_bench's graph rows, docs/perf/l2-prefetch.md): one
 * warp per row up to K = 1024, two up to 2048, four up to 4096, eight beyond (Llama-3.2-1B's
 * down projection, K = 8192: 10.07 us at eight against 11.79 at four; host-launched it had
 * measured fastest at four, docs/perf/fuse.md, a figure bound by the host's launch rate). */
int cuda_gemv_split(const cuda_backend *b, int K) {
    /* options gemv_split_1024 and gemv_split_2048: the rule's first two steps (measurements) */
    if (K <= 1024) return b && b->gemv_split_1024 ? b->gemv_split_1024 : 1;
    if (K <= 2048) return b && b->gemv_split_2048 ? b->gemv_split_2048 : 2;
    return K <= 4096 ? 4 : 8;
}

/* Whether the GEMV kernel is the faster product for T rows of an (N, K) weight, from the
 * cuBLASLt-vs-GEMV table of docs/perf/fuse.md: always at T = 1 (faster on every decode shape,
 * a tie on the LM heads), at T = 2 for matrices up to 8M elements, at T = 3..4 up to 4M
 * elements (q/k/v/o of small models); cuBLASLt otherwise. */
static int gemv_wins(int T, int N, int K) {
    int64_t elems = (int64_t)N * K;
    return T == 1 || (T == 2 && elems <= (8ll << 20)) || (T <= 4 && elems <= (4ll << 20));
}

static int elem_size(uint32_t dt) { return dt == WEFT_DTYPE_F32 ? 4 : 2; }

int cuda_gemv_fits(uint32_t dt, CUdeviceptr x, CUdeviceptr w, int T, int K) {
    int vec = 16 / elem_size(dt);
    return is_float(dt) && T >= 1 && T <= 8 && K > 0 && K % vec == 0 && x % 16 == 0 &&
           w % 16 == 0;
}

static const char *gemv_name(int T, int swiglu, int xs) {
    static const char *const plain[2][4] = {
        {"weft_gemv_1", "weft_gemv_2", "weft_gemv_4", "weft_gemv_8"},
        {"weft_gemv_xs_1", "weft_gemv_xs_2", "weft_gemv_xs_4", "weft_gemv_xs_8"}};
    static const char *const sw[2][4] = {
        {"weft_gemv_swiglu_1", "weft_gemv_swiglu_2", "weft_gemv_swiglu_4", "weft_gemv_swiglu_8"},
        {"weft_gemv_swiglu_xs_1", "weft_gemv_swiglu_xs_2", "weft_gemv_swiglu_xs_4",
         "weft_gemv_swiglu_xs_8"}};
    int i = T <= 1 ? 0 : T <= 2 ? 1 : T <= 4 ? 2 : 3;
    return swiglu ? sw[xs != 0][i] : plain[xs != 0][i];
}

/* option gemv_xsmem (a mask: 1 the plain GEMVs and the LM head, 2 the gate|up + SwiGLU one):
 * the kernels' _xs form, which copies x (T x K) into dynamic shared memory first (core.cu
 * gemv_row): its bytes, or 0 for the plain form (not selected, or x would take more than
 * 96 KiB); gemv_launch raises the kernel's limit past 48 KiB */
static unsigned gemv_xs_bytes(const cuda_backend *b, int swiglu, int T, int K, uint32_t dt) {
    long bytes = (long)T * K * elem_size(dt);
    int on = b->gemv_xsmem & (swiglu ? 2 : 1);
    return on && bytes <= (96l << 10) ? (unsigned)bytes : 0u;
}
/* blocks of nt threads (256 but for the wide looped kernels) */
/* a GEMV kernel's dynamic shared memory limit raised to smem past 32 KiB, so dynamic plus the
 * kernel's static shared memory may pass 48 KiB (capture time only) */
static weft_status gemv_allow_smem(CUfunction f, unsigned smem, weft_error *err) {
    if (smem > (32u << 10))
        CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem),
           "raising the GEMV's shared memory limit");
    return WEFT_OK;
}
/* a placement floor (the options *_smem_min, in KiB): a kernel's shared-memory request raised to
 * at least kib KiB, so that fewer of its blocks fit an SM; the kernel still uses its own share */
static unsigned smem_floor(unsigned bytes, int kib) {
    const unsigned f = (unsigned)kib << 10;
    return bytes < f ? f : bytes;
}

static weft_status gemv_launch_nt(cuda_backend *b, CUfunction f, const char *name, unsigned blocks,
                                  unsigned nt, unsigned smem, void **args, weft_error *err) {
    TRY(gemv_allow_smem(f, smem, err));
    return cuda_launch_ex(b, f, name, blocks, 1, 1, nt, smem, 1, args, err);
}
static weft_status gemv_launch(cuda_backend *b, CUfunction f, const char *name, unsigned blocks,
                               unsigned smem, void **args, weft_error *err) {
    return gemv_launch_nt(b, f, name, blocks, 256, smem, args, err);
}

/* option gemv_stage (KiB of shared memory a block of the staged GEMV may fill, 0 = off): the
 * T = 1 GEMVs as weft_gemv_st_1 / weft_gemv_swiglu_st_1 (core.cu), whose blocks copy their whole
 * weight tile into shared memory before the wait for the previous kernel. Sets *rg (row groups
 * of 8/S rows a block owns, at least 1) and *maxv (16-byte vectors a lane owns in a row) and
 * returns the tile's bytes, or 0 for the register form (option off, T > 1, rows too long). The
 * row groups shrink while the grid would hold fewer than two blocks an SM, so short products
 * still spread over every SM. */
static unsigned gemv_st_bytes(const cuda_backend *b, int nw, int T, int N, int K, int S,
                              uint32_t dt, int *rg, int *maxv) {
    if (b->gemv_stage <= 0 || T != 1) return 0;
    int nv = K / (16 / elem_size(dt)), stride = S * 32;
    int mv = (nv + stride - 1) / stride;
    if (mv > 8) return 0; /* core.cu GEMV_ST_MAXV */
    long group = (long)nw * mv * 256 * 16;
    long g = ((long)b->gemv_stage << 10) / group;
    if (g < 1) return 0;
    if (g > 8) g = 8; /* core.cu GEMV_ST_MAXG */
    long groups = (N + 8 / S - 1) / (8 / S);
    long floor_blocks = 2l * (b->sm_count > 0 ? b->sm_count : 1);
    while (g > 1 && (groups + g - 1) / g < floor_blocks) g--;
    *rg = (int)g;
    *maxv = mv;
    return (unsigned)(g * group);
}

/* the looped kernel's name (stem "weft_gemv_lp" or "weft_gemv_swiglu_lp"; x in shared memory
 * when xs, copied there by cp.async with option gemv_x_async at 8 warps) into name; returns its
 * threads a block: 256, or option gemv_loop_warps' warps for the x-in-shared-memory forms
 * (core.cu WEFT_GEMV_LPW) */
static unsigned lp_name(const cuda_backend *b, char *name, size_t cap, const char *stem,
                        unsigned xs) {
    int w = xs && b->gemv_loop_warps > 8 ? b->gemv_loop_warps : 8;
    if (w == 8) snprintf(name, cap, "%s%s_1", stem, !xs ? "" : b->gemv_x_async ? "_xa" : "_xs");
    else snprintf(name, cap, "%s_xs_w%d_1", stem, w);
    return (unsigned)w * 32;
}

/* option gemv_loop (blocks an SM, 0 = off): the T = 1 GEMVs as weft_gemv_lp_1 /
 * weft_gemv_swiglu_lp_1 (core.cu gemv_loop, kernel f of nt threads with smem bytes of dynamic
 * shared memory), whose blocks each run *per consecutive groups of nt/32/S rows (nt: 256, or
 * option gemv_loop_warps for the x-in-shared-memory forms). Returns the grid: per is the fewest
 * groups a block that keep the grid resident at once (at most gemv_loop blocks an SM, and no
 * more than fit), and the grid the fewest blocks of per groups, so every block but the last
 * runs the same number of rows. The callers loop only when per > 1: a product whose blocks all
 * fit at once keeps one group a block, whose early exits let the next kernel's blocks become
 * resident and preload under PDL (looping those too measured -7.5% on Qwen3-0.6B,
 * docs/perf/batch1.md, session of 2026-12-01 20:23 UTC). */
static weft_status gemv_lp_grid(const cuda_backend *b, CUfunction f, unsigned nt, unsigned smem,
                                int N, int S, unsigned *grid, int *per, weft_error *err) {
    int fit = 0;
    /* the occupancy counts blocks of smem only once the kernel may ask for that much */
    TRY(gemv_allow_smem(f, smem, err));
    CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&fit, f, (int)nt, smem),
       "sizing the looped GEMV's grid");
    long per_sm = fit > 0 && fit < b->gemv_loop ? fit : b->gemv_loop;
    const int rb = (int)nt / 32 / S;
    long groups = (N + rb - 1) / rb;
    long slots = per_sm * (b->sm_count > 0 ? b->sm_count : 1);
    long p = (groups + slots - 1) / slots;
    *per = (int)p;
    *grid = (unsigned)((groups + p - 1) / p);
    return WEFT_OK;
}

/* the looped plain GEMV of N x K at T = 1 with split S and xs bytes of x in shared memory:
 * its kernel (name into lname, f, nt threads a block) and gemv_lp_grid's grid and groups a block */
static weft_status lp_plan(cuda_backend *b, uint32_t dt, int N, int K, int S, unsigned xs,
                           char *lname, size_t cap, CUfunction *f, unsigned *nt, unsigned *grid,
                           int *per, weft_error *err) {
    *nt = lp_name(b, lname, cap, "weft_gemv_lp", xs);
    TRY(kern(b, dt, dt, lname, f, err));
    return gemv_lp_grid(b, *f, *nt, xs, N, S, grid, per, err);
}

/* option gemv_head_rows: a T = 1 product of more rows (an LM head) runs as one plain block a row
 * group, neither looped nor with x in shared memory */
static int gemv_head(const cuda_backend *b, int T, int N) {
    return T == 1 && b->gemv_head_rows > 0 && N > b->gemv_head_rows;
}

weft_status cuda_gemv(cuda_backend *b, CUdeviceptr x, CUdeviceptr w, CUdeviceptr bias,
                      CUdeviceptr y, int out_f32, uint32_t dt, int T, int N, int K, int split,
                      weft_error *err) {
    if (T == 0 || N == 0) return WEFT_OK;
    if (!cuda_gemv_fits(dt, x, w, T, K))
        return cuda_fail(err, WEFT_ERR_UNSUPPORTED, "gemv: T=%d K=%d dtype %u does not fit the "
                         "kernel (T <= 8, K a multiple of 16 bytes, 16-byte aligned operands)",
                         T, K, dt);
    int S = split ? split : cuda_gemv_split(b, K);
    if (S != 1 && S != 2 && S != 4 && S != 8)
        return cuda_fail(err, WEFT_ERR_INVALID, "gemv: split %d is not 1, 2, 4 or 8", S);
    int rows = 8 / S, rg = 0, maxv = 0;
    CUfunction f;
    unsigned stb = gemv_st_bytes(b, 1, T, N, K, S, dt, &rg, &maxv);
    if (stb) {
        TRY(kern(b, dt, dt, "weft_gemv_st_1", &f, err));
        void *sargs[] = {&x, &w, &bias, &y, &out_f32, &N, &K, &S, &rg, &maxv};
        return gemv_launch(b, f, "weft_gemv_st_1", (unsigned)((N + rows * rg - 1) / (rows * rg)),
                           stb, sargs, err);
    }
    const int head = gemv_head(b, T, N);
    unsigned xs = head ? 0 : gemv_xs_bytes(b, 0, T, K, dt);
    if (b->gemv_loop > 0 && T == 1 && !head) {
        char lname[40];
        unsigned lp, nt;
        int per;
        TRY(lp_plan(b, dt, N, K, S, xs, lname, sizeof(lname), &f, &nt, &lp, &per, err));
        /* options gemv_l2_*: the product right after the fused attention (core.cu gemv_loop
         * reads them from S's bits 8-15, 16-19, 24 and 28) */
        int Sl = S;
        if (b->l2_after == 1)
            Sl |= (b->gemv_l2_rest << 8) | (b->gemv_l2_delay << 16) | (b->gemv_l2_sm << 24) |
                  (b->gemv_l2_first << 28);
        else if (b->l2_after == 2) /* after the residual join: option gemv_l2_join */
            Sl |= b->gemv_l2_join << 8;
        void *largs[] = {&x, &w, &bias, &y, &out_f32, &N, &K, &Sl, &per};
        if (per > 1) return gemv_launch_nt(b, f, lname, lp, nt, xs, largs, err);
    }
    const char *name = gemv_name(T, 0, xs != 0);
    TRY(kern(b, dt, dt, name, &f, err));
    /* the _xs kernels take bit 30 of S as the product right after the fused attention and bit
     * 28 as the one right after the residual join, whose blocks a trace build stamps (core.cu
     * gemv_plain's sites 0 and 1; cuda_trace.c report_gemv) */
    if (xs && b->l2_after == 1) S |= 1 << 30;
    if (xs && b->l2_after == 2) S |= 1 << 28;
    /* option gemv_o_smem_min: a floor on that product's request (placement only) */
    const unsigned req = xs && b->l2_after == 1 ? smem_floor(xs, b->gemv_o_smem_min) : xs;
    void *args[] = {&x, &w, &bias, &y, &out_f32, &T, &N, &K, &S};
    return gemv_launch(b, f, name, (unsigned)((N + rows - 1) / rows), req, args, err);
}

/* cuda_linear's choice: whether T rows of x (tx) times the (N, K) weight w (tw) into ty run as
 * cuda_gemv rather than cuBLASLt */
static int linear_gemv(const cuda_backend *b, CUdeviceptr x, uint32_t tx, CUdeviceptr w,
                       uint32_t tw, uint32_t ty, int T, int N, int K) {
    return T >= 1 && T <= b->gemv_max_tokens && (b->gemv_force || gemv_wins(T, N, K)) && tx == tw &&
           (ty == tx || ty == WEFT_DTYPE_F32) && cuda_gemv_fits(tx, x, w, T, K);
}

weft_status cuda_linear(cuda_backend *b, CUdeviceptr x, uint32_t tx, CUdeviceptr w, uint32_t tw,
                        CUdeviceptr bias, CUdeviceptr y, uint32_t ty, int T, int N, int K,
                        weft_error *err) {
    if (linear_gemv(b, x, tx, w, tw, ty, T, N, K))
        return cuda_gemv(b, x, w, bias, y, ty != tx, tx, T, N, K, 0, err);
    return cuda_gemm(b, x, tx, w, tw, bias, y, ty, T, N, K, err);
}

/* ---- per-row metadata: kv slots and logit rows ---------------------------------------- */
static weft_status row_slots(cuda_backend *b, const weft_exec_ctx *c, const weft_node *n,
                             uint32_t idx, CUdeviceptr *out, weft_error *err) {
    CUdeviceptr d = din(c, n, idx);
    if (d) {
        *out = d;
        return WEFT_OK;
    }
    const weft_batch *bt = c->batch;
    int32_t tmp[1024];
    if (!bt || c->n_tokens > 1024 || !bt->seq_of_row || !bt->seqs)
        return cuda_fail(err, WEFT_ERR_INVALID, "attention %s: no in.kv_slots input and no host "
                         "batch to derive it from (or more than 1024 rows)", n->name);
    for (uint32_t t = 0; t < c->n_tokens; t++) {
        int32_t si = bt->seq_of_row[t];
        if (si < 0 || (uint32_t)si >= bt->n_seqs)
            return cuda_fail(err, WEFT_ERR_INVALID, "row %u belongs to sequence %d of %u", t, si,
                             bt->n_seqs);
        tmp[t] = bt->seqs[si].kv_slot;
    }
    return cuda_stage(b, tmp, c->n_tokens * sizeof(int32_t), out, err);
}

/* ---- ops ------------------------------------------------------------------------------ */
static weft_status op_embed(void *st, const weft_exec_ctx *c, const weft_node *n,
                            weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *tab = tin(c, n, 1), *x = &c->graph->tensors[n->out[0]];
    CUfunction f;
    TRY(kern(b, x->dtype, tab->dtype, "weft_embed", &f, err));
    CUdeviceptr tok = din(c, n, 0), tp = din(c, n, 1), xp = dout(c, n, 0);
    int T = (int)c->n_tokens, D = (int)tab->shape[1], V = (int)tab->shape[0];
    void *args[] = {&tok, &tp, &xp, &T, &D, &V};
    return cuda_launch(b, f, "weft_embed", (unsigned)T, 1, 256, args, err);
}

static weft_status op_linear(void *st, const weft_exec_ctx *c, const weft_node *n,
                             weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *x = tin(c, n, 0), *w = tin(c, n, 1), *y = &c->graph->tensors[n->out[0]];
    CK(cuCtxSetCurrent(b->ctx), "making the context current");
    weft_status s = cuda_linear(b, din(c, n, 0), x->dtype, din(c, n, 1), w->dtype, din(c, n, 2),
                                dout(c, n, 0), y->dtype, (int)c->n_tokens, (int)w->shape[0],
                                (int)w->shape[1], err);
    if (s && err) {
        char m[sizeof(err->message)];
        memcpy(m, err->message, sizeof(m));
        snprintf(err->message, sizeof(err->message), "node %s: %s", n->name, m);
    }
    return s;
}

/* Threads per block of a norm over `group` elements. weft_add_rmsnorm and weft_qkv_rope use
 * the same rule, so their sums of squares add the same terms in the same order. */
static unsigned norm_block(int group) {
    return group >= 1024 ? 1024 : group >= 256 ? 256 : group >= 64 ? 64 : 32;
}

static weft_status op_rmsnorm(void *st, const weft_exec_ctx *c, const weft_node *n,
                              weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *x = tin(c, n, 0), *w = tin(c, n, 1);
    CUfunction f;
    TRY(kern(b, x->dtype, w->dtype, "weft_rmsnorm", &f, err));
    int T = (int)c->n_tokens, cols = (int)cols_of(x), group = n->p.i[0] > 0 ? (int)n->p.i[0] : cols;
    float eps = n->p.f[0];
    CUdeviceptr xp = din(c, n, 0), wp = din(c, n, 1), yp = dout(c, n, 0);
    void *args[] = {&xp, &wp, &yp, &T, &cols, &group, &eps};
    return cuda_launch(b, f, "weft_rmsnorm", (unsigned)(T * (cols / group)), 1, norm_block(group),
                       args, err);
}

/* option join_l2: what the join's extra blocks pull into L2 (core.cu weft_add_rmsnorm_bl): len
 * bytes from pw + i * stride for each i < nb, none at or past pw + total */
typedef struct {
    CUdeviceptr pw;
    long stride, len, total;
    int nb;
} l2_pull;

/* weft_add_rmsnorm at rows of more than one element a thread takes its _b form, which loads a
 * thread's elements before it stores any (core.cu add_rmsnorm_body BATCH): same bits, measured
 * faster there and slower at one element a thread (docs/perf/batch1.md, 22:52 UTC session) */
static weft_status add_rmsnorm_launch(cuda_backend *b, uint32_t ta, uint32_t tw, CUdeviceptr xp,
                                      CUdeviceptr rp, CUdeviceptr wp, CUdeviceptr yp,
                                      CUdeviceptr ro, int T, int D, float eps, const l2_pull *pl,
                                      weft_error *err) {
    const int batch = D > (int)norm_block(D);
    const char *name = !batch ? "weft_add_rmsnorm"
                       : pl   ? "weft_add_rmsnorm_bl"
                              : "weft_add_rmsnorm_b";
    CUfunction f;
    TRY(kern(b, ta, tw, name, &f, err));
    if (batch && pl) {
        l2_pull p = *pl;
        void *args[] = {&xp,  &rp,   &wp,       &yp,    &ro,      &T,   &D,
                        &eps, &p.pw, &p.stride, &p.len, &p.total, &p.nb};
        return cuda_launch(b, f, name, (unsigned)(T + b->join_l2_blocks), 1, norm_block(D), args,
                           err);
    }
    void *args[] = {&xp, &rp, &wp, &yp, &ro, &T, &D, &eps};
    return cuda_launch(b, f, name, (unsigned)T, 1, norm_block(D), args, err);
}

/* option join_l2 at one row: the product reading the join's output within the next four nodes,
 * when cuda_linear will run it as the looped GEMV (cuda_gemv's own choices, through lp_plan),
 * sets *pl to join_l2 KiB of each of its blocks' rows from the block's second group on; returns
 * 0 (and leaves *pl) when there is none */
static int join_pull_plan(cuda_backend *b, const weft_exec_ctx *c, const weft_node *n,
                          l2_pull *pl) {
    const weft_graph *g = c->graph;
    if (b->join_l2 <= 0 || b->gemv_loop <= 0 || c->n_tokens != 1 || !g || !g->nodes ||
        n < g->nodes || n >= g->nodes + g->n_nodes)
        return 0;
    const weft_node *m = NULL;
    for (const weft_node *q = n + 1; q < g->nodes + g->n_nodes && q <= n + 4 && !m; q++)
        if (q->op == WEFT_OP_LINEAR && q->n_in >= 2 && q->in[0] == n->out[0]) m = q;
    if (!m) return 0;
    const weft_tensor *x = tin(c, m, 0), *w = tin(c, m, 1), *y = &g->tensors[m->out[0]];
    const int N = (int)w->shape[0], K = (int)w->shape[1];
    const CUdeviceptr pw = din(c, m, 1);
    int S = cuda_gemv_split(b, K), rg = 0, maxv = 0;
    if (!linear_gemv(b, din(c, m, 0), x->dtype, pw, w->dtype, y->dtype, 1, N, K) ||
        gemv_st_bytes(b, 1, 1, N, K, S, w->dtype, &rg, &maxv) || gemv_head(b, 1, N))
        return 0;
    char lname[40];
    CUfunction f;
    unsigned nt, grid;
    int per;
    weft_error e = {.size = sizeof(e)}; /* a kernel that fails to load fails the product's launch */
    if (lp_plan(b, w->dtype, N, K, S, gemv_xs_bytes(b, 0, 1, K, w->dtype), lname, sizeof(lname), &f,
                &nt, &grid, &per, &e) != WEFT_OK ||
        per <= 1)
        return 0;
    /* from each block's second group on: its first group's rows go out first after its wait,
     * beside its first batch of weights issued before it (a first try from each block's first
     * row, the bytes that batch already holds, gained nothing at 16 KiB a block) */
    const long row = (long)K * elem_size(w->dtype), g1 = (long)((int)nt / 32 / S) * row;
    *pl = (l2_pull){pw + (CUdeviceptr)g1, per * g1, (long)b->join_l2 << 10, (long)N * row - g1,
                    (int)grid};
    return 1;
}

static weft_status op_add_rmsnorm(void *st, const weft_exec_ctx *c, const weft_node *n,
                                  weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *x = tin(c, n, 0), *w = tin(c, n, 2);
    l2_pull pl;
    const int pull = join_pull_plan(b, c, n, &pl);
    TRY(add_rmsnorm_launch(b, x->dtype, w->dtype, din(c, n, 0), din(c, n, 1), din(c, n, 2),
                           dout(c, n, 0), dout(c, n, 1), (int)c->n_tokens, (int)cols_of(x),
                           n->p.f[0], pull ? &pl : NULL, err));
    b->l2_after = 2; /* option gemv_l2_join: the next looped product's L2 loads */
    return WEFT_OK;
}

/* inverse frequencies per distinct rope configuration, computed on the host as transformers
 * does (f32), uploaded once (at the first step of a graph) */
static weft_status rope_freqs(cuda_backend *b, const weft_node *n, int rot, CUdeviceptr *out,
                              weft_error *err) {
    cuda_ops_state *o = ops_of(b);
    if (!o) return cuda_fail(err, WEFT_ERR_NOMEM, "op state");
    rope_table *rope_tables = o->rope;
    for (size_t i = 0; i < o->n_rope; i++) {
        rope_table *r = &rope_tables[i];
        if (r->rot == rot && r->scaling == n->p.i[4] && !memcmp(r->f, n->p.f, sizeof(r->f))) {
            *out = r->dev;
            return WEFT_OK;
        }
    }
    if (o->n_rope == 32) return cuda_fail(err, WEFT_ERR_INTERNAL, "too many rope tables");
    int half = rot / 2;
    float inv[512];
    if (half > 512) return cuda_fail(err, WEFT_ERR_INVALID, "rope: rotary dims %d > 1024", rot);
    float theta = n->p.f[0];
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)rot;
        inv[i] = 1.0f / powf(theta, e);
        if (n->p.i[4] == 1) { /* llama3 */
            float factor = n->p.f[1], lo = n->p.f[2], hi = n->p.f[3], orig = n->p.f[4];
            float lo_wl = orig / lo, hi_wl = orig / hi;
            float wl = 2.0f * (float)M_PI / inv[i];
            if (wl > lo_wl) {
                inv[i] = inv[i] / factor;
            } else if (wl >= hi_wl) {
                float smooth = (orig / wl - lo) / (hi - lo);
                inv[i] = (1.0f - smooth) * inv[i] / factor + smooth * inv[i];
            }
        } else if (n->p.i[4] == 2) {
            inv[i] = inv[i] / n->p.f[1];
        }
    }
    rope_table *r = &rope_tables[o->n_rope];
    TRY(cuda_arena_alloc(b, (uint64_t)half * sizeof(float), &r->dev, err));
    /* landed before any kernel of the compute stream reads it (cb_upload says why) */
    CK(cuMemcpyHtoD(r->dev, inv, (size_t)half * sizeof(float)), "uploading rope frequencies");
    CK(cuStreamSynchronize(CU_STREAM_LEGACY), "waiting for the rope frequencies to land");
    r->rot = rot;
    r->scaling = n->p.i[4];
    memcpy(r->f, n->p.f, sizeof(r->f));
    o->n_rope++;
    *out = r->dev;
    return WEFT_OK;
}

static weft_status op_rope(void *st, const weft_exec_ctx *c, const weft_node *n,
                           weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *x = tin(c, n, 0);
    CUfunction f;
    TRY(kern(b, x->dtype, x->dtype, "weft_rope", &f, err));
    int T = (int)c->n_tokens, H = (int)n->p.i[0], hd = (int)n->p.i[1];
    int rot = n->p.i[2] > 0 ? (int)n->p.i[2] : hd, layout = (int)n->p.i[3];
    CUdeviceptr freqs;
    TRY(rope_freqs(b, n, rot, &freqs, err));
    CUdeviceptr xp = din(c, n, 0), pp = din(c, n, 1), yp = dout(c, n, 0);
    void *args[] = {&xp, &yp, &pp, &freqs, &T, &H, &hd, &rot, &layout};
    long total = (long)T * H * (rot / 2);
    return cuda_launch(b, f, "weft_rope", blocks_for(total, 256), 1, 256, args, err);
}

/* The contiguous kv cache of a layer, checked against the op's dtype. */
static weft_status kv_contiguous(const weft_exec_ctx *c, const char *node, int layer, uint32_t dt,
                                 CUdeviceptr *kc, CUdeviceptr *vc, int *max_seq,
                                 weft_error *err) {
    if (!c->kv || strcmp(c->kv->layout, "contiguous") || !c->kv->desc)
        return cuda_fail(err, WEFT_ERR_UNSUPPORTED, "attention %s: the cuda backend's kernel "
                         "reads the contiguous kv layout, the kv slot provides '%s'", node,
                         c->kv ? c->kv->layout : "(none)");
    const weft_kv_contiguous *kv = c->kv->desc;
    if (layer < 0 || (uint32_t)layer >= kv->n_layers)
        return cuda_fail(err, WEFT_ERR_INVALID, "attention %s: layer %d outside the cache's %u",
                         node, layer, kv->n_layers);
    if (kv->dtype != dt)
        return cuda_fail(err, WEFT_ERR_UNSUPPORTED, "attention %s: kv cache dtype %u differs "
                         "from the activation dtype %u", node, kv->dtype, dt);
    *kc = (CUdeviceptr)(uintptr_t)kv->k[layer].ptr;
    *vc = (CUdeviceptr)(uintptr_t)kv->v[layer].ptr;
    *max_seq = (int)kv->max_seq;
    return WEFT_OK;
}

/* The split-KV partials workspace for Hq heads of S splits (reused by every layer: the kernels
 * of one stream never overlap in its use). First step of a larger cache: setup, not per step. */
static weft_status ats_workspace(cuda_backend *b, int Hq, int hd, int S, CUdeviceptr *out,
                                 weft_error *err) {
    cuda_ops_state *o = ops_of(b);
    if (!o) return cuda_fail(err, WEFT_ERR_NOMEM, "op state");
    uint64_t need = (uint64_t)ATS_MAX_T * Hq * S * (hd + 2) * sizeof(float);
    if (need > o->att_part_bytes) {
        if (o->att_part) cuda_arena_free(b, o->att_part);
        o->att_part = 0;
        o->att_part_bytes = 0;
        TRY(cuda_arena_alloc(b, need, &o->att_part, err));
        o->att_part_bytes = need;
    }
    *out = o->att_part;
    return WEFT_OK;
}

/* weft_attention_tc (core.cu, attention_tc.cuh; its launch policy: weft/attention_tc.h): the most
 * bytes its splits' partials may take (above that, fewer splits) */
#define ATC_PART_MAX (32ull << 20)

/* weft_attention_tc's partials: ATC_PART_MAX bytes, allocated at the first prefill that splits.
 * Not the decode kernels' workspace, which captured graphs hold by address: a prefill must
 * never move it. */
static weft_status atc_workspace(cuda_backend *b, CUdeviceptr *out, weft_error *err) {
    cuda_ops_state *o = ops_of(b);
    if (!o) return cuda_fail(err, WEFT_ERR_NOMEM, "op state");
    if (!o->atc_part) TRY(cuda_arena_alloc(b, ATC_PART_MAX, &o->atc_part, err));
    *out = o->atc_part;
    return WEFT_OK;
}

/* Prefill attention on tensor cores for the steps and shapes weft/attention_tc.h names (prefill
 * rows of an f16/bf16 model); *used = 0 where it does not apply. S > 1 merges in
 * weft_attention_combine. */
static weft_status attention_tc(cuda_backend *b, const weft_exec_ctx *c, uint32_t dt, int T,
                                int Hq, int Hkv, int hd, int window, float scale, int max_seq,
                                CUdeviceptr qp, CUdeviceptr pp, CUdeviceptr slots,
                                CUdeviceptr kc, CUdeviceptr vc, CUdeviceptr op, int *used,
                                weft_error *err) {
    *used = 0;
    int R = weft_atc_tile_rows(Hq, Hkv, hd);
    const weft_batch *bt = c->batch;
    if (!b->prefill_tc || dt == WEFT_DTYPE_F32 || !R || !weft_atc_step(bt, T)) return WEFT_OK;
    const weft_kv_contiguous *kv = c->kv->desc;
    int n_slots = (int)kv->n_slots;
    uint64_t per = (uint64_t)T * Hq * (hd + 2) * sizeof(float);
    int S = weft_atc_splits(bt, T, R, Hkv, b->sm_count, max_seq, 0, per, ATC_PART_MAX);
    CUdeviceptr part = 0;
    if (S > 1) TRY(atc_workspace(b, &part, err));
    CUfunction f;
    TRY(kern(b, dt, dt, "weft_attention_tc", &f, err));
    unsigned smem = weft_atc_smem(hd);
    void *args[] = {&qp, &pp, &slots, &kc, &vc, &op, &part, &T, &Hq, &Hkv, &hd, &max_seq,
                    &n_slots, &window, &scale, &S};
    TRY(cuda_launch_ex(b, f, "weft_attention_tc", (unsigned)T, (unsigned)Hkv, (unsigned)S,
                       WEFT_ATC_THREADS, smem, 1, args, err));
    *used = 1;
    if (S == 1) return WEFT_OK;
    CUfunction fc;
    TRY(kern(b, dt, dt, "weft_attention_combine", &fc, err));
    void *cargs[] = {&part, &op, &T, &Hq, &hd, &S};
    return cuda_launch(b, fc, "weft_attention_combine", (unsigned)T, (unsigned)Hq,
                       hd >= 128 ? 128 : 64, cargs, err);
}

/* kv store, then attention of T rows over the contiguous cache (kc, vc): prefill steps on
 * tensor cores (option prefill_tc), the split-KV kernels for small T, the one-block-per-head
 * kernel otherwise. */
static weft_status attention_kernels(cuda_backend *b, const weft_exec_ctx *c, uint32_t dt, int T,
                                     int Hq, int Hkv, int hd, int window, float scale,
                                     int max_seq, CUdeviceptr qp, CUdeviceptr kp, CUdeviceptr vp,
                                     CUdeviceptr pp, CUdeviceptr slots, CUdeviceptr kc,
                                     CUdeviceptr vc, CUdeviceptr op, weft_error *err) {
    CUfunction fs, fa;
    TRY(kern(b, dt, dt, "weft_kv_store", &fs, err));
    void *sargs[] = {&kp, &vp, &pp, &slots, &kc, &vc, &T, &Hkv, &hd, &max_seq};
    TRY(cuda_launch(b, fs, "weft_kv_store", (unsigned)T, 1, 128, sargs, err));
    int used;
    TRY(attention_tc(b, c, dt, T, Hq, Hkv, hd, window, scale, max_seq, qp, pp, slots, kc, vc, op,
                     &used, err));
    if (used) return WEFT_OK;
    TRY(kern(b, dt, dt, "weft_attention", &fa, err));
    int G = Hq / Hkv;
    if (T <= ATS_MAX_T && hd % 32 == 0 && G <= ATS_MAXG) {
        int S = (max_seq + ATS_CHUNK - 1) / ATS_CHUNK;
        CUdeviceptr part;
        TRY(ats_workspace(b, Hq, hd, S, &part, err));
        CUfunction fsp, fc;
        TRY(kern(b, dt, dt, "weft_attention_split", &fsp, err));
        TRY(kern(b, dt, dt, "weft_attention_combine", &fc, err));
        unsigned smem = ats_smem(hd, elem_size(dt), 0, 0, ATS_MAXG);
        CK(cuFuncSetAttribute(fsp, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem),
           "raising the shared memory limit of weft_attention_split");
        void *pargs[] = {&qp, &pp, &slots, &kc, &vc, &part, &T, &Hq, &Hkv, &hd, &max_seq,
                         &window, &scale, &S};
        TRY(cuda_launch_ex(b, fsp, "weft_attention_split", (unsigned)T, (unsigned)Hkv,
                           (unsigned)S, ATS_THREADS, smem, 1, pargs, err));
        void *cargs[] = {&part, &op, &T, &Hq, &hd, &S};
        return cuda_launch(b, fc, "weft_attention_combine", (unsigned)T, (unsigned)Hq,
                           hd >= 128 ? 128 : 64, cargs, err);
    }
    void *aargs[] = {&qp, &pp, &slots, &kc, &vc, &op, &T, &Hq, &Hkv, &hd, &max_seq, &window,
                     &scale};
    /* 4 warps x 256 floats of per-warp accumulators in dynamic shared memory (core.cu) */
    return cuda_launch_ex(b, fa, "weft_attention", (unsigned)T, (unsigned)Hq, 1, 128,
                          4 * 256 * sizeof(float), 1, aargs, err);
}

static weft_status op_attention(void *st, const weft_exec_ctx *c, const weft_node *n,
                                weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *q = tin(c, n, 0);
    int layer = (int)n->p.i[0], max_seq = 0;
    CUdeviceptr kc = 0, vc = 0;
    TRY(kv_contiguous(c, n->name, layer, q->dtype, &kc, &vc, &max_seq, err));
    int T = (int)c->n_tokens, Hq = (int)n->p.i[1], Hkv = (int)n->p.i[2], hd = (int)n->p.i[3];
    int window = (int)n->p.i[4];
    if (hd > 256 || Hkv <= 0 || Hq % Hkv)
        return cuda_fail(err, WEFT_ERR_UNSUPPORTED, "attention %s: head_dim %d (max 256), heads "
                         "%d / kv heads %d", n->name, hd, Hq, Hkv);
    float scale = n->p.f[0] != 0.f ? n->p.f[0] : 1.0f / sqrtf((float)hd);
    CUdeviceptr slots;
    TRY(row_slots(b, c, n, 4, &slots, err));
    return attention_kernels(b, c, q->dtype, T, Hq, Hkv, hd, window, scale, max_seq, din(c, n, 0),
                             din(c, n, 1), din(c, n, 2), din(c, n, 3), slots, kc, vc,
                             dout(c, n, 0), err);
}

static weft_status elementwise(cuda_backend *b, const weft_exec_ctx *c, const weft_node *n,
                               const char *name, int kind, weft_error *err) {
    const weft_tensor *x = tin(c, n, 0);
    CUfunction f;
    TRY(kern(b, x->dtype, x->dtype, name, &f, err));
    long total = (long)c->n_tokens * cols_of(x);
    CUdeviceptr a = din(c, n, 0), bb = din(c, n, 1), y = dout(c, n, 0);
    float s = n->p.f[0];
    if (kind == 0) { /* binary */
        void *args[] = {&a, &bb, &y, &total};
        return cuda_launch(b, f, name, blocks_for(total, 256), 1, 256, args, err);
    }
    if (kind == 1) { /* scale */
        void *args[] = {&a, &y, &s, &total};
        return cuda_launch(b, f, name, blocks_for(total, 256), 1, 256, args, err);
    }
    int act = (int)n->p.i[0];
    void *args[] = {&a, &y, &act, &total};
    return cuda_launch(b, f, name, blocks_for(total, 256), 1, 256, args, err);
}

static weft_status op_swiglu(void *st, const weft_exec_ctx *c, const weft_node *n,
                             weft_error *err) {
    return elementwise(st, c, n, "weft_swiglu", 0, err);
}
static weft_status op_add(void *st, const weft_exec_ctx *c, const weft_node *n, weft_error *err) {
    return elementwise(st, c, n, "weft_add", 0, err);
}
static weft_status op_scale(void *st, const weft_exec_ctx *c, const weft_node *n,
                            weft_error *err) {
    return elementwise(st, c, n, "weft_scale", 1, err);
}
static weft_status op_activation(void *st, const weft_exec_ctx *c, const weft_node *n,
                                 weft_error *err) {
    return elementwise(st, c, n, "weft_activation", 2, err);
}


static weft_status op_lm_head(void *st, const weft_exec_ctx *c, const weft_node *n,
                              weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *x = tin(c, n, 0), *w = tin(c, n, 1), *y = &c->graph->tensors[n->out[0]];
    const weft_batch *bt = c->batch;
    int R = bt ? (int)bt->n_logits : (int)c->n_tokens;
    int D = (int)w->shape[1], V = (int)w->shape[0];
    CUdeviceptr xs = din(c, n, 0);
    cuda_ops_state *o = ops_of(b);
    if (!o) return cuda_fail(err, WEFT_ERR_NOMEM, "op state");
    int identity = bt && (uint32_t)R == c->n_tokens;
    for (int r = 0; identity && r < R; r++) identity = bt->logit_rows[r] == r;
    if (!identity) {
        CUdeviceptr rows = din(c, n, 2);
        if (!rows) {
            if (!bt || !bt->logit_rows)
                return cuda_fail(err, WEFT_ERR_INVALID, "lm_head: no logit rows");
            TRY(cuda_stage(b, bt->logit_rows, (uint64_t)R * sizeof(int32_t), &rows, err));
        }
        uint64_t need = (uint64_t)R * D * (x->dtype == WEFT_DTYPE_F32 ? 4 : 2);
        if (need > o->head_scratch_bytes) {
            if (o->head_scratch) cuda_arena_free(b, o->head_scratch);
            TRY(cuda_arena_alloc(b, need, &o->head_scratch, err));
            o->head_scratch_bytes = need;
        }
        CUfunction f;
        TRY(kern(b, x->dtype, x->dtype, "weft_gather_rows", &f, err));
        void *args[] = {&xs, &rows, &o->head_scratch, &R, &D};
        TRY(cuda_launch(b, f, "weft_gather_rows", (unsigned)R, 1, 256, args, err));
        xs = o->head_scratch;
    }
    CK(cuCtxSetCurrent(b->ctx), "making the context current");
    return cuda_linear(b, xs, x->dtype, din(c, n, 1), w->dtype, 0, dout(c, n, 0), y->dtype, R, V,
                       D, err);
}

static weft_status op_copy(void *st, const weft_exec_ctx *c, const weft_node *n,
                           weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *x = tin(c, n, 0), *y = &c->graph->tensors[n->out[0]];
    long total = (long)c->n_tokens * cols_of(x);
    CUdeviceptr xp = din(c, n, 0), yp = dout(c, n, 0);
    CK(cuCtxSetCurrent(b->ctx), "making the context current");
    if (x->dtype == y->dtype) {
        size_t es = x->dtype == WEFT_DTYPE_F32 ? 4 : 2;
        CK(cuMemcpyDtoDAsync(yp, xp, (size_t)total * es, b->stream), "copying a tensor");
        return WEFT_OK;
    }
    CUfunction f;
    if (y->dtype == WEFT_DTYPE_F32) {
        TRY(kern(b, x->dtype, x->dtype, "weft_to_f32", &f, err));
    } else if (x->dtype == WEFT_DTYPE_F32) {
        TRY(kern(b, y->dtype, y->dtype, "weft_from_f32", &f, err));
    } else {
        return cuda_fail(err, WEFT_ERR_UNSUPPORTED, "copy %s: dtype %u -> %u", n->name, x->dtype,
                         y->dtype);
    }
    void *args[] = {&xp, &yp, &total};
    return cuda_launch(b, f, "weft_convert", blocks_for(total, 256), 1, 256, args, err);
}

static weft_status op_split(void *st, const weft_exec_ctx *c, const weft_node *n,
                            weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *x = tin(c, n, 0);
    int T = (int)c->n_tokens, total = (int)cols_of(x), off = 0;
    CUdeviceptr xp = din(c, n, 0);
    if (n->n_out <= 4) { /* one launch for every output (merged projections) */
        CUfunction f;
        TRY(kern(b, x->dtype, x->dtype, "weft_split_cols", &f, err));
        CUdeviceptr y[4] = {0, 0, 0, 0};
        int w[4] = {0, 0, 0, 0};
        for (uint32_t i = 0; i < n->n_out; i++) {
            y[i] = dout(c, n, i);
            w[i] = (int)n->p.i[i];
        }
        void *args[] = {&xp, &y[0], &y[1], &y[2], &y[3], &T, &total, &w[0], &w[1], &w[2], &w[3]};
        return cuda_launch(b, f, "weft_split_cols", blocks_for((long)T * total, 256), 1, 256,
                           args, err);
    }
    CUfunction f;
    TRY(kern(b, x->dtype, x->dtype, "weft_slice_cols", &f, err));
    for (uint32_t i = 0; i < n->n_out; i++) {
        int width = (int)n->p.i[i];
        CUdeviceptr yp = dout(c, n, i);
        void *args[] = {&xp, &yp, &T, &total, &off, &width};
        TRY(cuda_launch(b, f, "weft_slice_cols", blocks_for((long)T * width, 256), 1, 256, args,
                        err));
        off += width;
    }
    return WEFT_OK;
}

/* ---- fused user ops (emitted by the fuse.* technique passes) --------------------------- */
/* fuse.linear_swiglu: in x (T,K), w_gate (F,K), w_up (F,K) -> y (T,F) = silu(x wg^T) * (x wu^T);
 * with p.i[0] = 1 the gate and up rows are one merged (2F,K) weight in[1] (gate rows first).
 * The GEMV kernel computes both products per output column, so it needs T <= 8: the pass
 * fuses only buckets that small, and accepts() refuses larger ones. */
/* y = silu(x wg^T) * (x wu^T) for T rows of K by the GEMV kernels (node: for messages) */
static weft_status swiglu_gemv(cuda_backend *b, const char *node, uint32_t tx, uint32_t tw,
                               CUdeviceptr xp, CUdeviceptr wg, CUdeviceptr wu, CUdeviceptr yp,
                               int T, int F, int K, weft_error *err) {
    if (T == 0) return WEFT_OK;
    if (!cuda_gemv_fits(tx, xp, wg, T, K) || wu % 16)
        return cuda_fail(err, WEFT_ERR_UNSUPPORTED, "fuse.linear_swiglu %s: T=%d K=%d does not "
                         "fit the GEMV kernel (T <= 8, 16-byte rows)", node, T, K);
    int S = cuda_gemv_split(b, K), rows = 8 / S, rg = 0, maxv = 0;
    CUfunction f;
    CK(cuCtxSetCurrent(b->ctx), "making the context current");
    unsigned stb = gemv_st_bytes(b, 2, T, F, K, S, tx, &rg, &maxv);
    if (stb) {
        TRY(kern(b, tx, tw, "weft_gemv_swiglu_st_1", &f, err));
        void *sargs[] = {&xp, &wg, &wu, &yp, &F, &K, &S, &rg, &maxv};
        return gemv_launch(b, f, "weft_gemv_swiglu_st_1",
                           (unsigned)((F + rows * rg - 1) / (rows * rg)), stb, sargs, err);
    }
    unsigned xs = gemv_xs_bytes(b, 1, T, K, tx);
    if (b->gemv_loop > 0 && T == 1) {
        char lname[40];
        unsigned lp, nt = lp_name(b, lname, sizeof(lname), "weft_gemv_swiglu_lp", xs);
        int per;
        TRY(kern(b, tx, tw, lname, &f, err));
        TRY(gemv_lp_grid(b, f, nt, xs, F, S, &lp, &per, err));
        void *largs[] = {&xp, &wg, &wu, &yp, &F, &K, &S, &per};
        if (per > 1) return gemv_launch_nt(b, f, lname, lp, nt, xs, largs, err);
    }
    const char *name = gemv_name(T, 1, xs != 0);
    TRY(kern(b, tx, tw, name, &f, err));
    void *args[] = {&xp, &wg, &wu, &yp, &T, &F, &K, &S};
    return gemv_launch(b, f, name, (unsigned)((F + rows - 1) / rows), xs, args, err);
}

static weft_status op_linear_swiglu(void *st, const weft_exec_ctx *c, const weft_node *n,
                                    weft_error *err) {
    const weft_tensor *x = tin(c, n, 0), *w = tin(c, n, 1), *y = &c->graph->tensors[n->out[0]];
    int F = (int)y->shape[1], K = (int)w->shape[1];
    CUdeviceptr wg = din(c, n, 1);
    CUdeviceptr wu = n->p.i[0] == 1 ? wg + (CUdeviceptr)F * K * elem_size(w->dtype) : din(c, n, 2);
    return swiglu_gemv(st, n->name, x->dtype, w->dtype, din(c, n, 0), wg, wu, dout(c, n, 0),
                       (int)c->n_tokens, F, K, err);
}

static int32_t accepts_linear_swiglu(void *st, const weft_graph *g, const weft_node *n) {
    if (n->n_in < 2 || n->n_out != 1 || g->bucket.max_tokens > 8) return 0;
    int merged = n->p.i[0] == 1;
    if (!merged && n->n_in < 3) return 0;
    for (uint32_t i = 0; i < (merged ? 2u : 3u); i++)
        if (n->in[i] >= g->n_tensors) return 0;
    if (n->out[0] >= g->n_tensors) return 0;
    const weft_tensor *x = &g->tensors[n->in[0]], *w = &g->tensors[n->in[1]],
                      *y = &g->tensors[n->out[0]];
    if (!is_float(x->dtype) || x->dtype != w->dtype || y->dtype != x->dtype || w->rank != 2 ||
        y->rank != 2)
        return 0;
    int64_t F = y->shape[1];
    if (w->shape[0] != (merged ? 2 * F : F) || cols_of(x) != w->shape[1]) return 0;
    if (!merged) {
        const weft_tensor *u = &g->tensors[n->in[2]];
        if (u->dtype != w->dtype || u->rank != 2 || u->shape[0] != F || u->shape[1] != w->shape[1])
            return 0;
    }
    return 1;
}

/* fuse.qkv_rope: per-head RMSNorm of q and k (when p.i[7] = 1) and RoPE in one launch, params
 * as ROPE's (p.i[0] = q heads, i[1] = head_dim, i[2] = rotary dims, i[3] = layout, i[4] =
 * scaling, f[0..4]) plus i[5] = kv heads, i[6] = 1 when in[0] is one merged q|k|v row (then
 * out[2] receives v), f[5] = the norm's eps. Inputs: separate q, k, positions [, q_norm,
 * k_norm]; merged qkv, positions [, q_norm, k_norm]. Outputs q', k' [, v]. */
/* Where the q, k (and v) rows of a step start and their row strides in elements: one merged
 * q|k|v row (v included) or separate q and k tensors (vs = 0). */
typedef struct qkv_rows {
    CUdeviceptr qs, ks, vs;
    int qstride, kstride, vstride;
} qkv_rows;

static qkv_rows merged_rows(CUdeviceptr qkv, int cols, int Hq, int Hkv, int hd, uint32_t dt) {
    size_t es = (size_t)elem_size(dt);
    qkv_rows r = {.qs = qkv, .qstride = cols, .kstride = cols, .vstride = cols};
    r.ks = qkv + (CUdeviceptr)Hq * hd * es;
    r.vs = r.ks + (CUdeviceptr)Hkv * hd * es;
    return r;
}

/* weft_qkv_rope over T rows: q' and k' (and v when r->vs) out of the rows of r. n carries the
 * rope parameters (p.i[4], p.f[0..4]) of the frequency table. */
static weft_status qkv_rope_kernel(cuda_backend *b, const weft_node *n, uint32_t dt, uint32_t tw,
                                   int T, int Hq, int Hkv, int hd, int rot, int layout, float eps,
                                   const qkv_rows *r, CUdeviceptr qn, CUdeviceptr kn,
                                   CUdeviceptr pp, CUdeviceptr qo, CUdeviceptr ko, CUdeviceptr vo,
                                   weft_error *err) {
    CUdeviceptr freqs;
    TRY(rope_freqs(b, n, rot, &freqs, err));
    CUfunction f;
    TRY(kern(b, dt, tw, "weft_qkv_rope", &f, err));
    qkv_rows a = *r;
    void *args[] = {&a.qs, &a.qstride, &a.ks, &a.kstride, &a.vs, &a.vstride, &qn, &kn, &pp,
                    &freqs, &qo, &ko, &vo, &T, &Hq, &Hkv, &hd, &rot, &layout, &eps};
    unsigned heads = (unsigned)(Hq + Hkv + (a.vs ? Hkv : 0));
    return cuda_launch(b, f, "weft_qkv_rope", (unsigned)T, heads, norm_block(hd), args, err);
}

static weft_status op_qkv_rope(void *st, const weft_exec_ctx *c, const weft_node *n,
                               weft_error *err) {
    cuda_backend *b = st;
    int merged = n->p.i[6] == 1, has_norm = n->p.i[7] == 1;
    int Hq = (int)n->p.i[0], hd = (int)n->p.i[1], Hkv = (int)n->p.i[5];
    int rot = n->p.i[2] > 0 ? (int)n->p.i[2] : hd, layout = (int)n->p.i[3];
    int T = (int)c->n_tokens;
    const weft_tensor *x = tin(c, n, 0);
    uint32_t ip = merged ? 1 : 2; /* positions */
    qkv_rows r = {.qs = din(c, n, 0), .ks = din(c, n, 1), .qstride = Hq * hd,
                  .kstride = Hkv * hd};
    if (merged) r = merged_rows(din(c, n, 0), (int)cols_of(x), Hq, Hkv, hd, x->dtype);
    CUdeviceptr qn = has_norm ? din(c, n, ip + 1) : 0, kn = has_norm ? din(c, n, ip + 2) : 0;
    uint32_t tw = has_norm ? tin(c, n, ip + 1)->dtype : x->dtype;
    return qkv_rope_kernel(b, n, x->dtype, tw, T, Hq, Hkv, hd, rot, layout, n->p.f[5], &r, qn, kn,
                           din(c, n, ip), dout(c, n, 0), dout(c, n, 1),
                           merged ? dout(c, n, 2) : 0, err);
}

static int32_t accepts_qkv_rope(void *st, const weft_graph *g, const weft_node *n) {
    int merged = n->p.i[6] == 1, has_norm = n->p.i[7] == 1;
    int64_t Hq = n->p.i[0], hd = n->p.i[1], Hkv = n->p.i[5], rot = n->p.i[2] > 0 ? n->p.i[2] : hd;
    uint32_t need_in = (merged ? 2u : 3u) + (has_norm ? 2u : 0u);
    if (n->n_in < need_in || n->n_out != (merged ? 3u : 2u)) return 0;
    if (Hq <= 0 || Hkv <= 0 || hd <= 0 || hd > 256 || hd % 2 || rot > hd || rot % 2 ||
        n->p.i[3] < 0 || n->p.i[3] > 1)
        return 0;
    for (uint32_t i = 0; i < need_in; i++)
        if (n->in[i] >= g->n_tensors) return 0;
    for (uint32_t i = 0; i < n->n_out; i++)
        if (n->out[i] >= g->n_tensors) return 0;
    const weft_tensor *x = &g->tensors[n->in[0]];
    if (!is_float(x->dtype)) return 0;
    if (merged && cols_of(x) != (Hq + 2 * Hkv) * hd) return 0;
    if (!merged && (cols_of(x) != Hq * hd || cols_of(&g->tensors[n->in[1]]) != Hkv * hd ||
                    g->tensors[n->in[1]].dtype != x->dtype))
        return 0;
    if (g->tensors[n->in[merged ? 1 : 2]].dtype != WEFT_DTYPE_I32) return 0;
    if (has_norm) {
        uint32_t a = merged ? 2 : 3;
        const weft_tensor *qn = &g->tensors[n->in[a]], *kn = &g->tensors[n->in[a + 1]];
        if (!is_float(qn->dtype) || qn->dtype != kn->dtype || numel(qn) != hd || numel(kn) != hd)
            return 0;
    }
    for (uint32_t i = 0; i < n->n_out; i++)
        if (g->tensors[n->out[i]].dtype != x->dtype) return 0;
    return 1;
}

/* ---- exec.l2-prefetch's op: the next products' weights pulled into L2 --------------------
 * in: up to 8 weight tensors, in the order later nodes read them; p.i[0] = bytes to prefetch in
 * all (the first bytes of the inputs in that order; 0 = all of them); p.i[1] = 1 for bulk
 * prefetches, 0 for line prefetches; out: one unused i32 (the
 * graph wants an output). The kernel (core.cu weft_l2_prefetch) only reads weights, which no
 * kernel writes, so it changes no result; it is launched with programmatic dependent launch
 * and lets the next kernel start before it waits for the previous one. */
#define L2PF_MAX 8
typedef struct l2pf_ranges {
    unsigned long long p[L2PF_MAX], n[L2PF_MAX];
} l2pf_ranges;

static weft_status op_l2_prefetch(void *st, const weft_exec_ctx *c, const weft_node *n,
                                  weft_error *err) {
    cuda_backend *b = st;
    l2pf_ranges r;
    memset(&r, 0, sizeof(r));
    uint64_t left = n->p.i[0] > 0 ? (uint64_t)n->p.i[0] : UINT64_MAX, total = 0;
    int nr = 0;
    for (uint32_t i = 0; i < n->n_in && nr < L2PF_MAX && left >= 16; i++) {
        if (n->in[i] == WEFT_TENSOR_NONE || n->in[i] >= c->graph->n_tensors) continue;
        const weft_buffer *d = &c->data[n->in[i]];
        uint64_t p = (uint64_t)(uintptr_t)d->ptr, bytes = d->bytes < left ? d->bytes : left;
        bytes &= ~(uint64_t)15; /* the bulk prefetch moves whole 16-byte units */
        if (!p || (p & 15) || !bytes) continue;
        r.p[nr] = p;
        r.n[nr++] = bytes;
        left -= bytes;
        total += bytes;
    }
    if (!nr) return WEFT_OK;
    /* p.i[1] = 1: bulk prefetches of 16 KiB pieces, 32 threads a block; 0: one 128-byte line
     * per thread, 256 threads a block; either way at most one block per SM (core.cu) */
    int bulk = n->p.i[1] == 1;
    uint64_t unit = bulk ? 16384 : 128, threads = bulk ? 32 : 256;
    uint64_t blocks = ((total + unit - 1) / unit + threads - 1) / threads;
    uint64_t sms = (uint64_t)(b->sm_count > 0 ? b->sm_count : 1);
    if (blocks > sms) blocks = sms;
    CUfunction f;
    uint32_t dt = c->graph->tensors[n->in[0]].dtype; /* any module has the kernel */
    if (!is_float(dt)) dt = WEFT_DTYPE_BF16;
    TRY(kern(b, dt, dt, "weft_l2_prefetch", &f, err));
    void *args[] = {&r, &nr, &bulk};
    return cuda_launch_ex(b, f, "weft_l2_prefetch", (unsigned)blocks, 1, 1, (unsigned)threads, 0,
                          1, args, err);
}

static int32_t accepts_l2_prefetch(void *st, const weft_graph *g, const weft_node *n) {
    (void)st;
    if (n->n_in < 1 || n->n_in > L2PF_MAX || n->n_out != 1 || n->p.i[0] < 0) return 0;
    for (uint32_t i = 0; i < n->n_in; i++)
        if (n->in[i] >= g->n_tensors || g->tensors[n->in[i]].kind != WEFT_TENSOR_WEIGHT) return 0;
    return n->out[0] < g->n_tensors;
}

/* fuse.rope_attention (techniques/fuse.rope-attention, whose README has the contract): a
 * fuse.qkv_rope node and the attention that alone reads its outputs. Params: i[0] = q heads,
 * i[1] = head_dim, i[2] = rotary dims, i[3] = layout, i[4] = rope scaling, f[0..4] = rope
 * (as ROPE's); i[5] = kv heads; i[6] = flags: bit 0 merged q|k|v input, bit 1 qk-norm, bit 2
 * merge through a thread-block cluster, bits 8.. the sliding window (0 = none); i[7] = layer;
 * f[5] = norm eps, f[6] = attention scale (0 = 1/sqrt(head_dim)). Inputs: merged qkv,
 * positions, kv_slots|NONE [, q_norm, k_norm]; separate q, k, v, positions, kv_slots|NONE
 * [, q_norm, k_norm]. Outputs: o, q', k' [, v' when merged]
 * (the unfused path's intermediates). One row: weft_rope_attention, one kernel; more rows (or
 * shapes it does not take): weft_qkv_rope then the attention kernels, as the two nodes ran. */
typedef struct ra_params {
    int merged, has_norm, cluster, Hq, Hkv, hd, rot, layout, window, layer;
    float eps, scale;
    uint32_t ipos, islots, inorm; /* input indices */
} ra_params;

static void ra_decode(const weft_node *n, ra_params *r) {
    int64_t flags = n->p.i[6];
    r->merged = (int)(flags & 1);
    r->has_norm = (int)((flags >> 1) & 1);
    r->window = (int)(flags >> 8);
    r->cluster = (int)((flags >> 2) & 1);
    r->Hq = (int)n->p.i[0];
    r->hd = (int)n->p.i[1];
    r->rot = n->p.i[2] > 0 ? (int)n->p.i[2] : r->hd;
    r->layout = (int)n->p.i[3];
    r->Hkv = (int)n->p.i[5];
    r->layer = (int)n->p.i[7];
    r->eps = n->p.f[5];
    r->scale = n->p.f[6] != 0.f ? n->p.f[6] : 1.0f / sqrtf((float)(r->hd > 0 ? r->hd : 1));
    r->ipos = r->merged ? 1 : 3;
    r->islots = r->ipos + 1;
    r->inorm = r->ipos + 2;
}

/* The arrival counters of weft_rope_attention: one per KV head, zero when no kernel runs. */
static weft_status ra_counters(cuda_backend *b, int Hkv, CUdeviceptr *out, weft_error *err) {
    cuda_ops_state *o = ops_of(b);
    if (!o) return cuda_fail(err, WEFT_ERR_NOMEM, "op state");
    if ((uint32_t)Hkv > o->ra_count_n) { /* first step: setup, not per step */
        if (o->ra_count) cuda_arena_free(b, o->ra_count);
        o->ra_count = 0;
        o->ra_count_n = 0;
        TRY(cuda_arena_alloc(b, (uint64_t)Hkv * sizeof(uint32_t), &o->ra_count, err));
        CK(cuMemsetD32Async(o->ra_count, 0, (size_t)Hkv, b->stream),
           "zeroing the attention counters");
        o->ra_count_n = (uint32_t)Hkv;
    }
    *out = o->ra_count;
    return WEFT_OK;
}

/* The fused attention's splits for a span of positions: one per ATS_CHUNK; launched as
 * clusters (cl), up to ATS_CLUSTER (8, the portable cluster size) form one cluster, and more are
 * rounded up to a multiple of it (the extra splits empty), clusters of 8 consecutive splits. */
static int ra_splits(int span, int cl) {
    int S = (span + ATS_CHUNK - 1) / ATS_CHUNK;
    return cl && S > ATS_CLUSTER ? (S + ATS_CLUSTER - 1) / ATS_CLUSTER * ATS_CLUSTER : S;
}

static weft_status op_rope_attention(void *st, const weft_exec_ctx *c, const weft_node *n,
                                     weft_error *err) {
    cuda_backend *b = st;
    ra_params r;
    ra_decode(n, &r);
    int T = (int)c->n_tokens;
    if (T == 0) return WEFT_OK;
    const weft_tensor *x = tin(c, n, 0);
    uint32_t dt = x->dtype;
    int max_seq = 0;
    CUdeviceptr kc = 0, vc = 0;
    TRY(kv_contiguous(c, n->name, r.layer, dt, &kc, &vc, &max_seq, err));
    CK(cuCtxSetCurrent(b->ctx), "making the context current");
    qkv_rows rows = {.qs = din(c, n, 0), .ks = din(c, n, 1), .qstride = r.Hq * r.hd,
                     .kstride = r.Hkv * r.hd};
    CUdeviceptr vin = r.merged ? 0 : din(c, n, 2);
    if (r.merged) rows = merged_rows(din(c, n, 0), (int)cols_of(x), r.Hq, r.Hkv, r.hd, dt);
    CUdeviceptr pp = din(c, n, r.ipos), slots;
    TRY(row_slots(b, c, n, r.islots, &slots, err));
    CUdeviceptr qn = r.has_norm ? din(c, n, r.inorm) : 0;
    CUdeviceptr kn = r.has_norm ? din(c, n, r.inorm + 1) : 0;
    uint32_t tw = r.has_norm ? tin(c, n, r.inorm)->dtype : dt;
    CUdeviceptr o = dout(c, n, 0);
    int G = r.Hq / r.Hkv;
    /* f32 activations take the unfused kernels: the fused kernel's f32 RoPE compiled to a
     * different FMA contraction from weft_qkv_rope's (315 of 2,048 outputs one rounding apart
     * in test_cuda_ops on the H200), and bit identity with the unfused nodes is the contract */
    if (T == 1 && r.hd % 32 == 0 && G <= ATS_MAXG && dt != WEFT_DTYPE_F32) {
        /* The grid covers the step's KV-length bucket (weft_sdk_kv_bucket: the captures of
         * exec.cuda-graph are keyed by it), not the whole cache: splits past the bucket could
         * hold no live position. The partials' workspace is sized for the whole cache, so no
         * bucket moves it under a captured graph.
         * Option merge: cluster: each kv head's splits as thread-block clusters merging
         * through distributed shared memory (ra_splits); more than 8 splits, the kernels' _mc
         * form: a step whose live splits lie in one cluster merges there; a longer one takes
         * the counter merge (docs/perf/batch1.md, session of 2026-12-01). From a span of
         * attn_mc4_from positions the _mc4 form (the same body held to four blocks an SM). */
        int cl = r.cluster && b->cc_major >= 9;
        int64_t bucket = weft_sdk_kv_bucket(c->batch);
        /* option attn_bucket_min: buckets shorter than it span it (the rule is a function of
         * the bucket, which the captures are keyed by) */
        if (bucket > 0 && bucket < b->attn_bucket_min) bucket = b->attn_bucket_min;
        int span = bucket > 0 && bucket < max_seq ? (int)bucket : max_seq;
        int S = ra_splits(span, cl), S_all = ra_splits(max_seq, cl); /* S_all >= S */
        int mc = cl && S > ATS_CLUSTER;
        int mc4 = mc && b->attn_mc4_from > 0 && span >= b->attn_mc4_from;
        /* option attn_qsplit: each kv head's q heads over qs blocks (a divisor of G), grid y
         * Hkv * qs, one arrival counter per block row */
        int qs = b->attn_qsplit;
        while (qs > 1 && G % qs) qs >>= 1;
        const int qsh = qs == 4 ? 2 : qs == 2 ? 1 : 0;
        CUdeviceptr part, cnt, freqs;
        TRY(ats_workspace(b, r.Hq, r.hd, S_all, &part, err));
        TRY(ra_counters(b, r.Hkv * qs, &cnt, err));
        TRY(rope_freqs(b, n, r.rot, &freqs, err));
        CUfunction f;
        /* option attn_cp: its kernel form (core.cu weft_rope_attention_cp); without
         * clusters the _at forms (the counter merge), clusters of 8 of more than 8 splits the
         * _mc forms, from attn_mc4_from positions the _mc4 forms */
        static const char *const knames[2][4] = {
            {"weft_rope_attention_at", "weft_rope_attention", "weft_rope_attention_mc",
             "weft_rope_attention_mc4"},
            {"weft_rope_attention_cp_at", "weft_rope_attention_cp", "weft_rope_attention_cp_mc",
             "weft_rope_attention_cp_mc4"}};
        const char *kname = knames[b->attn_cp != 0][cl + mc + mc4];
        /* option attn_hd: the cluster form (at most 8 splits) compiled for the head size */
        char hdname[48];
        if (b->attn_hd && cl && !mc && (r.hd == 64 || r.hd == 128) && r.rot == r.hd) {
            snprintf(hdname, sizeof(hdname), "%s_d%d", kname, r.hd);
            kname = hdname;
        }
        TRY(kern(b, dt, tw, kname, &f, err));
        /* core.cu, weft_rope_attention's layout: ATS_MAXG heads in the plain cluster kernels */
        /* K and V staged as stored; the counter merge's forms keep the float-sized area it
         * gathers the partials in (core.cu, rope_attention_body's kvf) */
        unsigned smem = ats_smem(r.hd, cl ? elem_size(dt) : 4, 1, b->attn_cp,
                                 cl && !mc ? ATS_MAXG : G / qs);
        /* option attn_push_merge: past that layout the merging block receives the other
         * splits' partials (ATS_CLUSTER records of G / qs heads of hd + 2 floats), then its
         * 8-byte mbarrier (4 floats: its alignment included) */
        const int push = cl ? b->attn_push_merge : 0;
        if (push)
            smem += (unsigned)(ATS_CLUSTER * (G / qs) * (r.hd + 2) + 4) * (unsigned)sizeof(float);
        /* option attn_smem_min: a floor on the request (placement only: the kernel uses the
         * layout's share), so that fewer of its blocks fit an SM beside each other */
        smem = smem_floor(smem, b->attn_smem_min);
        CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem),
           "raising the shared memory limit of the fused rope-attention kernel");
        CUdeviceptr vs = r.merged ? rows.vs : vin;
        int nnorm = (int)norm_block(r.hd);
        /* the kernel reads the cluster flag from bit 16 of S, option attn_cp from bits 17-18,
         * log2 of option attn_qsplit's blocks a kv head from bits 19-20, bit 21 asks its
         * live blocks to count themselves on their SMs (options gemv_l2_sm, gemv_l2_first,
         * gemv_nl_defer),
         * bit 22 lets splits with no position exit before the merge (attn_dead_exit), and bits
         * 23-24 merge the clusters' splits by pushes (attn_push_merge: 1, 2) */
        const int smc = b->gemv_l2_sm || b->gemv_l2_first || b->gemv_nl_defer;
        int S_arg = S | (cl << 16) | (b->attn_cp << 17) | (qsh << 19) | (smc << 21) |
                    (b->attn_dead_exit << 22) | (push << 23);
        void *args[] = {&rows.qs, &rows.ks, &vs,      &qn,       &kn,     &pp,
                        &freqs,   &slots,   &kc,      &vc,       &part,   &cnt,
                        &o,       &r.Hq,    &r.Hkv,   &r.hd,     &r.rot,  &r.layout,
                        &r.eps,   &nnorm,   &max_seq, &r.window, &r.scale, &S_arg};
        if (cl)
            TRY(cuda_launch_cluster(b, f, kname, 1, (unsigned)(r.Hkv * qs), (unsigned)S,
                                    ATS_THREADS, smem, (unsigned)(mc ? ATS_CLUSTER : S), args,
                                    err));
        else
            TRY(cuda_launch_ex(b, f, kname, 1, (unsigned)(r.Hkv * qs), (unsigned)S, ATS_THREADS,
                               smem, 1, args, err));
        b->l2_after = 1; /* the next looped product takes the gemv_l2_* bits */
        return WEFT_OK;
    }
    /* the unfused sequence, through the node's intermediate outputs */
    CUdeviceptr qo = dout(c, n, 1), ko = dout(c, n, 2), vo = r.merged ? dout(c, n, 3) : 0;
    TRY(qkv_rope_kernel(b, n, dt, tw, T, r.Hq, r.Hkv, r.hd, r.rot, r.layout, r.eps, &rows, qn, kn,
                        pp, qo, ko, vo, err));
    return attention_kernels(b, c, dt, T, r.Hq, r.Hkv, r.hd, r.window, r.scale, max_seq, qo, ko,
                             r.merged ? vo : vin, pp, slots, kc, vc, o, err);
}

static int32_t accepts_rope_attention(void *st, const weft_graph *g, const weft_node *n) {
    (void)st;
    ra_params r;
    ra_decode(n, &r);
    uint32_t need_in = r.inorm + (r.has_norm ? 2u : 0u);
    if (n->n_in != need_in || n->n_out != (r.merged ? 4u : 3u)) return 0;
    if (r.Hq <= 0 || r.Hkv <= 0 || r.Hq % r.Hkv || r.hd <= 0 || r.hd > 256 || r.hd % 2 ||
        r.rot > r.hd || r.rot % 2 || r.layout < 0 || r.layout > 1 || r.window < 0 ||
        n->p.i[6] < 0 || (n->p.i[6] & 0xf8) || r.layer < 0)
        return 0;
    for (uint32_t i = 0; i < need_in; i++)
        if (n->in[i] >= g->n_tensors && !(i == r.islots && n->in[i] == WEFT_TENSOR_NONE))
            return 0;
    for (uint32_t i = 0; i < n->n_out; i++)
        if (n->out[i] >= g->n_tensors) return 0;
    const weft_tensor *x = &g->tensors[n->in[0]];
    if (!is_float(x->dtype)) return 0;
    int64_t qw = (int64_t)r.Hq * r.hd, kw = (int64_t)r.Hkv * r.hd;
    if (r.merged && cols_of(x) != qw + 2 * kw) return 0;
    if (!r.merged)
        for (uint32_t i = 1; i < 3; i++)
            if (cols_of(&g->tensors[n->in[i]]) != kw || g->tensors[n->in[i]].dtype != x->dtype)
                return 0;
    if (!r.merged && cols_of(x) != qw) return 0;
    if (g->tensors[n->in[r.ipos]].dtype != WEFT_DTYPE_I32) return 0;
    if (n->in[r.islots] != WEFT_TENSOR_NONE && g->tensors[n->in[r.islots]].dtype != WEFT_DTYPE_I32)
        return 0;
    if (r.has_norm) {
        const weft_tensor *qn = &g->tensors[n->in[r.inorm]], *kn = &g->tensors[n->in[r.inorm + 1]];
        if (!is_float(qn->dtype) || qn->dtype != kn->dtype || numel(qn) != r.hd ||
            numel(kn) != r.hd)
            return 0;
    }
    int64_t want[4] = {qw, qw, kw, kw};
    for (uint32_t i = 0; i < n->n_out; i++)
        if (g->tensors[n->out[i]].dtype != x->dtype || cols_of(&g->tensors[n->out[i]]) != want[i])
            return 0;
    return 1;
}

/* fuse.linear_add_rmsnorm (techniques/fuse.linear-add-norm/README.md): in x (T,K), w (N,K),
 * bias (N) or none, res (T,N), the norm's weight (N); out y (T,N) = rmsnorm(r) * weight and
 * r (T,N) = x w^T [+ bias] + res, each rounded as LINEAR then ADD_RMSNORM store them; p.f[0]
 * eps. At one row with the GEMV path it is one kernel (core.cu weft_gemv_norm_1: the last
 * block to finish normalises); otherwise the product goes into y, which ADD_RMSNORM's kernel
 * then reads and overwrites in place (each element is read and written by one thread). */
static weft_status ln_counter(cuda_backend *b, CUdeviceptr *out, weft_error *err) {
    cuda_ops_state *o = ops_of(b);
    if (!o) return cuda_fail(err, WEFT_ERR_NOMEM, "op state");
    if (!o->ln_count) { /* first step: setup, not per step */
        TRY(cuda_arena_alloc(b, sizeof(uint32_t), &o->ln_count, err));
        CK(cuMemsetD32Async(o->ln_count, 0, 1, b->stream), "zeroing the product-norm counter");
    }
    *out = o->ln_count;
    return WEFT_OK;
}

static weft_status op_linear_add_rmsnorm(void *st, const weft_exec_ctx *c, const weft_node *n,
                                         weft_error *err) {
    cuda_backend *b = st;
    const weft_tensor *x = tin(c, n, 0), *w = tin(c, n, 1), *nwt = tin(c, n, 4),
                      *y = &c->graph->tensors[n->out[0]];
    int T = (int)c->n_tokens, N = (int)w->shape[0], K = (int)w->shape[1];
    if (T == 0) return WEFT_OK;
    CUdeviceptr xp = din(c, n, 0), wp = din(c, n, 1), bp = din(c, n, 2), rp = din(c, n, 3),
                nwp = din(c, n, 4), yp = dout(c, n, 0), ro = dout(c, n, 1);
    float eps = n->p.f[0];
    uint32_t dt = x->dtype;
    CK(cuCtxSetCurrent(b->ctx), "making the context current");
    CUfunction f;
    if (T == 1 && b->gemv_max_tokens >= 1 && w->dtype == dt && nwt->dtype == dt &&
        cuda_gemv_fits(dt, xp, wp, 1, K)) {
        CUdeviceptr cnt;
        TRY(ln_counter(b, &cnt, err));
        int S = cuda_gemv_split(b, K), rows = 8 / S, nt = (int)norm_block(N);
        unsigned xs = gemv_xs_bytes(b, 0, 1, K, dt);
        const char *name = xs ? "weft_gemv_norm_xs_1" : "weft_gemv_norm_1";
        TRY(kern(b, dt, dt, name, &f, err));
        void *args[] = {&xp, &wp, &bp, &rp, &nwp, &yp, &ro, &cnt, &N, &K, &S, &nt, &eps};
        return gemv_launch(b, f, name, (unsigned)((N + rows - 1) / rows), xs, args, err);
    }
    weft_status s = cuda_linear(b, xp, dt, wp, w->dtype, bp, yp, y->dtype, T, N, K, err);
    if (s) return s;
    return add_rmsnorm_launch(b, dt, nwt->dtype, yp, rp, nwp, yp, ro, T, N, eps, NULL, err);
}

static int32_t accepts_linear_add_rmsnorm(void *st, const weft_graph *g, const weft_node *n) {
    (void)st;
    if (n->n_in != 5 || n->n_out != 2) return 0;
    for (uint32_t i = 0; i < 5; i++)
        if (n->in[i] >= g->n_tensors && !(i == 2 && n->in[i] == WEFT_TENSOR_NONE)) return 0;
    if (n->out[0] >= g->n_tensors || n->out[1] >= g->n_tensors) return 0;
    const weft_tensor *x = &g->tensors[n->in[0]], *w = &g->tensors[n->in[1]];
    if (!is_float(x->dtype) || w->rank != 2 || w->dtype != x->dtype || w->shape[0] <= 0 ||
        w->shape[0] > (1 << 24) || cols_of(x) != w->shape[1])
        return 0;
    int64_t N = w->shape[0];
    if (n->in[2] != WEFT_TENSOR_NONE &&
        (numel(&g->tensors[n->in[2]]) != N || g->tensors[n->in[2]].dtype != w->dtype))
        return 0;
    const weft_tensor *nw = &g->tensors[n->in[4]];
    if (!is_float(nw->dtype) || numel(nw) != N) return 0;
    const weft_tensor *same[3] = {&g->tensors[n->in[3]], &g->tensors[n->out[0]],
                                  &g->tensors[n->out[1]]};
    for (int i = 0; i < 3; i++)
        if (same[i]->dtype != x->dtype || cols_of(same[i]) != N) return 0;
    return 1;
}

/* fuse.norm_linear (techniques/fuse.norm-linear/README.md): in x (T,D), res (T,D), the norm's
 * weight (D), then w (N,D) and a bias or none (p.i[0] = 0: a LINEAR), or the gate rows and the
 * up rows (p.i[0] = 1: fuse.linear_swiglu; p.i[1] = 1 when in[3] holds both, in[4] none); out
 * the product (T,N), r = x + res and y = rmsnorm(r) * weight, rounded as ADD_RMSNORM and the
 * product store them; p.f[0] eps. At one row with the looped GEMV reading x from shared memory
 * (options gemv_loop and gemv_xsmem, 256-thread blocks, no gemv_stage), rows of 1,024 to 4,096
 * elements of one dtype and 16-byte aligned rows (the kernel moves them as 16-byte vectors) it
 * is one kernel (core.cu gemv_loop's NORM form), which leaves y unwritten (nothing reads it);
 * otherwise ADD_RMSNORM's kernel into y, then the product of y.
 * The down form (p.i[2] = 1, a fuse.linear_swiglu only): in[5] the down weight (D,F), out[0]
 * the down product (T,D), out[3] h, the gate|up activation (T,F). Where the one-row kernel
 * applies and the down product fits the looped GEMV too, the whole is one kernel (core.cu
 * gemv_mlp); otherwise the 5-input form into h, then the down LINEAR of h. */
static int nl_one_row(const cuda_backend *b, const weft_tensor *w, const weft_tensor *nwt,
                      uint32_t dt, int sw, int N, int D, CUdeviceptr xp, CUdeviceptr wp,
                      CUdeviceptr bp, CUdeviceptr rp, CUdeviceptr ro, CUdeviceptr nwp) {
    return b->gemv_loop > 0 && gemv_xs_bytes(b, sw, 1, D, dt) && b->gemv_loop_warps <= 8 &&
           b->gemv_stage <= 0 && b->gemv_max_tokens >= 1 && norm_block(D) == 1024 && D <= 4096 &&
           w->dtype == dt && nwt->dtype == dt && (!sw || bp % 16 == 0) &&
           (rp | ro | nwp) % 16 == 0 && cuda_gemv_fits(dt, xp, wp, 1, D) &&
           (sw || b->gemv_force || gemv_wins(1, N, D));
}

/* The down form's first part as a node of its own: the 5-input form writing h (out[3]). */
static weft_node nl_five(const weft_node *n) {
    weft_node five = *n;
    five.n_in = 5;
    five.n_out = 3;
    five.out[0] = n->out[3];
    five.p.i[2] = 0;
    return five;
}

static weft_status mlp_barrier(cuda_backend *b, CUdeviceptr *out, weft_error *err) {
    cuda_ops_state *o = ops_of(b);
    if (!o) return cuda_fail(err, WEFT_ERR_NOMEM, "op state");
    if (!o->mlp_bar) { /* first step: setup, not per step */
        TRY(cuda_arena_alloc(b, 2 * sizeof(uint32_t), &o->mlp_bar, err));
        CK(cuMemsetD32Async(o->mlp_bar, 0, 2, b->stream), "zeroing the MLP kernel's barrier");
    }
    *out = o->mlp_bar;
    return WEFT_OK;
}

/* the down form as one kernel (op_norm_linear): gate|up's looped grid and down's, both sized
 * for the one kernel, the larger launched */
static weft_status mlp_launch(cuda_backend *b, uint32_t dt, CUdeviceptr xp, CUdeviceptr rp,
                              CUdeviceptr nwp, CUdeviceptr ro, float eps, CUdeviceptr wp,
                              CUdeviceptr bp, CUdeviceptr hp, int F, int D, CUdeviceptr wdp,
                              CUdeviceptr op, weft_error *err) {
    const char *name = b->gemv_x_async ? "weft_gemv_mlp_nlp_xa_1" : "weft_gemv_mlp_nlp_xs_1";
    CUfunction f;
    TRY(kern(b, dt, dt, name, &f, err));
    /* gemv_x_addnorm's row, norm weights and res, then h */
    unsigned xs = (unsigned)((3 * D > F ? 3 * D : F) * (int)elem_size(dt)), g1, g2;
    int S = cuda_gemv_split(b, D), Sd = cuda_gemv_split(b, F), per, perd;
    TRY(gemv_lp_grid(b, f, 256, xs, F, S, &g1, &per, err));
    TRY(gemv_lp_grid(b, f, 256, xs, D, Sd, &g2, &perd, err));
    CUdeviceptr bar;
    TRY(mlp_barrier(b, &bar, err));
    void *args[] = {&xp, &rp, &nwp, &ro,  &eps, &wp, &bp,   &hp, &F,
                    &D,  &S,  &per, &wdp, &op,  &Sd, &perd, &bar};
    return gemv_launch(b, f, name, g1 > g2 ? g1 : g2, xs, args, err);
}

static weft_status op_norm_linear(void *st, const weft_exec_ctx *c, const weft_node *n,
                                  weft_error *err) {
    cuda_backend *b = st;
    const int down = n->n_in == 6 && n->p.i[2] == 1;
    const weft_tensor *x = tin(c, n, 0), *nwt = tin(c, n, 2), *w = tin(c, n, 3),
                      *o = &c->graph->tensors[n->out[down ? 3 : 0]];
    const int sw = n->p.i[0] == 1;
    int T = (int)c->n_tokens, D = (int)cols_of(x), N = (int)cols_of(o);
    if (T == 0) return WEFT_OK;
    CUdeviceptr xp = din(c, n, 0), rp = din(c, n, 1), nwp = din(c, n, 2), wp = din(c, n, 3),
                bp = din(c, n, 4), op = dout(c, n, down ? 3 : 0), ro = dout(c, n, 1),
                yp = dout(c, n, 2);
    if (sw && n->p.i[1] == 1) bp = wp + (CUdeviceptr)N * D * elem_size(w->dtype); /* w_up */
    float eps = n->p.f[0];
    uint32_t dt = x->dtype;
    int out_f32 = o->dtype != dt;
    CK(cuCtxSetCurrent(b->ctx), "making the context current");
    int one = T == 1 && nl_one_row(b, w, nwt, dt, sw, N, D, xp, wp, bp, rp, ro, nwp);
    if (down) { /* N is F here: h's width, the down product's K */
        const weft_tensor *wd = tin(c, n, 5);
        CUdeviceptr wdp = din(c, n, 5), dp = dout(c, n, 0);
        if (one && wd->dtype == dt && c->graph->tensors[n->out[0]].dtype == dt &&
            gemv_xs_bytes(b, 0, 1, N, dt) && cuda_gemv_fits(dt, op, wdp, 1, N) &&
            (b->gemv_force || gemv_wins(1, D, N)))
            return mlp_launch(b, dt, xp, rp, nwp, ro, eps, wp, bp, op, N, D, wdp, dp, err);
        /* the 5-input form into h (its one-row kernel or the unfused pair), then the down
         * product */
        weft_node five = nl_five(n);
        TRY(op_norm_linear(st, c, &five, err));
        return cuda_linear(b, op, dt, wdp, wd->dtype, 0, dp, c->graph->tensors[n->out[0]].dtype, T,
                           D, N, err);
    }
    if (one) {
        unsigned xs = gemv_xs_bytes(b, sw, 1, D, dt);
        /* option gemv_nl_defer: the gate|up product's _d form (core.cu gemv_loop's DEFER), the
         * fold that runs right after o and so beside the fused attention's last blocks; a
         * linear fold (q|k|v, after down) never shares an SM with a live attention block and
         * keeps the plain form (40 registers, six blocks an SM, where the _d one takes 48) */
        const char *name = !sw                ? "weft_gemv_nlp_xs_1"
                           : b->gemv_nl_defer ? "weft_gemv_swiglu_nlp_xs_d_1"
                                              : "weft_gemv_swiglu_nlp_xs_1";
        CUfunction f;
        TRY(kern(b, dt, dt, name, &f, err));
        int S = cuda_gemv_split(b, D), per;
        unsigned lp;
        xs *= 3; /* the row, the norm weights, then res (core.cu gemv_x_addnorm) */
        /* option gemv_nl_smem_min: a floor on the request (placement only: the kernel uses the
         * row's share), so that with attn_smem_min the fold's blocks, launched while the fused
         * attention still runs, find no room beside its blocks; the grid is sized for it */
        xs = smem_floor(xs, b->gemv_nl_smem_min);
        TRY(gemv_lp_grid(b, f, 256, xs, N, S, &lp, &per, err));
        if (sw) {
            void *args[] = {&xp, &rp, &nwp, &ro, &eps, &wp, &bp, &op, &N, &D, &S, &per};
            return gemv_launch(b, f, name, lp, xs, args, err);
        }
        void *args[] = {&xp, &rp, &nwp, &ro, &eps, &wp, &bp, &op, &out_f32, &N, &D, &S, &per};
        return gemv_launch(b, f, name, lp, xs, args, err);
    }
    TRY(add_rmsnorm_launch(b, dt, nwt->dtype, xp, rp, nwp, yp, ro, T, D, eps, NULL, err));
    if (sw) return swiglu_gemv(b, n->name, dt, w->dtype, yp, wp, bp, op, T, N, D, err);
    return cuda_linear(b, yp, dt, wp, w->dtype, bp, op, o->dtype, T, N, D, err);
}

static int32_t accepts_norm_linear(void *st, const weft_graph *g, const weft_node *n) {
    if (n->n_in == 6 && n->n_out == 4 && n->p.i[2] == 1 && n->p.i[0] == 1) {
        /* the down form: the 5-input form into h (out[3]), then the down LINEAR (in[5], no
         * bias) of h into out[0], of x's width and dtype */
        if (n->in[5] >= g->n_tensors || n->out[3] >= g->n_tensors || n->out[0] >= g->n_tensors ||
            n->in[0] >= g->n_tensors)
            return 0;
        weft_node five = nl_five(n);
        const weft_tensor *x = &g->tensors[n->in[0]], *h = &g->tensors[n->out[3]],
                          *wd = &g->tensors[n->in[5]], *o = &g->tensors[n->out[0]];
        return accepts_norm_linear(st, g, &five) && h->dtype == x->dtype && wd->rank == 2 &&
               wd->shape[0] == cols_of(x) && wd->shape[1] == cols_of(h) && is_float(wd->dtype) &&
               o->dtype == x->dtype && cols_of(o) == cols_of(x);
    }
    if (n->n_in != 5 || n->n_out != 3 || n->p.i[2] != 0) return 0;
    const int sw = n->p.i[0] == 1, merged = sw && n->p.i[1] == 1;
    if (n->p.i[0] != 0 && !sw) return 0;
    /* in[4] (the bias, or the up rows unless merged) may be absent */
    const int opt4 = !sw || merged;
    for (uint32_t i = 0; i < 5; i++)
        if (n->in[i] >= g->n_tensors && !(i == 4 && opt4 && n->in[i] == WEFT_TENSOR_NONE))
            return 0;
    for (uint32_t i = 0; i < 3; i++)
        if (n->out[i] >= g->n_tensors) return 0;
    const weft_tensor *x = &g->tensors[n->in[0]], *nw = &g->tensors[n->in[2]],
                      *w = &g->tensors[n->in[3]], *o = &g->tensors[n->out[0]];
    int64_t D = cols_of(x);
    if (!is_float(x->dtype) || !is_float(nw->dtype) || numel(nw) != D || w->rank != 2 ||
        w->shape[1] != D || w->shape[0] <= 0 || w->shape[0] > (1 << 24) || !is_float(w->dtype))
        return 0;
    const weft_tensor *same[3] = {&g->tensors[n->in[1]], &g->tensors[n->out[1]],
                                  &g->tensors[n->out[2]]};
    for (int i = 0; i < 3; i++)
        if (same[i]->dtype != x->dtype || cols_of(same[i]) != D) return 0;
    int64_t N = cols_of(o);
    if (!sw) /* LINEAR's rule: the product in x's dtype or f32 */
        return w->shape[0] == N && (o->dtype == x->dtype || o->dtype == WEFT_DTYPE_F32) &&
               (n->in[4] == WEFT_TENSOR_NONE ||
                (numel(&g->tensors[n->in[4]]) == N && g->tensors[n->in[4]].dtype == w->dtype));
    /* fuse.linear_swiglu's own rules, on the product as it stood (reading y) */
    weft_node p = {.op = n->op, .n_in = merged ? 2 : 3, .n_out = 1};
    p.in[0] = n->out[2], p.in[1] = n->in[3], p.in[2] = n->in[4], p.out[0] = n->out[0];
    p.p.i[0] = merged;
    return accepts_linear_swiglu(st, g, &p);
}

/* ---- registration --------------------------------------------------------------------- */
/* setup: which nodes this backend can run. */
static int32_t accepts(void *st, const weft_graph *g, const weft_node *n) {
    for (uint32_t i = 0; i < n->n_in; i++) {
        if (n->in[i] == WEFT_TENSOR_NONE) continue;
        if (n->in[i] >= g->n_tensors) return 0;
        uint32_t d = g->tensors[n->in[i]].dtype;
        if (!is_float(d) && d != WEFT_DTYPE_I32) return 0;
    }
    if (n->op == WEFT_OP_LINEAR || n->op == WEFT_OP_LM_HEAD)
        return g->tensors[n->in[0]].dtype == g->tensors[n->in[1]].dtype;
    if (n->op == WEFT_OP_ATTENTION) return n->p.i[3] <= 256;
    return 1;
}

weft_status cuda_register_ops(void *st, const weft_ops_service *ops, weft_error *err) {
    static const struct {
        uint32_t op;
        weft_op_fn fn;
    } table[] = {
        {WEFT_OP_EMBED, op_embed},           {WEFT_OP_LINEAR, op_linear},
        {WEFT_OP_RMSNORM, op_rmsnorm},       {WEFT_OP_ROPE, op_rope},
        {WEFT_OP_ATTENTION, op_attention},   {WEFT_OP_SWIGLU, op_swiglu},
        {WEFT_OP_ADD, op_add},               {WEFT_OP_ACTIVATION, op_activation},
        {WEFT_OP_LM_HEAD, op_lm_head},       {WEFT_OP_SCALE, op_scale},
        {WEFT_OP_ADD_RMSNORM, op_add_rmsnorm}, {WEFT_OP_COPY, op_copy},
        {WEFT_OP_SPLIT, op_split},
    };
    if (!ops || !ops->add) return cuda_fail(err, WEFT_ERR_INVALID, "register_ops: no ops service");
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        weft_op_impl impl;
        memset(&impl, 0, sizeof(impl));
        impl.size = sizeof(impl);
        impl.op = table[i].op;
        snprintf(impl.backend, sizeof(impl.backend), "cuda");
        impl.dtype = 0;
        impl.priority = 0;
        impl.run = table[i].fn;
        impl.state = st;
        impl.accepts = accepts;
        snprintf(impl.provider, sizeof(impl.provider), "cuda");
        weft_status s = ops->add(ops->self, &impl, err);
        if (s) return s;
    }
    /* The fused ops of the fuse.* techniques, registered by name through the graph service
     * (absent when the host offers none, e.g. a test that drives the backend alone). */
    cuda_backend *b = st;
    const weft_graph_service *gs =
        b->host && b->host->get_service ? b->host->get_service(b->host, WEFT_SERVICE_GRAPH, 1)
                                        : NULL;
    if (!gs || !gs->op_register) return WEFT_OK;
    static const struct {
        const char *name;
        weft_op_fn fn;
        int32_t (*acc)(void *, const weft_graph *, const weft_node *);
    } fused[] = {
        {"fuse.linear_swiglu", op_linear_swiglu, accepts_linear_swiglu},
        {"fuse.qkv_rope", op_qkv_rope, accepts_qkv_rope},
        {"exec.l2_prefetch", op_l2_prefetch, accepts_l2_prefetch},
        {"fuse.rope_attention", op_rope_attention, accepts_rope_attention},
        {"fuse.linear_add_rmsnorm", op_linear_add_rmsnorm, accepts_linear_add_rmsnorm},
        {"fuse.norm_linear", op_norm_linear, accepts_norm_linear},
    };
    for (size_t i = 0; i < sizeof(fused) / sizeof(fused[0]); i++) {
        uint32_t id = gs->op_register(fused[i].name, err);
        if (id == 0 || id == WEFT_TENSOR_NONE)
            return cuda_fail(err, WEFT_ERR_INTERNAL, "register_ops: cannot register op %s",
                             fused[i].name);
        weft_op_impl impl;
        memset(&impl, 0, sizeof(impl));
        impl.size = sizeof(impl);
        impl.op = id;
        snprintf(impl.backend, sizeof(impl.backend), "cuda");
        impl.run = fused[i].fn;
        impl.state = st;
        impl.accepts = fused[i].acc;
        snprintf(impl.provider, sizeof(impl.provider), "cuda");
        weft_status s = ops->add(ops->self, &impl, err);
        if (s) return s;
        if (i == 0) b->op_linear_swiglu = id;
        else if (i == 1) b->op_qkv_rope = id;
    }
    return WEFT_OK;
}
