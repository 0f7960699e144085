/* The host sampler: turns one row of logits into one token following the fixed rule order of
 * docs/SAMPLING.md, with all randomness from a counter-based Philox-4x32-10 generator keyed by
 * the request's seed, so a seeded request draws the same uniforms on any backend and in any
 * batch. The filters work on a compacted candidate list and use partial selection (a bounded
 * heap for top-k, threshold passes for top-p and min-p) so a 152k vocabulary is never fully
 * sorted unless the filters really need it; the final draw walks the survivors in ascending id
 * order, which a device implementation can reproduce with one prefix sum and no sort. */
#include "engine/sampling.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

#define SRC "sampler"

/* ---- Philox-4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11) ------------------------------------ */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void weft_philox4x32_raw(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void weft_philox4x32(uint64_t seed, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)counter_lo, (uint32_t)(counter_lo >> 32),
                             (uint32_t)counter_hi, (uint32_t)(counter_hi >> 32)};
    weft_philox4x32_raw(ctr, key, out);
}

float weft_philox_uniform(uint64_t seed, uint64_t counter, uint32_t lane) {
    uint32_t r[4];
    weft_philox4x32(seed, lane >> 2, counter, r);
    /* The top 24 bits fill a float mantissa exactly: u = k / 2^24, k in [0, 2^24). */
    return (float)(r[lane & 3] >> 8) * (1.0f / 16777216.0f);
}

/* ---- parameters ----------------------------------------------------------------------------- */

void weft_sampler_params_default(weft_sampler_params *p) {
    memset(p, 0, sizeof(*p));
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->top_k = 0;
    p->repetition_penalty = 1.0f;
}

const weft_param_range weft_range_temperature = {"temperature", 0.0f, FLT_MAX, 0,
                                                 "a finite number >= 0"};
const weft_param_range weft_range_top_p = {"top_p", 0.0f, 1.0f, 1, "a number in (0, 1]"};
const weft_param_range weft_range_min_p = {"min_p", 0.0f, 1.0f, 0, "a number in [0, 1]"};
const weft_param_range weft_range_repetition_penalty = {"repetition_penalty", 0.0f, FLT_MAX, 1,
                                                        "a finite number > 0"};

int weft_param_in_range(const weft_param_range *r, float v) {
    return isfinite(v) && (r->lo_open ? v > r->lo : v >= r->lo) && v <= r->hi;
}

static weft_status check_params(const weft_sampler_params *p, uint32_t vocab, weft_error *err) {
    const struct {
        const weft_param_range *r;
        float v;
    } floats[] = {{&weft_range_temperature, p->temperature},
                  {&weft_range_top_p, p->top_p},
                  {&weft_range_min_p, p->min_p},
                  {&weft_range_repetition_penalty, p->repetition_penalty}};
    for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++)
        if (!weft_param_in_range(floats[i].r, floats[i].v))
            return weft_error_set(err, WEFT_ERR_INVALID, SRC, "%s: expected %s, got %g",
                                  floats[i].r->name, floats[i].r->expect, (double)floats[i].v);
    if (p->top_k < 0)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "top_k: expected >= 0 (0 = off), got %d",
                              (int)p->top_k);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "presence_penalty/frequency_penalty: expected finite values, got "
                              "%g and %g",
                              (double)p->presence_penalty, (double)p->frequency_penalty);
    if (p->n_logprobs < 0 || p->n_logprobs > WEFT_MAX_TOP_LOGPROBS)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "n_logprobs: expected 0..%d, got %d",
                              WEFT_MAX_TOP_LOGPROBS, (int)p->n_logprobs);
    if (p->n_bias && (!p->bias_ids || !p->bias_values))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "logit bias: %u entries but bias_ids or bias_values is NULL",
                              p->n_bias);
    for (uint32_t i = 0; i < p->n_bias; i++) {
        if (p->bias_ids[i] < 0 || (uint32_t)p->bias_ids[i] >= vocab)
            return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                  "logit bias entry %u: token id %d is outside the vocabulary "
                                  "(0..%u)",
                                  i, (int)p->bias_ids[i], vocab - 1);
        float b = p->bias_values[i];
        if (isnan(b) || (isinf(b) && b > 0))
            return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                  "logit bias for token %d: expected a finite value or -inf, got "
                                  "%g",
                                  (int)p->bias_ids[i], (double)b);
    }
    if (p->n_eos && !p->eos_ids)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "eos_ids: %u entries but NULL", p->n_eos);
    for (uint32_t i = 0; i < p->n_eos; i++)
        if (p->eos_ids[i] < 0 || (uint32_t)p->eos_ids[i] >= vocab)
            return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                  "eos_ids[%u]: token id %d is outside the vocabulary (0..%u)", i,
                                  (int)p->eos_ids[i], vocab - 1);
    return WEFT_OK;
}

/* ---- scratch layout ------------------------------------------------------------------------- */

/* One candidate: its weight w = exp((z - zmax) / T) relative to the most likely token (so the
 * best token has w == 1 exactly) and its id. */
typedef struct cand {
    double w;
    int32_t id;
    int32_t pad;
} cand;

size_t weft_sample_scratch_bytes(uint32_t vocab) {
    /* cand c[vocab] (id order) | cand d[vocab] (selection work) | float z[vocab] |
     * uint32 counts[vocab] */
    return (size_t)vocab * (2 * sizeof(cand) + sizeof(float) + sizeof(uint32_t));
}

#define SEEN_IN_PROMPT 0x80000000u
#define COUNT_MASK 0x7fffffffu

/* Candidate order: larger weight first; equal weights by smaller id. */
static int better(const cand *a, const cand *b) {
    if (a->w != b->w) return a->w > b->w;
    return a->id < b->id;
}

static void swap_cand(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Min-heap on `better` (the worst of the kept candidates at the root). */
static void heap_sift_down(cand *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && better(&h[m], &h[l])) m = l;
        if (r < n && better(&h[m], &h[r])) m = r;
        if (m == i) return;
        swap_cand(&h[i], &h[m]);
        i = m;
    }
}

/* Moves the k best of d[0..n) to d[0..k) (unordered) and returns the worst of them: the top-k
 * boundary. 0 < k < n. A bounded heap: O(n log k), no full sort. */
static cand select_top(cand *d, size_t n, size_t k) {
    for (size_t i = k / 2; i-- > 0;)
        heap_sift_down(d, k, i);
    for (size_t i = k; i < n; i++) {
        if (better(&d[i], &d[0])) {
            d[0] = d[i];
            heap_sift_down(d, k, 0);
        }
    }
    return d[0];
}

static const cand *median3(const cand *a, const cand *b, const cand *c) {
    if (better(a, b)) {
        if (better(b, c)) return b;
        return better(a, c) ? c : a;
    }
    if (better(a, c)) return a;
    return better(b, c) ? c : b;
}

/* The top-p boundary of d[0..n) (reordered): the element b such that the candidates better
 * than or equal to b are the shortest best-first prefix whose mass reaches target. A
 * quickselect on mass instead of rank: expected O(n), no sort. If rounding keeps the target
 * out of reach, the boundary is the worst element (everything stays). */
static cand select_mass(cand *d, size_t n, double target) {
    size_t lo = 0, hi = n;
    double acc = 0.0;
    for (;;) {
        cand piv = *median3(&d[lo], &d[lo + (hi - lo) / 2], &d[hi - 1]);
        size_t i = lo;
        double m = 0.0;
        for (size_t j = lo; j < hi; j++)
            if (better(&d[j], &piv)) {
                m += d[j].w;
                swap_cand(&d[i++], &d[j]);
            }
        for (size_t j = i; j < hi; j++)
            if (d[j].id == piv.id) {
                swap_cand(&d[i], &d[j]);
                break;
            }
        if (i > lo && acc + m >= target) {
            hi = i; /* the boundary is among the better ones */
            continue;
        }
        if (acc + m + piv.w >= target || i + 1 >= hi) return piv;
        acc += m + piv.w;
        lo = i + 1;
    }
}

/* Top alternatives of a row: the k largest values (ties: smaller id), written best first. */
static uint32_t top_of_row(const float *z, uint32_t vocab, uint32_t k, double m, double lse,
                           weft_token_logprob *out) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < vocab; i++) {
        float v = z[i];
        if (!(v > -INFINITY)) continue;
        if (n == k && !(v > z[out[n - 1].id])) continue; /* equal value keeps the smaller id */
        uint32_t pos = n < k ? n : k - 1;
        while (pos > 0 && v > z[out[pos - 1].id]) {
            out[pos] = out[pos - 1];
            pos--;
        }
        out[pos].id = (int32_t)i;
        if (n < k) n++;
    }
    for (uint32_t j = 0; j < n; j++)
        out[j].logprob = (float)((double)z[out[j].id] - m - lse);
    return n;
}

/* log-sum-exp of z relative to its max m: returns log(sum exp(z - m)); m via *m_out. */
static double log_sum_exp(const float *z, uint32_t vocab, double *m_out) {
    double m = -INFINITY;
    for (uint32_t i = 0; i < vocab; i++)
        if (z[i] > m) m = z[i];
    *m_out = m;
    if (!(m > -INFINITY)) return NAN;
    double s = 0.0;
    for (uint32_t i = 0; i < vocab; i++)
        if (z[i] > -INFINITY) s += exp((double)z[i] - m);
    return log(s);
}

/* ---- the sampler ---------------------------------------------------------------------------- */

/* What the rules leave: the processed logits z (for log-probabilities), their log-softmax terms,
 * and either the greedy token or the survivors c[0..keep) in ascending id order. */
typedef struct prepared {
    cand *c;
    float *z;
    double m0, lse0;
    int32_t greedy; /* >= 0 when temperature == 0 */
    size_t keep;
} prepared;

static weft_status prepare(const float *logits, uint32_t vocab, const weft_sampler_params *p,
                           const int32_t *prompt, size_t n_prompt, const int32_t *generated,
                           size_t n_generated, void *scratch, prepared *pr, weft_error *err) {
    if (!logits || !p || !scratch || vocab == 0)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "weft_sample: logits, params, scratch and out are required and "
                              "vocab must be > 0 (got vocab %u)",
                              vocab);
    if ((uintptr_t)scratch % sizeof(double))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC, "scratch: expected %zu-byte alignment",
                              sizeof(double));
    if ((n_prompt && !prompt) || (n_generated && !generated))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "token history: %zu prompt / %zu generated tokens but NULL array",
                              n_prompt, n_generated);
    weft_status st = check_params(p, vocab, err);
    if (st != WEFT_OK) return st;

    cand *c = scratch;
    float *z = (float *)(c + 2 * (size_t)vocab); /* after c and d */
    uint32_t *counts = (uint32_t *)(z + vocab);
    pr->c = c;
    pr->z = z;
    pr->greedy = -1;
    pr->keep = 0;
    for (uint32_t i = 0; i < vocab; i++) {
        float v = logits[i];
        if (isnan(v) || (isinf(v) && v > 0))
            return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                  "logits[%u]: expected a finite value or -inf, got %g", i,
                                  (double)v);
        z[i] = v;
    }

    /* 1. logit bias (additive, as OpenAI's logit_bias). */
    for (uint32_t i = 0; i < p->n_bias; i++)
        z[p->bias_ids[i]] += p->bias_values[i];

    /* 2. min_tokens: EOS cannot end the output before it has min_tokens tokens. */
    if ((uint64_t)n_generated < p->min_tokens)
        for (uint32_t i = 0; i < p->n_eos; i++)
            z[p->eos_ids[i]] = -INFINITY;

    /* 3-4. penalties. counts[t]: occurrences in the output, plus a flag for "in the prompt". */
    int rep = p->repetition_penalty != 1.0f;
    int pres_freq = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (rep || pres_freq) {
        memset(counts, 0, (size_t)vocab * sizeof(uint32_t));
        for (size_t i = 0; i < n_prompt; i++) {
            if (prompt[i] < 0 || (uint32_t)prompt[i] >= vocab)
                return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                      "prompt[%zu]: token id %d is outside the vocabulary (0..%u)",
                                      i, (int)prompt[i], vocab - 1);
            counts[prompt[i]] |= SEEN_IN_PROMPT;
        }
        for (size_t i = 0; i < n_generated; i++) {
            if (generated[i] < 0 || (uint32_t)generated[i] >= vocab)
                return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                                      "generated[%zu]: token id %d is outside the vocabulary "
                                      "(0..%u)",
                                      i, (int)generated[i], vocab - 1);
            if ((counts[generated[i]] & COUNT_MASK) < COUNT_MASK) counts[generated[i]]++;
        }
        /* Each distinct token is penalised once, however often it occurs: walking the history
         * and clearing the entry after use visits it once. */
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *h = pass ? generated : prompt;
            size_t n = pass ? n_generated : n_prompt;
            for (size_t i = 0; i < n; i++) {
                int32_t t = h[i];
                uint32_t cnt = counts[t];
                if (!cnt) continue;
                counts[t] = 0;
                float v = z[t];
                if (rep) v = v > 0 ? v / p->repetition_penalty : v * p->repetition_penalty;
                uint32_t k = cnt & COUNT_MASK;
                if (k) v -= (float)k * p->frequency_penalty + p->presence_penalty;
                z[t] = v;
            }
        }
    }

    /* Reported log-probabilities: log-softmax of z as it stands now (see sampling.h). */
    double m0;
    double lse0 = log_sum_exp(z, vocab, &m0);
    if (!(m0 > -INFINITY))
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "no token is left to sample: every logit is -inf after logit bias "
                              "and the min_tokens EOS mask");

    pr->m0 = m0;
    pr->lse0 = lse0;
    if (p->temperature == 0.0f) {
        /* Greedy: the first maximum, so ties go to the smallest id. */
        for (uint32_t i = 0; i < vocab; i++)
            if ((double)z[i] == m0) {
                pr->greedy = (int32_t)i;
                break;
            }
    } else {
        /* 5. temperature, folded into the weights: w = exp((z - zmax) / T) in (0, 1]. Tokens
         * whose weight underflows to 0 have probability 0 and leave the candidate list. */
        double inv_t = 1.0 / (double)p->temperature;
        size_t n = 0;
        for (uint32_t i = 0; i < vocab; i++) {
            if (!(z[i] > -INFINITY)) continue;
            double w = exp(((double)z[i] - m0) * inv_t);
            if (w > 0.0) {
                c[n].w = w;
                c[n].id = (int32_t)i;
                c[n].pad = 0;
                n++;
            }
        }
        /* n >= 1: the maximum has w == 1. */
        int use_k = p->top_k > 0 && (size_t)p->top_k < n;
        int use_p = p->top_p < 1.0f;
        int use_min = p->min_p > 0.0f;
        size_t keep = n; /* survivors: c[0..keep), ascending id */
        if (use_k || use_p || use_min) {
            /* Every filter keeps a best-first prefix of the candidates, so each is summed up
             * by its boundary element and a survivor is a candidate at least as good as every
             * boundary. The boundaries are found on a copy (d) so c keeps id order for the
             * draw; nothing is sorted. */
            cand *d = c + vocab;
            memcpy(d, c, n * sizeof(cand));
            cand bk = {0}, bp = {0};
            size_t m = n; /* d[0..m): what top-p works on */
            if (use_k) {
                bk = select_top(d, n, (size_t)p->top_k);
                m = (size_t)p->top_k;
            }
            if (use_p) {
                /* top-p is relative to the mass that top-k left. */
                double total = 0.0;
                for (size_t i = 0; i < m; i++)
                    total += d[i].w;
                bp = select_mass(d, m, (double)p->top_p * total);
            }
            keep = 0;
            for (size_t i = 0; i < n; i++) {
                const cand *x = &c[i];
                if (use_k && better(&bk, x)) continue;
                if (use_p && better(&bp, x)) continue;
                if (use_min && x->w < (double)p->min_p) continue;
                c[keep++] = *x;
            }
            /* keep >= 1: the best token (w == 1) passes every test. */
        }
        pr->keep = keep;
    }
    return WEFT_OK;
}

weft_status weft_sample(const float *logits, uint32_t vocab, const weft_sampler_params *p,
                        const int32_t *prompt, size_t n_prompt, const int32_t *generated,
                        size_t n_generated, uint64_t counter, void *scratch,
                        weft_sample_result *out, weft_error *err) {
    if (!out) return weft_error_set(err, WEFT_ERR_INVALID, SRC, "weft_sample: out is required");
    prepared pr;
    weft_status st =
        prepare(logits, vocab, p, prompt, n_prompt, generated, n_generated, scratch, &pr, err);
    if (st != WEFT_OK) return st;
    int32_t token = pr.greedy;
    if (token < 0) {
        /* 8. one draw: inverse CDF over the survivors in ascending id order. The fallback to
         * the last survivor covers a rounding shortfall of the running sum. */
        const cand *c = pr.c;
        double total = 0.0;
        for (size_t i = 0; i < pr.keep; i++)
            total += c[i].w;
        double target = (double)weft_philox_uniform(p->seed, counter, 0) * total;
        double acc = 0.0;
        token = c[pr.keep - 1].id;
        for (size_t i = 0; i < pr.keep; i++) {
            acc += c[i].w;
            if (acc > target) {
                token = c[i].id;
                break;
            }
        }
    }
    out->token = token;
    out->logprob = (float)((double)pr.z[token] - pr.m0 - pr.lse0);
    out->n_top = p->n_logprobs > 0
                     ? top_of_row(pr.z, vocab, (uint32_t)p->n_logprobs, pr.m0, pr.lse0, out->top)
                     : 0;
    return WEFT_OK;
}

weft_status weft_sample_distribution(const float *logits, uint32_t vocab,
                                     const weft_sampler_params *p, const int32_t *prompt,
                                     size_t n_prompt, const int32_t *generated, size_t n_generated,
                                     void *scratch, int32_t *ids, double *probs, uint32_t *n_out,
                                     weft_error *err) {
    if (!ids || !probs || !n_out)
        return weft_error_set(err, WEFT_ERR_INVALID, SRC,
                              "weft_sample_distribution: ids, probs and n_out are required");
    prepared pr;
    weft_status st =
        prepare(logits, vocab, p, prompt, n_prompt, generated, n_generated, scratch, &pr, err);
    if (st != WEFT_OK) return st;
    if (pr.greedy >= 0) {
        ids[0] = pr.greedy;
        probs[0] = 1.0;
        *n_out = 1;
        return WEFT_OK;
    }
    double total = 0.0;
    for (size_t i = 0; i < pr.keep; i++)
        total += pr.c[i].w;
    for (size_t i = 0; i < pr.keep; i++) {
        ids[i] = pr.c[i].id;
        probs[i] = pr.c[i].w / total;
    }
    *n_out = (uint32_t)pr.keep;
    return WEFT_OK;
}

/* ---- scoring helpers ------------------------------------------------------------------------ */

float weft_logprob_of(const float *logits, uint32_t vocab, int32_t id) {
    if (!logits || id < 0 || (uint32_t)id >= vocab) return NAN;
    double m;
    double lse = log_sum_exp(logits, vocab, &m);
    return (float)((double)logits[id] - m - lse);
}

uint32_t weft_top_logprobs(const float *logits, uint32_t vocab, uint32_t k,
                           weft_token_logprob *out) {
    if (!logits || !out || k == 0 || vocab == 0) return 0;
    double m;
    double lse = log_sum_exp(logits, vocab, &m);
    if (!(m > -INFINITY)) return 0;
    return top_of_row(logits, vocab, k, m, lse, out);
}
