/* fuse.swiglu: a graph pass that rewrites the gate and up projections of a SwiGLU MLP and the
 * SWIGLU node that combines them,
 *     g = linear(x, w_gate); u = linear(x, w_up); y = swiglu(g, u)
 * (or, after fuse.merged-projections, gu = linear(x, w_gate|up); g, u = split(gu);
 *  y = swiglu(g, u)) into one user op "fuse.linear_swiglu" (in: x, w_gate, w_up, or x and the
 * merged weight with p.i[0] = 1; out: y), whose kernel computes both dot products of an output
 * column and writes silu(g) * u directly: two launches fewer per layer and no round trip of g
 * and u through memory.
 *
 * Kernels: the cuda backend implements the op with its GEMV kernel (one reduction order per K
 * for plain and fused products, each product rounded to the activation dtype before the SiLU,
 * as the unfused nodes store them), so on cuda the rewrite is exact. This plugin registers the
 * cpu implementation (opset slot): f32 activations, f32/bf16/f16 weights, output columns split
 * across the host's worker pool. Its sums run in a different order from the cpu backend's
 * LINEAR, so on cpu the fused output differs from the unfused one by f32 rounding.
 *
 * Only buckets of at most `max_tokens` rows are rewritten (default 8: decode and small
 * batches, where the projections are bandwidth-bound GEMVs); prefill keeps the unfused nodes
 * and their GEMM path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "fuse.swiglu"
#define OP_NAME "fuse.linear_swiglu"

typedef struct sw_state {
    const weft_host_services *host;
    const weft_threads_service *threads;
    uint32_t op; /* the fused op's id */
    int64_t max_tokens;
    uint32_t fused;
} sw_state;

static weft_status sw_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    sw_state *s = host && host->alloc ? host->alloc(sizeof(*s)) : NULL;
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    memset(s, 0, sizeof(*s));
    s->host = host;
    s->max_tokens = weft_sdk_option_int(opts, "max_tokens", 8);
    if (s->max_tokens < 1 || s->max_tokens > 8) {
        host->free(s);
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option max_tokens: expected 1..8, found %lld",
                              (long long)weft_sdk_option_int(opts, "max_tokens", 8));
    }
    /* the fused op's id; a host without the graph service (plugins check) gets it later */
    const weft_graph_service *gs =
        host->get_service ? host->get_service(host, WEFT_SERVICE_GRAPH, 1) : NULL;
    if (gs && (s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE) {
        host->free(s);
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    }
    s->threads = host->get_service ? host->get_service(host, WEFT_SERVICE_THREADS, 1) : NULL;
    *st = s;
    return WEFT_OK;
}

static void sw_destroy(void *st) {
    sw_state *s = st;
    if (s) s->host->free(s);
}

/* ---- the pass ---------------------------------------------------------------------------- */
/* Index of the node that produces tensor t, or -1. */
static int32_t producer(const weft_graph *g, uint32_t t) {
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (weft_sdk_node_writes(&g->nodes[i], t)) return (int32_t)i;
    return -1;
}

/* A bias-free LINEAR node. */
static int plain_linear(const weft_graph *g, int32_t i) {
    if (i < 0) return 0;
    const weft_node *n = &g->nodes[i];
    return n->op == WEFT_OP_LINEAR && n->n_out == 1 &&
           (n->n_in == 2 || (n->n_in == 3 && n->in[2] == WEFT_TENSOR_NONE)) &&
           weft_sdk_tensor_valid(g, n->in[0]) && weft_sdk_tensor_valid(g, n->in[1]) &&
           g->tensors[n->in[1]].rank == 2;
}

/* Inserts f before node `at`, then removes the nodes listed in idx (indices before the
 * insertion; every one <= at). */
static weft_status replace(const weft_graph_service *gs, weft_graph *g, const weft_node *f,
                           uint32_t at, uint32_t *idx, uint32_t n, weft_error *err) {
    if (gs->node_add(g, f, at, err) < 0) return WEFT_ERR_INTERNAL;
    for (uint32_t i = 0; i < n; i++) /* largest first, so the others keep their index */
        for (uint32_t j = i + 1; j < n; j++)
            if (idx[j] > idx[i]) {
                uint32_t t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
            }
    for (uint32_t i = 0; i < n; i++)
        if (gs->node_remove(g, idx[i] >= at ? idx[i] + 1 : idx[i], err) < 0)
            return WEFT_ERR_INTERNAL;
    return WEFT_OK;
}

static weft_status sw_run(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                          weft_graph *g, weft_error *err) {
    sw_state *s = st;
    (void)cfg;
    if (!s || !gs || !g || (g->n_nodes && !g->nodes) || (g->n_tensors && !g->tensors))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: incomplete graph or service");
    if (!s->op && (s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE)
        return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    if ((int64_t)g->bucket.max_tokens > s->max_tokens) return WEFT_OK; /* prefill: unfused */
    uint32_t fused = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const weft_node *sw = &g->nodes[i];
        if (sw->op != WEFT_OP_SWIGLU || sw->n_in != 2 || sw->n_out != 1) continue;
        uint32_t gt = sw->in[0], ut = sw->in[1], y = sw->out[0];
        if (!weft_sdk_tensor_valid(g, gt) || !weft_sdk_tensor_valid(g, ut) ||
            !weft_sdk_tensor_valid(g, y) || gs->tensor_uses(g, gt) != 1 ||
            gs->tensor_uses(g, ut) != 1)
            continue;
        int32_t pg = producer(g, gt), pu = producer(g, ut);
        weft_node f;
        memset(&f, 0, sizeof(f));
        f.op = s->op;
        f.layer = sw->layer;
        f.n_out = 1;
        f.out[0] = y;
        uint32_t idx[3], n_idx = 0;
        if (pg >= 0 && pg == pu) { /* merged: split(linear(x, w_gate|up)) */
            const weft_node *sp = &g->nodes[pg];
            if (sp->op != WEFT_OP_SPLIT || sp->n_out != 2 || sp->out[0] != gt || sp->out[1] != ut ||
                sp->p.i[0] != sp->p.i[1] || !weft_sdk_tensor_valid(g, sp->in[0]) ||
                gs->tensor_uses(g, sp->in[0]) != 1)
                continue;
            int32_t pl = producer(g, sp->in[0]);
            if (!plain_linear(g, pl)) continue;
            const weft_node *l = &g->nodes[pl];
            if (g->tensors[l->in[1]].shape[0] != 2 * sp->p.i[0]) continue;
            f.n_in = 2;
            f.in[0] = l->in[0];
            f.in[1] = l->in[1];
            f.p.i[0] = 1;
            idx[n_idx++] = (uint32_t)pl;
            idx[n_idx++] = (uint32_t)pg;
        } else {
            if (!plain_linear(g, pg) || !plain_linear(g, pu)) continue;
            const weft_node *lg = &g->nodes[pg], *lu = &g->nodes[pu];
            const weft_tensor *wg = &g->tensors[lg->in[1]], *wu = &g->tensors[lu->in[1]];
            if (lg->in[0] != lu->in[0] || wg->dtype != wu->dtype || wg->shape[0] != wu->shape[0] ||
                wg->shape[1] != wu->shape[1] || strcmp(wg->layout, wu->layout))
                continue;
            f.n_in = 3;
            f.in[0] = lg->in[0];
            f.in[1] = lg->in[1];
            f.in[2] = lu->in[1];
            idx[n_idx++] = (uint32_t)pg;
            idx[n_idx++] = (uint32_t)pu;
        }
        idx[n_idx++] = i;
        snprintf(f.name, sizeof(f.name), "%.40s_fused", sw->name);
        if (replace(gs, g, &f, i, idx, n_idx, err) != WEFT_OK)
            return err && err->code ? err->code
                                    : weft_sdk_error(err, WEFT_ERR_INTERNAL, NAME,
                                                     "run: could not rewrite node %u", i);
        fused++;
        i -= n_idx - 1; /* the fused node now sits where the first removed node was */
    }
    s->fused += fused;
    if (fused && s->host->log)
        s->host->log(WEFT_LOG_INFO, NAME, "fused %u gate/up/swiglu group(s)", (unsigned)fused);
    return WEFT_OK;
}

/* ---- the cpu implementation -------------------------------------------------------------- */
static float ld_w(const void *w, int64_t i, uint32_t dt) {
    if (dt == WEFT_DTYPE_F32) return ((const float *)w)[i];
    uint16_t h = ((const uint16_t *)w)[i];
    if (dt == WEFT_DTYPE_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    /* f16 */
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        float f = ldexpf((float)m, -24);
        return sign ? -f : f;
    }
    if (e == 31)
        u = sign | 0x7f800000u | (m << 13);
    else
        u = sign | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct sw_job {
    const float *x;
    const void *wg, *wu;
    uint32_t dt;
    float *y;
    int64_t T, F, K;
} sw_job;

/* dot of x (K) and weight row w (K) in eight partial sums, so the compiler can vectorise it */
static float dot(const float *x, const void *w, int64_t row, int64_t K, uint32_t dt) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t k = 0, base = row * K;
    if (dt == WEFT_DTYPE_F32) {
        const float *wf = (const float *)w + base;
        for (; k + 8 <= K; k += 8)
            for (int e = 0; e < 8; e++)
                acc[e] += x[k + e] * wf[k + e];
    } else {
        for (; k + 8 <= K; k += 8)
            for (int e = 0; e < 8; e++)
                acc[e] += x[k + e] * ld_w(w, base + k + e, dt);
    }
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; k < K; k++)
        s += x[k] * ld_w(w, base + k, dt);
    return s;
}

static void sw_task(void *arg, uint32_t i, uint32_t n) {
    const sw_job *j = arg;
    int64_t n0 = j->F * i / n, n1 = j->F * (i + 1) / n;
    for (int64_t t = 0; t < j->T; t++)
        for (int64_t c = n0; c < n1; c++) {
            const float *x = j->x + t * j->K;
            float g = dot(x, j->wg, c, j->K, j->dt), u = dot(x, j->wu, c, j->K, j->dt);
            j->y[t * j->F + c] = g / (1.0f + expf(-g)) * u;
        }
}

static int64_t cols_of(const weft_tensor *t) {
    int64_t c = 1;
    for (uint32_t d = 1; d < t->rank && d < WEFT_MAX_DIMS; d++)
        c *= t->shape[d];
    return t->rank >= 1 ? c : 0;
}

static int32_t cpu_accepts(void *st, const weft_graph *g, const weft_node *n) {
    (void)st;
    int merged = n->p.i[0] == 1;
    uint32_t need = merged ? 2 : 3;
    if (n->n_in < need || n->n_out != 1 || !weft_sdk_tensor_valid(g, n->out[0])) return 0;
    for (uint32_t i = 0; i < need; i++)
        if (!weft_sdk_tensor_valid(g, n->in[i])) return 0;
    const weft_tensor *x = &g->tensors[n->in[0]], *w = &g->tensors[n->in[1]],
                      *y = &g->tensors[n->out[0]];
    uint32_t dt = w->dtype;
    if (x->dtype != WEFT_DTYPE_F32 || y->dtype != WEFT_DTYPE_F32 || w->rank != 2 || w->layout[0] ||
        (dt != WEFT_DTYPE_F32 && dt != WEFT_DTYPE_BF16 && dt != WEFT_DTYPE_F16))
        return 0;
    int64_t F = cols_of(y), K = w->shape[1];
    if (cols_of(x) != K || w->shape[0] != (merged ? 2 * F : F)) return 0;
    if (!merged) {
        const weft_tensor *u = &g->tensors[n->in[2]];
        if (u->dtype != dt || u->rank != 2 || u->shape[0] != F || u->shape[1] != K || u->layout[0])
            return 0;
    }
    return 1;
}

static weft_status cpu_run(void *st, const weft_exec_ctx *c, const weft_node *n, weft_error *err) {
    sw_state *s = st;
    if (!c || !c->graph || !c->data || !n || !cpu_accepts(st, c->graph, n))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "%s: node %s does not fit the cpu "
                              "kernel (f32 activations, dense f32/bf16/f16 weights)",
                              OP_NAME, n ? n->name : "?");
    const weft_graph *g = c->graph;
    const weft_tensor *w = &g->tensors[n->in[1]], *y = &g->tensors[n->out[0]];
    int merged = n->p.i[0] == 1;
    sw_job j = {.x = c->data[n->in[0]].ptr,
                .wg = c->data[n->in[1]].ptr,
                .dt = w->dtype,
                .y = c->data[n->out[0]].ptr,
                .T = c->n_tokens,
                .F = cols_of(y),
                .K = w->shape[1]};
    size_t es = w->dtype == WEFT_DTYPE_F32 ? 4 : 2;
    j.wu = merged ? (const char *)j.wg + (size_t)j.F * j.K * es : c->data[n->in[2]].ptr;
    if (j.T > y->shape[0] || !j.x || !j.wg || !j.wu || !j.y ||
        c->data[n->out[0]].bytes < (uint64_t)(j.T * j.F * 4) ||
        c->data[n->in[0]].bytes < (uint64_t)(j.T * j.K * 4) ||
        c->data[n->in[1]].bytes < (uint64_t)((merged ? 2 : 1) * j.F * j.K * (int64_t)es))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "%s %s: buffers smaller than the "
                              "shapes (T=%lld F=%lld K=%lld)",
                              OP_NAME, n->name, (long long)j.T, (long long)j.F, (long long)j.K);
    uint32_t tasks = 1;
    if (s->threads && s->threads->count && j.F * j.K * j.T >= 65536) {
        tasks = s->threads->count(s->threads->self) * 4;
        if (tasks > (uint32_t)j.F) tasks = (uint32_t)j.F;
        if (tasks < 1) tasks = 1;
    }
    if (tasks > 1 && s->threads->parallel_for)
        s->threads->parallel_for(s->threads->self, sw_task, &j, tasks);
    else
        sw_task(&j, 0, 1);
    return WEFT_OK;
}

static weft_status sw_register_ops(void *st, const char *backend, const weft_ops_service *ops,
                                   weft_error *err) {
    sw_state *s = st;
    if (!s || !backend || !ops || !ops->add)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "register_ops: missing argument");
    if (strcmp(backend, "cpu")) return WEFT_OK; /* the cuda backend implements the op itself */
    if (!s->op) {
        const weft_graph_service *gs =
            s->host->get_service ? s->host->get_service(s->host, WEFT_SERVICE_GRAPH, 1) : NULL;
        if (!gs)
            return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                                  "register_ops: the host has no graph service to name %s",
                                  OP_NAME);
        if ((s->op = gs->op_register(OP_NAME, err)) == WEFT_OP_NONE)
            return err && err->code ? err->code : WEFT_ERR_INTERNAL;
    }
    weft_op_impl impl;
    memset(&impl, 0, sizeof(impl));
    impl.size = sizeof(impl);
    impl.op = s->op;
    snprintf(impl.backend, sizeof(impl.backend), "cpu");
    impl.run = cpu_run;
    impl.state = s;
    impl.accepts = cpu_accepts;
    return ops->add(ops->self, &impl, err);
}

static const weft_pass_vtable sw_pass = {
    .size = sizeof(weft_pass_vtable),
    .run = sw_run,
    .derive_weight = NULL,
};

static const weft_opset_vtable sw_opset = {
    .size = sizeof(weft_opset_vtable),
    .register_ops = sw_register_ops,
};

static const weft_plugin_descriptor sw_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.1.0",
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_PASS | WEFT_SLOT_OPS,
    .create = sw_create,
    .destroy = sw_destroy,
    .pass = &sw_pass,
    .opset = &sw_opset,
};

WEFT_SDK_ENTRY(sw_desc, 1, 1)

WEFT_EXPORT uint32_t fuse_swiglu_fused(const void *st) {
    return st ? ((const sw_state *)st)->fused : 0;
}
