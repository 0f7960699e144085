/* `weft eval probe`: measures the machine once and stores it as JSON. The backend plugin named
 * by --backend is found on the plugin search path and loaded (no candidate or model needed);
 * a backend with a probe hook measures itself with its own libraries (cuda: copy bandwidth,
 * bf16 and fp8 GEMM rates, host round trip). Otherwise the host measures what it can without a
 * device: memory bandwidth with memcpy over buffers far larger than the caches (bytes read plus
 * written) and the f32 matmul rate of the backend's own LINEAR op implementation. */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "eval/eval.h"
#include "plugin/host.h"
#include "plugin/loader.h"
#include "plugin/manifest.h"
#include "plugin/registry.h"
#include "util/error.h"

static weft_status weft_probe_keep_linear(void *self, const weft_op_impl *impl, weft_error *e);

/* ---- host-side measurements (backends without a probe hook) ------------------------------ */
typedef struct copy_job {
    char *dst;
    const char *src;
    size_t n;
} copy_job;

static void *copy_worker(void *arg) {
    copy_job *j = arg;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}

static double host_copy_rate(unsigned threads, size_t bytes) {
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    for (size_t i = 0; i < bytes; i++) a[i] = (char)(i * 131u), b[i] = 0;
    double t[9];
    pthread_t th[256];
    copy_job jobs[256];
    if (threads > 256) threads = 256;
    for (int r = 0; r < 9; r++) {
        double t0 = weft_cli_now_s();
        size_t part = bytes / threads;
        for (unsigned i = 0; i < threads; i++) {
            jobs[i] = (copy_job){b + i * part, a + i * part, i + 1 == threads ? bytes - i * part : part};
            pthread_create(&th[i], NULL, copy_worker, &jobs[i]);
        }
        for (unsigned i = 0; i < threads; i++) pthread_join(th[i], NULL);
        t[r] = weft_cli_now_s() - t0;
    }
    qsort(t, 9, sizeof(double), weft_cli_cmp_double);
    volatile char sink = b[bytes / 2];
    (void)sink;
    free(a);
    free(b);
    return 2.0 * (double)bytes / t[4];
}

/* The backend's LINEAR f32 implementation on one node, timed with the host clock after a
 * synchronize (a device backend without events would be timed the same way). */
static weft_status host_gemm_rate(const weft_loaded_plugin *bp, int M, double *rate,
                                  weft_error *err) {
    const weft_backend_vtable *be = bp->desc->backend;
    /* a one-entry ops service that keeps the backend's best f32 linear implementation */
    weft_op_impl keep;
    memset(&keep, 0, sizeof(keep));
    weft_ops_service ops = {.size = sizeof(ops), .version = 1, .self = &keep,
                            .add = weft_probe_keep_linear};
    weft_status s = be->register_ops(bp->state, &ops, err);
    if (s) return s;
    if (!keep.run)
        return weft_error_set(err, WEFT_ERR_UNSUPPORTED, bp->name,
                              "the backend registers no f32 linear implementation");
    weft_tensor t[3];
    memset(t, 0, sizeof(t));
    int64_t shapes[3][2] = {{M, M}, {M, M}, {M, M}};
    weft_buffer buf[3];
    memset(buf, 0, sizeof(buf));
    for (int i = 0; i < 3; i++) {
        t[i].id = (uint32_t)i;
        t[i].dtype = WEFT_DTYPE_F32;
        t[i].rank = 2;
        t[i].shape[0] = shapes[i][0];
        t[i].shape[1] = shapes[i][1];
        t[i].kind = i == 1 ? WEFT_TENSOR_WEIGHT : WEFT_TENSOR_ACTIVATION;
        if ((s = be->alloc(bp->state, (uint64_t)M * M * 4, WEFT_MEMORY_DEVICE, &buf[i], err)))
            goto out;
    }
    {
        float *h = malloc((size_t)M * M * 4);
        if (!h) {
            s = weft_error_set(err, WEFT_ERR_NOMEM, "probe", "host buffer");
            goto out;
        }
        for (size_t i = 0; i < (size_t)M * M; i++) h[i] = (float)((i * 2654435761u) % 1000) / 500.f - 1.f;
        for (int i = 0; i < 2 && !s; i++) s = be->upload(bp->state, &buf[i], 0, h, (uint64_t)M * M * 4, err);
        free(h);
        if (s) goto out;
    }
    weft_node n;
    memset(&n, 0, sizeof(n));
    n.op = WEFT_OP_LINEAR;
    n.n_in = 3;
    n.n_out = 1;
    n.in[0] = 0;
    n.in[1] = 1;
    n.in[2] = WEFT_TENSOR_NONE;
    n.out[0] = 2;
    snprintf(n.name, sizeof(n.name), "probe.linear");
    weft_graph g = {.size = sizeof(g), .n_tensors = 3, .n_nodes = 1, .tensors = t, .nodes = &n};
    g.bucket.size = sizeof(g.bucket);
    g.bucket.max_tokens = (uint32_t)M;
    weft_exec_ctx ctx = {.size = sizeof(ctx), .n_tokens = (uint32_t)M, .graph = &g, .data = buf,
                         .backend = bp->state,
                         .stream = be->stream ? be->stream(bp->state) : NULL};
    double times[5];
    for (int r = -1; r < 5; r++) {
        double t0 = weft_cli_now_s();
        if ((s = keep.run(keep.state, &ctx, &n, err))) goto out;
        if (be->synchronize && (s = be->synchronize(bp->state, ctx.stream, err))) goto out;
        if (r >= 0) times[r] = weft_cli_now_s() - t0;
    }
    qsort(times, 5, sizeof(double), weft_cli_cmp_double);
    *rate = 2.0 * (double)M * M * M / times[2];
out:
    for (int i = 0; i < 3; i++)
        if (buf[i].ptr) be->free(bp->state, &buf[i]);
    return s;
}

static weft_status weft_probe_keep_linear(void *self, const weft_op_impl *impl, weft_error *e) {
    (void)e;
    weft_op_impl *keep = self;
    if (impl->op == WEFT_OP_LINEAR && (impl->dtype == 0 || impl->dtype == WEFT_DTYPE_F32) &&
        (!keep->run || impl->priority > keep->priority))
        *keep = *impl;
    return WEFT_OK;
}

/* ---- loading a backend by name ----------------------------------------------------------- */
static weft_status open_backend(const char *name, weft_host *host, weft_registry **reg_out,
                                weft_loaded_plugin *bp, weft_error *err) {
    weft_registry *reg = NULL;
    weft_status s = weft_registry_discover(NULL, 0, 0, &reg, err);
    if (s) return s;
    *reg_out = reg;
    const weft_registry_entry *e = weft_registry_find(reg, name, NULL);
    if (!e || e->manifest->kind != WEFT_KIND_BACKEND)
        return weft_error_set(err, WEFT_ERR_NOT_FOUND, "eval probe",
                              "no backend bundle named '%s' on the plugin search path (see "
                              "`weft plugins list`)", name);
    const weft_plugin_manifest *m = e->manifest;
    char lib[WEFT_MANIFEST_PATH_MAX + 300];
    snprintf(lib, sizeof(lib), "%s/%s", e->bundle_dir, m->library);
    weft_plugin_expect ex = {.name = m->name, .version = m->version_text, .kind = m->kind,
                             .slots = m->slots, .abi_min = m->abi_min, .abi_max = m->abi_max};
    if ((s = weft_plugin_open(lib, &ex, bp, err))) return s;
    weft_options opts;
    memset(&opts, 0, sizeof(opts));
    if ((s = weft_options_build(m, NULL, 0, e->manifest_path, "options", &opts, err))) return s;
    s = weft_plugin_instantiate(bp, weft_host_services_of(host), &opts, err);
    weft_options_free(&opts);
    return s;
}

static void mkdir_parents(const char *path) {
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", path);
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(dir, 0755);
            *p = '/';
        }
}

static void usage(FILE *f) {
    fprintf(f, "usage: weft eval probe [--backend cpu|cuda] [-o FILE] [--threads N]\n"
               "  --backend B   the backend bundle to measure (default: cuda if it loads, else"
               " cpu)\n"
               "  -o FILE       where to write the JSON (default: the cached probe,"
               " $WEFT_CACHE/probe-<backend>.json)\n"
               "  --threads N   cpu: threads for the bandwidth test (default: online CPUs)\n");
}

int weft_eval_probe_main(int argc, char **argv) {
    static const struct option opts[] = {{"backend", required_argument, 0, 'b'},
                                         {"output", required_argument, 0, 'o'},
                                         {"threads", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *backend = NULL, *out = NULL;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t threads = online > 0 ? (uint32_t)online : 1;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "b:o:t:h", opts, NULL)) != -1) {
        if (c == 'b') backend = optarg;
        else if (c == 'o') out = optarg;
        else if (c == 't') {
            if (weft_cli_parse_u32_range("eval probe", "--threads", optarg, 1, 1024, &threads))
                return 2;
        } else if (c == 'h') {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    weft_error err;
    weft_error_clear(&err);
    weft_host *host = weft_host_new();
    if (!host) return 1;
    weft_registry *reg = NULL;
    weft_loaded_plugin bp;
    memset(&bp, 0, sizeof(bp));
    weft_status s;
    if (!backend) {
        s = open_backend("cuda", host, &reg, &bp, &err);
        backend = "cuda";
        if (s) {
            weft_plugin_close(&bp);
            weft_registry_free(reg);
            reg = NULL;
            memset(&bp, 0, sizeof(bp));
            fprintf(stderr, "weft eval probe: cuda unavailable (%s); measuring the cpu\n",
                    err.message);
            weft_error_clear(&err);
            backend = "cpu";
            s = open_backend("cpu", host, &reg, &bp, &err);
        }
    } else {
        s = open_backend(backend, host, &reg, &bp, &err);
    }
    int rc = 0;
    if (s) {
        rc = weft_cli_fail("eval probe", &err);
        goto done;
    }
    weft_probe_file pf;
    memset(&pf, 0, sizeof(pf));
    snprintf(pf.backend, sizeof(pf.backend), "%s", backend);
    const weft_backend_vtable *be = bp.desc->backend;
    weft_device_info info = {.size = sizeof(info)};
    if (be->device_info && be->device_info(bp.state, &info, &err) == WEFT_OK) {
        snprintf(pf.device, sizeof(pf.device), "%s", info.name);
        snprintf(pf.arch, sizeof(pf.arch), "%s", info.arch);
    }
    time_t now = time(NULL);
    strftime(pf.date, sizeof(pf.date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (be->size >= offsetof(weft_backend_vtable, probe) + sizeof(be->probe) && be->probe) {
        if ((s = be->probe(bp.state, &pf.r, &err))) {
            rc = weft_cli_fail("eval probe", &err);
            goto done;
        }
    } else {
        pf.r.size = sizeof(pf.r);
        pf.r.copy_bytes = 1ull << 30;
        pf.r.copy_bytes_per_s = host_copy_rate(threads, (size_t)pf.r.copy_bytes);
        double rate = 0;
        if ((s = host_gemm_rate(&bp, 1024, &rate, &err))) {
            rc = weft_cli_fail("eval probe", &err);
            goto done;
        }
        pf.r.gemm_f32_flops = rate;
        pf.r.gemm_shape[0] = pf.r.gemm_shape[1] = pf.r.gemm_shape[2] = 1024;
        snprintf(pf.r.notes, sizeof(pf.r.notes),
                 "host-measured: memcpy over %u threads, %s linear f32 1024^3", threads, backend);
    }
    char path[1024];
    if (!out) {
        weft_probe_default_path(backend, path, sizeof(path));
        mkdir_parents(path);
        out = path;
    }
    if ((s = weft_probe_save(out, &pf, &err))) {
        rc = weft_cli_fail("eval probe", &err);
        goto done;
    }
    printf("device: %s (%s) via backend %s\n", pf.device, pf.arch, backend);
    printf("copy bandwidth: %.1f GB/s (read + write, %llu MiB buffers)\n",
           pf.r.copy_bytes_per_s / 1e9, (unsigned long long)(pf.r.copy_bytes >> 20));
    if (pf.r.gemm_bf16_flops > 0)
        printf("bf16 GEMM: %.1f TFLOP/s (%llux%llux%llu)\n", pf.r.gemm_bf16_flops / 1e12,
               (unsigned long long)pf.r.gemm_shape[0], (unsigned long long)pf.r.gemm_shape[1],
               (unsigned long long)pf.r.gemm_shape[2]);
    if (pf.r.gemm_fp8_flops > 0)
        printf("fp8 e4m3 GEMM: %.1f TFLOP/s\n", pf.r.gemm_fp8_flops / 1e12);
    if (pf.r.gemm_f32_flops > 0) printf("f32 matmul: %.2f GFLOP/s\n", pf.r.gemm_f32_flops / 1e9);
    if (pf.r.host_roundtrip_s > 0)
        printf("host round trip: %.1f us; kernel launch: %.2f us\n", pf.r.host_roundtrip_s * 1e6,
               pf.r.launch_s * 1e6);
    if (pf.r.notes[0]) printf("notes: %s\n", pf.r.notes);
    printf("written: %s\n", out);
done:
    weft_plugin_close(&bp);
    weft_registry_free(reg);
    weft_host_free(host);
    return rc;
}
