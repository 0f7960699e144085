/* fuse.qkv-rope: a graph pass that rewrites, in front of every ATTENTION node, the per-head
 * RMSNorm of q and k (Qwen3's qk-norm, when present) and the RoPE of q and k into one user op
 * "fuse.qkv_rope": one launch instead of two (Llama) or four (Qwen3) per layer. After
 * fuse.merged-projections the op also reads q, k and v straight out of the merged projection's
 * row and writes v, so the SPLIT node disappears too.
 *
 * Op contract (the cuda backend implements it): params as ROPE's (p.i[0] = q heads, i[1] =
 * head_dim, i[2] = rotary dims, i[3] = layout, i[4] = scaling, f[0..4]) plus i[5] = kv heads,
 * i[6] = 1 when in[0] is the merged q|k|v row, i[7] = 1 with the norm, f[5] = the norm's eps.
 * Inputs: q, k, positions [, q_norm, k_norm] or qkv, positions [, q_norm, k_norm]; outputs:
 * q', k' [, v]. The kernel repeats the unfused kernels' arithmetic, rounding where they store,
 * so the rewrite is exact (bit-identical). The kv-cache write stays in the attention op, so
 * every kv layout technique keeps working unchanged. */
#include <stdio.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fuse.qkv-rope"
#define OP_NAME "fuse.qkv_rope"

typedef struct qr_state {
    const weft_host_services *host;
    uint32_t op;
    uint32_t fused;
} qr_state;

static weft_status qr_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    (void)opts;
    qr_state *s = host && host->alloc ? host->alloc(sizeof(*s)) : NULL;
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    memset(s, 0, sizeof(*s));
    s->host = host;
    /* the fused op's id; a host without the graph service (plugins check) gets it later */
    const weft_graph_service *gs =
        host->get_service ? host->get_service(host, WEFT_SERVICE_GRAPH, 1) : NULL;
    if (gs && (s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE) {
        host->free(s);
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    }
    *st = s;
    return WEFT_OK;
}

static void qr_destroy(void *st) {
    qr_state *s = st;
    if (s) s->host->free(s);
}

static int32_t producer(const weft_graph *g, uint32_t t) {
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (weft_sdk_node_writes(&g->nodes[i], t)) return (int32_t)i;
    return -1;
}

/* One side (q or k) of the pattern: t = rope([rmsnorm per head](src)). */
typedef struct side {
    int32_t rope, norm; /* node indices (norm -1 when absent) */
    uint32_t src, norm_w;
    float eps;
} side;

static int match_side(const weft_graph *g, const weft_graph_service *gs, uint32_t t, uint32_t pos,
                      side *sd) {
    if (!weft_sdk_tensor_valid(g, t) || gs->tensor_uses(g, t) != 1) return 0;
    int32_t r = producer(g, t);
    if (r < 0) return 0;
    const weft_node *rn = &g->nodes[r];
    if (rn->op != WEFT_OP_ROPE || rn->n_in != 2 || rn->n_out != 1 || rn->in[1] != pos ||
        !weft_sdk_tensor_valid(g, rn->in[0]))
        return 0;
    sd->rope = r;
    sd->norm = -1;
    sd->src = rn->in[0];
    sd->norm_w = WEFT_TENSOR_NONE;
    sd->eps = 0.f;
    int32_t nidx = producer(g, rn->in[0]);
    if (nidx >= 0 && gs->tensor_uses(g, rn->in[0]) == 1) {
        const weft_node *nn = &g->nodes[nidx];
        if (nn->op == WEFT_OP_RMSNORM && nn->n_in == 2 && nn->n_out == 1 &&
            nn->p.i[0] == rn->p.i[1] && weft_sdk_tensor_valid(g, nn->in[0]) &&
            weft_sdk_tensor_valid(g, nn->in[1])) {
            sd->norm = nidx;
            sd->src = nn->in[0];
            sd->norm_w = nn->in[1];
            sd->eps = nn->p.f[0];
        }
    }
    return 1;
}

static int same_rope(const weft_node *a, const weft_node *b) {
    for (int i = 1; i < 5; i++)
        if (a->p.i[i] != b->p.i[i]) return 0;
    return !memcmp(a->p.f, b->p.f, 5 * sizeof(float));
}

static weft_status qr_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                          weft_graph *g, weft_error *err) {
    qr_state *s = st;
    (void)cfg;
    if (!s || !gs || !g || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: incomplete graph or service");
    if (!s->op && (s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE)
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    uint32_t fused = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const weft_node *at = &g->nodes[i];
        if (at->op != WEFT_OP_ATTENTION || at->n_in < 4) continue;
        uint32_t qt = at->in[0], kt = at->in[1], vt = at->in[2], pos = at->in[3];
        side q, k;
        if (!weft_sdk_tensor_valid(g, pos) || !match_side(g, gs, qt, pos, &q) ||
            !match_side(g, gs, kt, pos, &k))
            continue;
        if ((q.norm < 0) != (k.norm < 0) || (q.norm >= 0 && q.eps != k.eps)) continue;
        const weft_node *rq = &g->nodes[q.rope], *rk = &g->nodes[k.rope];
        if (!same_rope(rq, rk)) continue;
        int64_t Hq = rq->p.i[0], Hkv = rk->p.i[0], hd = rq->p.i[1];
        int has_norm = q.norm >= 0;
        weft_node f;
        memset(&f, 0, sizeof(f));
        f.op = s->op;
        f.layer = at->layer;
        f.p = rq->p;
        f.p.i[5] = Hkv;
        f.p.i[7] = has_norm;
        f.p.f[5] = has_norm ? q.eps : 0.f;
        uint32_t idx[5], n_idx = 0;
        idx[n_idx++] = (uint32_t)q.rope;
        idx[n_idx++] = (uint32_t)k.rope;
        if (has_norm) {
            idx[n_idx++] = (uint32_t)q.norm;
            idx[n_idx++] = (uint32_t)k.norm;
        }
        /* merged form: q, k, v are the three outputs of one split */
        int32_t sp = producer(g, q.src);
        int merged = 0;
        if (sp >= 0 && weft_sdk_tensor_valid(g, vt) && producer(g, k.src) == sp &&
            producer(g, vt) == sp) {
            const weft_node *spn = &g->nodes[sp];
            merged = spn->op == WEFT_OP_SPLIT && spn->n_out == 3 && spn->out[0] == q.src &&
                     spn->out[1] == k.src && spn->out[2] == vt && spn->p.i[0] == Hq * hd &&
                     spn->p.i[1] == Hkv * hd && spn->p.i[2] == Hkv * hd &&
                     gs->tensor_uses(g, q.src) == 1 && gs->tensor_uses(g, k.src) == 1 &&
                     gs->tensor_uses(g, vt) == 1 && weft_sdk_tensor_valid(g, spn->in[0]);
        }
        uint32_t n_in = 0;
        if (merged) {
            f.p.i[6] = 1;
            f.in[n_in++] = g->nodes[sp].in[0];
            idx[n_idx++] = (uint32_t)sp;
        } else {
            f.in[n_in++] = q.src;
            f.in[n_in++] = k.src;
        }
        f.in[n_in++] = pos;
        if (has_norm) {
            f.in[n_in++] = q.norm_w;
            f.in[n_in++] = k.norm_w;
        }
        f.n_in = n_in;
        f.n_out = merged ? 3 : 2;
        f.out[0] = qt;
        f.out[1] = kt;
        f.out[2] = merged ? vt : 0;
        snprintf(f.name, sizeof(f.name), "%.38s.qkv_rope", at->name);
        /* the fused node goes right before the attention node; then the replaced nodes, all
         * earlier, are removed from the largest index down */
        if (gs->node_add(g, &f, i, err) < 0)
            return err && err->code ? err->code : WEFT_ERR_INTERNAL;
        for (uint32_t a = 0; a < n_idx; a++)
            for (uint32_t b = a + 1; b < n_idx; b++)
                if (idx[b] > idx[a]) {
                    uint32_t t = idx[a];
                    idx[a] = idx[b];
                    idx[b] = t;
                }
        for (uint32_t a = 0; a < n_idx; a++)
            if (gs->node_remove(g, idx[a], err) < 0)
                return err && err->code ? err->code
                                        : weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                                                         "run: could not remove node %u", idx[a]);
        i -= n_idx; /* now at the fused node; the loop moves on to the attention node, then on */
        i++;
        fused++;
    }
    s->fused += fused;
    if (fused && s->host->log)
        s->host->log(WEFT_LOG_INFO, NAME, "fused q/k norm + rope in front of %u attention node(s)",
                     (unsigned)fused);
    return WEFT_OK;
}

static const weft_pass_vtable qr_pass = {
    .size = sizeof(weft_pass_vtable),
    .run = qr_run,
    .derive_weight = NULL,
};

static const weft_plugin_descriptor qr_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS,
    .create = qr_create,
    .destroy = qr_destroy,
    .pass = &qr_pass,
};

WEFT_SDK_ENTRY(qr_desc, 1, 1)

WEFT_EXPORT uint32_t fuse_qkv_rope_fused(const void *st) {
    return st ? ((const qr_state *)st)->fused : 0;
}
