/* Tests of the cpu backend plugin used directly, without the engine: the test dlopens the built
 * bundle, negotiates, creates an instance (once with one thread, once with two), registers its
 * op implementations into a small ops table of its own, builds one-node graphs by hand and
 * compares every op on random inputs with naive double-precision references written here.
 * 16-bit values are generated as random bit patterns and decoded with ldexp, so neither side of
 * a comparison borrows the plugin's conversions. Malformed nodes must fail with an error. */
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
#include <jansson.h>

#include "weft/plugin.h"
/* The stories260K step-graph driver shared with the plugin's benchmark. */
#include "../../plugins/backends/cpu/bench/cpu_stories.h"

#define MAX_IMPLS 128
#define MAX_T 16

/* ---- fixture: the loaded plugin and an ops table ------------------------------------------ */
typedef struct fixture {
    void *dl;
    const weft_plugin_descriptor *desc;
    void *st;
    uint32_t threads;
    weft_op_impl impls[MAX_IMPLS];
    uint32_t n_impls;
    weft_ops_service ops;
    weft_host_services host;
} fixture;

static void host_log(int level, const char *source, const char *fmt, ...) {
    (void)level;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%s] ", source);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void host_error_set(weft_error *err, int32_t code, const char *source, const char *fmt,
                           ...) {
    if (!err) return;
    err->code = code;
    snprintf(err->source, sizeof(err->source), "%s", source);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
}

static void *host_alloc(size_t n) {
    return malloc(n);
}

static const void *host_get_service(const weft_host_services *h, uint32_t id, uint32_t v) {
    return NULL;
}

static const weft_option *host_option(const weft_options *opts, const char *key) {
    for (uint32_t i = 0; opts && i < opts->count; i++)
        if (strcmp(opts->items[i].key, key) == 0) return &opts->items[i];
    return NULL;
}

static weft_status ops_add(void *self, const weft_op_impl *impl, weft_error *err) {
    fixture *f = self;
    if (impl->size != sizeof(*impl) || !impl->run || f->n_impls == MAX_IMPLS) {
        host_error_set(err, WEFT_ERR_INVALID, "test", "bad impl");
        return WEFT_ERR_INVALID;
    }
    f->impls[f->n_impls++] = *impl;
    return WEFT_OK;
}

static const weft_op_impl *ops_find(void *self, uint32_t op, const char *backend, uint32_t dtype,
                                    const char *layout, const weft_graph *g,
                                    const weft_node *node) {
    fixture *f = self;
    for (uint32_t i = 0; i < f->n_impls; i++) {
        const weft_op_impl *m = &f->impls[i];
        if (m->op == op && m->dtype == dtype && strcmp(m->backend, backend) == 0 &&
            strcmp(m->layout, layout) == 0)
            return m;
    }
    return NULL;
}

static weft_error new_error(void) {
    weft_error e;
    memset(&e, 0, sizeof(e));
    e.size = sizeof(e);
    return e;
}

static int fixture_setup(void **state, uint32_t threads) {
    fixture *f = calloc(1, sizeof(*f));
    if (!f) return -1;
    f->threads = threads;
    f->dl = dlopen(WEFT_BUILD_PLUGIN_DIR "/cpu/libweft-cpu.so", RTLD_NOW | RTLD_LOCAL);
    if (!f->dl) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        free(f);
        return -1;
    }
    weft_plugin_entry_fn entry = (weft_plugin_entry_fn)dlsym(f->dl, WEFT_PLUGIN_ENTRY_NAME);
    uint32_t chosen = 0;
    weft_error err = new_error();
    if (!entry || entry(1, 1, &chosen, &f->desc, &err) != WEFT_OK || chosen != 1) return -1;
    f->host = (weft_host_services){.size = sizeof(weft_host_services),
                                   .abi_version = 1,
                                   .log = host_log,
                                   .error_set = host_error_set,
                                   .alloc = host_alloc,
                                   .free = free,
                                   .get_service = host_get_service,
                                   .option = host_option};
    weft_option opt = {.key = "threads", .type = WEFT_OPTION_INT, .i = threads};
    weft_options opts = {1, &opt};
    if (f->desc->create(&f->host, &opts, &f->st, &err) != WEFT_OK) {
        fprintf(stderr, "create: %s\n", err.message);
        return -1;
    }
    f->ops = (weft_ops_service){.size = sizeof(weft_ops_service),
                                .version = 1,
                                .self = f,
                                .add = ops_add,
                                .find = ops_find};
    if (f->desc->backend->register_ops(f->st, &f->ops, &err) != WEFT_OK) {
        fprintf(stderr, "register_ops: %s\n", err.message);
        return -1;
    }
    *state = f;
    return 0;
}

static int setup_1(void **state) {
    return fixture_setup(state, 1);
}
static int setup_2(void **state) {
    return fixture_setup(state, 2);
}

static int fixture_teardown(void **state) {
    fixture *f = *state;
    if (!f) return 0;
    if (f->st) f->desc->destroy(f->st);
    if (f->dl) dlclose(f->dl);
    free(f);
    return 0;
}

/* ---- one-node graphs ---------------------------------------------------------------------- */
#define TG_MAX 16
typedef struct tgraph {
    fixture *f;
    weft_graph g;
    weft_tensor t[TG_MAX];
    weft_buffer buf[TG_MAX];
    weft_node node;
    weft_batch batch;
    weft_seq seqs[4];
    int32_t seq_of_row[MAX_T], positions[MAX_T], logit_rows[MAX_T];
    weft_kv_view kv;
} tgraph;

static size_t esize(uint32_t dt) {
    return dt == WEFT_DTYPE_F32 || dt == WEFT_DTYPE_I32 ? 4 : 2;
}

static void tg_init(tgraph *tg, fixture *f, uint32_t op, const char *name) {
    memset(tg, 0, sizeof(*tg));
    tg->f = f;
    tg->g.size = sizeof(tg->g);
    tg->g.tensors = tg->t;
    tg->g.nodes = &tg->node;
    tg->g.n_nodes = 1;
    tg->g.bucket.size = sizeof(tg->g.bucket);
    tg->g.bucket.max_tokens = MAX_T;
    tg->node.op = op;
    tg->node.layer = 0;
    snprintf(tg->node.name, sizeof(tg->node.name), "%s", name);
    for (int i = 0; i < WEFT_NODE_MAX_IN; i++)
        tg->node.in[i] = WEFT_TENSOR_NONE;
    for (int i = 0; i < WEFT_NODE_MAX_OUT; i++)
        tg->node.out[i] = WEFT_TENSOR_NONE;
}

/* A tensor of rank 1 (d1 < 0) or 2, with a buffer from the backend's allocator. */
static uint32_t tg_tensor(tgraph *tg, uint32_t dtype, int64_t d0, int64_t d1, const char *name) {
    uint32_t id = tg->g.n_tensors++;
    assert_true(id < TG_MAX);
    weft_tensor *t = &tg->t[id];
    t->id = id;
    t->dtype = dtype;
    t->rank = d1 < 0 ? 1 : 2;
    t->shape[0] = d0;
    t->shape[1] = d1 < 0 ? 0 : d1;
    snprintf(t->name, sizeof(t->name), "%s", name);
    uint64_t bytes = (uint64_t)d0 * (d1 < 0 ? 1 : d1) * esize(dtype);
    weft_error err = new_error();
    assert_int_equal(
        tg->f->desc->backend->alloc(tg->f->st, bytes, WEFT_MEMORY_DEVICE, &tg->buf[id], &err),
        WEFT_OK);
    assert_int_equal((uintptr_t)tg->buf[id].ptr % 64, 0);
    memset(tg->buf[id].ptr, 0, bytes);
    return id;
}

static void *tg_ptr(tgraph *tg, uint32_t id) {
    return tg->buf[id].ptr;
}

static void tg_in(tgraph *tg, uint32_t slot, uint32_t id) {
    tg->node.in[slot] = id;
    if (slot + 1 > tg->node.n_in) tg->node.n_in = slot + 1;
}
static void tg_out(tgraph *tg, uint32_t slot, uint32_t id) {
    tg->node.out[slot] = id;
    if (slot + 1 > tg->node.n_out) tg->node.n_out = slot + 1;
}

/* One sequence owning all rows, positions 0..T-1, every row a logit row. */
static void tg_simple_batch(tgraph *tg, uint32_t T) {
    tg->seqs[0].kv_slot = 0;
    tg->seqs[0].n_new = (int32_t)T;
    for (uint32_t r = 0; r < T; r++) {
        tg->seq_of_row[r] = 0;
        tg->positions[r] = (int32_t)r;
        tg->logit_rows[r] = (int32_t)r;
    }
    tg->batch.n_seqs = 1;
    tg->batch.n_logits = T;
}

static weft_status tg_run_impl(tgraph *tg, uint32_t T, uint32_t key, const char *layout,
                               int32_t *accepted, weft_error *err) {
    const weft_op_impl *impl =
        tg->f->ops.find(tg->f->ops.self, tg->node.op, "cpu", key, layout, &tg->g, &tg->node);
    assert_non_null(impl);
    *accepted = impl->accepts ? impl->accepts(impl->state, &tg->g, &tg->node) : 1;
    tg->batch.size = sizeof(tg->batch);
    tg->batch.n_tokens = T;
    tg->batch.positions = tg->positions;
    tg->batch.seq_of_row = tg->seq_of_row;
    tg->batch.seqs = tg->seqs;
    tg->batch.logit_rows = tg->logit_rows;
    weft_exec_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.size = sizeof(ctx);
    ctx.n_tokens = T;
    ctx.graph = &tg->g;
    ctx.batch = &tg->batch;
    ctx.data = tg->buf;
    ctx.kv = tg->kv.desc ? &tg->kv : NULL;
    ctx.backend = tg->f->st;
    ctx.host = &tg->f->host;
    return impl->run(impl->state, &ctx, &tg->node, err);
}

/* Runs the node and requires success. */
static void tg_run(tgraph *tg, uint32_t T, uint32_t key, const char *layout) {
    weft_error err = new_error();
    int32_t accepted = 0;
    weft_status s = tg_run_impl(tg, T, key, layout, &accepted, &err);
    if (s != WEFT_OK) fprintf(stderr, "run failed: %s\n", err.message);
    assert_int_equal(accepted, 1);
    assert_int_equal(s, WEFT_OK);
}

/* Runs the node and requires a refusal: accepts says no and run returns INVALID with a message
 * containing `needle`. */
static void tg_run_bad(tgraph *tg, uint32_t T, uint32_t key, const char *layout, const char *needle,
                       int expect_refused_by_accepts) {
    weft_error err = new_error();
    int32_t accepted = 1;
    weft_status s = tg_run_impl(tg, T, key, layout, &accepted, &err);
    if (expect_refused_by_accepts) assert_int_equal(accepted, 0);
    assert_int_equal(s, WEFT_ERR_INVALID);
    assert_int_equal(err.code, WEFT_ERR_INVALID);
    assert_string_equal(err.source, "cpu");
    if (!strstr(err.message, needle)) fprintf(stderr, "message: %s\n", err.message);
    assert_non_null(strstr(err.message, needle));
}

static void tg_free(tgraph *tg) {
    for (uint32_t i = 0; i < tg->g.n_tensors; i++)
        tg->f->desc->backend->free(tg->f->st, &tg->buf[i]);
}

/* ---- numbers ------------------------------------------------------------------------------ */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float rnd_f(void) { /* uniform in [-1, 1) */
    return (float)((double)rnd_u32() / 2147483648.0 - 1.0);
}

/* 16-bit floats decoded from their fields with ldexp. */
static double ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}
static double ref_bf16(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return s ? -v : v;
}
/* Random 16-bit values of magnitude about 2^-4 .. 2^1, with some f16 subnormals. */
static uint16_t rnd_f16(void) {
    uint32_t r = rnd_u32();
    uint16_t sign = (uint16_t)((r & 1) << 15), mant = (uint16_t)((r >> 1) & 1023);
    uint16_t e = (r >> 12) % 16 == 0 ? 0 : (uint16_t)(11 + (r >> 16) % 6);
    return (uint16_t)(sign | (e << 10) | mant);
}
static uint16_t rnd_bf16(void) {
    uint32_t r = rnd_u32();
    return (uint16_t)(((r & 1) << 15) | ((123 + (r >> 8) % 6) << 7) | ((r >> 1) & 127));
}

/* Fills n values of dtype at p and returns them decoded in ref (double). */
static void fill(void *p, double *ref, int64_t n, uint32_t dt) {
    for (int64_t i = 0; i < n; i++) {
        if (dt == WEFT_DTYPE_F32) {
            float v = rnd_f();
            ((float *)p)[i] = v;
            ref[i] = v;
        } else if (dt == WEFT_DTYPE_BF16) {
            uint16_t h = rnd_bf16();
            ((uint16_t *)p)[i] = h;
            ref[i] = ref_bf16(h);
        } else {
            uint16_t h = rnd_f16();
            ((uint16_t *)p)[i] = h;
            ref[i] = ref_f16(h);
        }
    }
}

static const uint32_t dts_float[3] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};

static const char *cpu_op_label(uint32_t op) {
    static const char *const names[] = {
        "none",       "embed", "linear",      "rmsnorm", "rope",   "attention",
        "swiglu",     "add",   "activation",  "lm_head", "sample", "moe",
        "all_reduce", "scale", "add_rmsnorm", "copy",    "split"};
    return op < sizeof(names) / sizeof(names[0]) ? names[op] : "user";
}

static double *dalloc(int64_t n) {
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(p);
    return p;
}

static void expect_close(const float *got, const double *want, int64_t n, double atol, double rtol,
                         const char *what) {
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i]))) {
            fprintf(stderr, "%s: element %lld: got %.9g, want %.9g\n", what, (long long)i,
                    (double)got[i], want[i]);
            fail();
        }
    }
}

/* ---- ABI, memory, device ------------------------------------------------------------------ */
static void test_negotiate(void **state) {
    fixture *f = *state;
    weft_plugin_entry_fn entry = (weft_plugin_entry_fn)dlsym(f->dl, WEFT_PLUGIN_ENTRY_NAME);
    assert_non_null(entry);
    const weft_plugin_descriptor *d = NULL;
    uint32_t chosen = 0;
    weft_error err = new_error();
    assert_int_equal(entry(1, 5, &chosen, &d, &err), WEFT_OK);
    assert_int_equal(chosen, 1);
    assert_string_equal(d->name, "cpu");
    assert_string_equal(d->version, "0.1.0");
    assert_int_equal(d->kind, WEFT_KIND_BACKEND);
    assert_int_equal(d->slots, WEFT_SLOT_BACKEND);
    assert_int_equal(d->size, sizeof(weft_plugin_descriptor));
    assert_non_null(d->backend);
    assert_null(d->model);
    for (int i = 0; i < 8; i++)
        assert_int_equal(d->reserved[i], 0);
    assert_int_equal(entry(2, 3, &chosen, &d, &err), WEFT_ERR_ABI);
    assert_null(d);
    assert_non_null(strstr(err.message, "2..3"));
    /* The manifest beside the library names the same plugin and version. */
    FILE *fp = fopen(WEFT_BUILD_PLUGIN_DIR "/cpu/manifest.yaml", "r");
    assert_non_null(fp);
    char text[4096];
    size_t n = fread(text, 1, sizeof(text) - 1, fp);
    text[n] = '\0';
    fclose(fp);
    assert_non_null(strstr(text, "name: cpu"));
    assert_non_null(strstr(text, "0.1.0"));
    assert_non_null(strstr(text, "libweft-cpu.so"));
}

static void test_memory(void **state) {
    fixture *f = *state;
    const weft_backend_vtable *be = f->desc->backend;
    weft_error err = new_error();
    weft_buffer a, b;
    assert_int_equal(be->alloc(f->st, 1000, WEFT_MEMORY_HOST, &a, &err), WEFT_OK);
    assert_int_equal(be->alloc(f->st, 1000, WEFT_MEMORY_HOST_PINNED, &b, &err), WEFT_OK);
    assert_int_equal((uintptr_t)a.ptr % 64, 0);
    assert_int_equal(a.bytes, 1000);
    unsigned char src[1000], back[1000];
    for (int i = 0; i < 1000; i++)
        src[i] = (unsigned char)(i * 7);
    assert_int_equal(be->upload(f->st, &a, 0, src, 1000, &err), WEFT_OK);
    assert_int_equal(be->copy(f->st, &b, 100, &a, 0, 900, be->stream(f->st), &err), WEFT_OK);
    assert_int_equal(be->synchronize(f->st, NULL, &err), WEFT_OK);
    assert_int_equal(be->download(f->st, back, &b, 100, 900, &err), WEFT_OK);
    assert_memory_equal(back, src, 900);
    /* Out-of-range requests fail and name the sizes. */
    assert_int_equal(be->copy(f->st, &b, 101, &a, 0, 900, NULL, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "1000"));
    assert_int_equal(be->upload(f->st, &a, UINT64_MAX, src, 2, &err), WEFT_ERR_INVALID);
    assert_int_equal(be->download(f->st, back, &a, 999, 2, &err), WEFT_ERR_INVALID);
    weft_buffer bad;
    assert_int_equal(be->alloc(f->st, 8, 7, &bad, &err), WEFT_ERR_INVALID);
    assert_null(bad.ptr);
    be->free(f->st, &a);
    assert_null(a.ptr);
    weft_buffer c;
    assert_int_equal(be->alloc(f->st, 8, WEFT_MEMORY_HOST, &c, &err), WEFT_OK);
    be->free(f->st, &c);
    be->free(f->st, &b);
    weft_device_info info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    assert_int_equal(be->device_info(f->st, &info, &err), WEFT_OK);
    assert_int_equal(info.compute_units, f->threads);
    assert_true(info.memory_bytes > 0);
    assert_true(strlen(info.arch) > 0);
    assert_null(be->stream(f->st));
}

/* ---- LINEAR and LM_HEAD ------------------------------------------------------------------- */
static void linear_case(fixture *f, uint32_t wdt, int bias, uint32_t T, int64_t N, int64_t K,
                        uint32_t bdt) {
    tgraph tg;
    tg_init(&tg, f, WEFT_OP_LINEAR, "layers.0.attn.q");
    uint32_t x = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, K, "x");
    uint32_t w = tg_tensor(&tg, wdt, N, K, "w");
    uint32_t y = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, N, "y");
    tg_in(&tg, 0, x);
    tg_in(&tg, 1, w);
    tg_out(&tg, 0, y);
    double *rx = dalloc(MAX_T * K), *rw = dalloc(N * K), *rb = dalloc(N), *want = dalloc(T * N);
    fill(tg_ptr(&tg, x), rx, MAX_T * K, WEFT_DTYPE_F32);
    fill(tg_ptr(&tg, w), rw, N * K, wdt);
    if (bias) {
        uint32_t b = tg_tensor(&tg, bdt, N, -1, "b");
        tg_in(&tg, 2, b);
        fill(tg_ptr(&tg, b), rb, N, bdt);
    }
    /* Rows beyond n_tokens must stay untouched. */
    float *out = tg_ptr(&tg, y);
    for (int64_t i = 0; i < MAX_T * N; i++)
        out[i] = 12345.0f;
    tg_run(&tg, T, wdt, "");
    for (uint32_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double s = rb[n], mag = fabs(rb[n]);
            for (int64_t k = 0; k < K; k++) {
                s += rx[t * K + k] * rw[n * K + k];
                mag += fabs(rx[t * K + k] * rw[n * K + k]);
            }
            double d = fabs(out[t * N + n] - s);
            if (!(d <= 1e-5 * mag + 1e-6)) {
                fprintf(stderr,
                        "linear %s T=%u N=%lld K=%lld bias=%d: y[%u][%lld] = %.9g, want "
                        "%.9g\n",
                        wdt == WEFT_DTYPE_F32    ? "f32"
                        : wdt == WEFT_DTYPE_BF16 ? "bf16"
                                                 : "f16",
                        T, (long long)N, (long long)K, bias, t, (long long)n,
                        (double)out[t * N + n], s);
                fail();
            }
        }
    for (int64_t i = (int64_t)T * N; i < MAX_T * N; i++)
        assert_true(out[i] == 12345.0f);
    free(rx), free(rw), free(rb), free(want);
    tg_free(&tg);
}

static void test_linear(void **state) {
    fixture *f = *state;
    const uint32_t dts[3] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    for (int d = 0; d < 3; d++)
        for (int bias = 0; bias < 2; bias++) {
            linear_case(f, dts[d], bias, 1, 45, 67, WEFT_DTYPE_F32);
            linear_case(f, dts[d], bias, 7, 45, 67, dts[d]);
            linear_case(f, dts[d], bias, 1, 64, 64, WEFT_DTYPE_F32);
            linear_case(f, dts[d], bias, 7, 172, 64, WEFT_DTYPE_BF16);
        }
    /* Large enough to be split across the pool, K beyond one block, odd sizes everywhere. */
    for (int d = 0; d < 3; d++) {
        linear_case(f, dts[d], 1, 9, 203, 1100, WEFT_DTYPE_F32);
        linear_case(f, dts[d], 0, 1, 517, 300, WEFT_DTYPE_F32);
        linear_case(f, dts[d], 1, 16, 30, 600, WEFT_DTYPE_F16);
    }
}

/* Repeated threaded products must give bit-identical results: catches pool races. */
static void test_linear_repeat(void **state) {
    fixture *f = *state;
    tgraph tg;
    tg_init(&tg, f, WEFT_OP_LINEAR, "repeat");
    const int64_t N = 257, K = 260;
    uint32_t x = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, K, "x");
    uint32_t w = tg_tensor(&tg, WEFT_DTYPE_BF16, N, K, "w");
    uint32_t y = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, N, "y");
    tg_in(&tg, 0, x);
    tg_in(&tg, 1, w);
    tg_out(&tg, 0, y);
    double *tmp = dalloc(MAX_T * K > N * K ? MAX_T * K : N * K);
    fill(tg_ptr(&tg, x), tmp, MAX_T * K, WEFT_DTYPE_F32);
    fill(tg_ptr(&tg, w), tmp, N * K, WEFT_DTYPE_BF16);
    /* The first run of each row count is the reference for the later ones. */
    float *first = malloc(sizeof(float) * (1 + 5) * N);
    assert_non_null(first);
    for (int it = 0; it < 300; it++) {
        uint32_t T = it % 2 ? 5 : 1;
        float *ref = it % 2 ? first + N : first;
        memset(tg_ptr(&tg, y), 0, sizeof(float) * MAX_T * N);
        tg_run(&tg, T, WEFT_DTYPE_BF16, "");
        if (it < 2)
            memcpy(ref, tg_ptr(&tg, y), sizeof(float) * T * N);
        else
            assert_memory_equal(ref, tg_ptr(&tg, y), sizeof(float) * T * N);
    }
    free(first);
    free(tmp);
    tg_free(&tg);
}

static void test_lm_head(void **state) {
    fixture *f = *state;
    const uint32_t dts[3] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    for (int d = 0; d < 3; d++) {
        tgraph tg;
        tg_init(&tg, f, WEFT_OP_LM_HEAD, "lm_head");
        const int64_t V = 131, D = 40;
        const uint32_t T = 6;
        uint32_t x = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, D, "x");
        uint32_t w = tg_tensor(&tg, dts[d], V, D, "w");
        uint32_t y = tg_tensor(&tg, WEFT_DTYPE_F32, 4, V, "out.logits");
        tg_in(&tg, 0, x);
        tg_in(&tg, 1, w);
        tg_out(&tg, 0, y);
        double *rx = dalloc(MAX_T * D), *rw = dalloc(V * D), *want = dalloc(2 * V);
        fill(tg_ptr(&tg, x), rx, MAX_T * D, WEFT_DTYPE_F32);
        fill(tg_ptr(&tg, w), rw, V * D, dts[d]);
        tg_simple_batch(&tg, T);
        tg.batch.n_logits = 2;
        tg.logit_rows[0] = 1;
        tg.logit_rows[1] = 5;
        tg_run(&tg, T, dts[d], "");
        for (int r = 0; r < 2; r++)
            for (int64_t v = 0; v < V; v++) {
                double s = 0;
                for (int64_t k = 0; k < D; k++)
                    s += rx[tg.logit_rows[r] * D + k] * rw[v * D + k];
                want[r * V + v] = s;
            }
        expect_close(tg_ptr(&tg, y), want, 2 * V, 1e-5, 1e-5, "lm_head");
        /* A logit row outside the step is refused. */
        tg.logit_rows[1] = (int32_t)T;
        tg_run_bad(&tg, T, dts[d], "", "logit row", 0);
        free(rx), free(rw), free(want);
        tg_free(&tg);
    }
}

/* ---- EMBED -------------------------------------------------------------------------------- */
static void test_embed(void **state) {
    fixture *f = *state;
    const uint32_t dts[3] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    for (int d = 0; d < 3; d++) {
        tgraph tg;
        tg_init(&tg, f, WEFT_OP_EMBED, "embed");
        const int64_t V = 50, D = 19;
        uint32_t tok = tg_tensor(&tg, WEFT_DTYPE_I32, MAX_T, -1, "in.tokens");
        uint32_t tab = tg_tensor(&tg, dts[d], V, D, "embed");
        uint32_t y = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, D, "x");
        tg_in(&tg, 0, tok);
        tg_in(&tg, 1, tab);
        tg_out(&tg, 0, y);
        double *rt = dalloc(V * D);
        fill(tg_ptr(&tg, tab), rt, V * D, dts[d]);
        int32_t *ids = tg_ptr(&tg, tok);
        const int32_t pick[5] = {3, 0, 49, 3, 17};
        memcpy(ids, pick, sizeof(pick));
        tg_run(&tg, 5, dts[d], "");
        double *want = dalloc(5 * D);
        for (int t = 0; t < 5; t++)
            for (int64_t k = 0; k < D; k++)
                want[t * D + k] = rt[pick[t] * D + k];
        expect_close(tg_ptr(&tg, y), want, 5 * D, 0, 0, "embed");
        ids[2] = 50;
        tg_run_bad(&tg, 5, dts[d], "", "outside the vocabulary", 0);
        ids[2] = -1;
        tg_run_bad(&tg, 5, dts[d], "", "outside the vocabulary", 0);
        free(rt), free(want);
        tg_free(&tg);
    }
}

/* ---- RMSNORM and ADD_RMSNORM -------------------------------------------------------------- */
static void ref_rmsnorm(const double *x, const double *w, double *y, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * inv * w[i];
}

static void rmsnorm_case(fixture *f, int64_t D, int64_t group, uint32_t wdt, uint32_t T) {
    tgraph tg;
    tg_init(&tg, f, WEFT_OP_RMSNORM, "norm");
    int64_t G = group ? group : D;
    uint32_t x = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, D, "x");
    uint32_t w = tg_tensor(&tg, wdt, G, -1, "w");
    uint32_t y = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, D, "y");
    tg_in(&tg, 0, x);
    tg_in(&tg, 1, w);
    tg_out(&tg, 0, y);
    tg.node.p.i[0] = group;
    tg.node.p.f[0] = 1e-5f;
    double *rx = dalloc(MAX_T * D), *rw = dalloc(G), *want = dalloc(T * D);
    fill(tg_ptr(&tg, x), rx, MAX_T * D, WEFT_DTYPE_F32);
    fill(tg_ptr(&tg, w), rw, G, wdt);
    tg_run(&tg, T, WEFT_DTYPE_F32, "");
    for (uint32_t t = 0; t < T; t++)
        for (int64_t g0 = 0; g0 < D; g0 += G)
            ref_rmsnorm(rx + t * D + g0, rw, want + t * D + g0, G, (double)1e-5f);
    expect_close(tg_ptr(&tg, y), want, T * D, 1e-6, 1e-5, "rmsnorm");
    free(rx), free(rw), free(want);
    tg_free(&tg);
}

static void test_rmsnorm(void **state) {
    fixture *f = *state;
    rmsnorm_case(f, 64, 0, WEFT_DTYPE_F32, 1);
    rmsnorm_case(f, 37, 0, WEFT_DTYPE_BF16, 7);
    rmsnorm_case(f, 64, 8, WEFT_DTYPE_F32, 3);    /* per-head q/k norm: 8 heads of 8 */
    rmsnorm_case(f, 96, 32, WEFT_DTYPE_F16, 16);  /* 3 groups */
    rmsnorm_case(f, 4096, 0, WEFT_DTYPE_F32, 16); /* big enough for the pool */
}

static void test_add_rmsnorm(void **state) {
    fixture *f = *state;
    tgraph tg;
    tg_init(&tg, f, WEFT_OP_ADD_RMSNORM, "add_norm");
    const int64_t D = 48;
    const uint32_t T = 5;
    uint32_t x = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, D, "x");
    uint32_t res = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, D, "residual");
    uint32_t w = tg_tensor(&tg, WEFT_DTYPE_BF16, D, -1, "w");
    uint32_t y = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, D, "y");
    tg_in(&tg, 0, x);
    tg_in(&tg, 1, res);
    tg_in(&tg, 2, w);
    tg_out(&tg, 0, y);
    tg_out(&tg, 1, res); /* the residual stream updated in place, as a fused graph does */
    tg.node.p.f[0] = 1e-6f;
    double *rx = dalloc(MAX_T * D), *rr = dalloc(MAX_T * D), *rw = dalloc(D);
    double *sum = dalloc(T * D), *want = dalloc(T * D);
    fill(tg_ptr(&tg, x), rx, MAX_T * D, WEFT_DTYPE_F32);
    fill(tg_ptr(&tg, res), rr, MAX_T * D, WEFT_DTYPE_F32);
    fill(tg_ptr(&tg, w), rw, D, WEFT_DTYPE_BF16);
    tg_run(&tg, T, WEFT_DTYPE_F32, "");
    for (int64_t i = 0; i < T * D; i++)
        sum[i] = rx[i] + rr[i];
    for (uint32_t t = 0; t < T; t++)
        ref_rmsnorm(sum + t * D, rw, want + t * D, D, (double)1e-6f);
    expect_close(tg_ptr(&tg, res), sum, T * D, 1e-6, 1e-6, "add_rmsnorm r");
    expect_close(tg_ptr(&tg, y), want, T * D, 1e-6, 1e-5, "add_rmsnorm y");
    free(rx), free(rr), free(rw), free(sum), free(want);
    tg_free(&tg);
}

/* ---- ROPE --------------------------------------------------------------------------------- */
typedef struct rope_cfg {
    int64_t H, hd, rot, layout, scaling;
    double theta, factor, low, high, orig;
} rope_cfg;

/* HF's definitions: inv_freq = theta^(-2i/rot); llama3 keeps high frequencies, divides low
 * ones by factor and blends in between; linear divides all by factor. */
static double ref_inv_freq(const rope_cfg *c, int64_t i) {
    double inv = 1.0 / pow(c->theta, (double)(2 * i) / (double)c->rot);
    if (c->scaling == 2) return inv / c->factor;
    if (c->scaling == 1) {
        double wavelen = 2 * 3.14159265358979323846 / inv;
        double low_wavelen = c->orig / c->low, high_wavelen = c->orig / c->high;
        double scaled = wavelen > low_wavelen ? inv / c->factor : inv;
        double smooth = (c->orig / wavelen - c->low) / (c->high - c->low);
        double blended = (1 - smooth) * scaled / c->factor + smooth * scaled;
        int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        return medium ? blended : scaled;
    }
    return inv;
}

static void ref_rope(const rope_cfg *c, const double *x, double *y, int32_t pos) {
    int64_t P = c->rot / 2;
    for (int64_t h = 0; h < c->H; h++) {
        const double *xh = x + h * c->hd;
        double *yh = y + h * c->hd;
        for (int64_t d = 0; d < c->hd; d++)
            yh[d] = xh[d];
        for (int64_t i = 0; i < P; i++) {
            double a = pos * ref_inv_freq(c, i);
            int64_t i0 = c->layout ? 2 * i : i, i1 = c->layout ? 2 * i + 1 : i + P;
            yh[i0] = xh[i0] * cos(a) - xh[i1] * sin(a);
            yh[i1] = xh[i1] * cos(a) + xh[i0] * sin(a);
        }
    }
}

static void rope_setup(tgraph *tg, fixture *f, const rope_cfg *c, uint32_t *x, uint32_t *y) {
    tg_init(tg, f, WEFT_OP_ROPE, "rope");
    *x = tg_tensor(tg, WEFT_DTYPE_F32, MAX_T, c->H * c->hd, "q");
    uint32_t p = tg_tensor(tg, WEFT_DTYPE_I32, MAX_T, -1, "in.positions");
    *y = tg_tensor(tg, WEFT_DTYPE_F32, MAX_T, c->H * c->hd, "q_rot");
    tg_in(tg, 0, *x);
    tg_in(tg, 1, p);
    tg_out(tg, 0, *y);
    weft_op_params *pp = &tg->node.p;
    pp->i[0] = c->H, pp->i[1] = c->hd, pp->i[2] = c->rot == c->hd ? 0 : c->rot;
    pp->i[3] = c->layout, pp->i[4] = c->scaling;
    pp->f[0] = (float)c->theta, pp->f[1] = (float)c->factor, pp->f[2] = (float)c->low;
    pp->f[3] = (float)c->high, pp->f[4] = (float)c->orig;
    int32_t *ps = tg_ptr(tg, p);
    const int32_t pos[MAX_T] = {0,     1, 5, 17, 100, 1000, 4095, 8191,
                                20000, 3, 2, 1,  0,   7,    9,    131071};
    memcpy(ps, pos, sizeof(pos));
}

static void rope_case(fixture *f, rope_cfg c, uint32_t T, int in_place) {
    tgraph tg;
    uint32_t x, y;
    rope_setup(&tg, f, &c, &x, &y);
    if (in_place) tg.node.out[0] = x;
    int64_t W = c.H * c.hd;
    double *rx = dalloc(MAX_T * W), *want = dalloc(T * W);
    fill(tg_ptr(&tg, x), rx, MAX_T * W, WEFT_DTYPE_F32);
    /* Positions are exact in float; the angle is pos * inv_freq. */
    const int32_t *pos = tg_ptr(&tg, tg.node.in[1]);
    for (uint32_t t = 0; t < T; t++)
        ref_rope(&c, rx + t * W, want + t * W, pos[t]);
    tg_run(&tg, T, WEFT_DTYPE_F32, "");
    /* f32 cos/sin of angles up to ~1e5 rad: the angle alone carries ~1e-3 relative error in
     * f32 (HF computes it so); the plugin computes the angle in double, so 2e-5 holds. */
    expect_close(tg_ptr(&tg, in_place ? x : y), want, T * W, 2e-5, 2e-5, "rope");
    free(rx), free(want);
    tg_free(&tg);
}

static void test_rope(void **state) {
    fixture *f = *state;
    rope_cfg base = {4, 16, 16, 0, 0, 10000.0, 1, 0, 0, 0};
    rope_case(f, base, MAX_T, 0);
    rope_cfg inter = base;
    inter.layout = 1;
    rope_case(f, inter, 9, 0);
    rope_cfg partial = base;
    partial.rot = 8; /* half the head rotates, the rest passes through */
    rope_case(f, partial, MAX_T, 1);
    partial.layout = 1;
    rope_case(f, partial, 5, 0);
    /* Llama 3.1's parameters over a head wide enough to hit all three frequency bands. */
    rope_cfg l3 = {2, 32, 32, 0, 1, 500000.0, 8.0, 1.0, 4.0, 8192.0};
    rope_case(f, l3, MAX_T, 0);
    rope_cfg lin = base;
    lin.scaling = 2;
    lin.factor = 4.0;
    rope_case(f, lin, MAX_T, 0);
}

/* Closed-form values: a unit vector on one lane of a pair comes out as (cos, sin) of
 * pos * theta^(-2i/d) on the pair's two lanes. */
static void test_rope_closed_form(void **state) {
    fixture *f = *state;
    for (int layout = 0; layout < 2; layout++) {
        rope_cfg c = {1, 8, 8, layout, 0, 10000.0, 1, 0, 0, 0};
        tgraph tg;
        uint32_t x, y;
        rope_setup(&tg, f, &c, &x, &y);
        float *xs = tg_ptr(&tg, x);
        memset(xs, 0, sizeof(float) * MAX_T * 8);
        /* row 2 (pos 5): lane of pair 1 set; row 3 (pos 17): lane of pair 0 set. */
        int a1 = layout ? 2 : 1, b1 = layout ? 3 : 5, a0 = 0, b0 = layout ? 1 : 4;
        xs[2 * 8 + a1] = 1.0f;
        xs[3 * 8 + a0] = 1.0f;
        tg_run(&tg, 4, WEFT_DTYPE_F32, "");
        const float *ys = tg_ptr(&tg, y);
        assert_float_equal(ys[2 * 8 + a1], cos(5 * 0.1), 1e-6);
        assert_float_equal(ys[2 * 8 + b1], sin(5 * 0.1), 1e-6);
        assert_float_equal(ys[3 * 8 + a0], cos(17.0), 1e-6);
        assert_float_equal(ys[3 * 8 + b0], sin(17.0), 1e-6);
        tg_free(&tg);
    }
    /* Llama 3: the lowest frequency (wavelength beyond orig/low) is divided by the factor. */
    rope_cfg c = {1, 32, 32, 0, 1, 500000.0, 8.0, 1.0, 4.0, 8192.0};
    tgraph tg;
    uint32_t x, y;
    rope_setup(&tg, f, &c, &x, &y);
    float *xs = tg_ptr(&tg, x);
    memset(xs, 0, sizeof(float) * MAX_T * 32);
    xs[5 * 32 + 15] = 1.0f; /* row 5: pos 1000, pair 15 */
    tg_run(&tg, 6, WEFT_DTYPE_F32, "");
    double inv = pow(500000.0, -30.0 / 32.0) / 8.0;
    assert_float_equal(((float *)tg_ptr(&tg, y))[5 * 32 + 15], cos(1000 * inv), 1e-6);
    assert_float_equal(((float *)tg_ptr(&tg, y))[5 * 32 + 31], sin(1000 * inv), 1e-6);
    tg_free(&tg);
}

/* ---- ATTENTION ---------------------------------------------------------------------------- */
#define A_SLOTS 3
#define A_MAXSEQ 150

typedef struct attn_world {
    int64_t Hq, Hkv, hd;
    uint32_t dtype;
    int64_t window;
    weft_buffer k[2], v[2];
    weft_kv_contiguous desc;
    /* Reference history per slot: (A_MAXSEQ, Hkv*hd) of k and v as stored (rounded to the
     * cache dtype). */
    double *hk[A_SLOTS], *hv[A_SLOTS];
} attn_world;

static double round_to(double v, uint32_t dt) {
    if (dt == WEFT_DTYPE_F32) return (float)v;
    /* Nearest representable by search over the neighbours of a truncation: independent of the
     * plugin's conversion code. */
    float fv = (float)v;
    uint32_t u;
    memcpy(&u, &fv, 4);
    if (dt == WEFT_DTYPE_BF16) {
        uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
        double dl = fabs(ref_bf16(lo) - v), dh = fabs(ref_bf16(hi) - v);
        return dh < dl || (dh == dl && (hi & 1) == 0) ? ref_bf16(hi) : ref_bf16(lo);
    }
    double best = 0, bd = INFINITY;
    for (uint32_t h = 0; h < 0x7c00; h++) { /* brute force over finite positive halves */
        double d = fabs(ref_f16((uint16_t)h) - fabs(v));
        if (d < bd || (d == bd && (h & 1) == 0))
            bd = d, best = ref_f16((uint16_t)h); /* ties: even */
    }
    return v < 0 ? -best : best;
}

static void attn_world_init(attn_world *aw, fixture *f, int64_t Hq, int64_t Hkv, int64_t hd,
                            uint32_t dt, int64_t window) {
    memset(aw, 0, sizeof(*aw));
    aw->Hq = Hq, aw->Hkv = Hkv, aw->hd = hd, aw->dtype = dt, aw->window = window;
    uint64_t bytes = (uint64_t)A_SLOTS * A_MAXSEQ * Hkv * hd * esize(dt);
    weft_error err = new_error();
    for (int l = 0; l < 2; l++) {
        assert_int_equal(f->desc->backend->alloc(f->st, bytes, WEFT_MEMORY_DEVICE, &aw->k[l], &err),
                         0);
        assert_int_equal(f->desc->backend->alloc(f->st, bytes, WEFT_MEMORY_DEVICE, &aw->v[l], &err),
                         0);
        memset(aw->k[l].ptr, 0xff, bytes); /* NaN garbage: must never be read */
        memset(aw->v[l].ptr, 0xff, bytes);
    }
    aw->desc = (weft_kv_contiguous){.size = sizeof(weft_kv_contiguous),
                                    .n_layers = 2,
                                    .n_slots = A_SLOTS,
                                    .max_seq = A_MAXSEQ,
                                    .n_kv_heads = (uint32_t)Hkv,
                                    .head_dim = (uint32_t)hd,
                                    .dtype = dt,
                                    .k = aw->k,
                                    .v = aw->v};
    for (int s = 0; s < A_SLOTS; s++) {
        aw->hk[s] = dalloc(A_MAXSEQ * Hkv * hd);
        aw->hv[s] = dalloc(A_MAXSEQ * Hkv * hd);
    }
}

static void attn_world_free(attn_world *aw, fixture *f) {
    for (int l = 0; l < 2; l++) {
        f->desc->backend->free(f->st, &aw->k[l]);
        f->desc->backend->free(f->st, &aw->v[l]);
    }
    for (int s = 0; s < A_SLOTS; s++)
        free(aw->hk[s]), free(aw->hv[s]);
}

/* One step: rows given as (slot, position) pairs; checks the output against a naive softmax
 * over the reference history and the cache contents at the written positions. */
static void attn_step(attn_world *aw, fixture *f, uint32_t T, const int32_t *slot_of_row,
                      const int32_t *pos, int32_t layer) {
    const int64_t Hq = aw->Hq, Hkv = aw->Hkv, hd = aw->hd, KW = Hkv * hd, QW = Hq * hd;
    tgraph tg;
    tg_init(&tg, f, WEFT_OP_ATTENTION, "layers.1.attn");
    uint32_t q = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, QW, "q");
    uint32_t k = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, KW, "k");
    uint32_t v = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, KW, "v");
    uint32_t p = tg_tensor(&tg, WEFT_DTYPE_I32, MAX_T, -1, "in.positions");
    uint32_t o = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, QW, "o");
    tg_in(&tg, 0, q), tg_in(&tg, 1, k), tg_in(&tg, 2, v), tg_in(&tg, 3, p), tg_out(&tg, 0, o);
    tg.node.p.i[0] = layer, tg.node.p.i[1] = Hq, tg.node.p.i[2] = Hkv, tg.node.p.i[3] = hd;
    tg.node.p.i[4] = aw->window;
    double *rq = dalloc(MAX_T * QW), *rk = dalloc(MAX_T * KW), *rv = dalloc(MAX_T * KW);
    fill(tg_ptr(&tg, q), rq, MAX_T * QW, WEFT_DTYPE_F32);
    fill(tg_ptr(&tg, k), rk, MAX_T * KW, WEFT_DTYPE_F32);
    fill(tg_ptr(&tg, v), rv, MAX_T * KW, WEFT_DTYPE_F32);
    memcpy(tg_ptr(&tg, p), pos, sizeof(int32_t) * T);
    /* Sequences: one per distinct slot, listed in the order rows first use them. */
    uint32_t n_seqs = 0;
    for (uint32_t r = 0; r < T; r++) {
        uint32_t s = 0;
        while (s < n_seqs && tg.seqs[s].kv_slot != slot_of_row[r])
            s++;
        if (s == n_seqs) tg.seqs[n_seqs++].kv_slot = slot_of_row[r];
        tg.seq_of_row[r] = (int32_t)s;
        tg.positions[r] = pos[r];
    }
    tg.batch.n_seqs = n_seqs;
    tg.kv.size = sizeof(tg.kv);
    snprintf(tg.kv.layout, sizeof(tg.kv.layout), "contiguous");
    tg.kv.desc = &aw->desc;
    tg_run(&tg, T, aw->dtype, "contiguous");
    /* Reference: first store every row's k/v, then attend. */
    for (uint32_t r = 0; r < T; r++)
        for (int64_t i = 0; i < KW; i++) {
            aw->hk[slot_of_row[r]][pos[r] * KW + i] = round_to(rk[r * KW + i], aw->dtype);
            aw->hv[slot_of_row[r]][pos[r] * KW + i] = round_to(rv[r * KW + i], aw->dtype);
        }
    double *want = dalloc(T * QW);
    double scale = 1.0 / sqrt((double)hd);
    for (uint32_t r = 0; r < T; r++) {
        const double *hk = aw->hk[slot_of_row[r]], *hv = aw->hv[slot_of_row[r]];
        for (int64_t h = 0; h < Hq; h++) {
            int64_t g = h / (Hq / Hkv);
            int64_t lo = aw->window && pos[r] - aw->window + 1 > 0 ? pos[r] - aw->window + 1 : 0;
            double mx = -INFINITY, sum = 0;
            double sc[A_MAXSEQ];
            for (int64_t s = lo; s <= pos[r]; s++) {
                double d = 0;
                for (int64_t e = 0; e < hd; e++)
                    d += rq[r * QW + h * hd + e] * hk[s * KW + g * hd + e];
                sc[s] = d * scale;
                if (sc[s] > mx) mx = sc[s];
            }
            for (int64_t s = lo; s <= pos[r]; s++)
                sum += exp(sc[s] - mx);
            for (int64_t e = 0; e < hd; e++) {
                double acc = 0;
                for (int64_t s = lo; s <= pos[r]; s++)
                    acc += exp(sc[s] - mx) / sum * hv[s * KW + g * hd + e];
                want[r * QW + h * hd + e] = acc;
            }
        }
    }
    /* The caches hold what was written, at (slot, position). */
    for (int kv = 0; kv < 2; kv++) {
        const char *cache = kv ? aw->v[layer].ptr : aw->k[layer].ptr;
        for (uint32_t r = 0; r < T; r++)
            for (int64_t i = 0; i < KW; i++) {
                size_t off = ((size_t)slot_of_row[r] * A_MAXSEQ + (size_t)pos[r]) * KW + (size_t)i;
                const uint16_t *c16 = (const uint16_t *)cache;
                double got = aw->dtype == WEFT_DTYPE_F32    ? ((const float *)cache)[off]
                             : aw->dtype == WEFT_DTYPE_BF16 ? ref_bf16(c16[off])
                                                            : ref_f16(c16[off]);
                double want_c = (kv ? aw->hv : aw->hk)[slot_of_row[r]][pos[r] * KW + i];
                if (got != want_c) {
                    fprintf(stderr,
                            "cache %c slot %d pos %d [%lld]: got %.9g want %.9g (from %.9g)\n",
                            kv ? 'v' : 'k', slot_of_row[r], pos[r], (long long)i, got, want_c,
                            (kv ? rv : rk)[r * KW + i]);
                    fail();
                }
            }
    }
    double tol = aw->dtype == WEFT_DTYPE_F32 ? 2e-6 : 1e-5;
    char what[64];
    snprintf(what, sizeof(what), "attention %s hd %lld window %lld",
             aw->dtype == WEFT_DTYPE_F32    ? "f32"
             : aw->dtype == WEFT_DTYPE_BF16 ? "bf16"
                                            : "f16",
             (long long)hd, (long long)aw->window);
    expect_close(tg_ptr(&tg, o), want, T * QW, tol, 1e-5, what);
    free(rq), free(rk), free(rv), free(want);
    tg_free(&tg);
}

static void attention_scenario(fixture *f, uint32_t dt, int64_t hd, int64_t window) {
    attn_world aw;
    attn_world_init(&aw, f, 4, 2, hd, dt, window);
    /* Step 1: sequence in slot 2 prefills 5 tokens, sequence in slot 0 prefills 3. */
    const int32_t s1[8] = {2, 2, 2, 2, 2, 0, 0, 0}, p1[8] = {0, 1, 2, 3, 4, 0, 1, 2};
    attn_step(&aw, f, 8, s1, p1, 1);
    /* Step 2: both decode one token; the cache must still hold step 1's k/v. */
    const int32_t s2[2] = {0, 2}, p2[2] = {3, 5};
    attn_step(&aw, f, 2, s2, p2, 1);
    /* Step 3: a chunk of 3 more for slot 2 together with a decode of slot 0. */
    const int32_t s3[4] = {2, 0, 2, 2}, p3[4] = {6, 4, 7, 8};
    attn_step(&aw, f, 4, s3, p3, 1);
    attn_world_free(&aw, f);
}

static void test_attention(void **state) {
    fixture *f = *state;
    attention_scenario(f, WEFT_DTYPE_F32, 8, 0);
    attention_scenario(f, WEFT_DTYPE_F32, 12, 0); /* head_dim not a multiple of 8 */
    attention_scenario(f, WEFT_DTYPE_F32, 16, 3); /* sliding window of 3 */
    attention_scenario(f, WEFT_DTYPE_BF16, 8, 0);
    attention_scenario(f, WEFT_DTYPE_F16, 8, 0);
}

/* A long context crosses several online-softmax chunks. */
static void test_attention_long(void **state) {
    fixture *f = *state;
    attn_world aw;
    attn_world_init(&aw, f, 2, 1, 16, WEFT_DTYPE_F32, 0);
    int32_t slots[MAX_T], pos[MAX_T];
    for (int32_t start = 0; start < A_MAXSEQ; start += MAX_T) {
        uint32_t n = A_MAXSEQ - start < MAX_T ? (uint32_t)(A_MAXSEQ - start) : MAX_T;
        for (uint32_t r = 0; r < n; r++)
            slots[r] = 1, pos[r] = start + (int32_t)r;
        attn_step(&aw, f, n, slots, pos, 0);
    }
    attn_world_free(&aw, f);
}

/* ---- SWIGLU, ADD, ACTIVATION, SCALE ------------------------------------------------------- */
static void ew_case(fixture *f, uint32_t op, int64_t kind, float scalar, uint32_t T, int64_t N) {
    tgraph tg;
    tg_init(&tg, f, op, "ew");
    int two = op == WEFT_OP_SWIGLU || op == WEFT_OP_ADD;
    uint32_t a = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, N, "a");
    uint32_t b = two ? tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, N, "b") : 0;
    uint32_t y = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, N, "y");
    tg_in(&tg, 0, a);
    if (two) tg_in(&tg, 1, b);
    tg_out(&tg, 0, y);
    tg.node.p.i[0] = kind;
    tg.node.p.f[0] = scalar;
    double *ra = dalloc(MAX_T * N), *rb = dalloc(MAX_T * N), *want = dalloc(T * N);
    fill(tg_ptr(&tg, a), ra, MAX_T * N, WEFT_DTYPE_F32);
    float *as = tg_ptr(&tg, a);
    for (int64_t i = 0; i < MAX_T * N; i++)
        as[i] *= 8.0f, ra[i] *= 8.0; /* reach the tails */
    if (two) fill(tg_ptr(&tg, b), rb, MAX_T * N, WEFT_DTYPE_F32);
    tg_run(&tg, T, WEFT_DTYPE_F32, "");
    for (int64_t i = 0; i < T * N; i++) {
        double x = ra[i];
        switch (op) {
        case WEFT_OP_SWIGLU:
            want[i] = x / (1 + exp(-x)) * rb[i];
            break;
        case WEFT_OP_ADD:
            want[i] = x + rb[i];
            break;
        case WEFT_OP_SCALE:
            want[i] = x * scalar;
            break;
        default:
            want[i] = kind == 0   ? x / (1 + exp(-x))
                      : kind == 1 ? 0.5 * x * (1 + erf(x / sqrt(2.0)))
                                  : (x > 0 ? x : 0);
        }
    }
    expect_close(tg_ptr(&tg, y), want, T * N, 1e-6, 1e-5, "elementwise");
    free(ra), free(rb), free(want);
    tg_free(&tg);
}

static void test_elementwise(void **state) {
    fixture *f = *state;
    ew_case(f, WEFT_OP_SWIGLU, 0, 0, 1, 172);
    ew_case(f, WEFT_OP_SWIGLU, 0, 0, 16, 5000); /* pooled */
    ew_case(f, WEFT_OP_ADD, 0, 0, 7, 64);
    ew_case(f, WEFT_OP_SCALE, 0, 0.125f, 3, 33);
    ew_case(f, WEFT_OP_ACTIVATION, 0, 0, 4, 21);
    ew_case(f, WEFT_OP_ACTIVATION, 1, 0, 4, 21);
    ew_case(f, WEFT_OP_ACTIVATION, 2, 0, 4, 21);
}

/* ---- COPY and SPLIT ----------------------------------------------------------------------- */
static void test_copy(void **state) {
    fixture *f = *state;
    const uint32_t to[2] = {WEFT_DTYPE_BF16, WEFT_DTYPE_F16};
    for (int d = 0; d < 2; d++) {
        tgraph tg;
        tg_init(&tg, f, WEFT_OP_COPY, "cast");
        const int64_t N = 300;
        uint32_t x = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, N, "x");
        uint32_t y = tg_tensor(&tg, to[d], MAX_T, N, "y");
        tg_in(&tg, 0, x);
        tg_out(&tg, 0, y);
        tg.node.p.i[0] = to[d];
        float *xs = tg_ptr(&tg, x);
        double *rx = dalloc(MAX_T * N);
        fill(xs, rx, MAX_T * N, WEFT_DTYPE_F32);
        /* Scale some into the f16 subnormal range, overflow and exact ties. */
        for (int64_t i = 0; i < MAX_T * N; i += 7)
            xs[i] *= 1e-5f;
        xs[1] = 70000.0f, xs[2] = -65520.0f, xs[3] = 65519.0f, xs[4] = 1.0f + 0x1p-11f;
        xs[5] = 1.0f + 3 * 0x1p-11f, xs[6] = 1.0f + 0x1p-8f, xs[8] = 0x1p-25f;
        tg_run(&tg, 2, WEFT_DTYPE_F32, "");
        const uint16_t *ys = tg_ptr(&tg, y);
        double (*dec)(uint16_t) = to[d] == WEFT_DTYPE_BF16 ? ref_bf16 : ref_f16;
        double maxfin = to[d] == WEFT_DTYPE_BF16 ? 3.3895313892515355e38 : 65504.0;
        for (int64_t i = 0; i < 2 * N; i++) {
            double v = xs[i], got = dec(ys[i]);
            if (fabs(v) >= maxfin + (to[d] == WEFT_DTYPE_F16 ? 16 : 0)) {
                assert_true(isinf(got) && (got > 0) == (v > 0));
                continue;
            }
            /* Nearest: neither neighbour is closer; on a tie the even code wins. */
            double up = dec((uint16_t)(ys[i] + 1)), dn = dec((uint16_t)(ys[i] - 1));
            double e = fabs(got - v);
            if ((ys[i] & 0x7fff) != 0) assert_true(e <= fabs(dn - v));
            assert_true(e <= fabs(up - v) || isnan(up));
            if (e == fabs(up - v) || ((ys[i] & 0x7fff) && e == fabs(dn - v)))
                assert_int_equal(ys[i] & 1, 0);
        }
        assert_int_equal(((const uint16_t *)tg_ptr(&tg, y))[2 * N], 0); /* row 3 untouched */
        free(rx);
        tg_free(&tg);
    }
    /* And back: bf16 to f32 is exact. */
    tgraph tg;
    tg_init(&tg, f, WEFT_OP_COPY, "widen");
    uint32_t x = tg_tensor(&tg, WEFT_DTYPE_BF16, MAX_T, 10, "x");
    uint32_t y = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 10, "y");
    tg_in(&tg, 0, x);
    tg_out(&tg, 0, y);
    double rx[MAX_T * 10];
    fill(tg_ptr(&tg, x), rx, MAX_T * 10, WEFT_DTYPE_BF16);
    tg_run(&tg, 3, WEFT_DTYPE_BF16, "");
    expect_close(tg_ptr(&tg, y), rx, 30, 0, 0, "copy bf16->f32");
    tg_free(&tg);
}

static void test_split(void **state) {
    fixture *f = *state;
    tgraph tg;
    tg_init(&tg, f, WEFT_OP_SPLIT, "qkv_split");
    uint32_t x = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 64 + 32 + 32, "qkv");
    uint32_t a = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 64, "q");
    uint32_t b = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 32, "k");
    uint32_t c = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 32, "v");
    tg_in(&tg, 0, x);
    tg_out(&tg, 0, a), tg_out(&tg, 1, b), tg_out(&tg, 2, c);
    tg.node.p.i[0] = 64, tg.node.p.i[1] = 32, tg.node.p.i[2] = 32;
    double *rx = dalloc(MAX_T * 128);
    fill(tg_ptr(&tg, x), rx, MAX_T * 128, WEFT_DTYPE_F32);
    tg_run(&tg, 3, WEFT_DTYPE_F32, "");
    for (int t = 0; t < 3; t++) {
        expect_close((float *)tg_ptr(&tg, a) + t * 64, rx + t * 128, 64, 0, 0, "split q");
        expect_close((float *)tg_ptr(&tg, b) + t * 32, rx + t * 128 + 64, 32, 0, 0, "split k");
        expect_close((float *)tg_ptr(&tg, c) + t * 32, rx + t * 128 + 96, 32, 0, 0, "split v");
    }
    tg.node.p.i[2] = 31;
    tg_run_bad(&tg, 3, WEFT_DTYPE_F32, "", "columns", 1);
    free(rx);
    tg_free(&tg);
}

/* ---- malformed nodes ---------------------------------------------------------------------- */
static void test_bad_shapes(void **state) {
    fixture *f = *state;
    /* LINEAR: x has 10 columns, w expects 12. */
    tgraph tg;
    tg_init(&tg, f, WEFT_OP_LINEAR, "bad.linear");
    uint32_t x = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 10, "x");
    uint32_t w = tg_tensor(&tg, WEFT_DTYPE_F32, 8, 12, "w");
    uint32_t y = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 8, "y");
    tg_in(&tg, 0, x), tg_in(&tg, 1, w), tg_out(&tg, 0, y);
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "", "bad.linear", 1);
    /* Tensor id out of range. */
    tg.node.in[1] = 99;
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "", "out of range", 1);
    /* Right shapes but a buffer too small for the rows asked for. */
    tg.t[w].shape[1] = 10;
    tg.node.in[1] = w;
    tg_run(&tg, 2, WEFT_DTYPE_F32, "");
    tg.buf[x].bytes = 4 * 10; /* one row only */
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "", "bytes", 0);
    tg.buf[x].bytes = 4 * 10 * MAX_T;
    /* More rows than the tensors hold. */
    tg.g.bucket.max_tokens = 64;
    tg_run_bad(&tg, 17, WEFT_DTYPE_F32, "", "n_tokens", 0);
    tg.g.bucket.max_tokens = MAX_T;
    /* Wrong dtype of x. */
    tg.t[x].dtype = WEFT_DTYPE_BF16;
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "", "expected dtype f32", 1);
    tg_free(&tg);

    /* ATTENTION: position past the cache, slot past the pool, tree mask, missing kv view. */
    attn_world aw;
    attn_world_init(&aw, f, 4, 2, 8, WEFT_DTYPE_F32, 0);
    tg_init(&tg, f, WEFT_OP_ATTENTION, "bad.attn");
    uint32_t q = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 32, "q");
    uint32_t k = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 16, "k");
    uint32_t v = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 16, "v");
    uint32_t p = tg_tensor(&tg, WEFT_DTYPE_I32, MAX_T, -1, "pos");
    uint32_t o = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 32, "o");
    tg_in(&tg, 0, q), tg_in(&tg, 1, k), tg_in(&tg, 2, v), tg_in(&tg, 3, p), tg_out(&tg, 0, o);
    tg.node.p.i[0] = 0, tg.node.p.i[1] = 4, tg.node.p.i[2] = 2, tg.node.p.i[3] = 8;
    tg_simple_batch(&tg, 2);
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "contiguous", "kv view", 0);
    tg.kv.size = sizeof(tg.kv);
    snprintf(tg.kv.layout, sizeof(tg.kv.layout), "contiguous");
    tg.kv.desc = &aw.desc;
    int32_t *ps = tg_ptr(&tg, p);
    ps[0] = 0, ps[1] = A_MAXSEQ;
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "contiguous", "position", 0);
    ps[1] = 1;
    tg.seqs[0].kv_slot = A_SLOTS;
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "contiguous", "kv slot", 0);
    tg.seqs[0].kv_slot = 0;
    tg.seq_of_row[1] = 1;
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "contiguous", "sequence", 0);
    tg.seq_of_row[1] = 0;
    tg_run(&tg, 2, WEFT_DTYPE_F32, "contiguous");
    tg.node.p.i[0] = 2; /* layer beyond the cache */
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "contiguous", "layer 2", 0);
    tg.node.p.i[0] = 0;
    tg.node.p.i[2] = 3; /* 4 heads over 3 kv heads */
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "contiguous", "n_kv_heads", 1);
    tg.node.p.i[2] = 2;
    tg.node.p.i[5] = 1;
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "contiguous", "mask", 1);
    tg.node.p.i[5] = 0;
    snprintf(tg.kv.layout, sizeof(tg.kv.layout), "paged");
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "contiguous", "paged", 0);
    tg_free(&tg);
    attn_world_free(&aw, f);

    /* ROPE: odd rotary dims; RMSNORM: group not dividing the row. */
    rope_cfg c = {2, 8, 8, 0, 0, 10000.0, 1, 0, 0, 0};
    uint32_t rx, ry;
    rope_setup(&tg, f, &c, &rx, &ry);
    tg.node.p.i[2] = 5;
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "", "rotary", 1);
    tg.node.p.i[2] = 0;
    tg.node.p.i[4] = 1; /* llama3 without its parameters */
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "", "llama3", 1);
    tg_free(&tg);

    tg_init(&tg, f, WEFT_OP_RMSNORM, "bad.norm");
    x = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 20, "x");
    w = tg_tensor(&tg, WEFT_DTYPE_F32, 6, -1, "w");
    y = tg_tensor(&tg, WEFT_DTYPE_F32, MAX_T, 20, "y");
    tg_in(&tg, 0, x), tg_in(&tg, 1, w), tg_out(&tg, 0, y);
    tg.node.p.i[0] = 6;
    tg_run_bad(&tg, 2, WEFT_DTYPE_F32, "", "group size 6", 1);
    tg_free(&tg);

    /* A NULL context is refused, not dereferenced. */
    const weft_op_impl *impl =
        f->ops.find(f->ops.self, WEFT_OP_ADD, "cpu", WEFT_DTYPE_F32, "", NULL, NULL);
    assert_non_null(impl);
    weft_error err = new_error();
    assert_int_equal(impl->run(impl->state, NULL, NULL, &err), WEFT_ERR_INVALID);
    assert_true(strlen(err.message) > 0);
}

/* Random nodes: for each registered implementation a well-formed node of random sizes is built
 * (so the kernels run on odd shapes), then, in most iterations, one to three random mutations
 * are applied (a dtype, a dimension, an id out of range or absent, a parameter, a short buffer,
 * too many rows, a corrupt batch or kv cache). Every run must return OK or an error with a
 * message; under ASan any out-of-bounds access fails the test. */
static uint32_t rnd_dim(uint32_t max) {
    return 1 + rnd_u32() % max;
}

typedef struct rnd_cache {
    weft_buffer k[2], v[2];
    weft_kv_contiguous desc;
} rnd_cache;

/* Builds a well-formed node for impl's op; returns the number of rows T to run with. */
static uint32_t random_node(tgraph *tg, const weft_op_impl *impl, rnd_cache *rc) {
    const uint32_t op = impl->op, key = impl->dtype ? impl->dtype : WEFT_DTYPE_F32;
    const uint32_t T = rnd_u32() % (MAX_T + 1), R = MAX_T;
    const uint32_t f32 = WEFT_DTYPE_F32, i32 = WEFT_DTYPE_I32;
    int64_t K = rnd_dim(40), N = rnd_dim(40);
    tg_simple_batch(tg, T);
    switch (op) {
    case WEFT_OP_LINEAR:
    case WEFT_OP_LM_HEAD: {
        tg_in(tg, 0, tg_tensor(tg, f32, R, K, "x"));
        tg_in(tg, 1, tg_tensor(tg, key, N, K, "w"));
        if (op == WEFT_OP_LINEAR && rnd_u32() % 2) tg_in(tg, 2, tg_tensor(tg, key, N, -1, "b"));
        tg_out(tg, 0, tg_tensor(tg, f32, R, N, "y"));
        if (op == WEFT_OP_LM_HEAD) {
            tg->batch.n_logits = T ? rnd_u32() % (T + 1) : 0;
            for (uint32_t i = 0; i < tg->batch.n_logits; i++)
                tg->logit_rows[i] = (int32_t)(rnd_u32() % T);
        }
        break;
    }
    case WEFT_OP_EMBED: {
        uint32_t tok = tg_tensor(tg, i32, R, -1, "tokens");
        tg_in(tg, 0, tok);
        tg_in(tg, 1, tg_tensor(tg, key, N, K, "table"));
        tg_out(tg, 0, tg_tensor(tg, f32, R, K, "x"));
        for (uint32_t r = 0; r < R; r++)
            ((int32_t *)tg_ptr(tg, tok))[r] = (int32_t)(rnd_u32() % N);
        break;
    }
    case WEFT_OP_RMSNORM:
    case WEFT_OP_ADD_RMSNORM: {
        int64_t g = rnd_dim(8), D = g * rnd_dim(5);
        int grouped = op == WEFT_OP_RMSNORM && rnd_u32() % 2;
        tg_in(tg, 0, tg_tensor(tg, f32, R, D, "x"));
        if (op == WEFT_OP_ADD_RMSNORM) tg_in(tg, 1, tg_tensor(tg, f32, R, D, "res"));
        tg_in(tg, op == WEFT_OP_ADD_RMSNORM ? 2 : 1,
              tg_tensor(tg, dts_float[rnd_u32() % 3], grouped ? g : D, -1, "w"));
        tg_out(tg, 0, tg_tensor(tg, f32, R, D, "y"));
        if (op == WEFT_OP_ADD_RMSNORM)
            tg_out(tg, 1, rnd_u32() % 2 ? tg->node.in[1] : tg_tensor(tg, f32, R, D, "r"));
        tg->node.p.i[0] = grouped ? g : 0;
        tg->node.p.f[0] = 1e-5f;
        break;
    }
    case WEFT_OP_ROPE: {
        int64_t H = rnd_dim(4), hd = 2 * rnd_dim(6), rot = 2 * rnd_dim((uint32_t)hd / 2);
        uint32_t x = tg_tensor(tg, f32, R, H * hd, "x"), pos = tg_tensor(tg, i32, R, -1, "pos");
        tg_in(tg, 0, x), tg_in(tg, 1, pos);
        tg_out(tg, 0, rnd_u32() % 2 ? x : tg_tensor(tg, f32, R, H * hd, "y"));
        weft_op_params *p = &tg->node.p;
        p->i[0] = H, p->i[1] = hd, p->i[2] = rot == hd ? 0 : rot, p->i[3] = rnd_u32() % 2;
        p->i[4] = rnd_u32() % 3, p->f[0] = 10000.0f, p->f[1] = 4.0f, p->f[2] = 1.0f;
        p->f[3] = 4.0f, p->f[4] = 64.0f;
        for (uint32_t r = 0; r < R; r++)
            ((int32_t *)tg_ptr(tg, pos))[r] = (int32_t)(rnd_u32() % 5000);
        break;
    }
    case WEFT_OP_ATTENTION: {
        int64_t Hkv = rnd_dim(3), G = rnd_dim(3), hd = rnd_dim(12), Hq = Hkv * G;
        uint32_t slots = rnd_dim(3), max_seq = 8 + rnd_u32() % 70, dt = key;
        uint64_t bytes = (uint64_t)slots * max_seq * Hkv * hd * esize(dt);
        for (int l = 0; l < 2; l++) {
            weft_error e = new_error();
            assert_int_equal(tg->f->desc->backend->alloc(tg->f->st, bytes, 0, &rc->k[l], &e), 0);
            assert_int_equal(tg->f->desc->backend->alloc(tg->f->st, bytes, 0, &rc->v[l], &e), 0);
            memset(rc->k[l].ptr, 0, bytes), memset(rc->v[l].ptr, 0, bytes);
        }
        rc->desc = (weft_kv_contiguous){.size = sizeof(rc->desc),
                                        .n_layers = 2,
                                        .n_slots = slots,
                                        .max_seq = max_seq,
                                        .n_kv_heads = (uint32_t)Hkv,
                                        .head_dim = (uint32_t)hd,
                                        .dtype = dt,
                                        .k = rc->k,
                                        .v = rc->v};
        tg->kv.size = sizeof(tg->kv);
        snprintf(tg->kv.layout, sizeof(tg->kv.layout), "contiguous");
        tg->kv.desc = &rc->desc;
        uint32_t pos = tg_tensor(tg, i32, R, -1, "pos");
        tg_in(tg, 0, tg_tensor(tg, f32, R, Hq * hd, "q"));
        tg_in(tg, 1, tg_tensor(tg, f32, R, Hkv * hd, "k"));
        tg_in(tg, 2, tg_tensor(tg, f32, R, Hkv * hd, "v"));
        tg_in(tg, 3, pos);
        tg_out(tg, 0, tg_tensor(tg, f32, R, Hq * hd, "o"));
        weft_op_params *p = &tg->node.p;
        p->i[0] = rnd_u32() % 2, p->i[1] = Hq, p->i[2] = Hkv, p->i[3] = hd;
        p->i[4] = rnd_u32() % 3 ? 0 : rnd_dim(6);
        tg->batch.n_seqs = 2;
        tg->seqs[1].kv_slot = (int32_t)(rnd_u32() % slots);
        tg->seqs[0].kv_slot = (int32_t)(rnd_u32() % slots);
        for (uint32_t r = 0; r < R; r++) {
            tg->seq_of_row[r] = (int32_t)(rnd_u32() % 2);
            ((int32_t *)tg_ptr(tg, pos))[r] = (int32_t)(rnd_u32() % max_seq);
        }
        break;
    }
    case WEFT_OP_SWIGLU:
    case WEFT_OP_ADD:
    case WEFT_OP_ACTIVATION:
    case WEFT_OP_SCALE: {
        uint32_t a = tg_tensor(tg, f32, R, N, "a");
        tg_in(tg, 0, a);
        if (op == WEFT_OP_SWIGLU || op == WEFT_OP_ADD) tg_in(tg, 1, tg_tensor(tg, f32, R, N, "b"));
        tg_out(tg, 0, rnd_u32() % 2 ? a : tg_tensor(tg, f32, R, N, "y"));
        tg->node.p.i[0] = rnd_u32() % 3;
        tg->node.p.f[0] = 0.5f;
        break;
    }
    case WEFT_OP_COPY: {
        uint32_t to = key == i32 ? i32 : dts_float[rnd_u32() % 3];
        tg_in(tg, 0, tg_tensor(tg, key, R, N, "x"));
        tg_out(tg, 0, tg_tensor(tg, to, R, N, "y"));
        tg->node.p.i[0] = rnd_u32() % 2 ? to : 0;
        break;
    }
    case WEFT_OP_SPLIT: {
        uint32_t n = rnd_dim(4);
        int64_t total = 0;
        for (uint32_t i = 0; i < n; i++) {
            int64_t w = rnd_dim(9);
            tg->node.p.i[i] = w;
            total += w;
        }
        tg_in(tg, 0, tg_tensor(tg, key, R, total, "x"));
        for (uint32_t i = 0; i < n; i++)
            tg_out(tg, i, tg_tensor(tg, key, R, tg->node.p.i[i], "y"));
        break;
    }
    default:
        fail_msg("op %u has no random builder", op);
    }
    return T;
}

/* One random corruption of a well-formed node. */
static uint32_t random_mutation(tgraph *tg, uint32_t T) {
    static const uint32_t any_dt[6] = {WEFT_DTYPE_F32, WEFT_DTYPE_BF16, WEFT_DTYPE_F16,
                                       WEFT_DTYPE_I32, WEFT_DTYPE_Q8_0, 999};
    weft_tensor *t = &tg->t[rnd_u32() % tg->g.n_tensors];
    switch (rnd_u32() % 12) {
    case 0:
        t->dtype = any_dt[rnd_u32() % 6];
        break;
    case 1:
        t->shape[rnd_u32() % 2] += (int64_t)(rnd_u32() % 5) - 2;
        break;
    case 2:
        t->rank = rnd_u32() % 4;
        break;
    case 3:
        tg->node.in[rnd_u32() % WEFT_NODE_MAX_IN] = rnd_u32() % 3 ? 99 : WEFT_TENSOR_NONE;
        break;
    case 4:
        tg->node.p.i[rnd_u32() % WEFT_PARAMS_I] = (int64_t)(rnd_u32() % 9) - 3;
        break;
    case 5:
        tg->node.p.f[rnd_u32() % WEFT_PARAMS_F] = rnd_u32() % 2 ? NAN : -1.0f;
        break;
    case 6:
        tg->buf[t->id].bytes = tg->buf[t->id].bytes * (rnd_u32() % 4) / 4;
        break;
    case 7:
        return T + 1 + rnd_u32() % 20; /* more rows than the tensors hold */
    case 8:
        tg->seq_of_row[rnd_u32() % MAX_T] = (int32_t)(rnd_u32() % 5) - 2;
        break;
    case 9:
        tg->logit_rows[rnd_u32() % MAX_T] = (int32_t)(rnd_u32() % 40) - 2;
        break;
    case 10:
        if (tg->kv.desc) {
            weft_kv_contiguous *c = (weft_kv_contiguous *)tg->kv.desc;
            switch (rnd_u32() % 4) {
            case 0:
                c->n_slots += 3;
                break;
            case 1:
                c->max_seq *= 2;
                break;
            case 2:
                c->k[rnd_u32() % 2].bytes /= 2;
                break;
            default:
                c->dtype = any_dt[rnd_u32() % 6];
                break;
            }
        } else {
            tg->node.n_in = rnd_u32() % (WEFT_NODE_MAX_IN + 1);
        }
        break;
    default:
        tg->node.n_out = rnd_u32() % (WEFT_NODE_MAX_OUT + 1);
        break;
    }
    return T;
}

static void test_random_nodes(void **state) {
    fixture *f = *state;
    uint32_t ok = 0, refused = 0;
    for (int it = 0; it < 4000; it++) {
        const weft_op_impl *impl = &f->impls[rnd_u32() % f->n_impls];
        tgraph tg;
        rnd_cache rc;
        memset(&rc, 0, sizeof(rc));
        tg_init(&tg, f, impl->op, "random");
        uint32_t T = random_node(&tg, impl, &rc);
        int mutated = rnd_u32() % 4 != 0;
        for (uint32_t m = mutated ? 1 + rnd_u32() % 3 : 0; m > 0; m--)
            T = random_mutation(&tg, T);
        weft_error err = new_error();
        int32_t accepted = impl->accepts ? impl->accepts(impl->state, &tg.g, &tg.node) : 1;
        weft_exec_ctx ctx;
        memset(&ctx, 0, sizeof(ctx));
        ctx.size = sizeof(ctx);
        ctx.n_tokens = T;
        ctx.graph = &tg.g;
        tg.g.bucket.max_tokens = 64;
        tg.batch.size = sizeof(tg.batch);
        tg.batch.n_tokens = T;
        tg.batch.positions = tg.positions;
        tg.batch.seq_of_row = tg.seq_of_row;
        tg.batch.seqs = tg.seqs;
        tg.batch.logit_rows = tg.logit_rows;
        ctx.batch = &tg.batch;
        ctx.data = tg.buf;
        ctx.kv = tg.kv.desc ? &tg.kv : NULL;
        weft_status s = impl->run(impl->state, &ctx, &tg.node, &err);
        assert_true(s == WEFT_OK || s < 0);
        if (s == WEFT_OK) {
            ok++;
            assert_int_equal(accepted, 1); /* run never takes a node accepts refused */
            if (!mutated) assert_true(accepted);
        } else {
            refused++;
            if (!mutated)
                fprintf(stderr, "well-formed %s node refused: %s\n", cpu_op_label(impl->op),
                        err.message);
            assert_true(mutated);
            assert_true(strlen(err.message) > 0);
        }
        for (int l = 0; l < 2; l++) {
            f->desc->backend->free(f->st, &rc.k[l]);
            f->desc->backend->free(f->st, &rc.v[l]);
        }
        tg_free(&tg);
    }
    fprintf(stderr, "random nodes: %u ran, %u refused\n", ok, refused);
    assert_true(ok > 1000 && refused > 1000);
}

/* Every builtin op the backend promises has an implementation for backend "cpu". */
static void test_registered(void **state) {
    fixture *f = *state;
    const uint32_t ops[] = {WEFT_OP_EMBED,       WEFT_OP_LINEAR,  WEFT_OP_RMSNORM,
                            WEFT_OP_ROPE,        WEFT_OP_SWIGLU,  WEFT_OP_ADD,
                            WEFT_OP_ACTIVATION,  WEFT_OP_LM_HEAD, WEFT_OP_SCALE,
                            WEFT_OP_ADD_RMSNORM, WEFT_OP_COPY,    WEFT_OP_SPLIT};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        assert_non_null(f->ops.find(f->ops.self, ops[i], "cpu", WEFT_DTYPE_F32, "", NULL, NULL));
    assert_non_null(
        f->ops.find(f->ops.self, WEFT_OP_LINEAR, "cpu", WEFT_DTYPE_BF16, "", NULL, NULL));
    assert_non_null(
        f->ops.find(f->ops.self, WEFT_OP_LINEAR, "cpu", WEFT_DTYPE_F16, "", NULL, NULL));
    assert_non_null(f->ops.find(f->ops.self, WEFT_OP_ATTENTION, "cpu", WEFT_DTYPE_F32, "contiguous",
                                NULL, NULL));
    for (uint32_t i = 0; i < f->n_impls; i++) {
        assert_string_equal(f->impls[i].backend, "cpu");
        assert_non_null(f->impls[i].run);
    }
}

/* Options: threads 0 means every core; a negative count is refused. */
static void test_options(void **state) {
    fixture *f = *state;
    weft_error err = new_error();
    weft_option opt = {.key = "threads", .type = WEFT_OPTION_INT, .i = -2};
    weft_options opts = {1, &opt};
    void *st = NULL;
    assert_int_equal(f->desc->create(&f->host, &opts, &st, &err), WEFT_ERR_INVALID);
    assert_non_null(strstr(err.message, "threads"));
    assert_null(st);
    opt.i = 0;
    assert_int_equal(f->desc->create(&f->host, &opts, &st, &err), WEFT_OK);
    weft_device_info info;
    memset(&info, 0, sizeof(info));
    info.size = sizeof(info);
    assert_int_equal(f->desc->backend->device_info(st, &info, &err), WEFT_OK);
    assert_true(info.compute_units >= 1);
    f->desc->destroy(st);
}

/* ---- stories260K end to end against Hugging Face transformers ----------------------------- */
/* One tensor of reference.safetensors, read with its dtype and element count checked. */
static void *read_reference(const char *path, const char *name, const char *dtype, size_t count) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    uint64_t hlen = 0;
    void *out = NULL;
    char *hdr = NULL;
    if (fread(&hlen, 8, 1, fp) != 1 || hlen > (1u << 20)) goto done;
    hdr = calloc(1, (size_t)hlen + 1);
    if (!hdr || fread(hdr, 1, (size_t)hlen, fp) != hlen) goto done;
    json_error_t jerr;
    json_t *root = json_loads(hdr, 0, &jerr);
    json_t *t = root ? json_object_get(root, name) : NULL;
    json_t *off = t ? json_object_get(t, "data_offsets") : NULL;
    const char *dt = t ? json_string_value(json_object_get(t, "dtype")) : NULL;
    if (off && dt && strcmp(dt, dtype) == 0) {
        uint64_t a = (uint64_t)json_integer_value(json_array_get(off, 0));
        uint64_t b = (uint64_t)json_integer_value(json_array_get(off, 1));
        if (b - a == count * 4 && fseek(fp, (long)(8 + hlen + a), SEEK_SET) == 0) {
            out = malloc(count * 4);
            if (out && fread(out, 4, count, fp) != count) free(out), out = NULL;
        }
    }
    json_decref(root);
done:
    free(hdr);
    fclose(fp);
    return out;
}

static const char *shared_dir(void) {
    const char *s = getenv("WEFT_SHARED_DIR");
    return s && *s ? s : WEFT_SHARED_DIR;
}

/* Prefill of the reference's 256 tokens in chunks of 16 (logits of every row against HF's
 * no-cache forward pass), then greedy decoding from BOS one token per step (tokens against
 * HF's greedy continuation). This runs the real checkpoint through every f32 kernel and the
 * kv cache across steps. */
static void test_stories260k(void **state) {
    fixture *f = *state;
    char path[1024], msg[600];
    snprintf(path, sizeof(path), "%s/models/stories260K/stories260K.bin", shared_dir());
    stories_model m;
    if (stories_load(path, &m, msg, sizeof(msg))) fprintf(stderr, "%s\n", msg);
    assert_non_null(m.data);
    snprintf(path, sizeof(path), "%s/reference/stories260K/reference.safetensors", shared_dir());
    const int T = 256;
    int32_t *ids = read_reference(path, "input_ids", "I32", (size_t)T);
    int32_t *greedy = read_reference(path, "greedy_ids", "I32", (size_t)T);
    float *ref = read_reference(path, "logits", "F32", (size_t)T * m.vocab);
    assert_non_null(ids);
    assert_non_null(greedy);
    assert_non_null(ref);
    stories_engine *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    const uint32_t chunk = 16;
    if (stories_build(e, &m, f->desc->backend, f->st, &f->ops, chunk, (uint32_t)T, msg,
                      sizeof(msg)))
        fprintf(stderr, "%s\n", msg);
    assert_int_equal(e->g.n_nodes, 1 + 15 * m.n_layers + 2);
    double max_diff = 0;
    for (int p0 = 0; p0 < T; p0 += (int)chunk) {
        const float *lg = NULL;
        if (stories_step(e, ids + p0, chunk, p0, 1, &lg, msg, sizeof(msg)))
            fprintf(stderr, "%s\n", msg);
        assert_non_null(lg);
        for (uint32_t r = 0; r < chunk; r++)
            for (int v = 0; v < m.vocab; v++) {
                double d = fabs((double)lg[r * m.vocab + v] - ref[(p0 + (int)r) * m.vocab + v]);
                if (d > max_diff) max_diff = d;
            }
    }
    /* Logits are O(10); f32 sums in a different order differ by ~2e-5 here. */
    fprintf(stderr, "stories260K: max |logit - reference| = %g\n", max_diff);
    assert_true(max_diff <= 2e-4);
    int32_t tok = greedy[0];
    for (int pos = 0; pos + 1 < T; pos++) {
        const float *lg = NULL;
        if (stories_step(e, &tok, 1, pos, 0, &lg, msg, sizeof(msg))) fprintf(stderr, "%s\n", msg);
        assert_non_null(lg);
        tok = stories_argmax(lg, (uint32_t)m.vocab);
        if (tok != greedy[pos + 1])
            fprintf(stderr, "greedy token %d: got %d, reference %d\n", pos + 1, tok,
                    greedy[pos + 1]);
        assert_int_equal(tok, greedy[pos + 1]);
    }
    stories_free(e);
    free(e);
    free(ids), free(greedy), free(ref), free(m.data);
}

#define CPU_TESTS                                                                                  \
    cmocka_unit_test(test_negotiate), cmocka_unit_test(test_memory),                               \
        cmocka_unit_test(test_registered), cmocka_unit_test(test_options),                         \
        cmocka_unit_test(test_linear), cmocka_unit_test(test_linear_repeat),                       \
        cmocka_unit_test(test_lm_head), cmocka_unit_test(test_embed),                              \
        cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_add_rmsnorm),                        \
        cmocka_unit_test(test_rope), cmocka_unit_test(test_rope_closed_form),                      \
        cmocka_unit_test(test_attention), cmocka_unit_test(test_attention_long),                   \
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_copy),                           \
        cmocka_unit_test(test_split), cmocka_unit_test(test_bad_shapes),                           \
        cmocka_unit_test(test_random_nodes), cmocka_unit_test(test_stories260k)

int main(void) {
    const struct CMUnitTest tests[] = {CPU_TESTS};
    int failed = cmocka_run_group_tests_name("cpu ops, 1 thread", tests, setup_1, fixture_teardown);
    failed += cmocka_run_group_tests_name("cpu ops, 2 threads", tests, setup_2, fixture_teardown);
    return failed;
}
