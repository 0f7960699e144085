/* Statistics for `weft eval run` (gates.h): quantiles and spread of timing samples, Pearson's
 * chi-square test with its p-value from the regularized incomplete gamma function (series
 * below a + 1, Lentz's continued fraction above, the usual split for fast convergence), and the
 * KL divergence of a candidate's top-k next-token distribution from a full reference. */
#include "eval/gates.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double weft_eval_quantile(double *v, size_t n, double q) {
    if (n == 0) return NAN;
    qsort(v, n, sizeof(double), cmp_double);
    if (q <= 0) return v[0];
    if (q >= 1) return v[n - 1];
    double h = (double)(n - 1) * q;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n) return v[n - 1];
    return v[lo] + (h - (double)lo) * (v[lo + 1] - v[lo]);
}

double weft_eval_mean(const double *v, size_t n) {
    if (n == 0) return NAN;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    return s / (double)n;
}

double weft_eval_stdev(const double *v, size_t n) {
    if (n < 2) return 0;
    double m = weft_eval_mean(v, n), s = 0;
    for (size_t i = 0; i < n; i++)
        s += (v[i] - m) * (v[i] - m);
    return sqrt(s / (double)(n - 1));
}

double weft_eval_noise(const double *v, size_t n) {
    if (n < 2) return 0;
    double m = weft_eval_mean(v, n);
    return m != 0 ? weft_eval_stdev(v, n) / fabs(m) : 0;
}

/* P(a, x) by its power series: converges quickly for x < a + 1. */
static double gamma_p_series(double a, double x) {
    double ap = a, sum = 1.0 / a, del = sum;
    for (int n = 0; n < 1000; n++) {
        ap += 1;
        del *= x / ap;
        sum += del;
        if (fabs(del) < fabs(sum) * 1e-15) break;
    }
    return sum * exp(-x + a * log(x) - lgamma(a));
}

/* Q(a, x) by its continued fraction (modified Lentz): converges quickly for x >= a + 1. */
static double gamma_q_fraction(double a, double x) {
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lgamma(a)) * h;
}

double weft_eval_gamma_q(double a, double x) {
    if (!(a > 0) || !(x >= 0)) return NAN;
    if (x == 0) return 1;
    if (x < a + 1) return 1 - gamma_p_series(a, x);
    return gamma_q_fraction(a, x);
}

double weft_eval_chi2_sf(double x, double df) {
    if (!(df > 0)) return NAN;
    if (x <= 0) return 1;
    return weft_eval_gamma_q(df / 2, x / 2);
}

double weft_eval_chi2_test(const uint64_t *observed, const double *prob, size_t k,
                           uint64_t other_observed, double *stat, double *df) {
    uint64_t total = other_observed;
    double psum = 0;
    for (size_t i = 0; i < k; i++) {
        total += observed[i];
        psum += prob[i] > 0 ? prob[i] : 0;
    }
    double prest = psum < 1 ? 1 - psum : 0;
    *stat = 0;
    *df = 0;
    if (total == 0) return 1;
    /* Walk the bins in order, the rest last; close a group once it expects >= 5 draws. A short
     * tail group joins the previous one. */
    double x2 = 0, gexp = 0, gobs = 0, last_e = 0, last_o = 0;
    size_t groups = 0;
    int have_last = 0;
    for (size_t i = 0; i <= k; i++) {
        double p = i < k ? (prob[i] > 0 ? prob[i] : 0) : prest;
        double o = i < k ? (double)observed[i] : (double)other_observed;
        gexp += p * (double)total;
        gobs += o;
        if (gexp >= 5) {
            if (have_last) {
                x2 += (last_o - last_e) * (last_o - last_e) / last_e;
                groups++;
            }
            last_e = gexp;
            last_o = gobs;
            have_last = 1;
            gexp = gobs = 0;
        }
    }
    if (gexp > 0 || gobs > 0) {
        if (have_last) {
            last_e += gexp;
            last_o += gobs;
        } else {
            last_e = gexp;
            last_o = gobs;
            have_last = last_e > 0;
        }
    }
    if (have_last && last_e > 0) {
        x2 += (last_o - last_e) * (last_o - last_e) / last_e;
        groups++;
    } else if (gobs > 0) {
        /* draws where the distribution puts no mass at all: impossible under the model */
        *stat = INFINITY;
        *df = 1;
        return 0;
    }
    *stat = x2;
    if (groups < 2) return 1;
    *df = (double)(groups - 1);
    return weft_eval_chi2_sf(x2, *df);
}

void weft_eval_log_softmax(const float *logits, uint32_t V, double *out) {
    double mx = -INFINITY;
    for (uint32_t i = 0; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double s = 0;
    for (uint32_t i = 0; i < V; i++)
        s += exp((double)logits[i] - mx);
    double lse = mx + log(s);
    for (uint32_t i = 0; i < V; i++)
        out[i] = (double)logits[i] - lse;
}

double weft_eval_kl_partition(const double *ref_lp, uint32_t V, const int32_t *ids,
                              const double *cand_lp, uint32_t k) {
    double kl = 0, ref_in = 0, cand_in = 0;
    for (uint32_t t = 0; t < k; t++) {
        int32_t id = ids[t];
        if (id < 0 || (uint32_t)id >= V) continue;
        int dup = 0;
        for (uint32_t u = 0; u < t; u++)
            if (ids[u] == id) dup = 1;
        if (dup) continue;
        double p = exp(ref_lp[id]), q = exp(cand_lp[t]);
        ref_in += p;
        cand_in += q;
        if (p > 0) kl += p * (ref_lp[id] - cand_lp[t]);
    }
    double pr = 1 - ref_in, qr = 1 - cand_in;
    if (pr > 1e-12) {
        /* the candidate claims its top k hold everything the reference spreads elsewhere */
        if (qr < 1e-12) qr = 1e-12;
        kl += pr * (log(pr) - log(qr));
    }
    return kl > 0 ? kl : 0;
}
