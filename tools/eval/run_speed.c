/* The speed cases of `weft eval run`: prompts of 128, 1,024 and 8,192 tokens generating 256,
 * 256 and 128, each at concurrency 1, 8 and 32 (--quick: two short cases at 1 and 8). A case
 * that does not fit the model's context is shrunk to fit (the prompt first) and the result
 * says so. Each request streams; its time to first token, inter-token latency (the AIPerf
 * definition: time from first to last token over tokens - 1) and end-to-end latency are
 * taken from the event times the client stamps. A case repeats until the spread between
 * repeats is known: at least 3 repeats (quick: 2), then until the standard error of the mean of
 * the median TTFT and ITL is within 2% of it, at most 10 (quick: 3). Every KPI is reported with
 * its limit from weft_limits_compute and the fraction of that limit reached. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/gates.h"
#include "eval/run.h"
#include "util/error.h"

typedef struct speed_case {
    uint32_t prompt, gen, conc;
    uint32_t asked_prompt, asked_gen;
} speed_case;

typedef struct dvec {
    double *v;
    size_t n, cap;
} dvec;

static int dv_push(dvec *d, double x) {
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 64;
        double *p = realloc(d->v, nc * sizeof(double));
        if (!p) return -1;
        d->v = p;
        d->cap = nc;
    }
    d->v[d->n++] = x;
    return 0;
}

static double median_of(const dvec *d) {
    if (!d->n) return NAN;
    double *c = malloc(d->n * sizeof(double));
    if (!c) return NAN;
    memcpy(c, d->v, d->n * sizeof(double));
    double m = weft_eval_quantile(c, d->n, 0.5);
    free(c);
    return m;
}

static json_t *jnum(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *jarray(const dvec *d) {
    json_t *a = json_array();
    for (size_t i = 0; i < d->n; i++)
        json_array_append_new(a, jnum(d->v[i]));
    return a;
}

/* A KPI: per-repeat values, every sample (latencies), the limit and which way is better. */
static json_t *kpi(const dvec *reps, const dvec *samples, double limit, int lower_better,
                   const char *unit) {
    json_t *o = json_object();
    double v = median_of(reps);
    json_object_set_new(o, "value", jnum(v));
    json_object_set_new(o, "unit", json_string(unit));
    json_object_set_new(o, "noise", jnum(weft_eval_noise(reps->v, reps->n)));
    json_object_set_new(o, "repeats", jarray(reps));
    if (samples && samples->n) {
        double *c = malloc(samples->n * sizeof(double));
        if (c) {
            memcpy(c, samples->v, samples->n * sizeof(double));
            json_object_set_new(o, "p50", jnum(weft_eval_quantile(c, samples->n, 0.5)));
            json_object_set_new(o, "p90", jnum(weft_eval_quantile(c, samples->n, 0.9)));
            json_object_set_new(o, "p99", jnum(weft_eval_quantile(c, samples->n, 0.99)));
            free(c);
        }
    }
    if (limit > 0 && isfinite(limit) && v > 0) {
        json_object_set_new(o, "limit", json_real(limit));
        json_object_set_new(o, "fraction", json_real(lower_better ? limit / v : v / limit));
    } else {
        json_object_set_new(o, "limit", json_null());
        json_object_set_new(o, "fraction", json_null());
    }
    return o;
}

static void make_cases(weft_eval_ctx *x, speed_case *cs, size_t *n) {
    static const uint32_t full_p[] = {128, 1024, 8192}, full_g[] = {256, 256, 128};
    static const uint32_t full_c[] = {1, 8, 32};
    static const uint32_t quick_p[] = {128, 1024}, quick_g[] = {32, 16};
    static const uint32_t quick_c[] = {1, 8};
    const uint32_t *P = x->quick ? quick_p : full_p, *G = x->quick ? quick_g : full_g;
    const uint32_t *C = x->quick ? quick_c : full_c;
    size_t np = x->quick ? 2 : 3, nc = x->quick ? 2 : 3;
    uint32_t room = x->max_model_len;
    *n = 0;
    if (x->n_custom) {
        for (uint32_t i = 0; i < x->n_custom; i++) {
            const uint32_t *q = x->custom[i];
            if (q[0] + q[1] > room) {
                weft_eval_note(x, "--case %u,%u,%u does not fit the %u-token context: skipped",
                               q[0], q[1], q[2], room);
                continue;
            }
            cs[(*n)++] = (speed_case){q[0], q[1], q[2], q[0], q[1]};
        }
        weft_eval_note(x, "custom case list (--case): not the fixed suite");
        return;
    }
    for (size_t i = 0; i < np; i++) {
        uint32_t p = P[i], g = G[i];
        if (p + g > room) {
            if (g <= room / 2)
                p = room - g;
            else {
                g = room / 4 ? room / 4 : 1;
                p = room - g;
            }
            if (p < 1) p = 1;
        }
        int dup = 0;
        for (size_t k = 0; k < *n; k++)
            if (cs[k].prompt == p && cs[k].gen == g) dup = 1;
        if (p != P[i] || g != G[i])
            weft_eval_note(x,
                           "speed case prompt %u / generate %u does not fit the %u-token "
                           "context: %s prompt %u / generate %u",
                           P[i], G[i], room, dup ? "dropped as a duplicate of" : "ran as", p, g);
        if (dup) continue;
        for (size_t k = 0; k < nc; k++)
            cs[(*n)++] = (speed_case){p, g, C[k], P[i], G[i]};
    }
}

static uint64_t mix(uint64_t a) {
    a ^= a >> 33;
    a *= 0xff51afd7ed558ccdull;
    a ^= a >> 33;
    return a;
}

/* Jobs with distinct prompts (no two requests of the whole run share a prefix, so a prompt
 * cache cannot make a speed case look faster than its prefill). */
static weft_http_job *make_jobs(weft_eval_ctx *x, const speed_case *c, uint32_t n, uint64_t salt,
                                uint32_t gen, int32_t *ids) {
    weft_http_job *jobs = calloc(n, sizeof(*jobs));
    if (!jobs) return NULL;
    for (uint32_t i = 0; i < n; i++) {
        size_t off = mix(salt * 1000003u + i) % x->n_corpus;
        weft_eval_corpus_ids(x, off, c->prompt, ids);
        jobs[i].path = "/v1/completions";
        jobs[i].stream = 1;
        jobs[i].body = weft_eval_completion(x, ids, c->prompt, NULL, gen, 0.0, -1, 1);
        json_object_set_new(jobs[i].body, "ignore_eos", json_true());
    }
    return jobs;
}

static void free_jobs(weft_http_job *jobs, uint32_t n) {
    if (!jobs) return;
    for (uint32_t i = 0; i < n; i++) {
        json_decref(jobs[i].body);
        weft_http_job_free(&jobs[i]);
    }
    free(jobs);
}

static weft_status run_case(weft_eval_ctx *x, const speed_case *c, size_t ci, json_t *out,
                            weft_error *err) {
    uint32_t n_req = c->conc > (x->quick ? 2u : 4u) ? c->conc : (x->quick ? 2u : 4u);
    if (x->requests) n_req = x->requests;
    uint32_t min_rep = x->quick ? 2 : 3, max_rep = x->quick ? 3 : 10;
    int32_t *ids = malloc((size_t)c->prompt * sizeof(int32_t));
    if (!ids) return weft_error_set(err, WEFT_ERR_NOMEM, "eval run", "out of memory");
    weft_status st = WEFT_OK;
    /* warm-up at the case's concurrency, not measured: graphs, buckets and caches get built */
    weft_http_job *w = make_jobs(x, c, c->conc, 0xabcdefull + ci, 4, ids);
    if (!w) {
        free(ids);
        return weft_error_set(err, WEFT_ERR_NOMEM, "eval run", "out of memory");
    }
    st = weft_client_run_many(&x->client, w, c->conc, c->conc, err);
    free_jobs(w, c->conc);
    if (st) {
        free(ids);
        return st;
    }
    dvec ttft = {0}, itl = {0}, e2e = {0}, gap = {0};
    dvec r_ttft = {0}, r_itl = {0}, r_e2e = {0}, r_dstream = {0}, r_dtotal = {0}, r_pre = {0};
    uint32_t errors = 0, short_out = 0, rep = 0;
    double all_tokens = 0, all_events = 0;
    char first_error[512] = "";
    const char *stopped = "max repeats";
    for (rep = 0; rep < max_rep; rep++) {
        weft_http_job *jobs = make_jobs(x, c, n_req, (uint64_t)(ci + 1) * 977 + rep, c->gen, ids);
        if (!jobs) {
            st = weft_error_set(err, WEFT_ERR_NOMEM, "eval run", "out of memory");
            break;
        }
        if ((st = weft_client_run_many(&x->client, jobs, n_req, c->conc, err))) {
            free_jobs(jobs, n_req);
            break;
        }
        dvec q_ttft = {0}, q_itl = {0}, q_e2e = {0}, q_dec = {0};
        double t0 = INFINITY, t1 = 0, tokens = 0;
        for (uint32_t i = 0; i < n_req; i++) {
            weft_http_job *j = &jobs[i];
            uint32_t ntok = j->completion_tokens ? j->completion_tokens : j->n_chunks;
            if (j->error[0] || j->n_chunks == 0 || j->t_first <= 0) {
                if (!first_error[0])
                    snprintf(first_error, sizeof(first_error), "%s",
                             j->error[0] ? j->error : "no token arrived");
                errors++;
                continue;
            }
            if (ntok != c->gen) short_out++;
            double tf = j->t_first - j->t_start, te = j->t_end - j->t_start;
            double tl = j->chunk_t[j->n_chunks - 1];
            dv_push(&ttft, tf);
            dv_push(&e2e, te);
            dv_push(&q_ttft, tf);
            dv_push(&q_e2e, te);
            if (ntok > 1 && tl > j->t_first) {
                double it = (tl - j->t_first) / (double)(ntok - 1);
                dv_push(&itl, it);
                dv_push(&q_itl, it);
                dv_push(&q_dec, 1.0 / it);
            }
            for (uint32_t k = 1; k < j->n_chunks; k++)
                dv_push(&gap, j->chunk_t[k] - j->chunk_t[k - 1]);
            if (j->t_start < t0) t0 = j->t_start;
            if (j->t_end > t1) t1 = j->t_end;
            tokens += ntok;
            all_tokens += ntok;
            all_events += j->n_chunks;
        }
        free_jobs(jobs, n_req);
        double m_ttft = median_of(&q_ttft);
        dv_push(&r_ttft, m_ttft);
        dv_push(&r_itl, median_of(&q_itl));
        dv_push(&r_e2e, median_of(&q_e2e));
        dv_push(&r_dstream, median_of(&q_dec));
        dv_push(&r_dtotal, t1 > t0 ? tokens / (t1 - t0) : NAN);
        dv_push(&r_pre, m_ttft > 0 ? (double)c->prompt / m_ttft : NAN);
        free(q_ttft.v);
        free(q_itl.v);
        free(q_e2e.v);
        free(q_dec.v);
        weft_eval_log(x, "case p%u-g%u-c%u repeat %u: ttft %.4f s, itl %.5f s", c->prompt, c->gen,
                      c->conc, rep + 1, m_ttft, r_itl.v[r_itl.n - 1]);
        if (rep + 1 >= min_rep) {
            double se_t = weft_eval_noise(r_ttft.v, r_ttft.n) / sqrt((double)r_ttft.n);
            double se_i = weft_eval_noise(r_itl.v, r_itl.n) / sqrt((double)r_itl.n);
            if (se_t <= 0.02 && se_i <= 0.02) {
                stopped = "spread known";
                rep++;
                break;
            }
        }
    }
    if (!st) {
        /* limits for this case. A stream cannot go faster than a step of batch 1, whatever the
         * scheduler does, so the per-stream floors (TTFT, ITL, E2E, per-stream rate) are batch 1's
         * with the cache half way through the generation; the aggregate rate's floor is batch C's
         * (all C streams sharing each step). The prefill floor is the prompt's at batch 1. */
        weft_limits L, LC;
        int have = x->have_config && x->have_probe;
        if (have) {
            double rate = x->probe.r.gemm_bf16_flops > 0 ? x->probe.r.gemm_bf16_flops
                                                         : x->probe.r.gemm_f32_flops;
            if (x->dtype_bytes == 4 && x->probe.r.gemm_f32_flops > 0)
                rate = x->probe.r.gemm_f32_flops;
            weft_limits_compute(&x->cfg, x->weight_bytes, x->dtype_bytes, x->dtype_bytes,
                                x->probe.r.copy_bytes_per_s, rate, c->prompt + c->gen / 2,
                                c->prompt, 1, &L);
            weft_limits_compute(&x->cfg, x->weight_bytes, x->dtype_bytes, x->dtype_bytes,
                                x->probe.r.copy_bytes_per_s, rate, c->prompt + c->gen / 2,
                                c->prompt, c->conc, &LC);
        }
        char name[64];
        snprintf(name, sizeof(name), "p%u-g%u-c%u", c->prompt, c->gen, c->conc);
        json_t *k = json_object();
        json_object_set_new(k, "ttft_s", kpi(&r_ttft, &ttft, have ? L.ttft_s : 0, 1, "s"));
        json_object_set_new(k, "itl_s", kpi(&r_itl, &itl, have ? L.decode_s : 0, 1, "s"));
        json_object_set_new(
            k, "e2e_s", kpi(&r_e2e, &e2e, have ? L.ttft_s + (c->gen - 1) * L.decode_s : 0, 1, "s"));
        json_object_set_new(k, "decode_tps_stream",
                            kpi(&r_dstream, NULL, have ? 1.0 / L.decode_s : 0, 0, "tokens/s"));
        json_object_set_new(k, "decode_tps_total",
                            kpi(&r_dtotal, NULL, have ? LC.decode_tokens_per_s : 0, 0, "tokens/s"));
        json_object_set_new(k, "prefill_tps",
                            kpi(&r_pre, NULL, have ? L.prefill_tokens_per_s : 0, 0, "tokens/s"));
        json_t *g = json_object();
        if (gap.n) {
            json_object_set_new(g, "p50", jnum(weft_eval_quantile(gap.v, gap.n, 0.5)));
            json_object_set_new(g, "p90", jnum(weft_eval_quantile(gap.v, gap.n, 0.9)));
            json_object_set_new(g, "p99", jnum(weft_eval_quantile(gap.v, gap.n, 0.99)));
            json_object_set_new(g, "max", jnum(gap.v[gap.n - 1]));
        }
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(name));
        json_object_set_new(o, "prompt_tokens", json_integer(c->prompt));
        json_object_set_new(o, "gen_tokens", json_integer(c->gen));
        json_object_set_new(o, "concurrency", json_integer(c->conc));
        json_object_set_new(o, "asked",
                            json_pack("{s:i, s:i}", "prompt_tokens", (int)c->asked_prompt,
                                      "gen_tokens", (int)c->asked_gen));
        json_object_set_new(o, "adapted",
                            json_boolean(c->prompt != c->asked_prompt || c->gen != c->asked_gen));
        json_object_set_new(o, "repeats", json_integer(rep));
        json_object_set_new(o, "stopped", json_string(stopped));
        json_object_set_new(o, "requests_per_repeat", json_integer(n_req));
        json_object_set_new(o, "errors", json_integer(errors));
        if (first_error[0]) json_object_set_new(o, "first_error", json_string(first_error));
        json_object_set_new(o, "short_outputs", json_integer(short_out));
        /* more than one token per event: the server coalesces, and event times (all a client
         * can see) understate the spread of token times */
        json_object_set_new(o, "tokens_per_event",
                            jnum(all_events > 0 ? all_tokens / all_events : NAN));
        json_object_set_new(o, "kpis", k);
        json_object_set_new(o, "token_gap_s", g);
        json_object_set_new(o, "samples",
                            json_pack("{s:o, s:o, s:o}", "ttft_s", jarray(&ttft), "itl_s",
                                      jarray(&itl), "e2e_s", jarray(&e2e)));
        if (have)
            json_object_set_new(o, "limits",
                                json_pack("{s:f, s:f, s:f, s:f, s:i, s:i, s:i}", "decode_s",
                                          L.decode_s, "decode_tokens_per_s_batch",
                                          LC.decode_tokens_per_s, "prefill_tokens_per_s",
                                          L.prefill_tokens_per_s, "ttft_s", L.ttft_s, "context",
                                          (int)L.context, "prompt", (int)L.prompt, "batch",
                                          (int)LC.batch));
        json_array_append_new(out, o);
        fprintf(stderr,
                "weft eval run: case %-16s %u x %u requests: ttft p50 %.4f s, itl p50 "
                "%.5f s, %u errors\n",
                name, rep, n_req, median_of(&r_ttft), median_of(&r_itl), errors);
        if (errors)
            weft_eval_note(x, "case %s: %u requests failed (first: %s)", name, errors, first_error);
        if (short_out)
            weft_eval_note(x, "case %s: %u requests generated other than %u tokens", name,
                           short_out, c->gen);
    }
    dvec *all[] = {&ttft, &itl, &e2e, &gap, &r_ttft, &r_itl, &r_e2e, &r_dstream, &r_dtotal, &r_pre};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]->v);
    free(ids);
    return st;
}

weft_status weft_eval_speed(weft_eval_ctx *x, json_t *cases, weft_error *err) {
    speed_case cs[16];
    size_t n = 0;
    make_cases(x, cs, &n);
    for (size_t i = 0; i < n; i++) {
        weft_status st = run_case(x, &cs[i], i, cases, err);
        if (st) return st;
    }
    return WEFT_OK;
}
