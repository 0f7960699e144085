/* `weft bench decode --concurrency N`: serving-shaped measurements with many requests in flight.
 *
 * Throughput (default): each repeat submits N requests at once (distinct prompts of --prompt
 * tokens, --gen tokens each, greedy, EOS ignored) and steps the engine until all are done. The
 * aggregate is generated tokens over the wall time from the submissions to the last token; also
 * per CPU-second of the process, time to first token and inter-token latency (ITL) percentiles
 * pooled over the repeats. A warm-up repeat (graphs of every bucket built) comes first. With the
 * serial default scheduler the N requests run one after another, which is the baseline.
 *
 * Arrival (--arrival L): N streams decode; then, --repeats times, --window idle steps are
 * measured, and a request with an L-token prompt (max_tokens 1) is submitted; the streams' gaps
 * from its submission to its first token are the arrival ITLs. The report compares the p99 of
 * both (sched.chunked-prefill's KPI: a long prompt must not stall the running streams). */
#include "bench_concurrency.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "util/error.h"

typedef struct dvec {
    double *v;
    size_t n, cap;
} dvec;

static int dvec_push(dvec *d, double x) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 256;
        double *v = realloc(d->v, cap * sizeof(double));
        if (!v) return -1;
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = x;
    return 0;
}

typedef struct bench_run bench_run;

typedef struct stream {
    bench_run *run;
    uint64_t id;
    uint64_t first_ns, last_ns;
    double last_cpu; /* engine-thread CPU seconds at the last token */
    uint32_t n;
    uint32_t finish;
    int is_long;
} stream;

/* phase: where stream gaps go (0 nowhere, 1 idle, 2 arrival, 3 throughput). */
struct bench_run {
    int phase;
    int oom;
    dvec itl, idle, arrival, ttft;
    dvec idle_cpu, arrival_cpu; /* the same gaps in engine-thread CPU time */
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double cpu_seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of the calling (engine) thread: with one compute thread it is the step's own work,
 * unaffected by other processes sharing the machine, which wall-clock gaps are not. */
static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_event(void *user, const weft_token_event *ev) {
    stream *s = user;
    if (ev->finish) {
        s->finish = ev->finish;
        return;
    }
    uint64_t t = now_ns();
    double tc = thread_cpu_seconds();
    if (s->n == 0) s->first_ns = t;
    if (s->n > 0 && !s->is_long) {
        double gap_ms = (double)(t - s->last_ns) * 1e-6;
        dvec *d = s->run->phase == 1   ? &s->run->idle
                  : s->run->phase == 2 ? &s->run->arrival
                  : s->run->phase == 3 ? &s->run->itl
                                       : NULL;
        if (d && dvec_push(d, gap_ms)) s->run->oom = 1;
        dvec *dc = s->run->phase == 1   ? &s->run->idle_cpu
                   : s->run->phase == 2 ? &s->run->arrival_cpu
                                        : NULL;
        if (dc && dvec_push(dc, (tc - s->last_cpu) * 1e3)) s->run->oom = 1;
    }
    s->last_ns = t;
    s->last_cpu = tc;
    s->n++;
}

/* Nearest-rank percentile of d (sorted in place); 0 when empty. */
static double pct(dvec *d, double p) {
    if (!d->n) return 0;
    qsort(d->v, d->n, sizeof(double), weft_cli_cmp_double);
    size_t k = (size_t)ceil(p * (double)d->n);
    return d->v[k ? k - 1 : 0];
}

/* A prompt of pseudo-random ids drawn from a generator seeded by salt: every request of every
 * repeat gets its own, so a prefix cache cannot turn a repeat into a replay. */
static void make_prompt(int32_t *p, uint32_t n, uint32_t salt, const weft_model_config *cfg) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (salt + 1);
    for (uint32_t i = 0; i < n; i++) {
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        p[i] = (int32_t)(x % cfg->vocab_size);
    }
    if (cfg->bos_token_id >= 0) p[0] = cfg->bos_token_id;
}

static weft_status submit(weft_engine *e, const int32_t *prompt, uint32_t n, uint32_t gen,
                          stream *s, weft_error *err) {
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = gen;
    rp.ignore_eos = 1;
    rp.callback = on_event;
    rp.user = s;
    return weft_request_submit(e, prompt, n, &rp, &s->id, err);
}

/* The scheduler the candidate runs with: a plugin's name, or the runtime default. */
static const char *sched_name(const weft_candidate *c) {
    const weft_loaded_plugin *p = weft_candidate_slot(c, WEFT_SLOT_SCHEDULER);
    return p ? p->name : "serial (default)";
}

static void print_profile(weft_engine *e) {
    const char *names[64];
    double secs[64], total = 0;
    uint64_t calls[64];
    uint32_t n = weft_engine_profile(e, names, secs, calls, 64);
    if (n > 64) n = 64;
    for (uint32_t i = 0; i < n; i++)
        total += secs[i];
    if (n) printf("  time per op class (timed repeats):\n");
    for (uint32_t i = 0; i < n; i++)
        printf("    %-14s %8.3f ms  %5.1f%%  %llu calls\n", names[i], secs[i] * 1e3,
               total > 0 ? 100.0 * secs[i] / total : 0.0, (unsigned long long)calls[i]);
}

static weft_status step(weft_engine *e, weft_error *err) {
    weft_status s = weft_engine_step(e, err);
    return s < 0 ? s : WEFT_OK;
}

/* One throughput repeat: returns wall and CPU seconds and the tokens generated. */
static weft_status throughput_once(weft_engine *e, const weft_bench_conc *b, int32_t *prompts,
                                   stream *ss, bench_run *run, uint32_t repeat, int record,
                                   double *wall, double *cpu, uint64_t *tokens, weft_error *err) {
    const weft_model_config *cfg = weft_engine_config(e);
    for (uint32_t i = 0; i < b->concurrency; i++)
        make_prompt(prompts + (size_t)i * b->prompt, b->prompt, repeat * b->concurrency + i, cfg);
    const uint64_t t0 = now_ns();
    const double c0 = cpu_seconds_now();
    run->phase = record ? 3 : 0;
    weft_status s = WEFT_OK;
    for (uint32_t i = 0; i < b->concurrency && s == WEFT_OK; i++) {
        memset(&ss[i], 0, sizeof(ss[i]));
        ss[i].run = run;
        s = submit(e, prompts + (size_t)i * b->prompt, b->prompt, b->gen, &ss[i], err);
    }
    while (s == WEFT_OK && weft_engine_active(e))
        s = step(e, err);
    *wall = (double)(now_ns() - t0) * 1e-9;
    *cpu = cpu_seconds_now() - c0;
    *tokens = 0;
    for (uint32_t i = 0; i < b->concurrency; i++) {
        *tokens += ss[i].n;
        if (record && ss[i].n && dvec_push(&run->ttft, (double)(ss[i].first_ns - t0) * 1e-6))
            run->oom = 1;
        if (s == WEFT_OK && ss[i].finish != WEFT_FINISH_LENGTH)
            s = weft_error_set(err, WEFT_ERR_INTERNAL, "bench",
                               "request %u finished with %s after %u tokens, expected length", i,
                               weft_finish_name(ss[i].finish), ss[i].n);
    }
    run->phase = 0;
    return s;
}

static int report_throughput(weft_engine *e, const weft_bench_conc *b, int32_t *prompts, stream *ss,
                             bench_run *run) {
    weft_error err;
    weft_error_clear(&err);
    double wall, cpu, *tps = calloc(b->repeats, sizeof(double)),
                      *cps = calloc(b->repeats, sizeof(double));
    uint64_t tokens = 0;
    if (!tps || !cps) {
        free(tps);
        free(cps);
        fprintf(stderr, "weft bench decode: out of memory\n");
        return 1;
    }
    weft_engine_stats st0, st1;
    weft_status s = throughput_once(e, b, prompts, ss, run, 0, 0, &wall, &cpu, &tokens, &err);
    weft_engine_get_stats(e, &st0);
    weft_engine_profile_reset(e);
    for (uint32_t r = 0; s == WEFT_OK && r < b->repeats; r++) {
        s = throughput_once(e, b, prompts, ss, run, r + 1, 1, &wall, &cpu, &tokens, &err);
        tps[r] = wall > 0 ? (double)tokens / wall : 0;
        cps[r] = cpu > 0 ? (double)tokens / cpu : 0;
    }
    weft_engine_get_stats(e, &st1);
    int rc = 0;
    if (s != WEFT_OK) {
        rc = weft_cli_fail("bench", &err);
    } else if (run->oom) {
        fprintf(stderr, "weft bench decode: out of memory\n");
        rc = 1;
    } else {
        double t_min = tps[0], t_max = tps[0];
        for (uint32_t r = 1; r < b->repeats; r++) {
            if (tps[r] < t_min) t_min = tps[r];
            if (tps[r] > t_max) t_max = tps[r];
        }
        qsort(tps, b->repeats, sizeof(double), weft_cli_cmp_double);
        qsort(cps, b->repeats, sizeof(double), weft_cli_cmp_double);
        double t_med = b->repeats % 2 ? tps[b->repeats / 2]
                                      : 0.5 * (tps[b->repeats / 2 - 1] + tps[b->repeats / 2]);
        double c_med = b->repeats % 2 ? cps[b->repeats / 2]
                                      : 0.5 * (cps[b->repeats / 2 - 1] + cps[b->repeats / 2]);
        double steps = (double)(st1.steps - st0.steps) / b->repeats;
        double rows = (double)(st1.decode_tokens - st0.decode_tokens) /
                      (double)(st1.steps - st0.steps ? st1.steps - st0.steps : 1);
        double ttft50 = pct(&run->ttft, 0.5), ttft99 = pct(&run->ttft, 0.99);
        double itl50 = pct(&run->itl, 0.5), itl99 = pct(&run->itl, 0.99);
        const weft_candidate *c = weft_engine_candidate(e);
        if (b->json)
            printf("{\"bench\":\"decode\",\"mode\":\"concurrency\",\"candidate\":\"%s\","
                   "\"scheduler\":\"%s\",\"backend\":\"%s\",\"threads\":%u,\"concurrency\":%u,"
                   "\"prompt\":%u,"
                   "\"gen\":%u,\"repeats\":%u,\"tokens_per_s\":{\"median\":%.2f,\"min\":%.2f,"
                   "\"max\":%.2f},\"tokens_per_cpu_s\":{\"median\":%.2f,\"max\":%.2f},"
                   "\"steps_per_repeat\":%.1f,"
                   "\"decode_tokens_per_step\":%.2f,\"ttft_ms\":{\"p50\":%.3f,\"p99\":%.3f},"
                   "\"itl_ms\":{\"p50\":%.4f,\"p99\":%.4f},\"preemptions\":%llu}\n",
                   c->path, sched_name(c), c->backend, weft_engine_threads(e), b->concurrency,
                   b->prompt, b->gen, b->repeats, t_med, t_min, t_max, c_med, cps[b->repeats - 1],
                   steps, rows, ttft50, ttft99, itl50, itl99,
                   (unsigned long long)(st1.preemptions - st0.preemptions));
        else {
            printf("concurrency %u: %s, scheduler %s (%s, %u thread%s), prompt %u, gen %u, %u "
                   "repeats after warm-up\n",
                   b->concurrency, c->path, sched_name(c), c->backend, weft_engine_threads(e),
                   weft_engine_threads(e) == 1 ? "" : "s", b->prompt, b->gen, b->repeats);
            printf("  tokens/s   median %.1f  (min %.1f, max %.1f) aggregate\n", t_med, t_min,
                   t_max);
            printf("  cpu time   %.1f tokens per CPU-second of the process (median, max %.1f)\n",
                   c_med, cps[b->repeats - 1]);
            printf("  steps      %.1f per repeat, %.2f decode tokens per step\n", steps, rows);
            printf("  ttft       p50 %.3f ms  p99 %.3f ms\n", ttft50, ttft99);
            printf("  itl        p50 %.4f ms  p99 %.4f ms\n", itl50, itl99);
            if (st1.preemptions > st0.preemptions)
                printf("  preempted  %llu times\n",
                       (unsigned long long)(st1.preemptions - st0.preemptions));
            print_profile(e);
        }
    }
    free(tps);
    free(cps);
    return rc;
}

static int report_arrival(weft_engine *e, const weft_bench_conc *b, int32_t *prompts, stream *ss,
                          bench_run *run) {
    weft_error err;
    weft_error_clear(&err);
    const weft_model_config *cfg = weft_engine_config(e);
    int32_t *lp = malloc(sizeof(int32_t) * b->arrival);
    if (!lp) {
        fprintf(stderr, "weft bench decode: out of memory\n");
        return 1;
    }
    weft_status s = WEFT_OK;
    for (uint32_t i = 0; i < b->concurrency && s == WEFT_OK; i++) {
        memset(&ss[i], 0, sizeof(ss[i]));
        ss[i].run = run;
        s = submit(e, prompts + (size_t)i * b->prompt, b->prompt, b->gen, &ss[i], &err);
    }
    /* Until every stream decodes (prefills done, graphs of the buckets in use built). */
    for (uint32_t guard = 0; s == WEFT_OK; guard++) {
        uint32_t ready = 0;
        for (uint32_t i = 0; i < b->concurrency; i++)
            ready += ss[i].n >= 2;
        if (ready == b->concurrency) break;
        if (guard > b->gen) {
            s = weft_error_set(&err, WEFT_ERR_INVALID, "bench",
                               "--arrival: the %u streams never decoded together (a batching "
                               "scheduler is needed: sched.continuous or later)",
                               b->concurrency);
            break;
        }
        s = step(e, &err);
    }
    /* One untimed arrival first: it builds the graphs the arrival steps use. */
    uint32_t arrival_steps = 0;
    for (uint32_t a = 0; s == WEFT_OK && a <= b->repeats; a++) {
        run->phase = a ? 1 : 0;
        for (uint32_t k = 0; k < b->window && s == WEFT_OK; k++)
            s = step(e, &err);
        stream ls;
        memset(&ls, 0, sizeof(ls));
        ls.run = run;
        ls.is_long = 1;
        make_prompt(lp, b->arrival, 0x40000000u + a, cfg);
        if (s == WEFT_OK) s = submit(e, lp, b->arrival, 1, &ls, &err);
        run->phase = a ? 2 : 0;
        while (s == WEFT_OK && ls.n == 0) {
            s = step(e, &err);
            if (a) arrival_steps++;
        }
        run->phase = 0;
        for (uint32_t i = 0; i < b->concurrency && s == WEFT_OK; i++)
            if (ss[i].finish)
                s = weft_error_set(&err, WEFT_ERR_INVALID, "bench",
                                   "--arrival: stream %u ended before the %u arrivals were "
                                   "measured; raise --gen or lower --repeats/--window",
                                   i, b->repeats);
    }
    for (uint32_t i = 0; i < b->concurrency; i++)
        if (!ss[i].finish) weft_request_cancel(e, ss[i].id);
    while (weft_engine_active(e)) {
        weft_error e2;
        weft_error_clear(&e2);
        if (weft_engine_step(e, &e2) < 0) break;
    }
    free(lp);
    if (s != WEFT_OK) return weft_cli_fail("bench", &err);
    if (run->oom) {
        fprintf(stderr, "weft bench decode: out of memory\n");
        return 1;
    }
    double i50 = pct(&run->idle, 0.5), i99 = pct(&run->idle, 0.99);
    double a50 = pct(&run->arrival, 0.5), a99 = pct(&run->arrival, 0.99);
    double imax = run->idle.n ? run->idle.v[run->idle.n - 1] : 0;
    double amax = run->arrival.n ? run->arrival.v[run->arrival.n - 1] : 0;
    double ic50 = pct(&run->idle_cpu, 0.5), ic99 = pct(&run->idle_cpu, 0.99);
    double ac50 = pct(&run->arrival_cpu, 0.5), ac99 = pct(&run->arrival_cpu, 0.99);
    const weft_candidate *c = weft_engine_candidate(e);
    double per = (double)arrival_steps / b->repeats;
    if (b->json)
        printf("{\"bench\":\"decode\",\"mode\":\"arrival\",\"candidate\":\"%s\","
               "\"scheduler\":\"%s\",\"backend\":\"%s\",\"threads\":%u,\"streams\":%u,\"arrival_"
               "prompt\":%u,\"arrivals\":%u,"
               "\"steps_per_arrival\":%.1f,\"idle_itl_ms\":{\"p50\":%.4f,\"p99\":%.4f,"
               "\"max\":%.4f,\"n\":%zu},\"arrival_itl_ms\":{\"p50\":%.4f,\"p99\":%.4f,"
               "\"max\":%.4f,\"n\":%zu},\"p99_ratio\":%.3f,"
               "\"idle_itl_cpu_ms\":{\"p50\":%.4f,\"p99\":%.4f},"
               "\"arrival_itl_cpu_ms\":{\"p50\":%.4f,\"p99\":%.4f},\"p99_cpu_ratio\":%.3f}\n",
               c->path, sched_name(c), c->backend, weft_engine_threads(e), b->concurrency,
               b->arrival, b->repeats, per, i50, i99, imax, run->idle.n, a50, a99, amax,
               run->arrival.n, i99 > 0 ? a99 / i99 : 0, ic50, ic99, ac50, ac99,
               ic99 > 0 ? ac99 / ic99 : 0);
    else {
        printf("arrival of a %u-token prompt among %u decoding streams: %s, scheduler %s (%s, %u "
               "thread%s), %u arrivals\n",
               b->arrival, b->concurrency, c->path, sched_name(c), c->backend,
               weft_engine_threads(e), weft_engine_threads(e) == 1 ? "" : "s", b->repeats);
        printf("  idle ITL     p50 %.4f ms  p99 %.4f ms  max %.4f ms  (%zu gaps)\n", i50, i99, imax,
               run->idle.n);
        printf("  arrival ITL  p50 %.4f ms  p99 %.4f ms  max %.4f ms  (%zu gaps, %.1f steps per "
               "arrival)\n",
               a50, a99, amax, run->arrival.n, per);
        printf("  p99 ratio    %.2fx idle (wall clock)\n", i99 > 0 ? a99 / i99 : 0);
        printf("  engine-thread CPU time per gap: idle p50 %.4f p99 %.4f ms, arrival p50 %.4f "
               "p99 %.4f ms: p99 ratio %.2fx\n",
               ic50, ic99, ac50, ac99, ic99 > 0 ? ac99 / ic99 : 0);
    }
    return 0;
}

int weft_bench_concurrency(weft_engine *e, const weft_bench_conc *b) {
    const weft_model_config *cfg = weft_engine_config(e);
    uint64_t need = (uint64_t)b->prompt + b->gen; /* in 64 bits: no wrap to a small sum */
    if (b->arrival && (uint64_t)b->arrival + 1 > need) need = (uint64_t)b->arrival + 1;
    if (need > weft_engine_max_model_len(e)) {
        fprintf(stderr,
                "weft bench decode: --prompt %u + --gen %u (or --arrival %u) exceed "
                "max_model_len %u\n",
                b->prompt, b->gen, b->arrival, weft_engine_max_model_len(e));
        return 2;
    }
    int32_t *prompts = malloc(sizeof(int32_t) * (size_t)b->prompt * b->concurrency);
    stream *ss = calloc(b->concurrency, sizeof(stream));
    bench_run run;
    memset(&run, 0, sizeof(run));
    int rc = 1;
    if (prompts && ss) {
        for (uint32_t i = 0; i < b->concurrency; i++) /* the arrival mode's streams */
            make_prompt(prompts + (size_t)i * b->prompt, b->prompt, 0x20000000u + i, cfg);
        rc = b->arrival ? report_arrival(e, b, prompts, ss, &run)
                        : report_throughput(e, b, prompts, ss, &run);
    } else {
        fprintf(stderr, "weft bench decode: out of memory\n");
    }
    free(prompts);
    free(ss);
    free(run.itl.v);
    free(run.idle.v);
    free(run.arrival.v);
    free(run.ttft.v);
    free(run.idle_cpu.v);
    free(run.arrival_cpu.v);
    return rc;
}
