/* exec.persistent: the executor slot on the cuda backend, running a batch-1 decode step as one
 * persistent kernel. Decode steps are captured into a CUDA graph once per (rows, logit rows)
 * shape, as exec.cuda-graph does (same warm-up, address check and eager fallback). The captured
 * graph is then read back: when every node is a kernel of the cuda backend's core.cu that the
 * interpreter knows (persistent_prog.h), with thread counts it can run, the kernels' launch
 * shapes and argument values become a device-side program, and each later step of that shape
 * is one cooperative launch of weft_persistent (core.cu), which walks the program running the
 * kernels' own __device__ bodies: the same bits, no launch gaps, and the next products'
 * weights prefetched into L2 while the small nodes between them run. A shape the program cannot
 * express (more than one row, since only the 1-row GEMV is interpreted; an op of another
 * plugin, e.g. kv.paged; cuBLASLt; a memcpy node) replays its CUDA graph instead, and the
 * reason is logged once. Prefill steps run eagerly. The choice is recorded in the README:
 * an executor (replacing exec.cuda-graph in the slot) rather than a graph pass, because reading
 * back the captured launches reuses every host-side decision of the backend's ops unchanged.
 *
 * Profiling: eager runs time each node by op class; a replay is one range named "graph", a
 * persistent step one named "persistent". */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"
#include "persistent_prog.h"

#define NAME "exec.persistent"
#define VERSION "0.1.0"
#define CG_MAX_SHAPES 64

enum { SHAPE_WARM = 0, SHAPE_CAPTURED = 1, SHAPE_EAGER = 2 };

typedef struct cg_shape {
    uint32_t n_tokens, n_logits;
    uint32_t state, runs;
    CUgraphExec exec;
    /* the persistent program, when the capture could be expressed as one */
    int persistent;
    CUfunction mk;
    CUdeviceptr prog, done;
    int32_t n_prog;
    uint32_t epoch, grid, smem;
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
    int enabled, persistent, prefetch, blocks_per_sm;
    uint64_t prefetch_bytes;
    uint64_t captures, replays, eager_runs, invalidations, persistent_runs;
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
    s->persistent = weft_sdk_option_bool(opts, "persistent", 1);
    s->prefetch = weft_sdk_option_bool(opts, "prefetch", 1);
    int64_t pkb = weft_sdk_option_int(opts, "prefetch_kb", 16384);
    int64_t bps = weft_sdk_option_int(opts, "blocks_per_sm", 0);
    if (pkb < 0 || pkb > (1 << 22) || bps < 0 || bps > 32) {
        free(s);
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "options prefetch_kb / blocks_per_sm: expected 0..4194304 / 0..32, "
                              "found %lld / %lld",
                              (long long)pkb, (long long)bps);
    }
    s->prefetch_bytes = (uint64_t)pkb << 10;
    s->blocks_per_sm = (int)bps;
    s->profile = host->get_service ? host->get_service(host, WEFT_SERVICE_PROFILE, 1) : NULL;
    *st = s;
    return WEFT_OK;
}

static void cg_destroy(void *st) {
    cg_state *s = st;
    if (s && s->host && s->host->log && (s->persistent_runs || s->replays))
        s->host->log(WEFT_LOG_INFO, NAME,
                     "%llu persistent steps, %llu graph replays, %llu eager steps, %llu captures",
                     (unsigned long long)s->persistent_runs, (unsigned long long)s->replays,
                     (unsigned long long)s->eager_runs, (unsigned long long)s->captures);
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

static void drop_program(cg_shape *sh) {
    if (sh->prog) cuMemFree(sh->prog);
    if (sh->done) cuMemFree(sh->done);
    sh->prog = sh->done = 0;
    sh->persistent = 0;
    sh->n_prog = 0;
    sh->epoch = 0;
}

static void drop_captures(cg_prepared *p) {
    for (uint32_t i = 0; i < p->n_shapes; i++) {
        if (p->shapes[i].exec) cuGraphExecDestroy(p->shapes[i].exec);
        p->shapes[i].exec = NULL;
        drop_program(&p->shapes[i]);
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


/* ---- the persistent program --------------------------------------------------------------- */
#define WHY(...) (snprintf(why, why_n, __VA_ARGS__), WEFT_ERR_UNSUPPORTED)

/* Nodes of g in an order that respects every edge (Kahn); the stream capture of one stream is a
 * chain, but nothing here depends on that. */
static weft_status topo_order(CUgraph g, CUgraphNode **out, size_t *n_out, char *why,
                              size_t why_n) {
    size_t n = 0, ne = 0;
    if (cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS || n == 0)
        return WHY("the captured graph has no nodes");
    if (cuGraphGetEdges(g, NULL, NULL, NULL, &ne) != CUDA_SUCCESS)
        return WHY("cuGraphGetEdges failed");
    CUgraphNode *nodes = calloc(n, sizeof(*nodes)), *order = calloc(n, sizeof(*order));
    CUgraphNode *from = calloc(ne ? ne : 1, sizeof(*from)), *to = calloc(ne ? ne : 1, sizeof(*to));
    /* edge data must be read too: programmatic (PDL) edges carry some, and a query without it
     * fails as lossy */
    CUgraphEdgeData *ed = calloc(ne ? ne : 1, sizeof(*ed));
    size_t *indeg = calloc(n, sizeof(*indeg)), *ei = calloc(ne ? ne : 1, sizeof(*ei));
    weft_status r = WEFT_OK;
    if (!nodes || !order || !from || !to || !indeg || !ei || !ed) {
        r = WHY("out of memory");
        goto done;
    }
    if (cuGraphGetNodes(g, nodes, &n) != CUDA_SUCCESS ||
        (ne && cuGraphGetEdges(g, from, to, ed, &ne) != CUDA_SUCCESS)) {
        r = WHY("reading the captured graph's nodes and edges failed");
        goto done;
    }
    for (size_t e = 0; e < ne; e++) {
        size_t a = n, b = n;
        for (size_t i = 0; i < n; i++) {
            if (nodes[i] == from[e]) a = i;
            if (nodes[i] == to[e]) b = i;
        }
        if (a == n || b == n) {
            r = WHY("an edge of the captured graph names an unknown node");
            goto done;
        }
        ei[e] = a * n + b;
        indeg[b]++;
    }
    size_t k = 0;
    for (size_t round = 0; round < n && k < n; round++) {
        size_t before = k;
        for (size_t i = 0; i < n; i++) {
            if (indeg[i] != 0) continue;
            order[k++] = nodes[i];
            indeg[i] = (size_t)-1; /* taken */
            for (size_t e = 0; e < ne; e++)
                if (ei[e] / n == i) indeg[ei[e] % n]--;
        }
        if (k == before) break;
    }
    if (k != n) {
        r = WHY("the captured graph has a cycle");
        goto done;
    }
    *out = order;
    order = NULL;
    *n_out = n;
done:
    free(nodes);
    free(order);
    free(from);
    free(to);
    free(indeg);
    free(ei);
    free(ed);
    return r;
}

/* Reads the captured graph into a program for weft_persistent; WEFT_ERR_UNSUPPORTED with the
 * reason in why when it cannot (the shape then replays the graph). */
static weft_status build_program(cg_state *s, cg_shape *sh, CUgraph graph, char *why,
                                 size_t why_n) {
    CUgraphNode *order = NULL;
    size_t n = 0;
    weft_status r = topo_order(graph, &order, &n, why, why_n);
    if (r) return r;
    pk_node *prog = calloc(n, sizeof(*prog));
    int *has_w = calloc(n, sizeof(int)), *src = calloc(n, sizeof(int));
    CUmodule mod = NULL;
    CUfunction mk = NULL;
    unsigned smem = 0;
    uint64_t wsize = 0;
    if (!prog || !has_w || !src) {
        r = WHY("out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType type;
        if (cuGraphNodeGetType(order[i], &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_KERNEL) {
            r = WHY("node %zu of the step is not a kernel launch (graph node type %d: a copy, "
                    "memset or host node)", i, (int)type);
            goto fail;
        }
        CUDA_KERNEL_NODE_PARAMS kp;
        memset(&kp, 0, sizeof(kp));
        if (cuGraphKernelNodeGetParams(order[i], &kp) != CUDA_SUCCESS || !kp.func) {
            r = WHY("node %zu: cannot read its kernel parameters", i);
            goto fail;
        }
        const char *fname = NULL;
        if (cuFuncGetName(&fname, kp.func) != CUDA_SUCCESS || !fname) fname = "?";
        const pk_kernel *k = pk_kernel_find(fname);
        if (!k) {
            r = WHY("kernel %s (node %zu) is not in the interpreter", fname, i);
            goto fail;
        }
        CUmodule m = NULL;
        if (cuFuncGetModule(&m, kp.func) != CUDA_SUCCESS || (mod && m != mod)) {
            r = WHY("kernel %s comes from another module than the step's first kernel", fname);
            goto fail;
        }
        if (!mod) {
            mod = m;
            if (cuModuleGetFunction(&mk, mod, "weft_persistent") != CUDA_SUCCESS) {
                r = WHY("the backend's module has no weft_persistent (activation and weight "
                        "dtypes differ)");
                goto fail;
            }
            CUdeviceptr gw;
            size_t gb = 0;
            uint32_t ws = 0;
            /* without it the program runs without prefetches */
            if (cuModuleGetGlobal(&gw, &gb, mod, "weft_persistent_wsize") == CUDA_SUCCESS &&
                gb == sizeof(ws) && cuMemcpyDtoH(&ws, gw, sizeof(ws)) == CUDA_SUCCESS &&
                (ws == 2 || ws == 4))
                wsize = ws;
            else if (s->host->log)
                s->host->log(WEFT_LOG_WARN, NAME, "weight element size unknown: no prefetch");
        }
        if (kp.blockDimY != 1 || kp.blockDimZ != 1 || !pk_threads_ok(k, kp.blockDimX)) {
            r = WHY("kernel %s runs with %ux%ux%u threads, which the interpreter's %u-thread "
                    "blocks cannot", fname, kp.blockDimX, kp.blockDimY, kp.blockDimZ, PK_THREADS);
            goto fail;
        }
        if (!kp.kernelParams) {
            r = WHY("kernel %s: arguments not readable (packed in extra)", fname);
            goto fail;
        }
        size_t np = strlen(k->sig), off = 0, sz = 0;
        if (np > PK_ARGS || cuFuncGetParamInfo(kp.func, np, &off, &sz) == CUDA_SUCCESS) {
            r = WHY("kernel %s has more parameters than the interpreter's table says (%zu)",
                    fname, np);
            goto fail;
        }
        pk_node *nd = &prog[i];
        for (size_t a = 0; a < np; a++) {
            if (cuFuncGetParamInfo(kp.func, a, &off, &sz) != CUDA_SUCCESS ||
                sz != (size_t)pk_param_size(k->sig[a])) {
                r = WHY("kernel %s parameter %zu: %zu bytes, the interpreter's table says %d",
                        fname, a, sz, pk_param_size(k->sig[a]));
                goto fail;
            }
            memcpy(&nd->a[a], kp.kernelParams[a], sz);
        }
        uint64_t nvb = (uint64_t)kp.gridDimX * kp.gridDimY * kp.gridDimZ;
        if (nvb == 0 || nvb > 0x7fffffff) {
            r = WHY("kernel %s: grid of %llu blocks", fname, (unsigned long long)nvb);
            goto fail;
        }
        nd->op = k->op;
        nd->nvb = (int32_t)nvb;
        nd->gx = (int32_t)kp.gridDimX;
        nd->gy = (int32_t)kp.gridDimY;
        nd->nt = (int32_t)kp.blockDimX;
        nd->wait = i ? (int32_t)i - 1 : -1;
        nd->wait_nvb = i ? (uint32_t)prog[i - 1].nvb : 0;
        if (kp.sharedMemBytes > smem) smem = kp.sharedMemBytes;
        has_w[i] = k->op == PK_GEMV_1 || k->op == PK_GEMV_SWIGLU_1;
    }
    /* prefetch ranges: the weights each product reads, assigned to an earlier node */
    if (s->prefetch && s->prefetch_bytes && wsize) {
        pk_prefetch_plan(has_w, (int)n, src);
        for (size_t j = 0; j < n; j++) {
            if (src[j] < 0) continue;
            const pk_node *w = &prog[j];
            uint64_t ranges[2][2] = {{0, 0}, {0, 0}};
            if (w->op == PK_GEMV_1) { /* x, w, bias, y, out_f32, T, N, K, S */
                ranges[0][0] = w->a[1];
                ranges[0][1] = (uint64_t)(uint32_t)w->a[6] * (uint32_t)w->a[7] * wsize;
            } else { /* x, wg, wu, y, T, F, K, S */
                uint64_t half = (uint64_t)(uint32_t)w->a[5] * (uint32_t)w->a[6] * wsize;
                ranges[0][0] = w->a[1];
                ranges[0][1] = half;
                if (w->a[2] == w->a[1] + half) ranges[0][1] = 2 * half;
                else {
                    ranges[1][0] = w->a[2];
                    ranges[1][1] = half;
                }
            }
            uint64_t budget = s->prefetch_bytes;
            pk_node *to = &prog[src[j]];
            for (int q = 0; q < 2; q++) {
                uint64_t b = ranges[q][1] < budget ? ranges[q][1] : budget;
                b &= ~(uint64_t)15;
                if (!b || ranges[q][0] % 16) continue;
                to->pf[q][0] = ranges[q][0];
                to->pf[q][1] = b;
                budget -= b;
            }
        }
    }
    /* the launch: as many 256-thread blocks as fit on every SM at once (cooperative) */
    if (smem > 48 * 1024 &&
        cuFuncSetAttribute(mk, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem) !=
            CUDA_SUCCESS) {
        r = WHY("cannot give weft_persistent %u bytes of dynamic shared memory", smem);
        goto fail;
    }
    int per_sm = 0, sms = 0;
    CUdevice dev;
    if (cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS ||
        cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mk, PK_THREADS, smem) !=
            CUDA_SUCCESS ||
        per_sm < 1) {
        r = WHY("weft_persistent does not fit an SM with %u bytes of shared memory", smem);
        goto fail;
    }
    if (s->blocks_per_sm && s->blocks_per_sm < per_sm) per_sm = s->blocks_per_sm;
    CUdeviceptr dprog = 0, ddone = 0;
    if (cuMemAlloc(&dprog, n * sizeof(pk_node)) != CUDA_SUCCESS ||
        cuMemAlloc(&ddone, n * sizeof(uint32_t)) != CUDA_SUCCESS ||
        cuMemcpyHtoD(dprog, prog, n * sizeof(pk_node)) != CUDA_SUCCESS ||
        cuMemsetD32(ddone, 0, n) != CUDA_SUCCESS) {
        if (dprog) cuMemFree(dprog);
        if (ddone) cuMemFree(ddone);
        r = WHY("cannot allocate the program (%zu nodes)", n);
        goto fail;
    }
    sh->prog = dprog;
    sh->done = ddone;
    sh->mk = mk;
    sh->n_prog = (int32_t)n;
    sh->epoch = 0;
    sh->grid = (uint32_t)(per_sm * sms);
    sh->smem = smem;
    sh->persistent = 1;
    if (s->host->log)
        s->host->log(WEFT_LOG_INFO, NAME,
                     "step of %u rows runs as one persistent kernel: %zu nodes, %u blocks of %d "
                     "threads (%d per SM), %u bytes of shared memory",
                     sh->n_tokens, n, sh->grid, PK_THREADS, per_sm, smem);
    r = WEFT_OK;
fail:
    free(order);
    free(prog);
    free(has_w);
    free(src);
    return r;
}

/* step: one launch of the program; the arrival counters' target grows by one epoch a launch */
static weft_status run_persistent(cg_shape *sh, CUstream stream, weft_error *err) {
    uint32_t epoch = sh->epoch + 1;
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof(attr));
    attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
    CUlaunchConfig cfg = {.gridDimX = sh->grid,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = PK_THREADS,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .sharedMemBytes = sh->smem,
                          .hStream = stream,
                          .attrs = &attr,
                          .numAttrs = 1};
    int32_t n = sh->n_prog;
    void *args[] = {&sh->prog, &n, &sh->done, &epoch};
    weft_status r = ck(cuLaunchKernelEx(&cfg, sh->mk, args, NULL), "launching weft_persistent", err);
    if (r == WEFT_OK) sh->epoch = epoch;
    return r;
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
    if (ops == WEFT_OK && end == CUDA_SUCCESS && inst == CUDA_SUCCESS) {
        sh->state = SHAPE_CAPTURED;
        s->captures++;
        char why[256] = "";
        if (s->persistent && build_program(s, sh, graph, why, sizeof(why)) != WEFT_OK &&
            s->host->log)
            s->host->log(WEFT_LOG_WARN, NAME,
                         "step of %u rows / %u logit rows replays its CUDA graph instead of the "
                         "persistent kernel: %s",
                         sh->n_tokens, sh->n_logits, why);
        cuGraphDestroy(graph);
        return WEFT_OK;
    }
    if (graph) cuGraphDestroy(graph);
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
    if (sh->persistent) {
        if (prof) prof->range_begin(prof->self, "persistent", ctx->stream);
        r = run_persistent(sh, (CUstream)ctx->stream, err);
        if (prof) prof->range_end(prof->self, "persistent", ctx->stream);
        if (r == WEFT_OK) s->persistent_runs++;
        return r;
    }
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
