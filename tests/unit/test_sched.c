/* The scheduling techniques (sched.continuous, sched.chunked-prefill, sched.preempt) through
 * the real engine on stories260K (cpu backend, llama plugin) and, for the planning rules, the
 * built bundles called directly:
 *  - batched equals serial: 24 requests of mixed prompt lengths, limits and stop rules,
 *    submitted in two waves while others decode, give each request exactly the greedy tokens
 *    and finish reason it gets alone on the serial baseline, with far fewer steps;
 *  - chunked prefill: while a 300-token prompt is fed, every step still carries one token of
 *    each running stream and at most chunk_tokens prompt tokens (sched.continuous feeds it in
 *    one step);
 *  - preemption: with the kv pool 4x oversubscribed (engine option kv_tokens) every request
 *    completes with its serial output, and requests really were preempted and recomputed;
 *    a request larger than the pool ends with an error instead of hanging;
 *  - composition: each scheduler with kv.paged, and with kv.paged + kv.prefix-cache, batched
 *    equals serial with a full pool and with the 4x oversubscribed one;
 *  - planning rules on hand-made request tables (decodes first, budgets, conservative and
 *    preemptive admission, victim choice), and option validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "files/llama2c.h"
#include "plugin/host.h"
#include "plugin/loader.h"
#include "util/error.h"

#include "stories_fixture.h"

#define N_REQ 24
#define MAX_IDS 512

static char model_dir[64];
static char manifest_path[128];

static int group_setup(void **state) {
    (void)state;
    if (stories_convert(model_dir, "weft-sched")) return -1;
    snprintf(manifest_path, sizeof(manifest_path), "%s/candidate.yaml", model_dir);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    stories_remove(model_dir, "candidate.yaml");
    return 0;
}

/* Opens stories260K with `techniques` (YAML flow list body, "" = none: the serial baseline). */
static weft_status try_open(const char *techniques, uint32_t max_requests,
                            uint32_t max_batch_tokens, uint64_t kv_tokens, weft_engine **out,
                            weft_error *err) {
    assert_int_equal(
        stories_manifest(manifest_path, "sched-test", model_dir, "cpu", techniques), 0);
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.manifest_path = manifest_path;
    o.threads = 1;
    o.max_requests = max_requests;
    o.max_batch_tokens = max_batch_tokens;
    o.kv_tokens = kv_tokens;
    weft_error_clear(err);
    return weft_engine_open(&o, out, err);
}

static weft_engine *open_cand(const char *techniques, uint32_t max_requests,
                              uint32_t max_batch_tokens, uint64_t kv_tokens) {
    weft_engine *e = NULL;
    weft_error err;
    if (try_open(techniques, max_requests, max_batch_tokens, kv_tokens, &e, &err) != WEFT_OK)
        fail_msg("open [%s]: %s: %s", techniques, err.source, err.message);
    return e;
}

/* ---- workload ---------------------------------------------------------------------------- */
typedef struct job {
    int32_t prompt[400];
    uint32_t n_prompt;
    uint32_t max_tokens;
    int ignore_eos;
} job;

typedef struct result {
    int32_t ids[MAX_IDS];
    uint32_t n_ids;
    uint32_t finish;
    uint32_t finals;
    uint64_t step_of_token[MAX_IDS]; /* the engine step counter when each token arrived */
    const uint64_t *step;
    char message[256];
} result;

static void on_event(void *user, const weft_token_event *ev) {
    result *r = user;
    if (ev->token >= 0) {
        assert_int_equal(r->finals, 0);
        assert_true(r->n_ids < MAX_IDS);
        r->step_of_token[r->n_ids] = r->step ? *r->step : 0;
        r->ids[r->n_ids++] = ev->token;
    } else {
        r->finish = ev->finish;
        r->finals++;
        if (ev->message) snprintf(r->message, sizeof(r->message), "%s", ev->message);
    }
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Mixed prompts: story openings (EOS allowed, so some leave early), random-id prompts of up to
 * 150 tokens with EOS ignored, and a bare BOS with long outputs. */
static void make_jobs(weft_engine *e, job *jobs, uint32_t n) {
    static const char *const texts[] = {
        "Once upon a time, there was a little girl named Lily.",
        "The dog ran to the park",
        "Tom and Sue went to the beach. They",
        "One day, a big bird",
        "The sun was hot and the grass was green.",
        "Mom said",
        "There was a boy who loved to play with his red ball. One day",
        "The cat sat"};
    uint32_t seed = 12345;
    const weft_tokenizer *tok = weft_engine_tokenizer(e);
    assert_non_null(tok);
    for (uint32_t i = 0; i < n; i++) {
        job *j = &jobs[i];
        memset(j, 0, sizeof(*j));
        if (i % 3 == 0) {
            const char *t = texts[(i / 3) % 8];
            int32_t *ids = NULL;
            size_t m = 0;
            weft_error err;
            weft_error_clear(&err);
            if (weft_tokenizer_encode(tok, t, strlen(t), 1, 1, &ids, &m, &err) != WEFT_OK)
                fail_msg("encode: %s", err.message);
            assert_true(m > 0 && m < 400);
            memcpy(j->prompt, ids, m * sizeof(int32_t));
            j->n_prompt = (uint32_t)m;
            free(ids);
            j->max_tokens = 40 + i;
        } else if (i % 3 == 1) {
            j->prompt[0] = 1;
            j->n_prompt = 5 + (i * 37) % 150;
            for (uint32_t k = 1; k < j->n_prompt; k++)
                j->prompt[k] = 3 + (int32_t)(lcg(&seed) % 509);
            j->max_tokens = 24;
            j->ignore_eos = 1;
        } else {
            j->prompt[0] = 1;
            j->n_prompt = 1;
            j->max_tokens = 60 + i;
            j->ignore_eos = 1;
        }
    }
}

static void submit_job(weft_engine *e, const job *j, result *r, const uint64_t *step) {
    memset(r, 0, sizeof(*r));
    r->step = step;
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = j->max_tokens;
    rp.ignore_eos = j->ignore_eos;
    rp.detokenize = 0;
    rp.callback = on_event;
    rp.user = r;
    weft_error err;
    weft_error_clear(&err);
    if (weft_request_submit(e, j->prompt, j->n_prompt, &rp, NULL, &err) != WEFT_OK)
        fail_msg("submit: %s", err.message);
}

static uint64_t g_step; /* steps taken by step_once, for result.step_of_token */

static void step_once(weft_engine *e) {
    weft_error err;
    weft_error_clear(&err);
    g_step++;
    weft_status s = weft_engine_step(e, &err);
    if (s < 0) fail_msg("step: %s: %s", err.source, err.message);
}

static void drain(weft_engine *e) {
    uint64_t guard = 0;
    while (weft_engine_active(e)) {
        step_once(e);
        assert_true(++guard < 100000);
    }
}

/* The serial baseline's output of every job, one request at a time. */
static job g_jobs[N_REQ];
static result g_ref[N_REQ];
static int g_ref_ready;

static void reference(void) {
    if (g_ref_ready) return;
    weft_engine *e = open_cand("", 1, 0, 0);
    make_jobs(e, g_jobs, N_REQ);
    for (uint32_t i = 0; i < N_REQ; i++) {
        submit_job(e, &g_jobs[i], &g_ref[i], NULL);
        drain(e);
        assert_int_equal(g_ref[i].finals, 1);
        assert_true(g_ref[i].finish == WEFT_FINISH_STOP || g_ref[i].finish == WEFT_FINISH_LENGTH);
    }
    weft_engine_close(e);
    g_ref_ready = 1;
}

static void assert_same_as_reference(const result *got, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        if (got[i].finals != 1 || got[i].finish != g_ref[i].finish ||
            got[i].n_ids != g_ref[i].n_ids ||
            memcmp(got[i].ids, g_ref[i].ids, g_ref[i].n_ids * sizeof(int32_t)))
            fail_msg("request %u: finish %s (%s) after %u tokens, serial: %s after %u tokens", i,
                     weft_finish_name(got[i].finish), got[i].message, got[i].n_ids,
                     weft_finish_name(g_ref[i].finish), g_ref[i].n_ids);
    }
}

/* ---- batched equals serial ---------------------------------------------------------------- */
static void run_waves(const char *techniques, uint32_t max_requests, uint64_t kv_tokens,
                      result *got, weft_engine_stats *st) {
    reference();
    weft_engine *e = open_cand(techniques, max_requests, 0, kv_tokens);
    /* Half now; the rest joins while the first wave decodes. */
    for (uint32_t i = 0; i < N_REQ / 2; i++)
        submit_job(e, &g_jobs[i], &got[i], &g_step);
    for (int k = 0; k < 5; k++)
        step_once(e);
    for (uint32_t i = N_REQ / 2; i < N_REQ; i++)
        submit_job(e, &g_jobs[i], &got[i], &g_step);
    drain(e);
    weft_engine_get_stats(e, st);
    weft_engine_close(e);
    if (getenv("SCHED_DEBUG"))
        fprintf(stderr, "[%s] slots %u pool %llu: steps %llu preemptions %llu recomputed %llu\n",
                techniques, max_requests, (unsigned long long)kv_tokens,
                (unsigned long long)st->steps, (unsigned long long)st->preemptions,
                (unsigned long long)st->recomputed_tokens);
    assert_same_as_reference(got, N_REQ);
}

static uint64_t total_generated(void) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < N_REQ; i++)
        n += g_ref[i].n_ids;
    return n;
}

static void test_continuous_equals_serial(void **state) {
    (void)state;
    static result got[N_REQ];
    weft_engine_stats st;
    run_waves("sched.continuous", 32, 0, got, &st);
    /* Batched: far fewer steps than tokens (serial needs one step per generated token). */
    assert_true(st.steps * 4 < total_generated());
    assert_int_equal(st.preemptions, 0);
    /* Fewer kv slots than requests: the rest wait and join as slots free up. */
    run_waves("sched.continuous", 5, 0, got, &st);
    assert_true(st.steps * 2 < total_generated());
}

static void test_chunked_prefill_equals_serial(void **state) {
    (void)state;
    static result got[N_REQ];
    weft_engine_stats st;
    run_waves("sched.chunked-prefill", 32, 0, got, &st);
    assert_true(st.steps * 4 < total_generated());
    run_waves("{name: sched.chunked-prefill, options: {chunk_tokens: 7, max_step_tokens: 20}}", 32,
              0, got, &st);
    assert_int_equal(st.preemptions, 0);
}

static void test_preempt_equals_serial(void **state) {
    (void)state;
    static result got[N_REQ];
    weft_engine_stats st;
    /* A pool that holds everything: preemption never triggers. */
    run_waves("sched.preempt", 32, 0, got, &st);
    assert_int_equal(st.preemptions, 0);
    assert_true(st.steps * 4 < total_generated());
}

/* ---- oversubscribed kv -------------------------------------------------------------------- */
static uint64_t total_need(void) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < N_REQ; i++)
        n += g_jobs[i].n_prompt + g_ref[i].n_ids;
    return n;
}

static void test_preempt_oversubscribed(void **state) {
    (void)state;
    reference();
    static result got[N_REQ];
    weft_engine_stats st;
    uint64_t pool = total_need() / 4; /* every request at once needs 4x the pool */
    uint32_t biggest = 0;
    for (uint32_t i = 0; i < N_REQ; i++)
        if (g_jobs[i].n_prompt + g_ref[i].n_ids > biggest)
            biggest = g_jobs[i].n_prompt + g_ref[i].n_ids;
    assert_true(biggest < pool);
    run_waves("sched.preempt", 32, pool, got, &st); /* lookahead 64: few preemptions */
    /* Admitting on the prompts alone (no lookahead) preempts often. */
    run_waves("{name: sched.preempt, options: {lookahead_tokens: 0}}", 32, pool, got, &st);
    assert_true(st.preemptions > 10);
    assert_true(st.recomputed_tokens > 0);
    /* Without the chunk cap: whole prompts and whole recomputes. */
    run_waves("{name: sched.preempt, options: {chunk_tokens: 0, lookahead_tokens: 0}}", 32, pool,
              got, &st);
    assert_true(st.preemptions > 10);
    /* The schedulers that cannot preempt admit conservatively: same outputs, no preemption. */
    run_waves("sched.continuous", 32, pool, got, &st);
    assert_int_equal(st.preemptions, 0);
    run_waves("sched.chunked-prefill", 32, pool, got, &st);
    assert_int_equal(st.preemptions, 0);
    /* And the serial default under the same pool. */
    run_waves("", 32, pool, got, &st);
    assert_int_equal(st.preemptions, 0);
}

/* With kv.paged (and kv.prefix-cache on top): the schedulers compose with the paged pool, whose
 * size the same kv_tokens budget sets (pages of 8 tokens), and with prefix reuse, which also
 * serves a preempted request's recompute from its own published pages. */
static void test_compose_with_paged_kv(void **state) {
    (void)state;
    reference();
    static result got[N_REQ];
    weft_engine_stats st;
    static const char *const kv[] = {"{name: kv.paged, options: {page_size: 8}}",
                                     "kv.paged, {name: kv.prefix-cache, options: {page_size: 8}}"};
    static const char *const sched[] = {
        "sched.continuous", "sched.chunked-prefill",
        "{name: sched.preempt, options: {chunk_tokens: 32, lookahead_tokens: 0}}"};
    char cand[256];
    uint64_t pool = total_need() / 4;
    for (size_t k = 0; k < 2; k++)
        for (size_t i = 0; i < 3; i++) {
            snprintf(cand, sizeof(cand), "%s, %s", sched[i], kv[k]);
            run_waves(cand, 32, 0, got, &st);
            assert_true(st.steps * 4 < total_generated());
            assert_int_equal(st.preemptions, 0);
            run_waves(cand, 32, pool, got, &st);
            if (i == 2)
                assert_true(st.preemptions > 0);
            else
                assert_int_equal(st.preemptions, 0);
        }
}

static void test_request_larger_than_pool(void **state) {
    (void)state;
    reference();
    static const char *const cands[] = {"sched.preempt", "sched.continuous", ""};
    for (size_t c = 0; c < sizeof(cands) / sizeof(cands[0]); c++) {
        weft_engine *e = open_cand(cands[c], 4, 0, 40);
        static result r[3];
        job big = g_jobs[2]; /* BOS, 62 tokens out */
        job small = g_jobs[0];
        small.max_tokens = 10;
        submit_job(e, &big, &r[0], NULL);
        submit_job(e, &small, &r[1], NULL);
        drain(e);
        assert_int_equal(r[0].finals, 1);
        assert_int_equal(r[0].finish, WEFT_FINISH_ERROR);
        assert_non_null(strstr(r[0].message, "kv"));
        assert_int_equal(r[1].finals, 1);
        assert_int_equal(r[1].n_ids, 10 < g_ref[0].n_ids ? 10 : g_ref[0].n_ids);
        assert_memory_equal(r[1].ids, g_ref[0].ids, r[1].n_ids * sizeof(int32_t));
        weft_engine_close(e);
    }
}

/* ---- chunked prefill shares steps with decodes -------------------------------------------- */
static void long_prompt_arrival(const char *techniques, uint32_t chunk) {
    weft_engine *e = open_cand(techniques, 8, 0, 0);
    static result streams[4], longr;
    job s = {.prompt = {1}, .n_prompt = 1, .max_tokens = 120, .ignore_eos = 1};
    for (int i = 0; i < 4; i++)
        submit_job(e, &s, &streams[i], &g_step);
    for (int k = 0; k < 3; k++)
        step_once(e);
    static job lj;
    memset(&lj, 0, sizeof(lj));
    uint32_t seed = 99;
    lj.prompt[0] = 1;
    lj.n_prompt = 300;
    for (uint32_t k = 1; k < lj.n_prompt; k++)
        lj.prompt[k] = 3 + (int32_t)(lcg(&seed) % 509);
    lj.max_tokens = 4;
    lj.ignore_eos = 1;
    submit_job(e, &lj, &longr, &g_step);
    uint32_t steps = 0;
    while (longr.n_ids == 0) {
        uint32_t before[4];
        for (int i = 0; i < 4; i++)
            before[i] = streams[i].n_ids;
        weft_engine_stats a, b;
        weft_engine_get_stats(e, &a);
        step_once(e);
        weft_engine_get_stats(e, &b);
        steps++;
        /* Every running stream got its next token in this step, and the prompt advanced by at
         * most one chunk. */
        for (int i = 0; i < 4; i++)
            assert_int_equal(streams[i].n_ids, before[i] + 1);
        assert_true(b.prefill_tokens - a.prefill_tokens <= chunk);
        assert_true(b.prefill_tokens > a.prefill_tokens);
        assert_true(steps < 1000);
    }
    assert_int_equal(steps, (lj.n_prompt + chunk - 1) / chunk);
    drain(e);
    weft_engine_close(e);
    /* Same tokens as alone. */
    static result solo;
    e = open_cand("", 1, 0, 0);
    submit_job(e, &lj, &solo, NULL);
    drain(e);
    weft_engine_close(e);
    assert_int_equal(longr.n_ids, solo.n_ids);
    assert_memory_equal(longr.ids, solo.ids, solo.n_ids * sizeof(int32_t));
}

static void test_chunked_prefill_shares_steps(void **state) {
    (void)state;
    long_prompt_arrival("{name: sched.chunked-prefill, options: {chunk_tokens: 16}}", 16);
    long_prompt_arrival("{name: sched.preempt, options: {chunk_tokens: 50}}", 50);
    /* 2 + 3 per decode, with the 4 streams decoding: 14 per step. */
    long_prompt_arrival("{name: sched.chunked-prefill, options: {chunk_tokens: 2, "
                        "chunk_per_decode: 3}}",
                        14);
    /* Without a cap the whole prompt goes in one step (with the decodes). */
    long_prompt_arrival("sched.continuous", 300);
}

/* ---- planning rules, on the bundles directly ---------------------------------------------- */
typedef struct bundle {
    weft_loaded_plugin p;
    weft_host *host;
    const weft_scheduler_vtable *vt;
} bundle;

static weft_status bundle_open(bundle *b, const char *name, const weft_option *opts,
                               uint32_t n_opts, weft_error *err) {
    memset(b, 0, sizeof(*b));
    char lib[1024], libname[128];
    snprintf(libname, sizeof(libname), "libweft-%s.so", name);
    for (char *c = libname; *c; c++)
        if (*c == '.' && strcmp(c, ".so")) *c = '-';
    snprintf(lib, sizeof(lib), "%s/%s/%s", WEFT_BUILD_PLUGIN_DIR, name, libname);
    weft_plugin_expect ex = {name, "0.1.0", WEFT_KIND_TECHNIQUE, WEFT_SLOT_SCHEDULER, 1, 1, NULL};
    weft_status s = weft_plugin_open(lib, &ex, &b->p, err);
    if (s != WEFT_OK) return s;
    b->host = weft_host_new();
    weft_options o = {n_opts, opts};
    s = weft_plugin_instantiate(&b->p, weft_host_services_of(b->host), &o, err);
    if (s != WEFT_OK) {
        weft_plugin_close(&b->p);
        weft_host_free(b->host);
        return s;
    }
    b->vt = b->p.desc->scheduler;
    return WEFT_OK;
}

static void bundle_close(bundle *b) {
    weft_plugin_close(&b->p);
    weft_host_free(b->host);
}

static weft_option opt_int(const char *key, int64_t v) {
    weft_option o;
    memset(&o, 0, sizeof(o));
    o.key = key;
    o.type = WEFT_OPTION_INT;
    o.i = v;
    return o;
}

/* A request: id, arrival, cached, prompt, generated, max_total, priority. */
static weft_sched_request rq(uint64_t id, uint64_t arrival, uint32_t computed, uint32_t prompt,
                             uint32_t generated, uint32_t max_total, uint32_t priority) {
    weft_sched_request r;
    memset(&r, 0, sizeof(r));
    r.request_id = id;
    r.arrival_ns = arrival;
    r.n_computed = computed;
    r.n_prompt = prompt;
    r.n_generated = generated;
    r.max_total = max_total;
    r.priority = priority;
    r.state = computed == 0 ? 0 : generated ? 2 : 1;
    return r;
}

static weft_sched_limits lim(uint32_t tokens, uint32_t seqs, uint64_t cap, uint64_t used) {
    weft_sched_limits l;
    memset(&l, 0, sizeof(l));
    l.size = sizeof(l);
    l.max_tokens = tokens;
    l.max_seqs = seqs;
    l.kv.size = sizeof(l.kv);
    l.kv.capacity_tokens = cap;
    l.kv.used_tokens = used;
    return l;
}

/* Plans and returns the items as "index:action:n" joined by spaces. */
static const char *plan(bundle *b, const weft_sched_request *r, uint32_t n,
                        const weft_sched_limits *l) {
    static char buf[512];
    weft_sched_item items[16];
    uint32_t n_items = 99;
    weft_error err;
    weft_error_clear(&err);
    assert_true(n <= 16);
    if (b->vt->schedule(b->p.state, r, n, l, items, &n_items, &err) != WEFT_OK)
        fail_msg("schedule: %s", err.message);
    assert_true(n_items <= n);
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < n_items; i++)
        at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%s%u:%u:%u", i ? " " : "",
                               items[i].index, items[i].action, items[i].n_tokens);
    return buf;
}

static void test_plan_rules(void **state) {
    (void)state;
    weft_error err;
    weft_error_clear(&err);
    bundle cont, chunk, chunkd, pre, prel;
    if (bundle_open(&cont, "sched.continuous", NULL, 0, &err) != WEFT_OK ||
        bundle_open(&chunk, "sched.chunked-prefill", (weft_option[]){opt_int("chunk_tokens", 32)},
                    1, &err) != WEFT_OK ||
        bundle_open(&chunkd, "sched.chunked-prefill",
                    (weft_option[]){opt_int("chunk_tokens", 4), opt_int("chunk_per_decode", 10)}, 2,
                    &err) != WEFT_OK ||
        bundle_open(&pre, "sched.preempt",
                    (weft_option[]){opt_int("chunk_tokens", 32), opt_int("lookahead_tokens", 0)}, 2,
                    &err) != WEFT_OK ||
        bundle_open(&prel, "sched.preempt",
                    (weft_option[]){opt_int("chunk_tokens", 32), opt_int("lookahead_tokens", 8)}, 2,
                    &err) != WEFT_OK)
        fail_msg("open: %s", err.message);
    /* Listed out of order on purpose: 0 waiting (50), 1 decoding (arrived 3), 2 prefilling
     * (100 left), 3 decoding (arrived 1), 4 waiting (10), 5 decoding (arrived 2). */
    weft_sched_request r[6] = {rq(10, 10, 0, 50, 0, 100, 0),  rq(11, 3, 19, 10, 10, 100, 0),
                               rq(12, 4, 20, 120, 0, 200, 0), rq(13, 1, 29, 20, 10, 100, 0),
                               rq(14, 11, 0, 10, 0, 20, 0),   rq(15, 2, 5, 5, 0, 100, 0)};
    r[5].n_generated = 1; /* 5 prompt + 1 generated, 5 cached: decoding */
    r[5].n_computed = 5;
    weft_sched_limits l = lim(64, 8, 0, 0);
    /* Decodes oldest first, then the prefill under way; the chunk cap stops admission. */
    assert_string_equal(plan(&chunk, r, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:32");
    /* No cap: the prefill takes the rest of the budget. */
    assert_string_equal(plan(&cont, r, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:61");
    /* A bigger budget: waiters join; without a cap only whole prompts. */
    l = lim(200, 8, 0, 0);
    assert_string_equal(plan(&cont, r, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:100 0:0:50 4:0:10");
    l = lim(160, 8, 0, 0); /* 57 left: request 0 (50) joins, request 4 (10) no longer fits */
    assert_string_equal(plan(&cont, r, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:100 0:0:50");
    l = lim(150, 8, 0, 0); /* 47 left: request 0 waits whole, and request 4 behind it */
    assert_string_equal(plan(&cont, r, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:100");
    assert_string_equal(plan(&chunk, r, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:32");
    /* The cap grows with the decodes in the step: 4 + 10 per decode = 34. */
    weft_sched_limits l64 = lim(64, 8, 0, 0);
    assert_string_equal(plan(&chunkd, r, 6, &l64), "3:0:1 5:0:1 1:0:1 2:0:34");
    /* Without decodes there is no cap: nobody's next token waits on the step. */
    weft_sched_request idle[3] = {r[2], r[0], r[4]};
    assert_string_equal(plan(&chunk, idle, 3, &l), "0:0:100 1:0:50");
    assert_string_equal(plan(&chunkd, idle, 3, &l64), "0:0:64");
    /* Sequence budget. */
    l = lim(200, 2, 0, 0);
    assert_string_equal(plan(&cont, r, 6, &l), "3:0:1 5:0:1");
    /* Conservative admission: holders may still grow by 71 + 95 + 81 + 180 = 427 tokens, and
     * request 0 may reach 100: 527 free tokens are needed, 526 are not enough. */
    l = lim(400, 8, 75 + 526, 75);
    assert_string_equal(plan(&cont, r, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:100");
    l = lim(400, 8, 75 + 527, 75); /* then request 4 (max 20) would need 547 */
    assert_string_equal(plan(&cont, r, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:100 0:0:50");
    /* Preemptive admission (lookahead 0): the holders' uncached tokens (3 decodes, 10 prompt
     * tokens of request 2) and request 0's whole prompt (50) must fit: 63 tokens. */
    weft_sched_request r2[6];
    memcpy(r2, r, sizeof(r));
    r2[2].n_computed = 110;
    l = lim(400, 8, 77, 15); /* 62 free */
    assert_string_equal(plan(&pre, r2, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:10");
    l = lim(400, 8, 78, 15); /* 63 free, watermark 0; the chunk cap leaves 22 for request 0 */
    assert_string_equal(plan(&pre, r2, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:10 0:0:22");
    /* Lookahead 8: 3 x 9 + 18 for the holders, 58 for request 0, watermark 1 (of 118..120). */
    l = lim(400, 8, 118, 15);
    assert_string_equal(plan(&prel, r2, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:10");
    l = lim(400, 8, 120, 15);
    assert_string_equal(plan(&prel, r2, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:10 0:0:22");
    l = lim(400, 8, 200, 15); /* watermark 2 */
    assert_string_equal(plan(&pre, r2, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:10 0:0:22");
    /* A refusal: the youngest holder (12, arrived 4) is preempted, the others run, nobody is
     * admitted. */
    pre.vt->kv_denied(pre.p.state, 13);
    assert_string_equal(plan(&pre, r, 6, &l), "2:1:0 3:0:1 5:0:1 1:0:1");
    /* The refusal was consumed: the next plan admits again. */
    assert_string_equal(plan(&pre, r2, 6, &l), "3:0:1 5:0:1 1:0:1 2:0:10 0:0:22");
    /* Priority protects: with 12 at priority 3, the youngest of priority 0 (11) goes. */
    r2[2].priority = 3;
    pre.vt->kv_denied(pre.p.state, 12);
    pre.vt->kv_denied(pre.p.state, 12);
    assert_string_equal(plan(&pre, r2, 6, &l), "1:1:0 3:0:1 5:0:1 2:0:10");
    /* Two refusals, two victims. */
    pre.vt->kv_denied(pre.p.state, 13);
    pre.vt->kv_denied(pre.p.state, 15);
    assert_string_equal(plan(&pre, r, 6, &l), "2:1:0 1:1:0 3:0:1 5:0:1");
    /* The only holder is never preempted (its own cache is all there is). */
    weft_sched_request one[2] = {rq(20, 1, 39, 30, 10, 100, 0), rq(21, 2, 0, 10, 0, 50, 0)};
    pre.vt->kv_denied(pre.p.state, 20);
    assert_string_equal(plan(&pre, one, 2, &l), "0:0:1");
    /* Schedulers without preemption ignore refusals except for pausing admission. */
    cont.vt->kv_denied(cont.p.state, 20);
    assert_string_equal(plan(&cont, one, 2, &l), "0:0:1");
    l = lim(400, 8, 0, 0);
    assert_string_equal(plan(&cont, one, 2, &l), "0:0:1 1:0:10");
    /* Bad input is refused with a message. */
    weft_sched_item items[4];
    uint32_t n_items = 0;
    l = lim(0, 8, 0, 0);
    assert_int_equal(cont.vt->schedule(cont.p.state, one, 2, &l, items, &n_items, &err),
                     WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "max_tokens 0"));
    l = lim(64, 8, 0, 0);
    one[0].n_computed = 41; /* more than its 40 tokens */
    assert_int_equal(cont.vt->schedule(cont.p.state, one, 2, &l, items, &n_items, &err),
                     WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "request 20"));
    bundle_close(&cont);
    bundle_close(&chunk);
    bundle_close(&chunkd);
    bundle_close(&pre);
    bundle_close(&prel);
}

static void test_options(void **state) {
    (void)state;
    weft_engine *e = NULL;
    weft_error err;
    assert_int_not_equal(
        try_open("{name: sched.chunked-prefill, options: {chunk_tokens: 0}}", 4, 0, 0, &e, &err),
        WEFT_OK);
    assert_null(e);
    assert_non_null(strstr(err.message, "chunk_tokens"));
    assert_int_not_equal(
        try_open("{name: sched.preempt, options: {watermark_permille: 900}}", 4, 0, 0, &e, &err),
        WEFT_OK);
    assert_non_null(strstr(err.message, "watermark_permille"));
    assert_int_not_equal(
        try_open("{name: sched.continuous, options: {chunk_tokens: 8}}", 4, 0, 0, &e, &err),
        WEFT_OK);
    assert_non_null(strstr(err.message, "chunk_tokens"));
    /* One scheduler per candidate. */
    assert_int_not_equal(try_open("sched.continuous, sched.preempt", 4, 0, 0, &e, &err), WEFT_OK);
    assert_non_null(strstr(err.message, "sched."));
    /* The bundle refuses what the schema would let through when called directly. */
    bundle b;
    assert_int_equal(bundle_open(&b, "sched.chunked-prefill",
                                 (weft_option[]){opt_int("chunk_tokens", 0)}, 1, &err),
                     WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "chunk_tokens"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_rules),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_continuous_equals_serial),
        cmocka_unit_test(test_chunked_prefill_equals_serial),
        cmocka_unit_test(test_preempt_equals_serial),
        cmocka_unit_test(test_preempt_oversubscribed),
        cmocka_unit_test(test_compose_with_paged_kv),
        cmocka_unit_test(test_request_larger_than_pool),
        cmocka_unit_test(test_chunked_prefill_shares_steps),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
