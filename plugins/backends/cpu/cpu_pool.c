/* The cpu backend's thread pool. A step of a small model is ~50 nodes of a few microseconds
 * each, so handing a node to the workers must cost far less than a microsecond: workers spin on
 * the job ticket for a short while after each job (the next node usually arrives within that
 * time) and only then sleep on a condition variable. The caller takes tasks too, so a pool of N
 * threads starts N-1 workers, and a pool of one starts none and runs everything inline.
 *
 * Jobs are published through one 64-bit ticket, (job generation << 32) | next task index, and
 * tasks are claimed with a compare-and-swap on it. A claim succeeds only while its job is still
 * current, so a worker that wakes late can never run a task of a finished job with another
 * job's function, and the caller waits for the job's tasks to be done, not for every worker to
 * turn up: a descheduled worker costs nothing but its share of the work. */
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
    uint32_t n_threads;
    cpu_worker *workers; /* (n_threads - 1) */
    uint32_t started;    /* workers actually running */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* The job: written by the caller before it publishes a new ticket (release), read by a
     * worker after it loads the ticket (acquire); atomics so a late reader never races. */
    _Atomic(cpu_task_fn) fn;
    _Atomic(void *) arg;
    _Atomic uint32_t n_tasks;
    /* Each hot counter on its own cache line. */
    _Alignas(CPU_LINE) _Atomic uint64_t ticket;
    _Alignas(CPU_LINE) _Atomic uint32_t done;
    _Alignas(CPU_LINE) _Atomic uint32_t sleepers;
    _Atomic int busy;
    _Atomic int stop;
};

#define CPU_GEN(t) ((uint32_t)((t) >> 32))

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

/* Claims and runs tasks of job generation gen until none are left or the job changed. */
static void cpu_pool_work(cpu_pool *pool, uint32_t gen, uint32_t worker) {
    for (;;) {
        uint64_t t = atomic_load_explicit(&pool->ticket, memory_order_acquire);
        if (CPU_GEN(t) != gen) return;
        cpu_task_fn fn = atomic_load_explicit(&pool->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&pool->arg, memory_order_relaxed);
        uint32_t n = atomic_load_explicit(&pool->n_tasks, memory_order_relaxed);
        uint32_t index = (uint32_t)t;
        if (index >= n) return;
        /* Success proves the job was still current (unfinished) when fn/arg/n were read. */
        if (!atomic_compare_exchange_weak_explicit(&pool->ticket, &t, t + 1, memory_order_acquire,
                                                   memory_order_relaxed))
            continue;
        fn(arg, index, worker);
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
    }
}

/* Waits until the ticket's generation differs from seen; returns the new generation. */
static uint32_t cpu_pool_wait(cpu_pool *pool, uint32_t seen) {
    uint32_t g;
    long start = 0;
    for (uint32_t i = 0;; i++) {
        g = CPU_GEN(atomic_load_explicit(&pool->ticket, memory_order_acquire));
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
    atomic_fetch_add(&pool->sleepers, 1); /* seq_cst: pairs with the caller's publish */
    while ((g = CPU_GEN(atomic_load(&pool->ticket))) == seen)
        pthread_cond_wait(&pool->cv, &pool->mu);
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
        cpu_pool_work(pool, seen, w->index);
    }
    return NULL;
}

/* Publishes a new job generation with task index 0 and wakes sleepers; returns it. */
static uint32_t cpu_pool_publish(cpu_pool *pool) {
    uint32_t gen = CPU_GEN(atomic_load_explicit(&pool->ticket, memory_order_relaxed)) + 1;
    atomic_store(&pool->ticket, (uint64_t)gen << 32); /* seq_cst, see cpu_pool_wait */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    return gen;
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
    atomic_init(&pool->fn, NULL);
    atomic_init(&pool->arg, NULL);
    atomic_init(&pool->n_tasks, 0);
    atomic_init(&pool->ticket, 0);
    atomic_init(&pool->done, 0);
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
        cpu_pool_publish(pool);
        for (uint32_t i = 0; i < pool->started; i++)
            pthread_join(pool->workers[i].thread, NULL);
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
        for (uint32_t t = 0; t < n_tasks; t++)
            fn(arg, t, 0);
        return;
    }
    atomic_store_explicit(&pool->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&pool->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    uint32_t gen = cpu_pool_publish(pool);
    cpu_pool_work(pool, gen, 0);
    /* Wait for the tasks other threads claimed; workers that never showed up are not waited
     * for. */
    for (uint32_t i = 0; atomic_load_explicit(&pool->done, memory_order_acquire) < n_tasks; i++) {
        cpu_relax();
        if ((i & 1023u) == 1023u) sched_yield(); /* a claimer may be descheduled */
    }
    atomic_store_explicit(&pool->busy, 0, memory_order_release);
}
