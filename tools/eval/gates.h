/* The arithmetic behind `weft eval run`'s numbers and gates: quantiles and spread of the speed
 * samples, the next-token distribution distances of the quality gate, and the chi-square test
 * of the sampling gate. Pure functions of their inputs (gates_stats.c), so they are tested
 * without a server. */
#ifndef WEFT_TOOLS_EVAL_GATES_H
#define WEFT_TOOLS_EVAL_GATES_H

#include <stddef.h>
#include <stdint.h>

/* ---- samples ------------------------------------------------------------------------------ */
/* Quantile q in [0,1] of v[0..n) with linear interpolation between order statistics (the
 * "type 7" definition numpy and R use by default). Sorts v in place. NaN when n == 0. */
double weft_eval_quantile(double *v, size_t n, double q);
double weft_eval_mean(const double *v, size_t n);
/* Sample standard deviation (n - 1 in the denominator); 0 when n < 2. */
double weft_eval_stdev(const double *v, size_t n);
/* Run-to-run spread: stdev / mean of per-repeat values (0 when n < 2 or mean == 0). */
double weft_eval_noise(const double *v, size_t n);

/* ---- the sampling gate -------------------------------------------------------------------- */
/* Regularized upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a). */
double weft_eval_gamma_q(double a, double x);
/* P(X >= x) for X ~ chi-square with df degrees of freedom. */
double weft_eval_chi2_sf(double x, double df);
/* Pearson's test of observed counts against expected probabilities over k bins (the
 * probabilities need not sum to 1: the rest is one more bin). Bins expected below 5 draws are
 * merged, in order, into their neighbours. Returns the p-value; *stat and *df receive the
 * statistic and degrees of freedom (df 0: too few draws to test, p-value 1). */
double weft_eval_chi2_test(const uint64_t *observed, const double *prob, size_t k,
                           uint64_t other_observed, double *stat, double *df);

/* ---- the quality gate --------------------------------------------------------------------- */
/* Log-softmax of a row of logits (V) into out (V), in double precision. */
void weft_eval_log_softmax(const float *logits, uint32_t V, double *out);
/* KL(reference || candidate) at one position. ref_lp: the reference's log-probabilities over
 * the whole vocabulary (V). The candidate gives only its top k (ids, logprobs): the KL is
 * taken over the partition {each of those tokens} + {every other token}, which is exact when
 * k covers the support and otherwise a lower bound of the full KL (coarse-graining never
 * increases a KL divergence). Ids outside [0, V) or repeated are ignored. */
double weft_eval_kl_partition(const double *ref_lp, uint32_t V, const int32_t *ids,
                              const double *cand_lp, uint32_t k);

#endif
