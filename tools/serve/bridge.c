/* The engine thread: the only thread that touches the engine (engine.h is single-threaded).
 * It opens the lock, proves the engine works with a real one-token generation (only then does
 * /health say 200), then loops: take new submissions and cancellations from the inbox, submit
 * them to the engine in arrival order (FCFS into the candidate's scheduler), run /v1/score
 * jobs when a kv slot is free, check the sockets of waiting connections for clients that left,
 * run one engine step, and publish metrics. Token events arrive in callbacks inside the step;
 * they are recorded in the request's choice under the request's lock and wake the suspended
 * HTTP connection. A failed step is an engine failure: the server turns unhealthy and the
 * process exits non-zero instead of serving errors. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plugin/lock.h"
#include "serve/serve.h"
#include "util/error.h"

#pragma weak weft_chat_template_load
#pragma weak weft_chat_template_free

typedef struct bridge {
    serve_req **active; /* accepted, not finished */
    size_t n_active, cap_active;
    serve_req **scores; /* score jobs waiting for a kv slot */
    size_t n_scores, cap_scores;
} bridge;

static int push(serve_req ***arr, size_t *n, size_t *cap, serve_req *r) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        serve_req **p = realloc(*arr, c * sizeof(*p));
        if (!p) return -1;
        *arr = p;
        *cap = c;
    }
    (*arr)[(*n)++] = r;
    return 0;
}

/* ---- token events (inside weft_engine_step, engine thread) ---------------------------------- */
static void on_event(void *user, const weft_token_event *ev) {
    serve_choice *c = user;
    serve_req *r = c->req;
    serve_server *s = r->srv;
    double now = serve_now();
    pthread_mutex_lock(&r->lock);
    pthread_mutex_lock(&s->metrics.lock);
    if (ev->token >= 0) {
        if (c->n_generated == 0) {
            c->t_first = now;
            serve_metrics_observe(&s->metrics, &s->metrics.ttft, now - r->t_arrival);
            int first_of_request = 1;
            for (uint32_t i = 0; i < r->n_choices; i++)
                if (&r->choices[i] != c && r->choices[i].n_generated) first_of_request = 0;
            if (first_of_request) atomic_fetch_add(&s->running, 1);
        } else {
            serve_metrics_observe(&s->metrics, &s->metrics.itl, now - c->t_last);
        }
        c->t_last = now;
        c->n_generated = ev->n_generated;
        s->metrics.generation_tokens++;
        if (r->g.logprobs) {
            if (c->n_toks == c->cap_toks) {
                size_t cap = c->cap_toks ? c->cap_toks * 2 : 32;
                serve_tok *t = realloc(c->toks, cap * sizeof(*t));
                if (t) {
                    c->toks = t;
                    c->cap_toks = cap;
                }
            }
            if (c->n_toks < c->cap_toks) {
                serve_tok *t = &c->toks[c->n_toks++];
                t->id = ev->token;
                t->logprob = ev->logprob;
                t->text_offset = (uint32_t)c->text.len;
                t->n_top = ev->n_top < WEFT_MAX_TOP_LOGPROBS ? ev->n_top : WEFT_MAX_TOP_LOGPROBS;
                if (t->n_top) memcpy(t->top, ev->top, t->n_top * sizeof(weft_token_logprob));
            }
        }
    }
    if (ev->text_len) serve_buf_append_utf8(&c->text, ev->text, ev->text_len);
    if (ev->token >= 0 && r->g.stream) {
        if (c->n_ends == c->cap_ends) {
            size_t cap = c->cap_ends ? c->cap_ends * 2 : 64;
            uint32_t *p = realloc(c->ends, cap * sizeof(*p));
            if (p) {
                c->ends = p;
                c->cap_ends = cap;
            }
        }
        if (c->n_ends < c->cap_ends) c->ends[c->n_ends++] = (uint32_t)c->text.len;
    }
    if (ev->finish && !c->finish) {
        c->finish = ev->finish;
        if (ev->message) snprintf(c->message, sizeof(c->message), "%s", ev->message);
        if (ev->finish < 5) s->metrics.finished[ev->finish]++;
        if (++r->n_done == r->n_choices) {
            r->phase = PHASE_DONE;
            serve_metrics_observe(&s->metrics, &s->metrics.e2e, now - r->t_arrival);
            int any = 0;
            for (uint32_t i = 0; i < r->n_choices; i++)
                any |= r->choices[i].n_generated > 0;
            if (any) atomic_fetch_sub(&s->running, 1);
            if (r->counted) {
                atomic_fetch_sub(&s->inflight, 1);
                r->counted = 0;
            }
        }
    }
    pthread_mutex_unlock(&s->metrics.lock);
    if (r->g.stream || r->phase == PHASE_DONE) serve_http_wake(r);
    pthread_mutex_unlock(&r->lock);
}

/* ---- submissions ---------------------------------------------------------------------------- */
static void finish_refused(serve_req *r, unsigned status, const char *code, const char *msg) {
    serve_server *s = r->srv;
    serve_err_set(&r->err, status, code, NULL, "%s", msg);
    r->phase = PHASE_DONE;
    if (r->counted) {
        atomic_fetch_sub(&s->inflight, 1);
        r->counted = 0;
    }
    serve_http_wake(r);
}

/* Engine thread; r->lock held. 0 = accepted (r goes to the active list). */
static int submit_generation(serve_server *s, serve_req *r) {
    weft_error e;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        serve_choice *c = &r->choices[i];
        const serve_prompt *p = &r->g.prompts[c->prompt];
        weft_request_params rp;
        weft_request_params_default(&rp);
        rp.sampling = r->g.sp;
        uint32_t j = c->index % r->g.n;
        rp.sampling.seed = r->g.seed_given ? r->g.sp.seed + j : serve_random_u64();
        rp.max_tokens = r->g.max_tokens;
        rp.stop = (const char *const *)r->g.stop;
        rp.n_stop = r->g.n_stop;
        rp.stop_ids = r->g.stop_ids;
        rp.n_stop_ids = r->g.n_stop_ids;
        rp.ignore_eos = r->g.ignore_eos;
        rp.skip_special = r->g.skip_special;
        rp.detokenize = s->tok != NULL;
        rp.callback = on_event;
        rp.user = c;
        weft_error_clear(&e);
        weft_status st = weft_request_submit(s->engine, p->ids, p->n, &rp, &c->engine_id, &e);
        if (st != WEFT_OK) {
            /* Validation mirrors the engine's checks, so this is rare: refuse the whole
             * request; choices already submitted are cancelled and still report back. */
            serve_err_set(&r->err, st == WEFT_ERR_INVALID ? 400 : 500,
                          st == WEFT_ERR_INVALID ? "invalid_value" : "engine_error", NULL, "%s",
                          e.message[0] ? e.message : weft_status_name(st));
            for (uint32_t k = 0; k < i; k++)
                weft_request_cancel(s->engine, r->choices[k].engine_id);
            for (uint32_t k = i; k < r->n_choices; k++) {
                r->choices[k].finish = WEFT_FINISH_ERROR;
                r->n_done++;
            }
            if (r->n_done == r->n_choices) {
                finish_refused(r, r->err.status, r->err.code, r->err.message);
                return -1;
            }
            r->cancelled = 1;
            return 0; /* stays active until the cancelled choices report */
        }
        c->submitted = 1;
    }
    double now = serve_now();
    pthread_mutex_lock(&s->metrics.lock);
    serve_metrics_observe(&s->metrics, &s->metrics.queue, now - r->t_arrival);
    for (uint32_t i = 0; i < r->g.n_prompts; i++)
        s->metrics.prompt_tokens += r->g.prompts[i].n;
    pthread_mutex_unlock(&s->metrics.lock);
    r->phase = PHASE_ACCEPTED;
    if (r->g.stream) serve_http_wake(r); /* the handler can now answer 200 and stream */
    return 0;
}

/* Engine thread; r->lock held. 1 = done, 0 = no kv slot free yet. */
static int run_score(serve_server *s, serve_req *r) {
    uint32_t V = s->vocab;
    float *logits = malloc((size_t)r->n_score * V * sizeof(float));
    if (!logits) {
        finish_refused(r, 500, "out_of_memory", "/v1/score: out of memory for the logits");
        return 1;
    }
    weft_error e;
    weft_error_clear(&e);
    weft_status st = weft_engine_score(s->engine, r->score_ids, r->n_score, logits, &e);
    if (st == WEFT_AGAIN) {
        free(logits);
        return 0;
    }
    if (st != WEFT_OK) {
        free(logits);
        finish_refused(r, st == WEFT_ERR_INVALID ? 400 : 500,
                       st == WEFT_ERR_INVALID ? "invalid_value" : "engine_error",
                       e.message[0] ? e.message : weft_status_name(st));
        return 1;
    }
    /* Position i > 0 scores token i under the distribution after tokens 0..i-1 (row i-1). */
    json_t *positions = json_array();
    double sum = 0;
    uint32_t greedy_all = 1;
    weft_token_logprob top[WEFT_MAX_TOP_LOGPROBS + 1];
    for (size_t i = 1; i < r->n_score; i++) {
        const float *row = logits + (i - 1) * (size_t)V;
        int32_t id = r->score_ids[i];
        float lp = weft_logprob_of(row, V, id);
        uint32_t k = r->score_k > 0 ? r->score_k : 1;
        uint32_t nt = weft_top_logprobs(row, V, k, top);
        int greedy = nt > 0 && top[0].id == id;
        if (nt > 0 && !greedy && top[0].logprob <= lp) greedy = 1; /* a tie with the best */
        greedy_all &= (uint32_t)greedy;
        sum += lp;
        json_t *alts = json_array();
        for (uint32_t t = 0; t < nt && t < r->score_k; t++)
            json_array_append_new(alts, json_pack("{s:i, s:o, s:f}", "token", top[t].id, "text",
                                                  serve_token_text(s, top[t].id), "logprob",
                                                  (double)top[t].logprob));
        json_array_append_new(positions,
                              json_pack("{s:I, s:i, s:o, s:f, s:b, s:o}", "index", (json_int_t)i,
                                        "token", id, "text", serve_token_text(s, id), "logprob",
                                        (double)lp, "greedy", greedy, "top_logprobs", alts));
    }
    free(logits);
    json_t *ids = json_array();
    for (size_t i = 0; i < r->n_score; i++)
        json_array_append_new(ids, json_integer(r->score_ids[i]));
    r->score_result = json_pack(
        "{s:s, s:s, s:s, s:I, s:o, s:o, s:f, s:b, s:{s:I, s:I}}", "id", r->id, "object", "score",
        "model", r->model, "created", (json_int_t)r->created, "tokens", ids, "positions", positions,
        "sum_logprob", sum, "all_greedy", (int)greedy_all, "usage", "prompt_tokens",
        (json_int_t)r->n_score, "total_tokens", (json_int_t)r->n_score);
    pthread_mutex_lock(&s->metrics.lock);
    s->metrics.prompt_tokens += r->n_score;
    serve_metrics_observe(&s->metrics, &s->metrics.e2e, serve_now() - r->t_arrival);
    pthread_mutex_unlock(&s->metrics.lock);
    r->phase = PHASE_DONE;
    if (r->counted) {
        atomic_fetch_sub(&s->inflight, 1);
        r->counted = 0;
    }
    serve_http_wake(r);
    return 1;
}

static void cancel_req(serve_server *s, serve_req *r) {
    for (uint32_t i = 0; i < r->n_choices; i++)
        if (r->choices[i].submitted && !r->choices[i].finish)
            weft_request_cancel(s->engine, r->choices[i].engine_id);
    r->cancelled = 1;
}

/* A waiting connection whose peer closed (or reset) its socket. Only suspended connections
 * are checked: libmicrohttpd neither reads nor closes those, so the descriptor is ours. */
static int peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int n = poll(&p, 1, 0);
    return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* ---- opening and the readiness probe ---------------------------------------------------- */
static void on_lock_problem(void *ctx, const char *line) {
    serve_server *s = ctx;
    fprintf(stderr, "weft serve: %s\n", line);
    if (!s->load_error[0]) snprintf(s->load_error, sizeof(s->load_error), "%s", line);
}

/* Every file the lock names (plugin libraries, manifests, model files) must still be the one
 * that was frozen; the loader re-checks the libraries it opens, this covers the rest. */
static int check_lock(serve_server *s) {
    weft_lock *l = NULL;
    weft_error e;
    weft_error_clear(&e);
    if (weft_lock_load(s->cfg.lock, &l, &e) != WEFT_OK) {
        snprintf(s->load_error, sizeof(s->load_error), "%s: %s", s->cfg.lock, e.message);
        return -1;
    }
    uint32_t problems = 0;
    weft_status st = weft_lock_check(l, 0, on_lock_problem, s, &problems, &e);
    weft_lock_free(l);
    if (st != WEFT_OK) {
        snprintf(s->load_error, sizeof(s->load_error), "%s: %s", s->cfg.lock, e.message);
        return -1;
    }
    if (problems) {
        char first[sizeof(s->load_error)];
        snprintf(first, sizeof(first), "%s", s->load_error);
        snprintf(s->load_error, sizeof(s->load_error),
                 "%s: %u file(s) differ from the lock, refusing to start (first: %.700s)",
                 s->cfg.lock, problems, first);
        return -1;
    }
    return 0;
}

static int open_engine(serve_server *s) {
    if (check_lock(s)) return -1;
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.lock_path = s->cfg.lock;
    o.max_model_len = s->cfg.max_model_len;
    o.max_requests = s->cfg.max_concurrency;
    o.threads = s->cfg.threads;
    weft_error e;
    weft_error_clear(&e);
    if (weft_engine_open(&o, &s->engine, &e) != WEFT_OK) {
        snprintf(s->load_error, sizeof(s->load_error), "%s: %s", e.source[0] ? e.source : "engine",
                 e.message);
        return -1;
    }
    const weft_candidate *cand = weft_engine_candidate(s->engine);
    s->tok = weft_engine_tokenizer(s->engine);
    s->vocab = weft_engine_config(s->engine)->vocab_size;
    s->max_model_len = weft_engine_max_model_len(s->engine);
    weft_engine_sampling_defaults(s->engine, &s->defaults);
    const weft_generation_config *gc = weft_engine_generation_config(s->engine);
    s->default_max_new_tokens = gc ? gc->max_new_tokens : 0;
    snprintf(s->candidate_id, sizeof(s->candidate_id), "%s", cand->id);
    snprintf(s->backend, sizeof(s->backend), "%s", cand->backend);
    if (s->cfg.served_model_name && s->cfg.served_model_name[0]) {
        snprintf(s->model_name, sizeof(s->model_name), "%s", s->cfg.served_model_name);
    } else {
        const char *dir = cand->model_dir;
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/')
            len--;
        size_t start = len;
        while (start > 0 && dir[start - 1] != '/')
            start--;
        snprintf(s->model_name, sizeof(s->model_name), "%.*s", (int)(len - start), dir + start);
    }
    if (!weft_chat_template_load || !weft_chat_template_free) {
        snprintf(s->chat_unavailable, sizeof(s->chat_unavailable),
                 "chat templates are not in this build; use /v1/completions");
    } else {
        weft_error_clear(&e);
        weft_status st = weft_chat_template_load(cand->model_dir, &s->chat, &e);
        if (st == WEFT_ERR_NOT_FOUND)
            snprintf(s->chat_unavailable, sizeof(s->chat_unavailable),
                     "the model '%s' has no chat template (its tokenizer_config.json has no "
                     "chat_template), so /v1/chat/completions cannot format messages; use "
                     "/v1/completions",
                     s->model_name);
        else if (st != WEFT_OK)
            snprintf(s->chat_unavailable, sizeof(s->chat_unavailable),
                     "the model's chat template could not be loaded: %s", e.message);
        if (st != WEFT_OK) s->chat = NULL;
    }
    return 0;
}

typedef struct probe_state {
    uint32_t finish, n;
    char message[256];
} probe_state;

static void on_probe(void *user, const weft_token_event *ev) {
    probe_state *p = user;
    if (ev->token >= 0) p->n++;
    if (ev->finish) {
        p->finish = ev->finish;
        if (ev->message) snprintf(p->message, sizeof(p->message), "%s", ev->message);
    }
}

/* A real one-token generation through the whole path (scheduler, kv, graph, sampler). */
static int probe(serve_server *s) {
    int32_t prompt[1] = {0};
    if (s->tok && weft_tokenizer_bos(s->tok) >= 0) prompt[0] = weft_tokenizer_bos(s->tok);
    probe_state ps = {0};
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.sampling = s->defaults;
    rp.sampling.temperature = 0;
    rp.max_tokens = 1;
    rp.callback = on_probe;
    rp.user = &ps;
    weft_error e;
    weft_error_clear(&e);
    uint64_t id;
    if (weft_request_submit(s->engine, prompt, 1, &rp, &id, &e) != WEFT_OK) {
        snprintf(s->load_error, sizeof(s->load_error), "readiness probe: %s", e.message);
        return -1;
    }
    for (int i = 0; i < 1000 && weft_engine_active(s->engine); i++) {
        weft_status st = weft_engine_step(s->engine, &e);
        if (st < 0) {
            snprintf(s->load_error, sizeof(s->load_error), "readiness probe: step failed: %s",
                     e.message);
            return -1;
        }
    }
    if (weft_engine_active(s->engine) || ps.n != 1 ||
        (ps.finish != WEFT_FINISH_STOP && ps.finish != WEFT_FINISH_LENGTH)) {
        snprintf(s->load_error, sizeof(s->load_error),
                 "readiness probe: expected one token, got %u (finish %s%s%s)", ps.n,
                 weft_finish_name(ps.finish), ps.message[0] ? ": " : "", ps.message);
        return -1;
    }
    return 0;
}

/* ---- the loop ----------------------------------------------------------------------------- */
static void publish_stats(serve_server *s) {
    weft_engine_stats es;
    weft_kv_stats kv;
    weft_engine_get_stats(s->engine, &es);
    weft_engine_kv_stats(s->engine, &kv);
    pthread_mutex_lock(&s->metrics.lock);
    s->metrics.engine_stats = es;
    s->metrics.kv_stats = kv;
    pthread_mutex_unlock(&s->metrics.lock);
}

/* Refuses whatever is queued (engine failure or stop); close also refuses every later
 * submission, so no request can wait on an engine thread that is gone. */
static void refuse_queue(serve_server *s, unsigned status, const char *code, const char *msg,
                         int close) {
    pthread_mutex_lock(&s->qlock);
    if (close) s->inbox_closed = 1;
    serve_req *q = s->q_head;
    s->q_head = s->q_tail = NULL;
    serve_req **cancels = s->cancels;
    size_t n_cancels = s->n_cancels;
    s->cancels = NULL;
    s->n_cancels = s->cap_cancels = 0;
    pthread_mutex_unlock(&s->qlock);
    while (q) {
        serve_req *next = q->qnext;
        pthread_mutex_lock(&q->lock);
        finish_refused(q, status, code, msg);
        pthread_mutex_unlock(&q->lock);
        serve_req_unref(q);
        q = next;
    }
    for (size_t i = 0; i < n_cancels; i++)
        serve_req_unref(cancels[i]);
    free(cancels);
}

static void engine_failed(serve_server *s, bridge *b, const char *msg) {
    weft_log(WEFT_LOG_ERROR, "serve", "engine failure: %s; the server stops", msg);
    snprintf(s->load_error, sizeof(s->load_error), "engine failure: %s", msg);
    atomic_store(&s->state, SERVE_FAILED);
    atomic_store(&s->exit_code, 1);
    for (size_t i = 0; i < b->n_active; i++) {
        serve_req *r = b->active[i];
        pthread_mutex_lock(&r->lock);
        for (uint32_t k = 0; k < r->n_choices; k++) {
            serve_choice *c = &r->choices[k];
            if (!c->finish) {
                c->finish = WEFT_FINISH_ERROR;
                snprintf(c->message, sizeof(c->message), "%s", msg);
                r->n_done++;
            }
        }
        if (r->phase != PHASE_DONE) finish_refused(r, 500, "engine_error", msg);
        pthread_mutex_unlock(&r->lock);
        serve_req_unref(r);
    }
    b->n_active = 0;
    for (size_t i = 0; i < b->n_scores; i++) {
        pthread_mutex_lock(&b->scores[i]->lock);
        finish_refused(b->scores[i], 500, "engine_error", msg);
        pthread_mutex_unlock(&b->scores[i]->lock);
        serve_req_unref(b->scores[i]);
    }
    b->n_scores = 0;
    refuse_queue(s, 503, "engine_failed", msg, 0);
}

static void *engine_main(void *arg) {
    serve_server *s = arg;
    bridge b = {0};
    if (open_engine(s) != 0 || probe(s) != 0) {
        weft_log(WEFT_LOG_ERROR, "serve", "%s", s->load_error);
        atomic_store(&s->exit_code, 1);
        atomic_store(&s->state, SERVE_FAILED);
        refuse_queue(s, 503, "engine_failed", s->load_error, 1);
        return NULL;
    }
    s->created = serve_unix_time();
    publish_stats(s);
    int expected = SERVE_LOADING; /* a signal during loading already moved it to DRAINING */
    atomic_compare_exchange_strong(&s->state, &expected, SERVE_READY);
    weft_log(WEFT_LOG_INFO, "serve", "ready: %s (%s, max_model_len %u)", s->model_name, s->backend,
             s->max_model_len);

    for (;;) {
        pthread_mutex_lock(&s->qlock);
        while (!s->q_head && !s->n_cancels && !s->cancel_all && !s->stop_engine &&
               b.n_active == 0 && b.n_scores == 0)
            pthread_cond_wait(&s->qcond, &s->qlock);
        serve_req *q = s->q_head;
        s->q_head = s->q_tail = NULL;
        serve_req **cancels = s->cancels;
        size_t n_cancels = s->n_cancels;
        s->cancels = NULL;
        s->n_cancels = s->cap_cancels = 0;
        int cancel_all = s->cancel_all, stop = s->stop_engine;
        s->cancel_all = 0;
        pthread_mutex_unlock(&s->qlock);

        /* Cancellations first: a client that left before its submission was processed is
         * never submitted (client_gone is checked below). */
        for (size_t i = 0; i < n_cancels; i++) {
            serve_req *r = cancels[i];
            pthread_mutex_lock(&r->lock);
            if (r->phase == PHASE_ACCEPTED && !r->cancelled) cancel_req(s, r);
            pthread_mutex_unlock(&r->lock);
            serve_req_unref(r);
        }
        free(cancels);
        while (q) {
            serve_req *r = q;
            q = q->qnext;
            r->qnext = NULL;
            pthread_mutex_lock(&r->lock);
            int keep = 0;
            if (r->client_gone) {
                finish_refused(r, 499, "client_closed", "the client closed the connection");
            } else if (r->kind == SERVE_KIND_SCORE) {
                keep = push(&b.scores, &b.n_scores, &b.cap_scores, r) == 0;
                if (!keep) finish_refused(r, 500, "out_of_memory", "out of memory");
            } else if (submit_generation(s, r) == 0) {
                keep = push(&b.active, &b.n_active, &b.cap_active, r) == 0;
                if (!keep) {
                    cancel_req(s, r); /* cannot track it: let the engine drop it */
                    keep = 0;
                }
            }
            pthread_mutex_unlock(&r->lock);
            if (!keep) serve_req_unref(r);
        }
        /* Score jobs in arrival order, each when the engine has a kv slot for it. */
        size_t w = 0;
        for (size_t i = 0; i < b.n_scores; i++) {
            serve_req *r = b.scores[i];
            pthread_mutex_lock(&r->lock);
            int done = 0;
            if (r->client_gone || cancel_all) {
                finish_refused(r, 499, "client_closed", "cancelled");
                done = 1;
            } else if (w == 0) {
                done = run_score(s, r);
            }
            pthread_mutex_unlock(&r->lock);
            if (done)
                serve_req_unref(r);
            else
                b.scores[w++] = r;
        }
        b.n_scores = w;

        /* Disconnects and drain-time cancellation. */
        for (size_t i = 0; i < b.n_active; i++) {
            serve_req *r = b.active[i];
            pthread_mutex_lock(&r->lock);
            if (!r->cancelled && r->phase != PHASE_DONE &&
                (cancel_all || r->client_gone || (r->suspended && peer_gone(r->fd)))) {
                if (!cancel_all) {
                    r->client_gone = 1;
                    pthread_mutex_lock(&s->metrics.lock);
                    s->metrics.cancelled_disconnect++;
                    pthread_mutex_unlock(&s->metrics.lock);
                }
                cancel_req(s, r);
            }
            pthread_mutex_unlock(&r->lock);
        }

        if (weft_engine_active(s->engine)) {
            weft_error e;
            weft_error_clear(&e);
            weft_status st = weft_engine_step(s->engine, &e);
            if (st < 0) {
                engine_failed(s, &b, e.message[0] ? e.message : weft_status_name(st));
                break;
            }
            if (st == WEFT_AGAIN) {
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
            }
        }
        publish_stats(s);

        /* Retire finished requests. */
        w = 0;
        for (size_t i = 0; i < b.n_active; i++) {
            serve_req *r = b.active[i];
            pthread_mutex_lock(&r->lock);
            int done = r->phase == PHASE_DONE;
            pthread_mutex_unlock(&r->lock);
            if (done)
                serve_req_unref(r);
            else
                b.active[w++] = r;
        }
        b.n_active = w;
        if (stop && b.n_active == 0 && b.n_scores == 0) {
            pthread_mutex_lock(&s->qlock);
            int empty = !s->q_head;
            pthread_mutex_unlock(&s->qlock);
            if (empty) break;
        }
    }
    refuse_queue(s, 503, "server_stopping", "the server is shutting down", 1);
    free(b.active);
    free(b.scores);
    return NULL;
}

int serve_bridge_start(serve_server *s) {
    if (pthread_create(&s->engine_thread, NULL, engine_main, s) != 0) return -1;
    s->engine_thread_started = 1;
    return 0;
}

int serve_bridge_submit(serve_server *s, serve_req *r, serve_err *err) {
    int state = atomic_load(&s->state);
    if (state != SERVE_READY)
        return serve_err_set(err, 503,
                             state == SERVE_DRAINING ? "server_draining" : "server_unavailable",
                             NULL, "%s",
                             state == SERVE_DRAINING  ? "the server is shutting down"
                             : state == SERVE_LOADING ? "the model is still loading"
                                                      : "the engine failed");
    if (atomic_load(&s->inflight) >= s->cfg.max_waiting)
        return serve_err_set(err, 503, "server_overloaded", NULL,
                             "too many requests in flight (%u); retry later", s->cfg.max_waiting);
    pthread_mutex_lock(&s->qlock);
    if (s->inbox_closed) {
        pthread_mutex_unlock(&s->qlock);
        return serve_err_set(err, 503, "server_unavailable", NULL, "the engine has stopped");
    }
    atomic_fetch_add(&s->inflight, 1);
    r->counted = 1;
    r->phase = PHASE_QUEUED;
    serve_req_ref(r);
    if (s->q_tail)
        s->q_tail->qnext = r;
    else
        s->q_head = r;
    s->q_tail = r;
    pthread_cond_signal(&s->qcond);
    pthread_mutex_unlock(&s->qlock);
    return 0;
}

void serve_bridge_cancel(serve_server *s, serve_req *r) {
    serve_req_ref(r);
    pthread_mutex_lock(&s->qlock);
    if (s->n_cancels == s->cap_cancels) {
        size_t cap = s->cap_cancels ? s->cap_cancels * 2 : 16;
        serve_req **p = realloc(s->cancels, cap * sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&s->qlock);
            serve_req_unref(r); /* the disconnect poll still catches it */
            return;
        }
        s->cancels = p;
        s->cap_cancels = cap;
    }
    s->cancels[s->n_cancels++] = r;
    pthread_cond_signal(&s->qcond);
    pthread_mutex_unlock(&s->qlock);
}

void serve_bridge_cancel_all(serve_server *s) {
    pthread_mutex_lock(&s->qlock);
    s->cancel_all = 1;
    pthread_cond_signal(&s->qcond);
    pthread_mutex_unlock(&s->qlock);
}

void serve_bridge_stop(serve_server *s) {
    if (!s->engine_thread_started) return;
    pthread_mutex_lock(&s->qlock);
    s->stop_engine = 1;
    pthread_cond_signal(&s->qcond);
    pthread_mutex_unlock(&s->qlock);
    pthread_join(s->engine_thread, NULL);
    s->engine_thread_started = 0;
}
