/* weft-prefix-bench: time to first token of a follow-up turn, with and without kv.prefix-cache.
 *
 * A conversation's history of --history tokens is sent once (the first turn, one token
 * generated), then follow-up turns each send the whole history plus --new fresh tokens and
 * time submit -> first token. Every follow-up has different fresh tokens, so with the prefix
 * cache each one reuses exactly the history's full pages and computes the rest. The same
 * follow-ups run on three engines opened from candidates written on the fly: the baseline of
 * the backend (contiguous kv), kv.paged, and kv.paged + kv.prefix-cache. Prints the medians over
 * --repeats follow-ups of wall and process-CPU milliseconds, the tokens reused, and the ratio
 * of the cached TTFT to the cold ones. Greedy outputs of the follow-ups are compared across the
 * three engines (first 8 tokens), so a speed-up never hides a wrong answer.
 *
 *   weft-prefix-bench [--model DIR] [--history N] [--new N] [--repeats N] [--page-size N]
 *                     [--backend cpu|cuda] [--tolerate-rounding]
 *
 * --tolerate-rounding reports follow-ups whose greedy tokens differ from the baseline's instead
 * of failing: in bf16 a product over the follow-up's few rows and one over the whole prompt may
 * round differently (cuBLASLt picks kernels per shape), and random weights put greedy choices
 * at near-ties. Exactness is what the f32 run and the eval prompt-cache gate check.
 *
 * Without --model, stories260K is converted from WEFT_SHARED_DIR into a temporary directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "files/llama2c.h"
#include "util/error.h"

#define GEN 8

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(*v), cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct probe {
    double t_wall, t_cpu; /* when the first token arrived */
    int got_first;
    int32_t ids[GEN];
    int n;
} probe;

static void on_event(void *user, const weft_token_event *ev) {
    probe *p = user;
    if (ev->token >= 0 && !p->got_first) {
        p->t_wall = wall_now();
        p->t_cpu = cpu_now();
        p->got_first = 1;
    }
    if (ev->token >= 0 && p->n < GEN) p->ids[p->n++] = ev->token;
}

/* One request to completion; *ttft_* = seconds from submit to the first token. */
static int request(weft_engine *e, const int32_t *ids, size_t n, uint32_t gen, probe *p,
                   double *ttft_wall, double *ttft_cpu) {
    memset(p, 0, sizeof(*p));
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling.temperature = 0.0f;
    rp.max_tokens = gen;
    rp.ignore_eos = 1;
    rp.callback = on_event;
    rp.user = p;
    weft_error err;
    weft_error_clear(&err);
    double w0 = wall_now(), c0 = cpu_now();
    if (weft_request_submit(e, ids, n, &rp, NULL, &err) != WEFT_OK) {
        fprintf(stderr, "weft-prefix-bench: submit: %s\n", err.message);
        return -1;
    }
    while (weft_engine_active(e))
        if (weft_engine_step(e, &err) < 0) {
            fprintf(stderr, "weft-prefix-bench: step: %s: %s\n", err.source, err.message);
            return -1;
        }
    if (ttft_wall) *ttft_wall = p->t_wall - w0;
    if (ttft_cpu) *ttft_cpu = p->t_cpu - c0;
    return 0;
}

static int write_manifest(char path[64], const char *techniques, uint32_t max_len, int cuda) {
    snprintf(path, 64, "/tmp/weft-prefix-bench-XXXXXX.yaml");
    int fd = mkstemps(path, 5);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) return -1;
    fprintf(f,
            "format: 1\ncandidate: prefix-bench\nmodel: stories260k\n"
            "backend: %s\nmodel_plugin: %s\ntechniques:%s\n%s"
            "serving:\n  max_model_len: %u\n  max_concurrency: 1\n  threads: 1\n",
            cuda ? "cuda" : "{name: cpu, options: {threads: 1}}",
            /* the paged cuda kernels find each row's kv slot in a device input */
            cuda ? "{name: llama, options: {activation_dtype: auto, device_inputs: true}}"
                 : "llama",
            techniques[0] ? "" : " []", techniques, max_len);
    return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    const char *model = NULL;
    uint32_t history = 480, fresh = 16, repeats = 7, page = 16;
    int cuda = 0, tolerate = 0, differ = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v)
            model = argv[++i];
        else if (!strcmp(a, "--history") && v)
            history = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(a, "--new") && v)
            fresh = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(a, "--repeats") && v)
            repeats = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(a, "--page-size") && v)
            page = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(a, "--backend") && v && (!strcmp(v, "cpu") || !strcmp(v, "cuda")))
            cuda = !strcmp(argv[++i], "cuda");
        else if (!strcmp(a, "--tolerate-rounding"))
            tolerate = 1;
        else {
            fprintf(stderr, "usage: weft-prefix-bench [--model DIR] [--history N] [--new N] "
                            "[--repeats N] [--page-size N] [--backend cpu|cuda] "
                            "[--tolerate-rounding]\n");
            return 2;
        }
    }
    if (history < 2 || fresh < 1 || repeats < 1 || repeats > 101 || page < 1 || page > 4096) {
        fprintf(stderr, "weft-prefix-bench: expected --history >= 2, --new >= 1, 1 <= --repeats "
                        "<= 101, 1 <= --page-size <= 4096\n");
        return 2;
    }
    char tmp[64] = "";
    weft_error err;
    weft_error_clear(&err);
    if (!model) {
        const char *sd = getenv("WEFT_SHARED_DIR");
        char bin[1024], tok[1024];
        snprintf(bin, sizeof(bin), "%s/models/stories260K/stories260K.bin",
                 sd && sd[0] ? sd : WEFT_SHARED_DIR);
        snprintf(tok, sizeof(tok), "%s/models/stories260K/tok512.bin",
                 sd && sd[0] ? sd : WEFT_SHARED_DIR);
        snprintf(tmp, sizeof(tmp), "/tmp/weft-prefix-bench-XXXXXX");
        if (!mkdtemp(tmp) || weft_llama2c_convert(bin, tok, tmp, &err) != WEFT_OK) {
            fprintf(stderr, "weft-prefix-bench: converting stories260K: %s\n", err.message);
            return 1;
        }
        model = tmp;
    }
    uint32_t max_len = history + fresh + GEN + 1;
    char tech_prefix[200];
    snprintf(tech_prefix, sizeof(tech_prefix),
             "  - kv.paged\n  - {name: kv.prefix-cache, options: {page_size: %u}}\n", page);
    char tech_paged[128];
    snprintf(tech_paged, sizeof(tech_paged), "  - {name: kv.paged, options: {page_size: %u}}\n",
             page);
    const char *names[3] = {"contiguous (baseline)", "kv.paged", "kv.paged + kv.prefix-cache"};
    const char *techs[3] = {"", tech_paged, tech_prefix};
    /* token ids 3.. of the model's vocabulary, fixed seed: the same conversation everywhere */
    size_t total = (size_t)history + (size_t)fresh * (repeats + 1);
    int32_t *pool = malloc(sizeof(int32_t) * total), *prompt = malloc(sizeof(int32_t) * max_len);
    if (!pool || !prompt) return 1;
    double ttft_w[3][101], ttft_c[3][101];
    int32_t first[101][GEN];
    uint64_t reused = 0;
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) {
        char manifest[64];
        if (write_manifest(manifest, techs[k], max_len, cuda)) return 1;
        weft_engine_options o;
        weft_engine_options_default(&o);
        o.manifest_path = manifest;
        o.model_dir = model;
        o.threads = 1;
        weft_engine *e = NULL;
        if (weft_engine_open(&o, &e, &err) != WEFT_OK) {
            fprintf(stderr, "weft-prefix-bench: open %s: %s\n", names[k], err.message);
            unlink(manifest);
            return 1;
        }
        unlink(manifest);
        uint32_t vocab = weft_engine_config(e)->vocab_size;
        uint64_t s = 0x853C49E6748FEA9Bull;
        for (size_t i = 0; i < total; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            pool[i] = 3 + (int32_t)((s >> 33) % (vocab - 3));
        }
        pool[0] = 1;
        probe p;
        /* the first turn: the history, computed once (and cached, with the prefix cache) */
        rc = request(e, pool, history, 1, &p, NULL, NULL);
        /* one untimed follow-up (fresh tokens of its own) builds the step graphs it needs */
        memcpy(prompt, pool, sizeof(int32_t) * history);
        memcpy(prompt + history, pool + history + (size_t)fresh * repeats, sizeof(int32_t) * fresh);
        if (rc == 0) rc = request(e, prompt, history + fresh, GEN, &p, NULL, NULL);
        weft_engine_stats st0, st1;
        weft_engine_get_stats(e, &st0);
        for (uint32_t r = 0; r < repeats && rc == 0; r++) {
            memcpy(prompt + history, pool + history + (size_t)fresh * r, sizeof(int32_t) * fresh);
            rc = request(e, prompt, history + fresh, GEN, &p, &ttft_w[k][r], &ttft_c[k][r]);
            if (k == 0)
                memcpy(first[r], p.ids, sizeof(first[r]));
            else if (memcmp(first[r], p.ids, sizeof(first[r]))) {
                int at = 0;
                while (at < GEN && first[r][at] == p.ids[at])
                    at++;
                fprintf(stderr,
                        "weft-prefix-bench: %s: follow-up %u differs from the baseline from "
                        "output token %d\n",
                        names[k], r, at);
                differ++;
                if (!tolerate) rc = 1;
            }
        }
        weft_engine_get_stats(e, &st1);
        if (k == 2) reused = (st1.prefix_cached_tokens - st0.prefix_cached_tokens) / repeats;
        weft_engine_close(e);
    }
    if (rc == 0) {
        double mw[3], mc[3];
        for (int k = 0; k < 3; k++) {
            mw[k] = median(ttft_w[k], (int)repeats) * 1e3;
            mc[k] = median(ttft_c[k], (int)repeats) * 1e3;
        }
        uint32_t prompt_len = history + fresh;
        printf("follow-up turn: %u history + %u new tokens, page size %u, %u repeats (median)\n",
               history, fresh, page, repeats);
        for (int k = 0; k < 3; k++)
            printf("  %-28s TTFT %8.3f ms wall  %8.3f ms cpu\n", names[k], mw[k], mc[k]);
        printf("  reused %llu of %u prompt tokens (%.1f%%); cached/cold TTFT %.3f (wall), %.3f "
               "(cpu); ",
               (unsigned long long)reused, prompt_len, 100.0 * (double)reused / prompt_len,
               mw[2] / mw[0], mc[2] / mc[0]);
        if (differ)
            printf("%d of %u follow-ups differ from the baseline (--tolerate-rounding)\n", differ,
                   2 * repeats);
        else
            printf("outputs identical\n");
    }
    free(pool);
    free(prompt);
    if (tmp[0]) {
        static const char *const files[] = {"config.json", "generation_config.json",
                                            "model.safetensors", "tokenizer.json",
                                            "tokenizer_config.json"};
        char path[1200];
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
            snprintf(path, sizeof(path), "%s/%s", tmp, files[i]);
            unlink(path);
        }
        rmdir(tmp);
    }
    return rc;
}
