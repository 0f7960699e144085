/* Build-time check of kv.paged's cuda kernel source: compiles kernels/paged.cu with NVRTC for
 * the given architecture (default sm_90) in each cache dtype, with the options paged_cuda.c
 * uses at run time. NVRTC needs no GPU, so this runs on machines without one (ctest
 * kv_paged_nvrtc_check). Any compiler output counts as a failure: the source must build
 * warning-free. */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char kv_paged_cuda_source[];

int main(int argc, char **argv) {
    const char *arch = argc > 1 ? argv[1] : "sm_90";
    char archopt[64];
    snprintf(archopt, sizeof(archopt), "--gpu-architecture=%s", arch);
    int failures = 0;
    for (int t = 1; t <= 3; t++) {
        char def[32];
        snprintf(def, sizeof(def), "-DKVP_T=%d", t);
        const char *opts[] = {archopt, def, "-std=c++17", "-default-device"};
        nvrtcProgram p;
        if (nvrtcCreateProgram(&p, kv_paged_cuda_source, "paged.cu", 0, NULL, NULL) !=
            NVRTC_SUCCESS) {
            fprintf(stderr, "nvrtcCreateProgram failed\n");
            return 1;
        }
        nvrtcResult r = nvrtcCompileProgram(p, 4, opts);
        size_t n = 0;
        nvrtcGetProgramLogSize(p, &n);
        char *log = malloc(n + 1);
        if (log) {
            nvrtcGetProgramLog(p, log);
            log[n] = 0;
        }
        int noisy = log && strlen(log) > 0;
        if (r != NVRTC_SUCCESS || noisy) {
            fprintf(stderr, "paged.cu %s KVP_T=%d: %s\n%s\n", arch, t, nvrtcGetErrorString(r),
                    log ? log : "");
            failures++;
        }
        /* both kernels must be in the program */
        size_t cubin = 0;
        if (r == NVRTC_SUCCESS && (nvrtcGetCUBINSize(p, &cubin) != NVRTC_SUCCESS || cubin == 0)) {
            fprintf(stderr, "paged.cu %s KVP_T=%d: no cubin\n", arch, t);
            failures++;
        }
        free(log);
        nvrtcDestroyProgram(&p);
    }
    printf("paged.cu: %d of 3 dtype variants failed to compile for %s\n", failures, arch);
    return failures != 0;
}
