/* The op-implementation registry (see ops.h). Lookup order for a node: the candidates are the
 * implementations of the node's op on the candidate's backend whose dtype equals the key's or
 * is 0 (any), and whose layout equals the key's or is "" (dense) while the key is dense ("" or
 * the default kv layout "contiguous"). Among them the highest priority wins, then the more
 * specific key (exact dtype, exact layout), then the later registration, so a technique that
 * registers after the backend at equal priority replaces it. An implementation's accepts()
 * hook may still decline a node (shapes, flags); the next candidate is tried. */
#include "graph/ops.h"

#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "util/error.h"

struct weft_op_registry {
    weft_ops_service svc;
    weft_op_impl **items; /* each allocated on its own: resolved pointers stay valid */
    size_t n, cap;
    char provider[48];
};

static int layout_dense(const char *l) {
    return !l || !l[0] || !strcmp(l, "contiguous");
}

static weft_status reg_add(void *self, const weft_op_impl *impl, weft_error *err) {
    weft_op_registry *r = self;
    if (!r || !impl)
        return weft_error_set(err, WEFT_ERR_INVALID, "ops", "add: expected a registry and an impl");
    const char *who = r->provider[0] ? r->provider : "ops";
    if (impl->size < offsetof(weft_op_impl, accepts) + sizeof(impl->accepts))
        return weft_error_set(err, WEFT_ERR_ABI, who,
                              "op implementation struct of %u bytes, expected at least %zu",
                              impl->size, offsetof(weft_op_impl, accepts) + sizeof(impl->accepts));
    if (!impl->run)
        return weft_error_set(err, WEFT_ERR_INVALID, who,
                              "op implementation for op %u has no run function", impl->op);
    if (!weft_op_name(impl->op))
        return weft_error_set(err, WEFT_ERR_INVALID, who,
                              "op implementation for op %u: not a builtin or registered op",
                              impl->op);
    if (!memchr(impl->backend, '\0', sizeof(impl->backend)) || !impl->backend[0] ||
        !memchr(impl->layout, '\0', sizeof(impl->layout)))
        return weft_error_set(err, WEFT_ERR_INVALID, who,
                              "op implementation for %s: backend must be a non-empty string and "
                              "layout a terminated one",
                              weft_op_name(impl->op));
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        weft_op_impl **items = realloc(r->items, cap * sizeof(*items));
        if (!items) return weft_error_set(err, WEFT_ERR_NOMEM, "ops", "out of memory");
        r->items = items;
        r->cap = cap;
    }
    weft_op_impl *copy = calloc(1, sizeof(*copy));
    if (!copy) return weft_error_set(err, WEFT_ERR_NOMEM, "ops", "out of memory");
    /* Copy only what the registering side declared (append-only structs). */
    size_t n = impl->size < sizeof(*copy) ? impl->size : sizeof(*copy);
    memcpy(copy, impl, n);
    copy->size = sizeof(*copy);
    snprintf(copy->provider, sizeof(copy->provider), "%s", r->provider);
    r->items[r->n++] = copy;
    return WEFT_OK;
}

/* Rank of impl for a key: -1 when it does not match, else 2 * exact_dtype + exact_layout. */
static int match_rank(const weft_op_impl *impl, uint32_t op, const char *backend, uint32_t dtype,
                      const char *layout) {
    if (impl->op != op || strcmp(impl->backend, backend)) return -1;
    int rank = 0;
    if (impl->dtype == dtype && dtype != 0)
        rank += 2;
    else if (impl->dtype != 0)
        return -1;
    if (!strcmp(impl->layout, layout ? layout : ""))
        rank += 1;
    else if (impl->layout[0] || !layout_dense(layout))
        return -1;
    return rank;
}

/* Total order of matching candidates: priority, then key rank, then registration index. */
static int order_cmp(int32_t pa, int ra, size_t ia, int32_t pb, int rb, size_t ib) {
    if (pa != pb) return pa < pb ? -1 : 1;
    if (ra != rb) return ra < rb ? -1 : 1;
    if (ia != ib) return ia < ib ? -1 : 1;
    return 0;
}

static const weft_op_impl *reg_find(void *self, uint32_t op, const char *backend, uint32_t dtype,
                                    const char *layout, const weft_graph *g,
                                    const weft_node *node) {
    weft_op_registry *r = self;
    if (!r || !backend) return NULL;
    /* Candidates are tried best first; one whose accepts() declines moves us to the next. */
    int have_bound = 0;
    int32_t bound_p = 0;
    int bound_r = 0;
    size_t bound_i = 0;
    for (;;) {
        const weft_op_impl *pick = NULL;
        int pick_r = -1;
        size_t pick_i = 0;
        for (size_t i = 0; i < r->n; i++) {
            const weft_op_impl *c = r->items[i];
            int rank = match_rank(c, op, backend, dtype, layout);
            if (rank < 0) continue;
            if (have_bound && order_cmp(c->priority, rank, i, bound_p, bound_r, bound_i) >= 0)
                continue;
            if (!pick || order_cmp(c->priority, rank, i, pick->priority, pick_r, pick_i) > 0) {
                pick = c;
                pick_r = rank;
                pick_i = i;
            }
        }
        if (!pick) return NULL;
        if (!pick->accepts || !g || !node || pick->accepts(pick->state, g, node)) return pick;
        have_bound = 1;
        bound_p = pick->priority;
        bound_r = pick_r;
        bound_i = pick_i;
    }
}

weft_op_registry *weft_op_registry_new(void) {
    weft_op_registry *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    r->svc.size = sizeof(r->svc);
    r->svc.version = 1;
    r->svc.self = r;
    r->svc.add = reg_add;
    r->svc.find = reg_find;
    return r;
}

void weft_op_registry_free(weft_op_registry *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++)
        free(r->items[i]);
    free(r->items);
    free(r);
}

const weft_ops_service *weft_op_registry_service(weft_op_registry *r) {
    return r ? &r->svc : NULL;
}

void weft_op_registry_set_provider(weft_op_registry *r, const char *plugin_name) {
    if (r) snprintf(r->provider, sizeof(r->provider), "%s", plugin_name ? plugin_name : "");
}

size_t weft_op_registry_count(const weft_op_registry *r) {
    return r ? r->n : 0;
}

void weft_op_key(const weft_graph *g, const weft_node *n, uint32_t kv_dtype, const char *kv_layout,
                 uint32_t *dtype, const char **layout) {
    uint32_t key = WEFT_TENSOR_NONE;
    *dtype = 0;
    *layout = "";
    if (n->op == WEFT_OP_ATTENTION) {
        *dtype = kv_dtype;
        *layout = kv_layout ? kv_layout : "";
        return;
    }
    if (n->op == WEFT_OP_LINEAR || n->op == WEFT_OP_LM_HEAD || n->op == WEFT_OP_EMBED)
        key = n->n_in > 1 ? n->in[1] : WEFT_TENSOR_NONE;
    else
        key = n->n_in > 0 ? n->in[0] : WEFT_TENSOR_NONE;
    if (key != WEFT_TENSOR_NONE && key < g->n_tensors) {
        *dtype = g->tensors[key].dtype;
        *layout = g->tensors[key].layout;
    }
}

static const char *dtype_label(uint32_t dt) {
    switch (dt) {
    case 0:
        return "any";
    case WEFT_DTYPE_F32:
        return "f32";
    case WEFT_DTYPE_F16:
        return "f16";
    case WEFT_DTYPE_BF16:
        return "bf16";
    case WEFT_DTYPE_I32:
        return "i32";
    case WEFT_DTYPE_I8:
        return "i8";
    case WEFT_DTYPE_F8_E4M3:
        return "f8e4m3";
    case WEFT_DTYPE_Q8_0:
        return "q8_0";
    case WEFT_DTYPE_Q4_K:
        return "q4_k";
    default:
        return "other";
    }
}

weft_status weft_op_registry_resolve(weft_op_registry *r, const weft_graph *g, const char *backend,
                                     uint32_t kv_dtype, const char *kv_layout,
                                     const weft_op_impl **impls, weft_error *err) {
    if (!r || !g || !backend || !impls)
        return weft_error_set(err, WEFT_ERR_INVALID, "ops", "resolve: missing argument");
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const weft_node *n = &g->nodes[i];
        uint32_t dtype;
        const char *layout;
        weft_op_key(g, n, kv_dtype, kv_layout, &dtype, &layout);
        impls[i] = reg_find(r, n->op, backend, dtype, layout, g, n);
        if (!impls[i]) {
            const char *op = weft_op_name(n->op);
            if (dtype == 0 || !strcmp(dtype_label(dtype), "other"))
                return weft_error_set(err, WEFT_ERR_UNSUPPORTED, "ops",
                                      "node %s (%s, %s, dtype %u, layout %s) has no "
                                      "implementation in this candidate",
                                      n->name[0] ? n->name : "(unnamed)", op ? op : "?", backend,
                                      dtype, layout[0] ? layout : "dense");
            return weft_error_set(err, WEFT_ERR_UNSUPPORTED, "ops",
                                  "node %s (%s, %s, %s, layout %s) has no implementation in "
                                  "this candidate",
                                  n->name[0] ? n->name : "(unnamed)", op ? op : "?", backend,
                                  dtype_label(dtype), layout[0] ? layout : "dense");
        }
    }
    return WEFT_OK;
}
