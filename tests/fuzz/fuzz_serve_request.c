/* libFuzzer target for `weft serve`'s request parsing (tools/serve/request.c, handlers.c), the
 * part of weft that reads what a network client sends. The first input byte picks the endpoint,
 * the rest is the body: 0 /v1/completions, 1 /v1/chat/completions, 2 /v1/score (the body goes
 * through the same JSON load as the HTTP layer, then the endpoint's parser), 3 /tokenize and 4
 * /detokenize (through the server's dispatcher, serve_handle, which answers them on the spot).
 * The server has a real tokenizer (tests/data/tokenizer/bytelevel_small.json) and chat template
 * (tests/data/chat/llama3.jinja) but no engine, which none of these reach. A refusal must be a
 * client error (4xx) with a message, or a 500 for memory; an accepted request must hold only
 * ids inside the vocabulary, prompts within max_model_len, and sampling parameters the sampler
 * accepts. The schemathesis run over the OpenAPI document (tests/integration) covers the same
 * parsers through HTTP from the schema's side; this target is coverage-guided. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "serve/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static serve_server srv;
static char tmpdir[512];

static void remove_dir(void) {
    char p[700];
    snprintf(p, sizeof(p), "%s/chat_template.jinja", tmpdir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/tokenizer_config.json", tmpdir);
    unlink(p);
    rmdir(tmpdir);
}

static void setup(void) {
    if (srv.tok) return;
    weft_error err = fuzz_error();
    weft_tokenizer *tok = NULL;
    if (weft_tokenizer_load(WEFT_SOURCE_DIR "/tests/data/tokenizer/bytelevel_small.json", &tok,
                            &err) != WEFT_OK) {
        fprintf(stderr, "fuzz_serve_request: %s\n", err.message);
        __builtin_trap();
    }
    /* the template loads as the server loads it: from a model directory whose
     * tokenizer_config.json gives bos_token and eos_token */
    if (fuzz_private_dir(tmpdir, sizeof(tmpdir), "serve")) atexit(remove_dir);
    FILE *in = fopen(WEFT_SOURCE_DIR "/tests/data/chat/llama3.jinja", "rb");
    char src[65536], path[700];
    size_t n = in ? fread(src, 1, sizeof(src), in) : 0;
    if (!in || fclose(in) || !n) __builtin_trap();
    snprintf(path, sizeof(path), "%s/chat_template.jinja", tmpdir);
    fuzz_write_file(path, src, n);
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", tmpdir);
    static const char cfg[] =
        "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\"}";
    fuzz_write_file(path, cfg, sizeof(cfg) - 1);
    if (weft_chat_template_load(tmpdir, &srv.chat, &err) != WEFT_OK) {
        fprintf(stderr, "fuzz_serve_request: %s\n", err.message);
        __builtin_trap();
    }
    weft_chat_limits lim = {1u << 20, 16u << 20, 20000};
    weft_chat_template_set_limits(srv.chat, &lim);
    srv.tok = tok;
    srv.vocab = weft_tokenizer_vocab_size(tok);
    srv.max_model_len = 256;
    atomic_store(&srv.state, SERVE_READY);
    weft_sampler_params_default(&srv.defaults);
    snprintf(srv.model_name, sizeof(srv.model_name), "m");
}

static void check_prompt(const serve_prompt *p) {
    if (!p->ids || !p->n || p->n > srv.max_model_len) __builtin_trap();
    for (size_t i = 0; i < p->n; i++)
        if (p->ids[i] < 0 || (uint32_t)p->ids[i] >= srv.vocab) __builtin_trap();
}

/* /tokenize and /detokenize, answered on the spot by the server's own dispatcher. */
static void one_tokenizer_endpoint(const uint8_t *body, size_t n, const char *path) {
    serve_req *r = calloc(1, sizeof(*r));
    if (!r) __builtin_trap();
    r->srv = &srv;
    r->path = path;
    snprintf(r->url, sizeof(r->url), "%s", path);
    if (serve_buf_append(&r->body, body, n)) __builtin_trap();
    serve_reply out;
    memset(&out, 0, sizeof(out));
    serve_handle(&srv, r, "POST", &out);
    if (out.suspend || out.stream || !out.json) __builtin_trap(); /* never the engine's */
    if (out.status != 200) {
        json_t *e = json_object_get(out.json, "error");
        if (out.status < 400 || out.status >= 500 || !json_is_string(json_object_get(e, "message")))
            __builtin_trap();
    } else if (!strcmp(path, "/tokenize")) {
        json_t *tokens = json_object_get(out.json, "tokens"), *t;
        size_t i;
        if (!json_is_array(tokens)) __builtin_trap();
        json_array_foreach(tokens, i, t) {
            if (!json_is_integer(t) || json_integer_value(t) < 0 ||
                json_integer_value(t) >= (json_int_t)srv.vocab)
                __builtin_trap();
        }
    } else if (!json_is_string(json_object_get(out.json, "prompt"))) {
        __builtin_trap();
    }
    json_decref(out.json);
    free(out.text);
    serve_gen_free(&r->g);
    serve_buf_free(&r->body);
    free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    setup();
    int kind = data[0] % 5;
    if (kind >= 3) {
        one_tokenizer_endpoint(data + 1, size - 1, kind == 3 ? "/tokenize" : "/detokenize");
        return 0;
    }
    json_t *body = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(body)) { /* the HTTP layer answers these 400 itself */
        json_decref(body);
        return 0;
    }
    serve_req *r = calloc(1, sizeof(*r));
    if (!r) __builtin_trap();
    r->srv = &srv;
    r->kind = kind == 0 ? SERVE_KIND_COMPLETION : kind == 1 ? SERVE_KIND_CHAT : SERVE_KIND_SCORE;
    serve_err err;
    memset(&err, 0, sizeof(err));
    int rc = kind == 2 ? serve_parse_score(&srv, r, body, &err)
                       : serve_parse_generation(&srv, r, body, &err);
    if (rc) {
        /* a client's mistake is a 4xx that says what; only memory may give a 500 */
        if (!err.message[0] || !((err.status >= 400 && err.status < 500) || err.status == 500))
            __builtin_trap();
        if (err.status == 500 && strcmp(err.code, "out_of_memory")) __builtin_trap();
        if (getenv("WEFT_FUZZ_VERBOSE"))
            fprintf(stderr, "%u %s: %s\n", err.status, err.code, err.message);
    } else if (kind == 2) {
        if (!r->score_ids && !r->score_result) __builtin_trap();
    } else {
        const serve_gen *g = &r->g;
        if (!g->n_prompts || !g->prompts || !g->n) __builtin_trap();
        for (uint32_t i = 0; i < g->n_prompts; i++)
            check_prompt(&g->prompts[i]);
        const weft_sampler_params *sp = &g->sp;
        if (!(sp->temperature >= 0) || !(sp->top_p > 0 && sp->top_p <= 1) ||
            !(sp->min_p >= 0 && sp->min_p <= 1) || sp->top_k < 0 || !(sp->repetition_penalty > 0))
            __builtin_trap();
        for (uint32_t i = 0; i < sp->n_bias; i++)
            if (sp->bias_ids[i] < 0 || (uint32_t)sp->bias_ids[i] >= srv.vocab) __builtin_trap();
    }
    serve_gen_free(&r->g);
    free(r->score_ids);
    json_decref(r->score_result);
    free(r);
    json_decref(body);
    return 0;
}
