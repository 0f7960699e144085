/* `weft eval run`: the state one run shares between its parts (run.c drives, run_speed.c times
 * the speed cases, gates.c checks the gates) and the request builders they share. The result
 * document they fill is described in docs/EVAL.md. */
#ifndef WEFT_TOOLS_EVAL_RUN_H
#define WEFT_TOOLS_EVAL_RUN_H

#include <jansson.h>
#include <stdint.h>

#include "eval/client.h"
#include "eval/eval.h"
#include "files/config.h"
#include "plugin/lock.h"

#define WEFT_EVAL_RESULT_VERSION 1

/* Quality gate defaults (issue 6); a candidate may only lower them. */
#define WEFT_EVAL_MEAN_KL 0.05
#define WEFT_EVAL_P99_KL 0.5
#define WEFT_EVAL_PPL_RATIO 1.05

typedef struct weft_eval_ctx {
    weft_client client;
    char model_name[256]; /* the served model name, sent as "model" */
    uint32_t max_model_len;
    uint32_t vocab;
    int quick;
    /* --case P,G,C (replaces the fixed list; for cross-checks) and --requests N per repeat */
    uint32_t custom[8][3];
    uint32_t n_custom;
    uint32_t requests;
    /* token ids of the built-in corpus (from the server's /tokenize) */
    int32_t *corpus;
    size_t n_corpus;
    int corpus_from_tokenizer;
    /* limits */
    int have_config, have_probe;
    weft_model_config cfg;
    weft_probe_file probe;
    char probe_path[1024];
    double weight_bytes; /* on disk, 0 = from the config */
    uint32_t dtype_bytes;
    /* the run */
    const weft_lock *lock;             /* NULL with --url */
    json_t *baseline;                  /* --baseline result or NULL */
    const char *reference_path;        /* quality reference logits */
    double mean_kl, p99_kl, ppl_ratio; /* thresholds in force */
    uint32_t seed;
    json_t *notes;  /* array of strings */
    json_t *gates;  /* array of gate objects */
    json_t *greedy; /* recorded greedy outputs, for other candidates to compare */
    int verbose;
} weft_eval_ctx;

/* Adds a note (printf-style) to the result and echoes it to stderr. */
void weft_eval_note(weft_eval_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void weft_eval_log(weft_eval_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A /v1/completions body: prompt as ids (ids != NULL) or text, greedy (temperature 0) unless
 * temperature > 0. Adds "model". */
json_t *weft_eval_completion(const weft_eval_ctx *x, const int32_t *ids, size_t n_ids,
                             const char *text, uint32_t max_tokens, double temperature,
                             int64_t seed, int stream);
/* n ids of the corpus starting at offset (wrapping around). out: (n). */
void weft_eval_corpus_ids(const weft_eval_ctx *x, size_t offset, size_t n, int32_t *out);
/* Text prompts of the built-in corpus. */
const char *weft_eval_corpus_text(void);
/* The i-th sentence-sized piece of the corpus text (wrapping); copied into buf. */
void weft_eval_corpus_piece(size_t i, size_t words, char *buf, size_t cap);

/* POST /tokenize; *ids malloc'ed. */
weft_status weft_eval_tokenize(weft_eval_ctx *x, const char *text, int32_t **ids, size_t *n,
                               weft_error *err);

/* The speed cases: appends to cases (array). */
weft_status weft_eval_speed(weft_eval_ctx *x, json_t *cases, weft_error *err);

/* Gates. Each appends {name, status, reason, ...} to x->gates. Phases let other traffic (the
 * speed cases) run between a gate's first and second half. */
weft_status weft_eval_gates_before(weft_eval_ctx *x, weft_error *err);
weft_status weft_eval_gates_after(weft_eval_ctx *x, weft_error *err);
/* Frees what the first half keeps for the second (also after a run that stopped between). */
void weft_eval_gates_free(void);
/* The quality gate alone (also used by tests through the CLI). */
weft_status weft_eval_gate_quality(weft_eval_ctx *x, weft_error *err);

/* Appends a gate object. status: "pass", "fail", "skip" or "reference". Takes detail. */
void weft_eval_gate_add(weft_eval_ctx *x, const char *name, const char *status, json_t *detail,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
