// Probe: two ways a kernel might read data older than what it is ordered after.
// 1. L1 under PDL. May a kernel launched under programmatic dependent launch (PDL) read, after its
// griddepcontrol.wait, a line that an earlier kernel left in its SM's L1 before a later kernel
// rewrote the data? The backend's kernels read activations with plain (L1-allocating) loads
// after their wait; with option pdl_early every kernel triggers its dependents before it waits,
// so a kernel's blocks may be resident while kernels two or more places before it still run.
//
// Per round, three kernels in one stream, nsm blocks of 256 threads each:
//   A  waits, spins `spin_us` (so C's blocks are resident by then when the trigger is early),
//      then reads all of x with L1-allocating loads (x still holds the last round's values)
//   B  waits, then one block writes round r's values into x and r into `round`
//   C  waits, reads `round` at L2, then x by `mode`, and counts the values that are not
//      round r's
// Modes of C's read: ca (ld.global.ca, what the backend's loads do), cg (ld.global.cg: L2 only),
// acq (after the wait an ld.acquire.gpu of a shared-memory word, which the compiler emits as the
// shared load plus CCTL.IVALL, an L1 invalidation, then ld.global.ca), fence (fence.acq_rel.gpu,
// then ld.global.ca). Launches: early (PDL, every kernel triggers before its wait: the
// backend's default), late (PDL, trigger after the wait), plain (no PDL: stream order), each in
// a stream and as a CUDA graph of the rounds. Prints the stale values seen and the time a round
// takes (the time includes the spin). A stale value in a mode that the backend uses is a
// correctness hazard; the plain launches must show none (the probe's own check).
// 2. An upload's DMA. A synchronous copy from pageable host memory (cudaMemcpy, cuMemcpyHtoD)
// runs on the legacy stream and may return before its DMA has landed; a kernel launched at once
// on a non-blocking stream (as the backend's compute stream is) is not ordered after it. Each
// round copies a new pattern (8 KiB, or 64 MiB; by the runtime's cudaMemcpy and by the driver's
// cuMemcpyHtoD, which the backend's upload uses) and at once launches a kernel on such a stream
// that counts the words not of the new pattern (all 8 KiB; the last MiB of the 64); then the
// same with the legacy stream synchronized between the two (what the backend's upload does).
// Usage: stale_reads [rounds (default 200)] [spin_us (default 20)]
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "probe_check.cuh"
#include "probe_device.cuh"

enum { N_X = 4096, NT = 256 };
enum { M_CA, M_CG, M_ACQ, M_FENCE, N_MODES };
static const char *mode_name[N_MODES] = {"ca", "cg", "acq", "fence"};
enum { L_EARLY, L_LATE, L_PLAIN, N_LAUNCH };
static const char *launch_name[N_LAUNCH] = {"early", "late", "plain"};

__device__ __forceinline__ void enter(int early) {
    if (early) {
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        asm volatile("griddepcontrol.wait;" ::: "memory");
    } else {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
}
__device__ __forceinline__ unsigned ld_ca(const unsigned *p) {
    unsigned v;
    asm volatile("ld.global.ca.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned ld_cg(const unsigned *p) {
    unsigned v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__host__ __device__ __forceinline__ unsigned value(unsigned r, int i) {
    return r * 2654435761u + i;
}

__global__ void kern_a(const unsigned *x, unsigned *sink, long spin_ns, int early) {
    enter(early);
    const unsigned long long t0 = gtimer();
    while (gtimer() - t0 < (unsigned long long)spin_ns) __nanosleep(256);
    unsigned acc = 0;
    for (int i = threadIdx.x; i < N_X; i += NT) acc ^= ld_ca(x + i);
    if (acc == 0x12345678u) sink[0] = acc; // keeps the loads
}
__global__ void kern_b(unsigned *x, unsigned *round, int early) {
    enter(early);
    const unsigned r = ld_cg(round) + 1;
    __syncthreads(); // every thread has read round before thread 0 advances it
    for (int i = threadIdx.x; i < N_X; i += NT) x[i] = value(r, i);
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        round[0] = r;
    }
}
__global__ void kern_c(const unsigned *x, const unsigned *round, unsigned *stale, int mode,
                       int early) {
    __shared__ unsigned word;
    if (threadIdx.x == 0) word = 0;
    __syncthreads();
    enter(early);
    if (mode == M_ACQ) {
        unsigned v, a = (unsigned)__cvta_generic_to_shared(&word);
        asm volatile("ld.acquire.gpu.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
        if (v == 0x12345678u) stale[1] = v;
    } else if (mode == M_FENCE) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    const unsigned r = ld_cg(round);
    unsigned bad = 0;
    for (int i = threadIdx.x; i < N_X; i += NT) {
        const unsigned v = mode == M_CG ? ld_cg(x + i) : ld_ca(x + i);
        bad += v != value(r, i);
    }
    if (bad) atomicAdd(stale, bad);
}

// the words [0, n) of p, which should be round r's values for indices from i0, not matching it
// counted into stale[0]
__global__ void kern_tail(const unsigned *p, int n, unsigned r, int i0, unsigned *stale) {
    unsigned bad = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        bad += ld_cg(p + i) != value(r, i0 + i);
    if (bad) atomicAdd(stale, bad);
}

static void launch(void (*k)(), void **args, int nblocks, int pdl, cudaStream_t s) {
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = launch_config(dim3(nblocks), dim3(NT), s, pdl, &at);
    CK(cudaLaunchKernelExC(&cfg, (const void *)k, args));
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 200;
    const long spin_ns = (argc > 2 ? atol(argv[2]) : 20) * 1000l;
    if (rounds < 1 || spin_ns < 0) {
        fprintf(stderr, "usage: stale_reads [rounds >= 1] [spin_us >= 0]\n");
        return 2;
    }
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    const int nsm = p.multiProcessorCount;
    unsigned *x, *round, *stale, *sink;
    CK(cudaMalloc(&x, N_X * 4));
    CK(cudaMalloc(&round, 4));
    CK(cudaMalloc(&stale, 8));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(x, 0, N_X * 4));
    CK(cudaMemset(round, 0, 4));
    CK(cudaDeviceSynchronize()); // the legacy stream's clears before any kernel of the probe
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("device %s, %d SMs, %d rounds, A spins %ld us; stale values seen by C / values read\n",
           p.name, nsm, rounds, spin_ns / 1000);
    int fail = 0;
    for (int graph = 0; graph < 2; graph++)
        for (int l = 0; l < N_LAUNCH; l++)
            for (int m = 0; m < N_MODES; m++) {
                const int early = l == L_EARLY, pdl = l != L_PLAIN;
                CK(cudaMemsetAsync(stale, 0, 8, s)); // in order before the round's kernels
                void *aa[] = {&x, &sink, (void *)&spin_ns, (void *)&early};
                void *ba[] = {&x, &round, (void *)&early};
                int mm = m;
                void *ca[] = {&x, &round, &stale, &mm, (void *)&early};
                cudaGraphExec_t ge = nullptr;
                auto enqueue = [&](int n) {
                    for (int i = 0; i < n; i++) {
                        launch((void (*)())kern_a, aa, nsm, pdl, s);
                        launch((void (*)())kern_b, ba, 1, pdl, s);
                        launch((void (*)())kern_c, ca, nsm, pdl, s);
                    }
                };
                const int per = graph ? 10 : rounds; // a graph holds 10 rounds, replayed
                if (graph) {
                    cudaGraph_t g;
                    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
                    enqueue(per);
                    CK(cudaStreamEndCapture(s, &g));
                    CK(cudaGraphInstantiate(&ge, g, 0));
                    CK(cudaGraphDestroy(g));
                }
                CK(cudaEventRecord(e0, s));
                if (graph)
                    for (int i = 0; i < (rounds + per - 1) / per; i++) CK(cudaGraphLaunch(ge, s));
                else enqueue(rounds);
                CK(cudaEventRecord(e1, s));
                CK(cudaStreamSynchronize(s));
                if (ge) CK(cudaGraphExecDestroy(ge));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                const int done = graph ? (rounds + per - 1) / per * per : rounds;
                unsigned bad = 0;
                CK(cudaMemcpy(&bad, stale, 4, cudaMemcpyDeviceToHost));
                printf("%-6s %-5s %-5s stale %u of %ld  (%.2f us a round)\n",
                       graph ? "graph" : "stream", launch_name[l], mode_name[m], bad,
                       (long)done * nsm * N_X, ms * 1000.f / done);
                if (l == L_PLAIN && bad) fail = 1;
            }
    if (fail) printf("FAIL: stale values under plain stream order: the probe itself is wrong\n");

    // 2. the upload's DMA against a kernel on the non-blocking stream: 8 KiB (the chain test's
    // input; a small copy may travel inside the command stream) checked whole, 200 rounds, and
    // 64 MiB (a weight) with its last MiB checked, 20 rounds
    const size_t sizes[2] = {2048, 16u << 20}, tails[2] = {2048, 256u << 10};
    const int urounds[2] = {200, 20};
    unsigned *h = (unsigned *)malloc(sizes[1] * 4), *d;
    if (!h) {
        fprintf(stderr, "no host memory for the upload probe\n");
        return 1;
    }
    CK(cudaMalloc(&d, sizes[1] * 4));
    // api: the runtime's cudaMemcpy, then the driver's cuMemcpyHtoD; z: the size; sync: without
    // and with the wait for the legacy stream
    for (int k = 0; k < 8; k++) {
        const int api = k >> 2, z = (k >> 1) & 1, sync = k & 1;
        const size_t words = sizes[z], tail = tails[z];
        CK(cudaMemsetAsync(stale, 0, 8, s));
        for (int r = 1; r <= urounds[z]; r++) {
            for (size_t i = 0; i < words; i++) h[i] = value((unsigned)r, (int)i);
            if (api == 0) CK(cudaMemcpy(d, h, words * 4, cudaMemcpyHostToDevice));
            else if (cuMemcpyHtoD((CUdeviceptr)d, h, words * 4) != CUDA_SUCCESS) {
                fprintf(stderr, "cuMemcpyHtoD failed\n");
                return 1;
            }
            if (sync) CK(cudaStreamSynchronize(cudaStreamLegacy));
            kern_tail<<<64, NT, 0, s>>>(d + words - tail, (int)tail, (unsigned)r,
                                        (int)(words - tail), stale);
            CK(cudaGetLastError());
            CK(cudaStreamSynchronize(s));
        }
        unsigned bad = 0;
        CK(cudaMemcpy(&bad, stale, 4, cudaMemcpyDeviceToHost));
        printf("upload %-12s %6zu KiB %-22s stale %u of %ld words\n",
               api ? "cuMemcpyHtoD" : "cudaMemcpy", words * 4 / 1024,
               sync ? "then legacy sync" : "then kernel at once", bad,
               (long)urounds[z] * (long)tail);
        if (sync && bad) fail = 1;
    }
    if (fail) printf("FAIL: stale words where the probe orders the reads after the writes\n");
    free(h);
    return fail;
}
