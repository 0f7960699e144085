/* The fuse.* techniques through the real engine: each pass alone and all together, on the cpu
 * backend with stories260K (converted from the shared llama2.c checkpoint), must give the same
 * 256 greedy tokens as the unfused baseline, and the decode graph must have the node counts the
 * rewrite promises (fewer linear, add, rmsnorm, swiglu nodes, counted from the printed graph).
 * fuse.swiglu's cpu kernel is checked on its own against a double reference (f32 and bf16
 * weights), and its option bound is refused by name.
 *
 * The same comparison runs on the cuda backend when WEFT_FUSE_CUDA_MODELS names model
 * directories (comma-separated, "stories" for the converted stories260K; the GPU machine's
 * check, plugins/backends/cuda/bench/gpu-fuse-2.sh): every
 * shipped combination against the cuda baseline of the same model, 256 greedy tokens after a
 * prompt of WEFT_FUSE_PROMPT tokens (default 16). Without it that test is skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlfcn.h>
#include <math.h>

#include "engine/engine.h"
#include "files/llama2c.h"
#include "graph/graph.h"
#include "plugin/host.h"
#include "util/error.h"

#include "stories_fixture.h"

#define GEN 256

static char tmp_dir[64];
static char stories[128];

/* stories260K converted straight into the group's temporary directory (the manifests the tests
 * write go beside it; teardown removes the whole directory) */
static int group_setup(void **state) {
    (void)state;
    if (stories_convert(tmp_dir, "weft-fuse")) return -1;
    snprintf(stories, sizeof(stories), "%s", tmp_dir);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A candidate manifest in the temp dir: backend cpu (one thread) or cuda, the given
 * techniques (comma-separated names, "" for none). */
static void write_manifest(const char *path, const char *backend, const char *techniques) {
    assert_int_equal(stories_manifest(path, "fuse-test", stories, backend, techniques), 0);
}

typedef struct collected {
    int32_t ids[GEN + 8];
    uint32_t n;
    uint32_t finish;
} collected;

static void on_event(void *user, const weft_token_event *ev) {
    collected *c = user;
    if (ev->token >= 0 && c->n < GEN + 8) c->ids[c->n++] = ev->token;
    if (ev->finish) c->finish = ev->finish;
}

/* Node counts of the decode graph, by op name. */
typedef struct counts {
    int linear, add, rmsnorm, add_rmsnorm, swiglu, split, rope, fused_swiglu, fused_rope;
    int attention, fused_rope_attention;
} counts;

static int count_of(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Opens the candidate, counts the decode graph's nodes, generates GEN greedy tokens after the
 * prompt, closes. */
static void run_candidate(const char *manifest, const char *model, uint32_t n_prompt,
                          collected *out, counts *cnt) {
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.manifest_path = manifest;
    o.model_dir = model;
    o.threads = 1;
    weft_error err;
    weft_error_clear(&err);
    weft_engine *e = NULL;
    if (weft_engine_open(&o, &e, &err) != WEFT_OK)
        fail_msg("open %s: %s: %s", manifest, err.source, err.message);
    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    char hash[33];
    assert_int_equal(weft_engine_print_graph(e, 1, mf, hash, &err), WEFT_OK);
    fclose(mf);
    cnt->linear = count_of(text, ": linear(");
    cnt->add = count_of(text, ": add(");
    cnt->rmsnorm = count_of(text, ": rmsnorm(");
    cnt->add_rmsnorm = count_of(text, ": add_rmsnorm(");
    cnt->swiglu = count_of(text, ": swiglu(");
    cnt->split = count_of(text, ": split(");
    cnt->rope = count_of(text, ": rope(");
    cnt->fused_swiglu = count_of(text, ": fuse.linear_swiglu(");
    cnt->fused_rope = count_of(text, ": fuse.qkv_rope(");
    cnt->attention = count_of(text, ": attention(");
    cnt->fused_rope_attention = count_of(text, ": fuse.rope_attention(");
    free(text);
    const weft_model_config *cfg = weft_engine_config(e);
    int32_t prompt[256];
    assert_true(n_prompt >= 1 && n_prompt <= 256);
    for (uint32_t i = 0; i < n_prompt; i++)
        prompt[i] = (int32_t)((7919u * (i + 1)) % cfg->vocab_size);
    if (cfg->bos_token_id >= 0) prompt[0] = cfg->bos_token_id;
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.max_tokens = GEN;
    rp.ignore_eos = 1;
    rp.detokenize = 0;
    rp.callback = on_event;
    rp.user = out;
    memset(out, 0, sizeof(*out));
    uint64_t id;
    if (weft_request_submit(e, prompt, n_prompt, &rp, &id, &err) != WEFT_OK)
        fail_msg("submit: %s", err.message);
    while (weft_engine_active(e))
        if (weft_engine_step(e, &err) != WEFT_OK) fail_msg("step: %s", err.message);
    weft_engine_close(e);
    assert_int_equal(out->n, GEN);
}

static int first_difference(const collected *a, const collected *b) {
    for (uint32_t i = 0; i < a->n && i < b->n; i++)
        if (a->ids[i] != b->ids[i]) return (int)i;
    return a->n == b->n ? -1 : (int)(a->n < b->n ? a->n : b->n);
}

/* ---- cpu -------------------------------------------------------------------------------- */
static void test_cpu_stories(void **state) {
    (void)state;
    static const struct {
        const char *techniques;
        int rr, sw, mp;
    } combos[] = {
        {"", 0, 0, 0},
        {"fuse.rmsnorm-residual", 1, 0, 0},
        {"fuse.swiglu", 0, 1, 0},
        {"fuse.merged-projections", 0, 0, 1},
        {"fuse.rmsnorm-residual, fuse.swiglu, fuse.merged-projections", 1, 1, 1},
    };
    char manifest[128];
    snprintf(manifest, sizeof(manifest), "%s/cand.yaml", tmp_dir);
    collected base, got;
    counts c0, c;
    for (size_t i = 0; i < sizeof(combos) / sizeof(combos[0]); i++) {
        write_manifest(manifest, "cpu", combos[i].techniques);
        run_candidate(manifest, stories, 16, i == 0 ? &base : &got, i == 0 ? &c0 : &c);
        if (i == 0) {
            /* the unfused llama graph: 7 linears, 2 adds, 2 rmsnorms, 1 swiglu per layer */
            assert_int_equal(c0.linear % 7, 0);
            int L = c0.linear / 7;
            assert_true(L >= 1);
            assert_int_equal(c0.add, 2 * L);
            assert_int_equal(c0.rmsnorm, 2 * L + 1);
            assert_int_equal(c0.swiglu, L);
            continue;
        }
        int L = c0.linear / 7;
        int d = first_difference(&base, &got);
        printf("cpu stories260K [%s]: linear %d add %d rmsnorm %d add_rmsnorm %d swiglu %d "
               "split %d fused_swiglu %d; greedy %s\n",
               combos[i].techniques, c.linear, c.add, c.rmsnorm, c.add_rmsnorm, c.swiglu, c.split,
               c.fused_swiglu, d < 0 ? "identical" : "differs");
        if (d >= 0) fail_msg("greedy token %d differs: %d vs %d", d, got.ids[d], base.ids[d]);
        /* node counts the rewrites promise */
        int linear = 7 * L;
        if (combos[i].mp) linear -= 3 * L;                    /* q,k,v -> 1 and gate,up -> 1 */
        if (combos[i].sw) linear -= combos[i].mp ? L : 2 * L; /* gate/up linears -> fused op */
        assert_int_equal(c.linear, linear);
        assert_int_equal(c.fused_swiglu, combos[i].sw ? L : 0);
        assert_int_equal(c.swiglu, combos[i].sw ? 0 : L);
        assert_int_equal(c.split, combos[i].mp ? (combos[i].sw ? L : 2 * L) : 0);
        assert_int_equal(c.add, combos[i].rr ? 0 : 2 * L);
        assert_int_equal(c.add_rmsnorm, combos[i].rr ? 2 * L : 0);
        assert_int_equal(c.rmsnorm, combos[i].rr ? 1 : 2 * L + 1);
    }
}

/* ---- the cpu kernel of fuse.linear_swiglu against a double reference -------------------- */
static weft_op_impl got_impl;
static weft_status grab(void *self, const weft_op_impl *impl, weft_error *err) {
    (void)self, (void)err;
    got_impl = *impl;
    return WEFT_OK;
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

static void test_cpu_linear_swiglu_kernel(void **state) {
    (void)state;
    char path[1024];
    const char *dir = getenv("WEFT_TEST_PLUGIN_DIR"); /* a bundle moved to another machine */
    snprintf(path, sizeof(path), "%s/fuse.swiglu/libweft-fuse-swiglu.so",
             dir && dir[0] ? dir : WEFT_BUILD_PLUGIN_DIR);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) fail_msg("dlopen %s: %s", path, dlerror());
    weft_plugin_entry_fn entry = (weft_plugin_entry_fn)dlsym(dl, WEFT_PLUGIN_ENTRY_NAME);
    assert_non_null(entry);
    const weft_plugin_descriptor *d;
    uint32_t chosen;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(entry(1, 1, &chosen, &d, &err), WEFT_OK);
    weft_host *host = weft_host_new();
    assert_non_null(host);
    assert_int_equal(weft_host_register_service(host, WEFT_SERVICE_GRAPH, weft_graph_service_get()),
                     WEFT_OK);
    /* an out-of-range option is refused by name */
    weft_option bad = {.key = "max_tokens", .type = WEFT_OPTION_INT, .i = 9};
    weft_options bad_opts = {1, &bad};
    void *st = NULL;
    assert_int_not_equal(d->create(weft_host_services_of(host), &bad_opts, &st, &err), WEFT_OK);
    assert_non_null(strstr(err.message, "max_tokens"));
    weft_error_clear(&err);
    weft_option opt = {.key = "max_tokens", .type = WEFT_OPTION_INT, .i = 8};
    weft_options opts = {1, &opt};
    assert_int_equal(d->create(weft_host_services_of(host), &opts, &st, &err), WEFT_OK);
    weft_ops_service ops = {.size = sizeof(ops), .version = 1, .add = grab};
    memset(&got_impl, 0, sizeof(got_impl));
    assert_int_equal(d->opset->register_ops(st, "cpu", &ops, &err), WEFT_OK);
    assert_non_null(got_impl.run);
    /* x (T,K) f32; merged gate|up (2F,K) in f32 and in bf16; y (T,F) */
    enum { T = 3, F = 37, K = 203 };
    static float x[T * K], w[2 * F * K], y[T * F];
    static uint16_t wb[2 * F * K];
    uint64_t r = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < T * K; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (float)((r >> 40) * (1.0 / 8388608.0)) - 1.0f;
    }
    for (int i = 0; i < 2 * F * K; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        wb[i] = to_bf16(((float)((r >> 40) * (1.0 / 8388608.0)) - 1.0f) * 0.2f);
        w[i] = from_bf16(wb[i]);
    }
    for (int dt = 0; dt < 2; dt++) {
        weft_tensor t[3];
        memset(t, 0, sizeof(t));
        int64_t shp[3][2] = {{T, K}, {2 * F, K}, {T, F}};
        for (int i = 0; i < 3; i++) {
            t[i].id = (uint32_t)i;
            t[i].rank = 2;
            t[i].shape[0] = shp[i][0];
            t[i].shape[1] = shp[i][1];
            t[i].dtype = WEFT_DTYPE_F32;
        }
        t[1].dtype = dt ? WEFT_DTYPE_BF16 : WEFT_DTYPE_F32;
        weft_buffer buf[3] = {
            {.ptr = x, .bytes = sizeof(x)},
            {.ptr = dt ? (void *)wb : (void *)w, .bytes = dt ? sizeof(wb) : sizeof(w)},
            {.ptr = y, .bytes = sizeof(y)}};
        weft_node n = {.op = got_impl.op, .n_in = 2, .n_out = 1, .in = {0, 1}, .out = {2}};
        n.p.i[0] = 1; /* merged */
        weft_graph g = {.size = sizeof(g),
                        .n_tensors = 3,
                        .n_nodes = 1,
                        .tensors = t,
                        .nodes = &n,
                        .bucket = {.size = sizeof(weft_bucket), .max_tokens = T}};
        assert_true(got_impl.accepts(got_impl.state, &g, &n));
        weft_exec_ctx c = {.size = sizeof(c), .n_tokens = T, .graph = &g, .data = buf};
        for (int i = 0; i < T * F; i++)
            y[i] = NAN;
        assert_int_equal(got_impl.run(got_impl.state, &c, &n, &err), WEFT_OK);
        double maxerr = 0, maxref = 0;
        for (int tt = 0; tt < T; tt++)
            for (int o = 0; o < F; o++) {
                double gs = 0, us = 0;
                for (int k = 0; k < K; k++) {
                    gs += (double)x[tt * K + k] * w[o * K + k];
                    us += (double)x[tt * K + k] * w[(F + o) * K + k];
                }
                double ref = gs / (1 + exp(-gs)) * us;
                if (fabs(ref) > maxref) maxref = fabs(ref);
                double e = fabs(ref - y[tt * F + o]);
                if (!(e <= maxerr)) maxerr = isnan(e) ? INFINITY : e;
            }
        printf("cpu fuse.linear_swiglu (%s weights, merged): rel err %.2e\n", dt ? "bf16" : "f32",
               maxerr / maxref);
        assert_true(maxerr / maxref < 1e-5);
    }
    d->destroy(st);
    weft_host_free(host);
    dlclose(dl);
}

/* ---- cuda (GPU machine) ----------------------------------------------------------------- */
static void test_cuda_models(void **state) {
    (void)state;
    const char *models = getenv("WEFT_FUSE_CUDA_MODELS");
    if (!models || !models[0]) {
        printf("SKIPPED: WEFT_FUSE_CUDA_MODELS not set (the GPU machine's check)\n");
        skip();
    }
    const char *pe = getenv("WEFT_FUSE_PROMPT");
    uint32_t n_prompt = pe && atoi(pe) > 0 ? (uint32_t)atoi(pe) : 16;
    static const char *const combos[] = {
        "",
        "fuse.rmsnorm-residual",
        "fuse.qkv-rope",
        "fuse.swiglu",
        "fuse.merged-projections",
        "fuse.merged-projections, fuse.qkv-rope, fuse.swiglu",
        "fuse.rmsnorm-residual, fuse.qkv-rope, fuse.swiglu, fuse.merged-projections",
        "fuse.qkv-rope, fuse.rope-attention",
        "fuse.merged-projections, fuse.qkv-rope, fuse.rope-attention",
    };
    char manifest[128], list[2048];
    snprintf(manifest, sizeof(manifest), "%s/cand-cuda.yaml", tmp_dir);
    snprintf(list, sizeof(list), "%s", models);
    int failures = 0;
    for (char *save = NULL, *m = strtok_r(list, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        if (!strcmp(m, "stories")) m = stories; /* the checkpoint converted in setup */
        collected base, got;
        counts c0, c;
        for (size_t i = 0; i < sizeof(combos) / sizeof(combos[0]); i++) {
            write_manifest(manifest, "cuda", combos[i]);
            run_candidate(manifest, m, n_prompt, i == 0 ? &base : &got, i == 0 ? &c0 : &c);
            if (i == 0) continue;
            int d = first_difference(&base, &got);
            printf("cuda %s [%s]: linear %d/%d rope %d fused_rope %d split %d add_rmsnorm %d "
                   "fused_swiglu %d; greedy %s",
                   m, combos[i], c.linear, c0.linear, c.rope, c.fused_rope, c.split, c.add_rmsnorm,
                   c.fused_swiglu, d < 0 ? "identical" : "DIFFERS");
            if (d >= 0) printf(" at token %d (%d vs %d)", d, got.ids[d], base.ids[d]);
            printf("\n");
            fflush(stdout);
            failures += d >= 0;
            if (strstr(combos[i], "qkv-rope")) assert_int_equal(c.rope, 0);
            if (strstr(combos[i], "rope-attention")) { /* every attention fused */
                assert_int_equal(c.attention, 0);
                assert_int_equal(c.fused_rope_attention, c0.attention);
                assert_int_equal(c.fused_rope, 0);
            }
        }
    }
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_stories),
        cmocka_unit_test(test_cpu_linear_swiglu_kernel),
        cmocka_unit_test(test_cuda_models),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
