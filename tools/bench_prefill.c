/* `weft bench prefill`: prefill speed of a candidate. One request of --prompt tokens is
 * submitted with max_tokens 1 and stepped until its first token is sampled, so each repeat
 * measures time to first token on an idle engine: the prompt's forward pass (in chunks of the
 * largest bucket, which this benchmark sizes to the prompt) plus one sampling. Prints tokens/s
 * and milliseconds as the median over repeats with the spread, and, given a probe (or the
 * cached probe of the candidate's backend), the fraction of the prefill floor of
 * `weft eval limits`. Prompts differ between repeats (a prefix cache cannot replay one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "engine_cli.h"
#include "eval/eval.h"
#include "files/safetensors.h"
#include "util/error.h"

static void usage(FILE *f) {
    fprintf(f, "usage: weft bench prefill [options]\n\n"
               "Measures prefill: a prompt is submitted with max_tokens 1 and stepped until its\n"
               "first token; the median over repeats after a warm-up.\n\n"
               "options:\n"
               "  --candidate PATH   a lock or a candidate manifest (default: the CPU baseline)\n"
               "  --model DIR        model directory replacing the manifest's model\n"
               "  --prompt N         prompt tokens (default 1024; at most the model's trained\n"
               "                     positions - 1); max_model_len becomes N + 1,\n"
               "                     whatever the candidate's serving limit\n"
               "  --threads N        worker threads (default 1)\n"
               "  --repeats N        timed repeats (default 5)\n"
               "  --probe FILE       probe for the floor (default: the cached probe of the\n"
               "                     candidate's backend, when present)\n"
               "  --json             one JSON object on stdout instead of text\n");
}

/* Weight bytes of the model's checkpoint (0 when unreadable). */
static double checkpoint_bytes(const char *dir, uint32_t *dtype) {
    weft_safetensors *st = NULL;
    weft_error err;
    weft_error_clear(&err);
    double total = 0;
    if (!dir || weft_safetensors_open_dir(dir, &st, &err) != WEFT_OK) return 0;
    for (size_t i = 0; i < weft_safetensors_count(st); i++) {
        const weft_st_tensor *t = weft_safetensors_at(st, i);
        total += (double)t->bytes;
        if (i == 0) *dtype = t->dtype;
    }
    weft_safetensors_close(st);
    return total;
}

int weft_bench_prefill_main(int argc, char **argv) {
    const char *candidate = NULL, *model = NULL, *probe = NULL;
    uint32_t n_prompt = 1024, threads = 1, repeats = 5;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "weft bench prefill: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *val = argv[++i];
        if (!strcmp(a, "--candidate")) candidate = val;
        else if (!strcmp(a, "--model")) model = val;
        else if (!strcmp(a, "--probe")) probe = val;
        else if (!strcmp(a, "--prompt")) {
            /* below UINT32_MAX: the engine's max_model_len is set to the prompt + 1 */
            if (weft_cli_parse_u32_range("bench prefill", a, val, 1, UINT32_MAX - 1, &n_prompt))
                return 2;
        } else if (!strcmp(a, "--threads")) {
            if (weft_cli_parse_u32("bench prefill", a, val, &threads)) return 2;
        } else if (!strcmp(a, "--repeats")) {
            if (weft_cli_parse_u32("bench prefill", a, val, &repeats)) return 2;
        } else {
            fprintf(stderr, "weft bench prefill: unknown option %s (see --help)\n", a);
            return 2;
        }
    }
    if (n_prompt < 1 || repeats < 1 || repeats > 1000) {
        fprintf(stderr, "weft bench prefill: expected --prompt >= 1 and 1 <= --repeats <= 1000\n");
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_engine_options o;
    weft_engine_options_default(&o);
    char path[1100];
    if (weft_cli_engine_target(candidate, model, &o, path, sizeof(path), &err) != WEFT_OK)
        return weft_cli_fail("bench prefill", &err);
    o.threads = threads;
    o.max_batch_tokens = n_prompt; /* one chunk: the whole prompt in one forward pass */
    o.max_model_len = n_prompt + 1; /* over the candidate's serving limit: the prompt must fit */
    weft_engine *e = NULL;
    if (weft_engine_open(&o, &e, &err) != WEFT_OK) {
        /* the prompt, not a max_model_len the user gave, is what went past the model's positions */
        if (strstr(err.message, "positions the model was trained for"))
            weft_error_prefix(&err, "--prompt %u needs max_model_len %u", n_prompt, n_prompt + 1);
        return weft_cli_fail("bench prefill", &err);
    }
    const weft_model_config *cfg = weft_engine_config(e);
    const weft_candidate *cand = weft_engine_candidate(e);
    if (n_prompt + 1 > weft_engine_max_model_len(e)) {
        fprintf(stderr, "weft bench prefill: --prompt %u leaves no room under max_model_len %u\n",
                n_prompt, weft_engine_max_model_len(e));
        weft_engine_close(e);
        return 2;
    }
    int32_t *prompt = malloc(sizeof(int32_t) * n_prompt);
    double *sec = calloc(repeats, sizeof(double));
    weft_status s = prompt && sec ? WEFT_OK : WEFT_ERR_NOMEM;
    for (uint32_t r = 0; s == WEFT_OK && r <= repeats; r++) { /* r == 0: warm-up */
        for (uint32_t i = 0; i < n_prompt; i++)
            prompt[i] = (int32_t)((7919u * (i + 1) + 104729u * r) % cfg->vocab_size);
        if (cfg->bos_token_id >= 0) prompt[0] = cfg->bos_token_id;
        weft_request_params rp;
        weft_request_params_default(&rp);
        rp.sampling.temperature = 0.0f;
        rp.max_tokens = 1;
        rp.ignore_eos = 1;
        rp.detokenize = 0;
        double t0 = weft_cli_now_s();
        s = weft_request_submit(e, prompt, n_prompt, &rp, NULL, &err);
        while (s == WEFT_OK && weft_engine_active(e)) {
            weft_status st = weft_engine_step(e, &err);
            if (st < 0) s = st;
        }
        if (r > 0) sec[r - 1] = weft_cli_now_s() - t0;
    }
    int rc = 0;
    if (s != WEFT_OK) {
        rc = weft_cli_fail("bench prefill", &err);
    } else {
        qsort(sec, repeats, sizeof(double), weft_cli_cmp_double);
        double med = sec[repeats / 2], lo = sec[0], hi = sec[repeats - 1];
        /* the floor, when a probe is at hand */
        char probe_path[1024];
        if (!probe) {
            weft_probe_default_path(cand ? cand->backend : "cpu", probe_path, sizeof(probe_path));
            probe = probe_path;
        }
        weft_probe_file pf;
        weft_error perr;
        weft_error_clear(&perr);
        double floor_s = 0;
        if (weft_probe_load(probe, &pf, &perr) == WEFT_OK) {
            uint32_t dt = cfg->dtype;
            double bytes = checkpoint_bytes(cand ? cand->model_dir : NULL, &dt);
            size_t es = weft_dtype_size(dt);
            double rate = es == 4 && pf.r.gemm_f32_flops > 0 ? pf.r.gemm_f32_flops
                          : pf.r.gemm_bf16_flops > 0       ? pf.r.gemm_bf16_flops
                                                           : pf.r.gemm_f32_flops;
            weft_limits l;
            weft_limits_compute(cfg, bytes, es ? (uint32_t)es : 2, es ? (uint32_t)es : 2,
                                pf.r.copy_bytes_per_s, rate, 0, n_prompt, 1, &l);
            floor_s = l.prefill_s;
        } else {
            probe = NULL;
        }
        if (json) {
            printf("{\"bench\":\"prefill\",\"backend\":\"%s\",\"prompt\":%u,\"repeats\":%u,"
                   "\"ms_median\":%.4f,\"ms_min\":%.4f,\"ms_max\":%.4f,\"tokens_per_s\":%.2f,"
                   "\"floor_ms\":%.4f,\"fraction_of_floor\":%.4f}\n",
                   cand ? cand->backend : "?", n_prompt, repeats, med * 1e3, lo * 1e3, hi * 1e3,
                   n_prompt / med, floor_s * 1e3, floor_s > 0 ? floor_s / med : 0.0);
        } else {
            printf("prefill: %s (%s), prompt %u, %u repeats after warm-up\n",
                   cand ? cand->model_dir : "?", cand ? cand->backend : "?", n_prompt, repeats);
            printf("  time to first token  median %.3f ms  (min %.3f, max %.3f)\n", med * 1e3,
                   lo * 1e3, hi * 1e3);
            printf("  tokens/s             median %.1f\n", n_prompt / med);
            if (floor_s > 0)
                printf("  floor                %.3f ms (weft eval limits with %s): fraction "
                       "%.3f\n", floor_s * 1e3, probe, floor_s / med);
            else
                printf("  floor                no probe (run `weft eval probe` for the "
                       "fraction)\n");
        }
    }
    free(prompt);
    free(sec);
    weft_engine_close(e);
    return rc;
}
