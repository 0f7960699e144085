/* The host sampler: logits of one request to one token, with a counter-based Philox RNG so a
 * seeded request gives the same tokens on any backend. The rule order is documented in
 * docs/SAMPLING.md and fixed: logit bias -> min_tokens (EOS masked) -> repetition penalty ->
 * presence/frequency penalties -> (greedy if temperature == 0) -> temperature -> top-k ->
 * top-p -> min-p -> draw. Ties in top-k/top-p go to the smaller id; top-p is relative to the
 * top-k survivors' mass; min-p to the most likely token. The draw is one Philox uniform u
 * (lane 0 of this token's counter) and an inverse CDF over the survivors in ascending id order.
 * Log-probabilities (of the chosen token and the alternatives) are the log-softmax of the logits
 * after logit bias, the min_tokens mask and the penalties, before temperature and the filters
 * (so they do not depend on temperature, top-k, top-p or min-p). */
#ifndef WEFT_ENGINE_SAMPLING_H
#define WEFT_ENGINE_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

#include "weft/plugin.h"

/* Philox-4x32-10: four 32-bit outputs for key = (seed low 32 bits, seed high 32 bits) and
 * counter words (lo(counter_lo), hi(counter_lo), lo(counter_hi), hi(counter_hi)). */
void weft_philox4x32(uint64_t seed, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]);
/* A uniform float in [0, 1) for draw `lane` of token `counter` of a request with `seed`:
 * word (lane & 3) of weft_philox4x32(seed, lane >> 2, counter), top 24 bits, times 2^-24. */
float weft_philox_uniform(uint64_t seed, uint64_t counter, uint32_t lane);
/* The bare generator on Random123's terms (counter words ctr[0..3], key words key[0..1]), for
 * known-answer tests and for device code that must match it bit for bit. */
void weft_philox4x32_raw(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#define WEFT_MAX_TOP_LOGPROBS 20

typedef struct weft_sampler_params {
    float temperature;        /* 0 = greedy */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    int32_t top_k;            /* 0 = off */
    float repetition_penalty; /* 1 = off (HF semantics, over prompt and output) */
    float presence_penalty;   /* 0 = off (OpenAI semantics, over output) */
    float frequency_penalty;  /* 0 = off */
    uint64_t seed;
    int32_t n_logprobs; /* top alternatives to report, 0..WEFT_MAX_TOP_LOGPROBS */
    uint32_t n_bias;
    const int32_t *bias_ids;
    const float *bias_values;
    uint32_t min_tokens; /* EOS ids masked until this many tokens were generated */
    uint32_t n_eos;
    const int32_t *eos_ids;
} weft_sampler_params;

void weft_sampler_params_default(weft_sampler_params *p);

/* The values the sampler accepts for one float parameter: finite, lo <= v (lo < v when lo_open)
 * and v <= hi; `expect` says so in words. One definition for the sampler's own check and for
 * generation_config.json's loader (files/config.c), which holds a file's defaults to the same
 * range when the model loads, on the float the sampler would see. */
typedef struct weft_param_range {
    const char *name; /* the parameter, as in weft_sampler_params and generation_config.json */
    float lo, hi;
    int lo_open;
    const char *expect; /* "a number in (0, 1]" */
} weft_param_range;
extern const weft_param_range weft_range_temperature, weft_range_top_p, weft_range_min_p,
    weft_range_repetition_penalty;
int weft_param_in_range(const weft_param_range *r, float v);

typedef struct weft_token_logprob {
    int32_t id;
    float logprob;
} weft_token_logprob;

typedef struct weft_sample_result {
    int32_t token;
    float logprob;
    uint32_t n_top;
    weft_token_logprob top[WEFT_MAX_TOP_LOGPROBS];
} weft_sample_result;

/* logits: (vocab) f32, not modified; NaN and +inf are refused, -inf means "never".
 * scratch: caller-owned, 8-byte aligned (malloc is), at least weft_sample_scratch_bytes.
 * counter: index of the token in the request (0 for the first generated token). */
size_t weft_sample_scratch_bytes(uint32_t vocab);
weft_status weft_sample(const float *logits, uint32_t vocab, const weft_sampler_params *p,
                        const int32_t *prompt, size_t n_prompt, const int32_t *generated,
                        size_t n_generated, uint64_t counter, void *scratch,
                        weft_sample_result *out, weft_error *err);

/* The distribution the draw of weft_sample uses, after every rule: the survivors in ascending id
 * order (the draw's order) with their probabilities. ids and probs hold up to vocab entries;
 * greedy gives one token with probability 1. For tests and for checking a device sampler. */
weft_status weft_sample_distribution(const float *logits, uint32_t vocab,
                                     const weft_sampler_params *p, const int32_t *prompt,
                                     size_t n_prompt, const int32_t *generated, size_t n_generated,
                                     void *scratch, int32_t *ids, double *probs, uint32_t *n_out,
                                     weft_error *err);

/* log-softmax helpers for scoring: logprob of `id` and the top-k alternatives of a row. */
float weft_logprob_of(const float *logits, uint32_t vocab, int32_t id);
uint32_t weft_top_logprobs(const float *logits, uint32_t vocab, uint32_t k,
                           weft_token_logprob *out);

#endif
