// Probe: what a boundary between two CUDA graph replays costs the device, against a kernel
// boundary inside one graph (stream order, and programmatic dependent launch). A decode step is
// one replayed graph; several steps captured in one graph would trade the first for the second.
//
// Kernel `work` (a full grid, every block spinning on the global timer for a set time) stamps
// its end; kernel `next` (the same grid) stamps when its first block starts, or passes
// griddepcontrol.wait in the PDL form. The gap from the last `work` block's end to `next`'s
// first stamp is the boundary's time on the device's critical path. Cases, each replayed
// `reps` times after a warm-up, median and 90th percentile of the gaps:
//   two-graphs  graph A = [work], graph B = [next], launched alternately on one stream
//   same-graph  graph G = [next, work] replayed back to back: work of replay n to next of n + 1
//   in-graph    graph [work, next], stream order
//   in-graph-pdl graph [work, next], next launched with programmatic stream serialization and
//               work triggering its dependents at its start
// Usage: graph_gap [spin_us (default 20)] [reps (default 200)] [blocks_per_sm (default 1)]
//                  [store (default 0)]
// blocks_per_sm sets both kernels' grids (that many blocks of 256 an SM, all resident at once);
// store 1 has every thread of `work` store a word after the spin, its block's end stamped once
// they are issued, as a product's blocks end (so the gap then includes their stores' drain).
#include <algorithm>
#include <vector>

#include "probe_check.cuh"
#include "probe_device.cuh"

// every block spins for ns nanoseconds (then, with store, every thread stores a word into
// out); each block's end goes into ends[rep] by atomicMax
__global__ void work(unsigned long long *ends, unsigned *rep, long ns, int pdl, unsigned *out) {
    if (pdl) asm volatile("griddepcontrol.launch_dependents;");
    if (threadIdx.x == 0) {
        const unsigned long long t0 = gtimer();
        while (gtimer() - t0 < (unsigned long long)ns) {
        }
    }
    if (out) {
        __syncthreads();
        out[blockIdx.x * blockDim.x + threadIdx.x] = (unsigned)ns + threadIdx.x;
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicMax(ends + *(volatile unsigned *)rep, gtimer());
}

// every block's first thread: after the wait (pdl) the start into starts[rep] by atomicMin;
// the last block to arrive advances the replay counter once every block has stamped
__global__ void next(unsigned long long *starts, unsigned *rep, unsigned *arrive, int pdl) {
    if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0) {
        const unsigned r = *(volatile unsigned *)rep;
        atomicMin(starts + r, gtimer());
        __threadfence();
        if (atomicAdd(arrive, 1u) == gridDim.x - 1) {
            *arrive = 0;
            *(volatile unsigned *)rep = r + 1;
        }
    }
}

// the global timer's step as one thread reads it: the smallest nonzero difference between two
// consecutive reads, and the distinct differences seen, over n reads
__global__ void timer_step(unsigned long long *out, int n) {
    unsigned long long prev = gtimer(), step = ~0ull, big = 0;
    for (int i = 0; i < n; i++) {
        const unsigned long long t = gtimer(), d = t - prev;
        if (d && d < step) step = d;
        if (d > big) big = d;
        prev = t;
    }
    out[0] = step;
    out[1] = big;
}

struct gap_stats {
    double med, p90;
};

static gap_stats stats(const std::vector<unsigned long long> &s,
                       const std::vector<unsigned long long> &e, int skip, int lag) {
    // gap i: next's start of replay i + lag against work's end of replay i
    std::vector<double> g;
    for (size_t i = skip; i + lag < s.size() && i < e.size(); i++)
        g.push_back(((double)s[i + lag] - (double)e[i]) / 1e3);
    std::sort(g.begin(), g.end());
    if (g.empty()) return {0, 0};
    return {g[g.size() / 2], g[g.size() * 9 / 10]};
}

int main(int argc, char **argv) {
    const double spin_us = argc > 1 ? atof(argv[1]) : 20.0;
    const int reps = argc > 2 ? atoi(argv[2]) : 200;
    const int bpsm = argc > 3 ? atoi(argv[3]) : 1, store = argc > 4 ? atoi(argv[4]) : 0;
    if (spin_us <= 0 || reps < 10 || reps > 100000 || bpsm < 1 || bpsm > 8 || store < 0 ||
        store > 1) {
        fprintf(stderr, "usage: graph_gap [spin_us > 0] [reps 10..100000] [blocks_per_sm 1..8] "
                        "[store 0|1]\n");
        return 2;
    }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int n = reps + 4;
    unsigned long long *ends, *starts;
    unsigned *rep, *arrive;
    CK(cudaMalloc(&ends, n * sizeof(*ends)));
    CK(cudaMalloc(&starts, n * sizeof(*starts)));
    CK(cudaMalloc(&rep, sizeof(*rep)));
    CK(cudaMalloc(&arrive, sizeof(*arrive)));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const long ns = (long)(spin_us * 1e3);
    const dim3 grid(sms * bpsm), block(256);
    unsigned *out = nullptr;
    if (store) CK(cudaMalloc(&out, (size_t)grid.x * block.x * sizeof(*out)));

    auto launch_work = [&](int pdl) {
        work<<<grid, block, 0, st>>>(ends, rep, ns, pdl, out);
        CK(cudaGetLastError());
    };
    auto launch_next = [&](int pdl) {
        cudaLaunchAttribute at;
        cudaLaunchConfig_t cfg = launch_config(grid, block, st, pdl, &at);
        CK(cudaLaunchKernelEx(&cfg, next, starts, rep, arrive, pdl));
    };
    auto capture = [&](auto body) {
        cudaGraph_t g;
        cudaGraphExec_t x;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        body();
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&x, g, 0));
        CK(cudaGraphDestroy(g));
        return x;
    };
    auto reset = [&]() {
        CK(cudaMemsetAsync(ends, 0, n * sizeof(*ends), st));
        CK(cudaMemsetAsync(starts, 0xff, n * sizeof(*starts), st));
        CK(cudaMemsetAsync(rep, 0, sizeof(*rep), st));
        CK(cudaMemsetAsync(arrive, 0, sizeof(*arrive), st));
        CK(cudaStreamSynchronize(st));
    };
    auto fetch = [&](std::vector<unsigned long long> &s, std::vector<unsigned long long> &e) {
        CK(cudaStreamSynchronize(st));
        s.resize(n);
        e.resize(n);
        CK(cudaMemcpy(s.data(), starts, n * sizeof(*starts), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(e.data(), ends, n * sizeof(*ends), cudaMemcpyDeviceToHost));
        unsigned r = 0;
        CK(cudaMemcpy(&r, rep, sizeof(r), cudaMemcpyDeviceToHost));
        return r;
    };
    std::vector<unsigned long long> s, e;
    const int skip = 5;
    printf("graph_gap: %d SMs, grids of %u blocks x 256, work spins %.1f us%s, %d replays\n",
           sms, grid.x, spin_us, store ? " then stores a word a thread" : "", reps);
    { // the timer's granularity, which every gap below is a multiple of
        unsigned long long *d, h[2];
        CK(cudaMalloc(&d, sizeof(h)));
        timer_step<<<1, 1, 0, st>>>(d, 1 << 20);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
        CK(cudaFree(d));
        printf("globaltimer: smallest step between two reads %llu ns, largest %llu ns\n", h[0],
               h[1]);
    }

    { // two graphs, alternately
        cudaGraphExec_t a = capture([&] { launch_work(0); });
        cudaGraphExec_t b = capture([&] { launch_next(0); });
        reset();
        for (int i = 0; i < reps; i++) {
            CK(cudaGraphLaunch(a, st));
            CK(cudaGraphLaunch(b, st));
        }
        unsigned r = fetch(s, e);
        gap_stats g = stats(s, e, skip, 0);
        printf("two-graphs    gap median %.2f us, p90 %.2f us (%u replays counted)\n", g.med, g.p90,
               r);
        CK(cudaGraphExecDestroy(a));
        CK(cudaGraphExecDestroy(b));
    }
    { // one graph [next, work] back to back: work of replay i, next of replay i + 1
        cudaGraphExec_t x = capture([&] {
            launch_next(0);
            launch_work(0);
        });
        reset();
        for (int i = 0; i < reps; i++) CK(cudaGraphLaunch(x, st));
        unsigned r = fetch(s, e);
        // work of replay i stamps ends[i + 1] (next of replay i advanced the counter first),
        // beside next of replay i + 1's starts[i + 1]
        gap_stats g = stats(s, e, skip, 0);
        printf("same-graph    gap median %.2f us, p90 %.2f us (%u replays counted)\n", g.med, g.p90,
               r);
        CK(cudaGraphExecDestroy(x));
    }
    for (int pdl = 0; pdl < 2; pdl++) { // one graph [work, next]
        cudaGraphExec_t x = capture([&] {
            launch_work(pdl);
            launch_next(pdl);
        });
        reset();
        for (int i = 0; i < reps; i++) CK(cudaGraphLaunch(x, st));
        unsigned r = fetch(s, e);
        gap_stats g = stats(s, e, skip, 0);
        printf("%s gap median %.2f us, p90 %.2f us (%u replays counted)\n",
               pdl ? "in-graph-pdl " : "in-graph     ", g.med, g.p90, r);
        CK(cudaGraphExecDestroy(x));
    }
    CK(cudaStreamDestroy(st));
    CK(cudaFree(ends));
    CK(cudaFree(starts));
    CK(cudaFree(rep));
    CK(cudaFree(arrive));
    if (out) CK(cudaFree(out));
    return 0;
}
