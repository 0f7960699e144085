// read_rate: how fast can a batch-1 GEMV read its weights on this GPU? A standalone probe
// (nvcc, sm_90a) for issue 8's question whether the looped register GEMV's ~4.2 TB/s is the
// device's read limit or the kernel's. For each decode shape it times, over weight copies
// rotated through a pool larger than the L2:
//   ld      a plain read of the weights: every thread 16-byte loads, U in flight, grid-stride
//   bulk    the weights through a ring of shared memory by cp.async.bulk (one producer lane a
//           block, completion on an mbarrier a stage), consumers only wait and release
//   reg     a register GEMV, one block of 8 warps per group of 8/S rows (gemv_row's lanes and
//           order: lane vectors s*32 + lane + k*S*32 ascending, elements ascending, xor
//           butterfly, the S splits in ascending order), y in f32
//   tma     the same arithmetic from the bulk ring (consumer warp = one (row, split) of a
//           stage, x in registers), its y compared bit for bit with reg's
// and prints us a call and GB/s of weight bytes. Build: nvcc -O3 -std=c++17 -arch=sm_90a
// -o read_rate read_rate.cu -lcuda; run: read_rate [pool GiB] [reps].
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_check.cuh"
#include "probe_device.cuh"

__global__ void fill(bf16_t *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float f = probe_uniform(i, seed) * 0.1f;
        p[i] = (bf16_t)(__float_as_uint(f) >> 16);
    }
}

// ---- ld: plain read ------------------------------------------------------------------------
template <int U>
__global__ void __launch_bounds__(512) rd_ld(const uint4 *p, size_t n, unsigned *sink) {
    const size_t nt = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + (U - 1) * nt < n; i += U * nt) {
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; u++) q[u] = __ldcs(p + i + u * nt);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= q[u].x ^ q[u].y ^ q[u].z ^ q[u].w;
    }
    for (; i < n; i += nt) {
        uint4 q = __ldcs(p + i);
        acc ^= q.x ^ q.y ^ q.z ^ q.w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

// ---- reg: register GEMV, one block (8 warps) per group of 8/S rows ---------------------------
template <int NV>
__global__ void __launch_bounds__(256) gemv_reg(const bf16_t *x, const bf16_t *w, float *y, int N,
                                                int K, int S) {
    __shared__ float red[8];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, s = warp % S;
    const int n = blockIdx.x * (8 / S) + warp / S;
    const int nv = K / 8, stride = S * 32;
    float acc = 0.f;
    if (n < N) {
        uint4 q[NV];
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int v = s * 32 + lane + k * stride;
            q[k] = v < nv ? __ldcs((const uint4 *)(w + (size_t)n * K) + v) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int v = s * 32 + lane + k * stride;
            if (v >= nv) break;
            float xf[8], wf[8];
            unpack8(*((const uint4 *)x + v), xf);
            unpack8(q[k], wf);
#pragma unroll
            for (int e = 0; e < 8; e++) acc = fmaf(xf[e], wf[e], acc);
        }
    }
    acc = wsum(acc);
    if (lane == 0) red[warp] = acc;
    __syncthreads();
    if (s == 0 && lane == 0 && n < N) {
        float t = red[warp];
        for (int j = 1; j < S; j++) t += red[warp + j];
        y[n] = t;
    }
}

// ---- the bulk ring (bulk and tma) -------------------------------------------------------------
#define MAXST 16
// CW consumer warps + 1 producer warp. A stage is R = CW / S rows of K columns (contiguous in w);
// block b owns groups [b * per, min((b + 1) * per, G)). MATH false: consumers only wait/release.
template <int CW, int NV, bool MATH>
__global__ void __launch_bounds__((CW + 1) * 32, 1)
    gemv_tma(const bf16_t *x, const bf16_t *w, float *y, int N, int K, int S, int per, int NST,
             unsigned stage_bytes) {
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) unsigned long long full[MAXST], empty[MAXST];
    __shared__ float red[2][CW];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int R = CW / S, G = (N + R - 1) / R;
    const int g0 = blockIdx.x * per, g1 = min(g0 + per, G);
    if (threadIdx.x == 0) ring_init(full, empty, NST, CW);
    __syncthreads();
    if (warp == CW) { // producer
        if (lane == 0)
            for (int g = g0, i = 0; g < g1; g++, i++) {
                const int slot = i % NST;
                if (i >= NST) bar_wait(saddr(&empty[slot]), ((i / NST) - 1) & 1);
                const int r0 = g * R, rows = min(R, N - r0);
                const unsigned bytes = (unsigned)rows * (unsigned)K * 2u;
                const unsigned fb = saddr(&full[slot]);
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(fb),
                             "r"(bytes)
                             : "memory");
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                             "[%0], [%1], %2, [%3];" ::"r"(saddr(ring + (size_t)slot * stage_bytes)),
                             "l"(w + (size_t)r0 * K), "r"(bytes), "r"(fb)
                             : "memory");
            }
        return;
    }
    const int s = warp % S, rr = warp / S, nv = K / 8, stride = S * 32;
    float xf[NV][8];
    if (MATH) {
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int v = s * 32 + lane + k * stride;
            if (v < nv) unpack8(*((const uint4 *)x + v), xf[k]);
        }
    }
    for (int g = g0, i = 0; g < g1; g++, i++) {
        const int slot = i % NST;
        bar_wait(saddr(&full[slot]), (i / NST) & 1);
        const int n = g * R + rr;
        float acc = 0.f;
        if (MATH && n < N) {
            const uint4 *row =
                (const uint4 *)(ring + (size_t)slot * stage_bytes + (size_t)rr * K * 2);
#pragma unroll
            for (int k = 0; k < NV; k++) {
                const int v = s * 32 + lane + k * stride;
                if (v >= nv) break;
                float wf[8];
                unpack8(row[v], wf);
#pragma unroll
                for (int e = 0; e < 8; e++) acc = fmaf(xf[k][e], wf[e], acc);
            }
        }
        __syncwarp();
        if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(saddr(&empty[slot])) : "memory");
        if (MATH) {
            acc = wsum(acc);
            if (S > 1) {
                if (lane == 0) red[i & 1][warp] = acc;
                asm volatile("bar.sync %0, %1;" ::"r"(1 + rr), "r"(S * 32) : "memory");
                if (s == 0 && lane == 0 && n < N) {
                    float t = red[i & 1][warp];
                    for (int j = 1; j < S; j++) t += red[i & 1][warp + j];
                    y[n] = t;
                }
            } else if (lane == 0 && n < N)
                y[n] = acc;
        }
    }
}

struct shape {
    const char *name;
    int N, K, S;
};

int main(int argc, char **argv) {
    const double pool_gib = argc > 1 ? atof(argv[1]) : 3.0;
    const int reps = argc > 2 ? atoi(argv[2]) : 20;
    int dev = 0, sms = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("device %s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
    const size_t pool = (size_t)(pool_gib * (1ull << 30));
    bf16_t *W, *X;
    float *Y, *Y2;
    unsigned *sink;
    CK(cudaMalloc(&W, pool));
    CK(cudaMalloc(&X, 16384 * 2));
    CK(cudaMalloc(&Y, 200000 * 4));
    CK(cudaMalloc(&Y2, 200000 * 4));
    CK(cudaMalloc(&sink, 4));
    fill<<<1024, 256>>>(W, pool / 2, 1u);
    fill<<<64, 256>>>(X, 16384, 7u);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    // the backend's split choices at these shapes (S rows of 8/S a block)
    const shape shapes[] = {
        {"qwen8b.qkv", 6144, 4096, 4},     {"qwen8b.o", 4096, 4096, 4},
        {"qwen8b.gate|up", 24576, 4096, 4}, {"qwen8b.down", 4096, 12288, 8},
        {"qwen8b.head", 151936, 4096, 4},  {"llama1b.head", 128256, 2048, 2},
        {"qwen06b.head", 151936, 1024, 1}, {"llama1b.gate|up", 16384, 2048, 2},
    };
    int maxsm = 0;
    CK(cudaDeviceGetAttribute(&maxsm, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    printf("%-16s %9s | %-22s | %s\n", "shape", "MB", "method", "us/call  GB/s");
    for (const shape &sh : shapes) {
        const size_t bytes = (size_t)sh.N * sh.K * 2;
        int copies = (int)(pool / bytes);
        if (copies < 1) continue;
        if (copies > 64) copies = 64;
        auto wp = [&](int r) { return W + (size_t)(r % copies) * ((size_t)sh.N * sh.K); };
        auto timeit = [&](const char *name, auto launch) {
            launch(wp(copies - 1)); // warm
            CK(cudaGetLastError());
            CK(cudaEventRecord(e0));
            for (int r = 0; r < reps; r++) launch(wp(r));
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            double us = ms * 1e3 / reps;
            printf("%-16s %9.1f | %-22s | %8.2f %7.0f\n", sh.name, bytes / 1e6, name, us,
                   bytes / us / 1e3);
        };
        const size_t n16 = bytes / 16;
        for (int bpsm : {2, 4})
            for (int thr : {256, 512}) {
                char nm[64];
                snprintf(nm, sizeof nm, "ld U8 %dx%d", bpsm, thr);
                timeit(nm, [&](bf16_t *w) {
                    rd_ld<8><<<sms * bpsm, thr>>>((const uint4 *)w, n16, sink);
                });
            }
        timeit("ld U16 4x256", [&](bf16_t *w) {
            rd_ld<16><<<sms * 4, 256>>>((const uint4 *)w, n16, sink);
        });
        const int nvl = (sh.K / 8 + sh.S * 32 - 1) / (sh.S * 32);
        const int G8 = (sh.N + 8 / sh.S - 1) / (8 / sh.S);
        auto reg = [&](bf16_t *w, float *y) {
            switch (nvl) {
            case 1: gemv_reg<1><<<G8, 256>>>(X, w, y, sh.N, sh.K, sh.S); break;
            case 2: gemv_reg<2><<<G8, 256>>>(X, w, y, sh.N, sh.K, sh.S); break;
            case 4: gemv_reg<4><<<G8, 256>>>(X, w, y, sh.N, sh.K, sh.S); break;
            case 6: gemv_reg<6><<<G8, 256>>>(X, w, y, sh.N, sh.K, sh.S); break;
            default: fprintf(stderr, "nvl %d\n", nvl); exit(1);
            }
        };
        timeit("reg (1 block a group)", [&](bf16_t *w) { reg(w, Y); });
        // tma: CW 16 consumer warps; stage R = 16 / S rows
        auto tma = [&](bf16_t *w, float *y, int nst, bool math, int blocks) {
            constexpr int CW = 16;
            const int R = CW / sh.S, G = (sh.N + R - 1) / R;
            const unsigned sb = (unsigned)R * sh.K * 2;
            const int per = (G + blocks - 1) / blocks;
            const size_t smem = (size_t)nst * sb;
#define TMA_CASE(NVV)                                                                              \
    case NVV: {                                                                                    \
        auto f = math ? gemv_tma<CW, NVV, true> : gemv_tma<CW, NVV, false>;                        \
        CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));      \
        f<<<(G + per - 1) / per, (CW + 1) * 32, smem>>>(X, w, y, sh.N, sh.K, sh.S, per, nst, sb); \
        break;                                                                                     \
    }
            switch (nvl) {
                TMA_CASE(1)
                TMA_CASE(2)
                TMA_CASE(4)
                TMA_CASE(6)
            default: exit(1);
            }
        };
        const unsigned sb = (unsigned)(16 / sh.S) * sh.K * 2;
        const int nstmax = (int)((maxsm - 2048) / sb) < MAXST ? (int)((maxsm - 2048) / sb) : MAXST;
        for (int nst : {nstmax / 2, nstmax}) {
            if (nst < 2) continue;
            char nm[64];
            snprintf(nm, sizeof nm, "bulk %d x %u KiB", nst, sb >> 10);
            timeit(nm, [&](bf16_t *w) { tma(w, Y2, nst, false, sms); });
            snprintf(nm, sizeof nm, "tma %d x %u KiB", nst, sb >> 10);
            timeit(nm, [&](bf16_t *w) { tma(w, Y2, nst, true, sms); });
        }
        // bits: reg and tma on the same copy
        CK(cudaMemset(Y, 0xff, sh.N * 4));
        CK(cudaMemset(Y2, 0xff, sh.N * 4));
        reg(wp(0), Y);
        tma(wp(0), Y2, nstmax, true, sms);
        CK(cudaDeviceSynchronize());
        float *h1 = (float *)malloc(sh.N * 4), *h2 = (float *)malloc(sh.N * 4);
        CK(cudaMemcpy(h1, Y, sh.N * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h2, Y2, sh.N * 4, cudaMemcpyDeviceToHost));
        int diff = 0;
        for (int i = 0; i < sh.N; i++) diff += memcmp(&h1[i], &h2[i], 4) != 0;
        printf("%-16s bits: tma vs reg, %d of %d outputs differ (y[0] %g)\n", sh.name, diff, sh.N,
               h1[0]);
        free(h1);
        free(h2);
    }
    return 0;
}
