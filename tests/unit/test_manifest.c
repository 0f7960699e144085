/* Tests of the plugin and candidate manifest parsers: the repo's own manifests and a manifest
 * using every field parse to the expected values; every class of bad manifest under
 * tests/data/manifests/bad* is refused with its exact file:line:column, field path and
 * expected/found text; the document guards (size, nodes, items) hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin/manifest.h"

static int setup(void **state) {
    (void)state;
    return chdir(WEFT_SOURCE_DIR);
}

typedef struct bad_case {
    const char *file;
    const char *message; /* after "tests/data/manifests/<dir>/<file>:" */
} bad_case;

static const bad_case bad_plugin[] = {
    {"abi-missing-max.yaml",
     "5:6: abi.max: expected this required key, found nothing (it is missing)"},
    {"abi-reversed.yaml", "5:20: abi.max: expected max >= min (2), found 1"},
    {"after-self.yaml", "9:17: after[1]: expected another plugin's name, found the plugin itself"},
    {"alias.yaml", "9:10: summary: expected plain YAML without aliases, found alias *s"},
    {"anchor.yaml", "9:10: summary: expected plain YAML without anchors, found anchor &s"},
    {"architectures-on-technique.yaml",
     "9:16: architectures: expected architectures only in kind model, found it in kind technique"},
    {"backend-kind-wrong-list.yaml", "7:11: backends: expected a backend plugin to list exactly "
                                     "its own name [cpu], found another list"},
    {"bad-arch.yaml", "10:12: platforms[0].arch: expected one of x86_64|aarch64, found riscv64"},
    {"bad-backend.yaml", "7:17: backends[1]: expected one of cpu|cuda, found tpu"},
    {"bad-kind.yaml", "3:7: kind: expected one of backend|model|technique|feature, found plugin"},
    {"bad-name.yaml", "2:7: name: expected a plugin name of 1..63 characters [a-z0-9._-] starting "
                      "with a letter or digit, found KV.Test"},
    {"bad-range.yaml", "10:31: requires[0].version: expected comparators like \">=1.2.0\", "
                       "\"^1.2\", \"~1.2.3\", \"1.x\" or \"*\", found \">=1.2 <\""},
    {"bad-semver.yaml",
     "4:10: version: expected a semver 2.0 version MAJOR.MINOR.PATCH[-PRE][+BUILD] (numbers "
     "without leading zeros), found \"1.02.0\""},
    {"bad-service.yaml",
     "9:19: services[1]: expected one of "
     "graph|weights|device|kv|ops|threads|profile|tokens|collective|host_memory, found memory"},
    {"bad-slot.yaml", "8:13: slots[1]: expected a slot "
                      "(backend|model|scheduler|kv|pass|ops|executor|sampler|decoder|drafter|"
                      "placement|parallel|feature), found cache"},
    {"deep-nesting.yaml", "9:57: options.a.help[0][0][0][0][0][0][0][0][0][0][0][0][0]: expected "
                          "nesting at most 16 levels deep, found deeper"},
    {"duplicate-key.yaml",
     "9:1: name: expected each key once in a mapping, found it again (first at line 2)"},
    {"duplicate-slot.yaml",
     "8:18: slots[2]: expected each entry once, found kv again (first at line 8)"},
    {"empty-backends.yaml", "7:11: backends: expected a non-empty list, found []"},
    {"empty.yaml", "1:1: expected a mapping of manifest fields, found an empty document"},
    {"format-2.yaml", "1:9: format: expected 1 (the manifest format this runtime reads), found 2"},
    {"library-path.yaml",
     "6:10: library: expected a file name inside the bundle directory ([A-Za-z0-9._+-], no '/', "
     "not starting with '.'), found ../lib/libevil.so"},
    {"missing-library.yaml",
     "1:1: library: expected this required key, found nothing (it is missing)"},
    {"model-no-architectures.yaml",
     "1:1: architectures: expected the list of Hugging Face architectures a model plugin runs, "
     "found nothing (it is missing)"},
    {"not-a-mapping.yaml", "1:1: expected a mapping of manifest fields, found a list"},
    {"nul-in-scalar.yaml",
     "9:10: summary: expected text without NUL characters, found a NUL character"},
    {"null-value.yaml", "6:9: library: expected a library file name, found nothing"},
    {"option-bad-name.yaml", "10:3: options.Page-Size: expected an option name of 1..63 characters "
                             "[a-z0-9_] starting with a letter, found Page-Size"},
    {"option-bool-default.yaml",
     "10:34: options.verbose.default: expected true or false, found yes"},
    {"option-default-out-of-range.yaml",
     "12:14: options.page_size.default: expected an integer in 16..1024, found 8"},
    {"option-enum-default.yaml",
     "13:14: options.layout.default: expected one of nhd|hnd, found nch"},
    {"option-enum-no-values.yaml", "10:11: options.layout.values: expected the list of allowed "
                                   "values of this enum option, found nothing (it is missing)"},
    {"option-float-nan.yaml", "10:29: options.f.default: expected a number, found .nan"},
    {"option-min-gt-max.yaml", "10:45: options.n.max: expected max >= min (2), found 1.5"},
    {"option-min-on-string.yaml", "10:42: options.label.min: expected min and max only on int and "
                                  "float options, found them on a string option"},
    {"option-unknown-type.yaml",
     "10:13: options.n.type: expected one of bool|int|float|string|enum, found integer"},
    {"quoted-int.yaml", "5:12: abi.min: expected an integer in 1..65535, found \"1\""},
    {"requires-and-conflicts.yaml",
     "10:13: conflicts[0]: expected a plugin not also in requires, found kv.paged in both"},
    {"requires-self.yaml",
     "9:12: requires[0]: expected another plugin's name, found the plugin itself"},
    {"slot-kind-mismatch.yaml",
     "8:8: slots: expected slot backend only in kind backend, found it in kind technique"},
    {"sm-without-cuda.yaml",
     "10:24: platforms[0].sm: expected sm only beside a cuda major version, found sm without cuda"},
    {"syntax-error.yaml", "10:1: expected valid YAML, found a syntax error: did not find expected "
                          "',' or '}' while parsing a flow mapping"},
    {"tag.yaml", "2:7: name: expected plain YAML without tags, found tag tag:yaml.org,2002:str"},
    {"two-documents.yaml", "9:1: expected one YAML document, found a second one"},
    {"unknown-key.yaml",
     "9:1: sumary: expected a known key (format, name, kind, version, abi, library, summary, "
     "platforms, backends, slots, requires, conflicts, after, services, options, helps_when, "
     "architectures), found unknown key sumary"},
    {"wrong-type-version.yaml",
     "4:10: version: expected a semver version MAJOR.MINOR.PATCH, found a list"},
};

static const bad_case bad_candidate[] = {
    {"backend-map-missing-name.yaml",
     "4:10: backend.name: expected this required key, found nothing (it is missing)"},
    {"bad-candidate-name.yaml", "2:12: candidate: expected a plugin name of 1..63 characters "
                                "[a-z0-9._-] starting with a letter or digit, found my candidate"},
    {"bad-technique-range.yaml", "6:31: techniques[0].version: expected a version like 1.2.3, 1.2, "
                                 "1.x or *, found \"1.2.3.4\""},
    {"dup-option.yaml", "9:7: techniques[0].options.page_size: expected each key once in a "
                        "mapping, found it again (first at line 8)"},
    {"duplicate-technique.yaml", "8:12: techniques[2].name: expected each technique once, found "
                                 "kv.paged again (first at line 6)"},
    {"missing-model.yaml", "1:1: model: expected this required key, found nothing (it is missing)"},
    {"negative-threads.yaml", "5:20: serving.threads: expected an integer in 0..4096, found -1"},
    {"option-not-scalar.yaml", "7:26: techniques[0].options.page_size: expected a single value "
                               "(bool, number or text), found a list"},
    {"ppl-ratio-below-one.yaml", "6:14: quality.ppl_ratio: expected a number in 1..100, found 0.5"},
    {"technique-unknown-field.yaml", "6:22: techniques[0].option: expected a known key (name, "
                                     "version, options), found unknown key option"},
    {"techniques-not-list.yaml", "5:13: techniques: expected a list, found kv.paged"},
    {"unknown-backend.yaml", "4:10: backend: expected one of cpu|cuda, found tpu"},
    {"unknown-key.yaml",
     "5:1: technique: expected a known key (format, candidate, model, backend, model_plugin, "
     "techniques, serving, quality), found unknown key technique"},
};

static void test_bad_plugin_manifests(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(bad_plugin) / sizeof(bad_plugin[0]); i++) {
        char path[256], want[1024];
        snprintf(path, sizeof(path), "tests/data/manifests/bad/%s", bad_plugin[i].file);
        snprintf(want, sizeof(want), "%s:%s", path, bad_plugin[i].message);
        weft_error err;
        memset(&err, 0, sizeof(err));
        weft_plugin_manifest *m = NULL;
        weft_status st = weft_plugin_manifest_load(path, &m, &err);
        if (st == WEFT_OK) fail_msg("%s parsed but should have been refused", path);
        assert_null(m);
        assert_int_equal(st, WEFT_ERR_FORMAT);
        if (strcmp(err.message, want))
            fail_msg("%s:\n  got  %s\n  want %s", path, err.message, want);
    }
}

static void test_bad_candidate_manifests(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(bad_candidate) / sizeof(bad_candidate[0]); i++) {
        char path[256], want[1024];
        snprintf(path, sizeof(path), "tests/data/manifests/bad-candidate/%s",
                 bad_candidate[i].file);
        snprintf(want, sizeof(want), "%s:%s", path, bad_candidate[i].message);
        weft_error err;
        memset(&err, 0, sizeof(err));
        weft_candidate_manifest *m = NULL;
        weft_status st = weft_candidate_manifest_load(path, &m, &err);
        if (st == WEFT_OK) fail_msg("%s parsed but should have been refused", path);
        assert_null(m);
        if (strcmp(err.message, want))
            fail_msg("%s:\n  got  %s\n  want %s", path, err.message, want);
    }
}

/* Every bad file in the data dirs has an expectation above (no silently untested file). */
static void test_every_bad_file_is_listed(void **state) {
    (void)state;
    FILE *p = popen("ls tests/data/manifests/bad/*.yaml | wc -l", "r");
    assert_non_null(p);
    int n = 0;
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    assert_int_equal(n, (int)(sizeof(bad_plugin) / sizeof(bad_plugin[0])));
    p = popen("ls tests/data/manifests/bad-candidate/*.yaml | wc -l", "r");
    assert_non_null(p);
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    assert_int_equal(n, (int)(sizeof(bad_candidate) / sizeof(bad_candidate[0])));
}

static void test_full_plugin_manifest(void **state) {
    (void)state;
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_plugin_manifest *m = NULL;
    weft_status st = weft_plugin_manifest_load("tests/data/manifests/good/kv-paged.yaml", &m, &err);
    if (st) fail_msg("%s", err.message);
    assert_int_equal(m->format, 1);
    assert_string_equal(m->name, "kv.paged");
    assert_int_equal(m->kind, WEFT_KIND_TECHNIQUE);
    assert_string_equal(m->version_text, "1.2.0-rc.1+build.7");
    assert_int_equal(m->version.major, 1);
    assert_int_equal(m->version.minor, 2);
    assert_int_equal(m->version.patch, 0);
    assert_string_equal(m->version.pre, "rc.1");
    assert_string_equal(m->version.build, "build.7");
    assert_int_equal(m->abi_min, 1);
    assert_int_equal(m->abi_max, 2);
    assert_string_equal(m->library, "libweft-kv-paged.so");
    assert_string_equal(m->summary, "KV cache in fixed-size pages with per-request block tables.");
    assert_int_equal(m->n_platforms, 3);
    assert_string_equal(m->platforms[0].arch, "x86_64");
    assert_int_equal(m->platforms[0].cuda_major, 0);
    assert_int_equal(m->platforms[1].cuda_major, 13);
    assert_int_equal(m->platforms[1].n_sm, 2);
    assert_int_equal(m->platforms[1].sm[0], 80);
    assert_int_equal(m->platforms[1].sm[1], 90);
    assert_string_equal(m->platforms[2].arch, "aarch64");
    assert_int_equal(m->platforms[2].cuda_major, 12);
    assert_int_equal(m->platforms[2].n_sm, 0);
    assert_int_equal(m->n_backends, 2);
    assert_string_equal(m->backends[0], "cpu");
    assert_string_equal(m->backends[1], "cuda");
    assert_true(weft_plugin_manifest_has_backend(m, "cuda"));
    assert_false(weft_plugin_manifest_has_backend(m, "cud"));
    assert_int_equal(m->slots, WEFT_SLOT_KV | WEFT_SLOT_OPS);
    assert_int_equal(m->n_requires, 2);
    assert_string_equal(m->requires[0].name, "sched.continuous");
    assert_string_equal(m->requires[0].range.text, ">=1.0.0 <2.0.0");
    assert_int_equal(m->requires[0].pos.line, 18);
    assert_int_equal(m->requires[0].pos.column, 5);
    weft_semver v;
    assert_int_equal(weft_semver_parse("1.9.3", &v, NULL), WEFT_OK);
    assert_true(weft_semver_satisfies(&m->requires[0].range, &v));
    assert_int_equal(weft_semver_parse("2.0.0", &v, NULL), WEFT_OK);
    assert_false(weft_semver_satisfies(&m->requires[0].range, &v));
    assert_string_equal(m->requires[1].name, "fuse.swiglu");
    assert_string_equal(m->requires[1].range.text, "*");
    assert_int_equal(m->n_conflicts, 1);
    assert_string_equal(m->conflicts[0].name, "kv.sliding-window");
    assert_string_equal(m->conflicts[0].range.text, "^0.3");
    assert_int_equal(m->n_after, 2);
    assert_string_equal(m->after[0], "quant.w8a16");
    assert_string_equal(m->after[1], "fuse.rmsnorm-residual");
    assert_int_equal(m->services, (1u << WEFT_SERVICE_KV) | (1u << WEFT_SERVICE_DEVICE) |
                                      (1u << WEFT_SERVICE_OPS) | (1u << WEFT_SERVICE_GRAPH));
    assert_int_equal(m->n_options, 5);
    const weft_option_schema *o = &m->options[0];
    assert_string_equal(o->name, "page_size");
    assert_int_equal(o->type, WEFT_SCHEMA_INT);
    assert_int_equal(o->def.type, WEFT_OPTION_INT);
    assert_int_equal(o->def.i, 16);
    assert_true(o->has_min && o->has_max);
    assert_int_equal(o->imin, 16);
    assert_int_equal(o->imax, 1024);
    assert_string_equal(o->help, "tokens per page");
    o = weft_plugin_manifest_option(m, "pool_fraction");
    assert_non_null(o);
    assert_int_equal(o->def.type, WEFT_OPTION_FLOAT);
    assert_true(fabs(o->def.f - 0.9) < 1e-12);
    assert_true(fabs(o->fmin - 0.1) < 1e-12 && fabs(o->fmax - 1.0) < 1e-12);
    o = weft_plugin_manifest_option(m, "prefix_hashing");
    assert_int_equal(o->def.type, WEFT_OPTION_BOOL);
    assert_int_equal(o->def.i, 0);
    o = weft_plugin_manifest_option(m, "layout");
    assert_int_equal(o->type, WEFT_SCHEMA_ENUM);
    assert_int_equal(o->def.type, WEFT_OPTION_STRING);
    assert_string_equal(o->def.s, "nhd");
    assert_int_equal(o->n_values, 2);
    assert_string_equal(o->values[1], "hnd");
    o = weft_plugin_manifest_option(m, "label");
    assert_string_equal(o->def.s, "paged kv");
    assert_string_equal(o->help, "");
    assert_null(weft_plugin_manifest_option(m, "page"));
    assert_string_equal(m->helps_when,
                        "more than one concurrent request, or requests of mixed lengths\n");
    assert_int_equal(m->n_architectures, 0);

    /* a copy is independent of the original */
    weft_plugin_manifest *copy = NULL;
    assert_int_equal(weft_plugin_manifest_dup(m, &copy, &err), WEFT_OK);
    weft_plugin_manifest_free(m);
    assert_string_equal(copy->name, "kv.paged");
    assert_string_equal(copy->options[3].def.s, "nhd");
    assert_string_equal(copy->path, "tests/data/manifests/good/kv-paged.yaml");
    weft_plugin_manifest_free(copy);
}

static weft_plugin_manifest *load_ok(const char *path) {
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_plugin_manifest *m = NULL;
    if (weft_plugin_manifest_load(path, &m, &err)) fail_msg("%s", err.message);
    return m;
}

static void test_repo_bundle_manifests(void **state) {
    (void)state;
    weft_plugin_manifest *cpu = load_ok("plugins/backends/cpu/manifest.yaml");
    assert_string_equal(cpu->name, "cpu");
    assert_int_equal(cpu->kind, WEFT_KIND_BACKEND);
    assert_string_equal(cpu->library, "libweft-cpu.so");
    assert_int_equal(cpu->slots, WEFT_SLOT_BACKEND);
    assert_int_equal(cpu->n_backends, 1);
    assert_string_equal(cpu->backends[0], "cpu");
    const weft_option_schema *t = weft_plugin_manifest_option(cpu, "threads");
    assert_non_null(t);
    assert_int_equal(t->type, WEFT_SCHEMA_INT);
    assert_int_equal(t->def.i, 0);
    weft_plugin_manifest_free(cpu);

    weft_plugin_manifest *cuda = load_ok("plugins/backends/cuda/manifest.yaml");
    assert_string_equal(cuda->library, "libweft-cuda.so");
    assert_int_equal(cuda->n_platforms, 1);
    assert_string_equal(cuda->platforms[0].arch, "x86_64");
    assert_int_equal(cuda->platforms[0].cuda_major, 13);
    assert_int_equal(cuda->platforms[0].n_sm, 3);
    assert_int_equal(cuda->platforms[0].sm[2], 90);
    assert_int_equal(weft_plugin_manifest_option(cuda, "device")->def.i, 0);
    assert_int_equal(weft_plugin_manifest_option(cuda, "arena_mb")->def.i, 0);
    weft_plugin_manifest_free(cuda);

    weft_plugin_manifest *llama = load_ok("models/llama/manifest.yaml");
    assert_int_equal(llama->kind, WEFT_KIND_MODEL);
    assert_int_equal(llama->slots, WEFT_SLOT_MODEL);
    assert_string_equal(llama->library, "libweft-llama.so");
    assert_int_equal(llama->n_architectures, 4);
    assert_string_equal(llama->architectures[0], "LlamaForCausalLM");
    assert_string_equal(llama->architectures[1], "MistralForCausalLM");
    assert_string_equal(llama->architectures[2], "Qwen2ForCausalLM");
    assert_string_equal(llama->architectures[3], "Qwen3ForCausalLM");
    assert_true(weft_plugin_manifest_has_backend(llama, "cpu"));
    assert_true(weft_plugin_manifest_has_backend(llama, "cuda"));
    weft_plugin_manifest_free(llama);
}

static void test_candidate_manifests(void **state) {
    (void)state;
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_candidate_manifest *m = NULL;
    if (weft_candidate_manifest_load("tests/data/manifests/good/candidate-full.yaml", &m, &err))
        fail_msg("%s", err.message);
    assert_string_equal(m->candidate, "paged-int8");
    assert_string_equal(m->model, "../models/tiny");
    assert_int_equal(m->model_pos.line, 3);
    assert_int_equal(m->model_pos.column, 8);
    assert_string_equal(m->backend.name, "cpu");
    assert_string_equal(m->backend.range.text, "^0.1");
    assert_int_equal(m->backend.n_options, 1);
    assert_string_equal(m->backend.options[0].key, "threads");
    assert_string_equal(m->backend.options[0].text, "4");
    assert_int_equal(m->backend.options[0].quoted, 0);
    assert_string_equal(m->model_plugin.name, "llama");
    assert_string_equal(m->model_plugin.range.text, "*");
    assert_int_equal(m->n_techniques, 2);
    weft_candidate_ref *t = &m->techniques[0];
    assert_string_equal(t->name, "kv.paged");
    assert_string_equal(t->range.text, "~1.2");
    assert_int_equal(t->n_options, 3);
    assert_string_equal(t->options[0].key, "page_size");
    assert_string_equal(t->options[0].text, "32");
    assert_int_equal(t->options[0].pos.line, 13);
    assert_int_equal(t->options[0].pos.column, 18);
    assert_string_equal(t->options[2].text, "8");
    assert_int_equal(t->options[2].quoted, 1);
    assert_string_equal(m->techniques[1].name, "fuse.swiglu");
    assert_int_equal(m->techniques[1].n_options, 0);
    assert_int_equal(m->max_model_len, 4096);
    assert_int_equal(m->max_concurrency, 8);
    assert_int_equal(m->threads, 2);
    assert_true(m->has_mean_kl && m->has_p99_kl && m->has_ppl_ratio);
    assert_true(fabs(m->mean_kl - 0.02) < 1e-12);
    assert_true(fabs(m->p99_kl - 0.3) < 1e-12);
    assert_true(fabs(m->ppl_ratio - 1.02) < 1e-12);
    weft_candidate_manifest_free(m);

    if (weft_candidate_manifest_load("manifests/baseline-cpu.yaml", &m, &err))
        fail_msg("%s", err.message);
    assert_string_equal(m->candidate, "baseline-cpu");
    assert_string_equal(m->model, "stories260k");
    assert_string_equal(m->backend.name, "cpu");
    assert_int_equal(m->n_techniques, 0);
    assert_int_equal(m->threads, 1);
    assert_false(m->has_mean_kl);
    weft_candidate_manifest_free(m);

    if (weft_candidate_manifest_load("manifests/baseline-cuda.yaml", &m, &err))
        fail_msg("%s", err.message);
    assert_string_equal(m->backend.name, "cuda");
    assert_int_equal(m->threads, 0);
    weft_candidate_manifest_free(m);
}

/* Buffers need no NUL terminator, and the name given is the file in messages. */
static void test_parse_from_buffer(void **state) {
    (void)state;
    const char text[] = "format: 1\nname: fuse.x\nkind: technique\nversion: 0.0.1\n"
                        "abi: {min: 1, max: 1}\nlibrary: libx.so\nbackends: [cpu]\nslots: [pass]\n"
                        "garbage after the end";
    size_t len = sizeof(text) - 1 - strlen("garbage after the end");
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_plugin_manifest *m = NULL;
    assert_int_equal(weft_plugin_manifest_parse(text, len, "mem.yaml", &m, &err), WEFT_OK);
    assert_string_equal(m->name, "fuse.x");
    assert_int_equal(m->slots, WEFT_SLOT_PASS);
    assert_int_equal(m->n_options, 0);
    assert_string_equal(m->summary, "");
    weft_plugin_manifest_free(m);
    /* the whole buffer: the trailing text is a plain scalar where a key should be */
    assert_int_not_equal(weft_plugin_manifest_parse(text, sizeof(text) - 1, "mem.yaml", &m, &err),
                         WEFT_OK);
    assert_string_equal(err.message, "mem.yaml:10:1: expected valid YAML, found a syntax error: "
                                     "could not find expected ':' while scanning a simple key");
    assert_int_equal(weft_plugin_manifest_parse(NULL, 0, NULL, &m, &err), WEFT_ERR_FORMAT);
    assert_string_equal(
        err.message,
        "<buffer>:1:1: expected a mapping of manifest fields, found an empty document");
}

static void test_document_guards(void **state) {
    (void)state;
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_plugin_manifest *m = NULL;
    /* more than 1 MiB */
    size_t big = WEFT_MANIFEST_MAX_BYTES + 1;
    char *text = malloc(big);
    assert_non_null(text);
    memset(text, '#', big);
    assert_int_equal(weft_plugin_manifest_parse(text, big, "big.yaml", &m, &err), WEFT_ERR_FORMAT);
    assert_string_equal(err.message, "big.yaml: expected a manifest of at most 1048576 bytes, "
                                     "found 1048577 bytes");
    /* a list longer than 1024 entries */
    size_t used = (size_t)snprintf(text, big, "format: 1\nafter: [");
    for (int i = 0; i < 1100; i++)
        used += (size_t)snprintf(text + used, big - used, "a%d, ", i);
    used += (size_t)snprintf(text + used, big - used, "z]\n");
    assert_int_equal(weft_plugin_manifest_parse(text, used, "long.yaml", &m, &err),
                     WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "long.yaml:2:"));
    assert_non_null(strstr(err.message, ": after: expected at most 1024 entries in one list, "
                                        "found more"));
    /* more than WEFT_MANIFEST_MAX_NODES nodes, spread over many small lists */
    used = (size_t)snprintf(text, big, "x:\n");
    for (int i = 0; i < 700; i++) {
        used += (size_t)snprintf(text + used, big - used, "  k%d: [", i);
        for (int k = 0; k < 30; k++)
            used += (size_t)snprintf(text + used, big - used, "1, ");
        used += (size_t)snprintf(text + used, big - used, "1]\n");
    }
    assert_int_equal(weft_plugin_manifest_parse(text, used, "nodes.yaml", &m, &err),
                     WEFT_ERR_FORMAT);
    assert_non_null(strstr(err.message, "expected at most 20000 YAML nodes, found more"));
    free(text);
}

static void test_options_build(void **state) {
    (void)state;
    weft_plugin_manifest *m = load_ok("tests/data/manifests/good/kv-paged.yaml");
    weft_error err;
    memset(&err, 0, sizeof(err));
    weft_options opts;
    /* defaults only */
    assert_int_equal(weft_options_build(m, NULL, 0, "c.yaml", "techniques[0].options", &opts, &err),
                     WEFT_OK);
    assert_int_equal(opts.count, 5);
    assert_string_equal(opts.items[0].key, "page_size");
    assert_int_equal(opts.items[0].i, 16);
    assert_string_equal(weft_options_find(&opts, "layout")->s, "nhd");
    weft_options_free(&opts);
    assert_null(opts.items);

    char t0[] = "64", t1[] = "hnd", t2[] = "true", t3[] = "0.5", t4[] = "12";
    weft_manifest_value vals[] = {
        {"page_size", t0, 0, {7, 18}},      {"layout", t1, 0, {8, 15}},
        {"prefix_hashing", t2, 0, {9, 23}}, {"pool_fraction", t3, 0, {10, 22}},
        {"label", t4, 1, {11, 14}},
    };
    assert_int_equal(weft_options_build(m, vals, 5, "c.yaml", "techniques[0].options", &opts, &err),
                     WEFT_OK);
    assert_int_equal(weft_options_find(&opts, "page_size")->i, 64);
    assert_string_equal(weft_options_find(&opts, "layout")->s, "hnd");
    assert_int_equal(weft_options_find(&opts, "prefix_hashing")->i, 1);
    assert_true(fabs(weft_options_find(&opts, "pool_fraction")->f - 0.5) < 1e-12);
    assert_string_equal(weft_options_find(&opts, "label")->s, "12");
    assert_int_equal(weft_options_find(&opts, "label")->type, WEFT_OPTION_STRING);
    /* a copy outlives the manifest and the value texts */
    weft_options copy;
    assert_int_equal(weft_options_dup(&opts, &copy, &err), WEFT_OK);
    weft_options_free(&opts);
    weft_plugin_manifest_free(m);
    t1[0] = 'X';
    assert_string_equal(weft_options_find(&copy, "layout")->s, "hnd");
    assert_string_equal(copy.items[4].key, "label");
    weft_options_free(&copy);

    m = load_ok("tests/data/manifests/good/kv-paged.yaml");
    static const struct {
        const char *key, *text;
        uint32_t quoted;
        const char *want;
    } bad[] = {
        {"page_size", "0", 0,
         "c.yaml:7:18: techniques[0].options.page_size: expected an integer in 16..1024, found 0"},
        {"page_size", "16", 1,
         "c.yaml:7:18: techniques[0].options.page_size: expected an integer in 16..1024, found "
         "\"16\""},
        {"page_size", "1.5", 0,
         "c.yaml:7:18: techniques[0].options.page_size: expected an integer in 16..1024, found "
         "1.5"},
        {"pool_fraction", "2", 0,
         "c.yaml:7:18: techniques[0].options.pool_fraction: expected a number in 0.1..1, found 2"},
        {"prefix_hashing", "1", 0,
         "c.yaml:7:18: techniques[0].options.prefix_hashing: expected true or false, found 1"},
        {"layout", "nch", 0,
         "c.yaml:7:18: techniques[0].options.layout: expected one of nhd|hnd, found nch"},
        {"pagesize", "32", 0,
         "c.yaml:7:18: techniques[0].options.pagesize: expected an option of kv.paged (page_size, "
         "pool_fraction, prefix_hashing, layout, label), found unknown option pagesize"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        weft_manifest_value v = {"", (char *)bad[i].text, bad[i].quoted, {7, 18}};
        snprintf(v.key, sizeof(v.key), "%s", bad[i].key);
        assert_int_equal(
            weft_options_build(m, &v, 1, "c.yaml", "techniques[0].options", &opts, &err),
            WEFT_ERR_FORMAT);
        assert_string_equal(err.message, bad[i].want);
        assert_null(opts.items);
    }
    weft_plugin_manifest_free(m);
}

static void test_names(void **state) {
    (void)state;
    assert_int_equal(weft_slot_from_name("kv"), WEFT_SLOT_KV);
    assert_int_equal(weft_slot_from_name("feature"), WEFT_SLOT_FEATURE);
    assert_int_equal(weft_slot_from_name("kvx"), 0);
    assert_string_equal(weft_slot_name(WEFT_SLOT_PLACEMENT), "placement");
    assert_null(weft_slot_name(WEFT_SLOT_KV | WEFT_SLOT_OPS));
    assert_true(weft_slot_is_chain(WEFT_SLOT_PASS));
    assert_true(weft_slot_is_chain(WEFT_SLOT_OPS));
    assert_true(weft_slot_is_chain(WEFT_SLOT_FEATURE));
    assert_false(weft_slot_is_chain(WEFT_SLOT_KV));
    char buf[64];
    assert_string_equal(
        weft_slots_format(WEFT_SLOT_KV | WEFT_SLOT_PASS | WEFT_SLOT_BACKEND, ",", buf, sizeof(buf)),
        "backend,kv,pass");
    assert_int_equal(weft_service_from_name("host_memory"), WEFT_SERVICE_HOST_MEMORY);
    assert_int_equal(weft_service_from_name("collective"), WEFT_SERVICE_COLLECTIVE);
    assert_string_equal(weft_service_name(WEFT_SERVICE_TOKENS), "tokens");
    assert_string_equal(weft_plugin_kind_name(WEFT_KIND_FEATURE), "feature");
    assert_null(weft_plugin_kind_name(9));
    assert_true(weft_plugin_name_valid("kv.prefix-cache"));
    assert_true(weft_plugin_name_valid("0day_x"));
    assert_false(weft_plugin_name_valid(".hidden"));
    assert_false(weft_plugin_name_valid("Kv"));
    assert_false(weft_plugin_name_valid(""));
    assert_false(weft_plugin_name_valid("a/b"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_plugin_manifests),
        cmocka_unit_test(test_bad_candidate_manifests),
        cmocka_unit_test(test_every_bad_file_is_listed),
        cmocka_unit_test(test_full_plugin_manifest),
        cmocka_unit_test(test_repo_bundle_manifests),
        cmocka_unit_test(test_candidate_manifests),
        cmocka_unit_test(test_parse_from_buffer),
        cmocka_unit_test(test_document_guards),
        cmocka_unit_test(test_options_build),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
