/* The loader against every fake plugin (plugins/fakes), each refusal asserted word for word;
 * a tampered copy of a good library (refused naming both hashes and the file); the
 * /proc/self/fd reuse case (a second library loaded under a reused descriptor number must be
 * the second library); a crash in a constructor (in a child: it must die by SIGSEGV, not take
 * the test down); and the per-engine host services. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "plugin/candidate.h"
#include "plugin/host.h"
#include "plugin/loader.h"
#include "plugin/manifest.h"
#include "util/error.h"
#include "util/hash.h"

#define FAKES WEFT_BINARY_DIR "/tests/fakes"

typedef struct fixture {
    weft_plugin_manifest *m;
    char library[2048];
    weft_plugin_expect ex;
} fixture;

static weft_host *host;
static char tmpdir[256];

static void fixture_load(fixture *f, const char *bundle) {
    char path[1024];
    weft_error err;
    weft_error_clear(&err);
    /* the template builds into the normal plugin dir, the fakes into the test-only one */
    const char *dir = strncmp(bundle, "template.", 9) ? FAKES : WEFT_BUILD_PLUGIN_DIR;
    snprintf(path, sizeof(path), "%s/%s/manifest.yaml", dir, bundle);
    weft_status st = weft_plugin_manifest_load(path, &f->m, &err);
    if (st != WEFT_OK) fail_msg("%s: %s", path, err.message);
    snprintf(f->library, sizeof(f->library), "%s/%s/%s", dir, bundle, f->m->library);
    weft_plugin_expect ex = {f->m->name,    f->m->version_text, f->m->kind, f->m->slots,
                             f->m->abi_min, f->m->abi_max,      NULL};
    f->ex = ex;
}

static void fixture_free(fixture *f) {
    weft_plugin_manifest_free(f->m);
}

/* Opens bundle and expects refusal with exactly `want`. */
static void expect_refused(const char *bundle, weft_status code, const char *want) {
    fixture f;
    fixture_load(&f, bundle);
    weft_loaded_plugin p;
    weft_error err;
    weft_error_clear(&err);
    weft_status st = weft_plugin_open(f.library, &f.ex, &p, &err);
    assert_int_equal(st, code);
    assert_string_equal(err.message, want);
    assert_string_equal(err.source, f.m->name);
    assert_null(p.dl);
    assert_int_equal(p.fd, -1);
    weft_plugin_close(&p); /* harmless on a refused record */
    fixture_free(&f);
}

static int setup(void **state) {
    host = weft_host_new();
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft-test-loader-XXXXXX");
    return host && mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    weft_host_free(host);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_good_loads_and_runs(void **state) {
    fixture f;
    fixture_load(&f, "fake.good");
    weft_loaded_plugin p;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_plugin_open(f.library, &f.ex, &p, &err), WEFT_OK);
    assert_int_equal(p.abi_version, 1);
    assert_int_equal(p.kind, WEFT_KIND_FEATURE);
    assert_int_equal(p.slots, WEFT_SLOT_FEATURE);
    assert_true(p.fd >= 0);
    char hex[WEFT_SHA256_HEX_LEN + 1];
    assert_int_equal(weft_hash_sha256_file(f.library, hex, &err), WEFT_OK);
    assert_string_equal(p.sha256, hex);

    /* options from the candidate: token 3, bias 2.5 (validated against the schema) */
    weft_manifest_value vals[2];
    memset(vals, 0, sizeof(vals));
    snprintf(vals[0].key, sizeof(vals[0].key), "token");
    vals[0].text = "3";
    snprintf(vals[1].key, sizeof(vals[1].key), "bias");
    vals[1].text = "2.5";
    weft_options opts;
    assert_int_equal(weft_options_build(f.m, vals, 2, "test", "options", &opts, &err), WEFT_OK);
    assert_int_equal(weft_plugin_instantiate(&p, weft_host_services_of(host), &opts, &err),
                     WEFT_OK);
    weft_options_free(&opts); /* the loader keeps its own copy */
    float logits[5] = {0, 1, 2, 3, 4};
    assert_int_equal(p.desc->feature->process_logits(p.state, 1, logits, 5, &err), WEFT_OK);
    assert_true(logits[3] == 5.5f && logits[2] == 2.0f && logits[4] == 4.0f);
    /* the plugin validates its arguments: token 3 is outside a vocabulary of 3 */
    assert_int_equal(p.desc->feature->process_logits(p.state, 1, logits, 3, &err),
                     WEFT_ERR_INVALID);
    assert_string_equal(err.message, "token 3 outside the vocabulary of 3");
    assert_int_equal(p.opts.count, 2);
    assert_int_equal(weft_plugin_instantiate(&p, weft_host_services_of(host), NULL, &err),
                     WEFT_ERR_INVALID);
    weft_plugin_close(&p);
    assert_null(p.dl);
    weft_plugin_close(&p);
    fixture_free(&f);
}

static void test_refused_negotiation(void **state) {
    expect_refused("fake.abi7", WEFT_ERR_ABI,
                   "plugin fake.abi7 1.0.0: built for ABI 7, this runtime speaks 1..1 (plugin "
                   "says: speaks ABI 7..7, the host speaks 1..1)");
}

static void test_old_struct_size(void **state) {
    char want[256];
    snprintf(want, sizeof(want),
             "plugin fake.old-size 1.0.0: descriptor size %zu is smaller than the ABI v1 "
             "descriptor (%zu bytes)",
             offsetof(weft_plugin_descriptor, backend), sizeof(weft_plugin_descriptor));
    expect_refused("fake.old-size", WEFT_ERR_ABI, want);
}

static void test_name_mismatch(void **state) {
    expect_refused("fake.wrong-name", WEFT_ERR_MISMATCH,
                   "plugin fake.wrong-name 1.0.0: descriptor name 'fake.other' differs from "
                   "manifest name 'fake.wrong-name'");
}

static void test_reserved_nonzero(void **state) {
    expect_refused("fake.reserved", WEFT_ERR_ABI,
                   "plugin fake.reserved 1.0.0: descriptor reserved[2] is 0xdeadbeef, expected 0 "
                   "(reserved fields must be zero)");
}

static void test_missing_optional_hooks(void **state) {
    fixture f;
    fixture_load(&f, "fake.no-optional");
    weft_loaded_plugin p;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_plugin_open(f.library, &f.ex, &p, &err), WEFT_OK);
    weft_options opts;
    assert_int_equal(weft_options_build(f.m, NULL, 0, "test", "options", &opts, &err), WEFT_OK);
    assert_int_equal(weft_plugin_instantiate(&p, weft_host_services_of(host), &opts, &err),
                     WEFT_OK);
    weft_options_free(&opts);
    assert_null(p.desc->destroy);
    assert_null(p.desc->kv->prefix_attach);
    assert_null(p.desc->pass->derive_weight);
    /* the required hooks work: 4 slots (the schema default), then WEFT_AGAIN */
    int32_t slot;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(p.desc->kv->open(p.state, (uint64_t)i, &slot, &err), WEFT_OK);
        assert_int_equal(slot, i);
    }
    assert_int_equal(p.desc->kv->open(p.state, 9, &slot, &err), WEFT_AGAIN);
    p.desc->kv->close(p.state, 2);
    assert_int_equal(p.desc->kv->open(p.state, 9, &slot, &err), WEFT_OK);
    assert_int_equal(slot, 2);
    weft_plugin_close(&p);
    fixture_free(&f);
}

static void test_failing_create(void **state) {
    fixture f;
    fixture_load(&f, "fake.create-fails");
    weft_loaded_plugin p;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_plugin_open(f.library, &f.ex, &p, &err), WEFT_OK);
    weft_options opts;
    assert_int_equal(weft_options_build(f.m, NULL, 0, "test", "options", &opts, &err), WEFT_OK);
    assert_int_equal(weft_plugin_instantiate(&p, weft_host_services_of(host), &opts, &err),
                     WEFT_ERR_DEVICE);
    assert_string_equal(err.message,
                        "plugin fake.create-fails 1.0.0: create failed: refusing to start: no "
                        "device");
    assert_int_equal(p.created, 0);
    weft_options_free(&opts);
    weft_plugin_close(&p);
    fixture_free(&f);
}

static void test_manifest_disagrees(void **state) {
    fixture f;
    fixture_load(&f, "fake.good");
    weft_loaded_plugin p;
    weft_error err;
    weft_error_clear(&err);
    f.ex.version = "1.0.1";
    assert_int_equal(weft_plugin_open(f.library, &f.ex, &p, &err), WEFT_ERR_MISMATCH);
    assert_string_equal(err.message, "plugin fake.good 1.0.1: descriptor version '1.0.0' "
                                     "differs from manifest version '1.0.1'");
    f.ex.version = "1.0.0";
    f.ex.kind = WEFT_KIND_TECHNIQUE;
    assert_int_equal(weft_plugin_open(f.library, &f.ex, &p, &err), WEFT_ERR_MISMATCH);
    assert_string_equal(err.message, "plugin fake.good 1.0.0: descriptor kind 4 (feature) "
                                     "differs from manifest kind 3 (technique)");
    f.ex.kind = WEFT_KIND_FEATURE;
    f.ex.slots = WEFT_SLOT_FEATURE | WEFT_SLOT_PASS;
    assert_int_equal(weft_plugin_open(f.library, &f.ex, &p, &err), WEFT_ERR_MISMATCH);
    assert_string_equal(err.message, "plugin fake.good 1.0.0: descriptor slots 'feature' differ "
                                     "from manifest slots 'pass,feature'");
    f.ex.slots = WEFT_SLOT_FEATURE;
    f.ex.abi_min = f.ex.abi_max = 2; /* manifest claims ABI 2; the library negotiated 1 */
    assert_int_equal(weft_plugin_open(f.library, &f.ex, &p, &err), WEFT_ERR_ABI);
    assert_string_equal(err.message, "plugin fake.good 1.0.0: negotiated ABI 1 is outside its "
                                     "manifest's range 2..2");
    fixture_free(&f);
}

static void copy_file(const char *from, const char *to, long flip_at) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    int c;
    long i = 0;
    while ((c = fgetc(in)) != EOF) {
        if (i++ == flip_at) c ^= 0x01;
        fputc(c, out);
    }
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static void test_tampered_library(void **state) {
    fixture f;
    fixture_load(&f, "fake.good");
    weft_error err;
    weft_error_clear(&err);
    char good[WEFT_SHA256_HEX_LEN + 1], bad[WEFT_SHA256_HEX_LEN + 1];
    assert_int_equal(weft_hash_sha256_file(f.library, good, &err), WEFT_OK);

    char copy[512];
    snprintf(copy, sizeof(copy), "%s/libweft-fake-good.so", tmpdir);
    /* untouched copy with the lock's hash: loads */
    copy_file(f.library, copy, -1);
    f.ex.sha256 = good;
    weft_loaded_plugin p;
    assert_int_equal(weft_plugin_open(copy, &f.ex, &p, &err), WEFT_OK);
    weft_plugin_close(&p);

    /* one bit flipped in the middle of the file: refused before dlopen, naming both hashes */
    copy_file(f.library, copy, 2000);
    assert_int_equal(weft_hash_sha256_file(copy, bad, &err), WEFT_OK);
    assert_string_not_equal(good, bad);
    assert_int_equal(weft_plugin_open(copy, &f.ex, &p, &err), WEFT_ERR_MISMATCH);
    char want[512];
    snprintf(want, sizeof(want),
             "plugin fake.good 1.0.0: library hash differs from lock: expected %s, found %s (%s)",
             good, bad, copy);
    assert_string_equal(err.message, want);

    /* a missing library names the path */
    snprintf(copy, sizeof(copy), "%s/nothing-here.so", tmpdir);
    assert_int_equal(weft_plugin_open(copy, &f.ex, &p, &err), WEFT_ERR_NOT_FOUND);
    snprintf(want, sizeof(want),
             "plugin fake.good 1.0.0: cannot open library %s: No such file or directory", copy);
    assert_string_equal(err.message, want);
    fixture_free(&f);
}

/* Loading A then B where B gets A's old descriptor number: the dynamic linker matches
 * /proc/self/fd/N by name, so B must not come back as A. */
static void test_descriptor_reuse(void **state) {
    fixture a, b;
    fixture_load(&a, "fake.good");
    fixture_load(&b, "fake.no-optional");
    weft_error err;
    weft_error_clear(&err);
    weft_loaded_plugin pa, pb, pa2;
    assert_int_equal(weft_plugin_open(a.library, &a.ex, &pa, &err), WEFT_OK);
    int fd_a = pa.fd;
    /* keep A loaded by a second open of the same file (a second fd), then close the first */
    assert_int_equal(weft_plugin_open(a.library, &a.ex, &pa2, &err), WEFT_OK);
    weft_plugin_close(&pa);
    assert_int_equal(weft_plugin_open(b.library, &b.ex, &pb, &err), WEFT_OK);
    assert_int_equal(pb.fd, fd_a);                          /* the number was reused ... */
    assert_string_equal(pb.desc->name, "fake.no-optional"); /* ... and B is B */
    weft_plugin_close(&pb);
    weft_plugin_close(&pa2);
    fixture_free(&a);
    fixture_free(&b);
}

static void test_crash_in_constructor(void **state) {
    fixture f;
    fixture_load(&f, "fake.crash-load");
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* plain default disposition, as `weft plugins check` does, so sanitizers or debuggers
         * that catch SIGSEGV do not turn the crash into an exit code */
        signal(SIGSEGV, SIG_DFL);
        weft_loaded_plugin p;
        weft_error err;
        weft_error_clear(&err);
        weft_plugin_open(f.library, &f.ex, &p, &err);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGSEGV);
    fixture_free(&f);
}

typedef struct test_service {
    uint32_t size, version;
    void *self;
    int (*answer)(void *self);
} test_service;

static int answer(void *self) {
    return *(int *)self;
}

static void test_host_services(void **state) {
    weft_host *a = weft_host_new(), *b = weft_host_new();
    assert_non_null(a);
    assert_non_null(b);
    const weft_host_services *sa = weft_host_services_of(a), *sb = weft_host_services_of(b);
    assert_int_equal(sa->size, sizeof(weft_host_services));
    assert_int_equal(sa->abi_version, WEFT_ABI_VERSION);
    int forty_two = 42;
    test_service svc = {sizeof(test_service), 2, &forty_two, answer};
    assert_int_equal(weft_host_register_service(a, WEFT_SERVICE_OPS, &svc), WEFT_OK);
    const test_service *got = sa->get_service(sa, WEFT_SERVICE_OPS, 1);
    assert_ptr_equal(got, &svc);
    assert_int_equal(got->answer(got->self), 42);
    assert_ptr_equal(sa->get_service(sa, WEFT_SERVICE_OPS, 2), &svc);
    assert_null(sa->get_service(sa, WEFT_SERVICE_OPS, 3));   /* too old */
    assert_null(sa->get_service(sa, WEFT_SERVICE_GRAPH, 1)); /* absent */
    assert_null(sb->get_service(sb, WEFT_SERVICE_OPS, 1));   /* another engine's */
    weft_host_services forged = *sa;                         /* not a live host's table */
    assert_null(sa->get_service(&forged, WEFT_SERVICE_OPS, 1));
    /* bad tables are refused */
    test_service zero = {sizeof(test_service), 0, NULL, NULL};
    assert_int_equal(weft_host_register_service(a, WEFT_SERVICE_GRAPH, &zero), WEFT_ERR_INVALID);
    assert_int_equal(weft_host_register_service(a, 0, &svc), WEFT_ERR_INVALID);
    /* unregister */
    assert_int_equal(weft_host_register_service(a, WEFT_SERVICE_OPS, NULL), WEFT_OK);
    assert_null(sa->get_service(sa, WEFT_SERVICE_OPS, 1));
    /* options and errors through the table */
    weft_option items[2] = {{.key = "a", .type = WEFT_OPTION_INT, .i = 7},
                            {.key = "b", .type = WEFT_OPTION_STRING, .s = "x"}};
    weft_options opts = {2, items};
    assert_ptr_equal(sa->option(&opts, "b"), &items[1]);
    assert_null(sa->option(&opts, "c"));
    weft_error err;
    weft_error_clear(&err);
    sa->error_set(&err, WEFT_ERR_INVALID, "p", "expected %d, got %d", 1, 2);
    assert_string_equal(err.message, "expected 1, got 2");
    assert_string_equal(err.source, "p");
    void *mem = sa->alloc(16);
    assert_non_null(mem);
    sa->free(mem);
    weft_host_free(a);
    assert_null(sb->get_service((const weft_host_services *)a, WEFT_SERVICE_OPS, 1));
    weft_host_free(b);
}

/* ---- fake.pass and the template pass on a real graph -------------------------------------
 * The engine's graph service is not part of this module, so this test carries a small one
 * with the documented semantics (append or insert a node, remove one, rewrite uses from an
 * index, add a tensor); the engine's own tests run the passes on the real service. */
#define G_MAX 32
static weft_tensor g_tensors[G_MAX];
static weft_node g_nodes[G_MAX];

static uint32_t g_tensor_add(weft_graph *g, uint32_t kind, uint32_t dtype, uint32_t rank,
                             const int64_t *shape, const char *name, weft_error *err) {
    if (g->n_tensors >= G_MAX || rank > WEFT_MAX_DIMS) return WEFT_TENSOR_NONE;
    weft_tensor *t = &g->tensors[g->n_tensors];
    memset(t, 0, sizeof(*t));
    t->id = g->n_tensors;
    t->kind = kind;
    t->dtype = dtype;
    t->rank = rank;
    for (uint32_t d = 0; d < rank; d++)
        t->shape[d] = shape[d];
    snprintf(t->name, sizeof(t->name), "%s", name);
    return g->n_tensors++;
}

static uint32_t g_weight_add(weft_graph *g, const char *canonical, const char *source,
                             uint32_t dtype, uint32_t rank, const int64_t *shape, weft_error *err) {
    uint32_t id = g_tensor_add(g, WEFT_TENSOR_WEIGHT, dtype, rank, shape, canonical, err);
    if (id != WEFT_TENSOR_NONE) snprintf(g->tensors[id].source, WEFT_NAME_MAX, "%s", source);
    return id;
}

static int32_t g_node_add(weft_graph *g, const weft_node *n, uint32_t before, weft_error *err) {
    if (g->n_nodes >= G_MAX) return -1;
    uint32_t at = before < g->n_nodes ? before : g->n_nodes;
    memmove(&g->nodes[at + 1], &g->nodes[at], (g->n_nodes - at) * sizeof(*n));
    g->nodes[at] = *n;
    g->n_nodes++;
    return (int32_t)at;
}

static int32_t g_node_remove(weft_graph *g, uint32_t index, weft_error *err) {
    if (index >= g->n_nodes) return -1;
    memmove(&g->nodes[index], &g->nodes[index + 1], (g->n_nodes - index - 1) * sizeof(weft_node));
    g->n_nodes--;
    return 0;
}

static int32_t g_replace_uses(weft_graph *g, uint32_t from, uint32_t to, uint32_t start) {
    int32_t n = 0;
    for (uint32_t i = start; i < g->n_nodes; i++)
        for (uint32_t k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == from) {
                g->nodes[i].in[k] = to;
                n++;
            }
    return n;
}

static void load_created(const char *bundle, const weft_manifest_value *vals, uint32_t n_vals,
                         weft_loaded_plugin *p, fixture *f) {
    weft_error err;
    weft_error_clear(&err);
    fixture_load(f, bundle);
    weft_options opts;
    assert_int_equal(weft_plugin_open(f->library, &f->ex, p, &err), WEFT_OK);
    assert_int_equal(weft_options_build(f->m, vals, n_vals, "test", "options", &opts, &err),
                     WEFT_OK);
    assert_int_equal(weft_plugin_instantiate(p, weft_host_services_of(host), &opts, &err), WEFT_OK);
    weft_options_free(&opts);
}

static void test_passes_on_a_graph(void **state) {
    weft_graph_service gs;
    memset(&gs, 0, sizeof(gs));
    gs.size = sizeof(gs);
    gs.version = 1;
    gs.tensor_add = g_tensor_add;
    gs.weight_add = g_weight_add;
    gs.node_add = g_node_add;
    gs.node_remove = g_node_remove;
    gs.replace_uses = g_replace_uses;
    weft_model_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.size = sizeof(cfg);
    snprintf(cfg.architecture, sizeof(cfg.architecture), "FakeForCausalLM");
    cfg.vocab_size = 8;
    cfg.hidden_size = 4;
    cfg.dtype = WEFT_DTYPE_F32;
    weft_bucket bucket = {sizeof(bucket), 4, 1, 1, 0, {0}};
    weft_error err;
    weft_error_clear(&err);

    for (int run = 0; run < 2; run++) {
        /* the fake model's graph: embed, norm, lm_head */
        weft_graph g;
        memset(&g, 0, sizeof(g));
        g.size = sizeof(g);
        g.tensors = g_tensors;
        g.nodes = g_nodes;
        fixture fm, fp, ft;
        weft_loaded_plugin model, pass, tmpl;
        load_created("fake.model", NULL, 0, &model, &fm);
        assert_int_equal(model.desc->model->configure(model.state, "{}", &cfg, &err), WEFT_OK);
        assert_int_equal(model.desc->model->build_graph(model.state, &cfg, &bucket, &gs, &g, &err),
                         WEFT_OK);
        assert_int_equal(g.n_nodes, 3);
        uint32_t normed = g.nodes[2].in[0];

        weft_manifest_value factor;
        memset(&factor, 0, sizeof(factor));
        snprintf(factor.key, sizeof(factor.key), "factor");
        factor.text = run == 0 ? "1.0" : "2.0";
        load_created("fake.pass", &factor, 1, &pass, &fp);
        assert_int_equal(pass.desc->pass->run(pass.state, &cfg, &gs, &g, &err), WEFT_OK);
        assert_int_equal(g.n_nodes, 4);
        assert_int_equal(g.nodes[2].op, WEFT_OP_SCALE);
        assert_true(g.nodes[2].p.f[0] == (run == 0 ? 1.0f : 2.0f));
        assert_int_equal(g.nodes[2].in[0], normed);
        assert_int_equal(g.nodes[3].op, WEFT_OP_LM_HEAD);
        assert_int_equal(g.nodes[3].in[0], g.nodes[2].out[0]); /* the head reads the scale */

        load_created("template.drop-identity-scale", NULL, 0, &tmpl, &ft);
        assert_int_equal(tmpl.desc->pass->run(tmpl.state, &cfg, &gs, &g, &err), WEFT_OK);
        if (run == 0) { /* factor 1: removed, the head reads the norm again */
            assert_int_equal(g.n_nodes, 3);
            assert_int_equal(g.nodes[2].op, WEFT_OP_LM_HEAD);
            assert_int_equal(g.nodes[2].in[0], normed);
        } else { /* factor 2 is not an identity: kept */
            assert_int_equal(g.n_nodes, 4);
            assert_int_equal(g.nodes[2].op, WEFT_OP_SCALE);
        }
        weft_plugin_close(&tmpl);
        weft_plugin_close(&pass);
        weft_plugin_close(&model);
        fixture_free(&ft);
        fixture_free(&fp);
        fixture_free(&fm);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_loads_and_runs),  cmocka_unit_test(test_refused_negotiation),
        cmocka_unit_test(test_old_struct_size),      cmocka_unit_test(test_name_mismatch),
        cmocka_unit_test(test_reserved_nonzero),     cmocka_unit_test(test_missing_optional_hooks),
        cmocka_unit_test(test_failing_create),       cmocka_unit_test(test_manifest_disagrees),
        cmocka_unit_test(test_tampered_library),     cmocka_unit_test(test_descriptor_reuse),
        cmocka_unit_test(test_crash_in_constructor), cmocka_unit_test(test_host_services),
        cmocka_unit_test(test_passes_on_a_graph),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
