/* The cuda backend's op implementations against naive double-precision references written
 * here, on random inputs, in f32 and bf16 (the fused attention also in f16). Loads the built
 * plugin directly (no engine), builds one-node graphs by hand, poisons every output before the
 * run and checks every element. The backend runs with gemv_max_tokens = 8 and gemv_force, so
 * linear and lm_head nodes of 1..8 rows take the GEMV kernel and larger ones cuBLASLt. The
 * fused ops of the fuse.* techniques are checked against the references and, bit for bit,
 * against the unfused node sequences they replace. Skipped (reported, not passed) on machines
 * without a CUDA device. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* positional {dtype, rows, cols} initialisers of the test tensors leave the rest zero */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include "graph/graph.h"
#include "plugin/host.h"
#include "weft/plugin.h"

static const weft_plugin_descriptor *desc;
static void *bst;
static const weft_backend_vtable *be;
/* Backend instances: [0] as described above, with attn_hd off (the fused attention's forms for
 * any head size); [1] the same options plus gemv_xsmem (the GEMVs read x from shared memory),
 * attn_cp 3 (the fused attention's cp.async copies), attn_mc4_from 2048 (its four-block
 * cluster form from a bucket of 2,048 positions) and gemv_loop 3 (the T = 1 GEMVs looped over
 * rows, x in shared memory), attn_hd off too; the others keep attn_hd's default (on: the fused
 * attention's cluster forms compiled for heads of 64 and 128 dims). [2] [1]'s options with
 * smem_carveout 100 and gemv_nl_defer (fuse.norm_linear's _d forms beside the carveout), attn_hd
 * at its default, [3] [0]'s first four plus gemv_stage 96 (the T = 1 GEMVs stage their weights in
 * shared memory), prefill_tc off (prefill attention on CUDA cores), attn_mc4_from 512 (the fused
 * attention's four-block cluster forms past 512 positions), attn_qsplit 4 (its q heads of a kv head
 * over up to four blocks), attn_hd set and attn_rope_sums (the qk-norm's sums taken by the RoPE
 * threads), [4] [0]'s first four plus gemv_loop 2 (the looped form
 * reading x through L1), gemv_head_rows 5000 (products past 5,000 rows, the 5,003-row head and
 * the 12,803-row product, one block a row group) and attn_push_merge 1 (the fused attention's
 * cluster merge by pushes into the merging block), [5] and [6] [1]'s options (attn_hd at its
 * default) with gemv_loop_warps 24 and 32 (the looped forms in blocks of 24 and 32 warps; [6] also
 * with attn_hd set and bf16_cvt (bf16 rounding by cvt.rn.bf16.f32); [5] also with gemv_l2_rest 32,
 * gemv_l2_first, gemv_l2_delay 2, attn_dead_exit, join_l2 64 from 256 extra blocks and
 * attn_push_merge 2), [7] [1]'s options (attn_hd at its default) with gemv_x_async (the looped
 * forms copy x by cp.async), attn_qsplit 2 (the fused attention's q heads of a kv head over two
 * blocks), attn_cluster_policy 1 (its clusters spread over distinct SMs), gemv_l2_rest 64,
 * gemv_l2_sm, gemv_l2_join 48, attn_bucket_min 128 (its split grid over buckets down to 128
 * positions), join_l2 16, attn_hd set, gemv_nl_defer (the fused join's products in their _d forms),
 * attn_smem_min 120 (its blocks one an SM), norm_sum_all (block_sum's last step by every warp),
 * gemv_nl_smem_min 108 (the fused join's blocks at 108 KiB of shared memory) and attn_rope_sums,
 * each with its op table. All retain the device's primary context, so tensors of one are valid in
 * another's ops. */
enum { N_INST = 8 };
static void *insts[N_INST];
static weft_op_impl inst_impls[N_INST][64];
static size_t inst_n[N_INST];
static int reg_to;
static weft_op_impl *impls = inst_impls[0];
static size_t n_impls;

static weft_status reg_add(void *self, const weft_op_impl *impl, weft_error *err) {
    (void)self;
    (void)err;
    if (inst_n[reg_to] == 64) return WEFT_ERR_NOMEM;
    inst_impls[reg_to][inst_n[reg_to]++] = *impl;
    if (reg_to == 0) n_impls = inst_n[0];
    return WEFT_OK;
}
/* every backend instance was created */
static int all_insts(void) {
    for (int k = 0; k < N_INST; k++)
        if (!insts[k]) return 0;
    return 1;
}

/* run the next nodes on instance k (bst, impls) */
static void use_inst(int k) {
    bst = insts[k];
    impls = inst_impls[k];
    n_impls = inst_n[k];
}
static weft_host *host;
static uint32_t op_lsw, op_qkr, op_lan, op_nl; /* fuse.linear_swiglu, fuse.qkv_rope,
                                                 fuse.linear_add_rmsnorm, fuse.norm_linear */

static const weft_op_impl *reg_find(uint32_t op) {
    for (size_t i = 0; i < n_impls; i++)
        if (impls[i].op == op) return &impls[i];
    return NULL;
}

/* one xorshift64 step of the state s */
static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    return (float)((xorshift(&rng) >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* IEEE half, rounded to nearest even (the test's values lie well inside its range; subnormals
 * are handled, overflow saturates to infinity) */
static uint16_t to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
    if (mag >= 0x47800000u) return (uint16_t)(sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (mag < 0x38800000u) { /* below the smallest normal half: a subnormal or zero */
        float a = fabsf(f) * 16777216.f; /* 2^24: units of the smallest subnormal */
        uint32_t q = (uint32_t)a;
        float rem = a - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((mag - 0x38000000u) >> 13), rest = mag & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}
static float from_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0) return (sign ? -1.f : 1.f) * (float)m / 16777216.f;
    uint32_t u = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* a 16-bit float type's encoding and value */
static uint16_t to_h16(uint32_t dt, float f) { return dt == WEFT_DTYPE_F16 ? to_f16(f) : to_bf16(f); }
static float from_h16(uint32_t dt, uint16_t h) {
    return dt == WEFT_DTYPE_F16 ? from_f16(h) : from_bf16(h);
}

/* A tensor in the hand-built graph: host values (as f32 for float tensors) and a device copy. */
typedef struct tens {
    uint32_t dtype;
    int64_t rows, cols;
    float *h;      /* host values, rounded to dtype */
    int32_t *hi;   /* host ints */
    weft_buffer d; /* device */
} tens;

static weft_tensor gt[32];
static weft_buffer gd[32];
static uint32_t gn;

/* Overwrite a float tensor's device copy with all-ones bytes (NaN in f32 and bf16): outputs
 * before a run writes them. */
static void poison(tens *t) {
    size_t n = (size_t)(t->rows * t->cols), es = t->dtype == WEFT_DTYPE_F32 ? 4 : 2;
    weft_error err = {.size = sizeof(err)};
    void *p = malloc(n * es);
    memset(p, 0xff, n * es);
    assert_int_equal(be->upload(bst, &t->d, 0, p, n * es, &err), 0);
    free(p);
}

/* the next graph tensor, t's dtype and shape (its device copy: the caller's) */
static uint32_t graph_entry(const tens *t) {
    assert_true(gn < 32);
    uint32_t id = gn++;
    memset(&gt[id], 0, sizeof(gt[id]));
    gt[id].id = id;
    gt[id].dtype = t->dtype;
    gt[id].rank = 2;
    gt[id].shape[0] = t->rows;
    gt[id].shape[1] = t->cols;
    return id;
}

static uint32_t add_tensor(tens *t, int fill) {
    uint32_t id = graph_entry(t);
    size_t n = (size_t)(t->rows * t->cols);
    size_t es = t->dtype == WEFT_DTYPE_F32 || t->dtype == WEFT_DTYPE_I32 ? 4 : 2;
    weft_error err = {.size = sizeof(err)};
    assert_int_equal(be->alloc(bst, n * es, WEFT_MEMORY_DEVICE, &t->d, &err), 0);
    if (t->dtype == WEFT_DTYPE_I32) {
        assert_int_equal(be->upload(bst, &t->d, 0, t->hi, n * 4, &err), 0);
    } else {
        if (!t->h) {
            t->h = calloc(n, sizeof(float));
            for (size_t i = 0; i < n; i++) t->h[i] = fill ? frand() : 0.f;
        }
        if (t->dtype == WEFT_DTYPE_BF16 || t->dtype == WEFT_DTYPE_F16) {
            uint16_t *tmp = malloc(n * 2);
            for (size_t i = 0; i < n; i++) {
                tmp[i] = to_h16(t->dtype, t->h[i]);
                t->h[i] = from_h16(t->dtype, tmp[i]);
            }
            assert_int_equal(be->upload(bst, &t->d, 0, tmp, n * 2, &err), 0);
            free(tmp);
        } else if (fill) {
            assert_int_equal(be->upload(bst, &t->d, 0, t->h, n * 4, &err), 0);
        }
        if (!fill) poison(t);
    }
    gd[id] = t->d;
    return id;
}

static void fetch(tens *t, float *out) {
    size_t n = (size_t)(t->rows * t->cols);
    weft_error err = {.size = sizeof(err)};
    if (t->dtype == WEFT_DTYPE_BF16 || t->dtype == WEFT_DTYPE_F16) {
        uint16_t *tmp = malloc(n * 2);
        assert_int_equal(be->download(bst, tmp, &t->d, 0, n * 2, &err), 0);
        for (size_t i = 0; i < n; i++) out[i] = from_h16(t->dtype, tmp[i]);
        free(tmp);
    } else {
        assert_int_equal(be->download(bst, out, &t->d, 0, n * 4, &err), 0);
    }
}

static void run_node(weft_node *n, uint32_t T, const weft_batch *batch, const weft_kv_view *kv) {
    weft_graph g = {.size = sizeof(g), .n_tensors = gn, .n_nodes = 1, .tensors = gt, .nodes = n};
    weft_exec_ctx c = {.size = sizeof(c), .n_tokens = T, .graph = &g, .batch = batch, .data = gd,
                       .kv = kv, .backend = bst};
    const weft_op_impl *impl = reg_find(n->op);
    assert_non_null(impl);
    if (impl->accepts) assert_true(impl->accepts(impl->state, &g, n));
    weft_error err = {.size = sizeof(err)};
    weft_status s = impl->run(impl->state, &c, n, &err);
    if (s) fprintf(stderr, "op failed: %s\n", err.message);
    assert_int_equal(s, 0);
    assert_int_equal(be->synchronize(bst, NULL, &err), 0);
}

/* max |a-b| / max |b| over n: relative to the reference's magnitude */
static double relerr(const float *a, const double *b, size_t n) {
    double m = 1e-30, d = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i])) return INFINITY;
        if (fabs(b[i]) > m) m = fabs(b[i]);
        if (fabs(a[i] - b[i]) > d) d = fabs(a[i] - b[i]);
    }
    return d / m;
}

static void free_tensors(tens *ts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        be->free(bst, &ts[i].d);
        free(ts[i].h);
    }
    gn = 0;
}

static double tol(uint32_t dt) { return dt == WEFT_DTYPE_F32 ? 1e-5 : 1.5e-2; }

/* a linear node y = x w^T (+ b), its tensors added (inputs filled, y poisoned) */
static weft_node linear_node(tens *x, tens *w, tens *b, tens *y, int bias) {
    weft_node n = {.op = WEFT_OP_LINEAR, .n_in = 3, .n_out = 1};
    n.in[0] = add_tensor(x, 1);
    n.in[1] = add_tensor(w, 1);
    n.in[2] = bias ? add_tensor(b, 1) : WEFT_TENSOR_NONE;
    n.out[0] = add_tensor(y, 0);
    return n;
}

static void check_linear(uint32_t dt, int T, int N, int K, int bias) {
    tens x = {dt, T, K}, w = {dt, N, K}, b = {dt, 1, N}, y = {dt, T, N};
    weft_node n = linear_node(&x, &w, &b, &y, bias);
    run_node(&n, (uint32_t)T, NULL, NULL);
    float *got = malloc((size_t)T * N * 4);
    double *ref = malloc((size_t)T * N * 8);
    fetch(&y, got);
    for (int t = 0; t < T; t++)
        for (int o = 0; o < N; o++) {
            double s = bias ? b.h[o] : 0;
            for (int k = 0; k < K; k++) s += (double)x.h[t * K + k] * w.h[o * K + k];
            ref[t * N + o] = s;
        }
    double e = relerr(got, ref, (size_t)T * N);
    printf("linear dt=%u T=%d N=%d K=%d bias=%d: rel err %.2e\n", dt, T, N, K, bias, e);
    assert_true(e < tol(dt));
    free(got);
    free(ref);
    tens all[] = {x, w, b, y};
    free_tensors(all, 4);
    if (!bias) be->free(bst, &b.d);
}

static void test_linear(void **state) {
    (void)state;
    check_linear(WEFT_DTYPE_F32, 1, 96, 64, 0);
    check_linear(WEFT_DTYPE_F32, 7, 96, 64, 1);
    check_linear(WEFT_DTYPE_BF16, 1, 256, 512, 0);
    check_linear(WEFT_DTYPE_BF16, 5, 256, 512, 1);
    /* GEMV rows 1..8 with each split-K setting (K 1024..8192 picks 1, 2, 4, 8 warps per row),
     * an N that does not fill the last block, and the cuBLASLt path past 8 rows */
    check_linear(WEFT_DTYPE_BF16, 2, 77, 1024, 1);
    check_linear(WEFT_DTYPE_BF16, 3, 130, 2048, 0);
    check_linear(WEFT_DTYPE_BF16, 8, 64, 4096, 1);
    check_linear(WEFT_DTYPE_BF16, 4, 40, 8192, 0);
    check_linear(WEFT_DTYPE_BF16, 1, 33, 2056, 0); /* K not a multiple of the unrolled step */
    check_linear(WEFT_DTYPE_F32, 6, 50, 1028, 1);
    check_linear(WEFT_DTYPE_BF16, 9, 96, 1024, 0);
    check_linear(WEFT_DTYPE_BF16, 17, 96, 1024, 1);
    check_linear(WEFT_DTYPE_BF16, 1, 64, 60, 0); /* K not a multiple of 8: cuBLASLt */
}

static void check_rmsnorm(uint32_t dt, int T, int D, int group) {
    tens x = {dt, T, D}, w = {dt, 1, group ? group : D}, y = {dt, T, D};
    weft_node n = {.op = WEFT_OP_RMSNORM, .n_in = 2, .n_out = 1};
    n.in[0] = add_tensor(&x, 1);
    n.in[1] = add_tensor(&w, 1);
    n.out[0] = add_tensor(&y, 0);
    n.p.f[0] = 1e-6f;
    n.p.i[0] = group;
    run_node(&n, (uint32_t)T, NULL, NULL);
    float *got = malloc((size_t)T * D * 4);
    double *ref = malloc((size_t)T * D * 8);
    fetch(&y, got);
    int g = group ? group : D;
    for (int t = 0; t < T; t++)
        for (int s = 0; s < D; s += g) {
            double ss = 0;
            for (int i = 0; i < g; i++) ss += (double)x.h[t * D + s + i] * x.h[t * D + s + i];
            double r = 1.0 / sqrt(ss / g + 1e-6);
            for (int i = 0; i < g; i++) ref[t * D + s + i] = x.h[t * D + s + i] * r * w.h[i];
        }
    double e = relerr(got, ref, (size_t)T * D);
    printf("rmsnorm dt=%u T=%d D=%d group=%d: rel err %.2e\n", dt, T, D, group, e);
    assert_true(e < tol(dt));
    free(got);
    free(ref);
    tens all[] = {x, w, y};
    free_tensors(all, 3);
}

static void test_rmsnorm(void **state) {
    (void)state;
    check_rmsnorm(WEFT_DTYPE_F32, 3, 256, 0);
    check_rmsnorm(WEFT_DTYPE_F32, 2, 512, 128);
    check_rmsnorm(WEFT_DTYPE_BF16, 3, 2048, 0);
    check_rmsnorm(WEFT_DTYPE_F32, 2, 64, 8);
}

static void check_rope(uint32_t dt, int T, int H, int hd, int layout, int scaling) {
    tens x = {dt, T, H * hd}, y = {dt, T, H * hd};
    int32_t pos[16];
    for (int t = 0; t < T; t++) pos[t] = 3 + 517 * t;
    tens p = {WEFT_DTYPE_I32, T, 1};
    p.hi = pos;
    weft_node n = {.op = WEFT_OP_ROPE, .n_in = 2, .n_out = 1};
    n.in[0] = add_tensor(&x, 1);
    n.in[1] = add_tensor(&p, 1);
    n.out[0] = add_tensor(&y, 0);
    n.p.i[0] = H;
    n.p.i[1] = hd;
    n.p.i[3] = layout;
    n.p.i[4] = scaling;
    n.p.f[0] = 500000.f;
    n.p.f[1] = 32.f;
    n.p.f[2] = 1.f;
    n.p.f[3] = 4.f;
    n.p.f[4] = 8192.f;
    run_node(&n, (uint32_t)T, NULL, NULL);
    size_t cnt = (size_t)T * H * hd;
    float *got = malloc(cnt * 4);
    double *ref = malloc(cnt * 8);
    fetch(&y, got);
    int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < half; i++) {
                double inv = pow(500000.0, -2.0 * i / hd);
                if (scaling == 1) {
                    double wl = 2 * M_PI / inv, lo_wl = 8192.0 / 1, hi_wl = 8192.0 / 4;
                    if (wl > lo_wl) inv /= 32;
                    else if (wl >= hi_wl) {
                        double sm = (8192.0 / wl - 1) / (4 - 1);
                        inv = (1 - sm) * inv / 32 + sm * inv;
                    }
                }
                double a = pos[t] * inv, c = cos(a), s = sin(a);
                int ia = layout ? 2 * i : i, ib = layout ? 2 * i + 1 : i + half;
                size_t base = (size_t)t * H * hd + (size_t)h * hd;
                double xa = x.h[base + ia], xb = x.h[base + ib];
                ref[base + ia] = xa * c - xb * s;
                ref[base + ib] = xb * c + xa * s;
            }
    double e = relerr(got, ref, cnt);
    printf("rope dt=%u layout=%d scaling=%d: rel err %.2e\n", dt, layout, scaling, e);
    /* f32 angle arithmetic at position ~3600 limits agreement to ~1e-4 */
    assert_true(e < (dt == WEFT_DTYPE_F32 ? 5e-4 : 2e-2));
    free(got);
    free(ref);
    tens all[] = {x, p, y};
    p.h = NULL;
    all[1].h = NULL;
    free_tensors(all, 3);
}

static void test_rope(void **state) {
    (void)state;
    check_rope(WEFT_DTYPE_F32, 8, 4, 64, 0, 0);
    check_rope(WEFT_DTYPE_F32, 8, 4, 128, 1, 0);
    check_rope(WEFT_DTYPE_F32, 8, 2, 64, 0, 1);
    check_rope(WEFT_DTYPE_BF16, 8, 4, 128, 0, 1);
}

/* Two sequences in slots 1 and 0, written over two steps: step 1 = prompts of len0 - 1 and
 * len1 - 1 rows, step 2 = one row each. Checks both steps' outputs against a double-precision
 * attention over all rows. With step1 set, returns step 1's output (malloc'd floats). */
static void check_attention_at(uint32_t dt, int Hq, int Hkv, int hd, int len0, int len1,
                               float **step1) {
    const int slots = 2, n_layers = 1;
    const int max_seq = len0 > len1 ? len0 : len1;
    size_t es = dt == WEFT_DTYPE_F32 ? 4 : 2;
    weft_buffer kb[1], vb[1];
    weft_error err = {.size = sizeof(err)};
    size_t cache = (size_t)slots * max_seq * Hkv * hd * es;
    assert_int_equal(be->alloc(bst, cache, WEFT_MEMORY_DEVICE, &kb[0], &err), 0);
    assert_int_equal(be->alloc(bst, cache, WEFT_MEMORY_DEVICE, &vb[0], &err), 0);
    weft_kv_contiguous kc = {.size = sizeof(kc), .n_layers = n_layers, .n_slots = slots,
                             .max_seq = max_seq, .n_kv_heads = Hkv, .head_dim = hd, .dtype = dt,
                             .k = kb, .v = vb};
    weft_kv_view view = {.size = sizeof(view), .layout = "contiguous", .desc = &kc};
    /* all rows of both steps, per sequence */
    int lens[2] = {len0, len1};
    float *Q[2], *K[2], *V[2];
    for (int s = 0; s < 2; s++) {
        size_t nq = (size_t)lens[s] * Hq * hd, nk = (size_t)lens[s] * Hkv * hd;
        Q[s] = malloc(nq * 4);
        K[s] = malloc(nk * 4);
        V[s] = malloc(nk * 4);
        for (size_t i = 0; i < nq; i++) Q[s][i] = frand();
        for (size_t i = 0; i < nk; i++) K[s][i] = frand(), V[s][i] = frand();
    }
    int slot_of[2] = {1, 0};
    for (int step = 0; step < 2; step++) {
        int rows_of[2] = {step ? 1 : len0 - 1, step ? 1 : len1 - 1};
        int start[2] = {step ? len0 - 1 : 0, step ? len1 - 1 : 0};
        int T = rows_of[0] + rows_of[1];
        tens q = {dt, T, Hq * hd}, k = {dt, T, Hkv * hd}, v = {dt, T, Hkv * hd},
             o = {dt, T, Hq * hd}, p = {WEFT_DTYPE_I32, T, 1};
        q.h = malloc((size_t)T * Hq * hd * 4);
        k.h = malloc((size_t)T * Hkv * hd * 4);
        v.h = malloc((size_t)T * Hkv * hd * 4);
        int32_t *pos = malloc((size_t)T * 4), *seq_of_row = malloc((size_t)T * 4);
        int32_t *lr = malloc((size_t)T * 4);
        double *sc = malloc((size_t)max_seq * 8);
        weft_seq seqs[2];
        int r = 0;
        for (int s = 0; s < 2; s++) {
            seqs[s] = (weft_seq){.request_id = (uint64_t)s, .kv_slot = slot_of[s],
                                 .n_past = start[s], .n_new = rows_of[s], .first_row = r};
            for (int j = 0; j < rows_of[s]; j++, r++) {
                int src = start[s] + j;
                memcpy(q.h + (size_t)r * Hq * hd, Q[s] + (size_t)src * Hq * hd, (size_t)Hq * hd * 4);
                memcpy(k.h + (size_t)r * Hkv * hd, K[s] + (size_t)src * Hkv * hd, (size_t)Hkv * hd * 4);
                memcpy(v.h + (size_t)r * Hkv * hd, V[s] + (size_t)src * Hkv * hd, (size_t)Hkv * hd * 4);
                pos[r] = src;
                seq_of_row[r] = s;
            }
        }
        p.hi = pos;
        weft_node n = {.op = WEFT_OP_ATTENTION, .n_in = 4, .n_out = 1};
        n.in[0] = add_tensor(&q, 1);
        n.in[1] = add_tensor(&k, 1);
        n.in[2] = add_tensor(&v, 1);
        n.in[3] = add_tensor(&p, 1);
        n.out[0] = add_tensor(&o, 0);
        n.p.i[0] = 0;
        n.p.i[1] = Hq;
        n.p.i[2] = Hkv;
        n.p.i[3] = hd;
        snprintf(n.name, sizeof(n.name), "layers.0.attn");
        for (int i = 0; i < T; i++) lr[i] = i;
        weft_batch batch = {.size = sizeof(batch), .n_tokens = (uint32_t)T, .n_seqs = 2,
                            .n_logits = (uint32_t)T, .tokens = pos, .positions = pos,
                            .seq_of_row = seq_of_row, .seqs = seqs, .logit_rows = lr};
        run_node(&n, (uint32_t)T, &batch, &view);
        size_t cnt = (size_t)T * Hq * hd;
        float *got = malloc(cnt * 4);
        double *ref = malloc(cnt * 8);
        fetch(&o, got);
        /* reference over the dtype-rounded values the device saw (q/k/v of earlier steps were
         * rounded when uploaded then) */
        for (int row = 0; row < T; row++) {
            int s = seq_of_row[row], P = pos[row];
            for (int h = 0; h < Hq; h++) {
                int kh = h / (Hq / Hkv);
                double m = -1e300, l = 0;
                for (int j = 0; j <= P; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++) {
                        float qe = Q[s][(size_t)(start[s] + row - seqs[s].first_row) * Hq * hd + h * hd + e];
                        float ke = K[s][(size_t)j * Hkv * hd + kh * hd + e];
                        if (dt == WEFT_DTYPE_BF16) qe = from_bf16(to_bf16(qe)), ke = from_bf16(to_bf16(ke));
                        d += (double)qe * ke;
                    }
                    sc[j] = d / sqrt((double)hd);
                    if (sc[j] > m) m = sc[j];
                }
                for (int j = 0; j <= P; j++) l += exp(sc[j] - m);
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int j = 0; j <= P; j++) {
                        float ve = V[s][(size_t)j * Hkv * hd + kh * hd + e];
                        if (dt == WEFT_DTYPE_BF16) ve = from_bf16(to_bf16(ve));
                        acc += exp(sc[j] - m) * ve;
                    }
                    ref[(size_t)row * Hq * hd + h * hd + e] = acc / l;
                }
            }
        }
        double e = relerr(got, ref, cnt);
        printf("attention dt=%u Hq=%d Hkv=%d hd=%d step %d: rel err %.2e\n", dt, Hq, Hkv, hd,
               step, e);
        assert_true(e < (dt == WEFT_DTYPE_F32 ? 1e-5 : 2e-2));
        if (step == 0 && step1)
            *step1 = got;
        else
            free(got);
        free(ref);
        free(seq_of_row);
        free(lr);
        free(sc);
        tens all[] = {q, k, v, o, p};
        free_tensors(all, 5);
        free(pos);
    }
    for (int s = 0; s < 2; s++) free(Q[s]), free(K[s]), free(V[s]);
    be->free(bst, &kb[0]);
    be->free(bst, &vb[0]);
}

static void check_attention(uint32_t dt, int Hq, int Hkv, int hd) {
    check_attention_at(dt, Hq, Hkv, hd, 6, 4, NULL);
}

static void test_attention(void **state) {
    (void)state;
    check_attention(WEFT_DTYPE_F32, 8, 4, 8);
    check_attention(WEFT_DTYPE_F32, 4, 2, 128);
    check_attention(WEFT_DTYPE_BF16, 8, 2, 64);
}

/* Prefill steps of bf16 models attend on tensor cores (option prefill_tc, core.cu
 * weft_attention_tc): prompts of several tiles and chunks, both within the tolerance of the
 * double reference, on instance [0] (prefill_tc on, the default) and [3] (off: weft_attention).
 * The two must differ somewhere (the tensor cores round the softmax weights to bf16), which
 * shows the tensor-core kernel ran. Shapes: G = 4, 2, 1 (tiles of 16, 32, 64 rows); few blocks
 * (split, merged by weft_attention_combine) and, at Hkv 16 and 998 rows, enough tiles that the
 * kernel does not split. */
static void test_attention_prefill_tc(void **state) {
    (void)state;
    static const struct { int Hq, Hkv, hd, len0, len1; } cs[] = {
        {8, 2, 64, 71, 38}, {16, 8, 128, 100, 33}, {4, 4, 64, 130, 17}, {64, 16, 16, 900, 100}};
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
        float *tc = NULL, *cc = NULL;
        use_inst(0);
        check_attention_at(WEFT_DTYPE_BF16, cs[i].Hq, cs[i].Hkv, cs[i].hd, cs[i].len0,
                           cs[i].len1, &tc);
        use_inst(3);
        check_attention_at(WEFT_DTYPE_BF16, cs[i].Hq, cs[i].Hkv, cs[i].hd, cs[i].len0,
                           cs[i].len1, &cc);
        use_inst(0);
        size_t n = (size_t)(cs[i].len0 + cs[i].len1 - 2) * cs[i].Hq * cs[i].hd, diff = 0;
        for (size_t j = 0; j < n; j++) diff += tc[j] != cc[j];
        printf("prefill tc Hq=%d Hkv=%d hd=%d: %zu of %zu outputs differ from weft_attention's\n",
               cs[i].Hq, cs[i].Hkv, cs[i].hd, diff, n);
        assert_true(diff > 0);
        free(tc);
        free(cc);
    }
}

static void test_elementwise_and_head(void **state) {
    (void)state;
    const uint32_t dt = WEFT_DTYPE_F32;
    int T = 4, F = 300, V = 50, D = 64;
    /* swiglu */
    tens g = {dt, T, F}, u = {dt, T, F}, y = {dt, T, F};
    weft_node n = {.op = WEFT_OP_SWIGLU, .n_in = 2, .n_out = 1};
    n.in[0] = add_tensor(&g, 1);
    n.in[1] = add_tensor(&u, 1);
    n.out[0] = add_tensor(&y, 0);
    run_node(&n, (uint32_t)T, NULL, NULL);
    float *got = malloc((size_t)T * F * 4);
    double *ref = malloc((size_t)T * F * 8);
    fetch(&y, got);
    for (int i = 0; i < T * F; i++) ref[i] = g.h[i] / (1 + exp(-g.h[i])) * u.h[i];
    assert_true(relerr(got, ref, (size_t)T * F) < 1e-5);
    tens all[] = {g, u, y};
    free_tensors(all, 3);
    /* lm_head over rows 1 and 3, f32 out */
    tens x = {dt, T, D}, w = {dt, V, D}, lo = {WEFT_DTYPE_F32, 2, V};
    weft_node h = {.op = WEFT_OP_LM_HEAD, .n_in = 2, .n_out = 1};
    h.in[0] = add_tensor(&x, 1);
    h.in[1] = add_tensor(&w, 1);
    h.out[0] = add_tensor(&lo, 0);
    int32_t rows[2] = {1, 3};
    weft_batch batch = {.size = sizeof(batch), .n_tokens = (uint32_t)T, .n_logits = 2,
                        .logit_rows = rows};
    run_node(&h, (uint32_t)T, &batch, NULL);
    fetch(&lo, got);
    for (int r = 0; r < 2; r++)
        for (int o = 0; o < V; o++) {
            double s = 0;
            for (int k = 0; k < D; k++) s += (double)x.h[rows[r] * D + k] * w.h[o * D + k];
            ref[r * V + o] = s;
        }
    double e = relerr(got, ref, (size_t)2 * V);
    printf("lm_head gather: rel err %.2e\n", e);
    assert_true(e < 1e-5);
    tens all2[] = {x, w, lo};
    free_tensors(all2, 3);
    free(got);
    free(ref);
}

/* embed: every row equals its table row exactly (ids outside [0, V) give zeros), poisoned output
 * first. Row widths cover the kernel's 16-byte vectors in one trip (64, 4,096), two trips with a
 * short second one (8,200 bf16: 1,025 vectors at 256 threads), and the element loop (60: not
 * whole vectors); f32 activations from a bf16 table widen each value. */
/* one EMBED node of tokens tk (T of them) over table tab into ex (poisoned first): ex as floats
 * (malloc'ed) */
static float *embed_run(tens *tk, tens *tab, tens *ex, int T) {
    weft_node em = {.op = WEFT_OP_EMBED, .n_in = 2, .n_out = 1};
    em.in[0] = add_tensor(tk, 1);
    em.in[1] = add_tensor(tab, 1);
    em.out[0] = add_tensor(ex, 0);
    poison(ex);
    run_node(&em, (uint32_t)T, NULL, NULL);
    float *got = malloc((size_t)(ex->rows * ex->cols) * sizeof(float));
    fetch(ex, got);
    return got;
}

static void check_embed(uint32_t xdt, uint32_t tdt, int V, int D) {
    enum { T = 4 };
    tens tab = {tdt, V, D}, ex = {xdt, T, D}, tk = {WEFT_DTYPE_I32, T, 1};
    int32_t toks[T] = {7 % V, 0, V - 1, V}; /* the last is out of range */
    tk.hi = toks;
    float *got = embed_run(&tk, &tab, &ex, T);
    size_t bad = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < D; i++) {
            float want = toks[t] < V ? tab.h[(size_t)toks[t] * D + i] : 0.f;
            if (!(got[(size_t)t * D + i] == want)) bad++;
        }
    printf("embed x %u table %u V=%d D=%d: %zu of %d elements differ\n", xdt, tdt, V, D, bad,
           T * D);
    assert_int_equal(bad, 0);
    free(got);
    tens all[] = {tk, tab, ex};
    all[0].h = NULL;
    free_tensors(all, 3);
}

static void test_embed(void **state) {
    (void)state;
    check_embed(WEFT_DTYPE_BF16, WEFT_DTYPE_BF16, 50, 64);
    check_embed(WEFT_DTYPE_BF16, WEFT_DTYPE_BF16, 9, 4096);
    check_embed(WEFT_DTYPE_BF16, WEFT_DTYPE_BF16, 5, 8200);
    check_embed(WEFT_DTYPE_BF16, WEFT_DTYPE_BF16, 11, 60);
    check_embed(WEFT_DTYPE_F32, WEFT_DTYPE_F32, 13, 1028);
    check_embed(WEFT_DTYPE_F32, WEFT_DTYPE_BF16, 13, 2048);
}

/* Rounding to bf16 (core.cu f32_to_bf16: integer arithmetic, or with the option bf16_cvt the
 * hardware's cvt.rn.bf16.f32) against round to nearest even on the host, bit for bit, through
 * the embedding of an f32 table into bf16 activations: ties both ways, values one ulp either side
 * of a tie, subnormals of both signs, the largest finite values (one rounds to infinity),
 * infinities, zeros of both signs and random non-NaN bit patterns of every exponent. */
static void check_bf16_round(void) {
    enum { T = 4, D = 256 };
    tens tab = {WEFT_DTYPE_F32, T, D}, ex = {WEFT_DTYPE_BF16, T, D}, tk = {WEFT_DTYPE_I32, T, 1};
    int32_t toks[T] = {0, 1, 2, 3};
    tk.hi = toks;
    static const uint32_t special[] = {
        0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0xbf808000u, 0xbf818000u,
        0x00000001u, 0x00008000u, 0x00018000u, 0x00007fffu, 0x007fffffu, 0x007f8000u,
        0x80000001u, 0x80018000u, 0x807fffffu, 0x00800000u, 0x7f7fffffu, 0x7f7f7fffu,
        0x7f7f8000u, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u};
    const size_t ns = sizeof(special) / sizeof(special[0]), n = (size_t)T * D;
    tab.h = malloc(n * sizeof(float));
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        if (i < ns) {
            u = special[i];
        } else {
            do { /* every exponent, NaN left out */
                u = (uint32_t)(xorshift(&r) >> 32);
                if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u; /* a tie */
            } while ((u & 0x7fffffffu) > 0x7f800000u);
        }
        memcpy(&tab.h[i], &u, 4);
    }
    float *got = embed_run(&tk, &tab, &ex, T);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float want = from_bf16(to_bf16(tab.h[i]));
        if (memcmp(&got[i], &want, 4)) bad++;
    }
    printf("bf16 rounding of %zu f32 values (%zu special): %zu differ\n", n, ns, bad);
    assert_int_equal(bad, 0);
    free(got);
    tens all[] = {tk, tab, ex};
    all[0].h = NULL;
    free_tensors(all, 3);
}

static void test_bf16_round(void **state) {
    (void)state;
    use_inst(0); /* integer arithmetic */
    check_bf16_round();
    use_inst(6); /* option bf16_cvt */
    check_bf16_round();
    use_inst(0);
}

/* ---- fused ops ------------------------------------------------------------------------ */
static void expect_same(const char *what, const float *a, const float *b, size_t n) {
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i])) diff++;
    printf("%s: %zu of %zu elements differ\n", what, diff, n);
    assert_int_equal(diff, 0);
}

/* fuse.linear_swiglu against the double reference, and bit for bit against linear, linear,
 * swiglu (separate weights) and against the merged gate|up weight through one linear + split */
static void check_linear_swiglu(uint32_t dt, int T, int F, int K) {
    tens x = {dt, T, K}, wg = {dt, F, K}, wu = {dt, F, K}, gu = {dt, 2 * F, K};
    tens g = {dt, T, F}, u = {dt, T, F}, y0 = {dt, T, F}, y1 = {dt, T, F}, y2 = {dt, T, F};
    uint32_t ix = add_tensor(&x, 1), ig = add_tensor(&wg, 1), iu = add_tensor(&wu, 1);
    /* the merged weight holds the same values: gate rows, then up rows */
    gu.h = malloc((size_t)2 * F * K * sizeof(float));
    memcpy(gu.h, wg.h, (size_t)F * K * sizeof(float));
    memcpy(gu.h + (size_t)F * K, wu.h, (size_t)F * K * sizeof(float));
    uint32_t igu = add_tensor(&gu, 1);
    uint32_t og = add_tensor(&g, 0), ou = add_tensor(&u, 0), o0 = add_tensor(&y0, 0),
             o1 = add_tensor(&y1, 0), o2 = add_tensor(&y2, 0);
    weft_node n = {.op = WEFT_OP_LINEAR, .n_in = 2, .n_out = 1};
    n.in[0] = ix, n.in[1] = ig, n.out[0] = og;
    run_node(&n, (uint32_t)T, NULL, NULL);
    n.in[1] = iu, n.out[0] = ou;
    run_node(&n, (uint32_t)T, NULL, NULL);
    weft_node sw = {.op = WEFT_OP_SWIGLU, .n_in = 2, .n_out = 1};
    sw.in[0] = og, sw.in[1] = ou, sw.out[0] = o0;
    run_node(&sw, (uint32_t)T, NULL, NULL);
    weft_node f = {.op = op_lsw, .n_in = 3, .n_out = 1};
    f.in[0] = ix, f.in[1] = ig, f.in[2] = iu, f.out[0] = o1;
    run_node(&f, (uint32_t)T, NULL, NULL);
    weft_node fm = {.op = op_lsw, .n_in = 2, .n_out = 1};
    fm.in[0] = ix, fm.in[1] = igu, fm.out[0] = o2;
    fm.p.i[0] = 1;
    run_node(&fm, (uint32_t)T, NULL, NULL);
    size_t cnt = (size_t)T * F;
    float *a = malloc(cnt * 4), *b = malloc(cnt * 4), *c = malloc(cnt * 4);
    double *ref = malloc(cnt * 8);
    fetch(&y0, a);
    fetch(&y1, b);
    fetch(&y2, c);
    for (int t = 0; t < T; t++)
        for (int o = 0; o < F; o++) {
            double sg = 0, su = 0;
            for (int k = 0; k < K; k++) {
                sg += (double)x.h[t * K + k] * wg.h[o * K + k];
                su += (double)x.h[t * K + k] * wu.h[o * K + k];
            }
            ref[t * F + o] = sg / (1 + exp(-sg)) * su;
        }
    double e = relerr(b, ref, cnt);
    printf("fuse.linear_swiglu dt=%u T=%d F=%d K=%d: rel err %.2e\n", dt, T, F, K, e);
    assert_true(e < (dt == WEFT_DTYPE_F32 ? 1e-5 : 3e-2));
    expect_same("linear_swiglu vs linear+linear+swiglu", b, a, cnt);
    expect_same("linear_swiglu merged vs separate", c, b, cnt);
    free(a), free(b), free(c), free(ref);
    tens all[] = {x, wg, wu, gu, g, u, y0, y1, y2};
    free_tensors(all, 9);
}

static void test_linear_swiglu(void **state) {
    (void)state;
    if (!op_lsw) skip();
    check_linear_swiglu(WEFT_DTYPE_BF16, 1, 300, 2048);
    check_linear_swiglu(WEFT_DTYPE_BF16, 3, 64, 1024);
    check_linear_swiglu(WEFT_DTYPE_F32, 2, 40, 512);
}

/* A merged q|k|v linear then split gives, row for row, the bits of three separate linears. */
static void test_merged_linear_split(void **state) {
    (void)state;
    const uint32_t dt = WEFT_DTYPE_BF16;
    const int T = 1, K = 2048, Nq = 256, Nk = 64;
    tens x = {dt, T, K}, wq = {dt, Nq, K}, wk = {dt, Nk, K}, wv = {dt, Nk, K};
    tens wm = {dt, Nq + 2 * Nk, K}, ym = {dt, T, Nq + 2 * Nk};
    tens q0 = {dt, T, Nq}, k0 = {dt, T, Nk}, v0 = {dt, T, Nk}, q1 = {dt, T, Nq}, k1 = {dt, T, Nk},
         v1 = {dt, T, Nk};
    uint32_t ix = add_tensor(&x, 1), iq = add_tensor(&wq, 1), ik = add_tensor(&wk, 1),
             iv = add_tensor(&wv, 1);
    wm.h = malloc((size_t)(Nq + 2 * Nk) * K * sizeof(float));
    memcpy(wm.h, wq.h, (size_t)Nq * K * 4);
    memcpy(wm.h + (size_t)Nq * K, wk.h, (size_t)Nk * K * 4);
    memcpy(wm.h + (size_t)(Nq + Nk) * K, wv.h, (size_t)Nk * K * 4);
    uint32_t im = add_tensor(&wm, 1), oym = add_tensor(&ym, 0);
    uint32_t oq0 = add_tensor(&q0, 0), ok0 = add_tensor(&k0, 0), ov0 = add_tensor(&v0, 0);
    uint32_t oq1 = add_tensor(&q1, 0), ok1 = add_tensor(&k1, 0), ov1 = add_tensor(&v1, 0);
    weft_node n = {.op = WEFT_OP_LINEAR, .n_in = 2, .n_out = 1};
    n.in[0] = ix;
    n.in[1] = iq, n.out[0] = oq0;
    run_node(&n, T, NULL, NULL);
    n.in[1] = ik, n.out[0] = ok0;
    run_node(&n, T, NULL, NULL);
    n.in[1] = iv, n.out[0] = ov0;
    run_node(&n, T, NULL, NULL);
    n.in[1] = im, n.out[0] = oym;
    run_node(&n, T, NULL, NULL);
    weft_node sp = {.op = WEFT_OP_SPLIT, .n_in = 1, .n_out = 3};
    sp.in[0] = oym, sp.out[0] = oq1, sp.out[1] = ok1, sp.out[2] = ov1;
    sp.p.i[0] = Nq, sp.p.i[1] = Nk, sp.p.i[2] = Nk;
    run_node(&sp, T, NULL, NULL);
    float *a = malloc((size_t)Nq * 4), *b = malloc((size_t)Nq * 4);
    tens *sep[3] = {&q0, &k0, &v0}, *mer[3] = {&q1, &k1, &v1};
    for (int i = 0; i < 3; i++) {
        fetch(sep[i], a);
        fetch(mer[i], b);
        expect_same("merged linear + split vs separate linear", b, a, (size_t)sep[i]->cols);
    }
    free(a), free(b);
    tens all[] = {x, wq, wk, wv, wm, ym, q0, k0, v0, q1, k1, v1};
    free_tensors(all, 12);
}

/* fuse.qkv_rope (norm + rope of q and k, v copied out of a merged row) bit for bit against
 * rmsnorm(group hd) and rope nodes, in bf16 and f32, with and without the norm */
static void check_qkv_rope(uint32_t dt, int T, int Hq, int Hkv, int hd, int norm, int scaling) {
    int C = (Hq + 2 * Hkv) * hd;
    tens qkv = {dt, T, C}, q = {dt, T, Hq * hd}, k = {dt, T, Hkv * hd}, v = {dt, T, Hkv * hd};
    tens qn = {dt, 1, hd}, kn = {dt, 1, hd};
    tens qa = {dt, T, Hq * hd}, ka = {dt, T, Hkv * hd}, qb = {dt, T, Hq * hd},
         kb = {dt, T, Hkv * hd}, qc = {dt, T, Hq * hd}, kc = {dt, T, Hkv * hd},
         qd = {dt, T, Hq * hd}, kd = {dt, T, Hkv * hd}, vd = {dt, T, Hkv * hd};
    int32_t pos[8];
    for (int t = 0; t < T; t++) pos[t] = 5 + 411 * t;
    tens p = {WEFT_DTYPE_I32, T, 1};
    p.hi = pos;
    uint32_t iqkv = add_tensor(&qkv, 1);
    /* separate q, k, v hold the merged row's columns */
    q.h = malloc((size_t)T * Hq * hd * 4);
    k.h = malloc((size_t)T * Hkv * hd * 4);
    v.h = malloc((size_t)T * Hkv * hd * 4);
    for (int t = 0; t < T; t++) {
        memcpy(q.h + (size_t)t * Hq * hd, qkv.h + (size_t)t * C, (size_t)Hq * hd * 4);
        memcpy(k.h + (size_t)t * Hkv * hd, qkv.h + (size_t)t * C + Hq * hd, (size_t)Hkv * hd * 4);
        memcpy(v.h + (size_t)t * Hkv * hd, qkv.h + (size_t)t * C + (Hq + Hkv) * hd,
               (size_t)Hkv * hd * 4);
    }
    uint32_t iq = add_tensor(&q, 1), ik = add_tensor(&k, 1), iv = add_tensor(&v, 1);
    uint32_t ip = add_tensor(&p, 1), iqn = add_tensor(&qn, 1), ikn = add_tensor(&kn, 1);
    /* gt[] holds 16 tensors: outputs of the unfused chain, the separate and the merged form */
    uint32_t oqa = add_tensor(&qa, 0), oka = add_tensor(&ka, 0);
    uint32_t oqb = add_tensor(&qb, 0), okb = add_tensor(&kb, 0);
    uint32_t oqc = add_tensor(&qc, 0), okc = add_tensor(&kc, 0);
    (void)iv;
    uint32_t oqd = oqa, okd = oka, ovd = WEFT_TENSOR_NONE;
    weft_op_params rp;
    memset(&rp, 0, sizeof(rp));
    rp.i[1] = hd, rp.i[4] = scaling;
    rp.f[0] = 500000.f, rp.f[1] = 32.f, rp.f[2] = 1.f, rp.f[3] = 4.f, rp.f[4] = 8192.f;
    /* unfused: [rmsnorm per head] then rope, for q and for k */
    uint32_t src_q = iq, src_k = ik;
    if (norm) {
        weft_node nn = {.op = WEFT_OP_RMSNORM, .n_in = 2, .n_out = 1};
        nn.p.f[0] = 1e-6f, nn.p.i[0] = hd;
        nn.in[0] = iq, nn.in[1] = iqn, nn.out[0] = oqa;
        run_node(&nn, (uint32_t)T, NULL, NULL);
        nn.in[0] = ik, nn.in[1] = ikn, nn.out[0] = oka;
        run_node(&nn, (uint32_t)T, NULL, NULL);
        src_q = oqa, src_k = oka;
    }
    weft_node r = {.op = WEFT_OP_ROPE, .n_in = 2, .n_out = 1, .p = rp};
    r.p.i[0] = Hq, r.in[0] = src_q, r.in[1] = ip, r.out[0] = oqb;
    run_node(&r, (uint32_t)T, NULL, NULL);
    r.p.i[0] = Hkv, r.in[0] = src_k, r.out[0] = okb;
    run_node(&r, (uint32_t)T, NULL, NULL);
    /* fused, separate inputs */
    weft_node f = {.op = op_qkr, .n_out = 2, .p = rp};
    f.p.i[0] = Hq, f.p.i[5] = Hkv, f.p.i[7] = norm, f.p.f[5] = 1e-6f;
    f.in[0] = iq, f.in[1] = ik, f.in[2] = ip, f.in[3] = iqn, f.in[4] = ikn;
    f.n_in = norm ? 5 : 3;
    f.out[0] = oqc, f.out[1] = okc;
    run_node(&f, (uint32_t)T, NULL, NULL);
    size_t nq = (size_t)T * Hq * hd, nk = (size_t)T * Hkv * hd;
    float *a = malloc(nq * 4), *b = malloc(nq * 4);
    fetch(&qb, a), fetch(&qc, b);
    expect_same("qkv_rope q vs norm+rope", b, a, nq);
    fetch(&kb, a), fetch(&kc, b);
    expect_same("qkv_rope k vs norm+rope", b, a, nk);
    /* fused, merged input; outputs reuse the unfused chain's first buffers (no longer read) */
    qd = qa, kd = ka;
    ovd = add_tensor(&vd, 0);
    weft_node m = f;
    m.p.i[6] = 1;
    m.in[0] = iqkv, m.in[1] = ip, m.in[2] = iqn, m.in[3] = ikn;
    m.n_in = norm ? 4 : 2;
    m.n_out = 3;
    m.out[0] = oqd, m.out[1] = okd, m.out[2] = ovd;
    {   /* poison the reused buffers again */
        weft_error err = {.size = sizeof(err)};
        void *poison = malloc(nq * 4);
        memset(poison, 0xff, nq * 4);
        size_t es = dt == WEFT_DTYPE_F32 ? 4 : 2;
        assert_int_equal(be->upload(bst, &qd.d, 0, poison, nq * es, &err), 0);
        assert_int_equal(be->upload(bst, &kd.d, 0, poison, nk * es, &err), 0);
        free(poison);
    }
    run_node(&m, (uint32_t)T, NULL, NULL);
    fetch(&qb, a), fetch(&qd, b);
    expect_same("qkv_rope merged q vs norm+rope", b, a, nq);
    fetch(&kb, a), fetch(&kd, b);
    expect_same("qkv_rope merged k vs norm+rope", b, a, nk);
    fetch(&vd, b);
    expect_same("qkv_rope merged v vs the v columns", b, v.h, nk);
    printf("qkv_rope dt=%u T=%d Hq=%d Hkv=%d hd=%d norm=%d scaling=%d: identical\n", dt, T, Hq,
           Hkv, hd, norm, scaling);
    free(a), free(b);
    tens all[] = {qkv, q, k, v, p, qn, kn, qa, ka, qb, kb, qc, kc, vd};
    all[4].h = NULL;
    free_tensors(all, 14);
}

static void test_qkv_rope(void **state) {
    (void)state;
    if (!op_qkr) skip();
    check_qkv_rope(WEFT_DTYPE_BF16, 1, 16, 8, 128, 1, 0);
    check_qkv_rope(WEFT_DTYPE_BF16, 3, 8, 2, 64, 0, 1);
    check_qkv_rope(WEFT_DTYPE_F32, 2, 4, 2, 128, 1, 1);
}

/* add_rmsnorm bit for bit against add then rmsnorm, at model row lengths */
static void check_add_rmsnorm(uint32_t dt, int T, int D) {
    tens x = {dt, T, D}, r = {dt, T, D}, w = {dt, 1, D}, s = {dt, T, D}, y0 = {dt, T, D},
         y1 = {dt, T, D}, s1 = {dt, T, D};
    uint32_t ix = add_tensor(&x, 1), ir = add_tensor(&r, 1), iw = add_tensor(&w, 1);
    uint32_t os = add_tensor(&s, 0), oy0 = add_tensor(&y0, 0), oy1 = add_tensor(&y1, 0),
             os1 = add_tensor(&s1, 0);
    weft_node a = {.op = WEFT_OP_ADD, .n_in = 2, .n_out = 1};
    a.in[0] = ix, a.in[1] = ir, a.out[0] = os;
    run_node(&a, (uint32_t)T, NULL, NULL);
    weft_node n = {.op = WEFT_OP_RMSNORM, .n_in = 2, .n_out = 1};
    n.in[0] = os, n.in[1] = iw, n.out[0] = oy0, n.p.f[0] = 1e-5f;
    run_node(&n, (uint32_t)T, NULL, NULL);
    weft_node f = {.op = WEFT_OP_ADD_RMSNORM, .n_in = 3, .n_out = 2};
    f.in[0] = ix, f.in[1] = ir, f.in[2] = iw, f.out[0] = oy1, f.out[1] = os1, f.p.f[0] = 1e-5f;
    run_node(&f, (uint32_t)T, NULL, NULL);
    size_t cnt = (size_t)T * D;
    float *p = malloc(cnt * 4), *q = malloc(cnt * 4);
    fetch(&y0, p), fetch(&y1, q);
    expect_same("add_rmsnorm y vs add + rmsnorm", q, p, cnt);
    fetch(&s, p), fetch(&s1, q);
    expect_same("add_rmsnorm residual vs add", q, p, cnt);
    free(p), free(q);
    tens all[] = {x, r, w, s, y0, y1, s1};
    free_tensors(all, 7);
}

static void test_add_rmsnorm(void **state) {
    (void)state;
    check_add_rmsnorm(WEFT_DTYPE_BF16, 1, 2048);
    check_add_rmsnorm(WEFT_DTYPE_BF16, 3, 1024);
    check_add_rmsnorm(WEFT_DTYPE_F32, 2, 64);
    check_add_rmsnorm(WEFT_DTYPE_BF16, 2, 896);
    check_add_rmsnorm(WEFT_DTYPE_BF16, 1, 4096);  /* four elements a thread in registers */
    check_add_rmsnorm(WEFT_DTYPE_BF16, 1, 10240); /* past NORM_MAXE a thread: the loops */
}

/* lm_head through the GEMV kernel: bf16 weights, f32 logits, gathered rows */
static void test_head_gemv(void **state) {
    (void)state;
    const uint32_t dt = WEFT_DTYPE_BF16;
    int T = 3, V = 1000, D = 1024;
    tens x = {dt, T, D}, w = {dt, V, D}, lo = {WEFT_DTYPE_F32, 2, V};
    weft_node h = {.op = WEFT_OP_LM_HEAD, .n_in = 2, .n_out = 1};
    h.in[0] = add_tensor(&x, 1);
    h.in[1] = add_tensor(&w, 1);
    h.out[0] = add_tensor(&lo, 0);
    int32_t rows[2] = {0, 2};
    weft_batch batch = {.size = sizeof(batch), .n_tokens = (uint32_t)T, .n_logits = 2,
                        .logit_rows = rows};
    run_node(&h, (uint32_t)T, &batch, NULL);
    float *got = malloc((size_t)2 * V * 4);
    double *ref = malloc((size_t)2 * V * 8);
    fetch(&lo, got);
    for (int r = 0; r < 2; r++)
        for (int o = 0; o < V; o++) {
            double s = 0;
            for (int k = 0; k < D; k++) s += (double)x.h[rows[r] * D + k] * w.h[o * D + k];
            ref[r * V + o] = s;
        }
    double e = relerr(got, ref, (size_t)2 * V);
    printf("lm_head gemv bf16 -> f32: rel err %.2e\n", e);
    assert_true(e < 1e-5); /* f32 logits of bf16 inputs: only summation order differs */
    free(got), free(ref);
    tens all[] = {x, w, lo};
    free_tensors(all, 3);
}

/* ---- option gemv_xsmem: x read from shared memory ------------------------------------------ */
/* Run node n on instance 0 and on every other instance: the outputs must be the same bits. */
static void same_on_insts(const char *what, weft_node *n, tens *out, uint32_t T,
                          const weft_batch *batch) {
    size_t cnt = (size_t)(out->rows * out->cols);
    float *a = malloc(cnt * 4), *b = malloc(cnt * 4);
    run_node(n, T, batch, NULL);
    fetch(out, a);
    for (int k = 1; k < N_INST; k++) {
        poison(out);
        use_inst(k);
        run_node(n, T, batch, NULL);
        use_inst(0);
        fetch(out, b);
        char msg[160];
        snprintf(msg, sizeof(msg), "%s, instance %d vs 0", what, k);
        expect_same(msg, b, a, cnt);
    }
    free(a), free(b);
}

static void check_xs_linear(uint32_t dt, int T, int N, int K, int bias) {
    tens x = {dt, T, K}, w = {dt, N, K}, b = {dt, 1, N}, y = {dt, T, N};
    weft_node n = linear_node(&x, &w, &b, &y, bias);
    char what[96];
    snprintf(what, sizeof(what), "linear dt=%u T=%d N=%d K=%d bias=%d", dt, T, N, K, bias);
    same_on_insts(what, &n, &y, (uint32_t)T, NULL);
    tens all[] = {x, w, b, y};
    free_tensors(all, 4);
    if (!bias) be->free(bst, &b.d);
}

static void check_xs_swiglu(uint32_t dt, int T, int F, int K) {
    tens x = {dt, T, K}, gu = {dt, 2 * F, K}, y = {dt, T, F};
    weft_node fm = {.op = op_lsw, .n_in = 2, .n_out = 1};
    fm.in[0] = add_tensor(&x, 1), fm.in[1] = add_tensor(&gu, 1), fm.out[0] = add_tensor(&y, 0);
    fm.p.i[0] = 1;
    char what[96];
    snprintf(what, sizeof(what), "linear_swiglu dt=%u T=%d F=%d K=%d", dt, T, F, K);
    same_on_insts(what, &fm, &y, (uint32_t)T, NULL);
    tens all[] = {x, gu, y};
    free_tensors(all, 3);
}

static void test_gemv_xsmem(void **state) {
    (void)state;
    if (!all_insts()) skip();
    /* every split (K 1024..12288), T 1..8, rows that leave the last block short, f32, x past
     * 48 KiB of shared memory (T = 4, K = 8192) and past 96 KiB (the plain form's fallback);
     * for the staged form (instance 3, T = 1): one to six vectors a lane, lanes short of the
     * last vector (K = 2056), grids whose row groups shrink (N = 517, 33) and a full 4096-row
     * product (six row groups a block) */
    check_xs_linear(WEFT_DTYPE_BF16, 1, 3072, 2048, 0);
    check_xs_linear(WEFT_DTYPE_BF16, 1, 4096, 1024, 1);
    check_xs_linear(WEFT_DTYPE_BF16, 1, 2048, 8192, 0);
    check_xs_linear(WEFT_DTYPE_BF16, 1, 517, 12288, 0);
    check_xs_linear(WEFT_DTYPE_BF16, 3, 130, 2048, 1);
    check_xs_linear(WEFT_DTYPE_BF16, 4, 64, 8192, 0);
    check_xs_linear(WEFT_DTYPE_BF16, 8, 40, 8192, 0);
    check_xs_linear(WEFT_DTYPE_BF16, 1, 33, 2056, 0);
    check_xs_linear(WEFT_DTYPE_BF16, 1, 4096, 4096, 1);
    /* looped (more groups than fit at once): 3-5 groups a block, the last group short */
    check_xs_linear(WEFT_DTYPE_BF16, 1, 12803, 1024, 1);
    check_xs_linear(WEFT_DTYPE_BF16, 1, 2000, 12288, 0); /* S = 8: 3 rows a 24-warp group */
    check_xs_linear(WEFT_DTYPE_F32, 1, 300, 1028, 1);
    check_xs_linear(WEFT_DTYPE_F32, 2, 50, 1028, 1);
    check_xs_swiglu(WEFT_DTYPE_BF16, 1, 8192, 2048);
    check_xs_swiglu(WEFT_DTYPE_BF16, 1, 3072, 1024);
    check_xs_swiglu(WEFT_DTYPE_BF16, 1, 6144, 4096);
    check_xs_swiglu(WEFT_DTYPE_BF16, 2, 300, 4096);
    check_xs_swiglu(WEFT_DTYPE_F32, 1, 40, 512);
    /* the LM head: f32 logits of a gathered row */
    const uint32_t dt = WEFT_DTYPE_BF16;
    int V = 5003, D = 2048;
    tens x = {dt, 2, D}, w = {dt, V, D}, lo = {WEFT_DTYPE_F32, 1, V};
    weft_node h = {.op = WEFT_OP_LM_HEAD, .n_in = 2, .n_out = 1};
    h.in[0] = add_tensor(&x, 1);
    h.in[1] = add_tensor(&w, 1);
    h.out[0] = add_tensor(&lo, 0);
    int32_t rows[1] = {1};
    weft_batch batch = {.size = sizeof(batch), .n_tokens = 1, .n_logits = 1, .logit_rows = rows};
    same_on_insts("lm_head V=5003 D=2048", &h, &lo, 1, &batch);
    tens all[] = {x, w, lo};
    free_tensors(all, 3);
}

/* fuse.linear_add_rmsnorm against linear then add_rmsnorm, bit for bit (y and the residual r),
 * with the residual on either side of the add; at T = 1 the one-kernel form (its last block
 * normalises), run twice so the second launch finds the counter the first left at zero, and on
 * every instance (gemv_xsmem's form included); at T > 1 the fallback into y. */
static void check_linear_add_rmsnorm(uint32_t dt, int T, int N, int K, int bias) {
    tens x = {dt, T, K}, w = {dt, N, K}, b = {dt, 1, N}, res = {dt, T, N}, nw = {dt, 1, N};
    tens p = {dt, T, N}, y0 = {dt, T, N}, r0 = {dt, T, N}, y1 = {dt, T, N}, r1 = {dt, T, N};
    weft_node l = linear_node(&x, &w, &b, &p, bias);
    uint32_t ires = add_tensor(&res, 1), inw = add_tensor(&nw, 1);
    uint32_t oy0 = add_tensor(&y0, 0), or0 = add_tensor(&r0, 0), oy1 = add_tensor(&y1, 0),
             or1 = add_tensor(&r1, 0);
    run_node(&l, (uint32_t)T, NULL, NULL);
    weft_node a = {.op = WEFT_OP_ADD_RMSNORM, .n_in = 3, .n_out = 2};
    a.in[0] = l.out[0], a.in[1] = ires, a.in[2] = inw, a.out[0] = oy0, a.out[1] = or0;
    a.p.f[0] = 1e-6f;
    run_node(&a, (uint32_t)T, NULL, NULL);
    weft_node f = {.op = op_lan, .n_in = 5, .n_out = 2};
    f.in[0] = l.in[0], f.in[1] = l.in[1], f.in[2] = l.in[2], f.in[3] = ires, f.in[4] = inw;
    f.out[0] = oy1, f.out[1] = or1, f.p.f[0] = 1e-6f;
    size_t cnt = (size_t)T * N;
    float *want_y = malloc(cnt * 4), *want_r = malloc(cnt * 4), *got = malloc(cnt * 4);
    fetch(&y0, want_y), fetch(&r0, want_r);
    char what[128];
    for (int round = 0; round < 2; round++) {
        poison(&y1), poison(&r1);
        run_node(&f, (uint32_t)T, NULL, NULL);
        snprintf(what, sizeof(what), "linear_add_rmsnorm dt=%u T=%d N=%d K=%d bias=%d run %d: y",
                 dt, T, N, K, bias, round + 1);
        fetch(&y1, got);
        expect_same(what, got, want_y, cnt);
        what[strlen(what) - 1] = 'r';
        fetch(&r1, got);
        expect_same(what, got, want_r, cnt);
    }
    /* a sane result, not only an agreeing one: r = x w^T + b + res within rounding */
    double *ref = malloc(cnt * 8);
    for (int t = 0; t < T; t++)
        for (int o = 0; o < N; o++) {
            double sum = bias ? b.h[o] : 0;
            for (int k = 0; k < K; k++) sum += (double)x.h[t * K + k] * w.h[o * K + k];
            ref[t * N + o] = sum + res.h[t * N + o];
        }
    double e = relerr(got, ref, cnt);
    printf("linear_add_rmsnorm r: rel err %.2e\n", e);
    assert_true(e < tol(dt) * 2);
    snprintf(what, sizeof(what), "linear_add_rmsnorm dt=%u T=%d N=%d K=%d: y", dt, T, N, K);
    same_on_insts(what, &f, &y1, (uint32_t)T, NULL);
    /* the residual on the other side of the add: the same bits */
    a.in[0] = ires, a.in[1] = l.out[0];
    poison(&y0), poison(&r0);
    run_node(&a, (uint32_t)T, NULL, NULL);
    fetch(&y0, got);
    expect_same("add_rmsnorm, residual first", got, want_y, cnt);
    free(want_y), free(want_r), free(got), free(ref);
    tens all[] = {x, w, b, p, res, nw, y0, r0, y1, r1};
    free_tensors(all, 10);
    if (!bias) be->free(bst, &b.d);
}

static void test_linear_add_rmsnorm(void **state) {
    (void)state;
    if (!reg_find(op_lan)) fail_msg("the backend registered no fuse.linear_add_rmsnorm");
    /* the o and down shapes of Qwen3-0.6B, Llama-3.2-1B and Qwen3-8B (norms of 1,024 threads
     * run by 256, four and eight values a thread in registers, then sixteen), a Qwen2-style
     * row (896: a 256-thread norm) with a bias, a row past the registers (the loops), the
     * 64-thread norm of a tiny model in f32, and more rows (the fallback) */
    check_linear_add_rmsnorm(WEFT_DTYPE_BF16, 1, 1024, 2048, 0);
    check_linear_add_rmsnorm(WEFT_DTYPE_BF16, 1, 1024, 3072, 0);
    check_linear_add_rmsnorm(WEFT_DTYPE_BF16, 1, 2048, 8192, 0);
    check_linear_add_rmsnorm(WEFT_DTYPE_BF16, 1, 4096, 4096, 0);
    check_linear_add_rmsnorm(WEFT_DTYPE_BF16, 1, 4096, 12288, 0);
    check_linear_add_rmsnorm(WEFT_DTYPE_BF16, 1, 896, 4864, 1);
    check_linear_add_rmsnorm(WEFT_DTYPE_BF16, 1, 5120, 1024, 0);
    check_linear_add_rmsnorm(WEFT_DTYPE_F32, 1, 64, 64, 1);
    check_linear_add_rmsnorm(WEFT_DTYPE_BF16, 3, 1024, 2048, 1);
}

/* output t fetched into got and compared with want, bit for bit; `what` ends "...: <label>"
 * (the label after the last colon, which this replaces with the shorter `label`) */
static void expect_output(char *what, const char *label, tens *t, float *got, const float *want,
                          size_t n) {
    char *at = strrchr(what, ':');
    assert_non_null(at);
    assert_true(strlen(label) <= strlen(at + 2));
    memcpy(at + 2, label, strlen(label) + 1);
    fetch(t, got);
    expect_same(what, got, want, n);
}

/* fuse.norm_linear against add_rmsnorm then the product reading its y, bit for bit (the
 * product and r), on every instance: on [1] (gemv_loop with gemv_xsmem) at T = 1 and rows of
 * 1,024..4,096 one kernel whose blocks each add and normalise (run twice: block 0 stores r),
 * elsewhere the fallback into y. kind: 0 a linear (bias when asked), 1 fuse.linear_swiglu with
 * the gate|up rows merged, 2 with them apart. */
static void check_norm_linear(uint32_t dt, int T, int N, int D, int kind, int bias) {
    tens x = {dt, T, D}, res = {dt, T, D}, nw = {dt, 1, D}, w = {dt, kind == 1 ? 2 * N : N, D};
    tens e = {dt, 1, N}, u = {dt, N, D}, y0 = {dt, T, D}, r0 = {dt, T, D}, p0 = {dt, T, N};
    tens p1 = {dt, T, N}, r1 = {dt, T, D}, y1 = {dt, T, D};
    const int has4 = kind == 2 || (kind == 0 && bias);
    weft_node a = {.op = WEFT_OP_ADD_RMSNORM, .n_in = 3, .n_out = 2};
    a.in[0] = add_tensor(&x, 1), a.in[1] = add_tensor(&res, 1), a.in[2] = add_tensor(&nw, 1);
    a.out[0] = add_tensor(&y0, 0), a.out[1] = add_tensor(&r0, 0), a.p.f[0] = 1e-6f;
    uint32_t iw = add_tensor(&w, 1), i4 = has4 ? add_tensor(kind == 2 ? &u : &e, 1)
                                               : WEFT_TENSOR_NONE;
    weft_node pr = {.op = kind ? op_lsw : WEFT_OP_LINEAR, .n_in = kind == 1 ? 2 : 3, .n_out = 1};
    pr.in[0] = a.out[0], pr.in[1] = iw, pr.in[2] = i4, pr.out[0] = add_tensor(&p0, 0);
    pr.p.i[0] = kind == 1;
    weft_node f = {.op = op_nl, .n_in = 5, .n_out = 3};
    for (int i = 0; i < 3; i++) f.in[i] = a.in[i];
    f.in[3] = iw, f.in[4] = i4, f.p.f[0] = 1e-6f, f.p.i[0] = kind != 0, f.p.i[1] = kind == 1;
    f.out[0] = add_tensor(&p1, 0), f.out[1] = add_tensor(&r1, 0), f.out[2] = add_tensor(&y1, 0);
    size_t np = (size_t)T * N, nd = (size_t)T * D;
    float *want_p = malloc(np * 4), *want_r = malloc(nd * 4), *got = malloc(np * 4 + nd * 4);
    char what[160];
    for (int k = 0; k < N_INST; k++) {
        use_inst(k);
        poison(&y0), poison(&r0), poison(&p0);
        run_node(&a, (uint32_t)T, NULL, NULL);
        run_node(&pr, (uint32_t)T, NULL, NULL);
        fetch(&p0, want_p), fetch(&r0, want_r);
        for (int round = 0; round < 2; round++) {
            poison(&p1), poison(&r1);
            run_node(&f, (uint32_t)T, NULL, NULL);
            snprintf(what, sizeof(what), "norm_linear dt=%u T=%d N=%d D=%d kind=%d bias=%d "
                     "instance %d run %d: product", dt, T, N, D, kind, bias, k, round + 1);
            fetch(&p1, got);
            expect_same(what, got, want_p, np);
            expect_output(what, "r", &r1, got, want_r, nd);
        }
    }
    use_inst(0);
    /* a sane r, not only an agreeing one: x + res within rounding */
    double *ref = malloc(nd * 8);
    for (size_t i = 0; i < nd; i++) ref[i] = (double)x.h[i] + res.h[i];
    double err = relerr(got, ref, nd);
    printf("norm_linear r: rel err %.2e\n", err);
    assert_true(err < tol(dt));
    free(want_p), free(want_r), free(got), free(ref);
    tens all[] = {x, res, nw, y0, r0, w, p0, p1, r1, y1};
    free_tensors(all, 10);
    if (has4) be->free(bst, kind == 2 ? &u.d : &e.d), free(kind == 2 ? u.h : e.h);
}

static void test_norm_linear(void **state) {
    (void)state;
    if (!reg_find(op_nl)) fail_msg("the backend registered no fuse.norm_linear");
    if (!all_insts()) skip();
    /* Qwen3-0.6B's q|k|v and gate|up (D = 1,024: one 16-byte vector a thread), Llama-3.2-1B's
     * gate|up apart (2,048), Qwen3-8B's q|k|v and a slice of its gate|up (4,096: two vectors),
     * a bias, f32 (four vectors), a 256-thread norm (896) and three rows (the fallbacks) */
    check_norm_linear(WEFT_DTYPE_BF16, 1, 4096, 1024, 0, 0);
    check_norm_linear(WEFT_DTYPE_BF16, 1, 3072, 1024, 1, 0);
    check_norm_linear(WEFT_DTYPE_BF16, 1, 2048, 2048, 2, 0);
    /* Llama-3.2-1B's merged gate|up (2,048 groups of four rows: several a looped block) */
    check_norm_linear(WEFT_DTYPE_BF16, 1, 8192, 2048, 1, 0);
    check_norm_linear(WEFT_DTYPE_BF16, 1, 6144, 4096, 0, 0);
    check_norm_linear(WEFT_DTYPE_BF16, 1, 1536, 4096, 1, 0);
    check_norm_linear(WEFT_DTYPE_BF16, 1, 1152, 1024, 0, 1);
    check_norm_linear(WEFT_DTYPE_F32, 1, 512, 4096, 0, 1);
    check_norm_linear(WEFT_DTYPE_BF16, 1, 1024, 896, 1, 0);
    check_norm_linear(WEFT_DTYPE_BF16, 3, 1024, 2048, 1, 0);
}

/* fuse.norm_linear's down form (6 inputs) against add_rmsnorm, fuse.linear_swiglu and the down
 * LINEAR, bit for bit (the down product, r and h), on every instance: on the looped ones at
 * T = 1 and rows of 1,024..4,096 one kernel with a grid barrier between gate|up and down (run
 * three times, so the barrier's count and generation are reused), elsewhere the 5-input form
 * and a LINEAR. merged: the gate|up rows in one weight. */
static void check_mlp(int T, int F, int D, int merged) {
    uint32_t dt = WEFT_DTYPE_BF16;
    tens x = {dt, T, D}, res = {dt, T, D}, nw = {dt, 1, D}, w = {dt, merged ? 2 * F : F, D};
    tens u = {dt, F, D}, wd = {dt, D, F}, y0 = {dt, T, D}, r0 = {dt, T, D}, h0 = {dt, T, F};
    tens o0 = {dt, T, D}, o1 = {dt, T, D}, r1 = {dt, T, D}, y1 = {dt, T, D}, h1 = {dt, T, F};
    weft_node a = {.op = WEFT_OP_ADD_RMSNORM, .n_in = 3, .n_out = 2};
    a.in[0] = add_tensor(&x, 1), a.in[1] = add_tensor(&res, 1), a.in[2] = add_tensor(&nw, 1);
    a.out[0] = add_tensor(&y0, 0), a.out[1] = add_tensor(&r0, 0), a.p.f[0] = 1e-6f;
    uint32_t iw = add_tensor(&w, 1), iu = merged ? WEFT_TENSOR_NONE : add_tensor(&u, 1);
    weft_node pr = {.op = op_lsw, .n_in = merged ? 2 : 3, .n_out = 1};
    pr.in[0] = a.out[0], pr.in[1] = iw, pr.in[2] = iu, pr.out[0] = add_tensor(&h0, 0);
    pr.p.i[0] = merged;
    weft_node d = {.op = WEFT_OP_LINEAR, .n_in = 2, .n_out = 1};
    d.in[0] = pr.out[0], d.in[1] = add_tensor(&wd, 1), d.out[0] = add_tensor(&o0, 0);
    weft_node f = {.op = op_nl, .n_in = 6, .n_out = 4};
    for (int i = 0; i < 3; i++)
        f.in[i] = a.in[i];
    f.in[3] = iw, f.in[4] = iu, f.in[5] = d.in[1], f.p.f[0] = 1e-6f, f.p.i[0] = 1;
    f.p.i[1] = merged, f.p.i[2] = 1;
    f.out[0] = add_tensor(&o1, 0), f.out[1] = add_tensor(&r1, 0), f.out[2] = add_tensor(&y1, 0);
    f.out[3] = add_tensor(&h1, 0);
    size_t nd = (size_t)T * D, nf = (size_t)T * F;
    float *want_o = malloc(nd * 4), *want_r = malloc(nd * 4), *want_h = malloc(nf * 4);
    float *got = malloc(nf * 4 + nd * 4);
    char what[160];
    for (int k = 0; k < N_INST; k++) {
        use_inst(k);
        poison(&y0), poison(&r0), poison(&h0), poison(&o0);
        run_node(&a, (uint32_t)T, NULL, NULL);
        run_node(&pr, (uint32_t)T, NULL, NULL);
        run_node(&d, (uint32_t)T, NULL, NULL);
        fetch(&o0, want_o), fetch(&r0, want_r), fetch(&h0, want_h);
        for (int round = 0; round < 3; round++) {
            poison(&o1), poison(&r1), poison(&h1);
            run_node(&f, (uint32_t)T, NULL, NULL);
            snprintf(what, sizeof(what), "mlp T=%d F=%d D=%d merged=%d instance %d run %d: down", T,
                     F, D, merged, k, round + 1);
            fetch(&o1, got);
            expect_same(what, got, want_o, nd);
            expect_output(what, "r", &r1, got, want_r, nd);
            expect_output(what, "h", &h1, got, want_h, nf);
        }
    }
    use_inst(0);
    /* a sane down product, not only an agreeing one: h wd^T within rounding, from the h made */
    double *ref = malloc(nd * 8);
    for (int t = 0; t < T; t++)
        for (int o = 0; o < D; o++) {
            double sum = 0;
            for (int j = 0; j < F; j++)
                sum += (double)want_h[(size_t)t * F + j] * wd.h[(size_t)o * F + j];
            ref[(size_t)t * D + o] = sum;
        }
    double err = relerr(want_o, ref, nd);
    printf("mlp down: rel err %.2e\n", err);
    assert_true(err < tol(dt) * 2);
    free(want_o), free(want_r), free(want_h), free(got), free(ref);
    tens all[] = {x, res, nw, y0, r0, w, wd, h0, o0, o1, r1, y1, h1};
    free_tensors(all, 13);
    if (!merged) be->free(bst, &u.d), free(u.h);
}

static void test_mlp(void **state) {
    (void)state;
    if (!reg_find(op_nl)) fail_msg("the backend registered no fuse.norm_linear");
    if (!all_insts()) skip();
    /* the MLPs of Qwen3-0.6B (merged), Llama-3.2-1B (apart) and Qwen3-8B, a Qwen2-style row of
     * 896 (a 256-thread norm: the fallback) and three rows (the fallback) */
    check_mlp(1, 3072, 1024, 1);
    check_mlp(1, 8192, 2048, 0);
    check_mlp(1, 12288, 4096, 1);
    check_mlp(1, 4864, 896, 1);
    check_mlp(3, 3072, 1024, 0);
}

/* Programmatic dependent launch (backend option pdl, on by default on sm_90+): a chain of
 * dependent nodes launched back to back, so each kernel's blocks start while the previous one
 * drains, must give the same bits as the same chain with the stream drained after every node
 * (where no kernel overlaps another). The chain has both hazards a missing griddepcontrol.wait
 * would expose: read-after-write (each node reads what the previous wrote) and write-after-read
 * (the norm rewrites x while the linear before it may still read it). Shapes of a real layer
 * (4096 x 4096 bf16, 32 MB: many waves of GEMV blocks), the fused gate/up + SwiGLU included. */
/* the nodes in order in one graph of them all (an op may look at the nodes after its own) */
static void run_chain(weft_node *nodes, int n_nodes, int sync_each) {
    weft_graph g = {.size = sizeof(g),
                    .n_tensors = gn,
                    .n_nodes = (uint32_t)n_nodes,
                    .tensors = gt,
                    .nodes = nodes};
    weft_exec_ctx c = {.size = sizeof(c), .n_tokens = 1, .graph = &g, .data = gd, .backend = bst};
    weft_error err = {.size = sizeof(err)};
    for (int i = 0; i < n_nodes; i++) {
        const weft_op_impl *impl = reg_find(nodes[i].op);
        assert_non_null(impl);
        weft_status s = impl->run(impl->state, &c, &nodes[i], &err);
        if (s) fprintf(stderr, "node %d: %s\n", i, err.message);
        assert_int_equal(s, 0);
        if (sync_each) assert_int_equal(be->synchronize(bst, NULL, &err), 0);
    }
    assert_int_equal(be->synchronize(bst, NULL, &err), 0);
}

/* the chain's row and gate|up widths and its rounds of five nodes */
enum { CHAIN_D = 4096, CHAIN_F = 2048, CHAIN_ROUNDS = 12 };
/* one run of the chain on the current instance: the elements of x and y that differ between the
 * serial and the back-to-back pass (0: bit-identical) */
static int pdl_chain_once(void) {
    const int D = CHAIN_D, F = CHAIN_F, rounds = CHAIN_ROUNDS;
    uint32_t dt = WEFT_DTYPE_BF16;
    tens x = {dt, 1, D}, w = {dt, D, D}, nw = {dt, 1, D}, y = {dt, 1, D}, wgu = {dt, 2 * F, D},
         h = {dt, 1, F}, wd = {dt, D, F};
    uint32_t ix = add_tensor(&x, 1), iw = add_tensor(&w, 1), inw = add_tensor(&nw, 1),
             iy = add_tensor(&y, 0), igu = add_tensor(&wgu, 1), ih = add_tensor(&h, 0),
             iwd = add_tensor(&wd, 1);
    weft_node nodes[5 * CHAIN_ROUNDS];
    int nn = 0;
    for (int r = 0; r < rounds; r++) {
        weft_node lin = {.op = WEFT_OP_LINEAR, .n_in = 3, .n_out = 1};
        lin.in[0] = ix, lin.in[1] = iw, lin.in[2] = WEFT_TENSOR_NONE, lin.out[0] = iy;
        weft_node norm = {.op = WEFT_OP_RMSNORM, .n_in = 2, .n_out = 1};
        norm.in[0] = iy, norm.in[1] = inw, norm.out[0] = ix, norm.p.f[0] = 1e-6f;
        weft_node sw = {.op = op_lsw, .n_in = 2, .n_out = 1};
        sw.in[0] = ix, sw.in[1] = igu, sw.out[0] = ih, sw.p.i[0] = 1;
        weft_node down = {.op = WEFT_OP_LINEAR, .n_in = 3, .n_out = 1};
        down.in[0] = ih, down.in[1] = iwd, down.in[2] = WEFT_TENSOR_NONE, down.out[0] = iy;
        nodes[nn++] = lin;
        nodes[nn++] = norm;
        nodes[nn++] = sw;
        nodes[nn++] = down;
        nodes[nn++] = norm;
    }
    /* each round: x -> y (linear), y -> x (norm), x -> h (gate/up + SwiGLU), h -> y (down),
     * y -> x (norm) */
    float *x0 = malloc((size_t)D * 4), *serial = malloc((size_t)D * 4),
          *chained = malloc((size_t)D * 4), *ys = malloc((size_t)D * 4),
          *yc = malloc((size_t)D * 4);
    memcpy(x0, x.h, (size_t)D * 4);
    weft_error err = {.size = sizeof(err)};
    for (int pass = 0; pass < 2; pass++) {
        uint16_t *tmp = malloc((size_t)D * 2); /* the same starting x for both passes */
        for (int i = 0; i < D; i++) tmp[i] = to_bf16(x0[i]);
        assert_int_equal(be->upload(bst, &x.d, 0, tmp, (size_t)D * 2, &err), 0);
        free(tmp);
        run_chain(nodes, nn, pass == 0);
        fetch(&x, pass == 0 ? serial : chained);
        fetch(&y, pass == 0 ? ys : yc);
    }
    int finite = 1, differ = 0;
    for (int i = 0; i < D; i++) {
        finite &= isfinite(serial[i]) && isfinite(ys[i]);
        differ += memcmp(&serial[i], &chained[i], 4) != 0;
        differ += memcmp(&ys[i], &yc[i], 4) != 0;
    }
    assert_true(finite);
    free(x0), free(serial), free(chained), free(ys), free(yc);
    tens all[] = {x, w, nw, y, wgu, h, wd};
    free_tensors(all, 7);
    return differ;
}

/* The chain on instance k, WEFT_TEST_REPEAT times (default 1; a race shows in some runs only):
 * each run's verdict printed, the runs that differed returned */
static int pdl_chain_runs(int k) {
    const char *env = getenv("WEFT_TEST_REPEAT");
    int reps = env ? atoi(env) : 1, bad = 0, worst = 0;
    if (reps < 1) reps = 1;
    use_inst(k);
    for (int r = 0; r < reps; r++) {
        int d = pdl_chain_once();
        bad += d != 0;
        if (d > worst) worst = d;
    }
    use_inst(0);
    printf("pdl chain (%d nodes), instance %d: serial and back-to-back results %s (%d of %d "
           "runs differ, at most %d of %d elements)\n",
           5 * CHAIN_ROUNDS, k, bad ? "DIFFER" : "bit-identical", bad, reps, worst, 2 * CHAIN_D);
    return bad;
}

static void test_pdl_chain(void **state) {
    (void)state;
    assert_int_equal(pdl_chain_runs(0), 0);
}

/* the same chain with the GEMVs reading x from shared memory (instances 1 and 2; 1 looped over
 * rows), staging their weights in it (instance 3), looped over rows (instance 4), looped in
 * wider blocks (instances 5 and 6) and copying x by cp.async (instance 7) */
static void test_pdl_chain_xsmem(void **state) {
    (void)state;
    if (!all_insts()) skip();
    int bad = 0; /* every instance runs, so one report shows which forms differ */
    for (int k = 1; k < N_INST; k++)
        bad += pdl_chain_runs(k) != 0;
    assert_int_equal(bad, 0);
}

/* The residual join then the product reading its output, in one graph, on every instance
 * against instance 0, bit for bit (the product, y and r), each output poisoned first: with
 * option join_l2 (instances 5 and 7) the join's extra blocks load the start of each looped
 * block's rows into L2 (core.cu weft_add_rmsnorm_bl), which must change no value; instance 5's
 * 256 extra blocks and 64 KiB a block run past the rows a block owns, up to the weight's end. */
static void check_join_pull(uint32_t dt, int N, int D) {
    tens x = {dt, 1, D}, res = {dt, 1, D}, nw = {dt, 1, D}, w = {dt, N, D};
    tens y = {dt, 1, D}, r = {dt, 1, D}, p = {dt, 1, N};
    weft_node nodes[2];
    weft_node a = {.op = WEFT_OP_ADD_RMSNORM, .n_in = 3, .n_out = 2};
    a.in[0] = add_tensor(&x, 1), a.in[1] = add_tensor(&res, 1), a.in[2] = add_tensor(&nw, 1);
    a.out[0] = add_tensor(&y, 0), a.out[1] = add_tensor(&r, 0), a.p.f[0] = 1e-6f;
    weft_node pr = {.op = WEFT_OP_LINEAR, .n_in = 3, .n_out = 1};
    pr.in[0] = a.out[0], pr.in[1] = add_tensor(&w, 1), pr.in[2] = WEFT_TENSOR_NONE;
    pr.out[0] = add_tensor(&p, 0);
    nodes[0] = a, nodes[1] = pr;
    float *want[3] = {malloc((size_t)N * 4), malloc((size_t)D * 4), malloc((size_t)D * 4)};
    float *got = malloc((size_t)(N > D ? N : D) * 4);
    tens *outs[3] = {&p, &y, &r};
    const size_t len[3] = {(size_t)N, (size_t)D, (size_t)D};
    char what[120];
    for (int k = 0; k < N_INST; k++) {
        use_inst(k);
        for (int round = 0; round < 2; round++) {
            poison(&p), poison(&y), poison(&r);
            run_chain(nodes, 2, 0);
            for (int o = 0; o < 3; o++) {
                if (k == 0 && round == 0) {
                    fetch(outs[o], want[o]);
                    continue;
                }
                snprintf(what, sizeof(what),
                         "join then product dt=%u N=%d D=%d instance %d "
                         "run %d: output %d",
                         dt, N, D, k, round + 1, o);
                fetch(outs[o], got);
                expect_same(what, got, want[o], len[o]);
            }
        }
    }
    use_inst(0);
    /* a sane product, not only an agreeing one: the norm of x + res, then w, in double */
    double *hn = malloc((size_t)D * 8), *ref = malloc((size_t)N * 8), ss = 0;
    for (int i = 0; i < D; i++) {
        hn[i] = (double)x.h[i] + res.h[i];
        ss += hn[i] * hn[i];
    }
    for (int i = 0; i < D; i++)
        hn[i] = hn[i] / sqrt(ss / D + 1e-6) * nw.h[i];
    for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int i = 0; i < D; i++)
            acc += (double)w.h[(size_t)n * D + i] * hn[i];
        ref[n] = acc;
    }
    double err = relerr(want[0], ref, (size_t)N);
    printf("join then product N=%d D=%d: rel err %.2e\n", N, D, err);
    assert_true(err < 4 * tol(dt));
    for (int o = 0; o < 3; o++)
        free(want[o]);
    free(got), free(hn), free(ref);
    tens all[] = {x, res, nw, w, y, r, p};
    free_tensors(all, 7);
}

static void test_join_pull(void **state) {
    (void)state;
    if (!all_insts()) skip();
    check_join_pull(WEFT_DTYPE_BF16, 6144, 4096); /* Qwen3-8B's q|k|v */
    check_join_pull(WEFT_DTYPE_BF16, 3072, 2048); /* Llama-3.2-1B's */
    check_join_pull(WEFT_DTYPE_F32, 1024, 2048);
}

/* ---- fuse.rope_attention ------------------------------------------------------------------ */
/* fuse.rope_attention against the two nodes it replaces, fuse.qkv_rope then attention (kv store,
 * split-KV kernel, combine), each run on its own copy of the same cache history: the output and
 * both whole caches must be the same bits (one row: the fused kernel; three rows: the unfused
 * kernels inside the op), and the output must match a double-precision attention over the
 * unfused q' and the cache. Consecutive steps check that the kernel's arrival counters are
 * back at zero for the next step. The cluster cases run the merge through distributed shared
 * memory (option merge: cluster) against the same unfused nodes. The fused node sees the step's
 * host batch (its launch then covers the step's KV-length bucket, as in the engine) except on
 * instance 2 (ra_host_batch 0: it covers the whole cache). */
enum { RA_SLOTS = 2, RA_MAX_SEQ = 320, RA_SLOT = 1 };
static int ra_host_batch = 1;

typedef struct ra_case {
    uint32_t dt;
    int Hq, Hkv, hd, norm, scaling, merged;
    int cluster; /* option merge: cluster (the splits of a kv head merge through a cluster) */
    int max_seq; /* the cache's positions (0: RA_MAX_SEQ) */
    int window;  /* sliding window (0: none) */
} ra_case;

static int ra_max_seq(const ra_case *cs) { return cs->max_seq ? cs->max_seq : RA_MAX_SEQ; }

typedef struct ra_cache {
    weft_buffer k[1], v[1];
    weft_kv_contiguous desc;
    weft_kv_view view;
} ra_cache;

static size_t ra_es(uint32_t dt) { return dt == WEFT_DTYPE_F32 ? 4 : 2; }

static void ra_cache_init(ra_cache *c, const ra_case *cs, const void *kh, const void *vh,
                          size_t bytes) {
    weft_error err = {.size = sizeof(err)};
    assert_int_equal(be->alloc(bst, bytes, WEFT_MEMORY_DEVICE, &c->k[0], &err), 0);
    assert_int_equal(be->alloc(bst, bytes, WEFT_MEMORY_DEVICE, &c->v[0], &err), 0);
    assert_int_equal(be->upload(bst, &c->k[0], 0, kh, bytes, &err), 0);
    assert_int_equal(be->upload(bst, &c->v[0], 0, vh, bytes, &err), 0);
    c->desc = (weft_kv_contiguous){.size = sizeof(c->desc), .n_layers = 1, .n_slots = RA_SLOTS,
                                   .max_seq = (uint32_t)ra_max_seq(cs),
                                   .n_kv_heads = (uint32_t)cs->Hkv,
                                   .head_dim = (uint32_t)cs->hd, .dtype = cs->dt, .k = c->k,
                                   .v = c->v};
    c->view = (weft_kv_view){.size = sizeof(c->view), .layout = "contiguous", .desc = &c->desc};
}

/* a cache buffer's values as floats */
static float *ra_cache_get(const weft_buffer *b, uint32_t dt, size_t n, void *raw) {
    weft_error err = {.size = sizeof(err)};
    assert_int_equal(be->download(bst, raw, b, 0, n * ra_es(dt), &err), 0);
    float *f = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        f[i] = dt == WEFT_DTYPE_F32 ? ((float *)raw)[i] : from_h16(dt, ((uint16_t *)raw)[i]);
    return f;
}

/* test_attention_then_o: when ra_o.rows, each one-row step runs a linear on the fused
 * attention's output (its o projection, weight ra_o: rows x Hq hd) right after the fused node,
 * where the backend passes it the gemv_l2_* bits, then again after another launch, without
 * them: the two outputs must be the same bits, and near a double reference */
static tens ra_o;

/* a tensor allocated before the step's graph, entered into it without a new copy */
static uint32_t add_existing(const tens *t) {
    uint32_t id = graph_entry(t);
    gd[id] = t->d;
    return id;
}

static void ra_o_check(tens *o2, uint32_t io2, int P) {
    const int N = (int)ra_o.rows, K = (int)ra_o.cols;
    assert_int_equal(o2->cols, K);
    tens y1 = {o2->dtype, 1, N}, y2 = {o2->dtype, 1, N};
    uint32_t iw = add_existing(&ra_o), iy1 = add_tensor(&y1, 0), iy2 = add_tensor(&y2, 0);
    weft_node l = {.op = WEFT_OP_LINEAR, .n_in = 2, .n_out = 1};
    l.in[0] = io2, l.in[1] = iw, l.out[0] = iy1;
    run_node(&l, 1, NULL, NULL); /* right after the fused attention: the L2 bits */
    l.out[0] = iy2;
    run_node(&l, 1, NULL, NULL); /* after a linear: none */
    float *a = malloc((size_t)N * 4), *b = malloc((size_t)N * 4), *x = malloc((size_t)K * 4);
    double *ref = malloc((size_t)N * 8);
    fetch(&y1, a);
    fetch(&y2, b);
    fetch(o2, x);
    for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int k = 0; k < K; k++)
            acc += (double)x[k] * ra_o.h[(size_t)n * K + k];
        ref[n] = acc;
    }
    char what[96];
    snprintf(what, sizeof(what), "o projection (%d x %d) after the fused attention, pos %d", N, K,
             P);
    expect_same(what, a, b, (size_t)N);
    double e = relerr(a, ref, (size_t)N);
    if (!(e < 2e-2)) fail_msg("%s: rel err %.2e vs double", what, e);
    /* the same product right after an add + RMSNorm join (option gemv_l2_join), then after a
     * linear: the same bits */
    tens nw = {o2->dtype, 1, K}, z = {o2->dtype, 1, K}, zr = {o2->dtype, 1, K};
    uint32_t inw = add_tensor(&nw, 1), iz = add_tensor(&z, 0), izr = add_tensor(&zr, 0);
    weft_node j = {.op = WEFT_OP_ADD_RMSNORM, .n_in = 3, .n_out = 2};
    j.in[0] = io2, j.in[1] = io2, j.in[2] = inw, j.out[0] = iz, j.out[1] = izr;
    j.p.f[0] = 1e-6f;
    run_node(&j, 1, NULL, NULL);
    l.in[0] = iz, l.out[0] = iy1;
    run_node(&l, 1, NULL, NULL);
    l.out[0] = iy2;
    run_node(&l, 1, NULL, NULL);
    fetch(&y1, a);
    fetch(&y2, b);
    snprintf(what, sizeof(what), "o projection (%d x %d) after an add + RMSNorm, pos %d", N, K, P);
    expect_same(what, a, b, (size_t)N);
    free(a), free(b), free(x), free(ref), free(nw.h), free(z.h), free(zr.h);
    be->free(bst, &y1.d), be->free(bst, &y2.d);
    be->free(bst, &nw.d), be->free(bst, &z.d), be->free(bst, &zr.d);
}

/* One step of T rows at positions P.. of slot RA_SLOT, unfused on cache a, fused on cache b. */
static void ra_step(const ra_case *cs, ra_cache *ca, ra_cache *cb, int T, int P, uint32_t op_ra) {
    const uint32_t dt = cs->dt;
    const int Hq = cs->Hq, Hkv = cs->Hkv, hd = cs->hd, C = (Hq + 2 * Hkv) * hd;
    int32_t pos[8], slot[8];
    for (int t = 0; t < T; t++) pos[t] = P + t, slot[t] = RA_SLOT;
    tens qkv = {dt, T, C}, q = {dt, T, Hq * hd}, k = {dt, T, Hkv * hd}, v = {dt, T, Hkv * hd};
    tens p = {WEFT_DTYPE_I32, T, 1}, sl = {WEFT_DTYPE_I32, T, 1};
    tens qn = {dt, 1, hd}, kn = {dt, 1, hd};
    tens q1 = {dt, T, Hq * hd}, k1 = {dt, T, Hkv * hd}, v1 = {dt, T, Hkv * hd},
         o1 = {dt, T, Hq * hd};
    tens o2 = {dt, T, Hq * hd}, q2 = {dt, T, Hq * hd}, k2 = {dt, T, Hkv * hd},
         v2 = {dt, T, Hkv * hd};
    p.hi = pos, sl.hi = slot;
    uint32_t iqkv = 0, iq = 0, ik = 0, iv = 0;
    if (cs->merged) {
        iqkv = add_tensor(&qkv, 1);
    } else {
        iq = add_tensor(&q, 1), ik = add_tensor(&k, 1), iv = add_tensor(&v, 1);
    }
    uint32_t ip = add_tensor(&p, 1), isl = add_tensor(&sl, 1);
    uint32_t iqn = add_tensor(&qn, 1), ikn = add_tensor(&kn, 1);
    uint32_t iq1 = add_tensor(&q1, 0), ik1 = add_tensor(&k1, 0), iv1 = add_tensor(&v1, 0),
             io1 = add_tensor(&o1, 0);
    uint32_t io2 = add_tensor(&o2, 0), iq2 = add_tensor(&q2, 0), ik2 = add_tensor(&k2, 0),
             iv2 = add_tensor(&v2, 0);
    weft_op_params rp;
    memset(&rp, 0, sizeof(rp));
    rp.i[0] = Hq, rp.i[1] = hd, rp.i[4] = cs->scaling, rp.i[5] = Hkv;
    rp.f[0] = cs->scaling ? 500000.f : 1000000.f, rp.f[1] = 32.f, rp.f[2] = 1.f, rp.f[3] = 4.f,
    rp.f[4] = 8192.f, rp.f[5] = 1e-6f;
    /* unfused: fuse.qkv_rope, then attention on cache a */
    weft_node f = {.op = op_qkr, .p = rp};
    f.p.i[6] = cs->merged, f.p.i[7] = cs->norm;
    uint32_t n_in = 0;
    if (cs->merged) {
        f.in[n_in++] = iqkv;
    } else {
        f.in[n_in++] = iq;
        f.in[n_in++] = ik;
    }
    f.in[n_in++] = ip;
    if (cs->norm) f.in[n_in++] = iqn, f.in[n_in++] = ikn;
    f.n_in = n_in;
    f.out[0] = iq1, f.out[1] = ik1, f.out[2] = iv1;
    f.n_out = cs->merged ? 3 : 2;
    run_node(&f, (uint32_t)T, NULL, NULL);
    weft_node a = {.op = WEFT_OP_ATTENTION, .n_in = 5, .n_out = 1};
    a.in[0] = iq1, a.in[1] = ik1, a.in[2] = cs->merged ? iv1 : iv, a.in[3] = ip, a.in[4] = isl;
    a.out[0] = io1;
    a.p.i[1] = Hq, a.p.i[2] = Hkv, a.p.i[3] = hd, a.p.i[4] = cs->window;
    snprintf(a.name, sizeof(a.name), "layers.0.attn");
    run_node(&a, (uint32_t)T, NULL, &ca->view);
    /* fused on cache b */
    weft_node r = {.op = op_ra, .p = rp};
    r.p.i[6] = (cs->merged ? 1 : 0) | (cs->norm ? 2 : 0) | (cs->cluster ? 4 : 0) |
               ((int64_t)cs->window << 8);
    r.p.i[7] = 0;
    n_in = 0;
    if (cs->merged) {
        r.in[n_in++] = iqkv;
    } else {
        r.in[n_in++] = iq;
        r.in[n_in++] = ik;
        r.in[n_in++] = iv;
    }
    r.in[n_in++] = ip;
    r.in[n_in++] = isl;
    if (cs->norm) r.in[n_in++] = iqn, r.in[n_in++] = ikn;
    r.n_in = n_in;
    r.out[0] = io2, r.out[1] = iq2, r.out[2] = ik2, r.out[3] = iv2;
    r.n_out = cs->merged ? 4 : 3;
    snprintf(r.name, sizeof(r.name), "layers.0.attn.rope_attn");
    weft_batch hb = {.size = sizeof(hb), .n_tokens = (uint32_t)T, .n_seqs = 1,
                     .n_logits = (uint32_t)T, .positions = pos};
    run_node(&r, (uint32_t)T, ra_host_batch ? &hb : NULL, &cb->view);
    if (ra_o.rows && T == 1) ra_o_check(&o2, io2, P);
    /* the same bits: output and both caches */
    size_t no = (size_t)T * Hq * hd;
    float *a1 = malloc(no * 4), *a2 = malloc(no * 4), *qf = malloc(no * 4);
    fetch(&o1, a1);
    fetch(&o2, a2);
    char what[160];
    const int MS = ra_max_seq(cs);
    snprintf(what, sizeof(what),
             "rope_attention%s dt=%u Hq=%d Hkv=%d hd=%d max_seq=%d window=%d T=%d pos=%d: o",
             cs->cluster ? " (cluster merge)" : "", dt, Hq, Hkv, hd, MS, cs->window, T, P);
    expect_same(what, a2, a1, no);
    size_t nc = (size_t)RA_SLOTS * MS * Hkv * hd;
    void *ra = malloc(nc * 4), *rb = malloc(nc * 4);
    weft_error err = {.size = sizeof(err)};
    for (int kv = 0; kv < 2; kv++) {
        assert_int_equal(be->download(bst, ra, kv ? &ca->v[0] : &ca->k[0], 0, nc * ra_es(dt), &err),
                         0);
        assert_int_equal(be->download(bst, rb, kv ? &cb->v[0] : &cb->k[0], 0, nc * ra_es(dt), &err),
                         0);
        if (memcmp(ra, rb, nc * ra_es(dt)))
            fail_msg("%s: the %s caches differ", what, kv ? "v" : "k");
    }
    /* double reference over the unfused q' and the cache after the step */
    fetch(&q1, qf);
    float *K = ra_cache_get(&cb->k[0], dt, nc, ra), *V = ra_cache_get(&cb->v[0], dt, nc, ra);
    double *ref = malloc(no * 8), *sc = malloc((size_t)MS * 8);
    int G = Hq / Hkv;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hq; h++) {
            size_t kb = (size_t)RA_SLOT * MS * Hkv * hd + (size_t)(h / G) * hd;
            double m = -1e300, l = 0;
            const int lo = cs->window && pos[t] - cs->window + 1 > 0 ? pos[t] - cs->window + 1 : 0;
            for (int j = lo; j <= pos[t]; j++) {
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)qf[(size_t)t * Hq * hd + h * hd + e] *
                         K[kb + (size_t)j * Hkv * hd + e];
                sc[j] = d / sqrt((double)hd);
                if (sc[j] > m) m = sc[j];
            }
            for (int j = lo; j <= pos[t]; j++) l += exp(sc[j] - m);
            for (int e = 0; e < hd; e++) {
                double acc = 0;
                for (int j = lo; j <= pos[t]; j++)
                    acc += exp(sc[j] - m) * V[kb + (size_t)j * Hkv * hd + e];
                ref[(size_t)t * Hq * hd + h * hd + e] = acc / l;
            }
        }
    double e = relerr(a2, ref, no);
    printf("%s: rel err vs double %.2e\n", what, e);
    assert_true(e < (dt == WEFT_DTYPE_F32 ? 1e-5 : 2e-2));
    free(a1), free(a2), free(qf), free(ra), free(rb), free(K), free(V), free(ref), free(sc);
    tens all[] = {qkv, q, k, v, p, sl, qn, kn, q1, k1, v1, o1, o2, q2, k2, v2};
    all[4].h = NULL, all[5].h = NULL;
    for (size_t i = 0; i < 16; i++) /* only the tensors this form allocated */
        if (all[i].d.ptr) be->free(bst, &all[i].d);
    for (size_t i = 0; i < 16; i++) free(all[i].h);
    gn = 0;
}

static void check_rope_attention(const ra_case *cs, uint32_t op_ra) {
    size_t nc = (size_t)RA_SLOTS * ra_max_seq(cs) * cs->Hkv * cs->hd,
           bytes = nc * ra_es(cs->dt);
    /* the history: random K and V rows everywhere (positions past a step's row included, which
     * no attention may read) */
    void *kh = malloc(bytes), *vh = malloc(bytes);
    for (size_t i = 0; i < nc; i++) {
        float a = frand(), b = frand();
        if (cs->dt == WEFT_DTYPE_F32) {
            ((float *)kh)[i] = a, ((float *)vh)[i] = b;
        } else {
            ((uint16_t *)kh)[i] = to_h16(cs->dt, a), ((uint16_t *)vh)[i] = to_h16(cs->dt, b);
        }
    }
    ra_cache ca, cb;
    ra_cache_init(&ca, cs, kh, vh, bytes);
    ra_cache_init(&cb, cs, kh, vh, bytes);
    /* contexts of 1, 63, 64, 65 and 300 positions, each followed by the next step; with a
     * longer cache also 511, 512, 513 (the last step whose splits fit one cluster of 8, then
     * the first that spans two), 701 and 1,000 (with the window: splits 9-10 and 14-15, one
     * cluster at ranks 1-2 and 6-7), 2,100 (with 2,200 positions: the merge from global
     * memory) and the cache's last positions */
    static const int ctx[] = {1, 63, 64, 65, 300, 511, 512, 513, 701, 1000, 2100, 0};
    const int MS = ra_max_seq(cs);
    for (size_t i = 0; i < sizeof(ctx) / sizeof(ctx[0]); i++) {
        const int c = ctx[i] ? ctx[i] : MS - 1;
        if (c + 1 > MS || (!ctx[i] && MS <= 513)) continue;
        ra_step(cs, &ca, &cb, 1, c - 1, op_ra);
        ra_step(cs, &ca, &cb, 1, c, op_ra);
    }
    ra_step(cs, &ca, &cb, 3, 126, op_ra); /* several rows: the unfused kernels in the op */
    be->free(bst, &ca.k[0]), be->free(bst, &ca.v[0]);
    be->free(bst, &cb.k[0]), be->free(bst, &cb.v[0]);
    free(kh), free(vh);
}

static void test_rope_attention(void **state) {
    (void)state;
    weft_error err = {.size = sizeof(err)};
    uint32_t op_ra = weft_graph_service_get()->op_register("fuse.rope_attention", &err);
    if (!op_qkr || !reg_find(op_ra)) fail_msg("the backend registered no fuse.rope_attention");
    static const ra_case cases[] = {
        /* Qwen3: hd 128, G 2, qk-norm, merged q|k|v */
        {WEFT_DTYPE_BF16, 16, 8, 128, 1, 0, 1},
        {WEFT_DTYPE_F32, 16, 8, 128, 1, 0, 1},
        /* Llama-3: hd 64, G 4, llama3 rope scaling, merged and separate q, k, v */
        {WEFT_DTYPE_BF16, 32, 8, 64, 0, 1, 1},
        {WEFT_DTYPE_F32, 32, 8, 64, 0, 1, 1},
        {WEFT_DTYPE_BF16, 32, 8, 64, 0, 1, 0},
        /* the cluster merge (RA_MAX_SEQ 320: 5 splits, one cluster per kv head); Qwen3-8B's
         * heads (hd 128, G 4) too, which the attn_hd form _d128 runs at 4, 2 and 1 q heads a
         * block on instances 6, 7 and 3 */
        {WEFT_DTYPE_BF16, 16, 8, 128, 1, 0, 1, 1},
        {WEFT_DTYPE_BF16, 32, 8, 128, 1, 0, 1, 1},
        {WEFT_DTYPE_BF16, 32, 8, 64, 0, 1, 1, 1},
        {WEFT_DTYPE_BF16, 32, 8, 64, 0, 1, 0, 1},
        /* a cache of 1,100 positions: 18 splits, launched as three clusters of 8; below
         * position 512 the first merges alone, past it each cluster merges its live splits
         * into a group record and the last to arrive merges the groups (the unfused combine's
         * two-level order); with a window of 100 the live splits of a step past 512 lie in one
         * or two clusters, at ranks other than 0 (and the unfused kernels take the same
         * window); without clusters (the _at kernels) the counter merge runs the same order
         * from the partials staged in shared memory */
        {WEFT_DTYPE_BF16, 16, 8, 128, 1, 0, 1, 1, 1100},
        {WEFT_DTYPE_BF16, 32, 8, 64, 0, 1, 1, 1, 1100, 100},
        {WEFT_DTYPE_BF16, 16, 8, 128, 1, 0, 1, 0, 1100, 100},
        {WEFT_DTYPE_BF16, 16, 8, 128, 1, 0, 1, 0, 1100},
        /* 2,200 positions: past 2,048 (33-35 live splits) a group's partials (G 4 x 66 floats
         * a split) outgrow the staging area, and the counter merge (without clusters) reads
         * them from global memory; with clusters five groups merge */
        {WEFT_DTYPE_BF16, 32, 8, 64, 0, 1, 1, 1, 2200},
        {WEFT_DTYPE_BF16, 32, 8, 64, 0, 1, 1, 0, 2200},
        /* f16 activations (a model stored in float16): the kernels' 16-bit widening of K and
         * V staged as stored (core.cu ats_ld4) takes its f16 branch; cluster merge at 320 and
         * 1,100 positions, the counter merge with a window */
        {WEFT_DTYPE_F16, 16, 8, 128, 1, 0, 1, 1},
        {WEFT_DTYPE_F16, 16, 8, 128, 1, 0, 1, 1, 1100},
        {WEFT_DTYPE_F16, 32, 8, 64, 0, 1, 1, 0, 1100, 100},
    };
    /* on every backend instance: [1] and [2] run the fused kernel with attn_cp 3 (its cp.async
     * copies) and their four-block cluster form from 2,048 positions (the 2,200-position cases),
     * [2] without the host batch, [3] the plain four-block form from 512 positions; every
     * instance but [0] and [1] the cluster forms compiled for heads of 64 and 128 dims
     * (attn_hd: every cluster case up to 8 splits), [0] and [1] the forms for any head size;
     * the unfused nodes as on [0] */
    for (int k = 0; k < N_INST; k++) {
        use_inst(k);
        ra_host_batch = k != 2;
        if (!reg_find(op_ra)) fail_msg("instance %d registered no fuse.rope_attention", k);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            check_rope_attention(&cases[i], op_ra);
    }
    ra_host_batch = 1;
    use_inst(0);
}

/* the fused attention then a looped o projection (options gemv_l2_rest, gemv_l2_sm,
 * gemv_l2_first, gemv_l2_delay, gemv_l2_join: instances 5 and 7), its output checked by ra_o_check
 * at every one-row step of two cases: the cluster merge and, at 1,100 positions, the counter merge
 */
static void test_attention_then_o(void **state) {
    (void)state;
    if (!all_insts()) skip();
    weft_error err = {.size = sizeof(err)};
    uint32_t op_ra = weft_graph_service_get()->op_register("fuse.rope_attention", &err);
    static const ra_case cases[] = {
        {WEFT_DTYPE_BF16, 16, 8, 128, 1, 0, 1, 1},
        {WEFT_DTYPE_BF16, 32, 8, 64, 0, 1, 1, 0, 1100},
    };
    static const int ks[] = {5, 7};
    for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
        use_inst(ks[j]);
        if (!reg_find(op_ra)) fail_msg("instance %d registered no fuse.rope_attention", ks[j]);
        /* 8,192 rows of 2,048 (both cases' Hq hd): looped at gemv_loop 3 on 132 SMs */
        ra_o = (tens){WEFT_DTYPE_BF16, 8192, 2048};
        gn = 0;
        add_tensor(&ra_o, 1);
        gn = 0;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            check_rope_attention(&cases[i], op_ra);
        be->free(bst, &ra_o.d);
        free(ra_o.h);
        memset(&ra_o, 0, sizeof(ra_o));
    }
    use_inst(0);
}

/* ---- options out of range refused at create, the option named ----------------------------- */
/* create with device 0 and option o must fail with WEFT_ERR_INVALID naming o (what: the value,
 * for the failure message) */
static void expect_refused(weft_option o, const char *what) {
    weft_option all[2] = {{.key = "device", .type = WEFT_OPTION_INT, .i = 0}, o};
    weft_options opts = {2, all};
    weft_error err = {.size = sizeof(err)};
    void *inst = NULL;
    weft_status st = desc->create(weft_host_services_of(host), &opts, &inst, &err);
    if (st == WEFT_OK) {
        desc->destroy(inst);
        fail_msg("option %s = %s was accepted", o.key, what);
    }
    assert_int_equal(st, WEFT_ERR_INVALID);
    if (!strstr(err.message, o.key))
        fail_msg("option %s = %s: the error does not name it: %s", o.key, what, err.message);
}

static void test_option_ranges(void **state) {
    (void)state;
    static const struct {
        const char *key;
        int64_t v;
    } bad[] = {{"gemv_max_tokens", 9},   {"smem_carveout", 101},   {"smem_carveout", -2},
               {"gemv_xsmem", 4},        {"attn_cp", 4},           {"attn_cp", -1},
               {"ablate", 16},           {"gemv_stage", 201},      {"gemv_stage", -1},
               {"gemv_loop", 17},        {"gemv_loop", -1},        {"gemv_loop_warps", 7},
               {"gemv_loop_warps", 12},  {"gemv_loop_warps", 33},  {"attn_qsplit", 0},
               {"attn_qsplit", 3},       {"attn_qsplit", 5},       {"gemv_l2_rest", 65},
               {"gemv_l2_rest", -1},     {"gemv_l2_delay", 16},    {"gemv_l2_join", 65},
               {"attn_bucket_min", 127}, {"attn_bucket_min", 0},   {"join_l2", 65},
               {"join_l2", -1},          {"join_l2_blocks", 0},    {"join_l2_blocks", 257},
               {"gemv_split_1024", 0},   {"gemv_split_1024", 3},   {"gemv_split_2048", 6},
               {"gemv_split_2048", 9},   {"gemv_o_smem_min", 228}, {"gemv_o_smem_min", -1},
               {"attn_push_merge", 3},   {"attn_push_merge", -1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char what[32];
        snprintf(what, sizeof(what), "%lld", (long long)bad[i].v);
        expect_refused((weft_option){.key = bad[i].key, .type = WEFT_OPTION_INT, .i = bad[i].v},
                       what);
    }
    /* kernel_ptx: a folder path longer than the backend keeps is refused, not cut short */
    char longpath[700];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = 0;
    expect_refused((weft_option){.key = "kernel_ptx", .type = WEFT_OPTION_STRING, .s = longpath},
                   "a path of 699 bytes");
}

/* WEFT_TEST_OPTS: integer backend options given to every instance besides its own, as
 * "key=value,key=value" (at most 4; e.g. "pdl_early=0" or "pdl_l1=1", to run the PDL chains
 * above under another form); an instance's own value of a key wins (the backend reads the
 * first). Returns the count put into extra, or -1 (with a message) for a malformed list. */
enum { N_EXTRA = 4 };
static char extra_keys[N_EXTRA][40];
static int extra_opts(weft_option *extra) {
    const char *env = getenv("WEFT_TEST_OPTS");
    int n = 0;
    for (const char *p = env; p && *p;) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        char *num_end = NULL;
        long v = eq && eq < end ? strtol(eq + 1, &num_end, 10) : 0;
        if (!eq || eq > end || eq == p || (size_t)(eq - p) >= sizeof(extra_keys[0]) ||
            end == eq + 1 || num_end != end || n == N_EXTRA) {
            fprintf(stderr, "WEFT_TEST_OPTS: '%s' is not key=integer[,key=integer] (at most %d)\n",
                    env, N_EXTRA);
            return -1;
        }
        memcpy(extra_keys[n], p, (size_t)(eq - p));
        extra_keys[n][eq - p] = 0;
        extra[n] = (weft_option){.key = extra_keys[n], .type = WEFT_OPTION_INT, .i = v};
        n++;
        p = *end ? end + 1 : end;
    }
    if (n) fprintf(stderr, "WEFT_TEST_OPTS: %d extra option(s) on every instance: %s\n", n, env);
    return n;
}

static int setup(void **state) {
    (void)state;
    char path[1024];
    const char *dir = getenv("WEFT_TEST_PLUGIN_DIR"); /* a bundle moved to another machine */
    snprintf(path, sizeof(path), "%s/cuda/libweft-cuda.so", dir ? dir : WEFT_BUILD_PLUGIN_DIR);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) { /* a build without the cuda bundle, or a machine without the CUDA driver */
        fprintf(stderr, "SKIPPED: cannot load %s: %s\n", path, dlerror());
        return 0;
    }
    weft_plugin_entry_fn entry = (weft_plugin_entry_fn)dlsym(dl, WEFT_PLUGIN_ENTRY_NAME);
    uint32_t chosen = 0;
    weft_error err = {.size = sizeof(err)};
    if (!entry || entry(1, 1, &chosen, &desc, &err)) return -1;
    be = desc->backend;
    weft_option extra[N_EXTRA];
    const int n_extra = extra_opts(extra);
    if (n_extra < 0) return -1;
    weft_option opt[5 + N_EXTRA] = {{.key = "device", .type = WEFT_OPTION_INT, .i = 0},
                                    {.key = "arena_mb", .type = WEFT_OPTION_INT, .i = 0},
                                    {.key = "gemv_max_tokens", .type = WEFT_OPTION_INT, .i = 8},
                                    {.key = "gemv_force", .type = WEFT_OPTION_BOOL, .i = 1},
                                    /* [0] runs the fused attention's forms for any head size */
                                    {.key = "attn_hd", .type = WEFT_OPTION_BOOL, .i = 0}};
    for (int i = 0; i < n_extra; i++)
        opt[5 + i] = extra[i];
    weft_options opts = {5 + (uint32_t)n_extra, opt};
    /* a host with the graph service, so the backend registers the fused user ops */
    host = weft_host_new();
    if (!host ||
        weft_host_register_service(host, WEFT_SERVICE_GRAPH, weft_graph_service_get()) != 0)
        return -1;
    if (desc->create(weft_host_services_of(host), &opts, &bst, &err)) {
        fprintf(stderr, "SKIPPED: no usable CUDA device here (%s)\n", err.message);
        return 0;
    }
    insts[0] = bst;
    weft_ops_service ops = {.size = sizeof(ops), .version = 1, .add = reg_add};
    if (be->register_ops(bst, &ops, &err)) return -1;
    for (int k = 1; k < N_INST; k++) {
        weft_option kopt[23 + N_EXTRA] = {
            opt[0],
            opt[1],
            opt[2],
            opt[3],
            {.key = "gemv_xsmem", .type = WEFT_OPTION_INT, .i = 3},
            {.key = "smem_carveout", .type = WEFT_OPTION_INT, .i = k == 2 ? 100 : -1},
            {.key = "attn_cp", .type = WEFT_OPTION_INT, .i = 3},
            {.key = "attn_mc4_from", .type = WEFT_OPTION_INT, .i = 2048},
            {.key = "gemv_loop", .type = WEFT_OPTION_INT, .i = 3}};
        if (k == 3) { /* [0]'s options plus gemv_stage and attn_mc4_from 512, without the
                       * tensor-core prefill */
            kopt[4] = (weft_option){.key = "gemv_stage", .type = WEFT_OPTION_INT, .i = 96};
            kopt[5] = (weft_option){.key = "prefill_tc", .type = WEFT_OPTION_BOOL, .i = 0};
            kopt[6] = (weft_option){.key = "attn_mc4_from", .type = WEFT_OPTION_INT, .i = 512};
            kopt[7] = (weft_option){.key = "attn_qsplit", .type = WEFT_OPTION_INT, .i = 4};
            /* and the plain cluster form compiled for heads of 64 and 128 dims */
            kopt[8] = (weft_option){.key = "attn_hd", .type = WEFT_OPTION_BOOL, .i = 1};
        }
        if (k == 4) { /* [0]'s options plus gemv_loop, products past 5,000 rows unlooped */
            kopt[4] = (weft_option){.key = "gemv_loop", .type = WEFT_OPTION_INT, .i = 2};
            kopt[5] = (weft_option){.key = "gemv_head_rows", .type = WEFT_OPTION_INT, .i = 5000};
        }
        size_t nk = k == 1 ? 9 : k == 3 ? 9 : k == 4 ? 6 : 7;
        if (k == 4) { /* and the fused attention's plain cluster forms merging by pushes */
            nk = 7;
            kopt[6] = (weft_option){.key = "attn_push_merge", .type = WEFT_OPTION_INT, .i = 1};
        }
        if (k == 1) { /* the attn_cp forms for any head size */
            nk = 10;
            kopt[9] = (weft_option){.key = "attn_hd", .type = WEFT_OPTION_BOOL, .i = 0};
        }
        if (k == 2) { /* with the carveout also attn_mc4_from 2048 and gemv_loop 3 (as
                       * -smem-loop runs), and fuse.norm_linear's one-row forms whose blocks
                       * beside a live attention block load after their wait (the _d kernels) */
            nk = 10;
            kopt[9] = (weft_option){.key = "gemv_nl_defer", .type = WEFT_OPTION_BOOL, .i = 1};
        }
        if (k == 3) { /* and the qk-norm's sums taken by the RoPE threads (the plain form; at
                       * attn_qsplit 4 one q head and the k head a block) */
            nk = 10;
            kopt[9] = (weft_option){.key = "attn_rope_sums", .type = WEFT_OPTION_BOOL, .i = 1};
        }
        if (k == 5 || k == 6) { /* [1] with wider looped blocks */
            nk = 10;
            kopt[9] = (weft_option){.key = "gemv_loop_warps", .type = WEFT_OPTION_INT,
                                    .i = k == 5 ? 24 : 32};
        }
        if (k == 6) { /* and the attn_cp cluster forms compiled for the head size, bf16 rounded
                       * by the hardware's conversion */
            nk = 12;
            kopt[10] = (weft_option){.key = "attn_hd", .type = WEFT_OPTION_BOOL, .i = 1};
            kopt[11] = (weft_option){.key = "bf16_cvt", .type = WEFT_OPTION_BOOL, .i = 1};
        }
        if (k == 5) { /* and the o product's L2 loads, its first batch late beside the attention,
                       * the attention's splits with no position leaving before its merge */
            nk = 14;
            kopt[10] = (weft_option){.key = "gemv_l2_rest", .type = WEFT_OPTION_INT, .i = 32};
            kopt[11] = (weft_option){.key = "gemv_l2_first", .type = WEFT_OPTION_BOOL, .i = 1};
            kopt[12] = (weft_option){.key = "gemv_l2_delay", .type = WEFT_OPTION_INT, .i = 2};
            kopt[13] = (weft_option){.key = "attn_dead_exit", .type = WEFT_OPTION_BOOL, .i = 1};
            /* and the join's L2 loads from 256 extra blocks, 64 KiB a block of the product */
            nk = 16;
            kopt[14] = (weft_option){.key = "join_l2", .type = WEFT_OPTION_INT, .i = 64};
            kopt[15] = (weft_option){.key = "join_l2_blocks", .type = WEFT_OPTION_INT, .i = 256};
            /* and the attn_cp cluster forms merging by pushes, the pushing splits leaving at once
             * (with the early exits of the empty ones) */
            nk = 17;
            kopt[16] = (weft_option){.key = "attn_push_merge", .type = WEFT_OPTION_INT, .i = 2};
        }
        if (k == 7) { /* [1] with x copied by cp.async, each kv head's q heads over 2 blocks,
                       * the attention's clusters spread */
            nk = 12;
            kopt[9] = (weft_option){.key = "gemv_x_async", .type = WEFT_OPTION_BOOL, .i = 1};
            kopt[10] = (weft_option){.key = "attn_qsplit", .type = WEFT_OPTION_INT, .i = 2};
            kopt[11] = (weft_option){.key = "attn_cluster_policy", .type = WEFT_OPTION_INT, .i = 1};
            /* the o product's L2 loads (64 KiB a block), none from the attention's SMs */
            nk = 15;
            kopt[12] = (weft_option){.key = "gemv_l2_rest", .type = WEFT_OPTION_INT, .i = 64};
            kopt[13] = (weft_option){.key = "gemv_l2_sm", .type = WEFT_OPTION_BOOL, .i = 1};
            kopt[14] = (weft_option){.key = "gemv_l2_join", .type = WEFT_OPTION_INT, .i = 48};
            /* the attention's grid over the step's bucket down to 128 positions (2 splits) */
            nk = 16;
            kopt[15] = (weft_option){.key = "attn_bucket_min", .type = WEFT_OPTION_INT, .i = 128};
            /* the join's L2 loads: 16 KiB a block of the product, the default 16 extra blocks */
            nk = 17;
            kopt[16] = (weft_option){.key = "join_l2", .type = WEFT_OPTION_INT, .i = 16};
            /* the attn_cp cluster form compiled for heads of 64 and 128 dims */
            nk = 18;
            kopt[17] = (weft_option){.key = "attn_hd", .type = WEFT_OPTION_BOOL, .i = 1};
            /* fuse.norm_linear's one-row forms whose blocks beside a live attention block load
             * their first weights after the wait (the _d kernels) */
            nk = 19;
            kopt[18] = (weft_option){.key = "gemv_nl_defer", .type = WEFT_OPTION_BOOL, .i = 1};
            /* the attention's blocks asking for 120 KiB of shared memory (one an SM), the norms'
             * sums finished by every warp */
            nk = 21;
            kopt[19] = (weft_option){.key = "attn_smem_min", .type = WEFT_OPTION_INT, .i = 120};
            kopt[20] = (weft_option){.key = "norm_sum_all", .type = WEFT_OPTION_BOOL, .i = 1};
            /* fuse.norm_linear's one-row forms asking for 108 KiB a block (none beside an
             * attention block of 120 KiB; two an SM, the grid sized so) */
            nk = 22;
            kopt[21] = (weft_option){.key = "gemv_nl_smem_min", .type = WEFT_OPTION_INT, .i = 108};
            /* the qk-norm's sums taken by the RoPE threads (the attn_cp form, one or two q heads
             * and the k head a block) */
            nk = 23;
            kopt[22] = (weft_option){.key = "attn_rope_sums", .type = WEFT_OPTION_BOOL, .i = 1};
        }
        for (int i = 0; i < n_extra; i++)
            kopt[nk + i] = extra[i];
        weft_options kopts = {(uint32_t)(nk + (size_t)n_extra), kopt};
        if (desc->create(weft_host_services_of(host), &kopts, &insts[k], &err)) {
            fprintf(stderr, "backend instance %d: %s\n", k, err.message);
            return -1;
        }
        reg_to = k;
        if (be->register_ops(insts[k], &ops, &err)) return -1;
    }
    reg_to = 0;
    const weft_graph_service *gs = weft_graph_service_get();
    op_lsw = gs->op_register("fuse.linear_swiglu", &err);
    op_qkr = gs->op_register("fuse.qkv_rope", &err);
    op_lan = gs->op_register("fuse.linear_add_rmsnorm", &err);
    op_nl = gs->op_register("fuse.norm_linear", &err);
    if (!reg_find(op_lsw) || !reg_find(op_qkr)) {
        fprintf(stderr, "the backend registered no fused ops\n");
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    use_inst(0);
    for (int k = N_INST - 1; k >= 1; k--)
        if (insts[k]) desc->destroy(insts[k]);
    if (bst) desc->destroy(bst);
    if (host) weft_host_free(host);
    return 0;
}

/* backend copy from pinned host memory to the device: at most 4 KB in 4-byte words runs as the
 * kernel weft_copy_words (cuda_backend.c cb_copy, once a kernel module is loaded: the op tests
 * before this one load it), the rest on the copy engine; both must move exactly the bytes
 * asked for, to the offset asked for, and nothing around them */
static void test_copy_pinned(void **state) {
    (void)state;
    enum { N = 8192 };
    weft_error err = {.size = sizeof(err)};
    weft_buffer hp = {0}, dv = {0};
    assert_int_equal(be->alloc(bst, N, WEFT_MEMORY_HOST_PINNED, &hp, &err), 0);
    assert_int_equal(be->alloc(bst, N, WEFT_MEMORY_DEVICE, &dv, &err), 0);
    unsigned char *src = hp.ptr, *got = malloc(N), *poison = malloc(N);
    assert_non_null(got);
    assert_non_null(poison);
    for (int i = 0; i < N; i++) {
        src[i] = (unsigned char)(i * 7 + 3);
        poison[i] = 0xAB;
    }
    static const struct {
        uint64_t src_off, dst_off, bytes;
    } cases[] = {{0, 0, 4},      {4, 8, 12},  {16, 32, 1024}, {0, 0, 4096},
                 {8, 4, 4096},   {0, 0, 4100}, {4, 8, 6},     {2, 4, 16}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        assert_int_equal(be->upload(bst, &dv, 0, poison, N, &err), 0);
        assert_int_equal(be->copy(bst, &dv, cases[c].dst_off, &hp, cases[c].src_off,
                                  cases[c].bytes, NULL, &err),
                         0);
        assert_int_equal(be->synchronize(bst, NULL, &err), 0);
        assert_int_equal(be->download(bst, got, &dv, 0, N, &err), 0);
        for (uint64_t i = 0; i < N; i++) {
            int in = i >= cases[c].dst_off && i < cases[c].dst_off + cases[c].bytes;
            unsigned char want = in ? src[cases[c].src_off + i - cases[c].dst_off] : 0xAB;
            if (got[i] != want)
                fail_msg("copy %zu (%llu bytes from %llu to %llu): byte %llu is %u, expected %u",
                         c, (unsigned long long)cases[c].bytes,
                         (unsigned long long)cases[c].src_off,
                         (unsigned long long)cases[c].dst_off, (unsigned long long)i, got[i],
                         want);
        }
    }
    free(got);
    free(poison);
    be->free(bst, &hp);
    be->free(bst, &dv);
}

/* upload is synchronous (weft/plugin.h): once it returns, work on the compute stream sees the
 * bytes. cuMemcpyHtoD from pageable memory may return before its DMA lands (the driver API's
 * "API synchronization behavior"), on the legacy stream, which the non-blocking compute stream
 * does not wait for; so each round uploads 32 MiB of a new pattern and at once copies it on the
 * compute stream (be->copy, device to device), and every byte of the copy must be the new
 * pattern. (The backend waits for the legacy stream since a PDL chain above differed once on an
 * H100, whose upload could have raced so; bench/stale_reads.cu did not reproduce the race:
 * docs/perf/batch1.md, session of 2026-12-05, 14:58 UTC.) */
static void test_upload_then_copy(void **state) {
    (void)state;
    enum { WORDS = 8 << 20, ROUNDS = 8 };
    const uint64_t bytes = (uint64_t)WORDS * 4;
    weft_error err = {.size = sizeof(err)};
    weft_buffer a = {0}, c = {0};
    assert_int_equal(be->alloc(bst, bytes, WEFT_MEMORY_DEVICE, &a, &err), 0);
    assert_int_equal(be->alloc(bst, bytes, WEFT_MEMORY_DEVICE, &c, &err), 0);
    uint32_t *h = malloc(bytes), *got = malloc(bytes);
    assert_non_null(h);
    assert_non_null(got);
    long stale = 0;
    for (uint32_t r = 1; r <= ROUNDS; r++) {
        for (uint32_t i = 0; i < WORDS; i++)
            h[i] = r * 2654435761u + i;
        assert_int_equal(be->upload(bst, &a, 0, h, bytes, &err), 0);
        assert_int_equal(be->copy(bst, &c, 0, &a, 0, bytes, NULL, &err), 0);
        assert_int_equal(be->download(bst, got, &c, 0, bytes, &err), 0);
        for (uint32_t i = 0; i < WORDS; i++)
            stale += got[i] != h[i];
    }
    printf("upload then copy: %ld of %ld words stale\n", stale, (long)WORDS * ROUNDS);
    assert_int_equal(stale, 0);
    free(h);
    free(got);
    be->free(bst, &a);
    be->free(bst, &c);
}

#define GPU_TEST(f)                                                                              \
    static void gpu_##f(void **state) {                                                          \
        if (!bst) skip();                                                                        \
        f(state);                                                                                \
    }
GPU_TEST(test_linear)
GPU_TEST(test_rmsnorm)
GPU_TEST(test_rope)
GPU_TEST(test_attention)
GPU_TEST(test_attention_prefill_tc)
GPU_TEST(test_elementwise_and_head)
GPU_TEST(test_embed)
GPU_TEST(test_bf16_round)
GPU_TEST(test_linear_swiglu)
GPU_TEST(test_merged_linear_split)
GPU_TEST(test_qkv_rope)
GPU_TEST(test_add_rmsnorm)
GPU_TEST(test_linear_add_rmsnorm)
GPU_TEST(test_norm_linear)
GPU_TEST(test_join_pull)
GPU_TEST(test_mlp)
GPU_TEST(test_head_gemv)
GPU_TEST(test_pdl_chain)
GPU_TEST(test_rope_attention)
GPU_TEST(test_attention_then_o)
GPU_TEST(test_gemv_xsmem)
GPU_TEST(test_option_ranges)
GPU_TEST(test_pdl_chain_xsmem)
GPU_TEST(test_copy_pinned)
GPU_TEST(test_upload_then_copy)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_test_linear),
        cmocka_unit_test(gpu_test_rmsnorm),
        cmocka_unit_test(gpu_test_rope),
        cmocka_unit_test(gpu_test_attention),
        cmocka_unit_test(gpu_test_attention_prefill_tc),
        cmocka_unit_test(gpu_test_elementwise_and_head),
        cmocka_unit_test(gpu_test_embed),
        cmocka_unit_test(gpu_test_bf16_round),
        cmocka_unit_test(gpu_test_linear_swiglu),
        cmocka_unit_test(gpu_test_merged_linear_split),
        cmocka_unit_test(gpu_test_qkv_rope),
        cmocka_unit_test(gpu_test_add_rmsnorm),
        cmocka_unit_test(gpu_test_head_gemv),
        cmocka_unit_test(gpu_test_pdl_chain),
        cmocka_unit_test(gpu_test_rope_attention),
        cmocka_unit_test(gpu_test_attention_then_o),
        cmocka_unit_test(gpu_test_gemv_xsmem),
        cmocka_unit_test(gpu_test_pdl_chain_xsmem),
        cmocka_unit_test(gpu_test_option_ranges),
        cmocka_unit_test(gpu_test_linear_add_rmsnorm),
        cmocka_unit_test(gpu_test_norm_linear),
        cmocka_unit_test(gpu_test_join_pull),
        cmocka_unit_test(gpu_test_mlp),
        cmocka_unit_test(gpu_test_copy_pinned),
        cmocka_unit_test(gpu_test_upload_then_copy),
    };
    /* WEFT_TEST_FILTER: only the tests whose names match this cmocka pattern (e.g.
     * "*norm_linear*"), for a short run on the GPU machine */
    const char *filter = getenv("WEFT_TEST_FILTER");
    if (filter && *filter) cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, setup, teardown);
}
