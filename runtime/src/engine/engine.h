/* The engine: one loaded candidate turned into something that generates text. It is what
 * `weft run`, `weft serve` and `weft bench` drive, and the only place where the slots of
 * ARCHITECTURE.md meet: the scheduler plans a step, the kv provider reserves cache, the step
 * graph of the bucket that fits runs through the executor, the sampler picks tokens, and the
 * engine delivers text (streaming detokenisation, stop strings, log-probabilities) and retires
 * finished requests. docs/ENGINE.md describes the design.
 *
 * Threading: an engine is driven from one thread (the "engine thread"). weft_request_submit,
 * weft_request_cancel, weft_engine_step and weft_engine_score must all be called from it;
 * `weft serve` queues its HTTP requests to that thread. Callbacks run on it, inside
 * weft_engine_step, and may call weft_request_cancel (not submit or step).
 *
 * Usage:
 *     weft_engine_options o; weft_engine_options_default(&o); o.model_dir = "...";
 *     weft_engine *e; weft_engine_open(&o, &e, &err);
 *     weft_request_params rp; weft_request_params_default(&rp); rp.callback = on_token;
 *     weft_request_submit(e, ids, n, &rp, &id, &err);
 *     while (weft_engine_active(e)) weft_engine_step(e, &err);
 *     weft_engine_close(e);
 */
#ifndef WEFT_ENGINE_ENGINE_H
#define WEFT_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/sampling.h"
#include "files/config.h"
#include "plugin/candidate.h"
#include "text/tokenizer.h"
#include "weft/plugin.h"

typedef struct weft_engine weft_engine;

typedef struct weft_engine_options {
    uint32_t size;
    /* What to load: a lock (frozen candidate), or a candidate manifest resolved on the spot.
     * model_dir, when set, replaces the manifest's model. One of lock_path or manifest_path. */
    const char *lock_path;
    const char *manifest_path;
    const char *model_dir;
    uint32_t threads;          /* worker threads; 0 = the candidate's serving default, else 1 */
    uint32_t max_model_len;    /* 0 = the candidate's, else min(model max positions, 4096) */
    uint32_t max_requests;     /* requests holding a kv cache at once; 0 = candidate's or 1 */
    uint32_t max_batch_tokens; /* rows of the largest bucket; 0 = min(max_model_len, 512) */
    int profile;               /* time every node by op class (weft_engine_profile) */
    /* Tokens the kv pool may hold across all requests (0 = max_requests * max_model_len). Passed
     * to the kv provider as weft_kv_geometry.budget_bytes; below the full size, reserve answers
     * WEFT_AGAIN when the pool is full and a preempting scheduler makes room (sched.preempt). */
    uint64_t kv_tokens;
} weft_engine_options;

void weft_engine_options_default(weft_engine_options *o);
weft_status weft_engine_open(const weft_engine_options *o, weft_engine **out, weft_error *err);
void weft_engine_close(weft_engine *e);

/* NULL when the model directory has no tokenizer.json (the engine then works on ids only). */
const weft_tokenizer *weft_engine_tokenizer(const weft_engine *e);
const weft_model_config *weft_engine_config(const weft_engine *e);
const weft_candidate *weft_engine_candidate(const weft_engine *e);
uint32_t weft_engine_max_model_len(const weft_engine *e);
uint32_t weft_engine_threads(const weft_engine *e);
/* Sampling defaults from the model's generation_config.json over weft_sampler_params_default
 * (greedy unless the model says otherwise). */
void weft_engine_sampling_defaults(const weft_engine *e, weft_sampler_params *p);
/* The model's generation_config.json (all unset when the file is absent). */
const weft_generation_config *weft_engine_generation_config(const weft_engine *e);

/* ---- requests ---------------------------------------------------------------------------- */
typedef enum weft_finish {
    WEFT_FINISH_NONE = 0,
    WEFT_FINISH_STOP = 1,      /* an EOS or stop id, or a stop string */
    WEFT_FINISH_LENGTH = 2,    /* max_tokens or max_model_len reached */
    WEFT_FINISH_CANCELLED = 3, /* weft_request_cancel */
    WEFT_FINISH_ERROR = 4,     /* the step failed; message says why */
} weft_finish;

const char *weft_finish_name(uint32_t finish); /* "stop", "length", ... */

/* One event per generated token, then one final event (token -1, finish set) carrying the text
 * still held back (an incomplete UTF-8 tail, a partial stop-string match that did not match).
 * Pointers are valid only during the callback. */
typedef struct weft_token_event {
    uint32_t size;
    uint32_t finish; /* weft_finish; NONE except on the final event */
    uint64_t request_id;
    int32_t token; /* -1 on the final event */
    float logprob; /* of token, from the distribution before temperature */
    uint32_t n_top;
    const weft_token_logprob *top;
    const char *text; /* newly released text (UTF-8, may be empty), not NUL-terminated */
    size_t text_len;
    uint32_t n_prompt;
    uint32_t n_generated; /* tokens generated so far, this one included */
    const char *message;  /* finish == ERROR: what failed */
} weft_token_event;

typedef void (*weft_request_callback)(void *user, const weft_token_event *ev);

typedef struct weft_request_params {
    uint32_t size;
    weft_sampler_params sampling; /* arrays it points to are copied at submit */
    uint32_t max_tokens;          /* new tokens; 0 = until max_model_len */
    const char *const *stop;      /* stop strings (matched across tokens) */
    uint32_t n_stop;
    const int32_t *stop_ids; /* stop token ids, besides the model's EOS ids */
    uint32_t n_stop_ids;
    int ignore_eos;   /* keep generating past EOS */
    int skip_special; /* leave special tokens out of the text (default 1) */
    int detokenize;   /* produce text (default 1; needs a tokenizer) */
    weft_request_callback callback;
    void *user;
    uint32_t priority;
} weft_request_params;

void weft_request_params_default(weft_request_params *p);

/* Queues a request (control class). The prompt is copied. WEFT_ERR_INVALID when the prompt is
 * empty, holds an id outside the vocabulary, or leaves no room under max_model_len. */
weft_status weft_request_submit(weft_engine *e, const int32_t *prompt, size_t n_prompt,
                                const weft_request_params *p, uint64_t *id, weft_error *err);
/* Marks a request cancelled; its final event (CANCELLED) is delivered by the next step.
 * WEFT_ERR_NOT_FOUND when no such request is active. */
weft_status weft_request_cancel(weft_engine *e, uint64_t id);

/* Runs one step for whatever the scheduler plans. WEFT_OK when it did work, WEFT_FINISHED when
 * there is nothing to do, < 0 when the step failed (the requests in it finish with ERROR). */
weft_status weft_engine_step(weft_engine *e, weft_error *err);
/* Requests submitted and not yet finished. */
uint32_t weft_engine_active(const weft_engine *e);

/* Forward pass over ids with logits for every position (parity tests, /v1/score): logits is
 * (n, vocab) f32. Uses its own kv slot; WEFT_AGAIN when none is free. */
weft_status weft_engine_score(weft_engine *e, const int32_t *ids, size_t n, float *logits,
                              weft_error *err);

/* ---- inspection -------------------------------------------------------------------------- */
/* Builds (or finds) the graph of the bucket with max_tokens rows and prints it: one node per
 * line with the implementation chosen for it, then the graph hash. hash (optional) receives the
 * 32 hex digits. */
weft_status weft_engine_print_graph(weft_engine *e, uint32_t max_tokens, FILE *f, char hash[33],
                                    weft_error *err);

typedef struct weft_engine_stats {
    uint64_t steps;
    uint64_t prefill_tokens;
    uint64_t decode_tokens;
    uint64_t graphs_built;
    double step_seconds;           /* inside weft_engine_step */
    uint64_t prefix_cached_tokens; /* prompt tokens a kv prefix cache held (not computed) */
    uint64_t preemptions;       /* requests whose cache was dropped by the scheduler (recompute) */
    uint64_t recomputed_tokens; /* generated tokens fed again after a preemption */
} weft_engine_stats;
void weft_engine_get_stats(const weft_engine *e, weft_engine_stats *out);
/* The kv provider's figures (weft_kv_stats of plugin.h; zero before the kv is set up). */
void weft_engine_kv_stats(const weft_engine *e, weft_kv_stats *out);

/* Per op class timing when opened with profile = 1 (else all zero). Returns the number of
 * classes; names[i] and seconds[i], calls[i] filled for i < min(count, cap). */
uint32_t weft_engine_profile(const weft_engine *e, const char **names, double *seconds,
                             uint64_t *calls, uint32_t cap);
void weft_engine_profile_reset(weft_engine *e);

#endif
