/* One function per endpoint. Handlers run on HTTP threads with the request's lock held; those
 * that need the engine (completions, chat, score) validate everything first, hand the request
 * to the engine thread and ask the HTTP layer to suspend; serve_handle_resumed answers once the
 * engine thread has accepted (streams) or finished (everything else) the request. /tokenize,
 * /detokenize, /v1/models, /health and /metrics are answered on the spot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve.h"
#include "util/error.h"

static void reply_error(serve_reply *out, const serve_err *e) {
    out->status = e->status;
    out->json = serve_err_json(e);
}

static void reply_json(serve_reply *out, unsigned status, json_t *j) {
    out->status = status;
    out->json = j;
}

/* The body as a JSON object, or a 400. */
static json_t *parse_body(serve_req *r, serve_err *err) {
    if (r->body.len == 0) {
        serve_err_set(err, 400, "invalid_json", NULL,
                      "the request body is empty; expected a JSON "
                      "object");
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(r->body.data, r->body.len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        serve_err_set(err, 400, "invalid_json", NULL,
                      "the request body is not valid JSON (line %d, column %d): %s", je.line,
                      je.column, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        serve_err_set(err, 400, "invalid_json", NULL, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

static int require_ready(serve_server *s, serve_err *err) {
    int st = atomic_load(&s->state);
    if (st == SERVE_READY) return 0;
    if (st == SERVE_LOADING)
        return serve_err_set(err, 503, "server_loading", NULL, "the model is still loading");
    if (st == SERVE_DRAINING)
        return serve_err_set(err, 503, "server_draining", NULL, "the server is shutting down");
    return serve_err_set(err, 503, "engine_failed", NULL, "the engine failed: %s", s->load_error);
}

/* ---- /health, /metrics, /v1/models ------------------------------------------------------ */
static void handle_health(serve_server *s, serve_reply *out) {
    int st = atomic_load(&s->state);
    static const char *const names[] = {"loading", "ok", "draining", "failed"};
    json_t *j = json_pack("{s:s}", "status", names[st & 3]);
    if (st == SERVE_FAILED) json_object_set_new(j, "error", json_string(s->load_error));
    reply_json(out, st == SERVE_READY ? 200 : 503, j);
}

static json_t *model_card(serve_server *s) {
    const weft_sampler_params *d = &s->defaults;
    json_t *defaults =
        json_pack("{s:f, s:f, s:i, s:f, s:f}", "temperature", (double)d->temperature, "top_p",
                  (double)d->top_p, "top_k", d->top_k, "min_p", (double)d->min_p,
                  "repetition_penalty", (double)d->repetition_penalty);
    if (s->default_max_new_tokens)
        json_object_set_new(defaults, "max_new_tokens", json_integer(s->default_max_new_tokens));
    json_t *weft = json_pack("{s:s, s:s, s:I, s:b, s:o}", "candidate_id", s->candidate_id,
                             "backend", s->backend, "vocab_size", (json_int_t)s->vocab,
                             "chat_template", s->chat != NULL, "sampling_defaults", defaults);
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:I, s:o}", "id", s->model_name, "object", "model",
                     "created", (json_int_t)s->created, "owned_by", "weft", "root", s->model_name,
                     "max_model_len", (json_int_t)s->max_model_len, "weft", weft);
}

static void handle_models(serve_server *s, serve_reply *out) {
    serve_err err;
    if (require_ready(s, &err)) return reply_error(out, &err);
    json_t *data = json_array();
    json_array_append_new(data, model_card(s));
    reply_json(out, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

static void handle_model_one(serve_server *s, const char *id, serve_reply *out) {
    serve_err err;
    if (require_ready(s, &err)) return reply_error(out, &err);
    if (strcmp(id, s->model_name)) {
        char shown[128];
        snprintf(shown, sizeof(shown), "%s", id);
        serve_err_set(&err, 404, "model_not_found", "model",
                      "The model '%s' does not exist; this server serves '%s'", shown,
                      s->model_name);
        return reply_error(out, &err);
    }
    reply_json(out, 200, model_card(s));
}

/* ---- /tokenize, /detokenize --------------------------------------------------------------- */
static json_t *utf8_string(const char *t, size_t n) {
    serve_buf b = {0};
    serve_buf_append_utf8(&b, t, n);
    json_t *j = json_stringn(b.data ? b.data : "", b.len);
    serve_buf_free(&b);
    return j;
}

static void handle_tokenize(serve_server *s, serve_req *r, json_t *body, serve_reply *out) {
    serve_err err;
    static const char *const known[] = {"model",
                                        "prompt",
                                        "messages",
                                        "add_special_tokens",
                                        "add_generation_prompt",
                                        "chat_template_kwargs",
                                        "return_token_strs",
                                        NULL};
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        int ok = 0;
        for (const char *const *k = known; *k; k++)
            ok |= !strcmp(*k, key);
        if (!ok) {
            char shown[64];
            snprintf(shown, sizeof(shown), "%s", key);
            serve_err_set(&err, 400, "unknown_parameter", shown,
                          "Unrecognized request argument supplied: %s", shown);
            return reply_error(out, &err);
        }
    }
    if (serve_check_model(s, body, 0, r->model, sizeof(r->model), &err))
        return reply_error(out, &err);
    if (!s->tok) {
        serve_err_set(&err, 400, "invalid_value", NULL, "the model has no tokenizer.json");
        return reply_error(out, &err);
    }
    json_t *prompt = json_object_get(body, "prompt"), *msgs = json_object_get(body, "messages");
    int has_p = prompt && !json_is_null(prompt), has_m = msgs && !json_is_null(msgs);
    if (has_p == has_m) {
        serve_err_set(&err, 400, "missing_required_parameter", "prompt",
                      "give exactly one of prompt (text) or messages (chat)");
        return reply_error(out, &err);
    }
    json_t *flag;
    int add_special = 1, add_gen = 1, strs = 0;
#define BOOLF(name, dst)                                                                           \
    flag = json_object_get(body, name);                                                            \
    if (flag && !json_is_null(flag)) {                                                             \
        if (!json_is_boolean(flag)) {                                                              \
            serve_err_set(&err, 400, "invalid_type", name, "%s: expected a boolean", name);        \
            return reply_error(out, &err);                                                         \
        }                                                                                          \
        dst = json_is_true(flag);                                                                  \
    }
    BOOLF("add_special_tokens", add_special);
    BOOLF("add_generation_prompt", add_gen);
    BOOLF("return_token_strs", strs);
#undef BOOLF
    char *text = NULL;
    size_t len = 0;
    if (has_m) {
        if (serve_render_chat(s, msgs, add_gen, json_object_get(body, "chat_template_kwargs"),
                              &text, &err))
            return reply_error(out, &err);
        len = strlen(text);
        add_special = 0; /* the template wrote its special tokens */
    } else {
        if (!json_is_string(prompt)) {
            serve_err_set(&err, 400, "invalid_type", "prompt", "prompt: expected a string");
            return reply_error(out, &err);
        }
        text = strndup(json_string_value(prompt), json_string_length(prompt));
        len = json_string_length(prompt);
    }
    int32_t *ids = NULL;
    size_t n = 0;
    weft_error e;
    weft_error_clear(&e);
    weft_status st = text ? weft_tokenizer_encode(s->tok, text, len, add_special, 1, &ids, &n, &e)
                          : WEFT_ERR_NOMEM;
    free(text);
    if (st != WEFT_OK) {
        serve_err_set(&err, 400, "invalid_value", "prompt", "%s", e.message);
        return reply_error(out, &err);
    }
    json_t *arr = json_array(), *tstr = strs ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(arr, json_integer(ids[i]));
        if (tstr) {
            const char *piece = weft_tokenizer_token(s->tok, ids[i]);
            json_array_append_new(tstr, piece ? utf8_string(piece, strlen(piece)) : json_null());
        }
    }
    free(ids);
    json_t *j = json_pack("{s:I, s:I, s:o}", "count", (json_int_t)n, "max_model_len",
                          (json_int_t)s->max_model_len, "tokens", arr);
    if (tstr) json_object_set_new(j, "token_strs", tstr);
    reply_json(out, 200, j);
}

static void handle_detokenize(serve_server *s, serve_req *r, json_t *body, serve_reply *out) {
    serve_err err;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        if (strcmp(key, "model") && strcmp(key, "tokens") && strcmp(key, "skip_special_tokens")) {
            char shown[64];
            snprintf(shown, sizeof(shown), "%s", key);
            serve_err_set(&err, 400, "unknown_parameter", shown,
                          "Unrecognized request argument supplied: %s", shown);
            return reply_error(out, &err);
        }
    }
    if (serve_check_model(s, body, 0, r->model, sizeof(r->model), &err))
        return reply_error(out, &err);
    if (!s->tok) {
        serve_err_set(&err, 400, "invalid_value", NULL, "the model has no tokenizer.json");
        return reply_error(out, &err);
    }
    json_t *toks = json_object_get(body, "tokens");
    if (!toks || !json_is_array(toks)) {
        serve_err_set(&err, 400, toks ? "invalid_type" : "missing_required_parameter", "tokens",
                      "tokens: expected an array of token ids");
        return reply_error(out, &err);
    }
    int skip = 0;
    json_t *sk = json_object_get(body, "skip_special_tokens");
    if (sk && !json_is_null(sk)) {
        if (!json_is_boolean(sk)) {
            serve_err_set(&err, 400, "invalid_type", "skip_special_tokens",
                          "skip_special_tokens: expected a boolean");
            return reply_error(out, &err);
        }
        skip = json_is_true(sk);
    }
    size_t n = json_array_size(toks);
    if (n > (size_t)s->max_model_len * 4) {
        serve_err_set(&err, 400, "invalid_value", "tokens", "tokens: at most %u ids, got %zu",
                      s->max_model_len * 4, n);
        return reply_error(out, &err);
    }
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!ids) {
        serve_err_set(&err, 500, "out_of_memory", NULL, "out of memory");
        return reply_error(out, &err);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(toks, i);
        long long id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (!json_is_integer(t) || id < 0 || id >= (long long)s->vocab) {
            free(ids);
            serve_err_set(&err, 400, "invalid_value", "tokens",
                          "tokens[%zu]: expected a token id from 0 to %u", i, s->vocab - 1);
            return reply_error(out, &err);
        }
        ids[i] = (int32_t)id;
    }
    char *text = NULL;
    size_t len = 0;
    weft_error e;
    weft_error_clear(&e);
    weft_status st = weft_tokenizer_decode(s->tok, ids, n, skip, &text, &len, &e);
    free(ids);
    if (st != WEFT_OK) {
        free(text);
        serve_err_set(&err, 400, "invalid_value", "tokens", "%s", e.message);
        return reply_error(out, &err);
    }
    json_t *j = json_pack("{s:o}", "prompt", utf8_string(text ? text : "", len));
    free(text);
    reply_json(out, 200, j);
}

/* ---- generation and score ---------------------------------------------------------------- */
static void handle_generation(serve_server *s, serve_req *r, json_t *body, serve_reply *out) {
    serve_err err = {0};
    if (serve_parse_generation(s, r, body, &err)) return reply_error(out, &err);
    uint32_t n = r->g.n_prompts * r->g.n;
    r->choices = calloc(n, sizeof(serve_choice));
    if (!r->choices) {
        serve_err_set(&err, 500, "out_of_memory", NULL, "out of memory");
        return reply_error(out, &err);
    }
    r->n_choices = n;
    for (uint32_t i = 0; i < n; i++) {
        r->choices[i].req = r;
        r->choices[i].index = i;
        r->choices[i].prompt = i / r->g.n;
    }
    uint64_t a = serve_random_u64(), b = serve_random_u64();
    snprintf(r->id, sizeof(r->id), "%s-%016llx%08llx",
             r->kind == SERVE_KIND_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)a,
             (unsigned long long)(b & 0xffffffffull));
    if (serve_bridge_submit(s, r, &err)) return reply_error(out, &err);
    out->suspend = 1;
}

static void handle_score(serve_server *s, serve_req *r, json_t *body, serve_reply *out) {
    serve_err err = {0};
    if (serve_parse_score(s, r, body, &err)) return reply_error(out, &err);
    snprintf(r->id, sizeof(r->id), "score-%016llx", (unsigned long long)serve_random_u64());
    if (serve_bridge_submit(s, r, &err)) return reply_error(out, &err);
    out->suspend = 1;
}

void serve_handle(serve_server *s, serve_req *r, const char *method, serve_reply *out) {
    (void)method;
    const char *path = r->path;
    if (!strcmp(path, "/health")) return handle_health(s, out);
    if (!strcmp(path, "/metrics")) {
        out->status = 200;
        out->text = serve_metrics_text(s);
        out->ctype = "text/plain; version=0.0.4; charset=utf-8";
        if (!out->text) {
            out->text = strdup("");
            out->status = 500;
        }
        return;
    }
    if (!strcmp(path, "/v1/models")) return handle_models(s, out);
    if (!strcmp(path, "/v1/models/")) return handle_model_one(s, r->url + strlen(path), out);
    serve_err err;
    if (require_ready(s, &err)) return reply_error(out, &err);
    json_t *body = parse_body(r, &err);
    if (!body) return reply_error(out, &err);
    if (!strcmp(path, "/v1/completions")) {
        r->kind = SERVE_KIND_COMPLETION;
        handle_generation(s, r, body, out);
    } else if (!strcmp(path, "/v1/chat/completions")) {
        r->kind = SERVE_KIND_CHAT;
        handle_generation(s, r, body, out);
    } else if (!strcmp(path, "/v1/score")) {
        r->kind = SERVE_KIND_SCORE;
        handle_score(s, r, body, out);
    } else if (!strcmp(path, "/tokenize")) {
        handle_tokenize(s, r, body, out);
    } else if (!strcmp(path, "/detokenize")) {
        handle_detokenize(s, r, body, out);
    } else {
        serve_err_set(&err, 404, "not_found", NULL, "no such endpoint");
        reply_error(out, &err);
    }
    json_decref(body);
    /* The body is no longer needed while the request waits for the engine. */
    serve_buf_free(&r->body);
}

void serve_handle_resumed(serve_server *s, serve_req *r, serve_reply *out) {
    (void)s;
    if (r->phase != PHASE_DONE) {
        if (r->phase == PHASE_ACCEPTED && r->g.stream)
            out->stream = 1;
        else
            out->suspend = 1;
        return;
    }
    if (r->err.status) return reply_error(out, &r->err);
    if (r->kind == SERVE_KIND_SCORE) {
        reply_json(out, 200, json_incref(r->score_result));
        return;
    }
    if (r->g.stream) {
        out->stream = 1;
        return;
    }
    for (uint32_t i = 0; i < r->n_choices; i++)
        if (r->choices[i].finish == WEFT_FINISH_ERROR) {
            serve_err err;
            serve_err_set(&err, 500, "engine_error", NULL, "generation failed: %s",
                          r->choices[i].message[0] ? r->choices[i].message : "engine error");
            return reply_error(out, &err);
        }
    reply_json(out, 200, serve_completion_json(r));
}
