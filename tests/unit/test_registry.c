/* Tests of bundle discovery: a temporary tree with good, broken, shadowed and newer bundles,
 * found through --path style extra dirs and through WEFT_PLUGIN_PATH, in the documented order;
 * lookups by version range; name suggestions. No library exists anywhere in the tree: the
 * registry must not need one. */
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

#include "plugin/registry.h"

static char root[PATH_MAX];

static void write_bundle(const char *rel, const char *name, const char *version,
                         const char *extra) {
    char dir[PATH_MAX + 64], path[PATH_MAX + 128];
    snprintf(dir, sizeof(dir), "%s/%s", root, rel);
    char cmd[PATH_MAX + 80];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof(path), "%s/manifest.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "format: 1\nname: %s\nkind: technique\nversion: %s\nabi: {min: 1, max: 1}\n"
            "library: lib%s.so\nbackends: [cpu]\nslots: [kv]\n%s",
            name, version, name, extra ? extra : "");
    fclose(f);
}

static int setup(void **state) {
    (void)state;
    snprintf(root, sizeof(root), "/tmp/weft-test-registry-XXXXXX");
    if (!mkdtemp(root)) return -1;
    /* dir1 holds bundles one level down; dir2 is itself a bundle; dir3 holds a newer one */
    write_bundle("dir1/a-paged", "kv.paged", "1.0.0", NULL);
    write_bundle("dir1/b-broken", "kv.broken", "1.0.0", "options: {x: {type: int, default: z}}\n");
    write_bundle("dir1/c-int8", "kv.int8", "0.3.1", NULL);
    write_bundle("dir2", "kv.paged", "1.0.0", NULL); /* same name+version: shadowed */
    write_bundle("dir3/paged-new", "kv.paged", "1.4.0", NULL);
    write_bundle("dir3/paged-pre", "kv.paged", "2.0.0-rc.1", NULL);
    /* not a bundle: no manifest.yaml; hidden dirs are skipped */
    char cmd[PATH_MAX + 80];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s/dir1/empty' '%s/dir1/.hidden'", root, root);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "cp '%s/dir1/a-paged/manifest.yaml' '%s/dir1/.hidden/'", root, root);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static const weft_registry_entry *by_dir(const weft_registry *reg, const char *rel) {
    char want[PATH_MAX + 64];
    snprintf(want, sizeof(want), "%s/%s", root, rel);
    for (size_t i = 0; i < reg->n; i++)
        if (!strcmp(reg->entries[i].bundle_dir, want)) return &reg->entries[i];
    fail_msg("no entry for %s", want);
    return NULL;
}

static void check_tree(const weft_registry *reg, uint32_t origin) {
    assert_int_equal(reg->n, 6);
    const weft_registry_entry *a = by_dir(reg, "dir1/a-paged");
    assert_int_equal(a->status, WEFT_BUNDLE_OK);
    assert_int_equal(a->origin, origin);
    assert_string_equal(a->manifest->name, "kv.paged");
    assert_int_equal(a->shadowed_by, -1);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof(want), "%s/dir1/a-paged/manifest.yaml", root);
    assert_string_equal(a->manifest_path, want);

    const weft_registry_entry *b = by_dir(reg, "dir1/b-broken");
    assert_int_equal(b->status, WEFT_BUNDLE_BROKEN);
    assert_null(b->manifest);
    snprintf(want, sizeof(want),
             "%s/dir1/b-broken/manifest.yaml:9:35: options.x.default: expected an integer, found z",
             root);
    assert_string_equal(b->error.message, want);

    const weft_registry_entry *s = by_dir(reg, "dir2");
    assert_int_equal(s->status, WEFT_BUNDLE_SHADOWED);
    assert_int_equal(s->shadowed_by, (int32_t)(a - reg->entries));

    /* discovery order: dir1 (by name), then dir2, then dir3 */
    assert_ptr_equal(&reg->entries[0], a);
    assert_ptr_equal(&reg->entries[1], b);
    assert_string_equal(reg->entries[2].manifest->name, "kv.int8");
    assert_ptr_equal(&reg->entries[3], s);
    assert_string_equal(reg->entries[4].manifest->version_text, "1.4.0");
    assert_string_equal(reg->entries[5].manifest->version_text, "2.0.0-rc.1");
}

static void test_extra_dirs(void **state) {
    (void)state;
    char d1[PATH_MAX + 8], d2[PATH_MAX + 8], d3[PATH_MAX + 8];
    snprintf(d1, sizeof(d1), "%s/dir1", root);
    snprintf(d2, sizeof(d2), "%s/dir2", root);
    snprintf(d3, sizeof(d3), "%s/dir3", root);
    const char *dirs[] = {d1, d2, d3, "/nonexistent/weft/plugins", d1};
    weft_registry *reg = NULL;
    weft_error err;
    memset(&err, 0, sizeof(err));
    assert_int_equal(weft_registry_discover(dirs, 5, WEFT_REGISTRY_ONLY_EXTRA, &reg, &err),
                     WEFT_OK);
    check_tree(reg, WEFT_ORIGIN_EXTRA);
    /* the missing dir is skipped; d1 listed twice is searched twice but adds nothing */
    assert_int_equal(reg->n_dirs, 4);

    /* lookups: highest version in range; pre-releases only when asked for */
    const weft_registry_entry *e = weft_registry_find(reg, "kv.paged", NULL);
    assert_non_null(e);
    assert_string_equal(e->manifest->version_text, "2.0.0-rc.1");
    weft_semver_range r;
    assert_int_equal(weft_semver_range_parse("^1", &r, NULL), WEFT_OK);
    e = weft_registry_find(reg, "kv.paged", &r);
    assert_string_equal(e->manifest->version_text, "1.4.0");
    assert_int_equal(weft_semver_range_parse("~1.0", &r, NULL), WEFT_OK);
    e = weft_registry_find(reg, "kv.paged", &r);
    assert_ptr_equal(e, by_dir(reg, "dir1/a-paged")); /* the first found, not the shadowed one */
    assert_int_equal(weft_semver_range_parse("^3", &r, NULL), WEFT_OK);
    assert_null(weft_registry_find(reg, "kv.paged", &r));
    assert_null(weft_registry_find(reg, "kv.broken", NULL));
    assert_true(weft_registry_has_name(reg, "kv.int8"));
    assert_false(weft_registry_has_name(reg, "kv.broken"));

    char near[128];
    assert_int_equal(weft_registry_suggest(reg, "kv.pagd", 0, near, sizeof(near)), 1);
    assert_string_equal(near, "kv.paged");
    assert_int_equal(weft_registry_suggest(reg, "paged", 0, near, sizeof(near)), 1);
    assert_string_equal(near, "kv.paged");
    assert_int_equal(weft_registry_suggest(reg, "kv.int", 0, near, sizeof(near)), 1);
    assert_string_equal(near, "kv.int8");
    assert_int_equal(weft_registry_suggest(reg, "kv.", 0, near, sizeof(near)), 2);
    assert_string_equal(near, "kv.paged, kv.int8"); /* both contain it; ties keep discovery order */
    assert_int_equal(weft_registry_suggest(reg, "sched.continuous", 0, near, sizeof(near)), 0);
    assert_string_equal(near, "");
    assert_int_equal(weft_registry_suggest(reg, "kv.pagd", WEFT_KIND_BACKEND, near, sizeof(near)),
                     0);
    weft_registry_free(reg);
}

static void test_env_path(void **state) {
    (void)state;
    char env[3 * PATH_MAX];
    snprintf(env, sizeof(env), "%s/dir1::%s/dir2:%s/dir3", root, root, root);
    setenv("WEFT_PLUGIN_PATH", env, 1);
    weft_registry *reg = NULL;
    weft_error err;
    memset(&err, 0, sizeof(err));
    assert_int_equal(weft_registry_discover(NULL, 0,
                                            WEFT_REGISTRY_NO_BUILD | WEFT_REGISTRY_NO_INSTALL |
                                                WEFT_REGISTRY_NO_SOURCE,
                                            &reg, &err),
                     WEFT_OK);
    check_tree(reg, WEFT_ORIGIN_ENV);
    weft_registry_free(reg);

    /* extra dirs come before the environment: dir2 first now shadows dir1's copy */
    char d2[PATH_MAX + 8];
    snprintf(d2, sizeof(d2), "%s/dir2", root);
    const char *dirs[] = {d2};
    assert_int_equal(weft_registry_discover(dirs, 1,
                                            WEFT_REGISTRY_NO_BUILD | WEFT_REGISTRY_NO_INSTALL |
                                                WEFT_REGISTRY_NO_SOURCE,
                                            &reg, &err),
                     WEFT_OK);
    assert_int_equal(reg->n, 6);
    assert_int_equal(reg->entries[0].origin, WEFT_ORIGIN_EXTRA);
    assert_int_equal(reg->entries[0].status, WEFT_BUNDLE_OK);
    assert_int_equal(by_dir(reg, "dir1/a-paged")->status, WEFT_BUNDLE_SHADOWED);
    assert_int_equal(by_dir(reg, "dir1/a-paged")->shadowed_by, 0);
    weft_registry_free(reg);

    /* ONLY_EXTRA ignores the environment */
    assert_int_equal(weft_registry_discover(NULL, 0, WEFT_REGISTRY_ONLY_EXTRA, &reg, &err),
                     WEFT_OK);
    assert_int_equal(reg->n, 0);
    assert_int_equal(reg->n_dirs, 0);
    weft_registry_free(reg);
    unsetenv("WEFT_PLUGIN_PATH");
}

/* The source tree's bundle manifests are found without building them. */
static void test_source_tree(void **state) {
    (void)state;
    weft_registry *reg = NULL;
    weft_error err;
    memset(&err, 0, sizeof(err));
    assert_int_equal(weft_registry_discover(NULL, 0,
                                            WEFT_REGISTRY_NO_ENV | WEFT_REGISTRY_NO_BUILD |
                                                WEFT_REGISTRY_NO_INSTALL,
                                            &reg, &err),
                     WEFT_OK);
    const char *names[] = {"cpu", "cuda", "llama"};
    for (int i = 0; i < 3; i++) {
        const weft_registry_entry *e = weft_registry_find(reg, names[i], NULL);
        if (!e) fail_msg("bundle %s not found in the source tree", names[i]);
        assert_int_equal(e->origin, WEFT_ORIGIN_SOURCE);
        assert_int_equal(e->status, WEFT_BUNDLE_OK);
    }
    assert_int_equal(weft_registry_find(reg, "llama", NULL)->manifest->kind, WEFT_KIND_MODEL);
    /* the same tree as an extra dir first: source copies are dropped, not shadowed */
    weft_registry_free(reg);
    const char *dirs[] = {WEFT_SOURCE_DIR "/plugins/backends", WEFT_SOURCE_DIR "/models"};
    assert_int_equal(weft_registry_discover(dirs, 2,
                                            WEFT_REGISTRY_NO_ENV | WEFT_REGISTRY_NO_BUILD |
                                                WEFT_REGISTRY_NO_INSTALL,
                                            &reg, &err),
                     WEFT_OK);
    for (size_t i = 0; i < reg->n; i++) {
        assert_int_not_equal(reg->entries[i].status, WEFT_BUNDLE_SHADOWED);
        if (!strcmp(reg->entries[i].manifest ? reg->entries[i].manifest->name : "", "cpu"))
            assert_int_equal(reg->entries[i].origin, WEFT_ORIGIN_EXTRA);
    }
    weft_registry_free(reg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extra_dirs),
        cmocka_unit_test(test_env_path),
        cmocka_unit_test(test_source_tree),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
