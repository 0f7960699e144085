/* exec.cuda-graph: the executor slot on the cuda backend. A decode step (every row a logit row:
 * n_logits == n_tokens, at most `max_tokens` rows) is captured once per (rows, logit rows) shape
 * after `warmup` eager runs of that shape, and replayed with one cuGraphLaunch from then on:
 * a batch-1 decode step is one graph launch instead of ~15 launches per layer.
 *
 * Why a capture stays valid: every launch shape of the cuda backend's ops depends only on the
 * step's row count and logit-row count, and every per-step value (tokens, positions, kv slots,
 * logit rows) is read on the device from the graph's fixed input buffers, which the engine
 * fills before run (llama option device_inputs: true; prepare refuses a graph whose attention
 * would stage host data instead). Everything else a kernel reads (weights, the activation arena,
 * the kv cache) sits at fixed addresses for the prepared graph's life. A hash of those
 * addresses (every tensor buffer and the contiguous cache's per-layer K/V) is checked on each
 * run: when it changes the captures are dropped and re-made; release() drops them with the
 * graph. Prefill steps (fewer logit rows than rows, whose lm_head gathers rows through host
 * staging) run eagerly, as does any shape whose capture fails (an op that is not capture-safe);
 * the failure is logged once and that shape stays eager.
 *
 * Profiling: eager runs time each node by op class as the default executor does; a replay is
 * one range named "graph" (the whole step on the device). */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "exec.cuda-graph"
#define VERSION "0.1.0"
#define CG_MAX_SHAPES 64

enum { SHAPE_WARM = 0, SHAPE_CAPTURED = 1, SHAPE_EAGER = 2 };

typedef struct cg_shape {
    uint32_t n_tokens, n_logits;
    uint32_t state, runs;
    CUgraphExec exec;
} cg_shape;

typedef struct cg_prepared {
    const weft_graph *g;
    const weft_op_impl *const *impls;
    const char **classes; /* (n_nodes) op class names for profiling */
    uint64_t sig;         /* address hash the captures were made with */
    cg_shape shapes[CG_MAX_SHAPES];
    uint32_t n_shapes;
} cg_prepared;

typedef struct cg_state {
    const weft_host_services *host;
    const weft_profile_service *profile;
    CUcontext ctx;
    uint32_t max_tokens, warmup;
    int enabled;
    uint64_t captures, replays, eager_runs, invalidations;
} cg_state;

static weft_status cg_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    if (!host || !st) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "create: NULL argument");
    int64_t mt = weft_sdk_option_int(opts, "max_tokens", 8);
    int64_t wu = weft_sdk_option_int(opts, "warmup", 1);
    if (mt < 1 || mt > 4096)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option max_tokens: expected 1..4096, found %lld", (long long)mt);
    if (wu < 1 || wu > 100)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option warmup: expected 1..100 eager runs before capture, found "
                              "%lld",
                              (long long)wu);
    cg_state *s = calloc(1, sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    s->host = host;
    s->max_tokens = (uint32_t)mt;
    s->warmup = (uint32_t)wu;
    s->enabled = weft_sdk_option_bool(opts, "enabled", 1);
    s->profile = host->get_service ? host->get_service(host, WEFT_SERVICE_PROFILE, 1) : NULL;
    *st = s;
    return WEFT_OK;
}

static void cg_destroy(void *st) {
    free(st);
}

static weft_status ck(CUresult r, const char *what, weft_error *err) {
    if (r == CUDA_SUCCESS) return WEFT_OK;
    const char *nm = NULL;
    cuGetErrorName(r, &nm);
    return weft_sdk_error(err, r == CUDA_ERROR_OUT_OF_MEMORY ? WEFT_ERR_NOMEM : WEFT_ERR_DEVICE,
                          NAME, "%s failed (%s)", what, nm ? nm : "?");
}

static uint32_t find_tensor(const weft_graph *g, const char *name) {
    for (uint32_t t = 0; t < g->n_tensors; t++)
        if (!strcmp(g->tensors[t].name, name)) return t;
    return WEFT_TENSOR_NONE;
}

static int reads(const weft_graph *g, uint32_t t) {
    for (uint32_t i = 0; i < g->n_nodes; i++)
        for (uint32_t k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == t) return 1;
    return 0;
}

/* setup */
static weft_status cg_prepare(void *st, const weft_graph *g, const weft_op_impl *const *impls,
                              weft_exec_ctx *ctx, void **prepared, weft_error *err) {
    cg_state *s = st;
    if (!s || !g || !impls || !ctx || !prepared)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "prepare: missing argument");
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (!impls[i] || !impls[i]->run)
            return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                                  "prepare: node %s has no implementation", g->nodes[i].name);
    const weft_device_service *dev =
        s->host->get_service ? s->host->get_service(s->host, WEFT_SERVICE_DEVICE, 1) : NULL;
    if (!dev || !dev->backend || strcmp(dev->backend, "cuda") || !dev->native)
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                              "expected the cuda backend, the candidate runs on '%s'",
                              dev && dev->backend ? dev->backend : "?");
    s->ctx = (CUcontext)dev->native(dev->self);
    if (!s->ctx) return weft_sdk_error(err, WEFT_ERR_DEVICE, NAME, "the backend has no context");
    /* Attention without in.kv_slots stages the row -> slot map from the host batch each step: a
     * replay would reuse the map of the captured step. */
    int has_attention = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) has_attention |= g->nodes[i].op == WEFT_OP_ATTENTION;
    uint32_t kv = find_tensor(g, WEFT_INPUT_KV_SLOTS);
    if (s->enabled && has_attention && (kv == WEFT_TENSOR_NONE || !reads(g, kv)))
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                              "the graph's attention does not read %s: captured steps need "
                              "device-side step inputs (llama option device_inputs: true)",
                              WEFT_INPUT_KV_SLOTS);
    cg_prepared *p = calloc(1, sizeof(*p));
    const char **classes = calloc(g->n_nodes ? g->n_nodes : 1, sizeof(*classes));
    if (!p || !classes) {
        free(p);
        free(classes);
        return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    }
    const weft_graph_service *gs =
        s->host->get_service ? s->host->get_service(s->host, WEFT_SERVICE_GRAPH, 1) : NULL;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const char *nm = gs && gs->op_name ? gs->op_name(g->nodes[i].op) : NULL;
        classes[i] = nm ? nm : "user";
    }
    p->g = g;
    p->impls = impls;
    p->classes = classes;
    *prepared = p;
    return WEFT_OK;
}

static void drop_captures(cg_prepared *p) {
    for (uint32_t i = 0; i < p->n_shapes; i++) {
        if (p->shapes[i].exec) cuGraphExecDestroy(p->shapes[i].exec);
        p->shapes[i].exec = NULL;
        if (p->shapes[i].state == SHAPE_CAPTURED) p->shapes[i].state = SHAPE_WARM;
        p->shapes[i].runs = 0;
    }
}

/* FNV-1a over the addresses a capture bakes in. */
static uint64_t fnv(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t address_sig(const cg_prepared *p, const weft_exec_ctx *ctx) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t t = 0; t < p->g->n_tensors; t++) h = fnv(h, (uint64_t)(uintptr_t)ctx->data[t].ptr);
    if (ctx->kv) {
        h = fnv(h, (uint64_t)(uintptr_t)ctx->kv->desc);
        if (!strcmp(ctx->kv->layout, "contiguous") && ctx->kv->desc) {
            const weft_kv_contiguous *kc = ctx->kv->desc;
            for (uint32_t l = 0; l < kc->n_layers && kc->k && kc->v; l++) {
                h = fnv(h, (uint64_t)(uintptr_t)kc->k[l].ptr);
                h = fnv(h, (uint64_t)(uintptr_t)kc->v[l].ptr);
            }
        }
    }
    return h;
}

/* Runs every node through its implementation; per-node profile ranges unless capturing. */
static weft_status run_nodes(cg_state *s, cg_prepared *p, weft_exec_ctx *ctx, int capturing,
                             weft_error *err) {
    const weft_graph *g = p->g;
    const weft_profile_service *prof = !capturing && s->profile && s->profile->enabled &&
                                               s->profile->enabled(s->profile->self)
                                           ? s->profile
                                           : NULL;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const weft_op_impl *impl = p->impls[i];
        if (prof) prof->range_begin(prof->self, p->classes[i], ctx->stream);
        weft_status r = impl->run(impl->state, ctx, &g->nodes[i], err);
        if (prof) prof->range_end(prof->self, p->classes[i], ctx->stream);
        if (r != WEFT_OK) {
            if (err && !err->message[0])
                weft_sdk_error(err, r < 0 ? r : WEFT_ERR_INTERNAL, impl->provider,
                               "op failed without a message");
            if (err) {
                char m[sizeof(err->message)];
                memcpy(m, err->message, sizeof(m));
                snprintf(err->message, sizeof(err->message), "node %s: %s", g->nodes[i].name, m);
            }
            return r < 0 ? r : WEFT_ERR_INTERNAL;
        }
    }
    return WEFT_OK;
}

static cg_shape *shape_for(cg_prepared *p, uint32_t n_tokens, uint32_t n_logits) {
    for (uint32_t i = 0; i < p->n_shapes; i++)
        if (p->shapes[i].n_tokens == n_tokens && p->shapes[i].n_logits == n_logits)
            return &p->shapes[i];
    if (p->n_shapes == CG_MAX_SHAPES) return NULL;
    cg_shape *sh = &p->shapes[p->n_shapes++];
    memset(sh, 0, sizeof(*sh));
    sh->n_tokens = n_tokens;
    sh->n_logits = n_logits;
    return sh;
}

/* Captures the step into sh->exec. On failure the shape turns eager; the step has then not
 * run (capture records, it does not execute), so the caller runs it eagerly. */
static weft_status capture(cg_state *s, cg_prepared *p, cg_shape *sh, weft_exec_ctx *ctx,
                           weft_error *err) {
    CUstream stream = (CUstream)ctx->stream;
    weft_status r = ck(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED),
                       "cuStreamBeginCapture", err);
    if (r) return r;
    weft_error op_err;
    memset(&op_err, 0, sizeof(op_err));
    op_err.size = sizeof(op_err);
    weft_status ops = run_nodes(s, p, ctx, 1, &op_err);
    CUgraph graph = NULL;
    CUresult end = cuStreamEndCapture(stream, &graph);
    CUresult inst = CUDA_ERROR_UNKNOWN;
    if (ops == WEFT_OK && end == CUDA_SUCCESS && graph)
        inst = cuGraphInstantiate(&sh->exec, graph, 0);
    if (graph) cuGraphDestroy(graph);
    if (ops == WEFT_OK && end == CUDA_SUCCESS && inst == CUDA_SUCCESS) {
        sh->state = SHAPE_CAPTURED;
        s->captures++;
        return WEFT_OK;
    }
    sh->exec = NULL;
    sh->state = SHAPE_EAGER;
    if (s->host->log)
        s->host->log(WEFT_LOG_WARN, NAME,
                     "step of %u rows / %u logit rows stays eager: capture failed (%s%s%s)",
                     sh->n_tokens, sh->n_logits, ops ? op_err.message : "",
                     ops ? "; " : "",
                     end != CUDA_SUCCESS ? "cuStreamEndCapture" : inst != CUDA_SUCCESS
                                                                        ? "cuGraphInstantiate"
                                                                        : "op");
    (void)err;
    return WEFT_OK;
}

/* step */
static weft_status cg_run(void *st, void *prepared, weft_exec_ctx *ctx, weft_error *err) {
    cg_state *s = st;
    cg_prepared *p = prepared;
    if (!s || !p || !ctx || !ctx->data)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "run: missing argument");
    uint32_t n_logits = ctx->batch ? ctx->batch->n_logits : ctx->n_tokens;
    /* Only decode-shaped steps replay: every row a logit row (lm_head then needs no gather). */
    if (!s->enabled || !ctx->stream || ctx->n_tokens == 0 || ctx->n_tokens > s->max_tokens ||
        n_logits != ctx->n_tokens) {
        s->eager_runs++;
        return run_nodes(s, p, ctx, 0, err);
    }
    cg_shape *sh = shape_for(p, ctx->n_tokens, n_logits);
    if (!sh || sh->state == SHAPE_EAGER) {
        s->eager_runs++;
        return run_nodes(s, p, ctx, 0, err);
    }
    weft_status r = ck(cuCtxSetCurrent(s->ctx), "making the context current", err);
    if (r) return r;
    uint64_t sig = address_sig(p, ctx);
    if (sig != p->sig) {
        if (p->sig) s->invalidations++;
        drop_captures(p);
        p->sig = sig;
    }
    if (sh->state == SHAPE_WARM && sh->runs < s->warmup) {
        /* warm-up: kernels compiled, GEMM plans and tables made outside any capture */
        sh->runs++;
        s->eager_runs++;
        return run_nodes(s, p, ctx, 0, err);
    }
    if (sh->state == SHAPE_WARM) {
        r = capture(s, p, sh, ctx, err);
        if (r) return r;
        if (sh->state != SHAPE_CAPTURED) {
            s->eager_runs++;
            return run_nodes(s, p, ctx, 0, err);
        }
    }
    const weft_profile_service *prof =
        s->profile && s->profile->enabled && s->profile->enabled(s->profile->self) ? s->profile
                                                                                   : NULL;
    if (prof) prof->range_begin(prof->self, "graph", ctx->stream);
    r = ck(cuGraphLaunch(sh->exec, (CUstream)ctx->stream), "cuGraphLaunch", err);
    if (prof) prof->range_end(prof->self, "graph", ctx->stream);
    if (r == WEFT_OK) s->replays++;
    return r;
}

/* setup */
static void cg_release(void *st, void *prepared) {
    cg_state *s = st;
    cg_prepared *p = prepared;
    if (!p) return;
    if (s && s->ctx) cuCtxSetCurrent(s->ctx);
    drop_captures(p);
    free(p->classes);
    free(p);
}

static const weft_executor_vtable cg_vtable = {
    .size = sizeof(weft_executor_vtable),
    .prepare = cg_prepare,
    .run = cg_run,
    .release = cg_release,
};

static const weft_plugin_descriptor cg_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = VERSION,
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_EXECUTOR,
    .create = cg_create,
    .destroy = cg_destroy,
    .executor = &cg_vtable,
};

WEFT_SDK_ENTRY(cg_desc, 1, 1)
