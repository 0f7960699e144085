/* Opening a technique bundle built beside the tests, for the unit tests of graph passes
 * (test_fuse_linear_add_norm, test_fuse_norm_linear, test_fuse_rope_attention). */
#ifndef WEFT_TEST_PASS_PLUGIN_H
#define WEFT_TEST_PASS_PLUGIN_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
