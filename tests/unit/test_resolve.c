/* Tests of candidate resolution against a registry of the repo's backend and model manifests
 * plus the technique bundles in tests/data/manifests/registry: chain order by `after`, every
 * class of refusal with its exact sentence, options with defaults filled in, the model plugin
 * chosen from config.json, and model directory lookup in the cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin/resolve.h"

static weft_registry *reg;
static char tmp[PATH_MAX];

static int setup(void **state) {
    (void)state;
    if (chdir(WEFT_SOURCE_DIR)) return -1;
    const char *dirs[] = {"tests/data/manifests/registry", "plugins/backends", "models"};
    weft_error err;
    memset(&err, 0, sizeof(err));
    if (weft_registry_discover(dirs, 3, WEFT_REGISTRY_ONLY_EXTRA, &reg, &err)) return -1;
    snprintf(tmp, sizeof(tmp), "/tmp/weft-test-resolve-XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    weft_registry_free(reg);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* A candidate manifest "manifests/x.yaml" whose techniques block is `techniques`. */
static weft_candidate_manifest *candidate(const char *backend, const char *model_plugin,
                                          const char *techniques) {
    char text[4096];
    snprintf(text, sizeof(text), "format: 1\ncandidate: x\nmodel: ./tiny\nbackend: %s\n%s%s%s%s",
             backend, model_plugin ? "model_plugin: " : "", model_plugin ? model_plugin : "",
             model_plugin ? "\n" : "", techniques ? techniques : "");
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_candidate_manifest *m = NULL;
    if (weft_candidate_manifest_parse(text, strlen(text), "manifests/x.yaml", &m, &err))
        fail_msg("%s", err.message);
    return m;
}

static const weft_resolve_options no_model = {sizeof(weft_resolve_options), WEFT_RESOLVE_NO_MODEL,
                                              NULL, "x86_64"};

/* Resolves and expects a refusal with exactly `want`. */
static void refuse(const char *backend, const char *techniques, const weft_resolve_options *o,
                   const char *want) {
    weft_candidate_manifest *m = candidate(backend, "llama", techniques);
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_resolved_candidate *rc = NULL;
    weft_status st = weft_resolve(m, reg, o ? o : &no_model, &rc, &err);
    weft_candidate_manifest_free(m);
    if (st == WEFT_OK) {
        weft_resolved_free(rc);
        fail_msg("resolved, but expected: %s", want);
    }
    assert_null(rc);
    if (strcmp(err.message, want)) fail_msg("\n  got  %s\n  want %s", err.message, want);
}

static void test_resolve_chain_order_and_options(void **state) {
    (void)state;
    weft_candidate_manifest *m = candidate("{name: cpu, options: {threads: 4}}", "llama",
                                           "techniques:\n"
                                           "  - fuse.c\n"
                                           "  - fuse.b\n"
                                           "  - fuse.a\n"
                                           "  - name: kv.paged\n"
                                           "    options: {page_size: 64}\n"
                                           "  - quant.w8a16\n"
                                           "  - feat.json\n"
                                           "serving: {max_model_len: 256, threads: 3}\n");
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_resolved_candidate *rc = NULL;
    if (weft_resolve(m, reg, &no_model, &rc, &err)) fail_msg("%s", err.message);
    weft_candidate_manifest_free(m);
    /* the resolved candidate owns everything: the registry can go (rebuilt below) */
    weft_registry_free(reg);
    reg = NULL;

    static const char *const want[] = {"cpu",    "llama",       "fuse.a",   "fuse.b",
                                       "fuse.c", "quant.w8a16", "kv.paged", "feat.json"};
    assert_int_equal(rc->n_plugins, 8);
    for (uint32_t i = 0; i < rc->n_plugins; i++) {
        assert_string_equal(rc->plugins[i].name, want[i]);
        assert_int_equal(rc->plugins[i].order, (int32_t)i);
        assert_non_null(rc->plugins[i].manifest);
        assert_string_equal(rc->plugins[i].manifest->name, want[i]);
    }
    assert_int_equal(rc->plugins[0].role, WEFT_ROLE_BACKEND);
    assert_int_equal(rc->plugins[1].role, WEFT_ROLE_MODEL);
    assert_int_equal(rc->plugins[2].role, WEFT_ROLE_TECHNIQUE);
    assert_string_equal(rc->backend, "cpu");
    assert_string_equal(rc->model, "./tiny");
    assert_string_equal(rc->model_dir, "");
    assert_string_equal(rc->architecture, "");
    assert_int_equal(rc->max_model_len, 256);
    assert_int_equal(rc->threads, 3);
    assert_int_equal(rc->filled_slots, WEFT_SLOT_BACKEND | WEFT_SLOT_MODEL | WEFT_SLOT_PASS |
                                           WEFT_SLOT_OPS | WEFT_SLOT_KV | WEFT_SLOT_FEATURE);

    /* options: every schema entry, defaults filled in, values from the candidate */
    const weft_resolved_plugin *cpu = &rc->plugins[0];
    assert_int_equal(cpu->options.count, 1);
    assert_string_equal(cpu->options.items[0].key, "threads");
    assert_int_equal(cpu->options.items[0].i, 4);
    const weft_resolved_plugin *kv = weft_resolved_slot(rc, WEFT_SLOT_KV);
    assert_non_null(kv);
    assert_string_equal(kv->name, "kv.paged");
    assert_int_equal(kv->options.count, 2);
    assert_int_equal(weft_options_find(&kv->options, "page_size")->i, 64);
    assert_string_equal(weft_options_find(&kv->options, "layout")->s, "nhd");
    assert_int_equal(weft_options_find(&rc->plugins[7].options, "strict")->i, 1);
    /* llama's schema: activation_dtype (default f32) and device_inputs (default false) */
    assert_int_equal(rc->plugins[1].options.count, 2);
    assert_string_equal(weft_options_find(&rc->plugins[1].options, "activation_dtype")->s, "f32");
    assert_int_equal(weft_options_find(&rc->plugins[1].options, "device_inputs")->i, 0);
    assert_null(weft_resolved_slot(rc, WEFT_SLOT_SCHEDULER)); /* runtime default */
    assert_string_equal(weft_resolved_slot(rc, WEFT_SLOT_OPS)->name, "fuse.b");

    /* paths point into the bundle; the library is named but never opened */
    char real[PATH_MAX], want_lib[PATH_MAX + 64];
    assert_non_null(realpath("tests/data/manifests/registry/kv.paged", real));
    assert_string_equal(kv->bundle_dir, real);
    snprintf(want_lib, sizeof(want_lib), "%s/libkv.paged.so", real);
    assert_string_equal(kv->library_path, want_lib);
    assert_string_equal(rc->plugins[0].library_path + strlen(rc->plugins[0].library_path) -
                            strlen("/plugins/backends/cpu/libweft-cpu.so"),
                        "/plugins/backends/cpu/libweft-cpu.so");
    assert_non_null(rc->manifest);
    assert_string_equal(rc->manifest->candidate, "x");
    weft_resolved_free(rc);

    const char *dirs[] = {"tests/data/manifests/registry", "plugins/backends", "models"};
    assert_int_equal(weft_registry_discover(dirs, 3, WEFT_REGISTRY_ONLY_EXTRA, &reg, &err),
                     WEFT_OK);
}

static void test_refusals(void **state) {
    (void)state;
    refuse("cpu", "techniques: [kv.paged, kv.int8]\n", NULL,
           "technique kv.int8 1.0.0 conflicts with kv.paged 1.0.0 (both fill slot kv): remove one "
           "of them from manifests/x.yaml");
    refuse("cpu", "techniques: [fuse.c, fuse.b, fuse.a, fuse.d]\n", NULL,
           "technique fuse.c 1.0.0 conflicts with fuse.d 1.0.0 (its manifest says so): remove one "
           "of them from manifests/x.yaml");
    refuse("cpu", "techniques: [kv.paged, spec.ngram]\n", NULL,
           "technique spec.ngram 1.0.0 requires kv.paged ^2.0 but the candidate selects kv.paged "
           "1.0.0: select a version of kv.paged matching ^2.0 or remove spec.ngram from "
           "manifests/x.yaml");
    refuse("cpu", "techniques: [spec.lookahead]\n", NULL,
           "technique spec.lookahead 1.0.0 requires sched.continuous, which the candidate does "
           "not include: add sched.continuous to techniques in manifests/x.yaml");
    refuse("cpu", "techniques: [fuse.a, cyc.a, cyc.b, cyc.c]\n", NULL,
           "the `after` lists of the techniques form a cycle (cyc.a after cyc.b after cyc.c after "
           "cyc.a), so no order satisfies them: remove one of these techniques from "
           "manifests/x.yaml");
    refuse("cpu",
           "techniques:\n"
           "  - name: kv.paged\n"
           "    options:\n"
           "      page_size: 0\n",
           NULL,
           "manifests/x.yaml:9:18: techniques[0].options.page_size: expected an integer in "
           "16..1024, found 0");
    refuse("cpu",
           "techniques:\n"
           "  - {name: kv.paged, options: {layuot: hnd}}\n",
           NULL,
           "manifests/x.yaml:7:40: techniques[0].options.layuot: expected an option of kv.paged "
           "(page_size, layout), found unknown option layuot");
    refuse("{name: cpu, options: {threads: -2}}", NULL, NULL,
           "manifests/x.yaml:4:41: backend.options.threads: expected an integer in 0..4096, found "
           "-2");
    refuse("cpu", "techniques: [attn.cudaonly]\n", NULL,
           "technique attn.cudaonly 1.0.0 runs on backend cuda, not cpu: remove it from "
           "manifests/x.yaml");
    refuse("cpu", "techniques: [kv.fp8]\n", NULL,
           "technique kv.fp8 1.0.0 runs on backend cuda, not cpu: remove it from manifests/x.yaml");
    weft_resolve_options arm = no_model;
    arm.arch = "aarch64";
    refuse("cpu", "techniques: [x86.only]\n", &arm,
           "technique x86.only 1.0.0 supports platforms x86_64, not aarch64 with backend cpu: "
           "remove it from manifests/x.yaml");
    refuse("cuda", NULL, &arm,
           "backend cuda 0.1.0 supports platforms x86_64+cuda13, not aarch64 with backend cuda: "
           "choose another backend in manifests/x.yaml");
    refuse("cpu", "techniques: [fuse.a, kv.pagd]\n", NULL,
           "manifests/x.yaml:6:22: techniques[1]: no technique named kv.pagd on the plugin path: "
           "did you mean kv.paged?");
    refuse("cpu", "techniques: [sched.nothing-like-it]\n", NULL,
           "manifests/x.yaml:6:14: techniques[0]: no technique named sched.nothing-like-it on the "
           "plugin path (3 dirs searched): build it or add its bundle directory to "
           "WEFT_PLUGIN_PATH");
    refuse("cpu", "techniques: [{name: kv.paged, version: \"^2\"}]\n", NULL,
           "manifests/x.yaml:6:14: techniques[0]: no installed version of technique kv.paged "
           "matches \"^2\" (installed: 1.0.0): change the version range in manifests/x.yaml");
    refuse("cpu", "techniques: [abi.future]\n", NULL,
           "technique abi.future 1.0.0 speaks plugin ABI 2..3 but this runtime speaks 1..1: use a "
           "build of abi.future for this runtime");
    refuse("cpu", "techniques: [llama]\n", NULL,
           "manifests/x.yaml:6:14: techniques[0]: llama is a model plugin, not a technique: set it "
           "as model_plugin instead");
    refuse("cpu", "techniques: [cpu]\n", NULL,
           "manifests/x.yaml:6:14: techniques[0]: cpu is a backend plugin, not a technique: set "
           "it as backend instead");

    /* a broken bundle is named as the likely cause */
    weft_candidate_manifest *m = candidate("cpu", "llama", "techniques: [kv.broken]\n");
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_resolved_candidate *rc = NULL;
    assert_int_not_equal(weft_resolve(m, reg, &no_model, &rc, &err), WEFT_OK);
    assert_non_null(strstr(err.message, "manifests/x.yaml:6:14: techniques[0]: technique kv.broken "
                                        "is installed in "));
    assert_non_null(strstr(err.message, "/kv.broken but its manifest is broken ("));
    assert_non_null(strstr(err.message, "abi: expected this required key"));
    weft_candidate_manifest_free(m);

    /* the model plugin slot takes model plugins only */
    m = candidate("cpu", "kv.paged", NULL);
    assert_int_not_equal(weft_resolve(m, reg, &no_model, &rc, &err), WEFT_OK);
    assert_string_equal(err.message, "manifests/x.yaml:5:15: model_plugin: kv.paged is a technique "
                                     "plugin, not a model: name a model plugin there");
    weft_candidate_manifest_free(m);
    /* without the model, the model plugin must be named */
    m = candidate("cpu", NULL, NULL);
    assert_int_not_equal(weft_resolve(m, reg, &no_model, &rc, &err), WEFT_OK);
    assert_string_equal(err.message, "the model plugin cannot be chosen without reading the "
                                     "model's config.json: set model_plugin in manifests/x.yaml");
    weft_candidate_manifest_free(m);
}

static void make_model(const char *name, const char *config) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", tmp, name);
    mkdir(path, 0755);
    if (!config) return;
    snprintf(path, sizeof(path), "%s/%s/config.json", tmp, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(config, f);
    fclose(f);
}

static void test_model_plugin_from_config(void **state) {
    (void)state;
    make_model("qwen3", "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\"}");
    make_model("moe", "{\"architectures\": [\"Qwen3MoeForCausalLM\"]}");
    make_model("bare", NULL);
    char dir[PATH_MAX + 16];
    weft_resolve_options o = {sizeof(o), 0, dir, "x86_64"};
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_resolved_candidate *rc = NULL;

    snprintf(dir, sizeof(dir), "%s/qwen3", tmp);
    weft_candidate_manifest *m = candidate("cpu", NULL, NULL);
    if (weft_resolve(m, reg, &o, &rc, &err)) fail_msg("%s", err.message);
    assert_string_equal(rc->architecture, "Qwen3ForCausalLM");
    assert_string_equal(rc->plugins[1].name, "llama");
    char real[PATH_MAX];
    assert_non_null(realpath(dir, real));
    assert_string_equal(rc->model_dir, real);
    weft_resolved_free(rc);

    /* only qwen.moe runs this architecture, and only on cuda */
    snprintf(dir, sizeof(dir), "%s/moe", tmp);
    assert_int_not_equal(weft_resolve(m, reg, &o, &rc, &err), WEFT_OK);
    char want[2048];
    char realmoe[PATH_MAX];
    assert_non_null(realpath(dir, realmoe));
    snprintf(want, sizeof(want),
             "no model plugin on the plugin path runs architecture Qwen3MoeForCausalLM (from "
             "%s/config.json) on backend cpu: install one or name model_plugin in manifests/x.yaml",
             realmoe);
    assert_string_equal(err.message, want);
    weft_candidate_manifest_free(m);
    m = candidate("cuda", NULL, NULL);
    if (weft_resolve(m, reg, &o, &rc, &err)) fail_msg("%s", err.message);
    assert_string_equal(rc->plugins[1].name, "qwen.moe");
    weft_resolved_free(rc);
    weft_candidate_manifest_free(m);

    /* a named model plugin must run the architecture */
    m = candidate("cpu", "llama", NULL);
    assert_int_not_equal(weft_resolve(m, reg, &o, &rc, &err), WEFT_OK);
    snprintf(want, sizeof(want),
             "model plugin llama 0.1.0 does not run architecture Qwen3MoeForCausalLM of %s: "
             "choose another model_plugin in manifests/x.yaml",
             realmoe);
    assert_string_equal(err.message, want);
    weft_candidate_manifest_free(m);

    /* no config.json: the model plugin must be named */
    snprintf(dir, sizeof(dir), "%s/bare", tmp);
    m = candidate("cpu", NULL, NULL);
    assert_int_not_equal(weft_resolve(m, reg, &o, &rc, &err), WEFT_OK);
    assert_non_null(strstr(err.message, "manifests/x.yaml:3:8: model: "));
    assert_non_null(strstr(err.message, "/bare has no config.json naming its architecture, so the "
                                        "model plugin cannot be chosen: set model_plugin in "
                                        "manifests/x.yaml"));
    weft_candidate_manifest_free(m);
    m = candidate("cpu", "llama", NULL);
    if (weft_resolve(m, reg, &o, &rc, &err)) fail_msg("%s", err.message);
    assert_string_equal(rc->architecture, "");
    weft_resolved_free(rc);
    weft_candidate_manifest_free(m);

    /* a --model override that does not exist */
    snprintf(dir, sizeof(dir), "%s/absent", tmp);
    m = candidate("cpu", "llama", NULL);
    assert_int_not_equal(weft_resolve(m, reg, &o, &rc, &err), WEFT_OK);
    snprintf(want, sizeof(want), "model directory %s not found: check the --model path", dir);
    assert_string_equal(err.message, want);
    weft_candidate_manifest_free(m);
}

static void test_model_dir_resolve(void **state) {
    (void)state;
    char cache[PATH_MAX + 16], out[PATH_MAX], want[2 * PATH_MAX];
    weft_error err;
    memset(&err, 0, sizeof(err));
    snprintf(cache, sizeof(cache), "%s/cache", tmp);
    setenv("WEFT_CACHE", cache, 1);
    assert_int_equal(weft_model_cache_dir(out, sizeof(out), &err), WEFT_OK);
    snprintf(want, sizeof(want), "%s/models", cache);
    assert_string_equal(out, want);

    assert_int_equal(weft_model_dir_resolve("stories260k", "manifests/baseline-cpu.yaml", out,
                                            sizeof(out), &err),
                     WEFT_ERR_NOT_FOUND);
    snprintf(want, sizeof(want),
             "model stories260k not found in %s/models: run `weft pull stories260k`", cache);
    assert_string_equal(err.message, want);

    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof(cmd),
             "mkdir -p '%s/models/stories260k' '%s/models/Qwen--Qwen3-0.6B' "
             "'%s/proj/manifests' '%s/proj/tiny'",
             cache, cache, tmp, tmp);
    assert_int_equal(system(cmd), 0);
    char real[PATH_MAX];
    assert_int_equal(weft_model_dir_resolve("stories260k", NULL, out, sizeof(out), &err), WEFT_OK);
    snprintf(want, sizeof(want), "%s/models/stories260k", cache);
    assert_non_null(realpath(want, real));
    assert_string_equal(out, real);
    /* hub ids map to org--name */
    assert_int_equal(weft_model_dir_resolve("Qwen/Qwen3-0.6B", NULL, out, sizeof(out), &err),
                     WEFT_OK);
    snprintf(want, sizeof(want), "%s/models/Qwen--Qwen3-0.6B", cache);
    assert_non_null(realpath(want, real));
    assert_string_equal(out, real);
    assert_int_equal(weft_model_dir_resolve("Qwen/Qwen3-8B", NULL, out, sizeof(out), &err),
                     WEFT_ERR_NOT_FOUND);
    snprintf(want, sizeof(want),
             "model Qwen/Qwen3-8B not found in %s/models: run `weft pull Qwen/Qwen3-8B`", cache);
    assert_string_equal(err.message, want);
    /* paths are relative to the manifest's directory */
    char manifest[PATH_MAX + 32];
    snprintf(manifest, sizeof(manifest), "%s/proj/manifests/x.yaml", tmp);
    assert_int_equal(weft_model_dir_resolve("../tiny", manifest, out, sizeof(out), &err), WEFT_OK);
    snprintf(want, sizeof(want), "%s/proj/tiny", tmp);
    assert_non_null(realpath(want, real));
    assert_string_equal(out, real);
    assert_int_equal(weft_model_dir_resolve("./tiny", manifest, out, sizeof(out), &err),
                     WEFT_ERR_NOT_FOUND);
    snprintf(want, sizeof(want),
             "model directory %s/proj/manifests/./tiny not found: check the path or use a model "
             "name from the cache",
             tmp);
    assert_string_equal(err.message, want);
    assert_int_equal(weft_model_dir_resolve(real, NULL, out, sizeof(out), &err), WEFT_OK);
    assert_string_equal(out, real);
    assert_int_equal(weft_model_dir_resolve("a b", NULL, out, sizeof(out), &err), WEFT_ERR_INVALID);

    /* XDG_CACHE_HOME, then HOME, when WEFT_CACHE is unset */
    unsetenv("WEFT_CACHE");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    assert_int_equal(weft_model_cache_dir(out, sizeof(out), &err), WEFT_OK);
    assert_string_equal(out, "/xdg/weft/models");
    unsetenv("XDG_CACHE_HOME");
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("HOME", "/home/u", 1);
    assert_int_equal(weft_model_cache_dir(out, sizeof(out), &err), WEFT_OK);
    assert_string_equal(out, "/home/u/.cache/weft/models");
    if (home) setenv("HOME", home, 1);
    free(home);

    /* through a candidate: the error names the manifest's model field */
    setenv("WEFT_CACHE", cache, 1);
    const char *text = "format: 1\ncandidate: x\nmodel: stories15m\nbackend: cpu\n"
                       "model_plugin: llama\n";
    weft_candidate_manifest *m = NULL;
    assert_int_equal(
        weft_candidate_manifest_parse(text, strlen(text), "manifests/x.yaml", &m, &err), WEFT_OK);
    weft_resolved_candidate *rc = NULL;
    weft_resolve_options o = {sizeof(o), 0, NULL, "x86_64"};
    assert_int_equal(weft_resolve(m, reg, &o, &rc, &err), WEFT_ERR_NOT_FOUND);
    snprintf(want, sizeof(want),
             "manifests/x.yaml:3:8: model: model stories15m not found in %s/models: run `weft "
             "pull stories15m`",
             cache);
    assert_string_equal(err.message, want);
    weft_candidate_manifest_free(m);
    unsetenv("WEFT_CACHE");
}

/* The repo's baselines resolve against the source tree's manifests. */
static void test_baselines(void **state) {
    (void)state;
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_resolved_candidate *rc = NULL;
    if (weft_resolve_file("manifests/baseline-cpu.yaml", reg, &no_model, &rc, &err))
        fail_msg("%s", err.message);
    assert_int_equal(rc->n_plugins, 2);
    assert_string_equal(rc->plugins[0].name, "cpu");
    assert_string_equal(rc->plugins[1].name, "llama");
    assert_int_equal(rc->threads, 1);
    assert_int_equal(rc->filled_slots, WEFT_SLOT_BACKEND | WEFT_SLOT_MODEL);
    weft_resolved_free(rc);
    if (weft_resolve_file("manifests/baseline-cuda.yaml", reg, &no_model, &rc, &err))
        fail_msg("%s", err.message);
    assert_string_equal(rc->plugins[0].name, "cuda");
    assert_int_equal(weft_options_find(&rc->plugins[0].options, "arena_mb")->i, 0);
    weft_resolved_free(rc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve_chain_order_and_options),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_model_plugin_from_config),
        cmocka_unit_test(test_model_dir_resolve),
        cmocka_unit_test(test_baselines),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
