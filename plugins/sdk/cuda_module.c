/* NVRTC compilation and the on-disk cubin cache shared by the CUDA plugins (see
 * weft/cuda_module.h). The cache is an optimisation only: an unreadable, unwritable or damaged
 * entry never fails a load, it is rebuilt. Writes go to a per-process temp file renamed into
 * place, so concurrent engines never read a partial cubin. */
#include "weft/cuda_module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "weft/sdk.h"

static void cache_dir(char *out, size_t n) {
    const char *w = getenv("WEFT_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (w && *w)
        snprintf(out, n, "%s/kernels", w);
    else if (x && *x)
        snprintf(out, n, "%s/weft/kernels", x);
    else
        snprintf(out, n, "%s/.cache/weft/kernels", h ? h : "/tmp");
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

/* The file's *n bytes and a NUL after them (so that PTX text loads as a string) */
static void *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len > 0 && len < (1l << 30) && fseek(f, 0, SEEK_SET) == 0) {
            buf = malloc((size_t)len + 1);
            if (buf) buf[len] = 0;
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
    if (ok)
        rename(tmp, path);
    else
        unlink(tmp);
}

/* The option list every caller compiles with; opts needs WEFT_CUDA_MAX_DEFINES + 3 slots. */
static int options(const weft_cuda_build *b, char *arch, size_t arch_n, const char **opts) {
    int n = 0;
    snprintf(arch, arch_n, "--gpu-architecture=%s", b->arch);
    opts[n++] = arch;
    for (int i = 0; i < b->n_defines; i++)
        opts[n++] = b->defines[i];
    opts[n++] = "-std=c++17";
    opts[n++] = "-default-device";
    return n;
}

static weft_status check_build(const weft_cuda_build *b, weft_error *err) {
    if (!b || !b->name || !b->source || !b->arch)
        return weft_sdk_error(err, WEFT_ERR_INVALID, b ? b->plugin : NULL,
                              "kernel build: name, source and arch are required");
    if (b->n_defines < 0 || b->n_defines > WEFT_CUDA_MAX_DEFINES || (b->n_defines && !b->defines))
        return weft_sdk_error(err, WEFT_ERR_INVALID, b->plugin,
                              "kernel build of %s: %d defines, expected 0..%d", b->name,
                              b->n_defines, WEFT_CUDA_MAX_DEFINES);
    return WEFT_OK;
}

weft_status weft_cuda_compile(const weft_cuda_api *api, const weft_cuda_build *b, void **cubin,
                              size_t *n, char **log_out, weft_error *err) {
    weft_status s = check_build(b, err);
    if (s) return s;
    *cubin = NULL;
    *n = 0;
    if (log_out) *log_out = NULL;
    char arch[64];
    const char *opts[WEFT_CUDA_MAX_DEFINES + 3];
    int n_opts = options(b, arch, sizeof(arch), opts);
    nvrtcProgram prog;
    if (api->create_program(&prog, b->source, b->name, 0, NULL, NULL) != NVRTC_SUCCESS)
        return weft_sdk_error(err, WEFT_ERR_DEVICE, b->plugin, "nvrtcCreateProgram failed for %s",
                              b->name);
    nvrtcResult rc = api->compile_program(prog, n_opts, opts);
    size_t log_n = 0;
    char *log = NULL;
    if (api->get_program_log_size(prog, &log_n) == NVRTC_SUCCESS && (log = malloc(log_n + 1))) {
        log[0] = 0;
        if (log_n) api->get_program_log(prog, log);
        log[log_n] = 0;
    }
    if (rc != NVRTC_SUCCESS) {
        s = weft_sdk_error(err, WEFT_ERR_DEVICE, b->plugin,
                           "NVRTC failed to compile %s for %s (%s): %.400s", b->name, b->arch,
                           api->rtc_error_string(rc), log ? log : "");
        goto done;
    }
    size_t cn = 0;
    if (api->get_cubin_size(prog, &cn) != NVRTC_SUCCESS || cn == 0) {
        s = weft_sdk_error(err, WEFT_ERR_DEVICE, b->plugin,
                           "NVRTC compiled %s for %s but produced no cubin", b->name, b->arch);
        goto done;
    }
    void *buf = malloc(cn);
    if (!buf) {
        s = weft_sdk_error(err, WEFT_ERR_NOMEM, b->plugin, "cubin buffer of %zu bytes for %s", cn,
                           b->name);
        goto done;
    }
    if (api->get_cubin(prog, buf) != NVRTC_SUCCESS) {
        free(buf);
        s = weft_sdk_error(err, WEFT_ERR_DEVICE, b->plugin, "nvrtcGetCUBIN failed for %s", b->name);
        goto done;
    }
    *cubin = buf;
    *n = cn;
done:
    api->destroy_program(&prog);
    if (log_out && log)
        *log_out = log;
    else
        free(log);
    return s;
}

weft_status weft_cuda_module_load_file(const weft_cuda_api *api, const char *plugin,
                                       const char *path, CUmodule *out, int *found,
                                       weft_error *err) {
    *found = 0;
    if (access(path, F_OK) != 0) return WEFT_OK;
    size_t n = 0;
    void *data = read_all(path, &n);
    if (!data) return weft_sdk_error(err, WEFT_ERR_IO, plugin, "cannot read the module %s", path);
    CUresult r = api->module_load_data(out, data);
    free(data);
    if (r != CUDA_SUCCESS) {
        const char *ename = NULL;
        api->error_name(r, &ename);
        return weft_sdk_error(err, r == CUDA_ERROR_OUT_OF_MEMORY ? WEFT_ERR_NOMEM : WEFT_ERR_DEVICE,
                              plugin, "cuModuleLoadData failed (%s) while loading the module %s",
                              ename ? ename : "CUDA error", path);
    }
    *found = 1;
    return WEFT_OK;
}

weft_status weft_cuda_module_load(const weft_cuda_api *api, const weft_cuda_build *b, CUmodule *out,
                                  weft_error *err) {
    weft_status s = check_build(b, err);
    if (s) return s;
    char arch[64];
    const char *opts[WEFT_CUDA_MAX_DEFINES + 3];
    int n_opts = options(b, arch, sizeof(arch), opts);
    int nv_major = 0, nv_minor = 0;
    api->version(&nv_major, &nv_minor);

    XXH3_state_t *hs = XXH3_createState();
    if (!hs) return weft_sdk_error(err, WEFT_ERR_NOMEM, b->plugin, "hash state");
    XXH3_128bits_reset(hs);
    XXH3_128bits_update(hs, b->source, strlen(b->source));
    for (int i = 0; i < n_opts; i++)
        XXH3_128bits_update(hs, opts[i], strlen(opts[i]) + 1);
    char extra[256];
    snprintf(extra, sizeof(extra), "nvrtc %d.%d|%s|%s", nv_major, nv_minor,
             b->device ? b->device : "", b->arch);
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
        CUresult r = api->module_load_data(out, cubin);
        free(cubin);
        if (r == CUDA_SUCCESS) return WEFT_OK;
        /* a stale or damaged cache entry: rebuild it */
    }
    s = weft_cuda_compile(api, b, &cubin, &n, NULL, err);
    if (s) return s;
    CUresult r = api->module_load_data(out, cubin);
    if (r == CUDA_SUCCESS) {
        mkdirs(dir);
        write_all(path, cubin, n);
    }
    free(cubin);
    if (r != CUDA_SUCCESS) {
        const char *ename = NULL;
        api->error_name(r, &ename);
        return weft_sdk_error(err, r == CUDA_ERROR_OUT_OF_MEMORY ? WEFT_ERR_NOMEM : WEFT_ERR_DEVICE,
                              b->plugin,
                              "cuModuleLoadData failed (%s) while loading the compiled "
                              "%s for %s",
                              ename ? ename : "CUDA error", b->name, b->arch);
    }
    return WEFT_OK;
}
