/* fuse.merged-projections: a graph pass that merges the linear projections reading the same
 * input (q, k and v of attention; gate and up of the MLP) into one LINEAR over a weight whose
 * rows are theirs concatenated at load (a derived weight, filled by derive_weight from the
 * checkpoint tensors), followed by one SPLIT back into the original outputs. Biases (Qwen2's
 * q/k/v) are concatenated the same way. A decode step then streams the same bytes in fewer,
 * larger products: 3 + 2 projections per layer become 2 linears and 2 splits, and with
 * fuse.qkv-rope and fuse.swiglu (which absorb the splits) 2 nodes.
 *
 * Exactness: every output row is the same dot product as before. The cuda backend's GEMV picks
 * its reduction order from K alone, and the cpu backend's GEMV accumulates each row the same
 * way whatever the row count, so decode is bit-identical. Larger buckets use cuBLASLt (cuda),
 * whose kernel choice may change with N; `max_tokens` (default 0 = every bucket) limits the
 * rewrite to small buckets if that matters (at the cost of keeping both weight copies).
 *
 * Only dense weights bound to checkpoint tensors of one dtype are merged (a weight another pass
 * already derived keeps its own node). At most four projections are merged (SPLIT's outputs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fuse.merged-projections"
#define MAX_PARTS 4

typedef struct merged_weight {
    char name[WEFT_NAME_MAX];
    uint32_t n;
    char source[MAX_PARTS][WEFT_NAME_MAX];
} merged_weight;

typedef struct mp_state {
    const weft_host_services *host;
    int64_t max_tokens;
    merged_weight *w; /* every weight the pass derived, by name */
    uint32_t n_w, cap_w;
    uint32_t merged; /* linear nodes removed (counted over the instance's life) */
} mp_state;

static weft_status mp_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    mp_state *s = host && host->alloc ? host->alloc(sizeof(*s)) : NULL;
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    memset(s, 0, sizeof(*s));
    s->host = host;
    s->max_tokens = weft_sdk_option_int(opts, "max_tokens", 0);
    if (s->max_tokens < 0 || s->max_tokens > 65536) {
        host->free(s);
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option max_tokens: expected 0..65536, found %lld",
                              (long long)weft_sdk_option_int(opts, "max_tokens", 0));
    }
    *st = s;
    return WEFT_OK;
}

static void mp_destroy(void *st) {
    mp_state *s = st;
    if (!s) return;
    free(s->w);
    s->host->free(s);
}

/* A LINEAR node whose weight (and bias, if any) are dense checkpoint tensors. */
static int mergeable(const weft_graph *g, const weft_node *n) {
    if (n->op != WEFT_OP_LINEAR || n->n_out != 1 || n->n_in < 2 || n->n_in > 3) return 0;
    if (!weft_sdk_tensor_valid(g, n->in[0]) || !weft_sdk_tensor_valid(g, n->in[1]) ||
        !weft_sdk_tensor_valid(g, n->out[0]))
        return 0;
    const weft_tensor *w = &g->tensors[n->in[1]];
    if (w->kind != WEFT_TENSOR_WEIGHT || w->rank != 2 || !w->source[0] || w->deriver[0] ||
        w->layout[0] || w->reserved[0] || g->tensors[n->out[0]].kind == WEFT_TENSOR_OUTPUT)
        return 0;
    if (n->n_in == 3 && n->in[2] != WEFT_TENSOR_NONE) {
        if (!weft_sdk_tensor_valid(g, n->in[2])) return 0;
        const weft_tensor *b = &g->tensors[n->in[2]];
        if (b->kind != WEFT_TENSOR_WEIGHT || !b->source[0] || b->deriver[0] || b->layout[0] ||
            b->dtype != w->dtype)
            return 0;
    }
    return 1;
}

static int has_bias(const weft_node *n) {
    return n->n_in == 3 && n->in[2] != WEFT_TENSOR_NONE;
}

static weft_status remember(mp_state *s, const char *name, const weft_graph *g,
                            const uint32_t *parts, uint32_t n, weft_error *err) {
    for (uint32_t i = 0; i < s->n_w; i++)
        if (!strcmp(s->w[i].name, name)) return WEFT_OK; /* another bucket's graph */
    if (s->n_w == s->cap_w) {
        uint32_t cap = s->cap_w ? s->cap_w * 2 : 64;
        merged_weight *nw = realloc(s->w, cap * sizeof(*nw));
        if (!nw) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
        s->w = nw;
        s->cap_w = cap;
    }
    merged_weight *m = &s->w[s->n_w++];
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name);
    m->n = n;
    for (uint32_t i = 0; i < n; i++)
        snprintf(m->source[i], sizeof(m->source[i]), "%s", g->tensors[parts[i]].source);
    return WEFT_OK;
}

/* "layers.3.attn.q", "layers.3.attn.k", "layers.3.attn.v" -> "layers.3.attn.q_k_v"; names
 * without a shared dotted prefix are joined whole. suffix: "" or "_bias". */
static void merged_name(const weft_graph *g, const uint32_t *w, uint32_t n, const char *suffix,
                        char *out, size_t cap) {
    const char *first = g->tensors[w[0]].name, *dot = strrchr(first, '.');
    size_t pre = dot ? (size_t)(dot - first) + 1 : 0;
    for (uint32_t i = 1; i < n && pre; i++)
        if (strncmp(g->tensors[w[i]].name, first, pre)) pre = 0;
    size_t len = (size_t)snprintf(out, cap, "%.*s", (int)pre, first);
    for (uint32_t i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "_" : "",
                                g->tensors[w[i]].name + pre);
    if (len < cap) snprintf(out + len, cap - len, "%s", suffix);
}

static uint32_t derived(mp_state *s, const weft_graph_service *gs, weft_graph *g,
                        const uint32_t *parts, uint32_t n, const char *suffix, weft_error *err) {
    char name[WEFT_NAME_MAX];
    merged_name(g, parts, n, suffix, name, sizeof(name));
    int64_t rows = 0;
    const weft_tensor *t0 = &g->tensors[parts[0]];
    for (uint32_t i = 0; i < n; i++)
        rows += g->tensors[parts[i]].shape[0];
    int64_t shape[2] = {rows, t0->rank == 2 ? t0->shape[1] : 0};
    uint32_t dtype = t0->dtype, rank = t0->rank;
    uint32_t id = gs->tensor_find(g, name);
    if (id == WEFT_TENSOR_NONE) {
        id = gs->tensor_add(g, WEFT_TENSOR_WEIGHT, dtype, rank, shape, name, err);
        if (id == WEFT_TENSOR_NONE) return id;
        snprintf(g->tensors[id].deriver, sizeof(g->tensors[id].deriver), "%s", NAME);
        g->tensors[id].source[0] = 0;
    }
    if (remember(s, name, g, parts, n, err) != WEFT_OK) return WEFT_TENSOR_NONE;
    return id;
}

/* Merges the group of LINEAR nodes at indices idx[0..n) (ascending, same input, same K,
 * dtype and bias presence). */
static weft_status merge(mp_state *s, const weft_graph_service *gs, weft_graph *g,
                         const uint32_t *idx, uint32_t n, weft_error *err) {
    uint32_t w[MAX_PARTS] = {0}, b[MAX_PARTS] = {0}, out[MAX_PARTS] = {0};
    int64_t cols = 0;
    const weft_node *first = &g->nodes[idx[0]];
    int bias = has_bias(first);
    int32_t layer = first->layer;
    uint32_t x = first->in[0];
    char nname[48];
    for (uint32_t i = 0; i < n; i++) {
        const weft_node *l = &g->nodes[idx[i]];
        w[i] = l->in[1];
        b[i] = bias ? l->in[2] : WEFT_TENSOR_NONE;
        out[i] = l->out[0];
        cols += g->tensors[l->out[0]].shape[1];
    }
    uint32_t wm = derived(s, gs, g, w, n, "", err);
    if (wm == WEFT_TENSOR_NONE) return WEFT_ERR_INTERNAL;
    uint32_t bm = WEFT_TENSOR_NONE;
    if (bias && (bm = derived(s, gs, g, b, n, "_bias", err)) == WEFT_TENSOR_NONE)
        return WEFT_ERR_INTERNAL;
    char yname[WEFT_NAME_MAX];
    snprintf(yname, sizeof(yname), "%s.y", g->tensors[wm].name);
    int64_t yshape[2] = {g->tensors[out[0]].shape[0], cols};
    uint32_t y =
        gs->tensor_add(g, WEFT_TENSOR_ACTIVATION, g->tensors[out[0]].dtype, 2, yshape, yname, err);
    if (y == WEFT_TENSOR_NONE) return WEFT_ERR_INTERNAL;
    snprintf(nname, sizeof(nname), "%.47s", g->tensors[wm].name);
    weft_node lin, sp;
    memset(&lin, 0, sizeof(lin));
    lin.op = WEFT_OP_LINEAR;
    lin.layer = layer;
    lin.n_in = bias ? 3 : 2;
    lin.in[0] = x;
    lin.in[1] = wm;
    lin.in[2] = bm;
    lin.n_out = 1;
    lin.out[0] = y;
    snprintf(lin.name, sizeof(lin.name), "%s", nname);
    memset(&sp, 0, sizeof(sp));
    sp.op = WEFT_OP_SPLIT;
    sp.layer = layer;
    sp.n_in = 1;
    sp.in[0] = y;
    sp.n_out = n;
    for (uint32_t i = 0; i < n; i++) {
        sp.out[i] = out[i];
        sp.p.i[i] = g->tensors[out[i]].shape[1];
    }
    snprintf(sp.name, sizeof(sp.name), "%.41s.split", nname);
    uint32_t at = idx[0];
    /* remove the old linears (largest index first), then put linear + split where the first
     * one was: every reader of their outputs comes after it */
    for (uint32_t i = n; i-- > 0;)
        if (gs->node_remove(g, idx[i], err) < 0) return WEFT_ERR_INTERNAL;
    if (gs->node_add(g, &lin, at, err) < 0 || gs->node_add(g, &sp, at + 1, err) < 0)
        return WEFT_ERR_INTERNAL;
    s->merged += n;
    return WEFT_OK;
}

static weft_status mp_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                          weft_graph *g, weft_error *err) {
    mp_state *s = st;
    (void)cfg;
    if (!s || !gs || !g || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: incomplete graph or service");
    if (s->max_tokens && (int64_t)g->bucket.max_tokens > s->max_tokens) return WEFT_OK;
    uint32_t groups = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const weft_node *a = &g->nodes[i];
        if (!mergeable(g, a)) continue;
        const weft_tensor *wa = &g->tensors[a->in[1]];
        uint32_t idx[MAX_PARTS] = {i}, n = 1;
        /* later linears of the same input, weight dtype, K and bias presence, up to the next
         * node that writes that input (none in a step graph, but stay safe) */
        for (uint32_t j = i + 1; j < g->n_nodes && n < MAX_PARTS; j++) {
            const weft_node *b = &g->nodes[j];
            if (weft_sdk_node_writes(b, a->in[0])) break;
            if (!mergeable(g, b) || b->in[0] != a->in[0] || has_bias(b) != has_bias(a)) continue;
            const weft_tensor *wb = &g->tensors[b->in[1]];
            if (wb->dtype != wa->dtype || wb->shape[1] != wa->shape[1] ||
                g->tensors[b->out[0]].dtype != g->tensors[a->out[0]].dtype)
                continue;
            idx[n++] = j;
        }
        if (n < 2) continue;
        weft_status r = merge(s, gs, g, idx, n, err);
        if (r != WEFT_OK)
            return err && err->code ? err->code
                                    : weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                                                     "run: could not merge at node %u", i);
        groups++;
        i++; /* past the split */
    }
    if (groups && s->host->log)
        s->host->log(WEFT_LOG_INFO, NAME, "merged %u projection group(s)", (unsigned)groups);
    return WEFT_OK;
}

/* setup: the merged weight's rows are its parts' rows, in order. */
static weft_status mp_derive(void *st, const weft_graph *g, const weft_tensor *t, void *dst,
                             uint64_t bytes, const weft_weights_service *ws, weft_error *err) {
    mp_state *s = st;
    if (!s || !t || !dst || !ws || !ws->find)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "derive_weight: missing argument");
    (void)g;
    const merged_weight *m = NULL;
    for (uint32_t i = 0; i < s->n_w; i++)
        if (!strcmp(s->w[i].name, t->name)) m = &s->w[i];
    if (!m)
        return weft_sdk_error(err, WEFT_ERR_NOT_FOUND, NAME,
                              "derive_weight: %s is not a weight this pass merged", t->name);
    uint64_t off = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        weft_weight_info info;
        memset(&info, 0, sizeof(info));
        weft_status r = ws->find(ws->self, m->source[i], &info, err);
        if (r != WEFT_OK) return r;
        if (info.dtype != t->dtype || !info.data || info.bytes > bytes - off)
            return weft_sdk_error(err, WEFT_ERR_MISMATCH, NAME,
                                  "derive_weight %s: part %s has dtype %u and %llu bytes; "
                                  "expected dtype %u and at most %llu bytes",
                                  t->name, m->source[i], info.dtype, (unsigned long long)info.bytes,
                                  t->dtype, (unsigned long long)(bytes - off));
        memcpy((char *)dst + off, info.data, info.bytes);
        off += info.bytes;
    }
    if (off != bytes)
        return weft_sdk_error(err, WEFT_ERR_MISMATCH, NAME,
                              "derive_weight %s: parts hold %llu bytes, the tensor %llu", t->name,
                              (unsigned long long)off, (unsigned long long)bytes);
    return WEFT_OK;
}

static const weft_pass_vtable mp_pass = {
    .size = sizeof(weft_pass_vtable),
    .run = mp_run,
    .derive_weight = mp_derive,
};

static const weft_plugin_descriptor mp_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS,
    .create = mp_create,
    .destroy = mp_destroy,
    .pass = &mp_pass,
};

WEFT_SDK_ENTRY(mp_desc, 1, 1)

/* For tests: linear nodes merged away over the instance's life (a group of n counts n). */
WEFT_EXPORT uint32_t fuse_merged_projections_merged(const void *st) {
    return st ? ((const mp_state *)st)->merged : 0;
}
