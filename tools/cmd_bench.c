/* `weft bench decode`: decode speed of a candidate. One request of --prompt tokens is prefilled,
 * then --gen tokens are decoded greedily with EOS ignored, so every repeat does the same work.
 * A warm-up run comes first (graphs built, caches and pages warm); each repeat then times its
 * decode steps only (from the first generated token's arrival at the host to the last's).
 * Prints tokens/s and ms/token as the median over repeats with the spread (min..max), decode
 * tokens per CPU-second of the process (steadier on a shared machine), and with --profile the
 * time per op class. With --concurrency N, many requests are in flight at once (aggregate
 * throughput, or with --arrival the latency of running streams when a long prompt arrives):
 * bench_concurrency.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_concurrency.h"
#include "cli.h"
#include "engine/engine.h"
#include "engine_cli.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f, "usage: weft bench decode [options]\n"
               "\n"
               "Measures decode speed: a prompt is prefilled, then tokens are generated greedily\n"
               "(EOS ignored); a warm-up run precedes the timed repeats. Decode is timed from the\n"
               "first generated token's arrival to the last's; prefill is submit to first token.\n"
               "\n"
               "options:\n"
               "  --candidate PATH   a lock or a candidate manifest (default: the CPU baseline)\n"
               "  --model DIR        model directory replacing the manifest's model\n"
               "  --prompt N         prompt tokens (default 16)\n"
               "  --gen N            generated tokens (default 256)\n"
               "  --threads N        worker threads (default 1)\n"
               "  --repeats N        timed repeats (default 5)\n"
               "  --max-model-len N  positions a sequence may reach (default: the manifest's\n"
               "                     serving.max_model_len); sizes the kv cache and, with\n"
               "                     it, kernels split by context (the fused attention)\n"
               "  --profile          time per op class over the timed repeats\n"
               "  --json             one JSON object on stdout instead of text\n"
               "\n"
               "serving shape (see docs/perf/sched.md):\n"
               "  --concurrency N    N requests submitted together, each --prompt/--gen tokens;\n"
               "                     reports aggregate tokens/s, TTFT and inter-token latency\n"
               "  --arrival L        with --concurrency: while the N streams decode, a request\n"
               "                     with an L-token prompt arrives --repeats times; reports\n"
               "                     the streams' inter-token latency idle vs during arrival\n"
               "  --window N         idle steps measured before each arrival (default 16)\n"
               "  --max-requests N   kv slots (default: concurrency, +1 with --arrival)\n"
               "  --kv-tokens N      kv pool budget in tokens (default: every slot full)\n"
               "  --max-batch-tokens N  rows of the largest step (default: the engine's)\n");
}

/* CPU time of the whole process (every thread): on a shared machine, tokens per CPU-second is
 * steadier than per wall second, and for one thread it is what the code would do alone. */
static double cpu_seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double median(double *v, uint32_t n) {
    qsort(v, n, sizeof(*v), weft_cli_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* When the first generated token reached the host (the request's callback). With a pipelined
 * executor (exec.async-pipeline) the step that launches the prefill returns before the prefill
 * has run, so the end of the first step is not where decoding starts: until 2026-12-01 the
 * decode window began there and held the prefill (docs/perf/batch1.md, session of 2026-12-01
 * 05:25 UTC). */
typedef struct {
    int seen;
    double t, cpu;
} first_token;
static void on_token(void *user, const weft_token_event *ev) {
    first_token *f = user;
    if (!f->seen && ev->token >= 0) {
        f->seen = 1;
        f->t = weft_cli_now_s();
        f->cpu = cpu_seconds_now();
    }
}

/* One request; returns decode seconds (from the first generated token's arrival at the host to
 * the last's) and prefill seconds (submit to the first token). */
static weft_status one_run(weft_engine *e, const int32_t *prompt, uint32_t n_prompt, uint32_t gen,
                           double *prefill_s, double *decode_s, double *decode_cpu_s,
                           uint32_t *decoded, weft_error *err) {
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = gen;
    rp.ignore_eos = 1;
    rp.detokenize = 1; /* text is part of what a user waits for */
    first_token ft = {0, 0, 0};
    rp.callback = on_token;
    rp.user = &ft;
    weft_engine_stats st0, st1;
    weft_engine_get_stats(e, &st0);
    weft_status s = weft_request_submit(e, prompt, n_prompt, &rp, NULL, err);
    if (s != WEFT_OK) return s;
    double t0 = weft_cli_now_s();
    while (weft_engine_active(e)) {
        s = weft_engine_step(e, err);
        if (s < 0) return s;
    }
    double t2 = weft_cli_now_s();
    weft_engine_get_stats(e, &st1);
    if (!ft.seen)
        return weft_error_set(err, WEFT_ERR_INTERNAL, "bench decode",
                              "no generated token came back");
    *decode_cpu_s = cpu_seconds_now() - ft.cpu;
    *prefill_s = ft.t - t0;
    *decode_s = t2 - ft.t;
    /* the decode rows computed: one per token after the first */
    *decoded = (uint32_t)(st1.decode_tokens - st0.decode_tokens);
    return WEFT_OK;
}

static int bench_decode(int argc, char **argv) {
    const char *candidate = NULL, *model = NULL;
    uint32_t n_prompt = 16, gen = 256, threads = 1, repeats = 5;
    uint32_t concurrency = 0, arrival = 0, window = 16, max_requests = 0, max_batch = 0;
    uint32_t max_len = 0;
    uint64_t kv_tokens = 0;
    int profile = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t *dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--profile")) {
            profile = 1;
            continue;
        } else if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        } else if (!strcmp(a, "--candidate") || !strcmp(a, "--model")) {
            if (!val) {
                fprintf(stderr, "weft bench decode: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "--candidate"))
                candidate = val;
            else
                model = val;
            i++;
            continue;
        } else if (!strcmp(a, "--prompt")) {
            dst = &n_prompt;
        } else if (!strcmp(a, "--gen")) {
            dst = &gen;
        } else if (!strcmp(a, "--threads")) {
            dst = &threads;
        } else if (!strcmp(a, "--repeats")) {
            dst = &repeats;
        } else if (!strcmp(a, "--max-model-len")) {
            dst = &max_len;
        } else if (!strcmp(a, "--concurrency")) {
            dst = &concurrency;
        } else if (!strcmp(a, "--arrival")) {
            dst = &arrival;
        } else if (!strcmp(a, "--window")) {
            dst = &window;
        } else if (!strcmp(a, "--max-requests")) {
            dst = &max_requests;
        } else if (!strcmp(a, "--max-batch-tokens")) {
            dst = &max_batch;
        } else if (!strcmp(a, "--kv-tokens")) {
            if (weft_cli_parse_u64("bench decode", a, val, &kv_tokens)) return 2;
            i++;
            continue;
        } else {
            fprintf(stderr, "weft bench decode: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (weft_cli_parse_u32("bench decode", a, val, dst)) return 2;
        i++;
    }
    if (n_prompt == 0 || gen < 2 || repeats == 0 || repeats > 1000) {
        fprintf(stderr, "weft bench decode: expected --prompt >= 1, --gen >= 2 and "
                        "1 <= --repeats <= 1000\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_engine_options o;
    weft_engine_options_default(&o);
    char path[1100];
    if (weft_cli_engine_target(candidate, model, &o, path, sizeof(path), &err) != WEFT_OK)
        return weft_cli_fail("bench", &err);
    if (arrival && !concurrency) {
        fprintf(stderr, "weft bench decode: --arrival needs --concurrency (the running streams)\n");
        return 2;
    }
    if (concurrency > 4096) {
        fprintf(stderr, "weft bench decode: --concurrency: expected 1..4096, got %u\n",
                concurrency);
        return 2;
    }
    o.threads = threads;
    o.profile = profile;
    o.max_batch_tokens = max_batch;
    o.max_model_len = max_len; /* 0: the manifest's */
    o.kv_tokens = kv_tokens;
    if (concurrency) o.max_requests = max_requests ? max_requests : concurrency + (arrival ? 1 : 0);
    weft_engine *e = NULL;
    if (weft_engine_open(&o, &e, &err) != WEFT_OK) return weft_cli_fail("bench", &err);
    if (concurrency) {
        weft_bench_conc bc = {concurrency, n_prompt, gen, repeats, arrival, window, json};
        int crc = weft_bench_concurrency(e, &bc);
        weft_engine_close(e);
        return crc;
    }
    const weft_model_config *cfg = weft_engine_config(e);
    if ((uint64_t)n_prompt + gen > weft_engine_max_model_len(e)) {
        fprintf(stderr, "weft bench decode: --prompt %u + --gen %u exceed max_model_len %u\n",
                n_prompt, gen, weft_engine_max_model_len(e));
        weft_engine_close(e);
        return 2;
    }
    /* A fixed prompt: BOS (when the model has one), then ids spread over the vocabulary. */
    int32_t *prompt = malloc(sizeof(int32_t) * n_prompt);
    if (!prompt) {
        weft_engine_close(e);
        return 1;
    }
    for (uint32_t i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)((7919u * (i + 1)) % cfg->vocab_size);
    if (cfg->bos_token_id >= 0) prompt[0] = cfg->bos_token_id;

    double *tps = calloc(repeats, sizeof(double)), *ms = calloc(repeats, sizeof(double));
    double *pre = calloc(repeats, sizeof(double)), *cps = calloc(repeats, sizeof(double));
    weft_status s = tps && ms && pre && cps ? WEFT_OK : WEFT_ERR_NOMEM;
    double ps, ds, dc;
    uint32_t decoded = 0;
    if (s == WEFT_OK) s = one_run(e, prompt, n_prompt, gen, &ps, &ds, &dc, &decoded, &err);
    weft_engine_profile_reset(e);
    for (uint32_t r = 0; s == WEFT_OK && r < repeats; r++) {
        s = one_run(e, prompt, n_prompt, gen, &ps, &ds, &dc, &decoded, &err);
        if (s != WEFT_OK || decoded == 0 || ds <= 0) break;
        tps[r] = decoded / ds;
        ms[r] = ds * 1e3 / decoded;
        pre[r] = n_prompt / ps;
        cps[r] = dc > 0 ? decoded / dc : 0;
    }
    int rc = 0;
    if (s != WEFT_OK) {
        rc = weft_cli_fail("bench", &err);
    } else {
        double t_min = tps[0], t_max = tps[0], m_min = ms[0], m_max = ms[0];
        for (uint32_t r = 1; r < repeats; r++) {
            if (tps[r] < t_min) t_min = tps[r];
            if (tps[r] > t_max) t_max = tps[r];
            if (ms[r] < m_min) m_min = ms[r];
            if (ms[r] > m_max) m_max = ms[r];
        }
        double t_med = median(tps, repeats), m_med = median(ms, repeats);
        double p_med = median(pre, repeats), c_med = median(cps, repeats);
        const weft_candidate *c = weft_engine_candidate(e);
        if (json) {
            printf("{\"bench\":\"decode\",\"candidate\":\"%s\",\"model\":\"%s\",\"backend\":\"%s\","
                   "\"threads\":%u,\"prompt\":%u,\"gen\":%u,\"max_model_len\":%u,\"repeats\":%u,"
                   "\"tokens_per_s\":{\"median\":%.2f,\"min\":%.2f,\"max\":%.2f},"
                   "\"ms_per_token\":{\"median\":%.5f,\"min\":%.5f,\"max\":%.5f},"
                   "\"prefill_tokens_per_s\":%.2f,\"tokens_per_cpu_s\":%.2f}\n",
                   c->id, c->model_dir, c->backend, weft_engine_threads(e), n_prompt, gen,
                   weft_engine_max_model_len(e), repeats,
                   t_med, t_min, t_max, m_med, m_min, m_max, p_med, c_med);
        } else {
            printf("decode: %s (%s, %u thread%s), prompt %u, gen %u, max_model_len %u, %u repeats "
                   "after warm-up\n",
                   c->model_dir, c->backend, weft_engine_threads(e),
                   weft_engine_threads(e) == 1 ? "" : "s", n_prompt, gen,
                   weft_engine_max_model_len(e), repeats);
            printf("  tokens/s   median %.1f  (min %.1f, max %.1f)\n", t_med, t_min, t_max);
            printf("  ms/token   median %.4f  (min %.4f, max %.4f)\n", m_med, m_min, m_max);
            printf("  prefill    %.1f tokens/s (median)\n", p_med);
            printf("  cpu time   %.1f decode tokens per CPU-second of the process (median)\n",
                   c_med);
        }
        if (profile && !json) {
            const char *names[64];
            double secs[64], total = 0;
            uint64_t calls[64];
            uint32_t n = weft_engine_profile(e, names, secs, calls, 64);
            if (n > 64) n = 64;
            for (uint32_t i = 0; i < n; i++)
                total += secs[i];
            printf("  time per op class (all timed repeats, prefill included):\n");
            for (uint32_t i = 0; i < n; i++)
                printf("    %-14s %8.3f ms  %5.1f%%  %llu calls\n", names[i], secs[i] * 1e3,
                       total > 0 ? 100.0 * secs[i] / total : 0.0, (unsigned long long)calls[i]);
        }
    }
    free(tps);
    free(ms);
    free(pre);
    free(cps);
    free(prompt);
    weft_engine_close(e);
    return rc;
}

int weft_bench_prefill_main(int argc, char **argv); /* bench_prefill.c */
/* `weft bench serve` lives in cmd_bench_serve.c (the server's benchmark). */
__attribute__((weak)) int weft_cmd_bench_serve(int argc, char **argv);

int weft_cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: weft bench decode [options]   (weft bench decode --help)\n"
                "       weft bench prefill [options]  (weft bench prefill --help)\n"
                "       weft bench serve --url URL    (weft bench serve --help)\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "decode")) return bench_decode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "prefill")) return weft_bench_prefill_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve") && weft_cmd_bench_serve)
        return weft_cmd_bench_serve(argc - 1, argv + 1);
    fprintf(stderr, "weft bench: unknown benchmark '%s' (expected decode, prefill or serve)\n",
            argv[1]);
    return 2;
}
