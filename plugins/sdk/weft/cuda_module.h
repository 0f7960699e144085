/* The one NVRTC compile-and-cache path shared by every CUDA plugin (the cuda backend, kv.paged,
 * exec.device-sampling) and by their build-time NVRTC checks: a kernel source is compiled for the
 * device's exact architecture with the options
 *   --gpu-architecture=<arch> <defines...> -std=c++17 -default-device
 * cached on disk as a cubin under an XXH3-128 key of (source, each option with its NUL, then
 * "nvrtc <major>.<minor>|<device name>|<arch>") in
 * ${WEFT_CACHE:-${XDG_CACHE_HOME:-~/.cache}/weft}/kernels/<key>.cubin, written atomically (temp
 * file and rename), and loaded with the driver API. A stale or damaged cache entry is rebuilt.
 *
 * The entry points come in through weft_cuda_api so that a plugin which links the driver and
 * NVRTC (weft_cuda_api_link_*) and one which dlopens them at run time use the same code. Only
 * the NVRTC half is needed to compile (weft_cuda_compile); loading also needs the driver half.
 * Built as the static library weft_cuda_module (plugins/sdk/cuda.cmake). */
#ifndef WEFT_SDK_CUDA_MODULE_H
#define WEFT_SDK_CUDA_MODULE_H

#include <cuda.h>
#include <nvrtc.h>
#include <stddef.h>

#include "weft/plugin.h"

typedef struct weft_cuda_api {
    /* NVRTC */
    nvrtcResult (*version)(int *, int *);
    nvrtcResult (*create_program)(nvrtcProgram *, const char *, const char *, int,
                                  const char *const *, const char *const *);
    nvrtcResult (*compile_program)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*get_program_log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*get_program_log)(nvrtcProgram, char *);
    nvrtcResult (*get_cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*get_cubin)(nvrtcProgram, char *);
    nvrtcResult (*destroy_program)(nvrtcProgram *);
    const char *(*rtc_error_string)(nvrtcResult);
    /* driver (weft_cuda_module_load only) */
    CUresult (*module_load_data)(CUmodule *, const void *);
    CUresult (*error_name)(CUresult, const char **);
} weft_cuda_api;

/* One kernel build. */
typedef struct weft_cuda_build {
    const char *plugin;         /* error source ("cuda", "kv.paged") */
    const char *name;           /* the source's file name for NVRTC and messages ("core.cu") */
    const char *source;         /* NUL-terminated kernel text */
    const char *arch;           /* "sm_90a" */
    const char *const *defines; /* extra options between the architecture and -std, e.g. -DX=1 */
    int n_defines;              /* at most WEFT_CUDA_MAX_DEFINES */
    const char *device;         /* the device's name, part of the cache key */
} weft_cuda_build;

#define WEFT_CUDA_MAX_DEFINES 12

/* Compiles b with NVRTC. On success *cubin (malloc'ed) holds *n bytes; when log is not NULL,
 * *log receives NVRTC's log (malloc'ed, possibly empty; free it) on success and failure alike.
 * On failure err names the source, the architecture and the log. */
weft_status weft_cuda_compile(const weft_cuda_api *api, const weft_cuda_build *b, void **cubin,
                              size_t *n, char **log, weft_error *err);

/* Loads b into the current context from the disk cache, compiling (and caching) it on a miss.
 * The caller's CUcontext must be current. */
weft_status weft_cuda_module_load(const weft_cuda_api *api, const weft_cuda_build *b, CUmodule *out,
                                  weft_error *err);

/* Loads the module in the file at path, a cubin or PTX (which the driver JIT-compiles for the
 * device), into the current context: a module built outside this path, e.g. by nvcc. *found = 0
 * when there is no such file; one that cannot be read or loaded is an error naming it (plugin:
 * the error's source). Needs the driver half of api. */
weft_status weft_cuda_module_load_file(const weft_cuda_api *api, const char *plugin,
                                       const char *path, CUmodule *out, int *found,
                                       weft_error *err);

/* The entry points of a plugin that links NVRTC (and the driver). Static inline, so a plugin
 * that never calls them does not reference the libraries. */
static inline void weft_cuda_api_link_nvrtc(weft_cuda_api *api) {
    api->version = nvrtcVersion;
    api->create_program = nvrtcCreateProgram;
    api->compile_program = nvrtcCompileProgram;
    api->get_program_log_size = nvrtcGetProgramLogSize;
    api->get_program_log = nvrtcGetProgramLog;
    api->get_cubin_size = nvrtcGetCUBINSize;
    api->get_cubin = nvrtcGetCUBIN;
    api->destroy_program = nvrtcDestroyProgram;
    api->rtc_error_string = nvrtcGetErrorString;
}

static inline void weft_cuda_api_link_driver(weft_cuda_api *api) {
    api->module_load_data = cuModuleLoadData;
    api->error_name = cuGetErrorName;
}

#endif
