/* exec.async-pipeline on the GPU (device sampler: ids fed to the next step on the device, tokens
 * collected one step late through pinned memory and an event):
 *   - greedy: fast-cuda-async (and its -smem, -smem-loop, -loop, -xs, -ln, -smem-ln, -nl, -mlp,
 *     -qs and -nl-ex forms) give fast-cuda-all's tokens and log-probabilities over 256 steps (EOS
 *     ignored), twice in one
 *     engine (the second run replays captured graphs), on stories260K and every model directory
 *     in WEFT_EXEC_MODELS (colon-separated; the GPU run passes synthetic Qwen3-0.6B and
 *     Llama-3.2-1B bf16); WEFT_TEST_CANDIDATES (comma-separated names) runs only those;
 *   - seeded sampled decoding (T 0.8, top-k 50, top-p 0.95; 3 seeds x 128 tokens): identical;
 *   - 12 concurrent requests under sched.continuous with captured batched steps, greedy and
 *     sampled, EOS and length limits, a second wave arriving mid-run: each request identical
 *     with and without the pipeline.
 * Needs the cuda backend and a GPU: without them every test is skipped. */
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

#define MAX_IDS 512
#define N_REQ 12

#include "gpu_engine_tests.h"

typedef struct result {
    int32_t ids[MAX_IDS];
    float lp[MAX_IDS];
    uint32_t n, finish, finals;
} result;

static void on_event(void *user, const weft_token_event *ev) {
    result *r = user;
    if (ev->token >= 0 && r->n < MAX_IDS) {
        r->lp[r->n] = ev->logprob;
        r->ids[r->n++] = ev->token;
    }
    if (ev->finish) {
        r->finish = ev->finish;
        r->finals++;
    }
}

static void submit(weft_engine *e, const int32_t *prompt, size_t n, float temperature,
                   uint64_t seed, uint32_t max_tokens, int ignore_eos, result *out) {
    memset(out, 0, sizeof(*out));
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = temperature;
    rp.sampling.top_k = temperature > 0 ? 50 : 0;
    rp.sampling.top_p = temperature > 0 ? 0.95f : 1.0f;
    rp.sampling.seed = seed;
    rp.max_tokens = max_tokens;
    rp.ignore_eos = ignore_eos;
    rp.detokenize = 0;
    rp.callback = on_event;
    rp.user = out;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_request_submit(e, prompt, n, &rp, NULL, &err), WEFT_OK);
}

static void run_all(weft_engine *e) {
    weft_error err;
    weft_error_clear(&err);
    while (weft_engine_active(e)) {
        weft_status s = weft_engine_step(e, &err);
        if (s < 0) fail_msg("step: %s: %s", err.source, err.message);
    }
}

static size_t make_prompt(const weft_engine *e, int32_t *p, size_t n, uint32_t salt) {
    const weft_model_config *cfg = weft_engine_config(e);
    for (size_t i = 0; i < n; i++)
        p[i] = (int32_t)((7919u * (i + 1) + 104729u * salt) % cfg->vocab_size);
    if (cfg->bos_token_id >= 0) p[0] = cfg->bos_token_id;
    return n;
}

static void compare(const result *got, const result *ref, const char *what, const char *model) {
    if (got->n != ref->n || got->finish != ref->finish)
        fail_msg("%s on %s: %u tokens (%s), without the pipeline %u (%s)", what, model, got->n,
                 weft_finish_name(got->finish), ref->n, weft_finish_name(ref->finish));
    for (uint32_t i = 0; i < got->n; i++) {
        if (got->ids[i] != ref->ids[i])
            fail_msg("%s on %s: token %u is %d, without the pipeline %d", what, model, i,
                     got->ids[i], ref->ids[i]);
        if (got->lp[i] != ref->lp[i])
            fail_msg("%s on %s: logprob %u is %.9g, without the pipeline %.9g", what, model, i,
                     (double)got->lp[i], (double)ref->lp[i]);
    }
}

/* name is one of list's comma-separated items */
static int in_list(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *c = strchr(p, ',');
        const size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

static void single_on(const char *model) {
    static result ref[4], got;
    weft_engine *e = open_candidate("fast-cuda-all", model);
    if (!e) skip();
    int32_t prompt[16];
    size_t n = make_prompt(e, prompt, 16, 0);
    submit(e, prompt, n, 0.0f, 0, 256, 1, &ref[0]);
    run_all(e);
    for (int k = 1; k <= 3; k++) {
        submit(e, prompt, n, 0.8f, 1000003ull * (uint64_t)k, 128, 1, &ref[k]);
        run_all(e);
    }
    weft_engine_close(e);
    /* fast-cuda-async-smem: the same kernels with the backend's smem_carveout and x in shared
     * memory (gemv_xsmem), -smem-loop also with the long products looped over rows
     * (gemv_loop); fast-cuda-async-loop: those two without the carveout;
     * fast-cuda-async-xs: the gate|up GEMV's x in shared memory; the -ln forms:
     * fuse.linear-add-norm's products normalising in their last block; the -nl forms:
     * fuse.norm-linear's looped products normalising their row in every block; -loop-mlp:
     * its option down (on stories260K's 64-wide rows the node's unfused form); -loop-nl-qs:
     * the backend's attn_qsplit 2 (each kv head's q heads over two attention blocks); -l2:
     * the o projection's rows into L2 during the attention (gemv_l2_rest, gemv_l2_sm); -b128:
     * the attention's split grid over KV-length buckets from 128 positions (attn_bucket_min);
     * -smem-loop-nl-ex: the fold's and the attention's blocks kept off each other's SMs
     * (gemv_nl_smem_min, attn_smem_min), empty attention splits leaving early (attn_dead_exit) */
    static const char *const cands[] = {"fast-cuda-async",
                                        "fast-cuda-async-smem",
                                        "fast-cuda-async-smem-loop",
                                        "fast-cuda-async-loop",
                                        "fast-cuda-async-xs",
                                        "fast-cuda-async-ln",
                                        "fast-cuda-async-smem-ln",
                                        "fast-cuda-async-loop-nl",
                                        "fast-cuda-async-smem-loop-nl",
                                        "fast-cuda-async-loop-mlp",
                                        "fast-cuda-async-loop-nl-qs",
                                        "fast-cuda-async-loop-nl-qs-l2",
                                        "fast-cuda-async-loop-nl-qs-l2-b128",
                                        "fast-cuda-async-loop-nl-b128",
                                        "fast-cuda-async-smem-loop-nl-ex"};
    /* WEFT_TEST_CANDIDATES: a comma-separated subset to run (a device call's budget) */
    const char *only = getenv("WEFT_TEST_CANDIDATES");
    for (size_t c = 0; c < sizeof(cands) / sizeof(cands[0]); c++) {
        if (only && *only && !in_list(only, cands[c])) continue;
        e = open_candidate(cands[c], model);
        assert_non_null(e);
        for (int rep = 0; rep < 2; rep++) {
            submit(e, prompt, n, 0.0f, 0, 256, 1, &got);
            run_all(e);
            compare(&got, &ref[0], "greedy", model);
        }
        for (int k = 1; k <= 3; k++) {
            submit(e, prompt, n, 0.8f, 1000003ull * (uint64_t)k, 128, 1, &got);
            run_all(e);
            compare(&got, &ref[k], "sampled", model);
        }
        fprintf(stderr, "  %s on %s: 2 x 256 greedy + 3 x 128 sampled tokens equal\n", cands[c],
                model);
        weft_engine_close(e);
    }
}

static void test_single_stories(void **state) {
    (void)state;
    single_on(stories_dir);
}

static void test_single_models(void **state) {
    (void)state;
    for_each_model(single_on);
}

/* Concurrent requests, batched steps captured as graphs, with and without the pipeline. */
static void test_batched_stories(void **state) {
    (void)state;
    if (have_gpu == 0) skip();
    static result got[N_REQ], ref[N_REQ];
    char path[1200];
    snprintf(path, sizeof(path), "%s/serve.yaml", stories_dir);
    for (int pass = 0; pass < 2; pass++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fprintf(f,
                "format: 1\ncandidate: async-serve\nmodel: stories260k\nbackend: cuda\n"
                "model_plugin: {name: llama, options: {activation_dtype: auto, device_inputs: "
                "true}}\ntechniques: [sched.continuous, {name: exec.cuda-graph, options: "
                "{max_tokens: 16}}, exec.device-sampling%s]\n"
                "serving: {max_model_len: 512, max_concurrency: %u}\n",
                pass ? "" : ", exec.async-pipeline", N_REQ);
        fclose(f);
        weft_engine *e = open_path(path, stories_dir, N_REQ);
        if (!e) skip();
        result *res = pass ? ref : got;
        int32_t prompt[40];
        for (uint32_t i = 0; i < N_REQ; i++) {
            if (i == N_REQ / 2) /* the second wave arrives while the first decodes */
                for (int k = 0; k < 30; k++) {
                    weft_error err;
                    weft_error_clear(&err);
                    assert_true(weft_engine_step(e, &err) >= 0);
                }
            size_t n = make_prompt(e, prompt, 4 + (i * 5) % 36, i);
            submit(e, prompt, n, i % 2 ? 0.9f : 0.0f, 77 + i, 20 + 17 * i, i % 3 != 0, &res[i]);
        }
        run_all(e);
        weft_engine_close(e);
    }
    for (uint32_t i = 0; i < N_REQ; i++) {
        assert_int_equal(got[i].finals, 1);
        compare(&got[i], &ref[i], "batched", "stories260K");
    }
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_stories),
        cmocka_unit_test(test_single_models),
        cmocka_unit_test(test_batched_stories),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
