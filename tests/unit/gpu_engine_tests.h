/* Shared by the GPU engine tests (test_exec.c, test_persistent.c, test_async_gpu.c; included,
 * not compiled alone): where the shared data and the candidate manifests are, stories260K
 * converted into a temporary directory for the group, and engines that open a cuda candidate or
 * report that no GPU is here (the tests then skip). GPU_TEST_GENERATE adds the greedy/sampled
 * generation helpers test_exec.c and test_persistent.c use. */
#ifndef WEFT_GPU_ENGINE_TESTS_H
#define WEFT_GPU_ENGINE_TESTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "files/llama2c.h"
#include "util/error.h"

#include "stories_fixture.h"

static char stories_dir[64];
static int have_gpu = -1;
static uint32_t open_max_model_len = 512; /* open_path's max_model_len */

static const char *manifest_dir(void) {
    const char *d = getenv("WEFT_EXEC_MANIFESTS"); /* the GPU bundle carries its own copy */
    return d && d[0] ? d : WEFT_SOURCE_DIR "/manifests";
}

static int group_setup(void **state) {
    (void)state;
    return stories_convert(stories_dir, "weft-gpu-test");
}

static int group_teardown(void **state) {
    (void)state;
    stories_remove(stories_dir, "serve.yaml");
    return 0;
}

/* NULL when the candidate cannot open for want of a GPU (then the caller skips). max_requests
 * 0 = the candidate's own. */
static weft_engine *open_path(const char *path, const char *model, uint32_t max_requests) {
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.manifest_path = path;
    o.model_dir = model;
    o.max_model_len = open_max_model_len;
    o.max_requests = max_requests;
    weft_error err;
    weft_error_clear(&err);
    weft_engine *e = NULL;
    weft_status s = weft_engine_open(&o, &e, &err);
    if (s == WEFT_OK) {
        have_gpu = 1;
        return e;
    }
    if (have_gpu != 1 && (s == WEFT_ERR_DEVICE || strstr(err.message, "libcuda") ||
                          strstr(err.message, "cuInit") || strstr(err.message, "no plugin named") ||
                          strstr(err.message, "cuda"))) {
        have_gpu = 0;
        fprintf(stderr, "(skipping: %s: %s)\n", err.source, err.message);
        return NULL;
    }
    fail_msg("open %s on %s: %s: %s", path, model, err.source, err.message);
    return NULL;
}

/* Runs fn on every model directory in WEFT_EXEC_MODELS (colon-separated; the GPU run passes
 * synthetic Llama-3.2-1B and Qwen3-0.6B bf16); skips the test when it is unset. */
static void for_each_model(void (*fn)(const char *model)) {
    const char *list = getenv("WEFT_EXEC_MODELS");
    if (!list || !list[0]) skip();
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save = NULL, *m = strtok_r(buf, ":", &save); m; m = strtok_r(NULL, ":", &save))
        fn(m);
}

/* The candidate manifests/<candidate>.yaml (or the bundle's copy). */
static weft_engine *open_candidate(const char *candidate, const char *model) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/%s.yaml", manifest_dir(), candidate);
    return open_path(path, model, 0);
}

#ifdef GPU_TEST_GENERATE
#include "engine/sampling.h"

#define MAX_IDS 1024

typedef struct result {
    int32_t ids[MAX_IDS];
    float logprobs[MAX_IDS];
    uint32_t n_top[MAX_IDS];
    weft_token_logprob top[MAX_IDS][4];
    size_t n;
    uint32_t finish;
} result;

static void on_event(void *user, const weft_token_event *ev) {
    result *r = user;
    if (ev->token >= 0 && r->n < MAX_IDS) {
        r->logprobs[r->n] = ev->logprob;
        r->n_top[r->n] = ev->n_top;
        for (uint32_t k = 0; k < ev->n_top && k < 4; k++) r->top[r->n][k] = ev->top[k];
        r->ids[r->n++] = ev->token;
    }
    if (ev->finish) r->finish = ev->finish;
}

static void generate(weft_engine *e, const int32_t *prompt, size_t n_prompt,
                     const weft_sampler_params *sp, uint32_t max_tokens, result *out) {
    memset(out, 0, sizeof(*out));
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling = *sp;
    rp.max_tokens = max_tokens;
    rp.ignore_eos = 1;
    rp.detokenize = 0;
    rp.callback = on_event;
    rp.user = out;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_request_submit(e, prompt, n_prompt, &rp, NULL, &err), WEFT_OK);
    while (weft_engine_active(e)) {
        weft_status s = weft_engine_step(e, &err);
        if (s < 0) fail_msg("step: %s: %s", err.source, err.message);
    }
    assert_int_equal(out->finish, WEFT_FINISH_LENGTH);
    assert_int_equal(out->n, max_tokens);
}

/* The bench's prompt: BOS, then ids spread over the vocabulary. */
static size_t make_prompt(const weft_engine *e, int32_t *p, size_t n) {
    const weft_model_config *cfg = weft_engine_config(e);
    for (size_t i = 0; i < n; i++) p[i] = (int32_t)((7919u * (i + 1)) % cfg->vocab_size);
    if (cfg->bos_token_id >= 0) p[0] = cfg->bos_token_id;
    return n;
}
#endif

#endif
