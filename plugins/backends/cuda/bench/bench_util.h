/* What the backend's benchmark tools (cuda_gemv_bench, cuda_mk_bench) share: exiting checks for
 * driver calls and backend calls (a benchmark has nothing to recover), the error they fill, the
 * backend negotiation and the median helper. */
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
