/* Matrix ops of the cpu backend: LINEAR (y = x w^T + b), LM_HEAD (the same product for the
 * step's logit rows only) and EMBED (row gather). Weights are f32, bf16 or f16 in the PyTorch
 * layout (N, K), activations f32, and every product accumulates in f32 lanes.
 *
 * Kernel shape. With one row (decode) the product is a GEMV bound by reading the weights once:
 * each pass takes one x row against four weight rows, so x stays in registers and four
 * independent accumulators hide the FMA latency. With more rows (prefill, verification) a 4x2
 * register tile (4 rows of x against 2 weight rows) reuses every weight load four times; the K
 * axis is cut into blocks so the weight panel of a task stays in L2 while row blocks stream past
 * it. Work is split over output columns (and over rows when there are few columns) into tasks
 * for the pool; tiny products run inline because waking workers would cost more. */
#include "cpu.h"
#include "cpu_simd.h"

#define CPU_KBLOCK 512        /* K elements per block in the multi-row path */
#define CPU_INLINE_MACS 65536 /* below this many multiply-adds a product runs inline */
#define CPU_TASKS_PER_THREAD 4

typedef struct cpu_lin_job {
    const float *x;
    int64_t x_stride;
    const int32_t *rows; /* x row of output row i; NULL = row i */
    int64_t n_rows;
    const void *w;
    uint32_t w_dtype;
    uint32_t b_dtype;
    const void *bias; /* (N) or NULL */
    float *y;
    int64_t y_stride;
    int64_t N, K;
    int64_t n_chunk, r_chunk; /* outputs and rows per task */
    uint32_t n_tasks_n;       /* tasks along N */
} cpu_lin_job;

CPU_INLINE const float *cpu_lin_x(const cpu_lin_job *j, int64_t r) {
    return j->x + (j->rows ? (int64_t)j->rows[r] : r) * j->x_stride;
}

CPU_INLINE float cpu_lin_bias(const cpu_lin_job *j, int64_t n) {
    return j->bias ? cpu_load(j->bias, n, j->b_dtype) : 0.0f;
}

/* One x row against weight rows [n0, n1), whole K: the GEMV path. */
CPU_INLINE void cpu_lin_row(const cpu_lin_job *j, const float *x, float *y, int64_t n0, int64_t n1,
                            uint32_t dt) {
    const int64_t K = j->K, K8 = K & ~(int64_t)7;
    const size_t es = dt == WEFT_DTYPE_F32 ? 4 : 2;
    const char *w = j->w;
    int64_t n = n0;
    /* Eight weight rows at a time: eight independent FMA chains cover the FMA latency. */
    for (; n + 8 <= n1; n += 8) {
        const char *wr = w + (size_t)n * K * es;
        const size_t rs = (size_t)K * es;
        cpu_v8f a[8];
        for (int i = 0; i < 8; i++)
            a[i] = cpu_v8_zero();
        for (int64_t k = 0; k < K8; k += 8) {
            cpu_v8f xv = cpu_v8_ld(x + k);
            for (int i = 0; i < 8; i++)
                a[i] += xv * cpu_v8_load(wr + i * rs, k, dt);
        }
        for (int i = 0; i < 8; i++) {
            float s = cpu_v8_sum(a[i]);
            for (int64_t k = K8; k < K; k++)
                s += x[k] * cpu_load(wr + i * rs, k, dt);
            y[n + i] = s + cpu_lin_bias(j, n + i);
        }
    }
    for (; n + 4 <= n1; n += 4) {
        const void *w0 = w + (size_t)n * K * es, *w1 = w + (size_t)(n + 1) * K * es;
        const void *w2 = w + (size_t)(n + 2) * K * es, *w3 = w + (size_t)(n + 3) * K * es;
        cpu_v8f a0 = cpu_v8_zero(), a1 = cpu_v8_zero(), a2 = cpu_v8_zero(), a3 = cpu_v8_zero();
        for (int64_t k = 0; k < K8; k += 8) {
            cpu_v8f xv = cpu_v8_ld(x + k);
            a0 += xv * cpu_v8_load(w0, k, dt);
            a1 += xv * cpu_v8_load(w1, k, dt);
            a2 += xv * cpu_v8_load(w2, k, dt);
            a3 += xv * cpu_v8_load(w3, k, dt);
        }
        float s0 = cpu_v8_sum(a0), s1 = cpu_v8_sum(a1), s2 = cpu_v8_sum(a2), s3 = cpu_v8_sum(a3);
        for (int64_t k = K8; k < K; k++) {
            s0 += x[k] * cpu_load(w0, k, dt);
            s1 += x[k] * cpu_load(w1, k, dt);
            s2 += x[k] * cpu_load(w2, k, dt);
            s3 += x[k] * cpu_load(w3, k, dt);
        }
        y[n] = s0 + cpu_lin_bias(j, n);
        y[n + 1] = s1 + cpu_lin_bias(j, n + 1);
        y[n + 2] = s2 + cpu_lin_bias(j, n + 2);
        y[n + 3] = s3 + cpu_lin_bias(j, n + 3);
    }
    for (; n < n1; n++) {
        const void *w0 = w + (size_t)n * K * es;
        cpu_v8f a0 = cpu_v8_zero();
        for (int64_t k = 0; k < K8; k += 8)
            a0 += cpu_v8_ld(x + k) * cpu_v8_load(w0, k, dt);
        float s0 = cpu_v8_sum(a0);
        for (int64_t k = K8; k < K; k++)
            s0 += x[k] * cpu_load(w0, k, dt);
        y[n] = s0 + cpu_lin_bias(j, n);
    }
}

/* Partial sums over K block [k0, k1) for four rows against weight rows [n0, n1); the first
 * block stores (with the bias), later ones add. */
CPU_INLINE void cpu_lin_block4(const cpu_lin_job *j, int64_t r, int64_t n0, int64_t n1, int64_t k0,
                               int64_t k1, uint32_t dt) {
    const int64_t K = j->K;
    const int64_t k8 = k0 + ((k1 - k0) & ~(int64_t)7);
    const size_t es = dt == WEFT_DTYPE_F32 ? 4 : 2;
    const char *w = j->w;
    const float *x0 = cpu_lin_x(j, r), *x1 = cpu_lin_x(j, r + 1);
    const float *x2 = cpu_lin_x(j, r + 2), *x3 = cpu_lin_x(j, r + 3);
    float *y0 = j->y + r * j->y_stride, *y1 = y0 + j->y_stride;
    float *y2 = y1 + j->y_stride, *y3 = y2 + j->y_stride;
    const int first = k0 == 0;
    int64_t n = n0;
    for (; n + 2 <= n1; n += 2) {
        const void *wa = w + (size_t)n * K * es, *wb = w + (size_t)(n + 1) * K * es;
        cpu_v8f a0 = cpu_v8_zero(), a1 = cpu_v8_zero(), a2 = cpu_v8_zero(), a3 = cpu_v8_zero();
        cpu_v8f b0 = cpu_v8_zero(), b1 = cpu_v8_zero(), b2 = cpu_v8_zero(), b3 = cpu_v8_zero();
        for (int64_t k = k0; k < k8; k += 8) {
            cpu_v8f va = cpu_v8_load(wa, k, dt), vb = cpu_v8_load(wb, k, dt);
            cpu_v8f v0 = cpu_v8_ld(x0 + k), v1 = cpu_v8_ld(x1 + k);
            cpu_v8f v2 = cpu_v8_ld(x2 + k), v3 = cpu_v8_ld(x3 + k);
            a0 += v0 * va;
            a1 += v1 * va;
            a2 += v2 * va;
            a3 += v3 * va;
            b0 += v0 * vb;
            b1 += v1 * vb;
            b2 += v2 * vb;
            b3 += v3 * vb;
        }
        float sa[4] = {cpu_v8_sum(a0), cpu_v8_sum(a1), cpu_v8_sum(a2), cpu_v8_sum(a3)};
        float sb[4] = {cpu_v8_sum(b0), cpu_v8_sum(b1), cpu_v8_sum(b2), cpu_v8_sum(b3)};
        for (int64_t k = k8; k < k1; k++) {
            float wka = cpu_load(wa, k, dt), wkb = cpu_load(wb, k, dt);
            sa[0] += x0[k] * wka, sb[0] += x0[k] * wkb;
            sa[1] += x1[k] * wka, sb[1] += x1[k] * wkb;
            sa[2] += x2[k] * wka, sb[2] += x2[k] * wkb;
            sa[3] += x3[k] * wka, sb[3] += x3[k] * wkb;
        }
        if (first) {
            float ba = cpu_lin_bias(j, n), bb = cpu_lin_bias(j, n + 1);
            y0[n] = sa[0] + ba, y0[n + 1] = sb[0] + bb;
            y1[n] = sa[1] + ba, y1[n + 1] = sb[1] + bb;
            y2[n] = sa[2] + ba, y2[n + 1] = sb[2] + bb;
            y3[n] = sa[3] + ba, y3[n + 1] = sb[3] + bb;
        } else {
            y0[n] += sa[0], y0[n + 1] += sb[0];
            y1[n] += sa[1], y1[n + 1] += sb[1];
            y2[n] += sa[2], y2[n + 1] += sb[2];
            y3[n] += sa[3], y3[n + 1] += sb[3];
        }
    }
    for (; n < n1; n++) {
        const void *wa = w + (size_t)n * K * es;
        cpu_v8f a0 = cpu_v8_zero(), a1 = cpu_v8_zero(), a2 = cpu_v8_zero(), a3 = cpu_v8_zero();
        for (int64_t k = k0; k < k8; k += 8) {
            cpu_v8f va = cpu_v8_load(wa, k, dt);
            a0 += cpu_v8_ld(x0 + k) * va;
            a1 += cpu_v8_ld(x1 + k) * va;
            a2 += cpu_v8_ld(x2 + k) * va;
            a3 += cpu_v8_ld(x3 + k) * va;
        }
        float s[4] = {cpu_v8_sum(a0), cpu_v8_sum(a1), cpu_v8_sum(a2), cpu_v8_sum(a3)};
        for (int64_t k = k8; k < k1; k++) {
            float wk = cpu_load(wa, k, dt);
            s[0] += x0[k] * wk, s[1] += x1[k] * wk, s[2] += x2[k] * wk, s[3] += x3[k] * wk;
        }
        float b = first ? cpu_lin_bias(j, n) : 0.0f;
        if (first) {
            y0[n] = s[0] + b, y1[n] = s[1] + b, y2[n] = s[2] + b, y3[n] = s[3] + b;
        } else {
            y0[n] += s[0], y1[n] += s[1], y2[n] += s[2], y3[n] += s[3];
        }
    }
}

/* Rows [r0, r1) x outputs [n0, n1). */
CPU_INLINE void cpu_lin_tile(const cpu_lin_job *j, int64_t r0, int64_t r1, int64_t n0, int64_t n1,
                             uint32_t dt) {
    int64_t r4 = r0 + ((r1 - r0) & ~(int64_t)3);
    if (r4 > r0) {
        for (int64_t k0 = 0; k0 < j->K || k0 == 0; k0 += CPU_KBLOCK) {
            int64_t k1 = k0 + CPU_KBLOCK < j->K ? k0 + CPU_KBLOCK : j->K;
            for (int64_t r = r0; r < r4; r += 4)
                cpu_lin_block4(j, r, n0, n1, k0, k1, dt);
        }
    }
    for (int64_t r = r4; r < r1; r++)
        cpu_lin_row(j, cpu_lin_x(j, r), j->y + r * j->y_stride, n0, n1, dt);
}

CPU_HOT static void cpu_lin_task(void *arg, uint32_t task, uint32_t worker) {
    const cpu_lin_job *j = arg;
    int64_t tn = task % j->n_tasks_n, tr = task / j->n_tasks_n;
    int64_t n0 = tn * j->n_chunk, n1 = n0 + j->n_chunk < j->N ? n0 + j->n_chunk : j->N;
    int64_t r0 = tr * j->r_chunk, r1 = r0 + j->r_chunk < j->n_rows ? r0 + j->r_chunk : j->n_rows;
    if (n0 >= n1 || r0 >= r1) return;
    switch (j->w_dtype) {
    case WEFT_DTYPE_F32:
        cpu_lin_tile(j, r0, r1, n0, n1, WEFT_DTYPE_F32);
        break;
    case WEFT_DTYPE_BF16:
        cpu_lin_tile(j, r0, r1, n0, n1, WEFT_DTYPE_BF16);
        break;
    default:
        cpu_lin_tile(j, r0, r1, n0, n1, WEFT_DTYPE_F16);
        break;
    }
}

/* Splits the product into tasks and runs them. */
static void cpu_lin_run(cpu_backend *b, cpu_lin_job *j) {
    uint32_t threads = cpu_pool_threads(b->pool);
    double macs = (double)j->n_rows * (double)j->N * (double)j->K;
    if (threads <= 1 || macs < CPU_INLINE_MACS) {
        j->n_chunk = j->N;
        j->r_chunk = j->n_rows;
        j->n_tasks_n = 1;
        cpu_lin_task(j, 0, 0);
        return;
    }
    int64_t want = (int64_t)threads * CPU_TASKS_PER_THREAD;
    int64_t n_chunk = (j->N + want - 1) / want;
    n_chunk = (n_chunk + 3) & ~(int64_t)3;
    if (n_chunk < 8) n_chunk = 8;
    int64_t tasks_n = (j->N + n_chunk - 1) / n_chunk;
    int64_t tasks_r = 1, r_chunk = j->n_rows;
    if (tasks_n < want && j->n_rows >= 8) {
        tasks_r = (want + tasks_n - 1) / tasks_n;
        r_chunk = (j->n_rows + tasks_r - 1) / tasks_r;
        r_chunk = (r_chunk + 3) & ~(int64_t)3;
        tasks_r = (j->n_rows + r_chunk - 1) / r_chunk;
    }
    j->n_chunk = n_chunk;
    j->r_chunk = r_chunk;
    j->n_tasks_n = (uint32_t)tasks_n;
    cpu_pool_run(b->pool, cpu_lin_task, j, (uint32_t)(tasks_n * tasks_r));
}

/* ---- LINEAR ------------------------------------------------------------------------------ */
static weft_status cpu_linear_check(const weft_graph *g, const weft_node *node, weft_error *err) {
    if (node->n_in < 2 || node->n_in > 3 || node->n_out != 1)
        return cpu_node_error(err, node,
                              "expected 2-3 inputs (x, w [, bias]) and 1 output, got "
                              "%u inputs and %u outputs",
                              node->n_in, node->n_out);
    const weft_tensor *x = cpu_tensor(g, node, node->in[0], "input x", err);
    const weft_tensor *w = x ? cpu_tensor(g, node, node->in[1], "weight", err) : NULL;
    const weft_tensor *y = w ? cpu_tensor(g, node, node->out[0], "output y", err) : NULL;
    if (!y) return WEFT_ERR_INVALID;
    if (cpu_check(x, node, "input x", WEFT_DTYPE_F32, 2, err) ||
        cpu_check(w, node, "weight", 0, 2, err) ||
        cpu_check(y, node, "output y", WEFT_DTYPE_F32, 2, err))
        return WEFT_ERR_INVALID;
    if (!cpu_is_float(w->dtype) || w->layout[0] != '\0')
        return cpu_node_error(err, node, "weight '%s': expected dense f32, bf16 or f16, got %s%s%s",
                              w->name, cpu_dtype_name(w->dtype), w->layout[0] ? " layout " : "",
                              w->layout);
    int64_t N = w->shape[0], K = w->shape[1];
    if (x->shape[1] != K)
        return cpu_node_error(err, node, "input x '%s' has %lld columns, weight '%s' expects %lld",
                              x->name, (long long)x->shape[1], w->name, (long long)K);
    if (y->shape[1] != N || y->shape[0] != x->shape[0])
        return cpu_node_error(err, node,
                              "output y '%s': expected shape (%lld, %lld), got (%lld, "
                              "%lld)",
                              y->name, (long long)x->shape[0], (long long)N, (long long)y->shape[0],
                              (long long)y->shape[1]);
    if (node->in[0] == node->out[0])
        return cpu_node_error(err, node, "output y must not alias input x");
    if (node->n_in == 3 && node->in[2] != WEFT_TENSOR_NONE) {
        const weft_tensor *bias = cpu_tensor(g, node, node->in[2], "bias", err);
        if (!bias || cpu_check(bias, node, "bias", 0, 1, err)) return WEFT_ERR_INVALID;
        if (!cpu_is_float(bias->dtype) || bias->shape[0] != N)
            return cpu_node_error(err, node,
                                  "bias '%s': expected %lld f32/bf16/f16 values, got "
                                  "%lld %s",
                                  bias->name, (long long)N, (long long)bias->shape[0],
                                  cpu_dtype_name(bias->dtype));
    }
    return WEFT_OK;
}

static int32_t cpu_linear_accepts(void *st, const weft_graph *g, const weft_node *node) {
    return g && node && cpu_linear_check(g, node, NULL) == WEFT_OK;
}

static weft_status cpu_linear_run(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                                  weft_error *err) {
    weft_status s = cpu_check_ctx(ctx, node, err);
    if (s || (s = cpu_linear_check(ctx->graph, node, err))) return s;
    const weft_graph *g = ctx->graph;
    const weft_tensor *x = &g->tensors[node->in[0]], *w = &g->tensors[node->in[1]];
    int64_t T = ctx->n_tokens, N = w->shape[0], K = w->shape[1];
    if (T > x->shape[0])
        return cpu_node_error(err, node, "n_tokens %lld exceeds the %lld rows of x '%s'",
                              (long long)T, (long long)x->shape[0], x->name);
    if (T == 0 || N == 0) return WEFT_OK;
    size_t ws = cpu_dtype_size(w->dtype);
    cpu_lin_job j = {0};
    j.x = cpu_data(ctx, node, node->in[0], (uint64_t)T * K * 4, "input x", err);
    j.w = j.x ? cpu_data(ctx, node, node->in[1], (uint64_t)N * K * ws, "weight", err) : NULL;
    j.y = j.w ? cpu_data(ctx, node, node->out[0], (uint64_t)T * N * 4, "output y", err) : NULL;
    if (!j.y) return WEFT_ERR_INVALID;
    if (node->n_in == 3 && node->in[2] != WEFT_TENSOR_NONE) {
        const weft_tensor *bias = &g->tensors[node->in[2]];
        j.b_dtype = bias->dtype;
        j.bias = cpu_data(ctx, node, node->in[2], (uint64_t)N * cpu_dtype_size(bias->dtype), "bias",
                          err);
        if (!j.bias) return WEFT_ERR_INVALID;
    }
    j.x_stride = K;
    j.n_rows = T;
    j.w_dtype = w->dtype;
    j.y_stride = N;
    j.N = N;
    j.K = K;
    cpu_lin_run(st, &j);
    return WEFT_OK;
}

/* ---- LM_HEAD ----------------------------------------------------------------------------- */
static weft_status cpu_lm_head_check(const weft_graph *g, const weft_node *node, weft_error *err) {
    if (node->n_in != 2 || node->n_out != 1)
        return cpu_node_error(err, node, "expected 2 inputs (x, w) and 1 output, got %u and %u",
                              node->n_in, node->n_out);
    const weft_tensor *x = cpu_tensor(g, node, node->in[0], "input x", err);
    const weft_tensor *w = x ? cpu_tensor(g, node, node->in[1], "weight", err) : NULL;
    const weft_tensor *y = w ? cpu_tensor(g, node, node->out[0], "logits", err) : NULL;
    if (!y) return WEFT_ERR_INVALID;
    if (cpu_check(x, node, "input x", WEFT_DTYPE_F32, 2, err) ||
        cpu_check(w, node, "weight", 0, 2, err) ||
        cpu_check(y, node, "logits", WEFT_DTYPE_F32, 2, err))
        return WEFT_ERR_INVALID;
    if (!cpu_is_float(w->dtype) || w->layout[0] != '\0')
        return cpu_node_error(err, node, "weight '%s': expected dense f32, bf16 or f16, got %s",
                              w->name, cpu_dtype_name(w->dtype));
    if (x->shape[1] != w->shape[1] || y->shape[1] != w->shape[0])
        return cpu_node_error(err, node,
                              "x (%lld cols), w (%lld, %lld), logits (%lld cols) do "
                              "not agree",
                              (long long)x->shape[1], (long long)w->shape[0],
                              (long long)w->shape[1], (long long)y->shape[1]);
    return WEFT_OK;
}

static int32_t cpu_lm_head_accepts(void *st, const weft_graph *g, const weft_node *node) {
    return g && node && cpu_lm_head_check(g, node, NULL) == WEFT_OK;
}

static weft_status cpu_lm_head_run(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                                   weft_error *err) {
    weft_status s = cpu_check_ctx(ctx, node, err);
    if (s || (s = cpu_lm_head_check(ctx->graph, node, err))) return s;
    const weft_graph *g = ctx->graph;
    const weft_tensor *x = &g->tensors[node->in[0]], *w = &g->tensors[node->in[1]];
    const weft_tensor *y = &g->tensors[node->out[0]];
    const weft_batch *batch = ctx->batch;
    if (!batch) return cpu_node_error(err, node, "expected the step's batch, got NULL");
    int64_t T = ctx->n_tokens, R = batch->n_logits, V = w->shape[0], D = w->shape[1];
    if (T > x->shape[0] || R > y->shape[0])
        return cpu_node_error(err, node,
                              "step has %lld rows and %lld logit rows, tensors hold "
                              "%lld and %lld",
                              (long long)T, (long long)R, (long long)x->shape[0],
                              (long long)y->shape[0]);
    if (R == 0 || V == 0) return WEFT_OK;
    if (!batch->logit_rows) return cpu_node_error(err, node, "batch has no logit_rows");
    for (int64_t i = 0; i < R; i++)
        if (batch->logit_rows[i] < 0 || batch->logit_rows[i] >= T)
            return cpu_node_error(err, node, "logit row %lld is %d, expected 0..%lld", (long long)i,
                                  batch->logit_rows[i], (long long)T - 1);
    cpu_lin_job j = {0};
    j.x = cpu_data(ctx, node, node->in[0], (uint64_t)T * D * 4, "input x", err);
    j.w = j.x ? cpu_data(ctx, node, node->in[1], (uint64_t)V * D * cpu_dtype_size(w->dtype),
                         "weight", err)
              : NULL;
    j.y = j.w ? cpu_data(ctx, node, node->out[0], (uint64_t)R * V * 4, "logits", err) : NULL;
    if (!j.y) return WEFT_ERR_INVALID;
    j.x_stride = D;
    j.rows = batch->logit_rows;
    j.n_rows = R;
    j.w_dtype = w->dtype;
    j.y_stride = V;
    j.N = V;
    j.K = D;
    cpu_lin_run(st, &j);
    return WEFT_OK;
}

/* ---- EMBED ------------------------------------------------------------------------------- */
static weft_status cpu_embed_check(const weft_graph *g, const weft_node *node, weft_error *err) {
    if (node->n_in != 2 || node->n_out != 1)
        return cpu_node_error(err, node,
                              "expected 2 inputs (tokens, table) and 1 output, got %u "
                              "and %u",
                              node->n_in, node->n_out);
    const weft_tensor *tok = cpu_tensor(g, node, node->in[0], "tokens", err);
    const weft_tensor *tab = tok ? cpu_tensor(g, node, node->in[1], "table", err) : NULL;
    const weft_tensor *y = tab ? cpu_tensor(g, node, node->out[0], "output x", err) : NULL;
    if (!y) return WEFT_ERR_INVALID;
    if (cpu_check(tok, node, "tokens", WEFT_DTYPE_I32, 1, err) ||
        cpu_check(tab, node, "table", 0, 2, err) ||
        cpu_check(y, node, "output x", WEFT_DTYPE_F32, 2, err))
        return WEFT_ERR_INVALID;
    if (!cpu_is_float(tab->dtype) || tab->layout[0] != '\0')
        return cpu_node_error(err, node, "table '%s': expected dense f32, bf16 or f16, got %s",
                              tab->name, cpu_dtype_name(tab->dtype));
    if (y->shape[1] != tab->shape[1] || y->shape[0] != tok->shape[0])
        return cpu_node_error(err, node,
                              "output '%s': expected shape (%lld, %lld), got (%lld, "
                              "%lld)",
                              y->name, (long long)tok->shape[0], (long long)tab->shape[1],
                              (long long)y->shape[0], (long long)y->shape[1]);
    return WEFT_OK;
}

static int32_t cpu_embed_accepts(void *st, const weft_graph *g, const weft_node *node) {
    return g && node && cpu_embed_check(g, node, NULL) == WEFT_OK;
}

static weft_status cpu_embed_run(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                                 weft_error *err) {
    weft_status s = cpu_check_ctx(ctx, node, err);
    if (s || (s = cpu_embed_check(ctx->graph, node, err))) return s;
    const weft_graph *g = ctx->graph;
    const weft_tensor *tok = &g->tensors[node->in[0]], *tab = &g->tensors[node->in[1]];
    int64_t T = ctx->n_tokens, V = tab->shape[0], D = tab->shape[1];
    if (T > tok->shape[0])
        return cpu_node_error(err, node, "n_tokens %lld exceeds the %lld rows of tokens",
                              (long long)T, (long long)tok->shape[0]);
    const int32_t *ids = cpu_data(ctx, node, node->in[0], (uint64_t)T * 4, "tokens", err);
    const char *table = ids ? cpu_data(ctx, node, node->in[1],
                                       (uint64_t)V * D * cpu_dtype_size(tab->dtype), "table", err)
                            : NULL;
    float *y =
        table ? cpu_data(ctx, node, node->out[0], (uint64_t)T * D * 4, "output x", err) : NULL;
    if (!y) return WEFT_ERR_INVALID;
    for (int64_t t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= V)
            return cpu_node_error(err, node,
                                  "token %d at row %lld is outside the vocabulary "
                                  "(0..%lld)",
                                  ids[t], (long long)t, (long long)V - 1);
    size_t es = cpu_dtype_size(tab->dtype);
    for (int64_t t = 0; t < T; t++) {
        const void *row = table + (size_t)ids[t] * D * es;
        float *out = y + t * D;
        if (tab->dtype == WEFT_DTYPE_F32)
            memcpy(out, row, (size_t)D * 4);
        else if (tab->dtype == WEFT_DTYPE_BF16)
            for (int64_t d = 0; d < D; d++)
                out[d] = cpu_load(row, d, WEFT_DTYPE_BF16);
        else
            for (int64_t d = 0; d < D; d++)
                out[d] = cpu_load(row, d, WEFT_DTYPE_F16);
    }
    return WEFT_OK;
}

weft_status cpu_register_linear(cpu_backend *b, const weft_ops_service *ops, weft_error *err) {
    static const uint32_t dtypes[] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    weft_status s = WEFT_OK;
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]) && s == WEFT_OK; i++) {
        s = cpu_add_impl(ops, b, WEFT_OP_LINEAR, dtypes[i], "", cpu_linear_run, cpu_linear_accepts,
                         err);
        if (s == WEFT_OK)
            s = cpu_add_impl(ops, b, WEFT_OP_LM_HEAD, dtypes[i], "", cpu_lm_head_run,
                             cpu_lm_head_accepts, err);
        if (s == WEFT_OK)
            s = cpu_add_impl(ops, b, WEFT_OP_EMBED, dtypes[i], "", cpu_embed_run, cpu_embed_accepts,
                             err);
    }
    return s;
}
