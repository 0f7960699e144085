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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_core.h"
#include "persistent_prog.h"

#define NAME "exec.persistent"
#define VERSION "0.1.0"

/* What a captured shape became: the program and its launch (cg_shape.ext). */
typedef struct pk_shape {
    CUfunction mk;
    CUdeviceptr prog, done, stamps; /* stamps: the streaming kernel's node finish times (trace) */
    int32_t n_prog;
    uint32_t epoch, grid, smem, threads;
    int stream;                    /* weft_megakernel (1) or weft_persistent (0) */
    uint32_t ring_off, ring_bytes; /* the streaming kernel's weight ring in dynamic shared memory */
    uint32_t vs_off;               /* and its folded norms' row */
    int32_t *ops;                  /* each node's op code, for the trace report */
} pk_shape;

typedef struct pk_state {
    cg_core core; /* capture, replay, eager fallback: exec.cuda-graph's mechanism */
    int persistent, prefetch, blocks_per_sm, stream, trace;
    uint64_t prefetch_bytes;
    uint64_t persistent_runs;
} pk_state;

/* The streaming kernel (core.cu weft_megakernel): 256 consumer threads and one producer warp
 * per block, one block per SM. */
#define MK_THREADS 288

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

/* The streaming kernel's launch for a program, or the reason it cannot run it. */
typedef struct pk_stream_plan {
    CUfunction fn;
    uint32_t smem, ring_off, ring_bytes, max_chunk, vs_off;
    int folded, guarded; /* norms folded into the product after them; of those, guarded */
} pk_stream_plan;

static weft_status stream_plan(CUmodule mod, CUdevice dev, pk_node *prog, size_t n, uint64_t wsize,
                               unsigned node_smem, pk_stream_plan *pl, char *why, size_t why_n) {
    int major = 0, optin = 0, per_sm = 0, stat = 0;
    if (cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) !=
            CUDA_SUCCESS ||
        major < 9)
        return WHY("bulk copies need compute capability 9.0, the device has %d.x", major);
    if (!wsize) return WHY("the weights' element size is unknown");
    if (cuModuleGetFunction(&pl->fn, mod, "weft_megakernel") != CUDA_SUCCESS)
        return WHY("the backend's module has no weft_megakernel");
    /* every chunk (one virtual block of a product: 8/S rows, twice for gate|up) is one or two
     * bulk copies: 16-byte aligned rows of a multiple of 16 bytes */
    uint64_t max_chunk = 0, max_k = 0, max_d = 0;
    for (size_t i = 0; i < n; i++) {
        const pk_node *nd = &prog[i];
        if (i + 1 < n) {
            int guard = 0;
            uint64_t d = foldable_norm(prog, n, i, wsize, &guard);
            if (d > max_d) max_d = d;
        }
        if (!gemv_op(nd->op)) continue;
        int sw = nd->op == PK_GEMV_SWIGLU_1;
        uint64_t w0 = nd->a[1], w1 = sw ? nd->a[2] : 0;
        uint32_t K = (uint32_t)nd->a[sw ? 6 : 7], S = (uint32_t)nd->a[sw ? 7 : 8];
        if (S == 0 || S > 8 || 8 % S) return WHY("node %zu: GEMV split %u", i, S);
        uint64_t rowb = K * wsize, chunk = (8 / S) * rowb * (sw ? 2 : 1);
        if (rowb % 16 || w0 % 16 || w1 % 16)
            return WHY("node %zu: weight rows of %llu bytes at %#llx are not 16-byte aligned", i,
                       (unsigned long long)rowb, (unsigned long long)w0);
        if (chunk > max_chunk) max_chunk = chunk;
        if (K > max_k) max_k = K;
        if (K % (16 / wsize) || nd->a[0] % 16)
            return WHY("node %zu: x of %u columns at %#llx cannot be read in 16-byte vectors", i, K,
                       (unsigned long long)nd->a[0]);
    }
    if (!max_chunk) return WHY("the step has no GEMV node");
    if (cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev) !=
            CUDA_SUCCESS ||
        cuFuncGetAttribute(&stat, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, pl->fn) != CUDA_SUCCESS)
        return WHY("cannot read the shared memory limits");
    /* the start of dynamic shared memory is the attention bodies' area, a product's staged x
     * (max K activations, the activation size being the weights' here) and at vs_off a folded
     * norm's row (max D floats) and its staged x, res and w (16-byte aligned each); the ring
     * follows */
    uint64_t vs_off = (max_k * wsize + 127u) & ~(uint64_t)127u;
    uint64_t xs_end =
        vs_off + ((max_d + 3) & ~(uint64_t)3) * 4 + 3 * ((max_d * wsize + 15) & ~15ull);
    if (xs_end > node_smem) node_smem = (unsigned)xs_end;
    uint32_t off = (node_smem + 127u) & ~127u;
    int64_t ring = ((int64_t)optin - stat - off - 1024) & ~(int64_t)127;
    if (ring < 2 * (int64_t)max_chunk)
        return WHY("a %lld-byte ring cannot hold two %llu-byte chunks", (long long)ring,
                   (unsigned long long)max_chunk);
    pl->ring_off = off;
    pl->vs_off = (uint32_t)vs_off;
    pl->ring_bytes = (uint32_t)ring;
    pl->smem = off + (uint32_t)ring;
    pl->max_chunk = (uint32_t)max_chunk;
    if (cuFuncSetAttribute(pl->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                           (int)pl->smem) != CUDA_SUCCESS ||
        cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pl->fn, MK_THREADS, pl->smem) !=
            CUDA_SUCCESS ||
        per_sm < 1)
        return WHY("weft_megakernel does not fit an SM with %u bytes of shared memory", pl->smem);
    /* fold: the product computes the norm (reserved = the norm's index + 1) and waits for what
     * the norm waited for; the norm's node runs nowhere (no block has work in it) */
    for (size_t i = 0; i + 1 < n; i++) {
        int guard = 0;
        if (!foldable_norm(prog, n, i, wsize, &guard)) continue;
        prog[i + 1].reserved = ((uint32_t)i + 1) | (guard ? 0x80000000u : 0u);
        pl->guarded += guard;
        prog[i + 1].wait = prog[i].wait;
        prog[i + 1].wait_nvb = prog[i].wait_nvb;
        prog[i].nvb = 0;
        pl->folded++;
    }
    return WEFT_OK;
}

/* Reads the captured graph into a program for weft_persistent; WEFT_ERR_UNSUPPORTED with the
 * reason in why when it cannot (the shape then replays the graph). */
static weft_status build_program(pk_state *s, cg_shape *sh, CUgraph graph, char *why,
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
        if (cuGraphNodeGetType(order[i], &type) != CUDA_SUCCESS ||
            type != CU_GRAPH_NODE_TYPE_KERNEL) {
            r = WHY("node %zu of the step is not a kernel launch (graph node type %d: a copy, "
                    "memset or host node)",
                    i, (int)type);
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
            else if (s->core.host->log)
                s->core.host->log(WEFT_LOG_WARN, NAME, "weight element size unknown: no prefetch");
        }
        if (kp.blockDimY != 1 || kp.blockDimZ != 1 || !pk_threads_ok(k, kp.blockDimX)) {
            r = WHY("kernel %s runs with %ux%ux%u threads, which the interpreter's %u-thread "
                    "blocks cannot",
                    fname, kp.blockDimX, kp.blockDimY, kp.blockDimZ, PK_THREADS);
            goto fail;
        }
        if (!kp.kernelParams) {
            r = WHY("kernel %s: arguments not readable (packed in extra)", fname);
            goto fail;
        }
        size_t np = strlen(k->sig), off = 0, sz = 0;
        if (np > PK_ARGS || cuFuncGetParamInfo(kp.func, np, &off, &sz) == CUDA_SUCCESS) {
            r = WHY("kernel %s has more parameters than the interpreter's table says (%zu)", fname,
                    np);
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
        if (k->op == PK_ROPE_ATTENTION && (((uint32_t)nd->a[23] >> 16) & 1u)) {
            r = WHY("kernel %s (node %zu) merges through a thread-block cluster (fuse.rope-"
                    "attention's merge: cluster), which a persistent block cannot",
                    fname, i);
            goto fail;
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
        has_w[i] = gemv_op(k->op);
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
                if (w->a[2] == w->a[1] + half)
                    ranges[0][1] = 2 * half;
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
    CUdevice dev;
    int sms = 0;
    if (cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS) {
        r = WHY("cannot query the device");
        goto fail;
    }
    pk_stream_plan plan;
    memset(&plan, 0, sizeof(plan));
    if (s->stream) {
        char swhy[200] = "";
        if (stream_plan(mod, dev, prog, n, wsize, smem, &plan, swhy, sizeof(swhy)) == WEFT_OK) {
            mk = plan.fn;
        } else {
            plan.fn = NULL;
            if (s->core.host->log)
                s->core.host->log(WEFT_LOG_WARN, NAME,
                                  "the streaming persistent kernel cannot run this step (%s): "
                                  "weft_persistent runs it",
                                  swhy);
        }
    }
    if (plan.fn) goto alloc;
    /* the launch: as many 256-thread blocks as fit on every SM at once (cooperative) */
    if (smem > 48 * 1024 && cuFuncSetAttribute(mk, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               (int)smem) != CUDA_SUCCESS) {
        r = WHY("cannot give weft_persistent %u bytes of dynamic shared memory", smem);
        goto fail;
    }
    int per_sm = 0;
    if (cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mk, PK_THREADS, smem) !=
            CUDA_SUCCESS ||
        per_sm < 1) {
        r = WHY("weft_persistent does not fit an SM with %u bytes of shared memory", smem);
        goto fail;
    }
    if (s->blocks_per_sm && s->blocks_per_sm < per_sm) per_sm = s->blocks_per_sm;
alloc:;
    CUdeviceptr dprog = 0, ddone = 0, dstamps = 0;
    pk_shape *ps = calloc(1, sizeof(*ps));
    int32_t *ops = calloc(n, sizeof(*ops));
    int want_stamps = plan.fn && s->trace;
    if (!ps || !ops || cuMemAlloc(&dprog, n * sizeof(pk_node)) != CUDA_SUCCESS ||
        cuMemAlloc(&ddone, 2 * n * sizeof(uint32_t)) != CUDA_SUCCESS ||
        cuMemcpyHtoD(dprog, prog, n * sizeof(pk_node)) != CUDA_SUCCESS ||
        cuMemsetD32(ddone, 0, 2 * n) != CUDA_SUCCESS ||
        (want_stamps && (cuMemAlloc(&dstamps, (2 * n + 1) * sizeof(uint64_t)) != CUDA_SUCCESS ||
                         cuMemsetD32(dstamps, 0, 2 * (2 * n + 1)) != CUDA_SUCCESS)) ||
        /* the copy and the clears run on the legacy stream, which the compute stream does not
         * wait for (the copy's DMA may land after it returns): landed before the kernel runs */
        cuStreamSynchronize(CU_STREAM_LEGACY) != CUDA_SUCCESS) {
        if (dprog) cuMemFree(dprog);
        if (ddone) cuMemFree(ddone);
        if (dstamps) cuMemFree(dstamps);
        free(ps);
        free(ops);
        r = WHY("cannot allocate the program (%zu nodes)", n);
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        ops[i] = prog[i].op;
    ps->prog = dprog;
    ps->done = ddone;
    ps->stamps = dstamps;
    ps->ops = ops;
    ps->mk = mk;
    ps->n_prog = (int32_t)n;
    ps->epoch = 0;
    if (plan.fn) {
        ps->stream = 1;
        ps->grid = (uint32_t)sms;
        ps->threads = MK_THREADS;
        ps->smem = plan.smem;
        ps->ring_off = plan.ring_off;
        ps->ring_bytes = plan.ring_bytes;
        ps->vs_off = plan.vs_off;
        if (s->core.host->log)
            s->core.host->log(WEFT_LOG_INFO, NAME,
                              "step of %u rows runs as one streaming persistent kernel: %zu "
                              "nodes (%d norms folded into the product after them, %d of "
                              "them guarded), %u "
                              "blocks of %d threads (1 per SM), weights streamed through a %u "
                              "KiB ring of shared memory (largest chunk %u KiB)",
                              sh->n_tokens, n, plan.folded, plan.guarded, ps->grid, MK_THREADS,
                              plan.ring_bytes >> 10, plan.max_chunk >> 10);
    } else {
        ps->grid = (uint32_t)(per_sm * sms);
        ps->threads = PK_THREADS;
        ps->smem = smem;
        if (s->core.host->log)
            s->core.host->log(WEFT_LOG_INFO, NAME,
                              "step of %u rows runs as one persistent kernel: %zu nodes, %u "
                              "blocks of %d threads (%d per SM), %u bytes of shared memory",
                              sh->n_tokens, n, ps->grid, PK_THREADS, per_sm, smem);
    }
    sh->ext = ps;
    r = WEFT_OK;
fail:
    free(order);
    free(prog);
    free(has_w);
    free(src);
    return r;
}

/* step: one launch of the program; the arrival counters' target grows by one epoch a launch */
static weft_status run_persistent(const cg_core *c, pk_shape *sh, CUstream stream,
                                  weft_error *err) {
    uint32_t epoch = sh->epoch + 1;
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof(attr));
    attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
    CUlaunchConfig cfg = {.gridDimX = sh->grid,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = sh->threads,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .sharedMemBytes = sh->smem,
                          .hStream = stream,
                          .attrs = &attr,
                          .numAttrs = 1};
    int32_t n = sh->n_prog;
    void *args[] = {&sh->prog, &n, &sh->done, &epoch};
    void *margs[] = {&sh->prog,       &n,          &sh->done,  &epoch, &sh->ring_off,
                     &sh->ring_bytes, &sh->vs_off, &sh->stamps};
    weft_status r =
        cg_core_check(c, cuLaunchKernelEx(&cfg, sh->mk, sh->stream ? margs : args, NULL),
                      sh->stream ? "launching weft_megakernel" : "launching weft_persistent", err);
    if (r == WEFT_OK) sh->epoch = epoch;
    return r;
}

/* ---- hooks on exec.cuda-graph's mechanism ------------------------------------------------ */
static void pk_captured(void *self, cg_shape *sh, CUgraph graph) {
    pk_state *s = self;
    char why[256] = "";
    if (s->persistent && build_program(s, sh, graph, why, sizeof(why)) != WEFT_OK &&
        s->core.host->log)
        s->core.host->log(WEFT_LOG_WARN, NAME,
                          "step of %u rows / %u logit rows replays its CUDA graph instead of the "
                          "persistent kernel: %s",
                          sh->n_tokens, sh->n_logits, why);
}

static weft_status pk_run(void *self, cg_shape *sh, weft_exec_ctx *ctx, int *ran, weft_error *err) {
    pk_state *s = self;
    pk_shape *ps = sh->ext;
    if (!ps) return WEFT_OK; /* no program: the graph is replayed */
    *ran = 1;
    const weft_profile_service *prof = cg_core_profile(&s->core);
    if (prof) prof->range_begin(prof->self, "persistent", ctx->stream);
    weft_status r = run_persistent(&s->core, ps, (CUstream)ctx->stream, err);
    if (prof) prof->range_end(prof->self, "persistent", ctx->stream);
    if (r == WEFT_OK) s->persistent_runs++;
    return r;
}

/* The trace (option trace, streaming kernel): the last launch's node times, summed by op: a
 * node's time on the step's critical path (its finish minus the previous node's), split into
 * the wait (until the last block with work in it is past its wait) and the work after it. */
static void trace_report(pk_state *s, const pk_shape *ps) {
    int32_t n = ps->n_prog;
    size_t nt = 2 * (size_t)n + 1;
    uint64_t *t = calloc(nt, sizeof(*t));
    if (!t || cuCtxSynchronize() != CUDA_SUCCESS ||
        cuMemcpyDtoH(t, ps->stamps, nt * sizeof(*t)) != CUDA_SUCCESS || !t[n]) {
        free(t);
        return;
    }
    enum { NOPS = 32 };
    double sum[NOPS] = {0}, wait[NOPS] = {0};
    int cnt[NOPS] = {0};
    uint64_t prev = t[n];
    for (int32_t i = 0; i < n; i++) {
        int op = ps->ops[i] > 0 && ps->ops[i] < NOPS ? ps->ops[i] : 0;
        uint64_t ready = t[n + 1 + i];
        if (t[i] > prev) sum[op] += (double)(t[i] - prev) / 1000.0;
        if (ready > prev && ready <= t[i]) wait[op] += (double)(ready - prev) / 1000.0;
        cnt[op]++;
        if (t[i] > prev) prev = t[i];
    }
    s->core.host->log(WEFT_LOG_INFO, NAME,
                      "trace of the last streaming step: %.1f us from start to the last node",
                      (double)(prev - t[n]) / 1000.0);
    for (int op = 0; op < NOPS; op++) {
        if (!cnt[op]) continue;
        const char *name = "?";
        for (size_t k = 0; k < sizeof(pk_kernels) / sizeof(pk_kernels[0]); k++)
            if (pk_kernels[k].op == op) name = pk_kernels[k].name;
        s->core.host->log(WEFT_LOG_INFO, NAME,
                          "trace: %-24s %4d nodes %9.1f us (%.2f us each, of which %.2f waiting)",
                          name, cnt[op], sum[op], sum[op] / cnt[op], wait[op] / cnt[op]);
    }
    free(t);
}

static void pk_drop(void *self, cg_shape *sh) {
    pk_state *s = self;
    pk_shape *ps = sh->ext;
    if (!ps) return;
    if (ps->stamps && s && s->core.host->log) trace_report(s, ps);
    if (ps->prog) cuMemFree(ps->prog);
    if (ps->done) cuMemFree(ps->done);
    if (ps->stamps) cuMemFree(ps->stamps);
    free(ps->ops);
    free(ps);
    sh->ext = NULL;
}

/* ---- the executor ------------------------------------------------------------------------- */
static weft_status pk_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    if (!host || !st) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "create: NULL argument");
    pk_state *s = calloc(1, sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    weft_status r = cg_core_init(&s->core, NAME, host, opts, err);
    if (r) {
        free(s);
        return r;
    }
    int64_t pkb = weft_sdk_option_int(opts, "prefetch_kb", 16384);
    int64_t bps = weft_sdk_option_int(opts, "blocks_per_sm", 0);
    if (pkb < 0 || pkb > (1 << 22) || bps < 0 || bps > 32) {
        free(s);
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "options prefetch_kb / blocks_per_sm: expected 0..4194304 / 0..32, "
                              "found %lld / %lld",
                              (long long)pkb, (long long)bps);
    }
    s->core.hooks = (cg_hooks){.captured = pk_captured, .run = pk_run, .drop = pk_drop, .self = s};
    s->persistent = weft_sdk_option_bool(opts, "persistent", 1);
    s->prefetch = weft_sdk_option_bool(opts, "prefetch", 1);
    s->prefetch_bytes = (uint64_t)pkb << 10;
    s->blocks_per_sm = (int)bps;
    s->stream = weft_sdk_option_bool(opts, "stream", 1);
    s->trace = weft_sdk_option_bool(opts, "trace", 0);
    *st = s;
    return WEFT_OK;
}

static void pk_destroy(void *st) {
    pk_state *s = st;
    if (s && s->core.host && s->core.host->log && (s->persistent_runs || s->core.replays))
        s->core.host->log(
            WEFT_LOG_INFO, NAME,
            "%llu persistent steps, %llu graph replays, %llu eager steps, %llu "
            "captures",
            (unsigned long long)s->persistent_runs, (unsigned long long)s->core.replays,
            (unsigned long long)s->core.eager_runs, (unsigned long long)s->core.captures);
    free(st);
}

static weft_status pk_prepare(void *st, const weft_graph *g, const weft_op_impl *const *impls,
                              weft_exec_ctx *ctx, void **prepared, weft_error *err) {
    pk_state *s = st;
    return cg_core_prepare(s ? &s->core : NULL, g, impls, ctx, prepared, err);
}

static weft_status pk_exec(void *st, void *prepared, weft_exec_ctx *ctx, weft_error *err) {
    pk_state *s = st;
    return cg_core_run(s ? &s->core : NULL, prepared, ctx, err);
}

static void pk_release(void *st, void *prepared) {
    pk_state *s = st;
    cg_core_release(s ? &s->core : NULL, prepared);
}

static const weft_executor_vtable pk_vtable = {
    .size = sizeof(weft_executor_vtable),
    .prepare = pk_prepare,
    .run = pk_exec,
    .release = pk_release,
};

static const weft_plugin_descriptor pk_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = VERSION,
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_EXECUTOR,
    .create = pk_create,
    .destroy = pk_destroy,
    .executor = &pk_vtable,
};

WEFT_SDK_ENTRY(pk_desc, 1, 1)
