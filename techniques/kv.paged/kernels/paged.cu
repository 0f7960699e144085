// paged.cu: kv.paged's cuda kernels, compiled at run time by NVRTC (paged_cuda.c) for the
// device's architecture, once per cache dtype: KVP_T is 1 (f32), 2 (f16) or 3 (bf16), the dtype
// of the activations and of the cache alike. No CUDA headers are needed.
//
// The cache is the "paged" layout of kv_paged.h: per layer, K and V are
// (n_pages, page_size, n_kv_heads, head_dim); position p of the request in kv slot s lives in
// page tables[s * max_blocks + p / page_size], row p % page_size. The row -> slot map comes from
// the step input in.kv_slots, the block tables from the provider's device copy, so the kernels
// take no host data and a step can be captured into a CUDA graph.

typedef unsigned short u16;
#define KVP_INF __int_as_float(0x7f800000)

__device__ __forceinline__ float kvp_bf16_f32(u16 h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ u16 kvp_f32_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)0x7fc0;
    return (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float kvp_f16_f32(u16 h) {
    float f;
    asm("{ .reg .f16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}

template <int D> struct kvp_el;
template <> struct kvp_el<1> {
    typedef float T;
    static __device__ __forceinline__ float ld(const T *p, long i) { return p[i]; }
    static __device__ __forceinline__ void st(T *p, long i, float v) { p[i] = v; }
};
template <> struct kvp_el<2> {
    typedef u16 T;
    static __device__ __forceinline__ float ld(const T *p, long i) { return kvp_f16_f32(p[i]); }
    static __device__ __forceinline__ void st(T *p, long i, float v) {
        u16 h;
        asm("{ .reg .f16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(v));
        p[i] = h;
    }
};
template <> struct kvp_el<3> {
    typedef u16 T;
    static __device__ __forceinline__ float ld(const T *p, long i) { return kvp_bf16_f32(p[i]); }
    static __device__ __forceinline__ void st(T *p, long i, float v) { p[i] = kvp_f32_bf16(v); }
};
typedef kvp_el<KVP_T> E;
typedef E::T el;

__device__ __forceinline__ float kvp_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The page of position p of the slot whose table row is trow, or -1.
__device__ __forceinline__ int kvp_page(const int *trow, int p, int page_size, int max_blocks) {
    int b = p / page_size;
    return b < max_blocks ? trow[b] : -1;
}

// Stores row t's k and v (n_kv_heads * head_dim values each) at its position. One block per row.
extern "C" __global__ void kvp_store(const el *k, const el *v, const int *pos, const int *slots,
                                     const int *tables, el *kc, el *vc, int T, int Hkv, int hd,
                                     int page_size, int max_blocks, int n_slots, int n_pages) {
    int t = blockIdx.x;
    if (t >= T) return;
    int p = pos[t], s = slots[t];
    if (p < 0 || s < 0 || s >= n_slots) return;
    int page = kvp_page(tables + (long)s * max_blocks, p, page_size, max_blocks);
    if (page < 0 || page >= n_pages) return;
    long row = (long)Hkv * hd;
    long dst = ((long)page * page_size + p % page_size) * row;
    for (long i = threadIdx.x; i < row; i += blockDim.x) {
        kc[dst + i] = k[(long)t * row + i];
        vc[dst + i] = v[(long)t * row + i];
    }
}

// Attention of row t, query head h over positions [start, pos[t]] of its slot. Block: 4 warps;
// warp w takes positions start + w, start + w + 4, ...; lane l holds head dims l, l + 32, ...
// (head_dim <= 256); online softmax per warp, then one merge across the warps. The same
// structure as the contiguous kernel of the cuda backend, with each key's address looked up in
// the block table, so the two differ only by that lookup.
#define KVP_WARPS 4
#define KVP_MAXE 8
extern "C" __global__ void kvp_attention(const el *q, const int *pos, const int *slots,
                                         const int *tables, const el *kc, const el *vc, el *o,
                                         int T, int Hq, int Hkv, int hd, int page_size,
                                         int max_blocks, int n_slots, int n_pages, int window,
                                         float scale) {
    int t = blockIdx.x, h = blockIdx.y;
    if (t >= T || h >= Hq) return;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int kvh = h / (Hq / Hkv);
    int p = pos[t], s = slots[t];
    bool ok = p >= 0 && s >= 0 && s < n_slots;
    int start = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const int *trow = tables + (long)(ok ? s : 0) * max_blocks;
    float qr[KVP_MAXE], acc[KVP_MAXE];
    int ne = 0;
    for (int e = 0; e < KVP_MAXE; e++) {
        int d = lane + 32 * e;
        qr[e] = d < hd ? E::ld(q, (long)t * Hq * hd + (long)h * hd + d) * scale : 0.f;
        acc[e] = 0.f;
        if (d < hd) ne = e + 1;
    }
    float m = -KVP_INF, l = 0.f;
    long row = (long)Hkv * hd;
    for (int j = start + warp; ok && j <= p; j += KVP_WARPS) {
        int page = kvp_page(trow, j, page_size, max_blocks);
        if (page < 0 || page >= n_pages) continue; // unmapped: the provider never allows it
        long at = ((long)page * page_size + j % page_size) * row + (long)kvh * hd;
        const el *kr = kc + at, *vr = vc + at;
        float dot = 0.f;
        for (int e = 0; e < ne; e++) {
            int d = lane + 32 * e;
            if (d < hd) dot += qr[e] * E::ld(kr, d);
        }
        dot = kvp_warp_sum(dot);
        float mn = fmaxf(m, dot);
        float c = __expf(m - mn), pj = __expf(dot - mn);
        for (int e = 0; e < ne; e++) {
            int d = lane + 32 * e;
            if (d < hd) acc[e] = acc[e] * c + pj * E::ld(vr, d);
        }
        l = l * c + pj;
        m = mn;
    }
    __shared__ float sm[KVP_WARPS], sl[KVP_WARPS];
    __shared__ float sacc[KVP_WARPS][256];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
    for (int e = 0; e < ne; e++) {
        int d = lane + 32 * e;
        if (d < hd) sacc[warp][d] = acc[e];
    }
    __syncthreads();
    if (warp != 0) return;
    float M = -KVP_INF;
    for (int w = 0; w < KVP_WARPS; w++) M = fmaxf(M, sm[w]);
    float L = 0.f;
    for (int w = 0; w < KVP_WARPS; w++)
        if (sm[w] != -KVP_INF) L += sl[w] * __expf(sm[w] - M);
    for (int e = 0; e < ne; e++) {
        int d = lane + 32 * e;
        if (d >= hd) continue;
        float v = 0.f;
        for (int w = 0; w < KVP_WARPS; w++)
            if (sm[w] != -KVP_INF) v += sacc[w][d] * __expf(sm[w] - M);
        E::st(o, (long)t * Hq * hd + (long)h * hd + d, L > 0.f ? v / L : 0.f);
    }
}

// Split-KV attention with the query heads of one KV group packed together. Grid (T, Hkv, S):
// block (t, g, s) takes row t's G = Hq / Hkv query heads (G <= 8) over the 32-position chunks
// s, s + S, s + 2S, ... of [start, pos[t]] (chunks aligned to absolute positions), reading each
// K and V row of a chunk from the pages once into shared memory for all G heads, with an online
// softmax across its chunks. All 256 threads share each chunk's arithmetic: the G x 32 scores
// (8 / G threads per score), then the G x head_dim outputs (one or more per thread); one warp
// per head keeps the running max and sum between the two. S = 1 writes the output; otherwise each
// block writes its unnormalised accumulator, max and sum for kvp_attention_combine. S depends on
// the step's row count only (never on positions), so a captured step stays valid as the context
// grows; the grid's chunk stride keeps every block busy for any context length.
#define KVS_CHUNK 32
#define KVS_MAXG 8
#define KVS_THREADS 256

__device__ __forceinline__ float kvp_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Loads n rows (positions j0 .. j0 + n - 1) of head group g's K and V into ks (stride hd + 1)
// and vs (stride hd), converting to f32; 16-byte loads when a head's row allows them.
__device__ __forceinline__ void kvs_load(const int *trow, const el *kc, const el *vc, float *ks,
                                         float *vs, int j0, int n, int hd, long row, int g,
                                         int page_size, int max_blocks, int n_pages) {
    const int V = 16 / (int)sizeof(el);
    if (hd % V == 0) {
        int per = hd / V;
        for (int i = threadIdx.x; i < n * per; i += blockDim.x) {
            int j = i / per, d = (i % per) * V, p = j0 + j;
            int page = kvp_page(trow, p, page_size, max_blocks);
            if (page < 0 || page >= n_pages) page = 0; // never mapped: the provider forbids it
            long at = ((long)page * page_size + p % page_size) * row + (long)g * hd + d;
            uint4 kw = *(const uint4 *)(kc + at), vw = *(const uint4 *)(vc + at);
            const el *ke = (const el *)&kw, *ve = (const el *)&vw;
#pragma unroll
            for (int u = 0; u < V; u++) {
                ks[j * (hd + 1) + d + u] = E::ld(ke, u);
                vs[j * hd + d + u] = E::ld(ve, u);
            }
        }
    } else {
        for (int i = threadIdx.x; i < n * hd; i += blockDim.x) {
            int j = i / hd, d = i % hd, p = j0 + j;
            int page = kvp_page(trow, p, page_size, max_blocks);
            if (page < 0 || page >= n_pages) page = 0;
            long at = ((long)page * page_size + p % page_size) * row + (long)g * hd + d;
            ks[j * (hd + 1) + d] = E::ld(kc, at);
            vs[j * hd + d] = E::ld(vc, at);
        }
    }
}

extern "C" __global__ void __launch_bounds__(KVS_THREADS) kvp_attention_split(
    const el *q, const int *pos, const int *slots, const int *tables, const el *kc, const el *vc,
    el *o, float *part, int T, int Hq, int Hkv, int hd, int page_size, int max_blocks,
    int n_slots, int n_pages, int window, float scale, int S) {
    int t = blockIdx.x, g = blockIdx.y, s = blockIdx.z;
    if (t >= T || g >= Hkv) return;
    int G = Hq / Hkv;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int p = pos[t], slot = slots[t];
    bool ok = p >= 0 && slot >= 0 && slot < n_slots;
    int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    extern __shared__ float smem[];
    float *ks = smem;                          // (KVS_CHUNK, hd + 1)
    float *vs = ks + KVS_CHUNK * (hd + 1);     // (KVS_CHUNK, hd)
    float *qs = vs + KVS_CHUNK * hd;           // (G, hd)
    float *ps = qs + KVS_MAXG * hd;            // (G, KVS_CHUNK): scores, then weights
    __shared__ float sm_m[KVS_MAXG], sm_l[KVS_MAXG], sm_c[KVS_MAXG];
    for (int i = tid; i < G * hd; i += blockDim.x)
        qs[i] = E::ld(q, (long)t * Hq * hd + (long)g * G * hd + i) * scale;
    if (tid < KVS_MAXG) {
        sm_m[tid] = -KVP_INF;
        sm_l[tid] = 0.f;
    }
    // Scores: TPS threads (consecutive lanes) per (head, position), each summing the dims
    // part, part + TPS, ...; outputs: thread tid holds (head, dim) pairs tid, tid + 256, ...
    int TPS = 8 / G >= 8 ? 8 : 8 / G >= 4 ? 4 : 8 / G >= 2 ? 2 : 1;
    int si = tid / TPS, part_ix = tid % TPS;
    int sh = si / KVS_CHUNK, sj = si % KVS_CHUNK;
    int n_out = G * hd;
    const int *trow = tables + (long)(ok ? slot : 0) * max_blocks;
    long row = (long)Hkv * hd;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.f;
    int c_last = ok ? p / KVS_CHUNK : -1;
    for (int c = lo / KVS_CHUNK + s; c <= c_last; c += S) {
        int j0 = c * KVS_CHUNK > lo ? c * KVS_CHUNK : lo;
        int j1 = c * KVS_CHUNK + KVS_CHUNK - 1 < p ? c * KVS_CHUNK + KVS_CHUNK - 1 : p;
        int n = j1 - j0 + 1;
        __syncthreads(); // the previous chunk's readers are done (and qs, sm_* are written)
        kvs_load(trow, kc, vc, ks, vs, j0, n, hd, row, g, page_size, max_blocks, n_pages);
        __syncthreads();
        {
            float d = 0.f;
            if (sh < G && sj < n) {
                const float *qh = qs + sh * hd, *kr = ks + sj * (hd + 1);
                for (int e = part_ix; e < hd; e += TPS) d += qh[e] * kr[e];
            }
            for (int off = TPS >> 1; off > 0; off >>= 1)
                d += __shfl_xor_sync(0xffffffffu, d, off);
            if (sh < G && part_ix == 0) ps[sh * KVS_CHUNK + sj] = sj < n ? d : -KVP_INF;
        }
        __syncthreads();
        if (warp < G) { // online softmax of head `warp` over this chunk (lane = position)
            float sc = ps[warp * KVS_CHUNK + lane];
            float m = sm_m[warp];
            float mn = fmaxf(m, kvp_warp_max(sc));
            float w = lane < n ? __expf(sc - mn) : 0.f;
            ps[warp * KVS_CHUNK + lane] = w;
            float sum = kvp_warp_sum(w);
            if (lane == 0) {
                float corr = __expf(m - mn);
                sm_c[warp] = corr;
                sm_l[warp] = sm_l[warp] * corr + sum;
                sm_m[warp] = mn;
            }
        }
        __syncthreads();
#pragma unroll
        for (int e = 0; e < 8; e++) {
            int oi = tid + KVS_THREADS * e;
            if (oi < n_out) {
                int h = oi / hd, d = oi % hd;
                const float *pw = ps + h * KVS_CHUNK;
                float a = 0.f;
                for (int j = 0; j < n; j++) a += pw[j] * vs[j * hd + d];
                acc[e] = acc[e] * sm_c[h] + a;
            }
        }
    }
    __syncthreads(); // sm_m / sm_l final (also when this block had no chunk)
#pragma unroll
    for (int e = 0; e < 8; e++) {
        int oi = tid + KVS_THREADS * e;
        if (oi >= n_out) continue;
        int h = oi / hd, d = oi % hd, hq = g * G + h;
        if (S == 1) {
            float l = sm_l[h];
            E::st(o, (long)t * Hq * hd + (long)hq * hd + d, l > 0.f ? acc[e] / l : 0.f);
        } else {
            long at = (((long)t * Hq + hq) * S + s) * ((long)hd + 2);
            part[at + d] = acc[e];
            if (d == 0) {
                part[at + hd] = sm_m[h]; // -inf: this split had no chunk, the combine skips it
                part[at + hd + 1] = sm_l[h];
            }
        }
    }
}

// Merges the S splits of kvp_attention_split: o = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
extern "C" __global__ void kvp_attention_combine(const float *part, el *o, int T, int Hq, int hd,
                                                 int S) {
    int t = blockIdx.x, h = blockIdx.y;
    if (t >= T || h >= Hq) return;
    long pstride = (long)hd + 2;
    const float *pp = part + ((long)t * Hq + h) * S * pstride;
    float M = -KVP_INF;
    for (int s = 0; s < S; s++) M = fmaxf(M, pp[s * pstride + hd]);
    float L = 0.f;
    for (int s = 0; s < S; s++) {
        float ms = pp[s * pstride + hd];
        if (ms != -KVP_INF) L += pp[s * pstride + hd + 1] * __expf(ms - M);
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float v = 0.f;
        for (int s = 0; s < S; s++) {
            float ms = pp[s * pstride + hd];
            if (ms != -KVP_INF) v += pp[s * pstride + d] * __expf(ms - M);
        }
        E::st(o, (long)t * Hq * hd + (long)h * hd + d, L > 0.f ? v / L : 0.f);
    }
}

// ---- prefill on tensor cores ---------------------------------------------------------------
#if KVP_T == 2 || KVP_T == 3
#include "attention_tc.cuh"

// The paged layout for attention_tc_body: position p of slot s in page tables[s * max_blocks +
// p / page_size], row p % page_size.
struct kvp_pages {
    const int *tables;
    int page_size, max_blocks, n_pages;
    long row; // n_kv_heads * head_dim
    __device__ __forceinline__ long at(int slot, int p) const {
        int page = kvp_page(tables + (long)slot * max_blocks, p, page_size, max_blocks);
        return page >= 0 && page < n_pages ? ((long)page * page_size + p % page_size) * row : -1;
    }
};

// attention_tc_body (attention_tc.cuh has the tiles and the arithmetic) over the pages.
extern "C" __global__ void __launch_bounds__(128) kvp_attention_tc(
    const el *q, const int *pos, const int *slots, const int *tables, const el *kc, const el *vc,
    el *o, float *part, int T, int Hq, int Hkv, int hd, int page_size, int max_blocks,
    int n_slots, int n_pages, int window, float scale, int S) {
    kvp_pages cache = {tables, page_size, max_blocks, n_pages, (long)Hkv * hd};
    attention_tc_body<KVP_T, E>(q, pos, slots, cache, kc, vc, o, part, T, Hq, Hkv, hd, n_slots,
                                window, scale, S);
}
#endif
