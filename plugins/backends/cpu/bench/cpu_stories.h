/* A minimal eager driver for the stories260K llama2.c checkpoint over the cpu backend's ops,
 * shared by the plugin's unit test (logits and greedy tokens against the Hugging Face
 * reference) and its decode benchmark. It is not the engine: it builds one step graph by hand
 * (the same op contracts a model plugin emits), binds the checkpoint's f32 arrays as weights,
 * resolves each node through an ops service and runs the nodes in order with one contiguous kv
 * cache. Everything is static so each includer gets its own copy. llama2.c stores q and k rows
 * in interleaved-pair RoPE order, so the rope nodes use layout 1. */
#ifndef WEFT_CPU_STORIES_H
#define WEFT_CPU_STORIES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft/plugin.h"

typedef struct stories_model {
    int32_t dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len;
    float *data;
    const float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final;
} stories_model;

static int stories_load(const char *path, stories_model *m, char *msg, size_t msg_size) {
    memset(m, 0, sizeof(*m));
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(msg, msg_size, "%s: cannot open", path), -1;
    int32_t h[7];
    if (fread(h, 4, 7, f) != 7) {
        fclose(f);
        return snprintf(msg, msg_size, "%s: short header", path), -1;
    }
    m->dim = h[0], m->hidden = h[1], m->n_layers = h[2], m->n_heads = h[3], m->n_kv = h[4];
    m->vocab = h[5] < 0 ? -h[5] : h[5], m->seq_len = h[6];
    if (m->dim <= 0 || m->dim > 4096 || m->hidden <= 0 || m->hidden > 16384 || m->n_layers <= 0 ||
        m->n_layers > 64 || m->n_heads <= 0 || m->n_kv <= 0 || m->n_heads % m->n_kv ||
        m->dim % m->n_heads || m->vocab <= 0 || m->vocab > 200000 || m->seq_len <= 0 || h[5] < 0) {
        fclose(f);
        return snprintf(msg, msg_size, "%s: unsupported header", path), -1;
    }
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f) - 28;
    fseek(f, 28, SEEK_SET);
    int64_t D = m->dim, F = m->hidden, L = m->n_layers, KV = (int64_t)m->n_kv * (D / m->n_heads);
    int64_t need =
        m->vocab * D + L * D + L * D * D + 2 * L * KV * D + L * D * D + L * D + 3 * L * F * D + D;
    if (bytes < need * 4) {
        fclose(f);
        return snprintf(msg, msg_size, "%s: %ld bytes of weights, need %lld", path, bytes,
                        (long long)need * 4),
               -1;
    }
    m->data = malloc((size_t)bytes);
    if (!m->data || fread(m->data, 1, (size_t)bytes, f) != (size_t)bytes) {
        fclose(f);
        free(m->data);
        m->data = NULL;
        return snprintf(msg, msg_size, "%s: read failed", path), -1;
    }
    fclose(f);
    const float *p = m->data;
    m->emb = p, p += m->vocab * D;
    m->rms_att = p, p += L * D;
    m->wq = p, p += L * D * D;
    m->wk = p, p += L * KV * D;
    m->wv = p, p += L * KV * D;
    m->wo = p, p += L * D * D;
    m->rms_ffn = p, p += L * D;
    m->w1 = p, p += L * F * D;
    m->w2 = p, p += L * D * F;
    m->w3 = p, p += L * F * D;
    m->rms_final = p;
    return 0;
}

#define STORIES_MAX_TENSORS 512
#define STORIES_MAX_NODES 512

typedef struct stories_engine {
    const weft_backend_vtable *be;
    void *st;
    const weft_ops_service *ops;
    weft_host_services *host;
    weft_graph g;
    weft_tensor tensors[STORIES_MAX_TENSORS];
    weft_buffer bufs[STORIES_MAX_TENSORS];
    uint8_t owned[STORIES_MAX_TENSORS];
    weft_node nodes[STORIES_MAX_NODES];
    const weft_op_impl *impls[STORIES_MAX_NODES];
    weft_buffer kc[64], vc[64];
    weft_kv_contiguous kv;
    weft_kv_view view;
    weft_seq seq;
    weft_batch batch;
    int32_t *rows_seq, *rows_logit;
    uint32_t in_tokens, in_pos, out_logits;
    uint32_t max_tokens, vocab;
    int profile; /* when set, op_ns accumulates time per op */
    double op_ns[WEFT_OP_BUILTIN_COUNT];
} stories_engine;

static double stories_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

static uint32_t stories_tensor(stories_engine *e, uint32_t kind, uint32_t dtype, int64_t d0,
                               int64_t d1, const char *name, const void *bind) {
    weft_graph *g = &e->g;
    uint32_t id = g->n_tensors++;
    weft_tensor *t = &e->tensors[id];
    memset(t, 0, sizeof(*t));
    t->id = id, t->kind = kind, t->dtype = dtype, t->rank = d1 ? 2 : 1;
    t->shape[0] = d0, t->shape[1] = d1;
    snprintf(t->name, sizeof(t->name), "%s", name);
    uint64_t bytes = (uint64_t)d0 * (d1 ? d1 : 1) * 4;
    if (bind) {
        e->bufs[id].ptr = (void *)bind;
        e->bufs[id].bytes = bytes;
    } else {
        weft_error err;
        memset(&err, 0, sizeof(err));
        err.size = sizeof(err);
        if (e->be->alloc(e->st, bytes, WEFT_MEMORY_DEVICE, &e->bufs[id], &err) != WEFT_OK)
            return WEFT_TENSOR_NONE;
        memset(e->bufs[id].ptr, 0, bytes);
        e->owned[id] = 1;
    }
    return id;
}

static void stories_node(stories_engine *e, uint32_t op, const char *name, int n_in,
                         const uint32_t *in, int n_out, const uint32_t *out) {
    weft_node *n = &e->nodes[e->g.n_nodes++];
    memset(n, 0, sizeof(*n));
    n->op = op, n->layer = -1, n->n_in = (uint32_t)n_in, n->n_out = (uint32_t)n_out;
    for (int i = 0; i < WEFT_NODE_MAX_IN; i++)
        n->in[i] = i < n_in ? in[i] : WEFT_TENSOR_NONE;
    for (int i = 0; i < WEFT_NODE_MAX_OUT; i++)
        n->out[i] = i < n_out ? out[i] : WEFT_TENSOR_NONE;
    snprintf(n->name, sizeof(n->name), "%s", name);
}

static weft_node *stories_last(stories_engine *e) {
    return &e->nodes[e->g.n_nodes - 1];
}

/* Builds the step graph for up to max_tokens rows of one sequence, a cache of max_seq. */
static int stories_build(stories_engine *e, const stories_model *m, const weft_backend_vtable *be,
                         void *st, const weft_ops_service *ops, uint32_t max_tokens,
                         uint32_t max_seq, char *msg, size_t msg_size) {
    memset(e, 0, sizeof(*e));
    e->be = be, e->st = st, e->ops = ops, e->max_tokens = max_tokens, e->vocab = (uint32_t)m->vocab;
    e->g.size = sizeof(e->g);
    e->g.tensors = e->tensors;
    e->g.nodes = e->nodes;
    e->g.bucket.size = sizeof(e->g.bucket);
    e->g.bucket.max_tokens = max_tokens;
    e->g.bucket.max_seqs = 1;
    e->g.bucket.max_logits = max_tokens;
    const int64_t T = max_tokens, D = m->dim, F = m->hidden, H = m->n_heads, HKV = m->n_kv;
    const int64_t hd = D / H, KW = HKV * hd;
    const float eps = 1e-5f;
    e->in_tokens = stories_tensor(e, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, T, 0, "in.tokens", NULL);
    e->in_pos = stories_tensor(e, WEFT_TENSOR_INPUT, WEFT_DTYPE_I32, T, 0, "in.positions", NULL);
    uint32_t emb =
        stories_tensor(e, WEFT_TENSOR_WEIGHT, WEFT_DTYPE_F32, m->vocab, D, "embed", m->emb);
    uint32_t x = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, D, "x", NULL);
    uint32_t xb = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, D, "xb", NULL);
    uint32_t q = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, D, "q", NULL);
    uint32_t k = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, KW, "k", NULL);
    uint32_t v = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, KW, "v", NULL);
    uint32_t att = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, D, "att", NULL);
    uint32_t tmp = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, D, "tmp", NULL);
    uint32_t g1 = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, F, "gate", NULL);
    uint32_t g3 = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, F, "up", NULL);
    uint32_t hh = stories_tensor(e, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_F32, T, F, "h", NULL);
    e->out_logits =
        stories_tensor(e, WEFT_TENSOR_OUTPUT, WEFT_DTYPE_F32, T, m->vocab, "out.logits", NULL);
    uint32_t a2[2], a3[3], a4[4];
    a2[0] = e->in_tokens, a2[1] = emb;
    stories_node(e, WEFT_OP_EMBED, "embed", 2, a2, 1, &x);
    for (int l = 0; l < m->n_layers; l++) {
        char nm[48];
#define W(name, ptr, d0, d1)                                                                       \
    (snprintf(nm, sizeof(nm), "layers.%d.%s", l, name),                                            \
     stories_tensor(e, WEFT_TENSOR_WEIGHT, WEFT_DTYPE_F32, d0, d1, nm, ptr))
        uint32_t w_an = W("attn_norm", m->rms_att + l * D, D, 0);
        uint32_t w_q = W("attn.q", m->wq + l * D * D, D, D);
        uint32_t w_k = W("attn.k", m->wk + l * KW * D, KW, D);
        uint32_t w_v = W("attn.v", m->wv + l * KW * D, KW, D);
        uint32_t w_o = W("attn.o", m->wo + l * D * D, D, D);
        uint32_t w_fn = W("mlp_norm", m->rms_ffn + l * D, D, 0);
        uint32_t w_1 = W("mlp.gate", m->w1 + l * F * D, F, D);
        uint32_t w_2 = W("mlp.down", m->w2 + l * D * F, D, F);
        uint32_t w_3 = W("mlp.up", m->w3 + l * F * D, F, D);
#undef W
        a2[0] = x, a2[1] = w_an;
        stories_node(e, WEFT_OP_RMSNORM, "attn_norm", 2, a2, 1, &xb);
        stories_last(e)->p.f[0] = eps;
        a2[0] = xb, a2[1] = w_q;
        stories_node(e, WEFT_OP_LINEAR, "attn.q", 2, a2, 1, &q);
        a2[1] = w_k;
        stories_node(e, WEFT_OP_LINEAR, "attn.k", 2, a2, 1, &k);
        a2[1] = w_v;
        stories_node(e, WEFT_OP_LINEAR, "attn.v", 2, a2, 1, &v);
        for (int qk = 0; qk < 2; qk++) {
            a2[0] = qk ? k : q, a2[1] = e->in_pos;
            stories_node(e, WEFT_OP_ROPE, qk ? "rope.k" : "rope.q", 2, a2, 1, &a2[0]);
            weft_op_params *p = &stories_last(e)->p;
            p->i[0] = qk ? HKV : H, p->i[1] = hd, p->i[3] = 1, p->f[0] = 10000.0f;
        }
        a4[0] = q, a4[1] = k, a4[2] = v, a4[3] = e->in_pos;
        stories_node(e, WEFT_OP_ATTENTION, "attn", 4, a4, 1, &att);
        weft_op_params *p = &stories_last(e)->p;
        p->i[0] = l, p->i[1] = H, p->i[2] = HKV, p->i[3] = hd;
        a2[0] = att, a2[1] = w_o;
        stories_node(e, WEFT_OP_LINEAR, "attn.o", 2, a2, 1, &tmp);
        a2[0] = x, a2[1] = tmp;
        stories_node(e, WEFT_OP_ADD, "attn_residual", 2, a2, 1, &x);
        a2[0] = x, a2[1] = w_fn;
        stories_node(e, WEFT_OP_RMSNORM, "mlp_norm", 2, a2, 1, &xb);
        stories_last(e)->p.f[0] = eps;
        a2[0] = xb, a2[1] = w_1;
        stories_node(e, WEFT_OP_LINEAR, "mlp.gate", 2, a2, 1, &g1);
        a2[1] = w_3;
        stories_node(e, WEFT_OP_LINEAR, "mlp.up", 2, a2, 1, &g3);
        a2[0] = g1, a2[1] = g3;
        stories_node(e, WEFT_OP_SWIGLU, "mlp.act", 2, a2, 1, &hh);
        a2[0] = hh, a2[1] = w_2;
        stories_node(e, WEFT_OP_LINEAR, "mlp.down", 2, a2, 1, &tmp);
        a2[0] = x, a2[1] = tmp;
        stories_node(e, WEFT_OP_ADD, "mlp_residual", 2, a2, 1, &x);
        for (uint32_t i = e->g.n_nodes - 15; i < e->g.n_nodes; i++)
            e->nodes[i].layer = l;
    }
    uint32_t w_norm =
        stories_tensor(e, WEFT_TENSOR_WEIGHT, WEFT_DTYPE_F32, D, 0, "norm", m->rms_final);
    a2[0] = x, a2[1] = w_norm;
    stories_node(e, WEFT_OP_RMSNORM, "norm", 2, a2, 1, &xb);
    stories_last(e)->p.f[0] = eps;
    a2[0] = xb, a2[1] = emb;
    stories_node(e, WEFT_OP_LM_HEAD, "lm_head", 2, a2, 1, &e->out_logits);
    (void)a3;
    for (uint32_t i = 0; i < e->g.n_tensors; i++)
        if (e->bufs[i].ptr == NULL)
            return snprintf(msg, msg_size, "allocating tensor %u failed", i), -1;
    /* Resolve every node: key dtype = weight for linear/lm_head/embed, cache for attention. */
    for (uint32_t i = 0; i < e->g.n_nodes; i++) {
        weft_node *n = &e->nodes[i];
        uint32_t key = WEFT_DTYPE_F32;
        const char *layout = n->op == WEFT_OP_ATTENTION ? "contiguous" : "";
        e->impls[i] = ops->find(ops->self, n->op, "cpu", key, layout, &e->g, n);
        if (!e->impls[i] ||
            (e->impls[i]->accepts && !e->impls[i]->accepts(e->impls[i]->state, &e->g, n)))
            return snprintf(msg, msg_size, "node %u (%s): no implementation accepts it", i,
                            n->name),
                   -1;
    }
    /* The kv cache: one slot of max_seq positions per layer. */
    uint64_t kvb = (uint64_t)max_seq * KW * 4;
    for (int l = 0; l < m->n_layers; l++) {
        weft_error err;
        memset(&err, 0, sizeof(err));
        err.size = sizeof(err);
        if (be->alloc(st, kvb, WEFT_MEMORY_DEVICE, &e->kc[l], &err) ||
            be->alloc(st, kvb, WEFT_MEMORY_DEVICE, &e->vc[l], &err))
            return snprintf(msg, msg_size, "kv alloc: %s", err.message), -1;
    }
    e->kv = (weft_kv_contiguous){.size = sizeof(weft_kv_contiguous),
                                 .n_layers = (uint32_t)m->n_layers,
                                 .n_slots = 1,
                                 .max_seq = max_seq,
                                 .n_kv_heads = (uint32_t)HKV,
                                 .head_dim = (uint32_t)hd,
                                 .dtype = WEFT_DTYPE_F32,
                                 .k = e->kc,
                                 .v = e->vc};
    e->view.size = sizeof(e->view);
    snprintf(e->view.layout, sizeof(e->view.layout), "contiguous");
    e->view.desc = &e->kv;
    e->rows_seq = calloc(max_tokens, sizeof(int32_t));
    e->rows_logit = calloc(max_tokens, sizeof(int32_t));
    if (!e->rows_seq || !e->rows_logit) return snprintf(msg, msg_size, "out of memory"), -1;
    return 0;
}

/* Runs n tokens at positions pos0.. ; logits of the last row (or of every row when all_logits)
 * are left in *logits ((rows, vocab) f32, owned by the engine). */
static int stories_step(stories_engine *e, const int32_t *tokens, uint32_t n, int32_t pos0,
                        int all_logits, const float **logits, char *msg, size_t msg_size) {
    if (n == 0 || n > e->max_tokens || pos0 < 0 || (uint32_t)pos0 + n > e->kv.max_seq)
        return snprintf(msg, msg_size, "step of %u tokens at %d does not fit", n, pos0), -1;
    int32_t *tok = e->bufs[e->in_tokens].ptr, *pos = e->bufs[e->in_pos].ptr;
    for (uint32_t i = 0; i < n; i++) {
        tok[i] = tokens[i];
        pos[i] = pos0 + (int32_t)i;
        e->rows_seq[i] = 0;
        e->rows_logit[i] = (int32_t)i;
    }
    e->seq = (weft_seq){.request_id = 1, .kv_slot = 0, .n_past = pos0, .n_new = (int32_t)n};
    e->batch = (weft_batch){.size = sizeof(weft_batch),
                            .n_tokens = n,
                            .n_seqs = 1,
                            .n_logits = all_logits ? n : 1,
                            .tokens = tok,
                            .positions = pos,
                            .seq_of_row = e->rows_seq,
                            .seqs = &e->seq,
                            .logit_rows = all_logits ? e->rows_logit : e->rows_logit + n - 1};
    weft_exec_ctx ctx = {.size = sizeof(weft_exec_ctx),
                         .n_tokens = n,
                         .graph = &e->g,
                         .batch = &e->batch,
                         .data = e->bufs,
                         .kv = &e->view,
                         .backend = e->st};
    for (uint32_t i = 0; i < e->g.n_nodes; i++) {
        weft_error err;
        err.size = sizeof(err);
        err.message[0] = '\0';
        double t0 = e->profile ? stories_now_ns() : 0;
        weft_status s = e->impls[i]->run(e->impls[i]->state, &ctx, &e->nodes[i], &err);
        if (e->profile && e->nodes[i].op < WEFT_OP_BUILTIN_COUNT)
            e->op_ns[e->nodes[i].op] += stories_now_ns() - t0;
        if (s != WEFT_OK)
            return snprintf(msg, msg_size, "node %u (%s): %s", i, e->nodes[i].name, err.message),
                   -1;
    }
    *logits = e->bufs[e->out_logits].ptr;
    return 0;
}

static void stories_free(stories_engine *e) {
    for (uint32_t i = 0; i < e->g.n_tensors; i++)
        if (e->owned[i]) e->be->free(e->st, &e->bufs[i]);
    for (uint32_t l = 0; l < e->kv.n_layers; l++) {
        e->be->free(e->st, &e->kc[l]);
        e->be->free(e->st, &e->vc[l]);
    }
    free(e->rows_seq);
    free(e->rows_logit);
}

static int32_t stories_argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

#endif
