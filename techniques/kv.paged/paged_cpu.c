/* ATTENTION over the "paged" kv layout on the cpu backend (kv_paged.h).
 *
 * Same contract as the cpu backend's contiguous kernel: the step's k and v rows are stored at
 * their positions first, then every (row, query head) attends causally over positions
 * lo..pos of its own sequence (lo > 0 only with a sliding window), so prefill rows see the
 * earlier rows of the same step and decode rows the pages of earlier steps. Positions are found
 * through the sequence's block table (weft_seq.block_table): position p is row p % P of page
 * table[p / P]. Softmax is computed online over runs of up to 64 keys whose addresses are
 * looked up first, so a run may cross pages and small pages cost no extra rescaling; scores
 * are taken four keys at a time and exponentials eight at a time. Nothing is allocated in the
 * step.
 * Every row and every block-table entry it can reach is checked before the first write, so a
 * bad step leaves the cache untouched. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "paged_ops.h"
#include "weft/sdk.h"

#define RUN_MAX 64          /* keys scored at once */
#define INLINE_WORK 32768.0 /* below this many multiply-adds a step runs inline */
#define MAX_ELEMS ((uint64_t)1 << 46)

#if defined(__GNUC__) && defined(__x86_64__) && (!defined(__clang__) || __clang_major__ >= 14)
#define HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HOT
#endif
#define INLINE static inline __attribute__((always_inline))

typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));

/* ---- element conversions (written here: the bundle shares no code with the backend) ------ */
INLINE float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
INLINE uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
INLINE float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m * 2^-24 exactly */
        float f = (float)m * 0x1p-24f;
        return bits_f32(f32_bits(f) | sign);
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13)); /* inf, nan */
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}
INLINE uint16_t f32_to_f16(float f) { /* round to nearest even */
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) /* below the smallest normal half: units of 2^-24, FPU rounding */
        return (uint16_t)(sign | (uint16_t)__builtin_rintf(bits_f32(a) * 0x1p24f));
    uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu), rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
INLINE uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
INLINE float load1(const void *p, int64_t i, uint32_t dt) {
    if (dt == WEFT_DTYPE_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == WEFT_DTYPE_BF16 ? bits_f32((uint32_t)h << 16) : f16_to_f32(h);
}
INLINE v8f load8(const void *p, int64_t i, uint32_t dt) {
    v8f f;
    if (dt == WEFT_DTYPE_F32) {
        memcpy(&f, (const float *)p + i, sizeof(f));
        return f;
    }
    v8h h;
    memcpy(&h, (const uint16_t *)p + i, sizeof(h));
    if (dt == WEFT_DTYPE_BF16) {
        v8u u = __builtin_convertvector(h, v8u) << 16;
        memcpy(&f, &u, sizeof(f));
        return f;
    }
    for (int k = 0; k < 8; k++)
        f[k] = f16_to_f32(h[k]);
    return f;
}
INLINE float hsum(v8f v) {
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}
INLINE size_t dt_size(uint32_t dt) {
    return dt == WEFT_DTYPE_F32 ? 4 : 2;
}

/* ---- the kernel --------------------------------------------------------------------------- */
typedef struct job {
    const float *q, *kn, *vn; /* this step's rows */
    float *o;
    const int32_t *pos;
    const weft_batch *batch;
    char *kc, *vc; /* the layer's pages */
    uint32_t dt;
    int64_t P, Hq, Hkv, hd, group, window;
    float scale;
} job;

typedef int32_t v8i __attribute__((vector_size(32)));

#if defined(__clang__)
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUF(a, b, ...) __builtin_shuffle(a, b, (v8i){__VA_ARGS__})
#endif

/* The sums of four vectors' lanes in lanes 0..3 (a, b, c, d): fold halves, then pairs. */
INLINE v8f hsum4(v8f a, v8f b, v8f c, v8f d) {
    v8f x = SHUF(a, b, 0, 1, 2, 3, 8, 9, 10, 11) + SHUF(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
    v8f y = SHUF(c, d, 0, 1, 2, 3, 8, 9, 10, 11) + SHUF(c, d, 4, 5, 6, 7, 12, 13, 14, 15);
    v8f z = SHUF(x, y, 0, 1, 8, 9, 4, 5, 12, 13) + SHUF(x, y, 2, 3, 10, 11, 6, 7, 14, 15);
    return SHUF(z, z, 0, 4, 2, 6, 0, 4, 2, 6) + SHUF(z, z, 1, 5, 3, 7, 1, 5, 3, 7);
}

/* Lane-wise mask ? a : b (mask lanes are all ones or zero); C has no vector conditional. */
INLINE v8f vsel(v8i mask, v8f a, v8f b) {
    v8i ai, bi;
    memcpy(&ai, &a, sizeof(ai));
    memcpy(&bi, &b, sizeof(bi));
    ai = (mask & ai) | (~mask & bi);
    memcpy(&a, &ai, sizeof(a));
    return a;
}

/* e^x for eight lanes: x = n ln2 + r with |r| <= ln2 / 2, e^r by a degree-6 polynomial, 2^n
 * through the exponent bits. About 1 ulp over the range softmax uses (x <= 0); inputs below
 * -87 give the smallest normal instead of 0, which is negligible next to the row maximum's 1. */
INLINE v8f exp8(v8f x) {
    const v8f lo = {-87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f};
    const v8f hi = {88.3f, 88.3f, 88.3f, 88.3f, 88.3f, 88.3f, 88.3f, 88.3f};
    x = vsel(x < lo, lo, x);
    x = vsel(x > hi, hi, x);
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    v8f t = x * 1.44269504088896341f + magic;
    v8f n = t - magic;
    v8f r = x - n * 0.693359375f; /* ln 2 in two parts, so r stays exact */
    r = r - n * -2.12194440e-4f;
    v8f p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    v8i bits;
    memcpy(&bits, &t, sizeof(bits));
    v8i magic_bits;
    v8f m8 = {magic, magic, magic, magic, magic, magic, magic, magic};
    memcpy(&magic_bits, &m8, sizeof(magic_bits));
    v8i e = (bits - magic_bits + 127) << 23;
    v8f scale;
    memcpy(&scale, &e, sizeof(scale));
    return p * scale;
}

INLINE float dot(const float *q, const char *k, int64_t hd, uint32_t dt) {
    int64_t h8 = hd & ~(int64_t)7;
    v8f a = {0};
    for (int64_t d = 0; d < h8; d += 8) {
        v8f qv;
        memcpy(&qv, q + d, sizeof(qv));
        a += qv * load8(k, d, dt);
    }
    float s = hsum(a);
    for (int64_t d = h8; d < hd; d++)
        s += q[d] * load1(k, d, dt);
    return s;
}

/* One (row, head): keys lo..pos in runs of up to RUN_MAX, each key found through the block
 * table, so a run may span pages; online softmax rescales once per run. */
INLINE void head(const job *j, int64_t r, int64_t h, uint32_t dt) {
    const int64_t hd = j->hd, P = j->P, h8 = hd & ~(int64_t)7;
    const size_t es = dt_size(dt), stride = (size_t)j->Hkv * hd * es; /* bytes per position */
    const size_t head_off = (size_t)(h / j->group) * hd * es;
    const int32_t *table = j->batch->seqs[j->batch->seq_of_row[r]].block_table;
    const int64_t p = j->pos[r];
    const int64_t lo = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
    const float *q = j->q + (r * j->Hq + h) * hd;
    float *o = j->o + (r * j->Hq + h) * hd;
    for (int64_t d = 0; d < hd; d++)
        o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    float sc[RUN_MAX] __attribute__((aligned(32)));
    size_t off[RUN_MAX], seg_off[RUN_MAX];
    int64_t seg_n[RUN_MAX];
    int64_t b = lo / P, in_page = lo % P;
    for (int64_t s0 = lo; s0 <= p; s0 += RUN_MAX) {
        const int64_t n = p + 1 - s0 < RUN_MAX ? p + 1 - s0 : RUN_MAX;
        /* the run as segments of consecutive rows of one page, and each key's offset */
        int64_t n_seg = 0;
        for (int64_t i = 0; i < n;) {
            int64_t len = P - in_page < n - i ? P - in_page : n - i;
            size_t base = ((size_t)table[b] * (size_t)P + (size_t)in_page) * stride + head_off;
            seg_off[n_seg] = base;
            seg_n[n_seg++] = len;
            for (int64_t t = 0; t < len; t++)
                off[i + t] = base + (size_t)t * stride;
            i += len;
            in_page += len;
            if (in_page == P) {
                in_page = 0;
                b++;
            }
        }
        /* scores, four keys at a time so their products overlap */
        int64_t i = 0;
        for (; i + 4 <= n && h8 == hd; i += 4) {
            const char *k0 = j->kc + off[i], *k1 = j->kc + off[i + 1];
            const char *k2 = j->kc + off[i + 2], *k3 = j->kc + off[i + 3];
            v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int64_t d = 0; d < h8; d += 8) {
                v8f qv;
                memcpy(&qv, q + d, sizeof(qv));
                a0 += qv * load8(k0, d, dt);
                a1 += qv * load8(k1, d, dt);
                a2 += qv * load8(k2, d, dt);
                a3 += qv * load8(k3, d, dt);
            }
            v8f s4 = hsum4(a0, a1, a2, a3) * j->scale;
            memcpy(sc + i, &s4, 4 * sizeof(float));
        }
        for (; i < n; i++)
            sc[i] = dot(q, j->kc + off[i], hd, dt) * j->scale;
        const int64_t n8 = (n + 7) & ~(int64_t)7;
        for (int64_t k = n; k < n8; k++)
            sc[k] = -INFINITY;
        v8f vmax;
        memcpy(&vmax, sc, sizeof(vmax));
        for (int64_t k = 8; k < n8; k += 8) {
            v8f v;
            memcpy(&v, sc + k, sizeof(v));
            vmax = vsel(v > vmax, v, vmax);
        }
        float cmax = vmax[0];
        for (int k = 1; k < 8; k++)
            cmax = vmax[k] > cmax ? vmax[k] : cmax;
        if (cmax > m) {
            float corr = expf(m - cmax); /* 0 on the first run: m is -inf */
            l *= corr;
            for (int64_t d = 0; d < hd; d++)
                o[d] *= corr;
            m = cmax;
        }
        /* weights e^(s - m); padding lanes (-inf) are forced to 0 */
        v8f sum = {0};
        for (int64_t k = 0; k < n8; k += 8) {
            v8f v;
            memcpy(&v, sc + k, sizeof(v));
            v8i live = {0, 1, 2, 3, 4, 5, 6, 7};
            live = live + (int32_t)k < (int32_t)n;
            v8f e = exp8(v - m);
            v8i eb;
            memcpy(&eb, &e, sizeof(eb));
            eb &= live;
            memcpy(&e, &eb, sizeof(e));
            memcpy(sc + k, &e, sizeof(e));
            sum += e;
        }
        l += hsum(sum);
        /* o += sum_i w_i v_i, one eight-lane slice of o at a time, four chains over the keys */
        for (int64_t d = 0; d < h8; d += 8) {
            v8f c0, c1 = {0}, c2 = {0}, c3 = {0};
            memcpy(&c0, o + d, sizeof(c0));
            const float *w = sc;
            for (int64_t g = 0; g < n_seg; g++) {
                const char *v0 = j->vc + seg_off[g];
                int64_t k = 0, len = seg_n[g];
                for (; k + 4 <= len; k += 4, v0 += 4 * stride) {
                    c0 += load8(v0, d, dt) * w[k];
                    c1 += load8(v0 + stride, d, dt) * w[k + 1];
                    c2 += load8(v0 + 2 * stride, d, dt) * w[k + 2];
                    c3 += load8(v0 + 3 * stride, d, dt) * w[k + 3];
                }
                for (; k < len; k++, v0 += stride)
                    c0 += load8(v0, d, dt) * w[k];
                w += len;
            }
            c0 = (c0 + c1) + (c2 + c3);
            memcpy(o + d, &c0, sizeof(c0));
        }
        for (int64_t d = h8; d < hd; d++) {
            float acc = o[d];
            for (int64_t k = 0; k < n; k++)
                acc += sc[k] * load1(j->vc + off[k], d, dt);
            o[d] = acc;
        }
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t d = 0; d < hd; d++)
        o[d] *= inv;
}

HOT static void task(void *arg, uint32_t t, uint32_t n_tasks) {
    const job *j = arg;
    (void)n_tasks;
    int64_t r = t / j->Hq, h = t % j->Hq;
    if (j->dt == WEFT_DTYPE_F32)
        head(j, r, h, WEFT_DTYPE_F32);
    else if (j->dt == WEFT_DTYPE_BF16)
        head(j, r, h, WEFT_DTYPE_BF16);
    else
        head(j, r, h, WEFT_DTYPE_F16);
}

/* Stores step row r's k and v at its position. */
static void store_row(const job *j, int64_t r) {
    const int64_t n = j->Hkv * j->hd, p = j->pos[r];
    const int32_t *table = j->batch->seqs[j->batch->seq_of_row[r]].block_table;
    const size_t es = dt_size(j->dt);
    const size_t off = ((size_t)table[p / j->P] * (size_t)j->P + (size_t)(p % j->P)) * n * es;
    const float *k = j->kn + r * n, *v = j->vn + r * n;
    char *kd = j->kc + off, *vd = j->vc + off;
    if (j->dt == WEFT_DTYPE_F32) {
        memcpy(kd, k, (size_t)n * 4);
        memcpy(vd, v, (size_t)n * 4);
        return;
    }
    uint16_t *k16 = (uint16_t *)(void *)kd, *v16 = (uint16_t *)(void *)vd;
    for (int64_t i = 0; i < n; i++) {
        k16[i] = j->dt == WEFT_DTYPE_BF16 ? f32_to_bf16(k[i]) : f32_to_f16(k[i]);
        v16[i] = j->dt == WEFT_DTYPE_BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
    }
}

/* ---- checks ------------------------------------------------------------------------------ */
static weft_status node_error(weft_error *err, const weft_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static weft_status node_error(weft_error *err, const weft_node *n, const char *fmt, ...) {
    if (!err) return WEFT_ERR_INVALID;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return weft_sdk_error(err, WEFT_ERR_INVALID, KV_PAGED_NAME, "attention node %.48s: %s",
                          n ? n->name : "?", msg);
}

/* The node against its graph: 4 inputs (an optional 5th, in.kv_slots, is not needed on the
 * host), f32 q/k/v/o with agreeing shapes, i32 positions, causal mask. */
static weft_status check_node(const weft_graph *g, const weft_node *n, weft_error *err) {
    if (n->n_in < 4 || n->n_in > 5 || n->n_out != 1)
        return node_error(err, n, "expected 4 or 5 inputs and 1 output, got %u and %u", n->n_in,
                          n->n_out);
    const weft_op_params *p = &n->p;
    int64_t layer = p->i[0], Hq = p->i[1], Hkv = p->i[2], hd = p->i[3], win = p->i[4];
    if (layer < 0 || Hq <= 0 || Hkv <= 0 || hd <= 0 || Hq % Hkv || win < 0 || Hq > 65536 ||
        hd > 65536)
        return node_error(err, n,
                          "params: expected layer >= 0, n_heads a positive multiple of "
                          "n_kv_heads, head_dim > 0, window >= 0; got %lld, %lld/%lld, %lld, %lld",
                          (long long)layer, (long long)Hq, (long long)Hkv, (long long)hd,
                          (long long)win);
    if (p->i[5] != 0)
        return node_error(err, n, "mask %lld: only 0 (causal) is supported", (long long)p->i[5]);
    if (!(p->f[0] >= 0.0f) || isinf(p->f[0]))
        return node_error(err, n, "scale: expected a finite value >= 0, got %g", (double)p->f[0]);
    const int64_t cols[5] = {Hq * hd, Hkv * hd, Hkv * hd, 1, Hq * hd};
    const weft_tensor *q = NULL;
    for (int i = 0; i < 5; i++) {
        uint32_t id = i < 4 ? n->in[i] : n->out[0];
        if (id >= g->n_tensors) return node_error(err, n, "tensor %d: id %u out of range", i, id);
        const weft_tensor *t = &g->tensors[id];
        uint32_t want = i == 3 ? WEFT_DTYPE_I32 : WEFT_DTYPE_F32;
        int64_t c = t->rank == 1 ? 1 : t->rank == 2 ? t->shape[1] : -1;
        if (t->dtype != want || c != cols[i] || t->shape[0] <= 0)
            return node_error(err, n,
                              "tensor %s: expected %s with %lld columns, got dtype %u "
                              "rank %u",
                              t->name, i == 3 ? "i32" : "f32", (long long)cols[i], t->dtype,
                              t->rank);
        if (!q)
            q = t;
        else if (t->shape[0] != q->shape[0])
            return node_error(err, n, "tensor %s has %lld rows, q has %lld", t->name,
                              (long long)t->shape[0], (long long)q->shape[0]);
    }
    if (n->out[0] == n->in[0] || n->out[0] == n->in[1] || n->out[0] == n->in[2])
        return node_error(err, n, "output must not alias q, k or v");
    return WEFT_OK;
}

static int32_t accepts(void *st, const weft_graph *g, const weft_node *n) {
    (void)st;
    return g && n && check_node(g, n, NULL) == WEFT_OK;
}

static const void *data_of(const weft_exec_ctx *ctx, uint32_t id, uint64_t bytes) {
    const weft_buffer *b = &ctx->data[id];
    return b->ptr && b->bytes >= bytes ? b->ptr : NULL;
}

/* The layer's pages and every table entry the step can reach, checked. */
static weft_status check_step(const weft_exec_ctx *ctx, const weft_node *n, job *j,
                              weft_error *err) {
    const weft_kv_view *kv = ctx->kv;
    if (!kv || !kv->desc || strncmp(kv->layout, WEFT_KV_PAGED_LAYOUT, sizeof(kv->layout)))
        return node_error(err, n, "kv layout: expected \"paged\", got \"%.*s\"",
                          kv ? (int)sizeof(kv->layout) : 6, kv ? kv->layout : "(none)");
    const weft_kv_paged *c = kv->desc;
    int64_t layer = n->p.i[0];
    if (c->size < sizeof(*c) || layer >= c->n_layers || c->n_kv_heads != j->Hkv ||
        c->head_dim != j->hd || !c->page_size || !c->k || !c->v ||
        (c->dtype != WEFT_DTYPE_F32 && c->dtype != WEFT_DTYPE_BF16 && c->dtype != WEFT_DTYPE_F16))
        return node_error(err, n,
                          "paged cache (%u layers, %u kv heads, head_dim %u, dtype %u) does not "
                          "fit layer %lld with %lld kv heads of %lld",
                          c->n_layers, c->n_kv_heads, c->head_dim, c->dtype, (long long)layer,
                          (long long)j->Hkv, (long long)j->hd);
    uint64_t elems = (uint64_t)c->n_pages * c->page_size;
    if (elems > MAX_ELEMS || (elems *= c->n_kv_heads) > MAX_ELEMS ||
        (elems *= c->head_dim) > MAX_ELEMS)
        return node_error(err, n, "paged cache of %u pages of %u is too large", c->n_pages,
                          c->page_size);
    uint64_t need = elems * dt_size(c->dtype);
    const weft_buffer *kb = &c->k[layer], *vb = &c->v[layer];
    if (!kb->ptr || !vb->ptr || kb->bytes < need || vb->bytes < need)
        return node_error(err, n,
                          "pages of layer %lld: expected K and V of %llu bytes, got %llu "
                          "and %llu",
                          (long long)layer, (unsigned long long)need, (unsigned long long)kb->bytes,
                          (unsigned long long)vb->bytes);
    j->kc = kb->ptr;
    j->vc = vb->ptr;
    j->dt = c->dtype;
    j->P = c->page_size;
    const weft_batch *b = ctx->batch;
    const int64_t T = ctx->n_tokens;
    if (!b || !b->seq_of_row || !b->seqs || b->n_tokens < T)
        return node_error(err, n, "expected a host batch with seq_of_row and seqs for %lld rows",
                          (long long)T);
    for (uint32_t s = 0; s < b->n_seqs; s++) {
        const weft_seq *sq = &b->seqs[s];
        if (sq->n_blocks < 0 || (uint32_t)sq->n_blocks > c->max_blocks ||
            (sq->n_blocks && !sq->block_table))
            return node_error(err, n, "sequence %u: %d block-table entries (at most %u)", s,
                              sq->n_blocks, c->max_blocks);
        for (int32_t i = 0; i < sq->n_blocks; i++)
            if (sq->block_table[i] < 0 || (uint32_t)sq->block_table[i] >= c->n_pages)
                return node_error(err, n, "sequence %u: block %d maps page %d, the pool has %u", s,
                                  i, sq->block_table[i], c->n_pages);
    }
    for (int64_t r = 0; r < T; r++) {
        int32_t si = b->seq_of_row[r];
        if (si < 0 || (uint32_t)si >= b->n_seqs)
            return node_error(err, n, "row %lld belongs to sequence %d, the batch has %u",
                              (long long)r, si, b->n_seqs);
        int64_t p = j->pos[r];
        if (p < 0 || p / j->P >= b->seqs[si].n_blocks)
            return node_error(err, n,
                              "row %lld: position %lld is outside the %d pages of %lld its "
                              "sequence maps",
                              (long long)r, (long long)p, b->seqs[si].n_blocks, (long long)j->P);
    }
    return WEFT_OK;
}

static weft_status run(void *st, const weft_exec_ctx *ctx, const weft_node *n, weft_error *err) {
    const weft_threads_service *threads = st;
    if (!ctx || !ctx->graph || !ctx->data || !n)
        return weft_sdk_error(err, WEFT_ERR_INVALID, KV_PAGED_NAME, "attention: missing context");
    weft_status s = check_node(ctx->graph, n, err);
    if (s) return s;
    const int64_t T = ctx->n_tokens;
    if (T > ctx->graph->tensors[n->in[0]].shape[0])
        return node_error(err, n, "n_tokens %lld exceeds the %lld rows of q", (long long)T,
                          (long long)ctx->graph->tensors[n->in[0]].shape[0]);
    if (T == 0) return WEFT_OK;
    job j;
    memset(&j, 0, sizeof(j));
    j.Hq = n->p.i[1];
    j.Hkv = n->p.i[2];
    j.hd = n->p.i[3];
    j.group = j.Hq / j.Hkv;
    j.window = n->p.i[4];
    j.scale = n->p.f[0] > 0.0f ? n->p.f[0] : 1.0f / sqrtf((float)j.hd);
    uint64_t qb = (uint64_t)T * j.Hq * j.hd * 4, kb = (uint64_t)T * j.Hkv * j.hd * 4;
    j.q = data_of(ctx, n->in[0], qb);
    j.kn = data_of(ctx, n->in[1], kb);
    j.vn = data_of(ctx, n->in[2], kb);
    j.pos = data_of(ctx, n->in[3], (uint64_t)T * 4);
    j.o = (float *)data_of(ctx, n->out[0], qb);
    if (!j.q || !j.kn || !j.vn || !j.pos || !j.o)
        return node_error(err, n, "a step buffer is missing or smaller than %lld rows",
                          (long long)T);
    if ((s = check_step(ctx, n, &j, err))) return s;
    j.batch = ctx->batch;
    double work = 0;
    for (int64_t r = 0; r < T; r++) {
        store_row(&j, r);
        int64_t keys = j.window > 0 && j.window < j.pos[r] + 1 ? j.window : j.pos[r] + 1;
        work += 2.0 * (double)keys * (double)(j.Hq * j.hd);
    }
    uint32_t tasks = (uint32_t)(T * j.Hq);
    if (work < INLINE_WORK || !threads || !threads->parallel_for ||
        threads->count(threads->self) < 2) {
        for (uint32_t t = 0; t < tasks; t++)
            task(&j, t, tasks);
        return WEFT_OK;
    }
    threads->parallel_for(threads->self, task, &j, tasks);
    return WEFT_OK;
}

weft_status kv_paged_register_cpu(const weft_threads_service *threads, const weft_ops_service *ops,
                                  weft_error *err) {
    static const uint32_t dtypes[] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
        weft_op_impl impl;
        memset(&impl, 0, sizeof(impl));
        impl.size = sizeof(impl);
        impl.op = WEFT_OP_ATTENTION;
        snprintf(impl.backend, sizeof(impl.backend), "cpu");
        impl.dtype = dtypes[i];
        snprintf(impl.layout, sizeof(impl.layout), "%s", WEFT_KV_PAGED_LAYOUT);
        impl.run = run;
        impl.state = (void *)threads;
        impl.accepts = accepts;
        weft_status s = ops->add(ops->self, &impl, err);
        if (s) return s;
    }
    return WEFT_OK;
}
