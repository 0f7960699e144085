/* The plugin ABI end to end through the engine API, on the fake plugins: candidates from
 * tests/data/abi are frozen into locks, opened with weft_engine_open and scored. The fake
 * model's logits (fake backend kernels, and the real cpu backend's) match a float64 reference
 * written by tools/scripts/abi_fake_model.py; fake.pass's SCALE factor shows in the logits
 * (exactly twice the pass-free candidate's); fake.op's implementation is the one the registry
 * chose and the executor called (its call counter), or not, by priority; greedy generation
 * follows the bigram table; without fake.op the graph is refused naming the node; two passes
 * run in candidate order unless `after` says otherwise; the graph hash is stable and does not
 * depend on which plugin runs a node. tests/abi/test_engine_fakes.sh covers the same candidates
 * through the CLI. */
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

#include "engine/engine.h"
#include "plugin/lock.h"
#include "plugin/registry.h"
#include "plugin/resolve.h"
#include "util/error.h"

#define FAKES WEFT_BINARY_DIR "/tests/fakes"
#define DATA WEFT_SOURCE_DIR "/tests/data/abi"
#define VOCAB 16
#define MAX_IDS 64

static char tmpdir[256];
static int32_t ref_ids[MAX_IDS];
static float ref[MAX_IDS][VOCAB];
static size_t n_ref;

/* reference_logits.txt: two comment lines ("# vocab 16 ids a b c ..." the second), then one
 * row of VOCAB logits per id. */
static int load_reference(void) {
    FILE *f = fopen(DATA "/reference_logits.txt", "r");
    if (!f) return -1;
    char line[4096];
    int ok = fgets(line, sizeof(line), f) && fgets(line, sizeof(line), f);
    unsigned vocab = 0;
    int used = 0;
    if (ok && sscanf(line, "# vocab %u ids%n", &vocab, &used) == 1 && vocab == VOCAB) {
        const char *p = line + used;
        int k;
        while (n_ref < MAX_IDS && sscanf(p, "%d%n", &ref_ids[n_ref], &k) == 1) {
            p += k;
            n_ref++;
        }
    } else {
        ok = 0;
    }
    for (size_t r = 0; ok && r < n_ref; r++)
        for (int v = 0; v < VOCAB; v++)
            if (fscanf(f, "%f", &ref[r][v]) != 1) ok = 0;
    fclose(f);
    return ok && n_ref >= VOCAB ? 0 : -1;
}

static int setup(void **state) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft-test-abi-engine-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    char cache[300];
    snprintf(cache, sizeof(cache), "%s/cache", tmpdir);
    setenv("WEFT_CACHE", cache, 1);
    /* the fakes first; the build tree (real cpu backend, template pass) follows by default */
    setenv("WEFT_PLUGIN_PATH", FAKES, 1);
    return load_reference();
}

static int teardown(void **state) {
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Freezes DATA/<name>.yaml into tmpdir/<name>.lock (path in out). extra: a directory searched
 * before WEFT_PLUGIN_PATH (NULL = none). */
static void freeze(const char *name, const char *extra, char *out, size_t cap) {
    char manifest[512];
    snprintf(manifest, sizeof(manifest), "%s/%s.yaml", DATA, name);
    snprintf(out, cap, "%s/%s%s.lock", tmpdir, name, extra ? "-extra" : "");
    const char *dirs[] = {extra};
    weft_registry *reg = NULL;
    weft_resolved_candidate *rc = NULL;
    weft_lock *l = NULL;
    weft_error err;
    weft_error_clear(&err);
    if (weft_registry_discover(dirs, extra ? 1 : 0, 0, &reg, &err) != WEFT_OK ||
        weft_resolve_file(manifest, reg, NULL, &rc, &err) != WEFT_OK ||
        weft_lock_freeze(rc, &l, &err) != WEFT_OK || weft_lock_write(l, out, &err) != WEFT_OK)
        fail_msg("freeze %s: %s", manifest, err.message);
    weft_lock_free(l);
    weft_resolved_free(rc);
    weft_registry_free(reg);
}

static weft_engine *open_lock(const char *lock) {
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.lock_path = lock;
    weft_engine *e = NULL;
    weft_error err;
    weft_error_clear(&err);
    if (weft_engine_open(&o, &e, &err) != WEFT_OK) fail_msg("open %s: %s", lock, err.message);
    return e;
}

static weft_engine *open_data(const char *name) {
    char lock[512];
    freeze(name, NULL, lock, sizeof(lock));
    return open_lock(lock);
}

static void score_ref_ids(weft_engine *e, float *logits) {
    weft_error err;
    weft_error_clear(&err);
    if (weft_engine_score(e, ref_ids, n_ref, logits, &err) != WEFT_OK)
        fail_msg("score: %s", err.message);
}

/* A counter a fake exports (weft_fake_pass_runs, weft_fake_op_calls) for the loaded plugin. */
static uint64_t counter(weft_engine *e, const char *plugin, const char *symbol) {
    const weft_candidate *c = weft_engine_candidate(e);
    for (size_t i = 0; i < c->n_plugins; i++)
        if (!strcmp(c->plugins[i].name, plugin)) {
            void *sym = dlsym(c->plugins[i].dl, symbol);
            if (!sym) fail_msg("%s does not export %s", plugin, symbol);
            if (!strcmp(symbol, "weft_fake_op_calls")) {
                uint64_t (*fn)(const void *);
                memcpy(&fn, &sym, sizeof(fn));
                return fn(c->plugins[i].state);
            }
            uint32_t (*fn)(const void *);
            memcpy(&fn, &sym, sizeof(fn));
            return fn(c->plugins[i].state);
        }
    fail_msg("candidate has no plugin %s", plugin);
    return 0;
}

/* The decode graph's printout and hash, in buf (NUL-terminated). */
static void print_graph(weft_engine *e, char *buf, size_t cap, char hash[33]) {
    FILE *f = fmemopen(buf, cap, "w");
    assert_non_null(f);
    weft_error err;
    weft_error_clear(&err);
    if (weft_engine_print_graph(e, 1, f, hash, &err) != WEFT_OK) fail_msg("%s", err.message);
    fclose(f);
    buf[cap - 1] = 0;
}

static void assert_near_reference(const float *logits, float factor) {
    for (size_t r = 0; r < n_ref; r++)
        for (int v = 0; v < VOCAB; v++) {
            float want = factor * ref[r][v], got = logits[r * VOCAB + v];
            if (!(fabsf(got - want) <= 1e-5f * (1.0f + fabsf(want))))
                fail_msg("id %d logit %d: reference %.9g, engine %.9g", ref_ids[r], v, want, got);
        }
}

static float plain[MAX_IDS * VOCAB], full[MAX_IDS * VOCAB];

/* 1. the model alone, then with fake.pass (factor 2) and fake.op, on the fake backend */
static void test_pass_and_op_on_fake_backend(void **state) {
    weft_engine *e = open_data("plain");
    score_ref_ids(e, plain);
    assert_near_reference(plain, 1.0f);
    weft_engine_close(e);

    e = open_data("full");
    weft_engine_stats st;
    weft_engine_get_stats(e, &st);
    assert_int_equal(st.graphs_built, 1); /* the decode graph, built at open */
    assert_int_equal(counter(e, "fake.pass", "weft_fake_pass_runs"), 1);
    assert_int_equal(counter(e, "fake.op", "weft_fake_op_calls"), 0); /* nothing ran yet */
    score_ref_ids(e, full);
    /* the pass doubled lm_head's input, and lm_head is linear: exactly twice every logit */
    for (size_t i = 0; i < n_ref * VOCAB; i++)
        if (full[i] != 2.0f * plain[i])
            fail_msg("logit %zu: %.9g with the pass, %.9g without", i, full[i], plain[i]);
    weft_engine_get_stats(e, &st);
    /* scoring n_ref rows built one more bucket, rewritten by the pass too; one step ran, and
     * fake.op's SCALE ran once in it */
    assert_int_equal(st.graphs_built, 2);
    assert_int_equal(counter(e, "fake.pass", "weft_fake_pass_runs"), 2);
    assert_int_equal(counter(e, "fake.op", "weft_fake_op_calls"), 1);
    float three[3 * VOCAB];
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_engine_score(e, ref_ids, 3, three, &err), WEFT_OK);
    assert_int_equal(counter(e, "fake.op", "weft_fake_op_calls"), 2);
    assert_memory_equal(three, full, sizeof(three)); /* the 3-row bucket computes the same */
    weft_engine_close(e);
}

static int32_t argmax_of_id(int32_t id) {
    for (size_t r = 0; r < n_ref; r++)
        if (ref_ids[r] == id) {
            int best = 0;
            for (int v = 1; v < VOCAB; v++)
                if (ref[r][v] > ref[r][best]) best = v;
            return best;
        }
    fail_msg("the reference has no row for id %d", id);
    return -1;
}

typedef struct collected {
    int32_t tokens[16];
    uint32_t n, finish;
} collected;

static void on_event(void *user, const weft_token_event *ev) {
    collected *c = user;
    if (ev->token >= 0 && c->n < 16) c->tokens[c->n++] = ev->token;
    if (ev->finish) c->finish = ev->finish;
}

/* Greedy decoding of a bigram model: each token is the argmax of the previous token's row. */
static void test_generation_follows_bigrams(void **state) {
    weft_engine *e = open_data("full");
    weft_request_params rp;
    weft_request_params_default(&rp);
    rp.max_tokens = 8;
    rp.detokenize = 0; /* the fake model has no tokenizer */
    rp.ignore_eos = 1;
    collected c;
    memset(&c, 0, sizeof(c));
    rp.callback = on_event;
    rp.user = &c;
    int32_t prompt[2] = {5, 9};
    uint64_t id = 0;
    weft_error err;
    weft_error_clear(&err);
    if (weft_request_submit(e, prompt, 2, &rp, &id, &err) != WEFT_OK) fail_msg("%s", err.message);
    while (weft_engine_active(e))
        if (weft_engine_step(e, &err) < 0) fail_msg("step: %s", err.message);
    assert_int_equal(c.finish, WEFT_FINISH_LENGTH);
    assert_int_equal(c.n, 8);
    int32_t prev = prompt[1];
    for (uint32_t i = 0; i < c.n; i++) {
        assert_int_equal(c.tokens[i], argmax_of_id(prev));
        prev = c.tokens[i];
    }
    /* every step (one prefill, seven decodes after the first token) ran fake.op's SCALE */
    assert_int_equal(counter(e, "fake.op", "weft_fake_op_calls"), 8);
    weft_engine_close(e);
}

/* 1b. the real cpu backend: independent kernels for the same graph; the registry picks fake.op
 * for SCALE over the backend's kernel by priority, and the backend's when fake.op ranks lower */
static void test_real_cpu_backend_and_priority(void **state) {
    static float logits[MAX_IDS * VOCAB];
    char text[4096], hash_fake[33], hash_real[33];
    weft_engine *e = open_data("full");
    print_graph(e, text, sizeof(text), hash_fake);
    weft_engine_close(e);

    e = open_data("real-cpu");
    score_ref_ids(e, logits);
    assert_near_reference(logits, 2.0f);
    assert_int_equal(counter(e, "fake.op", "weft_fake_op_calls"), 1);
    print_graph(e, text, sizeof(text), hash_real);
    assert_non_null(strstr(text, "fake.pass.scale: scale(norm_out:f32[1,8]) -> "
                                 "fake.pass.scaled:f32[1,8] f=[2]  [fake.op]\n"));
    assert_string_equal(hash_real, hash_fake); /* who runs a node is not part of the graph */
    weft_engine_close(e);

    e = open_data("real-cpu-low");
    score_ref_ids(e, logits);
    assert_near_reference(logits, 2.0f);
    assert_int_equal(counter(e, "fake.op", "weft_fake_op_calls"), 0); /* registered, not chosen */
    print_graph(e, text, sizeof(text), hash_real);
    assert_non_null(strstr(text, "f=[2]  [cpu]\n"));
    assert_null(strstr(text, "[fake.op]"));
    weft_engine_close(e);
}

/* 2. the pass's SCALE with no implementation in the candidate */
static void test_refused_without_op(void **state) {
    char lock[512];
    freeze("no-op", NULL, lock, sizeof(lock));
    weft_engine_options o;
    weft_engine_options_default(&o);
    o.lock_path = lock;
    weft_engine *e = NULL;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_engine_open(&o, &e, &err), WEFT_ERR_UNSUPPORTED);
    assert_null(e);
    assert_string_equal(err.source, "ops");
    assert_string_equal(err.message, "node fake.pass.scale (scale, cpu, f32, layout dense) has no "
                                     "implementation in this candidate");
}

/* 3. pass order: the candidate's listing, unless a manifest's `after` says otherwise */
static void test_pass_order(void **state) {
    static float logits[MAX_IDS * VOCAB];
    char text[4096], h_plain[33], h[33];
    weft_engine *e = open_data("plain");
    print_graph(e, text, sizeof(text), h_plain);
    weft_engine_close(e);

    /* fake.pass then the drop pass: SCALE(x, 1) added, then removed */
    e = open_data("order-pass-first");
    assert_int_equal(counter(e, "fake.pass", "weft_fake_pass_runs"), 1);
    print_graph(e, text, sizeof(text), h);
    assert_null(strstr(text, "scale"));
    assert_string_equal(h, h_plain);
    score_ref_ids(e, logits);
    assert_memory_equal(logits, plain, n_ref * VOCAB * sizeof(float));
    assert_int_equal(counter(e, "fake.op", "weft_fake_op_calls"), 0);
    weft_engine_close(e);

    /* the drop pass first: it finds nothing, then fake.pass adds SCALE(x, 1), run by fake.op */
    char h_drop_first[33];
    e = open_data("order-drop-first");
    print_graph(e, text, sizeof(text), h_drop_first);
    assert_non_null(strstr(text, "fake.pass.scaled:f32[1,8] f=[1]  [fake.op]\n"));
    assert_string_not_equal(h_drop_first, h_plain);
    score_ref_ids(e, logits);
    assert_memory_equal(logits, plain, n_ref * VOCAB * sizeof(float)); /* x 1 is exact */
    assert_int_equal(counter(e, "fake.op", "weft_fake_op_calls"), 1);
    weft_engine_close(e);

    /* fake.pass with `after: [template.drop-identity-scale]` (a bundle made here from the built
     * library and tests/data/abi/after-drop/manifest.yaml), listed first: runs second */
    char dir[400], cmd[1400], lock[512];
    snprintf(dir, sizeof(dir), "%s/after", tmpdir);
    snprintf(cmd, sizeof(cmd),
             "mkdir -p '%s/fake.pass' && cp '%s/after-drop/manifest.yaml' "
             "'%s/fake.pass/libweft-fake-pass.so' '%s/fake.pass/'",
             dir, DATA, FAKES, dir);
    assert_int_equal(system(cmd), 0);
    freeze("order-pass-first", dir, lock, sizeof(lock));
    e = open_lock(lock);
    const weft_candidate *c = weft_engine_candidate(e);
    assert_string_equal(c->plugins[2].name, "template.drop-identity-scale");
    assert_string_equal(c->plugins[3].name, "fake.pass");
    assert_true(c->plugins[2].order < c->plugins[3].order);
    print_graph(e, text, sizeof(text), h);
    assert_non_null(strstr(text, "fake.pass.scaled:f32[1,8] f=[1]  [fake.op]\n"));
    assert_string_equal(h, h_drop_first);
    weft_engine_close(e);
}

/* the graph hash: the same for two opens of one lock, different for another graph or bucket */
static void test_hash_stable(void **state) {
    char lock[512], text[4096], text2[4096], h1[33], h2[33];
    freeze("full", NULL, lock, sizeof(lock));
    weft_engine *e = open_lock(lock);
    print_graph(e, text, sizeof(text), h1);
    weft_engine_close(e);
    e = open_lock(lock);
    print_graph(e, text2, sizeof(text2), h2);
    assert_string_equal(text, text2);
    assert_string_equal(h1, h2);
    assert_int_equal(strlen(h1), 32);
    char line[64];
    snprintf(line, sizeof(line), "hash %s\n", h1);
    assert_non_null(strstr(text, line)); /* printed, and the same as returned */
    /* the prefill bucket of 4 tokens is another graph */
    FILE *f = fmemopen(text2, sizeof(text2), "w");
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_engine_print_graph(e, 4, f, h2, &err), WEFT_OK);
    fclose(f);
    assert_string_not_equal(h1, h2);
    weft_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_and_op_on_fake_backend),
        cmocka_unit_test(test_generation_follows_bigrams),
        cmocka_unit_test(test_real_cpu_backend_and_priority),
        cmocka_unit_test(test_refused_without_op),
        cmocka_unit_test(test_pass_order),
        cmocka_unit_test(test_hash_stable),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
