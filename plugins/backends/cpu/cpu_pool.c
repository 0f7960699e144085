/* The cpu backend's thread pool. A step of a small model is ~50 nodes of a few microseconds
 * each, so handing a node to the workers must cost far less than a microsecond: workers spin on
 * a generation counter for a short while after each job (the next node usually arrives within
 * that time) and only then sleep on a condition variable. The caller takes tasks too, so a pool
 * of N threads starts N-1 workers, and a pool of one starts none and runs everything inline.
 * Tasks are claimed one at a time from a shared counter, which balances uneven tasks. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "cpu.h"

/* How long an idle worker spins before sleeping. Long enough to bridge the gap between two
 * nodes of a step, short enough not to burn a core between steps. */
#define CPU_SPIN_NS 200000L
#define CPU_LINE 64

typedef struct cpu_worker {
    cpu_pool *pool;
    uint32_t index;
    pthread_t thread;
} cpu_worker;

struct cpu_pool {
    /* Written by the caller before it bumps `generation` (release), read by workers after
     * they observe the bump (acquire). */
    cpu_task_fn fn;
    void *arg;
    uint32_t n_tasks;
    uint32_t n_threads;
    cpu_worker *workers; /* (n_threads - 1) */
    uint32_t started;    /* workers actually running */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Each hot counter on its own cache line: workers hammer `next` while others poll
     * `generation`. */
    _Alignas(CPU_LINE) _Atomic uint32_t generation;
    _Alignas(CPU_LINE) _Atomic uint32_t next;
    _Alignas(CPU_LINE) _Atomic uint32_t finished;
    _Alignas(CPU_LINE) _Atomic uint32_t sleepers;
    _Atomic int busy;
    _Atomic int stop;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static long cpu_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void cpu_pool_work(cpu_pool *pool, uint32_t worker) {
    cpu_task_fn fn = pool->fn;
    void *arg = pool->arg;
    uint32_t n = pool->n_tasks;
    for (;;) {
        uint32_t t = atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed);
        if (t >= n) break;
        fn(arg, t, worker);
    }
}

/* Waits until generation differs from seen; returns the new generation. */
static uint32_t cpu_pool_wait(cpu_pool *pool, uint32_t seen) {
    uint32_t g;
    long start = 0;
    for (uint32_t i = 0;; i++) {
        g = atomic_load_explicit(&pool->generation, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
        if ((i & 255u) == 255u) {
            long now = cpu_now_ns();
            if (start == 0)
                start = now;
            else if (now - start > CPU_SPIN_NS)
                break;
        }
    }
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add(&pool->sleepers, 1); /* seq_cst: pairs with the caller's bump */
    while ((g = atomic_load(&pool->generation)) == seen) pthread_cond_wait(&pool->cv, &pool->mu);
    atomic_fetch_sub(&pool->sleepers, 1);
    pthread_mutex_unlock(&pool->mu);
    return g;
}

static void *cpu_worker_main(void *p) {
    cpu_worker *w = p;
    cpu_pool *pool = w->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = cpu_pool_wait(pool, seen);
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) break;
        cpu_pool_work(pool, w->index);
        atomic_fetch_add_explicit(&pool->finished, 1, memory_order_release);
    }
    return NULL;
}

/* Publishes a new generation and wakes sleepers. Used for jobs and for stop. */
static void cpu_pool_bump(cpu_pool *pool) {
    atomic_fetch_add(&pool->generation, 1); /* seq_cst, see cpu_pool_wait */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
}

weft_status cpu_pool_create(uint32_t n_threads, cpu_pool **out, weft_error *err) {
    *out = NULL;
    if (n_threads == 0 || n_threads > 4096)
        return cpu_error(err, WEFT_ERR_INVALID, "option threads: expected 1..4096 threads, got %u",
                         n_threads);
    cpu_pool *pool = aligned_alloc(CPU_LINE, (sizeof(*pool) + CPU_LINE - 1) / CPU_LINE * CPU_LINE);
    if (!pool) return cpu_error(err, WEFT_ERR_NOMEM, "thread pool: out of memory");
    memset(pool, 0, sizeof(*pool));
    pool->n_threads = n_threads;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->next, 0);
    atomic_init(&pool->finished, 0);
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->busy, 0);
    atomic_init(&pool->stop, 0);
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    if (n_threads > 1) {
        pool->workers = calloc(n_threads - 1, sizeof(*pool->workers));
        if (!pool->workers) {
            cpu_pool_destroy(pool);
            return cpu_error(err, WEFT_ERR_NOMEM, "thread pool: out of memory");
        }
        for (uint32_t i = 0; i + 1 < n_threads; i++) {
            cpu_worker *w = &pool->workers[i];
            w->pool = pool;
            w->index = i + 1;
            int rc = pthread_create(&w->thread, NULL, cpu_worker_main, w);
            if (rc != 0) {
                cpu_pool_destroy(pool);
                return cpu_error(err, rc == EAGAIN ? WEFT_ERR_NOMEM : WEFT_ERR_INTERNAL,
                                 "thread pool: starting worker %u of %u failed (error %d)", i + 1,
                                 n_threads - 1, rc);
            }
            pool->started++;
        }
    }
    *out = pool;
    return WEFT_OK;
}

void cpu_pool_destroy(cpu_pool *pool) {
    if (!pool) return;
    if (pool->started > 0) {
        atomic_store(&pool->stop, 1);
        cpu_pool_bump(pool);
        for (uint32_t i = 0; i < pool->started; i++) pthread_join(pool->workers[i].thread, NULL);
    }
    free(pool->workers);
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}

uint32_t cpu_pool_threads(const cpu_pool *pool) {
    return pool ? pool->n_threads : 1;
}

void cpu_pool_run(cpu_pool *pool, cpu_task_fn fn, void *arg, uint32_t n_tasks) {
    if (n_tasks == 0) return;
    int expected = 0;
    if (!pool || pool->started == 0 || n_tasks == 1 ||
        !atomic_compare_exchange_strong(&pool->busy, &expected, 1)) {
        for (uint32_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->n_tasks = n_tasks;
    atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->finished, 0, memory_order_relaxed);
    cpu_pool_bump(pool);
    cpu_pool_work(pool, 0);
    /* Every worker must have left this job before the next one rewrites fn/arg/next. */
    for (uint32_t i = 0; atomic_load_explicit(&pool->finished, memory_order_acquire) < pool->started;
         i++) {
        cpu_relax();
        if ((i & 1023u) == 1023u) sched_yield(); /* a worker may be descheduled */
    }
    atomic_store_explicit(&pool->busy, 0, memory_order_release);
}
