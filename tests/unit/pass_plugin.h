/* For the unit tests of graph passes (test_fuse_linear_add_norm, test_fuse_norm_linear,
 * test_fuse_rope_attention): opening a technique bundle built beside the tests, and adding
 * tensors and nodes to a hand-built graph (a failure fails the test). */
#ifndef WEFT_TEST_PASS_PLUGIN_H
#define WEFT_TEST_PASS_PLUGIN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "weft/plugin.h"

/* <plugins>/<name>/lib<lib>.so, where <plugins> is WEFT_TEST_PLUGIN_DIR (a bundle moved to
 * another machine) or the build's WEFT_BUILD_PLUGIN_DIR: its handle in *dl and, negotiated at
 * ABI 1, its descriptor in *desc, which must have a pass. Returns 0, or -1 with why on stderr. */
static int open_pass_plugin(const char *name, const char *lib, void **dl,
                            const weft_plugin_descriptor **desc) {
    char path[1024];
    const char *dir = getenv("WEFT_TEST_PLUGIN_DIR");
    snprintf(path, sizeof(path), "%s/%s/lib%s.so", dir && dir[0] ? dir : WEFT_BUILD_PLUGIN_DIR,
             name, lib);
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*dl) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return -1;
    }
    weft_plugin_entry_fn entry = (weft_plugin_entry_fn)dlsym(*dl, WEFT_PLUGIN_ENTRY_NAME);
    uint32_t chosen = 0;
    weft_error err = {.size = sizeof(err)};
    if (!entry || entry(1, 1, &chosen, desc, &err) || !(*desc)->pass) {
        fprintf(stderr, "%s: %s\n", path, entry ? err.message : "no entry point");
        return -1;
    }
    return 0;
}

/* A tensor of kind `kind` named `name`: (rows, cols), or (rows) when cols is 0; a weight is
 * added as one of the checkpoint's (its own name as the key). */
static uint32_t pass_tensor(weft_graph *g, uint32_t kind, uint32_t dtype, int64_t rows,
                            int64_t cols, const char *name) {
    const weft_graph_service *gs = weft_graph_service_get();
    int64_t dims[2] = {rows, cols};
    weft_error err = {.size = sizeof(err)};
    uint32_t id =
        kind == WEFT_TENSOR_WEIGHT
            ? gs->weight_add(g, name, name, dtype, cols ? 2 : 1, cols ? dims : &dims[0], &err)
            : gs->tensor_add(g, kind, dtype, cols ? 2 : 1, dims, name, &err);
    if (id == WEFT_TENSOR_NONE) fail_msg("tensor %s: %s", name, err.message);
    return id;
}

/* A node appended to g: op in layer `layer`, named `name`, with parameters p (or none). */
static void pass_node(weft_graph *g, uint32_t op, int32_t layer, const char *name,
                      const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out,
                      const weft_op_params *p) {
    weft_node n;
    memset(&n, 0, sizeof(n));
    n.op = op;
    n.layer = layer;
    n.n_in = n_in;
    n.n_out = n_out;
    memcpy(n.in, in, n_in * sizeof(uint32_t));
    memcpy(n.out, out, n_out * sizeof(uint32_t));
    if (p) n.p = *p;
    snprintf(n.name, sizeof(n.name), "%s", name);
    weft_error err = {.size = sizeof(err)};
    if (weft_graph_service_get()->node_add(g, &n, UINT32_MAX, &err) < 0)
        fail_msg("node %s: %s", name, err.message);
}

/* g's canonical hash (33 characters with the NUL) into out. */
static void pass_hash(const weft_graph *g, char *out) {
    assert_int_equal(weft_graph_hash(g, out), WEFT_OK);
}

/* A pass that refused (`why` names the case) left g exactly as it was: its hash is still
 * `before` (pass_hash before the run) and the pass counted n rewrites, which must be none
 * (UINT32_MAX: a pass that counts none). */
static void pass_expect_unchanged(const weft_graph *g, const char *before, uint32_t n,
                                  const char *why) {
    char after[33];
    pass_hash(g, after);
    printf("left unfused (%s): ", why);
    if (n != UINT32_MAX) printf("%u fused, ", n);
    printf("hash %s\n", strcmp(before, after) ? "CHANGED" : "unchanged");
    assert_true(n == 0 || n == UINT32_MAX);
    assert_string_equal(before, after);
}

#endif
