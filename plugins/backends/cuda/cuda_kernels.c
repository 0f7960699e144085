/* NVRTC compilation of the backend's kernel source for the device's exact architecture, cached
 * on disk as a cubin under an XXH3-128 key of (source, options, NVRTC version, device name and
 * architecture), then loaded with the driver API. One module per (activation dtype, weight
 * dtype) pair; functions are looked up by name. The compile-and-cache path itself is the SDK's
 * (plugins/sdk/weft/cuda_module.h), shared with the CUDA techniques. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "weft/cuda_module.h"

extern const char weft_cuda_core_source[]; /* kernels/core.cu, embedded at build time */

/* The module defines the backend's options ask for, in order, each with the suffix it gives the
 * file names of option kernel_ptx (tools/scripts/nvcc-ptx.sh names the same flags); option ablate's
 * value is appended by the callers. Returns how many, at most MODULE_FLAGS. */
#define MODULE_FLAGS 7
typedef struct {
    const char *suffix, *define;
} module_flag;
static size_t module_flags(const cuda_backend *b, module_flag out[MODULE_FLAGS]) {
    size_t n = 0;
    if (b->trace) out[n++] = (module_flag){"_trace", "-DWEFT_TRACE"};
    if (b->pdl && b->pdl_early) out[n++] = (module_flag){"_pdle", "-DWEFT_PDL_EARLY"};
    if (b->pdl && b->pdl_l1) out[n++] = (module_flag){"_l1", "-DWEFT_PDL_L1"};
    if (b->norm_sum_all) out[n++] = (module_flag){"_nsa", "-DWEFT_NORM_SUM_ALL"};
    if (b->attn_push_merge) out[n++] = (module_flag){"_pm", "-DWEFT_PUSH_MERGE"};
    if (b->bf16_cvt) out[n++] = (module_flag){"_cvt", "-DWEFT_BF16_CVT"};
    if (b->attn_rope_sums) out[n++] = (module_flag){"_rs", "-DWEFT_ROPE_SUMS"};
    return n;
}

/* Option kernel_ptx: the module of (ta, tw) and the build's defines from the folder's nvcc-built
 * PTX (tools/scripts/nvcc-ptx.sh names them), JIT-compiled by the driver for this device. *found
 * = 0 when the option is empty or the file is absent (NVRTC compiles it then, said once per
 * module); a file that is there but does not load is an error naming it. */
static weft_status load_ptx(cuda_backend *b, uint32_t ta, uint32_t tw, CUmodule *out, int *found,
                            weft_error *err) {
    *found = 0;
    if (!b->kernel_ptx[0]) return WEFT_OK;
    char sfx[64] = "", path[640];
    module_flag fl[MODULE_FLAGS];
    const size_t nf = module_flags(b, fl);
    for (size_t i = 0; i < nf; i++)
        strcat(sfx, fl[i].suffix); /* at most 28 characters */
    if (b->ablate) snprintf(sfx + strlen(sfx), sizeof(sfx) - strlen(sfx), "_ablate%d", b->ablate);
    snprintf(path, sizeof(path), "%s/core_ta%u_tw%u%s.ptx", b->kernel_ptx, ta, tw, sfx);
    weft_cuda_api api;
    weft_cuda_api_link_driver(&api);
    weft_status s = weft_cuda_module_load_file(&api, CUDA_NAME, path, out, found, err);
    if (s == WEFT_OK)
        fprintf(stderr, *found ? "weft cuda: kernels from %s (option kernel_ptx)\n"
                               : "weft cuda: option kernel_ptx: no %s, compiling core.cu with "
                                 "NVRTC\n",
                path);
    return s;
}

static weft_status compile(cuda_backend *b, uint32_t ta, uint32_t tw, CUmodule *out,
                           weft_error *err) {
    int found;
    weft_status ps = load_ptx(b, ta, tw, out, &found, err);
    if (ps || found) return ps;
    char def_a[32], def_w[32];
    snprintf(def_a, sizeof(def_a), "-DWEFT_TA=%u", ta);
    snprintf(def_w, sizeof(def_w), "-DWEFT_TW=%u", tw);
    char def_abl[32];
    snprintf(def_abl, sizeof(def_abl), "-DWEFT_ABLATE=%d", b->ablate);
    const char *defs[3 + MODULE_FLAGS] = {def_a, def_w};
    size_t n_defs = 2;
    module_flag fl[MODULE_FLAGS];
    const size_t nf = module_flags(b, fl);
    for (size_t i = 0; i < nf; i++)
        defs[n_defs++] = fl[i].define;
    if (b->ablate) defs[n_defs++] = def_abl;
    weft_cuda_api api;
    weft_cuda_api_link_nvrtc(&api);
    weft_cuda_api_link_driver(&api);
    weft_cuda_build build = {.plugin = CUDA_NAME,
                             .name = "core.cu",
                             .source = weft_cuda_core_source,
                             .arch = b->arch,
                             .defines = defs,
                             .n_defines = n_defs,
                             .device = b->name};
    return weft_cuda_module_load(&api, &build, out, err);
}

/* option smem_carveout: the shared memory share (percent of the L1/shared array) every kernel of
 * the module asks for. An SM changes its split only when it is idle, so under PDL a kernel that
 * needs much shared memory (the attention kernels: ~77 KB a block) cannot start its blocks on SMs
 * that GEMV blocks (128 bytes) keep in a small-shared configuration: the GEMVs' own share decides
 * (measured: the option on every kernel but the GEMVs changes nothing). With a large share the
 * attention blocks start beside the q|k|v projection, but the GEMVs stream slower beside the
 * smaller L1, so it pays only where the products are short (docs/perf/batch1.md). -1 leaves the
 * driver's per-kernel choice. */
static weft_status set_carveout(cuda_backend *b, CUmodule mod, weft_error *err) {
    if (b->smem_carveout < 0) return WEFT_OK;
    unsigned n = 0;
    weft_status s = cuda_check(cuModuleGetFunctionCount(&n, mod), "cuModuleGetFunctionCount",
                               "counting the kernels of core.cu", err);
    if (s) return s;
    CUfunction *fs = calloc(n ? n : 1, sizeof(*fs));
    if (!fs) return cuda_fail(err, WEFT_ERR_NOMEM, "host memory for %u kernel handles", n);
    CUresult r = cuModuleEnumerateFunctions(fs, n, mod);
    for (unsigned i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = cuFuncSetAttribute(fs[i], CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                               b->smem_carveout);
    free(fs);
    return cuda_check(r, "cuFuncSetAttribute", "setting the kernels' shared memory carveout", err);
}

weft_status cuda_kernel_get(cuda_backend *b, uint32_t ta, uint32_t tw, const char *name,
                            CUfunction *out, weft_error *err) {
    cuda_module *m = NULL;
    for (size_t i = 0; i < b->n_modules; i++)
        if (b->modules[i].ta == ta && b->modules[i].tw == tw) m = &b->modules[i];
    if (!m) {
        if (b->n_modules == sizeof(b->modules) / sizeof(b->modules[0]))
            return cuda_fail(err, WEFT_ERR_INTERNAL, "too many kernel variants");
        CUmodule mod;
        weft_status s = compile(b, ta, tw, &mod, err);
        if (s) return s;
        s = set_carveout(b, mod, err);
        if (s) return s;
        m = &b->modules[b->n_modules++];
        m->ta = ta;
        m->tw = tw;
        m->mod = mod;
    }
    CUresult r = cuModuleGetFunction(out, m->mod, name);
    if (r != CUDA_SUCCESS) {
        char what[96];
        snprintf(what, sizeof(what), "looking up kernel %s", name);
        return cuda_check(r, "cuModuleGetFunction", what, err);
    }
    return WEFT_OK;
}

/* Both launches: programmatic dependent launch when pdl (and the option) is on, the grid's z
 * dimension cut into clusters of cz blocks when cz > 0. */
static weft_status launch(cuda_backend *b, CUfunction f, const char *name, unsigned gx, unsigned gy,
                          unsigned gz, unsigned block, unsigned smem, int pdl, unsigned cz,
                          void **args, weft_error *err) {
    if (gx == 0 || gy == 0 || gz == 0) return WEFT_OK;
    b->l2_after = 0; /* the fused attention and the join set it again after their launches */
    CUlaunchAttribute attr[3];
    memset(attr, 0, sizeof(attr));
    unsigned na = 0;
    if (cz) {
        attr[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr[na].value.clusterDim.x = 1;
        attr[na].value.clusterDim.y = 1;
        attr[na].value.clusterDim.z = cz;
        na++;
        if (b->attn_cluster_policy) { /* option attn_cluster_policy: 1 spread, 2 balance */
            attr[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
            attr[na].value.clusterSchedulingPolicyPreference =
                b->attn_cluster_policy == 1 ? CU_CLUSTER_SCHEDULING_POLICY_SPREAD
                                            : CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING;
            na++;
        }
    }
    int with_pdl = pdl && b->pdl;
    if (with_pdl) {
        attr[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr[na].value.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    CUlaunchConfig cfg = {.gridDimX = gx,
                          .gridDimY = gy,
                          .gridDimZ = gz,
                          .blockDimX = block,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .sharedMemBytes = smem,
                          .hStream = b->stream,
                          .attrs = attr,
                          .numAttrs = na};
    if (b->trace) cuda_trace_launch(b, name);
    CUresult r = cuLaunchKernelEx(&cfg, f, args, NULL);
    if (r != CUDA_SUCCESS) {
        char what[160], cl[40] = "";
        if (cz) snprintf(cl, sizeof(cl), " in clusters of %u", cz);
        snprintf(what, sizeof(what), "launching kernel %s (%ux%ux%u blocks of %u%s%s)", name, gx,
                 gy, gz, block, cl, with_pdl ? ", programmatic dependent launch" : "");
        return cuda_check(r, "cuLaunchKernelEx", what, err);
    }
    return WEFT_OK;
}

weft_status cuda_launch_ex(cuda_backend *b, CUfunction f, const char *name, unsigned gx,
                           unsigned gy, unsigned gz, unsigned block, unsigned smem, int pdl,
                           void **args, weft_error *err) {
    return launch(b, f, name, gx, gy, gz, block, smem, pdl, 0, args, err);
}

weft_status cuda_launch_cluster(cuda_backend *b, CUfunction f, const char *name, unsigned gx,
                                unsigned gy, unsigned gz, unsigned block, unsigned smem,
                                unsigned cz, void **args, weft_error *err) {
    return launch(b, f, name, gx, gy, gz, block, smem, 1, cz, args, err);
}

weft_status cuda_launch(cuda_backend *b, CUfunction f, const char *name, unsigned gx, unsigned gy,
                        unsigned block, void **args, weft_error *err) {
    return cuda_launch_ex(b, f, name, gx, gy, 1, block, 0, 1, args, err);
}

void cuda_kernels_fini(cuda_backend *b) {
    for (size_t i = 0; i < b->n_modules; i++)
        cuModuleUnload(b->modules[i].mod);
    b->n_modules = 0;
    b->f_copy_words = NULL;
}
