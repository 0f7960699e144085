/* cuda_gemv_bench: the linear product at decode shapes, cuBLASLt against the backend's GEMV
 * kernel (each split-K setting), timed with CUDA events; prints microseconds per call and the
 * effective bandwidth (weight + x + y bytes over time) beside the device-to-device copy rate.
 * The GEMV columns use the backend's programmatic dependent launch (option pdl, on where the
 * device has it); the last column repeats the default split with it off, so the back-to-back
 * calls run strictly one after another (docs/perf/pdl.md); the column "L2 hot" repeats the
 * default split on one weight copy, which after the first call is served from L2 where it fits
 * (the cost of a product whose weights were prefetched into L2).
 * Weights rotate through a pool several times the L2 size so every call reads from HBM, as a
 * decode step does. Also checks each GEMV result against cuBLASLt's (max relative difference).
 *   cuda_gemv_bench [copy_GBps] [shapes: a name part (llama1b, qwen06b, qwen8b) | all] [max T]
 * Built with the backend's own sources (internal API), not through the plugin ABI. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

typedef struct shape {
    const char *name;
    int N, K;
    int f32_out;
} shape;

static const shape shapes[] = {
    {"llama1b.q/o", 2048, 2048, 0},      {"llama1b.k/v", 512, 2048, 0},
    {"llama1b.gate/up", 8192, 2048, 0},  {"llama1b.down", 2048, 8192, 0},
    {"llama1b.head", 128256, 2048, 1},   {"llama1b.qkv", 3072, 2048, 0},
    {"llama1b.gate|up", 16384, 2048, 0}, {"qwen06b.q", 2048, 1024, 0},
    {"qwen06b.k/v", 1024, 1024, 0},      {"qwen06b.o", 1024, 2048, 0},
    {"qwen06b.gate/up", 3072, 1024, 0},  {"qwen06b.down", 1024, 3072, 0},
    {"qwen06b.head", 151936, 1024, 1},   {"qwen06b.qkv", 4096, 1024, 0},
    {"qwen06b.gate|up", 6144, 1024, 0},  {"qwen8b.q/o", 4096, 4096, 0},
    {"qwen8b.k/v", 1024, 4096, 0},       {"qwen8b.qkv", 6144, 4096, 0},
    {"qwen8b.gate|up", 24576, 4096, 0},  {"qwen8b.down", 4096, 12288, 0},
    {"qwen8b.head", 151936, 4096, 1},
};

static float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* method: 0 = cuBLASLt, 1..4 = GEMV with split 1, 2, 4, 8; 5 = GEMV with the default split and
 * programmatic dependent launch off */
static void call(cuda_backend *b, int method, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y,
                 const shape *s, int T) {
    uint32_t ty = s->f32_out ? WEFT_DTYPE_F32 : WEFT_DTYPE_BF16;
    if (method == 5) {
        int saved = b->pdl;
        b->pdl = 0;
        TRYB(cuda_gemv(b, x, w, 0, y, s->f32_out, WEFT_DTYPE_BF16, T, s->N, s->K, 0, &err));
        b->pdl = saved;
    } else if (method == 0)
        TRYB(cuda_gemm(b, x, WEFT_DTYPE_BF16, w, WEFT_DTYPE_BF16, 0, y, ty, T, s->N, s->K, &err));
    else
        TRYB(cuda_gemv(b, x, w, 0, y, s->f32_out, WEFT_DTYPE_BF16, T, s->N, s->K,
                       method < 0 ? 0 : 1 << (method - 1), &err));
}

/* The floor of one link in a chain of dependent kernels: the empty kernel weft_noop (it only
 * runs pdl_enter) with `blocks` blocks of 256 threads, 256 launches back to back. */
typedef struct noop_ctx {
    CUfunction f;
    unsigned blocks;
    int pdl;
} noop_ctx;
static void issue_noop(cuda_backend *b, void *ctx, int i) {
    noop_ctx *c = ctx;
    (void)i;
    int zero = 0;
    void *args[] = {&zero};
    TRYB(cuda_launch_ex(b, c->f, "weft_noop", c->blocks, 1, 1, 256, 0, c->pdl, args, &err));
}
static double noop_chain(cuda_backend *b, int pdl, int graph, unsigned blocks) {
    noop_ctx c = {.blocks = blocks, .pdl = pdl};
    TRYB(cuda_kernel_get(b, WEFT_DTYPE_BF16, WEFT_DTYPE_BF16, "weft_noop", &c.f, &err));
    return time_calls(b, issue_noop, &c, 256, graph);
}

/* One call of method m as a kernel node of a replayed CUDA graph, as a decode step runs it: 64
 * calls rotating through the weight pool. */
typedef struct gemv_ctx {
    int m, copies, T;
    CUdeviceptr x, pool, y;
    uint64_t wbytes;
    const shape *s;
} gemv_ctx;
static void issue_gemv(cuda_backend *b, void *ctx, int i) {
    gemv_ctx *c = ctx;
    call(b, c->m, c->x, c->pool + (uint64_t)(i % c->copies) * c->wbytes, c->y, c->s, c->T);
}
static double graph_time(cuda_backend *b, int m, CUdeviceptr x, CUdeviceptr pool, uint64_t wbytes,
                         int copies, CUdeviceptr y, const shape *s, int T) {
    gemv_ctx c = {
        .m = m, .copies = copies, .T = T, .x = x, .pool = pool, .y = y, .wbytes = wbytes, .s = s};
    return time_calls(b, issue_gemv, &c, 64, 1);
}

int main(int argc, char **argv) {
    double copy_gbps = argc > 1 ? atof(argv[1]) : 4251.0;
    const char *sel = argc > 2 ? argv[2] : "all";
    int max_t = argc > 3 ? atoi(argv[3]) : 8;
    cuda_backend *b = bench_backend();
    const uint64_t pool_bytes = 2ull << 30; /* 2 GiB of weights: ~40x the L2 */
    CUdeviceptr pool, x, y, y2;
    CKB(cuMemAlloc(&pool, pool_bytes));
    CKB(cuMemAlloc(&x, 8 * 8192 * 2));
    CKB(cuMemAlloc(&y, 8ull * 151936 * 4));
    CKB(cuMemAlloc(&y2, 8ull * 151936 * 4));
    bench_fill(b, pool, (long)(pool_bytes / 2), 1);
    bench_fill(b, x, 8 * 8192, 2);
    CUevent e0, e1;
    CKB(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CKB(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    printf("device %s, copy rate %.0f GB/s (reads + writes), programmatic dependent launch %s\n",
           b->name, copy_gbps, b->pdl ? "on" : "off (device or option)");
    for (int graph = 0; graph < 2; graph++)
        for (unsigned blocks = 1; blocks <= 528; blocks = blocks == 1 ? 132 : blocks * 4)
            printf(
                "empty-kernel chain, %s, %3u blocks: %.2f us per kernel with PDL, %.2f without\n",
                graph ? "graph replay" : "stream", blocks, noop_chain(b, 1, graph, blocks),
                noop_chain(b, 0, graph, blocks));
    printf("%-17s %6s %5s %2s | %9s %9s %9s %9s %9s | %7s %6s %5s | %8s | %9s %9s\n", "shape", "N",
           "K", "T", "cublasLt", "gemv s1", "gemv s2", "gemv s4", "gemv s8", "best", "GB/s", "frac",
           "max rel", "dflt nopdl", "L2 hot");
    const int Ts[4] = {1, 2, 4, 8};
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        const shape *s = &shapes[si];
        if (strcmp(sel, "all") && !strstr(s->name, sel)) continue;
        uint64_t wbytes = (uint64_t)s->N * s->K * 2;
        int copies = (int)(pool_bytes / wbytes);
        if (copies < 1) continue;
        for (int ti = 0; ti < 4; ti++) {
            int T = Ts[ti];
            if (T > max_t) break;
            double us[7];
            /* correctness of every gemv split against cuBLASLt (first weight copy) */
            double maxrel = 0;
            size_t ny = (size_t)T * s->N, es = s->f32_out ? 4 : 2;
            void *h1 = malloc(ny * es), *h2 = malloc(ny * es);
            call(b, 0, x, pool, y, s, T);
            CKB(cuStreamSynchronize(b->stream));
            CKB(cuMemcpyDtoH(h1, y, ny * es));
            for (int m = 1; m <= 4; m++) {
                CKB(cuMemsetD8Async(y2, 0xff, ny * es, b->stream)); /* before the call, in order */
                call(b, m, x, pool, y2, s, T);
                CKB(cuStreamSynchronize(b->stream));
                CKB(cuMemcpyDtoH(h2, y2, ny * es));
                double mref = 1e-30, md = 0;
                for (size_t i = 0; i < ny; i++) {
                    double a = s->f32_out ? ((float *)h1)[i] : bf(((uint16_t *)h1)[i]);
                    double c = s->f32_out ? ((float *)h2)[i] : bf(((uint16_t *)h2)[i]);
                    if (isnan(c)) md = INFINITY;
                    if (fabs(a) > mref) mref = fabs(a);
                    if (fabs(a - c) > md) md = fabs(a - c);
                }
                if (md / mref > maxrel) maxrel = md / mref;
            }
            free(h1);
            free(h2);
            for (int m = 0; m <= 6; m++) {
                int reps = 64;
                double trial[5];
                /* m 6: one copy, hot in L2 after the warm-up where it fits */
                int rot = m == 6 ? 1 : copies, mm = m == 6 ? -1 : m;
                for (int w = 0; w < 3; w++)
                    call(b, mm, x, pool + (uint64_t)(w % rot) * wbytes, y, s, T);
                for (int tr = 0; tr < 5; tr++) {
                    CKB(cuEventRecord(e0, b->stream));
                    for (int r = 0; r < reps; r++)
                        call(b, mm, x, pool + (uint64_t)((r + tr) % rot) * wbytes, y, s, T);
                    CKB(cuEventRecord(e1, b->stream));
                    CKB(cuEventSynchronize(e1));
                    float ms;
                    CKB(cuEventElapsedTime(&ms, e0, e1));
                    trial[tr] = ms * 1e3 / reps;
                }
                qsort(trial, 5, sizeof(double), cmp_double);
                us[m] = trial[2];
            }
            int best = 0;
            for (int m = 1; m <= 4; m++)
                if (us[m] < us[best]) best = m;
            double bytes = (double)wbytes + (double)T * s->K * 2 + (double)T * s->N * es;
            double gbps = bytes / (us[best] * 1e-6) / 1e9;
            printf("%-17s %6d %5d %2d | %9.2f %9.2f %9.2f %9.2f %9.2f | %7s %6.0f %5.2f | %8.1e"
                   " | %9.2f %9.2f  (default split %d)\n",
                   s->name, s->N, s->K, T, us[0], us[1], us[2], us[3], us[4],
                   best == 0   ? "cublas"
                   : best == 1 ? "s1"
                   : best == 2 ? "s2"
                   : best == 3 ? "s4"
                               : "s8",
                   gbps, gbps / copy_gbps, maxrel, us[5], us[6], cuda_gemv_split(NULL, s->K));
            /* the same product as graph nodes, per split (the batch-1 step replays graphs) */
            double gt[5];
            int gbest = 1;
            for (int m = 1; m <= 4; m++) {
                gt[m] = graph_time(b, m, x, pool, wbytes, copies, y, s, T);
                if (gt[m] < gt[gbest]) gbest = m;
            }
            double ggbps = bytes / (gt[gbest] * 1e-6) / 1e9;
            printf(
                "%-17s %6s %5s %2s | graph: %9.2f %9.2f %9.2f %9.2f | best s%d %6.0f GB/s %5.2f\n",
                "", "", "", "", gt[1], gt[2], gt[3], gt[4], 1 << (gbest - 1), ggbps,
                ggbps / copy_gbps);
            fflush(stdout);
        }
    }
    bench_close(b);
    return 0;
}
