/* fuse.norm-linear: a graph pass that rewrites a residual join (fuse.rmsnorm-residual's
 * ADD_RMSNORM) and the one product that reads its normalised row into one user op
 * "fuse.norm_linear":
 *     y, r = add_rmsnorm(x, res, w_norm); out = linear(y, w [, b])   (or fuse.linear_swiglu(y, ..))
 *  -> out, r, y = fuse.norm_linear(x, res, w_norm, w, b | w_up)
 * In a pre-norm decoder these are the two joins of every layer with the q|k|v and gate|up
 * products after them (the final norm feeds an LM_HEAD node, which this pass leaves). The cuda
 * backend runs the node at one row as one looped GEMV kernel: every block adds and normalises the
 * row into its shared memory with weft_add_rmsnorm's arithmetic (the standalone norm's thread
 * count, as virtual threads), block 0 also stores r, then the block runs its product rows. So each
 * join loses its kernel and its kernel boundary; y is an output of the node only so that the
 * unfused form (more rows, or the kernel not available) has somewhere to write it, and nothing
 * reads it. README.md has the op contract. The rewrite is exact (bit-identical).
 *
 * Refused (the graph stays as it was): y read by any other node or being a graph output, a
 * reader that is not a LINEAR or fuse.linear_swiglu taking y as its x (and only there), r read
 * between the join and the product or by the product itself (the fused node makes r at the
 * product's place), the join's inputs written between the two, r or the product stored in
 * place over x or res (every block reads those while block 0 writes r and every block its
 * product rows), and buckets of more than `max_tokens` rows.
 * Only cuda implements the op: the manifest says `backends: [cuda]`. */
#include <stdio.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fuse.norm-linear"
#define OP_NAME "fuse.norm_linear"
#define SWIGLU_OP "fuse.linear_swiglu"

typedef struct nl_state {
    const weft_host_services *host;
    uint32_t op, swiglu; /* the fused op's id; fuse.linear_swiglu's */
    int64_t max_tokens, products, down;
    uint32_t fused; /* joins rewritten over the instance's life (tests read it) */
    uint32_t downs; /* of those, with the down projection taken in (option down) */
} nl_state;

static weft_status nl_ops(nl_state *s, const weft_graph_service *gs, weft_error *err) {
    if (!s->op && (s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE)
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    if (!s->swiglu && (s->swiglu = gs->op_register(SWIGLU_OP, err)) == WEFT_OP_NONE)
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    return WEFT_OK;
}

static weft_status nl_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    nl_state *s = host && host->alloc ? host->alloc(sizeof(*s)) : NULL;
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    memset(s, 0, sizeof(*s));
    s->host = host;
    /* the loader checks the manifest's range before create; a host that calls create itself
     * (tests, another runtime) gets the same refusal here */
    s->max_tokens = weft_sdk_option_int(opts, "max_tokens", 1);
    s->products = weft_sdk_option_int(opts, "products", 2);
    s->down = weft_sdk_option_int(opts, "down", 0);
    const struct {
        const char *key;
        int64_t v, lo, hi;
    } range[] = {{"max_tokens", s->max_tokens, 1, 8},
                 {"products", s->products, 1, 3},
                 {"down", s->down, 0, 1}};
    for (size_t k = 0; k < sizeof(range) / sizeof(range[0]); k++)
        if (range[k].v < range[k].lo || range[k].v > range[k].hi) {
            host->free(s);
            return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                                  "option %s: expected %lld..%lld, found %lld", range[k].key,
                                  (long long)range[k].lo, (long long)range[k].hi,
                                  (long long)range[k].v);
        }
    const weft_graph_service *gs =
        host->get_service ? host->get_service(host, WEFT_SERVICE_GRAPH, 1) : NULL;
    weft_status rc = gs ? nl_ops(s, gs, err) : WEFT_OK;
    if (rc) {
        host->free(s);
        return rc;
    }
    *st = s;
    return WEFT_OK;
}

static void nl_destroy(void *st) {
    nl_state *s = st;
    if (s) s->host->free(s);
}

/* A residual join this pass can take: x, res and the norm weight in, y and r out, all valid,
 * y and r new tensors (not written in place over an input), x, res, y and r of one dtype. */
static int join(const weft_graph *g, const weft_node *a) {
    if (a->op != WEFT_OP_ADD_RMSNORM || a->n_in != 3 || a->n_out != 2) return 0;
    for (uint32_t k = 0; k < 3; k++)
        if (!weft_sdk_tensor_valid(g, a->in[k])) return 0;
    uint32_t y = a->out[0], r = a->out[1];
    if (!weft_sdk_tensor_valid(g, y) || !weft_sdk_tensor_valid(g, r) || y == r ||
        weft_sdk_node_reads(a, y) || weft_sdk_node_reads(a, r))
        return 0;
    uint32_t dt = g->tensors[a->in[0]].dtype;
    return g->tensors[a->in[1]].dtype == dt && g->tensors[y].dtype == dt &&
           g->tensors[r].dtype == dt;
}

/* Whether node p is a product taking y as its x and nowhere else: a LINEAR (x, w [, b]) or a
 * fuse.linear_swiglu (x, w_gate [, w_up]), one output, of a kind the option products names
 * (1 LINEAR, 2 fuse.linear_swiglu). */
static int product(const nl_state *s, const weft_node *p, uint32_t y) {
    if (!(p->op == WEFT_OP_LINEAR && (s->products & 1)) &&
        !(p->op == s->swiglu && (s->products & 2)))
        return 0;
    if (p->n_out != 1 || p->n_in < 2 || p->n_in > 3 || p->in[0] != y || p->out[0] == y) return 0;
    for (uint32_t k = 1; k < p->n_in; k++)
        if (p->in[k] == y) return 0;
    return 1;
}

/* Whether the product or a node strictly between indexes ai and pi reads r (made at pi now),
 * a node between writes one of the join's inputs (read at pi now), or the product writes over
 * x or res (which the fused kernel's blocks read while others store their rows). */
static int moved_past(const weft_graph *g, uint32_t ai, uint32_t pi) {
    const weft_node *a = &g->nodes[ai], *p = &g->nodes[pi];
    if (weft_sdk_node_reads(p, a->out[1]) || weft_sdk_node_writes(p, a->in[0]) ||
        weft_sdk_node_writes(p, a->in[1]))
        return 1;
    for (uint32_t i = ai + 1; i < pi; i++) {
        const weft_node *n = &g->nodes[i];
        if (weft_sdk_node_reads(n, a->out[1])) return 1;
        for (uint32_t k = 0; k < 3; k++)
            if (weft_sdk_node_writes(n, a->in[k])) return 1;
    }
    return 0;
}

/* Option down: whether node di (right after the fused product pi, a fuse.linear_swiglu) is a
 * down projection the node can take in as well: a LINEAR (h, w), no bias, h = the product's
 * output read by it alone and not a graph output, its output a new tensor that is none of the
 * join's tensors (the 6-input form writes it after every block's gate|up, README.md). */
static int down_of(const weft_graph *g, const weft_graph_service *gs, const weft_node *a,
                   uint32_t pi, uint32_t di) {
    const weft_node *p = &g->nodes[pi], *d = &g->nodes[di];
    uint32_t h = p->out[0];
    if (!weft_sdk_tensor_valid(g, h) || g->tensors[h].kind == WEFT_TENSOR_OUTPUT ||
        weft_sdk_only_reader(g, gs, h, pi) != (int32_t)di)
        return 0;
    if (d->op != WEFT_OP_LINEAR || d->n_in != 2 || d->n_out != 1 || d->in[0] != h ||
        d->in[1] == h || !weft_sdk_tensor_valid(g, d->in[1]) ||
        !weft_sdk_tensor_valid(g, d->out[0]) || weft_sdk_node_writes(a, d->in[1]))
        return 0;
    const weft_tensor *wd = &g->tensors[d->in[1]], *x = &g->tensors[a->in[0]];
    if (wd->rank != 2 || x->rank < 1 || wd->shape[0] != x->shape[x->rank - 1]) return 0;
    uint32_t o = d->out[0];
    return o != h && !weft_sdk_node_reads(a, o) && !weft_sdk_node_writes(a, o) &&
           !weft_sdk_node_reads(p, o) && g->tensors[o].dtype == g->tensors[h].dtype;
}

static weft_status nl_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                          weft_graph *g, weft_error *err) {
    nl_state *s = st;
    (void)cfg;
    if (!s || !gs || !g || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: incomplete graph or service");
    weft_status rc = nl_ops(s, gs, err);
    if (rc) return rc;
    /* the kernel is the 1-row looped GEMV; larger buckets keep the separate norm and GEMM,
     * which the fused node would only run in sequence anyway */
    if ((int64_t)g->bucket.max_tokens > s->max_tokens) return WEFT_OK;
    uint32_t fused = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const weft_node *a = &g->nodes[i];
        if (!join(g, a)) continue;
        uint32_t y = a->out[0];
        /* y is written only by the unfused form of the node: nothing else may read it */
        if (g->tensors[y].kind == WEFT_TENSOR_OUTPUT) continue;
        int32_t pi = weft_sdk_only_reader(g, gs, y, i);
        if (pi < 0 || !product(s, &g->nodes[pi], y) || moved_past(g, i, (uint32_t)pi)) continue;
        const weft_node *p = &g->nodes[pi];
        weft_node f;
        memset(&f, 0, sizeof(f));
        f.op = s->op;
        f.layer = p->layer; /* the product's layer: its weights dominate the node's time */
        f.n_in = 5;
        f.in[0] = a->in[0];
        f.in[1] = a->in[1];
        f.in[2] = a->in[2];
        f.in[3] = p->in[1];
        f.in[4] = p->n_in == 3 ? p->in[2] : WEFT_TENSOR_NONE;
        f.n_out = 3;
        f.out[0] = p->out[0];
        f.out[1] = a->out[1];
        f.out[2] = y;
        f.p.f[0] = a->p.f[0];
        f.p.i[0] = p->op == s->swiglu;
        f.p.i[1] = p->op == s->swiglu ? p->p.i[0] : 0; /* fuse.linear_swiglu's merged flag */
        /* "layers.3.mlp.gate_up" -> "norm+layers.3.mlp.gate_up" */
        snprintf(f.name, sizeof(f.name), "norm+%.42s", p->name);
        /* option down: the down projection right after gate|up goes in too (the 6-input form:
         * in[5] its weight, out[0] its product, out[3] the gate|up activation h) */
        int with_down = s->down && p->op == s->swiglu && (uint32_t)pi + 1 < g->n_nodes &&
                        down_of(g, gs, a, (uint32_t)pi, (uint32_t)pi + 1);
        if (with_down) {
            const weft_node *d = &g->nodes[pi + 1];
            f.n_in = 6;
            f.in[5] = d->in[1];
            f.n_out = 4;
            f.out[0] = d->out[0];
            f.out[3] = p->out[0];
            f.p.i[2] = 1;
            snprintf(f.name, sizeof(f.name), "mlp+%.43s", p->name);
        }
        /* the fused node takes the product's place: the join's inputs hold there what they held
         * at the join (moved_past), and nothing before it reads r; then the product (now at
         * pi + 1) and the join go */
        if (gs->node_add(g, &f, (uint32_t)pi, err) < 0 ||
            (with_down && gs->node_remove(g, (uint32_t)pi + 2, err) < 0) ||
            gs->node_remove(g, (uint32_t)pi + 1, err) < 0 || gs->node_remove(g, i, err) < 0)
            return err && err->code ? err->code
                                    : weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                                                     "run: could not rewrite node %u", i);
        fused++;
        s->downs += (uint32_t)with_down;
        i--; /* the node after the join moved into i */
    }
    s->fused += fused;
    if (fused && s->host->log)
        s->host->log(WEFT_LOG_INFO, NAME, "fused %u add_rmsnorm + product pair(s)",
                     (unsigned)fused);
    return WEFT_OK;
}

static const weft_pass_vtable nl_pass = {
    .size = sizeof(weft_pass_vtable),
    .run = nl_run,
    .derive_weight = NULL,
};

static const weft_plugin_descriptor nl_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS,
    .create = nl_create,
    .destroy = nl_destroy,
    .pass = &nl_pass,
};

WEFT_SDK_ENTRY(nl_desc, 1, 1)

/* For tests: how many joins the instance fused. */
WEFT_EXPORT uint32_t fuse_norm_linear_fused(const void *st) {
    return st ? ((const nl_state *)st)->fused : 0;
}

/* For tests: how many of those took their down projection in (option down). */
WEFT_EXPORT uint32_t fuse_norm_linear_downs(const void *st) {
    return st ? ((const nl_state *)st)->downs : 0;
}
