/* exec.device-sampling: the sampler slot on the cuda backend. The engine leaves the step's
 * logits on the device (engine.c, sample_row); this plugin picks each row's token there with
 * the rules of docs/SAMPLING.md and brings back 16 bytes per row (token, log-probability,
 * status) instead of vocab x 4 bytes, and the host never walks the vocabulary.
 *
 *   greedy (temperature 0): ds_greedy, many blocks per row, the last block merges; identical to
 *     the host sampler (the largest logit, ties to the smallest id).
 *   sampled: ds_sample, one 1024-thread block per row: temperature, top-k, top-p, min-p and one
 *     Philox-4x32-10 draw (same key/counter mapping as the host), so a seeded request draws the
 *     same uniform; the token equals the host's unless a cumulative mass lands within rounding
 *     of a boundary (summation order differs: documented in README.md).
 *   declined (WEFT_ERR_UNSUPPORTED, the engine then samples that row on the host): repetition,
 *     presence or frequency penalties (they need the token history), top alternatives
 *     (n_logprobs > 0), and sampled rows when option `sampled` is false.
 *
 * The device, its context and stream come from the device service on the first call (the
 * sampler has no setup hook and the service does not exist yet at create): that call compiles
 * the kernels (NVRTC, disk-cached) and allocates the scratch; later calls allocate nothing. The
 * primary context is retained here so destroy works in any plugin order. */
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/cuda_module.h"
#include "weft/sdk.h"

#define NAME "exec.device-sampling"
#define VERSION "0.1.0"
#define GREEDY_THREADS 256
#define SAMPLE_THREADS 1024
#define DS_MAX_ROWS 256
#define DS_ASYNC_DEPTH 4 /* sample_async calls outstanding at once (the engine uses 2) */

extern const char weft_exec_sampling_source[]; /* kernels/sampling.cu, embedded at build */

typedef struct ds_result {
    int32_t token;
    float logprob;
    int32_t status; /* 0 ok, 1 NaN or +inf logit, 2 every logit -inf */
    int32_t bad_index;
} ds_result;

typedef struct ds_state {
    const weft_host_services *host;
    int sampled;          /* option: sample temperature > 0 rows on the device */
    uint32_t blocks_opt;  /* option: greedy blocks per row, 0 = one per multiprocessor */
    int pdl;              /* option pdl, cleared at init below sm_90 */
    int ready;
    CUdevice dev;
    CUcontext ctx; /* retained primary context */
    CUstream stream;
    CUmodule mod;
    CUfunction f_greedy, f_sample, f_ids;
    uint32_t blocks;
    CUdeviceptr parts, done, results, keys;
    uint64_t keys_vocab;
    ds_result *h_results; /* pinned */
    /* sample_async: a ring of result slots (device and pinned) with an event each */
    CUdeviceptr a_results;
    ds_result *a_host;
    CUdeviceptr a_host_dev; /* a_host's device address (0: none; greedy results then copied) */
    CUevent a_ev[DS_ASYNC_DEPTH];
    uint32_t a_rows[DS_ASYNC_DEPTH], a_vocab[DS_ASYNC_DEPTH];
    uint32_t a_head, a_count;
    uint64_t rows_sampled, rows_greedy, rows_declined;
} ds_state;

static weft_status ck(CUresult r, const char *what, weft_error *err) {
    if (r == CUDA_SUCCESS) return WEFT_OK;
    const char *nm = NULL;
    cuGetErrorName(r, &nm);
    return weft_sdk_error(err, r == CUDA_ERROR_OUT_OF_MEMORY ? WEFT_ERR_NOMEM : WEFT_ERR_DEVICE,
                          NAME, "%s failed (%s)", what, nm ? nm : "?");
}
#define CK(call, what)                                                                           \
    do {                                                                                         \
        weft_status s_ = ck((call), what, err);                                                  \
        if (s_) return s_;                                                                       \
    } while (0)

static weft_status ds_create(const weft_host_services *host, const weft_options *opts, void **st,
                             weft_error *err) {
    if (!host || !st) return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "create: NULL argument");
    ds_state *s = calloc(1, sizeof(*s));
    if (!s) return weft_sdk_error(err, WEFT_ERR_NOMEM, NAME, "out of memory");
    s->host = host;
    s->sampled = weft_sdk_option_bool(opts, "sampled", 1);
    s->pdl = weft_sdk_option_bool(opts, "pdl", 1);
    int64_t b = weft_sdk_option_int(opts, "greedy_blocks", 0);
    if (b < 0 || b > 1024) {
        free(s);
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "option greedy_blocks: expected 0 (one per multiprocessor) .. 1024, "
                              "found %lld",
                              (long long)b);
    }
    s->blocks_opt = (uint32_t)b;
    *st = s;
    return WEFT_OK;
}

static void ds_destroy(void *st) {
    ds_state *s = st;
    if (!s) return;
    if (s->ctx && cuCtxSetCurrent(s->ctx) == CUDA_SUCCESS) {
        if (s->stream) cuStreamSynchronize(s->stream);
        if (s->parts) cuMemFree(s->parts);
        if (s->done) cuMemFree(s->done);
        if (s->results) cuMemFree(s->results);
        if (s->keys) cuMemFree(s->keys);
        if (s->h_results) cuMemFreeHost(s->h_results);
        if (s->a_results) cuMemFree(s->a_results);
        if (s->a_host) cuMemFreeHost(s->a_host);
        for (int i = 0; i < DS_ASYNC_DEPTH; i++)
            if (s->a_ev[i]) cuEventDestroy(s->a_ev[i]);
        if (s->mod) cuModuleUnload(s->mod);
    }
    if (s->ctx) cuDevicePrimaryCtxRelease(s->dev);
    free(s);
}

/* First use: device, context, stream, kernels, scratch. */
static weft_status ds_init(ds_state *s, weft_error *err) {
    const weft_device_service *dev =
        s->host->get_service ? s->host->get_service(s->host, WEFT_SERVICE_DEVICE, 1) : NULL;
    if (!dev || !dev->native || !dev->stream)
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                              "no device service with a native context: this technique needs "
                              "the cuda backend");
    if (!dev->backend || strcmp(dev->backend, "cuda"))
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                              "expected the cuda backend, the candidate runs on '%s'",
                              dev->backend ? dev->backend : "?");
    CUcontext ctx = (CUcontext)dev->native(dev->self);
    if (!ctx) return weft_sdk_error(err, WEFT_ERR_DEVICE, NAME, "the backend has no context");
    CK(cuCtxSetCurrent(ctx), "making the backend's context current");
    CK(cuCtxGetDevice(&s->dev), "reading the context's device");
    CUcontext prim = NULL;
    CK(cuDevicePrimaryCtxRetain(&prim, s->dev), "retaining the primary context");
    s->ctx = prim;
    if (prim != ctx) CK(cuCtxSetCurrent(prim), "making the primary context current");
    s->stream = (CUstream)dev->stream(dev->self);
    /* the device's exact architecture (Hopper's "a" target, as the backend uses) */
    int major = 0, minor = 0;
    char devname[128] = "", arch[32];
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, s->dev),
       "reading the compute capability");
    CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, s->dev),
       "reading the compute capability");
    CK(cuDeviceGetName(devname, sizeof(devname), s->dev), "reading the device name");
    snprintf(arch, sizeof(arch), "sm_%d%d%s", major, minor, major == 9 && minor == 0 ? "a" : "");
    s->pdl = s->pdl && major >= 9;
    weft_cuda_api api;
    weft_cuda_api_link_nvrtc(&api);
    weft_cuda_api_link_driver(&api);
    weft_cuda_build build = {.plugin = NAME,
                             .name = "sampling.cu",
                             .source = weft_exec_sampling_source,
                             .arch = arch,
                             .device = devname};
    weft_status st = weft_cuda_module_load(&api, &build, &s->mod, err);
    if (st) return st;
    CK(cuModuleGetFunction(&s->f_greedy, s->mod, "ds_greedy"), "looking up ds_greedy");
    CK(cuModuleGetFunction(&s->f_sample, s->mod, "ds_sample"), "looking up ds_sample");
    CK(cuModuleGetFunction(&s->f_ids, s->mod, "ds_ids"), "looking up ds_ids");
    int sms = 0;
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, s->dev),
       "reading the multiprocessor count");
    s->blocks = s->blocks_opt ? s->blocks_opt : (uint32_t)(sms > 0 ? sms : 32);
    CK(cuMemAlloc(&s->parts, (size_t)DS_MAX_ROWS * s->blocks * 24), "allocating partials");
    CK(cuMemAlloc(&s->done, DS_MAX_ROWS * sizeof(uint32_t)), "allocating row counters");
    CK(cuMemsetD32(s->done, 0, DS_MAX_ROWS), "clearing row counters");
    /* the clear runs on the legacy stream, which the compute stream does not wait for */
    CK(cuStreamSynchronize(CU_STREAM_LEGACY), "waiting for the row counters' clear");
    CK(cuMemAlloc(&s->results, DS_MAX_ROWS * sizeof(ds_result)), "allocating results");
    CK(cuMemAllocHost((void **)&s->h_results, DS_MAX_ROWS * sizeof(ds_result)),
       "allocating pinned results");
    CK(cuMemAlloc(&s->a_results, (size_t)DS_ASYNC_DEPTH * DS_MAX_ROWS * sizeof(ds_result)),
       "allocating pipelined results");
    CK(cuMemAllocHost((void **)&s->a_host,
                      (size_t)DS_ASYNC_DEPTH * DS_MAX_ROWS * sizeof(ds_result)),
       "allocating pinned pipelined results");
    if (cuMemHostGetDevicePointer(&s->a_host_dev, s->a_host, 0) != CUDA_SUCCESS)
        s->a_host_dev = 0;
    for (int i = 0; i < DS_ASYNC_DEPTH; i++)
        CK(cuEventCreate(&s->a_ev[i], CU_EVENT_DISABLE_TIMING), "creating a result event");
    s->ready = 1;
    return WEFT_OK;
}

/* WEFT_OK: the device can serve this row; WEFT_ERR_UNSUPPORTED: the host must;
 * WEFT_ERR_INVALID: bad parameters (same rules and messages as the host sampler). */
static weft_status check_row(const ds_state *s, const weft_sampling *p, weft_error *err) {
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "temperature: expected a finite value >= 0, got %g",
                              (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "top_p: expected 0 < top_p <= 1, got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "min_p: expected 0 <= min_p <= 1, got %g", (double)p->min_p);
    if (p->top_k < 0)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "top_k: expected >= 0 (0 = off), got %d", (int)p->top_k);
    if (p->n_logprobs < 0 || p->n_logprobs > 20)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "n_logprobs: expected 0..20, got %d",
                              (int)p->n_logprobs);
    if (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
        p->frequency_penalty != 0.0f)
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                              "penalties need the token history: sampled on the host");
    if (p->n_logprobs > 0)
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                              "top alternatives (n_logprobs %d): sampled on the host",
                              (int)p->n_logprobs);
    if (p->temperature > 0.0f && !s->sampled)
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                              "option sampled is false: temperature > 0 rows go to the host");
    return WEFT_OK;
}

/* Enqueues the kernels of rows base..base+n-1 (n <= DS_MAX_ROWS), results to results[0..n). */
static weft_status launch_rows(ds_state *s, const weft_buffer *logits, uint32_t base, uint32_t n,
                               uint32_t vocab, const weft_sampling *params, CUdeviceptr results,
                               CUdeviceptr ids, weft_error *err) {
    for (uint32_t r = 0; r < n;) {
        const weft_sampling *p = &params[base + r];
        CUdeviceptr row =
            (CUdeviceptr)(uintptr_t)logits->ptr + (uint64_t)(base + r) * vocab * sizeof(float);
        CUdeviceptr res = results + r * sizeof(ds_result);
        int V = (int)vocab;
        if (p->temperature == 0.0f) {
            /* a run of greedy rows is one launch: grid y indexes the row (the kernel offsets
             * logits, partials, counters and results by blockIdx.y) */
            uint32_t nr = 1;
            while (r + nr < n && params[base + r + nr].temperature == 0.0f)
                nr++;
            long ld = (long)vocab;
            CUdeviceptr parts = s->parts + (uint64_t)r * s->blocks * 24;
            CUdeviceptr done = s->done + r * sizeof(uint32_t);
            CUdeviceptr rid = ids ? ids + r * sizeof(int32_t) : 0;
            void *args[] = {&row, &ld, &V, &parts, &done, &res, &rid};
            /* option pdl (sm_90+): a programmatic dependent launch, so the blocks are placed
             * while the kernel before (the LM head) drains; ds_greedy's griddepcontrol.wait
             * holds them until it has completed (without the attribute the wait does nothing) */
            CUlaunchAttribute at = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
            at.value.programmaticStreamSerializationAllowed = 1;
            CUlaunchConfig cfg = {.gridDimX = s->blocks,
                                  .gridDimY = nr,
                                  .gridDimZ = 1,
                                  .blockDimX = GREEDY_THREADS,
                                  .blockDimY = 1,
                                  .blockDimZ = 1,
                                  .hStream = s->stream,
                                  .attrs = &at,
                                  .numAttrs = s->pdl ? 1 : 0};
            CK(cuLaunchKernelEx(&cfg, s->f_greedy, args, NULL), "launching ds_greedy");
            s->rows_greedy += nr;
            r += nr;
        } else {
            float t = p->temperature, tp = p->top_p, mp = p->min_p;
            int k = p->top_k;
            unsigned long long seed = p->seed, counter = p->counter;
            void *args[] = {&row, &V, &s->keys, &t, &k, &tp, &mp, &seed, &counter, &res};
            CK(cuLaunchKernel(s->f_sample, 1, 1, 1, SAMPLE_THREADS, 1, 1, 0, s->stream, args,
                              NULL),
               "launching ds_sample");
            s->rows_sampled++;
            r++;
        }
    }
    return WEFT_OK;
}

/* Argument and row checks shared by sample and sample_async; first use sets the device up. */
static weft_status prepare_call(ds_state *s, const weft_buffer *logits, uint32_t n_rows,
                                uint32_t vocab, const weft_sampling *params, weft_error *err) {
    if (vocab == 0 || vocab > 0x7fffffffu || n_rows == 0)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "sample: expected vocab in 1..2^31-1 and rows >= 1, got %u and %u",
                              vocab, n_rows);
    if (logits->memory != WEFT_MEMORY_DEVICE || !logits->ptr ||
        logits->bytes < (uint64_t)n_rows * vocab * sizeof(float))
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "sample: expected %u rows of %u f32 logits in device memory, got "
                              "%llu bytes in memory kind %u",
                              n_rows, vocab, (unsigned long long)logits->bytes, logits->memory);
    for (uint32_t r = 0; r < n_rows; r++) {
        if (params[r].size < sizeof(weft_sampling) - sizeof(uint64_t))
            return weft_sdk_error(err, WEFT_ERR_ABI, NAME, "weft_sampling of %u bytes",
                                  params[r].size);
        weft_status c = check_row(s, &params[r], err);
        if (c == WEFT_ERR_UNSUPPORTED) s->rows_declined++;
        if (c) return c;
    }
    if (!s->ready) {
        weft_status is = ds_init(s, err);
        if (is) return is;
    }
    CK(cuCtxSetCurrent(s->ctx), "making the context current");
    if (vocab > s->keys_vocab) {
        /* once per engine: sampled rows keep one order key per vocabulary entry */
        if (s->keys) cuMemFree(s->keys);
        s->keys = 0;
        CK(cuMemAlloc(&s->keys, (size_t)vocab * sizeof(uint64_t)), "allocating sort keys");
        s->keys_vocab = vocab;
    }
    return WEFT_OK;
}

/* The tokens and log-probabilities of n kernel results (rows base.. of the call) into
 * tokens_out / logprob_out[0..n): every good row is written, the first bad one is reported. */
static weft_status read_results(const ds_result *o, uint32_t n, uint32_t base, uint32_t vocab,
                                int32_t *tokens_out, float *logprob_out, weft_error *err) {
    weft_status first = WEFT_OK;
    for (uint32_t r = 0; r < n; r++) {
        if (o[r].status == 0 && o[r].token >= 0 && (uint32_t)o[r].token < vocab) {
            tokens_out[r] = o[r].token;
            if (logprob_out) logprob_out[r] = o[r].logprob;
            continue;
        }
        if (first) continue;
        first = o[r].status == 1
                    ? weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                                     "logits[%d]: expected a finite value or -inf, got NaN or "
                                     "+inf (row %u)",
                                     o[r].bad_index, base + r)
                    : weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                                     "no token is left to sample in row %u: every logit is -inf",
                                     base + r);
    }
    return first;
}

/* step: one token per row of logits (device, f32, rows of vocab). Synchronises the stream once
 * per DS_MAX_ROWS rows to read the results: the only host wait of a sampled step. */
static weft_status ds_sample(void *st, const weft_buffer *logits, uint32_t n_rows, uint32_t vocab,
                             const weft_sampling *params, int32_t *tokens_out,
                             float *logprob_out, weft_error *err) {
    ds_state *s = st;
    if (!s || !logits || !params || !tokens_out)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "sample: NULL argument");
    weft_status ps = prepare_call(s, logits, n_rows, vocab, params, err);
    if (ps) return ps;
    for (uint32_t base = 0; base < n_rows; base += DS_MAX_ROWS) {
        uint32_t n = n_rows - base < DS_MAX_ROWS ? n_rows - base : DS_MAX_ROWS;
        weft_status ls = launch_rows(s, logits, base, n, vocab, params, s->results, 0, err);
        if (ls) return ls;
        CK(cuMemcpyDtoHAsync(s->h_results, s->results, n * sizeof(ds_result), s->stream),
           "copying sampled tokens to the host");
        CK(cuStreamSynchronize(s->stream), "waiting for the sampled tokens");
        weft_status rs = read_results(s->h_results, n, base, vocab, tokens_out + base,
                                      logprob_out ? logprob_out + base : NULL, err);
        if (rs) return rs;
    }
    return WEFT_OK;
}

/* step (exec.async-pipeline): the kernels, then the ids into `ids` (the engine copies them
 * into the next step's in.tokens on the device), the results into a pinned slot and an event;
 * no wait. Everything is checked before the first launch, so a declined call leaves nothing
 * outstanding. */
static weft_status ds_sample_async(void *st, const weft_buffer *logits, uint32_t n_rows,
                                   uint32_t vocab, const weft_sampling *params, weft_buffer *ids,
                                   weft_error *err) {
    ds_state *s = st;
    if (!s || !logits || !params || !ids)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "sample_async: NULL argument");
    if (n_rows > DS_MAX_ROWS)
        return weft_sdk_error(err, WEFT_ERR_UNSUPPORTED, NAME,
                              "sample_async: %u rows, at most %u run ahead", n_rows, DS_MAX_ROWS);
    if (s->a_count == DS_ASYNC_DEPTH)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "sample_async: %u calls already outstanding (collect first)",
                              DS_ASYNC_DEPTH);
    if (ids->memory != WEFT_MEMORY_DEVICE || !ids->ptr || ids->bytes < (uint64_t)n_rows * 4)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "sample_async: expected a device buffer of %u i32 ids, got %llu "
                              "bytes in memory kind %u",
                              n_rows, (unsigned long long)ids->bytes, ids->memory);
    weft_status ps = prepare_call(s, logits, n_rows, vocab, params, err);
    if (ps) return ps;
    uint32_t slot = (s->a_head + s->a_count) % DS_ASYNC_DEPTH;
    CUdeviceptr res = s->a_results + (uint64_t)slot * DS_MAX_ROWS * sizeof(ds_result);
    CUdeviceptr dst = (CUdeviceptr)(uintptr_t)ids->ptr;
    /* All rows greedy: ds_greedy writes each row's token id into ids itself (no ds_ids) and its
     * 16-byte result straight into the pinned slot through that memory's device address (no
     * copy): between two steps the stream then holds kernels only (at batch 1 on the H200,
     * docs/perf/batch1.md, session of 2026-12-01 17:59 UTC). A call with sampled rows keeps
     * ds_ids (which writes every row's id, so the greedy launches get no ids) and the copy. */
    int all_greedy = 1;
    for (uint32_t r = 0; r < n_rows; r++)
        all_greedy &= params[r].temperature == 0.0f;
    CUdeviceptr hres =
        all_greedy && s->a_host_dev
            ? s->a_host_dev + (uint64_t)slot * DS_MAX_ROWS * sizeof(ds_result)
            : 0;
    weft_status ls = launch_rows(s, logits, 0, n_rows, vocab, params, hres ? hres : res,
                                 all_greedy ? dst : 0, err);
    if (ls) return ls;
    if (!hres) {
        int n = (int)n_rows;
        void *args[] = {&res, &n, &dst};
        if (!all_greedy)
            CK(cuLaunchKernel(s->f_ids, (n_rows + 255) / 256, 1, 1, 256, 1, 1, 0, s->stream, args,
                              NULL),
               "launching ds_ids");
        CK(cuMemcpyDtoHAsync(s->a_host + (size_t)slot * DS_MAX_ROWS, res,
                             n_rows * sizeof(ds_result), s->stream),
           "copying sampled tokens to pinned memory");
    }
    CK(cuEventRecord(s->a_ev[slot], s->stream), "recording the results event");
    s->a_rows[slot] = n_rows;
    s->a_vocab[slot] = vocab;
    s->a_count++;
    return WEFT_OK;
}

/* control: waits for the oldest outstanding sample_async and reads its pinned results. */
static weft_status ds_collect(void *st, uint32_t n_rows, int32_t *tokens_out, float *logprob_out,
                              weft_error *err) {
    ds_state *s = st;
    if (!s || !tokens_out)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "collect: NULL argument");
    for (uint32_t r = 0; r < n_rows; r++)
        tokens_out[r] = -1;
    if (s->a_count == 0)
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME, "collect: no sample_async outstanding");
    uint32_t slot = s->a_head;
    if (n_rows != s->a_rows[slot])
        return weft_sdk_error(err, WEFT_ERR_INVALID, NAME,
                              "collect: expected the %u rows of the oldest call, got %u",
                              s->a_rows[slot], n_rows);
    s->a_head = (s->a_head + 1) % DS_ASYNC_DEPTH;
    s->a_count--;
    CK(cuCtxSetCurrent(s->ctx), "making the context current");
    CK(cuEventSynchronize(s->a_ev[slot]), "waiting for the sampled tokens");
    return read_results(s->a_host + (size_t)slot * DS_MAX_ROWS, n_rows, 0, s->a_vocab[slot],
                        tokens_out, logprob_out, err);
}

static const weft_sampler_vtable ds_vtable = {
    .size = sizeof(weft_sampler_vtable),
    .sample = ds_sample,
    .sample_async = ds_sample_async,
    .collect = ds_collect,
};

static const weft_plugin_descriptor ds_desc = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = NAME,
    .version = VERSION,
    .kind = WEFT_KIND_TECHNIQUE,
    .slots = WEFT_SLOT_SAMPLER,
    .create = ds_create,
    .destroy = ds_destroy,
    .sampler = &ds_vtable,
};

WEFT_SDK_ENTRY(ds_desc, 1, 1)
