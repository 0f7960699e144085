/* `weft serve`: the types every part of the server shares. The server is split by concern:
 * main.c (flags, environment, signals, start and drain), http.c (libmicrohttpd daemon, routing,
 * bodies, auth, suspend/resume), handlers.c (one function per endpoint), request.c (OpenAI
 * request fields to engine parameters, with validation), respond.c (response and SSE chunk
 * JSON), bridge.c (the engine thread and its queue), metrics.c (Prometheus text), errors.c
 * (OpenAI-shaped errors) and util.c (buffers, clocks). docs/SERVE.md has the design. */
#ifndef WEFT_SERVE_SERVE_H
#define WEFT_SERVE_SERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/engine.h"
#include "engine/sampling.h"
#include "text/chat.h"
#include "text/tokenizer.h"

/* ---- limits (docs/SERVE.md, "Limits") ------------------------------------------------- */
#define SERVE_MAX_BODY_DEFAULT (4u << 20)  /* bytes of a request body */
#define SERVE_MAX_N 16                     /* n: choices per prompt */
#define SERVE_MAX_PROMPTS 64               /* prompts in one completions request */
#define SERVE_MAX_CHOICES 64               /* prompts x n */
#define SERVE_MAX_STOP 16                  /* stop strings */
#define SERVE_MAX_STOP_LEN 256             /* bytes of one stop string */
#define SERVE_MAX_STOP_IDS 64              /* stop_token_ids */
#define SERVE_MAX_LOGIT_BIAS 1024          /* logit_bias entries */
#define SERVE_MAX_MESSAGES 4096            /* chat messages */
#define SERVE_MAX_WAITING_DEFAULT 4096     /* requests admitted and not finished */
#define SERVE_MAX_SCORE_BYTES (256u << 20) /* (tokens x vocab) f32 logits of one /v1/score */
#define SERVE_MAX_USER_LEN 512

/* ---- buffers and clocks (util.c) ---------------------------------------------------------- */
typedef struct serve_buf {
    char *data;
    size_t len, cap;
} serve_buf;

int serve_buf_append(serve_buf *b, const void *data, size_t n); /* 0 or -1 (no memory) */
int serve_buf_printf(serve_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void serve_buf_free(serve_buf *b);
/* Appends t[0..n), with anything that is not UTF-8 (and NUL) replaced by U+FFFD. */
int serve_buf_append_utf8(serve_buf *b, const char *t, size_t n);
double serve_now(void); /* monotonic seconds */
int64_t serve_unix_time(void);
uint64_t serve_random_u64(void); /* not for secrets: seeds and ids */
/* True when s[0..n) is valid UTF-8. */
int serve_utf8_valid(const char *s, size_t n);

/* ---- errors (errors.c) ------------------------------------------------------------------- */
typedef struct serve_err {
    unsigned status; /* HTTP status, 0 = no error */
    char type[40];
    char code[48];
    char param[64];
    char message[768];
} serve_err;

/* Fills e (type from the status) and returns -1. param may be NULL. */
int serve_err_set(serve_err *e, unsigned status, const char *code, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* {"error": {"message", "type", "param", "code"}} */
json_t *serve_err_json(const serve_err *e);

/* ---- configuration (main.c) ---------------------------------------------------------------- */
typedef struct serve_config {
    const char *lock;
    const char *host;
    uint32_t port;
    const char *api_key;
    const char *served_model_name;
    uint32_t max_model_len;
    uint32_t max_concurrency;
    double shutdown_timeout;
    uint32_t threads;      /* engine worker threads, 0 = candidate's */
    uint32_t http_threads; /* libmicrohttpd thread pool */
    uint32_t max_body;
    uint32_t max_waiting;
} serve_config;

/* ---- metrics (metrics.c) ----------------------------------------------------------------- */
#define SERVE_HIST_MAX 24
typedef struct serve_hist {
    uint32_t n_bounds;
    double bounds[SERVE_HIST_MAX];
    uint64_t counts[SERVE_HIST_MAX + 1]; /* last: +Inf */
    double sum;
    uint64_t count;
} serve_hist;

typedef struct serve_metrics {
    pthread_mutex_t lock;
    serve_hist ttft, itl, e2e, queue;
    uint64_t prompt_tokens, generation_tokens;
    uint64_t finished[5];      /* by weft_finish */
    uint64_t http_by_class[6]; /* 1xx..5xx */
    uint64_t rejected;         /* requests answered 4xx/5xx before reaching the engine */
    uint64_t cancelled_disconnect;
    weft_engine_stats engine_stats; /* published by the engine thread */
    weft_kv_stats kv_stats;
} serve_metrics;

void serve_metrics_init(serve_metrics *m);
void serve_metrics_destroy(serve_metrics *m);
void serve_metrics_observe(serve_metrics *m, serve_hist *h, double v);
void serve_metrics_http(serve_metrics *m, unsigned status);

/* ---- server state ------------------------------------------------------------------------ */
enum { SERVE_LOADING = 0, SERVE_READY = 1, SERVE_DRAINING = 2, SERVE_FAILED = 3 };

struct serve_req;

typedef struct serve_server {
    serve_config cfg;
    struct MHD_Daemon *daemon;
    atomic_int state;
    atomic_int exit_code;

    /* Set once by the engine thread before state becomes READY; read-only afterwards. */
    weft_engine *engine;
    const weft_tokenizer *tok;
    weft_chat_template *chat;
    char chat_unavailable[512]; /* why chat is refused; "" when a template is loaded */
    uint32_t max_model_len, vocab;
    weft_sampler_params defaults;
    uint32_t default_max_new_tokens; /* generation_config max_new_tokens, 0 = unset */
    char model_name[256];
    char candidate_id[40];
    char backend[32];
    int64_t created;
    char load_error[1024];

    /* The engine thread's inbox (bridge.c). */
    pthread_t engine_thread;
    int engine_thread_started;
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    struct serve_req *q_head, *q_tail; /* submissions, in arrival order */
    struct serve_req **cancels;        /* requests whose client left */
    size_t n_cancels, cap_cancels;
    int inbox_closed;      /* the engine thread is gone: submissions refused (qlock) */
    int stop_engine;       /* engine thread: finish everything and return */
    int cancel_all;        /* drain timed out: cancel whatever runs */
    atomic_uint inflight;  /* admitted generation/score requests not yet finished */
    atomic_uint running;   /* of those, the ones that produced a token */
    atomic_uint live_reqs; /* serve_req objects alive (a response may still be sending) */

    serve_metrics metrics;
    atomic_ullong next_id;
} serve_server;

/* ---- one HTTP request --------------------------------------------------------------------- */
typedef enum serve_kind {
    SERVE_KIND_NONE = 0,
    SERVE_KIND_COMPLETION,
    SERVE_KIND_CHAT,
    SERVE_KIND_SCORE,
} serve_kind;

typedef struct serve_prompt {
    int32_t *ids;
    size_t n;
    char *text; /* for echo: the prompt as text (decoded when given as ids) */
    size_t text_len;
} serve_prompt;

typedef struct serve_tok {
    int32_t id;
    float logprob;
    uint32_t text_offset; /* bytes of the choice's text before this token's text */
    uint32_t n_top;
    weft_token_logprob top[WEFT_MAX_TOP_LOGPROBS];
} serve_tok;

typedef struct serve_choice {
    struct serve_req *req;
    uint32_t index, prompt;
    uint64_t engine_id;
    int submitted;
    serve_buf text;
    serve_tok *toks; /* only when logprobs were asked for */
    size_t n_toks, cap_toks;
    uint32_t *ends; /* text.len after each generated token: streams send one event per token */
    size_t n_ends, cap_ends;
    uint32_t n_generated;
    uint32_t finish; /* weft_finish, NONE while running */
    char message[256];
    double t_first, t_last;
    /* streaming cursors, HTTP side */
    size_t sent_text, sent_toks, sent_ends;
    int sent_role, sent_finish;
} serve_choice;

/* Parsed generation parameters (request.c). */
typedef struct serve_gen {
    int stream, include_usage, echo;
    int logprobs; /* 1 when logprobs were asked for */
    uint32_t top_k_logprobs;
    uint32_t n; /* per prompt */
    uint32_t max_tokens;
    int max_tokens_given;
    weft_sampler_params sp;
    int seed_given;
    int32_t *bias_ids;
    float *bias_values;
    char **stop;
    uint32_t n_stop;
    int32_t *stop_ids;
    uint32_t n_stop_ids;
    int ignore_eos, skip_special;
    serve_prompt *prompts;
    uint32_t n_prompts;
} serve_gen;

enum {
    PHASE_NEW = 0,  /* being received or validated by an HTTP thread */
    PHASE_QUEUED,   /* handed to the engine thread */
    PHASE_ACCEPTED, /* the engine took every choice */
    PHASE_DONE,     /* every choice finished (or the request was refused) */
};

typedef struct serve_req {
    pthread_mutex_t lock;
    atomic_int refs; /* the connection's, the stream's, and the engine thread's while it holds it */
    serve_server *srv;
    struct MHD_Connection *conn;
    int fd;
    serve_kind kind;
    const char *path; /* the route */
    char url[256];    /* the URL as requested (cut) */
    serve_buf body;
    int too_large;
    int responded; /* a response was queued */

    serve_gen g;
    serve_choice *choices;
    uint32_t n_choices, n_done;

    int phase;
    int suspended;   /* the connection is suspended (only then may the engine resume it) */
    int client_gone; /* the connection closed before the request finished */
    int cancelled;   /* cancellation handed to the engine */
    int counted;     /* counted in srv->inflight */
    serve_err err;   /* refusal from the engine thread (PHASE_DONE with err.status) */
    double t_arrival;
    char id[48];
    int64_t created;
    char model[256];

    /* /v1/score */
    int32_t *score_ids;
    size_t n_score;
    uint32_t score_k;
    json_t *score_result;

    /* streaming output (HTTP side) */
    serve_buf out;
    size_t out_off;
    int stream_ended;

    struct serve_req *qnext;
} serve_req;

void serve_req_ref(serve_req *r);
void serve_req_unref(serve_req *r);

/* ---- the engine thread (bridge.c) ---------------------------------------------------------- */
/* Starts the engine thread: it opens the lock, runs a one-token generation, sets READY (or
 * FAILED with load_error), then serves the queue. */
int serve_bridge_start(serve_server *s);
/* Hands a validated request to the engine thread (takes a reference). Fails (503) when the
 * server is not accepting or too many requests wait. */
int serve_bridge_submit(serve_server *s, serve_req *r, serve_err *err);
/* The client left: cancel what still runs. */
void serve_bridge_cancel(serve_server *s, serve_req *r);
/* Asks the engine thread to cancel everything (drain timeout) or to stop. */
void serve_bridge_cancel_all(serve_server *s);
void serve_bridge_stop(serve_server *s);

/* ---- HTTP (http.c) ------------------------------------------------------------------------ */
int serve_http_start(serve_server *s, char *errbuf, size_t cap);
void serve_http_quiesce(serve_server *s);
void serve_http_stop(serve_server *s);
/* Called by the engine thread with r->lock held: wakes a suspended connection. */
void serve_http_wake(serve_req *r);

/* ---- requests (request.c) ---------------------------------------------------------------------
 */
/* Parses a completions or chat body into r->g (prompts tokenized, limits checked). */
int serve_parse_generation(serve_server *s, serve_req *r, json_t *body, serve_err *err);
int serve_parse_score(serve_server *s, serve_req *r, json_t *body, serve_err *err);
/* The chat prompt text for messages (with the model's template). *out malloc'ed. */
int serve_render_chat(serve_server *s, json_t *messages, int add_generation_prompt, json_t *kwargs,
                      char **out, serve_err *err);
/* Checks "model" against the served name (404 model_not_found). */
int serve_check_model(serve_server *s, json_t *body, int required, char *model, size_t cap,
                      serve_err *err);
void serve_gen_free(serve_gen *g);
json_t *serve_token_text(serve_server *s, int32_t id); /* JSON string of one token's text */
int serve_token_bytes(serve_server *s, int32_t id, char **out, size_t *len);

/* ---- responses (respond.c) ------------------------------------------------------------------- */
json_t *serve_completion_json(serve_req *r);
/* Appends the SSE events that are ready to r->out (r->lock held). Returns 1 when the stream
 * is complete (everything, [DONE] included, is in r->out). */
int serve_stream_pump(serve_req *r);
const char *serve_finish_reason(uint32_t finish);

/* ---- handlers (handlers.c) ------------------------------------------------------------------- */
typedef struct serve_reply {
    unsigned status;
    json_t *json;      /* owned */
    char *text;        /* owned, for /metrics */
    const char *ctype; /* for text */
    int suspend;       /* the handler handed r to the engine: suspend and wait */
    int stream;        /* answer with an SSE stream once accepted */
} serve_reply;

void serve_handle(serve_server *s, serve_req *r, const char *method, serve_reply *out);
/* Called when a suspended generation or score request wakes up after it was handed over. */
void serve_handle_resumed(serve_server *s, serve_req *r, serve_reply *out);
char *serve_metrics_text(serve_server *s);

#endif
