/* The statistics of `weft eval run` (tools/eval/gates_stats.c) against published values:
 * chi-square critical values from the standard tables (NIST/SEMATECH e-Handbook, 1.3.6.7.4),
 * scipy.stats.chisquare's documented example, numpy/R type-7 quantiles, closed forms of the
 * incomplete gamma function and of the KL divergence between two Bernoulli distributions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "eval/gates_stats.c"

static void test_chi2_table(void **state) {
    (void)state;
    /* upper-tail critical values: P(X >= x) = alpha */
    struct {
        double df, x, alpha;
    } t[] = {{1, 3.841, 0.05},   {2, 13.816, 0.001},   {5, 15.086, 0.01}, {10, 18.307, 0.05},
             {30, 43.773, 0.05}, {100, 124.342, 0.05}, {3, 0.352, 0.95},  {20, 10.851, 0.95}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        double p = weft_eval_chi2_sf(t[i].x, t[i].df);
        assert_true(fabs(p - t[i].alpha) < 2e-4 * (t[i].alpha < 0.01 ? 1 : 10));
    }
    assert_true(weft_eval_chi2_sf(0, 4) == 1);
    assert_true(isnan(weft_eval_chi2_sf(1, 0)));
}

static void test_gamma_q_closed_forms(void **state) {
    (void)state;
    /* Q(1, x) = exp(-x); Q(2, x) = (1 + x) exp(-x); Q(1/2, x) = erfc(sqrt(x)) */
    double xs[] = {0.01, 0.5, 1, 2.5, 7, 30};
    for (size_t i = 0; i < 6; i++) {
        double x = xs[i];
        assert_true(fabs(weft_eval_gamma_q(1, x) - exp(-x)) < 1e-12);
        assert_true(fabs(weft_eval_gamma_q(2, x) - (1 + x) * exp(-x)) < 1e-12);
        assert_true(fabs(weft_eval_gamma_q(0.5, x) - erfc(sqrt(x))) < 1e-12);
    }
}

static void test_chi2_test_scipy_example(void **state) {
    (void)state;
    /* scipy.stats.chisquare([16, 18, 16, 14, 12, 12]): statistic 2.0, p 0.84914503608460956 */
    uint64_t obs[] = {16, 18, 16, 14, 12, 12};
    double prob[6];
    for (int i = 0; i < 6; i++)
        prob[i] = 1.0 / 6;
    double stat, df;
    double p = weft_eval_chi2_test(obs, prob, 6, 0, &stat, &df);
    assert_true(fabs(stat - 2.0) < 1e-9);
    assert_true(df == 5);
    assert_true(fabs(p - 0.84914503608460956) < 1e-9);
    /* the same with the last bin given as "the rest" */
    p = weft_eval_chi2_test(obs, prob, 5, 12, &stat, &df);
    assert_true(fabs(stat - 2.0) < 1e-9 && df == 5);
    assert_true(fabs(p - 0.84914503608460956) < 1e-9);
    /* a loaded die is rejected */
    uint64_t loaded[] = {40, 8, 8, 8, 8, 8};
    p = weft_eval_chi2_test(loaded, prob, 6, 0, &stat, &df);
    assert_true(p < 1e-6);
}

static void test_chi2_merges_small_bins(void **state) {
    (void)state;
    /* 100 draws: expected 50, 45, 3, 2 -> the last two (5 together) form one group: 3 groups */
    uint64_t obs[] = {50, 45, 3, 2};
    double prob[] = {0.5, 0.45, 0.03, 0.02};
    double stat, df;
    double p = weft_eval_chi2_test(obs, prob, 4, 0, &stat, &df);
    assert_true(df == 2);
    assert_true(fabs(stat) < 1e-12);
    assert_true(fabs(p - 1) < 1e-12);
    /* draws outside bins that hold all the mass join the last group (rounding in the top-k
     * probabilities must not make a rare token look impossible) */
    uint64_t obs2[] = {50, 49};
    double prob2[] = {0.5, 0.5};
    p = weft_eval_chi2_test(obs2, prob2, 2, 1, &stat, &df);
    assert_true(df == 1 && fabs(stat) < 1e-12);
}

static void test_quantiles(void **state) {
    (void)state;
    double a[] = {4, 1, 3, 2};
    assert_true(fabs(weft_eval_quantile(a, 4, 0.9) - 3.7) < 1e-12); /* numpy.percentile 90 */
    double b[] = {40, 15, 50, 35, 20};
    assert_true(fabs(weft_eval_quantile(b, 5, 0.4) - 29.0) < 1e-12); /* R quantile type 7 */
    double c[] = {7};
    assert_true(weft_eval_quantile(c, 1, 0.99) == 7);
    assert_true(isnan(weft_eval_quantile(c, 0, 0.5)));
    double d[] = {2, 4, 4, 4, 5, 5, 7, 9};
    assert_true(fabs(weft_eval_mean(d, 8) - 5) < 1e-12);
    assert_true(fabs(weft_eval_stdev(d, 8) - sqrt(32.0 / 7)) < 1e-12);
    assert_true(fabs(weft_eval_noise(d, 8) - sqrt(32.0 / 7) / 5) < 1e-12);
    assert_true(weft_eval_noise(d, 1) == 0);
}

static void test_kl(void **state) {
    (void)state;
    /* KL(Bernoulli(0.5) || Bernoulli(0.25)) = 0.5 ln 2 + 0.5 ln(2/3) */
    float logits[2] = {3.0f, 3.0f};
    double lp[2];
    weft_eval_log_softmax(logits, 2, lp);
    assert_true(fabs(lp[0] - log(0.5)) < 1e-12);
    int32_t ids[2] = {1, 0};
    double cl[2] = {log(0.75), log(0.25)};
    double want = 0.5 * log(2.0) + 0.5 * log(2.0 / 3.0);
    assert_true(fabs(weft_eval_kl_partition(lp, 2, ids, cl, 2) - want) < 1e-12);
    /* only the top 1 given: the partition {0}, {1} is the same here, so still exact */
    int32_t id1[1] = {1};
    double c1[1] = {log(0.75)};
    assert_true(fabs(weft_eval_kl_partition(lp, 2, id1, c1, 1) - want) < 1e-12);
    /* identical distributions: 0; duplicates and ids out of range are ignored */
    float l4[4] = {1.0f, 2.0f, 0.5f, -1.0f};
    double r4[4];
    weft_eval_log_softmax(l4, 4, r4);
    int32_t i4[6] = {1, 0, 1, 9, 2, -3};
    double c4[6] = {r4[1], r4[0], r4[1], -0.1, r4[2], -0.1};
    assert_true(fabs(weft_eval_kl_partition(r4, 4, i4, c4, 6)) < 1e-12);
    /* coarse-graining is a lower bound of the full KL */
    double q4[4] = {log(0.1), log(0.2), log(0.3), log(0.4)};
    double full = 0;
    for (int v = 0; v < 4; v++)
        full += exp(r4[v]) * (r4[v] - q4[v]);
    int32_t all[4] = {0, 1, 2, 3};
    assert_true(fabs(weft_eval_kl_partition(r4, 4, all, q4, 4) - full) < 1e-12);
    int32_t two[2] = {3, 2};
    double q2[2] = {q4[3], q4[2]};
    double part = weft_eval_kl_partition(r4, 4, two, q2, 2);
    assert_true(part > 0 && part < full);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chi2_table),
        cmocka_unit_test(test_gamma_q_closed_forms),
        cmocka_unit_test(test_chi2_test_scipy_example),
        cmocka_unit_test(test_chi2_merges_small_bins),
        cmocka_unit_test(test_quantiles),
        cmocka_unit_test(test_kl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
