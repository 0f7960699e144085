// core.cu: the cuda backend's plain kernels, compiled at first use by NVRTC for the device's
// exact architecture. One module per (activation dtype, weight dtype) pair: WEFT_TA and WEFT_TW
// are 1 (f32), 2 (f16) or 3 (bf16). No CUDA headers are needed: 16-bit conversions are written
// out here (bf16 by bit manipulation with round-to-nearest-even, f16 through PTX cvt; with
// WEFT_BF16_CVT, the backend's option bf16_cvt, bf16 through PTX cvt too).
// Shapes follow runtime/include/weft/graph.h; every kernel takes its row count T from the step.

typedef unsigned short u16;
#define INFINITY __int_as_float(0x7f800000)

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((unsigned)h) << 16); }
// WEFT_BF16_CVT: one cvt.rn.bf16.f32 (sm_80 and newer; no .ftz form, so subnormals are kept)
// instead of about six integer instructions, on the dependent chain of every rounding. Round to
// nearest even either way, so the same bits for every value but NaN (0x7fff, the hardware's
// canonical NaN, against 0x7fc0 here).
__device__ __forceinline__ u16 f32_to_bf16(float f) {
#ifdef WEFT_BF16_CVT
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
#endif
}
__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("{ .reg .f16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
    return h;
}

// The values of a 16-byte vector of dtype code D (1 f32: 4, 2 f16 / 3 bf16: 8), as the scalar
// loads read them.
template <int D> __device__ __forceinline__ void unpack_vec16(uint4 v, float *f) {
    unsigned u[4] = {v.x, v.y, v.z, v.w};
    if (D == 1) {
        for (int i = 0; i < 4; i++) f[i] = __uint_as_float(u[i]);
    } else if (D == 3) {
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(u[i] << 16);
            f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        }
    } else {
        for (int i = 0; i < 4; i++) {
            f[2 * i] = f16_to_f32((u16)(u[i] & 0xffffu));
            f[2 * i + 1] = f16_to_f32((u16)(u[i] >> 16));
        }
    }
}

template <int D> struct dt;
template <> struct dt<1> {
    typedef float T;
    static __device__ __forceinline__ float ld(const T *p, long i) { return p[i]; }
    static __device__ __forceinline__ void st(T *p, long i, float v) { p[i] = v; }
    static __device__ __forceinline__ float round(float v) { return v; }
};
template <> struct dt<2> {
    typedef u16 T;
    static __device__ __forceinline__ float ld(const T *p, long i) { return f16_to_f32(p[i]); }
    static __device__ __forceinline__ void st(T *p, long i, float v) { p[i] = f32_to_f16(v); }
    static __device__ __forceinline__ float round(float v) { return f16_to_f32(f32_to_f16(v)); }
};
template <> struct dt<3> {
    typedef u16 T;
    static __device__ __forceinline__ float ld(const T *p, long i) { return bf16_to_f32(p[i]); }
    static __device__ __forceinline__ void st(T *p, long i, float v) { p[i] = f32_to_bf16(v); }
    static __device__ __forceinline__ float round(float v) { return bf16_to_f32(f32_to_bf16(v)); }
};

typedef dt<WEFT_TA> A; // activations and the kv cache
typedef dt<WEFT_TW> W; // weights (embedding table, norm weights)
typedef A::T act;
typedef W::T wgt;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Barrier over the first nt threads of the block (nt a multiple of 32). Kernel bodies sync with
// it instead of __syncthreads so that the persistent kernel (weft_persistent below) can run a
// body with fewer threads than its block: the idle warps never reach the body's barriers. A
// standalone kernel passes its whole block, where it is __syncthreads.
__device__ __forceinline__ void bsync(int nt) {
    asm volatile("bar.sync 1, %0;" ::"r"(nt) : "memory");
}

// Sum over a block of nt threads (nt a multiple of 32, at most 1024), run by nt / K physical
// threads: physical thread p holds the partial sums of threads p + k * (nt / K) in v[k]. Each
// thread's sum is reduced over its warp and the warps' sums by warp 0 in the same order for
// every K, so a 1024-thread norm gives the same bits run by 256 threads (K = 4).
template <int K> __device__ float block_sum(const float *v, int nt) {
    __shared__ float part[32];
    int np = nt / K;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < K; k++) {
        float s = warp_sum(v[k]);
        if (lane == 0) part[warp + k * (np >> 5)] = s;
    }
    bsync(np);
#ifdef WEFT_NORM_SUM_ALL
    // the backend's option norm_sum_all: every warp adds the warps' sums itself, in warp 0's
    // order (the same bits in every warp), so no barrier and shared total follow the sum; the
    // barrier after lets a later call rewrite part once every warp has read it. Measured: the
    // joins faster, Qwen3-0.6B's step 9.6% slower (the attention, o and down slowed; the
    // attention's live blocks packed onto fewer SMs; docs/perf/batch1.md, session of 2026-12-04
    // 11:46 UTC)
    float s = lane < (nt >> 5) ? part[lane] : 0.f;
    s = warp_sum(s);
    bsync(np);
    return s;
#else
    __shared__ float total;
    if (warp == 0) {
        float s = lane < (nt >> 5) ? part[lane] : 0.f;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    bsync(np);
    float r = total;
    bsync(np);
    return r;
#endif
}

// Programmatic dependent launch (Hopper, sm_90+). With the backend's option pdl the host
// launches every kernel of this file with programmatic stream serialization: a kernel's blocks
// may start while the previous kernel in the stream still runs. griddepcontrol.wait then blocks
// until that kernel has completed and its memory is visible, so every kernel calls pdl_enter()
// before it reads or writes anything an earlier kernel touches (only the GEMV's weight loads,
// which no kernel writes, come before it), and before any early return: a kernel that finished
// without waiting could complete before its predecessor, and a normal launch after it would
// then no longer be ordered after that predecessor. griddepcontrol.launch_dependents (right
// after the wait, or before it with WEFT_PDL_EARLY below) lets the next kernel's blocks launch
// (and issue their own weight loads) while this one runs; launched without the attribute both
// instructions do nothing, so one kernel serves both modes and the results are the same bits.
// With the backend's option trace (WEFT_TRACE), the first thread of the first block also stamps
// the global timer into a ring once past the wait: a kernel passes its wait when the kernel
// before it has completed, so consecutive stamps give each kernel's time on the critical path
// of the stream or replayed graph (cuda_backend.c prints them when the backend closes).
__device__ __forceinline__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#ifdef WEFT_TRACE
#define WEFT_TRACE_RING 16384
extern "C" __device__ unsigned long long weft_trace_ring[WEFT_TRACE_RING];
extern "C" __device__ unsigned weft_trace_count;
__device__ unsigned long long weft_trace_ring[WEFT_TRACE_RING];
__device__ unsigned weft_trace_count;
#endif
__device__ __forceinline__ void trace_mark() {
#ifdef WEFT_TRACE
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
        weft_trace_ring[atomicAdd(&weft_trace_count, 1u) % WEFT_TRACE_RING] = globaltimer();
#endif
}
// Stages inside one kernel (weft_rope_attention): for each of the last 64 launches, the time
// the last block reached stage L (atomicMax of the global timer), indexed by a launch counter
// that the launch's merging block advances at its end. Trace builds only. Stages in the
// kernel's order: 0 start, 1 wait passed, 7 q|k|v rows read, 2 K/V staged, 3 RoPE done,
// 4 attended, 5 arrived, 6 merged (cuda_trace.c prints them in that order); 8 the time block
// (0, 0, 0) passed its wait (the kernel's start on the critical path, as trace_mark's ring has
// it), so that blocks starting after it (a second wave) show.
#ifdef WEFT_TRACE
#define WEFT_TRACE_STAGES 9
extern "C" __device__ unsigned long long weft_trace_stage[64][WEFT_TRACE_STAGES];
extern "C" __device__ unsigned weft_trace_launch;
__device__ unsigned long long weft_trace_stage[64][WEFT_TRACE_STAGES];
__device__ unsigned weft_trace_launch;
#define STAGE_MARK(inv, L)                                                                         \
    do {                                                                                           \
        if (threadIdx.x == 0) atomicMax(&weft_trace_stage[(inv) % 64][L], globaltimer());          \
    } while (0)
#define STAGE_FIRST(inv)                                                                           \
    do {                                                                                           \
        if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)             \
            weft_trace_stage[(inv) % 64][8] = globaltimer();                                       \
    } while (0)
// Per block of the latest launch (trace builds, its first 1,024 blocks): when it started, the
// SM it ran on, and when it finished its split's scores and sums (0: an empty split), so the
// report shows how the grid's blocks reach the SMs (cuda_trace.c report_blocks).
#define WEFT_TRACE_BLOCKS 1024
extern "C" __device__ unsigned long long weft_trace_blk[WEFT_TRACE_BLOCKS][2];
extern "C" __device__ unsigned weft_trace_blk_sm[WEFT_TRACE_BLOCKS];
extern "C" __device__ unsigned weft_trace_blk_n;
__device__ unsigned long long weft_trace_blk[WEFT_TRACE_BLOCKS][2];
__device__ unsigned weft_trace_blk_sm[WEFT_TRACE_BLOCKS];
__device__ unsigned weft_trace_blk_n;
__device__ __forceinline__ unsigned trace_blk_id() {
    return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
#define BLOCK_START()                                                                              \
    do {                                                                                           \
        unsigned id_ = trace_blk_id();                                                             \
        if (threadIdx.x == 0 && id_ < WEFT_TRACE_BLOCKS) {                                         \
            unsigned sm_;                                                                          \
            asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                                       \
            weft_trace_blk[id_][0] = globaltimer();                                                \
            weft_trace_blk[id_][1] = 0;                                                            \
            weft_trace_blk_sm[id_] = sm_;                                                          \
            if (id_ == 0) weft_trace_blk_n = gridDim.x * gridDim.y * gridDim.z;                    \
        }                                                                                          \
    } while (0)
#define BLOCK_ATTENDED()                                                                           \
    do {                                                                                           \
        unsigned id_ = trace_blk_id();                                                             \
        if (threadIdx.x == 0 && id_ < WEFT_TRACE_BLOCKS) weft_trace_blk[id_][1] = globaltimer();   \
    } while (0)
#define STAGE_LAUNCH() (*(volatile unsigned *)&weft_trace_launch)
// The most live blocks of one launch on one SM, for each of the last 64 launches (the stages'
// slots): each live block counts itself on its SM in its launch's slot and raises the slot's
// maximum to its count; block (0, 0, 0) of launch inv clears slot inv + 32, whose launch is long
// done and which is not used for 32 more launches (cuda_trace.c report_stages sets each launch's
// time beside it)
extern "C" __device__ unsigned weft_trace_pack_sm[64][256];
extern "C" __device__ unsigned weft_trace_pack[64];
__device__ unsigned weft_trace_pack_sm[64][256];
__device__ unsigned weft_trace_pack[64];
#define BLOCK_LIVE(inv)                                                                            \
    do {                                                                                           \
        if (threadIdx.x == 0) {                                                                    \
            unsigned c_ = atomicAdd(&weft_trace_pack_sm[(inv) % 64][sm_id() & 255], 1u) + 1u;      \
            atomicMax(&weft_trace_pack[(inv) % 64], c_);                                           \
        }                                                                                          \
    } while (0)
#define PACK_CLEAR(inv, nt)                                                                        \
    do {                                                                                           \
        if (trace_blk_id() == 0)                                                                   \
            for (int i_ = threadIdx.x; i_ <= 256; i_ += (nt)) {                                    \
                if (i_ < 256)                                                                      \
                    weft_trace_pack_sm[((inv) + 32) % 64][i_] = 0;                                 \
                else                                                                               \
                    weft_trace_pack[((inv) + 32) % 64] = 0;                                        \
            }                                                                                      \
    } while (0)
#define STAGE_NEXT()                                                                               \
    do {                                                                                           \
        if (threadIdx.x == 0) atomicAdd(&weft_trace_launch, 1u);                                   \
    } while (0)
// The looped plain GEMV's blocks (trace builds, the first 1,024 blocks of the latest launch of
// each of two sites: 0 a square product, the o projection of Qwen3-8B and Llama-3.2-1B, or the
// unlooped _xs product launched right after the fused attention (the o projection of the small
// models); 1 a looped one with K > N, the down projection, or the unlooped _xs product launched
// right after the residual join (Qwen3-0.6B's q|k|v)): when each block started, passed its
// wait, had x in shared memory, finished (summed) its first group and stored its last, its SM,
// and (stamp 5) when warp 0 had its first batch of weights in registers, which it then waits
// for before its wait (cuda_trace.c report_gemv)
#define WEFT_TRACE_GSTAMPS 6
extern "C" __device__ unsigned long long weft_trace_gemv[2][WEFT_TRACE_BLOCKS][WEFT_TRACE_GSTAMPS];
extern "C" __device__ unsigned weft_trace_gemv_sm[2][WEFT_TRACE_BLOCKS];
extern "C" __device__ unsigned weft_trace_gemv_n[2][3];
__device__ unsigned long long weft_trace_gemv[2][WEFT_TRACE_BLOCKS][WEFT_TRACE_GSTAMPS];
__device__ unsigned weft_trace_gemv_sm[2][WEFT_TRACE_BLOCKS];
__device__ unsigned weft_trace_gemv_n[2][3]; // blocks, N, K
__device__ __forceinline__ int gemv_trace_site(int N, int K) {
    return N == K ? 0 : K > N ? 1 : -1;
}
#define GEMV_MARK(site, j)                                                                         \
    do {                                                                                           \
        if ((site) >= 0 && threadIdx.x == 0 && blockIdx.x < WEFT_TRACE_BLOCKS) {                   \
            weft_trace_gemv[site][blockIdx.x][j] = globaltimer();                                  \
            if ((j) == 0) {                                                                        \
                unsigned sm_;                                                                      \
                asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                                   \
                weft_trace_gemv_sm[site][blockIdx.x] = sm_;                                        \
            }                                                                                      \
        }                                                                                          \
    } while (0)
// the launch's grid and shape for the block trace's report, by its first block's first thread
#define GEMV_SHAPE(site, N, K)                                                                     \
    do {                                                                                           \
        if ((site) >= 0 && blockIdx.x == 0 && threadIdx.x == 0) {                                  \
            weft_trace_gemv_n[site][0] = gridDim.x;                                                \
            weft_trace_gemv_n[site][1] = (unsigned)(N);                                            \
            weft_trace_gemv_n[site][2] = (unsigned)(K);                                            \
        }                                                                                          \
    } while (0)
#else
#define STAGE_MARK(inv, L) ((void)(inv))
#define STAGE_FIRST(inv) ((void)(inv))
#define BLOCK_START() ((void)0)
#define BLOCK_ATTENDED() ((void)0)
#define STAGE_LAUNCH() 0u
#define BLOCK_LIVE(inv) ((void)(inv))
#define PACK_CLEAR(inv, nt) ((void)(inv))
#define STAGE_NEXT() ((void)0)
#define GEMV_MARK(site, j) ((void)(site))
#define GEMV_SHAPE(site, N, K) ((void)(site))
__device__ __forceinline__ int gemv_trace_site(int, int) { return -1; }
#endif
// The block trace's stamp 5 (trace builds): warp 0 of a block of site `site` waits for its first
// batch of weights (wv, when the block has a row: has) and stamps. A branch on the loaded bits,
// so the stamp's timer read cannot be scheduled before the loads land (an empty asm using them
// emits nothing for ptxas to order after them). Nothing outside trace builds.
template <int NW>
__device__ __forceinline__ void gemv_mark_batch(int site, const uint4 (*wv)[NW], bool has, int v,
                                                int stride, int nv) {
#ifdef WEFT_TRACE
    if (site >= 0 && threadIdx.x < 32) {
        unsigned z = 0;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (has && v + j * stride < nv) z ^= wv[j][0].x;
        if (z == 0x9e3779b9u) weft_trace_gemv[site][blockIdx.x % WEFT_TRACE_BLOCKS][5] = 1;
        else GEMV_MARK(site, 5);
    }
#else
    (void)site, (void)wv, (void)has, (void)v, (void)stride, (void)nv;
#endif
}
// WEFT_PDL_EARLY (the backend's option pdl_early): the trigger comes before the wait, so the
// next kernel may launch as soon as every block of this one is resident, while this one still
// waits for its own predecessor; a chain of kernels then becomes resident ahead of its data, as
// far as registers and shared memory allow, each streaming what it may read early. The next
// kernel still launches only once all of this kernel's blocks have started (the trigger counts
// every block), so no kernel's blocks can be kept off the SMs by its successors'. What a kernel
// reads before its wait must then be written by no kernel of the step at all, not merely by
// none of the last two: weights, the kv cache rows of earlier steps, and the step's inputs
// (filled by copies ordered before the step's first kernel).
// WEFT_PDL_L1 (the backend's option pdl_l1, off): right after the wait the kernel drops every
// line of its SM's L1. The wait compiles to ACQBULK alone, with no L1 invalidation in the code,
// and under PDL a kernel's blocks may be resident while an earlier kernel on the same SM still
// reads through L1 data that a later kernel rewrites; this guards against such a line being
// stale. bench/stale_reads.cu looked for one (A caches x, B rewrites it, C reads it, C resident
// before A's reads) and found none in 200 rounds of every form on an H100, so the hardware keeps
// the wait's promise of visible writes here; the option stays to check other parts, at 1.2-2.7%
// (docs/perf/batch1.md, session of 2026-12-05, 14:58 UTC). An acquire at GPU scope must not
// read stale lines, so the compiler emits one as the load and an L1 invalidation (CCTL.IVALL);
// of a shared-memory word and unused, the load itself is dropped.
__device__ __forceinline__ void pdl_l1_drop() {
#ifdef WEFT_PDL_L1
    // the loaded value goes to a register local to the asm: ptxas then drops the load and keeps
    // the invalidation (nvcc 13.0, sm_90a: ACQBULK, CCTL.IVALL)
    __shared__ unsigned pdl_word;
    asm volatile("{\n\t.reg .u32 t;\n\tld.acquire.gpu.shared::cta.u32 t, [%0];\n\t}" ::"r"(
                     (unsigned)__cvta_generic_to_shared(&pdl_word))
                 : "memory");
#endif
}
__device__ __forceinline__ void pdl_enter() {
#if __CUDA_ARCH__ >= 900
#ifdef WEFT_PDL_EARLY
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#else
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    pdl_l1_drop();
#endif
    trace_mark();
}

// WEFT_ABLATE (the backend's option ablate; profiling only, the step's outputs are then wrong):
// a mask of kernel classes that launch, wait for their predecessor and exit without any work
// (their outputs keep whatever the buffers held), so a decode benchmark measures how fast the
// step would be if that class cost nothing beyond its kernel boundary: 1 the fused attention
// (which stores zeros as its output: stale attention outputs grew into non-finite logits on
// Llama-3.2-1B and Qwen3-8B, and the device sampler's slow path for those then dominated),
// 2 the fused add + RMSNorm, 4 the GEMV products (before their weight loads, so no weight is
// read). docs/perf/batch1.md has the Amdahl bounds measured this way.
#ifdef WEFT_ABLATE
#define ABLATE(bit)                                                                                \
    do {                                                                                           \
        if (WEFT_ABLATE & (bit)) {                                                                 \
            pdl_enter();                                                                           \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#else
#define ABLATE(bit) ((void)0)
#endif

// Option gemv_l2_sm / gemv_l2_first (the looped product after the fused attention, gemv_loop's
// L2 bits): each live block of the fused attention adds one to its SM's count here before its
// wait; that product's blocks read their SM's count before their own wait, and its block 0
// zeroes the counts after it. The counts steer only where loads are issued, never a value, so
// a race in them can cost time but cannot change an output. At file scope, outside the
// dtype-dependent sections, so every define set declares them once.
#define WEFT_SM_SLOTS 256
__device__ unsigned weft_sm_attn[WEFT_SM_SLOTS];
// the L2 loads' xor lands here only when it equals a constant no weight pattern is expected to
// give: a use the compiler must keep, taken after the block's last group
__device__ unsigned weft_l2_sink;
// One 4-byte load with the L2::256B hint, around L1: it brings the 256-byte span at p into L2
// (the L2 loads of options gemv_l2_rest, gemv_l2_join and join_l2); volatile, so it is issued
// even where its word is used only as a sink's condition.
__device__ __forceinline__ unsigned ld_l2_256(const void *p) {
    unsigned v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ unsigned sm_id() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}
// This SM's count in weft_sm_attn, and all the counts zeroed by a block of NT threads.
__device__ __forceinline__ unsigned *sm_attn_slot() {
    return &weft_sm_attn[sm_id() % WEFT_SM_SLOTS];
}
template <int NT> __device__ __forceinline__ void sm_attn_zero() {
    for (int i = threadIdx.x; i < WEFT_SM_SLOTS; i += NT) weft_sm_attn[i] = 0;
}
// x (T,D) <- table (V,D) rows of tokens; ids outside [0,V) give zero rows (the host refuses them).
// The bodies' block-strided loops carry `#pragma unroll 1`: with the thread count a parameter
// instead of blockDim.x the compiler unrolled them 4x, making the small kernels' code 2-3x longer,
// the likely cause of the refactor's 2.5% on Qwen3-0.6B's batch-1 decode (docs/perf/persistent.md;
// not yet re-measured). One iteration per trip is what they compiled to before the refactor, and
// the arithmetic order is the same either way.
// Every kernel below is a __device__ body taking its block index and thread count explicitly
// (the kernel's blockIdx and blockDim), wrapped by a thin __global__ kernel: the persistent
// kernel runs the same bodies, so both paths compute the same bits.
__device__ __forceinline__ void embed_body(const int *tokens, const wgt *table, act *x, int T,
                                           int D, int V, int t, int nt) {
    if (t >= T) return;
    int id = tokens[t];
    bool ok = id >= 0 && id < V;
    #pragma unroll 1
    for (int i = threadIdx.x; i < D; i += nt)
        A::st(x, (long)t * D + i, ok ? W::ld(table, (long)id * D + i) : 0.f);
}
// The launched kernel moves the row as 16-byte vectors, every load of a trip (up to 4 a thread)
// issued before its first store: embed_body's element loop stores each value before the next
// load may issue, so a 4,096-wide row at 256 threads cost 16 DRAM round trips in series (the
// table is far larger than L2); here it costs one. The same values: unpack_vec16 reads a vector
// as W::ld reads its elements, and each is stored by A::st, zeros for an id outside [0, V).
// Rows off 16-byte vectors (D not a multiple of one, or the table misaligned) take embed_body.
extern "C" __global__ void weft_embed(const int *tokens, const wgt *table, act *x, int T, int D,
                                      int V) {
    pdl_enter();
    constexpr int E = 16 / (int)sizeof(wgt);
    if (D % E || ((unsigned long long)table & 15)) {
        embed_body(tokens, table, x, T, D, V, blockIdx.x, blockDim.x);
        return;
    }
    const int t = blockIdx.x, nt = blockDim.x, nv = D / E;
    if (t >= T) return;
    const int id = tokens[t];
    const bool ok = id >= 0 && id < V;
    const uint4 *src = (const uint4 *)(table + (long)(ok ? id : 0) * D);
    act *dst = x + (long)t * D;
    #pragma unroll 1
    for (int v0 = threadIdx.x; v0 < nv; v0 += 4 * nt) {
        uint4 wv[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int v = v0 + j * nt;
            wv[j] = ok && v < nv ? __ldg(src + v) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int v = v0 + j * nt;
            if (v >= nv) break;
            float f[E];
            unpack_vec16<WEFT_TW>(wv[j], f);
#pragma unroll
            for (int e = 0; e < E; e++) A::st(dst, (long)v * E + e, f[e]);
        }
    }
}

// The partial sums of squares a norm hands to block_sum<K>: virtual thread threadIdx.x + k * np
// (np = nt / K physical threads) sums val(i)^2 over i = that, + nt, + 2 nt, ... below n, in that
// order, into ss[k]; val may store what it computes (the fused norm's r).
template <int K, class Val>
__device__ __forceinline__ void norm_sumsq(float *ss, int n, int nt, Val val) {
    const int np = nt / K;
#pragma unroll
    for (int k = 0; k < K; k++) {
        ss[k] = 0.f;
        #pragma unroll 1
        for (int i = threadIdx.x + k * np; i < n; i += nt) {
            float v = val(i);
            ss[k] = fmaf(v, v, ss[k]);
        }
    }
}

// One block per group of `group` elements (group = cols for a whole-row norm).
// As transformers: normalise in f32, round to the activation dtype, then multiply by the weight.
// K: virtual threads per physical thread (block_sum); nt the kernel's block size.
template <int K>
__device__ __forceinline__ void rmsnorm_body(const act *x, const wgt *w, act *y, int T, int cols,
                                             int group, float eps, long g, int nt) {
    int groups = cols / group;
    if (g >= (long)T * groups) return;
    long base = g * group;
    int np = nt / K;
    float ss[K];
    norm_sumsq<K>(ss, group, nt, [&](int i) { return A::ld(x, base + i); });
    float r = rsqrtf(block_sum<K>(ss, nt) / group + eps);
    #pragma unroll 1
    for (int i = threadIdx.x; i < group; i += np)
        A::st(y, base + i, W::ld(w, i) * A::round(A::ld(x, base + i) * r));
}
// The launched kernel, when a group fits NORM_MAXE elements a thread (every model row and head
// here at norm_block's sizes): the norm weights are loaded before griddepcontrol.wait (no kernel
// writes them) and a thread's x values in one round of loads after it, where rmsnorm_body's
// loops wait for each load in turn (at a 4,096-wide row, layer 0's attention norm: four L2 round
// trips for the sums, then four DRAM ones for the weights). The same sums in the same order
// (virtual thread = thread, elements tid, tid + nt, ...) and the same expression for y.
#define NORM_MAXE 8
extern "C" __global__ void weft_rmsnorm(const act *x, const wgt *w, act *y, int T, int cols,
                                        int group, float eps) {
    const int nt = blockDim.x;
    if (group > NORM_MAXE * nt) {
        pdl_enter();
        rmsnorm_body<1>(x, w, y, T, cols, group, eps, blockIdx.x, nt);
        return;
    }
    float wv[NORM_MAXE], vv[NORM_MAXE];
#pragma unroll
    for (int j = 0; j < NORM_MAXE; j++) {
        const int i = threadIdx.x + j * nt;
        wv[j] = i < group ? W::ld(w, i) : 0.f;
    }
    pdl_enter();
    const long g = blockIdx.x;
    if (g >= (long)T * (cols / group)) return;
    const long base = g * group;
#pragma unroll
    for (int j = 0; j < NORM_MAXE; j++) {
        const int i = threadIdx.x + j * nt;
        vv[j] = i < group ? A::ld(x, base + i) : 0.f;
    }
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < NORM_MAXE; j++)
        if (threadIdx.x + j * nt < group) ss = fmaf(vv[j], vv[j], ss);
    const float r = rsqrtf(block_sum<1>(&ss, nt) / group + eps);
#pragma unroll
    for (int j = 0; j < NORM_MAXE; j++) {
        const int i = threadIdx.x + j * nt;
        if (i < group) A::st(y, base + i, wv[j] * A::round(vv[j] * r));
    }
}

// r = x + res; y = rmsnorm(r) * w. One block per row. Launched with weft_rmsnorm's block size
// for the same row length, so every thread sums the same elements in the same order and the
// fused result is bit-identical to weft_add followed by weft_rmsnorm.
// When a thread's elements fit NORM_MAXE registers (D <= NORM_MAXE * nt / K: every model row
// here at the standalone launch), it keeps each r it stored and, launched standalone (pre),
// loads its norm weights before griddepcontrol.wait (weights are never written): after the
// wait the kernel then makes one round of loads (x, res) instead of three (x and res, then w
// and r), with the same values in the same order. Otherwise (the persistent kernels' 4-way
// virtual threads on long rows) the loops below read r and w back as before.
template <int K, bool BATCH = false>
__device__ __forceinline__ void add_rmsnorm_body(const act *x, const act *res, const wgt *w,
                                                 act *y, act *r, int T, int D, float eps, int t,
                                                 int nt, bool pre = false) {
    const int np = nt / K;
    const bool regs = D <= NORM_MAXE * np;
    float wv[NORM_MAXE];
    if (pre) {
        if (regs && t < T)
#pragma unroll
            for (int j = 0; j < NORM_MAXE; j++) {
                int i = threadIdx.x + j * np;
                wv[j] = i < D ? W::ld(w, i) : 0.f;
            }
        pdl_enter();
    }
    if (t >= T) return;
    long base = (long)t * D;
    float ss[K];
    if (regs) {
        // element j of this thread is i = tid + j * np; for each k the loop below visits
        // j = k, k + K, k + 2K, ... (i = tid + k * np + m * nt), the order of the loop after it
        float vv[NORM_MAXE], rv[NORM_MAXE];
        // BATCH (weft_add_rmsnorm_b): every x and res value first, then the sums and the stores
        // of r. With a store of r between them (r may alias x or res, so the compiler keeps
        // that order) each element costs its own L2 round trip: four in series at D = 4096.
        if (BATCH)
#pragma unroll
            for (int j = 0; j < NORM_MAXE; j++) {
                int i = threadIdx.x + j * np;
                vv[j] = i < D ? A::ld(x, base + i) : 0.f;
                rv[j] = i < D ? A::ld(res, base + i) : 0.f;
            }
#pragma unroll
        for (int k = 0; k < K; k++) {
            ss[k] = 0.f;
#pragma unroll
            for (int j = k; j < NORM_MAXE; j += K) {
                int i = threadIdx.x + j * np;
                if (i < D) {
                    float v = A::round(BATCH ? vv[j] + rv[j]
                                             : A::ld(x, base + i) + A::ld(res, base + i));
                    A::st(r, base + i, v);
                    vv[j] = v;
                    ss[k] = fmaf(v, v, ss[k]);
                }
            }
        }
        float rs = rsqrtf(block_sum<K>(ss, nt) / D + eps);
#pragma unroll
        for (int j = 0; j < NORM_MAXE; j++) {
            int i = threadIdx.x + j * np;
            if (i < D) A::st(y, base + i, (pre ? wv[j] : W::ld(w, i)) * A::round(vv[j] * rs));
        }
        return;
    }
    norm_sumsq<K>(ss, D, nt, [&](int i) {
        float v = A::round(A::ld(x, base + i) + A::ld(res, base + i));
        A::st(r, base + i, v);
        return v;
    });
    float rs = rsqrtf(block_sum<K>(ss, nt) / D + eps);
    // element i was stored above by physical thread i % np, which reads it back here
    #pragma unroll 1
    for (int i = threadIdx.x; i < D; i += np)
        A::st(y, base + i, W::ld(w, i) * A::round(A::ld(r, base + i) * rs));
}
extern "C" __global__ void __launch_bounds__(1024)
    weft_add_rmsnorm(const act *x, const act *res, const wgt *w, act *y, act *r, int T, int D,
                     float eps) {
    ABLATE(2);
    add_rmsnorm_body<1>(x, res, w, y, r, T, D, eps, blockIdx.x, blockDim.x, true);
}
// The batched form (BATCH above) for rows of more than one element a thread (cuda_ops.c picks
// it for D > the block size): Qwen3-8B +1.0%, Llama-3.2-1B +0.5%; at one element a thread
// (Qwen3-0.6B, D = 1024) it measured 1.5% slower than the loop, which stays there.
extern "C" __global__ void __launch_bounds__(1024)
    weft_add_rmsnorm_b(const act *x, const act *res, const wgt *w, act *y, act *r, int T, int D,
                       float eps) {
    ABLATE(2);
    add_rmsnorm_body<1, true>(x, res, w, y, r, T, D, eps, blockIdx.x, blockDim.x, true);
}
// Option join_l2 (cuda_ops.c op_add_rmsnorm): the batched join with blocks T.. of its grid
// pulling the next looped product's weights into L2 while the join's one latency-bound block
// runs, so that DRAM streams bytes the product reads next instead of idling. Those blocks load
// only once past their wait, when the product before the join (the down projection) has
// completed: loads issued earlier, from the product's own blocks made resident during that
// projection's tail (option gemv_l2_join), measured taking its bandwidth. For each of the
// product's nb blocks, len bytes from pw + i * stride (cuda_ops.c join_pull_plan: the block's
// second group on; none at or past pw + total), one 4-byte load with the L2::256B hint every
// 256 bytes, eight in flight a thread. The join's own block is weft_add_rmsnorm_b's, so its
// bits; the loads change no value. Measured slower (docs/perf/batch1.md, 2026-12-03 18:02 UTC):
// the join completes only when its blocks' loads have landed.
extern "C" __global__ void __launch_bounds__(1024)
    weft_add_rmsnorm_bl(const act *x, const act *res, const wgt *w, act *y, act *r, int T, int D,
                        float eps, const char *pw, long stride, long len, long total, int nb) {
    ABLATE(2);
    if ((int)blockIdx.x < T) {
        add_rmsnorm_body<1, true>(x, res, w, y, r, T, D, eps, blockIdx.x, blockDim.x, true);
        return;
    }
    pdl_enter();
    const long per = len >> 8, n = per * nb;
    const long step = (long)(gridDim.x - T) * blockDim.x;
    unsigned acc = 0u;
    #pragma unroll 1
    for (long j0 = (long)(blockIdx.x - T) * blockDim.x + threadIdx.x; j0 < n; j0 += 8 * step) {
        unsigned v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const long j = j0 + u * step;
            const long off = j < n ? (j / per) * stride + (j % per) * 256 : total;
            v[u] = off < total ? ld_l2_256(pw + off) : 0u;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) acc ^= v[u];
    }
    if (acc == 0x9e3779b9u) weft_l2_sink = 1u;
}

// RoPE on (T, H*hd). inv_freq (rot/2) f32 precomputed on the host with the model's scaling.
// layout 0: half-split pairs (i, i+rot/2) as transformers; 1: interleaved pairs (2i, 2i+1).
__device__ __forceinline__ void rope_body(const act *x, act *y, const int *pos,
                                          const float *inv_freq, int T, int H, int hd, int rot,
                                          int layout, long idx) {
    int half = rot / 2;
    long total = (long)T * H * half;
    if (idx >= total) return;
    int i = idx % half;
    long th = idx / half;
    int h = th % H;
    int t = th / H;
    float ang = (float)pos[t] * inv_freq[i];
    float c = A::round(cosf(ang)), s = A::round(sinf(ang));
    long base = (long)t * H * hd + (long)h * hd;
    int a = layout == 0 ? i : 2 * i, b = layout == 0 ? i + half : 2 * i + 1;
    float xa = A::ld(x, base + a), xb = A::ld(x, base + b);
    A::st(y, base + a, A::round(xa * c) - A::round(xb * s));
    A::st(y, base + b, A::round(xb * c) + A::round(xa * s));
    // dims past rot (partial rotary) are copied by the pass-through loop below
    if (i == 0 && rot < hd && x != y)
        for (int j = rot; j < hd; j++) A::st(y, base + j, A::ld(x, base + j));
}
extern "C" __global__ void weft_rope(const act *x, act *y, const int *pos, const float *inv_freq,
                                     int T, int H, int hd, int rot, int layout) {
    pdl_enter();
    rope_body(x, y, pos, inv_freq, T, H, hd, rot, layout,
              (long)blockIdx.x * blockDim.x + threadIdx.x);
}

// Writes the step's k and v rows into the contiguous cache: K/V (slots, max_seq, Hkv, hd).
__device__ __forceinline__ void kv_store_body(const act *k, const act *v, const int *pos,
                                              const int *slots, act *kc, act *vc, int T, int Hkv,
                                              int hd, int max_seq, int t, int nt) {
    if (t >= T) return;
    int p = pos[t], s = slots[t];
    if (p < 0 || p >= max_seq || s < 0) return;
    long row = (long)Hkv * hd;
    long dst = ((long)s * max_seq + p) * row;
    // 16-byte copies where every address allows (one round of loads instead of row/blockDim)
    const int AV = 16 / (int)sizeof(act);
    if (row % AV == 0 && (((unsigned long long)k | (unsigned long long)v |
                           (unsigned long long)kc | (unsigned long long)vc) & 15) == 0) {
        #pragma unroll 1
        for (long i = threadIdx.x; i < row / AV; i += nt) {
            uint4 a = ((const uint4 *)(k + (long)t * row))[i];
            uint4 b = ((const uint4 *)(v + (long)t * row))[i];
            ((uint4 *)(kc + dst))[i] = a;
            ((uint4 *)(vc + dst))[i] = b;
        }
        return;
    }
    #pragma unroll 1
    for (int i = threadIdx.x; i < row; i += nt) {
        kc[dst + i] = k[(long)t * row + i];
        vc[dst + i] = v[(long)t * row + i];
    }
}
extern "C" __global__ void weft_kv_store(const act *k, const act *v, const int *pos,
                                         const int *slots, act *kc, act *vc, int T, int Hkv,
                                         int hd, int max_seq) {
    pdl_enter();
    kv_store_body(k, v, pos, slots, kc, vc, T, Hkv, hd, max_seq, blockIdx.x, blockDim.x);
}

// Attention of row t, head h over positions [start, pos[t]] of its slot's cache.
// Block: 4 warps; warp w takes positions start+w, start+w+4, ...; each lane holds head dims
// lane, lane+32, ... (hd <= 256), online softmax per warp, then a merge across warps.
#define ATT_WARPS 4
#define ATT_MAXE 8
__device__ __forceinline__ void attention_body(const act *q, const int *pos, const int *slots,
                                               const act *kc, const act *vc, act *o, int T, int Hq,
                                               int Hkv, int hd, int max_seq, int window,
                                               float scale, int t, int h) {
    if (t >= T || h >= Hq) return;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int kvh = h / (Hq / Hkv);
    int p = pos[t], s = slots[t];
    int start = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    float qr[ATT_MAXE], acc[ATT_MAXE];
    int ne = 0;
    for (int e = 0; e < ATT_MAXE; e++) {
        int d = lane + 32 * e;
        qr[e] = d < hd ? A::ld(q, (long)t * Hq * hd + (long)h * hd + d) * scale : 0.f;
        acc[e] = 0.f;
        if (d < hd) ne = e + 1;
    }
    float m = -INFINITY, l = 0.f;
    long row = (long)Hkv * hd;
    long slot_base = (long)s * max_seq * row + (long)kvh * hd;
    for (int j = start + warp; j <= p; j += ATT_WARPS) {
        const act *kr = kc + slot_base + (long)j * row;
        float dot = 0.f;
        for (int e = 0; e < ne; e++) {
            int d = lane + 32 * e;
            if (d < hd) dot += qr[e] * A::ld(kr, d);
        }
        dot = warp_sum(dot);
        float mn = fmaxf(m, dot);
        float c = __expf(m - mn), pj = __expf(dot - mn);
        const act *vr = vc + slot_base + (long)j * row;
        for (int e = 0; e < ne; e++) {
            int d = lane + 32 * e;
            if (d < hd) acc[e] = acc[e] * c + pj * A::ld(vr, d);
        }
        l = l * c + pj;
        m = mn;
    }
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
    // the per-warp accumulators (ATT_WARPS x 256 floats) live in dynamic shared memory, which
    // the persistent kernel shares between its bodies (static shared memory is not shared)
    extern __shared__ float smem[];
    float(*sacc)[256] = (float(*)[256])smem;
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
    for (int e = 0; e < ne; e++) {
        int d = lane + 32 * e;
        if (d < hd) sacc[warp][d] = acc[e];
    }
    bsync(ATT_WARPS * 32);
    if (warp == 0) {
        float M = -INFINITY;
        for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm[w]);
        float L = 0.f;
        for (int w = 0; w < ATT_WARPS; w++) L += sm[w] == -INFINITY ? 0.f : sl[w] * __expf(sm[w] - M);
        for (int e = 0; e < ne; e++) {
            int d = lane + 32 * e;
            if (d >= hd) continue;
            float v = 0.f;
            for (int w = 0; w < ATT_WARPS; w++)
                if (sm[w] != -INFINITY) v += sacc[w][d] * __expf(sm[w] - M);
            A::st(o, (long)t * Hq * hd + (long)h * hd + d, L > 0.f ? v / L : 0.f);
        }
    }
}
extern "C" __global__ void weft_attention(const act *q, const int *pos, const int *slots,
                                          const act *kc, const act *vc, act *o, int T, int Hq,
                                          int Hkv, int hd, int max_seq, int window, float scale) {
    pdl_enter();
    attention_body(q, pos, slots, kc, vc, o, T, Hq, Hkv, hd, max_seq, window, scale, blockIdx.x,
                   blockIdx.y);
}

// y = silu(gate) * up, elementwise over n.
__device__ __forceinline__ void swiglu_body(const act *g, const act *u, act *y, long n, long i) {
    if (i >= n) return;
    float a = A::ld(g, i);
    float s = A::round(a / (1.f + __expf(-a)));
    A::st(y, i, s * A::ld(u, i));
}
extern "C" __global__ void weft_swiglu(const act *g, const act *u, act *y, long n) {
    pdl_enter();
    swiglu_body(g, u, y, n, (long)blockIdx.x * blockDim.x + threadIdx.x);
}

__device__ __forceinline__ void add_body(const act *a, const act *b, act *y, long n, long i) {
    if (i < n) A::st(y, i, A::ld(a, i) + A::ld(b, i));
}
extern "C" __global__ void weft_add(const act *a, const act *b, act *y, long n) {
    pdl_enter();
    add_body(a, b, y, n, (long)blockIdx.x * blockDim.x + threadIdx.x);
}

__device__ __forceinline__ void scale_body(const act *a, act *y, float s, long n, long i) {
    if (i < n) A::st(y, i, A::ld(a, i) * s);
}
extern "C" __global__ void weft_scale(const act *a, act *y, float s, long n) {
    pdl_enter();
    scale_body(a, y, s, n, (long)blockIdx.x * blockDim.x + threadIdx.x);
}

// kind 0 silu, 1 gelu (tanh approximation, as transformers' gelu_pytorch_tanh), 2 relu
__device__ __forceinline__ void activation_body(const act *a, act *y, int kind, long n, long i) {
    if (i >= n) return;
    float x = A::ld(a, i), r;
    if (kind == 0) r = x / (1.f + __expf(-x));
    else if (kind == 1) r = 0.5f * x * (1.f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
    else r = x > 0.f ? x : 0.f;
    A::st(y, i, r);
}
extern "C" __global__ void weft_activation(const act *a, act *y, int kind, long n) {
    pdl_enter();
    activation_body(a, y, kind, n, (long)blockIdx.x * blockDim.x + threadIdx.x);
}

// out (R,D) <- x rows listed in rows (R).
__device__ __forceinline__ void gather_rows_body(const act *x, const int *rows, act *out, int R,
                                                 int D, int r, int nt) {
    if (r >= R) return;
    long src = (long)rows[r] * D;
    #pragma unroll 1
    for (int i = threadIdx.x; i < D; i += nt) out[(long)r * D + i] = x[src + i];
}
extern "C" __global__ void weft_gather_rows(const act *x, const int *rows, act *out, int R, int D) {
    pdl_enter();
    gather_rows_body(x, rows, out, R, D, blockIdx.x, blockDim.x);
}

// Column slices: x (T, total) -> y (T, width) starting at column off.
__device__ __forceinline__ void slice_cols_body(const act *x, act *y, int T, int total, int off,
                                           int width, long i) {
    if (i >= (long)T * width) return;
    long t = i / width, c = i % width;
    y[i] = x[t * total + off + c];
}
extern "C" __global__ void weft_slice_cols(const act *x, act *y, int T, int total, int off,
                                           int width) {
    pdl_enter();
    slice_cols_body(x, y, T, total, off, width, (long)blockIdx.x * blockDim.x + threadIdx.x);
}

// dtype conversion copy: activation dtype to f32 and back.
__device__ __forceinline__ void to_f32_body(const act *x, float *y, long n, long i) {
    if (i < n) y[i] = A::ld(x, i);
}
extern "C" __global__ void weft_to_f32(const act *x, float *y, long n) {
    pdl_enter();
    to_f32_body(x, y, n, (long)blockIdx.x * blockDim.x + threadIdx.x);
}
__device__ __forceinline__ void from_f32_body(const float *x, act *y, long n, long i) {
    if (i < n) A::st(y, i, x[i]);
}
extern "C" __global__ void weft_from_f32(const float *x, act *y, long n) {
    pdl_enter();
    from_f32_body(x, y, n, (long)blockIdx.x * blockDim.x + threadIdx.x);
}
// Bias add (N) over rows of y (T,N), for linear layers whose GEMM ran without an epilogue.
__device__ __forceinline__ void bias_add_body(act *y, const wgt *b, int T, int N, long i) {
    if (i < (long)T * N) A::st(y, i, A::ld(y, i) + W::ld(b, i % N));
}
extern "C" __global__ void weft_bias_add(act *y, const wgt *b, int T, int N) {
    pdl_enter();
    bias_add_body(y, b, T, N, (long)blockIdx.x * blockDim.x + threadIdx.x);
}

// Column split into up to four outputs in one launch (merged projections): x (T, total) ->
// y_j (T, w_j), the j-th block of columns.
__device__ __forceinline__ void split_cols_body(const act *x, act *y0, act *y1, act *y2, act *y3, int T,
                                           int total, int w0, int w1, int w2, int w3, long i) {
    if (i >= (long)T * total) return;
    long t = i / total;
    int c = (int)(i % total);
    if (c < w0) { y0[t * w0 + c] = x[i]; return; }
    c -= w0;
    if (c < w1) { y1[t * w1 + c] = x[i]; return; }
    c -= w1;
    if (c < w2) { y2[t * w2 + c] = x[i]; return; }
    c -= w2;
    if (c < w3) y3[t * w3 + c] = x[i];
}
extern "C" __global__ void weft_split_cols(const act *x, act *y0, act *y1, act *y2, act *y3, int T,
                                           int total, int w0, int w1, int w2, int w3) {
    pdl_enter();
    split_cols_body(x, y0, y1, y2, y3, T, total, w0, w1, w2, w3,
                    (long)blockIdx.x * blockDim.x + threadIdx.x);
}

// Fused q/k RMSNorm per head (optional) and RoPE, and the v copy out of a merged q|k|v row:
// one block per (row t, head), heads [0,Hq) of q, [Hq,Hq+Hkv) of k, then (vs != 0) Hkv of v.
// Each stage repeats the arithmetic of weft_rmsnorm (launched with the same block size for a
// group of hd) and weft_rope, rounding where they store, so the result is bit-identical to the
// unfused nodes. qs/ks/vs point at row 0's q, k and v columns; *stride are their row strides.
__device__ __forceinline__ void qkv_rope_body(const act *qs, int qstride, const act *ks,
                                              int kstride, const act *vs, int vstride,
                                              const wgt *qn, const wgt *kn, const int *pos,
                                              const float *inv_freq, act *qo, act *ko, act *vo,
                                              int T, int Hq, int Hkv, int hd, int rot, int layout,
                                              float eps, int t, int h, int nt) {
    __shared__ float buf[256];
    if (t >= T || hd > 256) return;
    const act *src;
    act *dst;
    const wgt *nw;
    int is_v = 0;
    if (h < Hq) {
        src = qs + (long)t * qstride + (long)h * hd;
        dst = qo + (long)t * Hq * hd + (long)h * hd;
        nw = qn;
    } else if (h < Hq + Hkv) {
        src = ks + (long)t * kstride + (long)(h - Hq) * hd;
        dst = ko + (long)t * Hkv * hd + (long)(h - Hq) * hd;
        nw = kn;
    } else {
        if (!vs || h >= Hq + 2 * Hkv) return;
        src = vs + (long)t * vstride + (long)(h - Hq - Hkv) * hd;
        dst = vo + (long)t * Hkv * hd + (long)(h - Hq - Hkv) * hd;
        nw = 0;
        is_v = 1;
    }
    if (is_v) {
        #pragma unroll 1
        for (int i = threadIdx.x; i < hd; i += nt) dst[i] = src[i];
        return;
    }
    #pragma unroll 1
    for (int i = threadIdx.x; i < hd; i += nt) buf[i] = A::ld(src, i);
    if (nw) {
        float ss = 0.f;
        #pragma unroll 1
        for (int i = threadIdx.x; i < hd; i += nt) ss = fmaf(buf[i], buf[i], ss);
        ss = block_sum<1>(&ss, nt); // synchronises: every buf[i] is read before it is rewritten below
        float r = rsqrtf(ss / hd + eps);
        #pragma unroll 1
        for (int i = threadIdx.x; i < hd; i += nt)
            buf[i] = A::round(W::ld(nw, i) * A::round(buf[i] * r));
    }
    bsync(nt);
    int half = rot / 2;
    float p = (float)pos[t];
    #pragma unroll 1
    for (int i = threadIdx.x; i < half; i += nt) {
        float ang = p * inv_freq[i];
        float c = A::round(cosf(ang)), s = A::round(sinf(ang));
        int a = layout == 0 ? i : 2 * i, b = layout == 0 ? i + half : 2 * i + 1;
        float xa = buf[a], xb = buf[b];
        A::st(dst, a, A::round(xa * c) - A::round(xb * s));
        A::st(dst, b, A::round(xb * c) + A::round(xa * s));
    }
    #pragma unroll 1
    for (int i = rot + threadIdx.x; i < hd; i += nt) A::st(dst, i, buf[i]);
}
extern "C" __global__ void weft_qkv_rope(const act *qs, int qstride, const act *ks, int kstride,
                                         const act *vs, int vstride, const wgt *qn, const wgt *kn,
                                         const int *pos, const float *inv_freq, act *qo, act *ko,
                                         act *vo, int T, int Hq, int Hkv, int hd, int rot,
                                         int layout, float eps) {
    pdl_enter();
    qkv_rope_body(qs, qstride, ks, kstride, vs, vstride, qn, kn, pos, inv_freq, qo, ko, vo, T, Hq,
                  Hkv, hd, rot, layout, eps, blockIdx.x, blockIdx.y, blockDim.x);
}

// N (4, 8 or 16) bytes from global to shared memory without passing through registers
// (cp.async, sm_80+), and the wait for every such copy of the thread; the block's barrier after
// the wait makes them visible to the other threads. CG: the copy bypasses L1 (cp.async.cg,
// 16 bytes only), for data read once (the staged GEMV's weights).
template <int N, bool CG = false>
__device__ __forceinline__ void cp_async(void *dst, const void *src) {
    static_assert(!CG || N == 16, "cp.async.cg copies 16 bytes");
#if __CUDA_ARCH__ >= 800
    const unsigned long long d = (unsigned long long)dst, g = (unsigned long long)src;
    if (CG)
        asm volatile("{\n\t.reg .u64 s, g;\n\tcvta.to.shared.u64 s, %0;\n\t"
                     "cvta.to.global.u64 g, %1;\n\tcp.async.cg.shared.global [s], [g], 16;\n\t}"
                     ::"l"(d), "l"(g)
                     : "memory");
    else
        asm volatile("{\n\t.reg .u64 s, g;\n\tcvta.to.shared.u64 s, %0;\n\t"
                     "cvta.to.global.u64 g, %1;\n\tcp.async.ca.shared.global [s], [g], %2;\n\t}"
                     ::"l"(d), "l"(g), "n"(N)
                     : "memory");
#else
    for (int b = 0; b < N; b += 4)
        *(unsigned *)((char *)dst + b) = *(const unsigned *)((const char *)src + b);
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

#if WEFT_TA == WEFT_TW
// ---- GEMV: y (T,N) = x (T,K) w (N,K)^T for a few rows T (decode) --------------------------
// Bandwidth-bound: every weight byte is read once, 16 bytes per lane per load, with the load
// marked not to allocate in L1 (streamed) and four loads in flight per lane. A block of 256
// threads holds 8/S output rows; the S warps of a row split K between them (split-K inside the
// block, reduced through shared memory), so short, wide matrices still fill every SM. The
// reduction order of a row depends only on (K, S) and S only on K, never on N or T: a row of a
// merged q|k|v or gate|up matrix gets the same bits as the row of its own matrix, and the fused
// gate/up + SwiGLU kernel the same as the plain one.
#define GEMV_VEC (16 / (int)sizeof(wgt))
#define GEMV_THREADS 256

// a weight vector
__device__ __forceinline__ void unpack16(uint4 v, float *f) {
    unpack_vec16<WEFT_TW>(v, f);
}

// One batch of a lane's weight vectors: v, v + stride, v + 2 stride, v + 3 stride of each of the
// NW rows (those below nv), all issued before any is used so four loads per row are in flight.
// volatile keeps the loads where they are written: the first batch must stay ahead of the
// kernel's griddepcontrol.wait (the compiler would otherwise be free to sink it to its use).
template <int NW>
__device__ __forceinline__ void gemv_load(const wgt *const *w, int v, int stride, int nv,
                                          uint4 (*wv)[NW]) {
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (v + j * stride < nv)
#pragma unroll
            for (int r = 0; r < NW; r++) {
                const wgt *p = w[r] + (long)(v + j * stride) * GEMV_VEC;
                asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                             : "=r"(wv[j][r].x), "=r"(wv[j][r].y), "=r"(wv[j][r].z),
                               "=r"(wv[j][r].w)
                             : "l"(p));
            }
}

// acc[r][t] += the batch's vectors against x row t, vector by vector in ascending order, the
// elements of a vector in ascending order: the same sequence of FMAs for every batching, so a
// row's result depends only on (K, S).
template <int TT, int NW>
__device__ __forceinline__ void gemv_fma(const act *x, int T, int K, int v, int stride, int nv,
                                         uint4 (*wv)[NW], float (*acc)[TT]) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (v + j * stride >= nv) break;
        float wf[NW][GEMV_VEC];
#pragma unroll
        for (int r = 0; r < NW; r++) unpack16(wv[j][r], wf[r]);
#pragma unroll
        for (int t = 0; t < TT; t++) {
            if (t >= T) break;
            float xf[GEMV_VEC];
            unpack16(*(const uint4 *)(x + (long)t * K + (long)(v + j * stride) * GEMV_VEC), xf);
#pragma unroll
            for (int r = 0; r < NW; r++)
#pragma unroll
                for (int e = 0; e < GEMV_VEC; e++) acc[r][t] = fmaf(xf[e], wf[r][e], acc[r][t]);
        }
    }
}

// r[i] as stored by another block of this kernel (weft_gemv_norm_1's tail): read at L2
// (ld.global.cg), never from an L1 line an earlier kernel on this SM may have left there.
__device__ __forceinline__ float act_ld_cg(const act *p, int i) {
    act v = __ldcg(p + i);
    return A::ld(&v, 0);
}
// the same load kept where it is written (volatile), so it is in flight during the products
__device__ __forceinline__ float act_ld_early(const act *p, long i) {
    act v;
    if (sizeof(act) == 4)
        asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(*(float *)&v) : "l"(p + i));
    else
        asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(*(unsigned short *)&v) : "l"(p + i));
    return A::ld(&v, 0);
}

// x's n values copied into the block's dynamic shared memory (the _xs kernels, option
// gemv_xsmem) by the block's NT threads, 16 bytes a thread at a time; returns the copy, readable
// by the whole block. A loop of loads and stores: one L2 round trip per NT * 16 bytes. ASYNC
// (option gemv_x_async, the looped kernels' _xa forms): by cp.async instead, every copy of the
// thread issued at once, then one wait, so x crosses from L2 in one round trip (six fewer at
// Qwen3-8B's down projection, K = 12,288) and no thread holds it in registers. The copies
// allocate in L1 (.ca), as the loop's loads do, so the other blocks on the SM find x there: the
// forms that bypass L1 (cp.async.cg, and one bulk copy by the copy engine) measured 5-17% slower
// end to end (docs/perf/batch1.md). The same values either way: the same bits.
template <int NT = GEMV_THREADS, bool ASYNC = false>
__device__ __forceinline__ const act *gemv_x_shared(const act *x, int n) {
    extern __shared__ __align__(16) unsigned char gemv_xs[];
    const int n16 = n / (16 / (int)sizeof(act));
    #pragma unroll 1
    for (int i = threadIdx.x; i < n16; i += NT) {
        if constexpr (ASYNC) cp_async<16, false>(gemv_xs + (long)i * 16, (const uint4 *)x + i);
        else ((uint4 *)gemv_xs)[i] = ((const uint4 *)x)[i];
    }
    if constexpr (ASYNC) cp_async_wait_all();
    bsync(NT);
    return (const act *)gemv_xs;
}

// The dot products of output row n (NW weight rows) for every x row, reduced over the warp and
// the S splits; valid in lanes of the row's first warp (s == 0). Returns n < N. Lane `lane` of
// split s owns the 16-byte vectors s*32+lane, then every S*32-th. Its first batch of weight
// loads is issued before pdl_enter(): weights are never written by a kernel, so they may stream
// while the previous kernel drains; x is read only after the wait.
// XS (the backend's option gemv_xsmem): the block first copies x (T rows of K) into dynamic
// shared memory and the products read it there, so x does not depend on staying in L1 (with a
// large shared-memory carveout the L1 left is small: docs/perf/batch1.md); same values, same
// order.
// site (trace builds): the block trace's site this launch records into (-1: none; the _xs
// kernels' launch right after the fused attention passes 0, right after the residual join 1;
// cuda_trace.c report_gemv).
template <int TT, int NW, bool XS = false>
__device__ __forceinline__ bool gemv_row(const act *x, const wgt *const *w, int T, int N, int K,
                                         int S, int n, float (*acc)[TT],
                                         const act *early = nullptr, float *early_v = nullptr,
                                         int site = -1) {
    __shared__ float red[GEMV_THREADS / 32][NW][TT];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, s = warp % S;
    const int nv = K / GEMV_VEC, stride = S * 32;
    int v = s * 32 + lane;
    uint4 wv[4][NW];
    GEMV_MARK(site, 0);
    if (n < N) gemv_load<NW>(w, v, stride, nv, wv);
    gemv_mark_batch<NW>(site, wv, n < N, v, stride, nv);
    pdl_enter();
    GEMV_MARK(site, 1);
    // early (weft_gemv_norm_1: the residual at row n): loaded right after the wait by the lane
    // that will use it, so its L2 round trip overlaps the products
    if (early && n < N && lane == 0 && s == 0) *early_v = act_ld_early(early, n);
    if (XS) x = gemv_x_shared(x, T * K);
    GEMV_MARK(site, 2);
#pragma unroll
    for (int r = 0; r < NW; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = 0.f;
    if (n < N) {
        gemv_fma<TT, NW>(x, T, K, v, stride, nv, wv, acc);
        for (v += 4 * stride; v < nv; v += 4 * stride) {
            gemv_load<NW>(w, v, stride, nv, wv);
            gemv_fma<TT, NW>(x, T, K, v, stride, nv, wv, acc);
        }
    }
#pragma unroll
    for (int r = 0; r < NW; r++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[r][t] = warp_sum(acc[r][t]);
    if (S > 1) {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < NW; r++)
#pragma unroll
                for (int t = 0; t < TT; t++) red[warp][r][t] = acc[r][t];
        bsync(GEMV_THREADS);
        if (s == 0)
#pragma unroll
            for (int r = 0; r < NW; r++)
#pragma unroll
                for (int t = 0; t < TT; t++) {
                    float tot = red[warp][r][t];
                    for (int j = 1; j < S; j++) tot += red[warp + j][r][t];
                    acc[r][t] = tot;
                }
    }
    GEMV_MARK(site, 3);
    return n < N && s == 0;
}

// y = x w^T [+ bias]; y is f32 when out_f32 (the LM head's logits), else the activation dtype.
// site: gemv_row's (trace builds stamp 4 once the block's rows are stored)
template <int TT, bool XS = false>
__device__ __forceinline__ void gemv_plain(const act *x, const wgt *w, const wgt *bias, void *y,
                                           int out_f32, int T, int N, int K, int S, int bx,
                                           int site = -1) {
    int n = bx * (GEMV_THREADS / 32 / S) + (threadIdx.x >> 5) / S;
    const wgt *rows[1] = {w + (long)n * K};
    float acc[1][TT];
    const bool mine = gemv_row<TT, 1, XS>(x, rows, T, N, K, S, n, acc, nullptr, nullptr, site);
    int lane = threadIdx.x & 31;
    if (mine) {
        float b = bias ? W::ld(bias, n) : 0.f;
#pragma unroll
        for (int t = 0; t < TT; t++)
            if (t < T && lane == t) {
                float v = acc[0][t] + b;
                if (out_f32) ((float *)y)[(long)t * N + n] = v;
                else A::st((act *)y, (long)t * N + n, v);
            }
    }
#ifdef WEFT_TRACE
    if (site >= 0) {
        bsync(GEMV_THREADS); // every warp's store issued
        GEMV_MARK(site, 4);
        GEMV_SHAPE(site, N, K); // site >= 0 only in the _xs kernels, where bx is blockIdx.x
    }
#endif
}

// y = silu(x wg^T) * (x wu^T), each product rounded to the activation dtype first, as the
// unfused linear, linear, swiglu sequence stores them.
template <int TT, bool XS = false>
__device__ __forceinline__ void gemv_swiglu(const act *x, const wgt *wg, const wgt *wu, act *y,
                                            int T, int F, int K, int S, int bx) {
    int n = bx * (GEMV_THREADS / 32 / S) + (threadIdx.x >> 5) / S;
    const wgt *rows[2] = {wg + (long)n * K, wu + (long)n * K};
    float acc[2][TT];
    if (!gemv_row<TT, 2, XS>(x, rows, T, F, K, S, n, acc)) return;
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < TT; t++)
        if (t < T && lane == t) {
            float g = A::round(acc[0][t]), u = A::round(acc[1][t]);
            float sg = A::round(g / (1.f + __expf(-g)));
            A::st(y, (long)t * F + n, sg * u);
        }
}

// ---- the looped one-row GEMV (backend option gemv_loop) ------------------------------------
// A block owns `per` consecutive groups of 8/S output rows and runs them one after another with
// gemv_row's arithmetic (same lanes, batches, warp and split sums: the same bits). The first
// batch of the next group's weights is loaded before this group's reduction and store, so a
// block keeps loads in flight from its first row to its last, and the grid (at most a few blocks
// an SM, cuda_ops.c gemv_lp_grid) has no waves of blocks that start, ramp up and drain. x is
// read (or, XS, copied into shared memory) once a block. SW: gate|up + SwiGLU (w0 the gate rows,
// w1 the up rows, y the activation dtype); otherwise y = x w0^T [+ bias], f32 when out_f32.

// row n's weight rows: w0's, and w1's for SwiGLU (NW = 2)
template <int NW>
__device__ __forceinline__ void lp_rows(const wgt *w0, const wgt *w1, int n, int K,
                                        const wgt **rows) {
    rows[0] = w0 + (long)n * K;
    if (NW == 2) rows[NW - 1] = w1 + (long)n * K;
}

// the first batch of row n's weights when n < N
template <int NW>
__device__ __forceinline__ void lp_first(const wgt *w0, const wgt *w1, int n, int N, int K,
                                         int v0, int stride, int nv, uint4 (*wv)[NW]) {
    if (n >= N) return;
    const wgt *rows[NW];
    lp_rows<NW>(w0, w1, n, K, rows);
    gemv_load<NW>(rows, v0, stride, nv, wv);
}

// group i of a looped block of NT threads: row n (this warp's) from wv, whose first batch was
// issued earlier; then row nn's first batch into wv (nn < 0: none), its loads in flight during
// the reduction
template <int NW, int NT = GEMV_THREADS>
__device__ __forceinline__ void lp_group(const act *x, const wgt *w0, const wgt *w1,
                                         const wgt *bias, void *y, int out_f32, int N, int K,
                                         int S, int i, int n, int nn, uint4 (*wv)[NW],
                                         float (*red)[NT / 32][NW]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, s = warp % S;
    const int nv = K / GEMV_VEC, stride = S * 32, v0 = s * 32 + lane;
    float acc[NW][1];
#pragma unroll
    for (int r = 0; r < NW; r++) acc[r][0] = 0.f;
    if (n < N) {
        const wgt *rows[NW];
        lp_rows<NW>(w0, w1, n, K, rows);
        int v = v0;
        gemv_fma<1, NW>(x, 1, K, v, stride, nv, wv, acc);
        for (v += 4 * stride; v < nv; v += 4 * stride) {
            gemv_load<NW>(rows, v, stride, nv, wv);
            gemv_fma<1, NW>(x, 1, K, v, stride, nv, wv, acc);
        }
    }
    if (nn >= 0) lp_first<NW>(w0, w1, nn, N, K, v0, stride, nv, wv);
#pragma unroll
    for (int r = 0; r < NW; r++) acc[r][0] = warp_sum(acc[r][0]);
    if (S > 1) {
        // two buffers: a warp writing group i + 2's sums has passed group i + 1's barrier,
        // which every reader of group i's sums reached after reading them
        float(*rd)[NW] = red[i & 1];
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < NW; r++) rd[warp][r] = acc[r][0];
        bsync(NT);
        if (s == 0)
#pragma unroll
            for (int r = 0; r < NW; r++) {
                float tot = rd[warp][r];
                for (int j = 1; j < S; j++) tot += rd[warp + j][r];
                acc[r][0] = tot;
            }
    }
    if (n < N && s == 0 && lane == 0) {
        if (NW == 2) {
            float g = A::round(acc[0][0]), u = A::round(acc[NW - 1][0]);
            float sg = A::round(g / (1.f + __expf(-g)));
            A::st((act *)y, n, sg * u);
        } else {
            float v = acc[0][0] + (bias ? W::ld(bias, n) : 0.f);
            if (out_f32) ((float *)y)[n] = v;
            else A::st((act *)y, n, v);
        }
    }
}

// fuse.norm_linear's residual join in a looped GEMV block of NT threads (gemv_loop's NORM): r =
// x + res (stored by the block given r: block 0) and y = rmsnorm(r) * wn into shared memory,
// where the products read y as x. The same bits as weft_add_rmsnorm (add_rmsnorm_body) at its
// 1024 threads for rows of 1,024 to 4,096 elements (cuda_ops.c norm_block): each sum of squares
// is virtual thread t's (t = threadIdx.x + k NT, elements t, t + 1024, ... in that order, then
// block_sum over 1024 / NT virtual threads a thread), each r and y the same expression. The
// row moves as 16-byte vectors by cp.async, so it holds no registers beside the product's first
// batch of weights: the norm weights into the shared memory after the row (ws) before the wait
// (no kernel writes them), x into the row's place (xs) and res after ws after it; each thread
// adds the vectors it copied (no barrier between), and the sums and the normalisation read r
// back from shared memory. (Through registers, x and res took fuse.norm_linear's one-row
// kernels from 40 to 48 registers, five blocks an SM instead of six.) The norm weights share
// the activations' dtype (cuda_ops.c launches it only so, with 3 D elements of shared memory).
template <int NT>
__device__ __forceinline__ const act *gemv_x_addnorm(const act *x, const act *res, const wgt *wn,
                                                     act *r, int D, float eps) {
    extern __shared__ __align__(16) unsigned char gemv_xs[];
    act *xs = (act *)gemv_xs;
    wgt *ws = (wgt *)(xs + D);
    act *rsm = (act *)(ws + D);
    constexpr int E = 16 / sizeof(act), MV = 4096 / E / NT, KV = 1024 / NT;
    const int nvec = D / E;
#pragma unroll
    for (int j = 0; j < MV; j++) {
        const int q = threadIdx.x + j * NT;
        if (q < nvec) cp_async<16>(ws + q * E, wn + q * E);
    }
    pdl_enter();
#pragma unroll
    for (int j = 0; j < MV; j++) {
        const int q = threadIdx.x + j * NT;
        if (q < nvec) {
            cp_async<16>(xs + q * E, x + q * E);
            cp_async<16>(rsm + q * E, res + q * E);
        }
    }
    cp_async_wait_all();
#pragma unroll
    for (int j = 0; j < MV; j++) {
        const int q = threadIdx.x + j * NT;
        if (q < nvec) {
            float a[E], b[E];
            unpack_vec16<WEFT_TA>(((const uint4 *)xs)[q], a);
            unpack_vec16<WEFT_TA>(((const uint4 *)rsm)[q], b);
            __align__(16) act o[E];
#pragma unroll
            for (int e = 0; e < E; e++) A::st(o, e, A::round(a[e] + b[e]));
            ((uint4 *)xs)[q] = *(const uint4 *)o;
            if (r) ((uint4 *)r)[q] = *(const uint4 *)o;
        }
    }
    bsync(NT);
    float ss[KV];
#pragma unroll
    for (int k = 0; k < KV; k++) {
        ss[k] = 0.f;
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int i = threadIdx.x + k * NT + m * 1024;
            if (i < D) {
                const float v = A::ld(xs, i);
                ss[k] = fmaf(v, v, ss[k]);
            }
        }
    }
    const float rs = rsqrtf(block_sum<KV>(ss, 1024) / D + eps);
#pragma unroll
    for (int j = 0; j < MV; j++) {
        const int q = threadIdx.x + j * NT;
        if (q < nvec) {
            float a[E], w[E];
            unpack_vec16<WEFT_TA>(((const uint4 *)xs)[q], a);
            unpack_vec16<WEFT_TA>(((const uint4 *)ws)[q], w);
            __align__(16) act o[E];
#pragma unroll
            for (int e = 0; e < E; e++) A::st(o, e, w[e] * A::round(a[e] * rs));
            ((uint4 *)xs)[q] = *(const uint4 *)o;
        }
    }
    bsync(NT);
    return xs;
}

// a looped block's rows: its first row n0 (its warp's) and its number of groups ng, possibly
// none (a block past the grid the product needs: the MLP kernel's grid is the larger of two)
template <int NT>
__device__ __forceinline__ void lp_span(int N, int S, int per, int &n0, int &ng) {
    const int warp = threadIdx.x >> 5, rb = NT / 32 / S;
    const int g0 = blockIdx.x * per, left = (N + rb - 1) / rb - g0;
    ng = per < left ? per : left; // this block's groups (the grid's last may have fewer)
    n0 = g0 * rb + warp / S;
}

// a looped block's ng groups from row n0, the first batch of row n0's weights already in wv
// (site: gemv_trace_site's, -1 for none: trace builds stamp the first group's end)
template <int NW, int NT>
__device__ __forceinline__ void lp_groups(const act *x, const wgt *w0, const wgt *w1,
                                          const wgt *bias, void *y, int out_f32, int N, int K,
                                          int S, int n0, int ng, uint4 (*wv)[NW], int site = -1) {
    __shared__ float red[2][NT / 32][NW];
    const int rb = NT / 32 / S;
    // the trip count is the block's, so every warp reaches each barrier
    #pragma unroll 1
    for (int i = 0; i < ng; i++) {
        const int n = n0 + i * rb;
        lp_group<NW, NT>(x, w0, w1, bias, y, out_f32, N, K, S, i, n, i + 1 < ng ? n + rb : -1,
                         wv, red);
        if (i == 0) GEMV_MARK(site, 3);
    }
}

// NT: the block's threads (option gemv_loop_warps; 256 otherwise), a group NT / 32 / S rows.
// NORM (fuse.norm_linear): x is the residual join's first summand, res its second, wn the
// norm's weights and r the join's sum (gemv_x_addnorm); the products read the normalised row.
template <int NW, bool XS, int NT = GEMV_THREADS, bool NORM = false, bool XA = false,
          bool DEFER = false>
__device__ __forceinline__ void gemv_loop(const act *x, const wgt *w0, const wgt *w1,
                                          const wgt *bias, void *y, int out_f32, int N, int K,
                                          int S, int per, const act *res = nullptr,
                                          const wgt *wn = nullptr, act *r = nullptr,
                                          float eps = 0.f) {
    // the plain product after the fused attention (cuda_ops.c cuda_gemv, options gemv_l2_rest,
    // gemv_l2_sm, gemv_l2_first): S's bits 8-15 are the KiB of this block's rows past its
    // first group to bring into L2 before its wait, bit 24 asks for none from an SM whose
    // count (weft_sm_attn) says a live attention block shares it, bit 28 that such an SM's
    // blocks issue even their first batch only after the wait
    constexpr bool L2 = NW == 1 && !NORM;
    const int l2kb = L2 ? (S >> 8) & 0xff : 0, l2sm = L2 ? (S >> 24) & 1 : 0;
    const int l2first = L2 ? (S >> 28) & 1 : 0;
    const int l2delay = L2 ? (S >> 16) & 0xf : 0; // half-microseconds after the block's start
    // DEFER (option gemv_nl_defer, the NORM forms' _d kernels): a block whose SM's count says a
    // live block of the fused attention shares it issues its first batch only after its wait,
    // so the weights landing in its registers do not compete with the attention's shared-memory
    // reads there; block 0 zeroes the counts after its wait (the attention has completed then).
    constexpr bool ndefer = NORM && DEFER;
    S &= 0xff;
    const int lane = threadIdx.x & 31, s = (threadIdx.x >> 5) % S;
    const int nv = K / GEMV_VEC, stride = S * 32, v0 = s * 32 + lane;
    int n0, ng;
    lp_span<NT>(N, S, per, n0, ng);
    // trace builds: the plain 8-warp product's block stamps (gemv_trace_site)
    const int site = NW == 1 && !NORM && NT == GEMV_THREADS ? gemv_trace_site(N, K) : -1;
    GEMV_MARK(site, 0);
    uint4 wv[4][NW];
    const bool shared_sm = (l2sm | l2first | ndefer) &&
                           *(volatile unsigned *)sm_attn_slot();
    const bool late = l2first && shared_sm;
    // ndefer: the wait first (pdl_enter's, which the join's own call then passes at once), then
    // the same loads. Chosen at run time (a bit of S) this took the SwiGLU form from 64 to 77-79
    // registers (NVRTC, bf16; also with the first batch loaded after the join instead), so it
    // is a template argument: the _d forms keep 64 and 48 registers, no spills.
    if (ndefer && shared_sm) pdl_enter();
    if (!late) lp_first<NW>(w0, w1, n0, N, K, v0, stride, nv, wv);
    if (!late) gemv_mark_batch<NW>(site, wv, n0 < N, v0, stride, nv);
    // rows past the first group into L2: one 4-byte load with the L2::256B hint every 256
    // bytes (a probe measured prefetch instructions bringing in about a third of a region and
    // these loads three quarters, docs/perf/batch1.md), at most one a thread (64 KiB at 256
    // threads). Its word is used only after the block's last group, so no instruction waits on
    // it before that. Bits 16-19 (option gemv_l2_delay) hold them back that many half
    // microseconds from here, past the attention's first stages.
    unsigned l2v = 0u;
    if (l2kb && !(l2sm && shared_sm) && ng > 1) {
        if constexpr (L2) {
            if (l2delay) {
                const unsigned long long t0 = globaltimer();
                while (globaltimer() - t0 < 500ull * l2delay) __nanosleep(128);
            }
        }
        const int rb = NT / 32 / S;
        const long r0 = (long)(blockIdx.x * per + 1) * rb;
        long r1 = (long)(blockIdx.x * per + ng) * rb;
        if (r1 > N) r1 = N;
        long len = (r1 - r0) * K * (long)sizeof(wgt);
        if (len > (long)l2kb << 10) len = (long)l2kb << 10;
        const long off = (long)threadIdx.x * 256;
        if (off < len) l2v = ld_l2_256((const char *)(w0 + r0 * K) + off);
    }
    if constexpr (NORM) {
        x = gemv_x_addnorm<NT>(x, res, wn, blockIdx.x ? nullptr : r, K, eps);
        if (ndefer && blockIdx.x == 0) sm_attn_zero<NT>();
    } else {
        pdl_enter();
        GEMV_MARK(site, 1);
        if (late) lp_first<NW>(w0, w1, n0, N, K, v0, stride, nv, wv);
        // the attention has finished (the wait): its counts go back to zero for the next one
        if ((l2sm | l2first) && blockIdx.x == 0) sm_attn_zero<NT>();
        if (XS) x = gemv_x_shared<NT, XA>(x, K);
    }
    GEMV_MARK(site, 2);
    lp_groups<NW, NT>(x, w0, w1, bias, y, out_f32, N, K, S, n0, ng, wv, site);
    if (L2 && l2v == 0x9e3779b9u) weft_l2_sink = 1u;
    GEMV_MARK(site, 4);
    GEMV_SHAPE(site, N, K);
}

// Every block of the grid arrives, then leaves once all have: bar[0] counts arrivals, bar[1]
// is the generation. The last to arrive zeroes the count and advances the generation, so the
// pair needs no reset between launches. The grid must be resident at once (its callers size it
// so). Writes before the barrier are visible to every block's reads after it: thread 0 fences
// before it arrives and after it leaves (an acquire at GPU scope, which also drops stale L1
// lines), and the block barriers order the other threads behind it.
__device__ __forceinline__ void grid_barrier(unsigned *bar) {
#ifdef WEFT_ABLATE
    if (WEFT_ABLATE & 8) { // profiling: the barrier's cost (the reads after it are then racy)
        __syncthreads();
        return;
    }
#endif
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned *gen = bar + 1;
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(bar, 1u) == gridDim.x - 1) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (*gen == g) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();
}

// fuse.norm_linear's down form (cuda_ops.c op_norm_linear, 6 inputs) at one row: gemv_loop's
// NORM gate|up + SwiGLU into h (F values; S, per its split and groups a block), a grid
// barrier, then the looped down product y = h wd^T (D rows of F; Sd, perd) reading h from
// shared memory. Each block issues its first batch of down weights before the barrier (no
// kernel writes them), so they stream while the slowest gate|up blocks finish. The grid is
// the larger of the two products' looped grids, both sized for the same kernel, so resident
// at once. Each row's arithmetic is the two kernels' own: the same bits.
template <bool XA>
__device__ __forceinline__ void gemv_mlp(const act *x, const act *res, const wgt *wn, act *r,
                                         float eps, const wgt *wg, const wgt *wu, act *h, int F,
                                         int D, int S, int per, const wgt *wd, act *y, int Sd,
                                         int perd, unsigned *bar) {
    gemv_loop<2, true, GEMV_THREADS, true>(x, wg, wu, nullptr, h, 0, F, D, S, per, res, wn, r,
                                           eps);
    const int lane = threadIdx.x & 31, s = (threadIdx.x >> 5) % Sd;
    const int nv = F / GEMV_VEC, stride = Sd * 32, v0 = s * 32 + lane;
    int n0, ng;
    lp_span<GEMV_THREADS>(D, Sd, perd, n0, ng);
    uint4 wv[4][1];
    lp_first<1>(wd, nullptr, n0, D, F, v0, stride, nv, wv);
    grid_barrier(bar);
    const act *hs = gemv_x_shared<GEMV_THREADS, XA>(h, F);
    lp_groups<1, GEMV_THREADS>(hs, wd, nullptr, nullptr, y, 0, D, F, Sd, n0, ng, wv);
}

#define WEFT_GEMV_LP(SUF, XS, XA)                                                                  \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                     \
        weft_gemv_lp##SUF##_1(const act *x, const wgt *w, const wgt *bias, void *y, int out_f32,   \
                              int N, int K, int S, int per) {                                      \
        ABLATE(4);                                                                                 \
        gemv_loop<1, XS, GEMV_THREADS, false, XA>(x, w, nullptr, bias, y, out_f32, N, K, S, per);  \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                     \
        weft_gemv_swiglu_lp##SUF##_1(const act *x, const wgt *wg, const wgt *wu, act *y, int F,    \
                                     int K, int S, int per) {                                      \
        ABLATE(4);                                                                                 \
        gemv_loop<2, XS, GEMV_THREADS, false, XA>(x, wg, wu, nullptr, y, 0, F, K, S, per);         \
    }
WEFT_GEMV_LP(, false, false)
WEFT_GEMV_LP(_xs, true, false)
WEFT_GEMV_LP(_xa, true, true)
// fuse.norm_linear at one row (cuda_ops.c op_norm_linear): the residual join, then the looped
// product with x in shared memory, a LINEAR and gate|up + SwiGLU; gate|up's _d form with
// gemv_loop's DEFER (option gemv_nl_defer: the first batch after the wait on an SM that a live
// block of the fused attention shares; the LINEAR fold, q|k|v after down, never runs there).
extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
    weft_gemv_nlp_xs_1(const act *x, const act *res, const wgt *wn, act *r, float eps,
                       const wgt *w, const wgt *bias, void *y, int out_f32, int N, int K, int S,
                       int per) {
    ABLATE(4);
    gemv_loop<1, true, GEMV_THREADS, true>(x, w, nullptr, bias, y, out_f32, N, K, S, per, res, wn,
                                           r, eps);
}
#define WEFT_GEMV_SWIGLU_NLP(SUF, DEFER)                                                           \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                     \
        weft_gemv_swiglu_nlp_xs##SUF##_1(const act *x, const act *res, const wgt *wn, act *r,      \
                                         float eps, const wgt *wg, const wgt *wu, act *y, int F,   \
                                         int K, int S, int per) {                                  \
        ABLATE(4);                                                                                 \
        gemv_loop<2, true, GEMV_THREADS, true, false, DEFER>(x, wg, wu, nullptr, y, 0, F, K, S,   \
                                                             per, res, wn, r, eps);               \
    }
WEFT_GEMV_SWIGLU_NLP(, false)
WEFT_GEMV_SWIGLU_NLP(_d, true)
#define WEFT_GEMV_MLP(SUF, XA)                                                                     \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                     \
        weft_gemv_mlp_nlp##SUF##_1(const act *x, const act *res, const wgt *wn, act *r, float eps, \
                                   const wgt *wg, const wgt *wu, act *h, int F, int D, int S,      \
                                   int per, const wgt *wd, act *y, int Sd, int perd,               \
                                   unsigned *bar) {                                                \
        ABLATE(4);                                                                                 \
        gemv_mlp<XA>(x, res, wn, r, eps, wg, wu, h, F, D, S, per, wd, y, Sd, perd, bar);           \
    }
WEFT_GEMV_MLP(_xs, false)
WEFT_GEMV_MLP(_xa, true)
// the x-in-shared-memory forms with wider blocks (option gemv_loop_warps): x is copied once for
// 16, 24 or 32 warps' rows instead of 8
#define WEFT_GEMV_LPW(WARPS)                                                                       \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                       \
        weft_gemv_lp_xs_w##WARPS##_1(const act *x, const wgt *w, const wgt *bias, void *y,         \
                                     int out_f32, int N, int K, int S, int per) {                  \
        ABLATE(4);                                                                                 \
        gemv_loop<1, true, WARPS * 32>(x, w, nullptr, bias, y, out_f32, N, K, S, per);             \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                       \
        weft_gemv_swiglu_lp_xs_w##WARPS##_1(const act *x, const wgt *wg, const wgt *wu, act *y,    \
                                            int F, int K, int S, int per) {                        \
        ABLATE(4);                                                                                 \
        gemv_loop<2, true, WARPS * 32>(x, wg, wu, nullptr, y, 0, F, K, S, per);                    \
    }
WEFT_GEMV_LPW(16)
WEFT_GEMV_LPW(24)
WEFT_GEMV_LPW(32)

#define WEFT_GEMV(TT)                                                                              \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                     \
        weft_gemv_##TT(const act *x, const wgt *w, const wgt *bias, void *y, int out_f32, int T,   \
                       int N, int K, int S) {                                                      \
        ABLATE(4);                                                                                 \
        gemv_plain<TT>(x, w, bias, y, out_f32, T, N, K, S, blockIdx.x);                        \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                     \
        weft_gemv_swiglu_##TT(const act *x, const wgt *wg, const wgt *wu, act *y, int T, int F,    \
                              int K, int S) {                                                      \
        ABLATE(4);                                                                                 \
        gemv_swiglu<TT>(x, wg, wu, y, T, F, K, S, blockIdx.x);                                 \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                     \
        weft_gemv_xs_##TT(const act *x, const wgt *w, const wgt *bias, void *y, int out_f32,       \
                          int T, int N, int K, int S) {                                            \
        ABLATE(4);                                                                                 \
        /* S's bit 30: the launch right after the fused attention (the block trace's site 0); */  \
        /* bit 28: right after the residual join (site 1) */                                       \
        const int site = (S >> 30) & 1 ? 0 : (S >> 28) & 1 ? 1 : -1;                               \
        gemv_plain<TT, true>(x, w, bias, y, out_f32, T, N, K, S & 0xff, blockIdx.x, site);         \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                     \
        weft_gemv_swiglu_xs_##TT(const act *x, const wgt *wg, const wgt *wu, act *y, int T, int F, \
                                 int K, int S) {                                                   \
        ABLATE(4);                                                                                 \
        gemv_swiglu<TT, true>(x, wg, wu, y, T, F, K, S, blockIdx.x);                               \
    }
WEFT_GEMV(1)
WEFT_GEMV(2)
WEFT_GEMV(4)
WEFT_GEMV(8)

// ---- one-row GEMV with the residual add + RMSNorm in its last block (fuse.linear_add_rmsnorm)
// r = round(round(x w^T + b) + res); y = nw * round(r * rsqrt(mean(r^2) + eps)), at T = 1.
// Every block computes its output rows as gemv_plain does and stores r (the product rounded as
// the linear stores it, then added as add_rmsnorm_body adds), then counts itself in; the block
// that arrives last normalises the whole row. A decode layer's two residual joins then cost
// no kernel of their own. Measured slower at batch 1 on the H200 (4-14%: fuse.linear-add-norm's
// README): every block's arrival (a barrier and an acquire-release atomic, an L2 round trip)
// lengthens each wave of the product by more than the graph's kernel boundary it replaces.

// The last block's norm over the D values of r: add_rmsnorm_body's sums for a block of nt
// threads, run by nt / K physical threads (K virtual threads each, as the persistent kernels
// run it), so y gets the standalone kernel's bits. Each thread loads all of its r and nw values
// at once when they fit TAIL_MAXE registers (D <= 16 * 256: every model row here), so the tail
// makes one round trip to L2 before its sum; longer rows take add_rmsnorm_body's loops. The
// kernels are bound to six blocks an SM (40 registers, no spills: weft_gemv_1's occupancy);
// unbound, the tail took them to 62.
#define TAIL_MAXE 16
template <int K>
__device__ __forceinline__ void norm_tail(const act *r, const wgt *nw, act *y, int D, float eps,
                                          int nt) {
    const int np = nt / K;
    float ss[K];
    if (np == GEMV_THREADS && D <= TAIL_MAXE * GEMV_THREADS) {
        // np a constant here: the addresses are one base plus immediates, which keeps the
        // kernel within its register bound
        constexpr int P = GEMV_THREADS;
        const act *rb = r + threadIdx.x;
        const wgt *wb = nw + threadIdx.x;
        float vv[TAIL_MAXE];
#pragma unroll
        for (int j = 0; j < TAIL_MAXE; j++) {
            vv[j] = threadIdx.x + j * P < D ? act_ld_cg(rb, j * P) : 0.f;
            // the norm weights reach L1 during the sum without holding registers through it
            if (threadIdx.x + j * P < D) asm volatile("prefetch.global.L1 [%0];" ::"l"(wb + j * P));
        }
        // virtual thread tid + k np sums elements tid + k np + m nt, i.e. j = k, k + K, ...
#pragma unroll
        for (int k = 0; k < K; k++) {
            ss[k] = 0.f;
#pragma unroll
            for (int j = k; j < TAIL_MAXE; j += K)
                if (threadIdx.x + j * P < D) ss[k] = fmaf(vv[j], vv[j], ss[k]);
        }
        float rs = rsqrtf(block_sum<K>(ss, nt) / D + eps);
#pragma unroll
        for (int j = 0; j < TAIL_MAXE; j++)
            if (threadIdx.x + j * P < D)
                A::st(y, threadIdx.x + j * P, W::ld(wb, j * P) * A::round(vv[j] * rs));
        return;
    }
    norm_sumsq<K>(ss, D, nt, [&](int i) { return act_ld_cg(r, i); });
    float rs = rsqrtf(block_sum<K>(ss, nt) / D + eps);
    #pragma unroll 1
    for (int i = threadIdx.x; i < D; i += np)
        A::st(y, i, W::ld(nw, i) * A::round(act_ld_cg(r, i) * rs));
}

// nt: the standalone add_rmsnorm's block size for D (cuda_ops.c norm_block: 1024, 256, 64 or
// 32). count: a zeroed counter that the last block sets back to zero for the next launch;
// kernels using it never overlap, as each touches it only after its griddepcontrol.wait.
template <bool XS>
__device__ __forceinline__ void gemv_norm(const act *x, const wgt *w, const wgt *bias,
                                          const act *res, const wgt *nw, act *y, act *r,
                                          unsigned *count, int N, int K, int S, int nt,
                                          float eps) {
    __shared__ unsigned last;
    int n = blockIdx.x * (GEMV_THREADS / 32 / S) + (threadIdx.x >> 5) / S;
    const wgt *rows[1] = {w + (long)n * K};
    float acc[1][1], rv = 0.f;
    if (gemv_row<1, 1, XS>(x, rows, 1, N, K, S, n, acc, res, &rv) && (threadIdx.x & 31) == 0) {
        float p = A::round(acc[0][0] + (bias ? W::ld(bias, n) : 0.f));
        A::st(r, n, A::round(p + rv));
    }
    // the block's stores of r, then one arrival by thread 0 with acquire-release semantics
    // (the barrier orders the other threads' stores before its release; its acquire, in the
    // last block, orders every other block's r before this block's reads of them below)
    bsync(GEMV_THREADS);
    if (threadIdx.x == 0) {
        unsigned prev;
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(prev) : "l"(count) : "memory");
        last = prev == gridDim.x - 1;
    }
    bsync(GEMV_THREADS);
    if (!last) return;
    if (threadIdx.x == 0) *count = 0u;
    if (nt >= 1024) norm_tail<4>(r, nw, y, N, eps, nt);
    else if (nt >= GEMV_THREADS) norm_tail<1>(r, nw, y, N, eps, nt);
    else if ((int)threadIdx.x < nt) norm_tail<1>(r, nw, y, N, eps, nt);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 6)
    weft_gemv_norm_1(const act *x, const wgt *w, const wgt *bias, const act *res, const wgt *nw,
                     act *y, act *r, unsigned *count, int N, int K, int S, int nt, float eps) {
    ABLATE(4);
    gemv_norm<false>(x, w, bias, res, nw, y, r, count, N, K, S, nt, eps);
}
extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 6)
    weft_gemv_norm_xs_1(const act *x, const wgt *w, const wgt *bias, const act *res,
                        const wgt *nw, act *y, act *r, unsigned *count, int N, int K, int S,
                        int nt, float eps) {
    ABLATE(4);
    gemv_norm<true>(x, w, bias, res, nw, y, r, count, N, K, S, nt, eps);
}
#endif

// Random fill for probes and synthetic checks: uniform in [-1, 1) from a hash of (seed, i),
// stored in the activation dtype (bytes = 0: u8 values that are finite in fp8 e4m3).
__device__ __forceinline__ unsigned hash_u32(unsigned long long x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (unsigned)x;
}
extern "C" __global__ void weft_fill_random(act *y, long n, unsigned long long seed) {
    pdl_enter();
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        unsigned h = hash_u32(seed * 0x9E3779B97F4A7C15ull + (unsigned long long)i);
        A::st(y, i, (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
}
extern "C" __global__ void weft_fill_random_fp8(unsigned char *y, long n, unsigned long long seed) {
    pdl_enter();
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        unsigned h = hash_u32(seed * 0x9E3779B97F4A7C15ull + (unsigned long long)i);
        y[i] = (unsigned char)((h & 0x80u) | ((h >> 8) & 0x3fu)); // exponent <= 7: finite
    }
}
extern "C" __global__ void weft_noop(int x) { pdl_enter(); }
// n 4-byte words from src to dst, src possibly pinned host memory read through its device
// address: the backend's small copies from pinned memory (a pipelined step's inputs) as a
// kernel, so the stream between two decode steps holds no copy-engine operation
// (docs/perf/batch1.md, session of 2026-12-01 17:59 UTC)
extern "C" __global__ void weft_copy_words(const unsigned *src, unsigned *dst, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// Split-KV decode attention with the query heads of one KV group packed together (small T).
// Grid (T, Hkv, S): block (t, g, s) attends rows t's G = Hq/Hkv query heads over positions
// [s*ATS_CHUNK, (s+1)*ATS_CHUNK) of its sequence (clipped to the causal/window range), reading
// each K and V row of the chunk from memory once into shared memory. Writes per split the
// running max m, the sum l and the unnormalised accumulator; weft_attention_combine merges the
// splits. S comes from max_seq (not the step's positions) so a captured graph stays valid as the
// context grows; splits past a row's position exit at once.
// Work distribution (docs/perf/fuse-rope-attention.md): every thread of the block takes a
// (head, position) score and then a (chain, head, 4 dims) slice of the weighted sum, so all
// warps are busy whatever G is, and each serial chain reads vectors from shared memory. The
// arithmetic (ats_attend): each score four FMA chains over the head dims, each weighted sum
// ATS_PVQ chains over interleaved positions added in order (docs/perf/batch1.md, session of
// 2026-12-04 11:46 UTC), the softmax of a head by one warp with lane l holding positions l and
// l + 32.
// fuse.rope_attention's kernel (weft_rope_attention below) runs the same stages, so both give
// the same bits.
#define ATS_CHUNK 64
#define ATS_THREADS 256 // a split block's threads (cuda_ops.c launches that many)
#define ATS_MAXG 8
// ATS_BATCH 16-byte loads of K and of V per thread and trip: 4 covers a 64-row chunk of a
// 128-dim head in 16-bit types at 256 threads in one trip. It sets the kernels' registers:
// weft_rope_attention (bf16, as NVRTC builds it: the ctest cuda_nvrtc_regs) 76 at 4 (with K and
// V staged as floats: 88 at 4, 124 at 8), which lets one of its blocks share an SM with four
// GEMV blocks of 38 (64K registers), so under PDL its K/V loads start while the q|k|v
// projection still runs instead of after it (with the backend's smem_carveout, which lets the
// SM's shared memory hold it beside them).
#define ATS_BATCH 4
// K and V are staged in shared memory as stored (act: 2 bytes in f16 / bf16 models), half the
// room of float copies, so more split blocks fit an SM; ats_ld4 widens four values as A::ld
// does, so the arithmetic sees the same floats. Row stride of the staged K rows in elements:
// hd + 4, so that the lanes reading different rows at once hit different banks (f32: 16-byte
// reads, rows 4 words apart mod 32; 16-bit types: 8-byte reads, rows 2 words apart).
#define ATS_KST(hd) ((hd) + 4)
// Shared memory of a split block (cuda_ops.c ats_smem sizes the launch with the same sum):
// ks (ATS_CHUNK, ATS_KST) and vs (ATS_CHUNK, hd) of act, then floats: qs (ATS_MAXG, hd) |
// ps (ATS_MAXG, ATS_CHUNK). ATS_KV_FLOATS: the floats the two staged areas take.
#define ATS_KV_FLOATS(hd) (ATS_CHUNK * (ATS_KST(hd) + (hd)) * (int)sizeof(act) / 4)
extern __shared__ __align__(16) float ats_smem[];
// Four consecutive staged values (8-byte aligned; 16 in f32) as A::ld reads each.
__device__ __forceinline__ float4 ats_ld4(const act *p) {
#if WEFT_TA == 1
    return *(const float4 *)p;
#else
    uint2 u = *(const uint2 *)p;
#if WEFT_TA == 3
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
#else
    return make_float4(f16_to_f32((u16)(u.x & 0xffffu)), f16_to_f32((u16)(u.x >> 16)),
                       f16_to_f32((u16)(u.y & 0xffffu)), f16_to_f32((u16)(u.y >> 16)));
#endif
#endif
}

// Stages rows [j0, j0 + n) of one KV head into ks / vs (base: the cache offset of that head at
// position 0, row: elements per position). 16-byte loads, ATS_BATCH of K and of V per thread
// issued before any is stored, so the chunk arrives in about one memory latency. mid() runs
// once while the first batch is in flight (the caller's own loads overlap with them). The
// shared copies hold the values as stored whichever path ran.
template <class F>
__device__ __forceinline__ void ats_stage(const act *kc, const act *vc, long base, long row,
                                          int j0, int n, int hd, act *ks, act *vs, int nt,
                                          F &&mid) {
    const int kst = ATS_KST(hd);
    const int AV = 16 / (int)sizeof(act), rv = hd / AV, nvec = n * rv;
    if (hd % AV == 0 && (((unsigned long long)kc | (unsigned long long)vc) & 15) == 0 &&
        nvec > 0) {
        for (int i0 = 0; i0 < nvec; i0 += ATS_BATCH * nt) {
            uint4 kr[ATS_BATCH], vr[ATS_BATCH];
#pragma unroll
            for (int b = 0; b < ATS_BATCH; b++) {
                int i = i0 + b * nt + (int)threadIdx.x;
                if (i < nvec) {
                    long off = base + (long)(j0 + i / rv) * row + (long)(i % rv) * AV;
                    kr[b] = *(const uint4 *)(kc + off);
                    vr[b] = *(const uint4 *)(vc + off);
                }
            }
            if (i0 == 0) mid();
#pragma unroll
            for (int b = 0; b < ATS_BATCH; b++) {
                int i = i0 + b * nt + (int)threadIdx.x;
                if (i < nvec) {
                    int j = i / rv, d = (i % rv) * AV;
                    // a K row of 16-bit values is 8-byte aligned only (stride hd + 4)
                    if (sizeof(act) == 4) {
                        *(uint4 *)(ks + j * kst + d) = kr[b];
                    } else {
                        *(uint2 *)(ks + j * kst + d) = make_uint2(kr[b].x, kr[b].y);
                        *(uint2 *)(ks + j * kst + d + 4) = make_uint2(kr[b].z, kr[b].w);
                    }
                    *(uint4 *)(vs + j * hd + d) = vr[b];
                }
            }
        }
        return;
    }
    mid();
    #pragma unroll 1
    for (int i = threadIdx.x; i < n * hd; i += nt) {
        int j = i / hd, d = i % hd;
        long off = base + (long)(j0 + j) * row + d;
        ks[j * kst + d] = kc[off];
        vs[j * hd + d] = vc[off];
    }
}

// The chunk's attention for the G heads of a group, from qs (G, hd: scaled queries) and the n
// staged rows; the block's threads all synchronised before. Writes head h's partial (acc[hd],
// m, l) at part[o0 + h * hstride].
// The order of every sum depends on hd alone (not on G, nt or n), so any q-head split of a kv
// head and the persistent kernel's thread counts give the same bits:
// - a score: four FMA chains over the head dims (dims 4e, 4e + 1, 4e + 2, 4e + 3 of every 16
//   bytes), then (c0 + c1) + (c2 + c3);
// - a weighted sum: ATS_PVQ chains over the positions (chain q takes positions q, q + ATS_PVQ,
//   ...), each into the staged K area (free once the scores are in ps), then the chains added
//   in ascending q.
#define ATS_PVQ 4
__device__ __forceinline__ void ats_attend(const float *qs, act *ks, const act *vs,
                                           float *ps, float *part, long o0, long hstride, int G,
                                           int hd, int n, int nt) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = nt >> 5;
    const int kst = ATS_KST(hd), h4 = hd / 4;
    // scores: thread -> (head, position); positions past n score -infinity
    #pragma unroll 1
    for (int i = threadIdx.x; i < G * ATS_CHUNK; i += nt) {
        int h = i / ATS_CHUNK, j = i % ATS_CHUNK;
        float d = -INFINITY;
        if (j < n) {
            const float4 *qv = (const float4 *)(qs + h * hd);
            const act *kv = ks + j * kst;
            float c0 = 0.f, c1 = 0.f, c2 = 0.f, c3 = 0.f;
            #pragma unroll 1
            for (int e = 0; e < h4; e += 8) {
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    float4 a = qv[e + u], b = ats_ld4(kv + 4 * (e + u));
                    c0 = fmaf(a.x, b.x, c0);
                    c1 = fmaf(a.y, b.y, c1);
                    c2 = fmaf(a.z, b.z, c2);
                    c3 = fmaf(a.w, b.w, c3);
                }
            }
            d = (c0 + c1) + (c2 + c3);
        }
        ps[h * ATS_CHUNK + j] = d;
    }
    bsync(nt);
    // softmax of head h by warp h: lane l holds positions l and l + 32
    for (int h = warp; h < G; h += nw) {
        float sc[2], m = -INFINITY;
        for (int k = 0; k < 2; k++) {
            sc[k] = ps[h * ATS_CHUNK + lane + 32 * k];
            m = fmaxf(m, sc[k]);
        }
        m = warp_max(m);
        float l = 0.f;
        for (int k = 0; k < 2; k++) {
            int j = lane + 32 * k;
            float w = j < n ? __expf(sc[k] - m) : 0.f;
            ps[h * ATS_CHUNK + j] = w;
            l += w;
        }
        l = warp_sum(l);
        if (lane == 0) {
            part[o0 + h * hstride + hd] = m;
            part[o0 + h * hstride + hd + 1] = l;
        }
    }
    bsync(nt);
    // weighted sums: thread -> (chain q, head, 4 consecutive dims); chain q's sums of the G * hd
    // outputs go to cb[q] (float4 a thread), 16-byte aligned at the staged K area's start
    float4 *cb = (float4 *)ks;
    const int items = G * h4;
    #pragma unroll 1
    for (int i = threadIdx.x; i < ATS_PVQ * items; i += nt) {
        int q = i / items, it = i % items;
        int h = it / h4, d = (it % h4) * 4;
        const float *pr = ps + h * ATS_CHUNK;
        float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
#pragma unroll 4
        for (int j = q; j < n; j += ATS_PVQ) {
            float w = pr[j];
            float4 v = ats_ld4(vs + j * hd + d);
            a0 = fmaf(w, v.x, a0);
            a1 = fmaf(w, v.y, a1);
            a2 = fmaf(w, v.z, a2);
            a3 = fmaf(w, v.w, a3);
        }
        cb[i] = make_float4(a0, a1, a2, a3);
    }
    bsync(nt);
    #pragma unroll 1
    for (int it = threadIdx.x; it < items; it += nt) {
        int h = it / h4, d = (it % h4) * 4;
        float4 t = cb[it];
#pragma unroll
        for (int q = 1; q < ATS_PVQ; q++) {
            float4 u = cb[q * items + it];
            t.x += u.x;
            t.y += u.y;
            t.z += u.z;
            t.w += u.w;
        }
        float *dst = part + o0 + h * hstride + d;
        dst[0] = t.x;
        dst[1] = t.y;
        dst[2] = t.z;
        dst[3] = t.w;
    }
}

__device__ __forceinline__ void attention_split_body(const act *q, const int *pos,
                                                     const int *slots, const act *kc,
                                                     const act *vc, float *part, int T, int Hq,
                                                     int Hkv, int hd, int max_seq, int window,
                                                     float scale, int S, int t, int g, int s,
                                                     int nt) {
    int G = Hq / Hkv;
    int p = pos[t], slot = slots[t];
    int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    int j0 = s * ATS_CHUNK, j1 = j0 + ATS_CHUNK - 1;
    if (j0 < lo) j0 = lo;
    if (j1 > p) j1 = p;
    int n = j1 - j0 + 1;
    long pstride = (long)hd + 2, hstride = (long)S * pstride;
    long o0 = (((long)t * Hq + g * G) * S + s) * pstride;
    if (n <= 0) { // an empty split: mark it so the combine skips it
        for (int h = threadIdx.x; h < G; h += nt) part[o0 + h * hstride + hd] = -INFINITY;
        return;
    }
    act *ks = (act *)ats_smem;                 // (ATS_CHUNK, ATS_KST)
    act *vs = ks + ATS_CHUNK * ATS_KST(hd);    // (ATS_CHUNK, hd)
    float *qs = ats_smem + ATS_KV_FLOATS(hd);  // (G, hd)
    float *ps = qs + ATS_MAXG * hd;             // (G, ATS_CHUNK)
    long row = (long)Hkv * hd;
    long base = ((long)slot * max_seq) * row + (long)g * hd;
    ats_stage(kc, vc, base, row, j0, n, hd, ks, vs, nt, [&]() {
        #pragma unroll 1
        for (int i = threadIdx.x; i < G * hd; i += nt)
            qs[i] = A::ld(q, (long)t * Hq * hd + (long)(g * G) * hd + i) * scale;
    });
    bsync(nt);
    ats_attend(qs, ks, vs, ps, part, o0, hstride, G, hd, n, nt);
}
extern "C" __global__ void __launch_bounds__(256) weft_attention_split(
    const act *q, const int *pos, const int *slots, const act *kc, const act *vc,
    float *part, int T, int Hq, int Hkv, int hd, int max_seq, int window, float scale, int S) {
    pdl_enter();
    attention_split_body(q, pos, slots, kc, vc, part, T, Hq, Hkv, hd, max_seq, window, scale, S,
                         blockIdx.x, blockIdx.y, blockIdx.z, blockDim.x);
}

// Merging splits [s0, s1] of one head's partials pp (stride pstride): M the largest m, L the
// l's rescaled to it, then each dim's accumulators likewise; splits marked -infinity are
// skipped. CG: load through L2 only (partials other blocks of the same kernel wrote).
__device__ __forceinline__ float ld_cg(const float *p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}
template <bool CG> __device__ __forceinline__ float part_ld(const float *p) { return *p; }
template <> __device__ __forceinline__ float part_ld<true>(const float *p) { return ld_cg(p); }
// The merge order of split partials (docs/DESIGN.md): splits in aligned groups of ATS_GROUP
// (split s in group s / ATS_GROUP), each group's live splits merged in ascending order against
// the group's own max Mg (the order one thread-block cluster of the fused kernel merges its
// splits in), then the groups in ascending order against the overall max M. With every split in
// one group the second level is skipped, so up to 8 splits merge exactly as one level does.
// pp points at the record of split `base`; each record is pstride floats: hd accumulators, the
// max m and the sum l (m = -inf: an empty split, skipped).
#define ATS_GROUP 8
template <bool CG>
__device__ __forceinline__ float combine_max(const float *pp, long pstride, int hd, int base,
                                             int s0, int s1) {
    float M = -INFINITY;
    #pragma unroll 1
    for (int s = s0; s <= s1; s++) M = fmaxf(M, part_ld<CG>(pp + (s - base) * pstride + hd));
    return M;
}
// Sum over splits s0..s1 (one group) of element e of each record times e^(m_s - Mg), Mg their
// max (returned in Mg).
template <bool CG>
__device__ __forceinline__ float combine_group(const float *pp, long pstride, int hd, int base,
                                               int s0, int s1, int e, float &Mg) {
    Mg = combine_max<CG>(pp, pstride, hd, base, s0, s1);
    float r = 0.f;
    #pragma unroll 1
    for (int s = s0; s <= s1; s++) {
        float ms = part_ld<CG>(pp + (s - base) * pstride + hd);
        if (ms != -INFINITY) r += part_ld<CG>(pp + (s - base) * pstride + e) * __expf(ms - Mg);
    }
    return r;
}
// Sum over splits s0..s1 of element e times e^(m_s - M) in the two-level order; M the splits'
// max (combine_max).
template <bool CG>
__device__ __forceinline__ float combine_two(const float *pp, long pstride, int hd, int base,
                                             int s0, int s1, int e, float M) {
    float Mg;
    if (s0 / ATS_GROUP == s1 / ATS_GROUP)
        return combine_group<CG>(pp, pstride, hd, base, s0, s1, e, Mg);
    float r = 0.f;
    #pragma unroll 1
    for (int a = s0; a <= s1; a = (a / ATS_GROUP + 1) * ATS_GROUP) {
        int b = (a / ATS_GROUP + 1) * ATS_GROUP - 1;
        float x = combine_group<CG>(pp, pstride, hd, base, a, b < s1 ? b : s1, e, Mg);
        if (Mg != -INFINITY) r += x * __expf(Mg - M);
    }
    return r;
}
// Output d of the merge of splits s0..s1: sum of accumulators over sum of l, both weighted.
template <bool CG>
__device__ __forceinline__ float combine_out(const float *pp, long pstride, int hd, int base,
                                             int s0, int s1, float M, float L, int d) {
    float v = combine_two<CG>(pp, pstride, hd, base, s0, s1, d, M);
    return L > 0.f ? v / L : 0.f;
}

// The one-level merge of splits s0..s1 in one group (M, L, then output d): combine_two's bits
// there. Only the kernels launched with at most 8 splits use it (rope_attention_body's CL).
template <bool CG>
__device__ __forceinline__ void combine1_ml(const float *pp, long pstride, int hd, int s0,
                                            int s1, float &M, float &L) {
    M = -INFINITY;
    for (int s = s0; s <= s1; s++) M = fmaxf(M, part_ld<CG>(pp + s * pstride + hd));
    L = 0.f;
    for (int s = s0; s <= s1; s++) {
        float ms = part_ld<CG>(pp + s * pstride + hd);
        if (ms != -INFINITY) L += part_ld<CG>(pp + s * pstride + hd + 1) * __expf(ms - M);
    }
}
template <bool CG>
__device__ __forceinline__ float combine1_val(const float *pp, long pstride, int hd, int s0,
                                              int s1, float M, float L, int d) {
    float v = 0.f;
    for (int s = s0; s <= s1; s++) {
        float ms = part_ld<CG>(pp + s * pstride + hd);
        if (ms != -INFINITY) v += part_ld<CG>(pp + s * pstride + d) * __expf(ms - M);
    }
    return L > 0.f ? v / L : 0.f;
}

// Merges the S splits of weft_attention_split: o = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__device__ __forceinline__ void attention_combine_body(const float *part, act *o, int T, int Hq,
                                                       int hd, int S, int t, int h, int nt) {
    long pstride = (long)hd + 2;
    const float *pp = part + ((long)t * Hq + h) * S * pstride;
    float M = combine_max<false>(pp, pstride, hd, 0, 0, S - 1);
    float L = combine_two<false>(pp, pstride, hd, 0, 0, S - 1, hd + 1, M);
    #pragma unroll 1
    for (int d = threadIdx.x; d < hd; d += nt)
        A::st(o, (long)t * Hq * hd + (long)h * hd + d,
              combine_out<false>(pp, pstride, hd, 0, 0, S - 1, M, L, d));
}
extern "C" __global__ void weft_attention_combine(const float *part, act *o, int T, int Hq,
                                                  int hd, int S) {
    pdl_enter();
    attention_combine_body(part, o, T, Hq, hd, S, blockIdx.x, blockIdx.y, blockDim.x);
}

// ---- prefill attention on tensor cores (f16 / bf16): attention_tc.cuh over the contiguous cache
// A prompt's rows in tiles of 64 / G, P rounded to the activation dtype (the tensor cores' operand)
// where weft_attention keeps it in f32: cuda_ops.c attention_kernels launches it for prefill steps
// with the backend's option prefill_tc; its partials (S > 1) go to weft_attention_combine.
#if WEFT_TA != 1
#include "attention_tc.cuh"
// The contiguous layout: K/V (slots, max_seq, Hkv, hd), row = Hkv * hd.
struct atc_contiguous {
    int max_seq;
    long row;
    __device__ __forceinline__ long at(int slot, int p) const {
        return p < max_seq ? ((long)slot * max_seq + p) * row : -1;
    }
};
extern "C" __global__ void __launch_bounds__(128) weft_attention_tc(
    const act *q, const int *pos, const int *slots, const act *kc, const act *vc, act *o,
    float *part, int T, int Hq, int Hkv, int hd, int max_seq, int n_slots, int window, float scale,
    int S) {
    pdl_enter();
    atc_contiguous cache = {max_seq, (long)Hkv * hd};
    attention_tc_body<WEFT_TA, A>(q, pos, slots, cache, kc, vc, o, part, T, Hq, Hkv, hd, n_slots,
                                  window, scale, S);
}
#endif

// ---- fuse.rope_attention at one row: qk-norm, RoPE, kv store, split-KV attention, combine ----
// One kernel for what weft_qkv_rope, weft_kv_store, weft_attention_split and
// weft_attention_combine do for a batch-1 decode step, with their bits. Grid (1, Hkv, S) as
// the split kernel's for T = 1. Block (g, s) normalises and rotates its group's G query heads
// itself (weft_qkv_rope's arithmetic: the sum of squares as its block of nnorm threads adds it,
// rounding where it stores). The block whose chunk holds the row's position p also makes k' and
// v of head g, stores them into the cache at p (as weft_kv_store) and uses them for row p of
// its chunk; the other blocks read only positions below p, which earlier steps wrote, so no
// block waits for another. Each non-empty split writes its partial, then counts itself in on
// the group's counter; the block that arrives last merges the splits in weft_attention_combine's
// order and sets the counter back to 0 for the next layer, step or graph replay. Every block
// derives the number of non-empty splits from p the same way and empty ones exit at once.
// weft_rope_attention's shared memory ("its layout" below and in cuda_ops.c ats_smem), sized
// by the launch's G = Hq / Hkv query heads a kv head rather than ATS_MAXG, so that shared
// memory no longer holds the _mc kernel of a 128-dim head to two blocks an SM (Llama-3.2-1B
// decodes 3% faster with it at max_model_len 4,096: docs/perf/batch1.md, session of 2026-12-01
// 11:01 UTC). The plain cluster kernels (at most 8 splits: 64 blocks for 8 kv heads) keep
// ATS_MAXG: with G their bf16 form took 98 registers instead of 88 (NVRTC, K and V then staged
// as floats). The split block's ks | vs | qs (G, hd) | ps (G, ATS_CHUNK), then X
// ((G + 1) * hd: raw q heads and the k head) and rs (G + 1 norm factors, padded to 12); with
// the backend's option attn_cp also cst (3 * hd: the RoPE stage's constants, the q and k norm
// weights and the inverse frequencies, copied in before the wait) and raw (G + 2 rows of hd
// values as stored, at most 4 bytes each: the q|k|v rows' copies). Launched only by cuda_ops.c
// op_rope_attention; the persistent kernels run its body as op PK_ROPE_ATTENTION with at
// least the launch's shared memory.

// Element i of the rows' (nh, hd) values as the stages read it: from raw as A::ld reads it in
// the CP forms (the same float the conversion into X gave), from X in the others.
template <bool CP>
__device__ __forceinline__ float ra_row(const act *raw, const float *X, int i) {
    return CP ? A::ld(raw, i) : X[i];
}
// One head's sum of squares as block_sum<1> adds it over nn threads (nn a multiple of 32, at
// most 1024), run by one warp: lane l sums for threads l, l + 32, ... in turn.
// ILP (the attn_cp forms, weft_rope_attention_cp...): four of those warps at a time, as
// independent chains, so their shuffles overlap (same sums), and the head's values read from raw
// (ra_row: those forms convert no row into X). In the plain kernel that form measured 5.7%
// slower on Qwen3-0.6B with smem_carveout 100 (1,295 against 1,374 tok/s, docs/perf/batch1.md),
// so the plain kernel keeps the loop. raw and X: the head's values in either area.
template <bool ILP>
__device__ __forceinline__ float ra_head_sumsq(const act *raw, const float *X, int hd, int nn,
                                               int lane) {
    auto x = [&](int i) { return ra_row<ILP>(raw, X, i); };
    float mine = 0.f;
    if (!ILP) {
        #pragma unroll 1
        for (int w = 0; w < (nn >> 5); w++) {
            float ss = 0.f;
            #pragma unroll 1
            for (int i = lane + 32 * w; i < hd; i += nn) ss = fmaf(x(i), x(i), ss);
            ss = warp_sum(ss);
            if (lane == w) mine = ss;
        }
    } else {
        #pragma unroll 1
        for (int w0 = 0; w0 < (nn >> 5); w0 += 4) {
            float ss[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                ss[u] = 0.f;
                #pragma unroll 1
                for (int i = lane + 32 * (w0 + u); i < hd && w0 + u < (nn >> 5); i += nn)
                    ss[u] = fmaf(x(i), x(i), ss[u]);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) ss[u] = warp_sum(ss[u]);
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (lane == w0 + u) mine = ss[u];
        }
    }
    return warp_sum(mine);
}

// The shared-window address of a generic pointer into this block's shared memory (the operand
// of mbarrier, cp.async.bulk, mapa and st.async).
__device__ __forceinline__ unsigned smem_addr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// Thread-block cluster helpers (sm_90; weft_rope_attention's cluster merge). cluster_sync: every
// thread of every block of the cluster arrives (release) and waits (acquire), so shared memory
// written before it is visible to the cluster after it. ld_cluster: a float of another block's
// shared memory, at the address `local` has in this block (distributed shared memory).
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
#endif
}
// cluster_sync_relaxed: the same rendezvous without the release: for a barrier that only has to
// keep blocks resident until the others have read their shared memory (the reads' values are in
// registers by then), so it need not wait for the arriving thread's global stores to complete.
// cluster_arrive / cluster_wait: its two halves, apart (option attn_push_merge)
__device__ __forceinline__ void cluster_arrive() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_sync_relaxed() {
    cluster_arrive();
    cluster_wait();
}
__device__ __forceinline__ float ld_cluster(const float *local, unsigned rank) {
    float v = 0.f;
#if __CUDA_ARCH__ >= 900
    unsigned long long g = (unsigned long long)local;
    asm volatile("{\n\t.reg .u64 t;\n\t.reg .u32 a, r;\n\tcvta.to.shared.u64 t, %1;\n\t"
                 "cvt.u32.u64 a, t;\n\tmapa.shared::cluster.u32 r, a, %2;\n\t"
                 "ld.shared::cluster.f32 %0, [r];\n\t}"
                 : "=f"(v)
                 : "l"(g), "r"(rank)
                 : "memory");
#endif
    return v;
}

// Option attn_push_merge (weft_rope_attention's cluster merge by pushes): each split stores its
// partials into the merging block's shared memory with st.async, whose bytes count down that
// block's mbarrier (its transaction count), so the merging block waits on its own mbarrier
// (acquire at block scope) and reads local shared memory. A release/acquire cluster barrier
// compiles to MEMBAR.ALL.GPU, ERRBAR and, after the wait, CCTL.IVALL (an L1 invalidation) on
// every thread (ptxas 13.0, sm_90a), and the merge's reads of the other blocks' shared memory
// are a further round trip; a push needs neither. An mbarrier initialised before a
// cluster_arrive is visible to the cluster after the cluster_wait (with mbar_init_fence).
// an mbarrier of `count` arrivals (exec.persistent's ring and the push merge)
__device__ __forceinline__ void mbar_init(unsigned long long *bar, unsigned count) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
                 : "memory");
#endif
}
// this thread's mbarrier initialisations ordered before its later cluster barrier arrival (and
// so visible to the cluster after that barrier's wait)
__device__ __forceinline__ void mbar_init_fence() {
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// one arrival that also expects `bytes` of transactions (st.async) in the current phase
__device__ __forceinline__ void mbar_expect(unsigned long long *bar, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}
// wait for the phase of parity `parity` to complete; a phase that has not completed after about
// 2^24 tries (far longer than any merge) traps, so a wrong byte count fails the launch instead of
// hanging the stream
__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity) {
#if __CUDA_ARCH__ >= 900
    const unsigned a = smem_addr(bar);
#pragma unroll 1
    for (unsigned tries = 0;; tries++) {
        unsigned ok;
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;"
                     "\n\tselp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(ok)
                     : "r"(a), "r"(parity)
                     : "memory");
        if (ok) return;
        if (tries >= (1u << 24)) __trap();
    }
#endif
}
// v into the shared memory of cluster rank `rank` at the address `local` has in this block,
// counted (4 bytes) on that block's mbarrier at the address `bar` has in this block
__device__ __forceinline__ void st_async_f32(const float *local, const unsigned long long *bar,
                                             unsigned rank, float v) {
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n\t.reg .u32 d, b;\n\tmapa.shared::cluster.u32 d, %0, %2;\n\t"
        "mapa.shared::cluster.u32 b, %1, %2;\n\t"
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [d], %3, [b];\n\t}" ::"r"(
            smem_addr(local)),
        "r"(smem_addr(bar)), "r"(rank), "r"(__float_as_uint(v))
        : "memory");
#endif
}

// ra_merge's one-level form (combine1_ml / combine1_val), for at most 8 splits in one group.
__device__ __forceinline__ void ra_merge1(const float *pc, long per, long pstride, int ns, int G,
                                          int hd, act *o, int nt) {
    #pragma unroll 1
    for (int i = threadIdx.x; i < G * hd; i += nt) {
        int h = i / hd, d = i % hd;
        const float *pp = pc + h * per;
        float M, L;
        combine1_ml<false>(pp, pstride, hd, 0, ns - 1, M, L);
        A::st(o, (long)h * hd + d, combine1_val<false>(pp, pstride, hd, 0, ns - 1, M, L, d));
    }
}
// The merge of a group's G heads from the partials of splits s_lo .. s_lo + ns - 1 gathered in
// shared memory (pc: head h's at pc + h * per, split after split, pstride floats each) into o
// (the group's first head), in weft_attention_combine's order.
__device__ __forceinline__ void ra_merge(const float *pc, long per, long pstride, int s_lo,
                                         int ns, int G, int hd, act *o, int nt) {
    const int s_hi = s_lo + ns - 1;
    #pragma unroll 1
    for (int i = threadIdx.x; i < G * hd; i += nt) {
        int h = i / hd, d = i % hd;
        const float *pp = pc + h * per;
        float M = combine_max<false>(pp, pstride, hd, s_lo, s_lo, s_hi);
        float L = combine_two<false>(pp, pstride, hd, s_lo, s_lo, s_hi, hd + 1, M);
        A::st(o, (long)h * hd + d, combine_out<false>(pp, pstride, hd, s_lo, s_lo, s_hi, M, L, d));
    }
}

// The cluster form of ra_merge: each thread reads the m, l and accumulator of its (head, dim)
// from the ns splits' shared memory (`mine`: a split's (G, pstride) partials, at the same
// address in every block; split s_lo + s is cluster rank s_lo + s, or (s_lo + s) mod 8 in the
// MC form, whose clusters are 8-aligned runs of splits) straight into registers,
// all 3 ns loads in flight together (ns <= ATS_MAXS), then merges them in combine_group's
// order, so the bits are ra_merge's after a gather. With dst (the MC form, when the step's
// splits span several clusters): the group's partial record instead of the output, head h's at
// dst + h * hstride (the unnormalised sum, then the group's max and sum: combine_group's values).
// With recv (option attn_push_merge, the merging block being split s_lo + ns - 1): the other
// splits' partials were pushed into this block's shared memory, split s_lo + s's at recv +
// s * G * pstride, so every read is local; the same values, so the same bits.
#define ATS_MAXS 8
static_assert(ATS_MAXS == ATS_GROUP, "a cluster merges one group of combine_two's order");
template <bool MC>
__device__ __forceinline__ void
ra_merge_cluster(const float *mine, long pstride, int s_lo, int ns, int G, int hd, act *o, int nt,
                 float *dst = nullptr, long hstride = 0, const float *recv = nullptr) {
#pragma unroll 1
    for (int i = threadIdx.x; i < G * hd; i += nt) {
        const int h = i / hd, d = i % hd;
        const float *hp = mine + (long)h * pstride;
        float m[ATS_MAXS], l[ATS_MAXS], a[ATS_MAXS];
#pragma unroll
        for (int s = 0; s < ATS_MAXS; s++)
            if (s < ns) {
                if (recv) {
                    const float *sp = s == ns - 1 ? hp : recv + ((long)s * G + h) * pstride;
                    m[s] = sp[hd];
                    l[s] = sp[hd + 1];
                    a[s] = sp[d];
                    continue;
                }
                const unsigned rk = MC ? (unsigned)(s_lo + s) % ATS_MAXS : (unsigned)(s_lo + s);
                m[s] = ld_cluster(hp + hd, rk);
                l[s] = ld_cluster(hp + hd + 1, rk);
                a[s] = ld_cluster(hp + d, rk);
            }
        float M = -INFINITY, L = 0.f, v = 0.f;
#pragma unroll
        for (int s = 0; s < ATS_MAXS; s++)
            if (s < ns) M = fmaxf(M, m[s]);
#pragma unroll
        for (int s = 0; s < ATS_MAXS; s++)
            if (s < ns && m[s] != -INFINITY) L += l[s] * __expf(m[s] - M);
#pragma unroll
        for (int s = 0; s < ATS_MAXS; s++)
            if (s < ns && m[s] != -INFINITY) v += a[s] * __expf(m[s] - M);
        if (MC && dst) {
            float *r = dst + (long)h * hstride;
            r[d] = v;
            if (d == 0) {
                r[hd] = M;
                r[hd + 1] = L;
            }
        } else {
            A::st(o, (long)h * hd + d, L > 0.f ? v / L : 0.f);
        }
    }
}

// The second level of the MC form's merge: the group records k0..k1 that ra_merge_cluster<MC>
// wrote (head h's group k at src + h * hstride + k * pstride; other blocks wrote them, so
// L2 loads, RA_GB groups' loads in flight at a time) merged in combine_two's order into o (the
// kv head's first q head). Not inlined, to keep the kernel's registers.
#define RA_GB 8
__device__ __noinline__ void ra_merge_groups(const float *src, long hstride, long pstride, int k0,
                                             int k1, int G, int hd, act *o, int nt) {
    #pragma unroll 1
    for (int i = threadIdx.x; i < G * hd; i += nt) {
        const int h = i / hd, d = i % hd;
        const float *pp = src + (long)h * hstride;
        float M = -INFINITY;
        #pragma unroll 1
        for (int k = k0; k <= k1; k += RA_GB) {
            float m[RA_GB];
#pragma unroll
            for (int j = 0; j < RA_GB; j++)
                m[j] = k + j <= k1 ? ld_cg(pp + (k + j) * pstride + hd) : -INFINITY;
#pragma unroll
            for (int j = 0; j < RA_GB; j++) M = fmaxf(M, m[j]);
        }
        float L = 0.f, v = 0.f;
        #pragma unroll 1
        for (int k = k0; k <= k1; k += RA_GB) {
            float m[RA_GB], l[RA_GB], a[RA_GB];
#pragma unroll
            for (int j = 0; j < RA_GB; j++)
                if (k + j <= k1) {
                    m[j] = ld_cg(pp + (k + j) * pstride + hd);
                    l[j] = ld_cg(pp + (k + j) * pstride + hd + 1);
                    a[j] = ld_cg(pp + (k + j) * pstride + d);
                }
#pragma unroll
            for (int j = 0; j < RA_GB; j++)
                if (k + j <= k1 && m[j] != -INFINITY) {
                    const float w = __expf(m[j] - M);
                    L += l[j] * w;
                    v += a[j] * w;
                }
        }
        A::st(o, (long)h * hd + d, L > 0.f ? v / L : 0.f);
    }
}

// raw's piece i of U elements (rows of hd / U pieces: the G q heads from h0, the k head, then,
// past nx pieces, the v row): where it comes from in the q|k|v rows
template <int U>
__device__ __forceinline__ const act *ra_piece_src(const act *qsrc, const act *ksrc,
                                                   const act *vsrc, int i, int nx, int g, int h0,
                                                   int G, int hd) {
    const int rv = hd / U, hh = i / rv;
    return i >= nx  ? vsrc + (long)g * hd + (long)(i - nx) * U
           : hh < G ? qsrc + (long)(h0 + hh) * hd + (long)(i % rv) * U
                    : ksrc + (long)g * hd + (long)(i % rv) * U;
}
// The group's G q heads and the k head (nh rows of hd) and, for the block that holds row p
// (own), the v row. CP (the attn_cp forms): copied as stored into raw (nh + 1 rows of hd), with
// 16-byte operands (rawok) by cp.async, every copy of the block in flight at once and no
// registers held while they arrive (the staging's K/V loads are held then), else by element
// loads; after the copies' wait and a barrier the later stages read them there (ra_row,
// ra_v_from_raw), with no stage converting them first. The other forms: the element loops of
// A::ld straight into X and vlast.
template <bool CP>
__device__ __forceinline__ void ra_load_rows(const act *qsrc, const act *ksrc, const act *vsrc,
                                             act *vc, int g, int h0, int G, int hd, int nh,
                                             bool own, bool kw, long prow, bool rawok, act *raw,
                                             float *X, act *vlast, int nt) {
    if constexpr (CP) { // raw: by cp.async in 16-byte pieces (rawok), else element by element
        constexpr int AV = 16 / (int)sizeof(act);
        const int U = rawok ? AV : 1, nx = nh * (hd / U), ntot = nx + (own ? hd / U : 0);
        #pragma unroll 1
        for (int i = threadIdx.x; i < ntot; i += nt) {
            if (rawok)
                cp_async<16>(raw + (long)i * AV,
                             ra_piece_src<AV>(qsrc, ksrc, vsrc, i, nx, g, h0, G, hd));
            else
                raw[i] = *ra_piece_src<1>(qsrc, ksrc, vsrc, i, nx, g, h0, G, hd);
        }
    } else {
        #pragma unroll 1
        for (int i = threadIdx.x; i < nh * hd; i += nt) {
            int hh = i / hd, e = i % hd;
            X[i] = hh < G ? A::ld(qsrc, (long)(h0 + hh) * hd + e) : A::ld(ksrc, (long)g * hd + e);
        }
        if (own) {
            #pragma unroll 1
            for (int i = threadIdx.x; i < hd; i += nt) {
                const act v = vsrc[(long)g * hd + i];
                vlast[i] = v;
                if (kw) vc[prow + i] = v;
            }
        }
    }
}
// The v row in raw (after the copies' wait and a barrier) to the cache as stored and to vlast,
// by the block's last threads (the first warps take the heads' sums of squares meanwhile).
__device__ __forceinline__ void ra_v_from_raw(const act *raw, act *vc, int hd, int nh, bool own,
                                              bool kw, long prow, act *vlast, int nt) {
    if (!own) return;
    const act *vr = raw + (long)nh * hd;
    #pragma unroll 1
    for (int i = nt - 1 - (int)threadIdx.x; i < hd; i += nt) {
        vlast[i] = vr[i];
        if (kw) vc[prow + i] = vr[i];
    }
}

// Whether split s, which holds no position, passes the merge's two cluster barriers: it is in a
// cluster (MC: one of those holding the live splits s_lo..s_hi) and does not exit at once
// (option attn_dead_exit).
template <bool MC>
__device__ __forceinline__ bool ra_bars(bool dead_exit, int cluster, int s, int s_lo, int s_hi) {
    return !dead_exit &&
           (MC ? s / ATS_MAXS >= s_lo / ATS_MAXS && s / ATS_MAXS <= s_hi / ATS_MAXS : cluster);
}
// The live splits c_lo..c_hi of split s's cluster, whose last block merges them: s_lo..s_hi,
// or (multi: the MC form's live splits span several clusters) their part in s's cluster.
__device__ __forceinline__ void ra_cluster_live(int s, int s_lo, int s_hi, bool multi, int &c_lo,
                                                int &c_hi) {
    c_lo = multi && s_lo < s / ATS_MAXS * ATS_MAXS ? s / ATS_MAXS * ATS_MAXS : s_lo;
    c_hi = multi && s_hi > s / ATS_MAXS * ATS_MAXS + ATS_MAXS - 1
               ? s / ATS_MAXS * ATS_MAXS + ATS_MAXS - 1
               : s_hi;
}

// S: the split count, with bit 16 set when the launch made each kv head's splits thread-block
// clusters (option merge: cluster; the persistent kernels never run that form) and the
// backend's option attn_cp in bits 17-18 (the launch sized shared memory for its areas), which
// only the CP form reads: the form without it compiles to the code before the option.
// MC (S > 8 splits, a multiple of 8): the clusters are 8-aligned runs of 8 splits; without it
// (S <= 8) the S splits are one cluster.
// HD (option attn_hd; 0: none): the form for heads of HD dims, all rotated (rot == hd), at
// ATS_THREADS threads, launched only for such a node: hd, rot, the norm's block (cuda_ops.c
// norm_block) and the block size become constants, so the stages' index arithmetic (divisions
// by hd, half, rv and h4) folds; the same expressions in the same order, so the same bits.
template <bool CP, bool MC = false, bool CL = false, int HD = 0>
__device__ __forceinline__ void rope_attention_body(
    const act *qsrc, const act *ksrc, const act *vsrc, const wgt *qn, const wgt *kn,
    const int *pos, const float *inv_freq, const int *slots, act *kc, act *vc, float *part,
    unsigned *counters, act *o, int Hq, int Hkv, int hd, int rot, int layout, float eps, int nnorm,
    int max_seq, int window, float scale, int S, int gy, int s, int nt) {
    // MC: launched only as clusters (cuda_ops.c), so it compiles without the counter merge
    // below. CL: launched only as clusters of at most 8 splits, one group of the merge order,
    // where the one-level merge gives combine_two's bits; its counter merge (which such a launch
    // never takes) is that one-level form, the kernel's code before the two-level order
    // (docs/perf/batch1.md, session of 2026-12-01 08:34 UTC).
    const int cluster = MC ? 1 : (S >> 16) & 1, cp = CP ? (S >> 17) & 3 : 0; // option attn_cp
    // option attn_qsplit: a kv head's q heads split over 1 << qsh blocks (blockIdx.y = gy; kv
    // head g = gy >> qsh): this block attends G of them, q heads gy * G ..; each head's
    // arithmetic is the same whatever G (thread -> (head, item) maps), so the same bits. The
    // first block of a kv head (kw) writes the step's k and v rows to the cache; the others
    // compute the same rows for their own scores.
    const int qsh = (S >> 19) & 3;
    // bit 21 (options gemv_l2_sm, gemv_l2_first): a live block counts itself on its SM
    // (weft_sm_attn, read by the next looped product's blocks)
    const bool smc = (S >> 21) & 1;
    // bit 22 (option attn_dead_exit): a split with no position leaves right after its wait
    // instead of passing the merge's two cluster barriers. A cluster barrier waits only for the
    // cluster's threads that have not exited (PTX ISA, barrier.cluster), and the merge reads
    // only live splits' shared memory, so such a block frees its SM's shared memory and
    // registers for the next kernel's blocks at once instead of at the merge.
    const bool dead_exit = (S >> 22) & 1;
    // bits 23-24 (option attn_push_merge; the cluster forms): the splits push their partials
    // into the merging block's shared memory (st.async counted on its mbarrier) instead of
    // meeting at a release/acquire cluster barrier and the merging block reading theirs; at 2
    // the pushing splits leave right after their pushes
#ifdef WEFT_PUSH_MERGE
    const bool push = cluster && ((S >> 23) & 3);
    const bool push_exit = push && ((S >> 23) & 3) == 2;
#else
    constexpr bool push = false, push_exit = false; // only the option's module has the path
#endif
    S &= 0xffff;
    if (HD) {
        hd = HD;
        rot = HD;
        nnorm = HD >= 1024 ? 1024 : HD >= 256 ? 256 : HD >= 64 ? 64 : 32;
        nt = ATS_THREADS;
    }
    const int g = gy >> qsh;
    const bool kw = (gy & ((1 << qsh) - 1)) == 0;
    __shared__ int ra_last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = nt >> 5;
    const int G = (Hq / Hkv) >> qsh;
    const unsigned inv = STAGE_LAUNCH(); // stage trace (trace builds): this launch's slot
    STAGE_MARK(inv, 0);
    BLOCK_START();
    PACK_CLEAR(inv, nt);
    // Before griddepcontrol.wait (pdl_enter, in the staging's mid() below) this kernel reads
    // only what no kernel of the step writes: the step's positions and kv slots (inputs the
    // engine copies in before the step) and the cache rows below p (earlier steps), so it may
    // run while any number of earlier kernels still do (pdl_enter's WEFT_PDL_EARLY); the
    // chunk's K and V then stream in while the q|k|v projection finishes. Everything the step
    // writes (the q, k, v rows) is read after the wait, and every exit waits first.
    const int p = pos[0], slot = slots[0];
    if (p < 0 || p >= max_seq || slot < 0) { // no cache row to write or read: a zero output
        pdl_enter();
        if (s == 0)
            for (int i = threadIdx.x; i < G * hd; i += nt) A::st(o, (long)(gy * G) * hd + i, 0.f);
        if (cluster) {
            cluster_sync();
            cluster_sync();
        }
        return;
    }
    const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const int s_lo = lo / ATS_CHUNK, s_hi = p / ATS_CHUNK;
    // cluster: every block of a cluster passes the two cluster barriers of the merge below,
    // whatever it does. MC: every cluster of 8 holding live splits (s_lo..s_hi) merges them
    // through distributed shared memory; when they span several clusters (multi, every step
    // past position 512 without a window) each cluster's result is a group record and the
    // last cluster merges the groups. Clusters without live splits have no work. p is the
    // step's, the same for every block, so the blocks of a cluster all choose alike.
    const bool multi = MC && (s_lo ^ s_hi) >= ATS_MAXS; // live splits in several clusters
    int j0 = s * ATS_CHUNK, j1 = j0 + ATS_CHUNK - 1;
    if (j0 < lo) j0 = lo;
    if (j1 > p) j1 = p;
    const int n = j1 - j0 + 1;
    if (n <= 0) { // not counted: the target is the number of non-empty splits
        // push: every block of a cluster holding live splits arrives at the first barrier before
        // its wait, as the live ones do (those that exit at once too, so that the live blocks'
        // wait there does not hang on their griddepcontrol.wait)
        if (push && ra_bars<MC>(false, cluster, s, s_lo, s_hi)) cluster_arrive();
        pdl_enter();
        if (ra_bars<MC>(dead_exit, cluster, s, s_lo, s_hi)) {
            if (push)
                cluster_wait();
            else
                cluster_sync();
            cluster_sync();
        }
        return;
    }
    if (smc && threadIdx.x == 0) atomicAdd(sm_attn_slot(), 1u);
    BLOCK_LIVE(inv);
    const bool own = s == s_hi;    // row p is this chunk's last
    const int nh = G + (own ? 1 : 0); // heads to normalise and rotate
    const long pstride = (long)hd + 2, hstride = (long)S * pstride;
    const long o0 = ((long)(gy * G) * S + s) * pstride;
    // the staged K and V take ATS_KV_FLOATS; the counter merge (the forms without clusters)
    // gathers the partials into that area, so there it keeps the size of float copies (up to
    // 64 splits of G = 2 heads of 128 dims, as before K and V were staged as stored)
    const int kvf = CL ? ATS_KV_FLOATS(hd) : ATS_CHUNK * (ATS_KST(hd) + hd);
    act *ks = (act *)ats_smem;
    act *vs = ks + ATS_CHUNK * ATS_KST(hd);
    float *qs = ats_smem + kvf;
    // the layout's heads (see "its layout" above): G, but ATS_MAXG in the plain cluster kernels
    const int gl = CL && !MC ? ATS_MAXG : G;
    float *ps = qs + gl * hd;
    float *X = ps + gl * ATS_CHUNK; // (nh, hd)
    float *rs = X + (gl + 1) * hd;  // (nh)
    // push: past the layout (cuda_ops.c ats_smem's, attn_cp's areas included) the merging block
    // receives split c_lo + j's partials at recv + j * G * pstride (ATS_MAXS records at most),
    // then its mbarrier. It sets the mbarrier up (one arrival, expecting every other live
    // split's bytes) and every block arrives at a cluster barrier before its griddepcontrol.wait
    // and waits there before its own (the staging's mid() below), so the mbarrier is set up
    // before any push and the barrier costs the step nothing; the blocks without positions pass
    // it as the first of their two barriers.
    float *recv = rs + 12 + (cp ? 3 * hd + (gl + 2) * hd : 0);
    unsigned long long *mbar =
        (unsigned long long *)(((unsigned long long)(recv + (long)ATS_MAXS * G * pstride) + 7) &
                               ~7ull);
    if (push) {
        int c_lo, c_hi;
        ra_cluster_live(s, s_lo, s_hi, multi, c_lo, c_hi);
        // (compute-sanitizer's racecheck reports the init and this arrival, both thread 0's in
        // program order, as a hazard within warp 0: ptxas emits the init as a warp-uniform
        // instruction that racecheck does not attribute to thread 0; docs/perf/batch1.md,
        // session of 2026-12-06 00:00 UTC, and branch exp-push-bar for a form without it)
        if (s == c_hi && threadIdx.x == 0) {
            mbar_init(mbar, 1);
            mbar_init_fence();
            mbar_expect(mbar, (unsigned)((long)(c_hi - c_lo) * G * pstride * 4));
        }
        cluster_arrive();
    }
    const long row = (long)Hkv * hd;
    const long base = ((long)slot * max_seq) * row + (long)g * hd;
    const long prow = base + (long)p * row; // head g of row p in the cache
    // attn_cp bit 1: the RoPE stage's constants (norm weights, inverse frequencies: no kernel
    // writes them) go into shared memory (cst: qns | kns | ifs) by cp.async before the wait, so
    // that stage reads no global memory; 4-byte pieces, so operands off 4-byte alignment read
    // global memory there instead. Bit 2: the q|k|v rows arrive by cp.async (ra_load_rows).
    const int half = rot / 2;
    wgt *qns = (wgt *)(rs + 12), *kns = qns + hd;
    float *ifs = (float *)(kns + hd);
    const bool cst = (cp & 1) && (hd * (int)sizeof(wgt)) % 4 == 0 &&
                     (((unsigned long long)inv_freq |
                       (qn ? (unsigned long long)qn | (unsigned long long)kn : 0ull)) & 3) == 0;
    if (cst) {
        const int w4 = qn ? hd * (int)sizeof(wgt) / 4 : 0;
        #pragma unroll 1
        for (int i = threadIdx.x; i < 2 * w4 + half; i += nt) {
            if (i < 2 * w4)
                cp_async<4>((unsigned *)qns + i,
                          i < w4 ? (const unsigned *)qn + i : (const unsigned *)kn + (i - w4));
            else
                cp_async<4>(ifs + (i - 2 * w4), inv_freq + (i - 2 * w4));
        }
    }
    // RoPE's cosine and sine at the step's position, one pair of each rotary pair, depend only
    // on p and the inverse frequencies (no kernel of the step writes either): computed here,
    // before the wait and before the chunk's K/V loads hold registers, into ps (free until the
    // scores; it holds them when gl * ATS_CHUNK >= rot), instead of after the wait by every
    // (head, pair) thread of the RoPE stage. The same cosf / sinf of the same angle, so the
    // same bits.
    // After them, where ps also holds those (the plain cluster kernels' ATS_MAXG heads) and cst
    // has not copied them already, the q and k norm weights as the RoPE stage reads them
    // (W::ld), so that stage reads no global memory after the wait either.
    const bool trig = gl * ATS_CHUNK >= 2 * half;
    const bool nws = trig && qn && !cst && gl * ATS_CHUNK >= 2 * half + 2 * hd;
    float *nwf = ps + 2 * half; // (2, hd): q then k norm weights, when nws
    if (trig) {
        const float pf0 = (float)p;
        #pragma unroll 1
        for (int k = threadIdx.x; k < half; k += nt) {
            const float ang = pf0 * inv_freq[k];
            ps[k] = A::round(cosf(ang));
            ps[half + k] = A::round(sinf(ang));
        }
        if (nws) {
            #pragma unroll 1
            for (int i = threadIdx.x; i < 2 * hd; i += nt)
                nwf[i] = i < hd ? W::ld(qn, i) : W::ld(kn, i - hd);
        }
    }
    act *raw = (act *)(ifs + hd);  // (nh + 1, hd) as stored: the q|k|v rows' copies
    const bool rawok = (cp & 2) && hd % (16 / (int)sizeof(act)) == 0 &&
                       (((unsigned long long)qsrc | (unsigned long long)ksrc |
                         (unsigned long long)vsrc | (unsigned long long)raw) & 15) == 0;
    act *vlast = vs + (long)(n - 1) * hd;
    ats_stage(kc, vc, base, row, j0, own ? n - 1 : n, hd, ks, vs, nt, [&]() {
        // push: the first barrier, which every block of the cluster arrives at before its
        // griddepcontrol.wait, passed before this block's own (off the step's critical path)
        if (push) cluster_wait();
        pdl_enter();
        STAGE_MARK(inv, 1);
        STAGE_FIRST(inv);
        ra_load_rows<CP>(qsrc, ksrc, vsrc, vc, g, gy * G, G, hd, nh, own, kw, prow, rawok, raw,
                         X, vlast, nt);
        STAGE_MARK(inv, 7); // the rows read (the cp.async form: their copies issued)
    });
    if (cst || rawok) cp_async_wait_all();
    bsync(nt);
    // CP: the stages below read the rows from raw (ra_row), so no stage converts them first;
    // the v row goes to the cache and vlast beside the sums of squares (or beside RoPE)
    if (CP) ra_v_from_raw(raw, vc, hd, nh, own, kw, prow, vlast, nt);
    STAGE_MARK(inv, 2);
    // option attn_rope_sums (WEFT_ROPE_SUMS, a module of its own): at 128-dim heads rotated
    // whole as halves (layout 0), the qk-norm's 64-thread sums (ra_head_sumsq at nnorm 64:
    // virtual thread t squares elements t then t + 64) are the RoPE stage's own pairs, thread
    // (head, k) holding elements k and k + 64. Each thread squares its pair in that order, one
    // warp sum gives a virtual warp's total (the same lanes, the same tree) and the two warps'
    // totals add as ra_head_sumsq's last warp sum adds them (v0 + v1): the same bits, without
    // the warp-per-head pass and its two further shuffle chains. One pass of RoPE threads must
    // cover the heads (nh * 64 <= nt) and rs's 12 floats their warps.
#ifdef WEFT_ROPE_SUMS
    const bool rsum =
        qn && layout == 0 && rot == hd && hd == 128 && nnorm == 64 && nh * 64 <= nt && nh * 2 <= 12;
#else
    constexpr bool rsum = false;
#endif
    if (qn) {
        if (rsum) {
            float ss = 0.f;
            if ((int)threadIdx.x < nh * 64) {
                const int hh = threadIdx.x >> 6, k = threadIdx.x & 63;
                const float xa = ra_row<CP>(raw, X, hh * hd + k),
                            xb = ra_row<CP>(raw, X, hh * hd + k + 64);
                ss = fmaf(xb, xb, fmaf(xa, xa, 0.f));
            }
            ss = warp_sum(ss);
            if (lane == 0 && warp < nh * 2) rs[warp] = ss;
        } else {
            for (int hh = warp; hh < nh; hh += nw) {
                float ss = ra_head_sumsq<CP>(raw + hh * hd, X + hh * hd, hd, nnorm, lane);
                if (lane == 0) rs[hh] = rsqrtf(ss / hd + eps);
            }
        }
        bsync(nt);
    }
    // q heads -> qs (rounded as stored, then scaled as the split kernel loads them); the k head
    // -> the cache and the chunk's last staged row
    const float pf = (float)p;
    const wgt *qnw = cst ? qns : qn, *knw = cst ? kns : kn;
    const float *ifr = cst ? ifs : inv_freq;
    #pragma unroll 1
    for (int i = threadIdx.x; i < nh * half; i += nt) {
        int hh = i / half, k = i % half;
        int a = layout == 0 ? k : 2 * k, b = layout == 0 ? k + half : 2 * k + 1;
        float xa = ra_row<CP>(raw, X, hh * hd + a), xb = ra_row<CP>(raw, X, hh * hd + b);
        if (qn) {
            const wgt *nwt = hh < G ? qnw : knw;
            const float *nf = nwf + (hh < G ? 0 : hd);
            // rsum: rs holds the head's two warp sums (rsqrtf of their total here, as lane 0
            // of the norm's pass takes it)
            const float r = rsum ? rsqrtf((rs[2 * hh] + rs[2 * hh + 1]) / hd + eps) : rs[hh];
            xa = A::round((nws ? nf[a] : W::ld(nwt, a)) * A::round(xa * r));
            xb = A::round((nws ? nf[b] : W::ld(nwt, b)) * A::round(xb * r));
        }
        float c, sn;
        if (trig) {
            c = ps[k];
            sn = ps[half + k];
        } else {
            float ang = pf * ifr[k];
            c = A::round(cosf(ang));
            sn = A::round(sinf(ang));
        }
#if WEFT_TA == 1
        // f32: weft_qkv_rope's two expressions below compile (fmad on) to xa*c - xb*s with both
        // products rounded and to fma(xa, s, xb*c); spelled out so that these bits do not hang
        // on how the compiler contracts this kernel's copy (it chose fma(xb, c, xa*s) here)
        float ya = __fsub_rn(__fmul_rn(xa, c), __fmul_rn(xb, sn));
        float yb = __fmaf_rn(xa, sn, __fmul_rn(xb, c));
#else
        float ya = A::round(xa * c) - A::round(xb * sn);
        float yb = A::round(xb * c) + A::round(xa * sn);
#endif
        if (hh < G) {
            qs[hh * hd + a] = A::round(ya) * scale;
            qs[hh * hd + b] = A::round(yb) * scale;
        } else {
            if (kw) {
                A::st(kc, prow + a, ya);
                A::st(kc, prow + b, yb);
            }
            A::st(ks, (n - 1) * ATS_KST(hd) + a, ya);
            A::st(ks, (n - 1) * ATS_KST(hd) + b, yb);
        }
    }
    const int pass = hd - rot; // dims past the rotary ones: normalised only
    #pragma unroll 1
    for (int i = threadIdx.x; i < nh * pass; i += nt) {
        int hh = i / pass, e = rot + i % pass;
        float y = ra_row<CP>(raw, X, hh * hd + e);
        if (qn) {
            const wgt *nwt = hh < G ? qnw : knw;
            const float nw = nws ? nwf[(hh < G ? 0 : hd) + e] : W::ld(nwt, e);
            y = A::round(nw * A::round(y * rs[hh]));
        }
        if (hh < G) {
            qs[hh * hd + e] = A::round(y) * scale;
        } else {
            if (kw) A::st(kc, prow + e, y);
            A::st(ks, (n - 1) * ATS_KST(hd) + e, y);
        }
    }
    bsync(nt);
    STAGE_MARK(inv, 3);
    if (cluster) { // MC: always
        // the split's partials stay in this block's shared memory (X: the norm's scratch, free
        // after RoPE; (G, hd + 2) fits in its (G + 1, hd)); the block holding row p merges the
        // splits s_lo..s_hi from the others' shared memory, in combine order, into ks's space.
        // multi (MC, live splits in several clusters): each cluster's block of its last live
        // split merges the cluster's live splits into a group record in part (combine_group's
        // first level), counts in, and the last to arrive merges the groups (ra_merge_groups).
        float *mine = X;
        ats_attend(qs, ks, vs, ps, mine, 0, pstride, G, hd, n, nt);
        STAGE_MARK(inv, 4);
        BLOCK_ATTENDED();
        if (push) {
            // (c_lo, c_hi below are the same; computed there, after the barrier as before, so
            // that the modules without the option keep their code)
            int p_lo, p_hi;
            ra_cluster_live(s, s_lo, s_hi, multi, p_lo, p_hi);
            bsync(nt); // this block's partials written (ats_attend's last stage)
            if (s != p_hi) {
                const unsigned rk = MC ? (unsigned)p_hi % ATS_MAXS : (unsigned)p_hi;
                const float *dst = recv + (long)(s - p_lo) * G * pstride;
#pragma unroll 1
                for (int i = threadIdx.x; i < G * pstride; i += nt)
                    st_async_f32(dst + i, mbar, rk, mine[i]);
                // push_exit: nothing reads this block's shared memory, and a cluster barrier
                // waits only for the threads that have not exited; a push's bytes count at the
                // merging block, which waits for all of them (or traps)
                if (push_exit) return;
            } else {
                mbar_wait(mbar, 0); // every other live split's partials landed here
            }
        } else {
            cluster_sync(); // every split's partials written
        }
        STAGE_MARK(inv, 5);
        int c_lo, c_hi;
        ra_cluster_live(s, s_lo, s_hi, multi, c_lo, c_hi);
        const bool mrg = s == c_hi; // this cluster's merging block (own unless multi)
        if (mrg)
            ra_merge_cluster<MC>(
                mine, pstride, c_lo, c_hi - c_lo + 1, G, hd, o + (long)(gy * G) * hd, nt,
                multi ? part + (long)(gy * G) * hstride + (long)(s / ATS_MAXS) * pstride : nullptr,
                hstride, push ? recv : nullptr);
        // the merging block has read them: the others may exit (relaxed: its stores of o need
        // not have completed for that; the kernel's end makes them visible). push: the splits
        // stay until the merge too (their pushes completed by then)
        cluster_sync_relaxed();
        if (!mrg) return;
        if (multi) {
            __threadfence();
            bsync(nt);
            if (threadIdx.x == 0)
                ra_last = atomicAdd(counters + gy, 1u) ==
                          (unsigned)(s_hi / ATS_MAXS - s_lo / ATS_MAXS);
            bsync(nt);
            if (!ra_last) return;
            __threadfence();
            if (threadIdx.x == 0) atomicExch(counters + gy, 0u);
            ra_merge_groups(part + (long)(gy * G) * hstride, hstride, pstride, s_lo / ATS_MAXS,
                            s_hi / ATS_MAXS, G, hd, o + (long)(gy * G) * hd, nt);
        }
        STAGE_MARK(inv, 6);
        if (gy == 0) STAGE_NEXT();
        return;
    }
    ats_attend(qs, ks, vs, ps, part, o0, hstride, G, hd, n, nt);
    STAGE_MARK(inv, 4);
    BLOCK_ATTENDED();
    // count in; the last of the group's non-empty splits merges them
    __threadfence();
    bsync(nt);
    if (threadIdx.x == 0)
        ra_last = atomicAdd(counters + gy, 1u) == (unsigned)(s_hi - s_lo);
    bsync(nt);
    STAGE_MARK(inv, 5);
    if (!ra_last) return;
    __threadfence();
    if (threadIdx.x == 0) atomicExch(counters + gy, 0u);
    // the merge: the group's partials of splits [s_lo, s_hi] into shared memory in one round
    // of L2 loads (the staging area is free again) when they fit, then the same arithmetic
    const int ns = s_hi - s_lo + 1;
    const long per = (long)ns * pstride; // one head's partials
    if ((long)G * per <= (long)kvf) {
        float *pc = ats_smem;
        #pragma unroll 1
        for (long i = threadIdx.x; i < (long)G * per; i += nt) {
            long h = i / per, r = i % per;
            pc[i] = ld_cg(part + (long)(gy * G) * hstride + h * hstride + s_lo * pstride + r);
        }
        bsync(nt);
        if (CL)
            ra_merge1(pc, per, pstride, ns, G, hd, o + (long)(gy * G) * hd, nt);
        else
            ra_merge(pc, per, pstride, s_lo, ns, G, hd, o + (long)(gy * G) * hd, nt);
        STAGE_MARK(inv, 6);
        if (gy == 0) STAGE_NEXT();
        return;
    }
    #pragma unroll 1
    for (int i = threadIdx.x; i < G * hd; i += nt) {
        int h = i / hd, d = i % hd;
        const float *pp = part + (long)(gy * G + h) * hstride;
        if (CL) {
            float M, L;
            combine1_ml<true>(pp, pstride, hd, s_lo, s_hi, M, L);
            A::st(o, (long)(gy * G + h) * hd + d,
                  combine1_val<true>(pp, pstride, hd, s_lo, s_hi, M, L, d));
            continue;
        }
        float M = combine_max<true>(pp, pstride, hd, 0, s_lo, s_hi);
        float L = combine_two<true>(pp, pstride, hd, 0, s_lo, s_hi, hd + 1, M);
        A::st(o, (long)(gy * G + h) * hd + d,
              combine_out<true>(pp, pstride, hd, 0, s_lo, s_hi, M, L, d));
    }
    STAGE_MARK(inv, 6);
    if (gy == 0) STAGE_NEXT();
}

// option ablate bit 1: the block of split 0 of each kv head stores zeros as its heads' output
#if defined(WEFT_ABLATE) && (WEFT_ABLATE & 1)
#define ABLATE_ATTENTION()                                                                         \
    do {                                                                                           \
        pdl_enter();                                                                               \
        const int G_ = (Hq / Hkv) >> ((S >> 19) & 3); /* option attn_qsplit */                   \
        if (blockIdx.z == 0)                                                                       \
            for (int i = threadIdx.x; i < G_ * hd; i += blockDim.x)                                \
                A::st(o, (long)blockIdx.y * G_ * hd + i, 0.f);                                     \
        return;                                                                                    \
    } while (0)
#else
#define ABLATE_ATTENTION() ((void)0)
#endif
// The two launchable forms, the same body: the plain one, and the option attn_cp form
// (weft_rope_attention_cp). Both copy paths compiled in take the latter to 98 registers (NVRTC,
// bf16; nvcc reported ~118), so it is held to three blocks an SM (79, no spills), which keeps
// one of its blocks fitting beside four GEMV blocks under PDL (unbounded, Qwen3-0.6B with
// smem_carveout 100 measured -6%). The plain form compiles to 88 unforced; with this bound and
// the copy paths in it measured -3.4% on Llama-3.2-1B (cause not isolated), hence two kernels
// (docs/perf/batch1.md, 16:20-16:33 UTC). Those counts are from K and V staged as floats; staged
// as stored, with RoPE's cosines and norm weights staged before the wait (NVRTC, bf16): plain
// 76, _cp 78, _at 80, _cp_at 77, _mc 79, _cp_mc 77, _mc4 and _cp_mc4 64.
#define WEFT_ROPE_ATTENTION(NAME, BOUNDS, CP, MC, CL, HD)                                          \
    extern "C" __global__ void __launch_bounds__ BOUNDS NAME(                                      \
        const act *qsrc, const act *ksrc, const act *vsrc, const wgt *qn, const wgt *kn,           \
        const int *pos, const float *inv_freq, const int *slots, act *kc, act *vc, float *part,    \
        unsigned *counters, act *o, int Hq, int Hkv, int hd, int rot, int layout, float eps,       \
        int nnorm, int max_seq, int window, float scale, int S) {                                  \
        ABLATE_ATTENTION();                                                                        \
        rope_attention_body<CP, MC, CL, HD>(qsrc, ksrc, vsrc, qn, kn, pos, inv_freq, slots, kc,    \
                                            vc, part, counters, o, Hq, Hkv, hd, rot, layout, eps,  \
                                            nnorm, max_seq, window, scale, S, blockIdx.y,          \
                                            blockIdx.z, blockDim.x);                               \
    }
// The names without a suffix are launched as clusters only (merge: cluster, at most 8 splits);
// the _at forms without clusters (merge: atomic; the counter merge), each compiled without the
// other's merge (with the counter merge compiled in, the cluster form moved by 3% on
// Llama-3.2-1B whenever that code changed: docs/perf/batch1.md, session of 2026-12-01 08:34).
WEFT_ROPE_ATTENTION(weft_rope_attention, (256), false, false, true, 0)
WEFT_ROPE_ATTENTION(weft_rope_attention_cp, (256, 3), true, false, true, 0)
WEFT_ROPE_ATTENTION(weft_rope_attention_at, (256), false, false, false, 0)
WEFT_ROPE_ATTENTION(weft_rope_attention_cp_at, (256, 3), true, false, false, 0)
// option attn_hd: the two cluster forms for heads of 64 and of 128 dims (rot == hd); NVRTC, bf16
// (2026-12-03): _cp_d64 and _cp_d128 80 registers, _d64 and _d128 64, no spills
WEFT_ROPE_ATTENTION(weft_rope_attention_d64, (256), false, false, true, 64)
WEFT_ROPE_ATTENTION(weft_rope_attention_d128, (256), false, false, true, 128)
WEFT_ROPE_ATTENTION(weft_rope_attention_cp_d64, (256, 3), true, false, true, 64)
WEFT_ROPE_ATTENTION(weft_rope_attention_cp_d128, (256, 3), true, false, true, 128)
// The MC forms (S > 8 splits as clusters of 8, launched when the step's KV-length bucket passes
// 512 positions; each of both kernels above measured slower with the MC logic compiled in,
// Llama-3.2-1B by 3%, hence two more; docs/perf/batch1.md, session of 2026-12-01). With K and
// V staged as floats NVRTC compiled the bf16 form to 103 registers unbound (two blocks an SM),
// and held to three (72) it was slower at short contexts (Qwen3-0.6B -5.3%, Qwen3-8B -3.3%;
// session of 2026-12-01 11:01 UTC). Staged as stored it takes 79-80 (three blocks an SM; the f16
// form 76, bound as before). Held to four blocks an SM (both _mc forms at 64 registers),
// fast-cuda-async gained 3.8-10.4% at 2,560 positions and lost 1.9-2.6% at 128 positions with
// max_model_len 4,096 (session of 2026-12-01 13:57 UTC), so these bounds stay and the four-block
// forms (_mc4) are two more kernels, launched from the KV-length bucket of the backend's option
// attn_mc4_from (off by default: by model and length they measured from -5.5% to +10.4%;
// session of 2026-12-01 16:03 UTC).
#if WEFT_TA == 2
WEFT_ROPE_ATTENTION(weft_rope_attention_mc, (256, 3), false, true, true, 0)
#else
WEFT_ROPE_ATTENTION(weft_rope_attention_mc, (256), false, true, true, 0)
#endif
WEFT_ROPE_ATTENTION(weft_rope_attention_cp_mc, (256, 3), true, true, true, 0)
WEFT_ROPE_ATTENTION(weft_rope_attention_mc4, (256, 4), false, true, true, 0)
WEFT_ROPE_ATTENTION(weft_rope_attention_cp_mc4, (256, 4), true, true, true, 0)

#if WEFT_TA == WEFT_TW
// ---- staged GEMV (the backend's option gemv_stage) ----------------------------------------
// gemv_plain / gemv_swiglu at T = 1 with the weights landing in shared memory instead of
// registers: before griddepcontrol.wait each thread copies every weight vector it will use
// (RG row groups of 8/S rows, all of a lane's vectors of each row) by cp.async, which holds no
// register while the copies fly, so a block can have its whole tile (RG x 16 KiB for a 4096-dim
// row at S = 4) in flight instead of the register form's 64 bytes a thread. The point is the
// window before the wait: while a latency-bound kernel runs (the attention, a norm), the
// resident blocks of the next product stream up to the shared memory's capacity of its weights,
// and after the wait compute from shared memory. Each thread reads back only the slots it
// copied (slot = ((group * NW + r) * maxv + k) * 256 + thread), so the copies' wait needs no
// barrier. Arithmetic: gemv_row's, row by row (each lane's vectors in ascending order, the
// elements of a vector in ascending order, the warp sum, the S splits in order), so the bits
// are the register form's.
#define GEMV_ST_MAXG 8 // row groups a block may own
#define GEMV_ST_MAXV 8 // 16-byte vectors of one row a lane may own (K <= 8 S 32 GEMV_VEC)

// acc[g][r]: row group g's dot products of this warp's row with x, reduced over the warp and
// the S splits (valid in lane 0 of a row's first warp). Returns whether this thread writes.
template <int NW>
__device__ __forceinline__ bool gemv_st_rows(const act *x, const wgt *const *w, int N, int K,
                                             int S, int RG, int maxv, float (*acc)[NW]) {
    extern __shared__ __align__(16) unsigned char gemv_xs[];
    __shared__ float red[GEMV_THREADS / 32][GEMV_ST_MAXG][NW];
    uint4 *st = (uint4 *)gemv_xs;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, s = warp % S, rpg = 8 / S;
    const int nv = K / GEMV_VEC, stride = S * 32, v0 = s * 32 + lane;
    const long n0 = (long)blockIdx.x * RG * rpg + warp / S; // this warp's row in group 0
    #pragma unroll 1
    for (int g = 0; g < RG; g++) {
        const long n = n0 + (long)g * rpg;
        if (n >= N) break;
#pragma unroll
        for (int r = 0; r < NW; r++)
            #pragma unroll 1
            for (int k = 0; k < maxv && v0 + k * stride < nv; k++)
                cp_async<16, true>(st + ((g * NW + r) * maxv + k) * GEMV_THREADS + threadIdx.x,
                                   w[r] + n * K + (long)(v0 + k * stride) * GEMV_VEC);
    }
    pdl_enter();
    cp_async_wait_all(); // this thread's own copies: it reads only those
#pragma unroll
    for (int g = 0; g < GEMV_ST_MAXG; g++) {
#pragma unroll
        for (int r = 0; r < NW; r++) acc[g][r] = 0.f;
        if (g >= RG || n0 + (long)g * rpg >= N) continue;
        #pragma unroll 1
        for (int k = 0; k < maxv; k++) {
            const int v = v0 + k * stride;
            if (v >= nv) break;
            float xf[GEMV_VEC];
            unpack16(*(const uint4 *)(x + (long)v * GEMV_VEC), xf);
#pragma unroll
            for (int r = 0; r < NW; r++) {
                float wf[GEMV_VEC];
                unpack16(st[((g * NW + r) * maxv + k) * GEMV_THREADS + threadIdx.x], wf);
#pragma unroll
                for (int e = 0; e < GEMV_VEC; e++) acc[g][r] = fmaf(xf[e], wf[e], acc[g][r]);
            }
        }
    }
#pragma unroll
    for (int g = 0; g < GEMV_ST_MAXG; g++)
#pragma unroll
        for (int r = 0; r < NW; r++)
            if (g < RG) acc[g][r] = warp_sum(acc[g][r]);
    if (S > 1) {
        if (lane == 0)
#pragma unroll
            for (int g = 0; g < GEMV_ST_MAXG; g++)
#pragma unroll
                for (int r = 0; r < NW; r++)
                    if (g < RG) red[warp][g][r] = acc[g][r];
        bsync(GEMV_THREADS);
        if (s == 0)
#pragma unroll
            for (int g = 0; g < GEMV_ST_MAXG; g++)
#pragma unroll
                for (int r = 0; r < NW; r++)
                    if (g < RG) {
                        float tot = red[warp][g][r];
                        for (int j = 1; j < S; j++) tot += red[warp + j][g][r];
                        acc[g][r] = tot;
                    }
    }
    return s == 0 && lane == 0;
}

// y = x w^T [+ bias] at T = 1, staged (gemv_plain's epilogue)
extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
    weft_gemv_st_1(const act *x, const wgt *w, const wgt *bias, void *y, int out_f32, int N,
                   int K, int S, int RG, int maxv) {
    ABLATE(4);
    const wgt *rows[1] = {w};
    float acc[GEMV_ST_MAXG][1];
    if (!gemv_st_rows<1>(x, rows, N, K, S, RG, maxv, acc)) return;
    const long n0 = (long)blockIdx.x * RG * (8 / S) + (threadIdx.x >> 5) / S;
#pragma unroll
    for (int g = 0; g < GEMV_ST_MAXG; g++) {
        const long n = n0 + (long)g * (8 / S);
        if (g >= RG || n >= N) break;
        float v = acc[g][0] + (bias ? W::ld(bias, n) : 0.f);
        if (out_f32) ((float *)y)[n] = v;
        else A::st((act *)y, n, v);
    }
}

// y = silu(x wg^T) * (x wu^T) at T = 1, staged (gemv_swiglu's epilogue)
extern "C" __global__ void __launch_bounds__(GEMV_THREADS)
    weft_gemv_swiglu_st_1(const act *x, const wgt *wg, const wgt *wu, act *y, int F, int K, int S,
                          int RG, int maxv) {
    ABLATE(4);
    const wgt *rows[2] = {wg, wu};
    float acc[GEMV_ST_MAXG][2];
    if (!gemv_st_rows<2>(x, rows, F, K, S, RG, maxv, acc)) return;
    const long n0 = (long)blockIdx.x * RG * (8 / S) + (threadIdx.x >> 5) / S;
#pragma unroll
    for (int g = 0; g < GEMV_ST_MAXG; g++) {
        const long n = n0 + (long)g * (8 / S);
        if (g >= RG || n >= F) break;
        float gt = A::round(acc[g][0]), u = A::round(acc[g][1]);
        float sg = A::round(gt / (1.f + __expf(-gt)));
        A::st(y, n, sg * u);
    }
}
#endif

#if WEFT_TA == WEFT_TW
// ---- the persistent decode kernel (exec.persistent) ---------------------------------------
// One cooperative launch runs a whole step: prog lists the step's kernels in stream order (read
// by the technique from a captured CUDA graph of the step), each with its op code, grid,
// thread count and arguments. Every block walks the program; for each node the blocks loop over
// its virtual block indices and run the kernel's own body, so the bits are the standalone
// kernels'. A node's blocks wait until every virtual block of the node before it has finished
// (done[], one arrival counter per node that grows by the node's block count each launch:
// epoch * nvb means "finished in this launch"), which orders the step as the stream did; a
// block with no work in a node moves on without waiting, and issues its share of the L2
// prefetches the host attached to the node (weights of the next products, which no kernel
// writes) before it waits anywhere. Op codes: techniques/exec.persistent/persistent_prog.h.
#define PK_THREADS 256
#ifndef PK_MIN_BLOCKS
#define PK_MIN_BLOCKS 3
#endif
#define PK_ARGS 24
struct pk_node {
    int op, nvb, gx, gy, nt, wait; // wait: index of the node waited for, -1 = none
    unsigned wait_nvb, reserved;   // virtual blocks of that node
    unsigned long long pf[2][2];   // (address, bytes) ranges to prefetch into L2
    unsigned long long a[PK_ARGS]; // the kernel's arguments, one 8-byte slot each
};
enum {
    PK_EMBED = 1, PK_RMSNORM, PK_ADD_RMSNORM, PK_ROPE, PK_KV_STORE, PK_ATTENTION, PK_SWIGLU,
    PK_ADD, PK_SCALE, PK_ACTIVATION, PK_GATHER_ROWS, PK_SLICE_COLS, PK_TO_F32, PK_FROM_F32,
    PK_BIAS_ADD, PK_SPLIT_COLS, PK_QKV_ROPE, PK_GEMV_1, PK_GEMV_SWIGLU_1, PK_ATTENTION_SPLIT,
    PK_ATTENTION_COMBINE, PK_ROPE_ATTENTION
};
// The weights' element size, read by the host to size the L2 prefetch ranges.
extern "C" __device__ unsigned weft_persistent_wsize = sizeof(wgt);
#define PP(T, i) ((T)nd.a[i])
#define PI(i) ((int)nd.a[i])
#define PF(i) __int_as_float((int)nd.a[i])
#define PL(i) ((long)nd.a[i])

// This block's share of an L2 prefetch: 16-byte aligned pieces of up to 64 KiB, one per lane of
// warp 0 (the caller), as bulk prefetches (sm_90) that need no registers or completion.
__device__ __forceinline__ void pk_prefetch(unsigned long long p, unsigned long long bytes, int pb,
                                            int P) {
    if (!bytes) return;
    unsigned long long chunk = ((bytes + P - 1) / P + 15) & ~15ull;
    unsigned long long lo = (unsigned long long)pb * chunk, hi = lo + chunk;
    if (hi > bytes) hi = bytes;
    for (unsigned long long o = lo + (unsigned long long)threadIdx.x * 65536; o < hi;
         o += 32ull * 65536) {
        unsigned sz = (unsigned)(hi - o < 65536 ? hi - o : 65536);
#if __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"(sz)
                     : "memory");
#else
        for (unsigned b = 0; b < sz; b += 256)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o + b));
#endif
    }
}

// Waits (one thread) until the arrival counter *c reaches target (counters only grow, so the
// comparison is modular), then fences so the arrivals' writes are visible: relaxed polls and
// one acquire fence, because an acquire load invalidates the SM's L1 at every poll (and with
// it the spilled registers the kernel keeps there).
__device__ __forceinline__ void pk_wait(const unsigned *c, unsigned target) {
    unsigned v;
    do {
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
    } while ((int)(v - target) < 0);
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// Runs virtual block vb of node nd with the node's thread count (threads past it skip; the
// norms over 512 or 1024 threads run on 256 with 2 or 4 virtual threads each).
__device__ __noinline__ void pk_run(const pk_node &nd, int vb) {
    const int nt = nd.nt, tid = threadIdx.x;
    if (tid >= (nt < PK_THREADS ? nt : PK_THREADS)) return;
    const int bx = vb % nd.gx, rest = vb / nd.gx, by = rest % nd.gy, bz = rest / nd.gy;
    const long li = (long)vb * nt + tid;
    switch (nd.op) {
    case PK_EMBED:
        embed_body(PP(const int *, 0), PP(const wgt *, 1), PP(act *, 2), PI(3), PI(4), PI(5), bx,
                   nt);
        break;
    case PK_RMSNORM:
        if (nt <= PK_THREADS)
            rmsnorm_body<1>(PP(const act *, 0), PP(const wgt *, 1), PP(act *, 2), PI(3), PI(4),
                            PI(5), PF(6), bx, nt);
        else if (nt == 2 * PK_THREADS)
            rmsnorm_body<2>(PP(const act *, 0), PP(const wgt *, 1), PP(act *, 2), PI(3), PI(4),
                            PI(5), PF(6), bx, nt);
        else
            rmsnorm_body<4>(PP(const act *, 0), PP(const wgt *, 1), PP(act *, 2), PI(3), PI(4),
                            PI(5), PF(6), bx, nt);
        break;
    case PK_ADD_RMSNORM:
        if (nt <= PK_THREADS)
            add_rmsnorm_body<1>(PP(const act *, 0), PP(const act *, 1), PP(const wgt *, 2),
                                PP(act *, 3), PP(act *, 4), PI(5), PI(6), PF(7), bx, nt);
        else if (nt == 2 * PK_THREADS)
            add_rmsnorm_body<2>(PP(const act *, 0), PP(const act *, 1), PP(const wgt *, 2),
                                PP(act *, 3), PP(act *, 4), PI(5), PI(6), PF(7), bx, nt);
        else
            add_rmsnorm_body<4>(PP(const act *, 0), PP(const act *, 1), PP(const wgt *, 2),
                                PP(act *, 3), PP(act *, 4), PI(5), PI(6), PF(7), bx, nt);
        break;
    case PK_ROPE:
        rope_body(PP(const act *, 0), PP(act *, 1), PP(const int *, 2), PP(const float *, 3), PI(4),
                  PI(5), PI(6), PI(7), PI(8), li);
        break;
    case PK_KV_STORE:
        kv_store_body(PP(const act *, 0), PP(const act *, 1), PP(const int *, 2),
                      PP(const int *, 3), PP(act *, 4), PP(act *, 5), PI(6), PI(7), PI(8), PI(9),
                      bx, nt);
        break;
    case PK_ATTENTION:
        attention_body(PP(const act *, 0), PP(const int *, 1), PP(const int *, 2),
                       PP(const act *, 3), PP(const act *, 4), PP(act *, 5), PI(6), PI(7), PI(8),
                       PI(9), PI(10), PI(11), PF(12), bx, by);
        break;
    case PK_SWIGLU:
        swiglu_body(PP(const act *, 0), PP(const act *, 1), PP(act *, 2), PL(3), li);
        break;
    case PK_ADD: add_body(PP(const act *, 0), PP(const act *, 1), PP(act *, 2), PL(3), li); break;
    case PK_SCALE: scale_body(PP(const act *, 0), PP(act *, 1), PF(2), PL(3), li); break;
    case PK_ACTIVATION:
        activation_body(PP(const act *, 0), PP(act *, 1), PI(2), PL(3), li);
        break;
    case PK_GATHER_ROWS:
        gather_rows_body(PP(const act *, 0), PP(const int *, 1), PP(act *, 2), PI(3), PI(4), bx,
                         nt);
        break;
    case PK_SLICE_COLS:
        slice_cols_body(PP(const act *, 0), PP(act *, 1), PI(2), PI(3), PI(4), PI(5), li);
        break;
    case PK_TO_F32: to_f32_body(PP(const act *, 0), PP(float *, 1), PL(2), li); break;
    case PK_FROM_F32: from_f32_body(PP(const float *, 0), PP(act *, 1), PL(2), li); break;
    case PK_BIAS_ADD: bias_add_body(PP(act *, 0), PP(const wgt *, 1), PI(2), PI(3), li); break;
    case PK_SPLIT_COLS:
        split_cols_body(PP(const act *, 0), PP(act *, 1), PP(act *, 2), PP(act *, 3), PP(act *, 4),
                        PI(5), PI(6), PI(7), PI(8), PI(9), PI(10), li);
        break;
    case PK_QKV_ROPE:
        qkv_rope_body(PP(const act *, 0), PI(1), PP(const act *, 2), PI(3), PP(const act *, 4),
                      PI(5), PP(const wgt *, 6), PP(const wgt *, 7), PP(const int *, 8),
                      PP(const float *, 9), PP(act *, 10), PP(act *, 11), PP(act *, 12), PI(13),
                      PI(14), PI(15), PI(16), PI(17), PI(18), PF(19), bx, by, nt);
        break;
    case PK_GEMV_1:
        gemv_plain<1>(PP(const act *, 0), PP(const wgt *, 1), PP(const wgt *, 2), PP(void *, 3),
                      PI(4), PI(5), PI(6), PI(7), PI(8), bx);
        break;
    case PK_GEMV_SWIGLU_1:
        gemv_swiglu<1>(PP(const act *, 0), PP(const wgt *, 1), PP(const wgt *, 2), PP(act *, 3),
                       PI(4), PI(5), PI(6), PI(7), bx);
        break;
    case PK_ATTENTION_SPLIT:
        attention_split_body(PP(const act *, 0), PP(const int *, 1), PP(const int *, 2),
                             PP(const act *, 3), PP(const act *, 4), PP(float *, 5), PI(6), PI(7),
                             PI(8), PI(9), PI(10), PI(11), PF(12), PI(13), bx, by, bz, nt);
        break;
    case PK_ATTENTION_COMBINE:
        attention_combine_body(PP(const float *, 0), PP(act *, 1), PI(2), PI(3), PI(4), PI(5), bx,
                               by, nt);
        break;
    case PK_ROPE_ATTENTION:
        rope_attention_body<false>(
            PP(const act *, 0), PP(const act *, 1), PP(const act *, 2), PP(const wgt *, 3),
            PP(const wgt *, 4), PP(const int *, 5), PP(const float *, 6), PP(const int *, 7),
            PP(act *, 8), PP(act *, 9), PP(float *, 10), PP(unsigned *, 11), PP(act *, 12),
            PI(13), PI(14), PI(15), PI(16), PI(17), PF(18), PI(19), PI(20), PI(21), PF(22),
            PI(23), by, bz, nt);
        break;
    default: break;
    }
}

// The node loop's tail that both persistent kernels share. sync is the kernel's barrier over
// its node threads (__syncthreads, or the streaming kernel's consumer barrier). pk_run_node:
// every virtual block of node nd this block owns, through the bodies, sync() between two so
// their shared memory is free again; returns how many. pk_count_in: after sync(), the block
// counts them in on done, a fence first so the bodies' stores are visible to whoever sees it.
template <class Sync>
__device__ __forceinline__ unsigned pk_run_node(const pk_node &nd, int pb, int P, Sync sync) {
    unsigned cnt = 0;
    for (int vb = pb; vb < nd.nvb; vb += P) {
        if (cnt) sync();
        pk_run(nd, vb);
        cnt++;
    }
    return cnt;
}
template <class Sync>
__device__ __forceinline__ void pk_count_in(unsigned *done, unsigned cnt, Sync sync) {
    sync();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(done, cnt);
    }
}

extern "C" __global__ void __launch_bounds__(PK_THREADS, PK_MIN_BLOCKS)
    weft_persistent(const pk_node *prog, int n, unsigned *done, unsigned epoch) {
    __shared__ pk_node nd;
    const int P = gridDim.x, pb = blockIdx.x, tid = threadIdx.x;
    if (n < 0 && tid == 0) done[0] = weft_persistent_wsize; // never: keeps the symbol
    for (int i = 0; i < n; i++) {
        __syncthreads(); // every thread is done with the previous node's copy
        if (tid < (int)(sizeof(pk_node) / 8))
            ((unsigned long long *)&nd)[tid] = ((const unsigned long long *)(prog + i))[tid];
        __syncthreads();
        if (tid < 32) {
            pk_prefetch(nd.pf[0][0], nd.pf[0][1], pb, P);
            pk_prefetch(nd.pf[1][0], nd.pf[1][1], pb, P);
        }
        if (pb >= nd.nvb) continue;
        if (nd.wait >= 0) {
            if (tid == 0) pk_wait(done + nd.wait, epoch * nd.wait_nvb);
            __syncthreads();
        }
        auto sync = []() { __syncthreads(); };
        pk_count_in(done + i, pk_run_node(nd, pb, P, sync), sync);
    }
}

// ---- the streaming persistent decode kernel (exec.persistent, option stream; sm_90) ----------
// The same program as weft_persistent, run by one block per SM of MK_THREADS threads: warps
// 0-7 (256 consumer threads) walk the nodes exactly as weft_persistent's blocks do, and warp 8
// is a producer that streams every weight row this block will multiply, in program order, into
// a ring of shared memory with bulk copies (cp.async.bulk, completion on an mbarrier per chunk).
// Weights are never written by a kernel, so the producer never waits for a node: it runs ahead
// across norms, attention and node waits as far as the ring allows, and a product's rows are
// already in shared memory when its input is ready. A chunk is one virtual block of a GEMV node
// (8 / S rows; for gate|up + SwiGLU the gate rows then the up rows), the rows the standalone
// kernel's block bx = vb reads, and the consumers reduce them in gemv_row's order (each lane
// its vectors s*32 + lane + k*S*32 in ascending order, elements in ascending order, then the
// warp's butterfly, then the splits in ascending order), so every output has the standalone
// kernel's bits. Chunks are consumed in the order they were issued; the consumers count them
// (mk_ctl.consumed), which frees their ring bytes and their mbarrier for the producer.
// stamps (optional, the technique's option trace): each node's finish time (globaltimer, the
// latest block) in stamps[i], the kernel's start in stamps[n], and the time the last block with
// work in node i was past its wait in stamps[n + 1 + i].
// 9 warps: the register file of a sub-partition (16K) then allows 168 registers a thread.
#define MK_CONS 256
#define MK_THREADS (MK_CONS + 32)
#define MK_NBAR 32
struct mk_ctl {
    unsigned long long full[MK_NBAR]; // one mbarrier per chunk in flight
    unsigned off[MK_NBAR];            // each chunk's offset in the ring
    unsigned end[MK_NBAR];            // each chunk's end, as a position that only grows
    volatile unsigned consumed;       // chunks the consumers are done with
    volatile unsigned rel[MK_NBAR];   // warps done with each chunk in flight
};
// the consumers' barrier (warps 0-7); bodies use barrier 1 over their own thread counts
__device__ __forceinline__ void mk_csync() {
    asm volatile("bar.sync 2, 256;" ::: "memory");
}
__device__ __forceinline__ void mk_wait_full(unsigned bar, unsigned parity) {
#if __CUDA_ARCH__ >= 900
    unsigned ok = 0;
    do {
        asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!ok);
#endif
}
// GEMV node geometry from its arguments: weights (w0, w1 for gate|up), rows N, columns K, split S
__device__ __forceinline__ void mk_gemv_shape(const pk_node &nd, const wgt *&w0, const wgt *&w1,
                                              int &N, int &K, int &S) {
    if (nd.op == PK_GEMV_1) { // x, w, bias, y, out_f32, T, N, K, S
        w0 = (const wgt *)nd.a[1];
        w1 = nullptr;
        N = (int)nd.a[6];
        K = (int)nd.a[7];
        S = (int)nd.a[8];
    } else { // x, wg, wu, y, T, F, K, S
        w0 = (const wgt *)nd.a[1];
        w1 = (const wgt *)nd.a[2];
        N = (int)nd.a[5];
        K = (int)nd.a[6];
        S = (int)nd.a[7];
    }
}

// The producer (one lane): every chunk of this block, in program order.
__device__ __forceinline__ void mk_produce(const pk_node *prog, int n, int pb, int P, mk_ctl *ctl,
                                           unsigned char *ring, unsigned RB) {
#if __CUDA_ARCH__ >= 900
    unsigned c = 0, head = 0;
    for (int i = 0; i < n; i++) {
        const pk_node &nd = prog[i];
        if (nd.op != PK_GEMV_1 && nd.op != PK_GEMV_SWIGLU_1) continue;
        const wgt *w0, *w1;
        int N, K, S;
        mk_gemv_shape(nd, w0, w1, N, K, S);
        const int R = GEMV_THREADS / 32 / S, nvb = nd.nvb;
        const unsigned rowb = (unsigned)K * (unsigned)sizeof(wgt);
        for (int vb = pb; vb < nvb; vb += P) {
            int r0 = vb * R, rows = N - r0 < R ? N - r0 : R;
            if (rows < 0) rows = 0;
            const unsigned part = (unsigned)rows * rowb, bytes = w1 ? 2 * part : part;
            while (c - ctl->consumed >= MK_NBAR) {
            }
            unsigned pos = head, off = pos % RB;
            if (off + bytes > RB) {
                pos += RB - off;
                off = 0;
            }
            for (;;) { // every chunk before the last consumed one's end is free
                unsigned cons = ctl->consumed;
                unsigned freed = cons ? ctl->end[(cons - 1) % MK_NBAR] : 0u;
                if (pos + bytes - freed <= RB) break;
            }
            const unsigned b = c % MK_NBAR, bar = smem_addr(&ctl->full[b]);
            ctl->off[b] = off;
            ctl->end[b] = pos + bytes;
            mbar_expect(&ctl->full[b], bytes);
            if (part) {
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                             "[%0], [%1], %2, [%3];" ::"r"(smem_addr(ring + off)),
                             "l"(w0 + (long)r0 * K), "r"(part), "r"(bar)
                             : "memory");
                if (w1)
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
                                 "bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(ring + off + part)),
                                 "l"(w1 + (long)r0 * K), "r"(part), "r"(bar)
                                 : "memory");
            }
            head = pos + bytes;
            c++;
        }
    }
#endif
}

// Every virtual block of a GEMV node this block owns (vb = pb, pb + P, ...; chunk cc, cc + 1,
// ... of the ring), from the chunks in shared memory and x staged in xs: gemv_plain /
// gemv_swiglu at one row with gemv_row's reduction order (each lane's vectors in ascending
// order, four loads issued before their FMAs, then the warp's butterfly, then the S splits of
// a row in ascending order). The warps run on their own: warp w computes split w % S of row
// w / S of each chunk, waits for the chunk itself, releases it once its loads are in
// registers (the eighth warp to release a chunk counts it consumed), and the S warps of a row
// meet at their own named barrier (3 + row group) to add the splits through red[], which
// alternates between two halves so a warp may run a chunk ahead. Returns the chunks used.
template <int NW>
__device__ __forceinline__ unsigned mk_gemv_node(const pk_node &nd, int pb, int P, unsigned cc,
                                                 const act *xs, const unsigned char *ring,
                                                 mk_ctl *ctl) {
    __shared__ float red[2][GEMV_THREADS / 32][2];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const wgt *w0, *w1;
    int N, K, S;
    mk_gemv_shape(nd, w0, w1, N, K, S);
    const int R = GEMV_THREADS / 32 / S, s = warp % S, grp = warp / S;
    const int nv = K / GEMV_VEC, stride = S * 32;
    const unsigned rowb = (unsigned)K * (unsigned)sizeof(wgt);
    const bool probe = nd.gy < 0; // cuda_mk_bench's probe of the stream alone: no arithmetic
    const uint4 *xv = (const uint4 *)xs;
    unsigned c = cc;
    for (int vb = pb; vb < nd.nvb; vb += P, c++) {
        const unsigned b = c % MK_NBAR;
        mk_wait_full(smem_addr(&ctl->full[b]), (c / MK_NBAR) & 1);
        const int n = vb * R + grp;
        const int rows = N - vb * R < R ? N - vb * R : R;
        const unsigned char *chunk = ring + ctl->off[b];
        float acc[NW];
#pragma unroll
        for (int r = 0; r < NW; r++) acc[r] = 0.f;
        if (n < N && !probe) {
            const uint4 *wr[NW];
#pragma unroll
            for (int r = 0; r < NW; r++)
                wr[r] = (const uint4 *)(chunk + r * (unsigned)rows * rowb + (unsigned)grp * rowb);
            #pragma unroll 1
            for (int v0 = s * 32 + lane; v0 < nv; v0 += 4 * stride) {
                // every load unconditional (vectors past the row read vector 0, and their FMAs
                // are skipped): a predicated load would make the registers keep the previous
                // trip's values, which the compiler then carries through local memory
                uint4 xq[4], wq[4][NW];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int v = v0 + j * stride < nv ? v0 + j * stride : 0;
                    xq[j] = xv[v];
#pragma unroll
                    for (int r = 0; r < NW; r++) wq[j][r] = wr[r][v];
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    if (v0 + j * stride >= nv) break;
                    float xf[GEMV_VEC], wf[GEMV_VEC];
                    unpack16(xq[j], xf);
#pragma unroll
                    for (int r = 0; r < NW; r++) {
                        unpack16(wq[j][r], wf);
#pragma unroll
                        for (int e = 0; e < GEMV_VEC; e++) acc[r] = fmaf(xf[e], wf[e], acc[r]);
                    }
                }
            }
        }
        // this warp is done with the chunk; the last of the eight frees it for the producer
        __syncwarp();
        if (lane == 0) {
            if (atomicAdd((unsigned *)&ctl->rel[b], 1u) == GEMV_THREADS / 32 - 1) {
                ctl->rel[b] = 0;
                __threadfence_block();
                atomicMax((unsigned *)&ctl->consumed, c + 1);
            }
        }
        if (probe) continue;
#pragma unroll
        for (int r = 0; r < NW; r++) acc[r] = warp_sum(acc[r]);
        if (S > 1) {
            if (lane == 0)
#pragma unroll
                for (int r = 0; r < NW; r++) red[c & 1][warp][r] = acc[r];
            asm volatile("bar.sync %0, %1;" ::"r"(3 + grp), "r"(32 * S) : "memory");
            if (s == 0)
#pragma unroll
                for (int r = 0; r < NW; r++) {
                    float t = red[c & 1][warp][r];
                    for (int j = 1; j < S; j++) t += red[c & 1][warp + j][r];
                    acc[r] = t;
                }
        }
        if (n >= N || s != 0 || lane != 0) continue;
        if (NW == 1) {
            const wgt *bias = (const wgt *)nd.a[2];
            void *y = (void *)nd.a[3];
            float bb = bias ? W::ld(bias, n) : 0.f;
            float v = acc[0] + bb;
            if ((int)nd.a[4]) ((float *)y)[n] = v;
            else A::st((act *)y, n, v);
        } else {
            float gg = A::round(acc[0]), uu = A::round(acc[NW - 1]);
            float sg = A::round(gg / (1.f + __expf(-gg)));
            A::st((act *)nd.a[3], n, sg * uu);
        }
    }
    return c - cc;
}

// A one-row norm folded into the product after it (the host sets that product's `reserved` to
// the norm's index + 1 and takes the norm out of the program): every block computes it into
// xs itself, with add_rmsnorm_body's / rmsnorm_body's arithmetic at the norm's own thread count
// nt (K virtual threads per consumer), so xs holds the bits the norm would have stored; block
// 0 also stores r (add_rmsnorm) and y for the nodes after the product. vs: D floats, then
// room for x, res and w (D each), which all 256 consumers first copy into shared memory in one
// round of 16-byte loads: the norm's loops then wait for no load from L2 (read one element
// after another they cost a round trip each).
__device__ __forceinline__ void mk_stage(void *dst, const void *src, int bytes) {
    if (((unsigned long long)src & 15) == 0 && (bytes & 15) == 0) {
        #pragma unroll 1
        for (int v = threadIdx.x; v < bytes / 16; v += MK_CONS)
            ((uint4 *)dst)[v] = ((const uint4 *)src)[v];
    } else {
        #pragma unroll 1
        for (int v = threadIdx.x; v < bytes; v += MK_CONS)
            ((unsigned char *)dst)[v] = ((const unsigned char *)src)[v];
    }
}
template <int K>
__device__ __noinline__ void mk_norm(const pk_node &nm, act *xs, float *vs, bool glob) {
    const bool add = nm.op == PK_ADD_RMSNORM;
    // add_rmsnorm: x, res, w, y, r, T, D, eps; rmsnorm: x, w, y, T, cols, group, eps
    const act *gx = (const act *)nm.a[0], *gres = add ? (const act *)nm.a[1] : nullptr;
    const wgt *gw = (const wgt *)nm.a[add ? 2 : 1];
    act *y = (act *)nm.a[add ? 3 : 2], *r = add ? (act *)nm.a[4] : nullptr;
    const int D = (int)nm.a[add ? 6 : 4];
    const float eps = __int_as_float((int)nm.a[add ? 7 : 6]);
    const int nt = nm.nt, np = nt / K;
    // staged copies: x | res | w, each 16-byte aligned
    const int ab = (D * (int)sizeof(act) + 15) & ~15;
    unsigned char *stg = (unsigned char *)(vs + ((D + 3) & ~3));
    act *x = (act *)stg, *res = add ? (act *)(stg + ab) : nullptr;
    wgt *w = (wgt *)(stg + 2 * ab);
    mk_stage(x, gx, D * (int)sizeof(act));
    if (add) mk_stage(res, gres, D * (int)sizeof(act));
    mk_stage(w, gw, D * (int)sizeof(wgt));
    mk_csync();
    if ((int)threadIdx.x >= np) return;
    float ss[K];
    norm_sumsq<K>(ss, D, nt, [&](int i) {
        float v = add ? A::round(A::ld(x, i) + A::ld(res, i)) : A::ld(x, i);
        if (add && glob) A::st(r, i, v);
        vs[i] = v;
        return v;
    });
    float rs = rsqrtf(block_sum<K>(ss, nt) / D + eps);
    #pragma unroll 1
    for (int i = threadIdx.x; i < D; i += np) {
        float o = W::ld(w, i) * A::round(vs[i] * rs);
        A::st(xs, i, o);
        if (glob) A::st(y, i, o);
    }
}

extern "C" __global__ void __launch_bounds__(MK_THREADS, 1)
    weft_megakernel(const pk_node *prog, int n, unsigned *done, unsigned epoch, unsigned ring_off,
                    unsigned ring_bytes, unsigned vs_off, unsigned long long *stamps) {
    __shared__ pk_node nd, nm;
    __shared__ mk_ctl ctl;
    extern __shared__ __align__(128) unsigned char mk_dyn[];
    unsigned char *ring = mk_dyn + ring_off;
    act *xs = (act *)mk_dyn;               // a product's x (the attention bodies' area otherwise)
    float *vs = (float *)(mk_dyn + vs_off); // a folded norm's row
    const int P = gridDim.x, pb = blockIdx.x, tid = threadIdx.x;
#if __CUDA_ARCH__ >= 900
    if (tid == 0) {
        for (int b = 0; b < MK_NBAR; b++)
            mbar_init(&ctl.full[b], 1);
        ctl.consumed = 0;
        for (int b = 0; b < MK_NBAR; b++) ctl.rel[b] = 0;
        mbar_init_fence();
        if (stamps && pb == 0) stamps[n] = globaltimer();
    }
    __syncthreads();
    if (tid >= MK_CONS) {
        if (tid == MK_CONS) mk_produce(prog, n, pb, P, &ctl, ring, ring_bytes);
        return;
    }
    unsigned cc = 0; // chunks consumed
    auto csync = []() { mk_csync(); };
    for (int i = 0; i < n; i++) {
        mk_csync(); // every consumer is done with the previous node's copy
        if (tid < (int)(sizeof(pk_node) / 8))
            ((unsigned long long *)&nd)[tid] = ((const unsigned long long *)(prog + i))[tid];
        mk_csync();
        if (pb >= nd.nvb) continue;
        if (nd.reserved) { // the folded norm's arguments
            if (tid < (int)(sizeof(pk_node) / 8))
                ((unsigned long long *)&nm)[tid] =
                    ((const unsigned long long *)(prog + (nd.reserved & 0x7fffffffu) - 1))[tid];
            mk_csync();
        }
        if (nd.wait >= 0) {
            if (tid == 0) pk_wait(done + nd.wait, epoch * nd.wait_nvb);
            mk_csync();
        }
        if (stamps && tid == 0) atomicMax(stamps + n + 1 + i, globaltimer());
        unsigned cnt;
        const bool gemv = nd.op == PK_GEMV_1 || nd.op == PK_GEMV_SWIGLU_1;
        if (gemv) { // x into xs: the folded norm, or the product's input
            if (nd.reserved) {
                const bool glob = pb == 0;
                if (nm.nt <= MK_CONS) mk_norm<1>(nm, xs, vs, glob);
                else if (nm.nt == 2 * MK_CONS) mk_norm<2>(nm, xs, vs, glob);
                else mk_norm<4>(nm, xs, vs, glob);
                if (nd.reserved >> 31) {
                    // guarded: the product's output overlaps the norm's buffers, so no block
                    // stores before every block with work here has finished the norm
                    // (done[n + i] counts them, growing by that many a launch)
                    mk_csync();
                    if (tid == 0) {
                        __threadfence();
                        atomicAdd(done + n + i, 1u);
                        pk_wait(done + n + i, epoch * (unsigned)(nd.nvb < P ? nd.nvb : P));
                    }
                }
            } else {
                const int K = (int)nd.a[nd.op == PK_GEMV_1 ? 7 : 6];
                const uint4 *src = (const uint4 *)nd.a[0];
                #pragma unroll 1
                for (int v = tid; v < K / GEMV_VEC; v += MK_CONS) ((uint4 *)xs)[v] = src[v];
            }
            mk_csync();
            cnt = nd.op == PK_GEMV_1 ? mk_gemv_node<1>(nd, pb, P, cc, xs, ring, &ctl)
                                     : mk_gemv_node<2>(nd, pb, P, cc, xs, ring, &ctl);
            cc += cnt;
        } else {
            cnt = pk_run_node(nd, pb, P, csync);
        }
        pk_count_in(done + i, cnt, csync);
        if (tid == 0 && stamps) atomicMax(stamps + i, globaltimer());
    }
#else
    if (n < 0 && tid == 0) done[0] = ring_off + ring_bytes + vs_off + (stamps ? 1u : 0u) + epoch;
#endif
}
#endif

// ---- weight prefetch into L2 (exec.l2-prefetch) ------------------------------------------------
// Up to L2PF_MAX byte ranges of weights (which no kernel writes) are pulled into L2 while the
// kernels before and after this one run, so a later product reads them from L2 instead of DRAM.
// The kernel lets its dependant launch at once, issues its share of the ranges, and only then
// waits for its predecessor: it must not finish before that kernel, or a kernel after it would no
// longer be ordered after the predecessor (see pdl_enter). Two ways to issue (bulk):
//   1: cp.async.bulk.prefetch.L2 of 16 KiB pieces dealt round-robin to every thread of the grid
//      (measured on the H200: the whole node then takes ~250-375 GB/s, and the kernel does not
//      retire before its bulk prefetches are done);
//   0: prefetch.global.L2 of one 128-byte line per thread per trip (no register, no completion).
#define L2PF_MAX 8
#define L2PF_PIECE 16384ull
struct l2pf_ranges {
    unsigned long long p[L2PF_MAX], n[L2PF_MAX]; // address and bytes (multiples of 16)
};
extern "C" __global__ void weft_l2_prefetch(l2pf_ranges r, int nr, int bulk) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long nth = (unsigned long long)gridDim.x * blockDim.x, unit_no = 0;
    const unsigned long long unit = bulk ? L2PF_PIECE : 128ull;
    for (int k = 0; k < nr && k < L2PF_MAX; k++) {
        unsigned long long n = r.n[k], nu = (n + unit - 1) / unit;
        // unit numbers run on across ranges so the threads stay evenly loaded
        unsigned long long first = (tid + nth - unit_no % nth) % nth;
        for (unsigned long long q = first; q < nu; q += nth) {
            unsigned long long o = q * unit;
#if __CUDA_ARCH__ >= 900
            if (bulk) {
                unsigned sz = (unsigned)(n - o < unit ? n - o : unit);
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.p[k] + o),
                             "r"(sz)
                             : "memory");
                continue;
            }
#endif
            asm volatile("prefetch.global.L2 [%0];" ::"l"(r.p[k] + o));
        }
        unit_no += nu;
    }
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    trace_mark();
}
