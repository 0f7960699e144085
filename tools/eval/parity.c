/* `weft eval parity`: a candidate against reference logits no one here wrote (Hugging Face
 * transformers in fp32). The reference file holds input_ids (T), logits (T, V) of one forward
 * pass over them, and greedy_ids (a prompt then transformers' greedy continuation). Reports the
 * largest logit difference per position normalised by that position's largest reference logit
 * magnitude, the KL divergence of the candidate's next-token distribution from the reference's
 * (mean and p99 over positions), and whether greedy decoding reproduces the continuation. Exits
 * non-zero when a threshold given on the command line is exceeded. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine/engine.h"
#include "eval/eval.h"
#include "files/safetensors.h"
#include "util/error.h"

typedef struct greedy_state {
    int32_t *out;
    size_t n, cap;
    int done;
} greedy_state;

static void on_token(void *user, const weft_token_event *ev) {
    greedy_state *g = user;
    if (ev->token >= 0 && g->n < g->cap) g->out[g->n++] = ev->token;
    if (ev->finish) g->done = 1;
}

/* KL(p_ref || p_cand) of softmax rows, in double. */
static double kl_row(const float *ref, const float *cand, uint32_t V) {
    double mr = -INFINITY, mc = -INFINITY;
    for (uint32_t i = 0; i < V; i++) {
        if (ref[i] > mr) mr = ref[i];
        if (cand[i] > mc) mc = cand[i];
    }
    double zr = 0, zc = 0;
    for (uint32_t i = 0; i < V; i++) zr += exp(ref[i] - mr), zc += exp(cand[i] - mc);
    double lzr = log(zr) + mr, lzc = log(zc) + mc, kl = 0;
    for (uint32_t i = 0; i < V; i++) {
        double lp = ref[i] - lzr, lq = cand[i] - lzc;
        kl += exp(lp) * (lp - lq);
    }
    return kl < 0 ? 0 : kl;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft eval parity (--candidate LOCK | --manifest FILE | --model DIR) "
            "--reference FILE\n"
            "       [--max-rel X] [--max-mean-kl X] [--no-greedy] [--prompt-len N] "
            "[--threads N]\n"
            "  --candidate LOCK   a frozen candidate (its model unless --model is given)\n"
            "  --manifest FILE    a candidate manifest resolved on the spot\n"
            "                     (default manifests/baseline-cpu.yaml with --model)\n"
            "  --model DIR        the model directory (replaces the candidate's)\n"
            "  --reference FILE   reference.safetensors: input_ids, logits, greedy_ids\n"
            "  --max-rel X        fail when a position's max |diff| / max |ref| exceeds X\n"
            "  --max-mean-kl X    fail when the mean KL(ref || candidate) exceeds X\n"
            "  --no-greedy        skip the greedy continuation check\n"
            "  --prompt-len N     prompt tokens of greedy_ids (default: metadata prompt_len, else\n"
            "                     the prefix shared with input_ids, or 1 when all are shared)\n");
}

int weft_eval_parity_main(int argc, char **argv) {
    static const struct option opts[] = {
        {"candidate", required_argument, 0, 'c'}, {"manifest", required_argument, 0, 'M'},
        {"model", required_argument, 0, 'm'},     {"reference", required_argument, 0, 'r'},
        {"max-rel", required_argument, 0, 'x'},   {"max-mean-kl", required_argument, 0, 'k'},
        {"no-greedy", no_argument, 0, 'g'},       {"prompt-len", required_argument, 0, 'p'},
        {"threads", required_argument, 0, 't'},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *lock = NULL, *manifest = NULL, *model = NULL, *ref = NULL;
    double max_rel = -1, max_kl = -1;
    int greedy = 1, c;
    uint32_t prompt_len = 0, threads = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "c:M:m:r:x:k:gp:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': lock = optarg; break;
        case 'M': manifest = optarg; break;
        case 'm': model = optarg; break;
        case 'r': ref = optarg; break;
        case 'x':
            if (weft_cli_parse_f64_range("eval parity", "--max-rel", optarg, 0, INFINITY, &max_rel))
                return 2;
            break;
        case 'k':
            if (weft_cli_parse_f64_range("eval parity", "--max-mean-kl", optarg, 0, INFINITY,
                                         &max_kl))
                return 2;
            break;
        case 'g': greedy = 0; break;
        case 'p':
            if (weft_cli_parse_u32_range("eval parity", "--prompt-len", optarg, 1, UINT32_MAX,
                                         &prompt_len))
                return 2;
            break;
        case 't':
            if (weft_cli_parse_u32_range("eval parity", "--threads", optarg, 1, 1024, &threads))
                return 2;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!ref || (!lock && !manifest && !model)) {
        usage(stderr);
        return 2;
    }
    weft_error err;
    weft_error_clear(&err);
    weft_safetensors *st = NULL;
    if (weft_safetensors_open_file(ref, &st, &err)) return weft_cli_fail("eval parity", &err);
    const weft_st_tensor *ti = weft_safetensors_find(st, "input_ids");
    const weft_st_tensor *tl = weft_safetensors_find(st, "logits");
    const weft_st_tensor *tg = weft_safetensors_find(st, "greedy_ids");
    if (!ti || !tl || ti->dtype != WEFT_DTYPE_I32 || tl->dtype != WEFT_DTYPE_F32 ||
        tl->rank != 2 || ti->rank != 1 || tl->shape[0] != ti->shape[0]) {
        weft_safetensors_close(st);
        fprintf(stderr, "weft eval parity: %s: expected input_ids I32 [T] and logits F32 [T, V]\n",
                ref);
        return 1;
    }
    size_t T = (size_t)ti->shape[0];
    uint32_t V = (uint32_t)tl->shape[1];
    const int32_t *ids = (const int32_t *)ti->data;
    const float *rl = (const float *)tl->data;

    weft_engine_options eo;
    weft_engine_options_default(&eo);
    eo.lock_path = lock;
    eo.manifest_path = lock ? NULL : (manifest ? manifest : "manifests/baseline-cpu.yaml");
    eo.model_dir = model;
    if (threads > 0) eo.threads = threads;
    if (T + 1 > eo.max_model_len) eo.max_model_len = (uint32_t)(T + 64);
    weft_engine *e = NULL;
    if (weft_engine_open(&eo, &e, &err)) {
        weft_safetensors_close(st);
        return weft_cli_fail("eval parity", &err);
    }
    int rc = 0;
    const weft_model_config *cfg = weft_engine_config(e);
    if (cfg->vocab_size != V) {
        fprintf(stderr, "weft eval parity: reference vocab %u differs from the model's %u\n", V,
                cfg->vocab_size);
        rc = 1;
        goto done;
    }
    float *logits = malloc(T * V * sizeof(float));
    double *rel = malloc(T * sizeof(double)), *kls = malloc(T * sizeof(double));
    if (!logits || !rel || !kls) {
        fprintf(stderr, "weft eval parity: out of memory\n");
        rc = 1;
        goto free_bufs;
    }
    for (size_t i = 0; i < T * V; i++) logits[i] = NAN; /* poison: every logit must be written */
    if (weft_engine_score(e, ids, T, logits, &err)) {
        rc = weft_cli_fail("eval parity", &err);
        goto free_bufs;
    }
    double worst = 0, kl_sum = 0;
    size_t worst_pos = 0;
    for (size_t t = 0; t < T; t++) {
        const float *a = logits + t * V, *b = rl + t * V;
        double m = 0, d = 0;
        for (uint32_t i = 0; i < V; i++) {
            if (fabs(b[i]) > m) m = fabs(b[i]);
            double x = isnan(a[i]) ? INFINITY : fabs((double)a[i] - b[i]);
            if (x > d) d = x;
        }
        rel[t] = m > 0 ? d / m : d;
        if (rel[t] > worst) worst = rel[t], worst_pos = t;
        kls[t] = kl_row(b, a, V);
        kl_sum += kls[t];
    }
    double mean_kl = kl_sum / (double)T;
    qsort(kls, T, sizeof(double), weft_cli_cmp_double);
    double p99 = kls[(size_t)((double)(T - 1) * 0.99)];
    printf("reference: %s (%zu positions, vocab %u)\n", ref, T, V);
    printf("logits: max relative difference %.3e (position %zu); KL(ref||candidate) mean %.3e, "
           "p99 %.3e\n", worst, worst_pos, mean_kl, p99);
    if (max_rel >= 0 && !(worst <= max_rel)) {
        printf("FAIL: relative difference %.3e > %.3e\n", worst, max_rel);
        rc = 1;
    }
    if (max_kl >= 0 && !(mean_kl <= max_kl)) {
        printf("FAIL: mean KL %.3e > %.3e\n", mean_kl, max_kl);
        rc = 1;
    }
    if (greedy && tg && tg->dtype == WEFT_DTYPE_I32 && tg->rank == 1) {
        size_t G = (size_t)tg->shape[0];
        const int32_t *gids = (const int32_t *)tg->data;
        size_t P = (size_t)prompt_len;
        if (!P) {
            while (P < G && P < T && gids[P] == ids[P]) P++;
            if (P == G) P = 1;
        }
        if (P == 0 || P >= G) {
            fprintf(stderr, "weft eval parity: prompt length %zu leaves nothing to continue\n",
                    P);
            rc = 1;
            goto free_bufs;
        }
        greedy_state gs = {.out = calloc(G, sizeof(int32_t)), .cap = G - P};
        weft_request_params rp;
        weft_request_params_default(&rp);
        weft_engine_sampling_defaults(e, &rp.sampling);
        rp.sampling.temperature = 0;
        rp.sampling.top_k = 0;
        rp.sampling.top_p = 1;
        rp.sampling.min_p = 0;
        rp.sampling.repetition_penalty = 1;
        rp.max_tokens = (uint32_t)(G - P);
        rp.ignore_eos = 1;
        rp.detokenize = 0;
        rp.callback = on_token;
        rp.user = &gs;
        uint64_t rid;
        if (!gs.out || weft_request_submit(e, gids, P, &rp, &rid, &err)) {
            free(gs.out);
            rc = weft_cli_fail("eval parity", &err);
            goto free_bufs;
        }
        while (!gs.done) {
            weft_status s = weft_engine_step(e, &err);
            if (s < 0) {
                rc = weft_cli_fail("eval parity", &err);
                break;
            }
            if (s == WEFT_FINISHED) break;
        }
        size_t match = 0;
        while (match < gs.n && gids[P + match] == gs.out[match]) match++;
        printf("greedy: %zu of %zu continuation tokens identical (prompt %zu)\n", match, G - P, P);
        if (match != G - P) {
            printf("FAIL: greedy continuation differs at token %zu: expected %d, got %d\n",
                   P + match, gids[P + match], match < gs.n ? gs.out[match] : -1);
            rc = 1;
        }
        free(gs.out);
    }
    if (!rc) printf("PASS\n");
free_bufs:
    free(logits);
    free(rel);
    free(kls);
done:
    weft_engine_close(e);
    weft_safetensors_close(st);
    return rc;
}
