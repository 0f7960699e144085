/* The host's worker pool (host service WEFT_SERVICE_THREADS): parallel_for over [0, n) on a
 * fixed set of threads, the caller's thread taking part. Workers spin briefly before sleeping,
 * because a decode step calls parallel_for once per node and a sleeping pool would cost a
 * wake-up each time. With one thread everything runs inline on the caller. */
#ifndef WEFT_ENGINE_THREADS_H
#define WEFT_ENGINE_THREADS_H

#include <stdint.h>

typedef struct weft_pool weft_pool;

/* n_threads >= 1 (including the caller). NULL when threads cannot be started. */
weft_pool *weft_pool_new(uint32_t n_threads);
void weft_pool_free(weft_pool *p);
uint32_t weft_pool_size(const weft_pool *p);
/* Runs fn(arg, i, n) for every i in [0, n) and returns when all calls returned. Not reentrant:
 * a fn that calls parallel_for on the same pool runs its items inline. */
void weft_pool_parallel_for(weft_pool *p, void (*fn)(void *arg, uint32_t i, uint32_t n), void *arg,
                            uint32_t n);
/* Online CPUs (at least 1). */
uint32_t weft_cpu_count(void);

#endif
