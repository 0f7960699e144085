/* The llama model plugin: config checks and the step graph for the dense Llama family, which
 * shares one block shape: Llama 2 and 3.x (with Llama-3 RoPE scaling), Mistral (sliding window),
 * Qwen2/2.5 (biases on q, k, v) and Qwen3 (RMSNorm per head on q and k, head_dim * heads may
 * differ from hidden). The plugin never touches weight data: it reads each checkpoint tensor's
 * dtype and shape through the weights service so the graph's weights carry the checkpoint's
 * dtype, and names every weight canonically ("layers.3.attn.q") beside its checkpoint source.
 *
 * One layer, as emitted:
 *   attn_norm (rmsnorm) -> attn.q/k/v (linear [+ bias]) -> [attn.q_norm/k_norm per head]
 *   -> attn.q_rope/k_rope -> attn (attention, writes kv) -> attn.o -> attn_add (residual)
 *   -> mlp_norm -> mlp.gate, mlp.up -> mlp.swiglu -> mlp.down -> mlp_add (residual)
 * then norm and lm_head on the logit rows. Activations are f32 unless the option
 * activation_dtype says bf16 or f16 (for backends that compute in 16 bits). With the option
 * device_inputs, attention also reads in.kv_slots and lm_head in.logit_rows, the step inputs a
 * device backend (or a captured graph) needs on the device. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "weft/plugin.h"

#define LLAMA_NAME "llama"
#define LLAMA_VERSION "0.1.0"

typedef struct llama_state {
    const weft_host_services *host;
    uint32_t act_dtype;
    int act_auto; /* activation_dtype: auto = the checkpoint's float dtype (per graph) */
    int device_inputs; /* attention reads in.kv_slots, lm_head in.logit_rows */
} llama_state;

/* The host's error_set is variadic and cannot take a va_list: format here, pass the text. */
static weft_status fail(const llama_state *s, weft_error *err, int32_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static weft_status fail(const llama_state *s, weft_error *err, int32_t code, const char *fmt, ...) {
    char msg[480];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (s && s->host && s->host->error_set) s->host->error_set(err, code, LLAMA_NAME, "%s", msg);
    return code;
}

/* ---- instance ---------------------------------------------------------------------------- */
static weft_status llama_create(const weft_host_services *host, const weft_options *opts,
                                void **out, weft_error *err) {
    if (!host || !out) return WEFT_ERR_INVALID;
    llama_state *s = host->alloc ? host->alloc(sizeof(*s)) : NULL;
    if (!s) {
        if (host->error_set) host->error_set(err, WEFT_ERR_NOMEM, LLAMA_NAME, "out of memory");
        return WEFT_ERR_NOMEM;
    }
    memset(s, 0, sizeof(*s));
    s->host = host;
    s->act_dtype = WEFT_DTYPE_F32;
    const weft_option *o = host->option && opts ? host->option(opts, "activation_dtype") : NULL;
    if (o && o->type == WEFT_OPTION_STRING && o->s) {
        if (!strcmp(o->s, "auto"))
            s->act_auto = 1;
        else if (!strcmp(o->s, "f32"))
            s->act_dtype = WEFT_DTYPE_F32;
        else if (!strcmp(o->s, "bf16"))
            s->act_dtype = WEFT_DTYPE_BF16;
        else if (!strcmp(o->s, "f16"))
            s->act_dtype = WEFT_DTYPE_F16;
        else {
            host->error_set(err, WEFT_ERR_INVALID, LLAMA_NAME,
                            "option activation_dtype: expected auto, f32, bf16 or f16, got '%s'", o->s);
            host->free(s);
            return WEFT_ERR_INVALID;
        }
    }
    o = host->option && opts ? host->option(opts, "device_inputs") : NULL;
    if (o && o->type == WEFT_OPTION_BOOL) s->device_inputs = o->i != 0;
    *out = s;
    return WEFT_OK;
}

static void llama_destroy(void *st) {
    llama_state *s = st;
    if (s && s->host && s->host->free) s->host->free(s);
}

/* ---- configure --------------------------------------------------------------------------- */
static int family_of(const weft_model_config *cfg) {
    static const char *const types[] = {"llama", "mistral", "qwen2", "qwen3"};
    static const char *const archs[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                        "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(cfg->model_type, types[i]) || !strcmp(cfg->architecture, archs[i])) return i;
    return -1;
}

static weft_status llama_configure(void *st, const char *config_json, weft_model_config *cfg,
                                   weft_error *err) {
    llama_state *s = st;
    if (!s || !cfg) return WEFT_ERR_INVALID;
    int family = family_of(cfg);
    if (family < 0)
        return fail(s, err, WEFT_ERR_UNSUPPORTED,
                    "config.json: model_type '%s' (architecture '%s') is not one of llama, "
                    "mistral, qwen2, qwen3",
                    cfg->model_type, cfg->architecture);
    if (cfg->n_experts > 0)
        return fail(s, err, WEFT_ERR_UNSUPPORTED,
                    "config.json: %s has %u experts; mixture-of-experts models need the moe "
                    "model plugin",
                    cfg->model_type, cfg->n_experts);
    /* Architecture quirks the generic parser cannot know. */
    if (family == 2) cfg->attention_bias = 1; /* Qwen2 always has q/k/v biases */
    if (family == 3) cfg->qk_norm = 1;
    if (config_json) {
        json_error_t jerr;
        json_t *root = json_loads(config_json, 0, &jerr);
        if (root) {
            json_t *v = json_object_get(root, "use_sliding_window");
            if (v && json_is_false(v)) cfg->sliding_window = 0;
            v = json_object_get(root, "mlp_bias");
            int mlp_bias = v && json_is_true(v);
            v = json_object_get(root, "hidden_act");
            int silu = !v || !json_is_string(v) || !strcmp(json_string_value(v), "silu");
            v = json_object_get(root, "partial_rotary_factor");
            int partial = v && json_is_number(v) && json_number_value(v) != 1.0;
            json_decref(root);
            if (mlp_bias)
                return fail(s, err, WEFT_ERR_UNSUPPORTED,
                            "config.json: mlp_bias: expected false, got true");
            if (!silu)
                return fail(s, err, WEFT_ERR_UNSUPPORTED, "config.json: hidden_act: expected silu");
            if (partial)
                return fail(s, err, WEFT_ERR_UNSUPPORTED,
                            "config.json: partial_rotary_factor: expected 1");
        }
    }
    if (cfg->head_dim == 0 && cfg->n_heads) cfg->head_dim = cfg->hidden_size / cfg->n_heads;
    if (cfg->n_kv_heads == 0) cfg->n_kv_heads = cfg->n_heads;
    struct {
        const char *field;
        uint32_t value;
    } need[] = {
        {"vocab_size", cfg->vocab_size},
        {"hidden_size", cfg->hidden_size},
        {"intermediate_size", cfg->intermediate_size},
        {"num_hidden_layers", cfg->n_layers},
        {"num_attention_heads", cfg->n_heads},
        {"num_key_value_heads", cfg->n_kv_heads},
        {"head_dim", cfg->head_dim},
    };
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
        if (need[i].value == 0)
            return fail(s, err, WEFT_ERR_INVALID,
                        "config.json: %s: expected a positive integer, got 0", need[i].field);
    if (cfg->n_heads % cfg->n_kv_heads)
        return fail(s, err, WEFT_ERR_INVALID,
                    "config.json: num_attention_heads (%u) must be a multiple of "
                    "num_key_value_heads (%u)",
                    cfg->n_heads, cfg->n_kv_heads);
    if (cfg->head_dim % 2)
        return fail(s, err, WEFT_ERR_INVALID, "config.json: head_dim must be even for RoPE, got %u",
                    cfg->head_dim);
    if (!(cfg->rms_eps > 0.0f)) cfg->rms_eps = 1e-6f;
    if (!(cfg->rope_theta > 0.0f)) cfg->rope_theta = 10000.0f;
    return WEFT_OK;
}

/* ---- build_graph ------------------------------------------------------------------------- */
typedef struct builder {
    const llama_state *s;
    const weft_model_config *cfg;
    const weft_graph_service *gs;
    const weft_weights_service *ws;
    weft_graph *g;
    weft_error *err;
    int64_t T;
    uint32_t kv_slots; /* in.kv_slots, or NONE */
} builder;

static uint32_t act(builder *b, const char *name, int64_t cols) {
    int64_t shape[2] = {b->T, cols};
    return b->gs->tensor_add(b->g, WEFT_TENSOR_ACTIVATION, b->s->act_dtype, 2, shape, name, b->err);
}

/* A weight bound to checkpoint tensor `source`, whose shape must be `shape` (rank 1 or 2). Its
 * dtype is the checkpoint's. */
static uint32_t weight(builder *b, const char *canonical, const char *source, uint32_t rank,
                       int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    uint32_t dtype = b->cfg->dtype ? b->cfg->dtype : WEFT_DTYPE_F32;
    if (b->ws) {
        weft_weight_info info;
        memset(&info, 0, sizeof(info));
        weft_status st = b->ws->find(b->ws->self, source, &info, b->err);
        if (st != WEFT_OK) {
            fail(b->s, b->err, WEFT_ERR_NOT_FOUND, "weight %s: the checkpoint has no tensor %s",
                 canonical, source);
            return WEFT_TENSOR_NONE;
        }
        int ok = info.rank == rank && info.shape[0] == d0 && (rank == 1 || info.shape[1] == d1);
        if (!ok) {
            char got[64];
            if (info.rank == 2)
                snprintf(got, sizeof(got), "(%lld, %lld)", (long long)info.shape[0],
                         (long long)info.shape[1]);
            else if (info.rank == 1)
                snprintf(got, sizeof(got), "(%lld)", (long long)info.shape[0]);
            else
                snprintf(got, sizeof(got), "rank %u", info.rank);
            if (rank == 2)
                fail(b->s, b->err, WEFT_ERR_MISMATCH,
                     "checkpoint tensor %s: expected shape (%lld, %lld), got %s", source,
                     (long long)d0, (long long)d1, got);
            else
                fail(b->s, b->err, WEFT_ERR_MISMATCH,
                     "checkpoint tensor %s: expected shape (%lld), got %s", source, (long long)d0,
                     got);
            return WEFT_TENSOR_NONE;
        }
        dtype = info.dtype;
    }
    return b->gs->weight_add(b->g, canonical, source, dtype, rank, shape, b->err);
}

static int node(builder *b, uint32_t op, const char *name, int32_t layer, const uint32_t *in,
                uint32_t n_in, uint32_t out, const weft_op_params *p) {
    weft_node n;
    memset(&n, 0, sizeof(n));
    n.op = op;
    n.layer = layer;
    n.n_in = n_in;
    for (uint32_t i = 0; i < n_in; i++)
        n.in[i] = in[i];
    n.n_out = 1;
    n.out[0] = out;
    if (p) n.p = *p;
    snprintf(n.name, sizeof(n.name), "%s", name);
    return b->gs->node_add(b->g, &n, UINT32_MAX, b->err) < 0 ? -1 : 0;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((x) == WEFT_TENSOR_NONE) return WEFT_ERR_INVALID;                                      \
    } while (0)
#define TRYN(x)                                                                                    \
    do {                                                                                           \
        if ((x) < 0) return WEFT_ERR_INVALID;                                                      \
    } while (0)

/* rmsnorm node named `name` over x with weight w; group 0 = whole row. */
static uint32_t rmsnorm(builder *b, const char *name, int32_t layer, uint32_t x, uint32_t w,
                        int64_t cols, int64_t group) {
    char tn[WEFT_NAME_MAX];
    snprintf(tn, sizeof(tn), "%s.y", name);
    uint32_t y = act(b, tn, cols);
    if (y == WEFT_TENSOR_NONE) return y;
    weft_op_params p;
    memset(&p, 0, sizeof(p));
    p.f[0] = b->cfg->rms_eps;
    p.i[0] = group;
    uint32_t in[2] = {x, w};
    return node(b, WEFT_OP_RMSNORM, name, layer, in, 2, y, &p) ? WEFT_TENSOR_NONE : y;
}

static uint32_t linear(builder *b, const char *name, int32_t layer, uint32_t x, uint32_t w,
                       uint32_t bias, int64_t cols) {
    char tn[WEFT_NAME_MAX];
    snprintf(tn, sizeof(tn), "%s.y", name);
    uint32_t y = act(b, tn, cols);
    if (y == WEFT_TENSOR_NONE) return y;
    uint32_t in[3] = {x, w, bias};
    return node(b, WEFT_OP_LINEAR, name, layer, in, bias == WEFT_TENSOR_NONE ? 2 : 3, y, NULL)
               ? WEFT_TENSOR_NONE
               : y;
}

static uint32_t rope(builder *b, const char *name, int32_t layer, uint32_t x, uint32_t pos,
                     int64_t heads) {
    const weft_model_config *c = b->cfg;
    char tn[WEFT_NAME_MAX];
    snprintf(tn, sizeof(tn), "%s.y", name);
    uint32_t y = act(b, tn, heads * c->head_dim);
    if (y == WEFT_TENSOR_NONE) return y;
    weft_op_params p;
    memset(&p, 0, sizeof(p));
    p.i[0] = heads;
    p.i[1] = c->head_dim;
    p.i[2] = 0; /* all of head_dim rotates */
    p.i[3] = 0; /* half-split pairs, as HF checkpoints are laid out */
    p.i[4] = c->rope_scaling;
    p.f[0] = c->rope_theta;
    if (c->rope_scaling) {
        p.f[1] = c->rope_factor;
        p.f[2] = c->rope_low_freq_factor;
        p.f[3] = c->rope_high_freq_factor;
        p.f[4] = (float)c->rope_original_max_position;
    }
    uint32_t in[2] = {x, pos};
    return node(b, WEFT_OP_ROPE, name, layer, in, 2, y, &p) ? WEFT_TENSOR_NONE : y;
}

static weft_status build_layer(builder *b, int32_t l, uint32_t *x, uint32_t pos) {
    const weft_model_config *c = b->cfg;
    const int64_t D = c->hidden_size, hd = c->head_dim, H = c->n_heads, KV = c->n_kv_heads;
    const int64_t F = c->intermediate_size;
    char nm[WEFT_NAME_MAX], src[WEFT_NAME_MAX], nn[48];
#define W(canon, source, rank, d0, d1)                                                             \
    (snprintf(nm, sizeof(nm), "layers.%d." canon, l),                                              \
     snprintf(src, sizeof(src), "model.layers.%d." source, l), weight(b, nm, src, rank, d0, d1))
#define NN(suffix) (snprintf(nn, sizeof(nn), "layers.%d." suffix, l), nn)

    uint32_t w_an, w_q, w_k, w_v, w_o, w_mn, w_g, w_u, w_d;
    uint32_t b_q = WEFT_TENSOR_NONE, b_k = WEFT_TENSOR_NONE, b_v = WEFT_TENSOR_NONE;
    TRY(w_an = W("attn_norm", "input_layernorm.weight", 1, D, 0));
    TRY(w_q = W("attn.q", "self_attn.q_proj.weight", 2, H * hd, D));
    TRY(w_k = W("attn.k", "self_attn.k_proj.weight", 2, KV * hd, D));
    TRY(w_v = W("attn.v", "self_attn.v_proj.weight", 2, KV * hd, D));
    if (c->attention_bias) {
        TRY(b_q = W("attn.q_bias", "self_attn.q_proj.bias", 1, H * hd, 0));
        TRY(b_k = W("attn.k_bias", "self_attn.k_proj.bias", 1, KV * hd, 0));
        TRY(b_v = W("attn.v_bias", "self_attn.v_proj.bias", 1, KV * hd, 0));
    }
    TRY(w_o = W("attn.o", "self_attn.o_proj.weight", 2, D, H * hd));
    TRY(w_mn = W("mlp_norm", "post_attention_layernorm.weight", 1, D, 0));
    TRY(w_g = W("mlp.gate", "mlp.gate_proj.weight", 2, F, D));
    TRY(w_u = W("mlp.up", "mlp.up_proj.weight", 2, F, D));
    TRY(w_d = W("mlp.down", "mlp.down_proj.weight", 2, D, F));

    uint32_t h, q, k, v, o, a, g, u, sw, dn;
    TRY(h = rmsnorm(b, NN("attn_norm"), l, *x, w_an, D, 0));
    TRY(q = linear(b, NN("attn.q"), l, h, w_q, b_q, H * hd));
    TRY(k = linear(b, NN("attn.k"), l, h, w_k, b_k, KV * hd));
    TRY(v = linear(b, NN("attn.v"), l, h, w_v, b_v, KV * hd));
    if (c->qk_norm) {
        uint32_t w_qn, w_kn;
        TRY(w_qn = W("attn.q_norm", "self_attn.q_norm.weight", 1, hd, 0));
        TRY(w_kn = W("attn.k_norm", "self_attn.k_norm.weight", 1, hd, 0));
        TRY(q = rmsnorm(b, NN("attn.q_norm"), l, q, w_qn, H * hd, hd));
        TRY(k = rmsnorm(b, NN("attn.k_norm"), l, k, w_kn, KV * hd, hd));
    }
    TRY(q = rope(b, NN("attn.q_rope"), l, q, pos, H));
    TRY(k = rope(b, NN("attn.k_rope"), l, k, pos, KV));

    weft_op_params p;
    memset(&p, 0, sizeof(p));
    p.i[0] = l;
    p.i[1] = H;
    p.i[2] = KV;
    p.i[3] = hd;
    p.i[4] = c->sliding_window;
    p.i[5] = 0;
    TRY(o = act(b, NN("attn.y"), H * hd));
    {
        uint32_t in[5] = {q, k, v, pos, b->kv_slots};
        TRYN(node(b, WEFT_OP_ATTENTION, NN("attn"), l, in, b->kv_slots == WEFT_TENSOR_NONE ? 4 : 5,
                  o, &p));
    }
    TRY(a = linear(b, NN("attn.o"), l, o, w_o, WEFT_TENSOR_NONE, D));
    {
        uint32_t r;
        TRY(r = act(b, NN("attn_add.y"), D));
        uint32_t in[2] = {*x, a};
        TRYN(node(b, WEFT_OP_ADD, NN("attn_add"), l, in, 2, r, NULL));
        *x = r;
    }
    TRY(h = rmsnorm(b, NN("mlp_norm"), l, *x, w_mn, D, 0));
    TRY(g = linear(b, NN("mlp.gate"), l, h, w_g, WEFT_TENSOR_NONE, F));
    TRY(u = linear(b, NN("mlp.up"), l, h, w_u, WEFT_TENSOR_NONE, F));
    TRY(sw = act(b, NN("mlp.swiglu.y"), F));
    {
        uint32_t in[2] = {g, u};
        TRYN(node(b, WEFT_OP_SWIGLU, NN("mlp.swiglu"), l, in, 2, sw, NULL));
    }
    TRY(dn = linear(b, NN("mlp.down"), l, sw, w_d, WEFT_TENSOR_NONE, D));
    {
        uint32_t r;
        TRY(r = act(b, NN("mlp_add.y"), D));
        uint32_t in[2] = {*x, dn};
        TRYN(node(b, WEFT_OP_ADD, NN("mlp_add"), l, in, 2, r, NULL));
        *x = r;
    }
#undef W
#undef NN
    return WEFT_OK;
}

static weft_status llama_build_graph(void *st, const weft_model_config *cfg,
                                     const weft_bucket *bucket, const weft_graph_service *gs,
                                     weft_graph *g, weft_error *err) {
    llama_state *s = st;
    if (!s || !cfg || !bucket || !gs || !g) return WEFT_ERR_INVALID;
    if (bucket->max_tokens == 0 || bucket->max_logits == 0 ||
        bucket->max_logits > bucket->max_tokens)
        return fail(s, err, WEFT_ERR_INVALID,
                    "bucket: expected 1 <= max_logits (%u) <= max_tokens (%u)", bucket->max_logits,
                    bucket->max_tokens);
    builder b = {.s = s,
                 .cfg = cfg,
                 .gs = gs,
                 .g = g,
                 .err = err,
                 .T = bucket->max_tokens,
                 .kv_slots = WEFT_TENSOR_NONE};
    if (s->host && s->host->get_service)
        b.ws = s->host->get_service(s->host, WEFT_SERVICE_WEIGHTS, 1);
    if (s->act_auto) { /* compute in the checkpoint's float dtype (device backends) */
        weft_weight_info info;
        memset(&info, 0, sizeof(info));
        s->act_dtype = WEFT_DTYPE_F32;
        if (b.ws && b.ws->find(b.ws->self, "model.embed_tokens.weight", &info, err) == WEFT_OK &&
            (info.dtype == WEFT_DTYPE_BF16 || info.dtype == WEFT_DTYPE_F16))
            s->act_dtype = info.dtype;
    }
    const int64_t D = cfg->hidden_size, V = cfg->vocab_size;
    int64_t t_shape[1] = {b.T};
    uint32_t tokens, pos, w_embed, w_norm, w_head, x, xn, logits;
    TRY(tokens = gs->tensor_add(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, 1, t_shape, WEFT_INPUT_TOKENS,
                                err));
    TRY(pos = gs->tensor_add(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, 1, t_shape, WEFT_INPUT_POSITIONS,
                             err));
    uint32_t logit_rows = WEFT_TENSOR_NONE;
    if (s->device_inputs) {
        int64_t r_shape[1] = {bucket->max_logits};
        TRY(b.kv_slots = gs->tensor_add(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, 1, t_shape,
                                        WEFT_INPUT_KV_SLOTS, err));
        TRY(logit_rows = gs->tensor_add(g, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, 1, r_shape,
                                        WEFT_INPUT_LOGIT_ROWS, err));
    }
    TRY(w_embed = weight(&b, "embed", "model.embed_tokens.weight", 2, V, D));
    TRY(x = act(&b, "embed.y", D));
    {
        uint32_t in[2] = {tokens, w_embed};
        TRYN(node(&b, WEFT_OP_EMBED, "embed", -1, in, 2, x, NULL));
    }
    for (uint32_t l = 0; l < cfg->n_layers; l++) {
        weft_status r = build_layer(&b, (int32_t)l, &x, pos);
        if (r != WEFT_OK) return r;
    }
    TRY(w_norm = weight(&b, "norm", "model.norm.weight", 1, D, 0));
    TRY(xn = rmsnorm(&b, "norm", -1, x, w_norm, D, 0));
    /* Tied embeddings: the head reads the embedding table under its own canonical name, so a
     * pass can still treat the head as a separate weight (quantize it differently). */
    TRY(w_head =
            weight(&b, "lm_head",
                   cfg->tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", 2, V, D));
    int64_t l_shape[2] = {bucket->max_logits, V};
    TRY(logits = gs->tensor_add(g, WEFT_TENSOR_OUTPUT, WEFT_DTYPE_F32, 2, l_shape,
                                WEFT_OUTPUT_LOGITS, err));
    {
        uint32_t in[3] = {xn, w_head, logit_rows};
        TRYN(node(&b, WEFT_OP_LM_HEAD, "lm_head", -1, in, logit_rows == WEFT_TENSOR_NONE ? 2 : 3,
                  logits, NULL));
    }
    return WEFT_OK;
}

/* ---- descriptor -------------------------------------------------------------------------- */
static const weft_model_vtable llama_model = {
    .size = sizeof(weft_model_vtable),
    .configure = llama_configure,
    .build_graph = llama_build_graph,
};

static const weft_plugin_descriptor llama_descriptor = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = LLAMA_NAME,
    .version = LLAMA_VERSION,
    .kind = WEFT_KIND_MODEL,
    .slots = WEFT_SLOT_MODEL,
    .create = llama_create,
    .destroy = llama_destroy,
    .model = &llama_model,
};

WEFT_EXPORT weft_status WEFT_PLUGIN_ENTRY(uint32_t host_min, uint32_t host_max, uint32_t *chosen,
                                          const weft_plugin_descriptor **out, weft_error *err) {
    if (!chosen || !out) return WEFT_ERR_INVALID;
    if (host_min > 1 || host_max < 1) {
        if (err) {
            err->code = WEFT_ERR_ABI;
            snprintf(err->source, sizeof(err->source), "%s", LLAMA_NAME);
            snprintf(err->message, sizeof(err->message),
                     "plugin llama %s speaks ABI 1, the host speaks %u..%u", LLAMA_VERSION,
                     host_min, host_max);
        }
        return WEFT_ERR_ABI;
    }
    *chosen = 1;
    *out = &llama_descriptor;
    return WEFT_OK;
}
