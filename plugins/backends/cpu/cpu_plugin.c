/* The cpu backend plugin: ABI negotiation, the descriptor, instance state (options and thread
 * pool), host memory standing in for device memory, and the helpers the op files share for
 * errors and node validation. "Device" memory is ordinary host memory aligned to a cache line,
 * so copies are memmove, streams do not exist and synchronisation is a no-op. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cpu.h"

#define CPU_VERSION "0.1.0"

/* ---- errors ------------------------------------------------------------------------------ */
static weft_status cpu_error_v(weft_error *err, weft_status code, const char *prefix,
                               const char *fmt, va_list ap) {
    if (!err || (err->size != 0 && err->size < sizeof(*err))) return code;
    char msg[sizeof(err->message)]; /* apart: err->message may be an argument */
    size_t n = 0;
    if (prefix) {
        int w = snprintf(msg, sizeof(msg), "%s", prefix);
        n = w < 0 ? 0 : ((size_t)w < sizeof(msg) ? (size_t)w : sizeof(msg) - 1);
    }
    vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
    err->size = sizeof(*err);
    err->code = code;
    snprintf(err->source, sizeof(err->source), "%s", CPU_SOURCE);
    memcpy(err->message, msg, sizeof(msg));
    return code;
}

weft_status cpu_error(weft_error *err, weft_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cpu_error_v(err, code, NULL, fmt, ap);
    va_end(ap);
    return code;
}

weft_status cpu_node_error(weft_error *err, const weft_node *node, const char *fmt, ...) {
    if (!err) return WEFT_ERR_INVALID;
    char prefix[96];
    if (node) {
        char name[sizeof(node->name) + 1];
        memcpy(name, node->name, sizeof(node->name));
        name[sizeof(node->name)] = '\0';
        snprintf(prefix, sizeof(prefix), "node '%s' (%s): ", name, cpu_op_name(node->op));
    } else {
        snprintf(prefix, sizeof(prefix), "node (null): ");
    }
    va_list ap;
    va_start(ap, fmt);
    cpu_error_v(err, WEFT_ERR_INVALID, prefix, fmt, ap);
    va_end(ap);
    return WEFT_ERR_INVALID;
}

/* ---- dtypes and ops ---------------------------------------------------------------------- */
size_t cpu_dtype_size(uint32_t dtype) {
    switch (dtype) {
    case WEFT_DTYPE_F32:
        return 4;
    case WEFT_DTYPE_F16:
        return 2;
    case WEFT_DTYPE_BF16:
        return 2;
    case WEFT_DTYPE_I32:
        return 4;
    case WEFT_DTYPE_I64:
        return 8;
    case WEFT_DTYPE_I8:
        return 1;
    case WEFT_DTYPE_U8:
        return 1;
    case WEFT_DTYPE_F8_E4M3:
        return 1;
    case WEFT_DTYPE_F8_E5M2:
        return 1;
    case WEFT_DTYPE_I16:
        return 2;
    case WEFT_DTYPE_F64:
        return 8;
    case WEFT_DTYPE_BOOL:
        return 1;
    default:
        return 0;
    }
}

const char *cpu_dtype_name(uint32_t dtype) {
    switch (dtype) {
    case WEFT_DTYPE_F32:
        return "f32";
    case WEFT_DTYPE_F16:
        return "f16";
    case WEFT_DTYPE_BF16:
        return "bf16";
    case WEFT_DTYPE_I32:
        return "i32";
    case WEFT_DTYPE_I64:
        return "i64";
    case WEFT_DTYPE_I8:
        return "i8";
    case WEFT_DTYPE_U8:
        return "u8";
    case WEFT_DTYPE_F8_E4M3:
        return "f8_e4m3";
    case WEFT_DTYPE_F8_E5M2:
        return "f8_e5m2";
    case WEFT_DTYPE_I16:
        return "i16";
    case WEFT_DTYPE_F64:
        return "f64";
    case WEFT_DTYPE_BOOL:
        return "bool";
    case WEFT_DTYPE_Q8_0:
        return "q8_0";
    case WEFT_DTYPE_Q4_K:
        return "q4_k";
    case WEFT_DTYPE_Q4_G128:
        return "q4_g128";
    default:
        return "unknown";
    }
}

const char *cpu_op_name(uint32_t op) {
    static const char *const names[WEFT_OP_BUILTIN_COUNT] = {
        "none",       "embed", "linear",      "rmsnorm", "rope",   "attention",
        "swiglu",     "add",   "activation",  "lm_head", "sample", "moe",
        "all_reduce", "scale", "add_rmsnorm", "copy",    "split"};
    return op < WEFT_OP_BUILTIN_COUNT ? names[op] : "user op";
}

/* ---- node checks ------------------------------------------------------------------------- */
const weft_tensor *cpu_tensor(const weft_graph *g, const weft_node *node, uint32_t id,
                              const char *what, weft_error *err) {
    if (id == WEFT_TENSOR_NONE) {
        cpu_node_error(err, node, "%s: expected a tensor, got none", what);
        return NULL;
    }
    if (id >= g->n_tensors || !g->tensors) {
        cpu_node_error(err, node, "%s: tensor id %u out of range (graph has %u tensors)", what, id,
                       g->n_tensors);
        return NULL;
    }
    return &g->tensors[id];
}

int64_t cpu_row_elems(const weft_tensor *t) {
    if (t->rank == 0 || t->rank > WEFT_MAX_DIMS) return -1;
    int64_t n = 1;
    for (uint32_t d = 1; d < t->rank; d++) {
        if (t->shape[d] < 0 || (t->shape[d] > 0 && n > INT64_MAX / 16 / t->shape[d])) return -1;
        n *= t->shape[d];
    }
    return n;
}

weft_status cpu_check(const weft_tensor *t, const weft_node *node, const char *what, uint32_t dtype,
                      uint32_t rank, weft_error *err) {
    if (dtype && t->dtype != dtype)
        return cpu_node_error(err, node, "%s '%s': expected dtype %s, got %s", what, t->name,
                              cpu_dtype_name(dtype), cpu_dtype_name(t->dtype));
    if (t->rank < 1 || t->rank > WEFT_MAX_DIMS || (rank && t->rank != rank))
        return cpu_node_error(err, node, "%s '%s': expected rank %u, got %u", what, t->name,
                              rank ? rank : 1, t->rank);
    for (uint32_t d = 0; d < t->rank; d++)
        if (t->shape[d] < 0)
            return cpu_node_error(err, node, "%s '%s': dimension %u is negative (%lld)", what,
                                  t->name, d, (long long)t->shape[d]);
    /* Bounding every tensor to 2^46 elements (2^49 bytes at 8 per element) keeps every byte
     * count the kernels derive from shapes and row counts free of overflow. */
    int64_t row = cpu_row_elems(t);
    if (row < 0 || (t->shape[0] > 0 && row > CPU_MAX_ELEMS / t->shape[0]))
        return cpu_node_error(err, node, "%s '%s': shape too large (over 2^46 elements)", what,
                              t->name);
    return WEFT_OK;
}

weft_status cpu_check_ctx(const weft_exec_ctx *ctx, const weft_node *node, weft_error *err) {
    if (!ctx || !ctx->graph || !ctx->data || !node)
        return cpu_error(err, WEFT_ERR_INVALID,
                         "op run: expected a context with graph and data, got %s",
                         !ctx    ? "no context"
                         : !node ? "no node"
                                 : "missing graph or data");
    if (ctx->n_tokens > ctx->graph->bucket.max_tokens && ctx->graph->bucket.max_tokens > 0)
        return cpu_node_error(err, node, "n_tokens %u exceeds the bucket's max_tokens %u",
                              ctx->n_tokens, ctx->graph->bucket.max_tokens);
    return WEFT_OK;
}

void *cpu_data(const weft_exec_ctx *ctx, const weft_node *node, uint32_t id, uint64_t bytes,
               const char *what, weft_error *err) {
    const weft_buffer *b = &ctx->data[id];
    if (!b->ptr && bytes > 0) {
        cpu_node_error(err, node, "%s: tensor %u has no buffer", what, id);
        return NULL;
    }
    if (b->bytes < bytes) {
        cpu_node_error(err, node, "%s: buffer of tensor %u holds %llu bytes, expected >= %llu",
                       what, id, (unsigned long long)b->bytes, (unsigned long long)bytes);
        return NULL;
    }
    return b->ptr;
}

weft_status cpu_add_impl(const weft_ops_service *ops, cpu_backend *b, uint32_t op, uint32_t dtype,
                         const char *layout, weft_op_fn run,
                         int32_t (*accepts)(void *, const weft_graph *, const weft_node *),
                         weft_error *err) {
    weft_op_impl impl;
    memset(&impl, 0, sizeof(impl));
    impl.size = sizeof(impl);
    impl.op = op;
    snprintf(impl.backend, sizeof(impl.backend), "%s", CPU_SOURCE);
    impl.dtype = dtype;
    snprintf(impl.layout, sizeof(impl.layout), "%s", layout ? layout : "");
    impl.priority = 0;
    impl.run = run;
    impl.state = b;
    impl.accepts = accepts;
    snprintf(impl.provider, sizeof(impl.provider), "%s", CPU_SOURCE);
    weft_status st = ops->add(ops->self, &impl, err);
    if (st < 0 && err && err->message[0] == '\0')
        cpu_error(err, st, "registering %s (%s) failed", cpu_op_name(op), cpu_dtype_name(dtype));
    return st;
}

/* ---- backend vtable ---------------------------------------------------------------------- */
static weft_status cpu_device_info(void *st, weft_device_info *out, weft_error *err) {
    cpu_backend *b = st;
    if (!b || !out) return cpu_error(err, WEFT_ERR_INVALID, "device_info: NULL argument");
    uint32_t size = out->size ? out->size : (uint32_t)sizeof(*out);
    if (size < sizeof(*out))
        return cpu_error(err, WEFT_ERR_ABI, "device_info: expected struct size >= %zu, got %u",
                         sizeof(*out), size);
    memset(out, 0, sizeof(*out));
    out->size = sizeof(*out);
    struct utsname u;
    const char *arch = "unknown";
    if (uname(&u) == 0) arch = u.machine;
    snprintf(out->arch, sizeof(out->arch), "%s", arch);
    snprintf(out->name, sizeof(out->name), "%s (%u threads)", out->arch, b->threads);
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
    long page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) out->memory_bytes = (uint64_t)pages * (uint64_t)page;
    if (avail > 0 && page > 0) out->free_bytes = (uint64_t)avail * (uint64_t)page;
    out->compute_units = b->threads;
    return WEFT_OK;
}

static weft_status cpu_register_ops(void *st, const weft_ops_service *ops, weft_error *err) {
    cpu_backend *b = st;
    if (!b || !ops || !ops->add)
        return cpu_error(err, WEFT_ERR_INVALID, "register_ops: expected an ops service, got NULL");
    if (ops->size < offsetof(weft_ops_service, find) || ops->version < 1)
        return cpu_error(err, WEFT_ERR_ABI,
                         "register_ops: ops service too old (size %u, version %u)", ops->size,
                         ops->version);
    weft_status s = cpu_register_linear(b, ops, err);
    if (s == WEFT_OK) s = cpu_register_attention(b, ops, err);
    if (s == WEFT_OK) s = cpu_register_elementwise(b, ops, err);
    return s;
}

static weft_status cpu_alloc(void *st, uint64_t bytes, uint32_t memory, weft_buffer *out,
                             weft_error *err) {
    if (!out) return cpu_error(err, WEFT_ERR_INVALID, "alloc: NULL output buffer");
    memset(out, 0, sizeof(*out));
    if (memory > WEFT_MEMORY_HOST_PINNED)
        return cpu_error(err, WEFT_ERR_INVALID, "alloc: expected memory kind 0..2, got %u", memory);
    if (bytes > (uint64_t)SIZE_MAX - CPU_ALIGN)
        return cpu_error(err, WEFT_ERR_NOMEM, "alloc: %llu bytes do not fit the address space",
                         (unsigned long long)bytes);
    /* Round up so vector loops may read a whole final line, and never ask for 0 bytes. */
    size_t rounded = ((size_t)bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (rounded == 0) rounded = CPU_ALIGN;
    void *p = NULL;
    if (posix_memalign(&p, CPU_ALIGN, rounded) != 0 || !p)
        return cpu_error(err, WEFT_ERR_NOMEM, "alloc: out of host memory for %llu bytes",
                         (unsigned long long)bytes);
    out->ptr = p;
    out->bytes = bytes;
    out->memory = memory;
    return WEFT_OK;
}

static void cpu_free(void *st, weft_buffer *buf) {
    if (!buf) return;
    free(buf->ptr);
    buf->ptr = NULL;
    buf->bytes = 0;
}

static int cpu_range_ok(const weft_buffer *b, uint64_t off, uint64_t bytes) {
    return b && (b->ptr || b->bytes == 0) && off <= b->bytes && bytes <= b->bytes - off;
}

static weft_status cpu_copy(void *st, weft_buffer *dst, uint64_t dst_off, const weft_buffer *src,
                            uint64_t src_off, uint64_t bytes, void *stream, weft_error *err) {
    if (!cpu_range_ok(dst, dst_off, bytes) || !cpu_range_ok(src, src_off, bytes))
        return cpu_error(err, WEFT_ERR_INVALID,
                         "copy: %llu bytes at dst offset %llu / src offset %llu exceed the "
                         "buffers (%llu / %llu bytes)",
                         (unsigned long long)bytes, (unsigned long long)dst_off,
                         (unsigned long long)src_off, dst ? (unsigned long long)dst->bytes : 0ull,
                         src ? (unsigned long long)src->bytes : 0ull);
    if (bytes) memmove((char *)dst->ptr + dst_off, (const char *)src->ptr + src_off, bytes);
    return WEFT_OK;
}

static weft_status cpu_upload(void *st, weft_buffer *dst, uint64_t dst_off, const void *src,
                              uint64_t bytes, weft_error *err) {
    if (!cpu_range_ok(dst, dst_off, bytes) || (!src && bytes))
        return cpu_error(err, WEFT_ERR_INVALID,
                         "upload: %llu bytes at offset %llu exceed the buffer (%llu bytes)",
                         (unsigned long long)bytes, (unsigned long long)dst_off,
                         dst ? (unsigned long long)dst->bytes : 0ull);
    if (bytes) memmove((char *)dst->ptr + dst_off, src, bytes);
    return WEFT_OK;
}

static weft_status cpu_download(void *st, void *dst, const weft_buffer *src, uint64_t src_off,
                                uint64_t bytes, weft_error *err) {
    if (!cpu_range_ok(src, src_off, bytes) || (!dst && bytes))
        return cpu_error(err, WEFT_ERR_INVALID,
                         "download: %llu bytes at offset %llu exceed the buffer (%llu bytes)",
                         (unsigned long long)bytes, (unsigned long long)src_off,
                         src ? (unsigned long long)src->bytes : 0ull);
    if (bytes) memmove(dst, (const char *)src->ptr + src_off, bytes);
    return WEFT_OK;
}

static weft_status cpu_synchronize(void *st, void *stream, weft_error *err) {
    return WEFT_OK; /* every kernel has finished when its run() returns */
}

static void *cpu_stream(void *st) {
    return NULL;
}

static const weft_backend_vtable cpu_vtable = {
    .size = sizeof(weft_backend_vtable),
    .device_info = cpu_device_info,
    .register_ops = cpu_register_ops,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .upload = cpu_upload,
    .download = cpu_download,
    .synchronize = cpu_synchronize,
    .stream = cpu_stream,
    .event_record = NULL,
    .event_elapsed = NULL,
    .native = NULL,
};

/* ---- instance ---------------------------------------------------------------------------- */
static weft_status cpu_create(const weft_host_services *host, const weft_options *opts, void **st,
                              weft_error *err) {
    if (!st) return cpu_error(err, WEFT_ERR_INVALID, "create: NULL state pointer");
    *st = NULL;
    int64_t threads = 0;
    if (opts && opts->items) {
        for (uint32_t i = 0; i < opts->count; i++) {
            const weft_option *o = &opts->items[i];
            if (!o->key || strcmp(o->key, "threads") != 0) continue;
            if (o->type != WEFT_OPTION_INT)
                return cpu_error(err, WEFT_ERR_INVALID,
                                 "option threads: expected an int, got option type %u", o->type);
            threads = o->i;
        }
    }
    if (threads < 0 || threads > 4096)
        return cpu_error(err, WEFT_ERR_INVALID,
                         "option threads: expected 0 (all cores) .. 4096, got %lld",
                         (long long)threads);
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (n > 4096 ? 4096 : n) : 1;
    }
    cpu_backend *b = calloc(1, sizeof(*b));
    if (!b) return cpu_error(err, WEFT_ERR_NOMEM, "create: out of memory");
    b->host = host;
    b->threads = (uint32_t)threads;
    weft_status s = cpu_pool_create(b->threads, &b->pool, err);
    if (s != WEFT_OK) {
        free(b);
        return s;
    }
    *st = b;
    return WEFT_OK;
}

static void cpu_destroy(void *st) {
    cpu_backend *b = st;
    if (!b) return;
    cpu_pool_destroy(b->pool);
    free(b);
}

static const weft_plugin_descriptor cpu_descriptor = {
    .size = sizeof(weft_plugin_descriptor),
    .abi_version = 1,
    .name = "cpu",
    .version = CPU_VERSION,
    .kind = WEFT_KIND_BACKEND,
    .slots = WEFT_SLOT_BACKEND,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .backend = &cpu_vtable,
};

WEFT_EXPORT weft_status WEFT_PLUGIN_ENTRY(uint32_t host_min, uint32_t host_max, uint32_t *chosen,
                                          const weft_plugin_descriptor **out, weft_error *err) {
    if (!chosen || !out) return cpu_error(err, WEFT_ERR_INVALID, "negotiate: NULL output pointer");
    *out = NULL;
    *chosen = 0;
    if (host_min > host_max || host_max < 1 || host_min > 1)
        return cpu_error(err, WEFT_ERR_ABI, "plugin cpu %s speaks ABI 1..1, the host speaks %u..%u",
                         CPU_VERSION, host_min, host_max);
    *chosen = 1;
    *out = &cpu_descriptor;
    return WEFT_OK;
}
