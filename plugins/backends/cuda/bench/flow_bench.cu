// flow_bench: issue 8's structural question, measured before anything is built on it. Can one
// persistent kernel whose weights stream independently of the activations run a decode layer's
// chain of products closer to the weights' bytes than the kernel-per-op step (one kernel a node
// under PDL)? A standalone probe (nvcc, sm_90a) on the real shapes with random bf16 weights.
//
// A layer here is the step's chain without the attention's arithmetic:
//   qkv = Wqkv . rmsnorm(rA)        (the join before q|k|v folded into the product)
//   a   = qkv[0:QD]                 (stand-in for the attention: NATTN blocks copy q, optionally
//                                    holding for attn_ns, so its hop is on the chain)
//   rB  = rA + Wo . a
//   h   = silu(Wg . n) * (Wu . n),  n = rmsnorm(rB)
//   rA  = rB + Wd . h
// One block an SM (cooperative launch): W consumer warps, one producer warp and one optional L2
// prefetch warp. Every block owns a fixed share (whole pairs of rows) of every product. The
// producer lane copies the block's rows of every product of every layer, in program order, into a
// ring of shared memory (cp.async.bulk, a piece of W / S rows x KP * S columns a slot, completion
// on the slot's mbarrier), waiting only for ring space: weights never wait for activations. The
// activations travel as 8-byte words of two bf16 values and a tag naming the (layer, stage) that
// wrote them: a consumer polls the words of its input until every one carries the tag it needs
// (no counters, no fences), stages them (times the norm's weights) in shared memory, takes the
// pieces from the ring (warp w: row w / S of a piece, part w % S of its columns), and stores its
// outputs as tagged words; the residual stays in f32 in the shared memory of the block that owns
// its rows. With the prefetch warp (pf_pieces > 0) the same pieces are pulled into L2
// (prefetch.global.L2, line by line) up to pf_pieces ahead of the producer.
// Modes: chain (the real dependencies), free (no waits: streaming and arithmetic alone), copy (no
// waits and no arithmetic: the inputs are still staged and the outputs stored), ring (the pieces
// alone: consumers only wait for each piece and free it; the producer and the copy engine).
// Checks: chain mode's final residual against simple reference kernels run one by one, which
// round to bf16 where the probe does (relative to the largest value; must be under 5e-2: a
// different summation order flips bf16 roundings, which compound over the layers to ~1e-2, while
// a wrong row or piece moves the result by O(1); in f32 the same check read ~1e-6), outputs
// poisoned first (NaN words under tag 0). Prints us a layer, the weights' rate, the fraction of
// the floor's rate (4,251 GB/s, the rate the project's floors use), each stage's time on the
// critical path (the latest block's finish minus the previous stage's, the layers' mean) and
// block 0's phases of each stage.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o flow_bench flow_bench.cu (the cmake build makes it
// as tests/cuda_flow_bench); run: flow_bench [Qwen3-0.6B|Llama-3.2-1B|Qwen3-8B|all] [reps]
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_check.cuh"
#include "probe_device.cuh"

enum { S_QKV, S_ATTN, S_O, S_GU, S_DOWN, NS };
// block 0's phases of a stage: its start, input staged and normed, first piece in the ring, last
// piece taken, outputs stored; and the producer's issue of the stage's first and last pieces
enum { T_START, T_INPUT, T_FIRST, T_PIECES, T_END, T_PFIRST, T_PLAST, TR };
static const char *stage_name[NS] = {"q|k|v", "attn", "o", "gate|up", "down"};
#define FLOOR_GBS 4251.0

struct Params {
    int H, QD, QKV, I, L, G, nattn, mode, nslot, slot_bytes, split;
    unsigned epoch;
    long long attn_ns;
    size_t layer_elems, off_qkv, off_o, off_g, off_u, off_d;
    const bf16_t *w;
    const float *n1, *n2, *r0; // norm weights [L][H], the first residual [H]
    // the activations as (two bf16 values, tag) words, N / 2 a vector: rA (the residual after
    // down), rB (after o), qkv, a, h
    unsigned long long *rA, *rB, *qkv, *a, *h;
    unsigned long long *stamp; // [L][NS], plus one start stamp at [L * NS]
    unsigned long long *tr;    // block 0's phases, [L][NS][TR]
    int defer_norm;            // x * nw staged, the rmsnorm's scale applied to the outputs
    int pf_pieces;             // the prefetch warp's lead over the producer, pieces (0: off)
    int nw_l2;                 // o and down pull the next norm's weights into L2 first
    int inflight;              // at most this many pieces issued and not yet landed (0: the ring)
    int skip;                  // free and copy modes only: 1 no input staged, 2 no outputs
                               // stored, 4 no consumer barriers between the phases
    float eps;
};

__device__ __forceinline__ ulonglong2 ld_ll2(const unsigned long long *p) {
    ulonglong2 v;
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                 : "=l"(v.x), "=l"(v.y)
                 : "l"(p)
                 : "memory");
    return v;
}
// bf16 by round to nearest even (the values here are finite), and back
__host__ __device__ __forceinline__ unsigned bf_bits(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__host__ __device__ __forceinline__ float bf_round(float f) {
    const unsigned u = bf_bits(f) << 16;
    float r;
    memcpy(&r, &u, 4);
    return r;
}
// one word: values v0 (low half) and v1 as bf16, and the tag
__device__ __forceinline__ void st_ll(unsigned long long *p, float v0, float v1, unsigned tag) {
    const unsigned long long w = (unsigned long long)tag << 32 | bf_bits(v1) << 16 | bf_bits(v0);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
// the tag a stage's output carries: unique in a launch, new in every launch (no buffer is reset)
__device__ __forceinline__ unsigned tag_of(const Params &p, int l, int s) {
    return p.epoch * (unsigned)((p.L + 1) * NS) + 1u + (unsigned)((l + 1) * NS + s);
}

// A product's pieces, the same in the producer and the consumers: block b's rows [r0, r1) of
// each of nm matrices, in groups of R = W / S rows, each group in pieces of at most KS = KP * S
// columns; warp w takes row w / S of a piece and its part w % S of the piece's columns.
struct Plan {
    const bf16_t *w0, *w1;
    int N, K, nm, r0, r1, S, R, KS;
};
// block b's share of N rows, in whole pairs (a word holds two outputs)
__host__ __device__ __forceinline__ void rows_of(int N, int G, int b, int &r0, int &r1) {
    const int P = N / 2, base = P / G, rem = P % G;
    r0 = 2 * (b * base + (b < rem ? b : rem));
    r1 = r0 + 2 * (base + (b < rem));
}
template <int W> __device__ __forceinline__ Plan plan_of(const Params &p, int l, int s, int b) {
    const bf16_t *base = p.w + (size_t)l * p.layer_elems;
    Plan q;
    if (s == S_QKV) q = {base + p.off_qkv, nullptr, p.QKV, p.H, 1};
    else if (s == S_O) q = {base + p.off_o, nullptr, p.H, p.QD, 1};
    else if (s == S_GU) q = {base + p.off_g, base + p.off_u, p.I, p.H, 2};
    else q = {base + p.off_d, nullptr, p.H, p.I, 1};
    rows_of(q.N, p.G, b, q.r0, q.r1);
    const int most = 2 * ((q.N / 2 + p.G - 1) / p.G); // the largest share: all split alike
    int S = 1;
    if (p.split)
        while (S < W && most * S * 2 <= W) S *= 2;
    q.S = S, q.R = W / S, q.KS = p.slot_bytes / (2 * W) * S;
    return q;
}

// Every piece of every product of the step, in program order (the producer's sequence, which the
// consumers take in the same order), as f(l, s, q, m, g0, k0); the stand-in attention has none.
template <int W, class F> __device__ __forceinline__ void each_piece(const Params &p, int b, F f) {
    for (int l = 0; l < p.L; l++)
        for (int s = 0; s < NS; s++) {
            if (s == S_ATTN) continue;
            const Plan q = plan_of<W>(p, l, s, b);
            for (int m = 0; m < q.nm; m++)
                for (int g0 = q.r0; g0 < q.r1; g0 += q.R)
                    for (int k0 = 0; k0 < q.K; k0 += q.KS) f(l, s, q, m, g0, k0);
        }
}

template <int W> __device__ __forceinline__ void cbar() {
    asm volatile("bar.sync 1, %0;" ::"r"(W * 32) : "memory");
}

// Stage n values of src (words of two values and a tag) into xs as bf16, times nw[k] where nw is
// given; with wait, poll until each word carries tag. Each thread loads two words (16 bytes, four
// values) at a time, B of them in flight with their norm weights, and re-polls only those not
// yet written. Returns the thread's sum of squares of the values as read.
template <int W>
__device__ __forceinline__ float stage_ll(const unsigned long long *src, bf16_t *xs, int n,
                                          unsigned tag, bool wait, const float *nw) {
    constexpr int nt = W * 32, B = 4;
    float ss = 0.f;
    for (int base = threadIdx.x * 4; base < n; base += nt * 4 * B) {
        ulonglong2 v[B];
        float4 g[B];
#pragma unroll
        for (int u = 0; u < B; u++)
            if (base + u * nt * 4 < n) {
                v[u] = ld_ll2(src + (base + u * nt * 4) / 2);
                g[u] = nw ? __ldg((const float4 *)(nw + base + u * nt * 4))
                          : make_float4(1.f, 1.f, 1.f, 1.f);
            }
#pragma unroll
        for (int u = 0; u < B; u++) {
            const int k = base + u * nt * 4;
            if (k >= n) break;
            if (wait)
                while ((unsigned)(v[u].x >> 32) != tag || (unsigned)(v[u].y >> 32) != tag)
                    v[u] = ld_ll2(src + k / 2);
            const unsigned lo = (unsigned)v[u].x, hi = (unsigned)v[u].y;
            const float x0 = __uint_as_float(lo << 16), x1 = __uint_as_float(lo & 0xffff0000u),
                        x2 = __uint_as_float(hi << 16), x3 = __uint_as_float(hi & 0xffff0000u);
            uint2 o;
            o.x = nw ? bf_bits(x0 * g[u].x) | bf_bits(x1 * g[u].y) << 16 : lo;
            o.y = nw ? bf_bits(x2 * g[u].z) | bf_bits(x3 * g[u].w) << 16 : hi;
            *(uint2 *)(xs + k) = o;
            ss += x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3;
        }
    }
    return ss;
}

template <int W>
__global__ void __launch_bounds__((W + 2) * 32, 1) flow(Params p) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) unsigned long long full[32], empty[32];
    __shared__ float red[W], part[2048], res[64];
    __shared__ unsigned prod_i; // pieces the producer has issued (read by the prefetch warp)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, b = blockIdx.x;
    const int nslot = p.nslot;
    const int maxk = p.I > p.QD ? (p.I > p.H ? p.I : p.H) : (p.QD > p.H ? p.QD : p.H);
    bf16_t *xs = (bf16_t *)smem; // the product's input, maxk values
    unsigned char *ring = smem + (((size_t)maxk * 2 + 127) & ~(size_t)127);
    if (threadIdx.x == 0) {
        ring_init(full, empty, nslot, W);
        if (b == 0) p.stamp[p.L * NS] = gtimer();
        prod_i = 0;
    }
    __syncthreads();
    if (warp == W + 1) { // the prefetch warp: the same pieces into L2, pf_pieces ahead
        if (p.pf_pieces <= 0) return;
        unsigned j = 0;
        each_piece<W>(p, b, [&](int, int, const Plan &q, int m, int g0, int k0) {
            while ((int)(j - *(volatile unsigned *)&prod_i) > p.pf_pieces) __nanosleep(256);
            const bf16_t *w = m ? q.w1 : q.w0;
            const int rows = min(q.R, q.r1 - g0), kp = min(q.KS, q.K - k0);
            for (int r = 0; r < rows; r++) {
                const char *src = (const char *)(w + (size_t)(g0 + r) * q.K + k0);
                for (int off = lane * 128; off < kp * 2; off += 32 * 128)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(src + off));
            }
            j++;
        });
        return;
    }
    if (warp == W) { // the producer: every piece of every product, in program order
        if (lane != 0) return;
        unsigned i = 0;
        each_piece<W>(p, b, [&](int l, int s, const Plan &q, int m, int g0, int k0) {
            const bf16_t *w = m ? q.w1 : q.w0;
            const int rows = min(q.R, q.r1 - g0), kp = min(q.KS, q.K - k0);
            const unsigned slot = i % nslot;
            if (i >= (unsigned)nslot) bar_wait(saddr(&empty[slot]), ((i / nslot) - 1) & 1);
            // a short queue: the rest of the ring holds landed pieces
            if (p.inflight && i >= (unsigned)p.inflight) {
                const unsigned o = i - p.inflight;
                bar_wait(saddr(&full[o % nslot]), (o / nslot) & 1);
            }
            if (b == 0 && m == 0 && g0 == q.r0 && k0 == 0)
                p.tr[(l * NS + s) * TR + T_PFIRST] = gtimer();
            if (b == 0 && m == q.nm - 1 && g0 + q.R >= q.r1 && k0 + q.KS >= q.K)
                p.tr[(l * NS + s) * TR + T_PLAST] = gtimer();
            *(volatile unsigned *)&prod_i = i;
            const unsigned fb = saddr(&full[slot]);
            const unsigned dst = saddr(ring + (size_t)slot * p.slot_bytes);
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(fb),
                         "r"((unsigned)(rows * kp * 2))
                         : "memory");
            if (kp == q.K) { // the group's rows are contiguous: one copy
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                             "[%0], [%1], %2, [%3];" ::"r"(dst),
                             "l"(w + (size_t)g0 * q.K), "r"(rows * kp * 2), "r"(fb)
                             : "memory");
            } else {
                for (int j = 0; j < rows; j++)
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
                                 "bytes [%0], [%1], %2, [%3];" ::"r"(dst + j * kp * 2),
                                 "l"(w + (size_t)(g0 + j) * q.K + k0), "r"(kp * 2), "r"(fb)
                                 : "memory");
            }
            i++;
        });
        return;
    }
    const int tid = threadIdx.x, nt = W * 32;
    const bool wait = p.mode == 0, math = p.mode != 2;
    int h0, h1; // this block's rows of every H-row product: its share of the residual
    rows_of(p.H, p.G, b, h0, h1);
    for (int t = tid; t < (h1 - h0) / 2; t += nt) {
        res[2 * t] = p.r0[h0 + 2 * t], res[2 * t + 1] = p.r0[h0 + 2 * t + 1];
        st_ll(p.rA + h0 / 2 + t, res[2 * t], res[2 * t + 1], tag_of(p, -1, S_DOWN));
    }
    unsigned i = 0; // the consumers' piece count: the producer's sequence
    if (p.mode == 3) { // ring: every piece waited for and freed, nothing else
        each_piece<W>(p, b, [&](int, int, const Plan &, int, int, int) {
            const unsigned slot = i % nslot;
            bar_wait(saddr(&full[slot]), (i / nslot) & 1);
            __syncwarp();
            if (lane == 0)
                asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr(&empty[slot]))
                             : "memory");
            i++;
        });
        return;
    }
    for (int l = 0; l < p.L; l++)
        for (int s = 0; s < NS; s++) {
            if (s == S_ATTN) { // stand-in: nattn blocks copy q into a
                if (b >= p.nattn) continue;
                int a0, a1;
                rows_of(p.QD, p.nattn, b, a0, a1);
                const unsigned tin = tag_of(p, l, S_QKV), tout = tag_of(p, l, S_ATTN);
                for (int k = a0 / 2 + tid; k < a1 / 2; k += nt) { // words
                    unsigned long long v;
                    do {
                        asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];"
                                     : "=l"(v)
                                     : "l"(p.qkv + k)
                                     : "memory");
                    } while (wait && (unsigned)(v >> 32) != tin);
                    const unsigned long long w = (unsigned long long)tout << 32 | (unsigned)v;
                    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p.a + k), "l"(w)
                                 : "memory");
                }
                if (p.attn_ns && tid == 0) {
                    const unsigned long long t0 = gtimer();
                    while (gtimer() - t0 < (unsigned long long)p.attn_ns) {
                    }
                }
                cbar<W>();
                if (tid == 0) atomicMax(p.stamp + l * NS + s, gtimer());
                continue;
            }
            const Plan q = plan_of<W>(p, l, s, b);
            unsigned long long *tr = b == 0 && tid == 0 ? p.tr + (l * NS + s) * TR : nullptr;
            if (tr) tr[T_START] = gtimer();
            // the input: polled until every value carries its producer's tag, then its rmsnorm
            const unsigned long long *x = s == S_QKV ? p.rA
                                          : s == S_O  ? p.a
                                          : s == S_GU ? p.rB
                                                      : p.h;
            const unsigned tin = s == S_QKV ? tag_of(p, l - 1, S_DOWN)
                                 : s == S_O ? tag_of(p, l, S_ATTN)
                                 : s == S_GU ? tag_of(p, l, S_O)
                                             : tag_of(p, l, S_GU);
            const bool norm = s == S_QKV || s == S_GU;
            const float *nw = (s == S_QKV ? p.n1 : p.n2) + (size_t)l * p.H;
            if (p.nw_l2 && (s == S_O || (s == S_DOWN && l + 1 < p.L))) {
                // the next norm's weights, into L2 while this stage waits for its input (the
                // backend's kernels load theirs before griddepcontrol.wait)
                const float *nx = s == S_O ? p.n2 + (size_t)l * p.H : p.n1 + (size_t)(l + 1) * p.H;
                for (int k = tid * 32; k < p.H; k += nt * 32)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(nx + k));
            }
            // deferred: x * nw staged now, the norm's scale applied to the outputs (red read
            // there); otherwise x staged, then scaled by the norm in a second pass
            float ss = p.skip & 1 ? 0.f
                                  : stage_ll<W>(x, xs, q.K, tin, wait,
                                                norm && p.defer_norm ? nw : nullptr);
            float inv = 1.f;
            if (norm) {
                ss = wsum(ss);
                if (lane == 0) red[warp] = ss;
                if (!p.defer_norm) {
                    cbar<W>();
                    float t = 0.f;
                    for (int j = 0; j < W; j++) t += red[j];
                    const float sc = rsqrtf(t / q.K + p.eps);
                    for (int k = tid; k < q.K; k += nt)
                        xs[k] = (bf16_t)bf_bits(__uint_as_float((unsigned)xs[k] << 16) * sc *
                                                __ldg(nw + k));
                }
            }
            if (!(p.skip & 4)) cbar<W>();
            if (tr) tr[T_INPUT] = gtimer();
            const int nr = q.r1 - q.r0, row = warp / q.S, pt = warp % q.S;
            for (int m = 0; m < q.nm; m++)
                for (int g0 = q.r0; g0 < q.r1; g0 += q.R) {
                    const int rows = min(q.R, q.r1 - g0);
                    float acc[4] = {0.f, 0.f, 0.f, 0.f};
                    for (int k0 = 0; k0 < q.K; k0 += q.KS, i++) {
                        const int kp = min(q.KS, q.K - k0), kq = kp / q.S;
                        const unsigned slot = i % nslot;
                        bar_wait(saddr(&full[slot]), (i / nslot) & 1);
                        if (tr && m == 0 && g0 == q.r0 && k0 == 0) tr[T_FIRST] = gtimer();
                        if (math && row < rows) {
                            const uint4 *rw =
                                (const uint4 *)(ring + (size_t)slot * p.slot_bytes +
                                                (size_t)row * kp * 2 + (size_t)pt * kq * 2);
                            const bf16_t *xk = xs + k0 + pt * kq;
                            const int nv = kq >> 8; // 16-byte vectors a lane
                            for (int u0 = 0; u0 < nv; u0 += 4) {
                                uint4 w4[4];
#pragma unroll
                                for (int u = 0; u < 4; u++)
                                    if (u0 + u < nv) w4[u] = rw[lane + (u0 + u) * 32];
#pragma unroll
                                for (int u = 0; u < 4; u++) {
                                    if (u0 + u >= nv) break;
                                    float wf[8], xf[8];
                                    unpack8(w4[u], wf);
                                    unpack8(*(const uint4 *)(xk + (lane + (u0 + u) * 32) * 8), xf);
#pragma unroll
                                    for (int e = 0; e < 8; e++)
                                        acc[u] = fmaf(wf[e], xf[e], acc[u]);
                                }
                            }
                        }
                        __syncwarp();
                        if (lane == 0)
                            asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(
                                             saddr(&empty[slot]))
                                         : "memory");
                    }
                    if (row < rows) {
                        const float t = wsum((acc[0] + acc[1]) + (acc[2] + acc[3]));
                        if (lane == 0) part[(m * nr + (g0 - q.r0) + row) * q.S + pt] = t;
                    }
                }
            if (!(p.skip & 4)) cbar<W>();
            if (tr) tr[T_PIECES] = gtimer();
            const unsigned tout = tag_of(p, l, s);
            if (norm && p.defer_norm) {
                float t = 0.f;
                for (int j = 0; j < W; j++) t += red[j];
                inv = rsqrtf(t / q.K + p.eps);
            }
            for (int t = tid; t < (p.skip & 2 ? 0 : nr / 2); t += nt) { // rows r0 + 2t, + 1
                float o[2] = {0.f, 0.f}, u[2] = {0.f, 0.f};
                for (int e = 0; e < 2; e++) {
                    const int row = 2 * t + e;
                    for (int j = 0; j < q.S; j++) o[e] += part[row * q.S + j];
                    if (s == S_GU)
                        for (int j = 0; j < q.S; j++) u[e] += part[(nr + row) * q.S + j];
                    o[e] *= inv, u[e] *= inv;
                }
                unsigned long long *dst = q.r0 / 2 + t + (s == S_QKV  ? p.qkv
                                                          : s == S_GU ? p.h
                                                          : s == S_O  ? p.rB
                                                                      : p.rA);
                if (s == S_QKV) st_ll(dst, o[0], o[1], tout);
                else if (s == S_GU)
                    st_ll(dst, o[0] / (1.f + __expf(-o[0])) * u[0],
                          o[1] / (1.f + __expf(-o[1])) * u[1], tout);
                else { // o and down add into this block's share of the residual (f32)
                    res[2 * t] += o[0], res[2 * t + 1] += o[1];
                    st_ll(dst, res[2 * t], res[2 * t + 1], tout);
                }
            }
            if (!(p.skip & 4)) cbar<W>();
            if (tid == 0) atomicMax(p.stamp + l * NS + s, gtimer());
            if (tr) tr[T_END] = gtimer();
        }
}

// ---- reference: the same layer, one simple kernel a step -------------------------------------
// the reference keeps what the probe stores as bf16 (the normed input, q|k|v, h, the residual as
// read by a norm) rounded the same way, the sums and the residual itself in f32
__global__ void ref_norm(const float *x, const float *w, float *y, int n, float eps) {
    __shared__ float red[32];
    float ss = 0.f;
    for (int k = threadIdx.x; k < n; k += blockDim.x) ss += bf_round(x[k]) * bf_round(x[k]);
    ss = wsum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float t = 0.f;
    for (int j = 0; j < (int)(blockDim.x >> 5); j++) t += red[j];
    const float inv = rsqrtf(t / n + eps);
    for (int k = threadIdx.x; k < n; k += blockDim.x) y[k] = bf_round(bf_round(x[k]) * inv * w[k]);
}
__global__ void ref_gemv(const bf16_t *w, const float *x, float *y, int N, int K) {
    const int n = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (n >= N) return;
    float acc = 0.f;
    for (int k = lane; k < K; k += 32)
        acc += __uint_as_float((unsigned)w[(size_t)n * K + k] << 16) * x[k];
    acc = wsum(acc);
    if (lane == 0) y[n] = acc;
}
__global__ void ref_add(const float *a, const float *b, float *y, int n) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x)
        y[k] = a[k] + b[k];
}
__global__ void ref_swiglu(const float *g, const float *u, float *y, int n) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x)
        y[k] = bf_round(g[k] / (1.f + expf(-g[k])) * u[k]);
}
__global__ void ref_round(float *y, int n) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x)
        y[k] = bf_round(y[k]);
}
__global__ void poison_ll(unsigned long long *p, int n, unsigned long long v) {
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x)
        p[k] = v;
}
__global__ void fill_bf16(bf16_t *p, size_t n, unsigned seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float f = probe_uniform(i, seed) * scale;
        p[i] = (bf16_t)(__float_as_uint(f) >> 16);
    }
}
__global__ void fill_f32(float *p, size_t n, unsigned seed, float base, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        p[i] = base + probe_uniform(i, seed) * scale;
    }
}

struct Model {
    const char *name;
    int H, QD, KVD, I, L, nattn;
};

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

template <int W> static void launch(Params &p, int sms, size_t smem) {
    CK(cudaFuncSetAttribute(flow<W>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    void *args[] = {&p};
    CK(cudaLaunchCooperativeKernel((const void *)flow<W>, dim3(sms), dim3((W + 2) * 32), args,
                                   smem, 0));
}

int main(int argc, char **argv) {
    const char *want = argc > 1 ? argv[1] : "all";
    const int reps = argc > 2 ? atoi(argv[2]) : 10;
    int sms = 0, maxsm = 0;
    CK(cudaSetDevice(0));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&maxsm, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs, L2 %d MB, %d KiB shared a block\n", prop.name, sms,
           prop.l2CacheSize >> 20, maxsm >> 10);
    const Model models[] = {
        {"Qwen3-0.6B", 1024, 2048, 1024, 3072, 28, 16},
        {"Llama-3.2-1B", 2048, 2048, 512, 8192, 16, 32},
        {"Qwen3-8B", 4096, 4096, 1024, 12288, 36, 32},
    };
    unsigned epoch = 0;
    int failed = 0; // a chain run whose check failed: exit status 1
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (const Model &md : models) {
        if (strcmp(want, "all") && strcmp(want, md.name)) continue;
        Params p;
        memset(&p, 0, sizeof p);
        p.H = md.H, p.QD = md.QD, p.QKV = md.QD + 2 * md.KVD, p.I = md.I, p.L = md.L;
        p.G = sms, p.eps = 1e-6f;
        p.off_qkv = 0;
        p.off_o = p.off_qkv + (size_t)p.QKV * p.H;
        p.off_g = p.off_o + (size_t)p.H * p.QD;
        p.off_u = p.off_g + (size_t)p.I * p.H;
        p.off_d = p.off_u + (size_t)p.I * p.H;
        p.layer_elems = p.off_d + (size_t)p.H * p.I;
        const size_t wbytes = p.layer_elems * 2 * p.L;
        bf16_t *w;
        float *n1, *n2, *r0, *ref[8];
        CK(cudaMalloc(&w, wbytes));
        CK(cudaMalloc(&n1, (size_t)p.L * p.H * 4));
        CK(cudaMalloc(&n2, (size_t)p.L * p.H * 4));
        CK(cudaMalloc(&r0, p.H * 4));
        const int big = p.QKV > p.I ? p.QKV : p.I;
        for (int j = 0; j < 8; j++) CK(cudaMalloc(&ref[j], (size_t)big * 4));
        CK(cudaMalloc(&p.rA, p.H * 4)); // N / 2 words of 8 bytes a vector
        CK(cudaMalloc(&p.rB, p.H * 4));
        CK(cudaMalloc(&p.qkv, p.QKV * 4));
        CK(cudaMalloc(&p.a, p.QD * 4));
        CK(cudaMalloc(&p.h, p.I * 4));
        CK(cudaMemset(p.rA, 0, p.H * 4)); // tag 0: never a stage's
        CK(cudaMemset(p.rB, 0, p.H * 4));
        CK(cudaMemset(p.qkv, 0, p.QKV * 4));
        CK(cudaMemset(p.a, 0, p.QD * 4));
        CK(cudaMemset(p.h, 0, p.I * 4));
        CK(cudaMalloc(&p.stamp, (p.L * NS + 1) * 8));
        CK(cudaMalloc(&p.tr, (size_t)p.L * NS * TR * 8));
        CK(cudaMemset(p.tr, 0, (size_t)p.L * NS * TR * 8));
        fill_bf16<<<4096, 256>>>(w, wbytes / 2, 11u, 0.1f);
        fill_f32<<<64, 256>>>(n1, (size_t)p.L * p.H, 3u, 1.f, 0.2f);
        fill_f32<<<64, 256>>>(n2, (size_t)p.L * p.H, 5u, 1.f, 0.2f);
        fill_f32<<<64, 256>>>(r0, p.H, 7u, 0.f, 2.f);
        CK(cudaGetLastError());
        p.w = w, p.n1 = n1, p.n2 = n2, p.r0 = r0;
        const double layer_mb = p.layer_elems * 2 / 1e6;
        printf("\n%s: %d layers, %.1f MB of weights a layer (floor %.2f us a layer at %.0f GB/s), "
               "%d blocks\n",
               md.name, p.L, layer_mb, layer_mb / FLOOR_GBS * 1e3, FLOOR_GBS, sms);
        // reference, layer by layer: ref[0] rA, ref[1] n, ref[2] qkv, ref[3] o, ref[4] rB,
        // ref[5] g, ref[6] u, ref[7] h; rA after layer l kept on the host
        float *href = (float *)malloc((size_t)p.L * p.H * 4);
        CK(cudaMemcpy(ref[0], r0, p.H * 4, cudaMemcpyDeviceToDevice));
        for (int l = 0; l < p.L; l++) {
            const bf16_t *lw = w + (size_t)l * p.layer_elems;
            ref_norm<<<1, 1024>>>(ref[0], n1 + (size_t)l * p.H, ref[1], p.H, p.eps);
            ref_gemv<<<(p.QKV + 7) / 8, 256>>>(lw + p.off_qkv, ref[1], ref[2], p.QKV, p.H);
            ref_round<<<16, 256>>>(ref[2], p.QKV);
            ref_gemv<<<(p.H + 7) / 8, 256>>>(lw + p.off_o, ref[2], ref[3], p.H, p.QD);
            ref_add<<<8, 256>>>(ref[0], ref[3], ref[4], p.H);
            ref_norm<<<1, 1024>>>(ref[4], n2 + (size_t)l * p.H, ref[1], p.H, p.eps);
            ref_gemv<<<(p.I + 7) / 8, 256>>>(lw + p.off_g, ref[1], ref[5], p.I, p.H);
            ref_gemv<<<(p.I + 7) / 8, 256>>>(lw + p.off_u, ref[1], ref[6], p.I, p.H);
            ref_swiglu<<<32, 256>>>(ref[5], ref[6], ref[7], p.I);
            ref_gemv<<<(p.H + 7) / 8, 256>>>(lw + p.off_d, ref[7], ref[3], p.H, p.I);
            ref_add<<<8, 256>>>(ref[4], ref[3], ref[0], p.H);
            CK(cudaMemcpy(href + (size_t)l * p.H, ref[0], p.H * 4, cudaMemcpyDeviceToHost));
        }
        CK(cudaGetLastError());
        struct Variant {
            int W, slot_kib, mode, split, defer_norm, pf, nw_l2, inflight, skip;
            long long attn_ns;
        };
        const Variant vs[] = { // W, slot KiB, mode, split, deferred norm, L2 lead, norm
                               // weights into L2, pieces in flight, skip, attention ns
            {16, 32, 0, 1, 1, 0, 0, 0, 0, 0},    {16, 32, 1, 1, 1, 0, 0, 0, 0, 0},
            {16, 32, 2, 1, 1, 0, 0, 0, 0, 0},    {16, 32, 3, 1, 1, 0, 0, 0, 0, 0},
            {16, 32, 2, 1, 1, 0, 0, 0, 1, 0},    {16, 32, 2, 1, 1, 0, 0, 0, 2, 0},
            {16, 32, 2, 1, 1, 0, 0, 0, 4, 0},    {16, 32, 2, 1, 1, 0, 0, 0, 7, 0},
            {16, 32, 1, 1, 1, 0, 0, 0, 7, 0},    {16, 32, 0, 1, 1, 0, 0, 2, 0, 0},
            {16, 32, 0, 1, 1, 0, 1, 0, 0, 0},    {16, 32, 0, 1, 0, 0, 0, 0, 0, 0},
            {16, 32, 0, 0, 1, 0, 0, 0, 0, 0},    {16, 32, 0, 1, 1, 0, 0, 0, 0, 3000},
            {16, 16, 3, 1, 1, 0, 0, 0, 0, 0},    {16, 32, 0, 1, 1, 16, 0, 0, 0, 0},
        };
        const char *mode_name[4] = {"chain", "free", "copy", "ring"};
        for (const Variant &v : vs) {
            p.mode = v.mode, p.nattn = md.nattn, p.attn_ns = v.attn_ns, p.split = v.split;
            p.defer_norm = v.defer_norm, p.pf_pieces = v.pf, p.nw_l2 = v.nw_l2;
            p.inflight = v.inflight, p.skip = v.skip;
            p.slot_bytes = v.slot_kib * 1024;
            const int maxk = p.I > p.QD ? (p.I > p.H ? p.I : p.H) : (p.QD > p.H ? p.QD : p.H);
            const size_t xb = ((size_t)maxk * 2 + 127) & ~(size_t)127;
            const size_t static_b = 2 * 32 * 8 + 4 * 2048 + 4 * 64 + 4 * 16 + 1024;
            const int nslot = (int)((maxsm - static_b - xb) / p.slot_bytes);
            p.nslot = nslot < 32 ? nslot : 32;
            const size_t smem = xb + (size_t)p.nslot * p.slot_bytes;
            float *ms = (float *)malloc(reps * sizeof(float));
            double stage_us[NS] = {0}, ph[NS][TR] = {{0}};
            double err = 0;
            for (int r = -1; r < reps; r++) {
                // poison: every value NaN under a tag no stage of this launch writes
                p.epoch = ++epoch;
                const unsigned long long poison = 0x7fc07fc0ull; // two bf16 NaNs, tag 0
                poison_ll<<<64, 256>>>(p.rA, p.H / 2, poison);
                poison_ll<<<64, 256>>>(p.rB, p.H / 2, poison);
                poison_ll<<<64, 256>>>(p.qkv, p.QKV / 2, poison);
                poison_ll<<<64, 256>>>(p.a, p.QD / 2, poison);
                poison_ll<<<64, 256>>>(p.h, p.I / 2, poison);
                CK(cudaMemset(p.stamp, 0, (p.L * NS + 1) * 8));
                CK(cudaMemset(p.tr, 0, (size_t)p.L * NS * TR * 8));
                CK(cudaEventRecord(e0));
                if (v.W == 8) launch<8>(p, sms, smem);
                else launch<16>(p, sms, smem);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                CK(cudaGetLastError());
                if (r < 0) continue;
                CK(cudaEventElapsedTime(&ms[r], e0, e1));
                unsigned long long st[NS * 64 + 1];
                CK(cudaMemcpy(st, p.stamp, (p.L * NS + 1) * 8, cudaMemcpyDeviceToHost));
                unsigned long long trh[64 * NS * TR];
                CK(cudaMemcpy(trh, p.tr, (size_t)p.L * NS * TR * 8, cudaMemcpyDeviceToHost));
                for (int l = 2; l < p.L; l++)
                    for (int s = 0; s < NS; s++) {
                        const unsigned long long *t = trh + (l * NS + s) * TR;
                        for (int j = 1; j < TR; j++)
                            ph[s][j] += ((double)(long long)(t[j] - t[j < T_PFIRST ? j - 1 : 0])) /
                                        1e3 / (p.L - 2) / reps;
                    }
                if (v.mode == 0) {
                    // the layers' mean, layers 2..L-1 (layer 0 starts cold)
                    for (int l = 2; l < p.L; l++)
                        for (int s = 0; s < NS; s++) {
                            const unsigned long long prev =
                                s ? st[l * NS + s - 1] : st[(l - 1) * NS + S_DOWN];
                            stage_us[s] +=
                                (double)(long long)(st[l * NS + s] - prev) / 1e3 / (p.L - 2) / reps;
                        }
                    if (r == 0) { // check the final rA against the reference's last layer
                        unsigned long long *hl =
                            (unsigned long long *)malloc(p.H / 2 * sizeof(unsigned long long));
                        float *hf = (float *)malloc(p.H * 4);
                        CK(cudaMemcpy(hl, p.rA, p.H * 4, cudaMemcpyDeviceToHost));
                        for (int k = 0; k < p.H; k++) {
                            const unsigned u = (unsigned)(hl[k / 2] >> (k & 1 ? 16 : 0)) << 16;
                            memcpy(&hf[k], &u, 4);
                        }
                        free(hl);
                        const float *hr = href + (size_t)(p.L - 1) * p.H;
                        double mx = 0, md2 = 0;
                        for (int k = 0; k < p.H; k++) {
                            mx = fmax(mx, fabs(hr[k]));
                            const double d = fabs((double)hf[k] - hr[k]);
                            if (isnan(d)) md2 = INFINITY;
                            else if (d > md2) md2 = d;
                        }
                        err = md2 / mx;
                        free(hf);
                    }
                }
            }
            qsort(ms, reps, sizeof(float), cmp_float);
            const double us_layer = ms[reps / 2] * 1e3 / p.L;
            printf("  %-5s W %2d slot %2d KiB x %2d split %d defer %d L2 ahead %2d nw %d in flight "
                   "%d skip %d attn %4lld ns: %7.2f us a layer (min %.2f), %5.0f GB/s, %.3f of the "
                   "floor",
                   mode_name[v.mode], v.W, v.slot_kib, p.nslot, v.split, v.defer_norm, v.pf,
                   v.nw_l2, v.inflight, v.skip,
                   v.attn_ns, us_layer,
                   ms[0] * 1e3 / p.L, layer_mb * 1e3 / us_layer,
                   layer_mb / FLOOR_GBS * 1e3 / us_layer);
            if (v.mode == 0) {
                printf("; check rel err %.2e %s\n    stages (us, critical path):", err,
                       err < 5e-2 ? "ok" : "FAIL");
                failed |= !(err < 5e-2);
                for (int s = 0; s < NS; s++) printf(" %s %.2f", stage_name[s], stage_us[s]);
            }
            if (v.mode != 3) { // ring mode runs no stages
                printf("\n    block 0 (us: input, first piece, pieces, stores; producer's first "
                       "and last issue from the stage's start):");
                for (int s = 0; s < NS; s++) {
                    if (s == S_ATTN) continue;
                    printf(" %s", stage_name[s]);
                    for (int j = 1; j < TR; j++) printf(" %.2f", ph[s][j]);
                }
            }
            printf("\n");
            free(ms);
        }
        free(href);
        CK(cudaFree(w));
        CK(cudaFree(n1));
        CK(cudaFree(n2));
        CK(cudaFree(r0));
        for (int j = 0; j < 8; j++) CK(cudaFree(ref[j]));
        CK(cudaFree(p.rA));
        CK(cudaFree(p.rB));
        CK(cudaFree(p.qkv));
        CK(cudaFree(p.a));
        CK(cudaFree(p.h));
        CK(cudaFree(p.stamp));
        CK(cudaFree(p.tr));
    }
    return failed;
}
