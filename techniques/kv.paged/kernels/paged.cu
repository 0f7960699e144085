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
