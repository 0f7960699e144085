/* Row-wise ops of the cpu backend: RMSNORM (whole row or per group, e.g. per-head q/k norm),
 * ADD_RMSNORM, ROPE, SWIGLU, ADD, ACTIVATION, SCALE, COPY and SPLIT. Activations are f32 (COPY
 * also converts to and from bf16/f16); norm weights may be f32, bf16 or f16 as the checkpoint
 * stores them. Each op is cheap next to the matrix products, so rows are split across the pool
 * only when a step holds enough elements to repay waking the workers; a decode step runs every
 * one of them inline. Outputs may alias inputs element for element (in-place use is safe)
 * except where a check says otherwise. */
#include <math.h>

#include "cpu.h"
#include "cpu_simd.h"

#define CPU_ROWS_INLINE_ELEMS 65536 /* below this many elements an op runs inline */
#define CPU_ROPE_MAX_PAIRS 2048     /* rotary dims / 2 held on the stack */

/* ---- row-parallel runner ----------------------------------------------------------------- */
typedef struct cpu_rows_job {
    void (*rows)(const void *job, int64_t r0, int64_t r1);
    const void *job;
    int64_t n_rows, chunk;
} cpu_rows_job;

static void cpu_rows_task(void *arg, uint32_t task, uint32_t worker) {
    const cpu_rows_job *j = arg;
    int64_t r0 = (int64_t)task * j->chunk;
    int64_t r1 = r0 + j->chunk < j->n_rows ? r0 + j->chunk : j->n_rows;
    if (r0 < r1) j->rows(j->job, r0, r1);
}

static void cpu_rows_run(cpu_backend *b, void (*rows)(const void *, int64_t, int64_t),
                         const void *job, int64_t n_rows, int64_t row_elems) {
    uint32_t threads = cpu_pool_threads(b->pool);
    if (n_rows <= 1 || threads <= 1 || (double)n_rows * (double)row_elems < CPU_ROWS_INLINE_ELEMS) {
        rows(job, 0, n_rows);
        return;
    }
    cpu_rows_job j = {rows, job, n_rows, 0};
    int64_t tasks = (int64_t)threads * 2 < n_rows ? (int64_t)threads * 2 : n_rows;
    j.chunk = (n_rows + tasks - 1) / tasks;
    cpu_pool_run(b->pool, cpu_rows_task, &j, (uint32_t)((n_rows + j.chunk - 1) / j.chunk));
}

/* Looks up node inputs/outputs, requiring f32 (or `dtype`) tensors with equal row counts. */
static weft_status cpu_same_rows(const weft_graph *g, const weft_node *node, const weft_tensor *a,
                                 const weft_tensor *b, const char *what, weft_error *err) {
    if (a->shape[0] != b->shape[0])
        return cpu_node_error(err, node, "%s '%s' has %lld rows, expected %lld like '%s'", what,
                              b->name, (long long)b->shape[0], (long long)a->shape[0], a->name);
    return WEFT_OK;
}

/* Every op's step preamble: the context, node check and row count; then the buffers. */
static weft_status cpu_rows_ready(const weft_exec_ctx *ctx, const weft_node *node,
                                  weft_status (*check)(const weft_graph *, const weft_node *,
                                                       weft_error *),
                                  weft_error *err) {
    weft_status s = cpu_check_ctx(ctx, node, err);
    if (s || (s = check(ctx->graph, node, err))) return s;
    const weft_tensor *x = &ctx->graph->tensors[node->in[0]];
    if ((int64_t)ctx->n_tokens > x->shape[0])
        return cpu_node_error(err, node, "n_tokens %u exceeds the %lld rows of '%s'", ctx->n_tokens,
                              (long long)x->shape[0], x->name);
    return WEFT_OK;
}

/* ---- RMSNORM and ADD_RMSNORM ------------------------------------------------------------- */
typedef struct cpu_norm_job {
    const float *x, *res; /* res: NULL for plain rmsnorm */
    const void *w;
    uint32_t w_dtype;
    float *y, *r;
    int64_t D, group;
    float eps;
} cpu_norm_job;

CPU_INLINE void cpu_norm_group(const float *x, const void *w, uint32_t wdt, float *y, int64_t n,
                               float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * inv * cpu_load(w, i, wdt);
}

static void cpu_norm_rows(const void *arg, int64_t r0, int64_t r1) {
    const cpu_norm_job *j = arg;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->D;
        float *y = j->y + r * j->D;
        if (j->res) {
            float *s = j->r + r * j->D;
            const float *res = j->res + r * j->D;
            for (int64_t i = 0; i < j->D; i++)
                s[i] = x[i] + res[i];
            x = s;
        }
        for (int64_t g0 = 0; g0 < j->D; g0 += j->group)
            cpu_norm_group(x + g0, j->w, j->w_dtype, y + g0, j->group, j->eps);
    }
}

static weft_status cpu_rmsnorm_check(const weft_graph *g, const weft_node *node, weft_error *err) {
    int fused = node->op == WEFT_OP_ADD_RMSNORM;
    uint32_t n_in = fused ? 3 : 2, n_out = fused ? 2 : 1;
    if (node->n_in != n_in || node->n_out != n_out)
        return cpu_node_error(err, node, "expected %u inputs and %u outputs, got %u and %u", n_in,
                              n_out, node->n_in, node->n_out);
    const weft_tensor *x = cpu_tensor(g, node, node->in[0], "input x", err);
    if (!x || cpu_check(x, node, "input x", WEFT_DTYPE_F32, 0, err)) return WEFT_ERR_INVALID;
    const weft_tensor *w = cpu_tensor(g, node, node->in[fused ? 2 : 1], "weight", err);
    if (!w || cpu_check(w, node, "weight", 0, 1, err)) return WEFT_ERR_INVALID;
    int64_t D = cpu_row_elems(x);
    int64_t group = fused ? 0 : node->p.i[0];
    if (group < 0 || (group > 0 && (D % group) != 0))
        return cpu_node_error(err, node, "group size %lld does not divide the row of %lld",
                              (long long)group, (long long)D);
    if (group == 0) group = D;
    if (!cpu_is_float(w->dtype) || w->shape[0] != group)
        return cpu_node_error(err, node,
                              "weight '%s': expected %lld f32/bf16/f16 values, got "
                              "%lld %s",
                              w->name, (long long)group, (long long)w->shape[0],
                              cpu_dtype_name(w->dtype));
    if (!(node->p.f[0] >= 0.0f) || isinf(node->p.f[0]))
        return cpu_node_error(err, node, "eps: expected a finite value >= 0, got %g",
                              (double)node->p.f[0]);
    const char *names[3] = {"output y", "output r", "residual"};
    uint32_t ids[3] = {node->out[0], fused ? node->out[1] : WEFT_TENSOR_NONE,
                       fused ? node->in[1] : WEFT_TENSOR_NONE};
    for (int i = 0; i < 3; i++) {
        if (ids[i] == WEFT_TENSOR_NONE && i > 0) continue;
        const weft_tensor *t = cpu_tensor(g, node, ids[i], names[i], err);
        if (!t || cpu_check(t, node, names[i], WEFT_DTYPE_F32, 0, err) ||
            cpu_same_rows(g, node, x, t, names[i], err))
            return WEFT_ERR_INVALID;
        if (cpu_row_elems(t) != D)
            return cpu_node_error(err, node, "%s '%s' has rows of %lld, expected %lld", names[i],
                                  t->name, (long long)cpu_row_elems(t), (long long)D);
    }
    if (fused && node->out[0] == node->out[1])
        return cpu_node_error(err, node, "outputs y and r must be different tensors");
    return WEFT_OK;
}

static int32_t cpu_rmsnorm_accepts(void *st, const weft_graph *g, const weft_node *node) {
    return g && node && cpu_rmsnorm_check(g, node, NULL) == WEFT_OK;
}

static weft_status cpu_rmsnorm_run(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                                   weft_error *err) {
    weft_status s = cpu_rows_ready(ctx, node, cpu_rmsnorm_check, err);
    if (s) return s;
    const weft_graph *g = ctx->graph;
    int fused = node->op == WEFT_OP_ADD_RMSNORM;
    const weft_tensor *x = &g->tensors[node->in[0]], *w = &g->tensors[node->in[fused ? 2 : 1]];
    int64_t T = ctx->n_tokens, D = cpu_row_elems(x);
    uint64_t bytes = (uint64_t)T * D * 4;
    cpu_norm_job j = {0};
    j.D = D;
    j.group = fused || node->p.i[0] == 0 ? D : node->p.i[0];
    j.eps = node->p.f[0];
    j.w_dtype = w->dtype;
    j.x = cpu_data(ctx, node, node->in[0], bytes, "input x", err);
    j.w = j.x ? cpu_data(ctx, node, node->in[fused ? 2 : 1],
                         (uint64_t)j.group * cpu_dtype_size(w->dtype), "weight", err)
              : NULL;
    j.y = j.w ? cpu_data(ctx, node, node->out[0], bytes, "output y", err) : NULL;
    if (!j.y) return WEFT_ERR_INVALID;
    if (fused) {
        j.res = cpu_data(ctx, node, node->in[1], bytes, "residual", err);
        j.r = j.res ? cpu_data(ctx, node, node->out[1], bytes, "output r", err) : NULL;
        if (!j.r) return WEFT_ERR_INVALID;
    }
    if (T > 0 && D > 0) cpu_rows_run(st, cpu_norm_rows, &j, T, D);
    return WEFT_OK;
}

/* ---- ROPE -------------------------------------------------------------------------------- */
typedef struct cpu_rope_job {
    const float *x;
    float *y;
    const int32_t *pos;
    const double *inv_freq; /* (pairs) */
    int64_t H, hd, pairs, layout;
} cpu_rope_job;

static void cpu_rope_rows(const void *arg, int64_t r0, int64_t r1) {
    const cpu_rope_job *j = arg;
    float cs[CPU_ROPE_MAX_PAIRS], sn[CPU_ROPE_MAX_PAIRS];
    const int64_t P = j->pairs, rot = 2 * P, hd = j->hd;
    for (int64_t r = r0; r < r1; r++) {
        double p = j->pos[r];
        for (int64_t i = 0; i < P; i++) {
            double a = p * j->inv_freq[i];
            cs[i] = (float)cos(a);
            sn[i] = (float)sin(a);
        }
        for (int64_t h = 0; h < j->H; h++) {
            const float *x = j->x + (r * j->H + h) * hd;
            float *y = j->y + (r * j->H + h) * hd;
            if (j->layout == 0) {
                for (int64_t i = 0; i < P; i++) {
                    float a = x[i], b = x[i + P];
                    y[i] = a * cs[i] - b * sn[i];
                    y[i + P] = b * cs[i] + a * sn[i];
                }
            } else {
                for (int64_t i = 0; i < P; i++) {
                    float a = x[2 * i], b = x[2 * i + 1];
                    y[2 * i] = a * cs[i] - b * sn[i];
                    y[2 * i + 1] = b * cs[i] + a * sn[i];
                }
            }
            if (y != x)
                for (int64_t d = rot; d < hd; d++)
                    y[d] = x[d];
        }
    }
}

static weft_status cpu_rope_check(const weft_graph *g, const weft_node *node, weft_error *err) {
    if (node->n_in != 2 || node->n_out != 1)
        return cpu_node_error(err, node,
                              "expected 2 inputs (x, positions) and 1 output, got %u "
                              "and %u",
                              node->n_in, node->n_out);
    const weft_op_params *p = &node->p;
    int64_t H = p->i[0], hd = p->i[1], rot = p->i[2] ? p->i[2] : p->i[1];
    if (H <= 0 || hd <= 0 || rot <= 0 || rot > hd || (rot & 1) || rot / 2 > CPU_ROPE_MAX_PAIRS)
        return cpu_node_error(err, node,
                              "params: expected n_heads > 0, head_dim > 0 and even "
                              "rotary dims <= head_dim (<= %d), got %lld, %lld, %lld",
                              2 * CPU_ROPE_MAX_PAIRS, (long long)H, (long long)hd, (long long)rot);
    if (p->i[3] != 0 && p->i[3] != 1)
        return cpu_node_error(err, node,
                              "layout: expected 0 (half-split) or 1 (interleaved), "
                              "got %lld",
                              (long long)p->i[3]);
    if (p->i[4] < 0 || p->i[4] > 2)
        return cpu_node_error(err, node,
                              "scaling: expected 0 (none), 1 (llama3) or 2 (linear), "
                              "got %lld",
                              (long long)p->i[4]);
    if (!(p->f[0] > 0.0f) || isinf(p->f[0]))
        return cpu_node_error(err, node, "theta: expected > 0, got %g", (double)p->f[0]);
    if (p->i[4] != 0 && (!(p->f[1] > 0.0f) || isinf(p->f[1])))
        return cpu_node_error(err, node, "scaling factor: expected > 0, got %g", (double)p->f[1]);
    if (p->i[4] == 1 && (!(p->f[2] > 0.0f) || !(p->f[3] > p->f[2]) || !(p->f[4] > 0.0f)))
        return cpu_node_error(err, node,
                              "llama3 scaling: expected 0 < low_freq < high_freq and "
                              "original max positions > 0, got %g, %g, %g",
                              (double)p->f[2], (double)p->f[3], (double)p->f[4]);
    const weft_tensor *x = cpu_tensor(g, node, node->in[0], "input x", err);
    const weft_tensor *ps = x ? cpu_tensor(g, node, node->in[1], "positions", err) : NULL;
    const weft_tensor *y = ps ? cpu_tensor(g, node, node->out[0], "output y", err) : NULL;
    if (!y || cpu_check(x, node, "input x", WEFT_DTYPE_F32, 0, err) ||
        cpu_check(ps, node, "positions", WEFT_DTYPE_I32, 1, err) ||
        cpu_check(y, node, "output y", WEFT_DTYPE_F32, 0, err) ||
        cpu_same_rows(g, node, x, ps, "positions", err) ||
        cpu_same_rows(g, node, x, y, "output y", err))
        return WEFT_ERR_INVALID;
    if (cpu_row_elems(x) != H * hd || cpu_row_elems(y) != H * hd)
        return cpu_node_error(err, node,
                              "expected rows of n_heads * head_dim = %lld, got x %lld "
                              "and y %lld",
                              (long long)(H * hd), (long long)cpu_row_elems(x),
                              (long long)cpu_row_elems(y));
    return WEFT_OK;
}

static int32_t cpu_rope_accepts(void *st, const weft_graph *g, const weft_node *node) {
    return g && node && cpu_rope_check(g, node, NULL) == WEFT_OK;
}

/* Inverse frequencies, with the checkpoint's scaling applied (HF's rope_type "llama3" and
 * "linear" definitions). */
static void cpu_rope_freqs(const weft_op_params *p, int64_t rot, double *inv) {
    const double theta = p->f[0], factor = p->f[1];
    /* theta^(-2i/rot) as powers of one ratio: one pow per call instead of one per pair; in
     * double the accumulated rounding stays far below float precision. */
    const double ratio = pow(theta, -2.0 / (double)rot);
    double base = 1.0;
    for (int64_t i = 0; i < rot / 2; i++, base *= ratio) {
        double f = base;
        if (p->i[4] == 2) {
            f /= factor;
        } else if (p->i[4] == 1) {
            const double low = p->f[2], high = p->f[3], orig = p->f[4];
            const double wavelen = 2.0 * M_PI / f;
            if (wavelen > orig / low) {
                f /= factor; /* long wavelengths: fully interpolated */
            } else if (wavelen >= orig / high) {
                double smooth = (orig / wavelen - low) / (high - low);
                f = (1.0 - smooth) * f / factor + smooth * f;
            } /* short wavelengths unchanged */
        }
        inv[i] = f;
    }
}

static weft_status cpu_rope_run(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                                weft_error *err) {
    weft_status s = cpu_rows_ready(ctx, node, cpu_rope_check, err);
    if (s) return s;
    const weft_op_params *p = &node->p;
    int64_t T = ctx->n_tokens, H = p->i[0], hd = p->i[1], rot = p->i[2] ? p->i[2] : hd;
    uint64_t bytes = (uint64_t)T * H * hd * 4;
    cpu_rope_job j = {0};
    j.x = cpu_data(ctx, node, node->in[0], bytes, "input x", err);
    j.pos = j.x ? cpu_data(ctx, node, node->in[1], (uint64_t)T * 4, "positions", err) : NULL;
    j.y = j.pos ? cpu_data(ctx, node, node->out[0], bytes, "output y", err) : NULL;
    if (!j.y) return WEFT_ERR_INVALID;
    double inv[CPU_ROPE_MAX_PAIRS];
    cpu_rope_freqs(p, rot, inv);
    j.inv_freq = inv;
    j.H = H;
    j.hd = hd;
    j.pairs = rot / 2;
    j.layout = p->i[3];
    if (T > 0) cpu_rows_run(st, cpu_rope_rows, &j, T, H * hd);
    return WEFT_OK;
}

/* ---- SWIGLU, ADD, ACTIVATION, SCALE ------------------------------------------------------ */
typedef struct cpu_ew_job {
    uint32_t op;
    int64_t kind; /* activation kind */
    const float *a, *b;
    float *y;
    int64_t N; /* elements per row */
    float scalar;
} cpu_ew_job;

CPU_INLINE float cpu_silu(float x) {
    return x / (1.0f + expf(-x));
}

/* y = silu(a) (* b when b is not NULL), eight lanes at a time with the vector exp. */
CPU_INLINE void cpu_silu_rows(const float *a, const float *b, float *y, int64_t n) {
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t i = 0; i < n8; i += 8) {
        cpu_v8f v = cpu_v8_ld(a + i);
        cpu_v8f s = v / (cpu_v8_exp(-v) + 1.0f);
        if (b) s *= cpu_v8_ld(b + i);
        cpu_v8_st(y + i, s);
    }
    for (int64_t i = n8; i < n; i++)
        y[i] = cpu_silu(a[i]) * (b ? b[i] : 1.0f);
}

CPU_HOT static void cpu_ew_rows(const void *arg, int64_t r0, int64_t r1) {
    const cpu_ew_job *j = arg;
    const int64_t i0 = r0 * j->N, i1 = r1 * j->N;
    const float *a = j->a, *b = j->b;
    float *y = j->y;
    switch (j->op) {
    case WEFT_OP_SWIGLU:
        cpu_silu_rows(a + i0, b + i0, y + i0, i1 - i0);
        break;
    case WEFT_OP_ADD:
        for (int64_t i = i0; i < i1; i++)
            y[i] = a[i] + b[i];
        break;
    case WEFT_OP_SCALE:
        for (int64_t i = i0; i < i1; i++)
            y[i] = a[i] * j->scalar;
        break;
    default: /* ACTIVATION */
        if (j->kind == 0)
            cpu_silu_rows(a + i0, NULL, y + i0, i1 - i0);
        else if (j->kind == 1)
            for (int64_t i = i0; i < i1; i++)
                y[i] = 0.5f * a[i] * (1.0f + erff(a[i] * (float)M_SQRT1_2));
        else
            for (int64_t i = i0; i < i1; i++)
                y[i] = a[i] > 0.0f ? a[i] : 0.0f;
        break;
    }
}

static weft_status cpu_ew_check(const weft_graph *g, const weft_node *node, weft_error *err) {
    uint32_t n_in = node->op == WEFT_OP_SWIGLU || node->op == WEFT_OP_ADD ? 2 : 1;
    if (node->n_in != n_in || node->n_out != 1)
        return cpu_node_error(err, node, "expected %u input(s) and 1 output, got %u and %u", n_in,
                              node->n_in, node->n_out);
    if (node->op == WEFT_OP_ACTIVATION && (node->p.i[0] < 0 || node->p.i[0] > 2))
        return cpu_node_error(err, node,
                              "activation kind: expected 0 (silu), 1 (gelu) or 2 "
                              "(relu), got %lld",
                              (long long)node->p.i[0]);
    if (node->op == WEFT_OP_SCALE && !isfinite(node->p.f[0]))
        return cpu_node_error(err, node, "scale: expected a finite value, got %g",
                              (double)node->p.f[0]);
    const weft_tensor *x = cpu_tensor(g, node, node->in[0], "input 0", err);
    if (!x || cpu_check(x, node, "input 0", WEFT_DTYPE_F32, 0, err)) return WEFT_ERR_INVALID;
    for (uint32_t i = 1; i <= n_in; i++) {
        const char *what = i < n_in ? "input 1" : "output";
        uint32_t id = i < n_in ? node->in[i] : node->out[0];
        const weft_tensor *t = cpu_tensor(g, node, id, what, err);
        if (!t || cpu_check(t, node, what, WEFT_DTYPE_F32, 0, err) ||
            cpu_same_rows(g, node, x, t, what, err))
            return WEFT_ERR_INVALID;
        if (cpu_row_elems(t) != cpu_row_elems(x))
            return cpu_node_error(err, node, "%s '%s' has rows of %lld, expected %lld", what,
                                  t->name, (long long)cpu_row_elems(t),
                                  (long long)cpu_row_elems(x));
    }
    return WEFT_OK;
}

static int32_t cpu_ew_accepts(void *st, const weft_graph *g, const weft_node *node) {
    return g && node && cpu_ew_check(g, node, NULL) == WEFT_OK;
}

static weft_status cpu_ew_run(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                              weft_error *err) {
    weft_status s = cpu_rows_ready(ctx, node, cpu_ew_check, err);
    if (s) return s;
    const weft_tensor *x = &ctx->graph->tensors[node->in[0]];
    int64_t T = ctx->n_tokens, N = cpu_row_elems(x);
    uint64_t bytes = (uint64_t)T * N * 4;
    cpu_ew_job j = {0};
    j.op = node->op;
    j.kind = node->p.i[0];
    j.scalar = node->p.f[0];
    j.N = N;
    j.a = cpu_data(ctx, node, node->in[0], bytes, "input 0", err);
    if (j.a && node->n_in == 2) j.b = cpu_data(ctx, node, node->in[1], bytes, "input 1", err);
    j.y = j.a && (node->n_in == 1 || j.b) ? cpu_data(ctx, node, node->out[0], bytes, "output", err)
                                          : NULL;
    if (!j.y) return WEFT_ERR_INVALID;
    if (T > 0 && N > 0) cpu_rows_run(st, cpu_ew_rows, &j, T, N);
    return WEFT_OK;
}

/* ---- COPY and SPLIT ---------------------------------------------------------------------- */
static weft_status cpu_copy_check(const weft_graph *g, const weft_node *node, weft_error *err) {
    if (node->n_in != 1 || node->n_out != 1)
        return cpu_node_error(err, node, "expected 1 input and 1 output, got %u and %u", node->n_in,
                              node->n_out);
    const weft_tensor *x = cpu_tensor(g, node, node->in[0], "input x", err);
    const weft_tensor *y = x ? cpu_tensor(g, node, node->out[0], "output y", err) : NULL;
    if (!y || cpu_check(x, node, "input x", 0, 0, err) ||
        cpu_check(y, node, "output y", 0, 0, err) || cpu_same_rows(g, node, x, y, "output y", err))
        return WEFT_ERR_INVALID;
    if (cpu_row_elems(x) != cpu_row_elems(y))
        return cpu_node_error(err, node, "rows of %lld elements cannot copy into rows of %lld",
                              (long long)cpu_row_elems(x), (long long)cpu_row_elems(y));
    int64_t target = node->p.i[0];
    if (target != 0 && target != y->dtype)
        return cpu_node_error(err, node, "output '%s' is %s, the target dtype param says %s",
                              y->name, cpu_dtype_name(y->dtype), cpu_dtype_name((uint32_t)target));
    int same = x->dtype == y->dtype && cpu_dtype_size(x->dtype) > 0;
    if (!same && !(cpu_is_float(x->dtype) && cpu_is_float(y->dtype)))
        return cpu_node_error(err, node,
                              "cannot convert %s to %s (expected equal dtypes or "
                              "f32/bf16/f16)",
                              cpu_dtype_name(x->dtype), cpu_dtype_name(y->dtype));
    if (x->layout[0] || y->layout[0] || node->in[0] == node->out[0])
        return cpu_node_error(err, node, "expected distinct dense tensors");
    return WEFT_OK;
}

static int32_t cpu_copy_accepts(void *st, const weft_graph *g, const weft_node *node) {
    return g && node && cpu_copy_check(g, node, NULL) == WEFT_OK;
}

static weft_status cpu_copy_run(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                                weft_error *err) {
    weft_status s = cpu_rows_ready(ctx, node, cpu_copy_check, err);
    if (s) return s;
    const weft_tensor *x = &ctx->graph->tensors[node->in[0]];
    const weft_tensor *y = &ctx->graph->tensors[node->out[0]];
    int64_t n = (int64_t)ctx->n_tokens * cpu_row_elems(x);
    size_t xs = cpu_dtype_size(x->dtype), ys = cpu_dtype_size(y->dtype);
    const void *src = cpu_data(ctx, node, node->in[0], (uint64_t)n * xs, "input x", err);
    void *dst = src ? cpu_data(ctx, node, node->out[0], (uint64_t)n * ys, "output y", err) : NULL;
    if (!dst) return WEFT_ERR_INVALID;
    if (x->dtype == y->dtype) {
        if (n) memmove(dst, src, (size_t)n * xs);
        return WEFT_OK;
    }
    for (int64_t i = 0; i < n; i++)
        cpu_store(dst, i, y->dtype, cpu_load(src, i, x->dtype));
    return WEFT_OK;
}

static weft_status cpu_split_check(const weft_graph *g, const weft_node *node, weft_error *err) {
    if (node->n_in != 1 || node->n_out < 1 || node->n_out > WEFT_NODE_MAX_OUT)
        return cpu_node_error(err, node, "expected 1 input and 1..%d outputs, got %u and %u",
                              WEFT_NODE_MAX_OUT, node->n_in, node->n_out);
    const weft_tensor *x = cpu_tensor(g, node, node->in[0], "input x", err);
    if (!x || cpu_check(x, node, "input x", 0, 2, err)) return WEFT_ERR_INVALID;
    if (cpu_dtype_size(x->dtype) == 0 || x->layout[0])
        return cpu_node_error(err, node, "input x: expected a dense element dtype, got %s",
                              cpu_dtype_name(x->dtype));
    int64_t sum = 0;
    for (uint32_t i = 0; i < node->n_out; i++) {
        const weft_tensor *y = cpu_tensor(g, node, node->out[i], "output", err);
        if (!y || cpu_check(y, node, "output", x->dtype, 2, err) ||
            cpu_same_rows(g, node, x, y, "output", err))
            return WEFT_ERR_INVALID;
        if (node->p.i[i] <= 0 || y->shape[1] != node->p.i[i] || node->out[i] == node->in[0])
            return cpu_node_error(err, node,
                                  "output %u '%s': expected %lld columns (param), "
                                  "got %lld",
                                  i, y->name, (long long)node->p.i[i], (long long)y->shape[1]);
        sum += node->p.i[i];
    }
    if (sum != x->shape[1])
        return cpu_node_error(err, node, "widths sum to %lld, input x has %lld columns",
                              (long long)sum, (long long)x->shape[1]);
    return WEFT_OK;
}

static int32_t cpu_split_accepts(void *st, const weft_graph *g, const weft_node *node) {
    return g && node && cpu_split_check(g, node, NULL) == WEFT_OK;
}

static weft_status cpu_split_run(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                                 weft_error *err) {
    weft_status s = cpu_rows_ready(ctx, node, cpu_split_check, err);
    if (s) return s;
    const weft_tensor *x = &ctx->graph->tensors[node->in[0]];
    int64_t T = ctx->n_tokens, C = x->shape[1];
    size_t es = cpu_dtype_size(x->dtype);
    const char *src = cpu_data(ctx, node, node->in[0], (uint64_t)T * C * es, "input x", err);
    if (!src) return WEFT_ERR_INVALID;
    char *dst[WEFT_NODE_MAX_OUT];
    for (uint32_t i = 0; i < node->n_out; i++) {
        dst[i] = cpu_data(ctx, node, node->out[i], (uint64_t)T * node->p.i[i] * es, "output", err);
        if (!dst[i]) return WEFT_ERR_INVALID;
    }
    for (int64_t t = 0; t < T; t++) {
        const char *row = src + (size_t)t * C * es;
        for (uint32_t i = 0; i < node->n_out; i++) {
            size_t w = (size_t)node->p.i[i] * es;
            memcpy(dst[i] + (size_t)t * w, row, w);
            row += w;
        }
    }
    return WEFT_OK;
}

weft_status cpu_register_elementwise(cpu_backend *b, const weft_ops_service *ops, weft_error *err) {
    struct {
        uint32_t op;
        weft_op_fn run;
        int32_t (*accepts)(void *, const weft_graph *, const weft_node *);
    } const f32_ops[] = {
        {WEFT_OP_RMSNORM, cpu_rmsnorm_run, cpu_rmsnorm_accepts},
        {WEFT_OP_ADD_RMSNORM, cpu_rmsnorm_run, cpu_rmsnorm_accepts},
        {WEFT_OP_ROPE, cpu_rope_run, cpu_rope_accepts},
        {WEFT_OP_SWIGLU, cpu_ew_run, cpu_ew_accepts},
        {WEFT_OP_ADD, cpu_ew_run, cpu_ew_accepts},
        {WEFT_OP_ACTIVATION, cpu_ew_run, cpu_ew_accepts},
        {WEFT_OP_SCALE, cpu_ew_run, cpu_ew_accepts},
    };
    weft_status s = WEFT_OK;
    for (size_t i = 0; i < sizeof(f32_ops) / sizeof(f32_ops[0]) && s == WEFT_OK; i++)
        s = cpu_add_impl(ops, b, f32_ops[i].op, WEFT_DTYPE_F32, "", f32_ops[i].run,
                         f32_ops[i].accepts, err);
    static const uint32_t any[] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16, WEFT_DTYPE_I32};
    for (size_t i = 0; i < sizeof(any) / sizeof(any[0]) && s == WEFT_OK; i++) {
        s = cpu_add_impl(ops, b, WEFT_OP_COPY, any[i], "", cpu_copy_run, cpu_copy_accepts, err);
        if (s == WEFT_OK)
            s = cpu_add_impl(ops, b, WEFT_OP_SPLIT, any[i], "", cpu_split_run, cpu_split_accepts,
                             err);
    }
    return s;
}
