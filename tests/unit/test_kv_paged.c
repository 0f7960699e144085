/* kv.paged on the cpu backend:
 *   - the attention op over the "paged" layout, run directly on a hand-built node with
 *     scrambled block tables, two sequences, prefill then decode, against a double-precision
 *     reference written here (f32, bf16 and f16 caches, grouped-query heads, a sliding window);
 *   - the engine with kv.paged (several page sizes, prefill split into chunks) against the
 *     Hugging Face references of stories260K and the tiny models: logits of a forward pass
 *     within 1e-4 of the reference and within 1e-5 of the contiguous default, greedy tokens
 *     identical to the reference continuation;
 *   - KV memory: after every step the pages in use hold the tokens held plus less than one page
 *     per request, and everything is returned when requests end;
 *   - the page pool driven directly through the kv vtable with several slots: random opens,
 *     reserves, truncations and closes keep the block tables disjoint and the stats exact, and a
 *     reserve the pool cannot satisfy changes nothing.
 * Greedy and logit references are the shared ones (WEFT_SHARED_DIR/reference), not outputs of
 * this code. */
#include "test_kv_common.h"

#include <math.h>

#include "../../techniques/kv.paged/kv_paged.h"
#include "files/safetensors.h"

static char stories[64];

static int group_setup(void **state) {
    (void)state;
    return kvt_stories_convert(stories);
}

static int group_teardown(void **state) {
    (void)state;
    kvt_stories_remove(stories);
    return 0;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(void) { /* [-1, 1) */
    return (float)(rnd() >> 8) * (2.0f / 16777216.0f) - 1.0f;
}
static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half rounding and decoding, written with frexp/ldexp so they share nothing with the
 * plugin's bit-level conversions. */
static float f16_round(float f) {
    if (fabsf(f) < 0x1p-14f) return rintf(f * 0x1p24f) * 0x1p-24f; /* subnormal quantum */
    int e;
    float m = frexpf(f, &e); /* f = m 2^e, 0.5 <= |m| < 1: 11 significant bits */
    return ldexpf(rintf(ldexpf(m, 11)), e - 11);
}
static float f16_decode(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e ? ldexpf((float)(m | 1024), e - 25) : ldexpf((float)m, -24);
    return h & 0x8000 ? -v : v;
}
static float round_to(uint32_t dt, float f) {
    return dt == WEFT_DTYPE_BF16 ? bf16_round(f) : dt == WEFT_DTYPE_F16 ? f16_round(f) : f;
}

/* ---- the op, directly ---------------------------------------------------------------------- */
#define MAX_IMPLS 16
static weft_op_impl impls[MAX_IMPLS];
static uint32_t n_impls;

static weft_status ops_add(void *self, const weft_op_impl *impl, weft_error *err) {
    (void)self;
    (void)err;
    if (n_impls == MAX_IMPLS) return WEFT_ERR_NOMEM;
    impls[n_impls++] = *impl;
    return WEFT_OK;
}

/* Two sequences with scrambled pages: step 0 prefills 7 and 4 rows, step 1 decodes one row
 * each; every output row is checked against attention over the exact values cached. */
static void check_op(const weft_op_impl *impl, uint32_t dt, int Hq, int Hkv, int hd, int P,
                     int window) {
    enum { LEN0 = 8, LEN1 = 5, N_PAGES = 16 };
    const int lens[2] = {LEN0, LEN1};
    const size_t es = dt == WEFT_DTYPE_F32 ? 4 : 2;
    const int max_seq = 16, max_blocks = (max_seq + P - 1) / P;
    /* pages: a permutation of the pool, so no sequence sees an identity table */
    int32_t perm[N_PAGES];
    for (int i = 0; i < N_PAGES; i++)
        perm[i] = i;
    for (int i = N_PAGES - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t table[2][16];
    int used = 0;
    for (int s = 0; s < 2; s++)
        for (int b = 0; b < (lens[s] + P - 1) / P; b++)
            table[s][b] = perm[used++];
    assert_true(used <= N_PAGES);
    size_t page_elems = (size_t)P * Hkv * hd;
    weft_buffer kb = {calloc(N_PAGES * page_elems, es), N_PAGES * page_elems * es, 0, 0, NULL};
    weft_buffer vb = {calloc(N_PAGES * page_elems, es), N_PAGES * page_elems * es, 0, 0, NULL};
    weft_kv_paged desc = {.size = sizeof(desc),
                          .n_layers = 1,
                          .n_pages = N_PAGES,
                          .page_size = (uint32_t)P,
                          .n_kv_heads = (uint32_t)Hkv,
                          .head_dim = (uint32_t)hd,
                          .dtype = dt,
                          .n_slots = 2,
                          .max_blocks = (uint32_t)max_blocks,
                          .max_seq = (uint32_t)max_seq,
                          .k = &kb,
                          .v = &vb};
    weft_kv_view view = {.size = sizeof(view), .layout = "paged", .desc = &desc};
    /* every row of both sequences */
    float *Q[2], *K[2], *V[2];
    for (int s = 0; s < 2; s++) {
        Q[s] = malloc(sizeof(float) * lens[s] * Hq * hd);
        K[s] = malloc(sizeof(float) * lens[s] * Hkv * hd);
        V[s] = malloc(sizeof(float) * lens[s] * Hkv * hd);
        for (int i = 0; i < lens[s] * Hq * hd; i++)
            Q[s][i] = frand();
        for (int i = 0; i < lens[s] * Hkv * hd; i++) {
            K[s][i] = frand();
            V[s][i] = frand();
        }
    }
    for (int step = 0; step < 2; step++) {
        int start[2] = {step ? LEN0 - 1 : 0, step ? LEN1 - 1 : 0};
        int rows[2] = {step ? 1 : LEN0 - 1, step ? 1 : LEN1 - 1};
        int T = rows[0] + rows[1];
        float *q = malloc(sizeof(float) * T * Hq * hd), *k = malloc(sizeof(float) * T * Hkv * hd);
        float *v = malloc(sizeof(float) * T * Hkv * hd), *o = malloc(sizeof(float) * T * Hq * hd);
        int32_t pos[16], seq_of_row[16];
        weft_seq seqs[2];
        int r = 0;
        for (int s = 0; s < 2; s++) {
            seqs[s] = (weft_seq){.request_id = (uint64_t)s,
                                 .kv_slot = s,
                                 .n_past = start[s],
                                 .n_new = rows[s],
                                 .first_row = r,
                                 .block_table = table[s],
                                 .n_blocks = (lens[s] + P - 1) / P};
            for (int j = 0; j < rows[s]; j++, r++) {
                int src = start[s] + j;
                memcpy(q + r * Hq * hd, Q[s] + src * Hq * hd, sizeof(float) * Hq * hd);
                memcpy(k + r * Hkv * hd, K[s] + src * Hkv * hd, sizeof(float) * Hkv * hd);
                memcpy(v + r * Hkv * hd, V[s] + src * Hkv * hd, sizeof(float) * Hkv * hd);
                pos[r] = src;
                seq_of_row[r] = s;
            }
        }
        for (int i = 0; i < T * Hq * hd; i++)
            o[i] = NAN;
        weft_tensor t[5];
        memset(t, 0, sizeof(t));
        const int64_t cols[5] = {Hq * hd, Hkv * hd, Hkv * hd, 1, Hq * hd};
        weft_buffer data[5] = {{q, sizeof(float) * T * Hq * hd, 0, 0, NULL},
                               {k, sizeof(float) * T * Hkv * hd, 0, 0, NULL},
                               {v, sizeof(float) * T * Hkv * hd, 0, 0, NULL},
                               {pos, sizeof(int32_t) * T, 0, 0, NULL},
                               {o, sizeof(float) * T * Hq * hd, 0, 0, NULL}};
        for (int i = 0; i < 5; i++) {
            t[i].id = (uint32_t)i;
            t[i].dtype = i == 3 ? WEFT_DTYPE_I32 : WEFT_DTYPE_F32;
            t[i].rank = i == 3 ? 1 : 2;
            t[i].shape[0] = T;
            t[i].shape[1] = cols[i];
            snprintf(t[i].name, sizeof(t[i].name), "t%d", i);
        }
        weft_node n;
        memset(&n, 0, sizeof(n));
        n.op = WEFT_OP_ATTENTION;
        n.n_in = 4;
        n.n_out = 1;
        for (int i = 0; i < 4; i++)
            n.in[i] = (uint32_t)i;
        n.out[0] = 4;
        n.p.i[1] = Hq;
        n.p.i[2] = Hkv;
        n.p.i[3] = hd;
        n.p.i[4] = window;
        snprintf(n.name, sizeof(n.name), "layers.0.attn");
        weft_graph g = {.size = sizeof(g), .n_tensors = 5, .n_nodes = 1, .tensors = t, .nodes = &n};
        weft_batch batch = {.size = sizeof(batch),
                            .n_tokens = (uint32_t)T,
                            .n_seqs = 2,
                            .tokens = pos,
                            .positions = pos,
                            .seq_of_row = seq_of_row,
                            .seqs = seqs};
        weft_exec_ctx ctx = {.size = sizeof(ctx),
                             .n_tokens = (uint32_t)T,
                             .graph = &g,
                             .batch = &batch,
                             .data = data,
                             .kv = &view};
        assert_true(impl->accepts(impl->state, &g, &n));
        weft_error err;
        weft_error_clear(&err);
        if (step == 0) {
            /* Malformed steps are refused before anything is written: a row past the pages its
             * sequence maps, and a table entry outside the pool. */
            weft_seq saved = seqs[1];
            seqs[1].n_blocks = (rows[1] - 1) / P; /* the last row's page is missing */
            assert_int_equal(impl->run(impl->state, &ctx, &n, &err), WEFT_ERR_INVALID);
            assert_non_null(strstr(err.message, "outside the"));
            int32_t bad[16];
            memcpy(bad, table[1], sizeof(bad));
            bad[0] = N_PAGES;
            seqs[1] = saved;
            seqs[1].block_table = bad;
            assert_int_equal(impl->run(impl->state, &ctx, &n, &err), WEFT_ERR_INVALID);
            assert_non_null(strstr(err.message, "the pool has"));
            seqs[1] = saved;
            for (size_t i = 0; i < kb.bytes; i++)
                assert_int_equal(((uint8_t *)kb.ptr)[i], 0);
        }
        if (impl->run(impl->state, &ctx, &n, &err) != WEFT_OK) fail_msg("run: %s", err.message);
        double max_err = 0;
        for (int row = 0; row < T; row++) {
            int s = seq_of_row[row], p = pos[row];
            int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            for (int h = 0; h < Hq; h++) {
                int kh = h / (Hq / Hkv);
                double sc[16], m = -1e300, l = 0;
                for (int j = lo; j <= p; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++) {
                        float ke = round_to(dt, K[s][j * Hkv * hd + kh * hd + e]);
                        d += (double)Q[s][p * Hq * hd + h * hd + e] * ke;
                    }
                    sc[j] = d / sqrt((double)hd);
                    if (sc[j] > m) m = sc[j];
                }
                for (int j = lo; j <= p; j++)
                    l += exp(sc[j] - m);
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int j = lo; j <= p; j++) {
                        float ve = round_to(dt, V[s][j * Hkv * hd + kh * hd + e]);
                        acc += exp(sc[j] - m) * ve;
                    }
                    double got = o[row * Hq * hd + h * hd + e];
                    double d = fabs(got - acc / l);
                    if (!(d <= max_err)) max_err = isnan(d) ? INFINITY : d;
                }
            }
        }
        printf("paged attention dt=%u Hq=%d Hkv=%d hd=%d P=%d window=%d step %d: max err %.2e\n",
               dt, Hq, Hkv, hd, P, window, step, max_err);
        assert_true(max_err < 2e-6);
        free(q);
        free(k);
        free(v);
        free(o);
    }
    /* The cache holds each row at its page through the table, rounded to the cache dtype. */
    for (int s = 0; s < 2; s++)
        for (int p = 0; p < lens[s]; p++)
            for (int i = 0; i < Hkv * hd; i++) {
                size_t at = ((size_t)table[s][p / P] * P + p % P) * Hkv * hd + i;
                float got;
                if (dt == WEFT_DTYPE_F32) {
                    got = ((float *)kb.ptr)[at];
                } else if (dt == WEFT_DTYPE_F16) {
                    got = f16_decode(((uint16_t *)kb.ptr)[at]);
                } else {
                    uint32_t u = (uint32_t)((uint16_t *)kb.ptr)[at] << 16;
                    memcpy(&got, &u, 4);
                }
                float want = round_to(dt, K[s][p * Hkv * hd + i]);
                assert_true(got == want);
            }
    for (int s = 0; s < 2; s++) {
        free(Q[s]);
        free(K[s]);
        free(V[s]);
    }
    free(kb.ptr);
    free(vb.ptr);
}

static void test_op_block_tables(void **state) {
    (void)state;
    char manifest[64];
    kvt_manifest(manifest, "  - kv.paged\n");
    kvt_direct d;
    kvt_direct_open(&d, manifest, stories);
    weft_ops_service ops = {.size = sizeof(ops), .version = 1, .add = ops_add};
    weft_error err;
    weft_error_clear(&err);
    n_impls = 0;
    assert_int_equal(d.kv->desc->opset->register_ops(d.kv->state, "cpu", &ops, &err), WEFT_OK);
    const weft_op_impl *f32 = NULL, *bf16 = NULL, *f16 = NULL;
    for (uint32_t i = 0; i < n_impls; i++) {
        assert_int_equal(impls[i].op, WEFT_OP_ATTENTION);
        assert_string_equal(impls[i].layout, "paged");
        if (impls[i].dtype == WEFT_DTYPE_F32) f32 = &impls[i];
        if (impls[i].dtype == WEFT_DTYPE_BF16) bf16 = &impls[i];
        if (impls[i].dtype == WEFT_DTYPE_F16) f16 = &impls[i];
    }
    assert_non_null(f32);
    assert_non_null(bf16);
    assert_non_null(f16);
    check_op(f32, WEFT_DTYPE_F32, 8, 4, 8, 3, 0);
    check_op(f32, WEFT_DTYPE_F32, 4, 2, 20, 1, 0); /* head_dim with a tail, one token per page */
    check_op(f32, WEFT_DTYPE_F32, 6, 2, 16, 4, 3); /* sliding window across pages */
    check_op(bf16, WEFT_DTYPE_BF16, 8, 2, 64, 5, 0);
    check_op(f16, WEFT_DTYPE_F16, 4, 4, 24, 2, 0);
    /* cuda is not in this build unless configured with it; the message says why */
    weft_status s = d.kv->desc->opset->register_ops(d.kv->state, "tpu", &ops, &err);
    assert_int_equal(s, WEFT_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "expected backend cpu or cuda"));
    kvt_direct_close(&d);
    unlink(manifest);
}

/* ---- engine parity with the references --------------------------------------------------- */
typedef struct reference {
    weft_safetensors *st;
    const int32_t *input_ids, *greedy;
    size_t n_input, n_greedy, vocab;
    const float *logits;
} reference;

static void reference_open(const char *name, reference *r) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/reference/%s/reference.safetensors", kvt_shared_dir(), name);
    weft_error err;
    weft_error_clear(&err);
    memset(r, 0, sizeof(*r));
    if (weft_safetensors_open_file(path, &r->st, &err) != WEFT_OK)
        fail_msg("%s: %s", path, err.message);
    const weft_st_tensor *ids = weft_safetensors_find(r->st, "input_ids");
    const weft_st_tensor *lg = weft_safetensors_find(r->st, "logits");
    const weft_st_tensor *gr = weft_safetensors_find(r->st, "greedy_ids");
    assert_non_null(ids);
    assert_non_null(lg);
    assert_non_null(gr);
    r->input_ids = (const int32_t *)ids->data;
    r->n_input = (size_t)ids->shape[0];
    r->logits = (const float *)lg->data;
    r->vocab = (size_t)lg->shape[1];
    r->greedy = (const int32_t *)gr->data;
    r->n_greedy = (size_t)gr->shape[0];
}

static double rel_diff(const float *a, const float *b, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md)) md = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > mr) mr = fabs((double)b[i]);
    }
    return md / mr;
}

/* One model: the contiguous default's logits, then kv.paged with each page size and two prefill
 * chunkings: logits near both, greedy tokens equal to the reference. */
static void parity(const char *name, const char *model_dir, size_t n_prompt) {
    reference r;
    reference_open(name, &r);
    size_t n_logits = r.n_input * r.vocab;
    float *base = malloc(sizeof(float) * n_logits), *got = malloc(sizeof(float) * n_logits);
    assert_non_null(base);
    assert_non_null(got);
    char manifest[64];
    kvt_manifest(manifest, "");
    weft_engine *e = kvt_open(manifest, model_dir, 1, 0);
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_engine_score(e, r.input_ids, r.n_input, base, &err), WEFT_OK);
    weft_engine_close(e);
    unlink(manifest);
    static const uint32_t pages[] = {1, 7, 16};
    static const uint32_t chunks[] = {0, 24}; /* 0 = the default largest bucket */
    for (size_t pi = 0; pi < sizeof(pages) / sizeof(pages[0]); pi++)
        for (size_t ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++) {
            char tech[128];
            snprintf(tech, sizeof(tech), "  - {name: kv.paged, options: {page_size: %u}}\n",
                     pages[pi]);
            kvt_manifest(manifest, tech);
            e = kvt_open(manifest, model_dir, 1, chunks[ci]);
            assert_int_equal(weft_engine_score(e, r.input_ids, r.n_input, got, &err), WEFT_OK);
            double to_base = rel_diff(got, base, n_logits),
                   to_ref = rel_diff(got, r.logits, n_logits);
            kvt_out out;
            size_t n_gen = r.n_greedy - n_prompt;
            kvt_greedy(e, r.greedy, n_prompt, (uint32_t)n_gen, &out);
            printf("%s page_size %u chunk %u: logits rel diff %.2e to contiguous, %.2e to the "
                   "reference\n",
                   name, pages[pi], chunks[ci], to_base, to_ref);
            assert_true(to_base <= 1e-5);
            assert_true(to_ref <= 1e-4);
            for (size_t i = 0; i < n_gen; i++)
                if (out.ids[i] != r.greedy[n_prompt + i])
                    fail_msg("%s page_size %u: greedy token %zu is %d, the reference has %d", name,
                             pages[pi], i, out.ids[i], r.greedy[n_prompt + i]);
            weft_kv_stats ks;
            weft_engine_kv_stats(e, &ks);
            assert_int_equal(ks.used_tokens, 0); /* everything returned */
            assert_int_equal(ks.bytes_used, 0);
            weft_engine_close(e);
            unlink(manifest);
        }
    free(base);
    free(got);
    weft_safetensors_close(r.st);
}

static void test_parity_stories(void **state) {
    (void)state;
    parity("stories260K", stories, 1);
}

static void test_parity_tiny(void **state) {
    (void)state;
    static const char *const names[] = {"tiny-qwen3", "tiny-llama3", "tiny-qwen2"};
    for (size_t i = 0; i < 3; i++) {
        char dir[1024];
        snprintf(dir, sizeof(dir), "%s/reference/%s", kvt_shared_dir(), names[i]);
        parity(names[i], dir, 16);
    }
}

/* ---- memory in use --------------------------------------------------------------------- */
static void test_memory_within_a_page(void **state) {
    (void)state;
    const uint32_t P = 16;
    char manifest[64];
    kvt_manifest(manifest, "  - {name: kv.paged, options: {page_size: 16}}\n");
    weft_engine *e = kvt_open(manifest, stories, 1, 0);
    const weft_model_config *cfg = weft_engine_config(e);
    uint64_t per_token = 2ull * cfg->n_layers * cfg->n_kv_heads * cfg->head_dim * sizeof(float);
    int32_t prompt[37];
    for (int i = 0; i < 37; i++)
        prompt[i] = 1 + (int32_t)(rnd() % (cfg->vocab_size - 1));
    kvt_out out;
    kvt_submit(e, prompt, 37, 60, &out);
    weft_error err;
    weft_error_clear(&err);
    uint64_t held = 0;
    weft_kv_stats ks;
    while (weft_engine_active(e)) {
        assert_true(weft_engine_step(e, &err) >= 0);
        weft_engine_kv_stats(e, &ks);
        if (!weft_engine_active(e)) break;
        /* the prompt in one step, then one token per step */
        held = held ? held + 1 : 37;
        assert_int_equal(ks.used_tokens, held);
        assert_int_equal(ks.bytes_used, (held + P - 1) / P * P * per_token);
        assert_true(ks.bytes_used < (held + P) * per_token);
        assert_true(ks.bytes_used >= held * per_token);
    }
    assert_int_equal(held,
                     37 + 58); /* held before the last step; its token is sampled, never computed */
    weft_engine_kv_stats(e, &ks);
    assert_int_equal(ks.used_tokens, 0);
    assert_int_equal(ks.bytes_used, 0);
    assert_int_equal(ks.capacity_tokens, 512);
    assert_int_equal(ks.bytes_total, 512 * per_token);
    weft_engine_close(e);
    unlink(manifest);
}

/* Eight requests of mixed lengths running together (sched.continuous): after every step the
 * pages in use cover the tokens held with less than one page per live request to spare, and
 * every request's greedy tokens equal its output alone on the contiguous default. */
static void test_memory_concurrent(void **state) {
    (void)state;
    enum { N = 8, P = 16 };
    char manifest[64], base[64];
    kvt_manifest(manifest,
                 "  - sched.continuous\n  - {name: kv.paged, options: {page_size: 16}}\n");
    kvt_manifest(base, "");
    weft_engine *e = kvt_open(manifest, stories, N, 0);
    const weft_model_config *cfg = weft_engine_config(e);
    uint64_t per_token = 2ull * cfg->n_layers * cfg->n_kv_heads * cfg->head_dim * sizeof(float);
    int32_t prompts[N][80];
    uint32_t lens[N], gens[N];
    static kvt_out outs[N], want;
    for (int i = 0; i < N; i++) {
        lens[i] = 3 + (rnd() % 77);
        gens[i] = 5 + (rnd() % 60);
        prompts[i][0] = 1;
        for (uint32_t k = 1; k < lens[i]; k++)
            prompts[i][k] = 3 + (int32_t)(rnd() % (cfg->vocab_size - 3));
        kvt_submit(e, prompts[i], lens[i], gens[i], &outs[i]);
    }
    weft_error err;
    weft_error_clear(&err);
    uint32_t steps = 0, max_live = 0;
    while (weft_engine_active(e)) {
        assert_true(weft_engine_step(e, &err) >= 0);
        steps++;
        weft_kv_stats ks;
        weft_engine_kv_stats(e, &ks);
        uint32_t live = weft_engine_active(e);
        if (live > max_live) max_live = live;
        assert_true(ks.bytes_used >= ks.used_tokens * per_token);
        assert_true(ks.bytes_used < (ks.used_tokens + (uint64_t)live * P) * per_token ||
                    ks.bytes_used == 0);
    }
    printf("concurrent: %u steps, up to %u requests alive\n", steps, max_live);
    assert_true(max_live > 1);
    weft_engine_close(e);
    e = kvt_open(base, stories, 1, 0);
    for (int i = 0; i < N; i++) {
        kvt_greedy(e, prompts[i], lens[i], gens[i], &want);
        assert_int_equal(outs[i].n, gens[i]);
        assert_memory_equal(outs[i].ids, want.ids, sizeof(int32_t) * gens[i]);
    }
    weft_engine_close(e);
    unlink(manifest);
    unlink(base);
}

/* ---- the pool, directly -------------------------------------------------------------------- */
static void test_pool_random(void **state) {
    (void)state;
    enum { SLOTS = 6, PAGES = 40, P = 4, MAX_SEQ = 64, LAYERS = 2, HEADS = 2, HD = 8 };
    char manifest[64];
    kvt_manifest(manifest, "  - {name: kv.paged, options: {page_size: 4, pages: 40}}\n");
    kvt_direct d;
    kvt_direct_open(&d, manifest, stories);
    kvt_direct_init(&d, LAYERS, HEADS, HD, MAX_SEQ, SLOTS);
    const weft_kv_vtable *kv = d.kv->desc->kv;
    void *st = d.kv->state;
    const uint64_t per_page = 2ull * LAYERS * P * HEADS * HD * 4;
    const weft_kv_view *view = kv->view(st);
    assert_non_null(view);
    assert_string_equal(view->layout, "paged");
    const weft_kv_paged *desc = view->desc;
    assert_int_equal(desc->n_pages, PAGES);
    assert_int_equal(desc->page_size, P);
    assert_int_equal(desc->max_blocks, MAX_SEQ / P);
    int32_t slot_of[SLOTS];
    uint32_t held[SLOTS];
    int open[SLOTS] = {0};
    weft_error err;
    weft_error_clear(&err);
    uint32_t again = 0, reserves = 0;
    for (int it = 0; it < 3000; it++) {
        int i = (int)(rnd() % SLOTS);
        uint32_t what = rnd() % 10;
        if (!open[i]) {
            if (kv->open(st, 0, &slot_of[i], &err) != WEFT_OK) continue;
            open[i] = 1;
            held[i] = 0;
        } else if (what < 6) {
            uint32_t n = held[i] + 1 + rnd() % 12;
            if (n > MAX_SEQ) n = MAX_SEQ;
            weft_kv_stats before, after;
            kv->stats(st, &before);
            weft_status s = kv->reserve(st, slot_of[i], n, &err);
            reserves++;
            if (s == WEFT_AGAIN) {
                again++;
                kv->stats(st, &after);
                assert_memory_equal(&before, &after, sizeof(before));
            } else {
                assert_int_equal(s, WEFT_OK);
                held[i] = n;
            }
        } else if (what < 8) {
            uint32_t n = held[i] ? rnd() % held[i] : 0;
            kv->truncate(st, slot_of[i], n);
            held[i] = n;
        } else {
            kv->close(st, slot_of[i]);
            open[i] = 0;
        }
        /* invariants: exact stats, block tables as long as needed, no page mapped twice */
        uint64_t tokens = 0, pages = 0;
        uint8_t seen[PAGES] = {0};
        for (int k = 0; k < SLOTS; k++) {
            if (!open[k]) continue;
            int32_t nb = -1;
            const int32_t *bt = kv->block_table(st, slot_of[k], &nb);
            assert_int_equal(nb, (held[k] + P - 1) / P);
            assert_true(nb == 0 || bt != NULL);
            for (int32_t b = 0; b < nb; b++) {
                assert_true(bt[b] >= 0 && bt[b] < PAGES);
                assert_false(seen[bt[b]]);
                seen[bt[b]] = 1;
            }
            tokens += held[k];
            pages += (uint64_t)nb;
        }
        weft_kv_stats ks;
        kv->stats(st, &ks);
        assert_int_equal(ks.used_tokens, tokens);
        assert_int_equal(ks.bytes_used, pages * per_page);
        assert_int_equal(ks.capacity_tokens, PAGES * P);
        assert_int_equal(ks.bytes_total, PAGES * per_page);
    }
    printf("pool: %u of %u reserves refused for lack of pages\n", again, reserves);
    assert_true(again > 0); /* the pool was really full at times */
    /* bad arguments are errors, not crashes */
    int32_t s0 = -1;
    for (int k = 0; k < SLOTS; k++)
        if (open[k]) {
            kv->close(st, slot_of[k]);
            open[k] = 0;
        }
    assert_int_equal(kv->open(st, 0, &s0, &err), WEFT_OK);
    assert_int_equal(kv->reserve(st, s0, MAX_SEQ + 1, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "exceed the longest request"));
    assert_int_equal(kv->reserve(st, 99, 4, &err), WEFT_ERR_INVALID);
    assert_int_equal(kv->reserve(st, -1, 4, &err), WEFT_ERR_INVALID);
    kv->close(st, 99);
    kv->truncate(st, -3, 0);
    int32_t nb = 7;
    assert_null(kv->block_table(st, 42, &nb));
    assert_int_equal(nb, 0);
    kv->close(st, s0);
    /* every slot can be opened, and one more is refused */
    int32_t slots[SLOTS + 1];
    for (int k = 0; k < SLOTS; k++)
        assert_int_equal(kv->open(st, 0, &slots[k], &err), WEFT_OK);
    assert_int_equal(kv->open(st, 0, &slots[SLOTS], &err), WEFT_AGAIN);
    kvt_direct_close(&d);
    unlink(manifest);
}

/* Option values outside the schema are refused by the loader with the field named. */
static void test_options_validated(void **state) {
    (void)state;
    char manifest[64];
    kvt_manifest(manifest, "  - {name: kv.paged, options: {page_size: 0}}\n");
    weft_host *h = weft_host_new();
    weft_candidate *c = NULL;
    weft_error err;
    weft_error_clear(&err);
    assert_int_not_equal(
        weft_candidate_load_manifest(manifest, stories, weft_host_services_of(h), &c, &err),
        WEFT_OK);
    printf("page_size 0: %s\n", err.message);
    assert_non_null(strstr(err.message, "page_size"));
    weft_host_free(h);
    unlink(manifest);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_block_tables),   cmocka_unit_test(test_parity_stories),
        cmocka_unit_test(test_parity_tiny),       cmocka_unit_test(test_memory_within_a_page),
        cmocka_unit_test(test_memory_concurrent), cmocka_unit_test(test_pool_random),
        cmocka_unit_test(test_options_validated),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
