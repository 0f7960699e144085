/* The capture-and-replay executor shared by exec.cuda-graph and exec.persistent (cg_core.h).
 *
 * Why a capture stays valid: every launch shape of the cuda backend's ops depends only on the
 * step's row count, logit-row count and KV-length bucket (weft_sdk_kv_bucket: the fused
 * attention sizes its split grid by it), which together key a capture, and every per-step
 * value (tokens, positions, kv slots, logit rows) is read on the device from the graph's fixed
 * input buffers, which the engine fills before run (llama option device_inputs: true; prepare
 * refuses a graph whose attention would stage host data instead). Everything else a kernel
 * reads (weights, the activation arena, the kv cache) sits at fixed addresses for the prepared
 * graph's life. A hash of those addresses (every tensor buffer and the contiguous cache's
 * per-layer K/V) is checked on each run: when it changes the captures are dropped and re-made;
 * release() drops them with the graph. Prefill steps (fewer logit rows than rows, whose lm_head
 * gathers rows through host staging) run eagerly, as does any shape whose capture fails (an op
 * that is not capture-safe); the failure is logged once and that shape stays eager.
 *
 * Profiling: eager runs time each node by op class as the default executor does; a replay is
 * one range named "graph" (the whole step on the device). */
#include "cg_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cg_prepared {
    const weft_graph *g;
    const weft_op_impl *const *impls;
    const char **classes; /* (n_nodes) op class names for profiling */
    uint64_t sig;         /* address hash the captures were made with */
    cg_shape shapes[CG_MAX_SHAPES];
    uint32_t n_shapes;
} cg_prepared;

weft_status cg_core_init(cg_core *c, const char *name, const weft_host_services *host,
                         const weft_options *opts, weft_error *err) {
    int64_t mt = weft_sdk_option_int(opts, "max_tokens", 8);
    int64_t wu = weft_sdk_option_int(opts, "warmup", 1);
    if (mt < 1 || mt > 4096)
        return weft_sdk_error(err, WEFT_ERR_INVALID, name,
                              "option max_tokens: expected 1..4096, found %lld", (long long)mt);
    if (wu < 1 || wu > 100)
        return weft_sdk_error(err, WEFT_ERR_INVALID, name,
                              "option warmup: expected 1..100 eager runs before capture, found "
                              "%lld",
                              (long long)wu);
    memset(c, 0, sizeof(*c));
    c->name = name;
    c->host = host;
    c->max_tokens = (uint32_t)mt;
    c->warmup = (uint32_t)wu;
    c->enabled = weft_sdk_option_bool(opts, "enabled", 1);
    c->profile = host->get_service ? host->get_service(host, WEFT_SERVICE_PROFILE, 1) : NULL;
    return WEFT_OK;
}

weft_status cg_core_check(const cg_core *c, CUresult r, const char *what, weft_error *err) {
    if (r == CUDA_SUCCESS) return WEFT_OK;
    const char *nm = NULL;
    cuGetErrorName(r, &nm);
    return weft_sdk_error(err, r == CUDA_ERROR_OUT_OF_MEMORY ? WEFT_ERR_NOMEM : WEFT_ERR_DEVICE,
                          c->name, "%s failed (%s)", what, nm ? nm : "?");
}

const weft_profile_service *cg_core_profile(const cg_core *c) {
    return c->profile && c->profile->enabled && c->profile->enabled(c->profile->self) ? c->profile
                                                                                       : NULL;
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
weft_status cg_core_prepare(cg_core *c, const weft_graph *g, const weft_op_impl *const *impls,
                            weft_exec_ctx *ctx, void **prepared, weft_error *err) {
    if (!c || !g || !impls || !ctx || !prepared)
        return weft_sdk_error(err, WEFT_ERR_INVALID, c ? c->name : "executor",
                              "prepare: missing argument");
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (!impls[i] || !impls[i]->run)
            return weft_sdk_error(err, WEFT_ERR_INVALID, c->name,
                                  "prepare: node %s has no implementation", g->nodes[i].name);
    const weft_device_service *dev =
        c->host->get_service ? c->host->get_service(c->host, WEFT_SERVICE_DEVICE, 1) : NULL;
    if (!dev || !dev->backend || strcmp(dev->backend, "cuda") || !dev->native)
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, c->name,
                              "expected the cuda backend, the candidate runs on '%s'",
                              dev && dev->backend ? dev->backend : "?");
    c->ctx = (CUcontext)dev->native(dev->self);
    if (!c->ctx) return weft_sdk_error(err, WEFT_ERR_DEVICE, c->name, "the backend has no context");
    /* Attention without in.kv_slots stages the row -> slot map from the host batch each step: a
     * replay would reuse the map of the captured step. */
    int has_attention = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) has_attention |= g->nodes[i].op == WEFT_OP_ATTENTION;
    uint32_t kv = find_tensor(g, WEFT_INPUT_KV_SLOTS);
    if (c->enabled && has_attention && (kv == WEFT_TENSOR_NONE || !reads(g, kv)))
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, c->name,
                              "the graph's attention does not read %s: captured steps need "
                              "device-side step inputs (llama option device_inputs: true)",
                              WEFT_INPUT_KV_SLOTS);
    cg_prepared *p = calloc(1, sizeof(*p));
    const char **classes = calloc(g->n_nodes ? g->n_nodes : 1, sizeof(*classes));
    if (!p || !classes) {
        free(p);
        free(classes);
        return weft_sdk_error(err, WEFT_ERR_NOMEM, c->name, "out of memory");
    }
    const weft_graph_service *gs =
        c->host->get_service ? c->host->get_service(c->host, WEFT_SERVICE_GRAPH, 1) : NULL;
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

static void drop_captures(cg_core *c, cg_prepared *p) {
    for (uint32_t i = 0; i < p->n_shapes; i++) {
        cg_shape *sh = &p->shapes[i];
        if (sh->exec) cuGraphExecDestroy(sh->exec);
        sh->exec = NULL;
        if (c && c->hooks.drop) c->hooks.drop(c->hooks.self, sh);
        if (sh->state == CG_SHAPE_CAPTURED) sh->state = CG_SHAPE_WARM;
        sh->runs = 0;
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
static weft_status run_nodes(cg_core *c, cg_prepared *p, weft_exec_ctx *ctx, int capturing,
                             weft_error *err) {
    const weft_graph *g = p->g;
    const weft_profile_service *prof = capturing ? NULL : cg_core_profile(c);
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

static cg_shape *shape_for(cg_prepared *p, uint32_t n_tokens, uint32_t n_logits,
                           int64_t kv_len) {
    for (uint32_t i = 0; i < p->n_shapes; i++)
        if (p->shapes[i].n_tokens == n_tokens && p->shapes[i].n_logits == n_logits &&
            p->shapes[i].kv_len == kv_len)
            return &p->shapes[i];
    if (p->n_shapes == CG_MAX_SHAPES) return NULL;
    cg_shape *sh = &p->shapes[p->n_shapes++];
    memset(sh, 0, sizeof(*sh));
    sh->n_tokens = n_tokens;
    sh->n_logits = n_logits;
    sh->kv_len = kv_len;
    return sh;
}

/* Captures the step into sh->exec (and hands the graph to the captured hook). On failure the
 * shape turns eager; the step has then not run (capture records, it does not execute), so the
 * caller runs it eagerly. */
static weft_status capture(cg_core *c, cg_prepared *p, cg_shape *sh, weft_exec_ctx *ctx,
                           weft_error *err) {
    CUstream stream = (CUstream)ctx->stream;
    weft_status r = cg_core_check(
        c, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture",
        err);
    if (r) return r;
    weft_error op_err;
    memset(&op_err, 0, sizeof(op_err));
    op_err.size = sizeof(op_err);
    weft_status ops = run_nodes(c, p, ctx, 1, &op_err);
    CUgraph graph = NULL;
    CUresult end = cuStreamEndCapture(stream, &graph);
    CUresult inst = CUDA_ERROR_UNKNOWN;
    if (ops == WEFT_OK && end == CUDA_SUCCESS && graph)
        inst = cuGraphInstantiate(&sh->exec, graph, 0);
    if (ops == WEFT_OK && end == CUDA_SUCCESS && inst == CUDA_SUCCESS) {
        sh->state = CG_SHAPE_CAPTURED;
        c->captures++;
        if (c->hooks.captured) c->hooks.captured(c->hooks.self, sh, graph);
        cuGraphDestroy(graph);
        return WEFT_OK;
    }
    if (graph) cuGraphDestroy(graph);
    sh->exec = NULL;
    sh->state = CG_SHAPE_EAGER;
    if (c->host->log)
        c->host->log(WEFT_LOG_WARN, c->name,
                     "step of %u rows / %u logit rows / KV bucket %lld stays eager: capture "
                     "failed (%s%s%s)",
                     sh->n_tokens, sh->n_logits, (long long)sh->kv_len,
                     ops ? op_err.message : "",
                     ops ? "; " : "",
                     end != CUDA_SUCCESS ? "cuStreamEndCapture" : inst != CUDA_SUCCESS
                                                                        ? "cuGraphInstantiate"
                                                                        : "op");
    (void)err;
    return WEFT_OK;
}

/* step */
weft_status cg_core_run(cg_core *c, void *prepared, weft_exec_ctx *ctx, weft_error *err) {
    cg_prepared *p = prepared;
    if (!c || !p || !ctx || !ctx->data)
        return weft_sdk_error(err, WEFT_ERR_INVALID, c ? c->name : "executor",
                              "run: missing argument");
    uint32_t n_logits = ctx->batch ? ctx->batch->n_logits : ctx->n_tokens;
    /* Only decode-shaped steps replay: every row a logit row (lm_head then needs no gather). */
    if (!c->enabled || !ctx->stream || ctx->n_tokens == 0 || ctx->n_tokens > c->max_tokens ||
        n_logits != ctx->n_tokens) {
        c->eager_runs++;
        return run_nodes(c, p, ctx, 0, err);
    }
    cg_shape *sh = shape_for(p, ctx->n_tokens, n_logits, weft_sdk_kv_bucket(ctx->batch));
    if (!sh || sh->state == CG_SHAPE_EAGER) {
        c->eager_runs++;
        return run_nodes(c, p, ctx, 0, err);
    }
    weft_status r = cg_core_check(c, cuCtxSetCurrent(c->ctx), "making the context current", err);
    if (r) return r;
    uint64_t sig = address_sig(p, ctx);
    if (sig != p->sig) {
        if (p->sig) c->invalidations++;
        drop_captures(c, p);
        p->sig = sig;
    }
    if (sh->state == CG_SHAPE_WARM && sh->runs < c->warmup) {
        /* warm-up: kernels compiled, GEMM plans and tables made outside any capture */
        sh->runs++;
        c->eager_runs++;
        return run_nodes(c, p, ctx, 0, err);
    }
    if (sh->state == CG_SHAPE_WARM) {
        r = capture(c, p, sh, ctx, err);
        if (r) return r;
        if (sh->state != CG_SHAPE_CAPTURED) {
            c->eager_runs++;
            return run_nodes(c, p, ctx, 0, err);
        }
    }
    if (c->hooks.run) {
        int ran = 0;
        r = c->hooks.run(c->hooks.self, sh, ctx, &ran, err);
        if (r || ran) return r;
    }
    const weft_profile_service *prof = cg_core_profile(c);
    if (prof) prof->range_begin(prof->self, "graph", ctx->stream);
    r = cg_core_check(c, cuGraphLaunch(sh->exec, (CUstream)ctx->stream), "cuGraphLaunch", err);
    if (prof) prof->range_end(prof->self, "graph", ctx->stream);
    if (r == WEFT_OK) c->replays++;
    return r;
}

/* setup */
void cg_core_release(cg_core *c, void *prepared) {
    cg_prepared *p = prepared;
    if (!p) return;
    if (c && c->ctx) cuCtxSetCurrent(c->ctx);
    drop_captures(c, p);
    free(p->classes);
    free(p);
}
