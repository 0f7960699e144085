/* NVRTC compilation of the backend's kernel source for the device's exact architecture, cached
 * on disk as a cubin under an XXH3-128 key of (source, options, NVRTC version, device name and
 * architecture), then loaded with the driver API. One module per (activation dtype, weight
 * dtype) pair; functions are looked up by name. Cache directory:
 * ${WEFT_CACHE:-${XDG_CACHE_HOME:-~/.cache}/weft}/kernels/. */
#include <errno.h>
#include <fcntl.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "cuda_internal.h"

extern const char weft_cuda_core_source[]; /* kernels/core.cu, embedded at build time */

static void cache_dir(cuda_backend *b) {
    if (b->cache_dir[0]) return;
    const char *w = getenv("WEFT_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (w && *w) snprintf(b->cache_dir, sizeof(b->cache_dir), "%s/kernels", w);
    else if (x && *x) snprintf(b->cache_dir, sizeof(b->cache_dir), "%s/weft/kernels", x);
    else snprintf(b->cache_dir, sizeof(b->cache_dir), "%s/.cache/weft/kernels", h ? h : "/tmp");
}

static void mkdirs(const char *path) {
    char tmp[1024];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

static void *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len > 0 && len < (1l << 30) && fseek(f, 0, SEEK_SET) == 0) {
            buf = malloc((size_t)len);
            if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
                free(buf);
                buf = NULL;
            }
            *n = (size_t)len;
        }
    }
    fclose(f);
    return buf;
}

/* Writes atomically (temp file + rename) so concurrent engines never read a partial cubin. */
static void write_file(const char *path, const void *data, size_t n) {
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    int ok = fwrite(data, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    if (ok) rename(tmp, path);
    else unlink(tmp);
}

static weft_status compile(cuda_backend *b, uint32_t ta, uint32_t tw, CUmodule *out,
                           weft_error *err) {
    char def_a[32], def_w[32], arch[48];
    snprintf(def_a, sizeof(def_a), "-DWEFT_TA=%u", ta);
    snprintf(def_w, sizeof(def_w), "-DWEFT_TW=%u", tw);
    snprintf(arch, sizeof(arch), "--gpu-architecture=%s", b->arch);
    const char *opts[] = {arch, def_a, def_w, "-std=c++17",
                          "-default-device"};
    int n_opts = (int)(sizeof(opts) / sizeof(opts[0]));
    if (!b->nvrtc_major) nvrtcVersion(&b->nvrtc_major, &b->nvrtc_minor);

    /* cache key */
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) return cuda_fail(err, WEFT_ERR_NOMEM, "hash state");
    XXH3_128bits_reset(hs);
    XXH3_128bits_update(hs, weft_cuda_core_source, strlen(weft_cuda_core_source));
    for (int i = 0; i < n_opts; i++) XXH3_128bits_update(hs, opts[i], strlen(opts[i]) + 1);
    char extra[256];
    snprintf(extra, sizeof(extra), "nvrtc %d.%d|%s|%s", b->nvrtc_major, b->nvrtc_minor, b->name,
             b->arch);
    XXH3_128bits_update(hs, extra, strlen(extra));
    XXH128_hash_t key = XXH3_128bits_digest(hs);
    XXH3_freeState(hs);
    cache_dir(b);
    char path[1200];
    snprintf(path, sizeof(path), "%s/%016llx%016llx.cubin", b->cache_dir,
             (unsigned long long)key.high64, (unsigned long long)key.low64);

    size_t n = 0;
    void *cubin = read_file(path, &n);
    if (cubin) {
        CUresult r = cuModuleLoadData(out, cubin);
        free(cubin);
        if (r == CUDA_SUCCESS) return WEFT_OK;
        /* a stale or damaged cache entry: fall through and rebuild it */
    }

    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, weft_cuda_core_source, "core.cu", 0, NULL, NULL) !=
        NVRTC_SUCCESS)
        return cuda_fail(err, WEFT_ERR_DEVICE, "nvrtcCreateProgram failed for core.cu");
    nvrtcResult rc = nvrtcCompileProgram(prog, n_opts, opts);
    if (rc != NVRTC_SUCCESS) {
        size_t log_n = 0;
        nvrtcGetProgramLogSize(prog, &log_n);
        char *log = malloc(log_n + 1);
        if (log) {
            nvrtcGetProgramLog(prog, log);
            log[log_n] = 0;
        }
        weft_status s = cuda_fail(err, WEFT_ERR_DEVICE, "NVRTC failed to compile core.cu for %s "
                                  "(%s): %.400s", b->arch, nvrtcGetErrorString(rc),
                                  log ? log : "");
        free(log);
        nvrtcDestroyProgram(&prog);
        return s;
    }
    size_t cn = 0;
    nvrtcGetCUBINSize(prog, &cn);
    cubin = malloc(cn);
    if (!cubin) {
        nvrtcDestroyProgram(&prog);
        return cuda_fail(err, WEFT_ERR_NOMEM, "cubin buffer");
    }
    nvrtcGetCUBIN(prog, cubin);
    nvrtcDestroyProgram(&prog);
    CUresult r = cuModuleLoadData(out, cubin);
    if (r == CUDA_SUCCESS) {
        mkdirs(b->cache_dir);
        write_file(path, cubin, cn);
    }
    free(cubin);
    return cuda_check(r, "cuModuleLoadData", "loading the compiled core.cu", err);
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

weft_status cuda_launch(cuda_backend *b, CUfunction f, const char *name, unsigned gx,
                        unsigned gy, unsigned block, void **args, weft_error *err) {
    if (gx == 0 || gy == 0) return WEFT_OK;
    CUresult r = cuLaunchKernel(f, gx, gy, 1, block, 1, 1, 0, b->stream, args, NULL);
    if (r != CUDA_SUCCESS) {
        char what[96];
        snprintf(what, sizeof(what), "launching kernel %s (%ux%u blocks of %u)", name, gx, gy,
                 block);
        return cuda_check(r, "cuLaunchKernel", what, err);
    }
    return WEFT_OK;
}

void cuda_kernels_fini(cuda_backend *b) {
    for (size_t i = 0; i < b->n_modules; i++) cuModuleUnload(b->modules[i].mod);
    b->n_modules = 0;
}
