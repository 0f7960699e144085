/* fake.model: a model plugin for architecture FakeForCausalLM, for lock, candidate and graph
 * tests. Its graph is a bigram model: tokens -> embed -> final norm -> lm_head -> logits, with
 * weights bound to "model.embed_tokens.weight", "model.norm.weight" and "lm_head.weight" (or
 * the embedding when tie_word_embeddings). Small but complete: it has an LM_HEAD node for
 * fake.pass to rewrite and ops every backend implements. */
#include <string.h>

#include "weft/sdk.h"

#define NAME "fake.model"

static weft_status fm_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    *st = NULL;
    return WEFT_OK;
}

static weft_status fm_configure(void *st, const char *config_json, weft_model_config *cfg,
                                weft_error *err) {
    if (!cfg) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "configure: cfg is NULL");
    if (strcmp(cfg->architecture, "FakeForCausalLM") != 0)
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                              "config.json architectures[0]: expected FakeForCausalLM, found %s",
                              cfg->architecture[0] ? cfg->architecture : "(none)");
    if (!cfg->vocab_size || !cfg->hidden_size)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "config.json: expected positive vocab_size and hidden_size, found "
                              "%u and %u",
                              (unsigned)cfg->vocab_size, (unsigned)cfg->hidden_size);
    return WEFT_OK;
}

static weft_status fm_build(void *st, const weft_model_config *cfg, const weft_bucket *bucket,
                            const weft_graph_service *gs, weft_graph *g, weft_error *err) {
    if (!cfg || !bucket || !gs || !g)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "build_graph: NULL argument");
    int64_t T = bucket->max_tokens, D = cfg->hidden_size, V = cfg->vocab_size,
            R = bucket->max_logits;
    int64_t s_tok[1] = {T}, s_embed[2] = {V, D}, s_x[2] = {T, D}, s_norm[1] = {D},
            s_logits[2] = {R, V};
    uint32_t act = cfg->dtype ? cfg->dtype : WEFT_DTYPE_F32;
    uint32_t tok =
        gs->tensor_add(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, 1, s_tok, WEFT_INPUT_TOKENS, err);
    /* The engine requires and fills in.positions in every graph; a bigram model reads none. */
    uint32_t pos =
        gs->tensor_add(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, 1, s_tok, WEFT_INPUT_POSITIONS, err);
    uint32_t emb = gs->weight_add(g, "embed", "model.embed_tokens.weight", act, 2, s_embed, err);
    uint32_t x =
        gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, 2, s_x, "embed_out", err);
    uint32_t nw = gs->weight_add(g, "norm", "model.norm.weight", act, 1, s_norm, err);
    uint32_t h = gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, 2, s_x, "norm_out", err);
    uint32_t head = gs->weight_add(
        g, "lm_head", cfg->tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", act, 2,
        s_embed, err);
    uint32_t out =
        gs->tensor_add(g, WEFT_TENSOR_OUTPUT, WEFT_DTYPE_F32, 2, s_logits, WEFT_OUTPUT_LOGITS, err);
    uint32_t ids[] = {tok, pos, emb, x, nw, h, head, out};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        if (ids[i] == WEFT_TENSOR_NONE) return err ? err->code : WEFT_ERR_INTERNAL;
    weft_node n[3];
    memset(n, 0, sizeof(n));
    for (int k = 0; k < 3; k++) {
        n[k].layer = -1;
        n[k].n_out = 1;
        for (int j = 0; j < WEFT_NODE_MAX_IN; j++)
            n[k].in[j] = WEFT_TENSOR_NONE;
    }
    n[0].op = WEFT_OP_EMBED, n[0].n_in = 2, n[0].in[0] = tok, n[0].in[1] = emb, n[0].out[0] = x;
    snprintf(n[0].name, sizeof(n[0].name), "embed");
    n[1].op = WEFT_OP_RMSNORM, n[1].n_in = 2, n[1].in[0] = x, n[1].in[1] = nw, n[1].out[0] = h;
    n[1].p.f[0] = cfg->rms_eps > 0 ? cfg->rms_eps : 1e-5f;
    snprintf(n[1].name, sizeof(n[1].name), "norm");
    n[2].op = WEFT_OP_LM_HEAD, n[2].n_in = 2, n[2].in[0] = h, n[2].in[1] = head;
    n[2].out[0] = out;
    snprintf(n[2].name, sizeof(n[2].name), "lm_head");
    for (int k = 0; k < 3; k++)
        if (gs->node_add(g, &n[k], g->n_nodes, err) < 0) return err ? err->code : WEFT_ERR_INTERNAL;
    return WEFT_OK;
}

static const weft_model_vtable fm_vt = {sizeof(weft_model_vtable), fm_configure, fm_build};

static const weft_plugin_descriptor fm_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "1.0.0",
    .kind = WEFT_KIND_MODEL,
    .slots = WEFT_SLOT_MODEL,
    .create = fm_create,
    .model = &fm_vt,
};

WEFT_SDK_ENTRY(fm_desc, 1, 1)
