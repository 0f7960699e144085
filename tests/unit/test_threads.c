/* engine/threads: the host's fork-join pool (WEFT_SERVICE_THREADS, `--threads N`). Every index of
 * every job is run exactly once with the job's own n, over pools of 1 to 4 threads and job sizes
 * from 1 to 1,000; thousands of back-to-back jobs of different sizes and functions (the window
 * where a worker that woke late for one job meets the next); jobs after the workers went to
 * sleep on the condition variable; a parallel_for from inside an item (run inline); two outside
 * threads sharing one pool; and the edge cases (no pool, n = 0, one thread). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/threads.h"

#define MAX_N 1000

typedef struct job {
    atomic_uint hits[MAX_N];
    atomic_uint bad_n; /* calls that saw another job's n */
    uint32_t n;
    uint32_t tag; /* which function ran: each job records its own */
    atomic_uint tagged;
} job;

static void count_item(void *arg, uint32_t i, uint32_t n) {
    job *j = arg;
    if (n != j->n || i >= n) {
        atomic_fetch_add(&j->bad_n, 1);
        return;
    }
    atomic_fetch_add(&j->hits[i], 1);
}

static void count_item_tagged(void *arg, uint32_t i, uint32_t n) {
    job *j = arg;
    atomic_fetch_add(&j->tagged, 1);
    count_item(arg, i, n);
}

static void reset(job *j, uint32_t n, uint32_t tag) {
    for (uint32_t i = 0; i < MAX_N; i++)
        atomic_store(&j->hits[i], 0);
    atomic_store(&j->bad_n, 0);
    atomic_store(&j->tagged, 0);
    j->n = n;
    j->tag = tag;
}

/* Every index once, none beyond n, no call with another job's n. */
static void check(job *j, const char *what, uint32_t threads) {
    if (atomic_load(&j->bad_n)) fail_msg("%s, %u threads: a call saw n != %u", what, threads, j->n);
    for (uint32_t i = 0; i < MAX_N; i++) {
        unsigned want = i < j->n ? 1 : 0, got = atomic_load(&j->hits[i]);
        if (got != want)
            fail_msg("%s, %u threads, n %u: index %u ran %u time(s)", what, threads, j->n, i, got);
    }
    if (j->tag && atomic_load(&j->tagged) != j->n)
        fail_msg("%s: the tagged function ran %u times for n %u", what, atomic_load(&j->tagged),
                 j->n);
}

static void test_every_index_once(void **state) {
    (void)state;
    static job j;
    static const uint32_t sizes[] = {1, 2, 3, 7, 31, 64, 100, 257, 999, 1000};
    for (uint32_t t = 1; t <= 4; t++) {
        weft_pool *p = weft_pool_new(t);
        assert_non_null(p);
        assert_int_equal(weft_pool_size(p), t);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            reset(&j, sizes[k], 0);
            weft_pool_parallel_for(p, count_item, &j, sizes[k]);
            check(&j, "one job", t);
        }
        weft_pool_free(p);
    }
}

/* Back-to-back jobs alternating two functions and two argument blocks: a worker that woke late
 * for one job must neither run an item twice nor mix one job's function, argument and n. */
static void test_back_to_back(void **state) {
    (void)state;
    static job a, b;
    weft_pool *p = weft_pool_new(4);
    assert_non_null(p);
    uint32_t seed = 12345;
    for (int round = 0; round < 4000; round++) {
        seed = seed * 1664525u + 1013904223u;
        uint32_t n = 1 + (seed >> 8) % 64;
        job *j = round & 1 ? &b : &a;
        reset(j, n, (uint32_t)(round & 1));
        weft_pool_parallel_for(p, round & 1 ? count_item_tagged : count_item, j, n);
        check(j, "back to back", 4);
    }
    weft_pool_free(p);
}

/* After the workers' spin gives up they sleep on the condition variable; a job must wake them
 * (and still complete if they are slow to wake). */
static void test_after_sleep(void **state) {
    (void)state;
    static job j;
    weft_pool *p = weft_pool_new(3);
    assert_non_null(p);
    for (int k = 0; k < 5; k++) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        reset(&j, 500, 0);
        weft_pool_parallel_for(p, count_item, &j, 500);
        check(&j, "after sleep", 3);
    }
    weft_pool_free(p);
}

typedef struct nested {
    weft_pool *p;
    job inner[8];
    atomic_uint outer_hits[8];
} nested;

static void nested_item(void *arg, uint32_t i, uint32_t n) {
    nested *s = arg;
    (void)n;
    atomic_fetch_add(&s->outer_hits[i], 1);
    /* the pool is busy with the outer job: this one runs inline on this thread */
    weft_pool_parallel_for(s->p, count_item, &s->inner[i], s->inner[i].n);
}

static void test_nested(void **state) {
    (void)state;
    static nested s;
    s.p = weft_pool_new(4);
    assert_non_null(s.p);
    for (uint32_t i = 0; i < 8; i++) {
        reset(&s.inner[i], 10 + 50 * i, 0);
        atomic_store(&s.outer_hits[i], 0);
    }
    weft_pool_parallel_for(s.p, nested_item, &s, 8);
    for (uint32_t i = 0; i < 8; i++) {
        assert_int_equal(atomic_load(&s.outer_hits[i]), 1);
        check(&s.inner[i], "nested", 4);
    }
    weft_pool_free(s.p);
}

typedef struct caller {
    weft_pool *p;
    job j;
    int rounds;
    int failed;
} caller;

static void *caller_main(void *arg) {
    caller *c = arg;
    for (int r = 0; r < c->rounds && !c->failed; r++) {
        uint32_t n = 1 + (uint32_t)(r * 37 % 200);
        reset(&c->j, n, 0);
        weft_pool_parallel_for(c->p, count_item, &c->j, n);
        if (atomic_load(&c->j.bad_n)) c->failed = 1;
        for (uint32_t i = 0; i < MAX_N; i++)
            if (atomic_load(&c->j.hits[i]) != (i < n ? 1u : 0u)) c->failed = 1;
    }
    return NULL;
}

/* Two outside threads on one pool: one gets the workers, the other runs inline; both jobs
 * complete exactly. */
static void test_two_callers(void **state) {
    (void)state;
    static caller c[2];
    weft_pool *p = weft_pool_new(3);
    assert_non_null(p);
    pthread_t t[2];
    for (int k = 0; k < 2; k++) {
        c[k].p = p;
        c[k].rounds = 1500;
        c[k].failed = 0;
        assert_int_equal(pthread_create(&t[k], NULL, caller_main, &c[k]), 0);
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(t[k], NULL);
        if (c[k].failed) fail_msg("caller %d: a job ran an index other than once", k);
    }
    weft_pool_free(p);
}

static void test_edges(void **state) {
    (void)state;
    static job j;
    reset(&j, 17, 0);
    weft_pool_parallel_for(NULL, count_item, &j, 17); /* no pool: inline */
    check(&j, "no pool", 1);
    assert_int_equal(weft_pool_size(NULL), 1);
    weft_pool *p = weft_pool_new(0); /* 0 means 1 */
    assert_non_null(p);
    assert_int_equal(weft_pool_size(p), 1);
    reset(&j, 0, 0);
    weft_pool_parallel_for(p, count_item, &j, 0);
    check(&j, "n = 0", 1);
    weft_pool_parallel_for(p, NULL, &j, 5); /* no function: nothing */
    weft_pool_free(p);
    weft_pool_free(NULL);
    assert_true(weft_cpu_count() >= 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_index_once), cmocka_unit_test(test_back_to_back),
        cmocka_unit_test(test_after_sleep),      cmocka_unit_test(test_nested),
        cmocka_unit_test(test_two_callers),      cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
