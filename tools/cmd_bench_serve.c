/* `weft bench serve`: a libcurl multi client that drives a running `weft serve` with a mix of
 * streaming and non-streaming completions at one or more concurrency levels and prints
 * requests/s and time-to-first-token, inter-token and end-to-end latency percentiles. With
 * --check every response is verified: HTTP 200, well-formed JSON or SSE (one event per line,
 * one finish_reason, a usage chunk, `data: [DONE]` last), the exact token count, the text equal
 * to the reference text of its prompt (greedy, EOS ignored, so every response for one prompt
 * is identical: a response delivered to the wrong client or mangled shows up), and an id never
 * seen before. With --lock the same generation also runs in-process through the engine (what
 * `weft run` does), and the difference to the server's concurrency-1 latency is reported as the
 * server's overhead per request. docs/perf/serve.md records results. */
#include <curl/curl.h>
#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "engine/engine.h"
#include "engine_cli.h"
#include "util/error.h"

#define BS_MAX_LEVELS 8
#define BS_PROMPTS 4

static const char *const prompts[BS_PROMPTS] = {"Once upon a time", "The little dog",
                                                "One day, a girl named Sue", "The sun was hot and"};

typedef struct bs_opts {
    const char *url, *api_key, *model, *lock, *json_out;
    uint32_t levels[BS_MAX_LEVELS], n_levels;
    uint32_t requests, max_tokens, engine_repeats;
    double stream_fraction;
    int check;
} bs_opts;

typedef struct bs_xfer {
    CURL *h;
    struct curl_slist *headers;
    char *body;
    int stream, prompt;
    char *buf;
    size_t len, cap, scanned;
    double t0, t_first, t_last;
    double *itl;
    size_t n_itl, cap_itl;
    uint32_t n_token_events;
} bs_xfer;

typedef struct bs_stats {
    double *ttft, *itl, *e2e;
    size_t n_ttft, n_itl, n_e2e, cap_ttft, cap_itl, cap_e2e;
    uint32_t ok, failed, bad_status, garbled, duplicates, malformed;
    char first_problem[512];
} bs_stats;

typedef struct bs_ids {
    char **ids;
    size_t n, cap;
} bs_ids;

static void push_d(double **a, size_t *n, size_t *cap, double v) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        double *p = realloc(*a, c * sizeof(double));
        if (!p) return;
        *a = p;
        *cap = c;
    }
    (*a)[(*n)++] = v;
}

static double pct(double *a, size_t n, double p) {
    if (!n) return NAN;
    qsort(a, n, sizeof(double), weft_cli_cmp_double);
    size_t i = (size_t)ceil(p / 100.0 * (double)n);
    return a[i ? i - 1 : 0];
}

static void problem(bs_stats *st, const char *fmt, const char *detail) {
    if (!st->first_problem[0]) snprintf(st->first_problem, sizeof(st->first_problem), fmt, detail);
}

/* A response id seen twice means a response was duplicated. Linear search is fine for the
 * few thousand requests of a run. */
static int id_seen(bs_ids *ids, const char *id) {
    for (size_t i = 0; i < ids->n; i++)
        if (!strcmp(ids->ids[i], id)) return 1;
    if (ids->n == ids->cap) {
        size_t c = ids->cap ? ids->cap * 2 : 1024;
        char **p = realloc(ids->ids, c * sizeof(char *));
        if (!p) return 0;
        ids->ids = p;
        ids->cap = c;
    }
    ids->ids[ids->n++] = strdup(id);
    return 0;
}

/* Streaming: time every event that carries text as it arrives. */
static void scan_events(bs_xfer *x) {
    for (;;) {
        char *start = x->buf + x->scanned;
        char *end = strstr(start, "\n\n");
        if (!end) return;
        double t = weft_cli_now_s();
        if (!strncmp(start, "data: {", 7) && strstr(start, "\"text\":\"") &&
            !strstr(start, "\"text\":\"\"")) {
            if (!x->n_token_events)
                x->t_first = t;
            else
                push_d(&x->itl, &x->n_itl, &x->cap_itl, t - x->t_last);
            x->t_last = t;
            x->n_token_events++;
        }
        x->scanned = (size_t)(end + 2 - x->buf);
    }
}

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user) {
    bs_xfer *x = user;
    size_t n = size * nmemb;
    if (x->len + n + 1 > x->cap) {
        size_t c = x->cap ? x->cap * 2 : 4096;
        while (c < x->len + n + 1)
            c *= 2;
        char *p = realloc(x->buf, c);
        if (!p) return 0;
        x->buf = p;
        x->cap = c;
    }
    memcpy(x->buf + x->len, ptr, n);
    x->len += n;
    x->buf[x->len] = 0;
    if (x->stream) scan_events(x);
    return n;
}

static void xfer_start(CURLM *m, bs_xfer *x, const bs_opts *o, int stream, int prompt, char *url) {
    memset(x, 0, sizeof(*x));
    x->stream = stream;
    x->prompt = prompt;
    json_t *b = json_pack("{s:s, s:s, s:i, s:f, s:b, s:b}", "model", o->model, "prompt",
                          prompts[prompt], "max_tokens", (int)o->max_tokens, "temperature", 0.0,
                          "ignore_eos", 1, "stream", stream);
    if (stream) json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    x->body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    x->h = curl_easy_init();
    x->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (o->api_key) {
        char auth[512];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->api_key);
        x->headers = curl_slist_append(x->headers, auth);
    }
    curl_easy_setopt(x->h, CURLOPT_URL, url);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->headers);
    curl_easy_setopt(x->h, CURLOPT_POSTFIELDS, x->body);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->h, CURLOPT_TIMEOUT, 600L);
    curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
    x->t0 = weft_cli_now_s();
    curl_multi_add_handle(m, x->h);
}

static void xfer_free(CURLM *m, bs_xfer *x) {
    curl_multi_remove_handle(m, x->h);
    curl_easy_cleanup(x->h);
    curl_slist_free_all(x->headers);
    free(x->body);
    free(x->buf);
    free(x->itl);
}

/* Checks a finished transfer; returns its text (malloc'ed) for the reference comparison. */
static char *verify(bs_xfer *x, long status, const bs_opts *o, bs_stats *st, bs_ids *ids) {
    if (status != 200) {
        st->bad_status++;
        problem(st, "HTTP status not 200: %.400s", x->buf ? x->buf : "");
        return NULL;
    }
    char *text = NULL;
    const char *id = NULL;
    json_int_t completion_tokens = -1;
    if (!x->stream) {
        json_t *j = json_loads(x->buf ? x->buf : "", 0, NULL);
        json_t *t =
            j ? json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text") : NULL;
        id = j ? json_string_value(json_object_get(j, "id")) : NULL;
        completion_tokens =
            json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
        if (!t || !json_is_string(t) || !id) {
            st->malformed++;
            problem(st, "malformed JSON response: %.400s", x->buf ? x->buf : "");
            json_decref(j);
            return NULL;
        }
        text = strdup(json_string_value(t));
        if (id_seen(ids, id)) st->duplicates++;
        json_decref(j);
    } else {
        /* Every event: "data: <json>\n\n"; the last is [DONE]; one finish_reason; one usage. */
        size_t cap = 256, len = 0;
        text = calloc(1, cap);
        int done = 0, finishes = 0, bad = 0, usage = 0;
        char first_id[96] = "";
        char *p = x->buf ? x->buf : "";
        while (*p && !bad) {
            char *end = strstr(p, "\n\n");
            if (!end || strncmp(p, "data: ", 6) || done) {
                bad = 1;
                break;
            }
            *end = 0;
            if (!strcmp(p + 6, "[DONE]")) {
                done = 1;
            } else {
                json_t *j = json_loads(p + 6, 0, NULL);
                const char *cid = j ? json_string_value(json_object_get(j, "id")) : NULL;
                json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
                json_t *u = json_object_get(j, "usage");
                if (!j || !cid) bad = 1;
                if (cid && !first_id[0]) snprintf(first_id, sizeof(first_id), "%s", cid);
                if (cid && strcmp(cid, first_id)) bad = 1;
                if (ch) {
                    const char *t = json_string_value(json_object_get(ch, "text"));
                    if (!t) bad = 1;
                    size_t tl = t ? strlen(t) : 0;
                    if (len + tl + 1 > cap) {
                        while (len + tl + 1 > cap)
                            cap *= 2;
                        text = realloc(text, cap);
                    }
                    if (t && text) {
                        memcpy(text + len, t, tl);
                        len += tl;
                        text[len] = 0;
                    }
                    if (json_is_string(json_object_get(ch, "finish_reason"))) finishes++;
                }
                if (u && json_is_object(u)) {
                    usage++;
                    completion_tokens = json_integer_value(json_object_get(u, "completion_tokens"));
                }
                json_decref(j);
            }
            p = end + 2;
        }
        if (bad || !done || finishes != 1 || usage != 1 || !text) {
            st->malformed++;
            problem(st, "malformed stream: %.400s", x->buf ? x->buf : "");
            free(text);
            return NULL;
        }
        if (id_seen(ids, first_id)) st->duplicates++;
    }
    if (completion_tokens != (json_int_t)o->max_tokens) {
        st->garbled++;
        problem(st, "wrong completion_tokens in %.400s", x->buf ? x->buf : "");
    }
    return text;
}

static int run_level(const bs_opts *o, uint32_t conc, uint32_t n_req, double stream_fraction,
                     char *ref[BS_PROMPTS], bs_ids *ids, json_t *report) {
    char url[1024];
    snprintf(url, sizeof(url), "%s/v1/completions", o->url);
    CURLM *m = curl_multi_init();
    bs_xfer *xs = calloc(conc, sizeof(bs_xfer));
    int *busy = calloc(conc, sizeof(int));
    bs_stats st;
    memset(&st, 0, sizeof(st));
    uint32_t started = 0, finished = 0, n_stream = 0;
    double t_start = weft_cli_now_s();
    while (finished < n_req) {
        for (uint32_t i = 0; i < conc && started < n_req; i++) {
            if (busy[i]) continue;
            /* Deterministic mix: request k streams when the running share is below target. */
            int stream = (double)n_stream < stream_fraction * (double)(started + 1);
            n_stream += (uint32_t)stream;
            xfer_start(m, &xs[i], o, stream, (int)(started % BS_PROMPTS), url);
            busy[i] = 1;
            started++;
        }
        int running = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left, freed = 0;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            bs_xfer *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            double t = weft_cli_now_s();
            long status = 0;
            curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
            if (msg->data.result != CURLE_OK) {
                st.failed++;
                problem(&st, "transfer failed: %s", curl_easy_strerror(msg->data.result));
            } else {
                char *text = o->check ? verify(x, status, o, &st, ids) : NULL;
                int good = !o->check || text != NULL;
                if (text) {
                    if (!ref[x->prompt]) {
                        ref[x->prompt] = strdup(text);
                    } else if (strcmp(text, ref[x->prompt])) {
                        st.garbled++;
                        good = 0;
                        problem(&st, "text differs from its prompt's reference: %.400s", text);
                    }
                    free(text);
                }
                if (!o->check && status != 200) {
                    st.bad_status++;
                    good = 0;
                }
                if (good) {
                    st.ok++;
                    push_d(&st.e2e, &st.n_e2e, &st.cap_e2e, t - x->t0);
                    if (x->stream && x->n_token_events) {
                        push_d(&st.ttft, &st.n_ttft, &st.cap_ttft, x->t_first - x->t0);
                        for (size_t k = 0; k < x->n_itl; k++)
                            push_d(&st.itl, &st.n_itl, &st.cap_itl, x->itl[k]);
                    }
                }
            }
            size_t slot = (size_t)(x - xs);
            xfer_free(m, x);
            busy[slot] = 0;
            finished++;
            freed = 1;
        }
        /* A freed slot starts its next request right away; otherwise wait for the sockets. */
        if (finished < n_req && !freed) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    double wall = weft_cli_now_s() - t_start;
    uint32_t bad = st.failed + st.bad_status + st.garbled + st.duplicates + st.malformed;
    printf("%5u %8u %9.1f   %7.2f %7.2f %7.2f   %6.3f %6.3f %6.3f   %7.1f %7.1f   %u\n", conc,
           n_req, (double)st.ok / wall, pct(st.ttft, st.n_ttft, 50) * 1e3,
           pct(st.ttft, st.n_ttft, 90) * 1e3, pct(st.ttft, st.n_ttft, 99) * 1e3,
           pct(st.itl, st.n_itl, 50) * 1e3, pct(st.itl, st.n_itl, 90) * 1e3,
           pct(st.itl, st.n_itl, 99) * 1e3, pct(st.e2e, st.n_e2e, 50) * 1e3,
           pct(st.e2e, st.n_e2e, 99) * 1e3, bad);
    if (bad)
        fprintf(stderr,
                "weft bench serve: concurrency %u: %u failed, %u bad status, %u malformed, %u "
                "garbled, %u duplicated; first: %s\n",
                conc, st.failed, st.bad_status, st.malformed, st.garbled, st.duplicates,
                st.first_problem);
    if (report) {
        json_t *l = json_pack(
            "{s:i, s:i, s:f, s:f, s:i, s:i, s:i, s:i, s:i, s:i}", "concurrency", (int)conc,
            "requests", (int)n_req, "requests_per_s", (double)st.ok / wall, "wall_s", wall, "ok",
            (int)st.ok, "failed", (int)st.failed, "bad_status", (int)st.bad_status, "malformed",
            (int)st.malformed, "garbled", (int)st.garbled, "duplicates", (int)st.duplicates);
        const char *names[3] = {"ttft_ms", "itl_ms", "e2e_ms"};
        double *arrs[3] = {st.ttft, st.itl, st.e2e};
        size_t ns[3] = {st.n_ttft, st.n_itl, st.n_e2e};
        for (int k = 0; k < 3; k++)
            json_object_set_new(l, names[k],
                                json_pack("{s:f, s:f, s:f}", "p50", pct(arrs[k], ns[k], 50) * 1e3,
                                          "p90", pct(arrs[k], ns[k], 90) * 1e3, "p99",
                                          pct(arrs[k], ns[k], 99) * 1e3));
        json_array_append_new(json_object_get(report, "levels"), l);
    }
    free(st.ttft);
    free(st.itl);
    free(st.e2e);
    free(xs);
    free(busy);
    curl_multi_cleanup(m);
    return bad ? 1 : 0;
}

/* ---- the same work in-process, as `weft run` does it ------------------------------------ */
typedef struct bs_run {
    uint32_t finish, n;
} bs_run;

static void on_tok(void *user, const weft_token_event *ev) {
    bs_run *r = user;
    if (ev->token >= 0) r->n++;
    if (ev->finish) r->finish = ev->finish;
}

static int engine_baseline(const bs_opts *o, double *median_s) {
    weft_engine_options eo;
    weft_engine_options_default(&eo);
    eo.lock_path = o->lock;
    weft_engine *e = NULL;
    weft_error err;
    weft_error_clear(&err);
    if (weft_engine_open(&eo, &e, &err) != WEFT_OK) return weft_cli_fail("bench serve", &err);
    const weft_tokenizer *tok = weft_engine_tokenizer(e);
    double *times = calloc(o->engine_repeats + 1, sizeof(double));
    int rc = 0;
    for (uint32_t k = 0; k <= o->engine_repeats && !rc; k++) { /* k = 0 warms up */
        double t0 = weft_cli_now_s();
        const char *p = prompts[k % BS_PROMPTS];
        int32_t *ids = NULL;
        size_t n = 0;
        if (!tok || weft_tokenizer_encode(tok, p, strlen(p), 1, 1, &ids, &n, &err) != WEFT_OK) {
            rc = 1;
            break;
        }
        weft_request_params rp;
        weft_request_params_default(&rp);
        weft_engine_sampling_defaults(e, &rp.sampling);
        rp.sampling.temperature = 0;
        rp.max_tokens = o->max_tokens;
        rp.ignore_eos = 1;
        bs_run run = {0};
        rp.callback = on_tok;
        rp.user = &run;
        uint64_t id;
        if (weft_request_submit(e, ids, n, &rp, &id, &err) != WEFT_OK) rc = 1;
        while (!rc && weft_engine_active(e))
            if (weft_engine_step(e, &err) < 0) rc = 1;
        free(ids);
        if (k) times[k - 1] = weft_cli_now_s() - t0;
    }
    if (!rc) *median_s = pct(times, o->engine_repeats, 50);
    free(times);
    weft_engine_close(e);
    if (rc) return weft_cli_fail("bench serve", &err);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft bench serve --url URL [options]\n"
            "\n"
            "Drives a running `weft serve` with greedy completions (EOS ignored, so every\n"
            "response has exactly --max-tokens tokens) from a libcurl multi client and prints\n"
            "requests/s, time to first token, inter-token and end-to-end latency percentiles\n"
            "per concurrency level.\n"
            "\n"
            "options:\n"
            "  --url URL             the server (e.g. http://127.0.0.1:8000)\n"
            "  --model NAME          model name to send (default stories260k)\n"
            "  --api-key K           bearer token\n"
            "  --concurrency LIST    comma-separated levels (default 1,8,32)\n"
            "  --requests N          requests per level (default 200)\n"
            "  --max-tokens N        tokens per request (default 64)\n"
            "  --stream-fraction F   share of streaming requests, 0..1 (default 0.5)\n"
            "  --check               verify every response (status, format, token count, text,\n"
            "                        unique id); exit 1 on any problem\n"
            "  --lock LOCK           also time the same generation in-process and report the\n"
            "                        server's overhead per request (non-streaming, concurrency 1)\n"
            "  --engine-repeats N    in-process repeats (default 20)\n"
            "  --json FILE           write the results as JSON\n");
}

int weft_cmd_bench_serve(int argc, char **argv) {
    bs_opts o = {0};
    o.model = "stories260k";
    o.requests = 200;
    o.max_tokens = 64;
    o.stream_fraction = 0.5;
    o.engine_repeats = 20;
    o.levels[0] = 1;
    o.levels[1] = 8;
    o.levels[2] = 32;
    o.n_levels = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--check")) {
            o.check = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "weft bench serve: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--url"))
            o.url = v;
        else if (!strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--api-key"))
            o.api_key = v;
        else if (!strcmp(a, "--lock"))
            o.lock = v;
        else if (!strcmp(a, "--json"))
            o.json_out = v;
        else if (!strcmp(a, "--requests")) {
            if (weft_cli_parse_u32_range("bench serve", a, v, 1, UINT32_MAX, &o.requests)) return 2;
        } else if (!strcmp(a, "--max-tokens")) {
            if (weft_cli_parse_u32_range("bench serve", a, v, 1, UINT32_MAX, &o.max_tokens))
                return 2;
        } else if (!strcmp(a, "--engine-repeats")) {
            if (weft_cli_parse_u32_range("bench serve", a, v, 1, UINT32_MAX, &o.engine_repeats))
                return 2;
        } else if (!strcmp(a, "--stream-fraction")) {
            double f;
            if (weft_cli_parse_f64_range("bench serve", a, v, 0, 1, &f)) return 2;
            o.stream_fraction = f;
        } else if (!strcmp(a, "--concurrency")) {
            o.n_levels = 0;
            char buf[256];
            if (strlen(v) >= sizeof(buf)) {
                fprintf(stderr,
                        "weft bench serve: --concurrency: expected at most %zu characters\n",
                        sizeof(buf) - 1);
                return 2;
            }
            snprintf(buf, sizeof(buf), "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                uint32_t c;
                if (o.n_levels == BS_MAX_LEVELS) {
                    fprintf(stderr,
                            "weft bench serve: --concurrency: expected at most %d levels, got "
                            "'%s'\n",
                            BS_MAX_LEVELS, v);
                    return 2;
                }
                if (weft_cli_parse_u32_range("bench serve", a, tok, 1, 4096, &c)) return 2;
                o.levels[o.n_levels++] = c;
            }
            if (!o.n_levels) {
                fprintf(stderr, "weft bench serve: --concurrency: expected N[,N...], got '%s'\n",
                        v);
                return 2;
            }
        } else {
            fprintf(stderr, "weft bench serve: unknown option %s\n", a);
            return 2;
        }
    }
    if (!o.url) {
        usage(stderr);
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    json_t *report = json_pack("{s:s, s:i, s:f, s:[]}", "url", o.url, "max_tokens",
                               (int)o.max_tokens, "stream_fraction", o.stream_fraction, "levels");
    char *ref[BS_PROMPTS] = {0};
    bs_ids ids = {0};
    int rc = 0;
    printf("# weft bench serve: %s, %u tokens per request, %.0f%% streaming\n", o.url, o.max_tokens,
           o.stream_fraction * 100);
    printf("%5s %8s %9s   %23s   %20s   %15s   %s\n", "conc", "requests", "req/s",
           "ttft ms p50/p90/p99", "itl ms p50/p90/p99", "e2e ms p50/p99", "errors");
    for (uint32_t k = 0; k < o.n_levels; k++)
        rc |= run_level(&o, o.levels[k], o.requests, o.stream_fraction, ref, &ids, report);
    if (o.lock) {
        /* Server side: non-streaming, one at a time, the same prompts and length. */
        json_t *one = json_pack("{s:[]}", "levels");
        printf("# overhead: non-streaming, concurrency 1, %u requests\n", o.engine_repeats);
        rc |= run_level(&o, 1, o.engine_repeats, 0.0, ref, &ids, one);
        double server_ms = json_real_value(json_object_get(
            json_object_get(json_array_get(json_object_get(one, "levels"), 0), "e2e_ms"), "p50"));
        json_decref(one);
        double engine_s = 0;
        if (engine_baseline(&o, &engine_s) == 0) {
            printf("# in-process (weft run path) median %.2f ms; server median %.2f ms; "
                   "overhead %.2f ms per request\n",
                   engine_s * 1e3, server_ms, server_ms - engine_s * 1e3);
            json_object_set_new(report, "overhead",
                                json_pack("{s:f, s:f, s:f}", "engine_ms", engine_s * 1e3,
                                          "server_ms", server_ms, "overhead_ms",
                                          server_ms - engine_s * 1e3));
        } else {
            rc = 1;
        }
    }
    if (o.json_out && json_dump_file(report, o.json_out, JSON_INDENT(2)) != 0) {
        fprintf(stderr, "weft bench serve: could not write %s\n", o.json_out);
        rc = 1;
    }
    json_decref(report);
    for (int k = 0; k < BS_PROMPTS; k++)
        free(ref[k]);
    for (size_t i = 0; i < ids.n; i++)
        free(ids.ids[i]);
    free(ids.ids);
    curl_global_cleanup();
    return rc;
}
