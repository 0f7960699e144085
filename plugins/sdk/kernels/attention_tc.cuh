// attention_tc.cuh: prefill attention on tensor cores, shared by the cuda backend (kernels/core.cu,
// the contiguous kv cache) and kv.paged (kernels/paged.cu, pages). NVRTC gets no include path:
// embed.cmake pastes this file where a kernel source includes it, and nvcc takes it with -I.
// Needs no CUDA header and defines only names that start with atc_ / ATC_.
//
// Each kernel passes:
//   D      2 (f16) or 3 (bf16): the mma operand type, that of the activations and the cache;
//   E      its element type: E::T (16-bit storage), E::st(p, i, float) rounding to D;
//   Cache  where a position's K/V row lives: `long at(int slot, int p) const` gives the element
//          offset of position p's row (n_kv_heads * head_dim values) of the request in kv slot
//          `slot`, or -1 where it has none. The slot passed is valid (0 <= slot < n_slots).
#define ATC_CHUNK 32
#define ATC_MAXHD 128
#define ATC_INF __int_as_float(0x7f800000)

// Two floats as one register of two 16-bit values, the first in the low half (mma operand order).
template <int D> __device__ __forceinline__ unsigned atc_pack(float lo, float hi) {
    unsigned r;
    if (D == 3)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// d += a (16x16, row) x b (16x8, col), f32 accumulators.
template <int D>
__device__ __forceinline__ void atc_mma(float *d, const unsigned *a, unsigned b0, unsigned b1) {
    if (D == 3)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Dynamic shared memory of a block for head_dim hd, in bytes: K (ATC_CHUNK, hd + 8) and V
// transposed (hd, ATC_CHUNK + 8), 16-bit elements.
#define ATC_SMEM(hd) ((ATC_CHUNK * ((hd) + 8) + (hd) * (ATC_CHUNK + 8)) * 2)
extern __shared__ __align__(16) unsigned short atc_smem[];

// Grid (T, Hkv, S), 128 threads (4 warps); G = Hq / Hkv is 1, 2 or 4, R = 64 / G; hd a multiple
// of 16 up to ATC_MAXHD. Split s takes the tile's chunks s, s + S, ... and with S > 1 writes
// unnormalised partials (per row and query head, S records of hd accumulators, the max and the
// sum: the split-KV combine kernels' layout) instead of the output.
// Tiles: the rows of one request are consecutive in a step with consecutive positions; a tile
// starts at a row whose request differs from the previous row's or whose position is a multiple
// of R, and holds up to R rows of that request up to the next such start. Only the block of a
// tile's first row works (O(1) test); it takes the tile's rows and the group's G query heads:
// warp w takes query head g * G + w % G for rows 16 * (w / G) ... of the tile. S = Q K^T of each
// 32-position chunk on tensor cores (K from shared memory), the online softmax in registers
// (f32), then O += P V on tensor cores with P rounded to the activation dtype and V transposed in
// shared memory. Chunks are aligned to absolute positions; each row masks its own causal (and
// window) range, so a row's result does not depend on which other rows share its tile.
template <int D, class E, class Cache>
__device__ __forceinline__ void attention_tc_body(const typename E::T *q, const int *pos,
                                                  const int *slots, const Cache &cache,
                                                  const typename E::T *kc, const typename E::T *vc,
                                                  typename E::T *o, float *part, int T, int Hq,
                                                  int Hkv, int hd, int n_slots, int window,
                                                  float scale, int S) {
    int G = Hq / Hkv, R = 64 / G;
    int r0 = blockIdx.x, g = blockIdx.y, sp = blockIdx.z;
    if (r0 >= T || g >= Hkv) return;
    int slot = slots[r0], p0 = pos[r0];
    if (r0 > 0 && slots[r0 - 1] == slot && p0 % R != 0) return; // not a tile's first row
    int n = 1; // the tile's rows: the same request, up to the next aligned position
    while (n < R && r0 + n < T && slots[r0 + n] == slot && pos[r0 + n] % R != 0) n++;
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int hq = g * G + warp % G;
    int ia = 16 * (warp / G) + (lane >> 2), ib = ia + 8; // rows of this thread within the tile
    bool valid = slot >= 0 && slot < n_slots;
    bool oka = ia < n && valid, okb = ib < n && valid;
    int ra = oka ? r0 + ia : r0, rb = okb ? r0 + ib : r0; // inactive rows read row r0, write nothing
    int pa = oka ? pos[ra] : -1, pb = okb ? pos[rb] : -1;
    int loa = window > 0 && pa - window + 1 > 0 ? pa - window + 1 : 0;
    int lob = window > 0 && pb - window + 1 > 0 ? pb - window + 1 : 0;
    __shared__ int s_lo, s_hi;
    if (tid == 0) {
        int lo = 0x7fffffff, hi = -1;
        for (int r = r0; r < r0 + n && valid; r++) {
            int p = pos[r], l = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            lo = l < lo ? l : lo;
            hi = p > hi ? p : hi;
        }
        s_lo = hi < 0 ? 0 : lo;
        s_hi = hi;
    }
    int kst = hd + 8, vst = ATC_CHUNK + 8; // padded strides (16-bit elements)
    unsigned short *ks = atc_smem;                   // (ATC_CHUNK, hd + 8)
    unsigned short *vt = atc_smem + ATC_CHUNK * kst; // (hd, ATC_CHUNK + 8): V transposed
    const unsigned short *qh = (const unsigned short *)q;
    unsigned qf[ATC_MAXHD / 16][4];
    int nk = hd / 16, nd = hd / 8;
#pragma unroll
    for (int kk = 0; kk < ATC_MAXHD / 16; kk++) {
        if (kk < nk) {
            int col = kk * 16 + 2 * (lane & 3);
            long ba = (long)ra * Hq * hd + (long)hq * hd + col;
            long bb = (long)rb * Hq * hd + (long)hq * hd + col;
            qf[kk][0] = *(const unsigned *)(qh + ba);
            qf[kk][1] = *(const unsigned *)(qh + bb);
            qf[kk][2] = *(const unsigned *)(qh + ba + 8);
            qf[kk][3] = *(const unsigned *)(qh + bb + 8);
        }
    }
    float oacc[ATC_MAXHD / 8][4];
#pragma unroll
    for (int i = 0; i < ATC_MAXHD / 8; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
    float ma = -ATC_INF, mb = -ATC_INF, la = 0.f, lb = 0.f;
    __syncthreads();
    int cslot = valid ? slot : 0;
    int per = hd / 8;
    for (int c = s_lo / ATC_CHUNK + sp; c <= s_hi / ATC_CHUNK; c += S) {
        __syncthreads(); // the previous chunk's readers are done
        for (int i = tid; i < ATC_CHUNK * per; i += blockDim.x) {
            int j = i / per, d = (i % per) * 8, p = c * ATC_CHUNK + j;
            uint4 kw = {0u, 0u, 0u, 0u}, vw = {0u, 0u, 0u, 0u};
            if (p <= s_hi) {
                long at = cache.at(cslot, p);
                if (at >= 0) {
                    at += (long)g * hd + d;
                    kw = *(const uint4 *)(kc + at);
                    vw = *(const uint4 *)(vc + at);
                }
            }
            *(uint4 *)(ks + j * kst + d) = kw;
            const unsigned short *ve = (const unsigned short *)&vw;
#pragma unroll
            for (int u = 0; u < 8; u++) vt[(d + u) * vst + j] = ve[u];
        }
        __syncthreads();
        float s[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
            const unsigned short *kr = ks + (nt * 8 + (lane >> 2)) * kst + 2 * (lane & 3);
#pragma unroll
            for (int kk = 0; kk < ATC_MAXHD / 16; kk++)
                if (kk < nk)
                    atc_mma<D>(s[nt], qf[kk], *(const unsigned *)(kr + kk * 16),
                               *(const unsigned *)(kr + kk * 16 + 8));
        }
        float cma = -ATC_INF, cmb = -ATC_INF;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int j = c * ATC_CHUNK + nt * 8 + 2 * (lane & 3) + e;
                s[nt][e] = j >= loa && j <= pa ? s[nt][e] * scale : -ATC_INF;
                s[nt][2 + e] = j >= lob && j <= pb ? s[nt][2 + e] * scale : -ATC_INF;
                cma = fmaxf(cma, s[nt][e]);
                cmb = fmaxf(cmb, s[nt][2 + e]);
            }
        cma = fmaxf(cma, __shfl_xor_sync(0xffffffffu, cma, 1));
        cma = fmaxf(cma, __shfl_xor_sync(0xffffffffu, cma, 2));
        cmb = fmaxf(cmb, __shfl_xor_sync(0xffffffffu, cmb, 1));
        cmb = fmaxf(cmb, __shfl_xor_sync(0xffffffffu, cmb, 2));
        float na = fmaxf(ma, cma), nb = fmaxf(mb, cmb);
        // a row with nothing unmasked yet keeps its state (no -inf - -inf)
        float ca = na == -ATC_INF ? 1.f : __expf(ma - na);
        float cb = nb == -ATC_INF ? 1.f : __expf(mb - nb);
        float suma = 0.f, sumb = 0.f;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[nt][e] = na == -ATC_INF ? 0.f : __expf(s[nt][e] - na);
                s[nt][2 + e] = nb == -ATC_INF ? 0.f : __expf(s[nt][2 + e] - nb);
                suma += s[nt][e];
                sumb += s[nt][2 + e];
            }
        suma += __shfl_xor_sync(0xffffffffu, suma, 1);
        suma += __shfl_xor_sync(0xffffffffu, suma, 2);
        sumb += __shfl_xor_sync(0xffffffffu, sumb, 1);
        sumb += __shfl_xor_sync(0xffffffffu, sumb, 2);
        la = la * ca + suma;
        lb = lb * cb + sumb;
        ma = na;
        mb = nb;
#pragma unroll
        for (int i = 0; i < ATC_MAXHD / 8; i++) {
            oacc[i][0] *= ca;
            oacc[i][1] *= ca;
            oacc[i][2] *= cb;
            oacc[i][3] *= cb;
        }
#pragma unroll
        for (int t = 0; t < 2; t++) {
            unsigned a[4] = {atc_pack<D>(s[2 * t][0], s[2 * t][1]),
                             atc_pack<D>(s[2 * t][2], s[2 * t][3]),
                             atc_pack<D>(s[2 * t + 1][0], s[2 * t + 1][1]),
                             atc_pack<D>(s[2 * t + 1][2], s[2 * t + 1][3])};
#pragma unroll
            for (int i = 0; i < ATC_MAXHD / 8; i++)
                if (i < nd) {
                    const unsigned short *vr =
                        vt + (i * 8 + (lane >> 2)) * vst + t * 16 + 2 * (lane & 3);
                    atc_mma<D>(oacc[i], a, *(const unsigned *)vr, *(const unsigned *)(vr + 8));
                }
        }
    }
    if (S > 1) { // unnormalised partials of this split for the combine kernel
        long ps = (long)hd + 2;
        long pa_at = (((long)ra * Hq + hq) * S + sp) * ps, pb_at = (((long)rb * Hq + hq) * S + sp) * ps;
#pragma unroll
        for (int i = 0; i < ATC_MAXHD / 8; i++)
            if (i < nd) {
                int d = i * 8 + 2 * (lane & 3);
                if (oka) {
                    part[pa_at + d] = oacc[i][0];
                    part[pa_at + d + 1] = oacc[i][1];
                }
                if (okb) {
                    part[pb_at + d] = oacc[i][2];
                    part[pb_at + d + 1] = oacc[i][3];
                }
            }
        if ((lane & 3) == 0) {
            if (oka) {
                part[pa_at + hd] = ma; // -inf: nothing of this row in this split
                part[pa_at + hd + 1] = la;
            }
            if (okb) {
                part[pb_at + hd] = mb;
                part[pb_at + hd + 1] = lb;
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < ATC_MAXHD / 8; i++)
        if (i < nd) {
            int d = i * 8 + 2 * (lane & 3);
            long oa = (long)ra * Hq * hd + (long)hq * hd + d;
            long ob = (long)rb * Hq * hd + (long)hq * hd + d;
            if (oka) {
                E::st(o, oa, la > 0.f ? oacc[i][0] / la : 0.f);
                E::st(o, oa + 1, la > 0.f ? oacc[i][1] / la : 0.f);
            }
            if (okb) {
                E::st(o, ob, lb > 0.f ? oacc[i][2] / lb : 0.f);
                E::st(o, ob + 1, lb > 0.f ? oacc[i][3] / lb : 0.f);
            }
        }
}
