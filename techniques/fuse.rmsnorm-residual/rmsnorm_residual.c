/* fuse.rmsnorm-residual: a graph pass that rewrites every residual ADD whose sum feeds a
 * whole-row RMSNORM into one ADD_RMSNORM node (graph.h): the kernel adds, stores the new
 * residual stream and normalises it in one pass over the row, so a decode step launches one
 * kernel instead of two at each of the two residual joins per layer (and at the final norm).
 * Both backends implement ADD_RMSNORM with the arithmetic of ADD followed by RMSNORM (the cuda
 * kernel runs with the norm's block size so its sums of squares add in the same order), so the
 * rewrite is exact: bit-identical activations and tokens. The ADD's output stays a tensor of
 * the graph (out[1] of the fused node): the next residual join reads it. */
#include <stdio.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fuse.rmsnorm-residual"

typedef struct rr_state {
    const weft_host_services *host;
    uint32_t fused; /* nodes written over the instance's life (tests read it) */
} rr_state;

static weft_status rr_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    (void)opts;
    rr_state *s = host && host->alloc ? host->alloc(sizeof(*s)) : NULL;
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    memset(s, 0, sizeof(*s));
    s->host = host;
    *st = s;
    return WEFT_OK;
}

static void rr_destroy(void *st) {
    rr_state *s = st;
    if (s) s->host->free(s);
}

static int same_shape(const weft_tensor *a, const weft_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (uint32_t d = 0; d < a->rank && d < WEFT_MAX_DIMS; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static int valid_id(const weft_graph *g, uint32_t t) {
    return t < g->n_tensors;
}

/* The first node after index i that reads tensor t as a whole-row RMSNORM input, or -1. */
static int32_t norm_reader(const weft_graph *g, uint32_t i, uint32_t t) {
    for (uint32_t j = i + 1; j < g->n_nodes; j++) {
        const weft_node *n = &g->nodes[j];
        if (n->op == WEFT_OP_RMSNORM && n->n_in >= 2 && n->n_out == 1 && n->in[0] == t &&
            n->p.i[0] == 0)
            return (int32_t)j;
    }
    return -1;
}

static weft_status rr_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                          weft_graph *g, weft_error *err) {
    rr_state *s = st;
    (void)cfg;
    if (!s || !gs || !g || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: incomplete graph or service");
    uint32_t fused = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const weft_node *a = &g->nodes[i];
        if (a->op != WEFT_OP_ADD || a->n_in != 2 || a->n_out != 1) continue;
        uint32_t x = a->in[0], r = a->in[1], sum = a->out[0];
        if (!valid_id(g, x) || !valid_id(g, r) || !valid_id(g, sum)) continue;
        if (g->tensors[sum].kind == WEFT_TENSOR_OUTPUT) continue;
        int32_t j = norm_reader(g, i, sum);
        if (j < 0) continue;
        const weft_node *nm = &g->nodes[j];
        uint32_t w = nm->in[1], y = nm->out[0];
        if (!valid_id(g, w) || !valid_id(g, y) || !same_shape(&g->tensors[x], &g->tensors[r]) ||
            !same_shape(&g->tensors[x], &g->tensors[sum]) ||
            !same_shape(&g->tensors[x], &g->tensors[y]))
            continue;
        weft_node f;
        memset(&f, 0, sizeof(f));
        f.op = WEFT_OP_ADD_RMSNORM;
        f.layer = a->layer;
        f.n_in = 3;
        f.in[0] = x;
        f.in[1] = r;
        f.in[2] = w;
        f.n_out = 2;
        f.out[0] = y;
        f.out[1] = sum;
        f.p.f[0] = nm->p.f[0];
        /* "layers.3.mlp_add" + "layers.4.attn_norm" -> "layers.3.mlp_add+norm" */
        snprintf(f.name, sizeof(f.name), "%.42s+norm", a->name);
        /* the fused node takes the ADD's place (its inputs exist there; the norm's readers all
         * come later), then the ADD (now i + 1) and the norm (now j + 1) go */
        if (gs->node_add(g, &f, i, err) < 0 || gs->node_remove(g, (uint32_t)j + 1, err) < 0 ||
            gs->node_remove(g, i + 1, err) < 0)
            return err && err->code ? err->code
                                    : weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                                                     "run: could not rewrite node %u", i);
        fused++;
    }
    s->fused += fused;
    if (fused && s->host->log)
        s->host->log(WEFT_LOG_INFO, NAME, "fused %u add + rmsnorm pair(s)", (unsigned)fused);
    return WEFT_OK;
}

static const weft_pass_vtable rr_pass = {
    .size = sizeof(weft_pass_vtable),
    .run = rr_run,
    .derive_weight = NULL,
};

static const weft_plugin_descriptor rr_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS,
    .create = rr_create,
    .destroy = rr_destroy,
    .pass = &rr_pass,
};

WEFT_SDK_ENTRY(rr_desc, 1, 1)

/* For tests: how many pairs the instance fused. */
WEFT_EXPORT uint32_t fuse_rmsnorm_residual_fused(const void *st) {
    return st ? ((const rr_state *)st)->fused : 0;
}
