/* Build-time check of exec.device-sampling's kernel source: compiles kernels/sampling.cu with
 * NVRTC for the given architecture (default sm_90a) exactly as the plugin does at run time, and
 * fails on an error or any warning. NVRTC needs no GPU. */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>

extern const char weft_exec_sampling_source[];

int main(int argc, char **argv) {
    char arch[64];
    snprintf(arch, sizeof(arch), "--gpu-architecture=%s", argc > 1 ? argv[1] : "sm_90a");
    const char *opts[] = {arch, "-std=c++17", "-default-device"};
    nvrtcProgram p;
    if (nvrtcCreateProgram(&p, weft_exec_sampling_source, "sampling.cu", 0, NULL, NULL)) {
        fprintf(stderr, "nvrtcCreateProgram failed\n");
        return 1;
    }
    nvrtcResult r = nvrtcCompileProgram(p, 3, opts);
    size_t n = 0;
    nvrtcGetProgramLogSize(p, &n);
    char *log = malloc(n + 1);
    if (log) {
        nvrtcGetProgramLog(p, log);
        log[n] = 0;
    }
    int bad = r != NVRTC_SUCCESS || (log && log[0]);
    if (bad) fprintf(stderr, "sampling.cu: %s\n%s\n", nvrtcGetErrorString(r), log ? log : "");
    else printf("sampling.cu compiles for %s\n", arch + 19);
    free(log);
    nvrtcDestroyProgram(&p);
    return bad;
}
