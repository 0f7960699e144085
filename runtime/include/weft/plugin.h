/* weft/plugin.h: plugin ABI v1, the contract between libweft and every plugin bundle.
 *
 * How a plugin is used
 * --------------------
 * A bundle is a directory with manifest.yaml and one shared library. The host reads manifests to
 * list, resolve and check candidates; it opens a library only to run it. The library exports one
 * function, WEFT_PLUGIN_ENTRY (weft_plugin_negotiate): the host passes the range of ABI versions
 * it speaks, the plugin picks the highest it also speaks and returns a static descriptor. The
 * descriptor names the plugin (name and semver must equal the manifest's), the slots it fills,
 * one vtable per slot and the create/destroy pair for its instance state. Every vtable hook
 * receives that state first.
 *
 * Call classes (documented on every hook):
 *   setup   may allocate, block and synchronise the device; runs while a candidate is built.
 *   step    runs inside an engine step: no allocation, no blocking, no device synchronisation,
 *           so an executor may capture it into a CUDA graph.
 *   control runs between steps on the engine thread (add or cancel a request, stats): may
 *           allocate, must not synchronise the device.
 * "(optional) NULL = default" marks hooks a plugin may leave NULL; the host then uses its
 * runtime default for that behaviour.
 *
 * Errors: every hook returns weft_status (0 ok, >0 recoverable, <0 error) and fills the caller-
 * owned weft_error with a message naming the plugin and saying "expected X, got Y". No exit,
 * abort, longjmp or errno crosses the boundary; a plugin validates every argument it is given.
 *
 * Compatibility: structs start with their size and only grow at the end; a side reads no member
 * past the size the other declared; reserved members must be zero. docs/ABI.md has the rules.
 */
#ifndef WEFT_PLUGIN_H
#define WEFT_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "weft/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_ABI_VERSION 1     /* the highest version this header describes */
#define WEFT_ABI_VERSION_MIN 1 /* the lowest version a host built from it still speaks */
#define WEFT_PLUGIN_ENTRY weft_plugin_negotiate
#define WEFT_PLUGIN_ENTRY_NAME "weft_plugin_negotiate"

#if defined(__GNUC__)
#define WEFT_EXPORT __attribute__((visibility("default")))
#else
#define WEFT_EXPORT
#endif

/* ---- status and errors ------------------------------------------------------------------ */
typedef int32_t weft_status;
enum {
    WEFT_OK = 0,
    /* recoverable (> 0) */
    WEFT_AGAIN = 1,      /* no room now (kv pool full, queue full): try later */
    WEFT_ABORTED = 2,    /* cancelled by the caller */
    WEFT_FINISHED = 3,   /* a stream or request ended normally */
    /* errors (< 0) */
    WEFT_ERR_INVALID = -1,     /* bad argument or input */
    WEFT_ERR_NOMEM = -2,       /* host or device memory exhausted */
    WEFT_ERR_IO = -3,          /* file or network */
    WEFT_ERR_FORMAT = -4,      /* malformed file or document */
    WEFT_ERR_UNSUPPORTED = -5, /* valid but not implemented by this plugin or build */
    WEFT_ERR_DEVICE = -6,      /* the device or its driver failed */
    WEFT_ERR_ABI = -7,         /* ABI negotiation or struct size mismatch */
    WEFT_ERR_MISMATCH = -8,    /* hash, name or version differs from what was expected */
    WEFT_ERR_NOT_FOUND = -9,
    WEFT_ERR_INTERNAL = -10,
};

typedef struct weft_error {
    uint32_t size;    /* sizeof(weft_error), set by the owner */
    int32_t code;     /* a weft_status */
    char source[64];  /* who failed: plugin name, file path or "runtime" */
    char message[512];
} weft_error;

/* ---- options (validated against the manifest's option schema before create) ------------- */
typedef enum weft_option_type {
    WEFT_OPTION_BOOL = 1,
    WEFT_OPTION_INT = 2,
    WEFT_OPTION_FLOAT = 3,
    WEFT_OPTION_STRING = 4,
} weft_option_type;

typedef struct weft_option {
    const char *key;
    uint32_t type; /* weft_option_type */
    uint32_t reserved;
    int64_t i; /* bool and int */
    double f;
    const char *s;
} weft_option;

typedef struct weft_options {
    uint32_t count;
    const weft_option *items; /* every option of the schema, defaults filled in */
} weft_options;

/* ---- host services ---------------------------------------------------------------------- */
typedef enum weft_log_level {
    WEFT_LOG_ERROR = 0,
    WEFT_LOG_WARN = 1,
    WEFT_LOG_INFO = 2,
    WEFT_LOG_DEBUG = 3,
} weft_log_level;

/* Versioned services, looked up by id with get_service(id, min_version). Each returned table
 * starts with uint32_t size, uint32_t version. */
typedef enum weft_service_id {
    WEFT_SERVICE_GRAPH = 1,     /* weft_graph_service (graph.h) */
    WEFT_SERVICE_WEIGHTS = 2,   /* weft_weights_service: checkpoint tensors of the model */
    WEFT_SERVICE_DEVICE = 3,    /* weft_device_service: the active backend's memory and streams */
    WEFT_SERVICE_KV = 4,        /* weft_kv_service: the active kv provider (for attention ops) */
    WEFT_SERVICE_OPS = 5,       /* weft_ops_service: the op-implementation registry */
    WEFT_SERVICE_THREADS = 6,   /* weft_threads_service: the host's worker pool */
    WEFT_SERVICE_PROFILE = 7,   /* weft_profile_service: named timing ranges */
    WEFT_SERVICE_TOKENS = 8,    /* weft_tokens_service: token history and vocab (drafters) */
    WEFT_SERVICE_COLLECTIVE = 9,/* weft_collective_service: ranks and all-reduce (parallel) */
    WEFT_SERVICE_HOST_MEMORY = 10, /* weft_host_memory_service: pinned host memory tiers */
} weft_service_id;

/* Every service table below starts with size, version and `self`, the first argument of each of
 * its functions: services are per engine, not process globals. */
typedef struct weft_host_services {
    uint32_t size;
    uint32_t abi_version; /* the negotiated version */
    void (*log)(int level, const char *source, const char *fmt, ...);
    void (*error_set)(weft_error *err, int32_t code, const char *source, const char *fmt, ...);
    void *(*alloc)(size_t bytes);   /* setup/control only */
    void (*free)(void *ptr);
    /* NULL when the service is absent or older than min_version. host is this table (the
     * host may embed it in a larger per-engine struct). */
    const void *(*get_service)(const struct weft_host_services *host, uint32_t id,
                               uint32_t min_version);
    /* The option named key from the instance's validated options, or NULL. */
    const weft_option *(*option)(const weft_options *opts, const char *key);
} weft_host_services;

/* ---- memory and devices ----------------------------------------------------------------- */
typedef enum weft_memory {
    WEFT_MEMORY_HOST = 0,        /* ordinary host memory */
    WEFT_MEMORY_DEVICE = 1,      /* the backend's device memory */
    WEFT_MEMORY_HOST_PINNED = 2, /* page-locked host memory the device can reach */
} weft_memory;

typedef struct weft_buffer {
    void *ptr;      /* host pointer, or device address cast to a pointer */
    uint64_t bytes;
    uint32_t memory; /* weft_memory */
    uint32_t reserved;
    void *handle;    /* backend-private */
} weft_buffer;

typedef struct weft_device_info {
    uint32_t size;
    char name[128];        /* "NVIDIA H200", "x86_64 (2 threads)" */
    char arch[32];         /* "sm_90a", "x86_64" */
    uint64_t memory_bytes; /* device memory in total */
    uint64_t free_bytes;
    uint32_t compute_units; /* SMs or threads */
    uint32_t reserved[7];
} weft_device_info;

/* ---- the step ---------------------------------------------------------------------------- */
/* One request's part of a step. */
typedef struct weft_seq {
    uint64_t request_id;
    int32_t kv_slot;        /* the kv provider's handle for this request's cache */
    int32_t n_past;         /* tokens already in the cache before this step */
    int32_t n_new;          /* tokens of this request in this step */
    int32_t first_row;      /* its first row in the step's token arrays */
    const int32_t *block_table; /* paged kv: page ids, NULL for contiguous */
    int32_t n_blocks;
    int32_t reserved;
} weft_seq;

typedef struct weft_batch {
    uint32_t size;
    uint32_t n_tokens;
    uint32_t n_seqs;
    uint32_t n_logits;
    const int32_t *tokens;     /* (n_tokens) */
    const int32_t *positions;  /* (n_tokens) */
    const int32_t *seq_of_row; /* (n_tokens) index into seqs */
    const weft_seq *seqs;      /* (n_seqs) */
    const int32_t *logit_rows; /* (n_logits) rows whose logits are wanted, ascending */
    /* Speculative verification with a tree: (n_tokens) parent row within the same sequence, -1
     * for a row that follows the cache directly; NULL = each row follows the previous one. */
    const int32_t *tree_parent;
    uint64_t reserved[4];
} weft_batch;

/* The kv slot's description of its cache, read by attention ops. The layout string selects
 * which struct `desc` points at: "contiguous" -> weft_kv_contiguous; techniques define theirs
 * ("paged" -> their header in techniques/kv.paged). */
typedef struct weft_kv_contiguous {
    uint32_t size;
    uint32_t n_layers;
    uint32_t n_slots;   /* requests that can hold a cache at once */
    uint32_t max_seq;   /* tokens per slot */
    uint32_t n_kv_heads;
    uint32_t head_dim;
    uint32_t dtype;     /* weft_dtype of the cache */
    uint32_t reserved;
    /* Per layer: K and V, each (n_slots, max_seq, n_kv_heads, head_dim) row-major. */
    weft_buffer *k;     /* (n_layers) */
    weft_buffer *v;     /* (n_layers) */
} weft_kv_contiguous;

typedef struct weft_kv_view {
    uint32_t size;
    char layout[WEFT_LAYOUT_MAX];
    const void *desc;
} weft_kv_view;

/* What an op implementation sees when it runs. */
typedef struct weft_exec_ctx {
    uint32_t size;
    uint32_t n_tokens; /* rows of this step (<= bucket.max_tokens) */
    const weft_graph *graph;
    const weft_batch *batch;    /* host copy of the step */
    weft_buffer *data;          /* (graph->n_tensors) where each tensor lives */
    const weft_kv_view *kv;
    void *backend;              /* the backend instance state */
    void *stream;               /* backend stream for this step (NULL on cpu) */
    const weft_host_services *host;
    uint64_t reserved[4];
} weft_exec_ctx;

/* ---- op implementations ----------------------------------------------------------------- */
/* step: runs one node. */
typedef weft_status (*weft_op_fn)(void *impl_state, const weft_exec_ctx *ctx,
                                  const weft_node *node, weft_error *err);

typedef struct weft_op_impl {
    uint32_t size;
    uint32_t op;                 /* weft_op or user op id */
    char backend[24];            /* "cpu", "cuda" */
    uint32_t dtype;              /* the dtype of the node's key input (the weight for linear,
                                    the cache for attention, x otherwise); 0 = any */
    char layout[WEFT_LAYOUT_MAX];/* layout of the key input; "" = dense / any */
    int32_t priority;            /* higher wins among implementations of the same key */
    weft_op_fn run;
    void *state;                 /* passed to run */
    /* (optional) NULL = always. setup: can this implementation take this node (shapes, flags)? */
    int32_t (*accepts)(void *state, const weft_graph *g, const weft_node *node);
    char provider[48];           /* plugin name, filled by the host */
} weft_op_impl;

typedef struct weft_ops_service {
    uint32_t size;
    uint32_t version; /* 1 */
    void *self;
    /* setup: registers an implementation; the later of two equal keys wins by priority. */
    weft_status (*add)(void *self, const weft_op_impl *impl, weft_error *err);
    const weft_op_impl *(*find)(void *self, uint32_t op, const char *backend, uint32_t dtype,
                                const char *layout, const weft_graph *g, const weft_node *node);
} weft_ops_service;

/* ---- services a plugin looks up --------------------------------------------------------- */
typedef struct weft_weight_info {
    uint32_t dtype;
    uint32_t rank;
    int64_t shape[WEFT_MAX_DIMS];
    const void *data; /* host memory (mmap of the checkpoint), read-only */
    uint64_t bytes;
} weft_weight_info;

typedef struct weft_weights_service {
    uint32_t size;
    uint32_t version; /* 1 */
    /* Checkpoint tensor by its file name ("model.layers.0.mlp.up_proj.weight"). */
    void *self;
    weft_status (*find)(void *self, const char *source, weft_weight_info *out, weft_error *err);
    /* Device placement of a bound graph weight (after load), for techniques that stream it. */
    weft_status (*bound)(void *self, uint32_t tensor_id, weft_buffer *out, weft_error *err);
} weft_weights_service;

typedef struct weft_device_service {
    uint32_t size;
    uint32_t version; /* 1 */
    void *self;
    const char *backend; /* "cpu", "cuda" */
    weft_status (*alloc)(void *self, uint64_t bytes, uint32_t memory, weft_buffer *out,
                         weft_error *err);
    void (*free)(void *self, weft_buffer *buf);
    weft_status (*copy)(void *self, weft_buffer *dst, uint64_t dst_off, const weft_buffer *src,
                        uint64_t src_off, uint64_t bytes, void *stream, weft_error *err);
    void *(*stream)(void *self); /* the engine's compute stream */
    void *(*native)(void *self); /* backend context (CUcontext on cuda), for cuda techniques */
} weft_device_service;

typedef struct weft_kv_service {
    uint32_t size;
    uint32_t version; /* 1 */
    void *self;
    const weft_kv_view *(*view)(void *self);
} weft_kv_service;

typedef struct weft_threads_service {
    uint32_t size;
    uint32_t version; /* 1 */
    void *self;
    uint32_t (*count)(void *self);
    /* step: runs fn(arg, i, n) for i in [0, n) on the pool and returns when all are done. */
    void (*parallel_for)(void *self, void (*fn)(void *arg, uint32_t i, uint32_t n), void *arg, uint32_t n);
} weft_threads_service;

typedef struct weft_profile_service {
    uint32_t size;
    uint32_t version; /* 1 */
    void *self;
    int32_t (*enabled)(void *self);
    /* step: opens and closes a named range (op class) on the stream. */
    void (*range_begin)(void *self, const char *op_class, void *stream);
    void (*range_end)(void *self, const char *op_class, void *stream);
} weft_profile_service;

typedef struct weft_tokens_service {
    uint32_t size;
    uint32_t version; /* 1 */
    /* control: the prompt and generated tokens of a request so far. */
    void *self;
    weft_status (*history)(void *self, uint64_t request_id, const int32_t **tokens,
                           uint32_t *n);
    uint32_t (*vocab_size)(void *self);
} weft_tokens_service;

typedef struct weft_collective_service {
    uint32_t size;
    uint32_t version; /* 1 */
    void *self;
    int32_t (*rank)(void *self);
    int32_t (*world)(void *self);
    weft_status (*all_reduce_sum)(void *self, weft_buffer *buf, uint64_t count, uint32_t dtype, void *stream,
                                  weft_error *err);
} weft_collective_service;

typedef struct weft_host_memory_service {
    uint32_t size;
    uint32_t version; /* 1 */
    void *self;
    weft_status (*alloc_pinned)(void *self, uint64_t bytes, weft_buffer *out, weft_error *err);
    void (*free_pinned)(void *self, weft_buffer *buf);
} weft_host_memory_service;

/* ---- model description, shared by model plugins and techniques --------------------------- */
typedef struct weft_model_config {
    uint32_t size;
    char model_type[32];     /* "llama", "qwen2", "qwen3", "mistral", "qwen3_moe" */
    char architecture[64];   /* architectures[0] */
    uint32_t vocab_size;
    uint32_t hidden_size;
    uint32_t intermediate_size;
    uint32_t n_layers;
    uint32_t n_heads;
    uint32_t n_kv_heads;
    uint32_t head_dim;       /* explicit, or hidden / heads */
    uint32_t max_position;
    float rms_eps;
    float rope_theta;
    uint32_t rope_scaling;   /* 0 none, 1 llama3, 2 linear */
    float rope_factor;
    float rope_low_freq_factor;
    float rope_high_freq_factor;
    uint32_t rope_original_max_position;
    uint32_t tie_embeddings;
    uint32_t attention_bias; /* q, k, v biases (Qwen2) */
    uint32_t qk_norm;        /* per-head RMSNorm on q and k (Qwen3) */
    uint32_t sliding_window; /* 0 = none */
    uint32_t n_experts;      /* MoE: 0 = dense */
    uint32_t n_experts_per_token;
    uint32_t moe_intermediate_size;
    uint32_t dtype;          /* torch_dtype of the checkpoint */
    int32_t bos_token_id;    /* -1 = none */
    int32_t eos_token_ids[8];
    uint32_t n_eos;
    uint32_t reserved[16];
} weft_model_config;

/* ---- slot vtables ------------------------------------------------------------------------ */
typedef enum weft_slot {
    WEFT_SLOT_BACKEND = 1u << 0,
    WEFT_SLOT_MODEL = 1u << 1,
    WEFT_SLOT_SCHEDULER = 1u << 2,
    WEFT_SLOT_KV = 1u << 3,
    WEFT_SLOT_PASS = 1u << 4,     /* chain */
    WEFT_SLOT_OPS = 1u << 5,      /* chain */
    WEFT_SLOT_EXECUTOR = 1u << 6,
    WEFT_SLOT_SAMPLER = 1u << 7,
    WEFT_SLOT_DECODER = 1u << 8,
    WEFT_SLOT_DRAFTER = 1u << 9,
    WEFT_SLOT_PLACEMENT = 1u << 10,
    WEFT_SLOT_PARALLEL = 1u << 11,
    WEFT_SLOT_FEATURE = 1u << 12, /* chain: logits processors, output parsers */
} weft_slot;

/* Measured limits of a device (weft eval probe). Rates are what was achieved on random data at
 * large shapes, not datasheet figures; 0 = not measured. */
typedef struct weft_probe_result {
    uint32_t size;
    uint32_t reserved;
    double copy_bytes_per_s;   /* device-to-device copy, counting bytes read plus written */
    double gemm_bf16_flops;    /* dense bf16 GEMM, FLOP/s */
    double gemm_fp8_flops;     /* dense fp8 e4m3 GEMM, FLOP/s */
    double gemm_f32_flops;     /* dense f32 GEMM, FLOP/s (the cpu backend's matmul rate) */
    double host_roundtrip_s;   /* a 4-byte host -> device -> host round trip */
    double launch_s;           /* one empty kernel launch, host-side cost */
    uint64_t gemm_shape[3];    /* m, n, k used for the GEMM rates */
    uint64_t copy_bytes;       /* buffer size used for the copy */
    char notes[256];
} weft_probe_result;

/* Backend: device memory, streams and the default op implementations. */
typedef struct weft_backend_vtable {
    uint32_t size;
    /* setup */
    weft_status (*device_info)(void *st, weft_device_info *out, weft_error *err);
    /* setup: registers the backend's op implementations through the ops service. */
    weft_status (*register_ops)(void *st, const weft_ops_service *ops, weft_error *err);
    /* setup: memory. alloc of WEFT_MEMORY_DEVICE on cpu returns host memory. */
    weft_status (*alloc)(void *st, uint64_t bytes, uint32_t memory, weft_buffer *out,
                         weft_error *err);
    void (*free)(void *st, weft_buffer *buf);
    /* step: asynchronous on `stream` where the backend has streams. */
    weft_status (*copy)(void *st, weft_buffer *dst, uint64_t dst_off, const weft_buffer *src,
                        uint64_t src_off, uint64_t bytes, void *stream, weft_error *err);
    /* setup: host data into a buffer (weights at load), synchronous. */
    weft_status (*upload)(void *st, weft_buffer *dst, uint64_t dst_off, const void *src,
                          uint64_t bytes, weft_error *err);
    /* control: device data back to host, synchronous (after the step). */
    weft_status (*download)(void *st, void *dst, const weft_buffer *src, uint64_t src_off,
                            uint64_t bytes, weft_error *err);
    /* control: waits for all work on the stream. */
    weft_status (*synchronize)(void *st, void *stream, weft_error *err);
    /* setup: the compute stream (NULL on backends without streams). */
    void *(*stream)(void *st);
    /* (optional) NULL = no events. step: timing events for profiling. */
    weft_status (*event_record)(void *st, void **event, void *stream, weft_error *err);
    /* (optional) control: milliseconds between two recorded events. */
    weft_status (*event_elapsed)(void *st, void *start, void *end, float *ms, weft_error *err);
    /* (optional) NULL = native pointer is the buffer ptr. Backend context for techniques. */
    void *(*native)(void *st);
    /* (optional) NULL = the host measures what it can through alloc/copy/ops. setup: measures
     * the device's limits with the backend's own libraries (weft eval probe). */
    weft_status (*probe)(void *st, struct weft_probe_result *out, weft_error *err);
} weft_backend_vtable;

/* Model: config to graph. The host parses config.json into weft_model_config first; the model
 * plugin checks it supports the architecture and emits the step graph. */
typedef struct weft_model_vtable {
    uint32_t size;
    /* setup: fills the fields the host could not (architecture quirks) and refuses unsupported
     * configs, naming the field. config_json is the raw text of config.json. */
    weft_status (*configure)(void *st, const char *config_json, weft_model_config *cfg,
                             weft_error *err);
    /* setup: emits the graph for one bucket through the graph service. */
    weft_status (*build_graph)(void *st, const weft_model_config *cfg, const weft_bucket *bucket,
                               const weft_graph_service *gs, weft_graph *g, weft_error *err);
} weft_model_vtable;

/* Graph pass (chain, ordered by manifests' `after`). */
typedef struct weft_pass_vtable {
    uint32_t size;
    /* setup: rewrites g in place through gs. */
    weft_status (*run)(void *st, const weft_model_config *cfg, const weft_graph_service *gs,
                       weft_graph *g, weft_error *err);
    /* (optional) NULL = the pass derives no weights. setup: fills a derived weight (tensor with
     * deriver == this plugin) into dst (host memory of its byte size) from checkpoint tensors
     * looked up through the weights service. */
    weft_status (*derive_weight)(void *st, const weft_graph *g, const weft_tensor *t, void *dst,
                                 uint64_t bytes, const weft_weights_service *ws, weft_error *err);
} weft_pass_vtable;

/* Op implementations (chain): a technique registers its kernels. */
typedef struct weft_opset_vtable {
    uint32_t size;
    /* setup: registers through ops, for the named backend. */
    weft_status (*register_ops)(void *st, const char *backend, const weft_ops_service *ops,
                                weft_error *err);
} weft_opset_vtable;

/* KV cache provider. Default: contiguous per request, sized to the request's limit. */
typedef struct weft_kv_geometry {
    uint32_t size;
    uint32_t n_layers;
    uint32_t n_kv_heads;
    uint32_t head_dim;
    uint32_t dtype;        /* activation dtype the model computes in */
    uint32_t max_seq;      /* longest request */
    uint32_t max_requests; /* requests alive at once */
    uint32_t reserved;
    uint64_t budget_bytes; /* device memory the pool may use (0 = max_seq * max_requests) */
} weft_kv_geometry;

typedef struct weft_kv_stats {
    uint32_t size;
    uint32_t reserved;
    uint64_t capacity_tokens;
    uint64_t used_tokens;
    uint64_t bytes_total;
    uint64_t bytes_used;
    uint64_t prefix_hits; /* tokens served from a prefix cache */
} weft_kv_stats;

typedef struct weft_kv_vtable {
    uint32_t size;
    /* setup: allocates the pool through the device service. */
    weft_status (*init)(void *st, const weft_kv_geometry *geo, const weft_device_service *dev,
                        weft_error *err);
    /* control: a new request; returns its slot. WEFT_AGAIN when none is free. */
    weft_status (*open)(void *st, uint64_t request_id, int32_t *slot, weft_error *err);
    /* control: makes room for the request to hold n_total tokens. WEFT_AGAIN = pool full. */
    weft_status (*reserve)(void *st, int32_t slot, uint32_t n_total, weft_error *err);
    /* control: frees a request's cache. */
    void (*close)(void *st, int32_t slot);
    /* control: the description attention ops read (valid until the next control call). */
    const weft_kv_view *(*view)(void *st);
    /* control: the block table of a slot (paged), else NULL. */
    const int32_t *(*block_table)(void *st, int32_t slot, int32_t *n_blocks);
    /* (optional) NULL = no prefix reuse. control: tokens of `tokens` already cached for this
     * slot from another request (the slot now shares them); the scheduler skips them. */
    weft_status (*prefix_attach)(void *st, int32_t slot, const int32_t *tokens, uint32_t n,
                                 uint32_t *n_cached, weft_error *err);
    /* (optional) control: the request's first n tokens are final (for prefix publishing). */
    void (*commit)(void *st, int32_t slot, const int32_t *tokens, uint32_t n);
    /* (optional) control: swap a slot's cache to host memory and back (preemption, offload). */
    weft_status (*swap_out)(void *st, int32_t slot, weft_error *err);
    weft_status (*swap_in)(void *st, int32_t slot, weft_error *err);
    /* (optional) control: drop the cache after position n (speculative rejection). */
    void (*truncate)(void *st, int32_t slot, uint32_t n);
    void (*stats)(void *st, weft_kv_stats *out);
    /* (optional) setup: frees the pool. */
    void (*fini)(void *st);
} weft_kv_vtable;

/* Scheduler: which requests run in the next step and how many of their tokens. */
typedef struct weft_sched_request {
    uint64_t request_id;
    uint32_t state;        /* 0 waiting, 1 prefilling, 2 decoding, 3 preempted */
    uint32_t n_prompt;
    uint32_t n_computed;   /* tokens already in the cache */
    uint32_t n_generated;
    uint32_t max_total;    /* prompt + max new tokens */
    uint32_t priority;
    uint64_t arrival_ns;
} weft_sched_request;

typedef struct weft_sched_item {
    uint32_t index;    /* into the request array */
    uint32_t action;   /* 0 run n_tokens, 1 preempt (recompute), 2 swap out, 3 swap in */
    uint32_t n_tokens; /* tokens of this request to process in the step */
    uint32_t reserved;
} weft_sched_item;

typedef struct weft_sched_limits {
    uint32_t size;
    uint32_t max_tokens; /* token budget of one step (the largest bucket) */
    uint32_t max_seqs;
    uint32_t reserved;
    weft_kv_stats kv;
} weft_sched_limits;

typedef struct weft_scheduler_vtable {
    uint32_t size;
    /* control: plans the next step. items has room for n_requests entries; *n_items out. */
    weft_status (*schedule)(void *st, const weft_sched_request *reqs, uint32_t n_requests,
                            const weft_sched_limits *limits, weft_sched_item *items,
                            uint32_t *n_items, weft_error *err);
    /* (optional) control: the host could not reserve kv for item i (WEFT_AGAIN). */
    void (*kv_denied)(void *st, uint64_t request_id);
} weft_scheduler_vtable;

/* Executor: runs a finished graph. Default: eager, node by node. */
typedef struct weft_executor_vtable {
    uint32_t size;
    /* setup: prepares a graph whose ops are resolved (impls[i] runs nodes[i]). */
    weft_status (*prepare)(void *st, const weft_graph *g, const weft_op_impl *const *impls,
                           weft_exec_ctx *ctx, void **prepared, weft_error *err);
    /* step: runs one step of a prepared graph; inputs are already in ctx->data. */
    weft_status (*run)(void *st, void *prepared, weft_exec_ctx *ctx, weft_error *err);
    /* setup: drops what prepare made (the graph or buffers changed). */
    void (*release)(void *st, void *prepared);
    /* (optional) NULL = run returns when the step's outputs are ready. control: waits for the
     * outputs of the last run of prepared (exec.async-pipeline returns from run early so the
     * host can plan the next step meanwhile). Appended in v1 (docs/ABI.md). */
    weft_status (*wait)(void *st, void *prepared, weft_exec_ctx *ctx, weft_error *err);
} weft_executor_vtable;

/* Sampler: logits to tokens. Default: host sampler over copied logits. */
typedef struct weft_sampling {
    uint32_t size;
    float temperature; /* 0 = greedy */
    float top_p;
    float min_p;
    int32_t top_k;     /* 0 = off */
    float repetition_penalty;
    float presence_penalty;
    float frequency_penalty;
    uint64_t seed;
    uint64_t counter;  /* Philox counter: the token index of the request */
    int32_t n_logprobs;
    int32_t reserved;
    /* The request this row samples for, so a sampler can read its token history through the
     * tokens service (repetition penalties). Appended in v1 (docs/ABI.md). */
    uint64_t request_id;
} weft_sampling;

typedef struct weft_sampler_vtable {
    uint32_t size;
    /* step: picks one token per logits row. logits is the out.logits buffer on the device;
     * params holds n_rows entries, one per row (each row's request samples with its own). */
    weft_status (*sample)(void *st, const weft_buffer *logits, uint32_t n_rows, uint32_t vocab,
                          const weft_sampling *params, int32_t *tokens_out, float *logprob_out,
                          weft_error *err);
    /* Appended in v1 (docs/ABI.md) for exec.async-pipeline; a host checks size before use. */
    /* (optional) NULL = the sampler cannot run ahead of the host. step: like sample, but returns
     * before the tokens are known: writes each row's token id (i32, n_rows entries) into ids
     * (device memory) on the stream, starts the copy of ids and log-probabilities to host memory
     * and records an event. collect returns them. Every row is checked before anything is
     * enqueued: a row it cannot serve gives WEFT_ERR_UNSUPPORTED with nothing launched. At most
     * WEFT_SAMPLER_ASYNC_DEPTH calls are outstanding (not yet collected). */
    weft_status (*sample_async)(void *st, const weft_buffer *logits, uint32_t n_rows,
                                uint32_t vocab, const weft_sampling *params, weft_buffer *ids,
                                weft_error *err);
    /* (optional, set with sample_async) control: waits for the oldest outstanding sample_async
     * (n_rows must equal that call's) and fills its tokens and log-probabilities. A row whose
     * logits could not be sampled (NaN, all -inf) gets token -1, the call returns its error and
     * the other rows stay valid; a failed wait sets every token to -1. */
    weft_status (*collect)(void *st, uint32_t n_rows, int32_t *tokens_out, float *logprob_out,
                           weft_error *err);
} weft_sampler_vtable;

/* How many sample_async calls a sampler keeps outstanding at least (the engine needs 2: step n
 * waiting to be collected while step n+1 is enqueued). */
#define WEFT_SAMPLER_ASYNC_DEPTH 2

/* Decoder: drives steps (plain = one token per step; spec.* verify drafts). */
typedef struct weft_decode_io {
    uint32_t size;
    /* Runs the target graph on a batch and returns the logits rows (host, f32). */
    weft_status (*forward)(void *engine, const weft_batch *batch, const float **logits,
                           weft_error *err);
    void *engine;
    uint32_t vocab;
    uint32_t reserved;
    /* Appended in v1 (docs/ABI.md); a decoder checks size before using them. */
    /* step: like forward, but the logits stay on the device (no host synchronisation), for
     * decoders that run several draft/verify rounds on the device (spec.device-rounds). */
    weft_status (*forward_device)(void *engine, const weft_batch *batch, weft_buffer *logits,
                                  weft_error *err);
    /* control: runs only the target's first n_layers, then its final norm and head
     * (self-speculation: spec.layer-skip). Logits as in forward. */
    weft_status (*forward_layers)(void *engine, const weft_batch *batch, uint32_t n_layers,
                                  const float **logits, weft_error *err);
    /* control: the final hidden states (host, f32, (n_logits, hidden)) of the last forward's
     * logit rows, for drafters fed by the target (spec.eagle). */
    weft_status (*hidden)(void *engine, const float **hidden, uint32_t *dim, weft_error *err);
} weft_decode_io;

/* What the engine tells a decoder's pipeline hook about the step it is about to launch, and the
 * device time it measured so far when measure was set (backend events; 0 where unmeasured). */
typedef struct weft_pipeline_step {
    uint32_t size;
    uint32_t n_rows;     /* rows (one per request) of the decode step */
    uint32_t in_flight;  /* 1: the previous step's tokens are still on the device */
    uint32_t measure;    /* out: 1 = record backend events around every step */
    uint64_t steps;      /* steps the engine has run */
    double device_busy_s;/* measured device time inside steps, summed */
    double device_idle_s;/* measured device time between steps (waiting for the host), summed */
} weft_pipeline_step;

typedef struct weft_decoder_vtable {
    uint32_t size;
    /* control: proposes up to max_draft tokens to verify after `last` for a request. */
    weft_status (*draft)(void *st, uint64_t request_id, const int32_t *history, uint32_t n,
                         int32_t *draft, uint32_t max_draft, uint32_t *n_draft, weft_error *err);
    /* control: how many draft tokens the target accepted (for drafters that keep state). */
    void (*accepted)(void *st, uint64_t request_id, uint32_t n_accepted);
    /* (optional) NULL = chain. control: tree parents for the draft rows. */
    weft_status (*tree)(void *st, uint64_t request_id, int32_t *parents, uint32_t n,
                        weft_error *err);
    /* (optional) NULL = the host drives draft and verify. control: runs draft/verify rounds
     * for one request through io itself and returns the accepted tokens (up to max_out), for
     * decoders whose rounds stay on the device or use a drafter (spec.device-rounds,
     * spec.draft-model, spec.eagle). Appended in v1 (docs/ABI.md). */
    weft_status (*rounds)(void *st, const weft_decode_io *io, uint64_t request_id,
                          const int32_t *history, uint32_t n, int32_t *accepted,
                          uint32_t max_out, uint32_t *n_accepted, weft_error *err);
    /* (optional) NULL = every step waits for its tokens. control: asked before the engine
     * launches a plain decode step ahead of the host (every row a decode row of a request whose
     * next token the sampler picks with sample_async; exec.async-pipeline): returns 1 to launch
     * it before the previous step's tokens reach the host, 0 to run it the ordinary way. The
     * plugin may set step->measure to have the engine time device idle time between steps.
     * Appended in v1 (docs/ABI.md). */
    int32_t (*pipeline)(void *st, weft_pipeline_step *step);
} weft_decoder_vtable;


/* Drafter: a second model (spec.draft-model, spec.eagle) run by the decoder. */
typedef struct weft_drafter_vtable {
    uint32_t size;
    weft_status (*load)(void *st, const char *model_dir, const weft_device_service *dev,
                        weft_error *err);
    weft_status (*propose)(void *st, uint64_t request_id, const int32_t *history, uint32_t n,
                           const void *target_hidden, int32_t *draft, uint32_t k,
                           uint32_t *n_out, weft_error *err);
} weft_drafter_vtable;

/* Placement: where each weight lives and when it moves. Default: all on the device. */
typedef struct weft_placement_vtable {
    uint32_t size;
    /* setup: memory tier for a weight tensor (weft_memory). */
    weft_status (*place)(void *st, const weft_graph *g, const weft_tensor *t, uint32_t *memory,
                         weft_error *err);
    /* (optional) step: before node i runs: stream in what it needs (layer streaming). */
    weft_status (*before_node)(void *st, const weft_exec_ctx *ctx, uint32_t node,
                               weft_error *err);
    /* (optional) control: expert routing statistics for caches. */
    void (*observe_experts)(void *st, int32_t layer, const int32_t *experts, uint32_t n);
} weft_placement_vtable;

/* Parallel: more than one device. */
typedef struct weft_parallel_vtable {
    uint32_t size;
    /* setup: world size and this process's rank; sets up communicators. */
    weft_status (*init)(void *st, int32_t *world, int32_t *rank, weft_error *err);
    /* setup: the rank's shard of a weight: byte range and shape along the split axis. */
    weft_status (*shard)(void *st, const weft_tensor *t, int32_t *axis, int64_t *start,
                         int64_t *count, weft_error *err);
    const weft_collective_service *(*collective)(void *st);
} weft_parallel_vtable;

/* Feature: logits processors and output parsers. */
typedef struct weft_feature_vtable {
    uint32_t size;
    /* (optional) control: masks or biases one request's logits (host, f32, vocab). */
    weft_status (*process_logits)(void *st, uint64_t request_id, float *logits, uint32_t vocab,
                                  weft_error *err);
    /* (optional) control: parses finished output text into a JSON string (tool calls). */
    weft_status (*parse_output)(void *st, const char *text, char **json_out, weft_error *err);
} weft_feature_vtable;

/* ---- the descriptor and the entry function ----------------------------------------------- */
typedef enum weft_plugin_kind {
    WEFT_KIND_BACKEND = 1,
    WEFT_KIND_MODEL = 2,
    WEFT_KIND_TECHNIQUE = 3,
    WEFT_KIND_FEATURE = 4,
} weft_plugin_kind;

typedef struct weft_plugin_descriptor {
    uint32_t size;        /* sizeof(weft_plugin_descriptor) of the plugin's header */
    uint32_t abi_version; /* the version negotiated */
    const char *name;     /* must equal the manifest's name */
    const char *version;  /* semver, must equal the manifest's */
    uint32_t kind;        /* weft_plugin_kind */
    uint32_t slots;       /* weft_slot bits; must equal the manifest's slots */
    /* setup: creates the plugin's instance state from validated options. */
    weft_status (*create)(const weft_host_services *host, const weft_options *opts, void **st,
                          weft_error *err);
    /* (optional) NULL = nothing to free. setup. */
    void (*destroy)(void *st);
    /* one vtable per slot named in `slots`, NULL otherwise */
    const weft_backend_vtable *backend;
    const weft_model_vtable *model;
    const weft_scheduler_vtable *scheduler;
    const weft_kv_vtable *kv;
    const weft_pass_vtable *pass;
    const weft_opset_vtable *opset;
    const weft_executor_vtable *executor;
    const weft_sampler_vtable *sampler;
    const weft_decoder_vtable *decoder;
    const weft_drafter_vtable *drafter;
    const weft_placement_vtable *placement;
    const weft_parallel_vtable *parallel;
    const weft_feature_vtable *feature;
    uint64_t reserved[8]; /* must be zero */
} weft_plugin_descriptor;

/* The one exported function. host_min..host_max: the versions the host speaks. The plugin sets
 * *chosen to the highest version it also speaks and *out to its static descriptor, or returns
 * WEFT_ERR_ABI (filling err) when the ranges do not meet, then with *chosen set to the highest
 * version it speaks, so the host can say what it was built for (docs/ABI.md, rule 5). */
typedef weft_status (*weft_plugin_entry_fn)(uint32_t host_min, uint32_t host_max,
                                            uint32_t *chosen, const weft_plugin_descriptor **out,
                                            weft_error *err);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_PLUGIN_H */
