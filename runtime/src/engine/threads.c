/* A small fork-join pool for the host service WEFT_SERVICE_THREADS (see threads.h). One job at
 * a time: the caller publishes (fn, arg, n) under a generation number, workers and the caller
 * take item indices from an atomic counter, and the caller waits until every item is done.
 * Workers spin on the generation for a short while, then sleep on a condition variable. A job
 * returns only when its items are done and no worker is still inside the item loop, so a late
 * worker never mixes the counters of two jobs. */
#include "engine/threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define SPIN_ROUNDS 20000
/* `next` between jobs: any index taken from it is past every job's end. */
#define CLOSED 0x80000000u

struct weft_pool {
    uint32_t n_threads;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint generation;
    atomic_int stop;
    atomic_int busy; /* a job is running: nested calls run inline */
    /* the current job */
    void (*fn)(void *, uint32_t, uint32_t);
    void *arg;
    /* Atomic: a worker that woke for the previous job after its caller stopped waiting reads n
     * (to find the job closed) while the caller may be writing the next job's n. fn and arg are
     * read only with an index of the current job, which orders them after their writes. */
    atomic_uint n;
    atomic_uint next;
    atomic_uint done;
    atomic_uint active; /* workers inside run_items: the caller waits for 0 before returning */
};

static void run_items(weft_pool *p) {
    for (;;) {
        uint32_t i = atomic_fetch_add(&p->next, 1), n = atomic_load(&p->n);
        if (i >= n) break;
        p->fn(p->arg, i, n);
        atomic_fetch_add(&p->done, 1);
    }
}

static void *worker(void *arg) {
    weft_pool *p = arg;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ROUNDS) continue;
            pthread_mutex_lock(&p->lock);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = gen;
        /* Counted, so the caller cannot start the next job while this worker may still read the
         * counters of the last one. */
        atomic_fetch_add(&p->active, 1);
        run_items(p);
        atomic_fetch_sub(&p->active, 1);
    }
}

uint32_t weft_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

weft_pool *weft_pool_new(uint32_t n_threads) {
    weft_pool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->n_threads = n_threads ? n_threads : 1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    atomic_store(&p->next, CLOSED);
    if (p->n_threads > 1) {
        p->threads = calloc(p->n_threads - 1, sizeof(pthread_t));
        if (!p->threads) {
            weft_pool_free(p);
            return NULL;
        }
        for (uint32_t i = 0; i + 1 < p->n_threads; i++)
            if (pthread_create(&p->threads[i], NULL, worker, p)) {
                p->n_threads = i + 1; /* the ones started, plus the caller */
                weft_pool_free(p);
                return NULL;
            }
    }
    return p;
}

void weft_pool_free(weft_pool *p) {
    if (!p) return;
    if (p->threads) {
        pthread_mutex_lock(&p->lock);
        atomic_store(&p->stop, 1);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        for (uint32_t i = 0; i + 1 < p->n_threads; i++)
            pthread_join(p->threads[i], NULL);
        free(p->threads);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p);
}

uint32_t weft_pool_size(const weft_pool *p) {
    return p ? p->n_threads : 1;
}

void weft_pool_parallel_for(weft_pool *p, void (*fn)(void *arg, uint32_t i, uint32_t n), void *arg,
                            uint32_t n) {
    if (!fn || n == 0) return;
    if (!p || p->n_threads == 1 || n == 1 || atomic_exchange(&p->busy, 1)) {
        for (uint32_t i = 0; i < n; i++)
            fn(arg, i, n);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->n, n);
    atomic_store(&p->done, 0);
    atomic_store(&p->next, 0);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_items(p);
    while (atomic_load(&p->done) < n || atomic_load(&p->active) != 0) {
    }
    atomic_store(&p->next, CLOSED);
    atomic_store(&p->busy, 0);
}
