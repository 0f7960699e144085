/* Locks end to end over the fake plugins: freeze a candidate (tests/data/lock) resolved from
 * plugins/fakes alone, check every recorded hash against the files, write and read back (same
 * canonical text, same id, id = XXH3-128 of that text), refuse an edited lock, diff two locks
 * line by line, check a lock against tampered and missing files, and load a lock into running
 * plugins (and refuse it when a library is missing or was changed after freezing). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "plugin/candidate.h"
#include "plugin/host.h"
#include "plugin/lock.h"
#include "plugin/registry.h"
#include "plugin/resolve.h"
#include "test_read.h"
#include "util/error.h"
#include "util/hash.h"

#define FAKES WEFT_BINARY_DIR "/tests/fakes"
#define DATA WEFT_SOURCE_DIR "/tests/data/lock"

static char tmpdir[256];
static weft_host *host;

static int setup(void **state) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/weft-test-lock-XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    char cache[300];
    snprintf(cache, sizeof(cache), "%s/cache", tmpdir);
    setenv("WEFT_CACHE", cache, 1);
    host = weft_host_new();
    return host ? 0 : -1;
}

static int teardown(void **state) {
    weft_host_free(host);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static weft_lock *freeze(const char *manifest) {
    const char *dirs[] = {FAKES};
    weft_registry *reg = NULL;
    weft_resolved_candidate *rc = NULL;
    weft_lock *l = NULL;
    weft_error err;
    weft_error_clear(&err);
    if (weft_registry_discover(dirs, 1, WEFT_REGISTRY_ONLY_EXTRA, &reg, &err) != WEFT_OK ||
        weft_resolve_file(manifest, reg, NULL, &rc, &err) != WEFT_OK ||
        weft_lock_freeze(rc, &l, &err) != WEFT_OK)
        fail_msg("freeze %s: %s", manifest, err.message);
    weft_resolved_free(rc);
    weft_registry_free(reg);
    return l;
}

static void sha_of(const char *path, char *hex) {
    weft_error err;
    weft_error_clear(&err);
    if (weft_hash_sha256_file(path, hex, &err) != WEFT_OK) fail_msg("%s", err.message);
}

static void test_freeze_contents(void **state) {
    weft_lock *l = freeze(DATA "/candidate.yaml");
    assert_int_equal(l->format, WEFT_LOCK_FORMAT);
    assert_string_equal(l->candidate, "fake-lock");
    assert_string_equal(l->backend, "cpu");
    assert_string_equal(l->model, "./model");
    char real[4096];
    assert_non_null(realpath(DATA "/model", real));
    assert_string_equal(l->model_dir, real);
    assert_int_equal(l->max_model_len, 64);
    assert_int_equal(l->max_concurrency, 2);
    assert_int_equal(l->threads, 1);
    assert_true(weft_hash_is_hex(l->id, WEFT_XXH128_HEX_LEN));
    char hex[WEFT_SHA256_HEX_LEN + 1];
    sha_of(DATA "/candidate.yaml", hex);
    assert_string_equal(l->source.sha256, hex);

    const char *names[] = {"cpu", "fake.model", "fake.pass", "fake.good", "fake.op"};
    const uint32_t roles[] = {WEFT_ROLE_BACKEND, WEFT_ROLE_MODEL, WEFT_ROLE_TECHNIQUE,
                              WEFT_ROLE_TECHNIQUE, WEFT_ROLE_TECHNIQUE};
    assert_int_equal(l->n_plugins, 5);
    for (uint32_t i = 0; i < 5; i++) {
        const weft_lock_plugin *p = &l->plugins[i];
        assert_string_equal(p->name, names[i]);
        assert_int_equal(p->role, roles[i]);
        assert_int_equal(p->order, (int32_t)i);
        assert_int_equal(p->abi_min, 1);
        assert_int_equal(p->abi_max, 1);
        sha_of(p->library.path, hex);
        assert_string_equal(p->library.sha256, hex);
        sha_of(p->manifest.path, hex);
        assert_string_equal(p->manifest.sha256, hex);
        assert_non_null(strstr(p->library.path, FAKES));
    }
    assert_string_equal(l->plugins[0].version, "0.0.1");
    assert_int_equal(l->plugins[0].kind, WEFT_KIND_BACKEND);
    assert_int_equal(l->plugins[3].kind, WEFT_KIND_FEATURE);
    assert_int_equal(l->plugins[2].slots, WEFT_SLOT_PASS);
    /* options: validated with defaults filled */
    const weft_options *go = &l->plugins[3].options;
    assert_int_equal(go->count, 2);
    assert_string_equal(go->items[0].key, "token");
    assert_int_equal(go->items[0].type, WEFT_OPTION_INT);
    assert_int_equal(go->items[0].i, 3);
    assert_string_equal(go->items[1].key, "bias");
    assert_int_equal(go->items[1].type, WEFT_OPTION_FLOAT);
    assert_true(go->items[1].f == 2.5);
    assert_int_equal(l->plugins[2].options.count, 1);
    assert_true(l->plugins[2].options.items[0].f == 1.0);
    /* model files: sorted, sizes and hashes of the real files */
    assert_int_equal(l->n_model_files, 2);
    assert_string_equal(l->model_files[0].name, "config.json");
    assert_string_equal(l->model_files[1].name, "generation_config.json");
    for (int i = 0; i < 2; i++) {
        char path[4200];
        struct stat sb;
        snprintf(path, sizeof(path), "%s/%s", real, l->model_files[i].name);
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(l->model_files[i].bytes, (uint64_t)sb.st_size);
        sha_of(path, hex);
        assert_string_equal(l->model_files[i].sha256, hex);
    }
    weft_lock_free(l);
}

static void test_round_trip_and_id(void **state) {
    weft_lock *a = freeze(DATA "/candidate.yaml");
    weft_lock *again = freeze(DATA "/candidate.yaml");
    assert_string_equal(a->id, again->id); /* stable across freezes */
    weft_lock_free(again);

    char path[512];
    weft_lock_default_path(DATA "/candidate.yaml", a->candidate, path, sizeof(path));
    assert_string_equal(path, DATA "/frozen/fake-lock.lock");
    snprintf(path, sizeof(path), "%s/frozen/sub/fake-lock.lock", tmpdir);
    weft_error err;
    weft_error_clear(&err);
    char id_before[64];
    snprintf(id_before, sizeof(id_before), "%s", a->id);
    assert_int_equal(weft_lock_write(a, path, &err), WEFT_OK);
    assert_string_equal(a->id, id_before);

    weft_lock *b = NULL;
    assert_int_equal(weft_lock_load(path, &b, &err), WEFT_OK);
    assert_string_equal(b->id, a->id);
    char *ca, *cb;
    assert_int_equal(weft_lock_to_json(a, 1, &ca, &err), WEFT_OK);
    assert_int_equal(weft_lock_to_json(b, 1, &cb, &err), WEFT_OK);
    assert_string_equal(ca, cb);
    /* the id is the XXH3-128 of the canonical text, which has sorted keys and no spaces */
    char id[WEFT_XXH128_HEX_LEN + 1];
    weft_hash_xxh3_128_hex(ca, strlen(ca), id);
    assert_string_equal(id, a->id);
    const char *head = "{\"backend\":\"cpu\",\"candidate\":\"fake-lock\",\"chains\":{\"feature\":"
                       "[\"fake.good\"],\"ops\":[\"fake.op\"],\"pass\":[\"fake.pass\"]},"
                       "\"format\":1,\"manifest\":{\"path\":\"";
    assert_memory_equal(ca, head, strlen(head));
    assert_null(strstr(ca, "\"id\""));
    assert_null(strchr(ca, '\n'));
    free(ca);
    free(cb);
    weft_lock_free(b);
    weft_lock_free(a);
}

static char *replace(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    assert_non_null(at);
    size_t n = strlen(text) - strlen(from) + strlen(to);
    char *out = malloc(n + 1);
    assert_non_null(out);
    size_t pre = (size_t)(at - text);
    memcpy(out, text, pre);
    strcpy(out + pre, to);
    strcat(out, at + strlen(from));
    return out;
}

/* The lock text with one edit is refused as malformed, with exactly this message. */
static void refused_edit(const char *text, const char *from, const char *to, const char *want) {
    char *edited = replace(text, from, to);
    weft_lock *b = NULL;
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_lock_parse(edited, strlen(edited), "edit.lock", &b, &err),
                     WEFT_ERR_FORMAT);
    assert_null(b);
    assert_string_equal(err.message, want);
    free(edited);
}

static void test_edited_lock_refused(void **state) {
    weft_lock *a = freeze(DATA "/candidate.yaml");
    char path[512];
    snprintf(path, sizeof(path), "%s/edit.lock", tmpdir);
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_lock_write(a, path, &err), WEFT_OK);
    size_t len = 0;
    char *text = test_read_file(path, &len);
    assert_non_null(text);
    weft_lock *b = NULL;
    char *edited = replace(text, "\"bias\": 2.5", "\"bias\": 3.5");
    assert_int_equal(weft_lock_parse(edited, strlen(edited), "edit.lock", &b, &err),
                     WEFT_ERR_MISMATCH);
    assert_null(b);
    char want[300];
    snprintf(want, sizeof(want), "edit.lock: id differs from the lock's content: expected ");
    assert_memory_equal(err.message, want, strlen(want));
    assert_non_null(strstr(err.message, a->id));
    free(edited);

    refused_edit(text, a->plugins[0].library.sha256, "xyz",
                 "edit.lock: plugins[0].library.sha256: expected 64 lowercase hex digits, found "
                 "\"xyz\"");
    refused_edit(text, "\"format\": 1", "\"format\": 2",
                 "edit.lock: format: expected 1, found 2 (written by another weft)");
    /* a plugin or a model file named twice (found by fuzz_lock: diff paired the wrong ones) */
    refused_edit(text, "\"name\": \"fake.pass\"", "\"name\": \"fake.model\"",
                 "edit.lock: plugins[2].name: \"fake.model\" is also plugins[1]");
    refused_edit(text, "\"name\": \"generation_config.json\"", "\"name\": \"config.json\"",
                 "edit.lock: model.files[1].name: \"config.json\" is also model.files[0]");
    assert_int_equal(weft_lock_parse("[1]", 3, "edit.lock", &b, &err), WEFT_ERR_FORMAT);
    assert_string_equal(err.message,
                        "edit.lock: expected a JSON object at the top, found an array");
    free(text);
    weft_lock_free(a);
}

typedef struct lines {
    int n;
    char text[32][600];
} lines;

static void collect(void *ctx, const char *line) {
    lines *l = ctx;
    if (l->n < 32) snprintf(l->text[l->n], sizeof(l->text[0]), "%s", line);
    l->n++;
}

static void test_diff(void **state) {
    weft_lock *a = freeze(DATA "/candidate.yaml");
    weft_lock *b = freeze(DATA "/candidate.yaml");
    weft_error err;
    weft_error_clear(&err);
    lines out = {0};
    uint32_t n = 99;
    assert_int_equal(weft_lock_diff(a, b, collect, &out, &n, &err), WEFT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(out.n, 0);

    snprintf(b->plugins[2].version, sizeof(b->plugins[2].version), "1.0.1");
    ((weft_option *)&b->plugins[3].options.items[1])->f = 3.0;
    b->n_plugins = 4; /* fake.op removed (freed with b: options stay owned) */
    b->threads = 4;
    memset(b->plugins[1].library.sha256, 'a', WEFT_SHA256_HEX_LEN);
    assert_int_equal(weft_lock_diff(a, b, collect, &out, &n, &err), WEFT_OK);
    assert_int_equal(n, 5);
    char sha_line[400];
    snprintf(sha_line, sizeof(sha_line), "plugin fake.model: library sha256: %s -> %s",
             a->plugins[1].library.sha256, b->plugins[1].library.sha256);
    assert_string_equal(out.text[0], sha_line);
    assert_string_equal(out.text[1], "plugin fake.pass: version: 1.0.0 -> 1.0.1");
    assert_string_equal(out.text[2], "plugin fake.good: option bias: 2.5 -> 3");
    assert_string_equal(out.text[3], "plugin fake.op 1.0.0 removed");
    assert_string_equal(out.text[4], "serving threads: 1 -> 4");
    /* and the other way round */
    out.n = 0;
    assert_int_equal(weft_lock_diff(b, a, collect, &out, &n, &err), WEFT_OK);
    assert_int_equal(n, 5);
    assert_string_equal(out.text[3], "plugin fake.op 1.0.0 added");
    b->n_plugins = 5;
    weft_lock_free(a);
    weft_lock_free(b);
}

static void copy_tree(const char *from, const char *to) {
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "cp -R '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_check(void **state) {
    char dir[400], manifest[500], cfg[500];
    snprintf(dir, sizeof(dir), "%s/check", tmpdir);
    copy_tree(DATA, dir);
    snprintf(manifest, sizeof(manifest), "%s/candidate.yaml", dir);
    snprintf(cfg, sizeof(cfg), "%s/model/config.json", dir);
    weft_lock *l = freeze(manifest);
    weft_error err;
    weft_error_clear(&err);
    lines out = {0};
    uint32_t n = 99;
    assert_int_equal(weft_lock_check(l, 0, collect, &out, &n, &err), WEFT_OK);
    assert_int_equal(n, 0);

    /* the model's config grows by a byte; the fake.pass library moves away; the backend's ABI
     * range is edited out of the runtime's */
    size_t len = 0;
    char *text = test_read_file(cfg, &len), want[700];
    assert_non_null(text);
    char *longer = replace(text, "}", " }");
    write_text(cfg, longer);
    free(longer);
    snprintf(l->plugins[2].library.path, sizeof(l->plugins[2].library.path), "%s/gone.so", dir);
    l->plugins[0].abi_min = l->plugins[0].abi_max = 2;
    out.n = 0;
    assert_int_equal(weft_lock_check(l, 0, collect, &out, &n, &err), WEFT_OK);
    assert_int_equal(n, 3);
    assert_string_equal(out.text[0], "plugin cpu 0.0.1: ABI 2..2 is outside this runtime's 1..1");
    snprintf(want, sizeof(want), "plugin fake.pass 1.0.0: library missing: %s/gone.so", dir);
    assert_string_equal(out.text[1], want);
    char real[4096];
    assert_non_null(realpath(cfg, real));
    snprintf(want, sizeof(want),
             "model: file size differs from lock: expected %zu bytes, found %zu (%s)", len, len + 1,
             real);
    assert_string_equal(out.text[2], want);

    /* same size, other bytes: a hash difference (and not a stale cache hit) */
    char *same = replace(text, "\"fake\"", "\"fakf\"");
    write_text(cfg, same);
    free(same);
    l->plugins[0].abi_min = l->plugins[0].abi_max = 1;
    snprintf(l->plugins[2].library.path, sizeof(l->plugins[2].library.path), "%s",
             l->plugins[1].library.path);
    memcpy(l->plugins[2].library.sha256, l->plugins[1].library.sha256, WEFT_SHA256_HEX_LEN);
    out.n = 0;
    assert_int_equal(weft_lock_check(l, 0, collect, &out, &n, &err), WEFT_OK);
    assert_int_equal(n, 1);
    char now[WEFT_SHA256_HEX_LEN + 1];
    sha_of(cfg, now);
    snprintf(want, sizeof(want), "model: file hash differs from lock: expected %s, found %s (%s)",
             l->model_files[0].sha256, now, real);
    assert_string_equal(out.text[0], want);
    free(text);
    weft_lock_free(l);
}

static void test_load_lock(void **state) {
    weft_lock *l = freeze(DATA "/candidate.yaml");
    char path[512];
    snprintf(path, sizeof(path), "%s/load.lock", tmpdir);
    weft_error err;
    weft_error_clear(&err);
    assert_int_equal(weft_lock_write(l, path, &err), WEFT_OK);
    weft_candidate *c = NULL;
    if (weft_candidate_load_lock(path, weft_host_services_of(host), &c, &err) != WEFT_OK)
        fail_msg("%s", err.message);
    assert_string_equal(c->id, l->id);
    assert_int_equal(c->n_plugins, 5);
    assert_string_equal(c->backend, "cpu");
    assert_int_equal(c->max_concurrency, 2);
    assert_string_equal(weft_candidate_slot(c, WEFT_SLOT_PASS)->name, "fake.pass");
    assert_string_equal(weft_candidate_slot(c, WEFT_SLOT_BACKEND)->name, "cpu");
    assert_null(weft_candidate_slot(c, WEFT_SLOT_KV));
    const weft_loaded_plugin *good = weft_candidate_slot(c, WEFT_SLOT_FEATURE);
    assert_int_equal(good->order, 3);
    float logits[4] = {0, 0, 0, 1};
    assert_int_equal(good->desc->feature->process_logits(good->state, 7, logits, 4, &err), WEFT_OK);
    assert_true(logits[3] == 3.5f); /* the lock's options reached create() */
    for (size_t i = 0; i < c->n_plugins; i++) {
        assert_true(c->plugins[i].created);
        assert_string_equal(c->plugins[i].sha256, l->plugins[i].library.sha256);
    }
    weft_candidate_unload(c);

    /* a lock naming a library that is not there */
    char missing[512];
    snprintf(missing, sizeof(missing), "%s/missing/libweft-fake-op.so", tmpdir);
    weft_lock_plugin saved = l->plugins[4];
    snprintf(l->plugins[4].library.path, sizeof(l->plugins[4].library.path), "%s", missing);
    assert_int_equal(weft_lock_write(l, path, &err), WEFT_OK);
    c = NULL;
    assert_int_equal(weft_candidate_load_lock(path, weft_host_services_of(host), &c, &err),
                     WEFT_ERR_NOT_FOUND);
    assert_null(c);
    char want[800];
    snprintf(want, sizeof(want),
             "plugin fake.op 1.0.0: cannot open library %s: No such file or directory", missing);
    assert_string_equal(err.message, want);

    /* a library changed after freezing */
    char copy[512], cmd[1200];
    snprintf(copy, sizeof(copy), "%s/libweft-fake-op.so", tmpdir);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && printf x >> '%s'", saved.library.path, copy, copy);
    assert_int_equal(system(cmd), 0);
    snprintf(l->plugins[4].library.path, sizeof(l->plugins[4].library.path), "%s", copy);
    assert_int_equal(weft_lock_write(l, path, &err), WEFT_OK);
    assert_int_equal(weft_candidate_load_lock(path, weft_host_services_of(host), &c, &err),
                     WEFT_ERR_MISMATCH);
    char found[WEFT_SHA256_HEX_LEN + 1];
    sha_of(copy, found);
    snprintf(want, sizeof(want),
             "plugin fake.op 1.0.0: library hash differs from lock: expected %s, found %s (%s)",
             saved.library.sha256, found, copy);
    assert_string_equal(err.message, want);
    l->plugins[4] = saved;
    weft_lock_free(l);
}

static void test_load_manifest(void **state) {
    setenv("WEFT_PLUGIN_PATH", FAKES, 1);
    weft_candidate *c = NULL;
    weft_error err;
    weft_error_clear(&err);
    if (weft_candidate_load_manifest(DATA "/candidate.yaml", NULL, weft_host_services_of(host), &c,
                                     &err) != WEFT_OK)
        fail_msg("%s", err.message);
    assert_string_equal(c->id, "");
    assert_int_equal(c->n_plugins, 5);
    assert_string_equal(c->plugins[1].name, "fake.model");
    assert_non_null(weft_candidate_slot(c, WEFT_SLOT_OPS));
    weft_candidate_unload(c);
    unsetenv("WEFT_PLUGIN_PATH");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_freeze_contents),
        cmocka_unit_test(test_round_trip_and_id),
        cmocka_unit_test(test_edited_lock_refused),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_load_lock),
        cmocka_unit_test(test_load_manifest),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
