/* weft eval: probe the machine, compute a model's limits from its config and the probe, run
 * the fixed suite against a candidate and report. Shared declarations of the eval folder. */
#ifndef WEFT_TOOLS_EVAL_H
#define WEFT_TOOLS_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "weft/plugin.h"

/* The "format" of a `weft eval run` result document. */
#define WEFT_EVAL_RESULT_FORMAT "weft-eval-result"

/* A result of `weft eval run` (docs/EVAL.md) read from path: a JSON object whose "format" is
 * "weft-eval-result", at most 256 MiB (runtime/src/util/file.c's reader). NULL on error, with a
 * message starting with the path (missing or unreadable file, not JSON: "path:line:column:
 * text", not a result). The caller owns the reference. */
json_t *weft_eval_result_load(const char *path, weft_error *err);

/* A probe file (JSON written by `weft eval probe`). */
typedef struct weft_probe_file {
    char device[128];
    char arch[32];
    char backend[16];
    char date[32];
    weft_probe_result r;
} weft_probe_file;

weft_status weft_probe_load(const char *path, weft_probe_file *out, weft_error *err);
weft_status weft_probe_save(const char *path, const weft_probe_file *p, weft_error *err);
/* ${WEFT_CACHE:-${XDG_CACHE_HOME:-~/.cache}/weft}/probe-<backend>.json */
void weft_probe_default_path(const char *backend, char *buf, size_t cap);

/* The floors of one model on one machine (see limits.c for the arithmetic). */
typedef struct weft_limits {
    /* sizes */
    double params_total;       /* every weight element */
    double params_active;      /* read per decode token at batch 1 (MoE: routed experts only) */
    double weight_bytes_total;
    double weight_bytes_decode; /* bytes of weights read per decode step at batch 1 */
    double kv_bytes_per_token;  /* K and V of all layers for one token */
    double flops_per_token;     /* 2 x active non-embedding params, plus the LM head */
    /* floors, seconds */
    double decode_s;            /* one token at batch 1 with `context` tokens cached */
    double decode_tokens_per_s;
    double prefill_s;           /* `prompt` tokens */
    double prefill_tokens_per_s;
    double ttft_s;
    /* inputs */
    double bandwidth, gemm_rate;
    uint32_t context, prompt, batch;
    uint32_t weight_elem_bytes, kv_elem_bytes;
} weft_limits;

/* dtype_bytes: weight element size (2 for bf16); kv_bytes: cache element size. When
 * weight_bytes_on_disk > 0 it replaces the computed total (real checkpoints). */
void weft_limits_compute(const weft_model_config *cfg, double weight_bytes_on_disk,
                         uint32_t dtype_bytes, uint32_t kv_bytes, double bandwidth,
                         double gemm_rate, uint32_t context, uint32_t prompt, uint32_t batch,
                         weft_limits *out);
/* Prints the arithmetic so a reader can check every number. */
void weft_limits_print(FILE *f, const weft_model_config *cfg, const weft_limits *l);

int weft_eval_probe_main(int argc, char **argv);
int weft_eval_limits_main(int argc, char **argv);

#endif
