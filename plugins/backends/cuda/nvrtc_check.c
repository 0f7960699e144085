/* Build-time check of the cuda backend's kernel source: compiles kernels/core.cu with NVRTC for
 * sm_90a in every (activation, weight) dtype pair, exactly as the backend does at run time.
 * NVRTC needs no GPU, so this runs in CI on machines without one (ctest cuda_nvrtc_check). */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char weft_cuda_core_source[];

int main(int argc, char **argv) {
    const char *arch = argc > 1 ? argv[1] : "sm_90a";
    char archopt[64];
    snprintf(archopt, sizeof(archopt), "--gpu-architecture=%s", arch);
    int failures = 0;
    for (int ta = 1; ta <= 3; ta++)
        for (int tw = 1; tw <= 3; tw++) {
            char a[32], w[32];
            snprintf(a, sizeof(a), "-DWEFT_TA=%d", ta);
            snprintf(w, sizeof(w), "-DWEFT_TW=%d", tw);
            const char *opts[] = {archopt, a, w, "-std=c++17", "-default-device"};
            nvrtcProgram p;
            if (nvrtcCreateProgram(&p, weft_cuda_core_source, "core.cu", 0, NULL, NULL)) {
                fprintf(stderr, "nvrtcCreateProgram failed\n");
                return 1;
            }
            nvrtcResult r = nvrtcCompileProgram(p, 5, opts);
            size_t n = 0;
            nvrtcGetProgramLogSize(p, &n);
            char *log = malloc(n + 1);
            if (log) {
                nvrtcGetProgramLog(p, log);
                log[n] = 0;
            }
            if (r != NVRTC_SUCCESS || (log && strlen(log) > 0)) {
                fprintf(stderr, "core.cu %s TA=%d TW=%d: %s\n%s\n", arch, ta, tw,
                        nvrtcGetErrorString(r), log ? log : "");
                failures += r != NVRTC_SUCCESS;
            }
            free(log);
            nvrtcDestroyProgram(&p);
        }
    printf("core.cu: %d of 9 dtype variants failed to compile for %s\n", failures, arch);
    return failures != 0;
}
