/* kv.paged on the cuda backend (skipped, and reported so, on machines without a CUDA device or
 * without the cuda bundle):
 *   - the op: kv.paged's own kv provider allocates the pool on the device and interleaves two
 *     requests' pages (so neither block table is the identity); a prefill step then a decode
 *     step run the "paged" attention with rows -> slots from a device kv_slots tensor, and
 *     every output is checked against a double-precision reference written here, in f32 and
 *     bf16, with grouped-query heads and a sliding window;
 *   - the engine: stories260K greedy decoding on the cuda baseline and on the same candidate
 *     with kv.paged gives the same tokens (and the cuda baseline is itself checked against the
 *     references elsewhere). */
#include "test_kv_common.h"

#include <dlfcn.h>
#include <math.h>

#include "../../techniques/kv.paged/kv_paged.h"

static const weft_plugin_descriptor *cuda_desc, *paged_desc;
static void *bst; /* cuda backend instance */
static const weft_backend_vtable *be;
static weft_host *host;
static weft_device_service dev;
static char stories[64];

static weft_status d_alloc(void *self, uint64_t bytes, uint32_t memory, weft_buffer *out,
                           weft_error *err) {
    (void)self;
    return be->alloc(bst, bytes, memory, out, err);
}
static void d_free(void *self, weft_buffer *b) {
    (void)self;
    be->free(bst, b);
}
static weft_status d_copy(void *self, weft_buffer *dst, uint64_t doff, const weft_buffer *src,
                          uint64_t soff, uint64_t bytes, void *stream, weft_error *err) {
    (void)self;
    return be->copy(bst, dst, doff, src, soff, bytes, stream, err);
}
static void *d_stream(void *self) {
    (void)self;
    return be->stream(bst);
}
static void *d_native(void *self) {
    (void)self;
    return be->native ? be->native(bst) : NULL;
}

static const char *plugin_dir(void) {
    const char *d = getenv("WEFT_TEST_PLUGIN_DIR"); /* bundles moved to another machine */
    return d && d[0] ? d : WEFT_BUILD_PLUGIN_DIR;
}

static const weft_plugin_descriptor *load(const char *bundle, const char *lib) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/%s/%s", plugin_dir(), bundle, lib);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        fprintf(stderr, "SKIPPED: cannot load %s: %s\n", path, dlerror());
        return NULL;
    }
    weft_plugin_entry_fn entry = (weft_plugin_entry_fn)dlsym(dl, WEFT_PLUGIN_ENTRY_NAME);
    const weft_plugin_descriptor *d = NULL;
    uint32_t chosen = 0;
    weft_error err;
    weft_error_clear(&err);
    if (!entry || entry(1, 1, &chosen, &d, &err) != WEFT_OK) return NULL;
    return d;
}

static int setup(void **state) {
    (void)state;
    if (kvt_stories_convert(stories)) return -1;
    cuda_desc = load("cuda", "libweft-cuda.so");
    paged_desc = load("kv.paged", "libweft-kv-paged.so");
    if (!cuda_desc || !paged_desc) return 0;
    be = cuda_desc->backend;
    host = weft_host_new();
    if (!host) return -1;
    weft_option opt[2] = {{.key = "device", .type = WEFT_OPTION_INT, .i = 0},
                          {.key = "arena_mb", .type = WEFT_OPTION_INT, .i = 0}};
    weft_options opts = {2, opt};
    weft_error err;
    weft_error_clear(&err);
    if (cuda_desc->create(weft_host_services_of(host), &opts, &bst, &err) != WEFT_OK) {
        fprintf(stderr, "SKIPPED: no usable CUDA device here (%s)\n", err.message);
        bst = NULL;
        return 0;
    }
    dev = (weft_device_service){sizeof(dev), 1,      NULL,     "cuda",  d_alloc,
                                d_free,      d_copy, d_stream, d_native};
    return weft_host_register_service(host, WEFT_SERVICE_DEVICE, &dev) == WEFT_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    if (bst) cuda_desc->destroy(bst);
    weft_host_free(host);
    kvt_stories_remove(stories);
    return 0;
}

/* ---- the op ------------------------------------------------------------------------------- */
static uint64_t rng = 0xD1B54A32D192ED03ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#define MAX_IMPLS 8
static weft_op_impl impls[MAX_IMPLS];
static uint32_t n_impls;
static weft_status ops_add(void *self, const weft_op_impl *impl, weft_error *err) {
    (void)self;
    (void)err;
    if (n_impls == MAX_IMPLS) return WEFT_ERR_NOMEM;
    impls[n_impls++] = *impl;
    return WEFT_OK;
}

/* A device tensor of T rows from host floats (rounded to dt) or ints. */
static weft_buffer upload(uint32_t dt, const void *host_data, size_t n) {
    weft_error err;
    weft_error_clear(&err);
    size_t es = dt == WEFT_DTYPE_BF16 ? 2 : 4;
    weft_buffer b;
    assert_int_equal(be->alloc(bst, n * es, WEFT_MEMORY_DEVICE, &b, &err), WEFT_OK);
    if (!host_data) { /* an output: poisoned (all-ones bytes are NaN in f32 and bf16) */
        void *tmp = malloc(n * es);
        memset(tmp, 0xff, n * es);
        assert_int_equal(be->upload(bst, &b, 0, tmp, n * es, &err), WEFT_OK);
        free(tmp);
    } else if (dt == WEFT_DTYPE_BF16) {
        uint16_t *tmp = malloc(n * 2);
        for (size_t i = 0; i < n; i++)
            tmp[i] = to_bf16(((const float *)host_data)[i]);
        assert_int_equal(be->upload(bst, &b, 0, tmp, n * 2, &err), WEFT_OK);
        free(tmp);
    } else if (host_data) {
        assert_int_equal(be->upload(bst, &b, 0, host_data, n * es, &err), WEFT_OK);
    }
    return b;
}

/* Two requests of len0 and len1 tokens in a pool of max_seq positions per slot: a prefill step
 * of all but their last tokens, then a decode step of one row each. Short contexts take one
 * 32-position chunk; long ones make the split kernel stride over chunks, and the decode step's
 * two rows split across blocks (the combine path) while the prefill's many rows do not. */
static void check_op_len(uint32_t dt, int Hq, int Hkv, int hd, uint32_t P, int window, int len0,
                         int len1, uint32_t max_seq) {
    enum { SLOTS = 2 };
    const int LEN0 = len0, LEN1 = len1, MAX_SEQ = (int)max_seq;
    const int lens[2] = {LEN0, LEN1};
    void *pst = NULL;
    weft_error err;
    weft_error_clear(&err);
    weft_option opt[2] = {{.key = "page_size", .type = WEFT_OPTION_INT, .i = P},
                          {.key = "pages", .type = WEFT_OPTION_INT, .i = 0}};
    weft_options opts = {2, opt};
    assert_int_equal(paged_desc->create(weft_host_services_of(host), &opts, &pst, &err), WEFT_OK);
    n_impls = 0;
    weft_ops_service ops = {.size = sizeof(ops), .version = 1, .add = ops_add};
    if (paged_desc->opset->register_ops(pst, "cuda", &ops, &err) != WEFT_OK)
        fail_msg("register_ops: %s", err.message);
    const weft_op_impl *impl = NULL;
    for (uint32_t i = 0; i < n_impls; i++)
        if (impls[i].dtype == dt) impl = &impls[i];
    assert_non_null(impl);
    assert_string_equal(impl->layout, "paged");
    const weft_kv_vtable *kv = paged_desc->kv;
    weft_kv_geometry geo = {.size = sizeof(geo),
                            .n_layers = 1,
                            .n_kv_heads = (uint32_t)Hkv,
                            .head_dim = (uint32_t)hd,
                            .dtype = dt,
                            .max_seq = MAX_SEQ,
                            .max_requests = SLOTS};
    assert_int_equal(kv->init(pst, &geo, &dev, &err), WEFT_OK);
    int32_t slot[2];
    assert_int_equal(kv->open(pst, 0, &slot[1], &err), WEFT_OK); /* slot ids swapped too */
    assert_int_equal(kv->open(pst, 1, &slot[0], &err), WEFT_OK);
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
            if (dt == WEFT_DTYPE_BF16) {
                K[s][i] = from_bf16(to_bf16(K[s][i]));
                V[s][i] = from_bf16(to_bf16(V[s][i]));
            }
        }
        if (dt == WEFT_DTYPE_BF16)
            for (int i = 0; i < lens[s] * Hq * hd; i++)
                Q[s][i] = from_bf16(to_bf16(Q[s][i]));
    }
    for (int step = 0; step < 2; step++) {
        int start[2] = {step ? LEN0 - 1 : 0, step ? LEN1 - 1 : 0};
        int rows[2] = {step ? 1 : LEN0 - 1, step ? 1 : LEN1 - 1};
        /* reserve page by page, alternating, so the two tables interleave */
        for (uint32_t n = P;; n += P) {
            int more = 0;
            for (int s = 0; s < 2; s++) {
                uint32_t want = (uint32_t)(start[s] + rows[s]);
                uint32_t to = n < want ? n : want;
                assert_int_equal(kv->reserve(pst, slot[s], to, &err), WEFT_OK);
                more |= n < want;
            }
            if (!more) break;
        }
        int T = rows[0] + rows[1];
        float *q = malloc(sizeof(float) * T * Hq * hd), *k = malloc(sizeof(float) * T * Hkv * hd);
        float *v = malloc(sizeof(float) * T * Hkv * hd), *o = malloc(sizeof(float) * T * Hq * hd);
        int32_t *pos = malloc(sizeof(int32_t) * T), *slots_of_row = malloc(sizeof(int32_t) * T);
        int32_t *seq_of_row = malloc(sizeof(int32_t) * T);
        double *sc = malloc(sizeof(double) * MAX_SEQ);
        assert_true(pos && slots_of_row && seq_of_row && sc);
        int r = 0;
        for (int s = 0; s < 2; s++)
            for (int j = 0; j < rows[s]; j++, r++) {
                int src = start[s] + j;
                memcpy(q + r * Hq * hd, Q[s] + src * Hq * hd, sizeof(float) * Hq * hd);
                memcpy(k + r * Hkv * hd, K[s] + src * Hkv * hd, sizeof(float) * Hkv * hd);
                memcpy(v + r * Hkv * hd, V[s] + src * Hkv * hd, sizeof(float) * Hkv * hd);
                pos[r] = src;
                slots_of_row[r] = slot[s];
                seq_of_row[r] = s;
            }
        weft_buffer data[6] = {upload(dt, q, (size_t)T * Hq * hd),
                               upload(dt, k, (size_t)T * Hkv * hd),
                               upload(dt, v, (size_t)T * Hkv * hd),
                               upload(WEFT_DTYPE_I32, pos, (size_t)T),
                               upload(WEFT_DTYPE_I32, slots_of_row, (size_t)T),
                               upload(dt, NULL, (size_t)T * Hq * hd)};
        weft_tensor t[6];
        memset(t, 0, sizeof(t));
        const int64_t cols[6] = {Hq * hd, Hkv * hd, Hkv * hd, 1, 1, Hq * hd};
        for (int i = 0; i < 6; i++) {
            t[i].id = (uint32_t)i;
            t[i].dtype = i == 3 || i == 4 ? WEFT_DTYPE_I32 : dt;
            t[i].rank = cols[i] == 1 ? 1 : 2;
            t[i].shape[0] = T;
            t[i].shape[1] = cols[i];
        }
        weft_node n;
        memset(&n, 0, sizeof(n));
        n.op = WEFT_OP_ATTENTION;
        n.n_in = 5;
        n.n_out = 1;
        for (int i = 0; i < 5; i++)
            n.in[i] = (uint32_t)i;
        n.out[0] = 5;
        n.p.i[1] = Hq;
        n.p.i[2] = Hkv;
        n.p.i[3] = hd;
        n.p.i[4] = window;
        snprintf(n.name, sizeof(n.name), "layers.0.attn");
        weft_graph g = {.size = sizeof(g), .n_tensors = 6, .n_nodes = 1, .tensors = t, .nodes = &n};
        weft_seq seqs[2];
        memset(seqs, 0, sizeof(seqs));
        weft_batch batch = {.size = sizeof(batch),
                            .n_tokens = (uint32_t)T,
                            .n_seqs = 2,
                            .seq_of_row = seq_of_row,
                            .seqs = seqs,
                            .positions = pos};
        weft_exec_ctx ctx = {.size = sizeof(ctx),
                             .n_tokens = (uint32_t)T,
                             .graph = &g,
                             .batch = &batch,
                             .data = data,
                             .kv = kv->view(pst),
                             .backend = bst,
                             .stream = be->stream(bst)};
        assert_true(impl->accepts(impl->state, &g, &n));
        if (impl->run(impl->state, &ctx, &n, &err) != WEFT_OK) fail_msg("run: %s", err.message);
        assert_int_equal(be->synchronize(bst, ctx.stream, &err), WEFT_OK);
        size_t cnt = (size_t)T * Hq * hd;
        if (dt == WEFT_DTYPE_BF16) {
            uint16_t *h16 = malloc(cnt * 2);
            assert_int_equal(be->download(bst, h16, &data[5], 0, cnt * 2, &err), WEFT_OK);
            for (size_t i = 0; i < cnt; i++)
                o[i] = from_bf16(h16[i]);
            free(h16);
        } else {
            assert_int_equal(be->download(bst, o, &data[5], 0, cnt * 4, &err), WEFT_OK);
        }
        double max_err = 0;
        for (int row = 0; row < T; row++) {
            int s = seq_of_row[row], p = pos[row];
            int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            for (int h = 0; h < Hq; h++) {
                int kh = h / (Hq / Hkv);
                double m = -1e300, l = 0;
                for (int j = lo; j <= p; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++)
                        d += (double)Q[s][p * Hq * hd + h * hd + e] *
                             K[s][j * Hkv * hd + kh * hd + e];
                    sc[j] = d / sqrt((double)hd);
                    if (sc[j] > m) m = sc[j];
                }
                for (int j = lo; j <= p; j++)
                    l += exp(sc[j] - m);
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int j = lo; j <= p; j++)
                        acc += exp(sc[j] - m) * V[s][j * Hkv * hd + kh * hd + e];
                    double d = fabs(o[row * Hq * hd + h * hd + e] - acc / l);
                    if (!(d <= max_err)) max_err = isnan(d) ? INFINITY : d;
                }
            }
        }
        printf("cuda paged attention dt=%u Hq=%d Hkv=%d hd=%d P=%u window=%d step %d: max err "
               "%.2e\n",
               dt, Hq, Hkv, hd, P, window, step, max_err);
        assert_true(max_err < (dt == WEFT_DTYPE_F32 ? 1e-5 : 2e-2));
        for (int i = 0; i < 6; i++)
            be->free(bst, &data[i]);
        free(q);
        free(k);
        free(v);
        free(o);
        free(pos);
        free(slots_of_row);
        free(seq_of_row);
        free(sc);
    }
    int32_t nb0, nb1;
    const int32_t *t0 = kv->block_table(pst, slot[0], &nb0),
                  *t1 = kv->block_table(pst, slot[1], &nb1);
    int identity = 1;
    for (int32_t b = 0; b < nb0; b++)
        identity &= t0[b] == b;
    assert_false(identity); /* the interleaving really scrambled the tables */
    assert_true(t1[0] != t0[0]);
    for (int s = 0; s < 2; s++) {
        free(Q[s]);
        free(K[s]);
        free(V[s]);
    }
    kv->fini(pst);
    paged_desc->destroy(pst);
}

static void check_op(uint32_t dt, int Hq, int Hkv, int hd, uint32_t P, int window) {
    check_op_len(dt, Hq, Hkv, hd, P, window, 9, 6, 16);
}

static void test_op(void **state) {
    (void)state;
    if (!bst) skip();
    check_op(WEFT_DTYPE_F32, 8, 4, 8, 2, 0);
    check_op(WEFT_DTYPE_F32, 4, 2, 128, 3, 0);
    check_op(WEFT_DTYPE_F32, 6, 2, 40, 4, 5);
    check_op(WEFT_DTYPE_BF16, 8, 2, 64, 2, 0);
    /* several chunks: a few splits per row at decode, one split per row at prefill */
    check_op_len(WEFT_DTYPE_F32, 16, 8, 128, 16, 0, 150, 77, 160);
    check_op_len(WEFT_DTYPE_BF16, 16, 8, 128, 16, 0, 150, 77, 160);
    /* more chunks than splits (each split strides), sliding window, GQA 4 */
    check_op_len(WEFT_DTYPE_F32, 16, 4, 16, 16, 0, 1100, 700, 1200);
    check_op_len(WEFT_DTYPE_F32, 16, 4, 16, 7, 333, 1100, 700, 1200);
    /* bf16 prefill steps: every row on tensor cores, in tiles of one request (G = 2, 4, 1; a
     * sliding window; 5-position pages), split over the long contexts with a combine */
    check_op_len(WEFT_DTYPE_BF16, 16, 4, 64, 16, 0, 300, 200, 320);
    check_op_len(WEFT_DTYPE_BF16, 8, 8, 128, 16, 100, 300, 200, 320);
    check_op_len(WEFT_DTYPE_BF16, 32, 8, 64, 5, 0, 260, 131, 288);
    /* enough tiles that the tensor-core kernel does not split (no combine) */
    check_op_len(WEFT_DTYPE_BF16, 16, 8, 16, 16, 0, 1100, 1000, 1104);
    /* a group of 12 query heads: the one-block-per-head kernel */
    check_op_len(WEFT_DTYPE_F32, 12, 1, 32, 16, 0, 100, 40, 128);
}

/* ---- the engine --------------------------------------------------------------------------- */
static void cuda_manifest(char path[64], const char *techniques) {
    snprintf(path, 64, "/tmp/weft-kv-cuda-XXXXXX.yaml");
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fprintf(f,
            "format: 1\ncandidate: kv-cuda-test\nmodel: stories260k\nbackend: cuda\n"
            "model_plugin:\n  name: llama\n  options: {activation_dtype: auto, device_inputs: "
            "true}\ntechniques:%s\n%sserving:\n  max_model_len: 512\n  max_concurrency: 1\n",
            techniques[0] ? "" : " []", techniques);
    fclose(f);
}

static void test_engine_greedy(void **state) {
    (void)state;
    if (!bst) skip();
    char base[64], paged[64];
    cuda_manifest(base, "");
    cuda_manifest(paged, "  - {name: kv.paged, options: {page_size: 16}}\n");
    int32_t prompt[40];
    prompt[0] = 1;
    for (int i = 1; i < 40; i++)
        prompt[i] = 3 + (int32_t)((uint32_t)(i * 2654435761u) % 509);
    kvt_out want[2], got[2];
    weft_engine *e = kvt_open(base, stories, 1, 0);
    kvt_greedy(e, prompt, 40, 300, &want[0]);
    kvt_greedy(e, prompt, 1, 300, &want[1]); /* from BOS alone, on the same engine */
    weft_engine_close(e);
    e = kvt_open(paged, stories, 1, 0);
    kvt_greedy(e, prompt, 40, 300, &got[0]);
    kvt_greedy(e, prompt, 1, 300, &got[1]);
    weft_engine_close(e);
    for (int k = 0; k < 2; k++)
        assert_memory_equal(got[k].ids, want[k].ids, sizeof(int32_t) * 300);
    printf("cuda: kv.paged greedy equals the contiguous kv over 300 tokens, twice\n");
    unlink(base);
    unlink(paged);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op),
        cmocka_unit_test(test_engine_greedy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
