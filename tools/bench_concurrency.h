/* `weft bench decode --concurrency N`: many requests in flight at once (see bench_concurrency.c).
 * cmd_bench.c parses the shared options and hands the opened engine here. */
#ifndef WEFT_TOOLS_BENCH_CONCURRENCY_H
#define WEFT_TOOLS_BENCH_CONCURRENCY_H

#include <stdint.h>

#include "engine/engine.h"

typedef struct weft_bench_conc {
    uint32_t concurrency; /* requests submitted together */
    uint32_t prompt, gen; /* tokens per request */
    uint32_t repeats;     /* timed repeats after one warm-up */
    uint32_t arrival;     /* > 0: prompt length of the long request arriving while they decode */
    uint32_t window;      /* idle steps measured before each arrival */
    int json;
} weft_bench_conc;

/* Runs the benchmark on e and prints the report; returns the exit code. */
int weft_bench_concurrency(weft_engine *e, const weft_bench_conc *b);

#endif
