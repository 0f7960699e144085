// x_broadcast: what does it cost when every block of a batch-1 product reads the same x row
// from L2 at once, past L1? A standalone probe (nvcc, sm_90a) for docs/perf/batch1.md (session
// of 2026-12-04 18:45 UTC). Each block of 256 threads reads one 16-byte vector a thread (4 KiB
// a block, the bf16 x of a 2,048-column row) with ld.global.cg REPS times in a dependent chain
// (the next address depends on the loaded value, and a block barrier ends each round as the
// products' x copy does), with all of the grid's blocks resident (BLOCKS_PER_SM a
// multiprocessor). Modes: every block the same 4 KiB (the products' case), C copies of it
// (block b reads copy b mod C), or each block its own 4 KiB. Prints the time of one round: the
// kernel's time over REPS, the empty kernel's subtracted. The products' x copies allocate in L1
// (core.cu gemv_x_shared), so the blocks of one SM share a line there; this probe shows what
// each block's own L2 request would cost. Build: nvcc -O3 -std=c++17 -arch=sm_90a -o
// x_broadcast x_broadcast.cu; run: x_broadcast [blocks an SM] [reps].
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "probe_check.cuh"

__device__ __forceinline__ uint4 ld_cg(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// copies: 0 = each block its own row, else block b reads copy b % copies. The data are zeros,
// so the chain's offset term is zero but the compiler cannot know it.
__global__ void __launch_bounds__(256) bcast(const uint4 *src, int copies, int reps,
                                             unsigned *sink) {
    const int row = copies ? (int)(blockIdx.x % copies) : (int)blockIdx.x;
    const uint4 *p = src + (size_t)row * 256 + threadIdx.x;
    unsigned acc = 0;
    for (int r = 0; r < reps; r++) {
        uint4 v = ld_cg(p + (acc & 1u));
        acc += v.x ^ v.y ^ v.z ^ v.w;
        __syncthreads();
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

int main(int argc, char **argv) {
    const int per_sm = argc > 1 ? atoi(argv[1]) : 6, reps = argc > 2 ? atoi(argv[2]) : 400;
    int dev = 0, sms = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int blocks = sms * per_sm;
    uint4 *src;
    unsigned *sink;
    CK(cudaMalloc(&src, (size_t)(blocks + 1) * 256 * sizeof(uint4)));
    CK(cudaMemset(src, 0, (size_t)(blocks + 1) * 256 * sizeof(uint4)));
    CK(cudaMalloc(&sink, sizeof(unsigned)));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    auto timed = [&](int grid, int copies, int r) {
        float best = 1e30f;
        for (int k = 0; k < 5; k++) {
            bcast<<<grid, 256>>>(src, copies, r, sink); // warm: the rows into L2
            CK(cudaEventRecord(a));
            bcast<<<grid, 256>>>(src, copies, r, sink);
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            float ms;
            CK(cudaEventElapsedTime(&ms, a, b));
            if (ms < best) best = ms;
        }
        return best * 1000.0f; // us
    };
    printf("%d SMs, %d blocks (%d an SM), %d rounds; us a round (best of 5)\n", sms, blocks,
           per_sm, reps);
    const float empty1 = timed(1, 1, 0), empty = timed(blocks, 1, 0);
    printf("  one block, one row:        %.3f\n", (timed(1, 1, reps) - empty1) / reps);
    const int cs[] = {1, 2, 4, 8, 32, 0};
    for (int c : cs) {
        float t = (timed(blocks, c, reps) - empty) / reps;
        if (c) printf("  all blocks, %2d cop%s:     %.3f\n", c, c == 1 ? "y  " : "ies", t);
        else printf("  all blocks, own rows:      %.3f\n", t);
    }
    CK(cudaGetLastError());
    return 0;
}
