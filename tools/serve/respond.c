/* Response bodies of the generation endpoints: the whole completion (text_completion or
 * chat.completion) and the SSE stream, built from what the engine thread recorded in each
 * choice. The stream is pumped from a choice's cursors: every call emits what arrived since the
 * last one (text and, when asked, per-token log-probabilities), then each choice's finish
 * reason, then the usage chunk (stream_options.include_usage) and `data: [DONE]`. An engine
 * failure in the middle of a stream becomes one `data: {"error": ...}` event and the end of
 * the stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve.h"

const char *serve_finish_reason(uint32_t finish) {
    switch (finish) {
    case WEFT_FINISH_STOP:
        return "stop";
    case WEFT_FINISH_LENGTH:
        return "length";
    case WEFT_FINISH_CANCELLED:
        return "abort";
    case WEFT_FINISH_ERROR:
        return "error";
    default:
        return NULL;
    }
}

static uint32_t prompt_tokens(const serve_req *r) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < r->g.n_prompts; i++)
        n += r->g.prompts[i].n;
    return (uint32_t)n;
}

static json_t *usage_json(const serve_req *r) {
    uint64_t gen = 0;
    for (uint32_t i = 0; i < r->n_choices; i++)
        gen += r->choices[i].n_generated;
    uint32_t p = prompt_tokens(r);
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)p, "completion_tokens",
                     (json_int_t)gen, "total_tokens", (json_int_t)(p + gen));
}

static json_t *bytes_json(serve_server *s, int32_t id) {
    json_t *arr = json_array();
    char *text = NULL;
    size_t len = 0;
    if (serve_token_bytes(s, id, &text, &len) == 0)
        for (size_t i = 0; i < len; i++)
            json_array_append_new(arr, json_integer((unsigned char)text[i]));
    free(text);
    return arr;
}

/* Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]} */
static json_t *chat_logprobs(serve_server *s, const serve_choice *c, size_t from, size_t to) {
    json_t *content = json_array();
    for (size_t i = from; i < to; i++) {
        const serve_tok *t = &c->toks[i];
        json_t *tops = json_array();
        for (uint32_t k = 0; k < t->n_top; k++)
            json_array_append_new(tops, json_pack("{s:o, s:f, s:o}", "token",
                                                  serve_token_text(s, t->top[k].id), "logprob",
                                                  (double)t->top[k].logprob, "bytes",
                                                  bytes_json(s, t->top[k].id)));
        json_array_append_new(content,
                              json_pack("{s:o, s:f, s:o, s:o}", "token", serve_token_text(s, t->id),
                                        "logprob", (double)t->logprob, "bytes",
                                        bytes_json(s, t->id), "top_logprobs", tops));
    }
    return json_pack("{s:o}", "content", content);
}

/* Completions logprobs: {tokens, token_logprobs, top_logprobs: [{text: lp}], text_offset} */
static json_t *completion_logprobs(serve_server *s, const serve_choice *c, size_t from, size_t to,
                                   size_t base_offset) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (size_t i = from; i < to; i++) {
        const serve_tok *t = &c->toks[i];
        json_array_append_new(tokens, serve_token_text(s, t->id));
        json_array_append_new(lps, json_real((double)t->logprob));
        json_t *top = json_object();
        for (uint32_t k = 0; k < t->n_top; k++) {
            json_t *txt = serve_token_text(s, t->top[k].id);
            /* Two ids can decode alike; keep the likelier (the first, tops are sorted). */
            if (!json_object_get(top, json_string_value(txt)))
                json_object_set_new(top, json_string_value(txt),
                                    json_real((double)t->top[k].logprob));
            json_decref(txt);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)(base_offset + t->text_offset)));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *envelope(serve_req *r, const char *object) {
    serve_server *s = r->srv;
    char fp[64];
    snprintf(fp, sizeof(fp), "weft-%s", s->candidate_id[0] ? s->candidate_id : "dev");
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", r->id, "object", object, "created",
                     (json_int_t)r->created, "model", r->model, "system_fingerprint", fp);
}

json_t *serve_completion_json(serve_req *r) {
    serve_server *s = r->srv;
    int chat = r->kind == SERVE_KIND_CHAT;
    json_t *out = envelope(r, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (uint32_t i = 0; i < r->n_choices; i++) {
        const serve_choice *c = &r->choices[i];
        const serve_prompt *p = &r->g.prompts[c->prompt];
        json_t *lp = json_null();
        if (r->g.logprobs)
            lp = chat ? chat_logprobs(s, c, 0, c->n_toks)
                      : completion_logprobs(s, c, 0, c->n_toks, r->g.echo ? p->text_len : 0);
        const char *fr = serve_finish_reason(c->finish);
        json_t *ch;
        if (chat) {
            json_t *msg = json_pack("{s:s, s:s#}", "role", "assistant", "content",
                                    c->text.data ? c->text.data : "", c->text.len);
            ch = json_pack("{s:I, s:o, s:o, s:s?}", "index", (json_int_t)c->index, "message", msg,
                           "logprobs", lp, "finish_reason", fr);
        } else {
            serve_buf text = {0};
            if (r->g.echo && p->text) serve_buf_append(&text, p->text, p->text_len);
            serve_buf_append(&text, c->text.data ? c->text.data : "", c->text.len);
            ch = json_pack("{s:I, s:s#, s:o, s:s?}", "index", (json_int_t)c->index, "text",
                           text.data ? text.data : "", text.len, "logprobs", lp, "finish_reason",
                           fr);
            serve_buf_free(&text);
        }
        json_array_append_new(choices, ch);
    }
    json_object_set_new(out, "choices", choices);
    json_object_set_new(out, "usage", usage_json(r));
    return out;
}

static void emit(serve_req *r, json_t *j) {
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text) return;
    serve_buf_append(&r->out, "data: ", 6);
    serve_buf_append(&r->out, text, strlen(text));
    serve_buf_append(&r->out, "\n\n", 2);
    free(text);
}

static json_t *chunk(serve_req *r, json_t *choice) {
    int chat = r->kind == SERVE_KIND_CHAT;
    json_t *j = envelope(r, chat ? "chat.completion.chunk" : "text_completion");
    json_t *arr = json_array();
    if (choice) json_array_append_new(arr, choice);
    json_object_set_new(j, "choices", arr);
    if (r->g.include_usage) json_object_set_new(j, "usage", json_null());
    return j;
}

int serve_stream_pump(serve_req *r) {
    serve_server *s = r->srv;
    int chat = r->kind == SERVE_KIND_CHAT;
    if (r->stream_ended) return 1;
    uint32_t finished = 0;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        serve_choice *c = &r->choices[i];
        const serve_prompt *p = &r->g.prompts[c->prompt];
        if (!c->sent_role) {
            c->sent_role = 1;
            if (chat) {
                json_t *delta = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
                emit(r, chunk(r, json_pack("{s:I, s:o, s:n, s:n}", "index", (json_int_t)c->index,
                                           "delta", delta, "logprobs", "finish_reason")));
            } else if (r->g.echo && p->text && p->text_len) {
                emit(r, chunk(r, json_pack("{s:I, s:s#, s:n, s:n}", "index", (json_int_t)c->index,
                                           "text", p->text, p->text_len, "logprobs",
                                           "finish_reason")));
            }
        }
        /* One event per generated token (its text and, when asked, its log-probabilities),
         * then whatever text the final event released. Tokens whose text is held back (a
         * partial UTF-8 character or stop-string prefix) ride with the next event. */
        for (;;) {
            size_t text_to = c->text.len, toks_to = c->n_toks;
            if (c->sent_ends < c->n_ends) {
                text_to = c->ends[c->sent_ends];
                if (r->g.logprobs && c->sent_ends + 1 < toks_to) toks_to = c->sent_ends + 1;
                c->sent_ends++;
            } else if (!c->finish && c->sent_text == c->text.len) {
                break;
            }
            if (text_to < c->sent_text) text_to = c->sent_text;
            int more_text = text_to > c->sent_text;
            int more_toks = r->g.logprobs && toks_to > c->sent_toks;
            if (more_text || more_toks) {
                const char *t = c->text.data ? c->text.data + c->sent_text : "";
                size_t tl = text_to - c->sent_text;
                json_t *lp = json_null();
                if (r->g.logprobs)
                    lp = chat ? chat_logprobs(s, c, c->sent_toks, toks_to)
                              : completion_logprobs(s, c, c->sent_toks, toks_to,
                                                    r->g.echo ? p->text_len : 0);
                json_t *ch;
                if (chat)
                    ch = json_pack("{s:I, s:{s:s#}, s:o, s:n}", "index", (json_int_t)c->index,
                                   "delta", "content", t, tl, "logprobs", lp, "finish_reason");
                else
                    ch = json_pack("{s:I, s:s#, s:o, s:n}", "index", (json_int_t)c->index, "text",
                                   t, tl, "logprobs", lp, "finish_reason");
                emit(r, chunk(r, ch));
                c->sent_text = text_to;
                c->sent_toks = toks_to;
            }
            if (c->sent_ends >= c->n_ends && c->sent_text == c->text.len) break;
        }
        if (c->finish && !c->sent_finish) {
            c->sent_finish = 1;
            if (c->finish == WEFT_FINISH_ERROR) {
                serve_err e;
                serve_err_set(&e, 500, "engine_error", NULL, "generation failed: %s",
                              c->message[0] ? c->message : "engine error");
                emit(r, serve_err_json(&e));
                r->stream_ended = 1;
                return 1;
            }
            const char *fr = serve_finish_reason(c->finish);
            json_t *ch;
            if (chat)
                ch = json_pack("{s:I, s:{}, s:n, s:s}", "index", (json_int_t)c->index, "delta",
                               "logprobs", "finish_reason", fr);
            else
                ch = json_pack("{s:I, s:s, s:n, s:s}", "index", (json_int_t)c->index, "text", "",
                               "logprobs", "finish_reason", fr);
            emit(r, chunk(r, ch));
        }
        if (c->sent_finish) finished++;
    }
    if (finished < r->n_choices) return 0;
    if (r->g.include_usage) {
        json_t *j = chunk(r, NULL);
        json_object_set_new(j, "usage", usage_json(r));
        emit(r, j);
    }
    serve_buf_append(&r->out, "data: [DONE]\n\n", 14);
    r->stream_ended = 1;
    return 1;
}
