/* libFuzzer target for the resolver (plugin/resolve.c): how a candidate manifest, the file agents
 * edit to compose an engine, meets the plugin bundles on the search path. The input, split at
 * lines "#--", is a candidate manifest and up to four plugin manifests, each written as the
 * manifest.yaml of a bundle b1..b4 in a private directory that is the registry's only search path
 * (an empty part leaves the bundle out). A refusal must carry a message; a resolved candidate
 * must list its backend first and its model plugin second, name each plugin once, run only
 * techniques that declare the candidate's backend, put every technique after those of its
 * `after` list that were chosen, and hold every schema option of every plugin. Files live under
 * $TMPDIR (or /tmp), removed at exit; WEFT_FUZZ_VERBOSE prints refusals. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "plugin/manifest.h"
#include "plugin/registry.h"
#include "plugin/resolve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { N_BUNDLES = 4 };
static char root[512];

static void bundle_dir(char *out, size_t cap, int i) {
    snprintf(out, cap, "%s/b%d", root, i + 1);
}

static void remove_all(void) {
    char d[600];
    for (int i = 0; i < N_BUNDLES; i++) {
        bundle_dir(d, sizeof(d), i);
        fuzz_empty_dir(d);
        rmdir(d);
    }
    rmdir(root);
}

static int index_of(const weft_resolved_candidate *c, const char *name) {
    for (uint32_t i = 0; i < c->n_plugins; i++)
        if (!strcmp(c->plugins[i].name, name)) return (int)i;
    return -1;
}

static void check(const weft_resolved_candidate *c) {
    if (c->n_plugins < 2 || c->plugins[0].role != WEFT_ROLE_BACKEND ||
        strcmp(c->plugins[0].name, c->backend) || c->plugins[1].role != WEFT_ROLE_MODEL)
        __builtin_trap();
    for (uint32_t i = 0; i < c->n_plugins; i++) {
        const weft_resolved_plugin *p = &c->plugins[i];
        if (index_of(c, p->name) != (int)i || p->order != (int32_t)i) __builtin_trap();
        if (!p->manifest || p->options.count != p->manifest->n_options) __builtin_trap();
        if (p->role != WEFT_ROLE_TECHNIQUE) continue;
        int on_backend = 0;
        for (uint32_t k = 0; k < p->manifest->n_backends; k++)
            on_backend |= !strcmp(p->manifest->backends[k], c->backend);
        if (!on_backend) __builtin_trap();
        for (uint32_t k = 0; k < p->manifest->n_after; k++) {
            int j = index_of(c, p->manifest->after[k]);
            if (j >= 0 && c->plugins[j].role == WEFT_ROLE_TECHNIQUE && j > (int)i) {
                fprintf(stderr, "fuzz_resolve: %s runs before %s, which it lists in after\n",
                        p->name, c->plugins[j].name);
                __builtin_trap();
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (fuzz_private_dir(root, sizeof(root), "resolve")) {
        atexit(remove_all);
        char d[600];
        for (int i = 0; i < N_BUNDLES; i++) {
            bundle_dir(d, sizeof(d), i);
            if (mkdir(d, 0755)) __builtin_trap();
        }
    }
    const uint8_t *part[1 + N_BUNDLES];
    size_t len[1 + N_BUNDLES];
    fuzz_split(data, size, part, len, 1 + N_BUNDLES);
    for (int i = 0; i < N_BUNDLES; i++) {
        char d[600], p[700];
        bundle_dir(d, sizeof(d), i);
        snprintf(p, sizeof(p), "%s/manifest.yaml", d);
        unlink(p);
        if (len[1 + i]) fuzz_write_file(p, part[1 + i], len[1 + i]);
    }
    weft_candidate_manifest *m = NULL;
    weft_error err = fuzz_error();
    if (weft_candidate_manifest_parse(len[0] ? (const char *)part[0] : "", len[0], "candidate.yaml",
                                      &m, &err) != WEFT_OK) {
        fuzz_refused(&err);
        return 0;
    }
    const char *dirs[] = {root};
    weft_registry *reg = NULL;
    err = fuzz_error();
    if (weft_registry_discover(dirs, 1, WEFT_REGISTRY_ONLY_EXTRA, &reg, &err) != WEFT_OK)
        __builtin_trap(); /* only running out of memory fails */
    weft_resolve_options o = {sizeof(o), WEFT_RESOLVE_NO_MODEL, NULL, "x86_64"};
    weft_resolved_candidate *c = NULL;
    err = fuzz_error();
    if (weft_resolve(m, reg, &o, &c, &err) == WEFT_OK) {
        check(c);
        weft_resolved_free(c);
    } else {
        if (c) __builtin_trap();
        fuzz_refused(&err);
    }
    weft_registry_free(reg);
    weft_candidate_manifest_free(m);
    return 0;
}
