/* bench_exec_sampling: sampled-decode speed with the device sampler against the host sampler in
 * the same engine (the host path is forced by a zero logit bias, which weft_sampling cannot
 * carry, so both modes read the same logits and produce the same tokens). A benchmark, not a
 * test: it prints ms/token per mode (median of the repeats after a warm-up request).
 *   bench_exec_sampling MANIFEST MODEL_DIR [--temperature T] [--top-k K] [--top-p P]
 *                       [--min-p M] [--prompt N] [--gen N] [--repeats N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "util/error.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Decode seconds per token of one request (steps after the first token). */
static double one(weft_engine *e, const int32_t *prompt, uint32_t n, const weft_sampler_params *sp,
                  uint32_t gen, weft_error *err) {
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling = *sp;
    rp.max_tokens = gen;
    rp.ignore_eos = 1;
    if (weft_request_submit(e, prompt, n, &rp, NULL, err) != WEFT_OK) return -1;
    double t1 = 0;
    int first = 1;
    while (weft_engine_active(e)) {
        if (weft_engine_step(e, err) < 0) return -1;
        if (first) {
            t1 = now_s();
            first = 0;
        }
    }
    return (now_s() - t1) / (gen - 1);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_exec_sampling MANIFEST MODEL_DIR [--temperature T] "
                        "[--top-k K] [--top-p P] [--min-p M] [--prompt N] [--gen N] "
                        "[--repeats N]\n");
        return 2;
    }
    weft_sampler_params sp;
    weft_sampler_params_default(&sp);
    sp.temperature = 0.8f;
    sp.seed = 1234;
    uint32_t n_prompt = 128, gen = 256, repeats = 3;
    for (int i = 3; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--temperature")) sp.temperature = strtof(v, NULL);
        else if (!strcmp(k, "--top-k")) sp.top_k = atoi(v);
        else if (!strcmp(k, "--top-p")) sp.top_p = strtof(v, NULL);
        else if (!strcmp(k, "--min-p")) sp.min_p = strtof(v, NULL);
        else if (!strcmp(k, "--prompt")) n_prompt = (uint32_t)atoi(v);
        else if (!strcmp(k, "--gen")) gen = (uint32_t)atoi(v);
        else if (!strcmp(k, "--repeats")) repeats = (uint32_t)atoi(v);
        else {
            fprintf(stderr, "bench_exec_sampling: unknown option %s\n", k);
            return 2;
        }
    }
    if (gen < 2 || repeats < 1 || repeats > 100 || n_prompt < 1) {
        fprintf(stderr, "bench_exec_sampling: expected --gen >= 2, 1 <= --repeats <= 100\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.manifest_path = argv[1];
    o.model_dir = argv[2];
    weft_engine *e = NULL;
    if (weft_engine_open(&o, &e, &err) != WEFT_OK) {
        fprintf(stderr, "bench_exec_sampling: %s: %s\n", err.source, err.message);
        return 1;
    }
    const weft_model_config *cfg = weft_engine_config(e);
    if (n_prompt + gen > weft_engine_max_model_len(e)) {
        fprintf(stderr, "bench_exec_sampling: prompt + gen exceed max_model_len %u\n",
                weft_engine_max_model_len(e));
        weft_engine_close(e);
        return 2;
    }
    int32_t *prompt = malloc(sizeof(int32_t) * n_prompt);
    double *t = malloc(sizeof(double) * repeats);
    if (!prompt || !t) return 1;
    for (uint32_t i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)((7919u * (i + 1)) % cfg->vocab_size);
    if (cfg->bos_token_id >= 0) prompt[0] = cfg->bos_token_id;
    int32_t zero_id = 0;
    float zero = 0.0f;
    int rc = 0;
    printf("sampled decode, %s, T %.2f top-k %d top-p %.2f min-p %.2f, prompt %u, gen %u\n",
           argv[2], (double)sp.temperature, sp.top_k, (double)sp.top_p, (double)sp.min_p,
           n_prompt, gen);
    for (int mode = 0; mode < 2 && !rc; mode++) {
        weft_sampler_params m = sp;
        if (mode == 1) { /* the host sampler: weft_sampling has no bias, so the engine samples */
            m.n_bias = 1;
            m.bias_ids = &zero_id;
            m.bias_values = &zero;
        }
        if (one(e, prompt, n_prompt, &m, gen, &err) < 0) rc = 1;
        for (uint32_t r = 0; r < repeats && !rc; r++) {
            t[r] = one(e, prompt, n_prompt, &m, gen, &err);
            if (t[r] < 0) rc = 1;
        }
        if (rc) break;
        qsort(t, repeats, sizeof(double), cmp_d);
        printf("  %-6s sampler: %.4f ms/token (median of %u; min %.4f, max %.4f)\n",
               mode ? "host" : "device", t[repeats / 2] * 1e3, repeats, t[0] * 1e3,
               t[repeats - 1] * 1e3);
    }
    if (rc) fprintf(stderr, "bench_exec_sampling: %s: %s\n", err.source, err.message);
    free(prompt);
    free(t);
    weft_engine_close(e);
    return rc;
}
