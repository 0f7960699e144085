/* Tests of the host sampler: Philox against Random123's known-answer vectors, each rule alone
 * with survivors and values worked out by hand, seeded reproducibility, log-probabilities
 * against a direct log-softmax in double, and chi-square goodness-of-fit of many seeded draws
 * against the softmax distribution, including negative checks that a sampler with a wrong
 * temperature or an off-by-one top-p would fail the same test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/sampling.h"
#include "util/error.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static void *scratch_for(uint32_t vocab) {
    void *s = malloc(weft_sample_scratch_bytes(vocab));
    assert_non_null(s);
    return s;
}

static int32_t sample1(const float *logits, uint32_t vocab, const weft_sampler_params *p,
                       uint64_t counter) {
    void *s = scratch_for(vocab);
    weft_sample_result r;
    weft_error err;
    weft_error_clear(&err);
    weft_status st = weft_sample(logits, vocab, p, NULL, 0, NULL, 0, counter, s, &r, &err);
    if (st != WEFT_OK) fail_msg("weft_sample: %s", err.message);
    free(s);
    return r.token;
}

/* The survivors as a sorted id list (ascending). */
static uint32_t survivors(const float *logits, uint32_t vocab, const weft_sampler_params *p,
                          int32_t *ids, double *probs) {
    void *s = scratch_for(vocab);
    weft_error err;
    weft_error_clear(&err);
    uint32_t n = 0;
    weft_status st =
        weft_sample_distribution(logits, vocab, p, NULL, 0, NULL, 0, s, ids, probs, &n, &err);
    if (st != WEFT_OK) fail_msg("weft_sample_distribution: %s", err.message);
    free(s);
    return n;
}

static void assert_survivors(const float *logits, uint32_t vocab, const weft_sampler_params *p,
                             const int32_t *want, uint32_t n_want) {
    int32_t ids[64];
    double probs[64];
    assert_true(vocab <= 64);
    uint32_t n = survivors(logits, vocab, p, ids, probs);
    if (n != n_want) {
        fail_msg("expected %u survivors, got %u (first %d)", n_want, n, n ? ids[0] : -1);
    }
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(ids[i], want[i]);
        sum += probs[i];
    }
    assert_true(fabs(sum - 1.0) < 1e-12);
}

/* log(p) logits for a probability table, so filters can be reasoned about in probabilities. */
static void logits_from_probs(const double *pr, uint32_t n, float *out) {
    for (uint32_t i = 0; i < n; i++)
        out[i] = (float)log(pr[i]);
}

/* ---- Philox -----------------------------------------------------------------------------------
 */

static void test_philox_known_answers(void **state) {
    (void)state;
    /* Random123 kat_vectors, philox4x32_10. */
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
        uint32_t out[4];
        weft_philox4x32_raw(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            assert_int_equal(out[j], kat[i].out[j]);
    }
    /* The 64-bit wrapper maps seed -> key words (lo, hi), counters -> words (lo, hi, lo, hi). */
    uint32_t out[4];
    weft_philox4x32(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, out);
    assert_int_equal(out[0], 0xd16cfe09);
    assert_int_equal(out[3], 0x24126ea1);
    weft_philox4x32(~0ull, ~0ull, ~0ull, out);
    assert_int_equal(out[1], 0x41c83b0e);
}

static void test_philox_uniform_mapping(void **state) {
    (void)state;
    /* Lane l of counter c: word l & 3 of the block with counter words (lo c, hi c, l >> 2, 0). */
    uint64_t seed = 0x0123456789abcdefull, counter = 0x00000005deadbeefull;
    for (uint32_t lane = 0; lane < 9; lane++) {
        uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), lane >> 2, 0};
        uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, r[4];
        weft_philox4x32_raw(ctr, key, r);
        float want = (float)(r[lane & 3] >> 8) / 16777216.0f;
        assert_true(weft_philox_uniform(seed, counter, lane) == want);
    }
    /* Uniformity of the first lane over consecutive counters: chi-square over 64 bins. */
    enum { N = 200000, BINS = 64 };
    static uint32_t hist[BINS];
    double mean = 0;
    for (uint32_t i = 0; i < N; i++) {
        float u = weft_philox_uniform(42, i, 0);
        assert_true(u >= 0.0f && u < 1.0f);
        hist[(int)(u * BINS)]++;
        mean += u;
    }
    mean /= N;
    assert_true(fabs(mean - 0.5) < 0.005);
    double chi = 0, e = (double)N / BINS;
    for (int b = 0; b < BINS; b++)
        chi += (hist[b] - e) * (hist[b] - e) / e;
    assert_true(chi < 103.4); /* chi-square(63) 0.999 quantile */
}

/* ---- single rules ------------------------------------------------------------------------------
 */

static void test_greedy(void **state) {
    (void)state;
    weft_sampler_params p;
    weft_sampler_params_default(&p);
    p.temperature = 0.0f;
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -INFINITY};
    for (uint64_t seed = 0; seed < 5; seed++) {
        p.seed = seed;
        assert_int_equal(sample1(l, 6, &p, seed * 7), 1); /* tie 1 vs 3 -> lowest id */
    }
    int32_t want[] = {1};
    assert_survivors(l, 6, &p, want, 1);
    /* Filters cannot change a greedy choice. */
    p.top_k = 3;
    p.top_p = 0.1f;
    p.min_p = 0.9f;
    assert_int_equal(sample1(l, 6, &p, 0), 1);
}

static void test_top_k(void **state) {
    (void)state;
    weft_sampler_params p;
    weft_sampler_params_default(&p);
    float l[8] = {0.1f, 3.0f, 2.0f, 3.0f, -5.0f, 2.5f, 2.0f, 1.0f};
    p.top_k = 1;
    int32_t w1[] = {1}; /* tie with id 3: smaller id */
    assert_survivors(l, 8, &p, w1, 1);
    p.top_k = 2;
    int32_t w2[] = {1, 3};
    assert_survivors(l, 8, &p, w2, 2);
    p.top_k = 4;
    int32_t w4[] = {1, 2, 3, 5}; /* 2.0 tie between ids 2 and 6: id 2 */
    assert_survivors(l, 8, &p, w4, 4);
    p.top_k = 8;
    int32_t w8[] = {0, 1, 2, 3, 4, 5, 6, 7};
    assert_survivors(l, 8, &p, w8, 8);
    p.top_k = 100;
    assert_survivors(l, 8, &p, w8, 8);
    /* Probabilities after top-k are the renormalised softmax of the survivors. */
    p.top_k = 2;
    int32_t ids[8];
    double pr[8];
    assert_int_equal(survivors(l, 8, &p, ids, pr), 2);
    assert_true(fabs(pr[0] - 0.5) < 1e-12 && fabs(pr[1] - 0.5) < 1e-12);
}

static void test_top_p(void **state) {
    (void)state;
    weft_sampler_params p;
    weft_sampler_params_default(&p);
    /* probabilities by id: 0.1 0.4 0.2 0.3; best-first: 1 (0.4), 3 (0.3), 2 (0.2), 0 (0.1). */
    const double pr[4] = {0.1, 0.4, 0.2, 0.3};
    float l[4];
    logits_from_probs(pr, 4, l);
    p.top_p = 0.3f;
    int32_t a[] = {1};
    assert_survivors(l, 4, &p, a, 1);
    p.top_p = 0.65f;
    int32_t b[] = {1, 3};
    assert_survivors(l, 4, &p, b, 2);
    p.top_p = 0.75f;
    int32_t c[] = {1, 2, 3};
    assert_survivors(l, 4, &p, c, 3);
    p.top_p = 0.95f;
    int32_t d[] = {0, 1, 2, 3};
    assert_survivors(l, 4, &p, d, 4);
    p.top_p = 1e-6f; /* at least one token */
    assert_survivors(l, 4, &p, a, 1);
    /* Temperature comes first: T = 0.25 raises probabilities to the 4th power:
     * 0.0256 0.0081 0.0016 0.0001 -> 0.4 alone is 0.7232 of the mass. */
    p.temperature = 0.25f;
    p.top_p = 0.72f;
    assert_survivors(l, 4, &p, a, 1);
    p.top_p = 0.73f;
    assert_survivors(l, 4, &p, b, 2);
    /* Top-p is relative to the top-k survivors: top-2 of {0.4, 0.3} renormalised gives 4/7. */
    p.temperature = 1.0f;
    p.top_k = 2;
    p.top_p = 0.57f;
    assert_survivors(l, 4, &p, a, 1);
    p.top_p = 0.58f;
    assert_survivors(l, 4, &p, b, 2);
}

static void test_min_p(void **state) {
    (void)state;
    weft_sampler_params p;
    weft_sampler_params_default(&p);
    const double pr[5] = {0.05, 0.4, 0.2, 0.3, 0.05};
    float l[5];
    logits_from_probs(pr, 5, l);
    p.min_p = 0.45f; /* keep p >= 0.18 */
    int32_t a[] = {1, 2, 3};
    assert_survivors(l, 5, &p, a, 3);
    p.min_p = 0.6f; /* keep p >= 0.24 */
    int32_t b[] = {1, 3};
    assert_survivors(l, 5, &p, b, 2);
    p.min_p = 1.0f;
    int32_t c[] = {1};
    assert_survivors(l, 5, &p, c, 1);
    p.min_p = 0.1f; /* 0.04: everything */
    int32_t d[] = {0, 1, 2, 3, 4};
    assert_survivors(l, 5, &p, d, 5);
    /* After temperature 0.5 the ratios square: 0.2/0.4 -> 0.25, 0.3/0.4 -> 0.5625. */
    p.temperature = 0.5f;
    p.min_p = 0.3f;
    assert_survivors(l, 5, &p, b, 2);
}

static void test_penalties_exact(void **state) {
    (void)state;
    weft_sampler_params p;
    weft_sampler_params_default(&p);
    p.n_logprobs = 6;
    p.temperature = 0.0f;
    const float l[6] = {2.0f, -1.0f, 0.5f, 1.0f, -0.5f, 0.0f};
    const int32_t prompt[] = {0, 4, 0};
    const int32_t gen[] = {1, 2, 2, 2, 3, 1};
    /* expected processed logits, worked by hand:
     * repetition 2 over prompt+output {0,1,2,3,4}: 1.0, -2.0, 0.25, 0.5, -1.0, 0.0 (5 unseen)
     * presence 0.5 and frequency 0.25 over the output: 1 (x2) -= 1.0, 2 (x3) -= 1.25,
     * 3 (x1) -= 0.75 -> 1.0, -3.0, -1.0, -0.25, -1.0, 0.0 */
    const double want[6] = {1.0, -3.0, -1.0, -0.25, -1.0, 0.0};
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    void *s = scratch_for(6);
    weft_sample_result r;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_sample(l, 6, &p, prompt, 3, gen, 6, 0, s, &r, &err), WEFT_OK);
    double m = 1.0, sum = 0;
    for (int i = 0; i < 6; i++)
        sum += exp(want[i] - m);
    assert_int_equal(r.token, 0);
    assert_int_equal(r.n_top, 6);
    for (uint32_t i = 0; i < r.n_top; i++) {
        double lp = want[r.top[i].id] - m - log(sum);
        assert_true(fabs(r.top[i].logprob - lp) < 1e-6);
    }
    /* sorted best-first; -1.0 tie between 2 and 4 keeps id 2 first */
    const int32_t order[6] = {0, 5, 3, 2, 4, 1};
    for (int i = 0; i < 6; i++)
        assert_int_equal(r.top[i].id, order[i]);

    /* Repetition alone over the prompt only: presence/frequency never see the prompt. */
    weft_sampler_params_default(&p);
    p.temperature = 0.0f;
    p.n_logprobs = 6;
    p.presence_penalty = 3.0f;
    assert_int_equal(weft_sample(l, 6, &p, prompt, 3, NULL, 0, 0, s, &r, &err), WEFT_OK);
    assert_int_equal(r.token, 0); /* 2.0 untouched although 0 is in the prompt */
    p.presence_penalty = 0.0f;
    p.repetition_penalty = 4.0f;
    assert_int_equal(weft_sample(l, 6, &p, prompt, 3, NULL, 0, 0, s, &r, &err), WEFT_OK);
    assert_int_equal(r.token, 3); /* 0: 2.0 / 4 = 0.5 < 1.0 */
    free(s);
}

static void test_logit_bias_and_min_tokens(void **state) {
    (void)state;
    weft_sampler_params p;
    weft_sampler_params_default(&p);
    p.temperature = 0.0f;
    const float l[5] = {1.0f, 4.0f, 3.5f, 0.0f, 2.0f};
    int32_t bid[2] = {1, 3};
    float bval[2] = {-INFINITY, 3.6f};
    p.n_bias = 2;
    p.bias_ids = bid;
    p.bias_values = bval;
    assert_int_equal(sample1(l, 5, &p, 0), 3); /* 0 + 3.6 beats 3.5; 1 banned */
    bval[1] = 3.4f;
    assert_int_equal(sample1(l, 5, &p, 0), 2);
    /* The reported logprob includes the bias. */
    p.n_logprobs = 2;
    void *s = scratch_for(5);
    weft_sample_result r;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_sample(l, 5, &p, NULL, 0, NULL, 0, 0, s, &r, &err), WEFT_OK);
    double z[5] = {1.0, -INFINITY, 3.5, 3.4, 2.0}, sum = 0;
    for (int i = 0; i < 5; i++)
        sum += exp(z[i] - 3.5);
    assert_true(fabs(r.logprob - (0.0 - log(sum))) < 1e-6);
    assert_int_equal(r.top[1].id, 3);
    assert_true(fabs(r.top[1].logprob - (-0.1 - log(sum))) < 1e-6);

    /* min_tokens: EOS (id 1, the argmax) is masked until 3 tokens were generated. */
    weft_sampler_params_default(&p);
    p.temperature = 0.0f;
    int32_t eos[1] = {1};
    p.n_eos = 1;
    p.eos_ids = eos;
    p.min_tokens = 3;
    int32_t gen[3] = {0, 0, 0};
    assert_int_equal(weft_sample(l, 5, &p, NULL, 0, gen, 2, 0, s, &r, &err), WEFT_OK);
    assert_int_equal(r.token, 2);
    assert_int_equal(weft_sample(l, 5, &p, NULL, 0, gen, 3, 0, s, &r, &err), WEFT_OK);
    assert_int_equal(r.token, 1);
    /* Sampled, EOS never appears while masked. */
    p.temperature = 1.0f;
    for (uint64_t c = 0; c < 2000; c++) {
        assert_int_equal(weft_sample(l, 5, &p, NULL, 0, gen, 0, c, s, &r, &err), WEFT_OK);
        assert_int_not_equal(r.token, 1);
    }
    free(s);
}

static void test_errors(void **state) {
    (void)state;
    weft_sampler_params p;
    weft_sampler_params_default(&p);
    float l[3] = {0, 1, 2};
    void *s = scratch_for(3);
    weft_sample_result r;
    weft_error err;
    weft_error_clear(&err);
    p.top_p = 0.0f;
    assert_int_equal(weft_sample(l, 3, &p, NULL, 0, NULL, 0, 0, s, &r, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "top_p"));
    weft_sampler_params_default(&p);
    p.temperature = -1.0f;
    assert_int_equal(weft_sample(l, 3, &p, NULL, 0, NULL, 0, 0, s, &r, &err), WEFT_ERR_INVALID);
    /* each float parameter's edges, the range and its words shared with generation_config.json's
     * loader (engine/sampling.h) */
    static const struct {
        int which;
        float v;
        int ok;
        const char *want;
    } edge[] = {
        {0, 0.0f, 1, NULL},
        {0, INFINITY, 0, "temperature: expected a finite number >= 0, got inf"},
        {0, NAN, 0, "temperature: expected a finite number >= 0"},
        {1, 1.0f, 1, NULL},
        {1, 1.0001f, 0, "top_p: expected a number in (0, 1], got 1.0001"},
        {1, 1e-30f, 1, NULL},
        {2, 0.0f, 1, NULL},
        {2, 1.0f, 1, NULL},
        {2, -0.001f, 0, "min_p: expected a number in [0, 1], got -0.001"},
        {3, 1e-30f, 1, NULL},
        {3, 0.0f, 0, "repetition_penalty: expected a finite number > 0, got 0"},
        {3, INFINITY, 0, "repetition_penalty: expected a finite number > 0, got inf"},
    };
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
        weft_sampler_params_default(&p);
        float *f[] = {&p.temperature, &p.top_p, &p.min_p, &p.repetition_penalty};
        *f[edge[i].which] = edge[i].v;
        weft_error_clear(&err);
        weft_status st = weft_sample(l, 3, &p, NULL, 0, NULL, 0, 0, s, &r, &err);
        if (edge[i].ok ? st != WEFT_OK
                       : st != WEFT_ERR_INVALID || !strstr(err.message, edge[i].want))
            fail_msg("edge %zu: status %d, message '%s'", i, (int)st, err.message);
    }
    weft_sampler_params_default(&p);
    int32_t bad = 3;
    float bv = 1.0f;
    p.n_bias = 1;
    p.bias_ids = &bad;
    p.bias_values = &bv;
    assert_int_equal(weft_sample(l, 3, &p, NULL, 0, NULL, 0, 0, s, &r, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "outside the vocabulary"));
    weft_sampler_params_default(&p);
    p.repetition_penalty = 1.5f;
    int32_t prompt[2] = {0, -4};
    assert_int_equal(weft_sample(l, 3, &p, prompt, 2, NULL, 0, 0, s, &r, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "prompt[1]"));
    weft_sampler_params_default(&p);
    l[1] = NAN;
    assert_int_equal(weft_sample(l, 3, &p, NULL, 0, NULL, 0, 0, s, &r, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "logits[1]"));
    float none[2] = {-INFINITY, -INFINITY};
    assert_int_equal(weft_sample(none, 2, &p, NULL, 0, NULL, 0, 0, s, &r, &err), WEFT_ERR_INVALID);
    free(s);
}

/* ---- reproducibility and log-probabilities ----------------------------------------------------
 */

static uint64_t lcg(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

static double gauss(uint64_t *x) {
    double u1 = ((double)lcg(x) + 1.0) / 2147483649.0, u2 = (double)lcg(x) / 2147483648.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void test_seeded_reproducible(void **state) {
    (void)state;
    enum { V = 1000 };
    static float l[V];
    uint64_t x = 7;
    for (int i = 0; i < V; i++)
        l[i] = (float)(2.0 * gauss(&x));
    weft_sampler_params p;
    weft_sampler_params_default(&p);
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.seed = 1234;
    int32_t a[64], b[64], c[64];
    for (int i = 0; i < 64; i++) {
        a[i] = sample1(l, V, &p, (uint64_t)i);
        b[i] = sample1(l, V, &p, (uint64_t)i);
    }
    p.seed = 1235;
    int differ = 0;
    for (int i = 0; i < 64; i++) {
        c[i] = sample1(l, V, &p, (uint64_t)i);
        differ += c[i] != a[i];
    }
    assert_memory_equal(a, b, sizeof(a));
    assert_true(differ > 16);
    /* The draw is a pure function of (seed, counter): recompute it from the uniform. */
    p.seed = 99;
    int32_t ids[V];
    double pr[V];
    uint32_t n = survivors(l, V, &p, ids, pr);
    for (uint64_t k = 0; k < 50; k++) {
        double u = weft_philox_uniform(99, k, 0), acc = 0;
        int32_t want = ids[n - 1];
        for (uint32_t i = 0; i < n; i++) {
            acc += pr[i];
            if (acc > u) {
                want = ids[i];
                break;
            }
        }
        assert_int_equal(sample1(l, V, &p, k), want);
    }
}

static void test_logprobs_against_double(void **state) {
    (void)state;
    enum { V = 5000 };
    static float l[V];
    uint64_t x = 11;
    for (int i = 0; i < V; i++)
        l[i] = (float)(3.0 * gauss(&x));
    l[17] = l[18] = 12.0f; /* a tie at the top */
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++)
        m = l[i] > m ? l[i] : m;
    for (int i = 0; i < V; i++)
        s += exp((double)l[i] - m);
    double lse = m + log(s);
    weft_sampler_params p;
    weft_sampler_params_default(&p);
    p.n_logprobs = WEFT_MAX_TOP_LOGPROBS;
    p.temperature = 0.7f; /* logprobs do not depend on temperature or filters */
    p.top_k = 40;
    void *sc = scratch_for(V);
    weft_error err;
    weft_error_clear(&err);
    for (uint64_t c = 0; c < 20; c++) {
        weft_sample_result r;
        assert_int_equal(weft_sample(l, V, &p, NULL, 0, NULL, 0, c, sc, &r, &err), WEFT_OK);
        assert_true(fabs(r.logprob - ((double)l[r.token] - lse)) < 1e-5);
        assert_int_equal(r.n_top, WEFT_MAX_TOP_LOGPROBS);
        assert_int_equal(r.top[0].id, 17);
        assert_int_equal(r.top[1].id, 18);
        for (uint32_t i = 0; i < r.n_top; i++) {
            assert_true(fabs(r.top[i].logprob - ((double)l[r.top[i].id] - lse)) < 1e-5);
            if (i) assert_true(r.top[i].logprob <= r.top[i - 1].logprob);
        }
        /* No token outside the reported top-20 beats the last reported one. */
        for (int i = 0; i < V; i++) {
            int listed = 0;
            for (uint32_t j = 0; j < r.n_top; j++)
                listed |= r.top[j].id == i;
            if (!listed) assert_true(l[i] <= l[r.top[r.n_top - 1].id]);
        }
    }
    assert_true(fabs(weft_logprob_of(l, V, 123) - ((double)l[123] - lse)) < 1e-5);
    weft_token_logprob top[5];
    assert_int_equal(weft_top_logprobs(l, V, 5, top), 5);
    assert_int_equal(top[0].id, 17);
    assert_true(fabs(top[4].logprob - ((double)l[top[4].id] - lse)) < 1e-5);
    assert_true(isnan(weft_logprob_of(l, V, V)));
    free(sc);
}

/* ---- large vocabulary: partial selection against a full sort -----------------------------------
 */

typedef struct ref_item {
    double w;
    int32_t id;
} ref_item;

static int ref_cmp(const void *a, const void *b) {
    const ref_item *x = a, *y = b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return x->id - y->id;
}

/* A plain reference: full sort, then the three filters as defined in docs/SAMPLING.md. */
static uint32_t ref_survivors(const float *l, uint32_t V, double T, int k, double top_p,
                              double min_p, unsigned char *keep) {
    ref_item *it = malloc(sizeof(ref_item) * V);
    double m = -INFINITY;
    for (uint32_t i = 0; i < V; i++)
        m = l[i] > m ? l[i] : m;
    for (uint32_t i = 0; i < V; i++) {
        it[i].w = exp(((double)l[i] - m) / T);
        it[i].id = (int32_t)i;
    }
    qsort(it, V, sizeof(ref_item), ref_cmp);
    uint32_t n = V;
    while (n > 0 && it[n - 1].w == 0.0)
        n--;
    if (k > 0 && (uint32_t)k < n) n = (uint32_t)k;
    double tot = 0;
    for (uint32_t i = 0; i < n; i++)
        tot += it[i].w;
    if (top_p < 1.0) {
        double acc = 0;
        for (uint32_t i = 0; i < n; i++) {
            acc += it[i].w;
            if (acc >= top_p * tot) {
                n = i + 1;
                break;
            }
        }
    }
    uint32_t j = 0;
    while (j < n && it[j].w >= min_p)
        j++;
    n = j ? j : 1;
    memset(keep, 0, V);
    for (uint32_t i = 0; i < n; i++)
        keep[it[i].id] = 1;
    free(it);
    return n;
}

static void test_large_vocab_filters(void **state) {
    (void)state;
    enum { V = 152064 };
    float *l = malloc(sizeof(float) * V);
    int32_t *ids = malloc(sizeof(int32_t) * V);
    double *pr = malloc(sizeof(double) * V);
    unsigned char *keep = malloc(V);
    uint64_t x = 5;
    for (int i = 0; i < V; i++)
        l[i] = (float)(2.5 * gauss(&x));
    for (int i = 100; i < 110; i++)
        l[i] = 11.0f; /* ties that straddle cut points */
    const struct {
        float T;
        int k;
        float p, minp;
    } cases[] = {
        {1.0f, 0, 0.9f, 0.0f},   {0.7f, 0, 0.5f, 0.0f},    {1.3f, 0, 0.99f, 0.0f},
        {1.0f, 50, 1.0f, 0.0f},  {1.0f, 5, 1.0f, 0.0f},    {1.0f, 1000, 0.8f, 0.0f},
        {1.0f, 0, 1.0f, 0.05f},  {2.0f, 0, 0.95f, 0.001f}, {1.0f, 40, 0.9f, 0.02f},
        {5.0f, 0, 0.999f, 0.0f}, {0.05f, 0, 0.9f, 0.0f},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        weft_sampler_params p;
        weft_sampler_params_default(&p);
        p.temperature = cases[c].T;
        p.top_k = cases[c].k;
        p.top_p = cases[c].p;
        p.min_p = cases[c].minp;
        uint32_t n = survivors(l, V, &p, ids, pr);
        uint32_t want = ref_survivors(l, V, (double)p.temperature, p.top_k, (double)p.top_p,
                                      (double)p.min_p, keep);
        if (n != want) fail_msg("case %zu: %u survivors, reference %u", c, n, want);
        for (uint32_t i = 0; i < n; i++) {
            assert_true(keep[ids[i]]);
            if (i) assert_true(ids[i] > ids[i - 1]);
        }
    }
    free(l);
    free(ids);
    free(pr);
    free(keep);
}

/* ---- chi-square goodness of fit ---------------------------------------------------------------
 */

/* Upper 0.999 quantile of chi-square(df), Wilson-Hilferty. */
static double chi2_crit(int df) {
    double z = 3.090232, a = 2.0 / (9.0 * df);
    double t = 1.0 - a + z * sqrt(a);
    return df * t * t * t;
}

/* The expected distribution computed directly: softmax(l / T) over the given survivor set. */
static void expected_probs(const float *l, int V, double T, const int *alive, double *e) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++)
        if (alive[i] && l[i] > m) m = l[i];
    for (int i = 0; i < V; i++)
        s += alive[i] ? exp(((double)l[i] - m) / T) : 0.0;
    for (int i = 0; i < V; i++)
        e[i] = alive[i] ? exp(((double)l[i] - m) / T) / s : 0.0;
}

/* Pearson statistic of counts against probabilities e; a token with e == 0 that was drawn
 * makes the statistic infinite. Returns the degrees of freedom via *df. */
static double chi2_stat(const uint32_t *counts, const double *e, int V, uint32_t N, int *df) {
    double chi = 0;
    int cells = 0;
    for (int i = 0; i < V; i++) {
        double ex = e[i] * N;
        if (ex == 0.0) {
            if (counts[i]) return INFINITY;
            continue;
        }
        chi += (counts[i] - ex) * (counts[i] - ex) / ex;
        cells++;
    }
    *df = cells - 1;
    return chi;
}

static void draw_counts(const float *l, int V, const weft_sampler_params *p, uint32_t N,
                        uint32_t *counts) {
    void *s = scratch_for((uint32_t)V);
    weft_error err;
    weft_error_clear(&err);
    memset(counts, 0, sizeof(uint32_t) * (size_t)V);
    for (uint32_t i = 0; i < N; i++) {
        weft_sample_result r;
        assert_int_equal(weft_sample(l, (uint32_t)V, p, NULL, 0, NULL, 0, i, s, &r, &err), WEFT_OK);
        counts[r.token]++;
    }
    free(s);
}

static void test_chi_square(void **state) {
    (void)state;
    enum { V = 12, N = 200000 };
    /* probabilities at T = 1 (by id): a spread with a long tail */
    const float l[V] = {1.2f, 2.5f, 0.3f, -0.4f, 2.1f, 1.9f, -1.5f, 0.8f, 1.6f, -0.9f, 0.0f, 2.3f};
    uint32_t counts[V];
    double e[V];
    int df = 0;
    weft_sampler_params p;

    /* (a) plain softmax at T = 1. */
    weft_sampler_params_default(&p);
    p.seed = 20240601;
    int all[V];
    for (int i = 0; i < V; i++)
        all[i] = 1;
    draw_counts(l, V, &p, N, counts);
    expected_probs(l, V, 1.0, all, e);
    double chi = chi2_stat(counts, e, V, N, &df);
    assert_int_equal(df, V - 1);
    if (!(chi < chi2_crit(df))) fail_msg("plain softmax: chi2 %.2f >= %.2f", chi, chi2_crit(df));

    /* (b) temperature 0.7 with top-k 6 and top-p 0.8. By hand: T = 0.7 on the top-6 logits
     * (2.5, 2.3, 2.1, 1.9, 1.6, 1.2 at ids 1, 11, 4, 5, 8, 0) gives probabilities
     * .315 .237 .178 .134 .087 .049 with cumulative .315 .552 .730 .863: four survive. */
    weft_sampler_params_default(&p);
    p.seed = 777;
    p.temperature = 0.7f;
    p.top_k = 6;
    p.top_p = 0.8f;
    /* Direct: survivors of top-6 at T=0.7, then the shortest prefix reaching 0.8. */
    const int order[V] = {1, 11, 4, 5, 8, 0, 7, 2, 10, 3, 9, 6};
    int alive[V] = {0};
    {
        double w[6], tot = 0;
        for (int i = 0; i < 6; i++)
            tot += (w[i] = exp(((double)l[order[i]] - 2.5) / 0.7));
        double acc = 0;
        for (int i = 0; i < 6; i++) {
            alive[order[i]] = 1;
            acc += w[i];
            if (acc >= 0.8 * tot) break;
        }
    }
    int n_alive = 0;
    for (int i = 0; i < V; i++)
        n_alive += alive[i];
    assert_int_equal(n_alive, 4);
    draw_counts(l, V, &p, N, counts);
    expected_probs(l, V, 0.7, alive, e);
    chi = chi2_stat(counts, e, V, N, &df);
    if (!(chi < chi2_crit(df))) fail_msg("T/top-k/top-p: chi2 %.2f >= %.2f", chi, chi2_crit(df));

    /* Negative 1: the same test rejects draws made at a 10% wrong temperature. */
    weft_sampler_params wrong = p;
    wrong.temperature = 0.77f;
    draw_counts(l, V, &wrong, N, counts);
    chi = chi2_stat(counts, e, V, N, &df);
    if (!(chi > chi2_crit(df)))
        fail_msg("wrong temperature passed: chi2 %.2f <= %.2f", chi, chi2_crit(df));

    /* Negative 2: an off-by-one top-p (one token too many) is rejected... */
    int alive_plus[V];
    memcpy(alive_plus, alive, sizeof(alive));
    for (int i = 0; i < V; i++)
        if (!alive_plus[order[i]]) {
            alive_plus[order[i]] = 1;
            break;
        }
    wrong = p;
    wrong.top_p = 0.999f; /* keeps all six: a superset of the right answer */
    wrong.top_k = n_alive + 1;
    draw_counts(l, V, &wrong, N, counts);
    chi = chi2_stat(counts, e, V, N, &df);
    if (!(chi > chi2_crit(df))) fail_msg("top-p +1 passed: chi2 %.2f", chi);
    /* ...and so is one token too few, tested against the +1 expectation. */
    expected_probs(l, V, 0.7, alive_plus, e);
    draw_counts(l, V, &p, N, counts);
    chi = chi2_stat(counts, e, V, N, &df);
    if (!(chi > chi2_crit(df))) fail_msg("top-p -1 passed: chi2 %.2f", chi);

    /* (c) min-p 0.3 at T = 1.5: keeps w >= 0.3 relative to the best. */
    weft_sampler_params_default(&p);
    p.seed = 31337;
    p.temperature = 1.5f;
    p.min_p = 0.3f;
    for (int i = 0; i < V; i++)
        alive[i] = exp(((double)l[i] - 2.5) / 1.5) >= 0.3;
    draw_counts(l, V, &p, N, counts);
    expected_probs(l, V, 1.5, alive, e);
    chi = chi2_stat(counts, e, V, N, &df);
    assert_true(df >= 4);
    if (!(chi < chi2_crit(df))) fail_msg("min-p: chi2 %.2f >= %.2f", chi, chi2_crit(df));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_philox_uniform_mapping),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_penalties_exact),
        cmocka_unit_test(test_logit_bias_and_min_tokens),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_seeded_reproducible),
        cmocka_unit_test(test_logprobs_against_double),
        cmocka_unit_test(test_large_vocab_filters),
        cmocka_unit_test(test_chi_square),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
