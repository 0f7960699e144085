/* The cuda backend plugin: device selection, the primary context and one compute stream, the
 * device arena (all device memory the engine uses comes from it; nothing is allocated inside a
 * step), pinned staging for per-step metadata, and the backend vtable of weft/plugin.h. Kernels
 * are in cuda_kernels.c (NVRTC) and op implementations in cuda_ops.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "weft/sdk.h"

#define CUDA_VERSION_STRING "0.1.0"
#define CHUNK_MIN (256ull << 20)
#define ARENA_ALIGN 256ull
#define STAGE_BYTES (8ull << 20)

weft_status cuda_fail(weft_error *err, weft_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    weft_sdk_verror(err, code, CUDA_NAME, fmt, ap);
    va_end(ap);
    return code;
}

weft_status cuda_check(CUresult r, const char *call, const char *what, weft_error *err) {
    if (r == CUDA_SUCCESS) return WEFT_OK;
    const char *name = NULL, *desc = NULL;
    cuGetErrorName(r, &name);
    cuGetErrorString(r, &desc);
    return cuda_fail(err, r == CUDA_ERROR_OUT_OF_MEMORY ? WEFT_ERR_NOMEM : WEFT_ERR_DEVICE,
                     "%s failed (%s: %s) while %s", call, name ? name : "?", desc ? desc : "?",
                     what);
}

#define CK(call, what)                                                                           \
    do {                                                                                         \
        weft_status s_ = cuda_check((call), #call, what, err);                                   \
        if (s_) return s_;                                                                       \
    } while (0)

/* ---- arena ----------------------------------------------------------------------------- */
static weft_status chunk_add(cuda_backend *b, uint64_t bytes, weft_error *err) {
    cuda_chunk *nc = realloc(b->chunks, (b->n_chunks + 1) * sizeof(*nc));
    if (!nc) return cuda_fail(err, WEFT_ERR_NOMEM, "host memory for the arena table");
    b->chunks = nc;
    cuda_chunk *c = &b->chunks[b->n_chunks];
    memset(c, 0, sizeof(*c));
    CK(cuMemAlloc(&c->base, bytes), "allocating a device arena chunk");
    c->bytes = bytes;
    c->blocks = malloc(16 * sizeof(cuda_block));
    if (!c->blocks) {
        cuMemFree(c->base);
        return cuda_fail(err, WEFT_ERR_NOMEM, "host memory for the arena table");
    }
    c->cap_blocks = 16;
    c->n_blocks = 1;
    c->blocks[0] = (cuda_block){0, bytes, 0};
    b->n_chunks++;
    return WEFT_OK;
}

static int chunk_take(cuda_chunk *c, uint64_t bytes, CUdeviceptr *out) {
    for (size_t i = 0; i < c->n_blocks; i++) {
        cuda_block *bl = &c->blocks[i];
        if (bl->used || bl->bytes < bytes) continue;
        if (bl->bytes > bytes) {
            if (c->n_blocks == c->cap_blocks) {
                cuda_block *nb = realloc(c->blocks, c->cap_blocks * 2 * sizeof(*nb));
                if (!nb) return 0;
                c->blocks = nb;
                c->cap_blocks *= 2;
                bl = &c->blocks[i];
            }
            memmove(&c->blocks[i + 2], &c->blocks[i + 1], (c->n_blocks - i - 1) * sizeof(*bl));
            c->blocks[i + 1] = (cuda_block){bl->off + bytes, bl->bytes - bytes, 0};
            c->n_blocks++;
            bl->bytes = bytes;
        }
        bl->used = 1;
        *out = c->base + bl->off;
        return 1;
    }
    return 0;
}

weft_status cuda_arena_alloc(cuda_backend *b, uint64_t bytes, CUdeviceptr *out, weft_error *err) {
    if (bytes == 0) bytes = ARENA_ALIGN;
    bytes = (bytes + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
    for (size_t i = 0; i < b->n_chunks; i++)
        if (chunk_take(&b->chunks[i], bytes, out)) goto done;
    if (b->arena_fixed)
        return cuda_fail(err, WEFT_ERR_NOMEM,
                         "the device arena (option arena_mb = %llu) has no free block of %llu "
                         "bytes; raise arena_mb or set it to 0 to grow on demand",
                         (unsigned long long)(b->arena_fixed >> 20), (unsigned long long)bytes);
    {
        weft_status s = chunk_add(b, bytes > CHUNK_MIN ? bytes : CHUNK_MIN, err);
        if (s) return s;
    }
    if (!chunk_take(&b->chunks[b->n_chunks - 1], bytes, out))
        return cuda_fail(err, WEFT_ERR_NOMEM, "arena block table allocation failed");
done:
    b->allocated += bytes;
    return WEFT_OK;
}

void cuda_arena_free(cuda_backend *b, CUdeviceptr p) {
    for (size_t i = 0; i < b->n_chunks; i++) {
        cuda_chunk *c = &b->chunks[i];
        if (p < c->base || p >= c->base + c->bytes) continue;
        for (size_t j = 0; j < c->n_blocks; j++) {
            if (c->base + c->blocks[j].off != p || !c->blocks[j].used) continue;
            c->blocks[j].used = 0;
            b->allocated -= c->blocks[j].bytes;
            /* coalesce with the next and the previous free block */
            if (j + 1 < c->n_blocks && !c->blocks[j + 1].used) {
                c->blocks[j].bytes += c->blocks[j + 1].bytes;
                memmove(&c->blocks[j + 1], &c->blocks[j + 2],
                        (c->n_blocks - j - 2) * sizeof(cuda_block));
                c->n_blocks--;
            }
            if (j > 0 && !c->blocks[j - 1].used) {
                c->blocks[j - 1].bytes += c->blocks[j].bytes;
                memmove(&c->blocks[j], &c->blocks[j + 1],
                        (c->n_blocks - j - 1) * sizeof(cuda_block));
                c->n_blocks--;
            }
            return;
        }
    }
}

weft_status cuda_stage(cuda_backend *b, const void *src, uint64_t n, CUdeviceptr *dev,
                       weft_error *err) {
    uint64_t need = (n + 255) & ~255ull;
    if (need > b->stage_bytes)
        return cuda_fail(err, WEFT_ERR_INVALID, "step metadata of %llu bytes exceeds the %llu "
                         "byte staging buffer", (unsigned long long)n,
                         (unsigned long long)b->stage_bytes);
    if (b->stage_off + need > b->stage_bytes) b->stage_off = 0;
    memcpy(b->stage + b->stage_off, src, n);
    *dev = b->stage_dev + b->stage_off;
    CK(cuMemcpyHtoDAsync(*dev, b->stage + b->stage_off, n, b->stream), "staging step metadata");
    b->stage_off += need;
    return WEFT_OK;
}

/* ---- vtable ---------------------------------------------------------------------------- */
static weft_status cb_device_info(void *st, weft_device_info *out, weft_error *err) {
    cuda_backend *b = st;
    if (!out) return cuda_fail(err, WEFT_ERR_INVALID, "device_info: out is NULL");
    memset(out, 0, sizeof(*out));
    out->size = sizeof(*out);
    snprintf(out->name, sizeof(out->name), "%s", b->name);
    snprintf(out->arch, sizeof(out->arch), "%s", b->arch);
    size_t fr = 0, tot = 0;
    CK(cuMemGetInfo(&fr, &tot), "reading device memory");
    out->memory_bytes = tot;
    out->free_bytes = fr;
    out->compute_units = (uint32_t)b->sm_count;
    return WEFT_OK;
}

static weft_status cb_alloc(void *st, uint64_t bytes, uint32_t memory, weft_buffer *out,
                            weft_error *err) {
    cuda_backend *b = st;
    if (!out) return cuda_fail(err, WEFT_ERR_INVALID, "alloc: out is NULL");
    memset(out, 0, sizeof(*out));
    out->bytes = bytes;
    out->memory = memory;
    if (memory == WEFT_MEMORY_DEVICE) {
        CUdeviceptr p = 0;
        weft_status s = cuda_arena_alloc(b, bytes, &p, err);
        if (s) return s;
        out->ptr = (void *)(uintptr_t)p;
        return WEFT_OK;
    }
    if (memory == WEFT_MEMORY_HOST_PINNED) {
        void *p = NULL;
        CK(cuMemAllocHost(&p, bytes ? bytes : 1), "allocating pinned host memory");
        out->ptr = p;
        return WEFT_OK;
    }
    if (memory == WEFT_MEMORY_HOST) {
        out->ptr = aligned_alloc(64, (bytes + 63) & ~63ull);
        if (!out->ptr) return cuda_fail(err, WEFT_ERR_NOMEM, "host allocation of %llu bytes",
                                        (unsigned long long)bytes);
        return WEFT_OK;
    }
    return cuda_fail(err, WEFT_ERR_INVALID, "alloc: unknown memory kind %u", memory);
}

static void cb_free(void *st, weft_buffer *buf) {
    cuda_backend *b = st;
    if (!buf || !buf->ptr) return;
    if (buf->memory == WEFT_MEMORY_DEVICE) cuda_arena_free(b, (CUdeviceptr)(uintptr_t)buf->ptr);
    else if (buf->memory == WEFT_MEMORY_HOST_PINNED) cuMemFreeHost(buf->ptr);
    else free(buf->ptr);
    buf->ptr = NULL;
}

static int is_host(uint32_t m) { return m == WEFT_MEMORY_HOST || m == WEFT_MEMORY_HOST_PINNED; }

static weft_status cb_copy(void *st, weft_buffer *dst, uint64_t dst_off, const weft_buffer *src,
                           uint64_t src_off, uint64_t bytes, void *stream, weft_error *err) {
    cuda_backend *b = st;
    if (!dst || !src || dst_off + bytes > dst->bytes || src_off + bytes > src->bytes)
        return cuda_fail(err, WEFT_ERR_INVALID, "copy of %llu bytes out of buffer bounds",
                         (unsigned long long)bytes);
    CUstream s = stream ? (CUstream)stream : b->stream;
    char *dp = (char *)dst->ptr + dst_off;
    const char *sp = (const char *)src->ptr + src_off;
    if (is_host(dst->memory) && is_host(src->memory)) {
        memcpy(dp, sp, bytes);
    } else if (is_host(src->memory)) {
        /* a few words from pinned memory (a pipelined step's inputs): a kernel reading them
         * through their device address, so the stream between two steps holds no copy-engine
         * operation (with the sampler's results written the same way, 7.0-7.5 us a token less
         * at batch 1 on the H200: docs/perf/batch1.md, session of 2026-12-01 17:59 UTC) */
        CUdeviceptr sd;
        int small = src->memory == WEFT_MEMORY_HOST_PINNED && bytes <= 4096 && bytes % 4 == 0 &&
                    (((uintptr_t)dp | (uintptr_t)sp) & 3) == 0 && b->n_modules > 0;
        if (small && !b->f_copy_words &&
            cuModuleGetFunction(&b->f_copy_words, b->modules[0].mod, "weft_copy_words") !=
                CUDA_SUCCESS)
            b->f_copy_words = NULL;
        if (small && b->f_copy_words &&
            cuMemHostGetDevicePointer(&sd, (void *)sp, 0) == CUDA_SUCCESS) {
            CUdeviceptr dd = (CUdeviceptr)(uintptr_t)dp;
            int n = (int)(bytes / 4);
            void *args[] = {&sd, &dd, &n};
            CK(cuLaunchKernel(b->f_copy_words, 1, 1, 1, 256, 1, 1, 0, s, args, NULL),
               "copying host to device (kernel)");
            return WEFT_OK;
        }
        CK(cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dp, sp, bytes, s), "copying host to device");
    } else if (is_host(dst->memory)) {
        CK(cuMemcpyDtoHAsync(dp, (CUdeviceptr)(uintptr_t)sp, bytes, s), "copying device to host");
    } else {
        CK(cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dp, (CUdeviceptr)(uintptr_t)sp, bytes, s),
           "copying device to device");
    }
    return WEFT_OK;
}

static weft_status cb_upload(void *st, weft_buffer *dst, uint64_t dst_off, const void *src,
                             uint64_t bytes, weft_error *err) {
    if (!dst || dst_off + bytes > dst->bytes)
        return cuda_fail(err, WEFT_ERR_INVALID, "upload of %llu bytes out of buffer bounds",
                         (unsigned long long)bytes);
    if (is_host(dst->memory)) {
        memcpy((char *)dst->ptr + dst_off, src, bytes);
        return WEFT_OK;
    }
    /* cuMemcpyHtoD from pageable memory returns once the data is staged, before its DMA has
     * landed, and runs on the legacy stream, which the non-blocking compute stream does not wait
     * for: a kernel launched right after could read the old bytes (the CUDA driver API's "API
     * synchronization behavior"). Hence the wait for the legacy stream. */
    CK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst->ptr + dst_off, src, bytes), "uploading");
    CK(cuStreamSynchronize(CU_STREAM_LEGACY), "waiting for an upload to land");
    return WEFT_OK;
}

static weft_status cb_download(void *st, void *dst, const weft_buffer *src, uint64_t src_off,
                               uint64_t bytes, weft_error *err) {
    cuda_backend *b = st;
    if (!src || src_off + bytes > src->bytes)
        return cuda_fail(err, WEFT_ERR_INVALID, "download of %llu bytes out of buffer bounds",
                         (unsigned long long)bytes);
    if (is_host(src->memory)) {
        CK(cuStreamSynchronize(b->stream), "waiting for the stream before a host read");
        memcpy(dst, (const char *)src->ptr + src_off, bytes);
        return WEFT_OK;
    }
    CK(cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src->ptr + src_off, bytes, b->stream),
       "downloading");
    CK(cuStreamSynchronize(b->stream), "waiting for a download");
    return WEFT_OK;
}

static weft_status cb_synchronize(void *st, void *stream, weft_error *err) {
    cuda_backend *b = st;
    CK(cuStreamSynchronize(stream ? (CUstream)stream : b->stream), "synchronizing the stream");
    return WEFT_OK;
}

static void *cb_stream(void *st) { return ((cuda_backend *)st)->stream; }

static weft_status cb_event_record(void *st, void **event, void *stream, weft_error *err) {
    cuda_backend *b = st;
    CUevent e = (CUevent)*event;
    if (!e) {
        CK(cuEventCreate(&e, CU_EVENT_DEFAULT), "creating a timing event");
        *event = e;
    }
    CK(cuEventRecord(e, stream ? (CUstream)stream : b->stream), "recording an event");
    return WEFT_OK;
}

static weft_status cb_event_elapsed(void *st, void *start, void *end, float *ms,
                                    weft_error *err) {
    CK(cuEventSynchronize((CUevent)end), "waiting for an event");
    CK(cuEventElapsedTime(ms, (CUevent)start, (CUevent)end), "reading event time");
    return WEFT_OK;
}

static void *cb_native(void *st) { return ((cuda_backend *)st)->ctx; }

static const weft_backend_vtable cuda_vtable = {
    .size = sizeof(weft_backend_vtable),
    .device_info = cb_device_info,
    .register_ops = cuda_register_ops,
    .alloc = cb_alloc,
    .free = cb_free,
    .copy = cb_copy,
    .upload = cb_upload,
    .download = cb_download,
    .synchronize = cb_synchronize,
    .stream = cb_stream,
    .event_record = cb_event_record,
    .event_elapsed = cb_event_elapsed,
    .native = cb_native,
    .probe = cuda_probe,
};

/* ---- create / destroy ------------------------------------------------------------------ */
static void cuda_destroy(void *st) {
    cuda_backend *b = st;
    if (!b) return;
    if (b->ctx) cuCtxSetCurrent(b->ctx);
    if (b->stream) cuStreamSynchronize(b->stream);
    if (b->trace) cuda_trace_report(b);
    free(b->trace_names);
    cuda_kernels_fini(b);
    cuda_ops_fini(b);
    if (b->lt) cublasLtDestroy(b->lt);
    for (size_t i = 0; i < b->n_chunks; i++) {
        cuMemFree(b->chunks[i].base);
        free(b->chunks[i].blocks);
    }
    free(b->chunks);
    if (b->stage) cuMemFreeHost(b->stage);
    if (b->stream) cuStreamDestroy(b->stream);
    if (b->ctx) cuDevicePrimaryCtxRelease(b->dev);
    free(b);
}

static int64_t opt_int(const weft_host_services *host, const weft_options *opts, const char *key,
                       int64_t dflt) {
    if (!opts) return dflt;
    for (uint32_t i = 0; i < opts->count; i++)
        if (opts->items[i].key && !strcmp(opts->items[i].key, key)) return opts->items[i].i;
    return dflt;
}

/* The integer options with a range: each read into *dst, or an error naming the option, the
 * range and what its values mean. */
typedef struct int_opt {
    const char *key;
    int64_t dflt, lo, hi;
    const char *meaning;
    int *dst;
} int_opt;
static weft_status read_int_opts(const weft_host_services *host, const weft_options *opts,
                                 const int_opt *t, size_t n, weft_error *err) {
    for (size_t i = 0; i < n; i++) {
        int64_t v = opt_int(host, opts, t[i].key, t[i].dflt);
        if (v < t[i].lo || v > t[i].hi)
            return cuda_fail(err, WEFT_ERR_INVALID, "option %s: expected %lld..%lld%s, got %lld",
                             t[i].key, (long long)t[i].lo, (long long)t[i].hi, t[i].meaning,
                             (long long)v);
        *t[i].dst = (int)v;
    }
    return WEFT_OK;
}

static weft_status cuda_create(const weft_host_services *host, const weft_options *opts,
                               void **out, weft_error *err) {
    if (!out) return cuda_fail(err, WEFT_ERR_INVALID, "create: out is NULL");
    *out = NULL;
    cuda_backend *b = calloc(1, sizeof(*b));
    if (!b) return cuda_fail(err, WEFT_ERR_NOMEM, "create: host memory");
    b->host = host;
    b->ordinal = (int)opt_int(host, opts, "device", 0);
    b->arena_fixed = (uint64_t)opt_int(host, opts, "arena_mb", 0) << 20;
    b->gemv_force = opt_int(host, opts, "gemv_force", 0) != 0;
    b->pdl = opt_int(host, opts, "pdl", 1) != 0;
    b->pdl_early = opt_int(host, opts, "pdl_early", 1) != 0;
    b->pdl_l1 = opt_int(host, opts, "pdl_l1", 0) != 0;
    b->trace = opt_int(host, opts, "trace", 0) != 0;
    b->prefill_tc = opt_int(host, opts, "prefill_tc", 1) != 0;
    b->gemv_x_async = opt_int(host, opts, "gemv_x_async", 0) != 0;
    b->norm_sum_all = opt_int(host, opts, "norm_sum_all", 0) != 0;
    b->gemv_l2_sm = opt_int(host, opts, "gemv_l2_sm", 0) != 0;
    b->gemv_l2_first = opt_int(host, opts, "gemv_l2_first", 0) != 0;
    b->attn_dead_exit = opt_int(host, opts, "attn_dead_exit", 0) != 0;
    b->bf16_cvt = opt_int(host, opts, "bf16_cvt", 0) != 0;
    b->attn_rope_sums = opt_int(host, opts, "attn_rope_sums", 0) != 0;
    b->gemv_nl_defer = opt_int(host, opts, "gemv_nl_defer", 0) != 0;
    b->attn_hd = opt_int(host, opts, "attn_hd", 1) != 0;
    const int_opt ranged[] = {
        {"gemv_max_tokens", CUDA_GEMV_MAX_TOKENS, 0, 8, "", &b->gemv_max_tokens},
        {"smem_carveout", -1, -1, 100, " (percent)", &b->smem_carveout},
        {"gemv_xsmem", 0, 0, 3, " (1: the plain GEMVs, 2: gate|up + SwiGLU, 3: both)",
         &b->gemv_xsmem},
        {"gemv_stage", 0, 0, 200,
         " (KiB of weights a staged GEMV block copies to shared memory; "
         "0: off)",
         &b->gemv_stage},
        {"gemv_loop", 0, 0, 16, " (blocks an SM of the looped batch-1 GEMV; 0: off)",
         &b->gemv_loop},
        {"gemv_head_rows", 0, 0, 1 << 30,
         " (rows past which a batch-1 product runs one plain block a row group; 0: never)",
         &b->gemv_head_rows},
        {"gemv_split_1024", 1, 1, 8,
         " (warps a row of the batch-1 GEMVs at K <= 1,024: 1, 2, 4 or 8)", &b->gemv_split_1024},
        {"gemv_split_2048", 2, 1, 8,
         " (warps a row of the batch-1 GEMVs at 1,024 < K <= 2,048: 1, 2, 4 or 8)",
         &b->gemv_split_2048},
        {"gemv_loop_warps", 8, 8, 32,
         " (warps a block of the looped GEMVs that read x from "
         "shared memory: 8, 16, 24 or 32)",
         &b->gemv_loop_warps},
        {"attn_cp", 0, 0, 3, " (1: the RoPE constants, 2: the q|k|v rows, 3: both)", &b->attn_cp},
        {"attn_push_merge", 0, 0, 2,
         " (0: off, 1: merge by pushes, 2: the same, the pushing splits leaving at once)",
         &b->attn_push_merge},
        {"attn_mc4_from", 0, 0, 1 << 24, " (positions of a KV-length bucket; 0: never)",
         &b->attn_mc4_from},
        {"attn_bucket_min", 512, WEFT_SDK_KV_BUCKET_MIN, 1 << 24,
         " (positions: the fused attention's split grid covers the step's KV-length bucket, "
         "or this many positions when the bucket is shorter)",
         &b->attn_bucket_min},
        {"attn_qsplit", 1, 1, 4, " (blocks a kv head's query heads are split over: 1, 2 or 4)",
         &b->attn_qsplit},
        {"attn_cluster_policy", 0, 0, 2,
         " (cluster scheduling policy of the fused attention: 0 "
         "the default, 1 spread, 2 load balancing)",
         &b->attn_cluster_policy},
        {"attn_smem_min", 0, 0, 227,
         " (KiB: the fused attention's shared memory a block at least this, so that fewer of "
         "its blocks share an SM; 0: as its layout needs)",
         &b->attn_smem_min},
        {"gemv_nl_smem_min", 0, 0, 227,
         " (KiB: fuse.norm_linear's one-row kernels ask for at least this much shared memory a "
         "block, so that none shares an SM with a block of the fused attention that asked for "
         "attn_smem_min; 0: as the row needs)",
         &b->gemv_nl_smem_min},
        {"gemv_o_smem_min", 0, 0, 227,
         " (KiB: the unlooped product right after the fused attention asks for at least this "
         "much shared memory a block, so that none shares an SM with an attention block that "
         "asked for attn_smem_min; 0: as x needs)",
         &b->gemv_o_smem_min},
        {"gemv_l2_rest", 0, 0, 64,
         " (KiB of its rows past its first group each block of the looped product after the "
         "fused attention loads into L2 before its wait, one 4-byte load a thread every 256 "
         "bytes; 0: off)",
         &b->gemv_l2_rest},
        {"gemv_l2_delay", 0, 0, 15,
         " (half microseconds each block of that product waits after it starts before its L2 "
         "loads)",
         &b->gemv_l2_delay},
        {"gemv_l2_join", 0, 0, 64,
         " (KiB of its rows past its first group each block of the looped product after the "
         "add + RMSNorm join loads into L2 before its wait; 0: off)",
         &b->gemv_l2_join},
        {"join_l2", 0, 0, 64,
         " (KiB of each block's rows of the looped product after the add + RMSNorm join that "
         "the join's extra blocks load into L2 once the product before it has completed; 0: off)",
         &b->join_l2},
        {"join_l2_blocks", 16, 1, 256, " (blocks of 1,024 threads the join adds for join_l2)",
         &b->join_l2_blocks},
        {"ablate", 0, 0, 15,
         " (1: the fused attention, 2: the fused add + RMSNorm, 4: the GEMVs, "
         "8: the MLP kernel's grid barrier)",
         &b->ablate},
    };
    weft_status e = read_int_opts(host, opts, ranged, sizeof(ranged) / sizeof(ranged[0]), err);
    if (e == WEFT_OK && b->attn_qsplit == 3)
        e = cuda_fail(err, WEFT_ERR_INVALID, "option attn_qsplit: 1, 2 or 4, got 3");
    if (e == WEFT_OK && (b->gemv_split_1024 & (b->gemv_split_1024 - 1)))
        e = cuda_fail(err, WEFT_ERR_INVALID, "option gemv_split_1024: 1, 2, 4 or 8, got %d",
                      b->gemv_split_1024);
    if (e == WEFT_OK && (b->gemv_split_2048 & (b->gemv_split_2048 - 1)))
        e = cuda_fail(err, WEFT_ERR_INVALID, "option gemv_split_2048: 1, 2, 4 or 8, got %d",
                      b->gemv_split_2048);
    if (e == WEFT_OK && b->gemv_loop_warps % 8) /* core.cu WEFT_GEMV_LPW's instances */
        e = cuda_fail(err, WEFT_ERR_INVALID, "option gemv_loop_warps: 8, 16, 24 or 32, got %d",
                      b->gemv_loop_warps);
    if (e != WEFT_OK) {
        free(b);
        return e;
    }
    const char *kp = weft_sdk_option_string(opts, "kernel_ptx", "");
    if (strlen(kp) >= sizeof(b->kernel_ptx)) {
        cuda_fail(err, WEFT_ERR_INVALID, "option kernel_ptx: a folder path of at most %zu bytes, "
                  "got %zu", sizeof(b->kernel_ptx) - 1, strlen(kp));
        free(b);
        return WEFT_ERR_INVALID;
    }
    snprintf(b->kernel_ptx, sizeof(b->kernel_ptx), "%s", kp);
    if (b->ablate)
        fprintf(stderr, "weft cuda: option ablate %d: kernels that do no work, for profiling; "
                        "every output of this engine is wrong\n", b->ablate);
    weft_status s;
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) {
        cuda_check(r, "cuInit", "initialising the CUDA driver (is an NVIDIA GPU and driver "
                   "present?)", err);
        free(b);
        return WEFT_ERR_DEVICE;
    }
    int n = 0;
    if ((s = cuda_check(cuDeviceGetCount(&n), "cuDeviceGetCount", "counting devices", err)))
        goto fail;
    if (b->ordinal < 0 || b->ordinal >= n) {
        s = cuda_fail(err, WEFT_ERR_INVALID, "option device = %d, but this machine has %d CUDA "
                      "device(s)", b->ordinal, n);
        goto fail;
    }
#define CKF(call, what)                                                                          \
    if ((s = cuda_check((call), #call, what, err))) goto fail
    CKF(cuDeviceGet(&b->dev, b->ordinal), "selecting the device");
    CKF(cuDevicePrimaryCtxRetain(&b->ctx, b->dev), "retaining the primary context");
    CKF(cuCtxSetCurrent(b->ctx), "making the context current");
    CKF(cuDeviceGetName(b->name, sizeof(b->name), b->dev), "reading the device name");
    CKF(cuDeviceGetAttribute(&b->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, b->dev),
        "reading the compute capability");
    CKF(cuDeviceGetAttribute(&b->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, b->dev),
        "reading the compute capability");
    CKF(cuDeviceGetAttribute(&b->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, b->dev),
        "reading the multiprocessor count");
    if (b->cc_major < 9) b->pdl = 0; /* griddepcontrol is sm_90+ */
    /* Hopper's architecture-specific features (wgmma, setmaxnreg) need the "a" target. */
    snprintf(b->arch, sizeof(b->arch), "sm_%d%d%s", b->cc_major, b->cc_minor,
             b->cc_major == 9 && b->cc_minor == 0 ? "a" : "");
    CKF(cuStreamCreate(&b->stream, CU_STREAM_NON_BLOCKING), "creating the compute stream");
    if (b->arena_fixed && (s = chunk_add(b, b->arena_fixed, err))) goto fail;
    b->stage_bytes = STAGE_BYTES;
    CKF(cuMemAllocHost((void **)&b->stage, b->stage_bytes), "allocating pinned staging memory");
    CKF(cuMemAlloc(&b->stage_dev, b->stage_bytes), "allocating device staging memory");
    if (cublasLtCreate(&b->lt) != CUBLAS_STATUS_SUCCESS) {
        s = cuda_fail(err, WEFT_ERR_DEVICE, "cublasLtCreate failed");
        goto fail;
    }
    b->lt_ws_bytes = 32u << 20;
    CKF(cuMemAlloc(&b->lt_ws, b->lt_ws_bytes), "allocating the cuBLASLt workspace");
    *out = b;
    return WEFT_OK;
fail:
    cuda_destroy(b);
    return s;
}

static const weft_plugin_descriptor cuda_descriptor = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = CUDA_NAME,
    .version = CUDA_VERSION_STRING,
    .kind = WEFT_KIND_BACKEND,
    .slots = WEFT_SLOT_BACKEND,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .backend = &cuda_vtable,
};

WEFT_EXPORT weft_status WEFT_PLUGIN_ENTRY(uint32_t host_min, uint32_t host_max, uint32_t *chosen,
                                          const weft_plugin_descriptor **out, weft_error *err) {
    if (!chosen || !out) return cuda_fail(err, WEFT_ERR_INVALID, "negotiate: NULL output");
    if (host_min > 1 || host_max < 1)
        return cuda_fail(err, WEFT_ERR_ABI, "plugin cuda %s speaks ABI 1..1, the host speaks "
                         "%u..%u", CUDA_VERSION_STRING, host_min, host_max);
    *chosen = 1;
    *out = &cuda_descriptor;
    return WEFT_OK;
}
