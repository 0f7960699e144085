/* Build-time check of a CUDA plugin's kernel source, shared by every CUDA plugin's ctest: compiles
 * the embedded source (the symbol named by WEFT_NVRTC_CHECK_SOURCE) with NVRTC through
 * weft_cuda_compile, the very path the plugin takes at run time, once per define set. NVRTC needs
 * no GPU, so this runs on machines without one. Any compiler output counts as a failure: the
 * sources must build warning-free.
 *   usage: <check> NAME.cu ARCH [DEFINE_SET...]
 * A define set is a comma-separated list of options ("-DWEFT_TA=1,-DWEFT_TW=2"); with none, the
 * source is compiled once without extra defines.
 * With WEFT_NVRTC_REGS set (a substring of kernel names; empty: every kernel) each set is
 * compiled with ptxas's report added (its info lines are not warnings), and the registers and
 * spill stores of the matching kernels are printed: the counts the plugin's kernels get at run
 * time, which can differ much from what nvcc -cubin reports for the same source
 * (weft_rope_attention_mc, with K and V then staged as floats: 103 against 80). */
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

/* Prints "set: kernel N registers, M bytes spill stores" for each entry of ptxas's report in log
 * whose name contains filter. The report, per entry: "Compiling entry function 'NAME' for ...",
 * "Function properties for NAME", "N bytes stack frame, M bytes spill stores, ...", "Used N
 * registers, ..."; callees get their own "Function properties" lines. */
static void print_regs(const char *log, const char *filter, const char *label) {
    char name[256] = "", props[256] = "";
    int spill = 0;
    for (const char *l = log; l && *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char line[512];
        if (len >= sizeof(line)) len = sizeof(line) - 1;
        memcpy(line, l, len);
        line[len] = 0;
        l = end ? end + 1 : NULL;
        const char *q, *c;
        int regs;
        if ((q = strstr(line, "Compiling entry function '")) ||
            (q = strstr(line, "Function properties for "))) {
            int entry = *q == 'C';
            q += entry ? strlen("Compiling entry function '") : strlen("Function properties for ");
            size_t k = strcspn(q, "' ");
            if (k >= sizeof(name)) k = sizeof(name) - 1;
            memcpy(entry ? name : props, q, k);
            (entry ? name : props)[k] = 0;
            if (entry) spill = 0;
        } else if ((c = strstr(line, "stack frame, ")) && !strcmp(props, name)) {
            if (sscanf(c, "stack frame, %d bytes spill stores", &spill) != 1) spill = -1;
        } else if ((q = strstr(line, "Used ")) && sscanf(q, "Used %d registers", &regs) == 1 &&
                   name[0] && strstr(name, filter)) {
            printf("%s: %s %d registers, %d bytes spill stores\n", label, name, regs, spill);
        }
    }
}

/* Whether log holds compiler output other than ptxas's report (its "ptxas info" lines and their
 * "ptxas   ." continuations), when report asked for one; any output at all otherwise */
static int has_warnings(const char *log, int report) {
    if (!log || !log[0]) return 0;
    if (!report) return 1;
    for (const char *l = log; *l;) {
        size_t len = strcspn(l, "\n");
        size_t sp = strncmp(l, "ptxas", 5) ? 0 : 5 + strspn(l + 5, " ");
        int info = sp && (!strncmp(l + sp, "info", 4) || l[sp] == '.');
        if (len && !info) return 1;
        l += len + (l[len] == '\n');
    }
    return 0;
}

/* One define set; with WEFT_NVRTC_REGS set, compiled with ptxas's report ("--ptxas-options=-v")
 * and the matching kernels' registers printed; with WEFT_NVRTC_CUBIN set, its cubin written to
 * that file */
static int check_one(const weft_cuda_api *api, weft_cuda_build *b, const char *label) {
    const char *filter = getenv("WEFT_NVRTC_REGS");
    const char *defs[WEFT_CUDA_MAX_DEFINES];
    weft_cuda_build v = *b;
    if (filter) {
        if (b->n_defines >= WEFT_CUDA_MAX_DEFINES) {
            fprintf(stderr, "[%s]: no room for the ptxas report option\n", label);
            return 1;
        }
        for (int i = 0; i < b->n_defines; i++)
            defs[i] = b->defines[i];
        defs[b->n_defines] = "--ptxas-options=-v";
        v.defines = defs;
        v.n_defines = b->n_defines + 1;
    }
    weft_error err;
    memset(&err, 0, sizeof(err));
    err.size = sizeof(err);
    void *cubin = NULL;
    size_t n = 0;
    char *log = NULL;
    weft_status s = weft_cuda_compile(api, &v, &cubin, &n, &log, &err);
    int bad = s != WEFT_OK || has_warnings(log, filter != NULL);
    if (s != WEFT_OK)
        fprintf(stderr, "%s %s [%s]: %s\n", b->name, b->arch, label, err.message);
    else if (bad)
        fprintf(stderr, "%s %s [%s]: warnings:\n%s\n", b->name, b->arch, label, log);
    else if (filter)
        print_regs(log, filter, label);
    /* WEFT_NVRTC_CUBIN: the cubin of the last define set written there, for cuobjdump -sass */
    const char *dump = getenv("WEFT_NVRTC_CUBIN");
    if (s == WEFT_OK && dump && *dump) {
        FILE *f = fopen(dump, "wb");
        if (!f || fwrite(cubin, 1, n, f) != n) {
            fprintf(stderr, "%s: cannot write the cubin\n", dump);
            bad = 1;
        }
        if (f) fclose(f);
    }
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
