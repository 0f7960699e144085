/* fuse.rope-attention: a graph pass that rewrites a "fuse.qkv_rope" node (fuse.qkv-rope's
 * qk-norm + RoPE) and the ATTENTION node that alone reads its outputs into one user op
 * "fuse.rope_attention". The cuda backend runs that node at one row (a batch-1 decode step) as
 * one kernel doing norm, rotation, kv-cache store, split-KV attention and the merge of the
 * splits, where the two nodes took four kernels; at more rows it runs the unfused kernels in
 * sequence. README.md has the op contract; the kernel repeats the unfused kernels' arithmetic,
 * so the rewrite is exact (bit-identical).
 *
 * Refused (the graph stays as it was): an attention with a custom mask (p.i[5] != 0), one that
 * does not read in.kv_slots (a captured step would then replay a staged row -> slot map: the
 * capture executors check this on ATTENTION nodes only), parameters of the two nodes that
 * disagree, or q', k' (v) read by any other node. The op reads the contiguous kv layout only:
 * the manifest declares the conflict with kv.paged, whose attention ops read its pages. */
#include <stdio.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fuse.rope-attention"
#define OP_NAME "fuse.rope_attention"
#define QKV_ROPE_OP "fuse.qkv_rope"

typedef struct ra_state {
    const weft_host_services *host;
    uint32_t op, qkv_rope;
    uint32_t fused;
    int cluster_merge; /* option merge: cluster (flag bit 2 of p.i[6]) */
} ra_state;

static weft_status ra_ids(ra_state *s, const weft_graph_service *gs, weft_error *err) {
    if (!s->op && (s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE)
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    if (!s->qkv_rope && (s->qkv_rope = gs->op_register(QKV_ROPE_OP, err)) == WEFT_OP_NONE)
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    return WEFT_OK;
}

static weft_status ra_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    ra_state *s = host && host->alloc ? host->alloc(sizeof(*s)) : NULL;
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    memset(s, 0, sizeof(*s));
    s->host = host;
    const char *merge = weft_sdk_option_string(opts, "merge", "atomic");
    if (strcmp(merge, "atomic") && strcmp(merge, "cluster")) {
        host->free(s);
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option merge: expected atomic or cluster, found '%s'", merge);
    }
    s->cluster_merge = !strcmp(merge, "cluster");
    /* the ops' ids; a host without the graph service (plugins check) gets them at run */
    const weft_graph_service *gs =
        host->get_service ? host->get_service(host, WEFT_SERVICE_GRAPH, 1) : NULL;
    if (gs) {
        weft_status r = ra_ids(s, gs, err);
        if (r) {
            host->free(s);
            return r;
        }
    }
    *st = s;
    return WEFT_OK;
}

static void ra_destroy(void *st) {
    ra_state *s = st;
    if (s) s->host->free(s);
}

/* Whether attention node a reads exactly what fuse.qkv_rope node f makes, with the same
 * shape parameters, and can be run by the fused op. */
static int matches(const weft_graph *g, const weft_graph_service *gs, uint32_t fi, uint32_t ai) {
    const weft_node *f = &g->nodes[fi], *a = &g->nodes[ai];
    int merged = f->p.i[6] == 1, norm = f->p.i[7] == 1;
    uint32_t need = (merged ? 2u : 3u) + (norm ? 2u : 0u);
    if (f->n_in != need || f->n_out != (merged ? 3u : 2u)) return 0;
    if (a->op != WEFT_OP_ATTENTION || a->n_in < 5 || a->n_out != 1) return 0;
    uint32_t pos = f->in[merged ? 1 : 2];
    if (a->in[0] != f->out[0] || a->in[1] != f->out[1] || (merged && a->in[2] != f->out[2]) ||
        a->in[3] != pos || !weft_sdk_tensor_valid(g, a->in[2]) ||
        !weft_sdk_tensor_valid(g, a->in[4]))
        return 0;
    if (merged && weft_sdk_only_reader(g, gs, f->out[2], fi) != (int32_t)ai) return 0;
    if (a->p.i[5] != 0 || a->p.i[1] != f->p.i[0] || a->p.i[2] != f->p.i[5] ||
        a->p.i[3] != f->p.i[1] || a->p.i[0] < 0 || a->p.i[0] > INT32_MAX || a->p.i[4] < 0 ||
        a->p.i[4] > INT32_MAX)
        return 0;
    return 1;
}

static weft_status ra_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                          weft_graph *g, weft_error *err) {
    ra_state *s = st;
    (void)cfg;
    if (!s || !gs || !g || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: incomplete graph or service");
    weft_status r = ra_ids(s, gs, err);
    if (r) return r;
    uint32_t fused = 0;
    for (uint32_t fi = 0; fi < g->n_nodes; fi++) {
        const weft_node *f = &g->nodes[fi];
        if (f->op != s->qkv_rope || f->n_out < 2) continue;
        int32_t ai = weft_sdk_only_reader(g, gs, f->out[0], fi);
        if (ai < 0 || weft_sdk_only_reader(g, gs, f->out[1], fi) != ai ||
            !matches(g, gs, fi, (uint32_t)ai))
            continue;
        const weft_node *a = &g->nodes[ai];
        int merged = f->p.i[6] == 1, norm = f->p.i[7] == 1;
        weft_node n;
        memset(&n, 0, sizeof(n));
        n.op = s->op;
        n.layer = a->layer;
        n.p = f->p; /* i[0..5] and f[0..5] keep fuse.qkv_rope's meaning */
        n.p.i[6] = (merged ? 1 : 0) | (norm ? 2 : 0) | (s->cluster_merge ? 4 : 0) |
                   (a->p.i[4] << 8);
        n.p.i[7] = a->p.i[0];
        n.p.f[6] = a->p.f[0];
        uint32_t k = 0;
        if (merged) {
            n.in[k++] = f->in[0];
        } else {
            n.in[k++] = f->in[0];
            n.in[k++] = f->in[1];
            n.in[k++] = a->in[2];
        }
        n.in[k++] = a->in[3]; /* positions */
        n.in[k++] = a->in[4]; /* in.kv_slots */
        if (norm) {
            uint32_t at = merged ? 2 : 3;
            n.in[k++] = f->in[at];
            n.in[k++] = f->in[at + 1];
        }
        n.n_in = k;
        n.out[0] = a->out[0];
        n.out[1] = f->out[0];
        n.out[2] = f->out[1];
        if (merged) n.out[3] = f->out[2];
        n.n_out = merged ? 4 : 3;
        snprintf(n.name, sizeof(n.name), "%.36s.rope_attn", a->name);
        /* the fused node takes the attention's place (every input is made before it); then
         * the attention (now right after it) and the earlier fuse.qkv_rope node go */
        uint32_t at = (uint32_t)ai;
        if (gs->node_add(g, &n, at, err) < 0)
            return err && err->code ? err->code : WEFT_ERR_INTERNAL;
        if (gs->node_remove(g, at + 1, err) < 0 || gs->node_remove(g, fi, err) < 0)
            return err && err->code ? err->code
                                    : weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                                                     "run: could not remove the fused nodes");
        fused++;
        fi--; /* the next node moved into fi */
    }
    s->fused += fused;
    if (fused && s->host->log)
        s->host->log(WEFT_LOG_INFO, NAME,
                     "fused qk-norm/rope and attention into %u fuse.rope_attention node(s)",
                     (unsigned)fused);
    return WEFT_OK;
}

static const weft_pass_vtable ra_pass = {
    .size = sizeof(weft_pass_vtable),
    .run = ra_run,
    .derive_weight = NULL,
};

static const weft_plugin_descriptor ra_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS,
    .create = ra_create,
    .destroy = ra_destroy,
    .pass = &ra_pass,
};

WEFT_SDK_ENTRY(ra_desc, 1, 1)

WEFT_EXPORT uint32_t fuse_rope_attention_fused(const void *st) {
    return st ? ((const ra_state *)st)->fused : 0;
}
