/* fuse.linear-add-norm: a graph pass that rewrites a LINEAR node and the ADD_RMSNORM node that
 * alone reads its output (fuse.rmsnorm-residual's residual join) into one user op
 * "fuse.linear_add_rmsnorm":
 *     t = linear(x, w [, b]); y, r = add_rmsnorm(t, res, w_norm)     (or add_rmsnorm(res, t, ..))
 *  -> y, r = fuse.linear_add_rmsnorm(x, w, b, res, w_norm)
 * In a pre-norm decoder these are the o and down projections with the two residual joins of
 * every layer. The cuda backend runs the node at one row (the batch-1 decode step) as one GEMV
 * kernel whose last block adds the residual and normalises the row, so each join loses a
 * kernel (two per layer); at more rows it runs the unfused kernels in sequence. README.md has
 * the op contract. The kernel rounds t's columns to the activation dtype as the plain GEMV
 * stores them and repeats weft_add_rmsnorm's arithmetic on them, so the rewrite is exact
 * (bit-identical); the add takes t and res in either order because a floating-point add
 * commutes.
 *
 * Refused (the graph stays as it was): t read by any other node or being a graph output (t is
 * not an output of the fused node, so nothing could read it), a reader that is not an
 * ADD_RMSNORM (a plain ADD or RMSNORM: fuse.rmsnorm-residual has not joined them), shapes or
 * dtypes that disagree, x, w or the bias written in place between the two nodes (the fused node
 * reads them at the join's place), and buckets of more than `max_tokens` rows (prefill keeps its
 * GEMM path and the separate norm).
 * Only cuda implements the op: the manifest says `backends: [cuda]`. */
#include <stdio.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fuse.linear-add-norm"
#define OP_NAME "fuse.linear_add_rmsnorm"

typedef struct la_state {
    const weft_host_services *host;
    uint32_t op; /* the fused op's id */
    int64_t max_tokens;
    uint32_t fused; /* pairs rewritten over the instance's life (tests read it) */
} la_state;

static weft_status la_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    la_state *s = host && host->alloc ? host->alloc(sizeof(*s)) : NULL;
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    memset(s, 0, sizeof(*s));
    s->host = host;
    /* the loader checks the manifest's range before create; a host that calls create itself
     * (tests, another runtime) gets the same refusal here */
    s->max_tokens = weft_sdk_option_int(opts, "max_tokens", 1);
    if (s->max_tokens < 1 || s->max_tokens > 8) {
        int64_t v = s->max_tokens;
        host->free(s);
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option max_tokens: expected 1..8, found %lld", (long long)v);
    }
    /* the fused op's id; a host without the graph service (plugins check) gets it at run */
    const weft_graph_service *gs =
        host->get_service ? host->get_service(host, WEFT_SERVICE_GRAPH, 1) : NULL;
    if (gs && (s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE) {
        host->free(s);
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    }
    *st = s;
    return WEFT_OK;
}

static void la_destroy(void *st) {
    la_state *s = st;
    if (s) s->host->free(s);
}

static int same_shape(const weft_tensor *a, const weft_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (uint32_t d = 0; d < a->rank && d < WEFT_MAX_DIMS; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static int64_t elements(const weft_tensor *t) {
    int64_t n = 1;
    for (uint32_t d = 0; d < t->rank && d < WEFT_MAX_DIMS; d++)
        n *= t->shape[d];
    return n;
}

/* A LINEAR node this pass can take as the product: one output, x and a rank-2 weight (N, K)
 * that fit each other, and a bias of N entries or none. */
static int product(const weft_graph *g, const weft_node *l) {
    if (l->op != WEFT_OP_LINEAR || l->n_out != 1 || (l->n_in != 2 && l->n_in != 3)) return 0;
    if (!weft_sdk_tensor_valid(g, l->in[0]) || !weft_sdk_tensor_valid(g, l->in[1]) ||
        !weft_sdk_tensor_valid(g, l->out[0]))
        return 0;
    const weft_tensor *x = &g->tensors[l->in[0]], *w = &g->tensors[l->in[1]];
    if (w->rank != 2 || x->rank < 1 || x->shape[x->rank - 1] != w->shape[1]) return 0;
    if (l->n_in == 3 && l->in[2] != WEFT_TENSOR_NONE &&
        (!weft_sdk_tensor_valid(g, l->in[2]) || elements(&g->tensors[l->in[2]]) != w->shape[0]))
        return 0;
    return 1;
}

/* Whether ADD_RMSNORM node a joins product l's output t with a residual of t's shape; *res
 * receives the residual (a's other summand). */
static int joins(const weft_graph *g, const weft_node *l, const weft_node *a, uint32_t *res) {
    uint32_t t = l->out[0];
    if (a->op != WEFT_OP_ADD_RMSNORM || a->n_in != 3 || a->n_out != 2) return 0;
    if (a->in[0] == t)
        *res = a->in[1];
    else if (a->in[1] == t)
        *res = a->in[0];
    else
        return 0;
    if (!weft_sdk_tensor_valid(g, *res) || *res == t || !weft_sdk_tensor_valid(g, a->in[2]) ||
        !weft_sdk_tensor_valid(g, a->out[0]) || !weft_sdk_tensor_valid(g, a->out[1]))
        return 0;
    const weft_tensor *tt = &g->tensors[t];
    int64_t n = g->tensors[l->in[1]].shape[0];
    return tt->rank == 2 && tt->shape[1] == n && same_shape(tt, &g->tensors[*res]) &&
           same_shape(tt, &g->tensors[a->out[0]]) && same_shape(tt, &g->tensors[a->out[1]]) &&
           elements(&g->tensors[a->in[2]]) == n;
}

/* Whether a node after index `from` and before `to` writes tensor t (in place: graph.h allows a
 * node to write a tensor it reads). The fused node reads x, w and the bias at the join's index,
 * later than the product did, so they must hold there what they held at the product. */
static int written_between(const weft_graph *g, uint32_t from, uint32_t to, uint32_t t) {
    if (t == WEFT_TENSOR_NONE) return 0;
    for (uint32_t i = from + 1; i < to; i++)
        if (weft_sdk_node_writes(&g->nodes[i], t)) return 1;
    return 0;
}

/* Inserts f before node `at` (a's index), then removes a (now at + 1) and the earlier l. */
static weft_status replace(const weft_graph_service *gs, weft_graph *g, const weft_node *f,
                           uint32_t at, uint32_t li, weft_error *err) {
    if (gs->node_add(g, f, at, err) < 0) return WEFT_ERR_INTERNAL;
    if (gs->node_remove(g, at + 1, err) < 0) return WEFT_ERR_INTERNAL;
    if (gs->node_remove(g, li, err) < 0) return WEFT_ERR_INTERNAL;
    return WEFT_OK;
}

static weft_status la_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                          weft_graph *g, weft_error *err) {
    la_state *s = st;
    (void)cfg;
    if (!s || !gs || !g || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: incomplete graph or service");
    if (!s->op && (s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE)
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    /* the kernel is a GEMV with the join in its last block; larger buckets keep the GEMM and
     * the separate norm, which the fused node would only run in sequence anyway */
    if ((int64_t)g->bucket.max_tokens > s->max_tokens) return WEFT_OK;
    uint32_t fused = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const weft_node *l = &g->nodes[i];
        if (!product(g, l)) continue;
        uint32_t t = l->out[0], res = WEFT_TENSOR_NONE;
        /* t is not an output of the fused node: it may not leave the graph, and the join must
         * be its only reader */
        if (g->tensors[t].kind == WEFT_TENSOR_OUTPUT) continue;
        int32_t ai = weft_sdk_only_reader(g, gs, t, i);
        if (ai < 0 || !joins(g, l, &g->nodes[ai], &res)) continue;
        uint32_t bias = l->n_in == 3 ? l->in[2] : WEFT_TENSOR_NONE;
        if (written_between(g, i, (uint32_t)ai, l->in[0]) ||
            written_between(g, i, (uint32_t)ai, l->in[1]) ||
            written_between(g, i, (uint32_t)ai, bias))
            continue;
        const weft_node *a = &g->nodes[ai];
        weft_node f;
        memset(&f, 0, sizeof(f));
        f.op = s->op;
        f.layer = l->layer; /* the product's layer: its weights dominate the node's time */
        f.n_in = 5;
        f.in[0] = l->in[0];
        f.in[1] = l->in[1];
        f.in[2] = bias;
        f.in[3] = res;
        f.in[4] = a->in[2];
        f.n_out = 2;
        f.out[0] = a->out[0];
        f.out[1] = a->out[1];
        f.p.f[0] = a->p.f[0];
        /* "layers.3.attn.o" -> "layers.3.attn.o+addnorm" (39 + 8 characters fill the field) */
        snprintf(f.name, sizeof(f.name), "%.39s+addnorm", l->name);
        /* the fused node takes the join's place: x, w, b, res and the norm weight all exist
         * there, and every reader of y and r comes later; t is left without producer or
         * reader, as fuse.swiglu leaves g and u */
        if (replace(gs, g, &f, (uint32_t)ai, i, err) != WEFT_OK)
            return err && err->code ? err->code
                                    : weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                                                     "run: could not rewrite node %u", i);
        fused++;
        i--; /* the node after the product moved into i */
    }
    s->fused += fused;
    if (fused && s->host->log)
        s->host->log(WEFT_LOG_INFO, NAME, "fused %u linear + add_rmsnorm pair(s)", (unsigned)fused);
    return WEFT_OK;
}

static const weft_pass_vtable la_pass = {
    .size = sizeof(weft_pass_vtable),
    .run = la_run,
    .derive_weight = NULL,
};

static const weft_plugin_descriptor la_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS,
    .create = la_create,
    .destroy = la_destroy,
    .pass = &la_pass,
};

WEFT_SDK_ENTRY(la_desc, 1, 1)

/* For tests: how many pairs the instance fused. */
WEFT_EXPORT uint32_t fuse_linear_add_norm_fused(const void *st) {
    return st ? ((const la_state *)st)->fused : 0;
}
