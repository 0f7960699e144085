/* NVRTC + disk cache for technique kernels (see nvrtc_module.h). A stale or damaged cache entry
 * is rebuilt; the cache is written atomically (temp file and rename) so concurrent engines
 * never read a partial cubin. */
#include "nvrtc_module.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "weft/sdk.h"

static void cache_dir(char *out, size_t n) {
    const char *w = getenv("WEFT_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (w && *w) snprintf(out, n, "%s/kernels", w);
    else if (x && *x) snprintf(out, n, "%s/weft/kernels", x);
    else snprintf(out, n, "%s/.cache/weft/kernels", h ? h : "/tmp");
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

static void *read_all(const char *path, size_t *n) {
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

static void write_all(const char *path, const void *data, size_t n) {
    char tmp[1200];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    int ok = fwrite(data, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    if (ok) rename(tmp, path);
    else unlink(tmp);
}

weft_status exec_nvrtc_load(const char *plugin, const char *name, const char *source,
                            CUdevice dev, CUmodule *out, weft_error *err) {
    int major = 0, minor = 0, nv_major = 0, nv_minor = 0;
    char devname[128] = "";
    if (cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ||
        cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) ||
        cuDeviceGetName(devname, sizeof(devname), dev))
        return weft_sdk_error(err, WEFT_ERR_DEVICE, plugin,
                              "reading the device's compute capability failed");
    char arch[64];
    /* Hopper's architecture-specific target, as the backend uses */
    snprintf(arch, sizeof(arch), "--gpu-architecture=sm_%d%d%s", major, minor,
             major == 9 && minor == 0 ? "a" : "");
    const char *opts[] = {arch, "-std=c++17", "-default-device"};
    int n_opts = (int)(sizeof(opts) / sizeof(opts[0]));
    nvrtcVersion(&nv_major, &nv_minor);

    XXH3_state_t *hs = XXH3_createState();
    if (!hs) return weft_sdk_error(err, WEFT_ERR_NOMEM, plugin, "hash state");
    XXH3_128bits_reset(hs);
    XXH3_128bits_update(hs, source, strlen(source));
    for (int i = 0; i < n_opts; i++) XXH3_128bits_update(hs, opts[i], strlen(opts[i]) + 1);
    char extra[256];
    snprintf(extra, sizeof(extra), "nvrtc %d.%d|%s|%s", nv_major, nv_minor, devname, arch);
    XXH3_128bits_update(hs, extra, strlen(extra));
    XXH128_hash_t key = XXH3_128bits_digest(hs);
    XXH3_freeState(hs);
    char dir[1024], path[1200];
    cache_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/%016llx%016llx.cubin", dir, (unsigned long long)key.high64,
             (unsigned long long)key.low64);

    size_t n = 0;
    void *cubin = read_all(path, &n);
    if (cubin) {
        CUresult r = cuModuleLoadData(out, cubin);
        free(cubin);
        if (r == CUDA_SUCCESS) return WEFT_OK;
    }
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL) != NVRTC_SUCCESS)
        return weft_sdk_error(err, WEFT_ERR_DEVICE, plugin, "nvrtcCreateProgram failed for %s",
                              name);
    nvrtcResult rc = nvrtcCompileProgram(prog, n_opts, opts);
    if (rc != NVRTC_SUCCESS) {
        size_t log_n = 0;
        nvrtcGetProgramLogSize(prog, &log_n);
        char *log = malloc(log_n + 1);
        if (log) {
            nvrtcGetProgramLog(prog, log);
            log[log_n] = 0;
        }
        weft_status s = weft_sdk_error(err, WEFT_ERR_DEVICE, plugin,
                                       "NVRTC failed to compile %s for %s (%s): %.300s", name,
                                       arch + 19, nvrtcGetErrorString(rc), log ? log : "");
        free(log);
        nvrtcDestroyProgram(&prog);
        return s;
    }
    size_t cn = 0;
    nvrtcGetCUBINSize(prog, &cn);
    cubin = malloc(cn ? cn : 1);
    if (!cubin) {
        nvrtcDestroyProgram(&prog);
        return weft_sdk_error(err, WEFT_ERR_NOMEM, plugin, "cubin buffer of %zu bytes", cn);
    }
    nvrtcGetCUBIN(prog, cubin);
    nvrtcDestroyProgram(&prog);
    CUresult r = cuModuleLoadData(out, cubin);
    if (r == CUDA_SUCCESS) {
        mkdirs(dir);
        write_all(path, cubin, cn);
    }
    free(cubin);
    if (r != CUDA_SUCCESS)
        return weft_sdk_error(err, WEFT_ERR_DEVICE, plugin, "cuModuleLoadData(%s) failed: %d",
                              name, (int)r);
    return WEFT_OK;
}
