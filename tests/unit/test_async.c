/* exec.async-pipeline through the real engine on stories260K (cpu backend, llama plugin). On the
 * cpu the host samples (no sampler plugin), so the pipeline has no overlap there, but every
 * part of its control flow runs: a decode step launched before the previous step's tokens are
 * on the host, ids fed to in.tokens from the "device" buffer, tokens delivered one step late,
 * rows of requests that ended wasted and dropped, drains on arrivals, cancellation, rows it
 * cannot take (logit bias, top alternatives, min_tokens), length limits and score calls.
 * Every test compares with the same engine without the technique:
 *  - greedy and seeded sampled decoding: identical tokens and log-probabilities over 256 steps;
 *  - 16 requests in two waves under sched.continuous, with EOS, stop ids and length limits,
 *    alone and with kv.paged + kv.prefix-cache + sched.preempt on a 4x oversubscribed pool:
 *    each request's tokens and finish reason identical;
 *  - the pipeline really ran (engine.collect in the profile, one collect per pipelined step),
 *    and did not run for rows it must not take;
 *  - option validation. The GPU variant (device sampler, 256 steps on stories260K and the
 *    synthetic configs) is tests/unit/test_exec.c's pipeline case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "files/llama2c.h"
#include "util/error.h"

#include "stories_fixture.h"

#define MAX_IDS 600
#define N_JOBS 16

static char model_dir[64];
static char manifest_path[128];

static int group_setup(void **state) {
    (void)state;
    if (stories_convert(model_dir, "weft-async")) return -1;
    snprintf(manifest_path, sizeof(manifest_path), "%s/candidate.yaml", model_dir);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    stories_remove(model_dir, "candidate.yaml");
    return 0;
}

static weft_status try_open(const char *techniques, uint32_t max_requests, uint64_t kv_tokens,
                            weft_engine **out, weft_error *err) {
    assert_int_equal(
        stories_manifest(manifest_path, "async-test", model_dir, "cpu", techniques), 0);
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.manifest_path = manifest_path;
    o.threads = 1;
    o.max_requests = max_requests;
    o.kv_tokens = kv_tokens;
    o.profile = 1; /* engine.collect counts pipelined collects */
    weft_error_clear(err);
    return weft_engine_open(&o, out, err);
}

static weft_engine *open_cand(const char *techniques, uint32_t max_requests, uint64_t kv_tokens) {
    weft_engine *e = NULL;
    weft_error err;
    if (try_open(techniques, max_requests, kv_tokens, &e, &err) != WEFT_OK)
        fail_msg("open [%s]: %s: %s", techniques, err.source, err.message);
    return e;
}

/* Calls of a profile class (0 when absent). */
static uint64_t prof_calls(const weft_engine *e, const char *name) {
    const char *names[64];
    uint64_t calls[64];
    uint32_t n = weft_engine_profile(e, names, NULL, calls, 64);
    for (uint32_t i = 0; i < n && i < 64; i++)
        if (!strcmp(names[i], name)) return calls[i];
    return 0;
}

typedef struct result {
    int32_t ids[MAX_IDS];
    float lp[MAX_IDS];
    uint32_t n_ids;
    uint32_t finish, finals;
    char message[256];
} result;

static void on_event(void *user, const weft_token_event *ev) {
    result *r = user;
    if (ev->token >= 0) {
        assert_int_equal(r->finals, 0);
        assert_true(r->n_ids < MAX_IDS);
        r->lp[r->n_ids] = ev->logprob;
        r->ids[r->n_ids++] = ev->token;
    } else {
        r->finish = ev->finish;
        r->finals++;
        if (ev->message) snprintf(r->message, sizeof(r->message), "%s", ev->message);
    }
}

typedef struct job {
    int32_t prompt[200];
    uint32_t n_prompt, max_tokens, min_tokens;
    int ignore_eos;
    float temperature;
    uint64_t seed;
    int32_t stop_id; /* -1 = none */
    int32_t bias_id; /* -1 = none */
    int32_t n_logprobs;
} job;

static uint64_t submit(weft_engine *e, const job *j, result *r) {
    memset(r, 0, sizeof(*r));
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = j->temperature;
    rp.sampling.top_k = j->temperature > 0 ? 40 : 0;
    rp.sampling.top_p = j->temperature > 0 ? 0.9f : 1.0f;
    rp.sampling.seed = j->seed;
    rp.sampling.min_tokens = j->min_tokens;
    rp.sampling.n_logprobs = j->n_logprobs;
    int32_t bias_id = j->bias_id;
    float bias_v = -2.0f;
    if (j->bias_id >= 0) {
        rp.sampling.n_bias = 1;
        rp.sampling.bias_ids = &bias_id;
        rp.sampling.bias_values = &bias_v;
    }
    if (j->stop_id >= 0) {
        rp.stop_ids = &j->stop_id;
        rp.n_stop_ids = 1;
    }
    rp.max_tokens = j->max_tokens;
    rp.ignore_eos = j->ignore_eos;
    rp.detokenize = 1;
    rp.callback = on_event;
    rp.user = r;
    weft_error err;
    weft_error_clear(&err);
    uint64_t id = 0;
    if (weft_request_submit(e, j->prompt, j->n_prompt, &rp, &id, &err) != WEFT_OK)
        fail_msg("submit: %s", err.message);
    return id;
}

static void step_once(weft_engine *e) {
    weft_error err;
    weft_error_clear(&err);
    weft_status s = weft_engine_step(e, &err);
    if (s < 0) fail_msg("step: %s: %s", err.source, err.message);
}

static void run_all(weft_engine *e) {
    for (uint64_t guard = 0; weft_engine_active(e); guard++) {
        assert_true(guard < 200000);
        step_once(e);
    }
}

static void assert_same(const result *a, const result *b, uint32_t i, int logprobs) {
    if (a->finals != 1 || b->finals != 1 || a->finish != b->finish || a->n_ids != b->n_ids ||
        memcmp(a->ids, b->ids, a->n_ids * sizeof(int32_t)))
        fail_msg("request %u: pipelined %s (%s) after %u tokens, ordinary %s after %u tokens", i,
                 weft_finish_name(a->finish), a->message, a->n_ids, weft_finish_name(b->finish),
                 b->n_ids);
    for (uint32_t k = 0; logprobs && k < a->n_ids; k++)
        assert_float_equal(a->lp[k], b->lp[k], 0.0);
}

/* One request alone for 256 tokens (EOS ignored), with and without the pipeline. */
static void one_request(const job *j, uint64_t *collects) {
    static result got, ref;
    weft_engine *e = open_cand("exec.async-pipeline", 1, 0);
    submit(e, j, &got);
    run_all(e);
    *collects = prof_calls(e, "engine.collect");
    weft_engine_close(e);
    e = open_cand("", 1, 0);
    submit(e, j, &ref);
    run_all(e);
    assert_int_equal(prof_calls(e, "engine.collect"), 0);
    weft_engine_close(e);
    assert_same(&got, &ref, 0, 1);
}

static job base_job(void) {
    job j;
    memset(&j, 0, sizeof(j));
    j.prompt[0] = 1;
    j.prompt[1] = 403;
    j.prompt[2] = 261;
    j.n_prompt = 3;
    j.max_tokens = 256;
    j.ignore_eos = 1;
    j.stop_id = -1;
    j.bias_id = -1;
    return j;
}

static void test_greedy_256(void **state) {
    (void)state;
    job j = base_job();
    uint64_t collects = 0;
    one_request(&j, &collects);
    /* token 1 comes from prefill; 2..255 from plain decode steps, all pipelined but the last
     * (which would end the request by length) */
    assert_true(collects >= 250);
}

static void test_sampled_256(void **state) {
    (void)state;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        job j = base_job();
        j.temperature = 0.8f;
        j.seed = 1000003ull * seed;
        uint64_t collects = 0;
        one_request(&j, &collects);
        assert_true(collects >= 250);
    }
}

/* min_tokens masks EOS for the first 20 tokens: those steps run the ordinary way (the mask is
 * not in the async sampler's parameters), the rest are pipelined; EOS then ends the request. */
static void test_min_tokens(void **state) {
    (void)state;
    job j = base_job();
    j.ignore_eos = 0;
    j.min_tokens = 20;
    uint64_t collects = 0;
    one_request(&j, &collects);
    assert_true(collects > 0);
}

/* Rows the pipeline must not take: logit bias and top alternatives run the ordinary path. */
static void test_declined_rows(void **state) {
    (void)state;
    job j = base_job();
    j.max_tokens = 64;
    j.bias_id = 13;
    uint64_t collects = 1;
    one_request(&j, &collects);
    assert_int_equal(collects, 0);
    j.bias_id = -1;
    j.n_logprobs = 3;
    one_request(&j, &collects);
    assert_int_equal(collects, 0);
}

/* Mixed jobs: EOS allowed (stories end), stop ids, length limits of every size (one request
 * ends at almost every step), greedy and sampled. */
static void make_jobs(job *jobs) {
    uint32_t s = 777;
    for (uint32_t i = 0; i < N_JOBS; i++) {
        job *j = &jobs[i];
        *j = base_job();
        j->n_prompt = 1 + (i * 7) % 40;
        for (uint32_t k = 1; k < j->n_prompt; k++) {
            s = s * 1664525u + 1013904223u;
            j->prompt[k] = 3 + (int32_t)((s >> 8) % 509);
        }
        j->max_tokens = 5 + i * 9;
        j->ignore_eos = i % 3 != 0;
        j->stop_id = i % 4 == 1 ? 13 : -1;
        j->temperature = i % 2 ? 0.9f : 0.0f;
        j->seed = 42 + i;
    }
}

/* Two waves (the second arrives while the first decodes), each request compared with the same
 * candidate without the pipeline. */
static void waves(const char *with, const char *without, uint32_t max_req, uint64_t kv_tokens) {
    static job jobs[N_JOBS];
    static result got[N_JOBS], ref[N_JOBS];
    make_jobs(jobs);
    for (int pass = 0; pass < 2; pass++) {
        weft_engine *e = open_cand(pass ? without : with, max_req, kv_tokens);
        result *res = pass ? ref : got;
        for (uint32_t i = 0; i < N_JOBS / 2; i++)
            submit(e, &jobs[i], &res[i]);
        for (int k = 0; k < 12; k++)
            step_once(e);
        for (uint32_t i = N_JOBS / 2; i < N_JOBS; i++)
            submit(e, &jobs[i], &res[i]);
        run_all(e);
        uint64_t c = prof_calls(e, "engine.collect");
        if (pass)
            assert_int_equal(c, 0);
        else
            assert_true(c > 20);
        weft_engine_close(e);
    }
    for (uint32_t i = 0; i < N_JOBS; i++)
        assert_same(&got[i], &ref[i], i, 0);
}

static void test_batched(void **state) {
    (void)state;
    waves("sched.continuous, exec.async-pipeline", "sched.continuous", 8, 0);
}

static void test_batched_paged_oversubscribed(void **state) {
    (void)state;
    /* 8 streams of up to ~180 tokens against a pool of 360 tokens: preemption by recompute */
    waves("{name: sched.preempt, options: {chunk_tokens: 16}}, kv.paged, kv.prefix-cache, "
          "exec.async-pipeline",
          "{name: sched.preempt, options: {chunk_tokens: 16}}, kv.paged, kv.prefix-cache", 8,
          360);
}

/* Cancelling a request whose token is in flight, and scoring while a step is in flight. */
static void test_cancel_and_score(void **state) {
    (void)state;
    static result got[2], ref[2];
    job a = base_job(), b = base_job();
    a.max_tokens = 80;
    b.max_tokens = 80;
    b.prompt[1] = 77;
    weft_engine *e = open_cand("sched.continuous, exec.async-pipeline", 3, 0);
    submit(e, &a, &got[0]);
    uint64_t id_b = submit(e, &b, &got[1]);
    for (int k = 0; k < 20; k++)
        step_once(e);
    assert_true(prof_calls(e, "engine.collect") > 0);
    uint32_t seen_b = got[1].n_ids;
    assert_int_equal(weft_request_cancel(e, id_b), WEFT_OK);
    /* score in the middle: the step in flight is delivered first, scores are a fresh engine's */
    static const int32_t ids[6] = {1, 403, 261, 27, 77, 300};
    const weft_model_config *cfg = weft_engine_config(e);
    uint32_t V = cfg->vocab_size;
    float *lg = malloc(sizeof(float) * 6 * V), *lg2 = malloc(sizeof(float) * 6 * V);
    assert_non_null(lg);
    assert_non_null(lg2);
    weft_error err;
    weft_error_clear(&err);
    if (weft_engine_score(e, ids, 6, lg, &err) != WEFT_OK) fail_msg("score: %s", err.message);
    run_all(e);
    weft_engine_close(e);
    assert_int_equal(got[1].finish, WEFT_FINISH_CANCELLED);
    assert_true(got[1].n_ids >= seen_b && got[1].n_ids <= seen_b + 1);
    e = open_cand("sched.continuous", 3, 0);
    submit(e, &a, &ref[0]);
    submit(e, &b, &ref[1]);
    run_all(e);
    if (weft_engine_score(e, ids, 6, lg2, &err) != WEFT_OK) fail_msg("score: %s", err.message);
    weft_engine_close(e);
    /* tokens exact; log-probabilities within rounding (after the cancel stream a runs alone,
     * the reference runs it beside b: a different batch shape on the cpu GEMM) */
    assert_same(&got[0], &ref[0], 0, 0);
    for (uint32_t k = 0; k < got[0].n_ids; k++)
        assert_float_equal(got[0].lp[k], ref[0].lp[k], 1e-4);
    /* the cancelled stream's tokens are a prefix of its full output */
    assert_true(got[1].n_ids <= ref[1].n_ids);
    assert_memory_equal(got[1].ids, ref[1].ids, got[1].n_ids * sizeof(int32_t));
    for (size_t k = 0; k < (size_t)6 * V; k++)
        assert_float_equal(lg[k], lg2[k], 0.0);
    free(lg);
    free(lg2);
}

static void test_options(void **state) {
    (void)state;
    weft_engine *e = NULL;
    weft_error err;
    assert_true(try_open("{name: exec.async-pipeline, options: {min_rows: 0}}", 1, 0, &e, &err) <
                0);
    assert_non_null(strstr(err.message, "min_rows"));
    /* enabled: false and min_rows above the batch: never pipelined, same tokens */
    static const char *const off[] = {"{name: exec.async-pipeline, options: {enabled: false}}",
                                      "{name: exec.async-pipeline, options: {min_rows: 2}}"};
    for (int k = 0; k < 2; k++) {
        static result got;
        job j = base_job();
        j.max_tokens = 40;
        e = open_cand(off[k], 1, 0);
        submit(e, &j, &got);
        run_all(e);
        assert_int_equal(prof_calls(e, "engine.collect"), 0);
        assert_int_equal(got.n_ids, 40);
        weft_engine_close(e);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_256),
        cmocka_unit_test(test_sampled_256),
        cmocka_unit_test(test_min_tokens),
        cmocka_unit_test(test_declined_rows),
        cmocka_unit_test(test_batched),
        cmocka_unit_test(test_batched_paged_oversubscribed),
        cmocka_unit_test(test_cancel_and_score),
        cmocka_unit_test(test_options),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
