/* ATTENTION over the "contiguous" kv layout (weft_kv_contiguous): per layer one K and one V
 * array of shape (slots, max_seq, kv_heads, head_dim) in f32, bf16 or f16.
 *
 * A step first writes every row's k and v at (its sequence's kv slot, its position), then each
 * (row, query head) attends causally over positions 0..pos of its own sequence (or the last
 * `window` of them), so prefill rows see the earlier rows of the same step and decode rows see
 * the cache of earlier steps. Query head h reads kv head h / (Hq / Hkv) (grouped-query
 * attention). Softmax is computed online in chunks of keys: the running maximum and sum are
 * rescaled once per chunk, so no scratch proportional to the context is needed and nothing is
 * allocated in the step. All rows are validated before the first write, so a bad row leaves the
 * cache untouched. */
#include <math.h>

#include "cpu.h"
#include "cpu_simd.h"

#define CPU_ATTN_CHUNK 64
#define CPU_ATTN_INLINE_WORK 32768.0 /* below this many multiply-adds a step runs inline */

typedef struct cpu_attn_job {
    const float *q;
    const float *kn, *vn; /* this step's k and v rows */
    float *o;
    const int32_t *pos;
    const weft_batch *batch; /* rows -> sequences -> kv slots */
    char *kc, *vc;           /* the layer's caches */
    uint32_t dt;
    int64_t max_seq, Hq, Hkv, hd, group, window;
    float scale;
} cpu_attn_job;

CPU_INLINE int64_t cpu_attn_slot(const cpu_attn_job *j, int64_t r) {
    return j->batch->seqs[j->batch->seq_of_row[r]].kv_slot;
}

CPU_INLINE float cpu_attn_dot(const float *q, const void *k, int64_t hd, uint32_t dt) {
    int64_t h8 = hd & ~(int64_t)7;
    cpu_v8f a = cpu_v8_zero();
    for (int64_t d = 0; d < h8; d += 8)
        a += cpu_v8_ld(q + d) * cpu_v8_load(k, d, dt);
    float s = cpu_v8_sum(a);
    for (int64_t d = h8; d < hd; d++)
        s += q[d] * cpu_load(k, d, dt);
    return s;
}

CPU_INLINE void cpu_attn_head(const cpu_attn_job *j, int64_t r, int64_t h, uint32_t dt) {
    const int64_t hd = j->hd, Hkv = j->Hkv, h8 = hd & ~(int64_t)7;
    const size_t es = dt == WEFT_DTYPE_F32 ? 4 : 2;
    const int64_t p = j->pos[r];
    const int64_t kvh = h / j->group;
    const size_t stride = (size_t)Hkv * hd * es; /* bytes between positions */
    const size_t base = ((size_t)cpu_attn_slot(j, r) * j->max_seq * Hkv + kvh) * hd * es;
    const char *kb = j->kc + base, *vb = j->vc + base;
    const float *q = j->q + r * j->Hq * hd + h * hd;
    float *o = j->o + r * j->Hq * hd + h * hd;
    int64_t lo = 0;
    if (j->window > 0 && p - j->window + 1 > 0) lo = p - j->window + 1;
    for (int64_t d = 0; d < hd; d++)
        o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    float sc[CPU_ATTN_CHUNK] __attribute__((aligned(32)));
    for (int64_t s0 = lo; s0 <= p; s0 += CPU_ATTN_CHUNK) {
        const int64_t n = p + 1 - s0 < CPU_ATTN_CHUNK ? p + 1 - s0 : CPU_ATTN_CHUNK;
        const char *kc = kb + (size_t)s0 * stride, *vc = vb + (size_t)s0 * stride;
        /* Scores four keys at a time: each key's products stay in lanes until one shared
         * reduction; head_dim % 8 leftovers are added per key. */
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) {
            const char *k0 = kc + (size_t)i * stride;
            cpu_v8f a0 = cpu_v8_zero(), a1 = cpu_v8_zero(), a2 = cpu_v8_zero(), a3 = cpu_v8_zero();
            for (int64_t d = 0; d < h8; d += 8) {
                cpu_v8f qv = cpu_v8_ld(q + d);
                a0 += qv * cpu_v8_load(k0, d, dt);
                a1 += qv * cpu_v8_load(k0 + stride, d, dt);
                a2 += qv * cpu_v8_load(k0 + 2 * stride, d, dt);
                a3 += qv * cpu_v8_load(k0 + 3 * stride, d, dt);
            }
            cpu_v8f s4 = cpu_v8_sum4(a0, a1, a2, a3);
            if (h8 == hd) {
                s4 *= j->scale;
                memcpy(sc + i, &s4, 4 * sizeof(float)); /* lanes 0..3 */
                continue;
            }
            for (int t = 0; t < 4; t++) {
                float dot = s4[t];
                for (int64_t d = h8; d < hd; d++)
                    dot += q[d] * cpu_load(k0 + t * stride, d, dt);
                sc[i + t] = dot * j->scale;
            }
        }
        for (; i < n; i++)
            sc[i] = cpu_attn_dot(q, kc + (size_t)i * stride, hd, dt) * j->scale;
        /* The chunk's maximum, eight lanes at a time (a scalar running max would chain). */
        const int64_t n8 = (n + 7) & ~(int64_t)7;
        for (int64_t k = n; k < n8; k++)
            sc[k] = -INFINITY;
        cpu_v8f vmax = cpu_v8_ld(sc);
        for (int64_t k = 8; k < n8; k += 8)
            vmax = cpu_v8_max(vmax, cpu_v8_ld(sc + k));
        const float cmax = cpu_v8_hmax(vmax);
        if (cmax > m) {
            float corr = expf(m - cmax); /* 0 on the first chunk: m is -inf */
            l *= corr;
            for (int64_t d = 0; d < hd; d++)
                o[d] *= corr;
            m = cmax;
        }
        /* Weights e^(s - m) eight at a time; padding lanes are -inf and come out 0. */
        cpu_v8f sum = cpu_v8_zero();
        for (int64_t k = 0; k < n8; k += 8) {
            cpu_v8f e = cpu_v8_exp(cpu_v8_ld(sc + k) - m);
            cpu_v8_st(sc + k, e);
            sum += e;
        }
        l += cpu_v8_sum(sum);
        /* o += sum_i w_i v_i, one eight-lane slice of o at a time so it stays in a register. */
        for (int64_t d = 0; d < h8; d += 8) {
            /* Four chains over the keys so the FMA latency overlaps. */
            cpu_v8f c0 = cpu_v8_ld(o + d), c1 = cpu_v8_zero(), c2 = cpu_v8_zero(),
                    c3 = cpu_v8_zero();
            const char *v0 = vc;
            int64_t i4 = 0;
            for (; i4 + 4 <= n; i4 += 4, v0 += 4 * stride) {
                c0 += cpu_v8_load(v0, d, dt) * sc[i4];
                c1 += cpu_v8_load(v0 + stride, d, dt) * sc[i4 + 1];
                c2 += cpu_v8_load(v0 + 2 * stride, d, dt) * sc[i4 + 2];
                c3 += cpu_v8_load(v0 + 3 * stride, d, dt) * sc[i4 + 3];
            }
            for (; i4 < n; i4++, v0 += stride)
                c0 += cpu_v8_load(v0, d, dt) * sc[i4];
            cpu_v8_st(o + d, (c0 + c1) + (c2 + c3));
        }
        for (int64_t d = h8; d < hd; d++) {
            float acc = o[d];
            for (int64_t k = 0; k < n; k++)
                acc += sc[k] * cpu_load(vc + (size_t)k * stride, d, dt);
            o[d] = acc;
        }
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t d = 0; d < hd; d++)
        o[d] *= inv;
}

CPU_HOT static void cpu_attn_task(void *arg, uint32_t task, uint32_t worker) {
    const cpu_attn_job *j = arg;
    int64_t r = task / j->Hq, h = task % j->Hq;
    switch (j->dt) {
    case WEFT_DTYPE_F32:
        cpu_attn_head(j, r, h, WEFT_DTYPE_F32);
        break;
    case WEFT_DTYPE_BF16:
        cpu_attn_head(j, r, h, WEFT_DTYPE_BF16);
        break;
    default:
        cpu_attn_head(j, r, h, WEFT_DTYPE_F16);
        break;
    }
}

/* Stores one step row's k and v (Hkv * hd values each) at its cache position. */
static void cpu_attn_write(const cpu_attn_job *j, int64_t r) {
    const int64_t n = j->Hkv * j->hd;
    const size_t es = cpu_dtype_size(j->dt);
    const size_t off = ((size_t)cpu_attn_slot(j, r) * j->max_seq + (size_t)j->pos[r]) * n * es;
    const float *k = j->kn + r * n, *v = j->vn + r * n;
    if (j->dt == WEFT_DTYPE_F32) {
        memcpy(j->kc + off, k, (size_t)n * 4);
        memcpy(j->vc + off, v, (size_t)n * 4);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        cpu_store(j->kc + off, i, j->dt, k[i]);
        cpu_store(j->vc + off, i, j->dt, v[i]);
    }
}

static weft_status cpu_attention_check(const weft_graph *g, const weft_node *node,
                                       weft_error *err) {
    if (node->n_in != 4 || node->n_out != 1)
        return cpu_node_error(err, node,
                              "expected 4 inputs (q, k, v, positions) and 1 output, "
                              "got %u and %u",
                              node->n_in, node->n_out);
    const weft_op_params *p = &node->p;
    int64_t layer = p->i[0], Hq = p->i[1], Hkv = p->i[2], hd = p->i[3], win = p->i[4];
    if (layer < 0 || Hq <= 0 || Hkv <= 0 || hd <= 0 || Hq % Hkv != 0 || win < 0 || Hq > 65536 ||
        hd > 65536)
        return cpu_node_error(err, node,
                              "params: expected layer >= 0, n_heads a positive "
                              "multiple of n_kv_heads, head_dim > 0, window >= 0; got layer "
                              "%lld, heads %lld/%lld, head_dim %lld, window %lld",
                              (long long)layer, (long long)Hq, (long long)Hkv, (long long)hd,
                              (long long)win);
    if (p->i[5] != 0)
        return cpu_node_error(err, node,
                              "mask %lld (tree/custom) is not supported by the cpu "
                              "backend, expected 0 (causal)",
                              (long long)p->i[5]);
    if (!(p->f[0] >= 0.0f) || isinf(p->f[0]))
        return cpu_node_error(err, node, "scale: expected a finite value >= 0, got %g",
                              (double)p->f[0]);
    static const char *const names[4] = {"q", "k", "v", "positions"};
    const weft_tensor *t[5];
    for (int i = 0; i < 5; i++) {
        const char *what = i < 4 ? names[i] : "output o";
        t[i] = cpu_tensor(g, node, i < 4 ? node->in[i] : node->out[0], what, err);
        if (!t[i]) return WEFT_ERR_INVALID;
        uint32_t want = i == 3 ? WEFT_DTYPE_I32 : WEFT_DTYPE_F32;
        if (cpu_check(t[i], node, what, want, i == 3 ? 1 : 2, err)) return WEFT_ERR_INVALID;
        if (t[i]->shape[0] != t[0]->shape[0])
            return cpu_node_error(err, node, "%s '%s' has %lld rows, q has %lld", what, t[i]->name,
                                  (long long)t[i]->shape[0], (long long)t[0]->shape[0]);
    }
    if (t[0]->shape[1] != Hq * hd || t[4]->shape[1] != Hq * hd || t[1]->shape[1] != Hkv * hd ||
        t[2]->shape[1] != Hkv * hd)
        return cpu_node_error(err, node,
                              "expected q and o with %lld columns and k, v with %lld; "
                              "got q %lld, k %lld, v %lld, o %lld",
                              (long long)(Hq * hd), (long long)(Hkv * hd),
                              (long long)t[0]->shape[1], (long long)t[1]->shape[1],
                              (long long)t[2]->shape[1], (long long)t[4]->shape[1]);
    if (node->out[0] == node->in[0] || node->out[0] == node->in[1] || node->out[0] == node->in[2])
        return cpu_node_error(err, node, "output o must not alias q, k or v");
    return WEFT_OK;
}

static int32_t cpu_attention_accepts(void *st, const weft_graph *g, const weft_node *node) {
    return g && node && cpu_attention_check(g, node, NULL) == WEFT_OK;
}

/* The layer's cache from the kv view, checked against the node. */
static weft_status cpu_attention_cache(const weft_exec_ctx *ctx, const weft_node *node,
                                       cpu_attn_job *j, const weft_kv_contiguous **out,
                                       weft_error *err) {
    const weft_kv_view *kv = ctx->kv;
    if (!kv || !kv->desc)
        return cpu_node_error(err, node, "expected a kv view in the exec context, got none");
    if (strncmp(kv->layout, "contiguous", sizeof(kv->layout)) != 0)
        return cpu_node_error(err, node, "kv layout: expected \"contiguous\", got \"%.*s\"",
                              (int)sizeof(kv->layout), kv->layout);
    const weft_kv_contiguous *c = kv->desc;
    if (c->size < sizeof(*c))
        return cpu_node_error(err, node, "kv description: expected size >= %zu, got %u", sizeof(*c),
                              c->size);
    int64_t layer = node->p.i[0];
    if (layer >= c->n_layers || c->n_kv_heads != j->Hkv || c->head_dim != j->hd ||
        !cpu_is_float(c->dtype) || !c->k || !c->v)
        return cpu_node_error(err, node,
                              "kv cache (%u layers, %u kv heads, head_dim %u, %s) "
                              "does not fit layer %lld with %lld kv heads of %lld",
                              c->n_layers, c->n_kv_heads, c->head_dim, cpu_dtype_name(c->dtype),
                              (long long)layer, (long long)j->Hkv, (long long)j->hd);
    /* Each factor is 32-bit; check the product against the tensor bound before trusting it. */
    uint64_t elems = (uint64_t)c->n_slots * c->max_seq;
    if (elems > (uint64_t)CPU_MAX_ELEMS ||
        (c->n_kv_heads && (elems *= c->n_kv_heads) > (uint64_t)CPU_MAX_ELEMS) ||
        (c->head_dim && (elems *= c->head_dim) > (uint64_t)CPU_MAX_ELEMS))
        return cpu_node_error(err, node,
                              "kv cache of %u slots x %u positions x %u heads x %u is "
                              "too large",
                              c->n_slots, c->max_seq, c->n_kv_heads, c->head_dim);
    uint64_t need = elems * cpu_dtype_size(c->dtype);
    const weft_buffer *kb = &c->k[layer], *vb = &c->v[layer];
    if (!kb->ptr || !vb->ptr || kb->bytes < need || vb->bytes < need)
        return cpu_node_error(err, node,
                              "kv cache of layer %lld: expected K and V buffers of "
                              "%llu bytes, got %llu and %llu",
                              (long long)layer, (unsigned long long)need,
                              (unsigned long long)kb->bytes, (unsigned long long)vb->bytes);
    j->kc = kb->ptr;
    j->vc = vb->ptr;
    j->dt = c->dtype;
    j->max_seq = c->max_seq;
    *out = c;
    return WEFT_OK;
}

static weft_status cpu_attention_run(void *st, const weft_exec_ctx *ctx, const weft_node *node,
                                     weft_error *err) {
    cpu_backend *b = st;
    weft_status s = cpu_check_ctx(ctx, node, err);
    if (s || (s = cpu_attention_check(ctx->graph, node, err))) return s;
    const weft_graph *g = ctx->graph;
    const weft_batch *batch = ctx->batch;
    int64_t T = ctx->n_tokens;
    if (T > g->tensors[node->in[0]].shape[0])
        return cpu_node_error(err, node, "n_tokens %lld exceeds the %lld rows of q", (long long)T,
                              (long long)g->tensors[node->in[0]].shape[0]);
    if (T == 0) return WEFT_OK;
    if (!batch || !batch->seq_of_row || !batch->seqs || batch->n_tokens < T)
        return cpu_node_error(err, node,
                              "expected a batch with seq_of_row and seqs for %lld "
                              "rows",
                              (long long)T);
    cpu_attn_job j = {0};
    j.Hq = node->p.i[1];
    j.Hkv = node->p.i[2];
    j.hd = node->p.i[3];
    j.group = j.Hq / j.Hkv;
    j.window = node->p.i[4];
    j.scale = node->p.f[0] > 0.0f ? node->p.f[0] : 1.0f / sqrtf((float)j.hd);
    const weft_kv_contiguous *c = NULL;
    if ((s = cpu_attention_cache(ctx, node, &j, &c, err))) return s;
    uint64_t qb = (uint64_t)T * j.Hq * j.hd * 4, kb = (uint64_t)T * j.Hkv * j.hd * 4;
    j.q = cpu_data(ctx, node, node->in[0], qb, "q", err);
    j.kn = j.q ? cpu_data(ctx, node, node->in[1], kb, "k", err) : NULL;
    j.vn = j.kn ? cpu_data(ctx, node, node->in[2], kb, "v", err) : NULL;
    j.pos = j.vn ? cpu_data(ctx, node, node->in[3], (uint64_t)T * 4, "positions", err) : NULL;
    j.o = j.pos ? cpu_data(ctx, node, node->out[0], qb, "output o", err) : NULL;
    if (!j.o) return WEFT_ERR_INVALID;
    /* Check every row before the first write, so a bad row leaves the cache untouched. */
    for (int64_t r = 0; r < T; r++) {
        int32_t si = batch->seq_of_row[r];
        if (si < 0 || (uint32_t)si >= batch->n_seqs)
            return cpu_node_error(err, node, "row %lld belongs to sequence %d, the batch has %u",
                                  (long long)r, si, batch->n_seqs);
        int32_t slot = batch->seqs[si].kv_slot;
        if (slot < 0 || (uint32_t)slot >= c->n_slots)
            return cpu_node_error(err, node, "row %lld: kv slot %d outside 0..%u", (long long)r,
                                  slot, c->n_slots - 1);
        if (j.pos[r] < 0 || (uint32_t)j.pos[r] >= c->max_seq)
            return cpu_node_error(err, node,
                                  "row %lld: position %d outside the cache (max_seq "
                                  "%u)",
                                  (long long)r, j.pos[r], c->max_seq);
    }
    j.batch = batch;
    double work = 0; /* multiply-adds of the scores and the weighted sum */
    for (int64_t r = 0; r < T; r++) {
        cpu_attn_write(&j, r);
        int64_t keys = j.window > 0 && j.window < j.pos[r] + 1 ? j.window : j.pos[r] + 1;
        work += 2.0 * (double)keys * (double)(j.Hq * j.hd);
    }
    if (work < CPU_ATTN_INLINE_WORK) {
        for (uint32_t t = 0; t < (uint32_t)(T * j.Hq); t++)
            cpu_attn_task(&j, t, 0);
        return WEFT_OK;
    }
    cpu_pool_run(b->pool, cpu_attn_task, &j, (uint32_t)(T * j.Hq));
    return WEFT_OK;
}

weft_status cpu_register_attention(cpu_backend *b, const weft_ops_service *ops, weft_error *err) {
    static const uint32_t dtypes[] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    weft_status s = WEFT_OK;
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]) && s == WEFT_OK; i++)
        s = cpu_add_impl(ops, b, WEFT_OP_ATTENTION, dtypes[i], "contiguous", cpu_attention_run,
                         cpu_attention_accepts, err);
    return s;
}
