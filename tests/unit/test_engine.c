/* The engine on the real CPU baseline (stories260K converted from the shared llama2.c
 * checkpoint, cpu backend, llama plugin): open errors, request validation, what the step loop
 * delivers (streamed text equals the decoded tokens, max_tokens, stop strings and stop ids,
 * cancellation), that chunked prefill and several queued requests give the same greedy tokens as
 * one request alone, seeded sampling is reproducible, and the printed graph names its
 * implementations and hash. */
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
#include "util/error.h"

#include "stories_fixture.h"

static char model_dir[64];

static int group_setup(void **state) {
    (void)state;
    return stories_convert(model_dir, "weft-engine");
}

static int group_teardown(void **state) {
    (void)state;
    stories_remove(model_dir, NULL);
    return 0;
}

static weft_engine *open_with(uint32_t max_batch_tokens, uint32_t max_requests, int profile) {
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.manifest_path = WEFT_SOURCE_DIR "/manifests/baseline-cpu.yaml";
    o.model_dir = model_dir;
    o.threads = 1;
    o.max_batch_tokens = max_batch_tokens;
    o.max_requests = max_requests;
    o.profile = profile;
    weft_error err;
    weft_error_clear(&err);
    weft_engine *e = NULL;
    if (weft_engine_open(&o, &e, &err) != WEFT_OK)
        fail_msg("open: %s: %s", err.source, err.message);
    return e;
}

/* Everything a request delivered. */
typedef struct result {
    int32_t ids[1024];
    size_t n_ids;
    char text[16384];
    size_t text_len;
    uint32_t finish;
    int final_events;
    int events_after_final;
    float logprobs[1024];
    /* cancel after this many tokens (0 = never) */
    weft_engine *engine;
    uint32_t cancel_after;
} result;

static void on_event(void *user, const weft_token_event *ev) {
    result *r = user;
    if (r->final_events) r->events_after_final++;
    assert_true(ev->size >= sizeof(*ev));
    if (ev->token >= 0 && r->n_ids < 1024) {
        r->logprobs[r->n_ids] = ev->logprob;
        r->ids[r->n_ids++] = ev->token;
    }
    if (ev->text_len && r->text_len + ev->text_len < sizeof(r->text)) {
        memcpy(r->text + r->text_len, ev->text, ev->text_len);
        r->text_len += ev->text_len;
        r->text[r->text_len] = '\0';
    }
    if (ev->finish) {
        r->finish = ev->finish;
        r->final_events++;
        assert_int_equal(ev->token, -1);
    }
    if (r->cancel_after && ev->token >= 0 && r->n_ids == r->cancel_after)
        assert_int_equal(weft_request_cancel(r->engine, ev->request_id), WEFT_OK);
}

static void drain(weft_engine *e) {
    weft_error err;
    weft_error_clear(&err);
    while (weft_engine_active(e)) {
        weft_status s = weft_engine_step(e, &err);
        if (s < 0) fail_msg("step: %s", err.message);
    }
    assert_int_equal(weft_engine_step(e, &err), WEFT_FINISHED);
}

static void encode(weft_engine *e, const char *text, int32_t **ids, size_t *n) {
    weft_error err;
    weft_error_clear(&err);
    const weft_tokenizer *tok = weft_engine_tokenizer(e);
    assert_non_null(tok);
    if (weft_tokenizer_encode(tok, text, strlen(text), 1, 1, ids, n, &err) != WEFT_OK)
        fail_msg("encode: %s", err.message);
}

static uint64_t submit(weft_engine *e, const int32_t *ids, size_t n, weft_request_params *rp,
                       result *r) {
    rp->callback = on_event;
    rp->user = r;
    r->engine = e;
    weft_error err;
    weft_error_clear(&err);
    uint64_t id = 0;
    if (weft_request_submit(e, ids, n, rp, &id, &err) != WEFT_OK)
        fail_msg("submit: %s", err.message);
    return id;
}

static void greedy(weft_engine *e, const int32_t *ids, size_t n, uint32_t max_tokens, result *r) {
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = max_tokens;
    memset(r, 0, sizeof(*r));
    submit(e, ids, n, &rp, r);
    drain(e);
}

static void test_open_errors(void **state) {
    (void)state;
    weft_engine_options o;
    weft_engine_options_default(&o);
    weft_error err;
    weft_error_clear(&err);
    weft_engine *e = NULL;
    assert_int_equal(weft_engine_open(&o, &e, &err), WEFT_ERR_INVALID);
    assert_string_equal(err.message,
                        "expected exactly one of a lock or a candidate manifest, got neither");
    assert_null(e);
    o.manifest_path = WEFT_SOURCE_DIR "/manifests/baseline-cpu.yaml";
    o.model_dir = "/nonexistent/weft-model";
    assert_true(weft_engine_open(&o, &e, &err) < 0);
    assert_null(e);
    assert_non_null(strstr(err.message, "/nonexistent/weft-model"));
}

static void test_submit_validation(void **state) {
    (void)state;
    weft_engine *e = open_with(0, 0, 0);
    weft_request_params rp;
    weft_request_params_default(&rp);
    weft_error err;
    weft_error_clear(&err);
    int32_t ids[2] = {1, 600};
    assert_int_equal(weft_request_submit(e, ids, 0, &rp, NULL, &err), WEFT_ERR_INVALID);
    assert_string_equal(err.message, "prompt: expected at least one token, got none");
    assert_int_equal(weft_request_submit(e, ids, 2, &rp, NULL, &err), WEFT_ERR_INVALID);
    assert_string_equal(err.message, "prompt token 1: id 600 is outside the vocabulary (0..511)");
    uint32_t max = weft_engine_max_model_len(e);
    assert_int_equal(max, 512); /* the baseline's serving.max_model_len */
    int32_t *longp = calloc(max, sizeof(int32_t));
    assert_int_equal(weft_request_submit(e, longp, max, &rp, NULL, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "leave no room under max_model_len 512"));
    free(longp);
    const char *empty_stop[1] = {""};
    rp.stop = empty_stop;
    rp.n_stop = 1;
    ids[1] = 5;
    assert_int_equal(weft_request_submit(e, ids, 2, &rp, NULL, &err), WEFT_ERR_INVALID);
    assert_string_equal(err.message, "stop[0]: expected a non-empty string");
    assert_int_equal(weft_engine_active(e), 0);
    assert_int_equal(weft_request_cancel(e, 12345), WEFT_ERR_NOT_FOUND);
    weft_engine_close(e);
}

static void test_greedy_text_and_length(void **state) {
    (void)state;
    weft_engine *e = open_with(0, 0, 0);
    int32_t *ids;
    size_t n;
    encode(e, "Once upon a time", &ids, &n);
    assert_int_equal(ids[0], weft_engine_config(e)->bos_token_id);
    static result r;
    greedy(e, ids, n, 40, &r);
    assert_int_equal(r.finish, WEFT_FINISH_LENGTH);
    assert_int_equal(r.final_events, 1);
    assert_int_equal(r.events_after_final, 0);
    assert_int_equal(r.n_ids, 40);
    /* The streamed pieces add up to the decoded tokens. */
    char *text = NULL;
    size_t len = 0;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(
        weft_tokenizer_decode(weft_engine_tokenizer(e), r.ids, r.n_ids, 1, &text, &len, &err),
        WEFT_OK);
    assert_int_equal(len, r.text_len);
    assert_memory_equal(text, r.text, len);
    /* llama2.c's run.c gives this continuation for the same checkpoint. */
    assert_non_null(strstr(r.text, ", there was a little girl named Lily."));
    for (size_t i = 0; i < r.n_ids; i++)
        assert_true(r.logprobs[i] <= 0.0f);
    free(text);
    weft_engine_stats st;
    weft_engine_get_stats(e, &st);
    assert_int_equal(st.prefill_tokens, n);
    assert_int_equal(st.decode_tokens, 39); /* the last token is sampled, never fed back */
    free(ids);
    weft_engine_close(e);
}

static void test_stop_string_and_ids(void **state) {
    (void)state;
    weft_engine *e = open_with(0, 0, 0);
    int32_t *ids;
    size_t n;
    encode(e, "Once upon a time", &ids, &n);
    static result base, r;
    greedy(e, ids, n, 60, &base);
    /* Stop at "Lily": the text ends right before it and the request stops. */
    const char *at = strstr(base.text, "Lily");
    assert_non_null(at);
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = 60;
    const char *stops[2] = {"no such text", "Lily"};
    rp.stop = stops;
    rp.n_stop = 2;
    memset(&r, 0, sizeof(r));
    submit(e, ids, n, &rp, &r);
    drain(e);
    assert_int_equal(r.finish, WEFT_FINISH_STOP);
    assert_int_equal(r.text_len, (size_t)(at - base.text));
    assert_memory_equal(r.text, base.text, r.text_len);
    assert_true(r.n_ids < base.n_ids);
    /* A stop id: the 5th generated token ends the request without its text. */
    rp.stop = NULL;
    rp.n_stop = 0;
    int32_t stop_id = base.ids[4];
    rp.stop_ids = &stop_id;
    rp.n_stop_ids = 1;
    memset(&r, 0, sizeof(r));
    submit(e, ids, n, &rp, &r);
    drain(e);
    assert_int_equal(r.finish, WEFT_FINISH_STOP);
    size_t first = 0;
    while (base.ids[first] != stop_id)
        first++;
    assert_int_equal(r.n_ids, first + 1);
    free(ids);
    weft_engine_close(e);
}

static void test_cancel(void **state) {
    (void)state;
    weft_engine *e = open_with(0, 0, 0);
    int32_t prompt[1] = {1};
    static result r;
    memset(&r, 0, sizeof(r));
    r.cancel_after = 3;
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = 100;
    submit(e, prompt, 1, &rp, &r);
    drain(e);
    assert_int_equal(r.finish, WEFT_FINISH_CANCELLED);
    assert_int_equal(r.n_ids, 3);
    assert_int_equal(r.final_events, 1);
    assert_int_equal(r.events_after_final, 0);
    weft_engine_close(e);
}

static void test_chunked_prefill_and_queue(void **state) {
    (void)state;
    /* Reference: one request alone, the whole prompt in one step. */
    weft_engine *e = open_with(0, 0, 0);
    int32_t *ids;
    size_t n;
    encode(e,
           "Once upon a time, there was a big dog named Max. Max liked to run in the park "
           "with his friend, a little cat.",
           &ids, &n);
    assert_true(n > 20);
    static result ref, r1, r2;
    greedy(e, ids, n, 50, &ref);
    weft_engine_close(e);
    /* Buckets of at most 8 rows: the prompt is fed in chunks over several steps. */
    e = open_with(8, 0, 0);
    greedy(e, ids, n, 50, &r1);
    assert_int_equal(r1.n_ids, ref.n_ids);
    assert_memory_equal(r1.ids, ref.ids, ref.n_ids * sizeof(int32_t));
    weft_engine_stats st;
    weft_engine_get_stats(e, &st);
    assert_int_equal(st.steps, (n + 7) / 8 + 49);
    weft_engine_close(e);
    /* Two requests queued at once (serial scheduler): each gets its solo output. */
    e = open_with(0, 2, 0);
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = 50;
    memset(&r1, 0, sizeof(r1));
    memset(&r2, 0, sizeof(r2));
    int32_t bos[1] = {1};
    static result solo;
    greedy(e, bos, 1, 30, &solo);
    submit(e, ids, n, &rp, &r1);
    rp.max_tokens = 30;
    submit(e, bos, 1, &rp, &r2);
    assert_int_equal(weft_engine_active(e), 2);
    drain(e);
    assert_int_equal(r1.n_ids, ref.n_ids);
    assert_memory_equal(r1.ids, ref.ids, ref.n_ids * sizeof(int32_t));
    assert_int_equal(r2.n_ids, solo.n_ids);
    assert_memory_equal(r2.ids, solo.ids, solo.n_ids * sizeof(int32_t));
    free(ids);
    weft_engine_close(e);
}

static void test_seeded_sampling(void **state) {
    (void)state;
    weft_engine *e = open_with(0, 0, 0);
    int32_t bos[1] = {1};
    static result a, b, c;
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 1.0f;
    rp.sampling.top_p = 0.95f;
    rp.max_tokens = 64;
    rp.ignore_eos = 1;
    rp.sampling.seed = 42;
    memset(&a, 0, sizeof(a));
    submit(e, bos, 1, &rp, &a);
    drain(e);
    memset(&b, 0, sizeof(b));
    submit(e, bos, 1, &rp, &b);
    drain(e);
    rp.sampling.seed = 43;
    memset(&c, 0, sizeof(c));
    submit(e, bos, 1, &rp, &c);
    drain(e);
    assert_int_equal(a.n_ids, 64);
    assert_memory_equal(a.ids, b.ids, sizeof(int32_t) * 64);
    assert_memory_not_equal(a.ids, c.ids, sizeof(int32_t) * 64);
    weft_engine_close(e);
}

static void test_score_matches_steps(void **state) {
    (void)state;
    weft_engine *e = open_with(0, 0, 0);
    int32_t bos[1] = {1};
    static result g;
    greedy(e, bos, 1, 20, &g);
    /* Scoring BOS + the greedy tokens: each position's argmax is the next greedy token. */
    int32_t seq[21];
    seq[0] = 1;
    memcpy(seq + 1, g.ids, sizeof(int32_t) * 20);
    uint32_t V = weft_engine_config(e)->vocab_size;
    float *logits = malloc(sizeof(float) * 21 * V);
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_engine_score(e, seq, 21, logits, &err), WEFT_OK);
    for (int p = 0; p < 20; p++) {
        uint32_t best = 0;
        for (uint32_t v = 1; v < V; v++)
            if (logits[p * V + v] > logits[p * V + best]) best = v;
        assert_int_equal(best, g.ids[p]);
    }
    int32_t bad[2] = {1, -3};
    assert_int_equal(weft_engine_score(e, bad, 2, logits, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "id -3 is outside the vocabulary"));
    free(logits);
    weft_engine_close(e);
}

static void test_print_graph_and_profile(void **state) {
    (void)state;
    weft_engine *e = open_with(0, 0, 1);
    char buf[65536] = {0};
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
    char hash[33];
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_engine_print_graph(e, 1, f, hash, &err), WEFT_OK);
    fclose(f);
    assert_int_equal(strlen(hash), 32);
    assert_non_null(strstr(buf, "layers.0.attn: attention(layers.0.attn.q_rope.y:f32[1,64], "
                                "layers.0.attn.k_rope.y:f32[1,32], layers.0.attn.v.y:f32[1,32], "
                                "in.positions:i32[1]) -> layers.0.attn.y:f32[1,64] "
                                "i=[0,8,4,8] layer=0  [cpu]\n"));
    assert_non_null(strstr(buf, "lm_head: lm_head(norm.y:f32[1,64], lm_head:f32[512,64]) -> "
                                "out.logits:f32[1,512]  [cpu]\n"));
    char want[64];
    snprintf(want, sizeof(want), "hash %s\n", hash);
    assert_non_null(strstr(buf, want));
    /* Five layers of 15 nodes, then embed, norm and lm_head. */
    assert_non_null(strstr(buf, "graph: 78 nodes"));
    /* The same candidate gives the same hash in another engine. */
    weft_engine *e2 = open_with(0, 0, 0);
    char hash2[33];
    f = fmemopen(buf, sizeof(buf) - 1, "w");
    assert_int_equal(weft_engine_print_graph(e2, 1, f, hash2, &err), WEFT_OK);
    fclose(f);
    assert_string_equal(hash, hash2);
    /* A different bucket is a different graph. */
    f = fmemopen(buf, sizeof(buf) - 1, "w");
    assert_int_equal(weft_engine_print_graph(e2, 16, f, hash2, &err), WEFT_OK);
    fclose(f);
    assert_string_not_equal(hash, hash2);
    weft_engine_close(e2);
    /* Profiling: one decode step's op classes were timed. */
    int32_t bos[1] = {1};
    static result r;
    greedy(e, bos, 1, 4, &r);
    const char *names[64];
    double secs[64];
    uint64_t calls[64];
    uint32_t nc = weft_engine_profile(e, names, secs, calls, 64);
    int saw_attention = 0;
    for (uint32_t i = 0; i < nc && i < 64; i++)
        if (!strcmp(names[i], "attention")) {
            saw_attention = 1;
            assert_int_equal(calls[i], 4 * 5); /* 4 steps, 5 layers */
        }
    assert_true(saw_attention);
    weft_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_submit_validation),
        cmocka_unit_test(test_greedy_text_and_length),
        cmocka_unit_test(test_stop_string_and_ids),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_chunked_prefill_and_queue),
        cmocka_unit_test(test_seeded_sampling),
        cmocka_unit_test(test_score_matches_steps),
        cmocka_unit_test(test_print_graph_and_profile),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
