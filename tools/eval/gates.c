/* The gates of `weft eval run`: checks through the candidate's own API that decide whether its
 * speed result counts. Each says why it passed or failed and keeps the evidence (the first
 * mismatch, the statistic, the thresholds). They run in two halves around the speed cases so
 * that "after a long history of other requests" is literally true:
 *   before: the cold prompt-cache turn; the greedy set serially (A); the greedy set at
 *           concurrency 32 (B)                                     -> batched_equals_serial
 *   after:  sampling (chi-square of seeded draws against /v1/score), quality (KL and perplexity
 *           against stored fp32 reference logits), retrieval (facts at the start, middle and end
 *           of long prompts, against the reference candidate's answers), the warm follow-up
 *           turn (prompt_cache), the greedy set again (A') -> repeatable, and, when the
 *           candidate drafts, its greedy set against the reference candidate's (speculative). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/gates.h"
#include "eval/run.h"
#include "files/safetensors.h"
#include "util/error.h"

#define GREEDY_PROMPTS 32
#define BATCH_CONCURRENCY 32
#define SCORE_TOP 20 /* the most /v1/score returns (WEFT_MAX_TOP_LOGPROBS) */
#define SAMPLING_ALPHA 1e-4

/* State carried from the first half to the second. */
static struct {
    json_t *serial; /* array of {text, finish} */
    char *cold;     /* prompt cache: the cold answer */
    int cold_ok;
} g_state;

void weft_eval_gates_free(void) {
    json_decref(g_state.serial);
    free(g_state.cold);
    memset(&g_state, 0, sizeof(g_state));
}

/* ---- helpers ------------------------------------------------------------------------------- */
static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static void greedy_prompt(size_t i, char *buf, size_t cap) {
    weft_eval_corpus_piece(i * 3 + 1, 6 + (i % 5) * 7, buf, cap);
}

static uint32_t greedy_tokens(const weft_eval_ctx *x) {
    return x->quick ? 16 : 48;
}

/* Runs the greedy set at a concurrency; returns an array of {text, finish} or NULL with err. */
static json_t *greedy_set(weft_eval_ctx *x, uint32_t conc, weft_error *err) {
    weft_http_job jobs[GREEDY_PROMPTS];
    memset(jobs, 0, sizeof(jobs));
    char p[1024];
    for (size_t i = 0; i < GREEDY_PROMPTS; i++) {
        greedy_prompt(i, p, sizeof(p));
        jobs[i].path = "/v1/completions";
        jobs[i].body = weft_eval_completion(x, NULL, 0, p, greedy_tokens(x), 0.0, -1, 0);
    }
    weft_status st = weft_client_run_many(&x->client, jobs, GREEDY_PROMPTS, conc, err);
    json_t *out = st ? NULL : json_array();
    for (size_t i = 0; i < GREEDY_PROMPTS; i++) {
        if (out)
            json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "text",
                                                 jobs[i].text ? jobs[i].text : "", "finish",
                                                 jobs[i].finish_reason, "error", jobs[i].error));
        json_decref(jobs[i].body);
        weft_http_job_free(&jobs[i]);
    }
    return out;
}

static int set_errors(json_t *set, char *first, size_t cap) {
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(set, i, e) {
        const char *m = json_string_value(json_object_get(e, "error"));
        if (m && *m) {
            if (!n) snprintf(first, cap, "prompt %zu: %s", i, m);
            n++;
        }
    }
    return n;
}

/* Compares two greedy sets; 0 when equal, else fills why and detail. */
static int compare_sets(json_t *a, json_t *b, const char *an, const char *bn, char *why, size_t cap,
                        json_t **detail) {
    size_t n = json_array_size(a);
    if (n != json_array_size(b)) {
        snprintf(why, cap, "%s has %zu outputs, %s %zu", an, n, bn, json_array_size(b));
        return 1;
    }
    size_t diff = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        const char *ta = json_string_value(json_object_get(json_array_get(a, i), "text"));
        const char *tb = json_string_value(json_object_get(json_array_get(b, i), "text"));
        if (!ta || !tb || strcmp(ta, tb)) {
            if (first == n) first = i;
            diff++;
        }
    }
    if (!diff) return 0;
    const char *ta = json_string_value(json_object_get(json_array_get(a, first), "text"));
    const char *tb = json_string_value(json_object_get(json_array_get(b, first), "text"));
    snprintf(why, cap,
             "%zu of %zu greedy outputs differ; first at prompt %zu: %s \"%.80s\" vs "
             "%s \"%.80s\"",
             diff, n, first, an, ta ? ta : "", bn, tb ? tb : "");
    *detail = json_pack("{s:i, s:i, s:i, s:s, s:s}", "differ", (int)diff, "of", (int)n, "first",
                        (int)first, an, ta ? ta : "", bn, tb ? tb : "");
    return 1;
}

/* ---- prompt cache -------------------------------------------------------------------------- */
static void conversation(char *p1, char *p2, size_t cap) {
    char a[512], b[512], c[512];
    weft_eval_corpus_piece(40, 48, a, sizeof(a));
    weft_eval_corpus_piece(60, 20, b, sizeof(b));
    weft_eval_corpus_piece(75, 12, c, sizeof(c));
    snprintf(p1, cap, "%s %s", a, b);
    snprintf(p2, cap, "%s %s %s", a, b, c);
}

static char *one_completion(weft_eval_ctx *x, const char *prompt, uint32_t max_tokens, char *why,
                            size_t cap) {
    json_t *b = weft_eval_completion(x, NULL, 0, prompt, max_tokens, 0.0, -1, 0);
    weft_http_job j;
    memset(&j, 0, sizeof(j));
    j.path = "/v1/completions";
    j.body = b;
    weft_error e;
    weft_error_clear(&e);
    char *out = NULL;
    if (weft_client_run_many(&x->client, &j, 1, 1, &e))
        snprintf(why, cap, "%s", e.message);
    else if (j.error[0])
        snprintf(why, cap, "%s", j.error);
    else
        out = xstrdup(j.text ? j.text : "");
    json_decref(b);
    weft_http_job_free(&j);
    return out;
}

/* ---- sampling ------------------------------------------------------------------------------ */
typedef struct bin {
    char text[128];
    double p;
    uint64_t seen;
} bin;

static void sampling_gate(weft_eval_ctx *x) {
    const uint32_t draws = x->quick ? 300 : 1500;
    json_t *detail = json_array();
    double worst_p = 1;
    char worst[600] = "";
    for (int pi = 0; pi < 2; pi++) {
        char text[512];
        weft_eval_corpus_piece(pi ? 90 : 15, 10, text, sizeof(text));
        int32_t *ids = NULL;
        size_t n = 0;
        weft_error e;
        weft_error_clear(&e);
        if (weft_eval_tokenize(x, text, &ids, &n, &e) || n == 0) {
            free(ids);
            weft_eval_gate_add(x, "sampling", "fail", detail,
                               "cannot tokenize the sampling prompt: %s", e.message);
            return;
        }
        /* the distribution after the prompt: score prompt + one more token, last position */
        json_t *tk = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(tk, json_integer(ids[i]));
        json_array_append_new(tk, json_integer(ids[0]));
        json_t *body = json_pack("{s:s, s:o, s:i}", "model", x->model_name, "tokens", tk,
                                 "top_logprobs", SCORE_TOP);
        json_t *r = NULL;
        long http = 0;
        weft_status st = weft_client_post(&x->client, "/v1/score", body, &http, &r, &e);
        json_decref(body);
        json_t *pos = json_object_get(r, "positions");
        json_t *last = json_array_get(pos, json_array_size(pos) - 1);
        json_t *top = json_object_get(last, "top_logprobs");
        if (st || http != 200 || !json_is_array(top) || json_array_size(top) == 0) {
            weft_eval_gate_add(x, "sampling", "fail", detail,
                               "/v1/score did not give the next-token distribution (HTTP %ld%s%s)",
                               http, st ? ": " : "", st ? e.message : "");
            json_decref(r);
            free(ids);
            return;
        }
        bin bins[SCORE_TOP];
        size_t nb = 0;
        size_t i;
        json_t *t;
        json_array_foreach(top, i, t) {
            const char *s = json_string_value(json_object_get(t, "text"));
            double lp = json_number_value(json_object_get(t, "logprob"));
            if (!s) s = "";
            size_t k = 0;
            while (k < nb && strcmp(bins[k].text, s))
                k++;
            if (k == nb) {
                if (nb == SCORE_TOP) continue;
                snprintf(bins[nb].text, sizeof(bins[nb].text), "%s", s);
                bins[nb].p = 0;
                bins[nb].seen = 0;
                nb++;
            }
            bins[k].p += exp(lp);
        }
        json_decref(r);
        /* seeded draws of one token at temperature 1 */
        weft_http_job *jobs = calloc(draws, sizeof(*jobs));
        if (!jobs) {
            free(ids);
            weft_eval_gate_add(x, "sampling", "fail", detail, "out of memory");
            return;
        }
        for (uint32_t d = 0; d < draws; d++) {
            jobs[d].path = "/v1/completions";
            jobs[d].body = weft_eval_completion(x, ids, n, NULL, 1, 1.0,
                                                (int64_t)x->seed * 100003 + d + pi * 7777777, 0);
            json_object_set_new(jobs[d].body, "logprobs", json_integer(0));
        }
        st = weft_client_run_many(&x->client, jobs, draws, 8, &e);
        uint64_t other = 0, failed = 0;
        char ferr[512] = "";
        for (uint32_t d = 0; d < draws; d++) {
            json_t *lp = json_object_get(
                json_array_get(json_object_get(jobs[d].response, "choices"), 0), "logprobs");
            const char *s = json_string_value(json_array_get(json_object_get(lp, "tokens"), 0));
            if (jobs[d].error[0] || !s) {
                if (!failed)
                    snprintf(ferr, sizeof(ferr), "%s",
                             jobs[d].error[0] ? jobs[d].error
                                              : "no logprobs.tokens[0] in the answer");
                failed++;
            } else {
                size_t k = 0;
                while (k < nb && strcmp(bins[k].text, s))
                    k++;
                if (k < nb)
                    bins[k].seen++;
                else
                    other++;
            }
            json_decref(jobs[d].body);
            weft_http_job_free(&jobs[d]);
        }
        free(jobs);
        free(ids);
        if (st || failed) {
            weft_eval_gate_add(x, "sampling", "fail", detail, "%llu of %u draws failed: %s",
                               (unsigned long long)failed, draws, st ? e.message : ferr);
            return;
        }
        uint64_t obs[SCORE_TOP];
        double prob[SCORE_TOP];
        for (size_t k = 0; k < nb; k++) {
            obs[k] = bins[k].seen;
            prob[k] = bins[k].p;
        }
        double stat = 0, df = 0;
        double pv = weft_eval_chi2_test(obs, prob, nb, other, &stat, &df);
        json_t *b = json_array();
        for (size_t k = 0; k < nb; k++)
            json_array_append_new(b, json_pack("{s:s, s:f, s:I}", "text", bins[k].text, "p",
                                               bins[k].p, "seen", (json_int_t)bins[k].seen));
        json_array_append_new(detail,
                              json_pack("{s:s, s:i, s:f, s:f, s:f, s:I, s:o}", "prompt", text,
                                        "draws", (int)draws, "chi2", stat, "df", df, "p_value", pv,
                                        "other", (json_int_t)other, "bins", b));
        if (pv < worst_p) {
            worst_p = pv;
            snprintf(worst, sizeof(worst), "prompt %d: chi-square %.2f on %.0f degrees of freedom",
                     pi, stat, df);
        }
    }
    if (worst_p < SAMPLING_ALPHA)
        weft_eval_gate_add(x, "sampling", "fail", detail,
                           "sampled tokens do not follow /v1/score's distribution: %s, p = %.3g "
                           "< %g",
                           worst, worst_p, SAMPLING_ALPHA);
    else
        weft_eval_gate_add(x, "sampling", "pass", detail,
                           "seeded draws follow /v1/score's distribution (smallest p = %.3g >= "
                           "%g)",
                           worst_p, SAMPLING_ALPHA);
}

/* ---- quality ------------------------------------------------------------------------------- */
weft_status weft_eval_gate_quality(weft_eval_ctx *x, weft_error *err) {
    (void)err;
    if (!x->reference_path) {
        weft_eval_gate_add(x, "quality", "fail", NULL,
                           "no reference logits: pass --reference FILE or --model DIR holding "
                           "reference.safetensors (tools/scripts/hf_reference.py makes one)");
        return WEFT_OK;
    }
    weft_safetensors *st = NULL;
    weft_error e;
    weft_error_clear(&e);
    if (weft_safetensors_open_file(x->reference_path, &st, &e)) {
        weft_eval_gate_add(x, "quality", "fail", NULL, "cannot read the reference logits: %s: %s",
                           e.source, e.message);
        return WEFT_OK;
    }
    const weft_st_tensor *ti = weft_safetensors_find(st, "input_ids");
    const weft_st_tensor *tl = weft_safetensors_find(st, "logits");
    if (!ti || !tl || ti->dtype != WEFT_DTYPE_I32 || ti->rank != 1 || tl->dtype != WEFT_DTYPE_F32 ||
        tl->rank != 2 || tl->shape[0] != ti->shape[0] || tl->shape[1] <= 0 || ti->shape[0] < 2) {
        weft_eval_gate_add(x, "quality", "fail", NULL,
                           "%s: expected input_ids I32 [T] and logits F32 [T, V] with T >= 2",
                           x->reference_path);
        weft_safetensors_close(st);
        return WEFT_OK;
    }
    size_t T = (size_t)ti->shape[0];
    uint32_t V = (uint32_t)tl->shape[1];
    if (T > x->max_model_len) T = x->max_model_len;
    const int32_t *ids = (const int32_t *)ti->data;
    const float *logits = (const float *)tl->data;
    if (x->vocab && x->vocab != V) {
        weft_eval_gate_add(x, "quality", "fail", NULL,
                           "%s: the reference has %u logits per position, the model's vocabulary "
                           "%u",
                           x->reference_path, V, x->vocab);
        weft_safetensors_close(st);
        return WEFT_OK;
    }
    json_t *tk = json_array();
    for (size_t i = 0; i < T; i++)
        json_array_append_new(tk, json_integer(ids[i]));
    json_t *body = json_pack("{s:s, s:o, s:i}", "model", x->model_name, "tokens", tk,
                             "top_logprobs", SCORE_TOP);
    json_t *r = NULL;
    long http = 0;
    weft_status s2 = weft_client_post(&x->client, "/v1/score", body, &http, &r, &e);
    json_decref(body);
    json_t *pos = json_object_get(r, "positions");
    if (s2 || http != 200 || json_array_size(pos) != T - 1) {
        weft_eval_gate_add(x, "quality", "fail", NULL,
                           "/v1/score for %zu reference tokens: expected HTTP 200 with %zu "
                           "positions, found HTTP %ld with %zu%s%s",
                           T, T - 1, http, json_array_size(pos), s2 ? ": " : "",
                           s2 ? e.message : "");
        json_decref(r);
        weft_safetensors_close(st);
        return WEFT_OK;
    }
    double *lp = malloc(V * sizeof(double)), *kls = malloc(T * sizeof(double));
    double nll_c = 0, nll_r = 0;
    size_t n = 0;
    uint32_t kmax = 0;
    const char *bad = NULL;
    for (size_t i = 1; lp && kls && i < T; i++) {
        json_t *p = json_array_get(pos, i - 1);
        json_t *top = json_object_get(p, "top_logprobs");
        json_t *lpj = json_object_get(p, "logprob");
        if (json_integer_value(json_object_get(p, "index")) != (json_int_t)i ||
            json_integer_value(json_object_get(p, "token")) != ids[i] || !json_is_number(lpj) ||
            !json_is_array(top)) {
            bad = "a position whose index, token, logprob or top_logprobs is not as sent";
            break;
        }
        weft_eval_log_softmax(logits + (i - 1) * (size_t)V, V, lp);
        int32_t tid[SCORE_TOP];
        double tlp[SCORE_TOP];
        uint32_t k = 0;
        size_t q;
        json_t *t;
        json_array_foreach(top, q, t) {
            if (k == SCORE_TOP) break;
            tid[k] = (int32_t)json_integer_value(json_object_get(t, "token"));
            tlp[k] = json_number_value(json_object_get(t, "logprob"));
            k++;
        }
        if (k > kmax) kmax = k;
        kls[n++] = weft_eval_kl_partition(lp, V, tid, tlp, k);
        nll_c -= json_number_value(lpj);
        nll_r -= lp[ids[i]];
    }
    json_decref(r);
    weft_safetensors_close(st);
    if (!lp || !kls || bad) {
        weft_eval_gate_add(x, "quality", "fail", NULL, "/v1/score: %s",
                           bad ? bad : "out of memory");
        free(lp);
        free(kls);
        return WEFT_OK;
    }
    double mean = weft_eval_mean(kls, n), p99 = weft_eval_quantile(kls, n, 0.99);
    double ratio = exp((nll_c - nll_r) / (double)n);
    int exact = kmax >= V;
    json_t *d =
        json_pack("{s:s, s:i, s:i, s:b, s:f, s:f, s:f, s:f, s:f, s:{s:f, s:f, s:f}}", "reference",
                  x->reference_path, "positions", (int)n, "top_k", (int)kmax, "exact", exact,
                  "mean_kl", mean, "p99_kl", p99, "ppl_ratio", ratio, "ppl_candidate",
                  exp(nll_c / (double)n), "ppl_reference", exp(nll_r / (double)n), "thresholds",
                  "mean_kl", x->mean_kl, "p99_kl", x->p99_kl, "ppl_ratio", x->ppl_ratio);
    free(lp);
    free(kls);
    char why[512];
    int fail = 0;
    size_t w = (size_t)snprintf(why, sizeof(why), "over %zu positions%s:", n,
                                exact ? "" : " (KL over each candidate's top 20 + the rest)");
    struct {
        const char *name;
        double v, lim;
    } c[] = {{"mean KL", mean, x->mean_kl},
             {"p99 KL", p99, x->p99_kl},
             {"perplexity ratio", ratio, x->ppl_ratio}};
    for (int i = 0; i < 3; i++) {
        int over = !(c[i].v <= c[i].lim);
        fail |= over;
        if (w < sizeof(why))
            w += (size_t)snprintf(why + w, sizeof(why) - w, "%s %s %.4g %s %.4g", i ? "," : "",
                                  c[i].name, c[i].v, over ? ">" : "<=", c[i].lim);
    }
    weft_eval_gate_add(x, "quality", fail ? "fail" : "pass", d, "%s", why);
    return WEFT_OK;
}

/* ---- retrieval ----------------------------------------------------------------------------- */
static const char *const fact_names[] = {"Mira", "the baker", "the old man"};
static const char *const fact_values[] = {"seven", "blue", "a shell"};

static uint64_t fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Builds the prompt for fact f at place (0 start, 1 middle, 2 end) with `words` filler words. */
static char *retrieval_prompt(size_t f, int place, size_t words) {
    size_t cap = words * 24 + 1024;
    char *filler = malloc(cap), *out = malloc(cap + 512);
    if (!filler || !out) {
        free(filler);
        free(out);
        return NULL;
    }
    weft_eval_corpus_piece(f * 13 + 3, words, filler, cap);
    char fact[256], q[256];
    snprintf(fact, sizeof(fact), "Remember this: the favourite thing of %s is %s.", fact_names[f],
             fact_values[f]);
    snprintf(q, sizeof(q),
             "Question: what is the favourite thing of %s? Answer: the favourite "
             "thing of %s is",
             fact_names[f], fact_names[f]);
    if (place == 0)
        snprintf(out, cap + 512, "%s %s %s", fact, filler, q);
    else if (place == 2)
        snprintf(out, cap + 512, "%s %s %s", filler, fact, q);
    else {
        size_t half = strlen(filler) / 2;
        while (filler[half] && filler[half] != ' ')
            half++;
        snprintf(out, cap + 512, "%.*s %s%s %s", (int)half, filler, fact, filler + half, q);
    }
    free(filler);
    return out;
}

static void retrieval_gate(weft_eval_ctx *x) {
    uint32_t budget = x->max_model_len > 48 ? x->max_model_len - 32 : 16;
    uint32_t want = x->quick ? 400 : 6000;
    if (want > budget) want = budget;
    /* the filler size that fits: measured with the server's tokenizer, shrunk until it fits */
    size_t words = want;
    json_t *answers = json_array();
    char why[600] = "";
    for (int tries = 0; tries < 12; tries++) {
        char *p = retrieval_prompt(0, 1, words);
        int32_t *ids = NULL;
        size_t n = 0;
        weft_error e;
        weft_error_clear(&e);
        if (!p || weft_eval_tokenize(x, p, &ids, &n, &e)) {
            snprintf(why, sizeof(why), "cannot tokenize a retrieval prompt: %s", e.message);
            free(p);
            free(ids);
            break;
        }
        free(p);
        free(ids);
        if (n <= want) {
            why[0] = 0;
            break;
        }
        words = words * want / n * 95 / 100;
        if (words < 4) words = 4;
        snprintf(why, sizeof(why), "no filler fits %u tokens", want);
    }
    if (why[0]) {
        weft_eval_gate_add(x, "retrieval", "fail", answers, "%s", why);
        return;
    }
    weft_http_job jobs[9];
    memset(jobs, 0, sizeof(jobs));
    char *prompts[9] = {0};
    for (int i = 0; i < 9; i++) {
        prompts[i] = retrieval_prompt((size_t)i / 3, i % 3, words);
        jobs[i].path = "/v1/completions";
        jobs[i].body =
            weft_eval_completion(x, NULL, 0, prompts[i] ? prompts[i] : "", 8, 0.0, -1, 0);
    }
    weft_error e;
    weft_error_clear(&e);
    weft_status st = weft_client_run_many(&x->client, jobs, 9, 1, &e);
    int failed = 0;
    for (int i = 0; i < 9; i++) {
        char h[24];
        snprintf(h, sizeof(h), "%016llx", (unsigned long long)fnv(prompts[i] ? prompts[i] : ""));
        if (jobs[i].error[0] && !failed++)
            snprintf(why, sizeof(why), "prompt %d: %s", i, jobs[i].error);
        json_array_append_new(answers,
                              json_pack("{s:s, s:s, s:i, s:s}", "prompt_hash", h, "place",
                                        i % 3 == 0   ? "start"
                                        : i % 3 == 1 ? "middle"
                                                     : "end",
                                        "fact", i / 3, "answer", jobs[i].text ? jobs[i].text : ""));
        json_decref(jobs[i].body);
        weft_http_job_free(&jobs[i]);
        free(prompts[i]);
    }
    json_object_set(x->greedy, "retrieval", answers);
    if (st || failed) {
        weft_eval_gate_add(x, "retrieval", "fail", answers, "%s", st ? e.message : why);
        return;
    }
    json_t *base = json_object_get(json_object_get(x->baseline, "greedy"), "retrieval");
    if (!json_is_array(base)) {
        weft_eval_gate_add(x, "retrieval", "reference", answers,
                           "answers recorded (%zu-word filler); no --baseline to compare with, so "
                           "this result is the reference",
                           words);
        return;
    }
    size_t diff = 0, cmp = 0, first = 9;
    for (size_t i = 0; i < 9; i++) {
        json_t *a = json_array_get(answers, i), *b = NULL;
        size_t k;
        json_t *v;
        json_array_foreach(base, k, v) {
            if (json_equal(json_object_get(v, "prompt_hash"), json_object_get(a, "prompt_hash")))
                b = v;
        }
        if (!b) continue;
        cmp++;
        if (!json_equal(json_object_get(a, "answer"), json_object_get(b, "answer"))) {
            if (first == 9) first = i;
            diff++;
        }
    }
    if (cmp == 0) {
        weft_eval_gate_add(x, "retrieval", "fail", answers,
                           "the baseline's retrieval prompts differ from these (another context "
                           "length or version): nothing to compare");
    } else if (diff) {
        json_t *a = json_array_get(answers, first);
        weft_eval_gate_add(x, "retrieval", "fail", answers,
                           "%zu of %zu answers differ from the reference candidate's; first: "
                           "fact %zu at the %s: \"%s\"",
                           diff, cmp, first / 3, json_string_value(json_object_get(a, "place")),
                           json_string_value(json_object_get(a, "answer")));
    } else {
        weft_eval_gate_add(x, "retrieval", "pass", answers,
                           "%zu answers (facts at start, middle and end of %zu-word fillers) "
                           "equal the reference candidate's",
                           cmp, words);
    }
}

/* ---- the two halves ------------------------------------------------------------------------ */
weft_status weft_eval_gates_before(weft_eval_ctx *x, weft_error *err) {
    weft_eval_gates_free();
    /* the cold turn goes first, before anything could be cached */
    char p1[1200], p2[1200], why[600] = "";
    conversation(p1, p2, sizeof(p1));
    g_state.cold = one_completion(x, p2, 24, why, sizeof(why));
    g_state.cold_ok = g_state.cold != NULL;
    if (!g_state.cold_ok) g_state.cold = xstrdup(why);

    weft_eval_log(x, "greedy set, serially");
    g_state.serial = greedy_set(x, 1, err);
    if (!g_state.serial) return err->code;
    json_object_set(x->greedy, "set", g_state.serial);
    weft_eval_log(x, "greedy set, at concurrency %d", BATCH_CONCURRENCY);
    json_t *batched = greedy_set(x, BATCH_CONCURRENCY, err);
    if (!batched) return err->code;
    char first[600];
    json_t *detail = NULL;
    if (set_errors(g_state.serial, first, sizeof(first)) ||
        set_errors(batched, first, sizeof(first)))
        weft_eval_gate_add(x, "batched_equals_serial", "fail", NULL, "requests failed: %s", first);
    else if (compare_sets(g_state.serial, batched, "serial", "batched", why, sizeof(why), &detail))
        weft_eval_gate_add(x, "batched_equals_serial", "fail", detail, "%s", why);
    else
        weft_eval_gate_add(x, "batched_equals_serial", "pass", NULL,
                           "%d greedy outputs at concurrency %d equal the serial ones",
                           GREEDY_PROMPTS, BATCH_CONCURRENCY);
    json_decref(batched);
    return WEFT_OK;
}

weft_status weft_eval_gates_after(weft_eval_ctx *x, weft_error *err) {
    sampling_gate(x);
    weft_status st = weft_eval_gate_quality(x, err);
    if (st) return st;
    retrieval_gate(x);

    /* warm follow-up: the first turn (which a prompt cache keeps), then the conversation */
    char p1[1200], p2[1200], why[600] = "";
    conversation(p1, p2, sizeof(p1));
    char *t1 = one_completion(x, p1, 8, why, sizeof(why));
    char *warm = t1 ? one_completion(x, p2, 24, why, sizeof(why)) : NULL;
    if (!g_state.cold_ok)
        weft_eval_gate_add(x, "prompt_cache", "fail", NULL, "the cold request failed: %s",
                           g_state.cold);
    else if (!warm)
        weft_eval_gate_add(x, "prompt_cache", "fail", NULL, "the follow-up turn failed: %s", why);
    else if (strcmp(warm, g_state.cold))
        weft_eval_gate_add(x, "prompt_cache", "fail",
                           json_pack("{s:s, s:s}", "cold", g_state.cold, "warm", warm),
                           "the follow-up turn answered \"%.80s\", the cold request \"%.80s\"",
                           warm, g_state.cold);
    else
        weft_eval_gate_add(x, "prompt_cache", "pass", NULL,
                           "the follow-up turn after its first turn answers as the same "
                           "conversation sent cold");
    free(t1);
    free(warm);

    weft_eval_log(x, "greedy set again, serially");
    json_t *again = greedy_set(x, 1, err);
    if (!again) return err->code;
    char first[600];
    json_t *detail = NULL;
    if (set_errors(again, first, sizeof(first)))
        weft_eval_gate_add(x, "repeatable", "fail", NULL, "requests failed: %s", first);
    else if (compare_sets(g_state.serial, again, "first", "after", why, sizeof(why), &detail))
        weft_eval_gate_add(x, "repeatable", "fail", detail, "%s", why);
    else
        weft_eval_gate_add(x, "repeatable", "pass", NULL,
                           "%d greedy outputs equal the first run's after the whole suite",
                           GREEDY_PROMPTS);
    json_decref(again);

    int drafts = 0;
    if (x->lock)
        for (uint32_t i = 0; i < x->lock->n_plugins; i++)
            if (x->lock->plugins[i].slots & (WEFT_SLOT_DECODER | WEFT_SLOT_DRAFTER)) drafts = 1;
    if (!drafts) {
        weft_eval_gate_add(x, "speculative", "skip", NULL,
                           x->lock ? "the candidate does not draft (no decoder or drafter plugin)"
                                   : "the candidate's plugins are unknown with --url; it is "
                                     "taken not to draft");
    } else {
        json_t *base = json_object_get(json_object_get(x->baseline, "greedy"), "set");
        detail = NULL;
        if (!json_is_array(base))
            weft_eval_gate_add(x, "speculative", "fail", NULL,
                               "the candidate drafts: pass --baseline RESULT of a candidate "
                               "that does not, to compare greedy outputs");
        else if (compare_sets(base, g_state.serial, "plain", "speculative", why, sizeof(why),
                              &detail))
            weft_eval_gate_add(x, "speculative", "fail", detail, "%s", why);
        else
            weft_eval_gate_add(x, "speculative", "pass", NULL,
                               "%d greedy outputs equal plain greedy decoding's (baseline)",
                               GREEDY_PROMPTS);
    }
    weft_eval_gates_free();
    return WEFT_OK;
}
