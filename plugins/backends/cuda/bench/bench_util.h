/* What the backend's benchmark tools (cuda_gemv_bench, cuda_mk_bench) share: exiting checks for
 * driver calls and backend calls (a benchmark has nothing to recover), the error they fill, the
 * backend negotiation, random bf16 fills and the timing of a run of calls (median of 5 after a
 * warm-up). */
#ifndef WEFT_CUDA_BENCH_UTIL_H
#define WEFT_CUDA_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "../cuda_internal.h"

extern weft_status weft_plugin_negotiate(uint32_t, uint32_t, uint32_t *,
                                         const weft_plugin_descriptor **, weft_error *);

#define CKB(x)                                                                                     \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "%s failed: %d (line %d)\n", #x, (int)r_, __LINE__);                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define TRYB(x)                                                                                    \
    do {                                                                                           \
        weft_status s_ = (x);                                                                      \
        if (s_) {                                                                                  \
            fprintf(stderr, "%s failed: %s\n", #x, err.message);                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static weft_error err = {.size = sizeof(weft_error)};

/* The cuda backend, created through its descriptor as the host would, its context current;
 * bench_close destroys it through the same descriptor. */
static const weft_plugin_descriptor *bench_desc;
static inline cuda_backend *bench_backend(void) {
    uint32_t chosen;
    TRYB(weft_plugin_negotiate(1, 1, &chosen, &bench_desc, &err));
    void *st;
    TRYB(bench_desc->create(NULL, NULL, &st, &err));
    cuda_backend *b = st;
    CKB(cuCtxSetCurrent(b->ctx));
    return b;
}
static inline void bench_close(cuda_backend *b) {
    bench_desc->destroy(b);
}

/* n bf16 values uniform in [-1, 1) from (seed, index) (weft_fill_random; a grid-stride loop, so
 * the values do not depend on the grid). */
static inline void bench_fill(cuda_backend *b, CUdeviceptr p, long n, unsigned long long seed) {
    CUfunction f;
    TRYB(cuda_kernel_get(b, WEFT_DTYPE_BF16, WEFT_DTYPE_BF16, "weft_fill_random", &f, &err));
    void *args[] = {&p, &n, &seed};
    TRYB(cuda_launch(b, f, "fill", 1024, 1, 256, args, &err));
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Microseconds per call of issue(ctx, i) for i = 0..n-1, issued straight into the stream
 * (graph 0) or captured once into a CUDA graph and replayed (graph 1); 5 timed rounds after a
 * warm-up round, the median. */
typedef void (*issue_fn)(cuda_backend *b, void *ctx, int i);
static inline double time_calls(cuda_backend *b, issue_fn issue, void *ctx, int n, int graph) {
    CUgraphExec ge = NULL;
    if (graph) {
        CUgraph g;
        CKB(cuStreamBeginCapture(b->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        for (int i = 0; i < n; i++)
            issue(b, ctx, i);
        CKB(cuStreamEndCapture(b->stream, &g));
        CKB(cuGraphInstantiate(&ge, g, 0));
        CKB(cuGraphDestroy(g));
    }
    CUevent e0, e1;
    CKB(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CKB(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    double trial[5];
    for (int tr = -1; tr < 5; tr++) {
        CKB(cuEventRecord(e0, b->stream));
        if (graph)
            CKB(cuGraphLaunch(ge, b->stream));
        else
            for (int i = 0; i < n; i++)
                issue(b, ctx, i);
        CKB(cuEventRecord(e1, b->stream));
        CKB(cuEventSynchronize(e1));
        float ms;
        CKB(cuEventElapsedTime(&ms, e0, e1));
        if (tr >= 0) trial[tr] = ms * 1e3 / n;
    }
    qsort(trial, 5, sizeof(double), cmp_double);
    if (ge) CKB(cuGraphExecDestroy(ge));
    CKB(cuEventDestroy(e0));
    CKB(cuEventDestroy(e1));
    return trial[2];
}

#endif
