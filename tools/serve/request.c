/* Request fields to engine parameters. Every field of a completions, chat or score body is
 * checked for type and range before anything reaches the engine, and every violation becomes a
 * 400 naming the field (param) and what was expected; fields weft does not support yet (tools,
 * response_format, ...) get a 400 that says so and unknown fields are refused, never ignored.
 * Prompts are tokenized here, on the HTTP thread (the tokenizer is read-only and reentrant),
 * so the engine thread only ever sees token ids whose length already fits the context. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve.h"
#include "util/error.h"

/* Chat templates are their own module (text/chat.h); a build without it refuses chat requests
 * with a message instead of failing to link. */
#pragma weak weft_chat_render

/* ---- field helpers ------------------------------------------------------------------------ */
/* Each returns 0 when the field is absent or null, 1 when it was read, -1 on a type or range
 * error (err filled). */
static int get_bool(json_t *o, const char *key, int *out, serve_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return serve_err_set(err, 400, "invalid_type", key, "%s: expected a boolean", key);
    *out = json_is_true(v);
    return 1;
}

static int get_number(json_t *o, const char *key, double lo, double hi, int lo_open, double *out,
                      serve_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return serve_err_set(err, 400, "invalid_type", key, "%s: expected a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || (lo_open ? d <= lo : d < lo) || d > hi)
        return serve_err_set(err, 400, "invalid_value", key, "%s: expected %s%g and <= %g, got %g",
                             key, lo_open ? "> " : ">= ", lo, hi, d);
    *out = d;
    return 1;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                   serve_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v))
        return serve_err_set(err, 400, "invalid_type", key, "%s: expected an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return serve_err_set(err, 400, "invalid_value", key,
                             "%s: expected an integer from %lld to %lld, got %lld", key, lo, hi, x);
    *out = x;
    return 1;
}

/* Refuses unsupported and unknown fields. */
static int check_fields(json_t *body, const char *const *known, const char *const *unsupported,
                        const char *endpoint, serve_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        int ok = 0;
        for (const char *const *k = known; *k && !ok; k++)
            ok = !strcmp(*k, key);
        if (ok) continue;
        for (const char *const *k = unsupported; *k; k++)
            if (!strcmp(*k, key))
                return serve_err_set(err, 400, "unsupported_parameter", key,
                                     "%s: weft does not support this field yet on %s", key,
                                     endpoint);
        char shown[64];
        snprintf(shown, sizeof(shown), "%s", key);
        return serve_err_set(err, 400, "unknown_parameter", shown,
                             "Unrecognized request argument supplied: %s", shown);
    }
    return 0;
}

int serve_check_model(serve_server *s, json_t *body, int required, char *model, size_t cap,
                      serve_err *err) {
    json_t *m = json_object_get(body, "model");
    if (!m || json_is_null(m)) {
        if (required)
            return serve_err_set(err, 400, "missing_required_parameter", "model",
                                 "model: required (this server serves \"%s\")", s->model_name);
        snprintf(model, cap, "%s", s->model_name);
        return 0;
    }
    if (!json_is_string(m))
        return serve_err_set(err, 400, "invalid_type", "model", "model: expected a string");
    if (strcmp(json_string_value(m), s->model_name)) {
        char shown[128];
        snprintf(shown, sizeof(shown), "%s", json_string_value(m));
        return serve_err_set(err, 404, "model_not_found", "model",
                             "The model '%s' does not exist; this server serves '%s'", shown,
                             s->model_name);
    }
    snprintf(model, cap, "%s", s->model_name);
    return 0;
}

/* The bytes one token contributes to text. Decoding a token alone loses what tokenizers strip
 * at the start of a text (sentencepiece's leading space), so the token is decoded after an
 * ordinary anchor token and the anchor's own text is removed; byte-fallback pieces (<0xNN>) are
 * their byte. *out is malloc'ed. */
int serve_token_bytes(serve_server *s, int32_t id, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (!s->tok) return -1;
    const char *piece = weft_tokenizer_token(s->tok, id);
    unsigned byte;
    char tail;
    if (piece && strlen(piece) == 6 && sscanf(piece, "<0x%2X%c", &byte, &tail) == 2 &&
        tail == '>') {
        *out = malloc(1);
        if (!*out) return -1;
        (*out)[0] = (char)byte;
        *len = 1;
        return 0;
    }
    weft_error e;
    weft_error_clear(&e);
    int32_t anchor = weft_tokenizer_find(s->tok, "a");
    if (anchor >= 0 && !weft_tokenizer_is_special(s->tok, id)) {
        int32_t pair[2] = {anchor, id};
        char *a = NULL, *ab = NULL;
        size_t alen = 0, ablen = 0;
        int ok = weft_tokenizer_decode(s->tok, pair, 1, 0, &a, &alen, &e) == WEFT_OK &&
                 weft_tokenizer_decode(s->tok, pair, 2, 0, &ab, &ablen, &e) == WEFT_OK &&
                 ablen >= alen && !memcmp(a, ab, alen);
        if (ok) {
            memmove(ab, ab + alen, ablen - alen);
            *out = ab;
            *len = ablen - alen;
            free(a);
            return 0;
        }
        free(a);
        free(ab);
    }
    return weft_tokenizer_decode(s->tok, &id, 1, 0, out, len, &e) == WEFT_OK ? 0 : -1;
}

json_t *serve_token_text(serve_server *s, int32_t id) {
    char *text = NULL;
    size_t len = 0;
    if (serve_token_bytes(s, id, &text, &len)) {
        free(text);
        char buf[32];
        snprintf(buf, sizeof(buf), "token_id:%d", id);
        return json_string(buf);
    }
    json_t *j = NULL;
    if (serve_utf8_valid(text, len) && !memchr(text, 0, len)) {
        j = json_stringn(text, len);
    } else {
        /* A piece of a multi-byte character: OpenAI's "bytes:\xNN" spelling. */
        serve_buf b = {0};
        serve_buf_append(&b, "bytes:", 6);
        for (size_t i = 0; i < len; i++)
            serve_buf_printf(&b, "\\x%02x", (unsigned char)text[i]);
        j = json_string(b.data ? b.data : "");
        serve_buf_free(&b);
    }
    free(text);
    return j ? j : json_string("");
}

void serve_gen_free(serve_gen *g) {
    free(g->bias_ids);
    free(g->bias_values);
    for (uint32_t i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
    free(g->stop);
    free(g->stop_ids);
    for (uint32_t i = 0; i < g->n_prompts; i++) {
        free(g->prompts[i].ids);
        free(g->prompts[i].text);
    }
    free(g->prompts);
    memset(g, 0, sizeof(*g));
}

/* ---- prompts ------------------------------------------------------------------------------ */
static int encode_text(serve_server *s, const char *text, size_t len, int add_special,
                       const char *param, serve_prompt *p, serve_err *err) {
    if (!s->tok)
        return serve_err_set(err, 400, "invalid_value", param,
                             "%s: the model has no tokenizer.json, so only token ids are "
                             "accepted",
                             param);
    weft_error e;
    weft_error_clear(&e);
    if (weft_tokenizer_encode(s->tok, text, len, add_special, 1, &p->ids, &p->n, &e) != WEFT_OK)
        return serve_err_set(err, 400, "invalid_value", param, "%s: %s", param, e.message);
    return 0;
}

static int ids_from_array(serve_server *s, json_t *arr, const char *param, serve_prompt *p,
                          serve_err *err) {
    size_t n = json_array_size(arr);
    if (n == 0)
        return serve_err_set(err, 400, "invalid_value", param, "%s: expected at least one token",
                             param);
    if (n > s->max_model_len)
        return serve_err_set(err, 400, "context_length_exceeded", param,
                             "This model's maximum context length is %u tokens. However, your "
                             "prompt has %zu tokens.",
                             s->max_model_len, n);
    p->ids = malloc(sizeof(int32_t) * n);
    if (!p->ids) return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v))
            return serve_err_set(err, 400, "invalid_type", param,
                                 "%s[%zu]: expected a token id (integer)", param, i);
        long long id = json_integer_value(v);
        if (id < 0 || id >= (long long)s->vocab)
            return serve_err_set(err, 400, "invalid_value", param,
                                 "%s[%zu]: token id %lld is outside the vocabulary (0..%u)", param,
                                 i, id, s->vocab - 1);
        p->ids[i] = (int32_t)id;
    }
    p->n = n;
    if (s->tok) {
        weft_error e;
        weft_error_clear(&e);
        size_t len = 0;
        if (weft_tokenizer_decode(s->tok, p->ids, n, 1, &p->text, &len, &e) == WEFT_OK)
            p->text_len = len;
    }
    return 0;
}

static int parse_prompts(serve_server *s, json_t *pr, serve_gen *g, serve_err *err) {
    if (!pr || json_is_null(pr))
        return serve_err_set(err, 400, "missing_required_parameter", "prompt",
                             "prompt: required (a string, an array of strings, an array of "
                             "token ids or an array of such arrays)");
    if (json_is_string(pr)) {
        g->prompts = calloc(1, sizeof(serve_prompt));
        if (!g->prompts) return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
        g->n_prompts = 1;
        g->prompts[0].text = strndup(json_string_value(pr), json_string_length(pr));
        if (!g->prompts[0].text)
            return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
        g->prompts[0].text_len = json_string_length(pr);
        return encode_text(s, json_string_value(pr), json_string_length(pr), 1, "prompt",
                           &g->prompts[0], err);
    }
    if (!json_is_array(pr))
        return serve_err_set(err, 400, "invalid_type", "prompt",
                             "prompt: expected a string, an array of strings, an array of token "
                             "ids or an array of such arrays");
    size_t n = json_array_size(pr);
    if (n == 0)
        return serve_err_set(err, 400, "invalid_value", "prompt", "prompt: the array is empty");
    json_t *first = json_array_get(pr, 0);
    if (json_is_integer(first)) {
        g->prompts = calloc(1, sizeof(serve_prompt));
        if (!g->prompts) return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
        g->n_prompts = 1;
        return ids_from_array(s, pr, "prompt", &g->prompts[0], err);
    }
    if (n > SERVE_MAX_PROMPTS)
        return serve_err_set(err, 400, "invalid_value", "prompt",
                             "prompt: at most %d prompts per request, got %zu", SERVE_MAX_PROMPTS,
                             n);
    g->prompts = calloc(n, sizeof(serve_prompt));
    if (!g->prompts) return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
    g->n_prompts = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(pr, i);
        char param[32];
        snprintf(param, sizeof(param), "prompt[%zu]", i);
        if (json_is_string(v)) {
            g->prompts[i].text = strndup(json_string_value(v), json_string_length(v));
            if (!g->prompts[i].text)
                return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
            g->prompts[i].text_len = json_string_length(v);
            if (encode_text(s, json_string_value(v), json_string_length(v), 1, param,
                            &g->prompts[i], err))
                return -1;
        } else if (json_is_array(v)) {
            if (ids_from_array(s, v, param, &g->prompts[i], err)) return -1;
        } else {
            return serve_err_set(err, 400, "invalid_type", "prompt",
                                 "%s: expected a string or an array of token ids", param);
        }
    }
    return 0;
}

/* ---- chat ---------------------------------------------------------------------------------- */
static int chat_messages(json_t *msgs, json_t **out, serve_err *err) {
    if (!msgs || json_is_null(msgs))
        return serve_err_set(err, 400, "missing_required_parameter", "messages",
                             "messages: required (an array of {role, content})");
    if (!json_is_array(msgs))
        return serve_err_set(err, 400, "invalid_type", "messages", "messages: expected an array");
    size_t n = json_array_size(msgs);
    if (n == 0)
        return serve_err_set(err, 400, "invalid_value", "messages",
                             "messages: expected at least one message");
    if (n > SERVE_MAX_MESSAGES)
        return serve_err_set(err, 400, "invalid_value", "messages",
                             "messages: at most %d messages, got %zu", SERVE_MAX_MESSAGES, n);
    json_t *norm = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m)) {
            json_decref(norm);
            return serve_err_set(err, 400, "invalid_type", "messages",
                                 "messages[%zu]: expected an object", i);
        }
        const char *key;
        json_t *v;
        json_object_foreach(m, key, v) {
            (void)v;
            if (!strcmp(key, "role") || !strcmp(key, "content") || !strcmp(key, "name")) continue;
            json_decref(norm);
            if (!strcmp(key, "tool_calls") || !strcmp(key, "tool_call_id") ||
                !strcmp(key, "function_call") || !strcmp(key, "audio") || !strcmp(key, "refusal"))
                return serve_err_set(err, 400, "unsupported_parameter", "messages",
                                     "messages[%zu].%s: weft does not support tools or "
                                     "non-text messages yet",
                                     i, key);
            char shown[64];
            snprintf(shown, sizeof(shown), "%s", key);
            return serve_err_set(err, 400, "unknown_parameter", "messages",
                                 "messages[%zu]: unrecognized field %s", i, shown);
        }
        json_t *role = json_object_get(m, "role");
        const char *r = json_is_string(role) ? json_string_value(role) : NULL;
        if (!r || (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") &&
                   strcmp(r, "assistant"))) {
            json_decref(norm);
            if (r && !strcmp(r, "tool"))
                return serve_err_set(err, 400, "unsupported_parameter", "messages",
                                     "messages[%zu].role: tool messages are not supported yet", i);
            return serve_err_set(err, 400, "invalid_value", "messages",
                                 "messages[%zu].role: expected system, developer, user or "
                                 "assistant",
                                 i);
        }
        /* Templates know "system"; OpenAI's "developer" plays the same part. */
        if (!strcmp(r, "developer")) r = "system";
        json_t *content = json_object_get(m, "content");
        serve_buf text = {0};
        if (json_is_string(content)) {
            serve_buf_append(&text, json_string_value(content), json_string_length(content));
        } else if (json_is_array(content)) {
            size_t np = json_array_size(content);
            for (size_t k = 0; k < np; k++) {
                json_t *part = json_array_get(content, k);
                json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
                json_t *t = json_is_object(part) ? json_object_get(part, "text") : NULL;
                if (!json_is_string(type) || strcmp(json_string_value(type), "text") ||
                    !json_is_string(t) || json_object_size(part) != 2) {
                    serve_buf_free(&text);
                    json_decref(norm);
                    if (json_is_string(type) && strcmp(json_string_value(type), "text"))
                        return serve_err_set(err, 400, "unsupported_parameter", "messages",
                                             "messages[%zu].content[%zu]: only text parts are "
                                             "supported",
                                             i, k);
                    return serve_err_set(err, 400, "invalid_type", "messages",
                                         "messages[%zu].content[%zu]: expected {\"type\": "
                                         "\"text\", \"text\": string}",
                                         i, k);
                }
                serve_buf_append(&text, json_string_value(t), json_string_length(t));
            }
        } else {
            json_decref(norm);
            return serve_err_set(err, 400, "invalid_type", "messages",
                                 "messages[%zu].content: expected a string or an array of text "
                                 "parts",
                                 i);
        }
        json_t *nm =
            json_pack("{s:s, s:s#}", "role", r, "content", text.data ? text.data : "", text.len);
        json_t *name = json_object_get(m, "name");
        if (name && !json_is_null(name)) {
            if (!json_is_string(name)) {
                serve_buf_free(&text);
                json_decref(nm);
                json_decref(norm);
                return serve_err_set(err, 400, "invalid_type", "messages",
                                     "messages[%zu].name: expected a string", i);
            }
            json_object_set(nm, "name", name);
        }
        serve_buf_free(&text);
        json_array_append_new(norm, nm);
    }
    *out = norm;
    return 0;
}

int serve_render_chat(serve_server *s, json_t *messages, int add_generation_prompt, json_t *kwargs,
                      char **out, serve_err *err) {
    if (!s->chat)
        return serve_err_set(err, 400, "chat_template_unavailable", "messages", "%s",
                             s->chat_unavailable);
    if (!weft_chat_render)
        return serve_err_set(err, 400, "chat_template_unavailable", "messages",
                             "chat templates are not in this build");
    json_t *norm = NULL;
    if (chat_messages(messages, &norm, err)) return -1;
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) {
        json_decref(norm);
        return serve_err_set(err, 400, "invalid_type", "chat_template_kwargs",
                             "chat_template_kwargs: expected an object");
    }
    char *mtext = json_dumps(norm, JSON_COMPACT);
    char *ktext = kwargs && json_is_object(kwargs) ? json_dumps(kwargs, JSON_COMPACT) : NULL;
    json_decref(norm);
    weft_error e;
    weft_error_clear(&e);
    weft_status st = mtext ? weft_chat_render(s->chat, mtext, add_generation_prompt, ktext, out, &e)
                           : WEFT_ERR_NOMEM;
    free(mtext);
    free(ktext);
    if (st != WEFT_OK)
        return serve_err_set(err, 400, "chat_template_error", "messages",
                             "the chat template could not render these messages: %s",
                             e.message[0] ? e.message : weft_status_name(st));
    return 0;
}

/* ---- generation ---------------------------------------------------------------------------- */
static const char *const completion_fields[] = {"model",
                                                "prompt",
                                                "max_tokens",
                                                "temperature",
                                                "top_p",
                                                "top_k",
                                                "min_p",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "repetition_penalty",
                                                "logit_bias",
                                                "seed",
                                                "stop",
                                                "stop_token_ids",
                                                "n",
                                                "best_of",
                                                "logprobs",
                                                "echo",
                                                "user",
                                                "stream",
                                                "stream_options",
                                                "ignore_eos",
                                                "min_tokens",
                                                "skip_special_tokens",
                                                NULL};
static const char *const completion_unsupported[] = {
    "suffix",          "tools",           "tool_choice",    "functions",    "function_call",
    "response_format", "prompt_logprobs", "guided_json",    "guided_regex", "guided_choice",
    "guided_grammar",  "use_beam_search", "length_penalty", "lora_request", NULL};
static const char *const chat_fields[] = {"model",
                                          "messages",
                                          "max_tokens",
                                          "max_completion_tokens",
                                          "temperature",
                                          "top_p",
                                          "top_k",
                                          "min_p",
                                          "presence_penalty",
                                          "frequency_penalty",
                                          "repetition_penalty",
                                          "logit_bias",
                                          "seed",
                                          "stop",
                                          "stop_token_ids",
                                          "n",
                                          "logprobs",
                                          "top_logprobs",
                                          "user",
                                          "stream",
                                          "stream_options",
                                          "ignore_eos",
                                          "min_tokens",
                                          "skip_special_tokens",
                                          "add_generation_prompt",
                                          "chat_template_kwargs",
                                          NULL};
static const char *const chat_unsupported[] = {"tools",
                                               "tool_choice",
                                               "functions",
                                               "function_call",
                                               "parallel_tool_calls",
                                               "response_format",
                                               "audio",
                                               "modalities",
                                               "prediction",
                                               "web_search_options",
                                               "reasoning_effort",
                                               "store",
                                               "metadata",
                                               "service_tier",
                                               "echo",
                                               "continue_final_message",
                                               "chat_template",
                                               "guided_json",
                                               "guided_regex",
                                               "guided_choice",
                                               "guided_grammar",
                                               "use_beam_search",
                                               "documents",
                                               NULL};

static int parse_stop(json_t *body, serve_gen *g, serve_server *s, serve_err *err) {
    json_t *st = json_object_get(body, "stop");
    if (st && !json_is_null(st)) {
        size_t n = json_is_string(st) ? 1 : json_is_array(st) ? json_array_size(st) : 0;
        if (!json_is_string(st) && !json_is_array(st))
            return serve_err_set(err, 400, "invalid_type", "stop",
                                 "stop: expected a string or an array of strings");
        if (n > SERVE_MAX_STOP)
            return serve_err_set(err, 400, "invalid_value", "stop",
                                 "stop: at most %d stop strings, got %zu", SERVE_MAX_STOP, n);
        g->stop = calloc(n ? n : 1, sizeof(char *));
        if (!g->stop) return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_is_string(st) ? st : json_array_get(st, i);
            if (!json_is_string(v))
                return serve_err_set(err, 400, "invalid_type", "stop",
                                     "stop[%zu]: expected a string", i);
            size_t len = json_string_length(v);
            if (len == 0 || len > SERVE_MAX_STOP_LEN || memchr(json_string_value(v), 0, len))
                return serve_err_set(err, 400, "invalid_value", "stop",
                                     "stop[%zu]: expected 1 to %d bytes without NUL, got %zu", i,
                                     SERVE_MAX_STOP_LEN, len);
            g->stop[i] = strndup(json_string_value(v), len);
            if (!g->stop[i]) return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
            g->n_stop = (uint32_t)i + 1;
        }
    }
    json_t *ids = json_object_get(body, "stop_token_ids");
    if (ids && !json_is_null(ids)) {
        if (!json_is_array(ids))
            return serve_err_set(err, 400, "invalid_type", "stop_token_ids",
                                 "stop_token_ids: expected an array of token ids");
        size_t n = json_array_size(ids);
        if (n > SERVE_MAX_STOP_IDS)
            return serve_err_set(err, 400, "invalid_value", "stop_token_ids",
                                 "stop_token_ids: at most %d ids, got %zu", SERVE_MAX_STOP_IDS, n);
        g->stop_ids = malloc(sizeof(int32_t) * (n ? n : 1));
        if (!g->stop_ids) return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_array_get(ids, i);
            long long id = json_is_integer(v) ? json_integer_value(v) : -1;
            if (!json_is_integer(v) || id < 0 || id >= (long long)s->vocab)
                return serve_err_set(err, 400, "invalid_value", "stop_token_ids",
                                     "stop_token_ids[%zu]: expected a token id from 0 to %u", i,
                                     s->vocab - 1);
            g->stop_ids[i] = (int32_t)id;
        }
        g->n_stop_ids = (uint32_t)n;
    }
    return 0;
}

static int parse_logit_bias(json_t *body, serve_gen *g, serve_server *s, serve_err *err) {
    json_t *lb = json_object_get(body, "logit_bias");
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb))
        return serve_err_set(err, 400, "invalid_type", "logit_bias",
                             "logit_bias: expected an object mapping token ids to numbers");
    size_t n = json_object_size(lb);
    if (n > SERVE_MAX_LOGIT_BIAS)
        return serve_err_set(err, 400, "invalid_value", "logit_bias",
                             "logit_bias: at most %d entries, got %zu", SERVE_MAX_LOGIT_BIAS, n);
    if (n == 0) return 0;
    g->bias_ids = malloc(sizeof(int32_t) * n);
    g->bias_values = malloc(sizeof(float) * n);
    if (!g->bias_ids || !g->bias_values)
        return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
    const char *key;
    json_t *v;
    uint32_t i = 0;
    json_object_foreach(lb, key, v) {
        char *end = NULL;
        long long id = strtoll(key, &end, 10);
        char shown[40];
        snprintf(shown, sizeof(shown), "%s", key);
        if (!key[0] || !end || *end || id < 0 || id >= (long long)s->vocab)
            return serve_err_set(err, 400, "invalid_value", "logit_bias",
                                 "logit_bias: key '%s' is not a token id from 0 to %u", shown,
                                 s->vocab - 1);
        if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
            fabs(json_number_value(v)) > 100.0)
            return serve_err_set(err, 400, "invalid_value", "logit_bias",
                                 "logit_bias[%s]: expected a number from -100 to 100", shown);
        g->bias_ids[i] = (int32_t)id;
        g->bias_values[i] = (float)json_number_value(v);
        i++;
    }
    g->sp.n_bias = i;
    g->sp.bias_ids = g->bias_ids;
    g->sp.bias_values = g->bias_values;
    return 0;
}

int serve_parse_generation(serve_server *s, serve_req *r, json_t *body, serve_err *err) {
    int chat = r->kind == SERVE_KIND_CHAT;
    serve_gen *g = &r->g;
    if (check_fields(body, chat ? chat_fields : completion_fields,
                     chat ? chat_unsupported : completion_unsupported,
                     chat ? "/v1/chat/completions" : "/v1/completions", err))
        return -1;
    if (serve_check_model(s, body, 1, r->model, sizeof(r->model), err)) return -1;

    g->sp = s->defaults;
    g->skip_special = 1;
    g->n = 1;
    double d = 0; /* set by get_number when it returns 1 */
    long long x = 0;
    int rc, b;
#define NUM(key, lo, hi, open, dst)                                                                \
    do {                                                                                           \
        if ((rc = get_number(body, key, lo, hi, open, &d, err)) < 0) return -1;                    \
        if (rc) dst = (float)d;                                                                    \
    } while (0)
    NUM("temperature", 0.0, 2.0, 0, g->sp.temperature);
    NUM("top_p", 0.0, 1.0, 1, g->sp.top_p);
    NUM("min_p", 0.0, 1.0, 0, g->sp.min_p);
    NUM("presence_penalty", -2.0, 2.0, 0, g->sp.presence_penalty);
    NUM("frequency_penalty", -2.0, 2.0, 0, g->sp.frequency_penalty);
    NUM("repetition_penalty", 0.0, 10.0, 1, g->sp.repetition_penalty);
#undef NUM
    if ((rc = get_int(body, "top_k", -1, (long long)s->vocab, &x, err)) < 0) return -1;
    if (rc) g->sp.top_k = x < 0 ? 0 : (int32_t)x;
    if ((rc = get_int(body, "seed", 0, INT64_MAX, &x, err)) < 0) return -1;
    if (rc) {
        g->sp.seed = (uint64_t)x;
        g->seed_given = 1;
    }
    if ((rc = get_int(body, "n", 1, SERVE_MAX_N, &x, err)) < 0) return -1;
    if (rc) g->n = (uint32_t)x;
    if (!chat && (rc = get_int(body, "best_of", 1, SERVE_MAX_N, &x, err)) < 0) return -1;
    if (!chat && rc && (uint32_t)x != g->n)
        return serve_err_set(err, 400, "unsupported_parameter", "best_of",
                             "best_of: only best_of == n is supported (got %lld, n = %u)", x, g->n);
    if ((rc = get_bool(body, "stream", &g->stream, err)) < 0) return -1;
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!g->stream)
            return serve_err_set(err, 400, "invalid_value", "stream_options",
                                 "stream_options: only allowed when stream is true");
        if (!json_is_object(so))
            return serve_err_set(err, 400, "invalid_type", "stream_options",
                                 "stream_options: expected an object");
        const char *key;
        json_t *v;
        json_object_foreach(so, key, v) {
            if (strcmp(key, "include_usage")) {
                char shown[64];
                snprintf(shown, sizeof(shown), "%s", key);
                return serve_err_set(err, 400, "unknown_parameter", "stream_options",
                                     "stream_options.%s: not supported (only include_usage)",
                                     shown);
            }
        }
        if (get_bool(so, "include_usage", &g->include_usage, err) < 0) return -1;
    }
    if (chat) {
        int lp = 0;
        if (get_bool(body, "logprobs", &lp, err) < 0) return -1;
        if ((rc = get_int(body, "top_logprobs", 0, WEFT_MAX_TOP_LOGPROBS, &x, err)) < 0) return -1;
        if (rc && !lp)
            return serve_err_set(err, 400, "invalid_value", "top_logprobs",
                                 "top_logprobs: requires logprobs to be true");
        g->logprobs = lp;
        g->top_k_logprobs = rc ? (uint32_t)x : 0;
    } else {
        if ((rc = get_int(body, "logprobs", 0, WEFT_MAX_TOP_LOGPROBS, &x, err)) < 0) return -1;
        g->logprobs = rc;
        g->top_k_logprobs = rc ? (uint32_t)x : 0;
        if (get_bool(body, "echo", &g->echo, err) < 0) return -1;
        if (g->echo && g->logprobs)
            return serve_err_set(err, 400, "unsupported_parameter", "echo",
                                 "echo with logprobs (prompt log-probabilities) is not supported; "
                                 "use POST /v1/score");
    }
    g->sp.n_logprobs = g->logprobs ? (int32_t)g->top_k_logprobs : 0;
    if (get_bool(body, "ignore_eos", &g->ignore_eos, err) < 0) return -1;
    if (get_bool(body, "skip_special_tokens", &g->skip_special, err) < 0) return -1;
    json_t *user = json_object_get(body, "user");
    if (user && !json_is_null(user) &&
        (!json_is_string(user) || json_string_length(user) > SERVE_MAX_USER_LEN))
        return serve_err_set(err, 400, "invalid_value", "user",
                             "user: expected a string of at most %d bytes", SERVE_MAX_USER_LEN);
    if (parse_stop(body, g, s, err)) return -1;
    if (parse_logit_bias(body, g, s, err)) return -1;

    long long max_tokens = 0;
    const char *mt_key = "max_tokens";
    if ((rc = get_int(body, "max_tokens", 1, INT32_MAX, &max_tokens, err)) < 0) return -1;
    g->max_tokens_given = rc;
    if (chat) {
        if ((rc = get_int(body, "max_completion_tokens", 1, INT32_MAX, &x, err)) < 0) return -1;
        if (rc) {
            max_tokens = x;
            g->max_tokens_given = 1;
            mt_key = "max_completion_tokens";
        }
    }
    if ((rc = get_int(body, "min_tokens", 0, INT32_MAX, &x, err)) < 0) return -1;
    if (rc) {
        if (g->max_tokens_given && x > max_tokens)
            return serve_err_set(err, 400, "invalid_value", "min_tokens",
                                 "min_tokens: %lld exceeds %s %lld", x, mt_key, max_tokens);
        g->sp.min_tokens = (uint32_t)x;
    }

    /* The prompt(s). */
    if (chat) {
        int add_gen = 1;
        if (get_bool(body, "add_generation_prompt", &add_gen, err) < 0) return -1;
        char *text = NULL;
        if (serve_render_chat(s, json_object_get(body, "messages"), add_gen,
                              json_object_get(body, "chat_template_kwargs"), &text, err))
            return -1;
        g->prompts = calloc(1, sizeof(serve_prompt));
        if (!g->prompts) {
            free(text);
            return serve_err_set(err, 500, "out_of_memory", NULL, "out of memory");
        }
        g->n_prompts = 1;
        /* The template already wrote the special tokens it wants (BOS included). */
        rc = encode_text(s, text, strlen(text), 0, "messages", &g->prompts[0], err);
        free(text);
        if (rc) return -1;
    } else {
        if (parse_prompts(s, json_object_get(body, "prompt"), g, err)) return -1;
    }
    if ((uint64_t)g->n_prompts * g->n > SERVE_MAX_CHOICES)
        return serve_err_set(err, 400, "invalid_value", "n",
                             "n: %u prompts x n = %u exceeds %d choices per request", g->n_prompts,
                             g->n, SERVE_MAX_CHOICES);
    /* Context: every prompt plus its completion must fit. */
    uint32_t max_new = UINT32_MAX;
    for (uint32_t i = 0; i < g->n_prompts; i++) {
        size_t np = g->prompts[i].n;
        if (np == 0)
            return serve_err_set(err, 400, "invalid_value", chat ? "messages" : "prompt",
                                 "%s: the prompt encodes to no tokens",
                                 chat ? "messages" : "prompt");
        if (np >= s->max_model_len)
            return serve_err_set(err, 400, "context_length_exceeded", chat ? "messages" : "prompt",
                                 "This model's maximum context length is %u tokens. However, "
                                 "your %s has %zu tokens, leaving no room for a completion.",
                                 s->max_model_len, chat ? "messages" : "prompt", np);
        if (g->max_tokens_given && np + (uint64_t)max_tokens > s->max_model_len)
            return serve_err_set(err, 400, "context_length_exceeded", mt_key,
                                 "This model's maximum context length is %u tokens. However, you "
                                 "requested %llu tokens (%zu in the %s, %lld in the completion). "
                                 "Please reduce the length of the %s or the completion.",
                                 s->max_model_len, (unsigned long long)(np + max_tokens), np,
                                 chat ? "messages" : "prompt", max_tokens,
                                 chat ? "messages" : "prompt");
        uint32_t room = s->max_model_len - (uint32_t)np;
        if (room < max_new) max_new = room;
    }
    if (g->max_tokens_given) {
        g->max_tokens = (uint32_t)max_tokens;
    } else {
        /* OpenAI's completions default is 16 tokens; chat runs to the context's end (or the
         * model's generation_config max_new_tokens). */
        uint32_t def =
            chat ? (s->default_max_new_tokens ? s->default_max_new_tokens : max_new) : 16;
        g->max_tokens = def < max_new ? def : max_new;
    }
    if (g->sp.min_tokens > g->max_tokens) g->sp.min_tokens = g->max_tokens;
    (void)b;
    return 0;
}

/* ---- score --------------------------------------------------------------------------------- */
static const char *const score_fields[] = {
    "model", "prompt", "tokens", "top_logprobs", "add_special_tokens", NULL};
static const char *const no_fields[] = {NULL};

int serve_parse_score(serve_server *s, serve_req *r, json_t *body, serve_err *err) {
    if (check_fields(body, score_fields, no_fields, "/v1/score", err)) return -1;
    if (serve_check_model(s, body, 0, r->model, sizeof(r->model), err)) return -1;
    long long k = 0;
    int rc;
    if ((rc = get_int(body, "top_logprobs", 0, WEFT_MAX_TOP_LOGPROBS, &k, err)) < 0) return -1;
    r->score_k = (uint32_t)k;
    int add_special = 1;
    if (get_bool(body, "add_special_tokens", &add_special, err) < 0) return -1;
    json_t *pr = json_object_get(body, "prompt"), *tk = json_object_get(body, "tokens");
    int has_p = pr && !json_is_null(pr), has_t = tk && !json_is_null(tk);
    if (has_p == has_t)
        return serve_err_set(err, 400, has_p ? "invalid_value" : "missing_required_parameter",
                             "tokens", "give exactly one of prompt (text) or tokens (ids)");
    serve_prompt p = {0};
    if (has_p) {
        if (!json_is_string(pr))
            return serve_err_set(err, 400, "invalid_type", "prompt", "prompt: expected a string");
        if (encode_text(s, json_string_value(pr), json_string_length(pr), add_special, "prompt", &p,
                        err)) {
            free(p.ids);
            return -1;
        }
        if (p.n > s->max_model_len) {
            free(p.ids);
            return serve_err_set(err, 400, "context_length_exceeded", "prompt",
                                 "This model's maximum context length is %u tokens. However, "
                                 "the prompt has %zu tokens.",
                                 s->max_model_len, p.n);
        }
    } else {
        if (!json_is_array(tk))
            return serve_err_set(err, 400, "invalid_type", "tokens",
                                 "tokens: expected an array of token ids");
        if (ids_from_array(s, tk, "tokens", &p, err)) {
            free(p.ids);
            free(p.text);
            return -1;
        }
        free(p.text);
    }
    if (p.n == 0) {
        free(p.ids);
        return serve_err_set(err, 400, "invalid_value", "prompt", "the text encodes to no tokens");
    }
    if ((uint64_t)p.n * s->vocab * sizeof(float) > SERVE_MAX_SCORE_BYTES) {
        free(p.ids);
        return serve_err_set(err, 400, "context_length_exceeded", has_p ? "prompt" : "tokens",
                             "/v1/score: %zu tokens x %u vocabulary logits exceed the %u MiB "
                             "scoring buffer",
                             p.n, s->vocab, SERVE_MAX_SCORE_BYTES >> 20);
    }
    r->score_ids = p.ids;
    r->n_score = p.n;
    return 0;
}
