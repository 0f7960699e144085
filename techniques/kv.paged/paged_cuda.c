/* ATTENTION over the "paged" kv layout on the cuda backend: kernels/paged.cu (embedded at build
 * time) compiled by NVRTC for the device's architecture, once per cache dtype, when a graph
 * first asks for that dtype (accepts, a setup-class call), then launched on the engine's stream
 * with the driver API. It reaches the backend's CUDA context through the device service
 * (`native`), so it shares the backend's context and stream and never synchronises. Rows find
 * their kv slot in the step input in.kv_slots (the llama plugin emits it with
 * `device_inputs: true`); a graph without it is declined at build time with a logged reason.
 *
 * The bundle also runs on the cpu backend, on machines without a CUDA driver, so it does not
 * link the driver or NVRTC: the functions it needs are looked up when cuda ops are first
 * registered, from the libraries the cuda backend has already loaded into the process, and
 * handed to the SDK's compile-and-cache path (weft/cuda_module.h), which caches the cubins on
 * disk like the backend's. */
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "paged_ops.h"
#include "weft/attention_tc.h"
#include "weft/cuda_module.h"
#include "weft/sdk.h"

#ifndef KV_PAGED_NVRTC_SONAME
#define KV_PAGED_NVRTC_SONAME "libnvrtc.so"
#endif

extern const char kv_paged_cuda_source[]; /* kernels/paged.cu */

/* The driver and NVRTC functions used here, resolved with dlsym; rt holds the ones the SDK's
 * compile-and-cache path (weft/cuda_module.h) needs. */
typedef struct kvp_api {
    void *cuda, *nvrtc; /* dlopen handles */
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
    CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    weft_cuda_api rt;
} kvp_api;

/* Object pointers and function pointers differ in ISO C; copy the bits. */
#define KVP_SYM(handle, field, name)                                                               \
    do {                                                                                           \
        void *sym_ = dlsym(handle, name);                                                          \
        if (!sym_) return name;                                                                    \
        memcpy(&api->field, &sym_, sizeof(sym_));                                                  \
    } while (0)

/* NULL, or the name of what is missing. */
static const char *api_load(kvp_api *api) {
    api->cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!api->cuda) return "libcuda.so.1";
    api->nvrtc = dlopen(KV_PAGED_NVRTC_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!api->nvrtc) api->nvrtc = dlopen("libnvrtc.so", RTLD_NOW | RTLD_LOCAL);
    if (!api->nvrtc) return KV_PAGED_NVRTC_SONAME;
    KVP_SYM(api->cuda, GetErrorName, "cuGetErrorName");
    KVP_SYM(api->cuda, GetErrorString, "cuGetErrorString");
    KVP_SYM(api->cuda, CtxSetCurrent, "cuCtxSetCurrent");
    KVP_SYM(api->cuda, CtxGetDevice, "cuCtxGetDevice");
    KVP_SYM(api->cuda, DeviceGetAttribute, "cuDeviceGetAttribute");
    KVP_SYM(api->cuda, DeviceGetName, "cuDeviceGetName");
    KVP_SYM(api->cuda, rt.module_load_data, "cuModuleLoadData");
    KVP_SYM(api->cuda, rt.error_name, "cuGetErrorName");
    KVP_SYM(api->cuda, ModuleGetFunction, "cuModuleGetFunction");
    KVP_SYM(api->cuda, ModuleUnload, "cuModuleUnload");
    KVP_SYM(api->cuda, LaunchKernel, "cuLaunchKernel");
    KVP_SYM(api->cuda, FuncSetAttribute, "cuFuncSetAttribute");
    KVP_SYM(api->cuda, MemAlloc, "cuMemAlloc_v2");
    KVP_SYM(api->cuda, MemFree, "cuMemFree_v2");
    KVP_SYM(api->nvrtc, rt.version, "nvrtcVersion");
    KVP_SYM(api->nvrtc, rt.create_program, "nvrtcCreateProgram");
    KVP_SYM(api->nvrtc, rt.compile_program, "nvrtcCompileProgram");
    KVP_SYM(api->nvrtc, rt.get_program_log_size, "nvrtcGetProgramLogSize");
    KVP_SYM(api->nvrtc, rt.get_program_log, "nvrtcGetProgramLog");
    KVP_SYM(api->nvrtc, rt.get_cubin_size, "nvrtcGetCUBINSize");
    KVP_SYM(api->nvrtc, rt.get_cubin, "nvrtcGetCUBIN");
    KVP_SYM(api->nvrtc, rt.destroy_program, "nvrtcDestroyProgram");
    KVP_SYM(api->nvrtc, rt.rtc_error_string, "nvrtcGetErrorString");
    return NULL;
}

static void api_close(kvp_api *api) {
    if (api->nvrtc) dlclose(api->nvrtc);
    if (api->cuda) dlclose(api->cuda);
    api->nvrtc = api->cuda = NULL;
}

typedef struct kvp_cuda {
    kvp_api api;
    const weft_host_services *host;
    const weft_device_service *dev;
    CUcontext ctx;
    char arch[32], device[128];
    CUmodule mod[4]; /* by dtype: 1 f32, 2 f16, 3 bf16 */
    CUfunction store[4], attn[4], split[4], combine[4];
    CUfunction tc[4]; /* prefill on tensor cores: f16 and bf16 only */
    int tc_prefill;   /* option prefill_tensor_cores */
    int failed[4]; /* compilation failed once: do not retry every node */
    int sms;       /* streaming multiprocessors: the split attention's grid target */
    CUdeviceptr part; /* the split attention's partial results (part_bytes) */
    size_t part_bytes;
} kvp_cuda;

/* The split attention kernel (kernels/paged.cu kvp_attention_split): its constants, the shared
 * memory it needs for head_dim hd, and the most dynamic shared memory it is allowed (head_dim
 * up to 256). */
#define KVS_CHUNK 32
#define KVS_MAXG 8
#define KVS_THREADS 256
#define KVS_MAXS 32
static size_t kvs_smem(int hd) {
    return ((size_t)KVS_CHUNK * (hd + 1) + (size_t)KVS_CHUNK * hd + (size_t)KVS_MAXG * hd +
            (size_t)KVS_MAXG * KVS_CHUNK) *
           sizeof(float);
}

/* Splits of each of `blocks` units of work (the split kernel: row x kv head; the tensor-core
 * kernel: tile x kv head) so that about per_sm blocks run on every SM, at most KVS_MAXS and
 * never more than the cache has 32-position chunks. For the split kernel a function of the row
 * count alone, so a captured step's grid stays valid. */
static int kvs_splits(const kvp_cuda *c, long blocks, long per_sm, int max_seq) {
    long want = per_sm * (c->sms > 0 ? c->sms : 132);
    int S = blocks >= want ? 1 : (int)((want + blocks - 1) / blocks);
    int chunks = (max_seq + KVS_CHUNK - 1) / KVS_CHUNK;
    if (S > chunks) S = chunks;
    if (S > KVS_MAXS) S = KVS_MAXS;
    return S < 1 ? 1 : S;
}

static int dtype_index(uint32_t dt) {
    return dt == WEFT_DTYPE_F32 ? 1 : dt == WEFT_DTYPE_F16 ? 2 : dt == WEFT_DTYPE_BF16 ? 3 : 0;
}

static weft_status cu_error(const kvp_cuda *c, weft_error *err, CUresult r, const char *what) {
    const char *name = NULL, *text = NULL;
    c->api.GetErrorName(r, &name);
    c->api.GetErrorString(r, &text);
    return weft_sdk_error(err, WEFT_ERR_DEVICE, KV_PAGED_NAME, "%s: %s (%s)", what,
                          name ? name : "CUDA error", text ? text : "no description");
}

/* setup: NVRTC for this dtype (disk-cached), then the two kernels. */
static weft_status compile(kvp_cuda *c, int t, weft_error *err) {
    if (c->mod[t]) return WEFT_OK;
    char def[32];
    snprintf(def, sizeof(def), "-DKVP_T=%d", t);
    const char *defs[] = {def};
    weft_cuda_build build = {.plugin = KV_PAGED_NAME,
                             .name = "paged.cu",
                             .source = kv_paged_cuda_source,
                             .arch = c->arch,
                             .defines = defs,
                             .n_defines = 1,
                             .device = c->device};
    CUresult r = c->api.CtxSetCurrent(c->ctx);
    if (r != CUDA_SUCCESS) return cu_error(c, err, r, "making the context current");
    weft_status s = weft_cuda_module_load(&c->api.rt, &build, &c->mod[t], err);
    if (s) {
        c->mod[t] = NULL;
        return s;
    }
    if ((r = c->api.ModuleGetFunction(&c->store[t], c->mod[t], "kvp_store")) != CUDA_SUCCESS ||
        (r = c->api.ModuleGetFunction(&c->attn[t], c->mod[t], "kvp_attention")) != CUDA_SUCCESS ||
        (r = c->api.ModuleGetFunction(&c->split[t], c->mod[t], "kvp_attention_split")) !=
            CUDA_SUCCESS ||
        (r = c->api.ModuleGetFunction(&c->combine[t], c->mod[t], "kvp_attention_combine")) !=
            CUDA_SUCCESS)
        return cu_error(c, err, r, "looking up the paged.cu kernels");
    if ((t == 2 || t == 3) &&
        (r = c->api.ModuleGetFunction(&c->tc[t], c->mod[t], "kvp_attention_tc")) != CUDA_SUCCESS)
        return cu_error(c, err, r, "looking up kvp_attention_tc");
    r = c->api.FuncSetAttribute(c->split[t], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                (int)kvs_smem(256));
    if (r != CUDA_SUCCESS)
        return cu_error(c, err, r, "raising the shared memory limit of kvp_attention_split");
    if (!c->part) {
        /* The split kernel: S > 1 only while T x Hkv < 2 x SMs, so T x Hkv x S < 4 x SMs blocks
         * write partials, each for at most KVS_MAXG heads of at most 256 + 2 floats. */
        size_t bytes = (size_t)4 * (c->sms > 0 ? c->sms : 132) * KVS_MAXG * (256 + 2) *
                       sizeof(float);
        /* the tensor-core prefill splits long contexts too: room for a few splits of a few
         * hundred rows */
        if (bytes < ((size_t)32 << 20)) bytes = (size_t)32 << 20;
        r = c->api.MemAlloc(&c->part, bytes);
        if (r != CUDA_SUCCESS) {
            c->part = 0;
            return cu_error(c, err, r, "allocating the split attention's partials");
        }
        c->part_bytes = bytes;
    }
    return WEFT_OK;
}

/* The node: q, k, v, positions, kv_slots in one 16- or 32-bit float dtype, head_dim <= 256. */
static int node_ok(const weft_graph *g, const weft_node *n, const char **why) {
    if (n->n_in < 5 || n->in[4] == WEFT_TENSOR_NONE || n->n_out != 1) {
        *why = "needs the in.kv_slots input (llama option device_inputs: true)";
        return 0;
    }
    for (uint32_t i = 0; i < 5; i++)
        if (n->in[i] >= g->n_tensors) {
            *why = "has an input id out of range";
            return 0;
        }
    if (n->out[0] >= g->n_tensors) {
        *why = "has an output id out of range";
        return 0;
    }
    uint32_t dt = g->tensors[n->in[0]].dtype;
    int64_t Hq = n->p.i[1], Hkv = n->p.i[2], hd = n->p.i[3];
    if (!dtype_index(dt) || g->tensors[n->in[1]].dtype != dt || g->tensors[n->in[2]].dtype != dt ||
        g->tensors[n->out[0]].dtype != dt || g->tensors[n->in[3]].dtype != WEFT_DTYPE_I32 ||
        g->tensors[n->in[4]].dtype != WEFT_DTYPE_I32) {
        *why = "needs q, k, v and o in one f32, f16 or bf16 dtype and i32 positions and slots";
        return 0;
    }
    if (Hq <= 0 || Hkv <= 0 || Hq % Hkv || hd <= 0 || hd > 256 || n->p.i[0] < 0 || n->p.i[4] < 0 ||
        n->p.i[5] != 0) {
        *why = "needs heads a multiple of kv heads, head_dim 1..256, causal mask";
        return 0;
    }
    return 1;
}

static int32_t accepts(void *st, const weft_graph *g, const weft_node *n) {
    kvp_cuda *c = st;
    const char *why = NULL;
    if (!g || !n) return 0;
    if (!node_ok(g, n, &why)) {
        if (c->host->log)
            c->host->log(WEFT_LOG_INFO, KV_PAGED_NAME, "attention node %s: declined: it %s",
                         n->name, why);
        return 0;
    }
    int t = dtype_index(g->tensors[n->in[0]].dtype);
    if (c->failed[t]) return 0;
    weft_error err;
    memset(&err, 0, sizeof(err));
    err.size = sizeof(err);
    if (compile(c, t, &err) != WEFT_OK) {
        c->failed[t] = 1;
        if (c->host->log) c->host->log(WEFT_LOG_ERROR, KV_PAGED_NAME, "%s", err.message);
        return 0;
    }
    return 1;
}

/* Merges the S splits' partials in part into the output op (kvp_attention_combine). */
static weft_status combine(kvp_cuda *c, int t, CUdeviceptr part, CUdeviceptr op, int T, int Hq,
                           int hd, int S, CUstream stream, weft_error *err) {
    void *cargs[] = {&part, &op, &T, &Hq, &hd, &S};
    CUresult r = c->api.LaunchKernel(c->combine[t], (unsigned)T, (unsigned)Hq, 1, 128, 1, 1, 0,
                                     stream, cargs, NULL);
    if (r != CUDA_SUCCESS) return cu_error(c, err, r, "launching kvp_attention_combine");
    return WEFT_OK;
}

static weft_status run(void *st, const weft_exec_ctx *x, const weft_node *n, weft_error *err) {
    kvp_cuda *c = st;
    if (!x || !x->graph || !x->data || !n)
        return weft_sdk_error(err, WEFT_ERR_INVALID, KV_PAGED_NAME, "attention: missing context");
    const char *why = NULL;
    if (!node_ok(x->graph, n, &why))
        return weft_sdk_error(err, WEFT_ERR_INVALID, KV_PAGED_NAME, "attention node %s %s", n->name,
                              why);
    const weft_kv_view *kv = x->kv;
    if (!kv || !kv->desc || strncmp(kv->layout, WEFT_KV_PAGED_LAYOUT, sizeof(kv->layout)))
        return weft_sdk_error(err, WEFT_ERR_INVALID, KV_PAGED_NAME,
                              "attention node %s: expected the \"paged\" kv layout", n->name);
    const weft_kv_paged *d = kv->desc;
    uint32_t dt = x->graph->tensors[n->in[0]].dtype;
    int t = dtype_index(dt);
    int layer = (int)n->p.i[0];
    if (d->size < sizeof(*d) || (uint32_t)layer >= d->n_layers || d->dtype != dt ||
        (int64_t)d->n_kv_heads != n->p.i[2] || (int64_t)d->head_dim != n->p.i[3] || !d->k ||
        !d->v || !d->tables.ptr || !c->attn[t])
        return weft_sdk_error(err, WEFT_ERR_INVALID, KV_PAGED_NAME,
                              "attention node %s: the paged cache (%u layers, dtype %u, %u kv "
                              "heads of %u) does not fit layer %d in dtype %u",
                              n->name, d->n_layers, d->dtype, d->n_kv_heads, d->head_dim, layer,
                              dt);
    int T = (int)x->n_tokens, Hq = (int)n->p.i[1], Hkv = (int)n->p.i[2], hd = (int)n->p.i[3];
    int P = (int)d->page_size, mb = (int)d->max_blocks, ns = (int)d->n_slots;
    int np = (int)d->n_pages, window = (int)n->p.i[4];
    float scale = n->p.f[0] > 0.f ? n->p.f[0] : 1.0f / sqrtf((float)hd);
    if (T == 0) return WEFT_OK;
    CUdeviceptr qp = (CUdeviceptr)(uintptr_t)x->data[n->in[0]].ptr;
    CUdeviceptr kp = (CUdeviceptr)(uintptr_t)x->data[n->in[1]].ptr;
    CUdeviceptr vp = (CUdeviceptr)(uintptr_t)x->data[n->in[2]].ptr;
    CUdeviceptr pp = (CUdeviceptr)(uintptr_t)x->data[n->in[3]].ptr;
    CUdeviceptr sp = (CUdeviceptr)(uintptr_t)x->data[n->in[4]].ptr;
    CUdeviceptr op = (CUdeviceptr)(uintptr_t)x->data[n->out[0]].ptr;
    CUdeviceptr tb = (CUdeviceptr)(uintptr_t)d->tables.ptr;
    CUdeviceptr kc = (CUdeviceptr)(uintptr_t)d->k[layer].ptr;
    CUdeviceptr vc = (CUdeviceptr)(uintptr_t)d->v[layer].ptr;
    CUstream stream = (CUstream)x->stream;
    CUresult r = c->api.CtxSetCurrent(c->ctx);
    if (r != CUDA_SUCCESS) return cu_error(c, err, r, "making the context current");
    void *sargs[] = {&kp, &vp, &pp, &sp, &tb, &kc, &vc, &T, &Hkv, &hd, &P, &mb, &ns, &np};
    r = c->api.LaunchKernel(c->store[t], (unsigned)T, 1, 1, 128, 1, 1, 0, stream, sargs, NULL);
    if (r != CUDA_SUCCESS) return cu_error(c, err, r, "launching kvp_store");
    /* Steps with prefill chunks of f16/bf16 models attend on tensor cores (the steps and shapes
     * weft/attention_tc.h names): every row, in tiles of up to R rows of one request
     * (kernels/paged.cu). Decode-shaped steps, the ones CUDA graphs capture, never do. */
    int R = weft_atc_tile_rows(Hq, Hkv, hd);
    if (c->tc_prefill && c->tc[t] && R && weft_atc_step(x->batch, T)) {
        /* splits: about four blocks per SM over the tiles, as the workspace, KVS_MAXS and the
         * cache's chunks allow; a long context with few new rows (a follow-up turn, a chunk of
         * a long prompt) is spread over the GPU */
        size_t per = (size_t)T * Hq * (hd + 2) * sizeof(float);
        int S = weft_atc_splits(x->batch, T, R, Hkv, c->sms, P * mb, KVS_MAXS, per,
                                c->part_bytes);
        CUdeviceptr part = c->part;
        void *targs[] = {&qp, &pp, &sp, &tb, &kc, &vc, &op,     &part,  &T,  &Hq,
                         &Hkv, &hd, &P, &mb, &ns, &np, &window, &scale, &S};
        r = c->api.LaunchKernel(c->tc[t], (unsigned)T, (unsigned)Hkv, (unsigned)S,
                                WEFT_ATC_THREADS, 1, 1, weft_atc_smem(hd), stream, targs, NULL);
        if (r != CUDA_SUCCESS) return cu_error(c, err, r, "launching kvp_attention_tc");
        return S == 1 ? WEFT_OK : combine(c, t, part, op, T, Hq, hd, S, stream, err);
    }
    int S = kvs_splits(c, (long)T * Hkv, 2, P * mb);
    size_t need = S > 1 ? (size_t)T * Hq * S * (hd + 2) * sizeof(float) : 0;
    if (Hq / Hkv <= KVS_MAXG && need <= c->part_bytes) {
        /* split-KV, GQA-packed (decode and short steps); the one-block-per-head kernel below
         * remains for groups of more than KVS_MAXG query heads */
        CUdeviceptr part = c->part;
        void *xargs[] = {&qp, &pp, &sp, &tb, &kc, &vc,     &op,    &part, &T,  &Hq,
                         &Hkv, &hd, &P, &mb, &ns, &np, &window, &scale, &S};
        r = c->api.LaunchKernel(c->split[t], (unsigned)T, (unsigned)Hkv, (unsigned)S, KVS_THREADS,
                                1, 1, (unsigned)kvs_smem(hd), stream, xargs, NULL);
        if (r != CUDA_SUCCESS) return cu_error(c, err, r, "launching kvp_attention_split");
        return S == 1 ? WEFT_OK : combine(c, t, part, op, T, Hq, hd, S, stream, err);
    }
    void *aargs[] = {&qp,  &pp, &sp, &tb, &kc, &vc, &op,     &T,    &Hq,
                     &Hkv, &hd, &P,  &mb, &ns, &np, &window, &scale};
    r = c->api.LaunchKernel(c->attn[t], (unsigned)T, (unsigned)Hq, 1, 128, 1, 1, 0, stream, aargs,
                            NULL);
    if (r != CUDA_SUCCESS) return cu_error(c, err, r, "launching kvp_attention");
    return WEFT_OK;
}

void kv_paged_cuda_free(void *st) {
    kvp_cuda *c = st;
    if (!c) return;
    if (c->ctx && c->api.CtxSetCurrent && c->api.CtxSetCurrent(c->ctx) == CUDA_SUCCESS) {
        for (int t = 0; t < 4; t++)
            if (c->mod[t]) c->api.ModuleUnload(c->mod[t]);
        if (c->part) c->api.MemFree(c->part);
    }
    api_close(&c->api);
    free(c);
}

weft_status kv_paged_register_cuda(const weft_host_services *host, const weft_ops_service *ops,
                                   int tc_prefill, void **out, weft_error *err) {
    const weft_device_service *dev =
        host->get_service ? host->get_service(host, WEFT_SERVICE_DEVICE, 1) : NULL;
    if (!dev || !dev->native || strcmp(dev->backend, "cuda"))
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, KV_PAGED_NAME,
                              "register_ops: expected the cuda backend's device service, got %s",
                              dev ? dev->backend : "none");
    CUcontext ctx = (CUcontext)dev->native(dev->self);
    if (!ctx)
        return weft_sdk_error(err, WEFT_ERR_DEVICE, KV_PAGED_NAME,
                              "register_ops: the cuda backend gave no CUDA context");
    kvp_cuda *c = calloc(1, sizeof(*c));
    if (!c) return weft_sdk_error(err, WEFT_ERR_NOMEM, KV_PAGED_NAME, "out of memory");
    c->host = host;
    c->dev = dev;
    c->ctx = ctx;
    c->tc_prefill = tc_prefill;
    const char *missing = api_load(&c->api);
    if (missing) {
        const char *why = dlerror();
        weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, KV_PAGED_NAME,
                       "register_ops: cannot use CUDA here: %s is missing (%s)", missing,
                       why ? why : "no detail");
        kv_paged_cuda_free(c);
        return WEFT_ERR_UNSUPPORTED;
    }
    CUdevice d;
    int major = 0, minor = 0;
    CUresult r = c->api.CtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS) r = c->api.CtxGetDevice(&d);
    if (r == CUDA_SUCCESS)
        r = c->api.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    if (r == CUDA_SUCCESS)
        r = c->api.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
    if (r == CUDA_SUCCESS) r = c->api.DeviceGetName(c->device, (int)sizeof(c->device), d);
    if (r == CUDA_SUCCESS)
        r = c->api.DeviceGetAttribute(&c->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
    if (r != CUDA_SUCCESS) {
        cu_error(c, err, r, "reading the device's compute capability");
        kv_paged_cuda_free(c);
        return WEFT_ERR_DEVICE;
    }
    snprintf(c->arch, sizeof(c->arch), "sm_%d%d", major, minor);
    static const uint32_t dtypes[] = {WEFT_DTYPE_F32, WEFT_DTYPE_F16, WEFT_DTYPE_BF16};
    for (size_t i = 0; i < 3; i++) {
        weft_op_impl impl;
        memset(&impl, 0, sizeof(impl));
        impl.size = sizeof(impl);
        impl.op = WEFT_OP_ATTENTION;
        snprintf(impl.backend, sizeof(impl.backend), "cuda");
        impl.dtype = dtypes[i];
        snprintf(impl.layout, sizeof(impl.layout), "%s", WEFT_KV_PAGED_LAYOUT);
        impl.run = run;
        impl.state = c;
        impl.accepts = accepts;
        weft_status s = ops->add(ops->self, &impl, err);
        if (s) {
            kv_paged_cuda_free(c);
            return s;
        }
    }
    *out = c;
    return WEFT_OK;
}
