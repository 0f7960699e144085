/* The execution techniques on the GPU (exec.cuda-graph, exec.device-sampling; docs/perf/exec.md):
 *   - greedy tokens of every shipped fast-cuda* candidate equal the cuda baseline's over 256
 *     steps (EOS ignored), on stories260K and on every model directory in WEFT_EXEC_MODELS
 *     (colon-separated; the GPU run passes synthetic Llama-3.2-1B and Qwen3-0.6B bf16), and the
 *     device sampler's log-probability of the greedy token is the host's within 1e-4;
 *   - seeded sampled decoding on the device gives the host sampler's tokens for the same seeds
 *     (the host path is forced in the same engine by a zero logit bias, so both read the same
 *     logits) for temperature, top-k, top-p, min-p and their combination;
 *   - first-token draws over 3,000 seeds fit the host sampler's distribution (chi-square at the
 *     0.999 quantile), and the same test rejects draws compared with a 20% hotter distribution;
 *   - rows the device declines (top alternatives) fall back to the host and still agree;
 *   - KV-length buckets: with max_model_len 2,048, fast-cuda-all and fast-cuda-async decode 256
 *     greedy tokens after prompts of 400 and 900 tokens (positions 400-655 and 900-1,155, past
 *     the buckets of 512 and 1,024 positions, where the fused attention's split grid grows and
 *     its cluster form changes) twice per engine, and give baseline-cuda's tokens, on every
 *     model directory in WEFT_EXEC_MODELS (a capture replayed past its bucket would attend to
 *     too few positions).
 * Needs the cuda backend and a GPU: without them (a CI machine) every test is skipped. */
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
#include "engine/sampling.h"
#include "files/llama2c.h"
#include "util/error.h"

#define GPU_TEST_GENERATE
#include "gpu_engine_tests.h"

static const char *const fast_candidates[] = {"fast-cuda-graph", "fast-cuda-sampling",
                                              "fast-cuda"};

static void greedy_on(const char *model) {
    static result base, got;
    weft_engine *e = open_candidate("baseline-cuda", model);
    if (!e) skip();
    int32_t prompt[16];
    size_t n = make_prompt(e, prompt, 16);
    weft_sampler_params sp;
    weft_sampler_params_default(&sp);
    sp.temperature = 0.0f;
    generate(e, prompt, n, &sp, 256, &base);
    weft_engine_close(e);
    for (size_t c = 0; c < sizeof(fast_candidates) / sizeof(fast_candidates[0]); c++) {
        e = open_candidate(fast_candidates[c], model);
        assert_non_null(e);
        /* twice: the first run warms and captures, the second replays every decode step */
        for (int rep = 0; rep < 2; rep++) {
            generate(e, prompt, n, &sp, 256, &got);
            for (size_t i = 0; i < 256; i++) {
                if (got.ids[i] != base.ids[i])
                    fail_msg("%s on %s, run %d: token %zu is %d, the baseline's %d",
                             fast_candidates[c], model, rep, i, got.ids[i], base.ids[i]);
                if (fabsf(got.logprobs[i] - base.logprobs[i]) > 1e-4f)
                    fail_msg("%s on %s: logprob of token %zu is %.7g, the host's %.7g",
                             fast_candidates[c], model, i, (double)got.logprobs[i],
                             (double)base.logprobs[i]);
            }
        }
        fprintf(stderr, "  %s on %s: 2 x 256 greedy tokens equal the baseline's\n",
                fast_candidates[c], model);
        weft_engine_close(e);
    }
}

static void test_greedy_stories(void **state) {
    (void)state;
    greedy_on(stories_dir);
}

static void test_greedy_models(void **state) {
    (void)state;
    for_each_model(greedy_on);
}

/* Captures keyed by KV-length bucket (cg_core.c, weft_sdk_kv_bucket). */
static void buckets_on(const char *model) {
    static int32_t prompt[900];
    static result base, got;
    static const char *const cands[] = {"fast-cuda-all", "fast-cuda-async"};
    static const size_t lens[] = {400, 900};
    open_max_model_len = 2048;
    for (size_t l = 0; l < 2; l++) {
        weft_engine *e = open_candidate("baseline-cuda", model);
        if (!e) {
            open_max_model_len = 512;
            skip();
        }
        size_t n = make_prompt(e, prompt, lens[l]);
        weft_sampler_params sp;
        weft_sampler_params_default(&sp);
        sp.temperature = 0.0f;
        generate(e, prompt, n, &sp, 256, &base);
        weft_engine_close(e);
        for (size_t c = 0; c < 2; c++) {
            e = open_candidate(cands[c], model);
            assert_non_null(e);
            for (int rep = 0; rep < 2; rep++) {
                generate(e, prompt, n, &sp, 256, &got);
                for (size_t i = 0; i < 256; i++)
                    if (got.ids[i] != base.ids[i])
                        fail_msg("%s on %s, %zu-token prompt, run %d: token %zu (position %zu) "
                                 "is %d, the baseline's %d",
                                 cands[c], model, n, rep, i, n + i, got.ids[i], base.ids[i]);
            }
            fprintf(stderr, "  %s on %s, %zu-token prompt: 2 x 256 greedy tokens equal the "
                            "baseline's\n", cands[c], model, n);
            weft_engine_close(e);
        }
    }
    open_max_model_len = 512;
}

static void test_kv_buckets_models(void **state) {
    (void)state;
    for_each_model(buckets_on);
}

/* Device vs host sampling in one engine: a zero logit bias sends a request to the host sampler
 * (weft_sampling carries no bias) without changing its logits. */
static void test_sampled_matches_host(void **state) {
    (void)state;
    weft_engine *e = open_candidate("fast-cuda", stories_dir);
    if (!e) skip();
    int32_t prompt[8];
    size_t n = make_prompt(e, prompt, 8);
    static const struct {
        float t, p, minp;
        int32_t k;
    } sets[] = {{0.8f, 1.0f, 0.0f, 0},  {1.0f, 1.0f, 0.0f, 40},   {0.7f, 0.9f, 0.0f, 0},
                {1.2f, 1.0f, 0.05f, 0}, {0.9f, 0.8f, 0.02f, 50}, {1.5f, 0.95f, 0.0f, 5},
                {1.0f, 0.5f, 0.0f, 1}};
    static result dev, host;
    int32_t zero_id = 0;
    float zero = 0.0f;
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            weft_sampler_params sp;
            weft_sampler_params_default(&sp);
            sp.temperature = sets[i].t;
            sp.top_p = sets[i].p;
            sp.min_p = sets[i].minp;
            sp.top_k = sets[i].k;
            sp.seed = seed * 7919u + i;
            generate(e, prompt, n, &sp, 64, &dev);
            sp.n_bias = 1;
            sp.bias_ids = &zero_id;
            sp.bias_values = &zero;
            generate(e, prompt, n, &sp, 64, &host);
            for (size_t j = 0; j < 64; j++) {
                if (dev.ids[j] != host.ids[j])
                    fail_msg("set %zu seed %llu: token %zu device %d host %d", i,
                             (unsigned long long)sp.seed, j, dev.ids[j], host.ids[j]);
                assert_true(fabsf(dev.logprobs[j] - host.logprobs[j]) <= 1e-4f);
            }
        }
    weft_engine_close(e);
}

/* Top alternatives are declined by the device sampler: the host serves the row. */
static void test_declined_rows(void **state) {
    (void)state;
    weft_engine *e = open_candidate("fast-cuda", stories_dir);
    if (!e) skip();
    int32_t prompt[8];
    size_t n = make_prompt(e, prompt, 8);
    weft_sampler_params sp;
    weft_sampler_params_default(&sp);
    sp.temperature = 0.0f;
    static result a, b;
    generate(e, prompt, n, &sp, 32, &a);
    sp.n_logprobs = 3;
    generate(e, prompt, n, &sp, 32, &b);
    for (size_t j = 0; j < 32; j++) {
        assert_int_equal(a.ids[j], b.ids[j]);
        assert_int_equal(a.n_top[j], 0);
        assert_int_equal(b.n_top[j], 3);
        assert_int_equal(b.top[j][0].id, b.ids[j]); /* greedy: the best alternative */
    }
    weft_engine_close(e);
}

/* Wilson-Hilferty: the 0.999 quantile of chi-square with k degrees of freedom. */
static double chi2_999(double k) {
    double z = 3.090232, a = 2.0 / (9.0 * k);
    double c = 1.0 - a + z * sqrt(a);
    return k * c * c * c;
}

static double chi2_stat(const uint32_t *counts, const double *probs, uint32_t V, uint32_t n,
                        double *df) {
    double stat = 0.0, rest_p = 0.0, rest_c = 0.0;
    uint32_t bins = 0;
    for (uint32_t t = 0; t < V; t++) {
        double ex = probs[t] * n;
        if (ex >= 5.0) {
            stat += (counts[t] - ex) * (counts[t] - ex) / ex;
            bins++;
        } else {
            rest_p += ex;
            rest_c += counts[t];
        }
    }
    if (rest_p >= 5.0) {
        stat += (rest_c - rest_p) * (rest_c - rest_p) / rest_p;
        bins++;
    }
    *df = bins > 1 ? bins - 1 : 1;
    return stat;
}

static void test_sampled_distribution(void **state) {
    (void)state;
    weft_engine *e = open_candidate("fast-cuda", stories_dir);
    if (!e) skip();
    const weft_model_config *cfg = weft_engine_config(e);
    uint32_t V = cfg->vocab_size;
    int32_t prompt[8];
    size_t n = make_prompt(e, prompt, 8);
    float *logits = malloc(sizeof(float) * 8 * V);
    double *probs = calloc(V, sizeof(double)), *hot = calloc(V, sizeof(double));
    int32_t *ids = malloc(sizeof(int32_t) * V);
    double *pr = malloc(sizeof(double) * V);
    uint32_t *counts = calloc(V, sizeof(uint32_t));
    void *scratch = malloc(weft_sample_scratch_bytes(V));
    assert_true(logits && probs && hot && ids && pr && counts && scratch);
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_engine_score(e, prompt, n, logits, &err), WEFT_OK);
    const float *row = logits + (n - 1) * V;
    weft_sampler_params sp;
    weft_sampler_params_default(&sp);
    sp.temperature = 1.0f;
    sp.top_p = 0.95f;
    sp.top_k = 100;
    uint32_t m = 0;
    assert_int_equal(weft_sample_distribution(row, V, &sp, NULL, 0, NULL, 0, scratch, ids, pr, &m,
                                              &err),
                     WEFT_OK);
    for (uint32_t i = 0; i < m; i++) probs[ids[i]] = pr[i];
    weft_sampler_params sh = sp;
    sh.temperature = 1.2f;
    assert_int_equal(weft_sample_distribution(row, V, &sh, NULL, 0, NULL, 0, scratch, ids, pr, &m,
                                              &err),
                     WEFT_OK);
    for (uint32_t i = 0; i < m; i++) hot[ids[i]] = pr[i];
    const uint32_t draws = 3000;
    static result one;
    for (uint32_t d = 0; d < draws; d++) {
        sp.seed = 1000003ull * (d + 1);
        generate(e, prompt, n, &sp, 1, &one);
        assert_true(one.ids[0] >= 0 && (uint32_t)one.ids[0] < V);
        assert_true(probs[one.ids[0]] > 0.0); /* never outside the host's survivors */
        counts[one.ids[0]]++;
    }
    double df, stat = chi2_stat(counts, probs, V, draws, &df);
    fprintf(stderr, "  chi-square %.1f on %.0f df (0.999 quantile %.1f)\n", stat, df,
            chi2_999(df));
    assert_true(stat < chi2_999(df));
    double df_h, stat_h = chi2_stat(counts, hot, V, draws, &df_h);
    fprintf(stderr, "  against T=1.2: chi-square %.1f on %.0f df (rejects above %.1f)\n", stat_h,
            df_h, chi2_999(df_h));
    assert_true(stat_h > chi2_999(df_h));
    free(logits);
    free(probs);
    free(hot);
    free(ids);
    free(pr);
    free(counts);
    free(scratch);
    weft_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_stories),
        cmocka_unit_test(test_greedy_models),
        cmocka_unit_test(test_kv_buckets_models),
        cmocka_unit_test(test_sampled_matches_host),
        cmocka_unit_test(test_declined_rows),
        cmocka_unit_test(test_sampled_distribution),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
