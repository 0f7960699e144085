/* Build-time check of a CUDA plugin's kernel source, shared by every CUDA plugin's ctest: compiles
 * the embedded source (the symbol named by WEFT_NVRTC_CHECK_SOURCE) with NVRTC through
 * weft_cuda_compile, the very path the plugin takes at run time, once per define set. NVRTC needs
 * no GPU, so this runs on machines without one. Any compiler output counts as a failure: the
 * sources must build warning-free.
 *   usage: <check> NAME.cu ARCH [DEFINE_SET...]
 * A define set is a comma-separated list of options ("-DWEFT_TA=1,-DWEFT_TW=2"); with none, the
 * source is compiled once without extra defines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/cuda_module.h"

#ifndef WEFT_NVRTC_CHECK_SOURCE
#error "define WEFT_NVRTC_CHECK_SOURCE as the embedded source's symbol"
#endif
extern const char WEFT_NVRTC_CHECK_SOURCE[];

/* Splits set (modified in place) at commas into defs; returns the count or -1 if too many. */
static int split(char *set, const char **defs) {
    int n = 0;
    for (char *tok = strtok(set, ","); tok; tok = strtok(NULL, ",")) {
        if (n == WEFT_CUDA_MAX_DEFINES) return -1;
        defs[n++] = tok;
    }
    return n;
}

static int check_one(const weft_cuda_api *api, weft_cuda_build *b, const char *label) {
    weft_error err;
    memset(&err, 0, sizeof(err));
    err.size = sizeof(err);
    void *cubin = NULL;
    size_t n = 0;
    char *log = NULL;
    weft_status s = weft_cuda_compile(api, b, &cubin, &n, &log, &err);
    int bad = s != WEFT_OK || (log && log[0]);
    if (s != WEFT_OK)
        fprintf(stderr, "%s %s [%s]: %s\n", b->name, b->arch, label, err.message);
    else if (bad)
        fprintf(stderr, "%s %s [%s]: warnings:\n%s\n", b->name, b->arch, label, log);
    free(log);
    free(cubin);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s NAME.cu ARCH [DEFINE_SET...]\n", argv[0]);
        return 2;
    }
    weft_cuda_api api;
    memset(&api, 0, sizeof(api));
    weft_cuda_api_link_nvrtc(&api);
    weft_cuda_build b;
    memset(&b, 0, sizeof(b));
    b.plugin = "nvrtc_check";
    b.name = argv[1];
    b.source = WEFT_NVRTC_CHECK_SOURCE;
    b.arch = argv[2];
    int failures = 0, total = 0;
    if (argc == 3) {
        failures += check_one(&api, &b, "no defines");
        total++;
    }
    for (int i = 3; i < argc; i++) {
        char *set = strdup(argv[i]);
        const char *defs[WEFT_CUDA_MAX_DEFINES];
        int nd = set ? split(set, defs) : -1;
        if (nd < 0) {
            fprintf(stderr, "define set '%s': expected 0..%d comma-separated options\n", argv[i],
                    WEFT_CUDA_MAX_DEFINES);
            free(set);
            return 2;
        }
        b.defines = defs;
        b.n_defines = nd;
        failures += check_one(&api, &b, argv[i]);
        total++;
        free(set);
    }
    printf("%s: %d of %d variants failed to compile cleanly for %s\n", b.name, failures, total,
           b.arch);
    return failures != 0;
}
