/* exec.l2-prefetch: a graph pass that gives every transformer layer of a decode graph one
 * "exec.l2_prefetch" node, placed right after the layer's first product (the q|k|v projection).
 * The node lists the weights of the products that follow it in execution order (the layer's
 * o, gate|up and down projections, then the next layer's, the LM head last), and its kernel pulls
 * the first `budget_mb` MiB of them into L2. It runs while attention, the norms and the launch
 * boundaries leave DRAM idle, so the products after it read part of their weights from L2.
 *
 * Nothing is computed: the node's output is an unused one-element tensor, and the cuda backend's
 * kernel (core.cu weft_l2_prefetch) only issues bulk L2 prefetches of weights, which no kernel
 * writes. Results are the same bits with and without the pass.
 *
 * A "product" is any node except EMBED that reads a rank-2 weight of at least 1 MiB, so fused
 * product ops (fuse.linear_swiglu, fuse.norm_linear, ...) count without this pass knowing their
 * names. Only buckets of at most `max_tokens` rows (decode) are rewritten. */
#include <stdio.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "exec.l2-prefetch"
#define OP_NAME "exec.l2_prefetch"
#define MIN_PRODUCT_BYTES (1ull << 20)
#define MAX_RANGES 8 /* the op's inputs (WEFT_NODE_MAX_IN) */

typedef struct pf_state {
    const weft_host_services *host;
    uint32_t op;
    int64_t budget_mb, max_tokens, bulk;
    uint32_t inserted; /* prefetch nodes placed, over every graph this instance rewrote */
} pf_state;

static weft_status pf_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    pf_state *s = host && host->alloc ? host->alloc(sizeof(*s)) : NULL;
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    memset(s, 0, sizeof(*s));
    s->host = host;
    s->budget_mb = weft_sdk_option_int(opts, "budget_mb", 24);
    s->max_tokens = weft_sdk_option_int(opts, "max_tokens", 8);
    s->bulk = weft_sdk_option_bool(opts, "bulk", 0);
    if (s->budget_mb < 1 || s->budget_mb > 1024 || s->max_tokens < 1 || s->max_tokens > 64) {
        int64_t b = s->budget_mb, t = s->max_tokens;
        host->free(s);
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              b < 1 || b > 1024 ? "option budget_mb: expected 1..1024, found %lld"
                                                : "option max_tokens: expected 1..64, found %lld",
                              (long long)(b < 1 || b > 1024 ? b : t));
    }
    *st = s;
    return WEFT_OK;
}

static void pf_destroy(void *st) {
    pf_state *s = st;
    if (s) s->host->free(s);
}

static uint64_t tensor_bytes(const weft_tensor *t) {
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->rank && i < WEFT_MAX_DIMS; i++)
        n *= t->shape[i] > 0 ? (uint64_t)t->shape[i] : 0;
    uint32_t d = t->dtype;
    uint64_t es = d == WEFT_DTYPE_F32 || d == WEFT_DTYPE_I32                           ? 4
                  : d == WEFT_DTYPE_F16 || d == WEFT_DTYPE_BF16 || d == WEFT_DTYPE_I16 ? 2
                                                                                       : 1;
    return n * es; /* block formats: a lower bound, which is all a size threshold needs */
}

/* The large weight a product node reads (its first rank-2 weight input of at least 1 MiB), or
 * WEFT_TENSOR_NONE when the node is not a product. */
static uint32_t product_weight(const weft_graph *g, const weft_node *n) {
    if (n->op == WEFT_OP_EMBED) return WEFT_TENSOR_NONE;
    for (uint32_t i = 0; i < n->n_in && i < WEFT_NODE_MAX_IN; i++) {
        uint32_t t = n->in[i];
        if (t >= g->n_tensors) continue;
        const weft_tensor *w = &g->tensors[t];
        if (w->kind == WEFT_TENSOR_WEIGHT && w->rank == 2 && tensor_bytes(w) >= MIN_PRODUCT_BYTES)
            return t;
    }
    return WEFT_TENSOR_NONE;
}

static weft_status pf_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                          weft_graph *g, weft_error *err) {
    pf_state *s = st;
    (void)cfg;
    if (!s || !gs || !g || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: incomplete graph or service");
    if ((int64_t)g->bucket.max_tokens > s->max_tokens) return WEFT_OK; /* prefill: unchanged */
    if (!s->op && (s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE)
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    const uint64_t budget = (uint64_t)s->budget_mb << 20;
    uint32_t placed = 0;
    /* Walk the layers from the last so that inserting a node leaves the earlier indices valid.
     * For each layer the anchor is its first product; the node goes right after it. */
    int32_t last_layer = -1;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].layer > last_layer) last_layer = g->nodes[i].layer;
    for (int32_t layer = last_layer; layer >= 0; layer--) {
        int64_t anchor = -1;
        for (uint32_t i = 0; i < g->n_nodes && anchor < 0; i++)
            if (g->nodes[i].layer == layer && product_weight(g, &g->nodes[i]) != WEFT_TENSOR_NONE)
                anchor = i;
        if (anchor < 0) continue;
        weft_node f;
        memset(&f, 0, sizeof(f));
        f.op = s->op;
        f.layer = layer;
        uint64_t listed = 0;
        for (uint32_t i = (uint32_t)anchor + 1;
             i < g->n_nodes && f.n_in < MAX_RANGES && listed < budget; i++) {
            uint32_t w = product_weight(g, &g->nodes[i]);
            if (w == WEFT_TENSOR_NONE) continue;
            int seen = 0; /* a tied head reads the embedding table another node may list */
            for (uint32_t k = 0; k < f.n_in; k++)
                seen |= f.in[k] == w;
            if (seen) continue;
            f.in[f.n_in++] = w;
            listed += tensor_bytes(&g->tensors[w]);
        }
        if (!f.n_in) continue;
        f.p.i[0] = (int64_t)budget;
        f.p.i[1] = s->bulk;
        char name[WEFT_NAME_MAX];
        snprintf(name, sizeof(name), "layers.%d.l2_prefetch", (int)layer);
        int64_t shape[1] = {1};
        uint32_t out =
            gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, WEFT_DTYPE_I32, 1, shape, name, err);
        if (out == WEFT_TENSOR_NONE) return err && err->code ? err->code : WEFT_ERR_INTERNAL;
        f.n_out = 1;
        f.out[0] = out;
        snprintf(f.name, sizeof(f.name), "layers.%d.l2_prefetch", (int)layer);
        if (gs->node_add(g, &f, (uint32_t)anchor + 1, err) < 0)
            return err && err->code ? err->code
                                    : weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                                                     "run: could not insert the prefetch node of "
                                                     "layer %d",
                                                     (int)layer);
        placed++;
    }
    s->inserted += placed;
    if (placed && s->host->log)
        s->host->log(WEFT_LOG_INFO, NAME, "%u prefetch node(s), up to %lld MiB each",
                     (unsigned)placed, (long long)s->budget_mb);
    return WEFT_OK;
}

static const weft_pass_vtable pf_pass = {
    .size = sizeof(weft_pass_vtable),
    .run = pf_run,
    .derive_weight = NULL,
};

static const weft_plugin_descriptor pf_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS,
    .create = pf_create,
    .destroy = pf_destroy,
    .pass = &pf_pass,
};

WEFT_SDK_ENTRY(pf_desc, 1, 1)

/* Prefetch nodes this instance placed (tests). */
WEFT_EXPORT uint32_t exec_l2_prefetch_inserted(const void *st) {
    return st ? ((const pf_state *)st)->inserted : 0;
}
