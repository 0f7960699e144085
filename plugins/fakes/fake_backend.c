/* A fake `cpu` backend (version 0.0.1) for lock, candidate and engine tests, so those tests
 * resolve and run a whole candidate from plugins/fakes alone, without the real cpu backend. Its
 * memory hooks are real host-memory implementations (malloc, memcpy). It registers plain f32
 * kernels for exactly the ops fake.model's graph uses (EMBED, RMSNORM, LM_HEAD) and nothing
 * else: a node any other plugin adds (fake.pass's SCALE) runs only when a technique in the
 * candidate implements it (fake.op), which is what the op-registry refusal tests need. Tests
 * pin it with version "=0.0.1"; on a normal search path the real cpu backend (higher) wins. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft/sdk.h"

#define NAME "cpu"

static weft_status be_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    *st = NULL;
    return WEFT_OK;
}

static weft_status be_info(void *st, weft_device_info *out, weft_error *err) {
    if (!out) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "device_info: out is NULL");
    memset(out, 0, sizeof(*out));
    out->size = sizeof(*out);
    snprintf(out->name, sizeof(out->name), "fake host backend");
    snprintf(out->arch, sizeof(out->arch), "host");
    out->compute_units = 1;
    return WEFT_OK;
}

/* ---- kernels: f32, straightforward loops, every id and size checked ---------------------- */
/* The tensors of input k / output 0 of node, checked to be f32 (or i32 for ids) of rank `rank`
 * with buffers big enough for rows x the product of the other dims. */
static weft_status arg(const weft_exec_ctx *ctx, const weft_node *node, uint32_t id, uint32_t dtype,
                       uint32_t rank, uint64_t rows, const weft_tensor **t, void **data,
                       weft_error *err) {
    const weft_graph *g = ctx->graph;
    if (id >= g->n_tensors)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "node %s: tensor id %u out of range",
                              node->name, (unsigned)id);
    *t = &g->tensors[id];
    if ((*t)->dtype != dtype || (*t)->rank != rank)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "node %s: tensor %s: expected dtype %u rank %u, found dtype %u rank "
                              "%u",
                              node->name, (*t)->name, (unsigned)dtype, (unsigned)rank,
                              (unsigned)(*t)->dtype, (unsigned)(*t)->rank);
    uint64_t n = rows;
    for (uint32_t d = 1; d < rank; d++)
        n *= (uint64_t)(*t)->shape[d];
    if (!ctx->data[id].ptr || ctx->data[id].bytes < n * 4)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "node %s: tensor %s: expected %llu bytes, buffer holds %llu",
                              node->name, (*t)->name, (unsigned long long)(n * 4),
                              (unsigned long long)ctx->data[id].bytes);
    *data = ctx->data[id].ptr;
    return WEFT_OK;
}

static weft_status check_ctx(const weft_exec_ctx *ctx, const weft_node *node, weft_error *err) {
    if (!ctx || !node || !ctx->graph || !ctx->data || node->n_in < 2 || node->n_out < 1)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "incomplete context or node");
    return WEFT_OK;
}

/* y[t] = table[tokens[t]] */
static weft_status k_embed(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                           weft_error *err) {
    weft_status s = check_ctx(ctx, node, err);
    const weft_tensor *tt, *wt, *yt;
    void *tp, *wp, *yp;
    uint64_t T = ctx ? ctx->n_tokens : 0;
    if (s == WEFT_OK) s = arg(ctx, node, node->in[0], WEFT_DTYPE_I32, 1, T, &tt, &tp, err);
    if (s == WEFT_OK) s = arg(ctx, node, node->in[1], WEFT_DTYPE_F32, 2, 0, &wt, &wp, err);
    if (s == WEFT_OK) s = arg(ctx, node, node->out[0], WEFT_DTYPE_F32, 2, T, &yt, &yp, err);
    if (s != WEFT_OK) return s;
    int64_t V = wt->shape[0], D = wt->shape[1];
    if (yt->shape[1] != D || ctx->data[node->in[1]].bytes < (uint64_t)(V * D) * 4)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "node %s: table and output disagree",
                              node->name);
    const int32_t *tok = tp;
    for (uint64_t t = 0; t < T; t++) {
        if (tok[t] < 0 || tok[t] >= V)
            return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                                  "node %s: token %d outside the table of %lld rows", node->name,
                                  tok[t], (long long)V);
        memcpy((float *)yp + t * D, (const float *)wp + tok[t] * D, (size_t)D * 4);
    }
    return WEFT_OK;
}

/* y = x / sqrt(mean(x^2) + eps) * w over groups of p.i[0] columns (0 = the whole row) */
static weft_status k_rmsnorm(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                             weft_error *err) {
    weft_status s = check_ctx(ctx, node, err);
    const weft_tensor *xt, *wt, *yt;
    void *xp, *wp, *yp;
    uint64_t T = ctx ? ctx->n_tokens : 0;
    if (s == WEFT_OK) s = arg(ctx, node, node->in[0], WEFT_DTYPE_F32, 2, T, &xt, &xp, err);
    if (s == WEFT_OK) s = arg(ctx, node, node->in[1], WEFT_DTYPE_F32, 1, 0, &wt, &wp, err);
    if (s == WEFT_OK) s = arg(ctx, node, node->out[0], WEFT_DTYPE_F32, 2, T, &yt, &yp, err);
    if (s != WEFT_OK) return s;
    int64_t D = xt->shape[1], G = node->p.i[0] > 0 ? node->p.i[0] : D;
    if (yt->shape[1] != D || D % G || ctx->data[node->in[1]].bytes < (uint64_t)G * 4)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "node %s: expected a group size dividing %lld and a weight of it",
                              node->name, (long long)D);
    const float *x = xp, *w = wp;
    float *y = yp;
    for (uint64_t r = 0; r < T * (uint64_t)(D / G); r++) {
        double ss = 0;
        for (int64_t d = 0; d < G; d++)
            ss += (double)x[r * G + d] * x[r * G + d];
        float inv = (float)(1.0 / sqrt(ss / (double)G + node->p.f[0]));
        for (int64_t d = 0; d < G; d++)
            y[r * G + d] = x[r * G + d] * inv * w[d];
    }
    return WEFT_OK;
}

/* logits[r] = w x[logit_rows[r]] for the step's logit rows (the host batch's list) */
static weft_status k_lm_head(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                             weft_error *err) {
    weft_status s = check_ctx(ctx, node, err);
    if (s == WEFT_OK && (!ctx->batch || (ctx->batch->n_logits && !ctx->batch->logit_rows)))
        s = weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "node %s: no host batch", node->name);
    const weft_tensor *xt, *wt, *yt;
    void *xp, *wp, *yp;
    uint64_t T = ctx ? ctx->n_tokens : 0, R = s == WEFT_OK ? ctx->batch->n_logits : 0;
    if (s == WEFT_OK) s = arg(ctx, node, node->in[0], WEFT_DTYPE_F32, 2, T, &xt, &xp, err);
    if (s == WEFT_OK) s = arg(ctx, node, node->in[1], WEFT_DTYPE_F32, 2, 0, &wt, &wp, err);
    if (s == WEFT_OK) s = arg(ctx, node, node->out[0], WEFT_DTYPE_F32, 2, R, &yt, &yp, err);
    if (s != WEFT_OK) return s;
    int64_t V = wt->shape[0], D = wt->shape[1];
    if (xt->shape[1] != D || yt->shape[1] != V || (int64_t)R > yt->shape[0] ||
        ctx->data[node->in[1]].bytes < (uint64_t)(V * D) * 4)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "node %s: hidden, weight and logits shapes disagree", node->name);
    const float *x = xp, *w = wp;
    float *y = yp;
    for (uint64_t r = 0; r < R; r++) {
        int32_t row = ctx->batch->logit_rows[r];
        if (row < 0 || (uint64_t)row >= T)
            return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                                  "node %s: logit row %d outside the step's %llu rows", node->name,
                                  row, (unsigned long long)T);
        for (int64_t v = 0; v < V; v++) {
            double acc = 0;
            for (int64_t d = 0; d < D; d++)
                acc += (double)w[v * D + d] * x[row * D + d];
            y[r * V + v] = (float)acc;
        }
    }
    return WEFT_OK;
}

static weft_status be_register(void *st, const weft_ops_service *ops, weft_error *err) {
    if (!ops || !ops->add)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "register_ops: no ops service");
    static const struct {
        uint32_t op;
        weft_op_fn run;
    } kernels[] = {
        {WEFT_OP_EMBED, k_embed}, {WEFT_OP_RMSNORM, k_rmsnorm}, {WEFT_OP_LM_HEAD, k_lm_head}};
    for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++) {
        weft_op_impl impl;
        memset(&impl, 0, sizeof(impl));
        impl.size = sizeof(impl);
        impl.op = kernels[i].op;
        snprintf(impl.backend, sizeof(impl.backend), "cpu");
        impl.dtype = WEFT_DTYPE_F32;
        impl.run = kernels[i].run;
        weft_status s = ops->add(ops->self, &impl, err);
        if (s != WEFT_OK) return s;
    }
    return WEFT_OK;
}

static weft_status be_alloc(void *st, uint64_t bytes, uint32_t memory, weft_buffer *out,
                            weft_error *err) {
    if (!out) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "alloc: out is NULL");
    memset(out, 0, sizeof(*out));
    out->ptr = calloc(1, bytes ? (size_t)bytes : 1);
    if (!out->ptr)
        return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "alloc: %llu bytes",
                              (unsigned long long)bytes);
    out->bytes = bytes;
    out->memory = memory;
    return WEFT_OK;
}

static void be_free(void *st, weft_buffer *buf) {
    if (!buf) return;
    free(buf->ptr);
    buf->ptr = NULL;
    buf->bytes = 0;
}

static int in_range(const weft_buffer *b, uint64_t off, uint64_t n) {
    return b && b->ptr && off <= b->bytes && n <= b->bytes - off;
}

static weft_status be_copy(void *st, weft_buffer *dst, uint64_t dst_off, const weft_buffer *src,
                           uint64_t src_off, uint64_t bytes, void *stream, weft_error *err) {
    if (!in_range(dst, dst_off, bytes) || !in_range(src, src_off, bytes))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "copy: range outside a buffer");
    memmove((char *)dst->ptr + dst_off, (const char *)src->ptr + src_off, (size_t)bytes);
    return WEFT_OK;
}

static weft_status be_upload(void *st, weft_buffer *dst, uint64_t dst_off, const void *src,
                             uint64_t bytes, weft_error *err) {
    if (!in_range(dst, dst_off, bytes) || (!src && bytes))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "upload: range outside the buffer");
    memcpy((char *)dst->ptr + dst_off, src, (size_t)bytes);
    return WEFT_OK;
}

static weft_status be_download(void *st, void *dst, const weft_buffer *src, uint64_t src_off,
                               uint64_t bytes, weft_error *err) {
    if (!in_range(src, src_off, bytes) || (!dst && bytes))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "download: range outside the buffer");
    memcpy(dst, (const char *)src->ptr + src_off, (size_t)bytes);
    return WEFT_OK;
}

static weft_status be_sync(void *st, void *stream, weft_error *err) {
    return WEFT_OK; /* every operation above is synchronous */
}

static void *be_stream(void *st) {
    return NULL;
}

static const weft_backend_vtable be_vt = {
    .size = sizeof(weft_backend_vtable),
    .device_info = be_info,
    .register_ops = be_register,
    .alloc = be_alloc,
    .free = be_free,
    .copy = be_copy,
    .upload = be_upload,
    .download = be_download,
    .synchronize = be_sync,
    .stream = be_stream,
};

static const weft_plugin_descriptor be_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = "0.0.1",
    .kind = WEFT_KIND_BACKEND,
    .slots = WEFT_SLOT_BACKEND,
    .create = be_create,
    .backend = &be_vt,
};

WEFT_SDK_ENTRY(be_desc, 1, 1)
